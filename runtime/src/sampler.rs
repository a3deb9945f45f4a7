//! Neighbour samplers: one trait, one output type.
//!
//! Every sampler turns `(seed, fanouts, targets)` into a [`SampledSubgraph`] — the exact bytes of
//! the message-flow-graph format of [`sagessd_abi::subgraph`]. For the same request all samplers
//! must produce the same bytes; that byte identity is the project's test oracle.
//!
//! * [`ReferenceSampler`]: over an in-memory [`CsrGraph`] or a synthetic graph ([`HostGraph`]:
//!   the DRAM-only upper bound, and the oracle).
//! * [`IspSampler`]: the device samples; one `NS_SUBMIT` plus one `NS_COLLECT` per minibatch,
//!   through the host driver's [`Device::sample`].
//! * The host-over-device samplers (mmap, direct I/O, io_uring-style, and ISP through
//!   passthrough ioctls, over a modelled host I/O stack) are
//!   [`HostIoSampler`](crate::host_io::HostIoSampler).
//!
//! The reference and the host samplers share one message-flow-graph builder,
//! [`SubgraphBuilder`] ([`build_subgraph`] drives it over a [`NeighbourSource`]): it deduplicates
//! targets and sources in first-seen order, computes each destination's sampled *positions* with
//! [`sample_positions`] before asking for any neighbour id, and serialises with
//! [`SubgraphLayout`] — the same steps the firmware takes.

use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;

use sagessd_abi::ns_config::MAX_LAYERS;
use sagessd_abi::sample::{MAX_FANOUT, sample_positions};
use sagessd_abi::subgraph::{LayerCounts, SubgraphError, SubgraphLayout, SubgraphView};
use sagessd_host_driver::{Device, DeviceCounters, DriverError, DriverStats, Returns, Transport};

use sagessd_emulator::synthetic_graph::SyntheticGraph;

use crate::graph::CsrGraph;
use crate::host_build::HostBuilder;
use crate::synthetic::SyntheticSource;

/// Why a sample could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// The request is malformed (no targets, bad fanouts, a target outside the graph, …).
    #[error("invalid sampling request: {0}")]
    InvalidRequest(String),
    /// The device or transport failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The graph read from the device is inconsistent.
    #[error("graph on device is corrupt: {0}")]
    GraphCorrupt(String),
    /// A subgraph's bytes are not valid, or the sample does not fit the format.
    #[error("invalid subgraph: {0:?}")]
    Subgraph(SubgraphError),
}

/// A sampled minibatch: the validated bytes of one message-flow graph in the format of
/// [`sagessd_abi::subgraph`].
#[derive(Clone, PartialEq, Eq)]
pub struct SampledSubgraph {
    bytes: Vec<u8>,
}

impl std::fmt::Debug for SampledSubgraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.view();
        f.debug_struct("SampledSubgraph")
            .field("layers", &v.layer_count())
            .field("nodes", &v.nodes().len())
            .field("size_bytes", &self.bytes.len())
            .field("checksum", &format_args!("{:#018x}", self.checksum()))
            .finish()
    }
}

impl SampledSubgraph {
    /// Validates `bytes` (exactly one subgraph, nothing after it) and wraps them.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, SamplerError> {
        let view = SubgraphView::parse(&bytes).map_err(SamplerError::Subgraph)?;
        if view.as_bytes().len() != bytes.len() {
            return Err(SamplerError::Subgraph(SubgraphError::Inconsistent(
                "trailing bytes",
            )));
        }
        Ok(Self { bytes })
    }

    /// Splits a subgraph that carries a feature section (in-storage feature gather) into the
    /// plain subgraph, byte for byte what a sampler without features produces, and its
    /// feature rows (in node order).
    pub fn split_features(mut bytes: Vec<u8>) -> Result<(Self, Vec<u8>), SamplerError> {
        let (features, counts, seed) = {
            let view = SubgraphView::parse(&bytes).map_err(SamplerError::Subgraph)?;
            let counts: Vec<LayerCounts> = (0..view.layer_count())
                .map(|l| view.layer(l).counts)
                .collect();
            (view.features().to_vec(), counts, view.seed())
        };
        let inconsistent = || SamplerError::Subgraph(SubgraphError::Inconsistent("layout"));
        let layout = SubgraphLayout::new(&counts).ok_or_else(inconsistent)?;
        bytes.truncate(layout.total_size_bytes());
        layout
            .write_head(seed, &mut bytes)
            .ok_or_else(inconsistent)?;
        Ok((Self::from_bytes(bytes)?, features))
    }

    /// The subgraph's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The subgraph's bytes, by value.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// A structured view (layers, node list, local CSRs), in O(layers): the bytes were
    /// validated when constructed.
    pub fn view(&self) -> SubgraphView<'_> {
        SubgraphView::parse_layout(&self.bytes).expect("validated when constructed")
    }

    /// Number of unique nodes.
    pub fn node_count(&self) -> usize {
        self.view().nodes().len()
    }

    /// Number of sampled edges over all layers.
    pub fn edge_count(&self) -> u64 {
        let v = self.view();
        (0..v.layer_count())
            .map(|l| u64::from(v.layer(l).counts.edge_count))
            .sum()
    }

    /// Destination nodes summed over the layers: what the host's per-node sampling work
    /// (`[host] node_ns`) is counted in.
    pub fn dst_node_count(&self) -> u64 {
        let v = self.view();
        (0..v.layer_count())
            .map(|l| u64::from(v.layer(l).counts.dst_count))
            .sum()
    }

    /// The host's modelled compute for building it: `host`'s costs per destination node (over
    /// all layers) and per sampled edge.
    pub fn host_sampling_ns(&self, host: &sagessd_emulator::host_stack::HostStackConfig) -> u64 {
        host.sampling_ns(self.dst_node_count(), self.edge_count())
    }

    /// FNV-1a 64 of the bytes: a short fingerprint for reports.
    pub fn checksum(&self) -> u64 {
        fnv1a(FNV_OFFSET, &self.bytes)
    }
}

