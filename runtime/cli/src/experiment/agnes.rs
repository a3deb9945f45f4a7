//! AGNES's block-size and hyperbatch sweeps (Figs. 8 and 9): the AGNES sampler reading its block
//! layout from the emulated device, with its graph buffer holding 1/ratio of the layout, for
//! block sizes from 64 KiB to 4 MiB and hyperbatches from 1 minibatch (AGNES without
//! hyperbatches) up. Each point is a fresh device; its epoch time is modelled: the device's
//! virtual time plus the host's modelled work (each command a synchronous I/O, the sampling
//! compute with the `[host]` costs), so two runs write byte-identical CSVs.

use std::path::Path;

use sagessd_emulator::HwConfig;
use sagessd_host_driver::{Device, LocalTransport, Transport};
use sagessd_runtime::compare::{minibatch_seed, minibatch_targets};
use sagessd_runtime::dataset::Dataset;
use sagessd_runtime::ooc::{AgnesLayout, AgnesSampler};
use sagessd_runtime::sampler::Sampler;

use super::plot::{Figure, Series};
use crate::records::Record;

/// The sweep.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sweep {
    /// The graph and the minibatches.
    pub workload: super::Workload,
    /// Layout bytes over graph-buffer bytes.
    pub ratio: u32,
    /// Block sizes of the block sweep, bytes (at hyperbatch `block_sweep_hyperbatch`).
    pub block_bytes: Vec<usize>,
    /// The hyperbatch of the block sweep.
    pub block_sweep_hyperbatch: usize,
    /// Hyperbatch sizes of the hyperbatch sweep (at 1 MiB blocks), minibatches.
    pub hyperbatches: Vec<usize>,
}

impl Sweep {
    /// The full sweep.
    pub(crate) fn full() -> Self {
        Self {
            workload: super::Workload {
                scale: 16,
                batches: 1024,
                batch_size: 256,
                fanouts: vec![10, 10, 10],
            },
            ratio: 8,
            block_bytes: vec![64 << 10, 256 << 10, 1 << 20, 4 << 20],
            block_sweep_hyperbatch: 256,
            hyperbatches: vec![1, 16, 64, 256, 1024],
        }
    }

    /// The reduced sweep of the test suite.
    pub(crate) fn quick() -> Self {
        Self {
            workload: super::Workload {
                scale: 11,
                batches: 8,
                batch_size: 64,
                fanouts: vec![5, 5],
            },
            ratio: 8,
            block_bytes: vec![64 << 10, 1 << 20],
            block_sweep_hyperbatch: 4,
            hyperbatches: vec![1, 8],
        }
    }
}

/// One measured point.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Point {
    /// The device's name.
    pub device: String,
    /// Which sweep: "block" or "hyperbatch".
    pub sweep: &'static str,
    /// Block size, bytes.
    pub block_bytes: usize,
    /// Minibatches per hyperbatch.
    pub hyperbatch: usize,
    /// The graph buffer, bytes.
    pub buffer_bytes: usize,
    /// The layout on the device, bytes.
    pub layout_bytes: u64,
    /// Storage reads and their bytes.
    pub reads: u64,
    /// Bytes read from the device.
    pub bytes_read: u64,
    /// Bytes of those the samples used.
    pub bytes_used: u64,
    /// The device's virtual time over the epoch, ns.
    pub device_ns: u64,
    /// The host's modelled work over the epoch, ns.
    pub host_ns: u64,
}

impl Point {
    /// The modelled epoch: device and host work (the reads are synchronous).
    pub(crate) fn epoch_ns(&self) -> u64 {
        self.device_ns + self.host_ns
    }
}

/// Generates (or reuses) the sweep's dataset under `dir`.
pub(crate) fn dataset(dir: &Path, sweep: &Sweep) -> anyhow::Result<Dataset> {
    Ok(super::generated(dir, sweep.workload.scale, 0, 1)?.1)
}

/// One epoch of AGNES with `block_bytes` blocks and hyperbatches of `hyperbatch` on a fresh
/// device of `hw`.
fn point(
    hw: &HwConfig,
    dataset: &Dataset,
    sweep: &Sweep,
    (kind, block_bytes, hyperbatch): (&'static str, usize, usize),
) -> anyhow::Result<Point> {
    let graph = dataset.graph()?;
    let (layout, _) = AgnesLayout::for_dataset(dataset, block_bytes)?;
    let layout_bytes = layout.manifest.block_count * layout.manifest.block_bytes;
    let buffer_bytes = ((layout_bytes / u64::from(sweep.ratio.max(1))) as usize).max(block_bytes);
    let mut device = Device::open(LocalTransport::from_config(hw)?)?;
    let placed = sagessd_runtime::placement::place(&mut device, &graph, None, &layout)
        .map_err(|e| anyhow::anyhow!(e))?;
    drop(graph);
    device.transport_mut().drop_caches();
    let n = dataset.manifest.node_count;
    let requests: Vec<(u64, Vec<u64>)> = (0..sweep.workload.batches)
        .map(|b| {
            (
                minibatch_seed(1, b),
                minibatch_targets(1, b, sweep.workload.batch_size, n),
            )
        })
        .collect();
    let t0 = device.now_ns().unwrap_or(0);
    let commands0 = device.stats().commands;
    let mut host_ns = 0u64;
    let io = {
        let mut s =
            AgnesSampler::on_device(&layout, buffer_bytes, &mut device, placed.layout_slba)?;
        for group in requests.chunks(hyperbatch.max(1)) {
            for sub in s.sample_many(&sweep.workload.fanouts, group)? {
                host_ns += crate::sample::host_sampling_ns(hw, &sub);
            }
        }
        s.io_stats().clone()
    };
    host_ns += (device.stats().commands - commands0) * hw.host.sync_io_ns();
    Ok(Point {
        device: hw.device.name.clone(),
        sweep: kind,
        block_bytes,
        hyperbatch,
        buffer_bytes,
        layout_bytes,
        reads: io.reads,
        bytes_read: io.bytes_read,
        bytes_used: io.bytes_used,
        device_ns: device.now_ns().unwrap_or(0) - t0,
        host_ns,
    })
}

/// Both sweeps on `hw`.
pub(crate) fn run(hw: &HwConfig, dataset: &Dataset, sweep: &Sweep) -> anyhow::Result<Vec<Point>> {
    let blocks = sweep
        .block_bytes
        .iter()
        .map(|&b| ("block", b, sweep.block_sweep_hyperbatch));
    let hyper = sweep
        .hyperbatches
        .iter()
        .map(|&h| ("hyperbatch", 1 << 20, h));
    blocks
        .chain(hyper)
        .map(|p| point(hw, dataset, sweep, p))
        .collect()
}

/// One CSV row.
pub(crate) fn record(p: &Point) -> Record {
    Record::new("agnes.point")
        .with("device", p.device.as_str())
        .with("sweep", p.sweep)
        .with("block_bytes", p.block_bytes)
        .with("hyperbatch_minibatches", p.hyperbatch)
        .with("graph_buffer_bytes", p.buffer_bytes)
        .with("layout_bytes", p.layout_bytes)
        .with("storage_reads", p.reads)
        .with("bytes_read", p.bytes_read)
        .with("bytes_used", p.bytes_used)
        .with("device_ns", p.device_ns)
        .with("host_ns", p.host_ns)
        .with("epoch_ns", p.epoch_ns())
        .with("timing", "modelled")
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
