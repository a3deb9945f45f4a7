//! Where FTL checkpoints live on flash and how big one is ([`crate::checkpoint`] writes and reads
//! them): the payload's size (a header, the block states, the logical-to-physical table) and the
//! two slots' reserved blocks at the top of the dies. The FTL reserves those blocks before it
//! derives the namespace's capacity, so this is apart from the checkpoint writer, which needs
//! the FTL.

use crate::config::CHECKPOINT_WINDOWS;
use crate::hal::{Geometry, PhysBlock, PhysPage};

/// Bytes of the header at the start of the payload.
pub(crate) const HEADER_BYTES: usize = 256;

/// Where checkpoints live and how big one is, for a geometry and capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CheckpointLayout {
    /// The flash it lays the slots out on.
    pub geometry: Geometry,
    /// Pages of one checkpoint.
    pub pages: u32,
    /// Payload bytes of one checkpoint.
    pub payload_bytes: u32,
    /// Reserved blocks per slot.
    pub blocks_per_slot: u32,
}

impl CheckpointLayout {
    /// The layout for `logical_pages` on `geometry`; `None` if a checkpoint does not fit the
    /// 32-bit sizes or would need more than a quarter of the flash.
    pub fn new(geometry: &Geometry, logical_pages: u32) -> Option<Self> {
        let payload = payload_bytes(geometry, logical_pages)?;
        let page = u64::from(geometry.page_size_bytes);
        let pages = u32::try_from(payload.div_ceil(page)).ok()?;
        let by_size = pages.div_ceil(geometry.pages_per_block);
        // Spread over dies for parallel programs, but keep at least 8 pages per block.
        let spread = geometry
            .die_count()
            .min(CHECKPOINT_WINDOWS as u32)
            .min(pages.div_ceil(8));
        let blocks_per_slot = by_size.max(spread).max(1);
        (u64::from(blocks_per_slot) * 2 * 4 <= u64::from(geometry.block_count())).then_some(Self {
            geometry: *geometry,
            pages,
            payload_bytes: u32::try_from(payload).ok()?,
            blocks_per_slot,
        })
    }

    /// Blocks both slots reserve.
    pub fn reserved_blocks(&self) -> u32 {
        2 * self.blocks_per_slot
    }

    /// Block `j` of slot `slot`: the slots' blocks are numbered `k = slot × blocks_per_slot + j`
    /// and taken from the top of the dies, die `k % dies`.
    pub fn block(&self, slot: u32, j: u32) -> PhysBlock {
        let g = &self.geometry;
        let k = slot * self.blocks_per_slot + j;
        let die = k % g.die_count();
        PhysBlock(die * g.blocks_per_die + g.blocks_per_die - 1 - k / g.die_count())
    }

    /// Whether `block` belongs to a slot.
    pub fn is_reserved(&self, block: PhysBlock) -> bool {
        let g = &self.geometry;
        let (die, in_die) = (block.0 / g.blocks_per_die, block.0 % g.blocks_per_die);
        let from_top = g.blocks_per_die - 1 - in_die;
        let k = u64::from(from_top) * u64::from(g.die_count()) + u64::from(die);
        k < u64::from(self.reserved_blocks())
    }

    /// Which page of slot `slot` physical page `ppn` is, if it is one.
    pub fn index_of(&self, slot: u32, ppn: PhysPage) -> Option<u32> {
        let g = &self.geometry;
        let block = PhysBlock(ppn.0 / g.pages_per_block);
        let j = (0..self.blocks_per_slot).find(|j| self.block(slot, *j) == block)?;
        let i = (ppn.0 % g.pages_per_block) * self.blocks_per_slot + j;
        (i < self.pages).then_some(i)
    }

    /// Where page `i` of slot `slot` lives.
    pub fn page(&self, slot: u32, i: u32) -> PhysPage {
        self.block(slot, i % self.blocks_per_slot)
            .page(&self.geometry, i / self.blocks_per_slot)
    }
}

/// Payload bytes for `logical_pages` on `geometry`: header, block states, L2P.
fn payload_bytes(geometry: &Geometry, logical_pages: u32) -> Option<u64> {
    let blocks = u64::from(geometry.block_count());
    let l2p = u64::from(logical_pages) * 4;
    let total = HEADER_BYTES as u64 + blocks + l2p;
    (total <= u64::from(u32::MAX)).then_some(total)
}

/// Blocks the checkpoint slots reserve on `geometry`, sized for the largest capacity it could
/// offer (`upper_logical_pages`), so that the capacity can be derived after subtracting them.
pub(crate) fn reserved_block_count(geometry: &Geometry, upper_logical_pages: u32) -> Option<u32> {
    CheckpointLayout::new(geometry, upper_logical_pages).map(|l| l.reserved_blocks())
}
