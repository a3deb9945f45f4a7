//! SmartSAGE's end-to-end figures (Figs. 6, 7, 18) at papers100M scale, modelled: the sampling
//! sweep's design points (the same minibatches of the same 7.79 GiB graph, the host page cache
//! at graph/r) feed a trainer on one virtual timeline, each step priced on the hardware
//! description's `[trainer]` accelerator from the minibatch's own layer sizes.
//!
//! Nothing trains for real at this size (ogbn-papers100M's 128 f32 features a node would be
//! 57 GB): the modelled epoch needs only when each minibatch is ready ([`ModeResult::done_ns`])
//! and its layer sizes ([`CompareReport::minibatch_layers`]), both from the comparison, and the
//! same step model `sagessd train --modelled-steps` uses. The widths are ogbn-papers100M's
//! (128 features, 172 classes) with SALIENT's hidden width (256). As in the end-to-end runs on
//! the small graph, feature rows come from host memory in every design and cross to the
//! accelerator at `[trainer] host_copy_mb_per_s` inside the step.
//!
//! The minibatches stand for a slice of a long epoch: the timeline replays them 16 times, each
//! worker starting a repeat where it finished the one before, so the pipeline fill is paid once
//! an epoch, and a design's time is one slice's share. The figures use the fewest host workers (of the sweep's) that keep DRAM-only's trainer at least 90 %
//! busy, SmartSAGE §III-C's "high GPU utilization" of in-memory training (Fig. 7);
//! the report says which, and every worker count's points are in the CSV.
//!
//! Without the `train` feature (the step model is the training crate's) only [`section`]'s
//! notice that the figures were not computed is reachable.
#![cfg_attr(not(feature = "train"), allow(dead_code))]

use std::path::Path;

#[cfg(feature = "train")]
use sagessd::compare::{self, CompareConfig, CompareReport, ModeResult};
use sagessd_emulator::HwConfig;
#[cfg(feature = "train")]
use sagessd_pipeline::Timeline;
#[cfg(feature = "train")]
use sagessd_runtime::registry::SamplerKind;
#[cfg(feature = "train")]
use sagessd_train::{ModelKind, StepModel};

#[cfg(feature = "train")]
use super::end_to_end::Design;
use super::end_to_end::Point;
use super::smartsage;
use crate::record::Record;

/// What the at-scale end-to-end part of `experiment smartsage` wrote for one device.
#[derive(Debug)]
pub struct Section {
    /// The report's section (Markdown), with its paper · ours · ratio table.
    pub report: String,
    /// The figures' design points (at their worker count), every r.
    pub points: Vec<Point>,
    /// Its CSV rows (`smartsage.end_to_end`).
    pub rows: Vec<Record>,
    /// The plot stems it wrote.
    pub plots: Vec<String>,
    /// Rows of its paper table that differ from the paper by more than 30 % at some r.
    pub far: usize,
}

