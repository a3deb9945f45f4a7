//! Page-mapped flash translation layer with greedy garbage collection.
//!
//! ```plain
//!   logical pages (namespace LBAs grouped by flash page)
//!        │  this module: L2P/P2L tables, per-die active blocks, free lists, GC
//!   physical pages (hal::PhysPage)
//! ```
//!
//! Writes are out-of-place: every host program goes to the next page of a die's active block,
//! dies taken round-robin so that consecutive pages land on different channels. A logical page's
//! old physical page becomes invalid. When free blocks run down to the reserve, garbage
//! collection picks the used block with the fewest valid pages, copies those pages (read,
//! program, conditional remap) into its own active block and erases it. Host writes may not take
//! the reserve; GC may. GC has its own write frontier so host writes cannot use up the space GC
//! opened for its copies: each GC round then frees at least one page net.
//! The mapping unit is one flash page; partial-page writes are read-modify-write (the dispatcher
//! does that through the page buffer).

mod lazy_erase;
mod rebuild;

pub(crate) use rebuild::{BlockScan, Replayed};

use crate::checkpoint_layout::{CheckpointLayout, reserved_block_count};
use crate::dram::{DramLayout, Region};
use crate::flash_queue::{FlashQueue, Tag, TagKind};
use crate::hal::{FlashError, FlashOp, Geometry, PhysBlock, PhysPage, SPARE_BYTES, Sectors};
use crate::oob::{PageKind, ReadSpare, Spare};
use crate::read_retry::{READ_RETRIES, ReadRetryStats};
use crate::work::WorkCounters;

const BLOCK_USED: u8 = 0;
const BLOCK_FREE: u8 = 1;
const BLOCK_ACTIVE: u8 = 2;
const BLOCK_BAD: u8 = 3;
const BLOCK_GC: u8 = 4;
/// A block of a checkpoint slot: never in a free list, never a GC victim.
const BLOCK_RESERVED: u8 = 5;
/// Free, but not known to be erased (free at a boot): erased before it is opened
/// (`lazy_erase`).
const BLOCK_DIRTY: u8 = 6;
/// Free, its erase in flight (`lazy_erase`).
const BLOCK_ERASING: u8 = 7;
/// Blocks at most waiting for retirement at once.
const MAX_RETIRING: usize = 64;

/// The logical page written into the spare of a page programmed with data that belongs to no
/// logical page (a write whose host transfer failed): recovery ignores it.
const NO_OWNER: u32 = u32::MAX;

/// L2P value of a logical page whose data the media lost (a GC copy could not read it): reads
/// fail with an unrecovered-read error until the page is written or trimmed.
const L2P_LOST: u32 = u32::MAX;

// Per-die record words.
const DIE_FREE_HEAD: usize = 0;
const DIE_FREE_COUNT: usize = 1;
const DIE_ACTIVE: usize = 2;
const DIE_NEXT_PAGE: usize = 3;

/// FTL counters, for write-amplification and wear reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FtlStats {
    /// Pages programmed for host writes.
    pub host_pages_written: u64,
    /// Pages copied by garbage collection.
    pub gc_pages_moved: u64,
    /// Blocks erased.
    pub blocks_erased: u64,
    /// Programs or erases the media failed.
    pub media_failures: u64,
}

/// Whether the checkpoints hold every page GC has marked lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LossRecord {
    /// Every loss is in the newest durable checkpoint.
    Saved,
    /// A loss is in the snapshot a checkpoint is writing now.
    Writing,
    /// A loss is in no snapshot yet.
    Unsaved,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gc {
    Idle,
    /// Looking for the next valid page of `victim` at or after `page`.
    Scan {
        victim: PhysBlock,
        page: u32,
    },
    /// Reading `from` into the GC page.
    Reading {
        victim: PhysBlock,
        page: u32,
    },
    /// Programming the copy of logical page `lpn` from `from` to `to`.
    Programming {
        victim: PhysBlock,
        page: u32,
        lpn: u32,
        from: PhysPage,
        to: PhysPage,
    },
    /// Erasing `victim`.
    Erasing {
        victim: PhysBlock,
    },
}

