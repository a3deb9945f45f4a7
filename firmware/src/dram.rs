//! The DRAM arena: one byte slice the integrator provides, carved into fixed regions at start-up.
//!
//! Every table lives here as little-endian words, so the firmware needs no allocator and the
//! board can place the arena wherever its linker script says. [`DramLayout::new`] computes the
//! regions from the configuration and geometry; its total is what the integrator must provide.

use sagessd_abi::ns_config::{MAX_LAYERS, ns_config_max_size_bytes};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::config::{
    CHECKPOINT_WINDOWS, FirmwareConfig, MINIBATCH_STATE_BYTES, TRIM_LOG_REGION_WINDOWS,
};
use crate::hal::Geometry;

/// Alignment of every arena region, relative to the arena's start, in bytes: a cache line of
/// the Cortex-A9 (32 B) and of x86 (64 B). An arena whose base is aligned this much has every
/// DMA page window on whole cache lines.
pub const DRAM_REGION_ALIGN_BYTES: usize = 64;

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

    /// Word `i` of a region of `u32`s. Every accessor indexes the region's own bytes, so a
    /// word past its end is a panic (a firmware bug), never a read of the next region.
    pub fn u32(&self, dram: &[u8], i: usize) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.bytes(dram)[4 * i..4 * i + 4]);
        u32::from_le_bytes(b)
    }

    /// Sets word `i` of a region of `u32`s.
    pub fn set_u32(&self, dram: &mut [u8], i: usize, v: u32) {
        self.bytes_mut(dram)[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Word `i` of a region of `u64`s.
    pub fn u64(&self, dram: &[u8], i: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes(dram)[8 * i..8 * i + 8]);
        u64::from_le_bytes(b)
    }

    /// Sets word `i` of a region of `u64`s.
    pub fn set_u64(&self, dram: &mut [u8], i: usize, v: u64) {
        self.bytes_mut(dram)[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// The region as a slice of `T` (native-endian words: values that cross the host
    /// boundary are stored `to_le`). Every region starts on a [`DRAM_REGION_ALIGN_BYTES`]
    /// boundary of an arena the firmware checks is at least 8-aligned at boot, so the cast
    /// cannot fail for a `T` of alignment 8 or less; a failure is a firmware bug (a panic).
    pub fn words<'a, T: FromBytes + Immutable + KnownLayout>(&self, dram: &'a [u8]) -> &'a [T] {
        as_words(self.bytes(dram))
    }

    /// The region as a mutable slice of `T` (see [`Self::words`]).
    pub fn words_mut<'a, T: FromBytes + IntoBytes + KnownLayout>(
        &self,
        dram: &'a mut [u8],
    ) -> &'a mut [T] {
        as_words_mut(self.bytes_mut(dram))
    }

    /// The sub-region `offset..offset + len` of this region; it must lie inside it.
    pub fn sub(&self, offset: usize, len: usize) -> Region {
        assert!(
            offset <= self.len && len <= self.len - offset,
            "sub-region {offset}+{len} past a region of {} bytes",
            self.len
        );
        Region {
            start: self.start + offset,
            len,
        }
    }
}

/// `bytes` (a region's, or a page window's) as a slice of `T`, the bytes past the last whole
/// `T` left out. A region's bytes are aligned for every `T` the firmware reads them as (see
/// [`Region::words`]); a misaligned slice is a firmware bug (a panic).
pub(crate) fn as_words<T: FromBytes + Immutable + KnownLayout>(bytes: &[u8]) -> &[T] {
    let len = bytes.len() - bytes.len() % core::mem::size_of::<T>();
    match <[T]>::ref_from_bytes(&bytes[..len]) {
        Ok(words) => words,
        Err(_) => panic!("DRAM words are not aligned"),
    }
}

/// `bytes` as a mutable slice of `T` (see [`as_words`]).
pub(crate) fn as_words_mut<T: FromBytes + IntoBytes + KnownLayout>(bytes: &mut [u8]) -> &mut [T] {
    let len = bytes.len() - bytes.len() % core::mem::size_of::<T>();
    match <[T]>::mut_from_bytes(&mut bytes[..len]) {
        Ok(words) => words,
        Err(_) => panic!("DRAM words are not aligned"),
    }
}

