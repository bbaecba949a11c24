//! Decoding a snapshot pickle (already checked by [`super::shape`]) into its events, with
//! `serde-pickle`'s deserializer driven by the visitors below.
//!
//! The visitors keep only what a replay needs from `device_traces` (each event's action,
//! address, size and stream) and pass over everything else (`segments`, `frames`,
//! `allocator_settings`, ...) without building it. `serde-pickle` hands a value referred to
//! twice in the pickle (a frame many tracebacks share) out as a copy each time, so the walk
//! counts what it visits, strings by their length, and stops past [`VISITS_PER_BYTE`] visits per
//! byte of pickle: a file whose shared values would multiply that work is refused in bounded
//! time. Values nest at most [`MAX_NESTING`] deep here too, references followed.

use super::shape::MAX_NESTING;
use super::{Action, SnapshotEvent};
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use std::cell::Cell;
use std::fmt;

/// The most visits per byte of pickle the walk makes. PyTorch's snapshots take about one
/// (0.3 to 1.1 measured on torch 2.11's, stack traces included: a frame shared by many
/// tracebacks costs a few visits per two-byte reference).
pub const VISITS_PER_BYTE: u64 = 32;

/// What every visitor shares: the work left, and the events left.
struct Ctx {
    visits_left: Cell<u64>,
    events_left: Cell<u64>,
}

impl Ctx {
    /// Counts a visit costing `cost`; past the budget, the error says why.
    fn visit<E: de::Error>(&self, cost: u64) -> Result<(), E> {
        let left = self.visits_left.get();
        if cost > left {
            return Err(E::custom(format!(
                "decoding takes more than {VISITS_PER_BYTE} steps per byte of the file: it \
                 refers to the same values over and over, which PyTorch's snapshots do not"
            )));
        }
        self.visits_left.set(left - cost);
        Ok(())
    }
}

/// The cost of visiting a string or bytes: one, plus one per 16 bytes copied.
fn cost_of(len: usize) -> u64 {
    1 + len as u64 / 16
}

/// Decodes the pickle `bytes` into its events, one list per device. The message of an error
/// says where (`device_traces[0][12]["addr"]`) and what is wrong.
pub fn decode(bytes: &[u8], max_events: u64) -> Result<Vec<Vec<SnapshotEvent>>, String> {
    let ctx = Ctx {
        visits_left: Cell::new((bytes.len() as u64).saturating_mul(VISITS_PER_BYTE)),
        events_left: Cell::new(max_events),
    };
    // `serde-pickle` counts references to memoized values and drops a value at its last
    // reference, but counts wrong when a shared container holds shared values (it visits a
    // copy per reference and counts the inner references each time: its pull request #24):
    // torch's frame dicts, shared by tracebacks and holding shared strings, are dropped early,
    // and a later reference fails as a "recursive structure". The shape check refuses every
    // real cycle, so such a reference is only ever this miscount; read as None, it lands in a
    // frame, which the walk passes over. (A value the replay reads that became None is an
    // error naming it, never a wrong number.)
    let options = serde_pickle::DeOptions::new().replace_recursive_structures();
    let mut de = serde_pickle::Deserializer::new(bytes, options);
    let devices = Top { ctx: &ctx }
        .deserialize(&mut de)
        .and_then(|d| de.end().map(|()| d))
        .map_err(|e| match e {
            serde_pickle::Error::Syntax(serde_pickle::ErrorCode::Structure(m)) => m,
            other => other.to_string(),
        })?;
    devices.ok_or_else(|| {
        "the dict has no \"device_traces\" (a snapshot from torch.cuda.memory._snapshot() has)"
            .to_string()
    })
}

/// What a value is, for messages.
const LIST: &str = "a list or tuple";
const DICT: &str = "a dict";

/// The scalar visits every visitor below refuses: each says what it got through `wrong`.
macro_rules! refuse_scalars {
    () => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Err(E::custom(self.wrong("a boolean")))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Err(E::custom(self.wrong("an integer")))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Err(E::custom(self.wrong("an integer")))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Err(E::custom(self.wrong("a float")))
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Err(E::custom(self.wrong("a string")))
        }
        fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Self::Value, E> {
            Err(E::custom(self.wrong("bytes")))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Err(E::custom(self.wrong("None")))
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Err(E::custom(self.wrong("None")))
        }
    };
}

/// Passes over a value, counting what it visits.
#[derive(Clone, Copy)]
struct Skip<'a> {
    ctx: &'a Ctx,
    depth: u32,
}

