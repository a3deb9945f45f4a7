//! In-storage neighbour sampling: the ISP control unit and the subgraph generator.
//!
//! The control unit keeps up to [`MAX_ISP_SLOTS`] jobs: an `NS_SUBMIT` parks its NS_config in a
//! free slot and gets the slot's tag back; `NS_COLLECT` with that tag waits until the job is done
//! and DMAs the subgraph out. The subgraph generator runs one job at a time, layer by layer, as a
//! poll-driven state machine. Each layer has two *gathers* that read flash, each followed by an
//! in-order pass that does not:
//!
//! 1. **Bounds gather**: read `indptr[v]` and `indptr[v + 1]` of every destination node;
//!    **sample pass**: for each destination in order, draw the sampled positions with
//!    [`sample_positions`] and append their global edge positions;
//! 2. **Neighbour gather**: read the neighbour id at every sampled position;
//!    **dedup pass**: for each sampled edge in order, deduplicate its neighbour into the node list
//!    and record its local index.
//!
//! A gather sorts its reads by logical page (`page << 29 | item` keys, an LSD radix sort on the
//! page, stable so items of a page stay in order), so every page is read once per gather however
//! many items it serves, and consecutive pages, which the FTL striped over dies, are read in
//! parallel. Two cursors walk the sorted keys: the *issuer*
//! runs ahead pinning up to a window of pages in the page buffer (starting their flash reads),
//! the *consumer* copies each item's value out as its page arrives. The passes after a gather run
//! in item order, so the output never depends on the order pages arrive in.

use heapless::Deque;
use sagessd_abi::graph::{GraphDescriptor, LbaRange};
use sagessd_abi::ns_config::{MAX_LAYERS, NsConfig, NsLimits};
use sagessd_abi::nvme::{Status, VendorStatus};
use sagessd_abi::sample::{MAX_FANOUT, sample_positions};
use sagessd_abi::subgraph::{LayerCounts, SubgraphLayout};

use crate::backend::Backend;
use crate::config::MAX_ISP_SLOTS;
use crate::dram::{DramLayout, Region, SlotRegions, hash_capacity};
use crate::hal::Sectors;
use crate::host::{CommandId, DmaError, HostInterface};
use crate::page_buffer::Acquire;
use crate::work::WorkCounters;

/// Most pages the issuer keeps pinned ahead of the consumer.
const MAX_WINDOW: usize = 256;
/// Bits of a gather key that hold the item; the page is above them.
const ITEM_BITS: u32 = 29;
/// Bits of the page the radix sort handles per pass.
const RADIX_BITS: u32 = 11;

/// The graph of a free slot (never sampled: jobs are queued with the graph attached then).
const NO_GRAPH: GraphDescriptor = GraphDescriptor {
    node_count: 0,
    edge_count: 0,
    id_width_bytes: 4,
    indptr: LbaRange {
        slba: 0,
        block_count: 0,
    },
    indices: LbaRange {
        slba: 0,
        block_count: 0,
    },
    features: None,
};

/// Where a job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JobState {
    Free,
    Queued,
    Running,
    Done,
    Failed(Status),
}

#[derive(Clone, Copy, Debug)]
struct Job {
    state: JobState,
    generation: u16,
    seq: u32,
    seed: u64,
    fanouts: [u16; MAX_LAYERS],
    layer_count: u8,
    target_count: u32,
    /// The graph attached when the job was submitted.
    graph: GraphDescriptor,
    layers: [LayerCounts; MAX_LAYERS],
    node_count: u32,
    /// Bytes of each node's feature row the job returns (0: features not asked for).
    feature_row_bytes: u32,
    /// Abandoned while running: freed, not kept for a collect, when it ends.
    orphaned: bool,
}

impl Job {
    const FREE: Self = Self {
        state: JobState::Free,
        generation: 0,
        seq: 0,
        seed: 0,
        fanouts: [0; MAX_LAYERS],
        layer_count: 0,
        target_count: 0,
        graph: NO_GRAPH,
        layers: [LayerCounts {
            dst_count: 0,
            src_count: 0,
            edge_count: 0,
        }; MAX_LAYERS],
        node_count: 0,
        feature_row_bytes: 0,
        orphaned: false,
    };

