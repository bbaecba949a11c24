//! The free lists' unit tests: best fit, sets, classes, and the invariants after random use.

use super::*;

/// A xorshift64 sequence from `seed`: the random tests' operations, the same on every run.
fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

#[test]
fn sets_ascend_with_size_and_each_lies_in_one_bin() {
    use crate::arena::bins::{bin_for_size, bin_size};
    let mut sizes: Vec<u64> = (0..64)
        .flat_map(|k| [1u64 << k, (1u64 << k) + (1u64 << k) / 4 * 3])
        .collect();
    sizes.extend([0, 255, 256, 257, 383, 384, 511, 640, 767, u64::MAX]);
    sizes.sort_unstable();
    for w in sizes.windows(2) {
        assert!(
            set_for_size(w[0]) <= set_for_size(w[1]),
            "{} then {}",
            w[0],
            w[1]
        );
    }
    for &size in &sizes {
        assert!(
            sets_of_bin(bin_for_size(size)).contains(&set_for_size(size)),
            "{size}"
        );
    }
    // Sixty-four sets per bin below the last: from bin 6 (16 KiB) on, chunk sizes
    // (multiples of 256) of a bin fall in sets of their own, 256 bytes apart; below,
    // fewer sizes spread over the bin's sets.
    let firsts: Vec<usize> = (0..=64).map(|i| set_for_size(16_384 + 256 * i)).collect();
    assert_eq!(firsts, (384..=448).collect::<Vec<_>>());
    assert_eq!(
        [1024, 1280, 1536, 1792, 2048].map(set_for_size),
        [128, 144, 160, 176, 192]
    );
    assert_eq!(set_for_size(bin_size(20)), 1280);
    assert_eq!(set_for_size(u64::MAX), SETS - 1);
}

#[test]
fn bin_ids_lists_a_bin_in_size_then_address_order_across_its_sets() {
    let mut f = FreeBins::new();
    for (id, size, addr) in [
        (0, 4096 + 3072, 0x1000u64),
        (1, 4096, 0x9000),
        (2, 4096 + 1024, 0x2000),
        (3, 4096, 0x3000),
    ] {
        f.insert(id, size, addr);
    }
    assert_eq!(f.bin_ids(4), vec![3, 1, 2, 0]);
}

#[test]
fn bin_ids_lists_only_its_bin_class_by_class_up_to_the_unbounded_last() {
    let mut f = FreeBins::new();
    for (id, size, addr, class) in [
        (0, 3840, 0x1000u64, 0),
        (1, 4096, 0x2000, 1),
        (2, 7936, 0x3000, 0),
        (3, 8192, 0x4000, 0),
        (4, 4096, 0x5000, 0),
        (5, 1 << 40, 0x6000, 0),
        (6, crate::arena::bins::bin_size(NUM_BINS - 1), 0x7000, 1),
    ] {
        f.insert_class(id, size, addr, class);
    }
    assert_eq!(f.bin_ids(3), vec![0]);
    assert_eq!(f.bin_ids(4), vec![4, 2, 1]);
    assert_eq!(f.bin_ids(5), vec![3]);
    assert_eq!(f.bin_ids(NUM_BINS - 1), vec![5, 6]);
    assert!(f.bin_ids(6).is_empty());
}

#[test]
fn best_fit_takes_the_smallest_adequate_chunk() {
    let mut f = FreeBins::new();
    f.insert(0, 4096, 0x10000);
    f.insert(1, 1024, 0x20000);
    f.insert(2, 2048, 0x30000);
    assert_eq!(f.best_fit(1500, |_| true), Some(2));
    assert_eq!(f.best_fit(1024, |_| true), Some(1));
    assert_eq!(f.best_fit(4000, |_| true), Some(0));
    assert_eq!(f.best_fit(4097, |_| true), None);
}

#[test]
fn equal_sizes_go_to_the_lowest_address() {
    let mut f = FreeBins::new();
    for (id, addr) in [(0, 0x5000u64), (1, 0x1000), (2, 0x3000)] {
        f.insert(id, 512, addr);
    }
    assert_eq!(f.best_fit(256, |_| true), Some(1));
    assert_eq!(f.best_fit(256, |id| id != 1), Some(2));
}

#[test]
fn rejected_chunks_are_skipped_across_bins() {
    let mut f = FreeBins::new();
    f.insert(0, 256, 0);
    f.insert(1, 1 << 20, 0x1000);
    assert_eq!(f.best_fit(256, |id| id == 1), Some(1));
    assert_eq!(f.best_fit(256, |_| false), None);
}

#[test]
fn chunks_below_the_size_in_the_start_bin_are_skipped() {
    let mut f = FreeBins::new();
    f.insert(0, 4096 + 256, 0);
    f.insert(1, 4096 + 1024, 0x10000);
    assert_eq!(f.best_fit(4096 + 512, |_| true), Some(1));
}

#[test]
fn a_search_sees_only_the_chunks_of_its_class() {
    let mut f = FreeBins::new();
    f.insert_class(0, 1024, 0x1000, 1);
    f.insert_class(1, 2048, 0x2000, 0);
    assert_eq!(f.best_fit_class(0, 512, |_| true), Some(1));
    assert_eq!(f.best_fit_class(1, 512, |_| true), Some(0));
    assert_eq!(f.best_fit_class(1, 1500, |_| true), None);
    f.check().expect("consistent");
}

