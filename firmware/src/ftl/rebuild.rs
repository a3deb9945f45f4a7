//! The FTL's half of recovery: turning a checkpoint's tables plus the pages programmed after it
//! into the mapping of a running FTL. The boot driver (`crate::recovery`) reads the flash and
//! feeds this module what it found.
//!
//! The rules, with `S` the checkpoint's snapshot sequence (every page programmed after the
//! snapshot has a program sequence ≥ `S`, every page before it < `S`):
//!
//! * A block's first readable page tells what happened to it since the snapshot. Erased, or
//!   nothing readable: the block was erased since (GC moved its valid pages, and those copies
//!   are replayed), so no mapping may point into it any more. Programmed at or after `S`: erased and rewritten
//!   since; its checkpoint mappings are dropped and all of it is replayed. Programmed before
//!   `S`: its contents are the checkpoint's, except that a block open for writing at the
//!   snapshot is scanned for the pages added after it.
//! * A replayed page is taken only if its program sequence is ≥ `S`. For one logical page, the
//!   replayed copy with the newest *data* sequence wins (a GC copy keeps its source's data
//!   sequence, so a copy that lost the race with a host write never wins); any replayed copy
//!   beats the checkpoint's mapping (a copy of older data can only be a GC copy of exactly the
//!   checkpoint's version).
//! * Trims since the snapshot are in trim records (`crate::trim_log`), applied once every page
//!   is replayed: a record made at sequence `T` unmaps each page it names unless the page's
//!   replayed version has a data sequence above `T`.
//!
//! During replay the P2L table is scratch: a replayed page's entry is `REPLAYED | rank`; at the
//! end every derived table (P2L, valid counts, free lists) is rebuilt from the L2P table.

use super::{
    BLOCK_ACTIVE, BLOCK_BAD, BLOCK_DIRTY, BLOCK_ERASING, BLOCK_FREE, BLOCK_GC, BLOCK_RESERVED,
    BLOCK_USED, Ftl, FtlStats, Gc, L2P_LOST,
};
use crate::hal::{PhysBlock, PhysPage};

/// P2L scratch mark of a page taken by replay; the low bits hold its rank.
const REPLAYED: u32 = 1 << 31;

/// The replay rank of data sequence `seq` (a page's version, or a trim record's): 0 before the
/// snapshot `snapshot_seq` (the checkpoint holds it), then growing with the sequence, capped
/// below [`REPLAYED`].
fn rank(seq: u64, snapshot_seq: u64) -> u32 {
    match seq.checked_sub(snapshot_seq) {
        Some(newer) => newer.saturating_add(1).min(u64::from(REPLAYED - 1)) as u32,
        None => 0,
    }
}

/// What a block's first page said at boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockScan {
    /// Erased.
    Erased,
    /// Unreadable, or a record this firmware did not write there.
    Garbled,
    /// A data page programmed at this program sequence.
    Data { program_seq: u64 },
}

/// A data page found by the replay scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Replayed {
    /// Where it is.
    pub ppn: PhysPage,
    /// The logical page its record names.
    pub lpn: u32,
    /// Its data and program sequences.
    pub data_seq: u64,
    pub program_seq: u64,
}

