//! The pickle machine, run over a snapshot's opcodes as they are read (issue 26, item 1).
//!
//! A general unpickler (`serde-pickle`, Python's own) builds the whole value first: ~65 bytes
//! of memory per byte of a snapshot whose bulk the replay never reads. This one runs the same
//! stack machine with values that keep only what the replay reads (`values.rs`), so memory is
//! the events kept (32 bytes each) plus two bytes per memoized value plus the values pending
//! on the stack, which PyTorch's pickler keeps to a few thousand (it appends in batches of
//! 1,000) and which is capped at [`MAX_PENDING_VALUES`]. Nothing is copied per reference and
//! nothing recurses, so time is linear in the file and any nesting is safe.
//!
//! It takes what a snapshot is made of: the opcodes PyTorch's own snapshot viewer
//! (`MemoryViz.js`) reads (protocols 2 to 5: dicts, lists, tuples, strings, integers up to 64
//! bits, floats, booleans and None, with the memo); anything else is refused with its offset.

use super::values::{push_item, set_item, Budget, Kind, Name, Val, NO_DEVICE_TRACES};
use super::{SnapshotError, SnapshotEvent};
use std::io::BufRead;

/// The most MARKs open at once. A snapshot opens at most one per level it nests (8).
pub const MAX_OPEN_MARKS: usize = 32;

/// The most values pending on the stack at once. PyTorch's pickler appends in batches of
/// 1,000, so a snapshot nested 8 deep has at most ~16,000 pending; at 16 bytes each, the cap is
/// 16 MiB.
pub const MAX_PENDING_VALUES: usize = 1 << 20;

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

/// What the memo holds for an id: a name a replay reads, or only the kind of the value.
#[derive(Debug, Clone, Copy)]
enum Memo {
    Name(Name),
    Kind(Kind),
}

struct Machine<R> {
    src: super::source::Source<R>,
    stack: Vec<Val>,
    marks: Vec<usize>,
    memo: Vec<Memo>,
    budget: Budget,
}

/// Reads the snapshot pickle from `reader` (at most `max_bytes`) into its events, one list per
/// device. An error says what is wrong, and where: the byte offset for the pickle's
/// structure, the place (`device_traces[0][12]["addr"]`) for a snapshot's content.
pub(super) fn decode<R: BufRead>(
    reader: R,
    max_bytes: u64,
    max_events: u64,
) -> Result<Vec<Vec<SnapshotEvent>>, SnapshotError> {
    let mut m = Machine {
        src: super::source::Source::new(reader, max_bytes),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Vec::new(),
        budget: Budget {
            events_left: max_events,
            max_events,
        },
    };
    let top = match m.run() {
        Ok(top) => top,
        // Told apart from what is wrong inside: a caller says how to record a smaller one.
        Err(_) if m.src.at() > max_bytes => {
            return Err(SnapshotError::TooLarge { limit: max_bytes })
        }
        Err(why) => return Err(SnapshotError::NotASnapshot(why)),
    };
    let devices = match top {
        Val::Dict(Some(d)) => d.into_traces(),
        Val::Dict(None) => Err(NO_DEVICE_TRACES.into()),
        other => Err(format!(
            "the pickle holds {}, not a snapshot (a dict with \"device_traces\")",
            other.kind_name()
        )),
    };
    devices.map_err(SnapshotError::NotASnapshot)
}

impl<R: BufRead> Machine<R> {
    /// Runs to STOP; the value it returns.
    fn run(&mut self) -> Result<Val, String> {
        loop {
            let at = self.src.at();
            let op = self.src.byte().map_err(|e| format!("byte {at}: {e}"))?;
            let Some(op) = op else {
                return Err(format!(
                    "byte {at}: the file ends before the pickle's end (STOP); is it cut short?"
                ));
            };
            if op == STOP {
                let top = self.pop().map_err(|e| format!("byte {at}: {e}"))?;
                let end = self.src.at();
                let more = self.src.rest().map_err(|e| format!("byte {end}: {e}"))?;
                if more > 0 {
                    return Err(format!(
                        "byte {end}: {more} more bytes after the end of the pickle"
                    ));
                }
                return Ok(top);
            }
            self.step(op).map_err(|e| format!("byte {at}: {e}"))?;
        }
    }

    fn push(&mut self, v: Val) -> Result<(), String> {
        if self.stack.len() >= MAX_PENDING_VALUES {
            return Err(format!(
                "more than {MAX_PENDING_VALUES} values pending at once (PyTorch's pickler \
                 keeps a few thousand)"
            ));
        }
        self.stack.push(v);
        Ok(())
    }