/// The FTL's state outside the arena.
#[derive(Debug)]
pub(crate) struct Ftl {
    geometry: Geometry,
    l2p: Region,
    p2l: Region,
    block_valid: Region,
    block_next_free: Region,
    block_state: Region,
    dies: Region,
    gc_page: Region,
    logical_pages: u32,
    free_blocks: u32,
    reserve_blocks: u32,
    next_die: u32,
    /// GC's own active block and the next page in it.
    gc_active: Option<(PhysBlock, u32)>,
    gc: Gc,
    /// No used block has an invalid page: writes cannot make progress until something is trimmed.
    full: bool,
    /// Logical pages currently mapped.
    mapped_pages: u64,
    /// The program sequence the next programmed page gets.
    program_seq: u64,
    /// The newest data version handed out (a host write's, or a snapshot's sequence): what a
    /// trim record opened before it must not take unmaps after (`crate::trim_log`).
    newest_version: u64,
    /// Programs stamped and not yet finished.
    programs_in_flight: u32,
    /// Pages programmed since the last checkpoint's snapshot.
    programs_since_snapshot: u64,
    /// Whether a trim changed the mapping since the last checkpoint's snapshot.
    trimmed_since_snapshot: bool,
    /// Set while a checkpoint is requested or written: no new program may start.
    pub hold_programs: bool,
    /// Where checkpoints live.
    pub checkpoint_layout: CheckpointLayout,
    /// Blocks a program failed in, to be marked bad at their next erase.
    retiring: heapless::Vec<u32, MAX_RETIRING>,
    pub stats: FtlStats,
    /// Retried and unrecoverable reads, of the page buffer and of GC (`crate::read_retry`).
    pub reads: ReadRetryStats,
    /// The page GC's last read failed on, and how many of its attempts failed.
    gc_read_failures: (PhysPage, u8),
    /// Blocks holding trim records no durable checkpoint covers, with each record's program
    /// sequence (`crate::trim_log`): GC leaves them alone. Twice the log's bound: a boot may
    /// find the records of two checkpoint intervals (the newest checkpoint torn).
    unsaved_records: heapless::Vec<(u32, u64), { 2 * crate::config::MAX_UNSAVED_RECORDS }>,
    /// The snapshot sequence of the checkpoint being written (or last written).
    snapshot_seq: u64,
    /// GC found victims only among blocks trim records protect.
    gc_waits_for_checkpoint: bool,
    /// Where the news of pages GC could not copy (mapped lost) stands: garbage collection
    /// erases a block that held one only once a checkpoint holds the loss, or a boot would
    /// find neither the page nor the mark and read zeros where the host must get an error.
    loss: LossRecord,
    /// Whether a free list's head may have changed since the lazy eraser last looked.
    erase_check: bool,
    /// Erases of free blocks in flight (`lazy_erase`).
    erases_in_flight: u32,
}

/// Logical pages a geometry offers: everything but the checkpoint slots, one active and one
/// reserve block per die and one spare, less over-provisioning. `None` if nothing is left.
pub(crate) fn logical_page_count(
    geometry: &Geometry,
    over_provisioning_percent: u8,
) -> Option<u32> {
    let ppb = u64::from(geometry.pages_per_block);
    let without_slots = geometry
        .block_count()
        .checked_sub(2 * geometry.die_count() + 1)?;
    let upper = u32::try_from(u64::from(without_slots) * ppb).ok()?;
    let usable = without_slots.checked_sub(reserved_block_count(geometry, upper)?)?;
    let pages = u64::from(usable) * ppb;
    let pages = pages * (100 - u64::from(over_provisioning_percent)) / 100;
    u32::try_from(pages).ok().filter(|p| *p > 0)
}