/// Computes the at-scale end-to-end figures of `hw` (the oracle on the built-in Newport-class
/// description) from its sampling points, writes their plots into `dir` and returns the
/// section.
pub fn section(
    hw: &HwConfig,
    sampling: &[smartsage::Point],
    dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Section> {
    #[cfg(not(feature = "train"))]
    {
        let _ = (hw, sampling, dir);
        progress(
            "experiment smartsage: Figs. 6, 7 and 18 at scale SKIPPED: this sagessd was built without the `train` feature (the step model)",
        );
        Ok(Section {
            report: "### Figs. 6, 7, 18 at scale\n\nNot computed: this sagessd was built \
                     without the `train` feature.\n"
                .into(),
            points: Vec::new(),
            rows: Vec::new(),
            plots: Vec::new(),
            far: 0,
        })
    }
    #[cfg(feature = "train")]
    {
        let oracle = HwConfig::newport();
        let at = run(hw, &oracle, sampling, progress)?;
        let mut plots = Vec::new();
        for (name, figure) in super::end_to_end::plots(at.points()) {
            let stem = format!("{name}_at_scale_{}", super::file_safe(&hw.device.name));
            super::plot::write(&figure, dir, &stem)?;
            plots.push(stem);
        }
        let graph = &sampling
            .first()
            .ok_or_else(|| anyhow::anyhow!("no sampling points"))?
            .report
            .config
            .graph;
        progress("  the step model on SALIENT's configuration");
        let salient = salient_check(hw, graph, 8)?;
        let (report, far) = report(hw, &oracle, &at, sampling, salient);
        Ok(Section {
            report,
            points: at.points().to_vec(),
            rows: records(&at, sampling),
            plots,
            far,
        })
    }
}

#[cfg(feature = "train")]
fn report(
    hw: &HwConfig,
    oracle: &HwConfig,
    at: &AtScale,
    sampling: &[smartsage::Point],
    (salient_sampled_ns, salient_filled_ns): (f64, f64),
) -> (String, usize) {
    use std::fmt::Write as _;
    let t = &hw.trainer;
    let mut r = String::new();
    let busy = at
        .dram_busy
        .iter()
        .map(|(w, b)| format!("{:.0} % with {w}", 100.0 * b))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        r,
        "### Figs. 6, 7, 18 at scale: end-to-end training, modelled\n\n\
         The sampling sweep's minibatches (same graph, same page caches) feed one trainer on one \
         virtual timeline: step *i* starts when minibatch *i* is ready and step *i − 1* is done \
         (a queue of {QUEUE_GROUPS} minibatches per worker); the minibatches stand for a slice of \
         a long epoch, replayed {REPEATS} times so that the pipeline fill is paid once, each step priced on the `[trainer]` \
         accelerator ({}) from the \
         minibatch's own layer sizes: GraphSAGE {IN_DIM} → {HIDDEN} → {CLASSES} \
         (ogbn-papers100M's features and classes, SALIENT's hidden width), feature rows from host \
         memory crossing to the accelerator inside the step; {:.2} ms a step on average. No \
         model trains at this size (its features would be 57 GB); the real training runs on the \
         small graph below check accuracy. SmartSAGE(oracle) = in-storage sampling on {}. \
         DRAM-only keeps the trainer busy {busy}: the figures use **{} workers**, the fewest \
         that keep it at least {:.0} % busy (SmartSAGE §III-C: in-memory training \"shows high \
         GPU utilization\"){}. Every worker count is in `end_to_end_at_scale.csv`.\n",
        t.describe(),
        at.mean_step_ns / 1e6,
        oracle.device.name,
        at.workers,
        100.0 * BUSY_TARGET,
        if at
            .dram_busy
            .iter()
            .any(|(w, b)| *w == at.workers && *b >= BUSY_TARGET)
        {
            ""
        } else {
            " — none of the sweep's worker counts reaches it, so the figures use the most"
        }
    );
    let _ = writeln!(
        r,
        "The step model against a measurement: SALIENT's GraphSAGE step on an NVIDIA V100 \
         (ogbn-papers100M, 3 layers 128 → 256 → 256 → 256, fanouts 15,10,5, 1,024 targets; its \
         artifact's README: 14,109 ms of training per epoch of 1,179 minibatches, transfers \
         excluded) is **{:.2} ms**. This model, on this description's accelerator, prices the \
         same configuration at {:.2} ms on this graph's minibatches (×{:.2}) and {:.2} ms with \
         every fanout filled by new nodes (×{:.2}; the real graph's degrees fill most of \
         them): a roofline at peak rates is optimistic, by about the factor shown.\n",
        SALIENT_STEP_NS / 1e6,
        salient_sampled_ns / 1e6,
        salient_sampled_ns / SALIENT_STEP_NS,
        salient_filled_ns / 1e6,
        salient_filled_ns / SALIENT_STEP_NS
    );
    let points = at.points();
    let mut ratios: Vec<u32> = points.iter().map(|p| p.ratio).collect();
    ratios.sort_unstable();
    ratios.dedup();
    let e2e: Vec<super::paper::PaperValue> = super::paper::SMARTSAGE
        .iter()
        .filter(|v| super::end_to_end::ours(points, v.key).is_some())
        .copied()
        .collect();
    let _ = writeln!(
        r,
        "#### Paper · ours · ratio: end to end (Figs. 6, 18), {} workers\n",
        at.workers
    );
    let far = super::paper_table(
        &mut r,
        &e2e,
        &ratios
            .iter()
            .map(|x| format!("r = {x}"))
            .collect::<Vec<_>>(),
        &|key, i| super::end_to_end::ours_at(points, key, ratios[i]),
        &|v| format!("{v:.1}×"),
        &|o| format!("{o:.2}×"),
    );
    let _ = writeln!(
        r,
        "\n| r | design | device | ms per minibatch, end to end | trainer idle | speedup vs SSD(mmap) | of DRAM-only |\n|---|---|---|---|---|---|---|"
    );
    let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}×"));
    for p in points {
        let batches = sampling
            .iter()
            .find(|s| s.ratio == p.ratio)
            .map_or(1, |s| s.report.config.batches.max(1));
        let _ = writeln!(
            r,
            "| {} | {} | {} | {:.3} | {:.1} % | {} | {} |",
            p.ratio,
            p.design.name(),
            p.device,
            p.epoch_s * 1e3 / f64::from(batches),
            100.0 * p.idle_fraction,
            f(super::end_to_end::speedup_vs_mmap(points, p)),
            f(super::end_to_end::of_dram_only(points, p)),
        );
    }
    (r, far)
}