    fn layout(&self) -> Option<SubgraphLayout> {
        SubgraphLayout::new(&self.layers[..usize::from(self.layer_count)])?
            .with_features(self.feature_row_bytes)
    }

    /// Bytes of the job's feature section, if they fit in `u32` (checked on every target, so
    /// the 32-bit board refuses exactly what the host does).
    fn feature_bytes(&self) -> Option<u32> {
        self.node_count.checked_mul(self.feature_row_bytes)
    }
}

/// Whether `node_count` feature rows of `row_bytes` each fit a buffer of `buffer_bytes`: the
/// product in `u32`, so that no target's `usize` can wrap it into a small size.
fn feature_section_fits(node_count: u32, row_bytes: u32, buffer_bytes: usize) -> bool {
    node_count
        .checked_mul(row_bytes)
        .is_some_and(|b| b as usize <= buffer_bytes)
}

/// Which gather is running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gather {
    /// Item `2i` is `indptr[v]`, item `2i + 1` is `indptr[v + 1]`, for destination `i` = `v`.
    Bounds,
    /// Item `e` is the neighbour id at sampled position `e` of this layer.
    Neighbours,
    /// Item `j` is the feature row of node `j` of the node list.
    Features,
}

/// The generator's cursors for the running job.
#[derive(Clone, Copy, Debug)]
struct Run {
    slot: usize,
    graph: GraphDescriptor,
    layer: usize,
    gather: Gather,
    item_count: u32,
    issued: u32,
    consumed: u32,
    last_issued: Option<u32>,
    /// Index of this layer's first edge in the slot's indices region.
    edge_base: u32,
    /// Edges sampled in this layer.
    layer_edges: u32,
    /// Destination count of this layer.
    dst_count: u32,
}

/// The ISP control unit and subgraph generator.
#[derive(Debug)]
pub(crate) struct Isp {
    jobs: [Job; MAX_ISP_SLOTS],
    slot_count: usize,
    regions: [SlotRegions; MAX_ISP_SLOTS],
    node_hash: Region,
    hash_mask: usize,
    entries: Region,
    keys: Region,
    keys_scratch: Region,
    values: Region,
    radix_counts: [u32; 1 << RADIX_BITS],
    max_nodes: u32,
    max_edges: u32,
    max_feature_bytes: usize,
    limits: NsLimits,
    next_seq: u32,
    run: Option<Run>,
    /// Pinned pages ahead of the consumer: (page, slot, the sectors its items need).
    window: Deque<(u32, u32, Sectors), MAX_WINDOW>,
    window_pages: usize,
    scratch: [u64; MAX_FANOUT as usize],
    block_size_bytes: u64,
    page_size_bytes: u64,
}

/// What `NS_COLLECT` finds for a tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Collect {
    /// The tag names no submitted job.
    Unknown,
    /// Queued or running: wait.
    Pending,
    /// Done; the subgraph has this many bytes.
    Done(usize),
    /// The job failed with this status.
    Failed(Status),
}

impl Isp {
    pub fn new(
        layout: &DramLayout,
        config: &crate::FirmwareConfig,
        page_size_bytes: u32,
        dram: &mut [u8],
    ) -> Self {
        layout.node_hash.bytes_mut(dram).fill(0);
        Self {
            jobs: [Job::FREE; MAX_ISP_SLOTS],
            slot_count: usize::from(config.isp_slots),
            regions: layout.slots,
            node_hash: layout.node_hash,
            hash_mask: hash_capacity(config.max_subgraph_nodes) - 1,
            entries: layout.entries,
            keys: layout.gather_keys,
            keys_scratch: layout.gather_scratch,
            values: layout.gather_values,
            radix_counts: [0; 1 << RADIX_BITS],
            max_nodes: config.max_subgraph_nodes,
            max_edges: config.max_subgraph_edges,
            max_feature_bytes: config.max_feature_bytes as usize,
            limits: config.limits,
            next_seq: 0,
            run: None,
            window: Deque::new(),
            window_pages: (config.page_buffer_pages as usize / 4).clamp(1, MAX_WINDOW),
            scratch: [0; MAX_FANOUT as usize],
            block_size_bytes: u64::from(config.block_size_bytes()),
            page_size_bytes: u64::from(page_size_bytes),
        }
    }

