//! The one place a backend's name (`cuda`, `host`, `virtual`: what the Node factory, the
//! `replay` command, the C ABI and `CUDA_ARENA_TORCH_BACKEND` take) becomes a backend.

use crate::CudaBackend;
use cuda_arena_core::{ArenaError, Backend, DeviceLimits, Result, SimBackend, SimKind};
use std::sync::Arc;

/// Every backend name, in the order messages list them.
pub const BACKEND_NAMES: [&str; 3] = ["cuda", "host", "virtual"];

/// The backend named `name`: the CUDA driver's, or simulated devices with `limits` (an empty
/// list: one default device; the CUDA backend takes its devices from the driver and ignores
/// them). An unknown name is `ERR_ARENA_INVALID_ARGUMENT` listing the names.
pub fn backend_named(name: &str, limits: &[DeviceLimits]) -> Result<Arc<dyn Backend>> {
    if name == "cuda" {
        return Ok(Arc::new(CudaBackend::new()?));
    }
    match SimKind::named(name) {
        Some(kind) => Ok(Arc::new(SimBackend::new(kind, limits))),
        None => Err(unknown_backend(name, &BACKEND_NAMES)),
    }
}

/// The error for a backend name that is not one of `known` (a caller may take fewer than
/// all of [`BACKEND_NAMES`]); the name is cut at 40 characters.
pub fn unknown_backend(name: &str, known: &[&str]) -> ArenaError {
    let list = match known {
        [one] => format!("'{one}'"),
        [rest @ .., last] => format!(
            "{} or '{last}'",
            rest.iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        [] => String::new(),
    };
    let shown: String = name.chars().take(40).collect();
    ArenaError::InvalidArgument {
        reason: format!("backend must be {list}, got {shown:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simulated_backend_is_made_by_its_name() {
        for name in ["host", "virtual"] {
            let b = backend_named(name, &[]).expect("made");
            assert_eq!(b.name(), name);
            assert_eq!(b.device_count(), 1);
        }
    }

    #[test]
    fn an_unknown_name_is_an_invalid_argument_listing_the_names() {
        let e = backend_named("gpu", &[]).expect_err("refused");
        assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
        assert_eq!(
            e.to_string(),
            "invalid argument: backend must be 'cuda', 'host' or 'virtual', got \"gpu\""
        );
    }

    #[test]
    fn a_caller_taking_fewer_backends_lists_only_those() {
        let e = unknown_backend("host", &["cuda", "virtual"]);
        assert!(e
            .to_string()
            .ends_with("backend must be 'cuda' or 'virtual', got \"host\""));
    }
}