    /// Where the values since the last open MARK start: an opcode sees only those.
    fn base(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn pop(&mut self) -> Result<Val, String> {
        if self.stack.len() <= self.base() {
            return Err("an opcode wants a value and the stack is empty".into());
        }
        self.stack
            .pop()
            .ok_or_else(|| "an opcode wants a value and the stack is empty".to_string())
    }

    /// The values since the last MARK, which is closed.
    fn pop_mark(&mut self) -> Result<Vec<Val>, String> {
        let from = self
            .marks
            .pop()
            .ok_or_else(|| "an opcode wants a MARK and none is open".to_string())?;
        Ok(self.stack.split_off(from))
    }

    /// The value on top, if an opcode can see one.
    fn top(&mut self, wants: &str) -> Result<&mut Val, String> {
        if self.stack.len() <= self.base() {
            return Err(format!("adds to {wants} and the stack is empty"));
        }
        self.stack
            .last_mut()
            .ok_or_else(|| format!("adds to {wants} and the stack is empty"))
    }

    /// Appends `items` to the list on top.
    fn append(&mut self, items: Vec<Val>) -> Result<(), String> {
        let budget = &mut self.budget;
        let top = match self.stack.len() > self.marks.last().copied().unwrap_or(0) {
            true => self.stack.last_mut(),
            false => None,
        }
        .ok_or_else(|| "adds to a list and the stack is empty".to_string())?;
        match top {
            Val::Seq {
                tuple: false,
                items: list,
            } => items
                .into_iter()
                .try_for_each(|v| push_item(list, v, budget)),
            // A list referred to again: what is added to it is not read.
            Val::Shared(Kind::List) => Ok(()),
            _ => Err("adds to a list what is not one".into()),
        }
    }

    /// Sets the key-value `pairs` in the dict on top.
    fn set_items(&mut self, pairs: Vec<Val>) -> Result<(), String> {
        if pairs.len() % 2 == 1 {
            return Err("SETITEMS with an odd number of keys and values".into());
        }
        let top = self.top("a dict")?;
        match top {
            Val::Dict(d) => {
                let mut it = pairs.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    set_item(d, k, v);
                }
                Ok(())
            }
            Val::Shared(Kind::Dict) => Ok(()),
            _ => Err("adds to a dict what is not one".into()),
        }
    }

    /// A new list or tuple of `items`.
    fn seq(&mut self, tuple: bool, items: Vec<Val>) -> Result<Val, String> {
        let mut list = None;
        for v in items {
            push_item(&mut list, v, &mut self.budget)?;
        }
        Ok(Val::Seq { tuple, items: list })
    }

    fn memoize(&mut self, id: u64) -> Result<(), String> {
        let len = self.memo.len() as u64;
        if id > len {
            return Err(format!(
                "stores memo {id} before memo {len} (a pickler numbers its memo 0, 1, 2, ...)"
            ));
        }
        let top = self
            .stack
            .get(self.base()..)
            .and_then(|s| s.last())
            .ok_or_else(|| "memoizes with the stack empty".to_string())?;
        let entry = match top {
            Val::Str(n) if *n != Name::Other => Memo::Name(*n),
            v => Memo::Kind(v.kind()),
        };
        if id == len {
            self.memo
                .try_reserve(1)
                .map_err(|_| format!("the memo does not fit in memory ({len} entries)"))?;
            self.memo.push(entry);
        } else {
            self.memo[id as usize] = entry;
        }
        Ok(())
    }

    fn get(&mut self, id: u64) -> Result<(), String> {
        match usize::try_from(id).ok().and_then(|i| self.memo.get(i)) {
            Some(Memo::Name(n)) => self.push(Val::Str(*n)),
            Some(Memo::Kind(k)) => self.push(Val::Shared(*k)),
            None => Err(format!("refers to memo {id}, which was never stored")),
        }
    }

