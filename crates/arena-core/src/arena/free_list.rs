//! The free chunks, by bin: one ordered set per bin, keyed by `(size, address)`, so the
//! first chunk at or above a size in a bin is the best fit with the lowest-address
//! tie-break that ONNX Runtime's `std::set` bins give.
//!
//! Chunks come in [`CLASSES`] classes, each with bins of its own: the virtual-memory mode's
//! pools (a request searches only its pool's bins, instead of walking past the other pool's
//! chunks of the same sizes); the region mode uses class 0 alone. A chunk keeps its class
//! until it leaves the bins.
//!
//! Each set is intrusive over chunk ids: the nodes live in one vector indexed by id, so
//! inserting and removing never allocate once the vector has grown, and a bin with one chunk
//! costs a root store. A set of at most 64 chunks of one size, or 16 of several
//! (`LIST_MAX`, `MIXED_LIST_MAX`), is a list in key order, whose removals cost a few stores
//! and whose insertions a short walk; a set that would grow past that becomes a treap until
//! it is empty again. Both keep the one order, so which form a set has changes no answer
//! (the virtual-memory mode, which cuts every chunk to size, spent a sixth of its
//! instructions on the thread benchmark in treap descents, most in sets of a few chunks).
//!
//! Inside, each of ONNX Runtime's power-of-two bins is 64 sets of a 64th of its size
//! range (and the last, unbounded bin 64 sets per power of two up to 2^48 bytes):
//! the sets are ordered by size as the bins are, so the best fit is the same chunk, while
//! each tree is small, and a walk down it touches few nodes, each a likely cache miss (the
//! virtual-memory mode, which cuts every chunk to size, keeps several times as many free
//! chunks as the region mode: on the `mixed` trace its treap walks missed the cache four to
//! five times as often with one set per bin). A bitmap of non-empty sets, a word per 64,
//! finds the next candidate set.

mod list;
mod treap;

use crate::arena::bins::NUM_BINS;
use treap::Hook;

/// "No chunk".
pub const NIL: u32 = u32::MAX;

/// Number of classes of chunks, each with its own bins.
pub const CLASSES: usize = 2;

/// log2 of the sets per power of two of size. Finer sets move a chunk cut or merged to
/// another set more often, but find that set empty (a root store) more often too: on the C
/// ABI's `mixed` pairs (callgrind, one warm pass), 32 / 64 / 128 sets per power of two ran
/// in 119.8 / 116.9 / 115.7 M instructions, 16 in 123.8 M; 64 keeps the roots at 20 KiB.
const SUB_BITS: usize = 6;

/// Sets per power of two.
const SUB: usize = 1 << SUB_BITS;

/// Powers of two with sets of their own (sizes from 256 bytes; larger sizes share the last
/// set).
const POWERS: usize = 40;

/// Sets per class.
const SETS: usize = POWERS * SUB;

/// Words of the non-empty bitmap per class.
const WORDS: usize = SETS / 64;
const _: () = assert!(SETS.is_multiple_of(64), "a whole bitmap word per 64 sets");

/// Roots of the sets of every class: class `k`'s set `f` is slot `k * SETS + f`.
const SLOTS: usize = CLASSES * SETS;
const _: () = assert!(SLOTS <= 1 << 16, "a node keeps its slot in 16 bits");

/// The most chunks a set of one size holds as a list (sets under [`EXACT_SETS`]); one more
/// makes it a treap. Chunks of one size differ only by address, and frees that come in
/// address order (or its reverse) are put at the tail (or the head) without a walk. Through
/// the C ABI on the GPU benchmark's `small` trace, whose sets hold hundreds of chunks of a
/// size, a bound of 16 / 32 / 64 / 128 for every set ran 1.16 / 1.10 / 1.04 / 0.98x
/// b0e0844's default in pairs on the development machine (docs/benchmarks.md, "Sixth
/// session"); past 64, the walks grow with the bound.
const LIST_MAX: u32 = 64;

/// The most chunks a set of several sizes holds as a list: the walk to the lower bound of a
/// request is as long as the list. (As the bound for every set, 16 and 32 ran the thread
/// benchmark's passes in the same instructions and time, 8 in 4 % more instructions; on the
/// C ABI's `mixed` pairs 8, 16 and 32 measured alike.)
const MIXED_LIST_MAX: u32 = 16;