/// The byte slices of `regions`, which must not overlap (a panic otherwise: a firmware bug),
/// mutable at once and in the order given: what lets one loop read a page-buffer window and
/// write two tables of the arena without copying any of them.
pub(crate) fn split_mut<'a, const N: usize>(
    dram: &'a mut [u8],
    regions: [Region; N],
) -> [&'a mut [u8]; N] {
    let mut order: [usize; N] = core::array::from_fn(|i| i);
    // A region of no bytes sorts before one that starts where it does.
    order.sort_unstable_by_key(|&i| (regions[i].start, regions[i].len));
    let mut out: [Option<&'a mut [u8]>; N] = [const { None }; N];
    let mut rest = dram;
    let mut at = 0usize;
    for &i in &order {
        let r = regions[i];
        assert!(r.start >= at, "regions overlap at {}", r.start);
        let (_, tail) = core::mem::take(&mut rest).split_at_mut(r.start - at);
        let (mine, tail) = tail.split_at_mut(r.len);
        out[i] = Some(mine);
        rest = tail;
        at = r.start + r.len;
    }
    out.map(|s| s.unwrap_or_default())
}

/// Per-sampling-slot regions: the job's NS_config and its result arrays, which the
/// minibatches of a hyperbatch share (see [`crate::isp`]'s `minibatch` module).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct SlotRegions {
    /// The NS_config as DMA'd from the host.
    pub config: Region,
    /// Each minibatch's state: where its pieces of the result arrays are.
    pub minibatches: Region,
    /// Unique node ids of each minibatch, `u64`, first-seen order (per minibatch and phase).
    pub nodes: Region,
    /// Local `indptr` rows, `u32`: one per layer and minibatch, `dst_count + 1` words each.
    pub indptr: Region,
    /// Local source indices, `u32`, layer after layer (a layer's minibatches in order).
    pub indices: Region,
    /// The node features (rows in the node array's order), when asked for.
    pub features: Region,
}

/// Per-lane regions: the working set of the job a sampling lane runs (see [`crate::isp`]'s
/// `generator` module for how a layer uses them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct LaneRegions {
    /// The node table of the lane's job: node id → its position in the job's node list, 16 B
    /// an entry ([`crate::isp`]'s `node_table` module).
    pub node_table: Region,
    /// Sort keys of the running gather (`(node - lowest) << 32 | destination`), `u64` each.
    pub keys: Region,
    /// Second buffer of the keys' radix sort.
    pub sort_scratch: Region,
    /// Per destination of the running layer, 16 B: its list's bounds, then its edges' place.
    pub destinations: Region,
    /// Per sampled edge of the running layer, in key order, `u32`: the offset in its page the
    /// issuer staged, then the neighbour id the gather read there.
    pub neighbours: Region,
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
    /// Page-buffer slot metadata, 16 bytes per slot (key, LRU stamp, pins, state, valid and loading sectors).
    pub slot_meta: Region,
    /// Page-buffer slot data, one flash-page window (data, then spare) per slot.
    pub slot_data: Region,
    /// One page window for garbage-collection copies.
    pub gc_page: Region,
    /// The checkpoint writer's page windows (also boot's read windows).
    pub checkpoint_windows: Region,
    /// The trim log's record windows (`crate::trim_log`).
    pub trim_log: Region,
    /// The sampling lanes' working regions, `isp_lanes` of them.
    pub lanes: [LaneRegions; crate::config::MAX_ISP_LANES],
    /// Sampling-slot regions, `isp_slots` of them.
    pub slots: [SlotRegions; crate::config::MAX_ISP_SLOTS],
    /// Per-page progress of every parked Read or Write: `MAX_COMMANDS × MAX_PAGES_PER_COMMAND`
    /// `u64` words (a packed page state: kind | slot << 8 | ppn << 32), command slot after
    /// command slot. Last in the arena, so that it moves no other region.
    pub command_pages: Region,
    /// Total bytes.
    pub total_bytes: usize,
}

/// Bytes of one node-table entry (node id, position, generation, padding).
pub(crate) const NODE_TABLE_ENTRY_BYTES: usize = 16;

