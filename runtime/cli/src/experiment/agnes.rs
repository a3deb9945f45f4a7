//! AGNES's block-size and hyperbatch sweeps (Figs. 8 and 9): the AGNES sampler reading its block
//! layout from the emulated device, with its graph buffer holding 1/ratio of the layout, for
//! block sizes from 64 KiB to 4 MiB and hyperbatches from 1 minibatch (AGNES without
//! hyperbatches) up; AGNES against the small reads of direct I/O and io_uring over the same
//! minibatches (the storage-based trainers AGNES improves on read a few nodes at a time); and
//! AGNES's feature cache against its access-count threshold. Each point is a fresh device; its
//! epoch time is modelled: the device's virtual time plus the host's modelled work (each command
//! a synchronous I/O, the sampling compute with the `[host]` costs), so two runs write
//! byte-identical CSVs; the feature cache's figures are counts.

use std::path::Path;

use sagessd_emulator::HwConfig;
use sagessd_host_driver::{Device, LocalTransport, Transport};
use sagessd_runtime::compare::{minibatch_seed, minibatch_targets};
use sagessd_runtime::dataset::Dataset;
use sagessd_runtime::host_io::{HostIoMode, HostIoSampler};
use sagessd_runtime::ooc::{AgnesLayout, AgnesSampler};
use sagessd_runtime::sampler::Sampler;

use super::paper;
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
    /// Graph-to-memory ratios of the ratio sweep: AGNES without hyperbatches and with the
    /// largest, at 1 MiB blocks, with the graph buffer at 1/ratio of the layout.
    pub memory_ratios: Vec<u32>,
    /// Feature-cache thresholds (accesses after which a row is kept).
    pub thresholds: Vec<u32>,
    /// The feature cache of the threshold sweep, percent of the feature table.
    pub feature_cache_percent: u32,
    /// The threshold sweep's minibatches: a smaller workload than the block sweeps', so that
    /// a minibatch touches a few percent of the graph and rows recur across hyperbatches.
    pub threshold_workload: super::Workload,
    /// The threshold sweep's hyperbatch, minibatches.
    pub threshold_hyperbatch: usize,
    /// Feature width of the threshold sweep's dataset (f32).
    pub feature_dim: u32,
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
            memory_ratios: vec![1, 2, 8, 32],
            thresholds: vec![1, 2, 4, 8, 16],
            feature_cache_percent: 10,
            threshold_workload: super::Workload {
                scale: 16,
                batches: 512,
                batch_size: 64,
                fanouts: vec![10, 5],
            },
            threshold_hyperbatch: 8,
            feature_dim: 64,
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
            memory_ratios: vec![1, 32],
            thresholds: vec![1, 4],
            feature_cache_percent: 10,
            threshold_workload: super::Workload {
                scale: 11,
                batches: 32,
                batch_size: 16,
                fanouts: vec![5, 5],
            },
            threshold_hyperbatch: 4,
            feature_dim: 16,
        }
    }
}

