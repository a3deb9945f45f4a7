//! Lazy erases: a block left free by a boot is erased when it is about to be used, not at the
//! boot.
//!
//! ```plain
//!   boot ──► every free block DIRTY (it may hold a page whose program a cut tore, yet reads
//!            as erased) ── no erase at boot
//!   die's free list:  [clean blocks GC freed since] → [DIRTY ...]
//!            head DIRTY ──► ERASING (erase queued) ──► FREE (clean, may be opened)
//!                                     └── fails ──► BAD (unlinked)
//! ```
//!
//! A block is opened only when it is erased: the allocator takes a die's free-list head only if
//! it is clean ([`Ftl::clean_free_head`]). After a boot every free block is dirty; garbage
//! collection pushes the blocks it erases at the head of their list, so the dirty ones always
//! sit behind the clean ones, and the head is dirty only when the die has no clean free block.
//! The eraser then erases that head, one block per die at a time, so each die keeps one erased
//! block ready and the boot erases nothing: a power cycle costs one erase per die, and later
//! erases happen only as blocks are really needed (before, every boot erased every free block:
//! one P/E cycle per free block per power cycle).
//!
//! A dirty or erasing block is free in a checkpoint like a clean one; a boot re-reads its first
//! page (erased: free again; a torn erase or older data: used and empty, so GC erases it before
//! it is reused). No erase starts while a checkpoint is pending, and a snapshot waits for those
//! in flight, so the tables a checkpoint copies never change under it.

use super::{
    BLOCK_BAD, BLOCK_DIRTY, BLOCK_ERASING, BLOCK_FREE, DIE_FREE_COUNT, DIE_FREE_HEAD, Ftl,
};
use crate::flash_queue::{FlashQueue, Tag, TagKind};
use crate::hal::{FlashOp, PhysBlock};

impl Ftl {
    /// The head of `die`'s free list, if it is erased.
    pub(super) fn clean_free_head(&self, dram: &[u8], die: u32) -> Option<PhysBlock> {
        let head = self.die_word(dram, die, DIE_FREE_HEAD).checked_sub(1)?;
        (self.block_state.bytes(dram)[head as usize] == BLOCK_FREE).then_some(PhysBlock(head))
    }

    /// Marks every free block dirty (a boot from written flash: none is known to be erased).
    pub(super) fn dirty_free_blocks(&mut self, dram: &mut [u8]) {
        for state in self.block_state.bytes_mut(dram) {
            if *state == BLOCK_FREE {
                *state = BLOCK_DIRTY;
            }
        }
        self.erase_check = true;
    }

    /// Queues the erase of each die's free-list head that is dirty. Returns whether it queued
    /// any.
    pub fn erase_step(&mut self, dram: &mut [u8], queue: &mut FlashQueue) -> bool {
        if !self.erase_check || self.hold_programs {
            return false;
        }
        let mut queued = false;
        for die in 0..self.geometry.die_count() {
            let Some(head) = self.die_word(dram, die, DIE_FREE_HEAD).checked_sub(1) else {
                continue;
            };
            if self.block_state.bytes(dram)[head as usize] != BLOCK_DIRTY {
                continue;
            }
            if !queue.has_room(1) {
                // Look again next time.
                return queued;
            }
            self.block_state.bytes_mut(dram)[head as usize] = BLOCK_ERASING;
            // A valid geometry has at most 2^28 blocks (`hal::MAX_BLOCKS`): the tag holds any.
            let (owner, index) = ((head >> 16) as u16, head as u16);
            queue.push(
                Tag::new(TagKind::FreeErase, owner, index),
                FlashOp::Erase {
                    block: PhysBlock(head),
                },
            );
            self.erases_in_flight += 1;
            queued = true;
        }
        self.erase_check = false;
        queued
    }

    /// The erase of free block `owner << 16 | index` finished: the block is clean, or (the
    /// media failed it) retired.
    pub fn free_erase_done(&mut self, dram: &mut [u8], owner: u16, index: u16, ok: bool) {
        let block = PhysBlock(u32::from(owner) << 16 | u32::from(index));
        if self.block_state.bytes(dram).get(block.0 as usize) != Some(&BLOCK_ERASING) {
            return;
        }
        self.erases_in_flight = self.erases_in_flight.saturating_sub(1);
        self.stats.blocks_erased += 1;
        if ok {
            self.block_state.bytes_mut(dram)[block.0 as usize] = BLOCK_FREE;
        } else {
            self.stats.media_failures += 1;
            self.unlink_free(dram, block);
            self.block_state.bytes_mut(dram)[block.0 as usize] = BLOCK_BAD;
        }
        self.erase_check = true;
    }

    /// Whether the eraser has an erase in flight or a free list to look at.
    pub(super) fn eraser_busy(&self) -> bool {
        self.erases_in_flight > 0 || self.erase_check
    }

    /// Takes `block` out of its die's free list.
    fn unlink_free(&mut self, dram: &mut [u8], block: PhysBlock) {
        let die = self.die_of_block(block);
        let mut prev: Option<u32> = None;
        let mut next = self.die_word(dram, die, DIE_FREE_HEAD);
        while let Some(b) = next.checked_sub(1) {
            let after = self.block_next_free.u32(dram, b as usize);
            if b == block.0 {
                match prev {
                    None => self.set_die_word(dram, die, DIE_FREE_HEAD, after),
                    Some(p) => self.block_next_free.set_u32(dram, p as usize, after),
                }
                let count = self.die_word(dram, die, DIE_FREE_COUNT);
                self.set_die_word(dram, die, DIE_FREE_COUNT, count.saturating_sub(1));
                self.free_blocks = self.free_blocks.saturating_sub(1);
                return;
            }
            prev = Some(b);
            next = after;
        }
    }
}
