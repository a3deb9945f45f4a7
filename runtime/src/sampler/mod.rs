//! Neighbour samplers: one trait, one output type.
//!
//! Every sampler turns `(seed, fanouts, targets)` into a [`SampledSubgraph`] — the exact bytes of
//! the message-flow-graph format of [`sagessd_abi::subgraph`]. For the same request all samplers
//! must produce the same bytes; that byte identity is the project's test oracle.
//!
//! * [`ReferenceSampler`]: over an in-memory [`CsrGraph`](crate::graph::CsrGraph) or a
//!   synthetic graph ([`HostGraph`](crate::graph::HostGraph): the DRAM-only upper bound, and the oracle).
//! * [`IspSampler`]: the device samples; one `NS_SUBMIT` plus one `NS_COLLECT` per minibatch,
//!   through the host driver's [`Device::sample`](sagessd_host_driver::Device::sample).
//! * The host-over-device samplers (mmap, direct I/O, io_uring-style, and ISP through
//!   passthrough ioctls, over a modelled host I/O stack) are
//!   [`HostIoSampler`](crate::host_io::HostIoSampler).
//!
//! The reference and the host samplers share one message-flow-graph builder, [`SubgraphBuilder`]
//! ([`build_subgraph`] drives it over a [`NeighbourSource`]): it deduplicates targets and sources
//! in first-seen order, computes each destination's sampled *positions* with
//! [`sample_positions`](sagessd_abi::sample::sample_positions) before asking for any neighbour
//! id, and serialises with [`SubgraphLayout`] — the same steps the firmware takes. Modules:
//! `builder` (the builder and its node index), `source` (where a graph's adjacency is read),
//! `reference`, `isp`, and [`host_build`] (a subgraph built from a device's sampled ids).

mod builder;
pub mod host_build;
mod isp;
mod reference;
mod source;
#[cfg(test)]
mod tests;

use crate::minibatch::Request;
use sagessd_abi::ns_config::MAX_LAYERS;
use sagessd_abi::sample::MAX_FANOUT;
use sagessd_abi::subgraph::{LayerCounts, SubgraphError, SubgraphLayout, SubgraphView};
use sagessd_host_driver::{DeviceCounters, DriverError, DriverStats};

pub use self::builder::{NodeIndex, SubgraphBuilder, build_subgraph};
pub use self::isp::IspSampler;
pub use self::reference::ReferenceSampler;
pub use self::source::{CsrSource, EdgeRange, HostSource, NeighbourSource, SyntheticSource};

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
        requests: &[Request],
    ) -> Result<Vec<SampledSubgraph>, SamplerError> {
        requests
            .iter()
            .map(|Request { seed, targets }| self.sample(*seed, fanouts, targets))
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
        requests: &[Request],
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