/// ogbn-papers100M's feature width.
pub const IN_DIM: u64 = 128;
/// ogbn-papers100M's classes.
pub const CLASSES: u64 = 172;
/// GraphSAGE's hidden width (SALIENT's, on ogbn-papers100M).
pub const HIDDEN: u64 = 256;
/// Minibatch groups the producer–trainer queue holds (`sagessd train --queue-depth`'s default),
/// a group being one minibatch per worker.
const QUEUE_GROUPS: usize = 4;
/// Times the timeline replays a comparison's minibatches, as an epoch of that many slices: the
/// pipeline fill (the first minibatches' sampling, before any step) is paid once an epoch, not
/// once a slice.
const REPEATS: u64 = 16;
/// The share of its epoch DRAM-only's trainer must be busy for the figures' worker count.
pub const BUSY_TARGET: f64 = 0.9;

/// SALIENT's measured GraphSAGE training step, ns: its artifact's README (MITIBMxGraph/
/// SALIENT_artifact, "Run single GPU experiments", the run behind Kaler et al., MLSys 2022,
/// Table 1) gives 14,109.076 ms of "Train" (forward, loss, backward and Adam, timed with CUDA
/// events; sampling, slicing and transfers excluded) per epoch of ogbn-papers100M on an NVIDIA
/// V100, ceil(1,207,179 / 1,024) = 1,179 minibatches: 3 SAGE layers 128 → 256 → 256 → 256,
/// fanouts 15,10,5.
pub const SALIENT_STEP_NS: f64 = 14_109.076e6 / 1179.0;
/// SALIENT's fanouts.
const SALIENT_FANOUTS: [u16; 3] = [15, 10, 5];

/// The step model on SALIENT's configuration (transfers excluded, as its "Train" is): the mean
/// over `batches` minibatches of 1,024 targets sampled from `graph`, and the step with every
/// fanout filled by distinct new nodes (the bound the real graph's degrees approach: its mean
/// degree, both directions, is about 29), ns.
#[cfg(feature = "train")]
pub fn salient_check(
    hw: &HwConfig,
    graph: &sagessd_runtime::graph_spec::GraphSpec,
    batches: u32,
) -> anyhow::Result<(f64, f64)> {
    use sagessd_abi::subgraph::LayerCounts;
    let model = StepModel {
        classes: HIDDEN,
        ..step_model(hw)
    };
    let price = |counts: &[LayerCounts]| hw.trainer.step_ns(&model.layers_of(counts), 0) as f64;
    let built = graph.build().map_err(anyhow::Error::msg)?;
    let host = built.host();
    let requests =
        sagessd_runtime::minibatch::minibatch_requests(1, batches, 1024, host.node_count());
    let mut total = 0.0;
    for q in &requests {
        let sub = host.sample(q.seed, &SALIENT_FANOUTS, &q.targets)?;
        let view = sub.view();
        let counts: Vec<LayerCounts> = (0..view.layer_count())
            .map(|l| view.layer(l).counts)
            .collect();
        total += price(&counts);
    }
    let mut filled = Vec::new();
    let mut dst: u32 = 1024;
    for f in SALIENT_FANOUTS {
        let edges = dst * u32::from(f);
        filled.push(LayerCounts {
            dst_count: dst,
            src_count: dst + edges,
            edge_count: edges,
        });
        dst += edges;
    }
    Ok((total / f64::from(batches.max(1)), price(&filled)))
}

