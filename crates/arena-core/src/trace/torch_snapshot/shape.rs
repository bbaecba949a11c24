//! A walk over a pickle's opcodes before `serde-pickle` decodes it, so that a file it would
//! choke on is refused with a clear message instead (issue 13).
//!
//! `serde-pickle` builds the whole pickle in memory and then walks it recursively. That is
//! fine for what PyTorch writes, but a crafted file could make it recurse past the stack (a
//! list nested a million deep: an abort, in the parse or when the value is dropped), allocate
//! a 5 KiB stack per open MARK, clone a memoized value once per byte, or put a huge value in
//! an error message. This walk simulates the pickle machine's stack, keeping per value only
//! its kind and nesting depth, and accepts only what a snapshot is made of: the opcodes
//! PyTorch's own snapshot viewer (`MemoryViz.js`) reads (protocols 2 to 5: dicts, lists,
//! tuples, strings, integers up to 64 bits, floats, booleans and None, with the memo), at most
//! [`MAX_NESTING`] deep, each memoized value memoized once and changed only before anything
//! refers to it again. Memory: 12 bytes per value on the stack and per memo entry.

use std::collections::HashMap;

/// The deepest a snapshot's values may nest, and the most MARKs open at once. A snapshot
/// nests 8 deep (`segments` → segment → `blocks` → block → `frames` → frame → value).
pub const MAX_NESTING: u32 = 32;

// The pickle opcodes a snapshot uses (CPython's `pickletools` names).
const MARK: u8 = b'(';
const STOP: u8 = b'.';
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const NONE: u8 = b'N';
const BINUNICODE: u8 = b'X';
const BINFLOAT: u8 = b'G';
const APPEND: u8 = b'a';
const APPENDS: u8 = b'e';
const DICT: u8 = b'd';
const EMPTY_DICT: u8 = b'}';
const LIST: u8 = b'l';
const EMPTY_LIST: u8 = b']';
const TUPLE: u8 = b't';
const EMPTY_TUPLE: u8 = b')';
const SETITEM: u8 = b's';
const SETITEMS: u8 = b'u';
const BINGET: u8 = b'h';
const LONG_BINGET: u8 = b'j';
const BINPUT: u8 = b'q';
const LONG_BINPUT: u8 = b'r';
const PROTO: u8 = 0x80;
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const TUPLE3: u8 = 0x87;
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const LONG1: u8 = 0x8a;
const LONG4: u8 = 0x8b;
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE8: u8 = 0x8d;
const MEMOIZE: u8 = 0x94;
const FRAME: u8 = 0x95;

/// What a value on the simulated stack is, as far as the checks need to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    List,
    Dict,
    /// A tuple or a scalar: nothing is ever added to it.
    Fixed,
}

/// A memoized value: its kind and depth, and whether a GET has referred to it (after which
/// it must not change, so that every reference sees the value the walk measured).
#[derive(Debug, Clone, Copy)]
struct Memoized {
    kind: Kind,
    depth: u32,
    referenced: bool,
}

/// A value on the simulated stack. `serde-pickle` replaces a memoized value on its stack by a
/// reference to the memo, so appending to it changes the memo entry.
#[derive(Debug, Clone, Copy)]
struct Item {
    kind: Kind,
    /// How deep the value nests where it sits: 1 for a scalar, an empty container or a
    /// reference to the memo.
    depth: u32,
    memo: Option<u32>,
}

const SCALAR: Item = Item {
    kind: Kind::Fixed,
    depth: 1,
    memo: None,
};

struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
    stack: Vec<Item>,
    marks: Vec<usize>,
    memo: HashMap<u32, Memoized>,
}

/// Checks that `bytes` is one pickle of plain data that `serde-pickle` can decode within the
/// limits above. The error says what is wrong and at which byte (0-based).
pub fn check(bytes: &[u8]) -> Result<(), String> {
    let mut w = Walk {
        bytes,
        at: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    };
    w.run()
}