    /// The NS_config limits this device accepts.
    pub fn limits(&self) -> NsLimits {
        self.limits
    }

    /// A slot that can take a new job, and the arena window its NS_config must be DMA'd into.
    pub fn free_slot(&self) -> Option<(usize, Region)> {
        (0..self.slot_count)
            .find(|s| self.jobs[*s].state == JobState::Free)
            .map(|s| (s, self.regions[s].config))
    }

    /// A job's tag: its slot in bits 7:0 and the slot's generation in bits 23:8, so a tag from
    /// an earlier job of the same slot names nothing for 65,535 reuses.
    fn tag_of(&self, slot: usize) -> u32 {
        (u32::from(self.jobs[slot].generation) << 8) | slot as u32
    }

    fn slot_of(&self, tag: u32) -> Option<usize> {
        let slot = (tag & 0xFF) as usize;
        let job = self.jobs.get(..self.slot_count)?.get(slot)?;
        (tag >> 24 == 0 && u32::from(job.generation) == (tag >> 8) && job.state != JobState::Free)
            .then_some(slot)
    }

    /// Validates the NS_config now in `slot`'s config window (`len` bytes were DMA'd) against
    /// the attached graph and queues the job; returns its tag.
    pub fn accept(
        &mut self,
        dram: &[u8],
        slot: usize,
        len: usize,
        graph: &GraphDescriptor,
    ) -> Result<u32, VendorStatus> {
        let bytes = &self.regions[slot].config.bytes(dram)[..len];
        let cfg = NsConfig::parse(bytes, &self.limits, graph.node_count)?;
        let feature_row_bytes = match (cfg.features, graph.features) {
            (false, _) => 0,
            // A device without a feature buffer does not know the flag.
            (true, _) if self.max_feature_bytes == 0 => return Err(VendorStatus::ReservedField),
            (true, None) => return Err(VendorStatus::BadDescriptor),
            (true, Some(f)) => f.row_bytes,
        };
        let job = &mut self.jobs[slot];
        job.state = JobState::Queued;
        job.generation = job.generation.wrapping_add(1);
        job.seq = self.next_seq;
        job.seed = cfg.seed;
        job.fanouts = [0; MAX_LAYERS];
        job.fanouts[..cfg.fanouts().len()].copy_from_slice(cfg.fanouts());
        job.layer_count = cfg.fanouts().len() as u8;
        job.target_count = cfg.target_count() as u32;
        job.graph = *graph;
        job.feature_row_bytes = feature_row_bytes;
        job.orphaned = false;
        self.next_seq = self.next_seq.wrapping_add(1);
        Ok(self.tag_of(slot))
    }

    /// The state of the job named by `tag`.
    pub fn collect_state(&self, tag: u32) -> Collect {
        let Some(slot) = self.slot_of(tag) else {
            return Collect::Unknown;
        };
        let job = &self.jobs[slot];
        match job.state {
            JobState::Free => Collect::Unknown,
            JobState::Queued | JobState::Running => Collect::Pending,
            JobState::Failed(s) => Collect::Failed(s),
            JobState::Done => job
                .layout()
                .map_or(Collect::Failed(Status::INTERNAL_ERROR), |l| {
                    Collect::Done(l.total_size_bytes())
                }),
        }
    }

