//! AGNES's block-size and hyperbatch sweeps (Figs. 8 and 9) at the seeds' scale: the AGNES
//! sampler reading its block layout from the emulated device, with its graph buffer holding
//! 1/ratio of the layout, for block sizes from 64 KiB to 4 MiB and hyperbatches from 1
//! minibatch (AGNES without hyperbatches) up; AGNES against the small reads of direct I/O and
//! io_uring over the same minibatches (the storage-based trainers AGNES improves on read a few
//! nodes at a time); AGNES against in-storage sampling of the same epoch, a minibatch per
//! NS_config and in-storage hyperbatches (each flash page read once per hop for all of a
//! hyperbatch's minibatches, inside the SSD); and AGNES's feature cache against its
//! access-count threshold.
//!
//! The graph is a synthetic one of ogbn-papers100M's size by default (`papers100m`: 111 M
//! nodes, 1.6 G edges); its AGNES layout (7.0–7.5 GiB, by block size) is computed by the flash
//! ([`SyntheticLayout`]), so each point boots a fresh device holding it, cold, with nothing
//! written. The controller is the hardware description's own; only the host's graph buffer
//! varies with the ratio.
//!
//! **A point samples part of its epoch.** At this size one minibatch of 1,000 targets with
//! fanouts 10,10,10 reads some 5,900 of the layout's 7,166 1 MiB blocks, so an epoch of per-minibatch
//! AGNES is most of an hour of simulation per point. A point samples whole hyperbatches, in epoch order, until it
//! has sampled [`Sweep::min_sampled_minibatches`] minibatches and at least two hyperbatches,
//! the last of them begun with the graph buffer in its steady state (evicting, or holding
//! every block the hyperbatch before needed), or the whole epoch; it prices each hyperbatch it
//! did not sample at the cost of the last one it did: the minibatches' targets are drawn alike,
//! so in the steady state one hyperbatch costs what the next does. Every CSV row says how many
//! of the epoch's minibatches were sampled. The feature cache's figures are counts, on a
//! smaller R-MAT with features.
//!
//! Every epoch time is modelled: the device's virtual time plus the host's modelled work (each
//! command a synchronous I/O, the sampling compute at the `[host]` costs), so two runs write
//! byte-identical CSVs.

use std::sync::Arc;

use anyhow::Context;

use sagessd_emulator::synthetic_graph::SyntheticGraph;
use sagessd_emulator::synthetic_image::Region;
use sagessd_emulator::{HwConfig, Ssd};
use sagessd_host_driver::{Device, LocalTransport};
use sagessd_runtime::graph_spec::{GraphSpec, WorkloadGraph};
use sagessd_runtime::host_io::HostIoSampler;
use sagessd_runtime::minibatch::Request;
use sagessd_runtime::minibatch::minibatch_requests;
use sagessd_runtime::ooc::agnes::synthetic::SyntheticLayout;
use sagessd_runtime::ooc::{AgnesLayout, AgnesSampler, SharedDevice};
use sagessd_runtime::registry::SamplerKind;
use sagessd_runtime::sampler::{ReferenceSampler, SampledSubgraph, Sampler};

use super::paper;
use super::plot::{Figure, Series};
use crate::record::Record;

/// The sweep.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sweep {
    /// The graph (a synthetic one: its layout is computed by the flash).
    pub graph: GraphSpec,
    /// Minibatches of the epoch every point prices (a multiple of every hyperbatch).
    pub epoch_minibatches: u32,
    /// Minibatches a point samples at least (see the module documentation).
    pub min_sampled_minibatches: u32,
    /// Targets per minibatch.
    pub batch_size: u32,
    /// Fanouts, hop order.
    pub fanouts: Vec<u16>,
    /// Layout bytes over graph-buffer bytes.
    pub ratio: u32,
    /// Block sizes of the block sweep, bytes (at hyperbatch `block_sweep_hyperbatch`).
    pub block_bytes: Vec<u64>,
    /// The hyperbatch of the block sweep.
    pub block_sweep_hyperbatch: usize,
    /// Hyperbatch sizes of the hyperbatch sweep (at 1 MiB blocks), minibatches.
    pub hyperbatches: Vec<usize>,
    /// Minibatches per NS_config of the in-storage sweep (1: one per minibatch; more: in-storage
    /// hyperbatches), on the CSR graph.
    pub isp_hyperbatches: Vec<usize>,
    /// Graph-to-memory ratios of the ratio sweep: AGNES without hyperbatches and with the
    /// largest, at 1 MiB blocks, with the graph buffer at 1/ratio of the layout.
    pub memory_ratios: Vec<u32>,
    /// Feature-cache thresholds (accesses after which a row is kept).
    pub thresholds: Vec<u32>,
    /// The feature cache of the threshold sweep, percent of the feature table.
    pub feature_cache_percent: u32,
    /// The threshold sweep's minibatches: the first of an epoch over the training nodes, in
    /// random order, of `batch_size` targets and `fanouts`, gathered a hyperbatch at a time.
    pub threshold_minibatches: usize,
    /// The threshold sweep's hyperbatch, minibatches.
    pub threshold_hyperbatch: usize,
    /// The threshold sweep's training nodes, a share of the graph's (each drawn by a keyed
    /// hash).
    pub train_share: f64,
    /// Feature width (f32) of the threshold sweep's computed feature table.
    pub feature_dim: u32,
}