    fn step(&mut self, op: u8) -> Result<(), String> {
        match op {
            PROTO => {
                let [v] = self.src.array::<1>()?;
                if !(2..=5).contains(&v) {
                    return Err(format!(
                        "pickle protocol {v}; PyTorch writes protocols 2 to 5"
                    ));
                }
            }
            FRAME => {
                self.src.array::<8>()?;
            }
            MARK => {
                if self.marks.len() >= MAX_OPEN_MARKS {
                    return Err(format!("more than {MAX_OPEN_MARKS} MARKs open at once"));
                }
                self.marks.push(self.stack.len());
            }
            NONE => self.push(Val::None)?,
            NEWTRUE | NEWFALSE => self.push(Val::Bool)?,
            BININT1 => {
                let v = self.src.le(1)?;
                self.push(Val::Int(v as i64))?
            }
            BININT2 => {
                let v = self.src.le(2)?;
                self.push(Val::Int(v as i64))?
            }
            BININT => {
                let v = self.src.signed(4)?;
                self.push(Val::Int(v))?
            }
            BINFLOAT => {
                self.src.array::<8>()?;
                self.push(Val::Float)?
            }
            LONG1 | LONG4 => {
                let n = self.src.le(if op == LONG1 { 1 } else { 4 })?;
                // Two's complement: a snapshot's integers (int64 addresses and sizes) need at
                // most 8 bytes.
                if n > 8 {
                    return Err(format!(
                        "an integer of {n} bytes; a snapshot's integers fit in 64 bits"
                    ));
                }
                let v = self.src.signed(n as usize)?;
                self.push(Val::Int(v))?
            }
            SHORT_BINUNICODE | BINUNICODE | BINUNICODE8 => {
                let width = match op {
                    SHORT_BINUNICODE => 1,
                    BINUNICODE => 4,
                    _ => 8,
                };
                let n = self.src.le(width)?;
                let name = self.src.string(n)?;
                self.push(Val::Str(name))?
            }
            EMPTY_LIST => self.push(Val::Seq {
                tuple: false,
                items: None,
            })?,
            EMPTY_TUPLE => self.push(Val::Seq {
                tuple: true,
                items: None,
            })?,
            EMPTY_DICT => self.push(Val::Dict(None))?,
            LIST | TUPLE => {
                let items = self.pop_mark()?;
                let v = self.seq(op == TUPLE, items)?;
                self.push(v)?
            }
            DICT => {
                let pairs = self.pop_mark()?;
                if pairs.len() % 2 == 1 {
                    return Err("a dict from an odd number of keys and values".into());
                }
                let mut d = None;
                let mut it = pairs.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    set_item(&mut d, k, v);
                }
                self.push(Val::Dict(d))?
            }
            TUPLE1 | TUPLE2 | TUPLE3 => {
                let n = usize::from(op - TUPLE1) + 1;
                if self.stack.len() - self.base() < n {
                    return Err("a tuple of more values than the stack holds".into());
                }
                let items = self.stack.split_off(self.stack.len() - n);
                let v = self.seq(true, items)?;
                self.push(v)?
            }
            APPEND => {
                let v = self.pop()?;
                self.append(vec![v])?
            }
            APPENDS => {
                let items = self.pop_mark()?;
                self.append(items)?
            }
            SETITEM => {
                let value = self.pop()?;
                let key = self.pop()?;
                self.set_items(vec![key, value])?
            }
            SETITEMS => {
                let pairs = self.pop_mark()?;
                self.set_items(pairs)?
            }
            MEMOIZE => self.memoize(self.memo.len() as u64)?,
            BINPUT => {
                let id = self.src.le(1)?;
                self.memoize(id)?
            }
            LONG_BINPUT => {
                let id = self.src.le(4)?;
                self.memoize(id)?
            }
            BINGET => {
                let id = self.src.le(1)?;
                self.get(id)?
            }
            LONG_BINGET => {
                let id = self.src.le(4)?;
                self.get(id)?
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{"device_traces": [[]]}` and `pad` Nones pending in a list that never closes.
    fn endless(pad: usize) -> Vec<u8> {
        let mut p = vec![PROTO, 4, EMPTY_LIST, MARK];
        p.extend(std::iter::repeat_n(NONE, pad));
        p
    }

    #[test]
    fn a_stream_longer_than_the_limit_is_too_large_not_cut_short() {
        let e = decode(&endless(100)[..], 50, 10).expect_err("too large");
        assert_eq!(e, SnapshotError::TooLarge { limit: 50 });
        // Within the limit, the same bytes are a pickle cut short.
        let e = decode(&endless(100)[..], 200, 10).expect_err("cut short");
        assert!(e.to_string().contains("cut short"), "{e}");
    }

    #[test]
    fn more_events_than_the_limit_are_refused_when_the_next_is_read() {
        let event = |p: &mut Vec<u8>| {
            p.extend_from_slice(&[EMPTY_DICT, SHORT_BINUNICODE, 6]);
            p.extend_from_slice(b"action");
            p.extend_from_slice(&[SHORT_BINUNICODE, 3]);
            p.extend_from_slice(b"oom");
            p.push(SETITEM);
        };
        let mut p = vec![PROTO, 4, EMPTY_LIST, MARK];
        for _ in 0..4 {
            event(&mut p);
        }
        p.extend_from_slice(&[APPENDS, STOP]);
        let e = decode(&p[..], 1 << 20, 3).expect_err("too many");
        assert!(e.to_string().contains("more events than the 3"), "{e}");
    }

    #[test]
    fn a_value_is_sixteen_bytes() {
        // What bounds the stack's memory (MAX_PENDING_VALUES of them).
        assert_eq!(std::mem::size_of::<Val>(), 16);
    }
}