/// Sets below this hold chunks of one size each when sizes are multiples of 256 (a 64th of a
/// power of two is at most 256 bytes below 32 KiB).
const EXACT_SETS: usize = (SUB_BITS + 1) * SUB;

/// The most chunks root slot `s` holds as a list.
#[inline(always)]
fn list_max(s: usize) -> u32 {
    if s % SETS < EXACT_SETS {
        LIST_MAX
    } else {
        MIXED_LIST_MAX
    }
}

/// The set of a chunk of `size` bytes within its class: a 64th of the power of two of
/// `max(size, 256) / 256`, so that sets ascend with size and set `f` lies within bin
/// `min(f / 64, 20)`.
#[inline(always)]
fn set_for_size(size: u64) -> usize {
    let v = (size >> crate::arena::bins::MIN_ALLOCATION_BITS).max(1);
    let log2 = 63 - v.leading_zeros() as usize;
    // The SUB_BITS bits below the leading one (zeros shifted in for small v); v < 2^56, so
    // shifting left first loses nothing and needs no branch.
    let sub = ((v << SUB_BITS) >> log2) as usize & (SUB - 1);
    (log2 * SUB + sub).min(SETS - 1)
}

/// The sets that make up bin `b`.
fn sets_of_bin(b: usize) -> std::ops::Range<usize> {
    if b + 1 < NUM_BINS {
        b * SUB..(b + 1) * SUB
    } else {
        b * SUB..SETS
    }
}

/// The class of a chunk (classes past the last are the last).
#[inline(always)]
fn class_index(class: u8) -> usize {
    (class as usize).min(CLASSES - 1)
}

/// The slot of a chunk of `size` bytes of class `class`.
#[inline(always)]
fn slot(class: u8, size: u64) -> usize {
    class_index(class) * SETS + set_for_size(size)
}

/// Aligned to half a cache line, which it fills: a node never straddles two lines.
#[derive(Debug, Clone, Copy)]
#[repr(align(32))]
struct Node {
    size: u64,
    addr: u64,
    /// Left and right subtrees: `child[1]` holds the larger keys, so a descent indexes it
    /// with the comparison instead of branching on it. In a list, the previous chunk (the
    /// head's is the tail, `NIL` when it is alone) and the next.
    child: [u32; 2],
    /// Heap priority: a parent's is at least its children's. In a list, the head's is the
    /// list's length.
    prio: u32,
    /// Whether this id is currently in a bin.
    linked: bool,
    /// Its class.
    class: u8,
    /// Its root slot while linked ([`slot`] of its class and size), kept so that a removal
    /// or a move need not work it out again.
    slot: u16,
}

const _: () = assert!(
    std::mem::size_of::<Node>() == 32,
    "a node is half a cache line"
);

const EMPTY_NODE: Node = Node {
    size: 0,
    addr: 0,
    child: [NIL; 2],
    prio: 0,
    linked: false,
    class: 0,
    slot: 0,
};

/// Free chunks indexed by bin; see the module docs.
#[derive(Debug, Clone)]
pub struct FreeBins {
    nodes: Vec<Node>,
    roots: [u32; SLOTS],
    /// Bit `s` set iff root slot `s` is not `NIL`: class `k`'s words are
    /// `k * WORDS..(k + 1) * WORDS` (a class has whole words), so a slot's word is `s / 64`,
    /// with no division by the sets per class on the hot path.
    non_empty: [u64; CLASSES * WORDS],
    /// Bit `s` set iff root slot `s` is a treap (laid out as `non_empty`); clear for a list
    /// and for every empty set.
    trees: [u64; CLASSES * WORDS],
    len: usize,
    rng: u32,
}

impl Default for FreeBins {
    fn default() -> Self {
        Self::new()
    }
}

impl FreeBins {
    /// An empty set of bins.
    pub fn new() -> Self {
        FreeBins {
            nodes: Vec::new(),
            roots: [NIL; SLOTS],
            non_empty: [0; CLASSES * WORDS],
            trees: [0; CLASSES * WORDS],
            len: 0,
            rng: 0x9E37_79B9,
        }
    }

    /// Number of free chunks held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no chunk is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether chunk `id` is in a bin.
    pub fn contains(&self, id: u32) -> bool {
        self.nodes.get(id as usize).is_some_and(|n| n.linked)
    }