impl Sweep {
    /// The full sweep: papers100M's size, AGNES's minibatches (1,000 targets, fanouts
    /// 10,10,10, 1 MiB blocks), hyperbatches up to 128 (the paper's 1,024 minibatches of a
    /// hyperbatch would hold 1.1 G sampled positions, some 27 GB, at once).
    pub(crate) fn full() -> Self {
        Self {
            graph: GraphSpec::parse("papers100m").expect("a valid graph word"),
            epoch_minibatches: 128,
            min_sampled_minibatches: 3,
            batch_size: 1000,
            fanouts: vec![10, 10, 10],
            ratio: 8,
            block_bytes: vec![64 << 10, 256 << 10, 1 << 20, 4 << 20],
            block_sweep_hyperbatch: 32,
            hyperbatches: vec![1, 8, 32, 128],
            isp_hyperbatches: vec![1, 2, 8],
            memory_ratios: vec![1, 2, 8, 32],
            thresholds: vec![1, 2, 4, 8, 16],
            feature_cache_percent: 10,
            threshold_minibatches: 128,
            threshold_hyperbatch: 8,
            train_share: super::bgl::PAPERS100M_TRAIN_SHARE,
            feature_dim: 128,
        }
    }

    /// The reduced sweep of the test suite: a synthetic graph of 400,000 nodes (about 28 MiB
    /// of layout).
    pub(crate) fn quick() -> Self {
        Self {
            graph: GraphSpec::parse("synthetic:400000").expect("a valid graph word"),
            epoch_minibatches: 8,
            min_sampled_minibatches: 2,
            batch_size: 64,
            fanouts: vec![5, 5],
            ratio: 8,
            block_bytes: vec![64 << 10, 1 << 20],
            block_sweep_hyperbatch: 4,
            hyperbatches: vec![1, 8],
            isp_hyperbatches: vec![1, 4],
            memory_ratios: vec![1, 32],
            thresholds: vec![1, 4],
            feature_cache_percent: 10,
            threshold_minibatches: 32,
            threshold_hyperbatch: 4,
            train_share: 0.1,
            feature_dim: 16,
        }
    }

    /// An error unless the epoch is whole hyperbatches of every size swept (a short last
    /// hyperbatch would be priced as a whole one).
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        let epoch = self.epoch_minibatches as usize;
        for &h in self
            .hyperbatches
            .iter()
            .chain(&self.isp_hyperbatches)
            .chain([&self.block_sweep_hyperbatch])
        {
            anyhow::ensure!(
                h > 0 && epoch.is_multiple_of(h),
                "experiment agnes: an epoch of {epoch} minibatches is not whole hyperbatches of {h}"
            );
        }
        anyhow::ensure!(
            self.min_sampled_minibatches > 0 && !self.fanouts.is_empty(),
            "experiment agnes: a point must sample a minibatch of at least one hop"
        );
        Ok(())
    }

    /// The sweep's graph, tabulated.
    pub(crate) fn build_graph(&self) -> anyhow::Result<Arc<SyntheticGraph>> {
        match self.graph.build().map_err(|e| anyhow::anyhow!(e))? {
            WorkloadGraph::Synthetic(g) => Ok(g),
            WorkloadGraph::Csr(_) => anyhow::bail!(
                "experiment agnes: {} is not a synthetic graph (the flash computes the layout)",
                self.graph.word()
            ),
        }
    }
}

/// What (part of) an epoch cost: storage reads and the modelled time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cost {
    /// Storage reads.
    pub reads: u64,
    /// Bytes read from the device.
    pub bytes_read: u64,
    /// Bytes of those the samples used.
    pub bytes_used: u64,
    /// Graph-buffer lookups (each hop's distinct blocks, summed over hops); 0 for small reads.
    pub lookups: u64,
    /// The device's virtual time, ns.
    pub device_ns: u64,
    /// The host's modelled work, ns.
    pub host_ns: u64,
    /// In-storage hyperbatches sampled again as two halves (they did not fit the device's
    /// result buffers); 0 for the host's samplers.
    pub splits: u64,
}

impl Cost {
    /// Each field combined by `f`; `None` if one overflows.
    fn zip(self, o: Self, f: impl Fn(u64, u64) -> Option<u64>) -> Option<Self> {
        Some(Self {
            reads: f(self.reads, o.reads)?,
            bytes_read: f(self.bytes_read, o.bytes_read)?,
            bytes_used: f(self.bytes_used, o.bytes_used)?,
            lookups: f(self.lookups, o.lookups)?,
            device_ns: f(self.device_ns, o.device_ns)?,
            host_ns: f(self.host_ns, o.host_ns)?,
            splits: f(self.splits, o.splits)?,
        })
    }

    /// The two costs together.
    fn plus(self, o: Self) -> anyhow::Result<Self> {
        self.zip(o, u64::checked_add)
            .ok_or_else(|| anyhow::anyhow!("experiment agnes: an epoch's cost overflows 64 bits"))
    }

    /// `k` times this cost.
    fn times(self, k: u64) -> anyhow::Result<Self> {
        self.zip(self, |a, _| a.checked_mul(k))
            .ok_or_else(|| anyhow::anyhow!("experiment agnes: an epoch's cost overflows 64 bits"))
    }
}

/// An epoch priced from the groups (hyperbatches) sampled: their sum, and the last one's cost
/// for each group not sampled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Epoch {
    /// Minibatches sampled.
    pub sampled_minibatches: u64,
    /// The cost of those.
    pub sampled: Cost,
    /// The cost of the whole epoch.
    pub epoch: Cost,
}

/// Samples `groups` (each a hyperbatch of minibatches) in order with `sample`, which returns
/// what one cost and whether the sampler's state was steady after it (its buffer evicting, or
/// nothing left to read), until at least `min_minibatches` and two groups are sampled and the
/// last one began in the steady state (or all are), and prices the rest at the last one's cost.
fn extrapolated<G>(
    groups: &[G],
    len: impl Fn(&G) -> usize,
    min_minibatches: u64,
    mut sample: impl FnMut(&G) -> anyhow::Result<(Cost, bool)>,
) -> anyhow::Result<Epoch> {
    let mut e = Epoch::default();
    let mut last = Cost::default();
    let mut done = 0usize;
    // Whether the state was steady before the last sampled group, and after it.
    let (mut steady_before_last, mut steady) = (false, false);
    for g in groups {
        if done >= 2 && e.sampled_minibatches >= min_minibatches && steady_before_last {
            break;
        }
        steady_before_last = steady;
        (last, steady) = sample(g)?;
        e.sampled = e.sampled.plus(last)?;
        e.sampled_minibatches += len(g) as u64;
        done += 1;
    }
    e.epoch = e.sampled.plus(last.times((groups.len() - done) as u64)?)?;
    Ok(e)
}