impl Walk<'_> {
    fn run(&mut self) -> Result<(), String> {
        loop {
            let at = self.at;
            let op = self.take(1).map_err(|_| {
                format!("byte {at}: the file ends before the pickle's end (STOP); is it cut short?")
            })?[0];
            self.step(op).map_err(|e| format!("byte {at}: {e}"))?;
            if op == STOP {
                if self.at < self.bytes.len() {
                    return Err(format!(
                        "byte {}: {} more bytes after the end of the pickle",
                        self.at,
                        self.bytes.len() - self.at
                    ));
                }
                return Ok(());
            }
        }
    }

    /// The next `n` bytes.
    fn take(&mut self, n: u64) -> Result<&[u8], String> {
        let left = (self.bytes.len() - self.at) as u64;
        if n > left {
            return Err(format!(
                "the file ends inside the opcode's argument ({n} bytes wanted, {left} left); \
                 is it cut short?"
            ));
        }
        // `n <= left`, which is a `usize`.
        let n = n as usize;
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn le(&mut self, n: u64) -> Result<u64, String> {
        let b = self.take(n)?;
        Ok(b.iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
    }

    fn push(&mut self, item: Item) {
        self.stack.push(item);
    }

    /// Where the values since the last open MARK start: an opcode sees only those, as in
    /// `serde-pickle`, which starts a new stack at each MARK.
    fn base(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    /// How many values an opcode can see.
    fn visible(&self) -> usize {
        self.stack.len() - self.base()
    }

    fn pop(&mut self) -> Result<Item, String> {
        if self.visible() == 0 {
            return Err("an opcode wants a value and the stack is empty".into());
        }
        self.stack
            .pop()
            .ok_or_else(|| "an opcode wants a value and the stack is empty".to_string())
    }

    /// The value on top of the stack, if an opcode can see one.
    fn top(&mut self) -> Option<&mut Item> {
        if self.visible() == 0 {
            return None;
        }
        self.stack.last_mut()
    }

    /// The values since the last MARK, which is closed.
    fn pop_mark(&mut self) -> Result<Vec<Item>, String> {
        let from = self
            .marks
            .pop()
            .ok_or_else(|| "an opcode wants a MARK and none is open".to_string())?;
        Ok(self.stack.split_off(from))
    }

    /// A new container of `kind` holding `items`.
    fn container(kind: Kind, items: &[Item]) -> Result<Item, String> {
        let depth = 1 + items.iter().map(|i| i.depth).max().unwrap_or(0);
        if depth > MAX_NESTING {
            return Err(format!("values nest deeper than {MAX_NESTING}"));
        }
        Ok(Item {
            kind,
            depth,
            memo: None,
        })
    }

    /// Adds `items` to the list or dict on top of the stack.
    fn add_to_top(&mut self, kind: Kind, items: &[Item]) -> Result<(), String> {
        let name = if kind == Kind::List { "list" } else { "dict" };
        let grows = 1 + items.iter().map(|i| i.depth).max().unwrap_or(0);
        if grows > MAX_NESTING {
            return Err(format!("values nest deeper than {MAX_NESTING}"));
        }
        let memo = &mut self.memo;
        let top = match self.stack.len() > self.marks.last().copied().unwrap_or(0) {
            true => self.stack.last_mut(),
            false => None,
        }
        .ok_or_else(|| format!("adds to a {name} and the stack is empty"))?;
        match top.memo {
            Some(id) => {
                let m = memo
                    .get_mut(&id)
                    .ok_or_else(|| format!("memo {id} is missing"))?;
                if m.kind != kind {
                    return Err(format!("adds to a {name} what is not one"));
                }
                if m.referenced {
                    return Err(format!("changes memo {id} after it was referred to"));
                }
                m.depth = m.depth.max(grows);
            }
            None => {
                if top.kind != kind {
                    return Err(format!("adds to a {name} what is not one"));
                }
                top.depth = top.depth.max(grows);
            }
        }
        Ok(())
    }

    fn memoize(&mut self, id: u32) -> Result<(), String> {
        let top = *self
            .top()
            .ok_or_else(|| "memoizes with the stack empty".to_string())?;
        if top.memo.is_some() {
            return Err("memoizes a value that is already in the memo".into());
        }
        self.memo.insert(
            id,
            Memoized {
                kind: top.kind,
                depth: top.depth,
                referenced: false,
            },
        );
        if let Some(t) = self.stack.last_mut() {
            *t = Item {
                kind: top.kind,
                depth: 1,
                memo: Some(id),
            };
        }
        Ok(())
    }

    fn get(&mut self, id: u32) -> Result<(), String> {
        let m = self
            .memo
            .get_mut(&id)
            .ok_or_else(|| format!("refers to memo {id}, which was never stored"))?;
        m.referenced = true;
        let kind = m.kind;
        self.push(Item {
            kind,
            depth: 1,
            memo: Some(id),
        });
        Ok(())
    }

    fn step(&mut self, op: u8) -> Result<(), String> {
        match op {
            PROTO => {
                let v = self.take(1)?[0];
                if !(2..=5).contains(&v) {
                    return Err(format!(
                        "pickle protocol {v}; PyTorch writes protocols 2 to 5"
                    ));
                }
            }
            FRAME => {
                self.take(8)?;
            }
            STOP => {
                self.pop()?;
            }
            MARK => {
                if self.marks.len() >= MAX_NESTING as usize {
                    return Err(format!("more than {MAX_NESTING} MARKs open at once"));
                }
                self.marks.push(self.stack.len());
            }
            NONE | NEWTRUE | NEWFALSE => self.push(SCALAR),
            BININT1 => self.scalar_arg(1)?,
            BININT2 => self.scalar_arg(2)?,
            BININT => self.scalar_arg(4)?,
            BINFLOAT => self.scalar_arg(8)?,
            LONG1 | LONG4 => {
                let n = if op == LONG1 {
                    self.le(1)?
                } else {
                    self.le(4)?
                };
                // Two's complement: a 64-bit value needs at most 9 bytes (a u64 ≥ 2^63 has a
                // zero sign byte), but `serde-pickle` hands out only what fits an i64.
                if n > 8 {
                    return Err(format!(
                        "an integer of {n} bytes; a snapshot's integers fit in 64 bits"
                    ));
                }
                self.scalar_arg(n)?;
            }
            SHORT_BINUNICODE => {
                let n = self.le(1)?;
                self.string(n)?;
            }
            BINUNICODE => {
                let n = self.le(4)?;
                self.string(n)?;
            }
            BINUNICODE8 => {
                let n = self.le(8)?;
                self.string(n)?;
            }
            EMPTY_LIST => self.push(Item {
                kind: Kind::List,
                ..SCALAR
            }),
            EMPTY_DICT => self.push(Item {
                kind: Kind::Dict,
                ..SCALAR
            }),
            EMPTY_TUPLE => self.push(SCALAR),
            LIST | TUPLE | DICT => {
                let items = self.pop_mark()?;
                if op == DICT && items.len() % 2 == 1 {
                    return Err("a dict from an odd number of keys and values".into());
                }
                let kind = match op {
                    LIST => Kind::List,
                    DICT => Kind::Dict,
                    _ => Kind::Fixed,
                };
                let item = Self::container(kind, &items)?;
                self.push(item);
            }
            TUPLE1 | TUPLE2 | TUPLE3 => {
                let n = usize::from(op - TUPLE1) + 1;
                if self.visible() < n {
                    return Err("a tuple of more values than the stack holds".into());
                }
                let items = self.stack.split_off(self.stack.len() - n);
                let item = Self::container(Kind::Fixed, &items)?;
                self.push(item);
            }
            APPEND => {
                let item = self.pop()?;
                self.add_to_top(Kind::List, &[item])?;
            }
            SETITEM => {
                let value = self.pop()?;
                let key = self.pop()?;
                self.add_to_top(Kind::Dict, &[key, value])?;
            }
            APPENDS | SETITEMS => {
                let items = self.pop_mark()?;
                if op == SETITEMS && items.len() % 2 == 1 {
                    return Err("SETITEMS with an odd number of keys and values".into());
                }
                let kind = if op == APPENDS {
                    Kind::List
                } else {
                    Kind::Dict
                };
                self.add_to_top(kind, &items)?;
            }
            MEMOIZE => {
                // `serde-pickle` numbers a MEMOIZE by the entries stored so far, as CPython does.
                let id = u32::try_from(self.memo.len()).map_err(|_| "too many memo entries")?;
                self.memoize(id)?;
            }
            BINPUT => {
                let id = self.le(1)? as u32;
                self.memoize(id)?;
            }
            LONG_BINPUT => {
                let id = self.le(4)? as u32;
                self.memoize(id)?;
            }
            BINGET => {
                let id = self.le(1)? as u32;
                self.get(id)?;
            }
            LONG_BINGET => {
                let id = self.le(4)? as u32;
                self.get(id)?;
            }
            other => {
                return Err(format!(
                    "opcode 0x{other:02x}{}, which a snapshot does not use (it holds only \
                     dicts, lists, tuples, strings, numbers and None)",
                    if other.is_ascii_graphic() {
                        format!(" ({:?})", other as char)
                    } else {
                        String::new()
                    }
                ))
            }
        }
        Ok(())
    }

    fn scalar_arg(&mut self, n: u64) -> Result<(), String> {
        self.take(n)?;
        self.push(SCALAR);
        Ok(())
    }

    fn string(&mut self, n: u64) -> Result<(), String> {
        if std::str::from_utf8(self.take(n)?).is_err() {
            return Err("a string that is not UTF-8".into());
        }
        self.push(SCALAR);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_a_dict_with_memoized_strings_passes() {
        // CPython's protocol 4 for [{'a': 1, 'b': 'a'}]: the string 'a' stored once, used twice.
        let p = b"\x80\x04\x95\x14\x00\x00\x00\x00\x00\x00\x00]\x94}\x94(\x8c\x01a\x94K\x01\x8c\x01b\x94h\x02ua.";
        assert_eq!(check(p), Ok(()));
    }

    #[test]
    fn lists_nested_past_the_limit_are_refused_without_recursion() {
        let depth = 1_000_000;
        let mut p = vec![PROTO, 4];
        p.extend(std::iter::repeat_n(EMPTY_LIST, depth));
        p.extend(std::iter::repeat_n(APPEND, depth - 1));
        p.push(STOP);
        let e = check(&p).expect_err("too deep");
        assert!(e.contains("deeper than 32"), "{e}");
    }

    #[test]
    fn a_memoized_list_cannot_grow_after_it_was_referred_to() {
        // l = []; memo it; refer to it; then append to the memo's list through the reference.
        let p = [PROTO, 4, EMPTY_LIST, MEMOIZE, BINGET, 0, NONE, APPEND, STOP];
        let e = check(&p).expect_err("changed after reference");
        assert!(e.contains("after it was referred to"), "{e}");
    }

    #[test]
    fn every_open_mark_counts_against_the_nesting_limit() {
        let mut p = vec![PROTO, 4];
        p.extend(std::iter::repeat_n(MARK, 1000));
        let e = check(&p).expect_err("too many marks");
        assert!(e.contains("MARKs open"), "{e}");
    }
}