impl<'de> DeserializeSeed<'de> for Skip<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.depth > MAX_NESTING {
            return Err(de::Error::custom(format!(
                "values nest deeper than {MAX_NESTING}"
            )));
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.ctx.visit(1)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.ctx.visit(1)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.ctx.visit(1)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.ctx.visit(1)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.ctx.visit(cost_of(s.len()))
    }
    fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<(), E> {
        self.ctx.visit(cost_of(b.len()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.ctx.visit(1)
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.ctx.visit(1)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.ctx.visit(1)?;
        let inner = Skip {
            depth: self.depth + 1,
            ..self
        };
        while seq.next_element_seed(inner)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.ctx.visit(1)?;
        let inner = Skip {
            depth: self.depth + 1,
            ..self
        };
        while map.next_key_seed(inner)?.is_some() {
            map.next_value_seed(inner)?;
        }
        Ok(())
    }
}

/// A scalar: what an event's fields and a dict's keys are. A container is passed over and
/// reported as [`Scalar::Other`].
#[derive(Debug)]
enum Scalar {
    Int(i64),
    Str(String),
    /// Anything else, named for messages.
    Other(&'static str),
}

impl Scalar {
    fn kind(&self) -> &'static str {
        match self {
            Scalar::Int(_) => "an integer",
            Scalar::Str(_) => "a string",
            Scalar::Other(k) => k,
        }
    }
}

#[derive(Clone, Copy)]
struct ScalarSeed<'a>(Skip<'a>);

impl<'de> DeserializeSeed<'de> for ScalarSeed<'_> {
    type Value = Scalar;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Scalar, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ScalarSeed<'_> {
    type Value = Scalar;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a scalar")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Scalar, E> {
        self.0.ctx.visit(1).map(|()| Scalar::Other("a boolean"))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
        self.0.ctx.visit(1).map(|()| Scalar::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
        self.0.ctx.visit(1)?;
        Ok(i64::try_from(v).map_or(Scalar::Other("an integer over 2^63"), Scalar::Int))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Scalar, E> {
        self.0.ctx.visit(1).map(|()| Scalar::Other("a float"))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Scalar, E> {
        self.0.ctx.visit(cost_of(s.len()))?;
        Ok(Scalar::Str(s.to_string()))
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<Scalar, E> {
        self.0.ctx.visit(cost_of(s.len()))?;
        Ok(Scalar::Str(s))
    }
    fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<Scalar, E> {
        self.0
            .ctx
            .visit(cost_of(b.len()))
            .map(|()| Scalar::Other("bytes"))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
        self.0.ctx.visit(1).map(|()| Scalar::Other("None"))
    }
    fn visit_none<E: de::Error>(self) -> Result<Scalar, E> {
        self.visit_unit()
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar, A::Error> {
        self.0.visit_seq(seq).map(|()| Scalar::Other(LIST))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar, A::Error> {
        self.0.visit_map(map).map(|()| Scalar::Other(DICT))
    }
}

/// The whole snapshot: a dict, of which only `device_traces` is read.
struct Top<'a> {
    ctx: &'a Ctx,
}

impl Top<'_> {
    fn wrong(&self, kind: &str) -> String {
        format!("the pickle holds {kind}, not a snapshot (a dict with \"device_traces\")")
    }
}

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = Option<Vec<Vec<SnapshotEvent>>>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = Option<Vec<Vec<SnapshotEvent>>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a snapshot dict")
    }
    refuse_scalars!();
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(de::Error::custom(self.wrong(LIST)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let skip = Skip {
            ctx: self.ctx,
            depth: 2,
        };
        let mut devices = None;
        while let Some(key) = map.next_key_seed(ScalarSeed(skip))? {
            match key {
                Scalar::Str(k) if k == "device_traces" => {
                    if devices.is_some() {
                        return Err(de::Error::custom("\"device_traces\" is given twice"));
                    }
                    devices = Some(map.next_value_seed(Devices { ctx: self.ctx })?);
                }
                _ => map.next_value_seed(skip)?,
            }
        }
        Ok(devices)
    }
}

/// `device_traces`: a list with one list of events per device.
struct Devices<'a> {
    ctx: &'a Ctx,
}

impl Devices<'_> {
    fn wrong(&self, kind: &str) -> String {
        format!("\"device_traces\" is {kind}, not a list with a list of events per device")
    }
}

