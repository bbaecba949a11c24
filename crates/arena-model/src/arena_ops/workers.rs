//! Threads that make the model's allocator calls, one call at a time, so that an arena sees
//! allocations, reserves and frees come from several threads (each with a sub-arena of its
//! own) while the model still knows the order they happened in.

use super::*;
use std::sync::mpsc::{channel, Sender};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// A thread that runs the jobs sent to it, in order.
#[derive(Debug)]
pub(super) struct Worker {
    jobs: Sender<Job>,
    handle: JoinHandle<()>,
}

impl Worker {
    pub(super) fn new() -> Self {
        let (jobs, rx) = channel::<Job>();
        let handle = std::thread::spawn(move || {
            while let Ok(job) = rx.recv() {
                job();
            }
        });
        Worker { jobs, handle }
    }
}

impl Model {
    /// Runs `f` on the allocator from worker `thread % workers` and waits for its answer, or
    /// here when the model has no workers.
    pub(super) fn on<T: Send + 'static>(
        &self,
        thread: usize,
        f: impl FnOnce(&dyn Allocator) -> T + Send + 'static,
    ) -> Result<T, String> {
        let Some(w) = self.workers.get(thread % self.workers.len().max(1)) else {
            return Ok(f(self.subject.get()));
        };
        let (tx, rx) = channel();
        let subject = self.subject.clone();
        let job: Job = Box::new(move || {
            let _ = tx.send(f(subject.get()));
        });
        w.jobs
            .send(job)
            .map_err(|_| format!("worker {thread} is gone"))?;
        rx.recv()
            .map_err(|_| format!("worker {thread} panicked during a call"))
    }

    /// Ends and joins every worker; an error if one panicked.
    pub(super) fn stop_workers(&mut self) -> Result<(), String> {
        for w in std::mem::take(&mut self.workers) {
            drop(w.jobs);
            w.handle
                .join()
                .map_err(|_| "a worker panicked".to_string())?;
        }
        Ok(())
    }
}