/// The FNV-1a 64-bit offset basis.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Continues an FNV-1a 64 hash `h` over `bytes`.
pub fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What a sampler did, cumulative over its minibatches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerStats {
    /// Minibatches sampled.
    pub minibatches: u64,
    /// Unique nodes over all subgraphs.
    pub nodes: u64,
    /// Sampled edges over all subgraphs.
    pub edges: u64,
    /// Subgraph bytes produced.
    pub subgraph_bytes: u64,
    /// NVMe commands, bytes per direction and failures, as the host driver counted them.
    pub driver: DriverStats,
    /// Device-side counters (flash pages read, link bytes), when the transport exposes them.
    pub device: Option<DeviceCounters>,
    /// Modelled (virtual) time spent in minibatches: from the transport's clock at the start of
    /// each minibatch to its last completion; `None` when no command ran on a timed transport.
    pub modelled_time_ns: Option<u64>,
    /// Bytes the device returned (subgraphs, or sampled ids the host built subgraphs from).
    pub collected_bytes: u64,
    /// Host wall-clock nanoseconds spent building subgraphs from sampled ids
    /// ([`IspSampler::with_host_build`]; 0 for every other sampler).
    pub host_build_ns: u64,
}

impl SamplerStats {
    /// Adds what a run did: the driver's counts `d`, and the device's counters before and
    /// after it (when the transport can read them).
    pub(crate) fn add_counters(
        &mut self,
        d: &DriverStats,
        device: Option<(DeviceCounters, DeviceCounters)>,
    ) {
        let s = &mut self.driver;
        s.commands += d.commands;
        s.admin_commands += d.admin_commands;
        s.reads += d.reads;
        s.writes += d.writes;
        s.ns_submits += d.ns_submits;
        s.ns_collects += d.ns_collects;
        s.other_commands += d.other_commands;
        s.failed_commands += d.failed_commands;
        s.h2c_bytes += d.h2c_bytes;
        s.c2h_bytes += d.c2h_bytes;
        if let Some((before, after)) = device {
            let delta = after.since(&before);
            let acc = self.device.get_or_insert_with(DeviceCounters::default);
            acc.nand_pages_read += delta.nand_pages_read;
            acc.nand_pages_programmed += delta.nand_pages_programmed;
            acc.pcie_h2c_bytes += delta.pcie_h2c_bytes;
            acc.pcie_c2h_bytes += delta.pcie_c2h_bytes;
            acc.commands += delta.commands;
        }
    }

    /// Counts one produced subgraph.
    pub(crate) fn add_subgraph(&mut self, s: &SampledSubgraph) {
        self.minibatches += 1;
        self.nodes += s.node_count() as u64;
        self.edges += s.edge_count();
        self.subgraph_bytes += s.as_bytes().len() as u64;
    }
}

/// A neighbour sampler: one minibatch in, one message-flow graph out. `Send`, so that each
/// pipeline worker can own one.
pub trait Sampler: Send {
    /// A short name for reports.
    fn name(&self) -> &'static str;

    /// Samples `fanouts` (hop order, 1..=4 layers) around `targets` with `seed`, producing the
    /// subgraph format of [`sagessd_abi::subgraph`].
    fn sample(
        &mut self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError>;

    /// Samples several (seed, targets) minibatches with the same fanouts, in order. Samplers
    /// that share work across minibatches override it (an AGNES hyperbatch reads each block
    /// once for all of them); the result is the same as one [`Self::sample`] each.
    fn sample_many(
        &mut self,
        fanouts: &[u16],
        requests: &[(u64, Vec<u64>)],
    ) -> Result<Vec<SampledSubgraph>, SamplerError> {
        requests
            .iter()
            .map(|(seed, targets)| self.sample(*seed, fanouts, targets))
            .collect()
    }

    /// What this sampler did so far.
    fn stats(&self) -> SamplerStats;
}

impl<S: Sampler + ?Sized> Sampler for Box<S> {
    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn sample(
        &mut self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        (**self).sample(seed, fanouts, targets)
    }

    fn sample_many(
        &mut self,
        fanouts: &[u16],
        requests: &[(u64, Vec<u64>)],
    ) -> Result<Vec<SampledSubgraph>, SamplerError> {
        (**self).sample_many(fanouts, requests)
    }

    fn stats(&self) -> SamplerStats {
        (**self).stats()
    }
}

/// Checks a request the way the device does (layer count, fanouts, targets, node range), so
/// host samplers refuse exactly what the device refuses (device-specific limits aside).
pub fn validate_request(
    fanouts: &[u16],
    targets: &[u64],
    node_count: u64,
) -> Result<(), SamplerError> {
    if fanouts.is_empty() || fanouts.len() > MAX_LAYERS {
        return Err(SamplerError::InvalidRequest(format!(
            "{} layers requested, 1..={MAX_LAYERS} allowed",
            fanouts.len()
        )));
    }
    if let Some(f) = fanouts.iter().find(|f| **f == 0 || **f > MAX_FANOUT) {
        return Err(SamplerError::InvalidRequest(format!(
            "fanout {f} outside 1..={MAX_FANOUT}"
        )));
    }
    if targets.is_empty() || targets.len() > u32::MAX as usize {
        return Err(SamplerError::InvalidRequest(format!(
            "{} targets",
            targets.len()
        )));
    }
    if let Some(t) = targets.iter().find(|t| **t >= node_count) {
        return Err(SamplerError::InvalidRequest(format!(
            "target {t} is not below the node count {node_count}"
        )));
    }
    Ok(())
}

/// Where a node's neighbour list sits in a source's edge array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeRange {
    /// Position of the first neighbour.
    pub start: u64,
    /// Number of neighbours.
    pub degree: u64,
}

/// Where [`build_subgraph`] gets a graph's adjacency from, one layer at a time: first the edge
/// ranges of all of a layer's destinations, then the neighbour ids at the sampled positions.
pub trait NeighbourSource {
    /// Number of nodes of the graph.
    fn node_count(&self) -> u64;

    /// The neighbour-list range of each of `nodes`, in order.
    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError>;

    /// The neighbour ids at each of `positions` (absolute positions in the edge array), in
    /// order.
    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError>;
}

/// Builds the message-flow graph of [`sagessd_abi::subgraph`] for one minibatch from `source`
/// (a loop over a [`SubgraphBuilder`]).
pub fn build_subgraph<S: NeighbourSource + ?Sized>(
    source: &mut S,
    seed: u64,
    fanouts: &[u16],
    targets: &[u64],
) -> Result<SampledSubgraph, SamplerError> {
    let mut b = SubgraphBuilder::new(source.node_count(), seed, fanouts, targets)?;
    while let Some(dst) = b.destinations() {
        let ranges = source.edge_ranges(dst)?;
        let positions = b.set_ranges(&ranges)?;
        let neighbours = source.neighbours_at(&positions)?;
        b.set_neighbours(&neighbours)?;
    }
    b.finish()
}

