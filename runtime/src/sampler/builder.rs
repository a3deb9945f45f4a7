//! The one message-flow-graph builder every host sampler uses: targets and sources deduplicated
//! in first-seen order, positions drawn before any neighbour is read, the subgraph laid out as
//! [`sagessd_abi::subgraph`] says.

use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;
use sagessd_abi::sample::{MAX_FANOUT, sample_positions};
use sagessd_abi::subgraph::{LayerCounts, SubgraphError, SubgraphLayout};

use super::{EdgeRange, NeighbourSource, SampledSubgraph, SamplerError, validate_request};

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
pub(super) fn prefetch<T>(value: &T) {
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
pub(super) fn prefetch_ahead<T>(keys: &[u64], i: usize, array: &[T]) {
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