/// Bytes of one destination's record in a lane's `destinations` region.
pub(crate) const DESTINATION_BYTES: usize = 16;

/// Bytes of metadata per page-buffer slot.
pub(crate) const SLOT_META_BYTES: usize = 16;

/// Words of the `command_pages` region: one per page of every command slot.
pub(crate) const COMMAND_PAGE_WORDS: usize =
    crate::config::MAX_COMMANDS * crate::config::MAX_PAGES_PER_COMMAND;

impl DramLayout {
    /// Lays out the arena; `None` if the sizes overflow `usize`. `config` must be validated.
    pub fn new(config: &FirmwareConfig, geometry: &Geometry, logical_pages: u32) -> Option<Self> {
        let mut next = 0usize;
        let mut take = |len: usize| -> Option<Region> {
            // Every region starts on a cache-line boundary: u64 tables stay naturally aligned,
            // and the page windows that flash DMA fills can be cleaned and invalidated by line.
            let align = DRAM_REGION_ALIGN_BYTES - 1;
            let start = next.checked_add(align)? & !align;
            next = start.checked_add(len)?;
            Some(Region { start, len })
        };
        let blocks = geometry.block_count() as usize;
        let pages = usize::try_from(geometry.page_count()).ok()?;
        let page = geometry.window_bytes();
        let slots = config.page_buffer_pages as usize;
        let nodes = config.max_subgraph_nodes as usize;
        let edges = config.max_subgraph_edges as usize;
        let minibatches = usize::from(config.limits.max_minibatches);
        let l2p = take((logical_pages as usize).checked_mul(4)?)?;
        let p2l = take(pages.checked_mul(4)?)?;
        let block_valid = take(blocks.checked_mul(4)?)?;
        let block_next_free = take(blocks.checked_mul(4)?)?;
        let block_state = take(blocks)?;
        let dies = take((geometry.die_count() as usize).checked_mul(16)?)?;
        let slot_meta = take(slots.checked_mul(SLOT_META_BYTES)?)?;
        let slot_data = take(slots.checked_mul(page)?)?;
        let gc_page = take(page)?;
        let checkpoint_windows = take(CHECKPOINT_WINDOWS.checked_mul(page)?)?;
        let trim_log = take(TRIM_LOG_REGION_WINDOWS.checked_mul(page)?)?;
        let mut lanes = [LaneRegions::default(); crate::config::MAX_ISP_LANES];
        for lane in lanes.iter_mut().take(usize::from(config.isp_lanes)) {
            *lane = LaneRegions {
                node_table: take(
                    hash_capacity(config.max_subgraph_nodes).checked_mul(NODE_TABLE_ENTRY_BYTES)?,
                )?,
                keys: take(nodes.checked_mul(8)?)?,
                sort_scratch: take(nodes.checked_mul(8)?)?,
                destinations: take(nodes.checked_mul(DESTINATION_BYTES)?)?,
                neighbours: take(edges.checked_mul(4)?)?,
            };
        }
        let mut slot_regions = [SlotRegions::default(); crate::config::MAX_ISP_SLOTS];
        for s in slot_regions.iter_mut().take(usize::from(config.isp_slots)) {
            *s = SlotRegions {
                config: take(ns_config_max_size_bytes(&config.limits))?,
                minibatches: take(minibatches.checked_mul(MINIBATCH_STATE_BYTES)?)?,
                nodes: take(nodes.checked_mul(8)?)?,
                // A layer's rows over all minibatches: at most every node once as a
                // destination, plus each minibatch's leading 0.
                indptr: take(
                    MAX_LAYERS
                        .checked_mul(nodes.checked_add(minibatches)?)?
                        .checked_mul(4)?,
                )?,
                indices: take(edges.checked_mul(4)?)?,
                features: take(config.max_feature_bytes as usize)?,
            };
        }
        let command_pages = take(COMMAND_PAGE_WORDS.checked_mul(8)?)?;
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
            checkpoint_windows,
            trim_log,
            lanes,
            slots: slot_regions,
            command_pages,
            total_bytes: next,
        })
    }
}

