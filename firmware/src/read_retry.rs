//! Read-retry: a flash read that fails is read again, a bounded number of times, before the
//! firmware calls its page unrecoverable.
//!
//! ```plain
//!   read fails ─► attempts left? ─ yes ─► due (the slot stays loading, its waiters sleep)
//!                      │                    └─► re-queued when the flash queue has room,
//!                      no                         at the page's *current* location
//!                      └─► Unrecovered Read Error for its readers; GC marks the page lost
//! ```
//!
//! NAND reads fail transiently (read disturb, retention drift, a marginal cell read at the
//! default reference voltage), and controllers answer with a read-retry sequence: the page is
//! sensed again, at shifted references, until the error correction succeeds. Each attempt here
//! is a whole read of the same sectors, so its time is charged like any read's. Page-buffer
//! fills and read-aheads, garbage collection's copies and the boot's scans all retry; only a
//! page that fails every attempt (a sticky, uncorrectable page) is reported.
//!
//! A retry is issued at the page's location when it is queued, not when the first attempt was:
//! garbage collection may have moved the page meanwhile, and the old block's erase is queued
//! only after the move is committed, so a retry never reads an erased block.

use crate::dispatch::Firmware;
use crate::flash_queue::{Tag, TagKind};
use crate::ftl::Ftl;
use crate::hal::{Flash, FlashError, FlashOp};
use crate::page_buffer::ReadRetry;

/// Attempts after the first before a read is reported unrecoverable.
pub(crate) const READ_RETRIES: u8 = 4;

/// Retried and unrecoverable reads since boot (not kept across power cycles).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadRetryStats {
    /// Reads issued again after a failed attempt.
    pub retries: u64,
    /// Reads that failed every attempt: their pages were reported unrecoverable.
    pub unrecovered: u64,
}

impl<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> Firmware<F, M> {
    /// A page-buffer read (a fill, or a sampling lane's read-ahead) has finished: its sectors
    /// become valid, or it is retried, or — out of attempts, or nobody left to want the page —
    /// its slot fails.
    pub(crate) fn buffer_read_finished(&mut self, tag: Tag, result: Result<(), FlashError>) {
        let slot = u32::from(tag.index);
        let dram = self.dram.as_mut();
        let buffer = &self.backend.buffer;
        // The page read must be the one asked for: its spare record names it.
        let lpn = buffer.lpn_of(dram, slot);
        let named = lpn.is_none_or(|lpn| {
            Ftl::data_version(buffer.spare_region(slot).bytes(dram), lpn).is_some()
        });
        if result.is_ok() && named {
            buffer.load_done(dram, slot, true);
            self.buffer_read_ended(tag.kind, usize::from(tag.owner), slot);
            return;
        }
        // A detached page is wanted by nobody who could still find it: no retry.
        let mut retry = buffer.retry(dram, slot);
        if lpn.is_some() && retry.failures < READ_RETRIES {
            retry.failures += 1;
            retry.due = true;
            retry.prefetch_lane = (tag.kind == TagKind::Prefetch).then_some(tag.owner as u8);
            buffer.set_retry(dram, slot, retry);
            self.backend.retries_due += 1;
            return;
        }
        self.buffer_read_failed(tag.kind, usize::from(tag.owner), slot, lpn.is_some());
    }

    /// Queues the retries that are due, while the flash queue has room; returns whether any
    /// was queued or given up.
    pub(crate) fn step_read_retries(&mut self) -> bool {
        let mut progress = false;
        let mut slot = 0;
        while self.backend.retries_due > 0 && slot < self.backend.buffer.slot_count() {
            if !self.backend.queue.has_room(1) {
                break;
            }
            let dram = self.dram.as_mut();
            let b = &mut self.backend;
            let retry = b.buffer.retry(dram, slot);
            if !retry.due {
                slot += 1;
                continue;
            }
            b.retries_due -= 1;
            progress = true;
            let (kind, owner) = match retry.prefetch_lane {
                Some(lane) => (TagKind::Prefetch, u16::from(lane)),
                None => (TagKind::Fill, 0),
            };
            // Where the page is now; a page trimmed, lost or detached meanwhile is wanted by
            // nobody who could still get it: its read ends failed.
            let ppn = b
                .buffer
                .lpn_of(dram, slot)
                .filter(|lpn| !b.ftl.is_lost(dram, *lpn))
                .and_then(|lpn| b.ftl.lookup(dram, lpn));
            match ppn {
                Some(ppn) => {
                    b.buffer.set_retry(
                        dram,
                        slot,
                        ReadRetry {
                            due: false,
                            ..retry
                        },
                    );
                    let op = FlashOp::Read {
                        ppn,
                        dram_offset_bytes: b.buffer.slot_region(slot).start,
                        sectors: b.buffer.loading(dram, slot),
                    };
                    b.queue.push(Tag::new(kind, owner, slot as u16), op);
                    b.ftl.reads.retries += 1;
                }
                None => self.buffer_read_failed(kind, usize::from(owner), slot, false),
            }
            slot += 1;
        }
        progress
    }

    /// A page-buffer read ends failed: the slot fails, and its readers get Unrecovered Read
    /// Error. `unrecovered`: because every attempt failed (not because the page went away).
    fn buffer_read_failed(&mut self, kind: TagKind, owner: usize, slot: u32, unrecovered: bool) {
        let b = &mut self.backend;
        b.ftl.reads.unrecovered += u64::from(unrecovered);
        b.buffer.load_done(self.dram.as_mut(), slot, false);
        self.buffer_read_ended(kind, owner, slot);
    }

    /// A read-ahead ended (landed or failed): nobody held the page for it, so the read's own
    /// pin goes (the page stays cached) and its lane may start another.
    fn buffer_read_ended(&mut self, kind: TagKind, lane: usize, slot: u32) {
        if kind == TagKind::Prefetch {
            self.backend.buffer.unpin(self.dram.as_mut(), slot);
            self.isp.prefetch_landed(lane);
        }
    }
}
