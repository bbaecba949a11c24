//! What JavaScript calls: the factory, allocator and stream classes, the fast calls, the
//! free functions, onnxruntime-node registration, recording and trace replay.

pub(crate) mod allocator;
pub(crate) mod factory;
pub(crate) mod fast;
pub(crate) mod functions;
pub(crate) mod ort;
pub(crate) mod recording;
pub(crate) mod replay;
pub(crate) mod replay_report;
pub(crate) mod stream;
pub(crate) mod traces;