#[test]
fn best_fit_any_takes_the_smallest_adequate_chunk_of_any_class() {
    let mut f = FreeBins::new();
    f.insert_class(0, 4096, 0x1000, 0);
    f.insert_class(1, 2048, 0x9000, 1);
    f.insert_class(2, 2048, 0x5000, 0);
    assert_eq!(f.best_fit_any(1024, |_| true), Some(2));
    assert_eq!(f.best_fit_any(1024, |id| id != 2), Some(1));
    assert_eq!(f.best_fit_any(3000, |_| true), Some(0));
}

#[test]
fn a_chunk_keeps_its_class_when_rekeyed_or_replaced() {
    let mut f = FreeBins::new();
    f.insert_class(0, 1024, 0x1000, 1);
    f.insert_class(5, 1024, 0x8000, 1);
    f.rekey(0, 1 << 20, 0x1000);
    f.replace(5, 6, 512, 0x8200);
    f.check().expect("consistent");
    assert_eq!((f.class_of(0), f.class_of(6)), (1, 1));
    assert_eq!(f.best_fit_class(0, 256, |_| true), None);
    assert_eq!(f.best_fit_class(1, 256, |_| true), Some(6));
}

#[test]
fn random_rekeys_and_replacements_keep_the_order_and_the_best_fit() {
    let mut f = FreeBins::new();
    // Chunk id -> its key, for the brute-force answer.
    let mut live: Vec<(u32, u64, u64)> = Vec::new();
    let mut next = xorshift(777);
    let mut fresh = 0u32;
    for _ in 0..5000 {
        // Small size steps, so keys often stay between their neighbours (in place) and
        // sometimes pass them (moved).
        let size = 256 * (1 + next() % 64);
        let addr = (next() % (1 << 30)) << 8;
        if live.len() < 50 || next().is_multiple_of(4) {
            f.insert(fresh, size, addr);
            live.push((fresh, size, addr));
            fresh += 1;
            continue;
        }
        let k = (next() as usize) % live.len();
        let (id, old_size, old_addr) = live[k];
        let (size, addr) = match next() % 3 {
            0 => (old_size + 256, old_addr),
            1 => (old_size.saturating_sub(256).max(256), old_addr + 256),
            _ => (size, addr),
        };
        if live.iter().any(|&(_, _, a)| a == addr) && addr != old_addr {
            continue;
        }
        if next().is_multiple_of(2) {
            f.rekey(id, size, addr);
            live[k] = (id, size, addr);
        } else {
            f.replace(id, fresh, size, addr);
            live[k] = (fresh, size, addr);
            fresh += 1;
        }
    }
    f.check().expect("consistent");
    assert_eq!(f.len(), live.len());
    for min in [256, 4096, 10_000, 16_384] {
        let want = live
            .iter()
            .filter(|k| k.1 >= min)
            .min_by_key(|k| (k.1, k.2))
            .map(|k| k.0);
        assert_eq!(f.best_fit(min, |_| true), want);
    }
}

#[test]
fn find_any_sees_every_chunk_of_every_class_and_stops_at_the_first_taken() {
    let mut f = FreeBins::new();
    let chunks = [
        (0u32, 256u64, 0x1000u64, 0u8),
        (1, 1 << 20, 0x2000, 1),
        (2, 1 << 40, 0x3000, 0),
    ];
    for (id, size, addr, class) in chunks {
        f.insert_class(id, size, addr, class);
    }
    let mut seen = Vec::new();
    assert_eq!(
        f.find_any(|id| {
            seen.push(id);
            false
        }),
        None
    );
    seen.sort_unstable();
    assert_eq!(seen, [0, 1, 2]);
    // Whichever order it visits in, it asks nothing after the first yes.
    let mut asked = Vec::new();
    assert_eq!(
        f.find_any(|id| {
            asked.push(id);
            id == 0
        }),
        Some(0)
    );
    assert_eq!(asked.last(), Some(&0), "asked {asked:?}");
    assert_eq!(FreeBins::new().find_any(|_| true), None);
}

#[test]
fn the_next_non_empty_set_is_found_across_bitmap_words() {
    // The smallest size of set `f` (from bin 6 on, where every set has sizes of its own):
    // its power of two and its 64th within it.
    let first_size = |f: usize| -> u64 {
        let (log2, sub) = (f / SUB, (f % SUB) as u64);
        (256u64 << log2) + ((256u64 << log2) / SUB as u64) * sub
    };
    let mut f = FreeBins::new();
    // Sets at both sides of every word boundary the searches below cross, and the last.
    let sets = [447usize, 448, 511, 512, 575, 576, SETS - 1];
    for (id, &set) in sets.iter().enumerate() {
        let size = if set == SETS - 1 {
            !255u64
        } else {
            first_size(set)
        };
        assert_eq!(set_for_size(size), set, "size {size}");
        f.insert(id as u32, size, 0x1000 * id as u64);
    }
    f.check().expect("consistent");
    for (id, &set) in sets.iter().enumerate() {
        let size = f.key(id as u32).0;
        // Just above a chunk's size, the next chunk up is the fit, whatever word it is in.
        if let Some(above) = size.checked_add(256) {
            let want = (id + 1 < sets.len()).then_some(id as u32 + 1);
            assert_eq!(f.best_fit(above, |_| true), want, "from set {set}");
        }
        assert_eq!(f.best_fit(size, |_| true), Some(id as u32), "at set {set}");
    }
    // Emptying a word's only set clears its bit: the search skips the whole word.
    assert!(f.remove(2) && f.remove(3));
    assert_eq!(f.best_fit(f.key(1).0 + 256, |_| true), Some(4));
    f.check().expect("consistent");
}

