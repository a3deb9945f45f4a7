//! The graphs the workloads sample, defined by formula (no allocation) and stored as CSR
//! (`indptr` u64, `indices` u32) through NVMe Writes.

use sagessd_abi::graph::GraphDescriptor;

use crate::{CalibrateError, Device, Marks};

/// A graph given by its degrees and neighbours.
pub trait Graph {
    /// Nodes.
    fn node_count(&self) -> u64;
    /// Out-degree of `v`.
    fn degree(&self, v: u64) -> u32;
    /// The `j`-th neighbour of `v` (`j < degree(v)`).
    fn neighbour(&self, v: u64, j: u32) -> u32;

    /// Edges (the sum of the degrees).
    fn edge_count(&self) -> u64 {
        (0..self.node_count())
            .map(|v| u64::from(self.degree(v)))
            .sum()
    }
}

/// SplitMix64's finaliser: the graphs' hash.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The unit workloads' graph, in four ranges:
///
/// * [`UnitGraph::ISOLATED`]: [`UnitGraph::ISOLATED_NODES`] nodes of degree 0 (targets whose
///   sampling does nothing but be deduplicated, gathered and cleared; their `indptr` fills
///   512 pages of 16 KiB, so targets 2,048 apart each need a page of their own);
/// * [`UnitGraph::SPREAD`]: [`UnitGraph::RANGE`] nodes of degree [`UnitGraph::DEGREE`],
///   neighbours hashed over the whole graph (deduplication misses: new nodes);
/// * [`UnitGraph::LOCAL`]: [`UnitGraph::RANGE`] nodes of degree [`UnitGraph::DEGREE`],
///   neighbours among the first 64 nodes (deduplication hits a few hot entries);
/// * [`UnitGraph::REPEAT`]: [`UnitGraph::RANGE`] nodes of degree [`UnitGraph::DEGREE`],
///   neighbours among the first [`UnitGraph::REPEAT_SET`] nodes, more than the caches hold
///   entries of (deduplication finds each node again, in an entry the caches lost: a large
///   graph's repeated neighbours).
#[derive(Clone, Copy, Debug)]
pub struct UnitGraph;

impl UnitGraph {
    /// Nodes of degree 0.
    pub const ISOLATED_NODES: u64 = 1 << 20;
    /// Nodes of each of the two ranges with neighbours.
    pub const RANGE: u64 = 8192;
    /// First node of the degree-0 range.
    pub const ISOLATED: u64 = 0;
    /// First node of the spread range.
    pub const SPREAD: u64 = Self::ISOLATED_NODES;
    /// First node of the local range.
    pub const LOCAL: u64 = Self::SPREAD + Self::RANGE;
    /// First node of the repeat range.
    pub const REPEAT: u64 = Self::LOCAL + Self::RANGE;
    /// Nodes the repeat range's neighbours are drawn among.
    pub const REPEAT_SET: u64 = 1 << 15;
    /// Degree of the spread and local nodes.
    pub const DEGREE: u32 = 32;
}

impl Graph for UnitGraph {
    fn node_count(&self) -> u64 {
        Self::REPEAT + Self::RANGE
    }

    fn degree(&self, v: u64) -> u32 {
        if v < Self::SPREAD { 0 } else { Self::DEGREE }
    }

    fn neighbour(&self, v: u64, j: u32) -> u32 {
        let h = mix(v << 8 | u64::from(j));
        if v < Self::LOCAL {
            (h % self.node_count()) as u32
        } else if v < Self::REPEAT {
            (h % 64) as u32
        } else {
            (h % Self::REPEAT_SET) as u32
        }
    }

    fn edge_count(&self) -> u64 {
        3 * Self::RANGE * u64::from(Self::DEGREE)
    }
}

/// The check workload's graph: 65,536 nodes with skewed degrees (1 to 48, every 64th node a
/// hub of 200 more) and neighbours skewed towards low ids (a node's neighbour is drawn with
/// density falling as the square root of its id), so that sampling it mixes deduplication
/// hits and misses, short and long lists, as a real graph's minibatch does.
#[derive(Clone, Copy, Debug)]
pub struct SkewedGraph;

impl Graph for SkewedGraph {
    fn node_count(&self) -> u64 {
        1 << 16
    }