impl Ftl {
    /// Formats the flash: every block free, nothing mapped. The arena's `l2p` and `p2l` regions
    /// must be zero (they scale with capacity, so they are not cleared here); everything else the
    /// FTL owns is initialised.
    pub fn format(
        geometry: Geometry,
        layout: &DramLayout,
        logical_pages: u32,
        checkpoint_layout: CheckpointLayout,
        dram: &mut [u8],
    ) -> Self {
        let mut ftl = Self {
            geometry,
            l2p: layout.l2p,
            p2l: layout.p2l,
            block_valid: layout.block_valid,
            block_next_free: layout.block_next_free,
            block_state: layout.block_state,
            dies: layout.dies,
            gc_page: layout.gc_page,
            logical_pages,
            free_blocks: 0,
            reserve_blocks: geometry.die_count(),
            next_die: 0,
            gc_active: None,
            gc: Gc::Idle,
            full: false,
            mapped_pages: 0,
            program_seq: 1,
            newest_version: 0,
            programs_in_flight: 0,
            programs_since_snapshot: 0,
            trimmed_since_snapshot: false,
            hold_programs: false,
            checkpoint_layout,
            retiring: heapless::Vec::new(),
            stats: FtlStats::default(),
            reads: ReadRetryStats::default(),
            gc_read_failures: (PhysPage(0), 0),
            unsaved_records: heapless::Vec::new(),
            snapshot_seq: 0,
            gc_waits_for_checkpoint: false,
            loss: LossRecord::Saved,
            erase_check: false,
            erases_in_flight: 0,
        };
        layout.block_valid.bytes_mut(dram).fill(0);
        layout.dies.bytes_mut(dram).fill(0);
        for b in (0..geometry.block_count()).rev() {
            if checkpoint_layout.is_reserved(PhysBlock(b)) {
                ftl.block_state.bytes_mut(dram)[b as usize] = BLOCK_RESERVED;
            } else {
                ftl.push_free(dram, PhysBlock(b));
            }
        }
        ftl
    }

    /// The array's geometry.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Logical pages of the capacity.
    pub fn logical_pages(&self) -> u32 {
        self.logical_pages
    }

    /// The tables a checkpoint holds, in payload order: block states, L2P. The rest (P2L,
    /// valid counts, free lists, the dies' open blocks) is derived from them at boot.
    pub fn checkpointed_tables(&self) -> [Region; 2] {
        [self.block_state, self.l2p]
    }

    /// Writes the spare record of a page about to be programmed with logical page `lpn`'s data
    /// (`None`: data that belongs to no logical page) into `spare`, and counts the program as in
    /// flight until [`Self::program_finished`]. `data_seq`: the version a GC copy keeps; a host
    /// write's version is its program sequence.
    pub fn stamp(&mut self, spare: &mut [u8], lpn: Option<u32>, data_seq: Option<u64>) {
        self.stamp_as(spare, PageKind::Data, lpn.unwrap_or(NO_OWNER), data_seq);
    }

    /// [`Self::stamp`] for a trim record of `ranges` ranges made at sequence `ts`
    /// (`crate::trim_log`); returns its program sequence.
    pub fn stamp_trim_record(&mut self, spare: &mut [u8], ranges: u32, ts: u64) -> u64 {
        self.stamp_as(spare, PageKind::Trim, ranges, Some(ts))
    }

    fn stamp_as(&mut self, spare: &mut [u8], kind: PageKind, index: u32, data: Option<u64>) -> u64 {
        let program_seq = self.program_seq;
        self.program_seq += 1;
        if data.is_none() {
            self.newest_version = program_seq;
        }
        self.programs_in_flight += 1;
        self.programs_since_snapshot += 1;
        Spare {
            kind,
            index,
            data_seq: data.unwrap_or(program_seq),
            program_seq,
        }
        .encode(&mut spare[..SPARE_BYTES]);
        program_seq
    }

    /// Takes a sequence number no page will have: the data sequence of a trim record.
    pub fn reserve_seq(&mut self) -> u64 {
        self.program_seq += 1;
        self.program_seq - 1
    }

    /// Whether a new data version was stamped (or a snapshot taken) since sequence `seq` was
    /// reserved. GC copies, which keep their version, and trim records do not count.
    pub fn versioned_since(&self, seq: u64) -> bool {
        self.newest_version > seq
    }

    /// A trim record was programmed into `ppn` at `program_seq`: its block must not be erased
    /// until a checkpoint covers it.
    pub fn record_programmed(&mut self, ppn: PhysPage, program_seq: u64) {
        // Room is kept: the trim log opens no record past the bound.
        let _ = self
            .unsaved_records
            .push((self.block_of(ppn).0, program_seq));
    }

    /// Trim records on flash that no durable checkpoint covers yet.
    pub fn unsaved_records(&self) -> usize {
        self.unsaved_records.len()
    }