    #[inline]
    fn key(&self, id: u32) -> (u64, u64) {
        let n = &self.nodes[id as usize];
        (n.size, n.addr)
    }

    /// `(size, address)` as one number, ordered as the pair is: one comparison, which the
    /// descents turn into an index rather than a branch.
    #[inline(always)]
    fn key128(&self, id: u32) -> u128 {
        let n = &self.nodes[id as usize];
        (u128::from(n.size) << 64) | u128::from(n.addr)
    }

    #[inline(always)]
    fn mark(&mut self, s: usize) {
        self.non_empty[s / 64] |= 1 << (s % 64);
    }

    /// Slot `s` is empty now: no longer marked, and a list again.
    #[inline(always)]
    fn unmark(&mut self, s: usize) {
        self.non_empty[s / 64] &= !(1 << (s % 64));
        self.trees[s / 64] &= !(1 << (s % 64));
    }

    /// Whether root slot `s` is a treap rather than a list.
    #[inline(always)]
    fn is_tree(&self, s: usize) -> bool {
        self.trees[s / 64] & (1 << (s % 64)) != 0
    }

    /// Adds chunk `id` of `size` bytes at `addr` to its bin of class 0. `id` must not be in
    /// a bin.
    #[inline]
    pub fn insert(&mut self, id: u32, size: u64, addr: u64) {
        self.insert_class(id, size, addr, 0);
    }

    /// Adds chunk `id` of `size` bytes at `addr` to its bin of class `class`. `id` must not
    /// be in a bin.
    #[inline]
    pub fn insert_class(&mut self, id: u32, size: u64, addr: u64, class: u8) {
        let i = id as usize;
        if i >= self.nodes.len() {
            self.nodes.resize(i + 1, EMPTY_NODE);
        }
        debug_assert!(!self.nodes[i].linked, "chunk {id} is already in a bin");
        let b = slot(class, size);
        let root = self.roots[b];
        self.nodes[i] = Node {
            size,
            addr,
            child: [NIL; 2],
            // An empty set becomes a list of one.
            prio: 1,
            linked: true,
            class: (class as usize).min(CLASSES - 1) as u8,
            slot: b as u16,
        };
        if root == NIL {
            self.roots[b] = id;
            self.mark(b);
        } else {
            if !self.is_tree(b) && self.nodes[root as usize].prio >= list_max(b) {
                self.make_tree(b);
            }
            if self.is_tree(b) {
                self.nodes[i].prio = self.next_prio();
                self.insert_at(Hook::Root(b), id);
            } else {
                self.insert_in_list(b, id);
            }
        }
        self.len += 1;
    }

    /// Removes chunk `id` from its bin. Returns false if it was not in one.
    #[inline(always)]
    pub fn remove(&mut self, id: u32) -> bool {
        if !self.contains(id) {
            return false;
        }
        let n = self.nodes[id as usize];
        let b = usize::from(n.slot);
        if self.roots[b] == id && n.child == [NIL; 2] {
            self.roots[b] = NIL;
        } else if self.is_tree(b) {
            self.remove_from_tree(b, id);
        } else {
            self.remove_from_list(b, id);
        }
        if self.roots[b] == NIL {
            self.unmark(b);
        }
        self.nodes[id as usize].linked = false;
        self.len -= 1;
        true
    }

    /// Changes the key of chunk `id`, which is in a bin. A chunk alone in its bin that stays
    /// in that bin, or moves to an empty one, is updated in place (the common case of one
    /// large free chunk being cut and restored); otherwise it is moved.
    #[inline(always)]
    pub fn rekey(&mut self, id: u32, size: u64, addr: u64) {
        let n = self.nodes[id as usize];
        debug_assert!(n.linked, "chunk {id} is not in a bin");
        let (from, to) = (usize::from(n.slot), slot(n.class, size));
        if self.roots[from] == id && n.child == [NIL; 2] && (from == to || self.roots[to] == NIL) {
            self.roots[from] = NIL;
            self.unmark(from);
            self.roots[to] = id;
            self.mark(to);
            let n = &mut self.nodes[id as usize];
            n.size = size;
            n.addr = addr;
            n.slot = to as u16;
            // A list of one, whatever `from` was.
            n.prio = 1;
        } else {
            self.move_chunk(id, size, addr);
        }
    }

