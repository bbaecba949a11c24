//! The one mapping from `ArenaError` to a JS error: `err.code` is the stable code.

use cuda_arena_core::ArenaError;

/// A JS error whose `code` is one of `cuda_arena_core::ERROR_CODES`.
pub type JsError = napi::Error<&'static str>;
/// Result of every binding entry point.
pub type Result<T> = std::result::Result<T, JsError>;

/// `ArenaError` → JS error with its code.
pub fn js(e: ArenaError) -> JsError {
    napi::Error::new(e.code(), e.to_string())
}

/// `e`'s code with a message of the binding's own: for a JS value the core's types cannot
/// hold, quoted as given.
pub fn with_message(e: ArenaError, message: String) -> JsError {
    napi::Error::new(e.code(), message)
}

/// An invalid argument, named.
pub fn invalid(reason: impl Into<String>) -> JsError {
    js(ArenaError::InvalidArgument {
        reason: reason.into(),
    })
}

/// Use of a released handle.
pub fn released(what: &str) -> JsError {
    js(ArenaError::Released {
        what: what.to_string(),
    })
}