    fn degree(&self, v: u64) -> u32 {
        let base = 1 + (mix(v) % 48) as u32;
        if v.is_multiple_of(64) {
            base + 200
        } else {
            base
        }
    }

    fn neighbour(&self, v: u64, j: u32) -> u32 {
        let u = mix(v << 12 | u64::from(j)) >> 32; // uniform in [0, 2^32)
        let skewed = (u * u) >> 32; // density ∝ 1/sqrt
        ((skewed * self.node_count()) >> 32) as u32
    }
}

/// A graph with no structure: 262,144 nodes of degree 4 to 27 (15.5 on average), each
/// neighbour drawn uniformly over the graph, so that a minibatch's nodes are nearly all new
/// and its lists spread over every page: the other end from [`SkewedGraph`], for realistic
/// minibatches the fit learns from.
#[derive(Clone, Copy, Debug)]
pub struct UniformGraph;

impl Graph for UniformGraph {
    fn node_count(&self) -> u64 {
        1 << 18
    }

    fn degree(&self, v: u64) -> u32 {
        4 + (mix(v ^ 0x5EED) % 24) as u32
    }

    fn neighbour(&self, v: u64, j: u32) -> u32 {
        (mix(v << 8 | u64::from(j) | 1 << 63) % self.node_count()) as u32
    }
}

/// Stores `graph` at `slba` (indptr, then indices from the next multiple of `align_blocks`, so
/// that lists sit on flash pages as the workloads expect) with Writes of at most `chunk_bytes`
/// through the host buffer; returns its descriptor (not attached).
pub fn store<K: Marks>(
    device: &mut Device<'_, K>,
    graph: &impl Graph,
    slba: u64,
    align_blocks: u64,
    chunk_bytes: usize,
) -> Result<GraphDescriptor, CalibrateError> {
    let bs = device.block_size_bytes();
    let nodes = graph.node_count();
    let mut descriptor = GraphDescriptor::csr_layout(nodes, graph.edge_count(), slba, bs)
        .ok_or(CalibrateError::HostBuffer)?;
    descriptor.indices.slba = descriptor.indices.slba.div_ceil(align_blocks) * align_blocks;
    // indptr: nodes + 1 little-endian u64 prefix sums.
    let mut writer = Writer::new(device, slba, chunk_bytes);
    let mut sum = 0u64;
    writer.put(device, &sum.to_le_bytes())?;
    for v in 0..nodes {
        sum += u64::from(graph.degree(v));
        writer.put(device, &sum.to_le_bytes())?;
    }
    writer.finish(device)?;
    let mut writer = Writer::new(device, descriptor.indices.slba, chunk_bytes);
    for v in 0..nodes {
        for j in 0..graph.degree(v) {
            writer.put(device, &graph.neighbour(v, j).to_le_bytes())?;
        }
    }
    writer.finish(device)?;
    Ok(descriptor)
}

/// Streams bytes into Writes of whole chunks at consecutive LBAs.
struct Writer {
    lba: u64,
    filled: usize,
    chunk: usize,
    block: usize,
}

impl Writer {
    fn new<K: Marks>(device: &mut Device<'_, K>, lba: u64, chunk: usize) -> Self {
        let block = device.block_size_bytes() as usize;
        Self {
            lba,
            filled: 0,
            chunk: chunk.min(device.buffer().len()) / block * block,
            block,
        }
    }

    fn put<K: Marks>(
        &mut self,
        device: &mut Device<'_, K>,
        bytes: &[u8],
    ) -> Result<(), CalibrateError> {
        if self.filled + bytes.len() > self.chunk {
            self.flush(device)?;
        }
        device.buffer()[self.filled..self.filled + bytes.len()].copy_from_slice(bytes);
        self.filled += bytes.len();
        Ok(())
    }

    fn flush<K: Marks>(&mut self, device: &mut Device<'_, K>) -> Result<(), CalibrateError> {
        let len = self.filled.div_ceil(self.block) * self.block;
        device.buffer()[self.filled..len].fill(0);
        device.write(self.lba, len)?;
        self.lba += (len / self.block) as u64;
        self.filled = 0;
        Ok(())
    }

    fn finish<K: Marks>(mut self, device: &mut Device<'_, K>) -> Result<(), CalibrateError> {
        if self.filled > 0 {
            self.flush(device)?;
        }
        Ok(())
    }
}
