//! A set past its list bound ([`list_max`](super::list_max)): an intrusive treap over the nodes'
//! `child` links and `prio`, walked without recursion where the common path walks it.

use super::{FreeBins, LIST_MAX, NIL};

/// A place a subtree hangs from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Hook {
    Root(usize),
    /// `Child(n, 0)` is node `n`'s left subtree, `Child(n, 1)` its right.
    Child(u32, usize),
}

impl FreeBins {
    #[inline]
    pub(super) fn next_prio(&mut self) -> u32 {
        // xorshift32: priorities only need to be unrelated to the keys.
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        x
    }

    /// Turns list slot `b` into a treap of the same chunks.
    #[cold]
    #[inline(never)]
    pub(super) fn make_tree(&mut self, b: usize) {
        let mut ids = Vec::with_capacity(LIST_MAX as usize);
        self.collect_set(b, &mut ids);
        self.roots[b] = NIL;
        self.trees[b / 64] |= 1 << (b % 64);
        for id in ids {
            let prio = self.next_prio();
            let n = &mut self.nodes[id as usize];
            n.child = [NIL; 2];
            n.prio = prio;
            if self.roots[b] == NIL {
                self.roots[b] = id;
            } else {
                self.insert_at(Hook::Root(b), id);
            }
        }
    }

    /// The first chunk of at least `min_size` bytes in `(size, address)` order under `t`.
    pub(super) fn lower_bound(&self, mut t: u32, min_size: u64) -> u32 {
        let mut best = NIL;
        while t != NIL {
            let n = &self.nodes[t as usize];
            let fits = n.size >= min_size;
            best = if fits { t } else { best };
            t = n.child[usize::from(!fits)];
        }
        best
    }

    pub(super) fn find(
        &self,
        t: u32,
        min_size: u64,
        accept: &mut impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        if t == NIL {
            return None;
        }
        let n = self.nodes[t as usize];
        if n.size < min_size {
            return self.find(n.child[1], min_size, accept);
        }
        if let Some(id) = self.find(n.child[0], min_size, accept) {
            return Some(id);
        }
        if accept(t) {
            return Some(t);
        }
        self.find(n.child[1], min_size, accept)
    }

    pub(super) fn visit(&self, t: u32, pred: &mut impl FnMut(u32) -> bool) -> Option<u32> {
        if t == NIL {
            return None;
        }
        if pred(t) {
            return Some(t);
        }
        let n = &self.nodes[t as usize];
        let [l, r] = n.child;
        self.visit(l, pred).or_else(|| self.visit(r, pred))
    }

    pub(super) fn collect(&self, t: u32, out: &mut Vec<u32>) {
        if t != NIL {
            let n = self.nodes[t as usize];
            self.collect(n.child[0], out);
            out.push(t);
            self.collect(n.child[1], out);
        }
    }

    /// Where a subtree hangs: a bin's root, or a node's left or right child.
    #[inline]
    pub(super) fn get(&self, hook: Hook) -> u32 {
        match hook {
            Hook::Root(b) => self.roots[b],
            Hook::Child(n, d) => self.nodes[n as usize].child[d],
        }
    }

    #[inline]
    pub(super) fn set(&mut self, hook: Hook, v: u32) {
        match hook {
            Hook::Root(b) => self.roots[b] = v,
            Hook::Child(n, d) => self.nodes[n as usize].child[d] = v,
        }
    }

    /// Treap insertion of `id` (its node filled in) under `hook`, without recursion: descend
    /// to the first node of lower priority, then split that subtree around the new key.
    pub(super) fn insert_at(&mut self, mut hook: Hook, id: u32) {
        let (key, prio) = (self.key128(id), self.nodes[id as usize].prio);
        let mut t = self.get(hook);
        while t != NIL && self.nodes[t as usize].prio >= prio {
            hook = Hook::Child(t, usize::from(key > self.key128(t)));
            t = self.get(hook);
        }
        // Split subtree `t`: keys below `key` go left of `id`, the rest right of it. `hooks[0]`
        // is where the next smaller subtree hangs, `hooks[1]` the next larger one.
        let mut hooks = [Hook::Child(id, 0), Hook::Child(id, 1)];
        while t != NIL {
            let larger = usize::from(self.key128(t) > key);
            // A smaller node hangs on the left hook and passes it its right subtree; a larger
            // one the other way round.
            self.set(hooks[larger], t);
            hooks[larger] = Hook::Child(t, 1 - larger);
            t = self.nodes[t as usize].child[1 - larger];
        }
        self.set(hooks[0], NIL);
        self.set(hooks[1], NIL);
        self.set(hook, id);
    }

    /// Treap removal of `id` from the tree under `hook`, without recursion: find it, then
    /// merge its two subtrees into its place.
    pub(super) fn remove_at(&mut self, mut hook: Hook, id: u32) {
        let key = self.key128(id);
        loop {
            let t = self.get(hook);
            debug_assert!(t != NIL, "chunk {id} not found in its bin");
            if t == NIL || t == id {
                break;
            }
            hook = Hook::Child(t, usize::from(key > self.key128(t)));
        }
        let [mut a, mut b] = self.nodes[id as usize].child;
        loop {
            if a == NIL {
                self.set(hook, b);
                return;
            }
            if b == NIL {
                self.set(hook, a);
                return;
            }
            if self.nodes[a as usize].prio > self.nodes[b as usize].prio {
                self.set(hook, a);
                hook = Hook::Child(a, 1);
                a = self.nodes[a as usize].child[1];
            } else {
                self.set(hook, b);
                hook = Hook::Child(b, 0);
                b = self.nodes[b as usize].child[0];
            }
        }
    }
}