    /// DMAs the finished subgraph of `tag` to `cmd`'s host buffer; returns the bytes written.
    pub fn write_result<H: HostInterface>(
        &self,
        dram: &[u8],
        tag: u32,
        host: &mut H,
        cmd: CommandId,
    ) -> Result<usize, DmaError> {
        let slot = self.slot_of(tag).ok_or(DmaError)?;
        let job = &self.jobs[slot];
        let layout = job.layout().ok_or(DmaError)?;
        let regions = &self.regions[slot];
        let mut head = [0u8; 32 + 16 * MAX_LAYERS];
        layout.write_head(job.seed, &mut head).ok_or(DmaError)?;
        host.dma_to_host(cmd, 0, &head[..layout.head_size_bytes()])?;
        let nodes = regions.nodes.sub(0, 8 * job.node_count as usize);
        host.dma_to_host(cmd, layout.nodes_offset(), nodes.bytes(dram))?;
        let mut edge_base = 0usize;
        let mut end = layout.nodes_offset() + 8 * job.node_count as usize;
        for (l, counts) in job.layers[..usize::from(job.layer_count)]
            .iter()
            .enumerate()
        {
            let row = regions.indptr.sub(
                l * 4 * (self.max_nodes as usize + 1),
                4 * (counts.dst_count as usize + 1),
            );
            host.dma_to_host(cmd, layout.indptr_offset(l), row.bytes(dram))?;
            let edges = regions
                .indices
                .sub(4 * edge_base, 4 * counts.edge_count as usize);
            host.dma_to_host(cmd, layout.indices_offset(l), edges.bytes(dram))?;
            edge_base += counts.edge_count as usize;
            end = layout.indices_offset(l) + 4 * counts.edge_count as usize;
        }
        if job.feature_row_bytes > 0 {
            // The feature section starts 8-byte aligned: its padding is zeros, not whatever
            // the host's buffer held.
            let pad = layout.features_offset().saturating_sub(end).min(8);
            host.dma_to_host(cmd, end, &[0u8; 8][..pad])?;
            let bytes = job.feature_bytes().ok_or(DmaError)?;
            let rows = regions.features.sub(0, bytes as usize);
            host.dma_to_host(cmd, layout.features_offset(), rows.bytes(dram))?;
        }
        Ok(layout.total_size_bytes())
    }

    /// Frees the job named by `tag` (after a successful or failed collect).
    pub fn release(&mut self, tag: u32) {
        if let Some(slot) = self.slot_of(tag) {
            self.jobs[slot].state = JobState::Free;
        }
    }

    /// Forgets every job (a controller reset): queued and finished jobs are freed now, a running
    /// one when it ends. No tag handed out before names a job afterwards.
    pub fn abandon_jobs(&mut self) {
        for job in &mut self.jobs {
            match job.state {
                JobState::Running => {
                    // A new generation: the tag handed out names nothing from now on.
                    job.orphaned = true;
                    job.generation = job.generation.wrapping_add(1);
                }
                _ => job.state = JobState::Free,
            }
        }
    }

    /// Whether no job is queued or running.
    pub fn is_idle(&self) -> bool {
        self.run.is_none() && !self.jobs.iter().any(|j| j.state == JobState::Queued)
    }

    /// Advances the generator; returns whether anything happened.
    pub fn step(&mut self, dram: &mut [u8], backend: &mut Backend) -> bool {
        if self.run.is_none() && !self.start_next(dram, backend) {
            return false;
        }
        let issued = self.issue(dram, backend);
        match self.consume(dram, backend) {
            Ok(consumed) => issued || consumed,
            Err(status) => {
                self.fail_run(dram, backend, status);
                true
            }
        }
    }

    /// Starts the oldest queued job: deduplicates its targets into the node list and starts the
    /// first layer's bounds gather.
    fn start_next(&mut self, dram: &mut [u8], backend: &mut Backend) -> bool {
        let next = (0..self.slot_count)
            .filter(|s| self.jobs[*s].state == JobState::Queued)
            .min_by_key(|s| self.jobs[*s].seq.wrapping_sub(self.next_seq));
        let Some(slot) = next else { return false };
        let graph = self.jobs[slot].graph;
        self.jobs[slot].state = JobState::Running;
        self.jobs[slot].node_count = 0;
        self.jobs[slot].layers = [LayerCounts::default(); MAX_LAYERS];
        let config = self.regions[slot].config;
        for i in 0..self.jobs[slot].target_count as usize {
            let target = config.u64(dram, 4 + i);
            if self.dedup(dram, slot, target).is_none() {
                self.finish(
                    dram,
                    &mut backend.work,
                    slot,
                    Some(VendorStatus::ResultTooLarge.into()),
                );
                return true;
            }
        }
        backend.work.targets_deduplicated += u64::from(self.jobs[slot].target_count);
        let dst = self.jobs[slot].node_count;
        let run = Run {
            slot,
            graph,
            layer: 0,
            gather: Gather::Bounds,
            item_count: 0,
            issued: 0,
            consumed: 0,
            last_issued: None,
            edge_base: 0,
            layer_edges: 0,
            dst_count: dst,
        };
        self.start_gather(dram, backend, run, Gather::Bounds);
        true
    }