/// One measured point.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Point {
    /// The device's name.
    pub device: String,
    /// Which sweep: "block", "hyperbatch", "ratio", "small reads" or "in storage".
    pub sweep: &'static str,
    /// Layout bytes over graph-buffer bytes.
    pub ratio: u32,
    /// The sampler: AGNES, direct I/O or io_uring's small reads, or ISP (in storage).
    pub sampler: &'static str,
    /// Block size, bytes.
    pub block_bytes: u64,
    /// Minibatches per hyperbatch.
    pub hyperbatch: usize,
    /// The graph buffer, bytes.
    pub buffer_bytes: u64,
    /// The layout on the device, bytes.
    pub layout_bytes: u64,
    /// Minibatches of the epoch.
    pub epoch_minibatches: u64,
    /// What the sampled part and the whole epoch cost.
    pub cost: Epoch,
}

impl Point {
    /// The modelled epoch: device and host work (the reads are synchronous).
    pub(crate) fn epoch_ns(&self) -> u64 {
        self.cost
            .epoch
            .device_ns
            .saturating_add(self.cost.epoch.host_ns)
    }

    /// Hyperbatches of the epoch.
    fn hyperbatches(&self) -> u64 {
        self.epoch_minibatches
            .div_ceil(self.hyperbatch.max(1) as u64)
    }

    /// Storage reads per hyperbatch (per minibatch without hyperbatches), over the epoch.
    pub(crate) fn reads_per_hyperbatch(&self) -> f64 {
        self.cost.epoch.reads as f64 / self.hyperbatches().max(1) as f64
    }

    /// The share of the layout's blocks one hop of a hyperbatch looked up, on average over
    /// the epoch and its `hops` hops.
    pub(crate) fn hop_coverage(&self, hops: usize) -> f64 {
        let blocks = (self.layout_bytes / self.block_bytes.max(1)).max(1) as f64;
        self.cost.epoch.lookups as f64
            / (self.hyperbatches().max(1) as f64 * hops.max(1) as f64 * blocks)
    }

    /// The bytes of the blocks a hyperbatch looked up (each hop's, summed), on average over
    /// those sampled, as a share of the graph buffer: a minibatch's footprint, for AGNES
    /// without hyperbatches. (Over the sampled hyperbatches, where [`Self::hop_coverage`]
    /// and [`Self::reads_per_hyperbatch`] are over the priced epoch.)
    pub(crate) fn looked_up_share(&self) -> f64 {
        let groups = self
            .cost
            .sampled_minibatches
            .div_ceil(self.hyperbatch.max(1) as u64);
        self.cost.sampled.lookups as f64 * self.block_bytes as f64
            / groups.max(1) as f64
            / self.buffer_bytes.max(1) as f64
    }
}

/// The epoch's first minibatch as the in-memory reference samples it: every point's first
/// subgraph must equal it (the byte-identity oracle, once per point).
pub(crate) fn reference(
    graph: &Arc<SyntheticGraph>,
    sweep: &Sweep,
) -> anyhow::Result<SampledSubgraph> {
    let Request { seed, targets } = minibatch_requests(1, 1, sweep.batch_size, graph.node_count())
        .pop()
        .ok_or_else(|| anyhow::anyhow!("experiment agnes: an epoch without minibatches"))?;
    Ok(ReferenceSampler::synthetic(graph).sample(seed, &sweep.fanouts, &targets)?)
}

/// An error unless `first`, a point's first subgraph, is the reference's.
fn check_first(
    first: Option<&SampledSubgraph>,
    reference: &SampledSubgraph,
    what: &str,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        first == Some(reference),
        "experiment agnes: {what} sampled another first minibatch than the in-memory reference"
    );
    Ok(())
}