/// Where a subgraph keeps the local id of each node it has interned, handed from one minibatch
/// to the next so that it no longer grows after the first (rehashing was a tenth of the
/// in-memory sampler's time).
#[derive(Debug)]
pub enum NodeIndex {
    /// A hash map keyed by 32-bit ids, for graphs of at most 2^32 nodes (half the entry of a
    /// 64-bit key, twice the entries a cache line holds), emptied but keeping its capacity.
    Narrow(FxHashMap<u32, u32>),
    /// A hash map for larger graphs.
    Wide(FxHashMap<u64, u32>),
    /// A slot per node of the graph, `epoch << 32 | local id`, valid when its epoch is the
    /// current minibatch's: an intern is one access, with no hashing or probing, and emptying
    /// it is a new epoch. For a sampler that samples many minibatches of a graph of at most
    /// [`NodeIndex::TABLE_MAX_NODES`] nodes (8 bytes a node, 32 MiB for 4 M nodes; pages the
    /// minibatches never reach are never touched).
    Table {
        /// The current minibatch's epoch (never 0, the epoch of a slot never written).
        epoch: u32,
        /// One slot per node.
        slots: Vec<u64>,
    },
}

impl Default for NodeIndex {
    fn default() -> Self {
        Self::Narrow(FxHashMap::default())
    }
}

impl NodeIndex {
    /// Largest graph a [`NodeIndex::Table`] serves (2^23 nodes: a 64 MiB table per sampler).
    pub const TABLE_MAX_NODES: u64 = 1 << 23;

    /// An index for a graph of `node_count` nodes with room for `nodes` of them.
    pub fn with_capacity(node_count: u64, nodes: usize) -> Self {
        if node_count <= 1 << 32 {
            Self::Narrow(FxHashMap::with_capacity_and_hasher(
                nodes,
                Default::default(),
            ))
        } else {
            Self::Wide(FxHashMap::with_capacity_and_hasher(
                nodes,
                Default::default(),
            ))
        }
    }

    /// An index to be reused over many minibatches of a graph of `node_count` nodes: a table
    /// where the graph is small enough, else a hash map.
    pub fn for_minibatches(node_count: u64) -> Self {
        if node_count <= Self::TABLE_MAX_NODES {
            Self::Table {
                epoch: 0,
                slots: vec![0; node_count as usize],
            }
        } else {
            Self::with_capacity(node_count, 0)
        }
    }

    /// Empties it for a minibatch of a graph of `node_count` nodes.
    fn reset(&mut self, node_count: u64) {
        match self {
            Self::Narrow(_) if node_count > 1 << 32 => *self = Self::with_capacity(node_count, 0),
            Self::Narrow(map) => map.clear(),
            Self::Wide(map) => map.clear(),
            Self::Table { slots, .. } if slots.len() as u64 != node_count => {
                *self = Self::for_minibatches(node_count);
                self.reset(node_count);
            }
            Self::Table { epoch, slots } => {
                *epoch = epoch.wrapping_add(1);
                if *epoch == 0 {
                    // 2^32 minibatches: the slots of the first epoch would look current.
                    slots.fill(0);
                    *epoch = 1;
                }
            }
        }
    }
}

/// `key`'s local id in `map`, interning `id` as the next of `nodes` if new.
#[inline(always)]
fn intern_in<K: std::hash::Hash + Eq>(
    map: &mut FxHashMap<K, u32>,
    key: K,
    id: u64,
    nodes: &mut Vec<u64>,
) -> Result<u32, SamplerError> {
    match map.entry(key) {
        Entry::Occupied(e) => Ok(*e.get()),
        Entry::Vacant(e) => {
            let i = u32::try_from(nodes.len()).map_err(|_| too_big())?;
            nodes.push(id);
            Ok(*e.insert(i))
        }
    }
}

/// The steps of [`build_subgraph`] as a state machine, so that a caller can fetch each layer's
/// edge ranges and neighbours however it likes (synchronously, or interleaved with other
/// workers): while [`Self::destinations`] is `Some(nodes)`, give it the nodes' edge ranges
/// ([`Self::set_ranges`], which returns the sampled positions), then the neighbour ids at those
/// positions ([`Self::set_neighbours`]); then [`Self::finish`].
#[derive(Debug)]
pub struct SubgraphBuilder {
    node_count: u64,
    seed: u64,
    fanouts: Vec<u16>,
    nodes: Vec<u64>,
    place: NodeIndex,
    counts: Vec<LayerCounts>,
    local: Vec<(Vec<u32>, Vec<u32>)>,
    scratch: Vec<u64>,
    /// The current layer's destination count and local indptr, once its ranges are known.
    pending: Option<(usize, Vec<u32>, usize)>,
}

/// How many elements ahead the in-memory sampler's loops prefetch the line they will read at
/// random (the indptr entry, the neighbour, the node-table slot): far enough that a DRAM miss
/// lands before its turn, near enough that the lines stay in L1.
const PREFETCH_AHEAD: usize = 16;

/// Asks the CPU to bring `value`'s cache line in (a hint: nothing is read, nothing can fail).
/// Where the architecture has no stable prefetch hint this does nothing.
#[inline(always)]
fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch hint reads nothing and cannot fault; the address is a live reference.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            (value as *const T).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Prefetches `array[keys[i + PREFETCH_AHEAD]]`, the element a loop over `keys` will read at
/// random [`PREFETCH_AHEAD`] turns from now (nothing past either end).
#[inline(always)]
fn prefetch_ahead<T>(keys: &[u64], i: usize, array: &[T]) {
    if let Some(e) = keys
        .get(i + PREFETCH_AHEAD)
        .and_then(|&k| array.get(k as usize))
    {
        prefetch(e);
    }
}

fn too_big() -> SamplerError {
    SamplerError::Subgraph(SubgraphError::Inconsistent("subgraph too large"))
}

