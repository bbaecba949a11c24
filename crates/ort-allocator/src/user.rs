//! One user of a cuda-arena allocator, as a view holds it: the allocator, the host-owned
//! streams of its users, and what to do when the user lets go (count one user fewer in the
//! factory, which retires the allocator at the last one).

use cuda_arena_core::{Allocator, Created, Factory, ForeignStreams, Result};
use std::sync::Arc;

type OnRelease = Box<dyn FnOnce(&Arc<dyn Allocator>) + Send + Sync>;

/// One user of an allocator. Dropping it releases the user.
pub struct AllocatorUser {
    allocator: Arc<dyn Allocator>,
    streams: Arc<ForeignStreams>,
    /// Counts the user out of its factory; `None` for an unshared allocator.
    on_release: Option<OnRelease>,
}

impl std::fmt::Debug for AllocatorUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocatorUser")
            .field("allocator", &self.allocator.info())
            .field("streams", &self.streams.len())
            .finish_non_exhaustive()
    }
}

impl AllocatorUser {
    /// The user `created` of `factory` (what `create_allocator` returned); releasing it is
    /// `factory.release_allocator`.
    pub fn from_factory(factory: Arc<Factory>, created: Created) -> Self {
        AllocatorUser {
            allocator: created.allocator,
            streams: created.streams,
            on_release: Some(Box::new(move |a| {
                factory.release_allocator(a);
            })),
        }
    }

    /// One more user of `allocator`, which some user of `factory` holds (for example a C
    /// handle); `streams` are that allocator's host-owned streams. `ERR_ARENA_RELEASED` if
    /// no user holds it any more.
    pub fn retain(
        factory: Arc<Factory>,
        allocator: Arc<dyn Allocator>,
        streams: Arc<ForeignStreams>,
    ) -> Result<Self> {
        factory.retain_allocator(&allocator)?;
        Ok(AllocatorUser {
            allocator,
            streams,
            on_release: Some(Box::new(move |a| {
                factory.release_allocator(a);
            })),
        })
    }

    /// An allocator no factory shares: releasing the user just drops this reference.
    pub fn unshared(allocator: Arc<dyn Allocator>) -> Self {
        AllocatorUser {
            allocator,
            streams: Arc::new(ForeignStreams::new()),
            on_release: None,
        }
    }

    /// The allocator.
    pub fn allocator(&self) -> &Arc<dyn Allocator> {
        &self.allocator
    }

    /// The host-owned streams of the allocator, by handle.
    pub fn streams(&self) -> &Arc<ForeignStreams> {
        &self.streams
    }
}

impl Drop for AllocatorUser {
    fn drop(&mut self) {
        if let Some(release) = self.on_release.take() {
            release(&self.allocator);
        }
    }
}