/// One epoch of AGNES with `block_bytes` blocks and hyperbatches of `hyperbatch` on a fresh
/// device of `hw` that boots holding the layout of `graph`; its first minibatch checked
/// against `reference`.
fn point(
    hw: &HwConfig,
    graph: &Arc<SyntheticGraph>,
    sweep: &Sweep,
    reference: &SampledSubgraph,
    (kind, block_bytes, hyperbatch, ratio): (&'static str, u64, usize, u32),
) -> anyhow::Result<Point> {
    let computed = Arc::new(
        SyntheticLayout::new(graph.clone(), block_bytes).ok_or_else(|| {
            anyhow::anyhow!("experiment agnes: {block_bytes}-byte blocks are not a layout's")
        })?,
    );
    let layout = AgnesLayout::computed(computed.clone());
    let layout_bytes = computed
        .block_count()
        .checked_mul(block_bytes)
        .ok_or_else(|| anyhow::anyhow!("experiment agnes: a layout past 2^64 bytes"))?;
    let buffer_bytes = (layout_bytes / u64::from(ratio.max(1))).max(block_bytes);
    let region = Region {
        at_bytes: 0,
        len_bytes: layout_bytes,
        content: computed,
    };
    let (ssd, _) = Ssd::with_synthetic_regions(hw, vec![region])?;
    // Shared, so that the device's clock can be read between hyperbatches.
    let device = std::sync::Mutex::new(Device::open(LocalTransport::new(ssd))?);
    let now_ns = || -> anyhow::Result<u64> {
        device
            .lock()
            .map_err(|_| anyhow::anyhow!("experiment agnes: a reader of the device panicked"))?
            .now_ns()
            .ok_or_else(|| anyhow::anyhow!("experiment agnes: the device keeps no virtual clock"))
    };
    let mut reader = SharedDevice::new(&device)?;
    let requests = minibatch_requests(
        1,
        sweep.epoch_minibatches,
        sweep.batch_size,
        graph.node_count(),
    );
    let groups: Vec<&[Request]> = requests.chunks(hyperbatch.max(1)).collect();
    let sync_io_ns = hw.host.sync_io_ns();
    let graph_buffer_bytes = usize::try_from(buffer_bytes).map_err(|_| {
        anyhow::anyhow!(
            "experiment agnes: a graph buffer of {buffer_bytes} bytes does not fit this machine's \
             address space"
        )
    })?;
    let capacity_blocks = buffer_bytes / block_bytes;
    let mut first = true;
    let cost = {
        let mut s = AgnesSampler::on_device(&layout, graph_buffer_bytes, &mut reader, 0)?;
        extrapolated(
            &groups,
            |g| g.len(),
            u64::from(sweep.min_sampled_minibatches),
            |group| {
                let before = s.io_stats().clone();
                let t0 = now_ns()?;
                let mut host_ns = 0u64;
                let subs = s.sample_many(&sweep.fanouts, group)?;
                if std::mem::take(&mut first) {
                    check_first(subs.first(), reference, kind)?;
                }
                for sub in &subs {
                    host_ns = host_ns.saturating_add(sub.host_sampling_ns(&hw.host));
                }
                let io = s.io_stats();
                let reads = io.reads - before.reads;
                // Steady once the buffer evicts (it has missed more blocks than it holds),
                // or once a hyperbatch finds every block it needs there (a buffer as large as
                // the layout fills over several).
                let steady = io.buffer_misses > capacity_blocks || reads == 0;
                let cost = Cost {
                    reads,
                    bytes_read: io.bytes_read - before.bytes_read,
                    bytes_used: io.bytes_used - before.bytes_used,
                    lookups: io.buffer_hits + io.buffer_misses
                        - before.buffer_hits
                        - before.buffer_misses,
                    device_ns: now_ns()?.saturating_sub(t0),
                    // Each block read is one synchronous command.
                    host_ns: host_ns.saturating_add(reads.saturating_mul(sync_io_ns)),
                    splits: 0,
                };
                Ok((cost, steady))
            },
        )?
    };
    Ok(Point {
        device: hw.device.name.clone(),
        sweep: kind,
        ratio,
        sampler: "AGNES",
        block_bytes,
        hyperbatch,
        buffer_bytes,
        layout_bytes,
        epoch_minibatches: requests.len() as u64,
        cost,
    })
}

/// The CSR of `graph` on a fresh device of `hw` that boots holding it (its flash computes it;
/// attached, for a `mode` that samples in storage), a sampler of `mode` over it, the device's
/// block size and the CSR's bytes on it, and the epoch's requests.
fn on_csr(
    hw: &HwConfig,
    graph: &Arc<SyntheticGraph>,
    sweep: &Sweep,
    mode: SamplerKind,
) -> anyhow::Result<(HostIoSampler, u64, u64, Vec<Request>)> {
    let (ssd, desc, _) = Ssd::with_synthetic_graph(hw, graph.clone(), 0)?;
    let mut device = Device::open(LocalTransport::new(ssd))?;
    if mode.in_storage() {
        device.attach_graph(&desc)?;
    }
    let lba_bytes = u64::from(device.info().block_size_bytes);
    let csr_bytes = desc
        .indptr
        .block_count
        .checked_add(desc.indices.block_count)
        .and_then(|lbas| lbas.checked_mul(lba_bytes))
        .ok_or_else(|| anyhow::anyhow!("experiment agnes: a CSR past 2^64 bytes"))?;
    let sampler = HostIoSampler::new(device, desc, mode, hw.host.clone())?;
    let requests = minibatch_requests(
        1,
        sweep.epoch_minibatches,
        sweep.batch_size,
        graph.node_count(),
    );
    Ok((sampler, lba_bytes, csr_bytes, requests))
}

/// The epoch sampled by the host with `mode`'s small reads (direct I/O at queue depth 1, or
/// io_uring batches) of the CSR graph on a fresh device of `hw` that boots holding it: what
/// the storage-based trainers before AGNES do. Sampled a minibatch at a time, priced like
/// AGNES's points.
fn small_reads(
    hw: &HwConfig,
    graph: &Arc<SyntheticGraph>,
    sweep: &Sweep,
    reference: &SampledSubgraph,
    mode: SamplerKind,
) -> anyhow::Result<Point> {
    let (mut s, lba_bytes, layout_bytes, requests) = on_csr(hw, graph, sweep, mode)?;
    let mut first = true;
    let cost = extrapolated(
        &requests,
        |_| 1,
        u64::from(sweep.min_sampled_minibatches),
        |r| {
            let before = s.host_stats();
            let run = s.run_workers(1, &sweep.fanouts, std::slice::from_ref(r))?;
            if std::mem::take(&mut first) {
                check_first(run.subgraphs.first(), reference, "small reads")?;
            }
            let h = s.host_stats();
            let host_ns = h.host_cpu_ns - before.host_cpu_ns;
            let cost = Cost {
                reads: h.ios - before.ios,
                bytes_read: h.bytes_read - before.bytes_read,
                bytes_used: h.bytes_used - before.bytes_used,
                lookups: 0,
                device_ns: run.makespan_ns.saturating_sub(host_ns),
                host_ns,
                splits: 0,
            };
            // No host cache: what a minibatch reads does not depend on those before it (the
            // controller's page buffer is megabytes against gigabytes of graph).
            Ok((cost, true))
        },
    )?;
    Ok(Point {
        device: hw.device.name.clone(),
        sweep: "small reads",
        ratio: sweep.ratio,
        sampler: match mode {
            SamplerKind::Uring => "io_uring",
            _ => "direct I/O",
        },
        block_bytes: lba_bytes,
        hyperbatch: 1,
        buffer_bytes: 0,
        layout_bytes,
        epoch_minibatches: requests.len() as u64,
        cost,
    })
}

/// The epoch sampled in storage on a fresh device of `hw` that boots holding the CSR graph
/// (its flash computes it), one host worker: a minibatch per NS_config (`hyperbatch` 1) or
/// in-storage hyperbatches of `hyperbatch`. Its storage reads are the flash pages the device
/// read (bytes: whole pages), its bytes used the subgraphs returned. Priced like AGNES's points
/// (the controller's page buffer is megabytes against gigabytes of graph, so every hyperbatch
/// costs alike).
fn in_storage(
    hw: &HwConfig,
    graph: &Arc<SyntheticGraph>,
    sweep: &Sweep,
    reference: &SampledSubgraph,
    hyperbatch: usize,
) -> anyhow::Result<Point> {
    let mode = if hyperbatch > 1 {
        SamplerKind::IspHyperbatch
    } else {
        SamplerKind::Isp
    };
    let (mut s, _, layout_bytes, requests) = on_csr(hw, graph, sweep, mode)?;
    s.set_hyperbatch(hyperbatch);
    let groups: Vec<&[Request]> = requests.chunks(hyperbatch.max(1)).collect();
    let page_bytes = u64::from(hw.nand.page_size_bytes);
    let mut first = true;
    let cost = extrapolated(
        &groups,
        |g| g.len(),
        u64::from(sweep.min_sampled_minibatches),
        |group| {
            let before = s.host_stats();
            let pages0 = s.device().transport().ssd().stats().nand_pages_read;
            let run = s.run_workers(1, &sweep.fanouts, group)?;
            if std::mem::take(&mut first) {
                check_first(run.subgraphs.first(), reference, "in-storage sampling")?;
            }
            let h = s.host_stats();
            let pages = s.device().transport().ssd().stats().nand_pages_read - pages0;
            let host_ns = h.host_cpu_ns - before.host_cpu_ns;
            let cost = Cost {
                reads: pages,
                bytes_read: pages.saturating_mul(page_bytes),
                bytes_used: h.bytes_used - before.bytes_used,
                lookups: 0,
                device_ns: run.makespan_ns.saturating_sub(host_ns),
                host_ns,
                splits: h.hyperbatch_splits - before.hyperbatch_splits,
            };
            Ok((cost, true))
        },
    )?;
    Ok(Point {
        device: hw.device.name.clone(),
        sweep: "in storage",
        ratio: sweep.ratio,
        sampler: if hyperbatch > 1 {
            "ISP hyperbatch"
        } else {
            "ISP"
        },
        block_bytes: page_bytes,
        hyperbatch,
        buffer_bytes: u64::from(hw.firmware.page_buffer_pages) * page_bytes,
        layout_bytes,
        epoch_minibatches: requests.len() as u64,
        cost,
    })
}

/// The block, hyperbatch and ratio sweeps on `hw` (a point the sweeps share is sampled once),
/// then the small reads of direct I/O and io_uring over the same epoch, and (on a device that
/// samples in storage) the in-storage sweep, each point's first minibatch checked against
/// `reference`; `progress` hears each point as it starts.
pub(crate) fn run(
    hw: &HwConfig,
    graph: &Arc<SyntheticGraph>,
    sweep: &Sweep,
    reference: &SampledSubgraph,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<Point>> {
    sweep.check()?;
    let blocks = sweep
        .block_bytes
        .iter()
        .map(|&b| ("block", b, sweep.block_sweep_hyperbatch, sweep.ratio));
    let hyper = sweep
        .hyperbatches
        .iter()
        .map(|&h| ("hyperbatch", 1 << 20, h, sweep.ratio));
    let largest = sweep.hyperbatches.iter().copied().max().unwrap_or(1);
    let ratios = sweep
        .memory_ratios
        .iter()
        .flat_map(|&r| [("ratio", 1 << 20, 1, r), ("ratio", 1 << 20, largest, r)]);
    let mut points: Vec<Point> = Vec::new();
    for p in blocks.chain(hyper).chain(ratios) {
        let (kind, block_bytes, hyperbatch, ratio) = p;
        let same = points
            .iter()
            .find(|q| (q.block_bytes, q.hyperbatch, q.ratio) == (block_bytes, hyperbatch, ratio));
        let point = match same {
            Some(q) => Point {
                sweep: kind,
                ..q.clone()
            },
            None => {
                progress(&format!(
                    "{kind}: {} KiB blocks, hyperbatches of {hyperbatch}, r = {ratio}",
                    block_bytes >> 10
                ));
                point(hw, graph, sweep, reference, p)?
            }
        };
        points.push(point);
    }
    for mode in [SamplerKind::Direct, SamplerKind::Uring] {
        progress(&format!("small reads: {mode:?}"));
        points.push(small_reads(hw, graph, sweep, reference, mode)?);
    }
    if hw.firmware.isp {
        for &h in &sweep.isp_hyperbatches {
            progress(&format!("in storage: {h} minibatches per NS_config"));
            points.push(in_storage(hw, graph, sweep, reference, h)?);
        }
    }
    Ok(points)
}

/// One threshold of AGNES's feature cache: what gathering the epoch's first minibatches did.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ThresholdPoint {
    /// Accesses after which a row is kept.
    pub threshold: u32,
    /// The cache, bytes.
    pub cache_bytes: usize,
    /// Minibatches gathered.
    pub minibatches: usize,
    /// What the gatherer counted.
    pub stats: sagessd_runtime::ooc::features::GatherStats,
}

/// AGNES's feature cache at each threshold of the sweep, over `w`'s computed feature table: the
/// first [`Sweep::threshold_minibatches`] minibatches of an epoch over `w`'s training nodes (random
/// order), sampled in memory a hyperbatch at a time and gathered by one cache per threshold (the
/// caches side by side, each on its own thread); every threshold must return the same rows
/// (checked).
pub(crate) fn thresholds(
    w: &super::bgl::Workload,
    sweep: &Sweep,
) -> anyhow::Result<Vec<ThresholdPoint>> {
    use sagessd_runtime::minibatch::{Order, epoch_requests};
    use sagessd_runtime::registry::{CacheSettings, FeatureCache, FeatureGatherer};
    use sagessd_runtime::sampler::{FNV_OFFSET, fnv1a};
    let table = usize::try_from(w.table_bytes()).context("the feature table's size")?;
    let cache_bytes = table / 100 * sweep.feature_cache_percent as usize;
    let requests = epoch_requests(
        Order::Random,
        &w.train,
        sweep.batch_size as usize,
        1,
        0,
        0,
        None,
    )
    .map_err(anyhow::Error::msg)?;
    let mut sampler = ReferenceSampler::over(w.graph.host());
    // One cache per threshold, each with the checksum of the rows it returned.
    let mut caches = sweep
        .thresholds
        .iter()
        .map(|&threshold| {
            let settings = CacheSettings {
                cache_bytes,
                threshold,
                block_bytes: 64 << 10,
            };
            let g = FeatureGatherer::new(FeatureCache::Agnes, w.feature_file()?, settings)
                .context("a feature cache")?;
            anyhow::Ok((g, FNV_OFFSET))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let hyperbatch = sweep.threshold_hyperbatch.max(1);
    let counted = &requests[..sweep.threshold_minibatches.min(requests.len())];
    for chunk in counted.chunks(hyperbatch) {
        let subs = chunk
            .iter()
            .map(|Request { seed, targets }| sampler.sample(*seed, &sweep.fanouts, targets))
            .collect::<Result<Vec<_>, _>>()?;
        std::thread::scope(|scope| {
            let gathers: Vec<_> = caches
                .iter_mut()
                .map(|(g, sum)| {
                    let subs = &subs;
                    scope.spawn(move || {
                        for rows in g.gather(subs)? {
                            *sum = fnv1a(*sum, &rows);
                        }
                        anyhow::Ok(())
                    })
                })
                .collect();
            gathers
                .into_iter()
                .try_for_each(|h| h.join().expect("a gathering thread panicked"))
        })?;
    }
    let first = caches.first().map(|(_, sum)| *sum);
    let mut out = Vec::new();
    for (&threshold, (g, sum)) in sweep.thresholds.iter().zip(&caches) {
        anyhow::ensure!(
            Some(*sum) == first,
            "threshold {threshold} gathered other rows than threshold {}",
            sweep.thresholds[0]
        );
        out.push(ThresholdPoint {
            threshold,
            cache_bytes,
            minibatches: counted.len(),
            stats: g.stats().clone(),
        });
    }
    Ok(out)
}

/// The threshold sweep's CSV rows.
pub(crate) fn threshold_records(points: &[ThresholdPoint], sweep: &Sweep) -> Vec<Record> {
    points
        .iter()
        .map(|p| {
            Record::new("agnes.feature_threshold")
                .with("threshold_accesses", p.threshold)
                .with("cache_percent_of_features", sweep.feature_cache_percent)
                .with("cache_bytes", p.cache_bytes)
                .with("minibatches", p.minibatches)
                .with("hyperbatch_minibatches", sweep.threshold_hyperbatch)
                .with("rows_gathered", p.stats.rows)
                .with("cache_hit_ratio", p.stats.hit_ratio())
                .with("storage_reads", p.stats.io.reads)
                .with("bytes_read", p.stats.io.bytes_read)
                .with("bytes_used", p.stats.io.bytes_used)
                .with("timing", "counts")
        })
        .collect()
}

/// The threshold figure: the hit ratio and the bytes read against the threshold.
pub(crate) fn threshold_plot(points: &[ThresholdPoint], sweep: &Sweep) -> Figure {
    let read = |p: &ThresholdPoint| p.stats.io.bytes_read as f64 / 1e9;
    Figure {
        title: format!(
            "AGNES feature cache: {} % of the features, {} minibatches (counts)",
            sweep.feature_cache_percent,
            points.first().map_or(0, |p| p.minibatches)
        ),
        x_label: "log2 of the threshold (accesses before a row is kept)".into(),
        y_label: "hit ratio (fraction); bytes read (GB)".into(),
        series: vec![
            Series {
                label: "cache hit ratio".into(),
                points: points
                    .iter()
                    .map(|p| (f64::from(p.threshold).log2(), p.stats.hit_ratio()))
                    .collect(),
                paper: false,
            },
            Series {
                label: "bytes read (GB)".into(),
                points: points
                    .iter()
                    .map(|p| (f64::from(p.threshold).log2(), read(p)))
                    .collect(),
                paper: false,
            },
        ],
    }
}

/// The designs of the comparison with small reads and in-storage sampling: AGNES without
/// hyperbatches and with the largest hyperbatch of the sweep (both at its 1 MiB blocks), then
/// the small reads, then the in-storage points.
pub(crate) fn designs(points: &[Point]) -> Vec<&Point> {
    let hyper = || points.iter().filter(|p| p.sweep == "hyperbatch");
    let none = hyper().find(|p| p.hyperbatch == 1);
    let largest = hyper()
        .filter(|p| p.hyperbatch > 1)
        .max_by_key(|p| p.hyperbatch);
    none.into_iter()
        .chain(largest)
        .chain(
            points
                .iter()
                .filter(|p| matches!(p.sweep, "small reads" | "in storage")),
        )
        .collect()
}

/// AGNES against the small reads: a point per design, x its index (the legend names it).
pub(crate) fn samplers_plot(points: &[Point], ratio: u32) -> Figure {
    Figure {
        title: format!(
            "AGNES against small reads on {}: graph buffer 1/{ratio} of the layout (modelled)",
            points.first().map_or("", |p| p.device.as_str())
        ),
        x_label: "design (see the legend)".into(),
        y_label: "modelled epoch time (s)".into(),
        series: designs(points)
            .iter()
            .enumerate()
            .map(|(i, p)| Series {
                label: sampler_label(p),
                points: vec![(i as f64, p.epoch_ns() as f64 / 1e9)],
                paper: false,
            })
            .collect(),
    }
}

/// A point's design, as the report and the plot name it.
pub(crate) fn sampler_label(p: &Point) -> String {
    match p.sweep {
        "small reads" => format!("{}, {}-byte reads as needed", p.sampler, p.block_bytes),
        "in storage" if p.hyperbatch == 1 => "ISP, an NS_config per minibatch".into(),
        "in storage" => format!("ISP, in-storage hyperbatches of {}", p.hyperbatch),
        _ if p.hyperbatch == 1 => format!(
            "AGNES without hyperbatches, {} KiB blocks",
            p.block_bytes / 1024
        ),
        _ => format!(
            "AGNES, hyperbatches of {}, {} KiB blocks",
            p.hyperbatch,
            p.block_bytes / 1024
        ),
    }
}

/// One CSV row.
pub(crate) fn record(p: &Point) -> Record {
    Record::new("agnes.point")
        .with("device", p.device.as_str())
        .with("sweep", p.sweep)
        .with("graph_to_memory_ratio", p.ratio)
        .with("sampler", p.sampler)
        .with("block_bytes", p.block_bytes)
        .with("hyperbatch_minibatches", p.hyperbatch)
        .with("graph_buffer_bytes", p.buffer_bytes)
        .with("layout_bytes", p.layout_bytes)
        .with("looked_up_share_of_buffer", p.looked_up_share())
        .with("epoch_minibatches", p.epoch_minibatches)
        .with("sampled_minibatches", p.cost.sampled_minibatches)
        .with("storage_reads", p.cost.epoch.reads)
        .with("bytes_read", p.cost.epoch.bytes_read)
        .with("bytes_used", p.cost.epoch.bytes_used)
        .with("device_ns", p.cost.epoch.device_ns)
        .with("host_ns", p.cost.epoch.host_ns)
        .with("hyperbatch_splits", p.cost.epoch.splits)
        .with("epoch_ns", p.epoch_ns())
        .with(
            "timing",
            if p.cost.sampled_minibatches < p.epoch_minibatches {
                "modelled (extrapolated)"
            } else {
                "modelled"
            },
        )
}

/// The ratio sweep: at each graph-to-memory ratio, the epoch without hyperbatches over the
/// epoch with the largest (AGNES Fig. 8's quantity).
pub(crate) fn hyperbatch_speedups(points: &[Point]) -> Vec<(u32, f64)> {
    let mut ratios: Vec<u32> = points
        .iter()
        .filter(|p| p.sweep == "ratio")
        .map(|p| p.ratio)
        .collect();
    ratios.dedup();
    ratios
        .into_iter()
        .filter_map(|r| {
            let at = || {
                points
                    .iter()
                    .filter(move |p| p.sweep == "ratio" && p.ratio == r)
            };
            let none = at().find(|p| p.hyperbatch == 1)?;
            let with = at()
                .filter(|p| p.hyperbatch > 1)
                .max_by_key(|p| p.hyperbatch)?;
            Some((r, none.epoch_ns() as f64 / with.epoch_ns().max(1) as f64))
        })
        .collect()
}

/// Fig. 8 against the graph-to-memory ratio: the hyperbatches' speedup at each.
pub(crate) fn ratio_plot(points: &[Point]) -> Figure {
    let mut series = vec![Series {
        label: "AGNES, ours".into(),
        points: hyperbatch_speedups(points)
            .into_iter()
            .map(|(r, x)| (f64::from(r).log2(), x))
            .collect(),
        paper: false,
    }];
    if let Some(v) = paper::AGNES
        .iter()
        .find(|v| v.key == "fig8.hyperbatch_speedup.max")
    {
        series.push(Series {
            label: format!("paper ({}: up to {}×)", v.figure, v.value),
            points: vec![(f64::NAN, v.value)],
            paper: true,
        });
    }
    Figure {
        title: format!(
            "AGNES Fig. 8 on {}: hyperbatches against graph-to-memory ratio (modelled)",
            points.first().map_or("", |p| p.device.as_str())
        ),
        x_label: "log2 of the graph-to-memory ratio (layout bytes / graph buffer bytes)".into(),
        y_label: "epoch without hyperbatches / with them (×)".into(),
        series,
    }
}

/// The point of `sweep` with the shortest modelled epoch.
pub(crate) fn best<'a>(points: &'a [Point], sweep: &str) -> Option<&'a Point> {
    points
        .iter()
        .filter(|p| p.sweep == sweep)
        .min_by_key(|p| p.epoch_ns())
}

/// Fig. 9 (a) or (b): the modelled epoch against the block or hyperbatch size, with the graph
/// buffer at 1/`ratio` of the layout.
pub(crate) fn plot(points: &[Point], sweep: &str, ratio: u32) -> Figure {
    let of = |f: &dyn Fn(&Point) -> f64| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter(|p| p.sweep == sweep)
            .map(|p| {
                let x = if sweep == "block" {
                    p.block_bytes as f64 / 1024.0
                } else {
                    p.hyperbatch as f64
                };
                (x.log2(), f(p))
            })
            .collect()
    };
    let device = points.first().map_or("", |p| p.device.as_str());
    let (letter, x_label) = if sweep == "block" {
        ("a", "log2 of the block size (KiB)")
    } else {
        ("b", "log2 of the hyperbatch (minibatches)")
    };
    Figure {
        title: format!(
            "AGNES Fig. 9({letter}) on {device}: graph buffer 1/{ratio} of the layout (modelled)"
        ),
        x_label: x_label.into(),
        y_label: "modelled epoch time (s)".into(),
        series: vec![Series {
            label: "AGNES, ours".into(),
            points: of(&|p| p.epoch_ns() as f64 / 1e9),
            paper: false,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(device_ns: u64) -> Cost {
        Cost {
            reads: device_ns / 10,
            device_ns,
            ..Cost::default()
        }
    }

    /// The epoch is the sampled groups' sum plus the last sampled one for each group not
    /// sampled; sampling stops once the minimum of minibatches and two groups are reached.
    #[test]
    fn unsampled_hyperbatches_cost_what_the_last_sampled_one_did() {
        let groups = [100u64, 40, 50, 60, 70];
        let mut seen = Vec::new();
        let e = extrapolated(
            &groups,
            |_| 1,
            3,
            |&g| {
                seen.push(g);
                Ok((cost(g), true))
            },
        )
        .unwrap();
        assert_eq!(seen, [100, 40, 50]);
        assert_eq!(e.sampled_minibatches, 3);
        assert_eq!(e.sampled.device_ns, 190);
        assert_eq!(e.epoch.device_ns, 190 + 2 * 50);
        assert_eq!(e.epoch.reads, 19 + 2 * 5);
        // Groups of two minibatches: two groups reach the minimum.
        let e = extrapolated(&groups, |_| 2, 3, |&g| Ok((cost(g), true))).unwrap();
        assert_eq!(
            (e.sampled_minibatches, e.epoch.device_ns),
            (4, 140 + 3 * 40)
        );
        // Sampling goes on until a group began in the steady state (here: after 60).
        let longer = [
            (100u64, false),
            (40, false),
            (50, false),
            (60, true),
            (70, true),
            (80, true),
            (90, true),
        ];
        let e = extrapolated(&longer, |_| 1, 1, |&(g, steady)| Ok((cost(g), steady))).unwrap();
        assert_eq!(
            (e.sampled_minibatches, e.epoch.device_ns),
            (5, 320 + 2 * 70)
        );
        // An epoch whose cost overflows is an error, not a wrapped number.
        let huge = [u64::MAX / 2; 3];
        assert!(extrapolated(&huge, |_| 1, 1, |&g| Ok((cost(g), true))).is_err());
        // A single group is sampled whole.
        let e = extrapolated(&groups[..1], |_| 8, 3, |&g| Ok((cost(g), false))).unwrap();
        assert_eq!((e.sampled_minibatches, e.epoch.device_ns), (8, 100));
        // A failed group fails the point.
        assert!(extrapolated(&groups, |_| 1, 3, |_| anyhow::bail!("refused")).is_err());
    }

    /// On a graph small enough to sample every minibatch, the extrapolated epoch of
    /// per-minibatch AGNES (the fewest of eight minibatches that reach a steady buffer) is
    /// within 10 % of the whole epoch's: at r = 8 (the buffer full from the first minibatch
    /// on) and at r = 1 (a buffer that holds the layout, filled over several minibatches).
    #[test]
    fn an_extrapolated_epoch_is_near_the_sampled_one() {
        let whole = Sweep {
            min_sampled_minibatches: 8,
            ..Sweep::quick()
        };
        let part = Sweep::quick();
        let hw = HwConfig::cosmos_plus();
        let graph = whole.build_graph().unwrap();
        let first = reference(&graph, &whole).unwrap();
        for ratio in [8, 1] {
            let at = ("hyperbatch", 1 << 20, 1, ratio);
            let (w, p) = (
                point(&hw, &graph, &whole, &first, at).unwrap(),
                point(&hw, &graph, &part, &first, at).unwrap(),
            );
            assert_eq!(w.cost.sampled_minibatches, 8);
            assert_eq!(w.cost.sampled, w.cost.epoch);
            assert!(p.cost.sampled_minibatches < 8, "r = {ratio}: {p:?}");
            let near = |a: u64, b: u64| (a as f64 / b as f64 - 1.0).abs() < 0.10;
            let what = format!("r = {ratio}: whole {:?}, extrapolated {:?}", w.cost, p.cost);
            assert!(near(p.epoch_ns(), w.epoch_ns()), "{what}");
            assert!(near(p.cost.epoch.reads, w.cost.epoch.reads), "{what}");
        }
    }

    #[test]
    fn an_epoch_of_partial_hyperbatches_is_refused() {
        assert!(Sweep::full().check().is_ok() && Sweep::quick().check().is_ok());
        let bad = Sweep {
            hyperbatches: vec![1, 3],
            ..Sweep::quick()
        };
        let err = bad.check().unwrap_err().to_string();
        assert!(err.contains("hyperbatches of 3"), "{err}");
    }

    /// A point whose first minibatch is not the reference's fails, for AGNES and for the
    /// small reads: the oracle can fail.
    #[test]
    fn a_first_minibatch_other_than_the_references_is_caught() {
        let sweep = Sweep::quick();
        let hw = HwConfig::cosmos_plus();
        let graph = sweep.build_graph().unwrap();
        let other = Sweep {
            fanouts: vec![4, 5],
            ..Sweep::quick()
        };
        let wrong = reference(&graph, &other).unwrap();
        let right = reference(&graph, &sweep).unwrap();
        assert_ne!(wrong, right);
        let at = ("hyperbatch", 1 << 20, 8, 8);
        assert!(point(&hw, &graph, &sweep, &right, at).is_ok());
        let err = point(&hw, &graph, &sweep, &wrong, at).unwrap_err();
        assert!(err.to_string().contains("reference"), "{err}");
        let err = small_reads(&hw, &graph, &sweep, &wrong, SamplerKind::Direct).unwrap_err();
        assert!(err.to_string().contains("reference"), "{err}");
    }
}
