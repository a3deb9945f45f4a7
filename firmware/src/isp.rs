//! In-storage neighbour sampling: the ISP control unit here, the subgraph generator in
//! [`generator`].
//!
//! The control unit keeps up to [`MAX_ISP_SLOTS`] jobs: an `NS_SUBMIT` parks its NS_config in a
//! free slot and gets the slot's tag back; `NS_COLLECT` with that tag waits until the job is done
//! and DMAs the subgraph out. A job is one minibatch or a hyperbatch of several, sampled
//! together ([`minibatch`]); minibatch `m` of a job is collected with the job's tag and `m` in
//! bits 31:24, and the slot is free once every minibatch has been collected. The generator runs
//! up to `isp_lanes` jobs at once, one per *sampling lane* (the job's working regions in DRAM,
//! its cursors and the pages it pins), each lane a poll-driven state machine stepped on its own.

mod gather;
mod generator;
mod minibatch;
mod node_table;
mod sort;

use heapless::Deque;
use sagessd_abi::graph::{GraphDescriptor, LbaRange};
use sagessd_abi::ns_config::{MAX_LAYERS, MAX_MINIBATCHES, NsConfig, NsLimits};
use sagessd_abi::nvme::{Status, VendorStatus};
use sagessd_abi::sample::MAX_FANOUT;
use sagessd_abi::sampled_ids::{SampledCounts, SampledIdsLayout};
use sagessd_abi::subgraph::SubgraphLayout;

use crate::config::{MAX_ISP_LANES, MAX_ISP_SLOTS};
use crate::dram::{DramLayout, LaneRegions, Region, SlotRegions, hash_capacity};
use crate::hal::{SECTORS_PER_PAGE, Sectors};
use crate::host::{CommandId, DmaError, HostInterface};
use gather::Cursor;
use minibatch::{MinibatchState, PHASES};
use node_table::NodeTable;

/// Most pages one lane's issuer keeps pinned ahead of its consumer.
const MAX_WINDOW: usize = crate::config::MAX_LANE_WINDOW_PAGES as usize;

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

/// Words of a job's bitmap of collected minibatches.
const COLLECTED_WORDS: usize = MAX_MINIBATCHES as usize / 32;

#[derive(Clone, Copy, Debug)]
struct Job {
    state: JobState,
    generation: u16,
    seq: u32,
    fanouts: [u16; MAX_LAYERS],
    layer_count: u8,
    /// Minibatches sampled together (1 for a plain NS_config).
    minibatch_count: u16,
    /// The graph attached when the job was submitted.
    graph: GraphDescriptor,
    /// Nodes in the slot's node array, all minibatches together.
    node_count: u32,
    /// Words of the slot's `indptr` region in use.
    indptr_words: u32,
    /// Bytes of each node's feature row the job returns (0: features not asked for).
    feature_row_bytes: u32,
    /// Whether the job returns its sampled ids ([`sagessd_abi::sampled_ids`]) for the host to
    /// build the subgraph from: its edges hold global ids, and its last layer deduplicates
    /// nothing.
    sampled_ids: bool,
    /// Minibatches collected (or discarded) so far, one bit each.
    collected: [u32; COLLECTED_WORDS],
    /// Abandoned while running: freed, not kept for a collect, when it ends.
    orphaned: bool,
}

impl Job {
    const FREE: Self = Self {
        state: JobState::Free,
        generation: 0,
        seq: 0,
        fanouts: [0; MAX_LAYERS],
        layer_count: 0,
        minibatch_count: 0,
        graph: NO_GRAPH,
        node_count: 0,
        indptr_words: 0,
        feature_row_bytes: 0,
        sampled_ids: false,
        collected: [0; COLLECTED_WORDS],
        orphaned: false,
    };

    /// The subgraph layout of the minibatch whose state is `m`.
    fn layout(&self, m: &MinibatchState) -> Option<SubgraphLayout> {
        let layer_count = usize::from(self.layer_count);
        SubgraphLayout::new(&m.layers(layer_count)[..layer_count])?
            .with_features(self.feature_row_bytes)
    }

    /// The sampled-ids layout of the minibatch whose state is `m`.
    fn sampled_ids_layout(&self, m: &MinibatchState) -> Option<SampledIdsLayout> {
        let layer_count = usize::from(self.layer_count);
        let mut counts = [SampledCounts::default(); MAX_LAYERS];
        for (l, c) in counts.iter_mut().enumerate().take(layer_count) {
            *c = SampledCounts {
                dst_count: m.nodes_through(l),
                edge_count: m.edge_count[l],
            };
        }
        SampledIdsLayout::new(&counts[..layer_count])
    }