impl SubgraphBuilder {
    /// Validates the request and interns the targets.
    pub fn new(
        node_count: u64,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<Self, SamplerError> {
        // Room for the targets and their first hop without rehashing.
        let index = NodeIndex::with_capacity(
            node_count,
            targets.len() * (1 + usize::from(fanouts.first().copied().unwrap_or(0))),
        );
        Self::with_index(node_count, seed, fanouts, targets, index)
    }

    /// [`Self::new`] interning into `index` (emptied first; [`Self::finish_with_index`] gives
    /// it back for the next minibatch).
    pub fn with_index(
        node_count: u64,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
        mut index: NodeIndex,
    ) -> Result<Self, SamplerError> {
        validate_request(fanouts, targets, node_count)?;
        index.reset(node_count);
        let mut b = Self {
            node_count,
            seed,
            fanouts: fanouts.to_vec(),
            nodes: Vec::new(),
            place: index,
            counts: Vec::with_capacity(fanouts.len()),
            local: Vec::with_capacity(fanouts.len()),
            scratch: vec![0u64; usize::from(*fanouts.iter().max().unwrap_or(&0))],
            pending: None,
        };
        for &t in targets {
            b.intern(t)?;
        }
        Ok(b)
    }

    #[inline(always)]
    fn intern(&mut self, id: u64) -> Result<u32, SamplerError> {
        match &mut self.place {
            // Every id is below the node count (checked), so it fits a narrow index's key.
            NodeIndex::Narrow(map) => intern_in(map, id as u32, id, &mut self.nodes),
            NodeIndex::Wide(map) => intern_in(map, id, id, &mut self.nodes),
            NodeIndex::Table { epoch, slots } => {
                // Every id is below the node count (checked), which is the table's length.
                let slot = &mut slots[id as usize];
                if (*slot >> 32) as u32 == *epoch {
                    return Ok(*slot as u32);
                }
                let i = u32::try_from(self.nodes.len()).map_err(|_| too_big())?;
                self.nodes.push(id);
                *slot = u64::from(*epoch) << 32 | u64::from(i);
                Ok(i)
            }
        }
    }

    /// The destinations of the next layer (every node interned so far), or `None` when every
    /// layer is done.
    pub fn destinations(&self) -> Option<&[u64]> {
        (self.local.len() < self.fanouts.len()).then_some(&self.nodes[..])
    }

    /// The destinations' edge ranges, in order: returns the absolute edge-array positions to
    /// fetch, destination by destination.
    pub fn set_ranges(&mut self, ranges: &[EdgeRange]) -> Result<Vec<u64>, SamplerError> {
        let layer = self.local.len();
        let fanout = self.fanouts[layer];
        let dst_count = self.nodes.len();
        if ranges.len() != dst_count {
            return Err(SamplerError::GraphCorrupt(format!(
                "{} edge ranges for {dst_count} nodes",
                ranges.len()
            )));
        }
        let mut positions: Vec<u64> = Vec::with_capacity(dst_count * usize::from(fanout));
        let mut indptr: Vec<u32> = Vec::with_capacity(dst_count + 1);
        indptr.push(0);
        if fanout > MAX_FANOUT {
            return Err(SamplerError::InvalidRequest(format!("fanout {fanout}")));
        }
        for (&v, r) in self.nodes[..dst_count].iter().zip(ranges) {
            if r.degree <= u64::from(fanout) {
                // The whole list, in order (the specification's first case), without a call.
                let end = r.start.checked_add(r.degree).ok_or_else(|| {
                    SamplerError::GraphCorrupt(format!("edge range {r:?} past 2^64"))
                })?;
                positions.extend(r.start..end);
                indptr.push(u32::try_from(positions.len()).map_err(|_| too_big())?);
                continue;
            }
            let k = sample_positions(
                self.seed,
                layer as u8,
                v,
                r.degree,
                fanout,
                &mut self.scratch,
            )
            .ok_or_else(|| SamplerError::InvalidRequest(format!("fanout {fanout}")))?;
            positions.extend(self.scratch[..k].iter().map(|p| r.start + p));
            indptr.push(u32::try_from(positions.len()).map_err(|_| too_big())?);
        }
        self.pending = Some((dst_count, indptr, positions.len()));
        Ok(positions)
    }

    /// The neighbour ids at the positions [`Self::set_ranges`] returned, in order.
    pub fn set_neighbours(&mut self, neighbours: &[u64]) -> Result<(), SamplerError> {
        let (dst_count, indptr, wanted) = self
            .pending
            .take()
            .ok_or_else(|| SamplerError::InvalidRequest("neighbours before ranges".into()))?;
        if neighbours.len() != wanted {
            return Err(SamplerError::GraphCorrupt(format!(
                "{} neighbours for {wanted} positions",
                neighbours.len(),
            )));
        }
        let mut indices = Vec::with_capacity(neighbours.len());
        for (i, &n) in neighbours.iter().enumerate() {
            if let NodeIndex::Table { slots, .. } = &self.place {
                prefetch_ahead(neighbours, i, slots);
            }
            if n >= self.node_count {
                return Err(SamplerError::GraphCorrupt(format!(
                    "neighbour id {n} is not below the node count {}",
                    self.node_count
                )));
            }
            indices.push(self.intern(n)?);
        }
        self.counts.push(LayerCounts {
            dst_count: dst_count as u32,
            src_count: u32::try_from(self.nodes.len()).map_err(|_| too_big())?,
            edge_count: indices.len() as u32,
        });
        self.local.push((indptr, indices));
        Ok(())
    }

    /// The current layer's sampled neighbours as a device returned them
    /// ([`sagessd_abi::sampled_ids`]), in place of [`Self::set_ranges`] and
    /// [`Self::set_neighbours`]: `indptr` has a row per destination (in order), `ids` the
    /// neighbours' global ids. Checks what the host can: one row per destination, rows
    /// monotone from 0 to the id count, none longer than the layer's fanout, every id below
    /// the node count.
    pub fn set_sampled(&mut self, indptr: &[u32], ids: &[u64]) -> Result<(), SamplerError> {
        let layer = self.local.len();
        let fanout = *self
            .fanouts
            .get(layer)
            .ok_or_else(|| SamplerError::InvalidRequest("every layer is done".into()))?;
        let dst_count = self.nodes.len();
        let corrupt = |what: String| SamplerError::GraphCorrupt(format!("sampled ids: {what}"));
        if indptr.len() != dst_count + 1 {
            return Err(corrupt(format!(
                "{} rows for {dst_count} destinations in layer {layer}",
                indptr.len().saturating_sub(1)
            )));
        }
        let bad_row = indptr.first() != Some(&0)
            || indptr
                .windows(2)
                .any(|w| w[1] < w[0] || w[1] - w[0] > u32::from(fanout))
            || indptr.last().map(|&e| e as usize) != Some(ids.len());
        if bad_row {
            return Err(corrupt(format!(
                "layer {layer}'s rows are not monotone up to {} ids of at most {fanout} each",
                ids.len()
            )));
        }
        self.pending = Some((dst_count, indptr.to_vec(), ids.len()));
        self.set_neighbours(ids)
    }

    /// Serialises the message-flow graph (every layer must be done).
    pub fn finish(self) -> Result<SampledSubgraph, SamplerError> {
        self.finish_with_index().0
    }

    /// [`Self::finish`], and the node index back for the next minibatch.
    pub fn finish_with_index(mut self) -> (Result<SampledSubgraph, SamplerError>, NodeIndex) {
        let index = std::mem::take(&mut self.place);
        (self.serialise(), index)
    }

    fn serialise(self) -> Result<SampledSubgraph, SamplerError> {
        if self.local.len() != self.fanouts.len() {
            return Err(SamplerError::InvalidRequest("unfinished subgraph".into()));
        }
        let layout = SubgraphLayout::new(&self.counts).ok_or_else(too_big)?;
        let mut out = vec![0u8; layout.total_size_bytes()];
        layout.write_head(self.seed, &mut out).ok_or_else(too_big)?;
        let put_u32s = |out: &mut [u8], offset: usize, words: &[u32]| {
            for (chunk, w) in out[offset..offset + 4 * words.len()]
                .chunks_exact_mut(4)
                .zip(words)
            {
                chunk.copy_from_slice(&w.to_le_bytes());
            }
        };
        let at = layout.nodes_offset();
        for (chunk, n) in out[at..at + 8 * self.nodes.len()]
            .chunks_exact_mut(8)
            .zip(&self.nodes)
        {
            chunk.copy_from_slice(&n.to_le_bytes());
        }
        for (l, (indptr, indices)) in self.local.iter().enumerate() {
            put_u32s(&mut out, layout.indptr_offset(l), indptr);
            put_u32s(&mut out, layout.indices_offset(l), indices);
        }
        SampledSubgraph::from_bytes(out)
    }
}

/// A [`NeighbourSource`] over an in-memory CSR graph.
#[derive(Clone, Copy, Debug)]
pub struct CsrSource<'g> {
    graph: &'g CsrGraph,
}