    /// Whether a checkpoint snapshot may be taken now: no program in flight and garbage
    /// collection between pages (it re-reads the tables when it goes on).
    pub fn can_snapshot(&self) -> bool {
        self.programs_in_flight == 0
            && self.erases_in_flight == 0
            && matches!(self.gc, Gc::Idle | Gc::Scan { .. })
    }

    /// Starts a checkpoint's snapshot: returns its sequence (every page programmed from now on
    /// has a program sequence at least this) and restarts the counts of changes since.
    pub fn take_snapshot_seq(&mut self) -> u64 {
        if self.loss == LossRecord::Unsaved {
            self.loss = LossRecord::Writing;
        }
        self.programs_since_snapshot = 0;
        self.trimmed_since_snapshot = false;
        // The sequence moves on, so that a trim record opened before the snapshot takes no
        // unmap made after it (`crate::trim_log`).
        self.snapshot_seq = self.reserve_seq();
        self.newest_version = self.snapshot_seq;
        self.snapshot_seq
    }

    /// The checkpoint of the last snapshot is on flash.
    pub fn checkpoint_durable(&mut self) {
        if self.loss == LossRecord::Writing {
            self.loss = LossRecord::Saved;
        }
        // Records programmed before the snapshot hold unmaps the checkpoint has.
        let snapshot = self.snapshot_seq;
        self.unsaved_records.retain(|(_, seq)| *seq >= snapshot);
        self.gc_waits_for_checkpoint = false;
    }

    /// The checkpoint of the last snapshot was given up: what it held is in no checkpoint.
    pub fn checkpoint_abandoned(&mut self) {
        if self.loss == LossRecord::Writing {
            self.loss = LossRecord::Unsaved;
        }
    }

    /// Whether a checkpoint is wanted: to hold a loss before garbage collection erases its
    /// block, to free blocks garbage collection may not erase while trim records no checkpoint
    /// covers sit in them, or to keep the unsaved records under half their bound.
    pub fn wants_checkpoint(&self) -> bool {
        self.loss == LossRecord::Unsaved
            || self.gc_waits_for_checkpoint
            || self.unsaved_records.len() >= crate::config::MAX_UNSAVED_RECORDS / 2
    }

    /// Pages programmed since the last snapshot.
    pub fn programs_since_snapshot(&self) -> u64 {
        self.programs_since_snapshot
    }

    /// Whether anything changed the mapping since the last snapshot.
    pub fn changed_since_snapshot(&self) -> bool {
        self.programs_since_snapshot > 0 || self.trimmed_since_snapshot
    }

    /// The data sequence of a read of logical page `lpn` that returned `spare`, if the read got
    /// that page's data (its record names it); `None` for any other page.
    pub fn data_version(spare: &[u8], lpn: u32) -> Option<u64> {
        match Spare::decode(spare) {
            ReadSpare::Valid(s) if s.kind == PageKind::Data && s.index == lpn => Some(s.data_seq),
            _ => None,
        }
    }

    /// Free blocks as a percentage of the blocks beyond the logical capacity (the spare),
    /// capped at 100: what the SMART log reports as available spare.
    pub fn spare_percent(&self) -> u8 {
        let logical_blocks = self.logical_pages.div_ceil(self.geometry.pages_per_block);
        let spare = self
            .geometry
            .block_count()
            .saturating_sub(logical_blocks)
            .max(1);
        (u64::from(self.free_blocks) * 100 / u64::from(spare)).min(100) as u8
    }

    /// Logical pages currently mapped.
    pub fn mapped_pages(&self) -> u64 {
        self.mapped_pages
    }

    /// The physical page holding logical page `lpn`, if mapped.
    pub fn lookup(&self, dram: &[u8], lpn: u32) -> Option<PhysPage> {
        if lpn >= self.logical_pages {
            return None;
        }
        let v = self.l2p.u32(dram, lpn as usize);
        // A value past the array can only come from an arena that was not zeroed: unmapped.
        (v != 0 && u64::from(v) <= self.geometry.page_count()).then(|| PhysPage(v - 1))
    }

    /// Whether logical page `lpn`'s data was lost by the media.
    pub fn is_lost(&self, dram: &[u8], lpn: u32) -> bool {
        lpn < self.logical_pages && self.l2p.u32(dram, lpn as usize) == L2P_LOST
    }

