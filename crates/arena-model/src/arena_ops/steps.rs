//! Each operation on the allocator and on the model: allocate, free, a bogus free, shrink,
//! forget a stream, and copies in and out.

use super::checks::no_wholly_free_region;
use super::*;

impl Model {
    /// Runs an alloc, alloc_on_stream or reserve on `thread` and checks its outcome.
    pub(super) fn allocate(
        &mut self,
        size: u64,
        stream: Option<usize>,
        reserve: bool,
        thread: usize,
    ) -> Result<(), String> {
        let before = self.a().memory_log();
        let raw_allocs = self.raw.raw_stats().raw_allocs;
        let waits = self.vm.as_ref().map_or(0, |v| v.synchronizations());
        let on = stream.map(|s| self.streams[s].clone());
        let result = self.on(thread, move |a| match (reserve, on) {
            (true, _) => a.reserve(size),
            (false, Some(s)) => a.alloc_on_stream(size, &s),
            (false, None) => a.alloc(size),
        })?;
        let after = self.a().memory_log();
        // The pool serves a reserve as a plain allocation.
        let consumer = match stream {
            Some(s) if !reserve => s + 1,
            _ => 0,
        };
        let not_stream_aware = stream.is_some() && !reserve && !self.a().is_stream_aware();
        match result {
            Err(e) if not_stream_aware && e.code() == "ERR_ARENA_INVALID_ARGUMENT" => {
                self.check_unchanged(&before, &after)?
            }
            _ if not_stream_aware => {
                return Err(format!(
                    "alloc_on_stream on an allocator without streams gave {result:?}"
                ))
            }
            Ok(None) if size == 0 => self.check_unchanged(&before, &after)?,
            Ok(Some(addr)) if size > 0 => {
                if self.vm.as_ref().map_or(0, |v| v.synchronizations()) != waits {
                    // The arena waited for the device: every free before is past, for
                    // every stream.
                    self.freed.clear();
                }
                if self.vm.is_some() {
                    // Extents unmapped whole went back to the device, though a new one may
                    // have been mapped at the same addresses (for another thread's
                    // sub-arena, say): what was freed there is no stream's any more.
                    self.drop_released(&regions_removed(&before, &after));
                    self.handed_out(addr, size, reserve, consumer, &[], raw_allocs)?;
                    if after.stats.num_arena_shrinkages > before.stats.num_arena_shrinkages {
                        self.tally.released_then_succeeded += 1;
                    }
                    self.drop_unmapped(&before, &after);
                } else {
                    let released = regions_removed(&before, &after);
                    self.handed_out(addr, size, reserve, consumer, &released, raw_allocs)?
                }
            }
            Err(e) if e.code() == "ERR_ARENA_OUT_OF_MEMORY" => {
                self.tally.out_of_memory += 1;
                self.check_unchanged(&before, &after)?;
            }
            other => return Err(format!("gave {other:?}")),
        }
        self.check(&after)
    }

    /// Frees a live allocation on `thread`.
    pub(super) fn free(&mut self, pick: usize, thread: usize) -> Result<(), String> {
        if self.live.is_empty() {
            return Ok(());
        }
        let l = self.live.swap_remove(pick % self.live.len());
        if self.host {
            self.verify_pattern(&l)?;
        }
        let before = self.a().memory_log();
        let addr = l.addr;
        self.on(thread, move |a| a.free(addr))?
            .map_err(|e| format!("free of live {l:?}: {e}"))?;
        let keeps_memory = match self.kind {
            Kind::Arena | Kind::ArenaWithoutStreams => !l.reserve,
            Kind::Pool => true,
            Kind::Plain => false,
        };
        if keeps_memory {
            self.freed.push(Freed {
                start: l.addr,
                end: l.addr + l.allocated,
                stream: l.stream,
                sync_id: l.sync_id,
            });
        }
        let log = self.a().memory_log();
        self.drop_unmapped(&before, &log);
        self.check(&log)
    }

    pub(super) fn free_bogus(&mut self, pick: usize, kind: u8) -> Result<(), String> {
        let addr = match (kind, self.live.is_empty()) {
            (0, false) => {
                let l = self.live[pick % self.live.len()];
                l.addr + 1 + (pick as u64 % 255)
            }
            (1, _) => match self.freed.get(pick % self.freed.len().max(1)) {
                Some(f) if !self.live.iter().any(|l| l.addr == f.start) => f.start,
                _ => 0x1000,
            },
            (3, _) => (u64::MAX - (pick as u64 % 4096) * 256) & !255,
            _ => 0x1000 + (pick as u64 % 1000) * 256,
        };
        let before = self.a().memory_log();
        let result = self.a().free(addr);
        if code_of(&result) != Some("ERR_ARENA_UNKNOWN_POINTER") {
            return Err(format!("free({addr:#x}) of a bad address gave {result:?}"));
        }
        self.tally.refused_frees += 1;
        let after = self.a().memory_log();
        if before != after {
            return Err(format!("a refused free({addr:#x}) changed the allocator"));
        }
        self.check(&after)
    }