impl<'g> CsrSource<'g> {
    /// A source reading `graph`.
    pub fn new(graph: &'g CsrGraph) -> Self {
        Self { graph }
    }
}

impl NeighbourSource for CsrSource<'_> {
    fn node_count(&self) -> u64 {
        self.graph.node_count()
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        let indptr = self.graph.indptr();
        Ok(nodes
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                prefetch_ahead(nodes, i, indptr);
                EdgeRange {
                    start: indptr[v as usize],
                    degree: indptr[v as usize + 1] - indptr[v as usize],
                }
            })
            .collect())
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        let indices = self.graph.indices();
        Ok(positions
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                prefetch_ahead(positions, i, indices);
                u64::from(indices[p as usize])
            })
            .collect())
    }
}

/// A graph the host holds: a CSR in memory, or a synthetic graph computed where it is read.
#[derive(Clone, Copy, Debug)]
pub enum HostGraph<'g> {
    /// An in-memory CSR.
    Csr(&'g CsrGraph),
    /// A synthetic graph ([`sagessd_emulator::synthetic_graph`]).
    Synthetic(&'g SyntheticGraph),
}

impl HostGraph<'_> {
    /// Nodes.
    pub fn node_count(&self) -> u64 {
        match self {
            Self::Csr(g) => g.node_count(),
            Self::Synthetic(g) => g.node_count(),
        }
    }

    /// CSR entries.
    pub fn edge_count(&self) -> u64 {
        match self {
            Self::Csr(g) => g.edge_count(),
            Self::Synthetic(g) => g.edge_count(),
        }
    }

    /// Node `v`'s neighbour list, into `out` (cleared first).
    pub fn neighbours_into(&self, v: u64, out: &mut Vec<u32>) {
        match self {
            Self::Csr(g) => {
                out.clear();
                out.extend_from_slice(g.neighbours(v));
            }
            Self::Synthetic(g) => g.neighbours_into(v, out),
        }
    }

    /// The graph as a [`NeighbourSource`].
    pub fn source(&self) -> HostSource<'_> {
        match *self {
            Self::Csr(g) => HostSource::Csr(CsrSource::new(g)),
            Self::Synthetic(g) => HostSource::Synthetic(SyntheticSource::new(g)),
        }
    }

    /// Runs [`build_subgraph`] over the graph's [`NeighbourSource`].
    pub fn sample(
        &self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        build_subgraph(&mut self.source(), seed, fanouts, targets)
    }
}

/// The [`NeighbourSource`] of a [`HostGraph`].
#[derive(Clone, Copy, Debug)]
pub enum HostSource<'g> {
    /// Over an in-memory CSR.
    Csr(CsrSource<'g>),
    /// Over a synthetic graph.
    Synthetic(SyntheticSource<'g>),
}

impl NeighbourSource for HostSource<'_> {
    fn node_count(&self) -> u64 {
        match self {
            Self::Csr(s) => s.node_count(),
            Self::Synthetic(s) => s.node_count(),
        }
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        match self {
            Self::Csr(s) => s.edge_ranges(nodes),
            Self::Synthetic(s) => s.edge_ranges(nodes),
        }
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        match self {
            Self::Csr(s) => s.neighbours_at(positions),
            Self::Synthetic(s) => s.neighbours_at(positions),
        }
    }
}

/// The in-memory reference sampler: the graph lives in host DRAM (or, synthetic, is computed
/// where it is read: the same bytes).
#[derive(Debug)]
pub struct ReferenceSampler<'g> {
    graph: HostGraph<'g>,
    stats: SamplerStats,
    /// The node index its minibatches reuse.
    index: Option<NodeIndex>,
}

impl<'g> ReferenceSampler<'g> {
    /// A sampler over `graph`.
    pub fn new(graph: &'g CsrGraph) -> Self {
        Self::over(HostGraph::Csr(graph))
    }

    /// A sampler over a synthetic graph.
    pub fn synthetic(graph: &'g SyntheticGraph) -> Self {
        Self::over(HostGraph::Synthetic(graph))
    }

    /// A sampler over either kind of graph.
    pub fn over(graph: HostGraph<'g>) -> Self {
        Self {
            graph,
            stats: SamplerStats::default(),
            index: None,
        }
    }
}

impl Sampler for ReferenceSampler<'_> {
    fn name(&self) -> &'static str {
        "in-memory"
    }

    fn sample(
        &mut self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        let s = match self.graph {
            // The CSR in memory: each layer in one pass, into a node index kept across
            // minibatches.
            HostGraph::Csr(g) => {
                let n = g.node_count();
                let index = self
                    .index
                    .take()
                    .unwrap_or_else(|| NodeIndex::for_minibatches(n));
                let mut b = SubgraphBuilder::with_index(n, seed, fanouts, targets, index)?;
                let result = (|| {
                    let mut source = CsrSource::new(g);
                    while let Some(dst) = b.destinations() {
                        let ranges = source.edge_ranges(dst)?;
                        let positions = b.set_ranges(&ranges)?;
                        let neighbours = source.neighbours_at(&positions)?;
                        b.set_neighbours(&neighbours)?;
                    }
                    Ok::<_, SamplerError>(())
                })();
                let (s, index) = b.finish_with_index();
                self.index = Some(index);
                result.and(s)?
            }
            HostGraph::Synthetic(_) => self.graph.sample(seed, fanouts, targets)?,
        };
        self.stats.add_subgraph(&s);
        Ok(s)
    }

    fn stats(&self) -> SamplerStats {
        self.stats
    }
}