/// Entries of the node table (open addressing): the power of two at least twice `max_nodes`.
pub(crate) fn hash_capacity(max_nodes: u32) -> usize {
    (2 * max_nodes as usize).next_power_of_two()
}

/// One region of the DRAM arena, as reported by [`crate::dram_regions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DramRegion {
    /// The region's name, e.g. `l2p` or `slot0.nodes`.
    pub name: &'static str,
    /// Its size in bytes (before the alignment padding between regions).
    pub size_bytes: usize,
    /// What its size scales with, in words.
    pub formula: &'static str,
}

/// Most regions an arena has: the shared ones plus five per sampling lane and six per sampling
/// slot.
const MAX_REGIONS: usize = 12 + 5 * crate::config::MAX_ISP_LANES + 6 * crate::config::MAX_ISP_SLOTS;

/// The names of the per-lane regions (one row per sampling lane).
const LANE_REGION_NAMES: [[&str; 5]; 4] = [
    [
        "lane0.node_table",
        "lane0.keys",
        "lane0.sort_scratch",
        "lane0.destinations",
        "lane0.neighbours",
    ],
    [
        "lane1.node_table",
        "lane1.keys",
        "lane1.sort_scratch",
        "lane1.destinations",
        "lane1.neighbours",
    ],
    [
        "lane2.node_table",
        "lane2.keys",
        "lane2.sort_scratch",
        "lane2.destinations",
        "lane2.neighbours",
    ],
    [
        "lane3.node_table",
        "lane3.keys",
        "lane3.sort_scratch",
        "lane3.destinations",
        "lane3.neighbours",
    ],
];
const _: () = assert!(LANE_REGION_NAMES.len() == crate::config::MAX_ISP_LANES);

/// The names of the per-slot regions (one row per sampling slot).
const SLOT_REGION_NAMES: [[&str; 6]; 8] = [
    [
        "slot0.config",
        "slot0.minibatches",
        "slot0.nodes",
        "slot0.indptr",
        "slot0.indices",
        "slot0.features",
    ],
    [
        "slot1.config",
        "slot1.minibatches",
        "slot1.nodes",
        "slot1.indptr",
        "slot1.indices",
        "slot1.features",
    ],
    [
        "slot2.config",
        "slot2.minibatches",
        "slot2.nodes",
        "slot2.indptr",
        "slot2.indices",
        "slot2.features",
    ],
    [
        "slot3.config",
        "slot3.minibatches",
        "slot3.nodes",
        "slot3.indptr",
        "slot3.indices",
        "slot3.features",
    ],
    [
        "slot4.config",
        "slot4.minibatches",
        "slot4.nodes",
        "slot4.indptr",
        "slot4.indices",
        "slot4.features",
    ],
    [
        "slot5.config",
        "slot5.minibatches",
        "slot5.nodes",
        "slot5.indptr",
        "slot5.indices",
        "slot5.features",
    ],
    [
        "slot6.config",
        "slot6.minibatches",
        "slot6.nodes",
        "slot6.indptr",
        "slot6.indices",
        "slot6.features",
    ],
    [
        "slot7.config",
        "slot7.minibatches",
        "slot7.nodes",
        "slot7.indptr",
        "slot7.indices",
        "slot7.features",
    ],
];
const _: () = assert!(SLOT_REGION_NAMES.len() == crate::config::MAX_ISP_SLOTS);

/// Every region of the DRAM arena for one configuration, in arena order: the footprint report
/// of [`crate::dram_regions`], read off the same `DramLayout` the firmware boots with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DramRegions {
    regions: [DramRegion; MAX_REGIONS],
    count: usize,
    total_bytes: usize,
}

impl DramRegions {
    /// The regions, in the order they sit in the arena.
    pub fn iter(&self) -> impl Iterator<Item = &DramRegion> {
        self.regions[..self.count].iter()
    }

    /// The arena size the firmware needs: the sum of the regions plus alignment padding, equal to
    /// [`crate::dram_size_bytes`].
    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }
}