    pub(super) fn shrink(&mut self) -> Result<(), String> {
        let before = self.a().memory_log();
        self.a().shrink().map_err(|e| e.to_string())?;
        let after = self.a().memory_log();
        let in_use: u64 = self.live.iter().map(|l| l.allocated).sum();
        match self.kind {
            Kind::Arena | Kind::ArenaWithoutStreams if self.vm.is_some() => {
                no_wholly_free_region(&after)?;
                self.no_free_mapping_mapped(&after)?;
                self.check_only_unmapped(&before, &after)?;
                self.drop_unmapped(&before, &after);
            }
            Kind::Arena | Kind::ArenaWithoutStreams => {
                no_wholly_free_region(&after)?;
                if after.live_chunks() != before.live_chunks() {
                    return Err("shrink changed live chunks".into());
                }
                let removed = regions_removed(&before, &after);
                let mut expect = before.stats;
                expect.num_arena_extensions -= removed.len() as u64;
                expect.num_arena_shrinkages += removed.len() as u64;
                expect.total_allocated -= removed.iter().map(|r| r.2).sum::<u64>();
                if after.stats != expect {
                    return Err(format!("shrink changed stats to {:?}", after.stats));
                }
                self.drop_released(&removed);
            }
            Kind::Pool => {
                let keep = self.config.cuda_mempool_bytes_to_keep_on_shrink;
                let cached = self.outstanding().saturating_sub(in_use);
                if cached > keep {
                    return Err(format!(
                        "the pool keeps {cached} bytes after shrinking to {keep}"
                    ));
                }
                if after.stats.num_arena_shrinkages != before.stats.num_arena_shrinkages + 1 {
                    return Err("a pool shrink is not counted".into());
                }
            }
            Kind::Plain => {
                if before != after {
                    return Err("shrink changed the plain allocator".into());
                }
            }
        }
        self.check(&after)
    }

    /// The allocator forgot stream `s` (reset or released): its memory is anyone's now.
    pub(super) fn forget_stream(&mut self, before: &MemoryLog) -> Result<MemoryLog, String> {
        let after = self.a().memory_log();
        if after.live_chunks() != before.live_chunks()
            || after.stats != before.stats
            || after.reserves != before.reserves
        {
            return Err("forgetting a stream changed live memory or stats".into());
        }
        Ok(after)
    }

    pub(super) fn untag(&mut self, s: usize) {
        for l in self.live.iter_mut().filter(|l| l.stream == s + 1) {
            l.stream = 0;
        }
        for f in self.freed.iter_mut().filter(|f| f.stream == s + 1) {
            f.stream = 0;
        }
    }

    pub(super) fn access(&mut self, pick: usize, kind: u8) -> Result<(), String> {
        if self.live.is_empty() {
            return Ok(());
        }
        let i = pick % self.live.len();
        let l = self.live[i];
        let before = self.a().memory_log();
        let in_range_code = if self.host {
            None
        } else {
            Some("ERR_ARENA_INVALID_ARGUMENT")
        };
        match kind {
            0 => {
                let n = l.requested.min(PATTERN);
                let mut buf = vec![0; n as usize];
                let r = self.a().read(l.addr, &mut buf);
                if code_of(&r) != in_range_code {
                    return Err(format!("read of live {l:?} gave {r:?}"));
                }
                if self.host {
                    if buf != pattern(l.tag, 0, n) {
                        return Err(format!("{l:?} reads back {buf:?}"));
                    }
                    self.tally.host_read_backs += 1;
                }
            }
            1 => {
                let end = l.addr + l.requested;
                let w = self.a().write(end - 1, &[0xEE, 0xEE]);
                let f = self.a().fill(l.addr, 0xEE, u64::MAX - pick as u64);
                let mut buf = [0u8; 2];
                let r = self.a().read(end - 1, &mut buf);
                for (what, code) in [
                    ("write", code_of(&w)),
                    ("fill", code_of(&f)),
                    ("read", code_of(&r)),
                ] {
                    if code != Some("ERR_ARENA_UNKNOWN_POINTER") {
                        return Err(format!("a {what} past the end of {l:?} gave {code:?}"));
                    }
                }
                self.tally.refused_accesses += 1;
            }
            2 => {
                let renewed = Live {
                    tag: self.next_tag,
                    ..l
                };
                self.next_tag = self.next_tag.wrapping_add(1);
                if self.host {
                    self.write_pattern(&renewed)?;
                    self.live[i] = renewed;
                } else {
                    let w = self.a().write(l.addr, &pattern(renewed.tag, 0, 1));
                    if code_of(&w) != in_range_code {
                        return Err(format!("a write into virtual memory gave {w:?}"));
                    }
                }
            }
            _ => {
                let len = l.requested.min(4096);
                let r = self.a().fill(l.addr, 0xA5, len);
                if code_of(&r) != in_range_code {
                    return Err(format!("fill of live {l:?} gave {r:?}"));
                }
                if self.host {
                    let mut buf = vec![0; len as usize];
                    self.a().read(l.addr, &mut buf).map_err(|e| e.to_string())?;
                    if buf.iter().any(|&b| b != 0xA5) {
                        return Err(format!("a fill of {l:?} did not take"));
                    }
                    self.write_pattern(&l)?;
                }
            }
        }
        let after = self.a().memory_log();
        if before != after {
            return Err("a copy changed the allocator".into());
        }
        self.check(&after)
    }
}