    fn die_word(&self, dram: &[u8], die: u32, word: usize) -> u32 {
        self.dies.u32(dram, die as usize * 4 + word)
    }

    fn set_die_word(&self, dram: &mut [u8], die: u32, word: usize, v: u32) {
        self.dies.set_u32(dram, die as usize * 4 + word, v);
    }

    fn die_of_block(&self, b: PhysBlock) -> u32 {
        b.0 / self.geometry.blocks_per_die
    }

    fn block_of(&self, p: PhysPage) -> PhysBlock {
        PhysBlock(p.0 / self.geometry.pages_per_block)
    }

    fn push_free(&mut self, dram: &mut [u8], b: PhysBlock) {
        let die = self.die_of_block(b);
        let head = self.die_word(dram, die, DIE_FREE_HEAD);
        self.block_next_free.set_u32(dram, b.0 as usize, head);
        self.set_die_word(dram, die, DIE_FREE_HEAD, b.0 + 1);
        let count = self.die_word(dram, die, DIE_FREE_COUNT);
        self.set_die_word(dram, die, DIE_FREE_COUNT, count + 1);
        self.block_state.bytes_mut(dram)[b.0 as usize] = BLOCK_FREE;
        self.free_blocks += 1;
    }

    /// Takes the block at the head of `die`'s free list, if it is erased (see `lazy_erase`: a
    /// block not known to be erased is never opened).
    fn pop_free(&mut self, dram: &mut [u8], die: u32) -> Option<PhysBlock> {
        let b = self.clean_free_head(dram, die)?;
        self.erase_check = true;
        let next = self.block_next_free.u32(dram, b.0 as usize);
        self.set_die_word(dram, die, DIE_FREE_HEAD, next);
        let count = self.die_word(dram, die, DIE_FREE_COUNT).checked_sub(1)?;
        self.set_die_word(dram, die, DIE_FREE_COUNT, count);
        self.free_blocks = self.free_blocks.saturating_sub(1);
        Some(b)
    }

    /// Takes the next free physical page: for host writes from the dies' active blocks,
    /// round-robin, never dipping into the reserve; for GC (`for_gc`) from GC's own active block.
    /// `None`: no page now (GC must run first, or the device is full).
    pub fn allocate(&mut self, dram: &mut [u8], for_gc: bool) -> Option<PhysPage> {
        if for_gc {
            return self.allocate_for_gc(dram);
        }
        let dies = self.geometry.die_count();
        let ppb = self.geometry.pages_per_block;
        if self.hold_programs {
            return None;
        }
        for k in 0..dies {
            let die = (self.next_die + k) % dies;
            let active = self.die_word(dram, die, DIE_ACTIVE);
            let next_page = self.die_word(dram, die, DIE_NEXT_PAGE);
            let block = if active != 0 && next_page < ppb {
                PhysBlock(active - 1)
            } else if self.die_word(dram, die, DIE_FREE_COUNT) > 0
                && self.free_blocks > self.reserve_blocks
            {
                let Some(b) = self.pop_free(dram, die) else {
                    continue;
                };
                self.block_state.bytes_mut(dram)[b.0 as usize] = BLOCK_ACTIVE;
                self.set_die_word(dram, die, DIE_ACTIVE, b.0 + 1);
                self.set_die_word(dram, die, DIE_NEXT_PAGE, 0);
                b
            } else {
                continue;
            };
            let page = self.die_word(dram, die, DIE_NEXT_PAGE);
            self.set_die_word(dram, die, DIE_NEXT_PAGE, page + 1);
            self.next_die = (die + 1) % dies;
            return Some(block.page(&self.geometry, page));
        }
        None
    }

    fn allocate_for_gc(&mut self, dram: &mut [u8]) -> Option<PhysPage> {
        if self.hold_programs {
            return None;
        }
        let ppb = self.geometry.pages_per_block;
        let (block, page) = match self.gc_active {
            Some((b, p)) if p < ppb => (b, p),
            _ => {
                // Open a block on the die with the most free blocks, to keep dies balanced.
                let die = (0..self.geometry.die_count())
                    .filter(|d| self.clean_free_head(dram, *d).is_some())
                    .max_by_key(|d| (self.die_word(dram, *d, DIE_FREE_COUNT), u32::MAX - d))?;
                let b = self.pop_free(dram, die)?;
                self.block_state.bytes_mut(dram)[b.0 as usize] = BLOCK_ACTIVE;
                (b, 0)
            }
        };
        self.gc_active = Some((block, page + 1));
        Some(block.page(&self.geometry, page))
    }

