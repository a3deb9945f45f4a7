//! An in-memory NAND fake with the constraints of real flash, for tests.
//!
//! [`MemFlash`] keeps every page in RAM, enforces erase-before-program and in-order programming
//! within a block, and delivers completions out of order across dies (in order within a die)
//! under a seeded generator, so tests exercise the firmware's asynchronous paths. Reads of chosen
//! pages can be made to fail, to test media-error handling. It counts what it did.

extern crate alloc;

use alloc::collections::BTreeSet;
use alloc::vec;
use alloc::vec::Vec;

use crate::hal::{Flash, FlashCompletion, FlashError, FlashOp, Geometry, PhysPage};

/// Counts of operations performed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemFlashStats {
    /// Pages read.
    pub reads: u64,
    /// Pages programmed.
    pub programs: u64,
    /// Blocks erased.
    pub erases: u64,
}

/// A RAM-backed NAND array (cloning it is a power cut: the copy keeps the pages and the
/// operations in flight).
#[derive(Clone, Debug)]
pub struct MemFlash {
    geometry: Geometry,
    pages: Vec<u8>,
    next_page: Vec<u32>,
    pending: Vec<(u32, FlashOp)>,
    queue_depth: usize,
    rng: u64,
    failing_reads: BTreeSet<u32>,
    /// What has been done so far.
    pub stats: MemFlashStats,
}

impl MemFlash {
    /// An erased array of `geometry`, accepting up to `queue_depth` operations at once, with
    /// completion order drawn from `seed`.
    pub fn new(geometry: Geometry, queue_depth: usize, seed: u64) -> Self {
        let bytes = geometry.page_count() as usize * geometry.page_size_bytes as usize;
        Self {
            geometry,
            pages: vec![0xFF; bytes],
            next_page: vec![0; geometry.block_count() as usize],
            pending: Vec::new(),
            queue_depth,
            rng: seed | 1,
            failing_reads: BTreeSet::new(),
            stats: MemFlashStats::default(),
        }
    }

    /// Makes every later read of `ppn` fail with [`FlashError::Media`].
    pub fn fail_reads_of(&mut self, ppn: PhysPage) {
        self.failing_reads.insert(ppn.0);
    }

    /// The bytes of page `ppn` as stored.
    pub fn page(&self, ppn: PhysPage) -> &[u8] {
        let size = self.geometry.page_size_bytes as usize;
        &self.pages[ppn.0 as usize * size..(ppn.0 as usize + 1) * size]
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
        let size = self.geometry.page_size_bytes as usize;
        let ppb = self.geometry.pages_per_block;
        match op {
            FlashOp::Read {
                ppn,
                dram_offset_bytes,
            } => {
                let dst = dram
                    .get_mut(dram_offset_bytes..dram_offset_bytes + size)
                    .ok_or(FlashError::OutOfRange)?;
                self.stats.reads += 1;
                if self.failing_reads.contains(&ppn.0) {
                    return Err(FlashError::Media);
                }
                dst.copy_from_slice(
                    &self.pages[ppn.0 as usize * size..(ppn.0 as usize + 1) * size],
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
                self.pages[ppn.0 as usize * size..(ppn.0 as usize + 1) * size].copy_from_slice(src);
                self.stats.programs += 1;
            }
            FlashOp::Erase { block } => {
                let start = block.0 as usize * ppb as usize * size;
                self.pages[start..start + ppb as usize * size].fill(0xFF);
                self.next_page[block.0 as usize] = 0;
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
        let in_range = match op {
            FlashOp::Read { ppn, .. } | FlashOp::Program { ppn, .. } => {
                u64::from(ppn.0) < self.geometry.page_count()
            }
            FlashOp::Erase { block } => block.0 < self.geometry.block_count(),
        };
        if !in_range {
            return Err(FlashError::OutOfRange);
        }
        if self.pending.len() >= self.queue_depth {
            return Err(FlashError::Busy);
        }
        self.pending.push((tag, op));
        Ok(())
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
