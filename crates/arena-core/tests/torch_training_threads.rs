//! Issue 25: PyTorch's training step on its two threads. The forward pass and the optimizer run
//! on Python's main thread, the backward pass on autograd's, which frees the forward pass's
//! activations; the threads take turns. Their ops, tagged with the thread that made them
//! (GPT-2 and ResNet-50 training on an H100, `benches/traces/torch/*.threads.txt`: recorded by
//! `scripts/gpu/models.py W native --snapshot S --snapshot-stacks`, written by
//! `scripts/gpu/tag_threads.py S`), replayed on
//! two threads taking turns hold exactly what one thread doing all of it holds: on an H100,
//! with the backward pass in a sub-arena of its own, GPT-2 held 13946 MiB where one thread held
//! 13864.

mod common;
use common::*;
use cuda_arena_core::Allocator;
use std::sync::{Arc, Mutex};

/// One op of a tagged trace: allocate `size` bytes as the next id, or free id `id`, by
/// `thread` (0: Python's main thread, 1: autograd's).
#[derive(Debug, Clone, Copy)]
enum Op {
    Alloc { size: u64, thread: usize },
    Free { id: usize, thread: usize },
}

fn read(name: &str) -> Vec<Op> {
    let path = format!(
        "{}/../../benches/traces/torch/{name}.threads.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let w: Vec<u64> = l[2..]
                .split(' ')
                .map(|x| x.parse().expect("a number"))
                .collect();
            let thread = w[1] as usize;
            match &l[..1] {
                "a" => Op::Alloc { size: w[0], thread },
                _ => Op::Free {
                    id: w[0] as usize,
                    thread,
                },
            }
        })
        .collect()
}

/// Replays `ops` in order, each run of consecutive ops of one thread on that thread's worker;
/// returns the most bytes held after any op and MaxInUse.
fn replay(ops: &[Op], workers: &[Worker]) -> (u64, u64) {
    let a = Arc::new(virtual_vm_arena(&[]));
    let live: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut peak = 0;
    let mut at = 0;
    while at < ops.len() {
        let thread = |op: &Op| match *op {
            Op::Alloc { thread, .. } | Op::Free { thread, .. } => thread,
        };
        let t = thread(&ops[at]);
        let end = ops[at..]
            .iter()
            .position(|op| thread(op) != t)
            .map_or(ops.len(), |n| at + n);
        let (a2, live2, batch) = (a.clone(), live.clone(), ops[at..end].to_vec());
        peak = peak.max(workers[t % workers.len()].run(move || {
            let mut live = live2.lock().expect("live");
            let mut peak = 0;
            for op in batch {
                match op {
                    Op::Alloc { size, .. } => live.push(alloc(&*a2, size)),
                    Op::Free { id, .. } => a2.free(live[id]).expect("live"),
                }
                peak = peak.max(a2.stats().total_allocated);
            }
            peak
        }));
        at = end;
    }
    a.check_invariants().expect("consistent");
    (peak, a.stats().max_in_use)
}

fn two_threads_hold_what_one_holds(name: &str) {
    let ops = read(name);
    let one = replay(&ops, &[Worker::shared()]);
    let two = replay(&ops, &[Worker::shared(), Worker::shared()]);
    eprintln!(
        "{name}: held {} / {} MiB on one / two threads, MaxInUse {} MiB",
        one.0 >> 20,
        two.0 >> 20,
        one.1 >> 20
    );
    assert_eq!(two, one, "{name}: two threads taking turns held more");
}

#[test]
fn gpt2_training_on_its_two_threads_holds_what_one_thread_holds() {
    two_threads_hold_what_one_holds("gpt2-train");
}

#[test]
fn resnet50_training_on_its_two_threads_holds_what_one_thread_holds() {
    two_threads_hold_what_one_holds("resnet50-train");
}
