//! Which memory an allocator hands out: ONNX Runtime's `OrtMemoryInfo`, reduced to what
//! cuda-arena distinguishes.

use std::fmt;

/// The memory info names of the DESIGN's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Device memory of a GPU.
    Cuda,
    /// Pinned (page-locked) host memory for a GPU.
    CudaPinned,
    /// Ordinary host memory.
    Cpu,
}

impl MemoryKind {
    /// The name as ONNX Runtime spells it: `Cuda`, `CudaPinned`, `Cpu`.
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::Cuda => "Cuda",
            MemoryKind::CudaPinned => "CudaPinned",
            MemoryKind::Cpu => "Cpu",
        }
    }

    /// Parses a name as [`MemoryKind::name`] writes it (case-sensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "Cuda" => Some(MemoryKind::Cuda),
            "CudaPinned" => Some(MemoryKind::CudaPinned),
            "Cpu" => Some(MemoryKind::Cpu),
            _ => None,
        }
    }
}

/// Device allocators go through an arena; read-only (initializer) allocators do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AllocatorType {
    /// The shared, arena-backed allocator.
    #[default]
    Device,
    /// A plain raw allocator for initializers.
    ReadOnly,
}

/// Which memory an allocator serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemoryInfo {
    /// The memory's name.
    pub kind: MemoryKind,
    /// The device ordinal (0 for `Cpu`).
    pub device_id: u32,
    /// Arena-backed or plain.
    pub allocator_type: AllocatorType,
}

impl MemoryInfo {
    /// Device-type memory info for `kind` on `device_id`.
    pub fn new(kind: MemoryKind, device_id: u32) -> Self {
        MemoryInfo {
            kind,
            device_id,
            allocator_type: AllocatorType::Device,
        }
    }
}

impl fmt::Display for MemoryInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.name(), self.device_id)
    }
}