    /// Whether GC's frontier is used up and no die has a free block to open.
    fn gc_has_no_block(&self) -> bool {
        let ppb = self.geometry.pages_per_block;
        self.gc_active.is_none_or(|(_, p)| p >= ppb) && self.free_blocks == 0
    }

    /// Whether host writes cannot get pages until something is trimmed or overwritten.
    pub fn is_full(&self) -> bool {
        self.full
    }

    fn invalidate(&mut self, dram: &mut [u8], ppn: PhysPage) {
        self.p2l.set_u32(dram, ppn.0 as usize, 0);
        let b = self.block_of(ppn).0 as usize;
        let v = self.block_valid.u32(dram, b);
        self.block_valid.set_u32(dram, b, v.saturating_sub(1));
        self.mapped_pages = self.mapped_pages.saturating_sub(1);
        self.full = false;
    }

    /// Records that a program of `ppn` finished (successfully or not): a block whose last page is
    /// done leaves the active state and becomes a GC candidate.
    pub fn program_finished(&mut self, dram: &mut [u8], ppn: PhysPage, ok: bool) {
        self.programs_in_flight = self.programs_in_flight.saturating_sub(1);
        if !ok {
            self.stats.media_failures += 1;
            self.retire(self.block_of(ppn));
        }
        if ppn.0 % self.geometry.pages_per_block == self.geometry.pages_per_block - 1 {
            let b = self.block_of(ppn).0 as usize;
            if self.block_state.bytes(dram)[b] == BLOCK_ACTIVE {
                self.block_state.bytes_mut(dram)[b] = BLOCK_USED;
            }
        }
    }

    /// Marks `block` for retirement (a program failed in it): it is written on like any other
    /// (its programs in flight must finish before GC may pick it), and GC marks it bad instead
    /// of freeing it once it has emptied it. Best effort: past [`MAX_RETIRING`] blocks waiting,
    /// a block is not marked (its next failure marks it again).
    fn retire(&mut self, block: PhysBlock) {
        if !self.retiring.contains(&block.0) {
            let _ = self.retiring.push(block.0);
        }
    }

    /// Maps `lpn` to the freshly programmed `ppn` (a host write); returns the page it mapped to
    /// before, now invalid.
    pub fn commit(&mut self, dram: &mut [u8], lpn: u32, ppn: PhysPage) -> Option<PhysPage> {
        let old = self.lookup(dram, lpn);
        self.map(dram, lpn, ppn, old);
        old
    }

    /// Maps `lpn` to `ppn` only if it still maps to `expect` (a GC copy must not undo a host
    /// write that landed meanwhile); returns whether the mapping was made.
    fn commit_if(&mut self, dram: &mut [u8], lpn: u32, ppn: PhysPage, expect: PhysPage) -> bool {
        let old = self.lookup(dram, lpn);
        if old != Some(expect) {
            return false;
        }
        self.map(dram, lpn, ppn, old);
        true
    }

    /// Points `lpn` (which maps to `old`) at `ppn`.
    fn map(&mut self, dram: &mut [u8], lpn: u32, ppn: PhysPage, old: Option<PhysPage>) {
        if let Some(old) = old {
            self.invalidate(dram, old);
        }
        self.l2p.set_u32(dram, lpn as usize, ppn.0 + 1);
        self.p2l.set_u32(dram, ppn.0 as usize, lpn + 1);
        let b = self.block_of(ppn).0 as usize;
        let v = self.block_valid.u32(dram, b);
        self.block_valid.set_u32(dram, b, v + 1);
        self.mapped_pages += 1;
    }

    /// Unmaps `lpn` (Dataset Management deallocate).
    pub fn trim(&mut self, dram: &mut [u8], lpn: u32) {
        if let Some(old) = self.lookup(dram, lpn) {
            self.invalidate(dram, old);
            self.trimmed_since_snapshot = true;
        }
        if lpn < self.logical_pages {
            self.l2p.set_u32(dram, lpn as usize, 0);
        }
    }