    /// The byte address (on the namespace) of gather item `item`.
    fn item_address(&self, dram: &[u8], run: &Run, item: u32) -> u64 {
        match run.gather {
            Gather::Bounds => {
                let v = self.regions[run.slot].nodes.u64(dram, item as usize / 2);
                run.graph.indptr.slba * self.block_size_bytes + 8 * (v + u64::from(item & 1))
            }
            Gather::Neighbours => {
                let e = self.entries.u64(dram, item as usize);
                run.graph.indices.slba * self.block_size_bytes
                    + u64::from(run.graph.id_width_bytes) * e
            }
            Gather::Features => {
                let v = self.regions[run.slot].nodes.u64(dram, item as usize);
                // Attached graphs with features always have a region (checked at submit).
                run.graph.features.map_or(0, |f| {
                    f.range.slba * self.block_size_bytes + v * f.stride_bytes()
                })
            }
        }
    }

    /// Builds and sorts the keys of a gather and makes it the running one.
    fn start_gather(
        &mut self,
        dram: &mut [u8],
        backend: &mut Backend,
        mut run: Run,
        gather: Gather,
    ) {
        run.gather = gather;
        run.item_count = match gather {
            Gather::Bounds => 2 * run.dst_count,
            Gather::Neighbours => run.layer_edges,
            Gather::Features => self.jobs[run.slot].node_count,
        };
        run.issued = 0;
        run.consumed = 0;
        run.last_issued = None;
        for item in 0..run.item_count {
            let page = self.item_address(dram, &run, item) / self.page_size_bytes;
            self.keys
                .set_u64(dram, item as usize, (page << ITEM_BITS) | u64::from(item));
        }
        self.sort_keys(dram, backend, run.item_count as usize);
        self.run = Some(run);
    }

    /// Sorts the first `n` gather keys by page: least-significant-digit radix passes of
    /// [`RADIX_BITS`] over the page's offset from the lowest page, as many as the page range
    /// needs. Stable, so a page's items stay in item order. Counts the passes and the keys
    /// they move (and copy back after an odd number of passes) as sort work; building a key
    /// and finding the range are part of its gather item's work (`edges_scanned`).
    fn sort_keys(&mut self, dram: &mut [u8], backend: &mut Backend, n: usize) {
        let page = |key: u64| key >> ITEM_BITS;
        let (lo, hi) = (0..n)
            .map(|i| page(self.keys.u64(dram, i)))
            .fold((u64::MAX, 0), |(lo, hi), p| (lo.min(p), hi.max(p)));
        if n < 2 || lo == hi {
            return;
        }
        let bits = u64::BITS - (hi - lo).leading_zeros();
        let passes = bits.div_ceil(RADIX_BITS);
        let (mut src, mut dst) = (self.keys, self.keys_scratch);
        for pass in 0..passes {
            let digit = |key: u64| {
                ((page(key) - lo) >> (pass * RADIX_BITS)) as usize & ((1 << RADIX_BITS) - 1)
            };
            self.radix_counts.fill(0);
            for i in 0..n {
                self.radix_counts[digit(src.u64(dram, i))] += 1;
            }
            let mut sum = 0;
            for c in self.radix_counts.iter_mut() {
                let count = *c;
                *c = sum;
                sum += count;
            }
            for i in 0..n {
                let key = src.u64(dram, i);
                let d = digit(key);
                dst.set_u64(dram, self.radix_counts[d] as usize, key);
                self.radix_counts[d] += 1;
            }
            core::mem::swap(&mut src, &mut dst);
        }
        if src != self.keys {
            dram.copy_within(src.start..src.start + 8 * n, self.keys.start);
        }
        backend.work.sort_key_moves += n as u64 * u64::from(passes + passes % 2);
        backend.work.radix_passes += u64::from(passes);
    }

    /// The page and item of sorted key `k` of the running gather.
    fn key(&self, dram: &[u8], k: u32) -> (u32, u32) {
        let key = self.keys.u64(dram, k as usize);
        // Validated descriptors keep addresses inside the namespace, whose pages fit in u32.
        (
            (key >> ITEM_BITS) as u32,
            (key & ((1 << ITEM_BITS) - 1)) as u32,
        )
    }