/// One measured point.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Point {
    /// The device's name.
    pub device: String,
    /// Which sweep: "block", "hyperbatch", "ratio" or "small reads".
    pub sweep: &'static str,
    /// Layout bytes over graph-buffer bytes.
    pub ratio: u32,
    /// The sampler: AGNES, or direct I/O or io_uring's small reads.
    pub sampler: &'static str,
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
    (kind, block_bytes, hyperbatch, ratio): (&'static str, usize, usize, u32),
) -> anyhow::Result<Point> {
    let graph = dataset.graph()?;
    let (layout, _) = AgnesLayout::for_dataset(dataset, block_bytes)?;
    let layout_bytes = layout.manifest.block_count * layout.manifest.block_bytes;
    let buffer_bytes = ((layout_bytes / u64::from(ratio.max(1))) as usize).max(block_bytes);
    let mut device = Device::open(LocalTransport::from_config(hw)?)?;
    let placed = sagessd_runtime::placement::place(&mut device, &graph, None, &layout)
        .map_err(|e| anyhow::anyhow!(e))?;
    drop(graph);
    device.transport_mut().drop_caches();
    let requests = requests(&sweep.workload, dataset.manifest.node_count);
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
        ratio,
        sampler: "AGNES",
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

/// The minibatches of `workload`: seeds and targets.
fn requests(workload: &super::Workload, node_count: u64) -> Vec<(u64, Vec<u64>)> {
    (0..workload.batches)
        .map(|b| {
            (
                minibatch_seed(1, b),
                minibatch_targets(1, b, workload.batch_size, node_count),
            )
        })
        .collect()
}

/// The epoch sampled by the host with `mode`'s small reads (direct I/O at queue depth 1, or
/// io_uring batches) of the CSR graph on a fresh device of `hw`: what the storage-based trainers
/// before AGNES do.
fn small_reads(
    hw: &HwConfig,
    dataset: &Dataset,
    sweep: &Sweep,
    mode: HostIoMode,
) -> anyhow::Result<Point> {
    let graph = dataset.graph()?;
    let mut device = Device::open(LocalTransport::from_config(hw)?)?;
    let desc =
        sagessd_runtime::load::write_graph_with_progress(&mut device, &graph, 0, &mut |_, _| {})?;
    drop(graph);
    device.transport_mut().drop_caches();
    let block = device.info().block_size_bytes as usize;
    let layout_bytes = (desc.indptr.block_count + desc.indices.block_count) * block as u64;
    let mut s = HostIoSampler::new(device, desc, mode, hw.host.clone())?;
    let requests: Vec<sagessd_runtime::host_io::Request> =
        requests(&sweep.workload, dataset.manifest.node_count)
            .into_iter()
            .map(|(seed, targets)| sagessd_runtime::host_io::Request { seed, targets })
            .collect();
    let run = s.run_workers(1, &sweep.workload.fanouts, &requests)?;
    let h = s.host_stats();
    Ok(Point {
        device: hw.device.name.clone(),
        sweep: "small reads",
        ratio: sweep.ratio,
        sampler: match mode {
            HostIoMode::Async => "io_uring",
            _ => "direct I/O",
        },
        block_bytes: block,
        hyperbatch: 1,
        buffer_bytes: 0,
        layout_bytes,
        reads: h.ios,
        bytes_read: h.bytes_read,
        bytes_used: h.bytes_used,
        device_ns: run.makespan_ns.saturating_sub(h.host_cpu_ns),
        host_ns: h.host_cpu_ns,
    })
}

/// The block, hyperbatch and ratio sweeps on `hw`, then the small reads of direct I/O and
/// io_uring over the same epoch.
pub(crate) fn run(hw: &HwConfig, dataset: &Dataset, sweep: &Sweep) -> anyhow::Result<Vec<Point>> {
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
    let mut points = blocks
        .chain(hyper)
        .chain(ratios)
        .map(|p| point(hw, dataset, sweep, p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for mode in [HostIoMode::Direct, HostIoMode::Async] {
        points.push(small_reads(hw, dataset, sweep, mode)?);
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
    /// What the gatherer counted.
    pub stats: sagessd_runtime::ooc::features::GatherStats,
}

/// AGNES's feature cache at each threshold of the sweep: the threshold workload's minibatches,
/// sampled in memory from `dataset` (which has features), gathered a hyperbatch at a time from
/// its features file; every threshold must return the same rows (checked).
pub(crate) fn thresholds(dataset: &Dataset, sweep: &Sweep) -> anyhow::Result<Vec<ThresholdPoint>> {
    use sagessd_runtime::registry::{CacheSettings, FeatureCache};
    let graph = dataset.graph()?;
    let mut sampler = sagessd_runtime::sampler::ReferenceSampler::new(&graph);
    let w = &sweep.threshold_workload;
    let subs = requests(w, dataset.manifest.node_count)
        .iter()
        .map(|(seed, t)| sampler.sample(*seed, &w.fanouts, t))
        .collect::<Result<Vec<_>, _>>()?;
    let (dim, dtype) = dataset
        .feature_shape()?
        .ok_or_else(|| anyhow::anyhow!("{}: no features", dataset.dir().display()))?;
    let table = dataset.manifest.node_count as usize * dim * dtype.size_bytes();
    let cache_bytes = table / 100 * sweep.feature_cache_percent as usize;
    let mut out = Vec::new();
    let mut first: Option<u64> = None;
    for &threshold in &sweep.thresholds {
        let settings = CacheSettings {
            cache_bytes,
            threshold,
            block_bytes: 64 << 10,
        };
        let (stats, sum) = super::bgl::gather_counts(
            dataset,
            &subs,
            FeatureCache::Agnes,
            settings,
            sweep.threshold_hyperbatch,
        )?;
        anyhow::ensure!(
            *first.get_or_insert(sum) == sum,
            "threshold {threshold} gathered other rows than threshold {}",
            sweep.thresholds[0]
        );
        out.push(ThresholdPoint {
            threshold,
            cache_bytes,
            stats,
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
                .with("minibatches", sweep.threshold_workload.batches)
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
            sweep.feature_cache_percent, sweep.threshold_workload.batches
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

/// The designs of the comparison with small reads: AGNES without hyperbatches and with the
/// largest hyperbatch of the sweep (both at its 1 MiB blocks), then the small reads.
pub(crate) fn designs(points: &[Point]) -> Vec<&Point> {
    let hyper = || points.iter().filter(|p| p.sweep == "hyperbatch");
    let none = hyper().find(|p| p.hyperbatch == 1);
    let largest = hyper()
        .filter(|p| p.hyperbatch > 1)
        .max_by_key(|p| p.hyperbatch);
    none.into_iter()
        .chain(largest)
        .chain(points.iter().filter(|p| p.sweep == "small reads"))
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
        .with("storage_reads", p.reads)
        .with("bytes_read", p.bytes_read)
        .with("bytes_used", p.bytes_used)
        .with("device_ns", p.device_ns)
        .with("host_ns", p.host_ns)
        .with("epoch_ns", p.epoch_ns())
        .with("timing", "modelled")
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