    /// The size in bytes of the result of the minibatch whose state is `m`, in the format the
    /// job returns; `None` if it does not fit the format.
    fn result_size(&self, m: &MinibatchState) -> Option<usize> {
        if self.sampled_ids {
            self.sampled_ids_layout(m).map(|l| l.total_size_bytes())
        } else {
            self.layout(m).map(|l| l.total_size_bytes())
        }
    }

    fn is_collected(&self, m: usize) -> bool {
        self.collected[m / 32] & (1 << (m % 32)) != 0
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
    /// Each destination's `indptr[v]` and `indptr[v + 1]`.
    Bounds,
    /// The neighbour id at each sampled position of each destination's list.
    Neighbours,
    /// Each node's feature row.
    Features,
}

/// The generator's cursors for the running job.
#[derive(Clone, Copy, Debug)]
struct Run {
    slot: usize,
    graph: GraphDescriptor,
    layer: usize,
    gather: Gather,
    /// Keys of the running gather: the layer's destinations, or the job's nodes.
    key_count: u32,
    /// Whether the sorted keys are in the lane's `sort_scratch` region (else in `keys`; the
    /// other holds the issuer's staged offsets, then each destination's edges in local order).
    sorted_in_scratch: bool,
    /// Keys of the running neighbour gather the issuer has sampled (the first ones).
    sampled: u32,
    /// Where the issuer is in the gather.
    issued: Cursor,
    /// Items the consumer has copied out.
    consumed: u32,
    /// The local pass after a completed neighbour gather, while it runs: the minibatch it is
    /// at and that minibatch's next destination; `None` while gathering.
    pass: Option<(u16, u32)>,
    /// Index of this layer's first edge in the slot's indices region.
    edge_base: u32,
    /// Edges the neighbour gather's issuer placed in this layer so far, all minibatches
    /// together (in key order).
    layer_edges: u32,
    /// Edges the local pass has recorded in this layer so far, all minibatches together (in
    /// local order).
    local_edges: u32,
    /// Destinations of this layer, all minibatches together.
    dst_count: u32,
}

/// A page the issuer pinned for the consumer.
#[derive(Clone, Copy, Debug)]
struct WindowPage {
    /// The logical page.
    page: u32,
    /// Its page-buffer slot.
    slot: u32,
    /// The sectors its items need.
    want: Sectors,
    /// How many of the gather's items it serves, in a row.
    items: u32,
}

/// A sampling lane: the job it runs, that job's working regions and the pages it pins.
#[derive(Debug)]
struct Lane {
    regions: LaneRegions,
    table: NodeTable,
    run: Option<Run>,
    /// Pinned pages ahead of the consumer.
    window: Deque<WindowPage, MAX_WINDOW>,
    /// Read-aheads the lane's passes started that have not landed (each holds a slot).
    prefetching: u32,
    /// Read-aheads the lane started, all told (for tests).
    #[cfg(test)]
    read_aheads: u32,
}

/// The ISP control unit and subgraph generator.
#[derive(Debug)]
pub(crate) struct Isp {
    jobs: [Job; MAX_ISP_SLOTS],
    slot_count: usize,
    regions: [SlotRegions; MAX_ISP_SLOTS],
    lanes: [Lane; MAX_ISP_LANES],
    lane_count: usize,
    /// The radix sort's histogram: a sort runs to its end within one step, so the lanes
    /// share it.
    radix_counts: [u32; sort::BUCKETS],
    max_nodes: u32,
    max_edges: u32,
    max_feature_bytes: usize,
    limits: NsLimits,
    next_seq: u32,
    /// Pages each lane may pin: an equal share of the window, so no lane starves another of
    /// page-buffer slots.
    window_pages: usize,
    /// Whether the passes read ahead ([`crate::FirmwareConfig::isp_read_ahead`]).
    read_ahead: bool,
    /// One destination's sampled positions (used within one step, shared like the histogram).
    scratch: [u64; MAX_FANOUT as usize],
    block_size_bytes: u64,
    page_size_bytes: u64,
    /// log2 of the page size, if it is a power of two (a shift instead of a division).
    page_shift: Option<u32>,
    /// log2 of a sector (a sixteenth of a page), if the page is a power of two.
    sector_shift: Option<u32>,
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
        let lane_count = usize::from(config.isp_lanes);
        for lane in &layout.lanes[..lane_count] {
            lane.node_table.bytes_mut(dram).fill(0);
        }
        let page = u64::from(page_size_bytes);
        let page_shift = page.is_power_of_two().then(|| page.trailing_zeros());
        Self {
            jobs: [Job::FREE; MAX_ISP_SLOTS],
            slot_count: usize::from(config.isp_slots),
            regions: layout.slots,
            lanes: core::array::from_fn(|l| Lane {
                regions: layout.lanes[l],
                table: NodeTable::new(hash_capacity(config.max_subgraph_nodes)),
                run: None,
                window: Deque::new(),
                prefetching: 0,
                #[cfg(test)]
                read_aheads: 0,
            }),
            lane_count,
            radix_counts: [0; sort::BUCKETS],
            max_nodes: config.max_subgraph_nodes,
            max_edges: config.max_subgraph_edges,
            max_feature_bytes: config.max_feature_bytes as usize,
            limits: config.limits,
            next_seq: 0,
            window_pages: (config.isp_window_pages as usize / lane_count).clamp(1, MAX_WINDOW),
            read_ahead: config.isp_read_ahead,
            scratch: [0; MAX_FANOUT as usize],
            block_size_bytes: u64::from(config.block_size_bytes()),
            page_size_bytes: page,
            page_shift,
            sector_shift: page_shift.map(|s| s - SECTORS_PER_PAGE.trailing_zeros()),
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
    /// an earlier job of the same slot names nothing for 65,535 reuses; a hyperbatch's
    /// minibatch `m` is named with `m` added in bits 31:24.
    fn tag_of(&self, slot: usize) -> u32 {
        (u32::from(self.jobs[slot].generation) << 8) | slot as u32
    }

    /// The slot and minibatch a tag names, if it names a minibatch not yet collected.
    fn slot_of(&self, tag: u32) -> Option<(usize, usize)> {
        let slot = (tag & 0xFF) as usize;
        let m = (tag >> 24) as usize;
        let job = self.jobs.get(..self.slot_count)?.get(slot)?;
        (u32::from(job.generation) == (tag >> 8) & 0xFFFF
            && job.state != JobState::Free
            && m < usize::from(job.minibatch_count)
            && !job.is_collected(m))
        .then_some((slot, m))
    }

    /// Validates the NS_config now in `slot`'s config window (`len` bytes were DMA'd) against
    /// the attached graph and queues the job; returns its tag. `hyperbatch` says whether the
    /// path it came by can collect a hyperbatch's minibatches (the tunnel window cannot).
    pub fn accept(
        &mut self,
        dram: &mut [u8],
        slot: usize,
        len: usize,
        graph: &GraphDescriptor,
        hyperbatch: bool,
    ) -> Result<u32, VendorStatus> {
        let regions = self.regions[slot];
        // The states are written while the parse borrows the config: the config region comes
        // first in the arena, so the two are split apart.
        let (head, tail) = dram.split_at_mut(regions.minibatches.start);
        let states = Region {
            start: 0,
            len: regions.minibatches.len,
        };
        let bytes = &regions.config.bytes(head)[..len];
        let cfg = NsConfig::parse(bytes, &self.limits, graph.node_count)?;
        if cfg.hyperbatch && !hyperbatch {
            return Err(VendorStatus::BadMinibatchCount);
        }
        let feature_row_bytes = match (cfg.features, graph.features) {
            (false, _) => 0,
            // A device without a feature buffer does not know the flag.
            (true, _) if self.max_feature_bytes == 0 => return Err(VendorStatus::ReservedField),
            (true, None) => return Err(VendorStatus::BadDescriptor),
            (true, Some(f)) => f.row_bytes,
        };
        let target_word = cfg.targets_offset_bytes() / 8;
        for m in 0..cfg.minibatch_count() {
            // Every index below the count names a minibatch (checked by the parse).
            let Some(mb) = cfg.minibatch(m) else {
                return Err(VendorStatus::Truncated);
            };
            let state = MinibatchState {
                seed: mb.seed,
                target_word: (target_word + mb.first_target as usize) as u32,
                target_count: mb.targets.len() as u32,
                ..MinibatchState::default()
            };
            state.store(states, tail, m);
        }
        let job = &mut self.jobs[slot];
        job.state = JobState::Queued;
        job.generation = job.generation.wrapping_add(1);
        job.seq = self.next_seq;
        job.fanouts = [0; MAX_LAYERS];
        job.fanouts[..cfg.fanouts().len()].copy_from_slice(cfg.fanouts());
        job.layer_count = cfg.fanouts().len() as u8;
        job.minibatch_count = cfg.minibatch_count() as u16;
        job.graph = *graph;
        job.feature_row_bytes = feature_row_bytes;
        job.sampled_ids = cfg.sampled_ids;
        job.collected = [0; COLLECTED_WORDS];
        job.orphaned = false;
        self.next_seq = self.next_seq.wrapping_add(1);
        Ok(self.tag_of(slot))
    }

    /// The state of the minibatch named by `tag`.
    pub fn collect_state(&self, dram: &[u8], tag: u32) -> Collect {
        let Some((slot, m)) = self.slot_of(tag) else {
            return Collect::Unknown;
        };
        let job = &self.jobs[slot];
        match job.state {
            JobState::Free => Collect::Unknown,
            JobState::Queued | JobState::Running => Collect::Pending,
            JobState::Failed(s) => Collect::Failed(s),
            JobState::Done => {
                let state = MinibatchState::load(self.regions[slot].minibatches, dram, m);
                job.result_size(&state)
                    .map_or(Collect::Failed(Status::INTERNAL_ERROR), Collect::Done)
            }
        }
    }

    /// DMAs the finished subgraph of the minibatch named by `tag` to `cmd`'s host buffer, its
    /// pieces from the slot's shared arrays; returns the bytes written.
    pub fn write_result<H: HostInterface>(
        &self,
        dram: &[u8],
        tag: u32,
        host: &mut H,
        cmd: CommandId,
    ) -> Result<usize, DmaError> {
        let (slot, m) = self.slot_of(tag).ok_or(DmaError)?;
        let job = &self.jobs[slot];
        let regions = &self.regions[slot];
        let state = MinibatchState::load(regions.minibatches, dram, m);
        if job.sampled_ids {
            return self.write_sampled_ids(dram, slot, &state, host, cmd);
        }
        let layout = job.layout(&state).ok_or(DmaError)?;
        let mut head = [0u8; 32 + 16 * MAX_LAYERS];
        layout.write_head(state.seed, &mut head).ok_or(DmaError)?;
        host.dma_to_host(cmd, 0, &head[..layout.head_size_bytes()])?;
        let row_bytes = job.feature_row_bytes as usize;
        let mut local = 0usize;
        for p in 0..PHASES {
            let (start, len) = (
                state.segment_start[p] as usize,
                state.segment_len[p] as usize,
            );
            let nodes = regions.nodes.sub(8 * start, 8 * len);
            host.dma_to_host(cmd, layout.nodes_offset() + 8 * local, nodes.bytes(dram))?;
            if row_bytes > 0 {
                let rows = regions.features.sub(start * row_bytes, len * row_bytes);
                let at = layout.features_offset() + local * row_bytes;
                host.dma_to_host(cmd, at, rows.bytes(dram))?;
            }
            local += len;
        }
        let mut end = layout.nodes_offset() + 8 * local;
        for l in 0..usize::from(job.layer_count) {
            let row = regions.indptr.sub(
                4 * state.indptr_row[l] as usize,
                4 * (state.nodes_through(l) as usize + 1),
            );
            host.dma_to_host(cmd, layout.indptr_offset(l), row.bytes(dram))?;
            let edges = regions.indices.sub(
                4 * state.edge_start[l] as usize,
                4 * state.edge_count[l] as usize,
            );
            host.dma_to_host(cmd, layout.indices_offset(l), edges.bytes(dram))?;
            end = layout.indices_offset(l) + 4 * state.edge_count[l] as usize;
        }
        if row_bytes > 0 {
            // The feature section starts 8-byte aligned: its padding is zeros, not whatever
            // the host's buffer held.
            let pad = layout.features_offset().saturating_sub(end).min(8);
            host.dma_to_host(cmd, end, &[0u8; 8][..pad])?;
        }
        Ok(layout.total_size_bytes())
    }

    /// [`Self::write_result`] of a job that returns its sampled ids: the head, then each
    /// layer's `indptr` row and its edges (global ids), straight from the slot's arrays.
    fn write_sampled_ids<H: HostInterface>(
        &self,
        dram: &[u8],
        slot: usize,
        state: &MinibatchState,
        host: &mut H,
        cmd: CommandId,
    ) -> Result<usize, DmaError> {
        let job = &self.jobs[slot];
        let regions = &self.regions[slot];
        let layout = job.sampled_ids_layout(state).ok_or(DmaError)?;
        let mut head = [0u8; 32 + 8 * MAX_LAYERS];
        layout.write_head(state.seed, &mut head).ok_or(DmaError)?;
        host.dma_to_host(cmd, 0, &head[..layout.head_size_bytes()])?;
        for l in 0..usize::from(job.layer_count) {
            let row = regions.indptr.sub(
                4 * state.indptr_row[l] as usize,
                4 * (state.nodes_through(l) as usize + 1),
            );
            host.dma_to_host(cmd, layout.indptr_offset(l), row.bytes(dram))?;
            let edges = regions.indices.sub(
                4 * state.edge_start[l] as usize,
                4 * state.edge_count[l] as usize,
            );
            host.dma_to_host(cmd, layout.ids_offset(l), edges.bytes(dram))?;
        }
        Ok(layout.total_size_bytes())
    }

    /// Marks the minibatch named by `tag` collected (after a successful or failed collect);
    /// frees the job once all its minibatches are.
    pub fn release(&mut self, tag: u32) {
        if let Some((slot, m)) = self.slot_of(tag) {
            let job = &mut self.jobs[slot];
            job.collected[m / 32] |= 1 << (m % 32);
            if (0..usize::from(job.minibatch_count)).all(|m| job.is_collected(m)) {
                job.state = JobState::Free;
            }
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
        self.lanes.iter().all(|l| l.run.is_none()) && !self.any_queued()
    }

    fn any_queued(&self) -> bool {
        self.jobs[..self.slot_count]
            .iter()
            .any(|j| j.state == JobState::Queued)
    }

    /// The number of lanes (jobs run at once).
    pub fn lane_count(&self) -> usize {
        self.lane_count
    }

    /// A read-ahead `lane` started has landed.
    pub fn prefetch_landed(&mut self, lane: usize) {
        if let Some(l) = self.lanes.get_mut(lane) {
            l.prefetching = l.prefetching.saturating_sub(1);
        }
    }

    /// Whether `lane` has work: a job running, or none and a job queued for it to start.
    pub fn lane_busy(&self, lane: usize) -> bool {
        lane < self.lane_count && (self.lanes[lane].run.is_some() || self.any_queued())
    }

    /// How many lanes run a job now, and the most pages any lane has pinned (for tests).
    #[cfg(test)]
    pub fn running_lanes(&self) -> (usize, usize) {
        let lanes = &self.lanes[..self.lane_count];
        (
            lanes.iter().filter(|l| l.run.is_some()).count(),
            lanes.iter().map(|l| l.window.len()).max().unwrap_or(0),
        )
    }

    /// Each lane's run cursors and pinned pages, for test failure messages.
    #[cfg(test)]
    pub fn describe_lanes(
        &self,
        dram: &[u8],
        backend: &crate::backend::Backend,
    ) -> std::string::String {
        let mut out = std::string::String::new();
        for (l, lane) in self.lanes[..self.lane_count].iter().enumerate() {
            out += &std::format!("lane {l}: {:?}\n", lane.run);
            for w in lane.window.iter() {
                out += &std::format!(
                    "  page {} want {:?} items {}: {}\n",
                    w.page,
                    w.want,
                    w.items,
                    backend.buffer.describe_slot(dram, w.slot)
                );
            }
        }
        out
    }

    /// The layer and gather (0 bounds, 1 neighbours, 2 features) `lane`'s job is at.
    #[cfg(test)]
    pub fn lane_gather(&self, lane: usize) -> Option<(usize, usize)> {
        let run = self.lanes.get(lane)?.run?;
        Some((run.layer, run.gather as usize))
    }

    /// Read-aheads started by every lane, all told.
    #[cfg(test)]
    pub fn read_aheads(&self) -> u32 {
        self.lanes.iter().map(|l| l.read_aheads).sum()
    }

    /// Pages each lane may pin.
    #[cfg(test)]
    pub fn window_pages(&self) -> usize {
        self.window_pages
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
