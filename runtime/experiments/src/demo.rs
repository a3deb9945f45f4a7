//! The README's main job (`sagessd demo`): SmartSAGE's design points (DRAM-only, mmap, direct
//! I/O, in-storage sampling on the emulated device and on its Newport-class sibling) feeding a
//! GNN trainer, on a graph of 1.12 GiB (`synthetic:16M`, the emulated flash computes it) that
//! the host page cache holds an eighth of: per design the modelled time per minibatch end to
//! end, its speedup over mmap and share of DRAM-only's, and the trainer's idle share (steps
//! priced on the `[trainer]` accelerator, [`crate::end_to_end_at_scale`]). Nothing trains on
//! that graph (it has no features); the accuracy is a real GraphSAGE trained with the same
//! design's sampler on a small generated, labelled graph ([`crate::end_to_end`]).

use std::path::{Path, PathBuf};

use anyhow::Context;
use sagessd::compare::human_bytes;
use sagessd_emulator::HwConfig;

use crate::{end_to_end, end_to_end_at_scale, smartsage};

/// What the demo ran and wrote.
#[derive(Debug)]
pub struct Demo {
    /// The sampling sweep it ran.
    pub sweep: smartsage::Sweep,
    /// The sampling comparison (one point: the demo's ratio).
    pub sampling: Vec<smartsage::Point>,
    /// The modelled end-to-end figures at scale.
    pub at_scale: end_to_end_at_scale::Section,
    /// The real training on the small graph.
    pub trained: end_to_end::Section,
    /// The memory regime, a sentence.
    pub regime: String,
    /// FNV-1a 64 over the minibatches' subgraphs, which every design sampled byte for byte
    /// (each design's comparison is checked against the in-memory reference, and the
    /// DRAM-only and oracle runs against the sweep's checksum; a difference is an error).
    pub checksum: u64,
    /// The report it wrote.
    pub report: PathBuf,
    /// The end-to-end plot.
    pub plot: PathBuf,
}

/// One design's row.
#[derive(Clone, Debug)]
pub struct Row<'a> {
    /// The design point, modelled at scale.
    pub point: &'a end_to_end::Point,
    /// Modelled time per minibatch, ms.
    pub per_minibatch_ms: f64,
    /// Its speedup over mmap.
    pub vs_mmap: Option<f64>,
    /// Its performance as a share of DRAM-only's.
    pub of_dram_only: Option<f64>,
    /// The test accuracy of the same design's sampler training on the small graph.
    pub test_accuracy: Option<f64>,
    /// The sampling comparison at its ratio.
    pub sampling: Option<&'a smartsage::Point>,
}

impl Demo {
    /// A row per design.
    pub fn rows(&self) -> Vec<Row<'_>> {
        let points = &self.at_scale.points;
        points
            .iter()
            .map(|p| Row {
                point: p,
                per_minibatch_ms: 1e3 * p.epoch_s / f64::from(self.sweep.batches.max(1)),
                vs_mmap: end_to_end::speedup_vs_mmap(points, p),
                of_dram_only: end_to_end::of_dram_only(points, p),
                test_accuracy: self
                    .trained
                    .points
                    .iter()
                    .find(|t| t.design == p.design)
                    .and_then(|t| t.test_accuracy),
                sampling: self.sampling.iter().find(|s| s.ratio == p.ratio),
            })
            .collect()
    }
}

/// Runs the demo on `hw` into `out` (CSVs, plots, the generated dataset and `report.md`, which
/// quotes `command`), telling `progress` what it does.
pub fn run(
    hw: &HwConfig,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Demo> {
    anyhow::ensure!(
        cfg!(feature = "train"),
        "demo trains a GNN, and this sagessd was built without the `train` feature (libtorch); `sagessd compare` samples without training"
    );
    let sweep = smartsage::Sweep::demo();
    let small = end_to_end::Sweep::demo();
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    progress(&format!(
        "demo: {} at r = {} (host page cache 1/{} of it), {} minibatches of {}, fanouts {:?}, {:?} host workers; SSD {}, oracle on newport",
        sweep.graph.describe(),
        sweep.ratios[0],
        sweep.ratios[0],
        sweep.batches,
        sweep.batch_size,
        sweep.fanouts,
        sweep.workers,
        hw.device.name,
    ));
    let sampling = smartsage::run(hw, &sweep, progress)?;
    let at_scale = end_to_end_at_scale::section(hw, &sampling, out, progress)?;
    progress(&format!(
        "demo: accuracy: GraphSAGE trained with each design's sampler on a generated labelled graph (R-MAT scale {}, {} features, {} classes), {} epochs",
        small.scale, small.feature_dim, small.classes, small.epochs
    ));
    let trained = end_to_end::section(hw, &small, out, false, progress)?;
    let regime = sampling
        .first()
        .map(|p| {
            let c = &p.report.config;
            format!(
                "{} ({}) at r = {}: host page cache {}, a minibatch's footprint {:.1} % of it; controller page buffer {}",
                c.graph.word(),
                human_bytes(p.report.graph_bytes()),
                p.ratio,
                human_bytes(c.hw.host.page_cache_bytes),
                100.0 * p.report.footprint.share_of(c.hw.host.page_cache_bytes),
                human_bytes(
                    u64::from(c.hw.firmware.page_buffer_pages)
                        * u64::from(c.hw.nand.page_size_bytes)
                )
            )
        })
        .unwrap_or_default();
    let checksum = sampling
        .first()
        .map(|p| p.report.checksum)
        .context("demo: the sampling sweep ran no point")?;
    let report = out.join("report.md");
    std::fs::write(
        &report,
        format!(
            "# sagessd demo\n\n`{command}`: {regime}.\n\n{}\n## Accuracy: real training on a small labelled graph\n\n{}",
            at_scale.report, trained.report
        ),
    )
    .with_context(|| format!("writing {}", report.display()))?;
    let plot = out.join(format!(
        "fig18_end_to_end_at_scale_{}.svg",
        crate::file_safe(&hw.device.name)
    ));
    Ok(Demo {
        sweep,
        sampling,
        at_scale,
        trained,
        regime,
        checksum,
        report,
        plot,
    })
}