/// Every design point at every worker count, and the worker count the figures use.
#[cfg(feature = "train")]
#[derive(Debug)]
pub struct AtScale {
    /// Per worker count (ascending): the designs at each r (DRAM-only and the oracle, which
    /// do not read through the page cache, repeated at every r).
    pub by_workers: Vec<(usize, Vec<Point>)>,
    /// The figures' worker count: the fewest that keep DRAM-only's trainer
    /// [`BUSY_TARGET`] busy, else the most the sweep has.
    pub workers: usize,
    /// DRAM-only's busy share at each worker count.
    pub dram_busy: Vec<(usize, f64)>,
    /// The mean modelled step over the sweep's minibatches, ns.
    pub mean_step_ns: f64,
}

#[cfg(feature = "train")]
impl AtScale {
    /// The figures' points.
    pub fn points(&self) -> &[Point] {
        self.by_workers
            .iter()
            .find(|(w, _)| *w == self.workers)
            .map_or(&[], |(_, p)| p.as_slice())
    }
}

/// The step model of the at-scale figures on `hw`'s accelerator: GraphSAGE at
/// ogbn-papers100M's widths.
#[cfg(feature = "train")]
pub fn step_model(hw: &HwConfig) -> StepModel {
    StepModel {
        accelerator: hw.trainer,
        model: ModelKind::Sage,
        in_dim: IN_DIM,
        hidden: HIDDEN,
        classes: CLASSES,
        heads: 1,
        feature_row_bytes: IN_DIM * 4,
    }
}

/// The trainer's timeline over `result`'s minibatches, the slice repeated [`REPEATS`] times as
/// an epoch of that many slices: worker `w` (minibatches `w`, `w + workers`, …) starts each
/// repeat where it finished the one before, so the pipeline fill is paid once, not once a
/// slice. Step `i` starts when minibatch `i` is ready and the previous step is done (queue:
/// [`QUEUE_GROUPS`] groups of the run's workers).
#[cfg(feature = "train")]
fn timeline(result: &ModeResult, report: &CompareReport, step: &StepModel) -> Timeline {
    let workers = result.workers.max(1);
    let mut worker_end = vec![0u64; workers];
    for (i, &done) in result.done_ns.iter().enumerate() {
        worker_end[i % workers] = worker_end[i % workers].max(done);
    }
    let mut t = Timeline::starting_at(0, QUEUE_GROUPS * workers);
    for k in 0..REPEATS {
        for (i, (ready, layers)) in result
            .done_ns
            .iter()
            .zip(&report.minibatch_layers)
            .enumerate()
        {
            t.step(k * worker_end[i % workers] + ready, step.step_ns_of(layers));
        }
    }
    t
}

/// One design point from a comparison's result: the time of one slice (its minibatches) in
/// the repeated timeline.
#[cfg(feature = "train")]
fn point(design: Design, device: &str, ratio: u32, t: &Timeline) -> Point {
    Point {
        design,
        device: device.to_string(),
        ratio,
        epoch_s: t.end_ns as f64 / 1e9 / REPEATS as f64,
        train_s: t.busy_ns as f64 / 1e9 / REPEATS as f64,
        idle_fraction: t.idle_fraction(),
        test_accuracy: None,
        command: String::new(),
        wall_s: 0.0,
    }
}

