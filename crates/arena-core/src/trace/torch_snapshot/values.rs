//! What the reader keeps of a value while a pickle is read: for each value on the pickle
//! machine's stack, only what it would give the replay if it turned out to be `device_traces`,
//! one device's trace or one event, and the first thing wrong with it for each of those roles.
//!
//! A pickle builds its values bottom-up and says where one goes only after it is built, so a
//! value cannot be told by its place while it is read. It is told by what it holds instead,
//! and everything else is dropped as soon as it is read: a string is a [`Name`] or nothing, a
//! dict keeps the four fields of an event and its `device_traces`, a list keeps its elements
//! as events while each is one and as device traces while each is one. What is kept is what
//! the replay needs, so a snapshot whose bulk is elsewhere (`segments`, stack frames) costs
//! nothing for it. No value holds another value, so nothing is dropped recursively.

use super::{Action, SnapshotEvent};

/// The strings a replay reads: keys of the snapshot and of its events, and actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Name {
    DeviceTraces,
    Action,
    Addr,
    Size,
    Stream,
    /// An event's action, when the string is one's name.
    Act(Action),
    /// Any other string.
    Other,
}

impl Name {
    pub(super) fn of(s: &str) -> Name {
        match s {
            "device_traces" => Name::DeviceTraces,
            "action" => Name::Action,
            "addr" => Name::Addr,
            "size" => Name::Size,
            "stream" => Name::Stream,
            _ => match Action::from_name(s) {
                Action::Other => Name::Other,
                a => Name::Act(a),
            },
        }
    }
}

/// What a value is, for messages and for values referred to through the memo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    List,
    Dict,
    Other,
}

/// A value on the stack.
#[derive(Debug)]
pub(super) enum Val {
    None,
    Bool,
    Float,
    Int(i64),
    Str(Name),
    /// A list or tuple; `None` while it is empty.
    Seq {
        tuple: bool,
        items: Option<Box<Seq>>,
    },
    /// A dict; `None` while it holds no key a replay reads.
    Dict(Option<Box<Dict>>),
    /// A value stored in the memo and referred to again: only its kind is known.
    Shared(Kind),
}

/// How a value referred to again is named in messages.
const SHARED: &str = "a value the pickle refers to a second time (PyTorch writes each event once)";

impl Val {
    pub(super) fn kind_name(&self) -> &'static str {
        match self {
            Val::None => "None",
            Val::Bool => "a boolean",
            Val::Float => "a float",
            Val::Int(_) => "an integer",
            Val::Str(_) => "a string",
            Val::Seq { .. } => "a list or tuple",
            Val::Dict(_) => "a dict",
            Val::Shared(_) => SHARED,
        }
    }

    pub(super) fn kind(&self) -> Kind {
        match self {
            Val::Seq { .. } | Val::Shared(Kind::List) => Kind::List,
            Val::Dict(_) | Val::Shared(Kind::Dict) => Kind::Dict,
            _ => Kind::Other,
        }
    }

    /// The value as one event.
    pub(super) fn as_event(&self) -> Result<SnapshotEvent, EventWrong> {
        match self {
            Val::Dict(Some(d)) => d.as_event(),
            Val::Dict(None) => Err(EventWrong::NoAction),
            other => Err(EventWrong::NotADict(other.kind_name())),
        }
    }

    /// The value as one device's trace (consumed: the events move).
    pub(super) fn into_trace(self) -> Result<Vec<SnapshotEvent>, TraceWrong> {
        match self {
            Val::Seq { items: None, .. } => Ok(Vec::new()),
            Val::Seq { items: Some(s), .. } => s.events.map_err(|(i, e)| TraceWrong::Event(i, e)),
            other => Err(TraceWrong::NotAList(other.kind_name())),
        }
    }

    /// The value as `device_traces` (consumed).
    pub(super) fn into_traces(self) -> Result<Vec<Vec<SnapshotEvent>>, TracesWrong> {
        match self {
            Val::Seq { items: None, .. } => Ok(Vec::new()),
            Val::Seq { items: Some(s), .. } => s.traces.map_err(|(d, e)| TracesWrong::Device(d, e)),
            other => Err(TracesWrong::NotAList(other.kind_name())),
        }
    }
}