    /// Puts chunk `new` (not in a bin) in place of chunk `old` (in a bin), with a new key and
    /// `old`'s class: what a split or merge does when one chunk takes over another's free
    /// space. Done in place under the same conditions as [`FreeBins::rekey`].
    #[inline(always)]
    pub fn replace(&mut self, old: u32, new: u32, size: u64, addr: u64) {
        let n = self.nodes[old as usize];
        debug_assert!(n.linked, "chunk {old} is not in a bin");
        let (from, to) = (usize::from(n.slot), slot(n.class, size));
        let i = new as usize;
        if i < self.nodes.len()
            && self.roots[from] == old
            && n.child == [NIL; 2]
            && (from == to || self.roots[to] == NIL)
        {
            debug_assert!(!self.nodes[i].linked, "chunk {new} is already in a bin");
            self.roots[from] = NIL;
            self.unmark(from);
            self.roots[to] = new;
            self.mark(to);
            self.nodes[old as usize].linked = false;
            self.nodes[i] = Node {
                size,
                addr,
                linked: true,
                prio: 1,
                slot: to as u16,
                ..n
            };
        } else {
            self.replace_slow(old, new, size, addr);
        }
    }

    /// The treap case of [`FreeBins::remove`], out of line.
    #[inline(never)]
    fn remove_from_tree(&mut self, b: usize, id: u32) {
        self.remove_at(Hook::Root(b), id);
    }

    #[cold]
    #[inline(never)]
    fn replace_slow(&mut self, old: u32, new: u32, size: u64, addr: u64) {
        let class = self.nodes[old as usize].class;
        self.remove(old);
        self.insert_class(new, size, addr, class);
    }

    /// `rekey`'s general case, out of line so the fast path stays small.
    #[cold]
    #[inline(never)]
    fn move_chunk(&mut self, id: u32, size: u64, addr: u64) {
        let class = self.nodes[id as usize].class;
        self.remove(id);
        self.insert_class(id, size, addr, class);
    }

    /// The smallest free chunk of class 0 of at least `min_size` bytes that `accept` takes,
    /// ties broken by lowest address: bins in ascending order, each in `(size, address)`
    /// order.
    #[inline(always)]
    pub fn best_fit(&self, min_size: u64, accept: impl FnMut(u32) -> bool) -> Option<u32> {
        self.best_fit_class(0, min_size, accept)
    }

    /// As [`FreeBins::best_fit`], among the chunks of class `class`.
    #[inline(always)]
    pub fn best_fit_class(
        &self,
        class: u8,
        min_size: u64,
        mut accept: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        let k = class_index(class);
        let first = self.next_set(k, set_for_size(min_size))?;
        // A lone chunk in the first candidate set (the common warm state) needs no descent.
        let b = k * SETS + first;
        let root = self.roots[b];
        let n = &self.nodes[root as usize];
        // A lone chunk, or a list's head (its smallest), that fits is the best fit.
        if (n.child == [NIL; 2] || !self.is_tree(b)) && n.size >= min_size && accept(root) {
            return Some(root);
        }
        self.best_fit_in(k, first, min_size, accept)
    }

