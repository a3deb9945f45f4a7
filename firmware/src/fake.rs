//! An in-memory NAND fake with the constraints of real flash, for tests.
//!
//! [`MemFlash`] keeps every page (data and spare) in RAM, enforces erase-before-program and
//! in-order programming within a block, and delivers completions out of order across dies (in
//! order within a die) under a seeded generator, so tests exercise the firmware's asynchronous
//! paths. Faults are injected on demand: reads, programs or erases of chosen pages and blocks
//! fail, and [`MemFlash::power_cut`] loses the operations in flight the way a power loss does
//! (each die's operation under way is either finished, torn or never started; everything queued
//! behind it is lost). It counts what it did.

extern crate alloc;

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec;
use alloc::vec::Vec;

use crate::hal::{Flash, FlashCompletion, FlashError, FlashOp, Geometry, PhysBlock, PhysPage};

/// Counts of operations performed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemFlashStats {
    /// Pages read.
    pub reads: u64,
    /// Pages programmed.
    pub programs: u64,
    /// Blocks erased.
    pub erases: u64,
    /// Pages forgotten (`Flash::forget`): their data was overwritten with 0xDB, so that a
    /// firmware that still reads one finds garbage and its tests fail.
    pub forgotten: u64,
}

/// What a power cut did to the operation each die had under way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Operations lost before they started.
    pub lost: u32,
    /// Operations that finished but were never reported.
    pub finished: u32,
    /// Programs left torn (the page fails its reads).
    pub torn_programs: u32,
    /// Erases left torn (every page of the block fails its reads until it is erased again).
    pub torn_erases: u32,
}

/// A RAM-backed NAND array (cloning it copies the pages and the operations in flight).
#[derive(Clone, Debug)]
pub struct MemFlash {
    geometry: Geometry,
    window: usize,
    pages: Vec<u8>,
    next_page: Vec<u32>,
    pending: Vec<(u32, FlashOp)>,
    queue_depth: usize,
    rng: u64,
    /// Pages whose reads fail, with how many more of them fail (`u32::MAX`: every one).
    failing_reads: BTreeMap<u32, u32>,
    failing_programs: BTreeSet<u32>,
    failing_erases: BTreeSet<u32>,
    /// Pages that fail every read until their block is erased (torn by a power cut).
    torn: BTreeSet<u32>,
    /// What has been done so far.
    pub stats: MemFlashStats,
    /// Physical pages read, in order, while a test keeps a log ([`MemFlash::log_reads`]).
    read_log: Option<Vec<u32>>,
}

impl MemFlash {
    /// An erased array of `geometry`, accepting up to `queue_depth` operations at once, with
    /// completion order drawn from `seed`.
    pub fn new(geometry: Geometry, queue_depth: usize, seed: u64) -> Self {
        let window = geometry.window_bytes();
        let bytes = geometry.page_count() as usize * window;
        Self {
            geometry,
            window,
            pages: vec![0xFF; bytes],
            next_page: vec![0; geometry.block_count() as usize],
            pending: Vec::new(),
            queue_depth,
            rng: seed | 1,
            failing_reads: BTreeMap::new(),
            failing_programs: BTreeSet::new(),
            failing_erases: BTreeSet::new(),
            torn: BTreeSet::new(),
            read_log: None,
            stats: MemFlashStats::default(),
        }
    }

    /// Starts logging the physical pages read (or keeps logging): [`Self::take_read_log`] hands
    /// them over.
    pub fn log_reads(&mut self) {
        self.read_log.get_or_insert_with(Vec::new);
    }

    /// The pages read since the last call (empty when not logging).
    pub fn take_read_log(&mut self) -> Vec<u32> {
        self.read_log
            .as_mut()
            .map(core::mem::take)
            .unwrap_or_default()
    }

    /// Makes every later read of `ppn` fail with [`FlashError::Media`] (an uncorrectable page).
    pub fn fail_reads_of(&mut self, ppn: PhysPage) {
        self.failing_reads.insert(ppn.0, u32::MAX);
    }

    /// Makes the next `count` reads of `ppn` fail with [`FlashError::Media`], and the ones after
    /// succeed (a transient fault that a read-retry gets past).
    pub fn fail_next_reads_of(&mut self, ppn: PhysPage, count: u32) {
        self.failing_reads.insert(ppn.0, count);
    }

    /// Makes the next program of `ppn` fail with [`FlashError::Media`] (the page is consumed).
    pub fn fail_program_of(&mut self, ppn: PhysPage) {
        self.failing_programs.insert(ppn.0);
    }

    /// Makes every later erase of `block` fail with [`FlashError::Media`].
    pub fn fail_erases_of(&mut self, block: PhysBlock) {
        self.failing_erases.insert(block.0);
    }

    /// The data bytes of page `ppn` as stored.
    pub fn page(&self, ppn: PhysPage) -> &[u8] {
        let start = ppn.0 as usize * self.window;
        &self.pages[start..start + self.geometry.page_size_bytes as usize]
    }