    /// The width in bytes of one item of the running gather.
    fn item_width(&self, run: &Run) -> usize {
        match run.gather {
            Gather::Bounds => 8,
            Gather::Neighbours => usize::from(run.graph.id_width_bytes),
            Gather::Features => self.jobs[run.slot].feature_row_bytes as usize,
        }
    }

    /// The sectors of `page` that the items from sorted key `from` on need (the keys of a
    /// page are consecutive); looking at a key is part of its gather item's work.
    fn page_sectors(&self, dram: &[u8], run: &Run, page: u32, from: u32) -> Sectors {
        let width = self.item_width(run);
        let page_size = self.page_size_bytes as usize;
        let mut want = Sectors::NONE;
        let mut k = from;
        while k < run.item_count {
            let (p, item) = self.key(dram, k);
            if p != page {
                break;
            }
            let offset = (self.item_address(dram, run, item) % self.page_size_bytes) as usize;
            want = want.union(Sectors::covering(offset, width, page_size));
            k += 1;
        }
        want
    }

    /// Pins pages ahead of the consumer, up to the window, each with the sectors its items
    /// need.
    fn issue(&mut self, dram: &mut [u8], backend: &mut Backend) -> bool {
        let Some(mut run) = self.run else {
            return false;
        };
        let mut progress = false;
        while run.issued < run.item_count {
            let (page, _) = self.key(dram, run.issued);
            if run.last_issued != Some(page) {
                if self.window.len() >= self.window_pages {
                    break;
                }
                let want = self.page_sectors(dram, &run, page, run.issued);
                match backend.request_page(dram, page, want) {
                    Acquire::Full => break,
                    Acquire::Valid(slot)
                    | Acquire::Loading(slot)
                    | Acquire::Failed(slot)
                    | Acquire::Miss(slot, _) => {
                        // The window has room (checked above).
                        let _ = self.window.push_back((page, slot, want));
                        run.last_issued = Some(page);
                        progress = true;
                    }
                }
            }
            run.issued += 1;
        }
        self.run = Some(run);
        progress
    }

    /// The front window page's slot once it holds the sectors its items need: `Ok(None)` while
    /// a read is in flight (or none can start yet). A read that landed with another reader's
    /// sectors is followed by one for ours.
    fn front_page(
        &mut self,
        dram: &mut [u8],
        backend: &mut Backend,
    ) -> Result<Option<u32>, Status> {
        let Some(&(page, slot, want)) = self.window.front() else {
            return Err(Status::INTERNAL_ERROR);
        };
        if backend.buffer.is_failed(dram, slot) {
            return Err(Status::UNRECOVERED_READ_ERROR);
        }
        if backend.buffer.is_loading(dram, slot) {
            return Ok(None);
        }
        if backend.buffer.has(dram, slot, want) {
            return Ok(Some(slot));
        }
        let (again, ready) = match backend.request_page(dram, page, want) {
            Acquire::Full => return Ok(None),
            Acquire::Valid(again) => (again, true),
            Acquire::Loading(again) | Acquire::Failed(again) | Acquire::Miss(again, _) => {
                (again, false)
            }
        };
        // The new request holds its own pin.
        backend.buffer.unpin(dram, slot);
        if let Some(front) = self.window.front_mut() {
            front.1 = again;
        }
        Ok(ready.then_some(again))
    }

