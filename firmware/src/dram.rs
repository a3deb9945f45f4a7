//! The DRAM arena: one byte slice the integrator provides, carved into fixed regions at start-up.
//!
//! Every table lives here as little-endian words, so the firmware needs no allocator and the
//! board can place the arena wherever its linker script says. [`DramLayout::new`] computes the
//! regions from the configuration and geometry; its total is what the integrator must provide.

use sagessd_abi::ns_config::{MAX_LAYERS, ns_config_size_bytes};

use crate::config::FirmwareConfig;
use crate::hal::Geometry;

/// A byte range of the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Region {
    pub start: usize,
    pub len: usize,
}

impl Region {
    /// The region's bytes.
    pub fn bytes<'a>(&self, dram: &'a [u8]) -> &'a [u8] {
        &dram[self.start..self.start + self.len]
    }

    /// The region's bytes, mutable.
    pub fn bytes_mut<'a>(&self, dram: &'a mut [u8]) -> &'a mut [u8] {
        &mut dram[self.start..self.start + self.len]
    }

    /// Word `i` of a region of `u32`s.
    pub fn u32(&self, dram: &[u8], i: usize) -> u32 {
        let o = self.start + 4 * i;
        u32::from_le_bytes([dram[o], dram[o + 1], dram[o + 2], dram[o + 3]])
    }

    /// Sets word `i` of a region of `u32`s.
    pub fn set_u32(&self, dram: &mut [u8], i: usize, v: u32) {
        let o = self.start + 4 * i;
        dram[o..o + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Word `i` of a region of `u64`s.
    pub fn u64(&self, dram: &[u8], i: usize) -> u64 {
        let o = self.start + 8 * i;
        let mut b = [0u8; 8];
        b.copy_from_slice(&dram[o..o + 8]);
        u64::from_le_bytes(b)
    }

    /// Sets word `i` of a region of `u64`s.
    pub fn set_u64(&self, dram: &mut [u8], i: usize, v: u64) {
        let o = self.start + 8 * i;
        dram[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// The sub-region `offset..offset + len` of this region.
    pub fn sub(&self, offset: usize, len: usize) -> Region {
        Region {
            start: self.start + offset,
            len,
        }
    }
}

/// Per-sampling-slot regions: the job's NS_config and its result arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct SlotRegions {
    /// The NS_config as DMA'd from the host.
    pub config: Region,
    /// Unique node ids, `u64`, first-seen order.
    pub nodes: Region,
    /// Local `indptr` per layer: `MAX_LAYERS` rows of `max_nodes + 1` `u32`.
    pub indptr: Region,
    /// Local source indices of all layers, `u32`, layer after layer.
    pub indices: Region,
}

/// Where every table sits in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DramLayout {
    /// Logical page → physical page + 1 (0: unmapped), `u32` per logical page.
    pub l2p: Region,
    /// Physical page → logical page + 1 (0: not valid), `u32` per physical page.
    pub p2l: Region,
    /// Valid pages per block, `u32` per block.
    pub block_valid: Region,
    /// Next block in its die's free list + 1 (0: end), `u32` per block.
    pub block_next_free: Region,
    /// Block state ([`crate::ftl`] `BLOCK_*`), one byte per block.
    pub block_state: Region,
    /// Per die: free-list head + 1, free count, active block + 1, next page in it (4 × `u32`).
    pub dies: Region,
    /// Page-buffer slot metadata, 12 bytes per slot.
    pub slot_meta: Region,
    /// Page-buffer slot data, one flash page per slot.
    pub slot_data: Region,
    /// One page for garbage-collection copies.
    pub gc_page: Region,
    /// Node-id → local-id hash table of the running job, `u32` (local id + 1, 0: empty).
    pub node_hash: Region,
    /// Global neighbour positions of the running layer, `u64` per sampled edge.
    pub entries: Region,
    /// Sort keys of the running gather (`page << 29 | item`), `u64` per item.
    pub gather_keys: Region,
    /// Second buffer of the gather keys' radix sort.
    pub gather_scratch: Region,
    /// Values the running gather read, `u64` per item.
    pub gather_values: Region,
    /// Sampling-slot regions, `isp_slots` of them.
    pub slots: [SlotRegions; crate::config::MAX_ISP_SLOTS],
    /// Total bytes.
    pub total_bytes: usize,
}

/// Bytes of metadata per page-buffer slot.
pub(crate) const SLOT_META_BYTES: usize = 12;

impl DramLayout {
    /// Lays out the arena; `None` if the sizes overflow `usize`. `config` must be validated.
    pub fn new(config: &FirmwareConfig, geometry: &Geometry, logical_pages: u32) -> Option<Self> {
        let mut next = 0usize;
        let mut take = |len: usize| -> Option<Region> {
            // Keep every region 8-byte aligned so u64 tables stay naturally aligned on the board.
            let start = next.checked_add(7)? & !7;
            next = start.checked_add(len)?;
            Some(Region { start, len })
        };
        let blocks = geometry.block_count() as usize;
        let pages = usize::try_from(geometry.page_count()).ok()?;
        let page = geometry.page_size_bytes as usize;
        let slots = config.page_buffer_pages as usize;
        let nodes = config.max_subgraph_nodes as usize;
        let edges = config.max_subgraph_edges as usize;
        let l2p = take((logical_pages as usize).checked_mul(4)?)?;
        let p2l = take(pages.checked_mul(4)?)?;
        let block_valid = take(blocks.checked_mul(4)?)?;
        let block_next_free = take(blocks.checked_mul(4)?)?;
        let block_state = take(blocks)?;
        let dies = take((geometry.die_count() as usize).checked_mul(16)?)?;
        let slot_meta = take(slots.checked_mul(SLOT_META_BYTES)?)?;
        let slot_data = take(slots.checked_mul(page)?)?;
        let gc_page = take(page)?;
        let node_hash = take(hash_capacity(config.max_subgraph_nodes).checked_mul(4)?)?;
        let entries = take(edges.checked_mul(8)?)?;
        let gather_items = nodes.checked_mul(2)?.max(edges);
        let gather_keys = take(gather_items.checked_mul(8)?)?;
        let gather_scratch = take(gather_items.checked_mul(8)?)?;
        let gather_values = take(gather_items.checked_mul(8)?)?;
        let mut slot_regions = [SlotRegions::default(); crate::config::MAX_ISP_SLOTS];
        for s in slot_regions.iter_mut().take(usize::from(config.isp_slots)) {
            *s = SlotRegions {
                config: take(ns_config_size_bytes(config.limits.max_targets as usize))?,
                nodes: take(nodes.checked_mul(8)?)?,
                indptr: take(
                    MAX_LAYERS
                        .checked_mul(nodes.checked_add(1)?)?
                        .checked_mul(4)?,
                )?,
                indices: take(edges.checked_mul(4)?)?,
            };
        }
        Some(Self {
            l2p,
            p2l,
            block_valid,
            block_next_free,
            block_state,
            dies,
            slot_meta,
            slot_data,
            gc_page,
            node_hash,
            entries,
            gather_keys,
            gather_scratch,
            gather_values,
            slots: slot_regions,
            total_bytes: next,
        })
    }
}

/// Entries of the node hash table: the power of two at least twice `max_nodes`.
pub(crate) fn hash_capacity(max_nodes: u32) -> usize {
    (2 * max_nodes as usize).next_power_of_two()
}