    /// Operations submitted and not yet completed.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Cuts the power: the operation under way on each die (its oldest pending one) is, as
    /// drawn from `seed`, never started, finished without being reported, or torn; every other
    /// pending operation is lost. `dram` is the controller's arena as the cut found it (a
    /// program's data is still in its window). Afterwards nothing is pending.
    pub fn power_cut(&mut self, seed: u64, dram: &[u8]) -> CutReport {
        let mut rng = seed | 1;
        let mut report = CutReport::default();
        let mut dies_seen = BTreeSet::new();
        let mut scratch = dram.to_vec();
        let ppb = self.geometry.pages_per_block;
        for (_, op) in core::mem::take(&mut self.pending) {
            if !dies_seen.insert(self.die_of(&op)) {
                report.lost += 1;
                continue;
            }
            rng = sagessd_abi::sample::mix(rng);
            match (rng % 3, op) {
                (0, _) | (_, FlashOp::Read { .. }) => report.lost += 1,
                (1, op) => match self.perform(op, &mut scratch) {
                    Ok(()) => report.finished += 1,
                    Err(_) => report.lost += 1,
                },
                (_, FlashOp::Program { ppn, .. }) => {
                    let block = (ppn.0 / ppb) as usize;
                    if ppn.0 % ppb == self.next_page[block] {
                        self.next_page[block] += 1;
                        self.torn.insert(ppn.0);
                        report.torn_programs += 1;
                    } else {
                        report.lost += 1;
                    }
                }
                (_, FlashOp::Erase { block }) => {
                    for p in 0..ppb {
                        self.torn.insert(block.0 * ppb + p);
                    }
                    self.next_page[block.0 as usize] = ppb;
                    report.torn_erases += 1;
                }
            }
        }
        report
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: deterministic and good enough to shuffle completions.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn die_of(&self, op: &FlashOp) -> u32 {
        match op {
            FlashOp::Read { ppn, .. } | FlashOp::Program { ppn, .. } => self.geometry.die_of(*ppn),
            FlashOp::Erase { block } => block.0 / self.geometry.blocks_per_die,
        }
    }

    fn perform(&mut self, op: FlashOp, dram: &mut [u8]) -> Result<(), FlashError> {
        let size = self.window;
        let ppb = self.geometry.pages_per_block;
        match op {
            FlashOp::Read {
                ppn,
                dram_offset_bytes,
                sectors,
            } => {
                let dst = dram
                    .get_mut(dram_offset_bytes..dram_offset_bytes + size)
                    .ok_or(FlashError::OutOfRange)?;
                self.stats.reads += 1;
                if let Some(log) = &mut self.read_log {
                    log.push(ppn.0);
                }
                if let Some(left) = self.failing_reads.get_mut(&ppn.0)
                    && *left > 0
                {
                    *left = left.saturating_sub(u32::from(*left != u32::MAX));
                    return Err(FlashError::Media);
                }
                if self.torn.contains(&ppn.0) {
                    return Err(FlashError::Media);
                }
                // Only what was asked for: a firmware that reads a sector it did not ask for
                // finds stale bytes, and its tests fail.
                sectors.copy_window(
                    self.geometry.page_size_bytes as usize,
                    &self.pages[ppn.0 as usize * size..(ppn.0 as usize + 1) * size],
                    dst,
                );
            }
            FlashOp::Program {
                ppn,
                dram_offset_bytes,
            } => {
                let src = dram
                    .get(dram_offset_bytes..dram_offset_bytes + size)
                    .ok_or(FlashError::OutOfRange)?;
                let block = (ppn.0 / ppb) as usize;
                if ppn.0 % ppb != self.next_page[block] {
                    return Err(FlashError::NotErased);
                }
                self.next_page[block] += 1;
                if self.failing_programs.remove(&ppn.0) {
                    self.torn.insert(ppn.0);
                    return Err(FlashError::Media);
                }
                self.pages[ppn.0 as usize * size..(ppn.0 as usize + 1) * size].copy_from_slice(src);
                self.stats.programs += 1;
            }
            FlashOp::Erase { block } => {
                if self.failing_erases.contains(&block.0) {
                    return Err(FlashError::Media);
                }
                let start = block.0 as usize * ppb as usize * size;
                self.pages[start..start + ppb as usize * size].fill(0xFF);
                self.next_page[block.0 as usize] = 0;
                for p in 0..ppb {
                    self.torn.remove(&(block.0 * ppb + p));
                }
                self.stats.erases += 1;
            }
        }
        Ok(())
    }
}

impl Flash for MemFlash {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn submit(&mut self, tag: u32, op: FlashOp, _dram: &[u8]) -> Result<(), FlashError> {
        if !op.is_within(&self.geometry) {
            return Err(FlashError::OutOfRange);
        }
        if self.pending.len() >= self.queue_depth {
            return Err(FlashError::Busy);
        }
        self.pending.push((tag, op));
        Ok(())
    }

    fn forget(&mut self, ppn: PhysPage) {
        let start = ppn.0 as usize * self.window;
        if let Some(data) = self
            .pages
            .get_mut(start..start + self.geometry.page_size_bytes as usize)
        {
            data.fill(0xDB);
            self.stats.forgotten += 1;
        }
    }

    fn poll(&mut self, dram: &mut [u8]) -> Option<FlashCompletion> {
        if self.pending.is_empty() {
            return None;
        }
        // Pick a random die among those with work; complete its oldest operation.
        let pick = (self.next_random() % self.pending.len() as u64) as usize;
        let die = self.die_of(&self.pending[pick].1);
        let first = self
            .pending
            .iter()
            .position(|(_, op)| self.die_of(op) == die)?;
        let (tag, op) = self.pending.remove(first);
        let result = self.perform(op, dram);
        Some(FlashCompletion { tag, result })
    }
}
