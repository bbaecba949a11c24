//! The one place a backend's name (`cuda`, `host`, `virtual`: what the Node factory, the
//! `replay` command, the C ABI and `CUDA_ARENA_TORCH_BACKEND` take) becomes a backend.

use crate::CudaBackend;
use cuda_arena_core::{
    ArenaError, Backend, DeviceLimits, Result, SimBackend, SimEvents, SimKind, StreamEvents,
};
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
    let Some(kind) = SimKind::named(name) else {
        return Err(unknown_backend(name, &BACKEND_NAMES));
    };
    let backend = SimBackend::new(kind, limits);
    let value = match std::env::var(ENV_SIM_STREAM_EVENTS) {
        Ok(v) => v,
        Err(std::env::VarError::NotPresent) => String::new(),
        // Not ignored: a value that names nothing is an error, whatever its bytes.
        Err(std::env::VarError::NotUnicode(v)) => v.to_string_lossy().into_owned(),
    };
    Ok(Arc::new(match sim_stream_events(&value)? {
        Some(events) => backend.with_stream_events(events),
        None => backend,
    }))
}

/// Gives the simulated backends' host streams events (the path the `cuda` backend's streams
/// take), so that the C, Node and PyTorch entry points can be tested on it away from a GPU:
/// `immediate` (an event is complete when recorded, as on a stream with no work queued) or
/// `pending` (a stream's work runs until the arena waits for it: for one of its events or for
/// the device); empty or unset, none. Read when a simulated backend is made.
pub const ENV_SIM_STREAM_EVENTS: &str = "CUDA_ARENA_SIM_STREAM_EVENTS";

/// The events `value` of [`ENV_SIM_STREAM_EVENTS`] names; anything else is
/// `ERR_ARENA_INVALID_ARGUMENT`.
fn sim_stream_events(value: &str) -> Result<Option<Arc<dyn StreamEvents>>> {
    let events: Arc<dyn StreamEvents> = match value {
        "" => return Ok(None),
        "immediate" => SimEvents::immediate(),
        "pending" => SimEvents::new(),
        other => {
            let shown: String = other.chars().take(40).collect();
            return Err(ArenaError::InvalidArgument {
                reason: format!(
                    "{ENV_SIM_STREAM_EVENTS} must be 'immediate', 'pending' or empty, got {shown:?}"
                ),
            });
        }
    };
    Ok(Some(events))
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
    fn the_simulated_events_are_immediate_pending_or_none() {
        assert!(sim_stream_events("").expect("none").is_none());
        for mode in ["immediate", "pending"] {
            assert!(sim_stream_events(mode).expect(mode).is_some(), "{mode}");
        }
    }

    #[test]
    fn any_other_simulated_events_value_is_an_invalid_argument_naming_the_variable() {
        for bad in [
            "Immediate",
            " pending",
            "1",
            "immediate,pending",
            "x".repeat(100).as_str(),
        ] {
            let e = sim_stream_events(bad).expect_err("refused");
            assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT", "{bad}");
            assert!(e.to_string().contains(ENV_SIM_STREAM_EVENTS), "{e}");
            assert!(e.to_string().len() < 200, "the value is cut: {e}");
        }
    }

    #[test]
    fn a_caller_taking_fewer_backends_lists_only_those() {
        let e = unknown_backend("host", &["cuda", "virtual"]);
        assert!(e
            .to_string()
            .ends_with("backend must be 'cuda' or 'virtual', got \"host\""));
    }
}