impl DramLayout {
    /// The footprint report of this layout. `isp_lanes` and `isp_slots` are the
    /// configuration's lane and slot counts.
    pub fn regions(&self, isp_lanes: usize, isp_slots: usize) -> DramRegions {
        let empty = DramRegion {
            name: "",
            size_bytes: 0,
            formula: "",
        };
        let mut out = DramRegions {
            regions: [empty; MAX_REGIONS],
            count: 0,
            total_bytes: self.total_bytes,
        };
        let mut push = |name: &'static str, region: Region, formula: &'static str| {
            out.regions[out.count] = DramRegion {
                name,
                size_bytes: region.len,
                formula,
            };
            out.count += 1;
        };
        push(
            "l2p",
            self.l2p,
            "4 B x logical pages (physical pages less GC reserves and over-provisioning)",
        );
        push("p2l", self.p2l, "4 B x physical pages");
        push("block_valid", self.block_valid, "4 B x erase blocks");
        push(
            "block_next_free",
            self.block_next_free,
            "4 B x erase blocks",
        );
        push("block_state", self.block_state, "1 B x erase blocks");
        push("dies", self.dies, "16 B x dies");
        push(
            "page_buffer_meta",
            self.slot_meta,
            "16 B x page_buffer_pages",
        );
        push(
            "page_buffer_data",
            self.slot_data,
            "(page_size_bytes + 64 B spare) x page_buffer_pages",
        );
        push("gc_page", self.gc_page, "page_size_bytes + 64 B spare");
        push(
            "checkpoint_windows",
            self.checkpoint_windows,
            "(page_size_bytes + 64 B spare) x 16",
        );
        // The formulas below name the window counts.
        const _: () = assert!(CHECKPOINT_WINDOWS == 16 && TRIM_LOG_REGION_WINDOWS == 3);
        push(
            "trim_log",
            self.trim_log,
            "(page_size_bytes + 64 B spare) x 3",
        );
        for (lane, names) in self.lanes.iter().zip(LANE_REGION_NAMES).take(isp_lanes) {
            push(
                names[0],
                lane.node_table,
                "16 B x next power of two of 2 x max_subgraph_nodes",
            );
            push(names[1], lane.keys, "8 B x max_subgraph_nodes");
            push(names[2], lane.sort_scratch, "8 B x max_subgraph_nodes");
            push(names[3], lane.destinations, "16 B x max_subgraph_nodes");
            push(names[4], lane.neighbours, "4 B x max_subgraph_edges");
        }
        for (slot, names) in self.slots.iter().zip(SLOT_REGION_NAMES).take(isp_slots) {
            push(
                names[0],
                slot.config,
                "32 B + 8 B x max_targets (+ 16 B x max_minibatches if above 1): the NS_config",
            );
            push(names[1], slot.minibatches, "112 B x max_minibatches");
            push(names[2], slot.nodes, "8 B x max_subgraph_nodes");
            push(
                names[3],
                slot.indptr,
                "4 B x 4 layers x (max_subgraph_nodes + max_minibatches)",
            );
            push(names[4], slot.indices, "4 B x max_subgraph_edges");
            push(names[5], slot.features, "max_feature_bytes");
        }
        push(
            "command_pages",
            self.command_pages,
            "8 B x 64 command slots x 64 pages per command (fixed)",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::hal::Geometry;
    use crate::{ConfigError, FirmwareConfig};

    /// Two neighbouring regions, the second filled with a marker.
    fn neighbours() -> (super::Region, std::vec::Vec<u8>) {
        let first = super::Region { start: 0, len: 8 };
        let mut dram = std::vec![0u8; 16];
        dram[8..].fill(0xAA);
        (first, dram)
    }

    #[test]
    fn region_words_stay_inside_the_region() {
        let (first, mut dram) = neighbours();
        first.set_u32(&mut dram, 0, 1);
        first.set_u32(&mut dram, 1, 7);
        assert_eq!(first.u64(&dram, 0), 7 << 32 | 1);
        first.set_u64(&mut dram, 0, 3);
        assert_eq!((first.u32(&dram, 0), first.u32(&dram, 1)), (3, 0));
        assert_eq!(first.sub(4, 4), super::Region { start: 4, len: 4 });
        let past_the_end: [fn(super::Region, &mut [u8]); 6] = [
            |r, d| r.set_u32(d, 2, 1),
            |r, d| r.set_u64(d, 1, 1),
            |r, d| _ = r.u32(d, 2),
            |r, _| _ = r.sub(4, 5),
            |r, _| _ = r.sub(9, 0),
            |r, _| _ = r.sub(usize::MAX, 2),
        ];
        for bad in past_the_end {
            let caught =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bad(first, &mut dram)));
            assert!(caught.is_err(), "an access past the region was allowed");
            assert!(
                dram[8..].iter().all(|&b| b == 0xAA),
                "the next region was written"
            );
        }
    }