/// Why a value is not an event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum EventWrong {
    NotADict(&'static str),
    NoAction,
    Field {
        key: &'static str,
        got: &'static str,
        want: &'static str,
    },
    Missing {
        action: Action,
        key: &'static str,
    },
    NegativeSize(i64),
}

/// Why a value is not a device's trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum TraceWrong {
    NotAList(&'static str),
    Event(u64, EventWrong),
    /// The list has more elements than a snapshot has devices.
    PastTheDevices,
}

/// Why a value is not `device_traces`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum TracesWrong {
    NotAList(&'static str),
    Device(u64, TraceWrong),
}

impl EventWrong {
    fn message(&self, at: &str) -> String {
        match self {
            EventWrong::NotADict(kind) => format!("{at} is {kind}, not an event dict"),
            EventWrong::NoAction => format!("{at} has no \"action\""),
            EventWrong::Field { key, got, want } => {
                format!("{at}[\"{key}\"] is {got}, not {want}")
            }
            EventWrong::Missing { action, key } => {
                format!("{at}: {} event without \"{key}\"", action.name())
            }
            EventWrong::NegativeSize(size) => format!("{at}[\"size\"] is {size}, a negative size"),
        }
    }
}

impl TracesWrong {
    /// What is wrong, named by its place (`device_traces[0][12]["addr"]`).
    pub(super) fn message(&self) -> String {
        match self {
            TracesWrong::NotAList(kind) => {
                format!("\"device_traces\" is {kind}, not a list with a list of events per device")
            }
            TracesWrong::Device(d, TraceWrong::NotAList(kind)) => {
                format!("device_traces[{d}] is {kind}, not a list of events")
            }
            TracesWrong::Device(d, TraceWrong::Event(i, e)) => {
                e.message(&format!("device_traces[{d}][{i}]"))
            }
            TracesWrong::Device(d, TraceWrong::PastTheDevices) => format!(
                "\"device_traces\" holds more than {MAX_SNAPSHOT_DEVICES} devices (device_traces[{d}])"
            ),
        }
    }
}

/// A list or tuple's elements, as the two roles a list plays in a snapshot.
#[derive(Debug)]
pub(super) struct Seq {
    /// Its elements as events while each is one; else the first that is not, and why.
    events: Result<Vec<SnapshotEvent>, (u64, EventWrong)>,
    /// Its elements as device traces while each is one; else the first that is not.
    traces: Result<Vec<Vec<SnapshotEvent>>, (u64, TraceWrong)>,
    len: u64,
}

/// The most devices a snapshot's `device_traces` lists: more than any machine has.
pub const MAX_SNAPSHOT_DEVICES: u64 = 1024;

/// What lists share while a pickle is read: how many more events may be kept.
pub(super) struct Budget {
    pub(super) events_left: u64,
    pub(super) max_events: u64,
}

impl Budget {
    fn take_event(&mut self) -> Result<(), String> {
        if self.events_left == 0 {
            return Err(format!(
                "more events than the {} a replay takes",
                self.max_events
            ));
        }
        self.events_left -= 1;
        Ok(())
    }
}

/// Grows `v` by one, or says the events do not fit in memory (instead of aborting).
fn room<T>(v: &mut Vec<T>) -> Result<(), String> {
    v.try_reserve(1).map_err(|_| {
        format!(
            "the snapshot's events do not fit in memory ({} kept so far)",
            v.len()
        )
    })
}

impl Seq {
    fn new() -> Self {
        Seq {
            events: Ok(Vec::new()),
            traces: Ok(Vec::new()),
            len: 0,
        }
    }

    /// Adds `v` at the end.
    pub(super) fn push(&mut self, v: Val, budget: &mut Budget) -> Result<(), String> {
        let i = self.len;
        self.len += 1;
        if let Ok(events) = &mut self.events {
            match v.as_event() {
                Ok(e) => {
                    budget.take_event()?;
                    room(events)?;
                    events.push(e);
                }
                Err(why) => self.events = Err((i, why)),
            }
        }
        if let Ok(traces) = &mut self.traces {
            // A list past the devices a process has is no `device_traces`: stop keeping its
            // elements (a pickle of millions of lists would hold them all, and report them).
            if i >= MAX_SNAPSHOT_DEVICES {
                self.traces = Err((i, TraceWrong::PastTheDevices));
                return Ok(());
            }
            match v.into_trace() {
                Ok(t) => {
                    room(traces)?;
                    traces.push(t);
                }
                Err(why) => self.traces = Err((i, why)),
            }
        }
        Ok(())
    }
}