impl<'de> DeserializeSeed<'de> for Devices<'_> {
    type Value = Vec<Vec<SnapshotEvent>>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Devices<'_> {
    type Value = Vec<Vec<SnapshotEvent>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of device traces")
    }
    refuse_scalars!();
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(de::Error::custom(self.wrong(DICT)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        self.ctx.visit(1)?;
        let mut devices = Vec::new();
        loop {
            let device = Device {
                ctx: self.ctx,
                index: devices.len(),
            };
            match seq.next_element_seed(device)? {
                Some(events) => devices.push(events),
                None => return Ok(devices),
            }
        }
    }
}

/// One device's trace: a list of event dicts.
struct Device<'a> {
    ctx: &'a Ctx,
    index: usize,
}

impl Device<'_> {
    fn wrong(&self, kind: &str) -> String {
        format!(
            "device_traces[{}] is {kind}, not a list of events",
            self.index
        )
    }
}

impl<'de> DeserializeSeed<'de> for Device<'_> {
    type Value = Vec<SnapshotEvent>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// Events reserved up front at most: the list's length is the pickle's claim.
const PREALLOCATED_EVENTS: usize = 1 << 16;

impl<'de> Visitor<'de> for Device<'_> {
    type Value = Vec<SnapshotEvent>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of events")
    }
    refuse_scalars!();
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(de::Error::custom(self.wrong(DICT)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        self.ctx.visit(1)?;
        let mut events = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(PREALLOCATED_EVENTS));
        loop {
            let event = Event {
                ctx: self.ctx,
                device: self.index,
                index: events.len(),
            };
            match seq.next_element_seed(event)? {
                Some(e) => events.push(e),
                None => return Ok(events),
            }
        }
    }
}

/// One event: `{action, addr, size, stream, ...}` (`frames`, `time_us`, ... passed over).
struct Event<'a> {
    ctx: &'a Ctx,
    device: usize,
    index: usize,
}

impl Event<'_> {
    fn at(&self) -> String {
        format!("device_traces[{}][{}]", self.device, self.index)
    }

    fn wrong(&self, kind: &str) -> String {
        format!("{} is {kind}, not an event dict", self.at())
    }

    fn field(&self, key: &str, got: &Scalar, want: &str) -> String {
        format!("{}[\"{key}\"] is {}, not {want}", self.at(), got.kind())
    }
}

impl<'de> DeserializeSeed<'de> for Event<'_> {
    type Value = SnapshotEvent;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Event<'_> {
    type Value = SnapshotEvent;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an event dict")
    }
    refuse_scalars!();
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(de::Error::custom(self.wrong(LIST)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        self.ctx.visit(1)?;
        let left = self.ctx.events_left.get();
        if left == 0 {
            return Err(de::Error::custom(format!(
                "{}: more events than the {} a replay takes",
                self.at(),
                super::MAX_SNAPSHOT_EVENTS
            )));
        }
        self.ctx.events_left.set(left - 1);
        let skip = Skip {
            ctx: self.ctx,
            depth: 5,
        };
        let (mut action, mut addr, mut size, mut stream) = (None, None, None, None);
        while let Some(key) = map.next_key_seed(ScalarSeed(skip))? {
            let Scalar::Str(key) = key else {
                map.next_value_seed(skip)?;
                continue;
            };
            let slot = match key.as_str() {
                "action" => {
                    match map.next_value_seed(ScalarSeed(skip))? {
                        Scalar::Str(name) => action = Some(Action::from_name(&name)),
                        other => {
                            return Err(de::Error::custom(self.field(&key, &other, "a string")))
                        }
                    }
                    continue;
                }
                "addr" => &mut addr,
                "size" => &mut size,
                "stream" => &mut stream,
                _ => {
                    map.next_value_seed(skip)?;
                    continue;
                }
            };
            match map.next_value_seed(ScalarSeed(skip))? {
                Scalar::Int(v) => *slot = Some(v),
                other => return Err(de::Error::custom(self.field(&key, &other, "an integer"))),
            }
        }
        let action =
            action.ok_or_else(|| de::Error::custom(format!("{} has no \"action\"", self.at())))?;
        let needs = |field: Option<i64>, key: &str| {
            field.ok_or_else(|| {
                de::Error::custom(format!(
                    "{}: {} event without \"{key}\"",
                    self.at(),
                    action.name()
                ))
            })
        };
        let (addr, size) = match action {
            Action::Alloc => (needs(addr, "addr")?, needs(size, "size")?),
            Action::FreeRequested => (needs(addr, "addr")?, size.unwrap_or(0)),
            _ => (addr.unwrap_or(0), size.unwrap_or(0)),
        };
        if size < 0 {
            return Err(de::Error::custom(format!(
                "{}[\"size\"] is {size}, a negative size",
                self.at()
            )));
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
}