/// Runs what the sampling sweep did not (DRAM-only on `hw`, in-storage sampling on `oracle`,
/// at the sweep's worker counts) and joins every design with the trainer.
#[cfg(feature = "train")]
pub fn run(
    hw: &HwConfig,
    oracle: &HwConfig,
    sampling: &[smartsage::Point],
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<AtScale> {
    let Some(first) = sampling.first() else {
        anyhow::bail!("no sampling points to train from");
    };
    let workers = first.report.config.workers.clone();
    let config = |hw: &HwConfig, mode: SamplerKind, workers: Vec<usize>| CompareConfig {
        modes: vec![mode],
        workers,
        hw: hw.clone(),
        ..first.report.config.clone()
    };
    // A comparison of `mode` on `hw`, checked to sample what the sweep sampled.
    let run_checked = |hw: &HwConfig, mode: SamplerKind, what: &str| {
        let report = compare::run(&config(hw, mode, workers.clone()), None, &mut |_| {})?;
        anyhow::ensure!(
            report.identical() && report.checksum == first.report.checksum,
            "{what}: the samples differ from the sampling sweep's"
        );
        Ok::<_, anyhow::Error>(report)
    };
    progress(&format!(
        "  DRAM-only (the graph in host memory), workers {workers:?}"
    ));
    let dram = run_checked(hw, SamplerKind::Memory, "DRAM-only")?;
    progress(&format!(
        "  SmartSAGE(oracle): in-storage sampling on {}, workers {workers:?}",
        oracle.device.name
    ));
    let oracle_report = run_checked(oracle, SamplerKind::Isp, "the oracle")?;
    let step = step_model(hw);
    let steps: Vec<u64> = first
        .report
        .minibatch_layers
        .iter()
        .map(|l| step.step_ns_of(l))
        .collect();
    let mean_step_ns = steps.iter().sum::<u64>() as f64 / steps.len().max(1) as f64;
    let mut by_workers = Vec::new();
    let mut dram_busy = Vec::new();
    for &w in &workers {
        let mut points = Vec::new();
        let dram_t = dram
            .result(SamplerKind::Memory, w)
            .map(|r| timeline(r, &dram, &step));
        if let Some(t) = &dram_t {
            dram_busy.push((w, 1.0 - t.idle_fraction()));
        }
        let oracle_t = oracle_report
            .result(SamplerKind::Isp, w)
            .map(|r| timeline(r, &oracle_report, &step));
        for p in sampling {
            if let Some(t) = &dram_t {
                points.push(point(Design::DramOnly, &hw.device.name, p.ratio, t));
            }
            for (design, mode) in [
                (Design::Mmap, SamplerKind::Mmap),
                (Design::Sw, SamplerKind::Direct),
                (Design::HwSw, SamplerKind::Isp),
            ] {
                if let Some(r) = p.report.result(mode, w) {
                    let t = timeline(r, &p.report, &step);
                    points.push(point(design, &hw.device.name, p.ratio, &t));
                }
            }
            if let Some(t) = &oracle_t {
                points.push(point(Design::Oracle, &oracle.device.name, p.ratio, t));
            }
        }
        by_workers.push((w, points));
    }
    dram_busy.sort_by_key(|(w, _)| *w);
    let chosen = dram_busy
        .iter()
        .find(|(_, busy)| *busy >= BUSY_TARGET)
        .or(dram_busy.last())
        .map_or(1, |(w, _)| *w);
    Ok(AtScale {
        by_workers,
        workers: chosen,
        dram_busy,
        mean_step_ns,
    })
}

/// Every point of every worker count as a `smartsage.end_to_end` row, with its memory regime
/// (from the sampling point of its r).
#[cfg(feature = "train")]
pub fn records(at: &AtScale, sampling: &[smartsage::Point]) -> Vec<Record> {
    let mut rows = Vec::new();
    for (w, points) in &at.by_workers {
        for p in points {
            let Some(s) = sampling.iter().find(|s| s.ratio == p.ratio) else {
                continue;
            };
            let head = crate::compare_rows::regime_fields(
                Record::new("smartsage.end_to_end")
                    .with("device", p.device.as_str())
                    .with("r", p.ratio),
                &s.report,
            );
            rows.push(
                head.with("design", p.design.name())
                    .with("workers", *w)
                    .with("figures_workers", *w == at.workers)
                    .with("minibatches", s.report.config.batches)
                    .with("modelled_time_ns", (p.epoch_s * 1e9).round())
                    .with(
                        "modelled_time_per_minibatch_ns",
                        p.epoch_s * 1e9 / f64::from(s.report.config.batches.max(1)),
                    )
                    .with("modelled_train_ns", (p.train_s * 1e9).round())
                    .with("trainer_idle_fraction", p.idle_fraction)
                    .with(
                        "speedup_vs_mmap",
                        super::end_to_end::speedup_vs_mmap(points, p),
                    )
                    .with(
                        "performance_vs_dram_only",
                        super::end_to_end::of_dram_only(points, p),
                    )
                    .with("timing", "modelled"),
            );
        }
    }
    rows
}