    #[test]
    fn regions_add_up_to_the_arena_size() {
        let geometry = Geometry {
            channels: 2,
            ways: 2,
            dies_per_way: 1,
            blocks_per_die: 16,
            pages_per_block: 8,
            page_size_bytes: 2048,
        };
        for (isp_lanes, isp_slots) in (1..=crate::MAX_ISP_SLOTS as u8)
            .map(|s| (1, s))
            .chain((2..=crate::MAX_ISP_LANES as u8).map(|l| (l, 4)))
        {
            let config = FirmwareConfig {
                isp_slots,
                isp_lanes,
                block_size_log2: 9,
                max_subgraph_nodes: 1000,
                max_subgraph_edges: 3000,
                max_transfer_bytes: 16 * 1024,
                page_buffer_pages: 16,
                limits: sagessd_abi::ns_config::NsLimits {
                    max_targets: 100,
                    max_fanout: 10,
                    max_minibatches: 4,
                },
                ..FirmwareConfig::default()
            };
            let regions = crate::dram_regions(&config, &geometry).unwrap();
            let total = crate::dram_size_bytes(&config, &geometry).unwrap();
            assert_eq!(regions.total_bytes(), total);
            let count = regions.iter().count();
            assert_eq!(
                count,
                12 + 5 * usize::from(isp_lanes) + 6 * usize::from(isp_slots)
            );
            let sum: usize = regions.iter().map(|r| r.size_bytes).sum();
            assert!(
                sum <= total && total < sum + super::DRAM_REGION_ALIGN_BYTES * count,
                "{sum} vs {total}"
            );
            let find = |name: &str| regions.iter().find(|r| r.name == name).unwrap().size_bytes;
            assert_eq!(find("p2l"), 4 * 64 * 8);
            assert_eq!(find("page_buffer_data"), 16 * (2048 + 64));
            for lane in 0..isp_lanes {
                assert_eq!(find(&std::format!("lane{lane}.node_table")), 16 * 2048);
                assert_eq!(find(&std::format!("lane{lane}.keys")), 8 * 1000);
                assert_eq!(find(&std::format!("lane{lane}.destinations")), 16 * 1000);
                assert_eq!(find(&std::format!("lane{lane}.neighbours")), 4 * 3000);
            }
            assert_eq!(find("slot0.config"), 32 + 8 * 100 + 16 * 4);
            assert_eq!(find("slot0.minibatches"), 112 * 4);
            assert_eq!(find("slot0.indptr"), 4 * 4 * 1004);
            assert_eq!(find("command_pages"), 8 * 64 * 64);
            let mut names: std::vec::Vec<_> = regions.iter().map(|r| r.name).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), count, "region names are unique");
        }
        let bad = FirmwareConfig {
            isp_slots: 0,
            ..FirmwareConfig::default()
        };
        assert_eq!(
            crate::dram_regions(&bad, &geometry_of_default()),
            Err(ConfigError::IspSlots)
        );
        for isp_lanes in [0, crate::MAX_ISP_LANES as u8 + 1, 3] {
            let bad = FirmwareConfig {
                isp_lanes,
                isp_slots: 2,
                ..FirmwareConfig::default()
            };
            assert_eq!(
                crate::dram_regions(&bad, &geometry_of_default()),
                Err(ConfigError::IspLanes)
            );
        }
    }

    fn geometry_of_default() -> Geometry {
        Geometry {
            channels: 8,
            ways: 8,
            dies_per_way: 1,
            blocks_per_die: 512,
            pages_per_block: 256,
            page_size_bytes: 16384,
        }
    }
}
