//! The ordered queue between the firmware and the flash HAL.
//!
//! Every flash operation goes through this FIFO, so operations reach the HAL in the order the
//! firmware decided them: programs of a block in page order, and a block's erase after the reads
//! that were issued against its pages. When the HAL answers [`FlashError::Busy`] the queue simply
//! waits for the next poll.

use heapless::Deque;

use crate::hal::{Flash, FlashCompletion, FlashError, FlashOp};
use crate::work::WorkCounters;

/// Capacity of the queue.
pub(crate) const FLASH_QUEUE_DEPTH: usize = 512;

/// What an operation was for; encoded in the top bits of its tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TagKind {
    /// Fill of page-buffer slot `index`.
    Fill = 1,
    /// Program of page `index` of the command in slot `owner`.
    Program = 2,
    /// Garbage-collection read.
    GcRead = 3,
    /// Garbage-collection program.
    GcProgram = 4,
    /// Garbage-collection erase.
    GcErase = 5,
    /// Erase of a checkpoint slot's block.
    CheckpointErase = 6,
    /// Program of a checkpoint page from window `index`.
    CheckpointProgram = 7,
    /// Read-ahead of page-buffer slot `index` for sampling lane `owner`, which holds no pin:
    /// the completion drops the read's own.
    Prefetch = 8,
    /// Erase of a free block before it is opened (`ftl` `lazy_erase`): the block is
    /// `owner << 16 | index`.
    FreeErase = 9,
    /// Read-back of a checkpoint page into window `index`.
    CheckpointVerify = 10,
    /// Program of the trim record in trim-log window `index` (`crate::trim_log`).
    TrimRecord = 11,
    /// Read-back of the trim record in trim-log window `index`.
    TrimRecordVerify = 12,
}

/// A decoded flash tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tag {
    pub kind: TagKind,
    /// The command slot an operation belongs to (12 bits), when it belongs to one.
    pub owner: u16,
    /// The page-buffer slot or the command's page index.
    pub index: u16,
}

impl Tag {
    pub fn new(kind: TagKind, owner: u16, index: u16) -> Self {
        Self { kind, owner, index }
    }

    pub fn encode(self) -> u32 {
        ((self.kind as u32) << 28) | (u32::from(self.owner & 0x0FFF) << 16) | u32::from(self.index)
    }

    pub fn decode(tag: u32) -> Option<Self> {
        let kind = match tag >> 28 {
            1 => TagKind::Fill,
            2 => TagKind::Program,
            3 => TagKind::GcRead,
            4 => TagKind::GcProgram,
            5 => TagKind::GcErase,
            6 => TagKind::CheckpointErase,
            7 => TagKind::CheckpointProgram,
            8 => TagKind::Prefetch,
            9 => TagKind::FreeErase,
            10 => TagKind::CheckpointVerify,
            11 => TagKind::TrimRecord,
            12 => TagKind::TrimRecordVerify,
            _ => return None,
        };
        Some(Self {
            kind,
            owner: ((tag >> 16) & 0x0FFF) as u16,
            index: (tag & 0xFFFF) as u16,
        })
    }
}

/// The FIFO of operations not yet accepted by the HAL, plus operations the HAL refused outright
/// (reported back as failed completions).
#[derive(Debug, Default)]
pub(crate) struct FlashQueue {
    pending: Deque<(u32, FlashOp), FLASH_QUEUE_DEPTH>,
    refused: Deque<FlashCompletion, FLASH_QUEUE_DEPTH>,
    /// Operations pushed since [`Self::begin_poll`]: one poll queues at most
    /// `FLASH_QUEUE_DEPTH`, even though the poll drains the queue as it goes, so that a poll
    /// stays short and flash completions are serviced between polls.
    pushed_this_poll: usize,
}

impl FlashQueue {
    /// Starts a new poll's budget of operations.
    pub fn begin_poll(&mut self) {
        self.pushed_this_poll = 0;
    }

    /// Whether `n` more operations fit (in the queue and in this poll's budget).
    pub fn has_room(&self, n: usize) -> bool {
        self.pending.capacity() - self.pending.len() >= n
            && self.pushed_this_poll + n <= FLASH_QUEUE_DEPTH
    }

    /// Appends an operation; callers check [`Self::has_room`] first. Returns false if full.
    pub fn push(&mut self, tag: Tag, op: FlashOp) -> bool {
        let ok = self.pending.push_back((tag.encode(), op)).is_ok();
        self.pushed_this_poll += usize::from(ok);
        ok
    }

    /// Hands queued operations to the HAL until it is busy; returns how many it took and counts
    /// each in `work.flash_ops` (told to the HAL, cost included, before its submit).
    pub fn drain<F: Flash>(&mut self, flash: &mut F, dram: &[u8], work: &mut WorkCounters) -> u64 {
        let mut taken = 0;
        while let Some((tag, op)) = self.pending.front().copied() {
            if self.refused.is_full() {
                // Refused operations wait to be reported; keep the rest queued until then.
                break;
            }
            work.flash_ops += 1;
            flash.note_work(work);
            match flash.submit(tag, op, dram) {
                Ok(()) => taken += 1,
                Err(FlashError::Busy) => {
                    work.flash_ops -= 1;
                    break;
                }
                Err(e) => {
                    work.flash_ops -= 1;
                    // Room was checked at the top of the loop.
                    let _ = self.refused.push_back(FlashCompletion {
                        tag,
                        result: Err(e),
                    });
                }
            }
            self.pending.pop_front();
        }
        taken
    }

    /// The next operation the HAL refused outright, as a failed completion.
    pub fn take_refused(&mut self) -> Option<FlashCompletion> {
        self.refused.pop_front()
    }

    /// Whether nothing waits to be handed to the HAL ([`Self::drain`] would do nothing).
    #[inline]
    pub fn nothing_pending(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether nothing waits to be handed to the HAL.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.refused.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        for kind in [
            TagKind::Fill,
            TagKind::Program,
            TagKind::GcRead,
            TagKind::GcProgram,
            TagKind::GcErase,
            TagKind::CheckpointErase,
            TagKind::CheckpointProgram,
            TagKind::Prefetch,
            TagKind::FreeErase,
            TagKind::CheckpointVerify,
            TagKind::TrimRecord,
            TagKind::TrimRecordVerify,
        ] {
            let t = Tag::new(kind, 0x0ABC, 0xFFFF);
            assert_eq!(Tag::decode(t.encode()), Some(t));
        }
        assert_eq!(Tag::decode(0), None);
    }
}