impl Ftl {
    /// Starts recovery from a checkpoint whose block states and L2P table are already in the
    /// arena: checks them and derives the P2L table. `Err` names the bad table.
    pub fn adopt_checkpoint(&mut self, dram: &mut [u8]) -> Result<(), &'static str> {
        let layout = self.checkpoint_layout;
        for b in 0..self.geometry.block_count() {
            let state = self.block_state.bytes(dram)[b as usize];
            let reserved = layout.is_reserved(PhysBlock(b));
            if state > BLOCK_ERASING || reserved != (state == BLOCK_RESERVED) {
                return Err("checkpoint block states");
            }
        }
        let pages = self.geometry.page_count();
        self.p2l.bytes_mut(dram).fill(0);
        for lpn in 0..self.logical_pages {
            let v = self.l2p.u32(dram, lpn as usize);
            if v == 0 || v == L2P_LOST {
                continue;
            }
            if u64::from(v) > pages || layout.is_reserved(self.block_of(PhysPage(v - 1))) {
                return Err("checkpoint l2p");
            }
            self.p2l.set_u32(dram, v as usize - 1, lpn + 1);
        }
        Ok(())
    }

    /// Starts recovery without a checkpoint: nothing mapped, every block free at "snapshot 0".
    pub fn adopt_blank(&mut self, dram: &mut [u8]) {
        self.l2p.bytes_mut(dram).fill(0);
        self.p2l.bytes_mut(dram).fill(0);
        let layout = self.checkpoint_layout;
        for b in 0..self.geometry.block_count() {
            self.block_state.bytes_mut(dram)[b as usize] = if layout.is_reserved(PhysBlock(b)) {
                BLOCK_RESERVED
            } else {
                BLOCK_FREE
            };
        }
    }

    /// Whether recovery must look at `block` (not a checkpoint slot, not retired).
    pub fn needs_scan(&self, dram: &[u8], block: PhysBlock) -> bool {
        !matches!(
            self.block_state.bytes(dram)[block.0 as usize],
            BLOCK_RESERVED | BLOCK_BAD
        )
    }

    /// Decides what `block` holds from its first page (see the module rules), drops the
    /// checkpoint's mappings into it if it was erased since, and returns the first page to
    /// replay (`pages_per_block`: none).
    pub fn classify(
        &mut self,
        dram: &mut [u8],
        block: PhysBlock,
        scan: BlockScan,
        snapshot_seq: u64,
    ) -> u32 {
        let ppb = self.geometry.pages_per_block;
        let state = self.block_state.bytes(dram)[block.0 as usize];
        let (new_state, start, clear) = match scan {
            BlockScan::Erased => (BLOCK_FREE, ppb, true),
            BlockScan::Garbled => (BLOCK_USED, ppb, true),
            BlockScan::Data { program_seq } if program_seq >= snapshot_seq => (BLOCK_USED, 0, true),
            // Older contents: the checkpoint's, plus what an open block gained.
            BlockScan::Data { .. } => match state {
                BLOCK_ACTIVE => (BLOCK_USED, 0, false),
                BLOCK_USED | BLOCK_GC => (BLOCK_USED, ppb, false),
                // Free at the snapshot yet holding older data: nothing in it can be trusted.
                _ => (BLOCK_USED, ppb, true),
            },
        };
        if clear {
            for p in 0..ppb {
                let ppn = block.page(&self.geometry, p);
                let lpn = self.p2l.u32(dram, ppn.0 as usize);
                if lpn != 0 {
                    self.l2p.set_u32(dram, lpn as usize - 1, 0);
                    self.p2l.set_u32(dram, ppn.0 as usize, 0);
                }
            }
        }
        self.block_state.bytes_mut(dram)[block.0 as usize] = new_state;
        start
    }

    /// Applies one page found by the replay scan; returns whether it was a candidate (a page of
    /// a logical page, programmed after the snapshot), taken or not.
    pub fn replay(&mut self, dram: &mut [u8], page: Replayed, snapshot_seq: u64) -> bool {
        if page.lpn >= self.logical_pages || page.program_seq < snapshot_seq {
            return false;
        }
        let rank = rank(page.data_seq, snapshot_seq);
        let current = self.l2p.u32(dram, page.lpn as usize);
        if current != 0 && current != L2P_LOST && u64::from(current) <= self.geometry.page_count() {
            let q = current - 1;
            let mark = self.p2l.u32(dram, q as usize);
            if mark & REPLAYED != 0 {
                let held = mark & !REPLAYED;
                if rank < held || (rank == held && page.ppn.0 < q) {
                    return true;
                }
            }
            self.p2l.set_u32(dram, q as usize, 0);
        }
        self.l2p.set_u32(dram, page.lpn as usize, page.ppn.0 + 1);
        self.p2l.set_u32(dram, page.ppn.0 as usize, REPLAYED | rank);
        true
    }

    /// Applies `count` pages from `first` of a trim record made at sequence `ts` (at least
    /// `snapshot_seq`), after every page is replayed: a page is unmapped unless its replayed
    /// version was written after the trim (`crate::trim_log`).
    pub fn replay_trim(
        &mut self,
        dram: &mut [u8],
        first: u32,
        count: u32,
        ts: u64,
        snapshot_seq: u64,
    ) {
        let rank = rank(ts, snapshot_seq);
        let end = first.saturating_add(count).min(self.logical_pages);
        for lpn in first.min(end)..end {
            let v = self.l2p.u32(dram, lpn as usize);
            if v == 0 {
                continue;
            }
            if v != L2P_LOST && u64::from(v) <= self.geometry.page_count() {
                let q = v as usize - 1;
                let mark = self.p2l.u32(dram, q);
                if mark & REPLAYED != 0 && mark & !REPLAYED > rank {
                    continue;
                }
                self.p2l.set_u32(dram, q, 0);
            }
            self.l2p.set_u32(dram, lpn as usize, 0);
        }
    }

    /// Ends recovery: rebuilds P2L, valid counts and free lists from the L2P table and the block
    /// states, closes every block (new writes open fresh ones) and continues the program
    /// sequence after `next_program_seq`. `replayed` pages (and, unless the flash was blank,
    /// the blocks found erased since) make the state newer than the checkpoint's: the next one
    /// is due.
    pub fn finish_recovery(
        &mut self,
        dram: &mut [u8],
        next_program_seq: u64,
        stats: FtlStats,
        replayed: u64,
        blank: bool,
    ) {
        let g = self.geometry;
        self.p2l.bytes_mut(dram).fill(0);
        self.block_valid.bytes_mut(dram).fill(0);
        self.dies.bytes_mut(dram).fill(0);
        self.block_next_free.bytes_mut(dram).fill(0);
        self.mapped_pages = 0;
        for lpn in 0..self.logical_pages {
            let v = self.l2p.u32(dram, lpn as usize);
            if v == 0 || v == L2P_LOST {
                continue;
            }
            let ppn = PhysPage(v - 1);
            self.p2l.set_u32(dram, ppn.0 as usize, lpn + 1);
            let b = self.block_of(ppn).0 as usize;
            let valid = self.block_valid.u32(dram, b);
            self.block_valid.set_u32(dram, b, valid + 1);
            self.mapped_pages += 1;
        }
        self.free_blocks = 0;
        for b in (0..g.block_count()).rev() {
            match self.block_state.bytes(dram)[b as usize] {
                BLOCK_FREE | BLOCK_DIRTY | BLOCK_ERASING => self.push_free(dram, PhysBlock(b)),
                BLOCK_ACTIVE | BLOCK_GC => {
                    self.block_state.bytes_mut(dram)[b as usize] = BLOCK_USED
                }
                _ => {}
            }
        }
        self.next_die = 0;
        self.gc_active = None;
        self.gc = Gc::Idle;
        self.full = false;
        self.program_seq = next_program_seq.max(1);
        self.programs_in_flight = 0;
        self.programs_since_snapshot = replayed;
        self.trimmed_since_snapshot = !blank;
        self.stats = stats;
        if !blank {
            // A free block may hold a page a cut tore yet reads as erased: erase before use.
            self.dirty_free_blocks(dram);
        }
    }

    /// Notes where replay starts in `block` (scratch kept in the free-list links until
    /// [`Self::finish_recovery`]).
    pub fn set_replay_start(&self, dram: &mut [u8], block: PhysBlock, page: u32) {
        self.block_next_free.set_u32(dram, block.0 as usize, page);
    }

    /// Where replay starts in `block`, as noted.
    pub fn replay_start(&self, dram: &[u8], block: PhysBlock) -> u32 {
        self.block_next_free.u32(dram, block.0 as usize)
    }
}