/// Adds `v` to the list or tuple `items` (a new one when `None`).
pub(super) fn push_item(
    items: &mut Option<Box<Seq>>,
    v: Val,
    budget: &mut Budget,
) -> Result<(), String> {
    items
        .get_or_insert_with(|| Box::new(Seq::new()))
        .push(v, budget)
}

/// An integer field, or what it was instead.
type IntField = Option<Result<i64, &'static str>>;

/// What a dict holds of what a replay reads.
#[derive(Debug, Default)]
pub(super) struct Dict {
    action: Option<Result<Action, &'static str>>,
    addr: IntField,
    size: IntField,
    stream: IntField,
    device_traces: Option<Result<Vec<Vec<SnapshotEvent>>, TracesWrong>>,
    device_traces_twice: bool,
}

impl Dict {
    fn as_event(&self) -> Result<SnapshotEvent, EventWrong> {
        let action = match self.action {
            None => return Err(EventWrong::NoAction),
            Some(Err(got)) => {
                return Err(EventWrong::Field {
                    key: "action",
                    got,
                    want: "a string",
                })
            }
            Some(Ok(a)) => a,
        };
        let int = |field: IntField, key: &'static str| match field {
            Some(Err(got)) => Err(EventWrong::Field {
                key,
                got,
                want: "an integer",
            }),
            Some(Ok(v)) => Ok(Some(v)),
            None => Ok(None),
        };
        let (addr, size, stream) = (
            int(self.addr, "addr")?,
            int(self.size, "size")?,
            int(self.stream, "stream")?,
        );
        let needs = |field: Option<i64>, key| field.ok_or(EventWrong::Missing { action, key });
        let (addr, size) = match action {
            Action::Alloc => (needs(addr, "addr")?, needs(size, "size")?),
            Action::FreeRequested => (needs(addr, "addr")?, size.unwrap_or(0)),
            _ => (addr.unwrap_or(0), size.unwrap_or(0)),
        };
        if size < 0 {
            return Err(EventWrong::NegativeSize(size));
        }
        Ok(SnapshotEvent {
            action,
            // A C++ writer (torch's own pickler) stores a size_t address as an int64: the
            // same 64 bits.
            addr: addr as u64,
            size: size as u64,
            stream: stream.unwrap_or(0),
        })
    }

    /// `device_traces`, or why the dict does not give one.
    pub(super) fn into_traces(self) -> Result<Vec<Vec<SnapshotEvent>>, String> {
        if self.device_traces_twice {
            return Err("\"device_traces\" is given twice".into());
        }
        match self.device_traces {
            None => Err(NO_DEVICE_TRACES.into()),
            Some(t) => t.map_err(|e| e.message()),
        }
    }
}

pub(super) const NO_DEVICE_TRACES: &str =
    "the dict has no \"device_traces\" (a snapshot from torch.cuda.memory._snapshot() has)";

/// Sets `key` to `value` in the dict `d` (made when the key is one a replay reads).
pub(super) fn set_item(d: &mut Option<Box<Dict>>, key: Val, value: Val) {
    let Val::Str(name) = key else { return };
    let int = |v: &Val| match v {
        Val::Int(i) => Ok(*i),
        other => Err(other.kind_name()),
    };
    fn slot(d: &mut Option<Box<Dict>>) -> &mut Dict {
        d.get_or_insert_with(Box::default)
    }
    match name {
        Name::Action => {
            slot(d).action = Some(match value {
                Val::Str(Name::Act(a)) => Ok(a),
                Val::Str(_) => Ok(Action::Other),
                other => Err(other.kind_name()),
            })
        }
        Name::Addr => slot(d).addr = Some(int(&value)),
        Name::Size => slot(d).size = Some(int(&value)),
        Name::Stream => slot(d).stream = Some(int(&value)),
        Name::DeviceTraces => {
            let d = slot(d);
            d.device_traces_twice |= d.device_traces.is_some();
            d.device_traces = Some(value.into_traces());
        }
        Name::Act(_) | Name::Other => {}
    }
}