/// Measures the driver, device and clock around one minibatch.
struct Meter {
    driver: DriverStats,
    device: Option<DeviceCounters>,
    start_ns: Option<u64>,
}

impl Meter {
    fn start<T: Transport>(device: &Device<T>) -> Self {
        Self {
            driver: device.stats(),
            device: device.device_counters(),
            start_ns: device.now_ns(),
        }
    }

    fn finish<T: Transport>(self, device: &Device<T>, stats: &mut SamplerStats) {
        let d = device.stats().since(&self.driver);
        stats.add_counters(&d, self.device.zip(device.device_counters()));
        if let (Some(start), Some(end)) = (self.start_ns, device.last_completed_at_ns())
            && d.commands > 0
        {
            let elapsed = end.saturating_sub(start);
            stats.modelled_time_ns = Some(stats.modelled_time_ns.unwrap_or(0) + elapsed);
        }
    }
}

/// The in-storage (ISP) sampler: the device samples the whole minibatch; the host sends one
/// `NS_SUBMIT` and one `NS_COLLECT` (plus one retry if its first buffer was too small). With
/// hyperbatches ([`Self::with_hyperbatch`]), [`Sampler::sample_many`] sends one `NS_SUBMIT` per
/// hyperbatch, so that the device reads each flash page once per hop for all its minibatches.
///
/// With [`Self::with_host_build`], the device returns each minibatch's sampled ids
/// ([`sagessd_abi::sampled_ids`]) and the host builds the subgraph from them
/// ([`crate::host_build`]): the same bytes, with the last layer's deduplication and the
/// relabelling moved from the device's core to the host's.
#[derive(Debug)]
pub struct IspSampler<T: Transport> {
    device: Device<T>,
    stats: SamplerStats,
    hyperbatch: usize,
    host_build: Option<HostBuilder>,
}

impl<T: Transport> IspSampler<T> {
    /// A sampler over `device`, on which a graph must be attached.
    pub fn new(device: Device<T>) -> Self {
        Self {
            device,
            stats: SamplerStats::default(),
            hyperbatch: 1,
            host_build: None,
        }
    }

    /// The same sampler, with the host building each subgraph from the sampled ids the device
    /// returns instead of the device building it.
    pub fn with_host_build(mut self) -> Self {
        let node_count = self.device.attached_graph().map_or(0, |g| g.node_count);
        self.host_build = Some(HostBuilder::new(node_count));
        self
    }

    /// Turns what the device returned for `requests` into subgraphs (building them on the host
    /// from sampled ids, with [`Self::with_host_build`]), counting them.
    fn finish(
        &mut self,
        fanouts: &[u16],
        requests: &[(u64, Vec<u64>)],
        results: Vec<Vec<u8>>,
    ) -> Result<Vec<SampledSubgraph>, SamplerError> {
        let node_count = self.device.attached_graph().map_or(0, |g| g.node_count);
        let mut out = Vec::with_capacity(results.len());
        for ((seed, targets), bytes) in requests.iter().zip(results) {
            self.stats.collected_bytes += bytes.len() as u64;
            let s = match &mut self.host_build {
                Some(host) => {
                    let t = std::time::Instant::now();
                    let s = host.build(&bytes, node_count, *seed, fanouts, targets);
                    self.stats.host_build_ns += t.elapsed().as_nanos() as u64;
                    s?
                }
                None => SampledSubgraph::from_bytes(bytes)?,
            };
            self.stats.add_subgraph(&s);
            out.push(s);
        }
        Ok(out)
    }

    /// The same sampler, whose [`Sampler::sample_many`] samples up to `minibatches` at once as
    /// an in-storage hyperbatch (1: one NS_config per minibatch).
    pub fn with_hyperbatch(mut self, minibatches: usize) -> Self {
        self.hyperbatch = minibatches.max(1);
        self
    }

    /// The device.
    pub fn device(&self) -> &Device<T> {
        &self.device
    }

    /// Gives the device back.
    pub fn into_device(self) -> Device<T> {
        self.device
    }
}

