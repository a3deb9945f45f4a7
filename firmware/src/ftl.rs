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

use crate::checkpoint::{Reader, RestoreError, require};
use crate::dram::{DramLayout, Region};
use crate::flash_queue::{FlashQueue, Tag, TagKind};
use crate::hal::{FlashError, FlashOp, Geometry, PhysBlock, PhysPage};
use crate::work::WorkCounters;

const BLOCK_USED: u8 = 0;
const BLOCK_FREE: u8 = 1;
const BLOCK_ACTIVE: u8 = 2;
const BLOCK_BAD: u8 = 3;
const BLOCK_GC: u8 = 4;

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
    pub stats: FtlStats,
}

/// Logical pages a geometry offers: everything but one active and one reserve block per die and
/// one spare, less over-provisioning. `None` if nothing is left.
pub(crate) fn logical_page_count(
    geometry: &Geometry,
    over_provisioning_percent: u8,
) -> Option<u32> {
    let usable = geometry
        .block_count()
        .checked_sub(2 * geometry.die_count() + 1)?;
    let pages = u64::from(usable) * u64::from(geometry.pages_per_block);
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
            stats: FtlStats::default(),
        };
        layout.block_valid.bytes_mut(dram).fill(0);
        layout.dies.bytes_mut(dram).fill(0);
        for b in (0..geometry.block_count()).rev() {
            ftl.push_free(dram, PhysBlock(b));
        }
        ftl
    }

    /// Writes the FTL's persistent state (scalars, then its DRAM tables) to `sink`. Garbage
    /// collection must be idle (the caller checks).
    pub fn save(&self, dram: &[u8], sink: &mut dyn FnMut(&[u8])) {
        let g = &self.geometry;
        for v in [
            g.channels,
            g.ways,
            g.dies_per_way,
            g.blocks_per_die,
            g.pages_per_block,
            g.page_size_bytes,
            self.logical_pages,
            self.free_blocks,
            self.reserve_blocks,
            self.next_die,
            u32::from(self.gc_active.is_some()),
            self.gc_active.map_or(0, |(b, _)| b.0),
            self.gc_active.map_or(0, |(_, p)| p),
            u32::from(self.full),
        ] {
            sink(&v.to_le_bytes());
        }
        let s = &self.stats;
        for v in [
            self.mapped_pages,
            s.host_pages_written,
            s.gc_pages_moved,
            s.blocks_erased,
            s.media_failures,
        ] {
            sink(&v.to_le_bytes());
        }
        for region in self.tables() {
            sink(region.bytes(dram));
        }
    }

    /// The DRAM tables that persist, in their saved order (the GC page is scratch).
    fn tables(&self) -> [Region; 6] {
        [
            self.l2p,
            self.p2l,
            self.block_valid,
            self.block_next_free,
            self.block_state,
            self.dies,
        ]
    }

    /// Replaces this freshly formatted FTL's state with a saved one, checking every value a later
    /// lookup or allocation trusts.
    pub fn restore(&mut self, dram: &mut [u8], r: &mut Reader<'_>) -> Result<(), RestoreError> {
        let g = self.geometry;
        for (want, field) in [
            (g.channels, "geometry.channels"),
            (g.ways, "geometry.ways"),
            (g.dies_per_way, "geometry.dies_per_way"),
            (g.blocks_per_die, "geometry.blocks_per_die"),
            (g.pages_per_block, "geometry.pages_per_block"),
            (g.page_size_bytes, "geometry.page_size_bytes"),
            (self.logical_pages, "logical_pages"),
        ] {
            require(r.u32(field)? == want, field)?;
        }
        let blocks = g.block_count();
        let dies = g.die_count();
        let ppb = g.pages_per_block;
        let free_blocks = r.u32("free_blocks")?;
        require(free_blocks <= blocks, "free_blocks")?;
        let reserve_blocks = r.u32("reserve_blocks")?;
        require(reserve_blocks <= blocks, "reserve_blocks")?;
        let next_die = r.u32("next_die")?;
        require(next_die < dies, "next_die")?;
        let gc_active = match (r.u32("gc_active")?, r.u32("gc_block")?, r.u32("gc_page")?) {
            (0, _, _) => None,
            (1, b, p) if b < blocks && p <= ppb => Some((PhysBlock(b), p)),
            _ => return Err(RestoreError::Invalid("gc_active")),
        };
        let full = match r.u32("full")? {
            0 => false,
            1 => true,
            _ => return Err(RestoreError::Invalid("full")),
        };
        let mapped_pages = r.u64("mapped_pages")?;
        require(
            mapped_pages <= u64::from(self.logical_pages),
            "mapped_pages",
        )?;
        let stats = FtlStats {
            host_pages_written: r.u64("host_pages_written")?,
            gc_pages_moved: r.u64("gc_pages_moved")?,
            blocks_erased: r.u64("blocks_erased")?,
            media_failures: r.u64("media_failures")?,
        };
        let names = [
            "l2p",
            "p2l",
            "block_valid",
            "block_next_free",
            "block_state",
            "dies",
        ];
        for (region, name) in self.tables().into_iter().zip(names) {
            let bytes = r.take(region.len, name)?;
            region.bytes_mut(dram).copy_from_slice(bytes);
        }
        let pages = g.page_count();
        let all = |region: Region, ok: &dyn Fn(u32) -> bool, dram: &[u8]| {
            (0..region.len / 4).all(|i| ok(region.u32(dram, i)))
        };
        let logical = self.logical_pages;
        require(
            all(self.l2p, &|v| v == L2P_LOST || u64::from(v) <= pages, dram),
            "l2p",
        )?;
        require(all(self.p2l, &|v| v <= logical, dram), "p2l")?;
        require(all(self.block_valid, &|v| v <= ppb, dram), "block_valid")?;
        require(
            all(self.block_next_free, &|v| v <= blocks, dram),
            "block_next_free",
        )?;
        require(
            self.block_state.bytes(dram).iter().all(|s| *s <= BLOCK_GC),
            "block_state",
        )?;
        let die_ok = (0..dies).all(|d| {
            self.die_word(dram, d, DIE_FREE_HEAD) <= blocks
                && self.die_word(dram, d, DIE_FREE_COUNT) <= g.blocks_per_die
                && self.die_word(dram, d, DIE_ACTIVE) <= blocks
                && self.die_word(dram, d, DIE_NEXT_PAGE) <= ppb
        });
        require(die_ok, "dies")?;
        self.check_free_lists(dram, free_blocks, gc_active)?;
        self.free_blocks = free_blocks;
        self.reserve_blocks = reserve_blocks;
        self.next_die = next_die;
        self.gc_active = gc_active;
        self.gc = Gc::Idle;
        self.full = full;
        self.mapped_pages = mapped_pages;
        self.stats = stats;
        Ok(())
    }

    /// Checks that restored tables agree with each other: each die's free list holds exactly
    /// its count of its own free blocks (no cycle), the counts add up to `free_blocks`, every
    /// free block is on a list, open active blocks are active and on their die, and no block is
    /// mid-GC (GC was idle when the state was saved).
    fn check_free_lists(
        &self,
        dram: &[u8],
        free_blocks: u32,
        gc_active: Option<(PhysBlock, u32)>,
    ) -> Result<(), RestoreError> {
        let g = self.geometry;
        let states = self.block_state.bytes(dram);
        let mut listed = 0u32;
        for die in 0..g.die_count() {
            let count = self.die_word(dram, die, DIE_FREE_COUNT);
            let mut next = self.die_word(dram, die, DIE_FREE_HEAD);
            for _ in 0..count {
                let b = next
                    .checked_sub(1)
                    .ok_or(RestoreError::Invalid("free list"))?;
                let on_die = self.die_of_block(PhysBlock(b)) == die;
                require(on_die && states[b as usize] == BLOCK_FREE, "free list")?;
                next = self.block_next_free.u32(dram, b as usize);
            }
            require(next == 0, "free list")?;
            listed += count;
            // An active block with pages left is written next: it must be active, on its die.
            let active = self.die_word(dram, die, DIE_ACTIVE);
            let open = self.die_word(dram, die, DIE_NEXT_PAGE) < g.pages_per_block;
            if let Some(b) = active.checked_sub(1).filter(|_| open) {
                let on_die = self.die_of_block(PhysBlock(b)) == die;
                require(on_die && states[b as usize] == BLOCK_ACTIVE, "dies")?;
            }
        }
        require(listed == free_blocks, "free_blocks")?;
        let free_states = states.iter().filter(|s| **s == BLOCK_FREE).count();
        require(free_states == free_blocks as usize, "block_state")?;
        require(!states.contains(&BLOCK_GC), "block_state")?;
        if let Some((b, _)) = gc_active.filter(|(_, p)| *p < g.pages_per_block) {
            require(states[b.0 as usize] == BLOCK_ACTIVE, "gc_active")?;
        }
        Ok(())
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

    fn pop_free(&mut self, dram: &mut [u8], die: u32) -> Option<PhysBlock> {
        let head = self.die_word(dram, die, DIE_FREE_HEAD);
        let b = PhysBlock(head.checked_sub(1)?);
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
        let ppb = self.geometry.pages_per_block;
        let (block, page) = match self.gc_active {
            Some((b, p)) if p < ppb => (b, p),
            _ => {
                // Open a block on the die with the most free blocks, to keep dies balanced.
                let die = (0..self.geometry.die_count())
                    .max_by_key(|d| (self.die_word(dram, *d, DIE_FREE_COUNT), u32::MAX - d))?;
                let b = self.pop_free(dram, die)?;
                self.block_state.bytes_mut(dram)[b.0 as usize] = BLOCK_ACTIVE;
                (b, 0)
            }
        };
        self.gc_active = Some((block, page + 1));
        Some(block.page(&self.geometry, page))
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
        if !ok {
            self.stats.media_failures += 1;
        }
        if ppn.0 % self.geometry.pages_per_block == self.geometry.pages_per_block - 1 {
            let b = self.block_of(ppn).0 as usize;
            if self.block_state.bytes(dram)[b] == BLOCK_ACTIVE {
                self.block_state.bytes_mut(dram)[b] = BLOCK_USED;
            }
        }
    }

    /// Maps `lpn` to the freshly programmed `ppn`. With `expect` set, only if `lpn` still maps to
    /// `expect` (a GC copy must not undo a host write that landed meanwhile); returns whether the
    /// mapping was made.
    pub fn commit(
        &mut self,
        dram: &mut [u8],
        lpn: u32,
        ppn: PhysPage,
        expect: Option<PhysPage>,
    ) -> bool {
        let old = self.lookup(dram, lpn);
        if expect.is_some() && old != expect {
            return false;
        }
        if let Some(old) = old {
            self.invalidate(dram, old);
        }
        self.l2p.set_u32(dram, lpn as usize, ppn.0 + 1);
        self.p2l.set_u32(dram, ppn.0 as usize, lpn + 1);
        let b = self.block_of(ppn).0 as usize;
        let v = self.block_valid.u32(dram, b);
        self.block_valid.set_u32(dram, b, v + 1);
        self.mapped_pages += 1;
        true
    }

    /// Unmaps `lpn` (Dataset Management deallocate).
    pub fn trim(&mut self, dram: &mut [u8], lpn: u32) {
        if let Some(old) = self.lookup(dram, lpn) {
            self.invalidate(dram, old);
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

    /// Whether garbage collection is copying or erasing.
    pub fn gc_running(&self) -> bool {
        self.gc != Gc::Idle
    }

    /// Advances garbage collection by queueing its next flash operation, if one is due.
    /// Returns whether anything changed.
    pub fn gc_step(
        &mut self,
        dram: &mut [u8],
        queue: &mut FlashQueue,
        work: &mut WorkCounters,
    ) -> bool {
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
                if result.is_err() {
                    // The data is lost: reads must say so, not return zeros or a stale page.
                    self.stats.media_failures += 1;
                    if lpn != 0 {
                        self.trim(dram, lpn - 1);
                        self.l2p.set_u32(dram, lpn as usize - 1, L2P_LOST);
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
                    if self.commit(dram, lpn, to, Some(from)) {
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
                if result.is_ok() {
                    self.stats.blocks_erased += 1;
                    self.push_free(dram, victim);
                } else {
                    self.stats.media_failures += 1;
                    self.block_state.bytes_mut(dram)[victim.0 as usize] = BLOCK_BAD;
                }
                self.gc = Gc::Idle;
            }
            // A completion that does not match the GC state cannot come from our own queue.
            _ => {}
        }
    }
}
