//! Issue 25: a pool's threads taking turns hold about the live set whatever numbers (and so
//! sub-arenas) they get. A thread takes the lowest number no live thread holds, so the order of
//! a pool's numbers follows which other threads exited meanwhile: here, sixteen threads that
//! used an arena hold numbers, and one exits before each pool thread's first turn, in an order
//! the test chooses. A binary of its own: other tests' threads would take the numbers.

mod common;
use common::*;
use cuda_arena_core::Allocator;
use std::sync::Arc;

const THREADS: usize = 16;

/// Held ÷ live after two rounds of turns, pool thread `i` starting right after holder
/// `exits(i)` gave its number back.
fn held_over_live(exits: &dyn Fn(usize) -> usize) -> f64 {
    let other = Arc::new(virtual_vm_arena(&[]));
    let mut holders: Vec<Option<Worker>> = (0..THREADS)
        .map(|_| {
            let w = Worker::new();
            let o = other.clone();
            // Using an arena is what gives a thread its number.
            w.run(move || o.free(alloc(&*o, 256)).expect("live"));
            Some(w)
        })
        .collect();
    let a = Arc::new(virtual_vm_arena(&[]));
    let sizes = Arc::new(pool_working_set());
    let pool: Vec<Worker> = (0..THREADS).map(|_| Worker::new()).collect();
    for round in 0..2 {
        for (i, w) in pool.iter().enumerate() {
            if round == 0 {
                drop(holders[exits(i)].take());
            }
            let (a, sizes) = (a.clone(), sizes.clone());
            w.run(move || pool_turn(&*a, &sizes));
        }
    }
    a.check_invariants().expect("consistent");
    a.stats().total_allocated as f64 / sizes.iter().sum::<u64>() as f64
}

#[test]
fn pool_threads_taking_turns_hold_about_the_live_set_whatever_order_their_numbers_come_in() {
    let orders: [(&str, &dyn Fn(usize) -> usize); 3] = [
        ("ascending", &|i| i),
        ("descending", &|i| THREADS - 1 - i),
        ("shuffled", &|i| (7 * i) % THREADS),
    ];
    let held: Vec<(&str, f64)> = orders
        .iter()
        .map(|(n, f)| (*n, held_over_live(*f)))
        .collect();
    eprintln!("held/live: {held:?}");
    for (name, h) in held {
        assert!(h <= 1.10, "numbers in {name} order: held/live {h:.3}");
    }
}