    /// Copies issued items' values out of their pages, in key order, while pages are present;
    /// runs the in-order pass and the next gather when the gather is complete.
    fn consume(&mut self, dram: &mut [u8], backend: &mut Backend) -> Result<bool, Status> {
        let Some(mut run) = self.run else {
            return Ok(false);
        };
        let mut progress = false;
        let width = self.item_width(&run);
        while run.consumed < run.issued {
            let (page, item) = self.key(dram, run.consumed);
            while self.window.front().is_some_and(|(p, _, _)| *p != page) {
                if let Some((_, slot, _)) = self.window.pop_front() {
                    backend.buffer.unpin(dram, slot);
                    backend.work.pages_scanned += 1;
                }
            }
            let Some(slot) = self.front_page(dram, backend)? else {
                break;
            };
            let offset = (self.item_address(dram, &run, item) % self.page_size_bytes) as usize;
            if run.gather == Gather::Features {
                // A whole row: rows never straddle a page (checked at GRAPH_ATTACH).
                let from = backend.slot(slot).start + offset;
                // In bounds: the section (node count × width) fit the region before the gather.
                let to = self.regions[run.slot]
                    .features
                    .sub(item as usize * width, width);
                dram.copy_within(from..from + width, to.start);
                backend.work.bytes_copied += width as u64;
            } else {
                let mut b = [0u8; 8];
                b[..width].copy_from_slice(&backend.slot(slot).bytes(dram)[offset..offset + width]);
                self.values
                    .set_u64(dram, item as usize, u64::from_le_bytes(b));
            }
            backend.work.edges_scanned += 1;
            run.consumed += 1;
            progress = true;
        }
        self.run = Some(run);
        if run.consumed == run.item_count {
            self.drain_window(dram, backend);
            match run.gather {
                Gather::Bounds => {
                    self.sample_pass(dram, &mut backend.work, &mut run)?;
                    self.start_gather(dram, backend, run, Gather::Neighbours);
                }
                Gather::Neighbours => {
                    self.dedup_pass(dram, backend, &run)?;
                    self.next_layer(dram, backend, run);
                }
                Gather::Features => {
                    self.run = None;
                    self.finish(dram, &mut backend.work, run.slot, None);
                }
            }
            progress = true;
        }
        Ok(progress)
    }

    /// For each destination in order: check its bounds, draw its sampled positions (counted as
    /// draws where its degree exceeds the fanout) and append their global edge positions;
    /// fills the layer's local `indptr`.
    fn sample_pass(
        &mut self,
        dram: &mut [u8],
        work: &mut WorkCounters,
        run: &mut Run,
    ) -> Result<(), Status> {
        let job = self.jobs[run.slot];
        let fanout = job.fanouts[run.layer];
        let row = run.layer * (self.max_nodes as usize + 1);
        let indptr = self.regions[run.slot].indptr;
        indptr.set_u32(dram, row, 0);
        run.layer_edges = 0;
        for i in 0..run.dst_count as usize {
            let v = self.regions[run.slot].nodes.u64(dram, i);
            let (start, end) = (
                self.values.u64(dram, 2 * i),
                self.values.u64(dram, 2 * i + 1),
            );
            if start > end || end > run.graph.edge_count {
                return Err(VendorStatus::GraphCorrupt.into());
            }
            let k = sample_positions(
                job.seed,
                run.layer as u8,
                v,
                end - start,
                fanout,
                &mut self.scratch,
            )
            .ok_or(Status::INTERNAL_ERROR)?;
            if end - start > u64::from(fanout) {
                work.edges_drawn += k as u64;
            }
            if u64::from(run.edge_base) + u64::from(run.layer_edges) + k as u64
                > u64::from(self.max_edges)
            {
                return Err(VendorStatus::ResultTooLarge.into());
            }
            for p in &self.scratch[..k] {
                self.entries
                    .set_u64(dram, run.layer_edges as usize, start + p);
                run.layer_edges += 1;
            }
            indptr.set_u32(dram, row + i + 1, run.layer_edges);
        }
        Ok(())
    }

    /// For each sampled edge in order: deduplicate its neighbour and record its local index.
    /// Counted once per edge as "sampled" (a probe and a write; the draw that chose it, if
    /// its list was not taken whole, was counted by the sample pass).
    fn dedup_pass(
        &mut self,
        dram: &mut [u8],
        backend: &mut Backend,
        run: &Run,
    ) -> Result<(), Status> {
        for e in 0..run.layer_edges {
            let id = self.values.u64(dram, e as usize);
            if id >= run.graph.node_count {
                return Err(VendorStatus::GraphCorrupt.into());
            }
            let local = self
                .dedup(dram, run.slot, id)
                .ok_or(Status::from(VendorStatus::ResultTooLarge))?;
            self.regions[run.slot]
                .indices
                .set_u32(dram, (run.edge_base + e) as usize, local);
        }
        backend.work.edges_sampled += u64::from(run.layer_edges);
        Ok(())
    }

