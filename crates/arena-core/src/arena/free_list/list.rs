//! A short set of free chunks ([`list_max`]): a list in `(size, address)` order, through the
//! nodes' `child` links (the previous chunk, the head's being the tail, and the next), the
//! head's `prio` holding the length. Removing costs a few stores; inserting, a short walk.

use super::{list_max, FreeBins, NIL};

impl FreeBins {
    /// Puts chunk `id` (its node filled in, in no set) in list slot `b`, which is not empty,
    /// in `(size, address)` order.
    #[inline(always)]
    pub(super) fn insert_in_list(&mut self, b: usize, id: u32) {
        let key = self.key128(id);
        let head = self.roots[b];
        let (len, tail) = {
            let h = &self.nodes[head as usize];
            (h.prio, if h.child[0] == NIL { head } else { h.child[0] })
        };
        if key < self.key128(head) {
            self.nodes[id as usize].child = [tail, head];
            self.nodes[id as usize].prio = len + 1;
            self.nodes[head as usize].child[0] = id;
            self.roots[b] = id;
            return;
        }
        self.nodes[head as usize].prio = len + 1;
        // Past the tail (frees in address order), no walk.
        let (mut prev, mut next) = if key > self.key128(tail) {
            (tail, NIL)
        } else {
            (head, self.nodes[head as usize].child[1])
        };
        while next != NIL && self.key128(next) < key {
            prev = next;
            next = self.nodes[next as usize].child[1];
        }
        self.nodes[id as usize].child = [prev, next];
        self.nodes[prev as usize].child[1] = id;
        // The chunk after the new one links back to it; at the end, the head does.
        let back = if next == NIL { head } else { next };
        self.nodes[back as usize].child[0] = id;
    }

    /// Takes chunk `id` out of list slot `b`, which holds at least one other chunk.
    #[inline(always)]
    pub(super) fn remove_from_list(&mut self, b: usize, id: u32) {
        let head = self.roots[b];
        let [prev, next] = self.nodes[id as usize].child;
        let len = self.nodes[head as usize].prio - 1;
        if id == head {
            // `prev` is the tail; the next chunk becomes the head.
            self.roots[b] = next;
            let n = &mut self.nodes[next as usize];
            n.child[0] = if prev == next { NIL } else { prev };
            n.prio = len;
        } else {
            self.nodes[head as usize].prio = len;
            self.nodes[prev as usize].child[1] = next;
            // The chunk after links back to the one before; for the tail, the head does.
            let (back, to) = match next {
                NIL if prev == head => (head, NIL),
                NIL => (head, prev),
                n => (n, prev),
            };
            self.nodes[back as usize].child[0] = to;
        }
    }

    /// The first chunk of at least `min_size` bytes that `accept` takes in list `t`.
    pub(super) fn find_in_list(
        &self,
        mut t: u32,
        min_size: u64,
        accept: &mut impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        while t != NIL {
            let n = &self.nodes[t as usize];
            if n.size >= min_size && accept(t) {
                return Some(t);
            }
            t = n.child[1];
        }
        None
    }

    /// Checks list slot `s`, whose ids in order are `ids`: the head's length, the links both
    /// ways, and the end.
    pub(super) fn check_list(&self, s: usize, ids: &[u32]) -> Result<(), String> {
        let Some((&head, _)) = ids.split_first() else {
            return Ok(());
        };
        let len = self.nodes[head as usize].prio;
        if len as usize != ids.len() || len > list_max(s) {
            return Err(format!(
                "list {s} holds {} chunks but its head says {len}",
                ids.len()
            ));
        }
        let last = ids[ids.len() - 1];
        if self.nodes[last as usize].child[1] != NIL {
            return Err(format!("list {s} goes on past {} chunks", list_max(s)));
        }
        for (i, &id) in ids.iter().enumerate() {
            let back = match i {
                0 if ids.len() > 1 => last,
                0 => NIL,
                _ => ids[i - 1],
            };
            if self.nodes[id as usize].child[0] != back {
                return Err(format!("chunk {id}'s back link in list {s} is wrong"));
            }
        }
        Ok(())
    }
}