    /// The GC state and free-block count, for test failure messages.
    #[cfg(test)]
    pub fn describe_gc(&self) -> std::string::String {
        std::format!(
            "{:?} free blocks {} reserve {} {:?}",
            self.gc,
            self.free_blocks,
            self.reserve_blocks,
            self.stats
        )
    }

    /// Whether garbage collection is copying or erasing, or the lazy eraser has work.
    pub fn gc_running(&self) -> bool {
        self.gc != Gc::Idle || self.eraser_busy()
    }

    /// Advances garbage collection by queueing its next flash operation, if one is due.
    /// Returns whether anything changed.
    pub fn gc_step(
        &mut self,
        dram: &mut [u8],
        queue: &mut FlashQueue,
        work: &mut WorkCounters,
    ) -> bool {
        if self.hold_programs {
            return false;
        }
        match self.gc {
            Gc::Idle => {
                if self.free_blocks > self.reserve_blocks + 1 || self.full {
                    return false;
                }
                work.blocks_scanned += u64::from(self.geometry.block_count());
                match self.pick_victim(dram) {
                    Some(victim) => {
                        self.block_state.bytes_mut(dram)[victim.0 as usize] = BLOCK_GC;
                        self.gc = Gc::Scan { victim, page: 0 };
                    }
                    // Blocks only trim records protect are left: a checkpoint frees them.
                    None if !self.unsaved_records.is_empty() => self.gc_waits_for_checkpoint = true,
                    None => self.full = true,
                }
                true
            }
            Gc::Scan { victim, mut page } => {
                let ppb = self.geometry.pages_per_block;
                while page < ppb
                    && self
                        .p2l
                        .u32(dram, victim.page(&self.geometry, page).0 as usize)
                        == 0
                {
                    page += 1;
                }
                if !queue.has_room(1) {
                    self.gc = Gc::Scan { victim, page };
                    return false;
                }
                if page == ppb && self.loss != LossRecord::Saved {
                    // The victim held a page GC marked lost: its erase waits for a checkpoint
                    // that holds the mark (`LossRecord`).
                    self.gc = Gc::Scan { victim, page };
                    return false;
                }
                if page == ppb {
                    queue.push(
                        Tag::new(TagKind::GcErase, 0, 0),
                        FlashOp::Erase { block: victim },
                    );
                    self.gc = Gc::Erasing { victim };
                } else {
                    let from = victim.page(&self.geometry, page);
                    let op = FlashOp::Read {
                        ppn: from,
                        dram_offset_bytes: self.gc_page.start,
                        sectors: Sectors::ALL,
                    };
                    queue.push(Tag::new(TagKind::GcRead, 0, 0), op);
                    self.gc = Gc::Reading { victim, page };
                }
                true
            }
            Gc::Reading { .. } | Gc::Programming { .. } | Gc::Erasing { .. } => false,
        }
    }

    /// The used block with the fewest valid pages, if copying it frees at least one page.
    fn pick_victim(&self, dram: &[u8]) -> Option<PhysBlock> {
        let states = self.block_state.bytes(dram);
        let ppb = self.geometry.pages_per_block;
        (0..self.geometry.block_count())
            .filter(|b| states[*b as usize] == BLOCK_USED)
            .map(|b| (self.block_valid.u32(dram, b as usize), b))
            .filter(|(valid, _)| *valid < ppb)
            .filter(|(_, b)| !self.unsaved_records.iter().any(|(r, _)| r == b))
            .min()
            .map(|(_, b)| PhysBlock(b))
    }