impl<T: Transport + Send> Sampler for IspSampler<T> {
    fn name(&self) -> &'static str {
        match (self.hyperbatch > 1, self.host_build.is_some()) {
            (true, true) => "ISP hyperbatch, host-built",
            (true, false) => "ISP hyperbatch",
            (false, true) => "ISP, host-built",
            (false, false) => "ISP",
        }
    }

    fn sample(
        &mut self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        let request = [(seed, targets.to_vec())];
        let meter = Meter::start(&self.device);
        let result = if self.host_build.is_some() {
            self.device.sample_many_sampled_ids(fanouts, &request, 1)
        } else {
            self.device.sample(seed, fanouts, targets).map(|b| vec![b])
        };
        meter.finish(&self.device, &mut self.stats);
        let mut out = self.finish(fanouts, &request, result?)?;
        out.pop()
            .ok_or_else(|| SamplerError::InvalidRequest("no subgraph came back".into()))
    }

    fn sample_many(
        &mut self,
        fanouts: &[u16],
        requests: &[(u64, Vec<u64>)],
    ) -> Result<Vec<SampledSubgraph>, SamplerError> {
        if self.hyperbatch == 1 {
            return requests
                .iter()
                .map(|(seed, targets)| self.sample(*seed, fanouts, targets))
                .collect();
        }
        let returns = if self.host_build.is_some() {
            Returns::SampledIds
        } else {
            Returns::Subgraph
        };
        let mut out = Vec::with_capacity(requests.len());
        for group in requests.chunks(self.hyperbatch) {
            let meter = Meter::start(&self.device);
            let result = self.device.sample_hyperbatch(fanouts, group, returns);
            meter.finish(&self.device, &mut self.stats);
            out.extend(self.finish(fanouts, group, result?)?);
        }
        Ok(out)
    }

    fn stats(&self) -> SamplerStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    use sagessd_abi::graph::GraphDescriptor;

    use crate::host_io::{HostIoMode, HostIoSampler};
    use crate::rmat::{RmatParams, generate};

    /// A brute-force, obviously-correct rendering of the module's semantics, independent of
    /// [`build_subgraph`]: returns (node list, per layer (dst, src, edges as (dst idx, src idx))).
    #[allow(clippy::type_complexity)]
    fn brute_force(
        g: &CsrGraph,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> (Vec<u64>, Vec<(usize, usize, Vec<(usize, usize)>)>) {
        let mut nodes: Vec<u64> = Vec::new();
        for t in targets {
            if !nodes.contains(t) {
                nodes.push(*t);
            }
        }
        let mut layers = Vec::new();
        for (l, &f) in fanouts.iter().enumerate() {
            let dst = nodes.len();
            let mut edges = Vec::new();
            for d in 0..dst {
                let v = nodes[d];
                let nbrs = g.neighbours(v);
                let mut pos = vec![0u64; nbrs.len().max(1)];
                let k = sample_positions(seed, l as u8, v, nbrs.len() as u64, f, &mut pos).unwrap();
                // Positions are a subset of the list, distinct, ascending, min(degree, f) many.
                assert_eq!(k, nbrs.len().min(f as usize));
                assert!(pos[..k].windows(2).all(|w| w[0] < w[1]));
                for p in &pos[..k] {
                    let n = u64::from(nbrs[*p as usize]);
                    let s = match nodes.iter().position(|x| *x == n) {
                        Some(s) => s,
                        None => {
                            nodes.push(n);
                            nodes.len() - 1
                        }
                    };
                    edges.push((d, s));
                }
            }
            layers.push((dst, nodes.len(), edges));
        }
        (nodes, layers)
    }

    fn check_against_brute_force(g: &CsrGraph, seed: u64, fanouts: &[u16], targets: &[u64]) {
        let s = ReferenceSampler::new(g)
            .sample(seed, fanouts, targets)
            .unwrap();
        let (nodes, layers) = brute_force(g, seed, fanouts, targets);
        let v = s.view();
        assert_eq!(v.seed(), seed);
        assert_eq!(v.nodes().iter().map(|n| n.get()).collect::<Vec<_>>(), nodes);
        assert_eq!(v.layer_count(), layers.len());
        for (l, (dst, src, edges)) in layers.iter().enumerate() {
            let lv = v.layer(l);
            assert_eq!(lv.counts.dst_count as usize, *dst);
            assert_eq!(lv.counts.src_count as usize, *src);
            let mut got = Vec::new();
            for d in 0..*dst {
                for e in lv.indptr[d].get()..lv.indptr[d + 1].get() {
                    got.push((d, lv.indices[e as usize].get() as usize));
                }
            }
            assert_eq!(&got, edges);
            // Every sampled edge is a real edge of the graph.
            for (d, s) in &got {
                let (dn, sn) = (nodes[*d], nodes[*s]);
                assert!(g.neighbours(dn).contains(&(sn as u32)));
            }
        }
    }

    fn tiny_graphs() -> Vec<CsrGraph> {
        vec![
            // A path 0-1-2-3 plus an isolated node 4.
            CsrGraph::from_edges(5, &[(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)]).unwrap(),
            // A star: node 0 with 30 leaves (degree ≫ fanout).
            CsrGraph::from_edges(
                31,
                &(1..31u32)
                    .flat_map(|i| [(0, i), (i, 0)])
                    .collect::<Vec<_>>(),
            )
            .unwrap(),
            // A directed graph with duplicate neighbours and a self loop.
            CsrGraph::from_edges(3, &[(0, 1), (0, 1), (0, 0), (1, 2), (2, 0)]).unwrap(),
            generate(&RmatParams::graph500(7, 4, 3)).unwrap(),
        ]
    }

    #[test]
    fn reference_matches_brute_force_on_tiny_graphs() {
        for (gi, g) in tiny_graphs().iter().enumerate() {
            let n = g.node_count();
            for seed in 0..6u64 {
                for fanouts in [&[1u16][..], &[2, 2], &[3, 1, 2], &[5, 5, 5, 5], &[25]] {
                    let targets: Vec<u64> =
                        (0..(seed % 4 + 1)).map(|i| (i * 7 + seed) % n).collect();
                    check_against_brute_force(g, seed, fanouts, &targets);
                    // Repeated targets collapse to their first occurrence.
                    let mut repeated = targets.clone();
                    repeated.extend(targets.iter().rev());
                    check_against_brute_force(g, seed, fanouts, &repeated);
                }
            }
            // Degree-0 target only.
            if gi == 0 {
                check_against_brute_force(g, 1, &[3, 3], &[4]);
            }
        }
    }

    #[test]
    fn hand_worked_example() {
        // Path 0-1-2-3: target 1, fanout 10 takes every neighbour: 1 → {0, 2}.
        let g = &tiny_graphs()[0];
        let s = ReferenceSampler::new(g).sample(9, &[10, 10], &[1]).unwrap();
        let v = s.view();
        let nodes: Vec<u64> = v.nodes().iter().map(|n| n.get()).collect();
        // Layer 0: dst [1], src [1, 0, 2]; layer 1: dst [1, 0, 2] → 1:{0,2} 0:{1} 2:{1,3}.
        assert_eq!(nodes, vec![1, 0, 2, 3]);
        let l0 = v.layer(0);
        assert_eq!(
            (
                l0.counts.dst_count,
                l0.counts.src_count,
                l0.counts.edge_count
            ),
            (1, 3, 2)
        );
        let l1 = v.layer(1);
        assert_eq!(
            (
                l1.counts.dst_count,
                l1.counts.src_count,
                l1.counts.edge_count
            ),
            (3, 4, 5)
        );
        let idx: Vec<u32> = l1.indices.iter().map(|i| i.get()).collect();
        assert_eq!(idx, vec![1, 2, 0, 0, 3]);
    }

    #[test]
    fn invalid_requests_are_refused() {
        let g = &tiny_graphs()[0];
        let mut s = ReferenceSampler::new(g);
        for (fanouts, targets) in [
            (&[][..], &[0u64][..]),
            (&[1, 1, 1, 1, 1][..], &[0][..]),
            (&[0][..], &[0][..]),
            (&[MAX_FANOUT + 1][..], &[0][..]),
            (&[2][..], &[][..]),
            (&[2][..], &[5][..]),
        ] {
            assert!(
                matches!(
                    s.sample(1, fanouts, targets),
                    Err(SamplerError::InvalidRequest(_))
                ),
                "{fanouts:?} {targets:?}"
            );
        }
        assert_eq!(s.stats().minibatches, 0);
    }

    #[test]
    fn a_sampler_reusing_its_node_table_samples_what_a_hash_map_does() {
        let g = generate(&RmatParams::graph500(9, 8, 11)).unwrap();
        let n = g.node_count();
        let mut reused = ReferenceSampler::new(&g);
        for seed in 0..20u64 {
            let targets: Vec<u64> = (0..(seed % 7 + 1) * 9)
                .map(|i| (i * 13 + seed) % n)
                .collect();
            // A fresh builder interns into a hash map.
            let fresh = build_subgraph(&mut CsrSource::new(&g), seed, &[10, 5, 3], &targets);
            let got = reused.sample(seed, &[10, 5, 3], &targets).unwrap();
            assert_eq!(got, fresh.unwrap(), "minibatch {seed}");
        }
        assert!(matches!(
            reused.index,
            Some(NodeIndex::Table { epoch: 20, .. })
        ));
        // 2^32 minibatches on, the epoch wraps: slots written in epoch 1 must not look current.
        let (seed, fanouts, targets) = (4, [5u16, 5], [1u64, 2, 3]);
        let want = build_subgraph(&mut CsrSource::new(&g), seed, &fanouts, &targets).unwrap();
        let stale = NodeIndex::Table {
            epoch: u32::MAX,
            slots: vec![1 << 32 | 7; n as usize],
        };
        let mut b = SubgraphBuilder::with_index(n, seed, &fanouts, &targets, stale).unwrap();
        let mut source = CsrSource::new(&g);
        while let Some(dst) = b.destinations() {
            let ranges = source.edge_ranges(dst).unwrap();
            let positions = b.set_ranges(&ranges).unwrap();
            let neighbours = source.neighbours_at(&positions).unwrap();
            b.set_neighbours(&neighbours).unwrap();
        }
        assert_eq!(b.finish().unwrap(), want);
    }

    #[test]
    fn sampled_nodes_are_unique_and_deterministic() {
        let g = generate(&RmatParams::graph500(9, 8, 11)).unwrap();
        let targets: Vec<u64> = (0..64).map(|i| i * 7 % g.node_count()).collect();
        let a = ReferenceSampler::new(&g)
            .sample(5, &[10, 5, 3], &targets)
            .unwrap();
        let b = ReferenceSampler::new(&g)
            .sample(5, &[10, 5, 3], &targets)
            .unwrap();
        assert_eq!(a, b);
        let c = ReferenceSampler::new(&g)
            .sample(6, &[10, 5, 3], &targets)
            .unwrap();
        assert_ne!(a, c);
        let nodes: Vec<u64> = a.view().nodes().iter().map(|n| n.get()).collect();
        assert_eq!(nodes.iter().collect::<BTreeSet<_>>().len(), nodes.len());
    }

    #[test]
    fn from_bytes_rejects_garbage_and_trailing_bytes() {
        let g = &tiny_graphs()[0];
        let s = ReferenceSampler::new(g).sample(1, &[2], &[1]).unwrap();
        let mut bytes = s.clone().into_bytes();
        bytes.push(0);
        assert!(SampledSubgraph::from_bytes(bytes).is_err());
        assert!(SampledSubgraph::from_bytes(vec![0; 64]).is_err());
        assert_eq!(
            SampledSubgraph::from_bytes(s.as_bytes().to_vec()).unwrap(),
            s
        );
    }
    fn loaded_device(
        g: &CsrGraph,
    ) -> (Device<sagessd_host_driver::LocalTransport>, GraphDescriptor) {
        let transport = sagessd_host_driver::LocalTransport::from_config(
            &sagessd_emulator::HwConfig::cosmos_plus(),
        )
        .unwrap();
        let mut dev = Device::open(transport).unwrap();
        let desc = crate::load::load_graph(&mut dev, g, 7).unwrap();
        (dev, desc)
    }

    #[test]
    fn host_over_device_and_isp_equal_the_reference() {
        // A power-law graph, plus a star whose hub's list spans many blocks and flash pages.
        let star = CsrGraph::from_edges(
            20_001,
            &(1..20_001u32)
                .flat_map(|i| [(0, i), (i, 0)])
                .collect::<Vec<_>>(),
        )
        .unwrap();
        for g in [generate(&RmatParams::graph500(9, 8, 5)).unwrap(), star] {
            let (dev, desc) = loaded_device(&g);
            let mut host =
                HostIoSampler::new(dev, desc, HostIoMode::Direct, Default::default()).unwrap();
            let (dev, _) = loaded_device(&g);
            let mut isp = IspSampler::new(dev);
            let mut reference = ReferenceSampler::new(&g);
            let n = g.node_count();
            for (seed, fanouts) in [
                (1u64, &[10u16, 10, 10][..]),
                (2, &[25, 10][..]),
                (3, &[3, 2, 2, 2][..]),
                (4, &[64][..]),
            ] {
                let mut targets: Vec<u64> = (0..50).map(|i| (i * 37 + seed * 11) % n).collect();
                targets.push(targets[3]);
                targets.push(0);
                let r = reference.sample(seed, fanouts, &targets).unwrap();
                let h = host.sample(seed, fanouts, &targets).unwrap();
                let i = isp.sample(seed, fanouts, &targets).unwrap();
                assert!(
                    h == r,
                    "host-over-device differs: seed {seed} fanouts {fanouts:?}"
                );
                assert!(i == r, "ISP differs: seed {seed} fanouts {fanouts:?}");
            }
            let (hs, is) = (host.stats(), isp.stats());
            assert_eq!(hs.minibatches, 4);
            assert_eq!(is.driver.commands, 2 * 4);
            assert_eq!((is.driver.ns_submits, is.driver.ns_collects), (4, 4));
            assert_eq!(hs.driver.commands, hs.driver.reads);
            assert!(hs.modelled_time_ns.unwrap() > 0 && is.modelled_time_ns.unwrap() > 0);
            assert!(hs.device.is_some() && is.device.is_some());
            assert_eq!(hs.edges, reference.stats().edges);
        }
    }

    #[test]
    fn device_errors_surface_from_the_isp_sampler() {
        let g = &tiny_graphs()[0];
        let (dev, _) = loaded_device(g);
        let mut isp = IspSampler::new(dev);
        let e = isp.sample(1, &[2], &[99]).unwrap_err();
        assert!(
            matches!(&e, SamplerError::Driver(d) if d.vendor_status()
                == Some(sagessd_abi::nvme::VendorStatus::NodeOutOfRange)),
            "{e}"
        );
        assert!(isp.sample(1, &[2], &[1]).is_ok());
        assert_eq!(isp.stats().minibatches, 1);
    }
}
