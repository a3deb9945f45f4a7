//! The storage back end shared by host commands and the ISP engine: FTL, page buffer, the flash
//! queue and the checkpoint writer, plus the work counters they feed.

use crate::checkpoint::Checkpointer;
use crate::dram::Region;
use crate::flash_queue::{FlashQueue, Tag, TagKind};
use crate::ftl::Ftl;
use crate::hal::{FlashOp, Geometry, Sectors};
use crate::page_buffer::{Acquire, PageBuffer};
use crate::trim_log::{Admit, TrimLog};
use crate::work::WorkCounters;

/// What [`Backend::prefetch_page`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadAhead {
    /// A read of the page started.
    Started,
    /// Nothing to read: the page is in the buffer (or unmapped or lost, which its reader's own
    /// request handles).
    Present,
    /// No free slot or flash-queue room now.
    NoRoom,
}

/// FTL + page buffer + flash queue + checkpoint writer.
#[derive(Debug)]
pub(crate) struct Backend {
    pub geometry: Geometry,
    pub ftl: Ftl,
    pub buffer: PageBuffer,
    pub queue: FlashQueue,
    pub checkpoint: Checkpointer,
    pub work: WorkCounters,
    /// Page-buffer slots whose read waits to be retried (`crate::read_retry`).
    pub retries_due: u32,
    /// The trim log (`crate::trim_log`).
    pub trim_log: TrimLog,
}

impl Backend {
    /// Unmaps logical page `lpn` (a deallocate or a deallocating Write Zeroes): the FTL forgets
    /// it and the page buffer drops its cached copy, so it reads as zeros.
    fn unmap(&mut self, dram: &mut [u8], lpn: u32) {
        self.ftl.trim(dram, lpn);
        self.buffer.detach(dram, lpn);
        self.work.page_lookups += 1;
    }

    /// Unmaps `lpn` durably: a mapped (or lost) page goes into the trim log's open record
    /// first. Returns false when the log cannot take it now (nothing was changed; try again).
    pub fn unmap_logged(&mut self, dram: &mut [u8], lpn: u32) -> bool {
        let mapped = self.ftl.lookup(dram, lpn).is_some() || self.ftl.is_lost(dram, lpn);
        if mapped && self.trim_log.admit(dram, &mut self.ftl, lpn) == Admit::Wait {
            return false;
        }
        self.unmap(dram, lpn);
        true
    }

    /// Pins logical page `lpn` in the page buffer with at least the sectors `want`. On a miss
    /// it starts the flash read of the missing sectors (or, for an unmapped page, fills zeros at
    /// once; for a page the media lost, fails at once), so the answer is never
    /// [`Acquire::Miss`]: `Valid`, `Loading` (poll again, then ask again: the read in flight may
    /// be another reader's), `Failed`, or `Full` (nothing pinned; try later).
    pub fn request_page(&mut self, dram: &mut [u8], lpn: u32, want: Sectors) -> Acquire {
        self.work.page_lookups += 1;
        // A miss that needs a flash read it cannot queue now must not evict a cached page.
        if !self.queue.has_room(1) && !self.buffer.contains(dram, lpn) {
            return Acquire::Full;
        }
        match self.buffer.acquire(dram, lpn, want, true) {
            Acquire::Miss(slot, _) if self.ftl.is_lost(dram, lpn) => {
                self.buffer.load_done(dram, slot, false);
                Acquire::Failed(slot)
            }
            Acquire::Miss(slot, missing) => match self.ftl.lookup(dram, lpn) {
                None => {
                    self.buffer.slot_region(slot).bytes_mut(dram).fill(0);
                    self.buffer.filled(dram, slot, Sectors::ALL);
                    Acquire::Valid(slot)
                }
                Some(ppn) if self.queue.has_room(1) => {
                    let op = FlashOp::Read {
                        ppn,
                        dram_offset_bytes: self.buffer.slot_region(slot).start,
                        sectors: missing,
                    };
                    self.queue.push(Tag::new(TagKind::Fill, 0, slot as u16), op);
                    Acquire::Loading(slot)
                }
                Some(_) => {
                    self.buffer.abandon(dram, slot);
                    Acquire::Full
                }
            },
            other => other,
        }
    }

    /// Starts reading `want` sectors of `lpn` into the page buffer ahead of a reader that will
    /// ask for them soon (sampling lane `lane`), holding no pin for it: the read's completion
    /// ([`TagKind::Prefetch`]) drops the read's own. Returns whether a read started: not when
    /// the page is in the buffer (loaded, loading or failed), when no slot or queue room is
    /// free, or when the page is unmapped or lost (the reader's own request handles those).
    pub fn prefetch_page(
        &mut self,
        dram: &mut [u8],
        lpn: u32,
        want: Sectors,
        lane: u16,
    ) -> ReadAhead {
        self.work.page_lookups += 1;
        if self.buffer.contains(dram, lpn) {
            return ReadAhead::Present;
        }
        if !self.queue.has_room(1) {
            return ReadAhead::NoRoom;
        }
        let Acquire::Miss(slot, missing) = self.buffer.acquire(dram, lpn, want, false) else {
            return ReadAhead::NoRoom;
        };
        match self.ftl.lookup(dram, lpn) {
            Some(ppn) if !self.ftl.is_lost(dram, lpn) => {
                let op = FlashOp::Read {
                    ppn,
                    dram_offset_bytes: self.buffer.slot_region(slot).start,
                    sectors: missing,
                };
                self.queue
                    .push(Tag::new(TagKind::Prefetch, lane, slot as u16), op);
                ReadAhead::Started
            }
            _ => {
                self.buffer.abandon(dram, slot);
                ReadAhead::Present
            }
        }
    }

    /// The arena window of a page-buffer slot.
    pub fn slot(&self, slot: u32) -> Region {
        self.buffer.slot_region(slot)
    }
}