    /// Handles the completion of a GC flash operation.
    pub fn gc_complete(
        &mut self,
        dram: &mut [u8],
        queue: &mut FlashQueue,
        kind: TagKind,
        result: Result<(), FlashError>,
    ) {
        match (self.gc, kind) {
            (Gc::Reading { victim, page }, TagKind::GcRead) => {
                let from = victim.page(&self.geometry, page);
                let lpn = self.p2l.u32(dram, from.0 as usize);
                let spare_at = self.gc_page.start + self.geometry.page_size_bytes as usize;
                let spare = &dram[spare_at..spare_at + SPARE_BYTES];
                // A page whose record does not name its logical page is as lost as one the
                // media could not read.
                let version = lpn
                    .checked_sub(1)
                    .and_then(|lpn| Self::data_version(spare, lpn));
                let failed = result.is_err() || (lpn != 0 && version.is_none());
                let failures = match self.gc_read_failures {
                    (at, n) if at == from => n,
                    _ => 0,
                };
                if failed && lpn != 0 && failures < READ_RETRIES {
                    // Read it again (`crate::read_retry`): the scan resumes at this page.
                    self.gc_read_failures = (from, failures + 1);
                    self.reads.retries += 1;
                    self.gc = Gc::Scan { victim, page };
                    return;
                }
                self.gc_read_failures.1 = 0;
                if failed {
                    // The data is lost: reads must say so, not return zeros or a stale page.
                    self.stats.media_failures += 1;
                    self.reads.unrecovered += u64::from(lpn != 0);
                    if lpn != 0 {
                        self.trim(dram, lpn - 1);
                        self.l2p.set_u32(dram, lpn as usize - 1, L2P_LOST);
                        self.loss = LossRecord::Unsaved;
                    }
                    self.gc = Gc::Scan {
                        victim,
                        page: page + 1,
                    };
                    return;
                }
                if lpn == 0 {
                    // Overwritten or trimmed while we read it.
                    self.gc = Gc::Scan {
                        victim,
                        page: page + 1,
                    };
                    return;
                }
                // A GC read and its program are queued back to back, and the reserve keeps a
                // free block for GC, so both room and a page exist; if not, rescan later.
                match (queue.has_room(1), self.allocate(dram, true)) {
                    (true, Some(to)) => {
                        let spare = &mut dram[spare_at..spare_at + SPARE_BYTES];
                        self.stamp(spare, Some(lpn - 1), version);
                        let op = FlashOp::Program {
                            ppn: to,
                            dram_offset_bytes: self.gc_page.start,
                        };
                        queue.push(Tag::new(TagKind::GcProgram, 0, 0), op);
                        self.gc = Gc::Programming {
                            victim,
                            page,
                            lpn: lpn - 1,
                            from,
                            to,
                        };
                    }
                    // No block left for the copy (retired blocks have eaten the spare): GC gives
                    // up and the device is full; writes fail until a trim or an overwrite frees
                    // space, rather than waiting for a block that will never come.
                    (true, None) if !self.hold_programs && self.gc_has_no_block() => {
                        self.block_state.bytes_mut(dram)[victim.0 as usize] = BLOCK_USED;
                        self.gc = Gc::Idle;
                        self.full = true;
                    }
                    _ => self.gc = Gc::Scan { victim, page },
                }
            }
            (
                Gc::Programming {
                    victim,
                    page,
                    lpn,
                    from,
                    to,
                },
                TagKind::GcProgram,
            ) => {
                self.program_finished(dram, to, result.is_ok());
                if result.is_ok() {
                    if self.commit_if(dram, lpn, to, from) {
                        self.stats.gc_pages_moved += 1;
                    }
                    self.gc = Gc::Scan {
                        victim,
                        page: page + 1,
                    };
                } else {
                    // Copy the same page again to a new location.
                    self.gc = Gc::Scan { victim, page };
                }
            }
            (Gc::Erasing { victim }, TagKind::GcErase) => {
                let ppb = self.geometry.pages_per_block;
                for p in 0..ppb {
                    self.p2l
                        .set_u32(dram, victim.page(&self.geometry, p).0 as usize, 0);
                }
                self.block_valid.set_u32(dram, victim.0 as usize, 0);
                let retiring = match self.retiring.iter().position(|b| *b == victim.0) {
                    Some(i) => {
                        self.retiring.swap_remove(i);
                        true
                    }
                    None => false,
                };
                if result.is_ok() && !retiring {
                    self.stats.blocks_erased += 1;
                    self.push_free(dram, victim);
                } else {
                    self.stats.media_failures += u64::from(result.is_err());
                    self.block_state.bytes_mut(dram)[victim.0 as usize] = BLOCK_BAD;
                }
                self.gc = Gc::Idle;
            }
            // A completion that does not match the GC state cannot come from our own queue.
            _ => {}
        }
    }
}