#[test]
fn remove_unlinks_and_reports_absence() {
    let mut f = FreeBins::new();
    f.insert(3, 256, 0);
    assert!(f.remove(3));
    assert!(!f.remove(3));
    assert!(f.is_empty());
    assert_eq!(f.best_fit(256, |_| true), None);
    f.check().expect("consistent");
}

#[test]
fn many_random_inserts_and_removes_keep_the_structure_sound() {
    let mut f = FreeBins::new();
    let mut live = Vec::new();
    let mut next = xorshift(12345);
    for id in 0..2000u32 {
        if next().is_multiple_of(3) && !live.is_empty() {
            let k = (next() as usize) % live.len();
            let gone: u32 = live.swap_remove(k);
            assert!(f.remove(gone));
        }
        let size = 256 * (1 + next() % 4096);
        f.insert(id, size, u64::from(id) * 0x100_0000);
        live.push(id);
    }
    f.check().expect("consistent");
    assert_eq!(f.len(), live.len());
    let want = live
        .iter()
        .map(|&id| (f.key(id).0, f.key(id).1, id))
        .filter(|k| k.0 >= 300_000)
        .min();
    assert_eq!(f.best_fit(300_000, |_| true), want.map(|k| k.2));
}

#[test]
fn a_set_past_the_list_bound_becomes_a_treap_and_an_emptied_one_a_list_again() {
    // A set of one size (256 bytes) and one of several (32 KiB + 256 and 32 KiB + 512).
    for size in [256, 33_024] {
        let mut f = FreeBins::new();
        let s = slot(0, size);
        let bound = list_max(s);
        // Descending addresses: every insertion goes to the head, none walks.
        for id in 0..=bound {
            assert!(!f.is_tree(s), "a list of {id}");
            f.insert(id, size, u64::from(bound - id) << 16);
            f.check().expect("consistent");
        }
        assert!(f.is_tree(s), "{size}");
        assert_eq!(f.best_fit(size, |_| true), Some(bound));
        for id in 0..=bound {
            assert!(f.remove(id));
            f.check().expect("consistent");
        }
        assert!(!f.is_tree(s));
        f.insert(0, size, 0);
        f.check().expect("consistent");
    }
    assert_eq!(
        (list_max(slot(0, 256)), list_max(slot(1, 33_024))),
        (LIST_MAX, MIXED_LIST_MAX)
    );
}

#[test]
fn crowded_sets_answer_as_a_brute_force_search_after_every_operation() {
    let mut f = FreeBins::new();
    let mut live: Vec<(u32, u64, u64)> = Vec::new();
    let mut next = xorshift(4242);
    let mut fresh = 0u32;
    let mut addr = 0u64;
    for _ in 0..20_000 {
        // Four sizes, four sets (three of one size): sets fill past their list bounds, empty
        // and fill again.
        let size = [256, 512, 768, 32_768 + 256][(next() % 4) as usize];
        addr += 256 * (1 + next() % 8);
        let a = if next().is_multiple_of(2) {
            addr
        } else {
            u64::MAX / 2 - addr
        };
        match next() % 8 {
            _ if live.len() < 4 => {}
            0..=2 => {
                let (id, ..) = live.swap_remove((next() as usize) % live.len());
                assert!(f.remove(id));
            }
            3 => {
                let k = (next() as usize) % live.len();
                f.rekey(live[k].0, size, a);
                live[k] = (live[k].0, size, a);
                f.check().expect("consistent");
                continue;
            }
            4 => {
                let k = (next() as usize) % live.len();
                f.replace(live[k].0, fresh, size, a);
                live[k] = (fresh, size, a);
                fresh += 1;
                f.check().expect("consistent");
                continue;
            }
            _ => {}
        }
        if live.len() < 400 {
            f.insert(fresh, size, a);
            live.push((fresh, size, a));
            fresh += 1;
        }
        f.check().expect("consistent");
        let min = [256, 512, 600, 32_768][(next() % 4) as usize];
        let skip = next() % 3;
        let accept = |id: u32| u64::from(id) % 3 != skip;
        let want = live
            .iter()
            .filter(|k| k.1 >= min && accept(k.0))
            .min_by_key(|k| (k.1, k.2))
            .map(|k| k.0);
        assert_eq!(f.best_fit(min, accept), want);
    }
    assert_eq!(f.len(), live.len());
}