    /// Records the finished layer and starts the next one, or finishes the job.
    fn next_layer(&mut self, dram: &mut [u8], backend: &mut Backend, mut run: Run) {
        let job = &mut self.jobs[run.slot];
        job.layers[run.layer] = LayerCounts {
            dst_count: run.dst_count,
            src_count: job.node_count,
            edge_count: run.layer_edges,
        };
        if run.layer + 1 == usize::from(job.layer_count) {
            let fits = feature_section_fits(
                job.node_count,
                job.feature_row_bytes,
                self.max_feature_bytes,
            );
            self.run = None;
            if job.feature_row_bytes == 0 {
                self.finish(dram, &mut backend.work, run.slot, None);
            } else if !fits {
                let too_large = Some(VendorStatus::ResultTooLarge.into());
                self.finish(dram, &mut backend.work, run.slot, too_large);
            } else {
                self.start_gather(dram, backend, run, Gather::Features);
            }
            return;
        }
        run.layer += 1;
        run.edge_base += run.layer_edges;
        run.layer_edges = 0;
        run.dst_count = job.node_count;
        self.start_gather(dram, backend, run, Gather::Bounds);
    }

    /// Releases every pinned window page.
    fn drain_window(&mut self, dram: &mut [u8], backend: &mut Backend) {
        while let Some((_, slot, _)) = self.window.pop_front() {
            backend.buffer.unpin(dram, slot);
            backend.work.pages_scanned += 1;
        }
    }

    fn fail_run(&mut self, dram: &mut [u8], backend: &mut Backend, status: Status) {
        self.drain_window(dram, backend);
        if let Some(run) = self.run.take() {
            self.finish(dram, &mut backend.work, run.slot, Some(status));
        }
    }

    /// Ends job `slot` (successfully if `error` is `None`) and clears its entries from the
    /// node table, one probe per node.
    fn finish(
        &mut self,
        dram: &mut [u8],
        work: &mut WorkCounters,
        slot: usize,
        error: Option<Status>,
    ) {
        let job = &mut self.jobs[slot];
        job.state = match error {
            _ if job.orphaned => JobState::Free,
            None if job.layout().is_some() => JobState::Done,
            None => JobState::Failed(VendorStatus::ResultTooLarge.into()),
            Some(s) => JobState::Failed(s),
        };
        let nodes = job.node_count as usize;
        for i in 0..nodes {
            let node = self.regions[slot].nodes.u64(dram, i);
            let mut h = self.home(node);
            // Deleting in arbitrary order would cut probe chains, so find each entry by value.
            while self.node_hash.u32(dram, h) != i as u32 + 1 {
                h = (h + 1) & self.hash_mask;
            }
            self.node_hash.set_u32(dram, h, 0);
        }
        work.nodes_cleared += nodes as u64;
    }

    fn home(&self, node: u64) -> usize {
        (node.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & self.hash_mask
    }

    /// The local id of `node` in job `slot`, adding it to the node list if new; `None` if the
    /// node list is full.
    fn dedup(&mut self, dram: &mut [u8], slot: usize, node: u64) -> Option<u32> {
        let nodes = self.regions[slot].nodes;
        let mut h = self.home(node);
        loop {
            let e = self.node_hash.u32(dram, h);
            if e == 0 {
                let job = &mut self.jobs[slot];
                if job.node_count >= self.max_nodes {
                    return None;
                }
                nodes.set_u64(dram, job.node_count as usize, node);
                job.node_count += 1;
                self.node_hash.set_u32(dram, h, job.node_count);
                return Some(job.node_count - 1);
            }
            if nodes.u64(dram, e as usize - 1) == node {
                return Some(e - 1);
            }
            h = (h + 1) & self.hash_mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::feature_section_fits;

    #[test]
    fn a_feature_section_past_u32_is_refused_on_every_target() {
        // 262,145 nodes of 16 KiB rows: 2^32 + 16 KiB, which `usize` arithmetic on the 32-bit
        // board wraps to 16 KiB, a size that passes a check against a 1 MiB buffer.
        let (nodes, row_bytes) = (262_145u32, 16u32 << 10);
        assert_eq!(nodes.wrapping_mul(row_bytes), 16 << 10);
        assert!(!feature_section_fits(nodes, row_bytes, 1 << 20));
        assert!(!feature_section_fits(nodes, row_bytes, usize::MAX));
        assert!(feature_section_fits(64, row_bytes, 1 << 20));
        assert!(!feature_section_fits(65, row_bytes, 1 << 20));
        assert!(feature_section_fits(u32::MAX, 1, u32::MAX as usize));
    }
}