    /// The first non-empty set of class `k` at or after set `f` (`None` past the last set).
    #[inline(always)]
    fn next_set(&self, k: usize, f: usize) -> Option<usize> {
        let words = &self.non_empty[k * WORDS..(k + 1) * WORDS];
        let mut w = f / 64;
        let mut bits = words.get(w)? & (!0u64 << (f % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            bits = *words.get(w)?;
        }
    }

    /// As [`FreeBins::best_fit`], among the chunks of every class: the smallest of each
    /// class's best fit.
    pub fn best_fit_any(&self, min_size: u64, mut accept: impl FnMut(u32) -> bool) -> Option<u32> {
        (0..CLASSES as u8)
            .filter_map(|class| self.best_fit_class(class, min_size, &mut accept))
            .min_by_key(|&id| self.key(id))
    }

    #[inline(never)]
    fn best_fit_in(
        &self,
        k: usize,
        first: usize,
        min_size: u64,
        mut accept: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        let mut next = Some(first);
        while let Some(f) = next {
            let b = k * SETS + f;
            if !self.is_tree(b) {
                if let Some(id) = self.find_in_list(self.roots[b], min_size, &mut accept) {
                    return Some(id);
                }
                next = self.next_set(k, f + 1);
                continue;
            }
            // Usually the smallest adequate chunk is acceptable: find it without recursion,
            // and search the whole bin in order only when it is not.
            let lower = self.lower_bound(self.roots[b], min_size);
            if lower != NIL && accept(lower) {
                return Some(lower);
            }
            if let Some(id) = self.find(self.roots[b], min_size, &mut accept) {
                return Some(id);
            }
            next = self.next_set(k, f + 1);
        }
        None
    }

    /// Ids in bin `b` of every class: class by class, each in `(size, address)` order.
    pub fn bin_ids(&self, b: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let sets = sets_of_bin(b);
        for k in 0..CLASSES {
            // Only the non-empty sets: the unmap scans ask for the bins of a page and up on
            // every mapping, most of whose sets are empty.
            let mut next = self.next_set(k, sets.start);
            while let Some(f) = next.filter(|&f| f < sets.end) {
                self.collect_set(k * SETS + f, &mut out);
                next = self.next_set(k, f + 1);
            }
        }
        out
    }

    /// The first chunk, in no promised order, for which `pred` is true; visits only
    /// non-empty sets and allocates nothing.
    pub fn find_any(&self, mut pred: impl FnMut(u32) -> bool) -> Option<u32> {
        for k in 0..CLASSES {
            let mut next = self.next_set(k, 0);
            while let Some(f) = next {
                let s = k * SETS + f;
                let found = if self.is_tree(s) {
                    self.visit(self.roots[s], &mut pred)
                } else {
                    self.find_in_list(self.roots[s], 0, &mut pred)
                };
                if let Some(id) = found {
                    return Some(id);
                }
                next = self.next_set(k, f + 1);
            }
        }
        None
    }

    /// The class of chunk `id`, which is in a bin.
    #[cfg(test)]
    fn class_of(&self, id: u32) -> u8 {
        self.nodes[id as usize].class
    }

    /// The ids of root slot `s` in order.
    fn collect_set(&self, s: usize, out: &mut Vec<u32>) {
        if self.is_tree(s) {
            self.collect(self.roots[s], out);
            return;
        }
        let mut t = self.roots[s];
        // Bounded, so that a broken list (`check` reports it) cannot loop forever.
        for _ in 0..=LIST_MAX {
            if t == NIL {
                break;
            }
            out.push(t);
            t = self.nodes[t as usize].child[1];
        }
    }

    /// Checks the structure: order and heap property in every bin, every chunk in the bin
    /// its size names, the bitmap and the count. Returns a description of the first fault.
    pub fn check(&self) -> Result<(), String> {
        let mut total = 0;
        for s in 0..SLOTS {
            let (class, f) = ((s / SETS) as u8, s % SETS);
            let mut ids = Vec::new();
            self.collect_set(s, &mut ids);
            if ids.is_empty() != (self.non_empty[s / 64] & (1 << (s % 64)) == 0) {
                return Err(format!("bitmap bit {s} disagrees with the bin"));
            }
            if ids.is_empty() && self.is_tree(s) {
                return Err(format!("empty set {s} is marked a treap"));
            }
            if !self.is_tree(s) {
                self.check_list(s, &ids)?;
            }
            for w in ids.windows(2) {
                if self.key(w[0]) >= self.key(w[1]) {
                    return Err(format!(
                        "set {f} out of order at chunks {} and {}",
                        w[0], w[1]
                    ));
                }
            }
            for &id in &ids {
                let n = self.nodes[id as usize];
                if !n.linked
                    || set_for_size(n.size) != f
                    || n.class != class
                    || usize::from(n.slot) != s
                {
                    return Err(format!(
                        "chunk {id} of {} bytes, class {}, is in set {f} of class {class}",
                        n.size, n.class
                    ));
                }
                for child in n.child {
                    if self.is_tree(s) && child != NIL && self.nodes[child as usize].prio > n.prio {
                        return Err(format!("heap order broken under chunk {id}"));
                    }
                }
            }
            total += ids.len();
        }
        if total != self.len {
            return Err(format!("{total} chunks in bins but len is {}", self.len));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
