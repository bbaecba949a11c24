//! The one error type of the crate. Every variant maps to a stable `code()` that the
//! bindings pass on unchanged (JS `err.code`, C `CUDA_ARENA_ERR_*`); messages may change,
//! codes may not.

use std::fmt;

/// Stable error codes, in the order the DESIGN lists them. The bindings test that their
/// own lists match this one.
pub const ERROR_CODES: [&str; 7] = [
    "ERR_ARENA_OUT_OF_MEMORY",
    "ERR_ARENA_INVALID_CONFIG",
    "ERR_ARENA_INVALID_ARGUMENT",
    "ERR_ARENA_UNKNOWN_POINTER",
    "ERR_ARENA_RELEASED",
    "ERR_NO_CUDA",
    "ERR_CUDA",
];

/// Everything that can go wrong in cuda-arena.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArenaError {
    /// A request could not be satisfied: the raw allocator refused, `max_mem` leaves too
    /// little budget, or the size cannot be represented once rounded.
    OutOfMemory {
        /// Bytes asked for by the caller (before rounding).
        requested: u64,
        /// Why, with the numbers (available budget, raw allocator's answer, ...).
        reason: String,
    },
    /// A configuration value was rejected.
    InvalidConfig {
        /// The key, exactly as given.
        key: String,
        /// The value, exactly as given.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// An argument is malformed (negative size, bad stream, unsupported operation...).
    InvalidArgument {
        /// Which argument and why.
        reason: String,
    },
    /// What the device or backend does not offer (memory pools, virtual memory). Its code is
    /// `ERR_ARENA_INVALID_ARGUMENT`, as such refusals always had; the variant lets the factory
    /// fall back (to the arena, to regions) on the refusal itself rather than on its text.
    Unsupported {
        /// What is not offered, and where.
        reason: String,
    },
    /// An address this allocator did not hand out, that is no longer live, or a range that
    /// runs past the end of a live allocation.
    UnknownPointer {
        /// The address given.
        addr: u64,
        /// What was wrong with it.
        reason: String,
    },
    /// The allocator, factory or stream was used after it was released.
    Released {
        /// What was released.
        what: String,
    },
    /// CUDA is not usable here (no driver, no device, too old).
    NoCuda {
        /// Why.
        reason: String,
    },
    /// The CUDA driver reported an error.
    Cuda {
        /// The `CUresult` name, e.g. `CUDA_ERROR_INVALID_VALUE`.
        name: String,
        /// Which call failed and any detail.
        message: String,
    },
}

impl ArenaError {
    /// The stable code of this error, one of [`ERROR_CODES`].
    pub fn code(&self) -> &'static str {
        match self {
            ArenaError::OutOfMemory { .. } => ERROR_CODES[0],
            ArenaError::InvalidConfig { .. } => ERROR_CODES[1],
            ArenaError::InvalidArgument { .. } | ArenaError::Unsupported { .. } => ERROR_CODES[2],
            ArenaError::UnknownPointer { .. } => ERROR_CODES[3],
            ArenaError::Released { .. } => ERROR_CODES[4],
            ArenaError::NoCuda { .. } => ERROR_CODES[5],
            ArenaError::Cuda { .. } => ERROR_CODES[6],
        }
    }

    pub(crate) fn oom(requested: u64, reason: impl Into<String>) -> Self {
        ArenaError::OutOfMemory {
            requested,
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid_argument(reason: impl Into<String>) -> Self {
        ArenaError::InvalidArgument {
            reason: reason.into(),
        }
    }

    /// [`ArenaError::Unsupported`]: what a backend does not offer.
    pub fn unsupported(reason: impl Into<String>) -> Self {
        ArenaError::Unsupported {
            reason: reason.into(),
        }
    }

    pub(crate) fn unknown_pointer(addr: u64, reason: impl Into<String>) -> Self {
        ArenaError::UnknownPointer {
            addr,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ArenaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArenaError::OutOfMemory { requested, reason } => {
                write!(f, "out of memory allocating {requested} bytes: {reason}")
            }
            ArenaError::InvalidConfig { key, value, reason } => {
                // Escaped first, then cut: a control character escapes to up to 10
                // characters, so cutting before escaping would not bound the message.
                let (key, value) = (escaped(key), escaped(value));
                write!(f, "invalid value \"{value}\" for {key}: {reason}")
            }
            ArenaError::InvalidArgument { reason } => write!(f, "invalid argument: {reason}"),
            ArenaError::Unsupported { reason } => write!(f, "not supported: {reason}"),
            ArenaError::UnknownPointer { addr, reason } => {
                write!(f, "unknown pointer {addr:#x}: {reason}")
            }
            ArenaError::Released { what } => write!(f, "{what} was used after it was released"),
            ArenaError::NoCuda { reason } => write!(f, "CUDA is not available: {reason}"),
            ArenaError::Cuda { name, message } => write!(f, "{name}: {message}"),
        }
    }
}

impl std::error::Error for ArenaError {}

/// At most this many characters of a caller's text go into a message.
const QUOTED_CHARS: usize = 80;

/// `s`, cut to [`QUOTED_CHARS`] characters with an ellipsis, so a huge key or value (a
/// 100 MB number) makes a short message.
pub(crate) fn bounded(s: &str) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(QUOTED_CHARS) {
        None => std::borrow::Cow::Borrowed(s),
        Some((end, _)) => std::borrow::Cow::Owned(format!("{}…", &s[..end])),
    }
}

/// `s` with its control characters, quotes and backslashes escaped (as Rust's `{:?}` does,
/// without the quotes), cut to 80 characters of the escaped text: how a caller's text (a key,
/// a value, a path) goes into a message, so no input makes a long or unprintable message.
pub fn escaped(s: &str) -> String {
    let mut out: String = s.escape_debug().take(QUOTED_CHARS).collect();
    if s.escape_debug().nth(QUOTED_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// Result alias used across the crate.
pub type Result<T, E = ArenaError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_value_of_control_characters_makes_a_message_as_short_as_a_plain_one() {
        let value = format!("4{}09{}", "\u{1a}".repeat(61), "\u{da}".repeat(6));
        let e = ArenaError::InvalidConfig {
            key: "arena.max_mem".into(),
            value,
            reason: "expected a whole decimal number".into(),
        };
        let message = e.to_string();
        assert!(
            message.chars().count() < 200,
            "{} characters: {message}",
            message.len()
        );
        assert!(
            !message.contains('\u{1a}'),
            "control characters are escaped"
        );
    }
}
