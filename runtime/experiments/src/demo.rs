//! The README's main job (`sagessd demo`): SmartSAGE's design points (DRAM-only, mmap, direct
//! I/O, in-storage sampling on the emulated device and on its Newport-class sibling) feeding a
//! GNN trainer, on a graph of 1.12 GiB (`synthetic:16M`, the emulated flash computes it) that
//! the host page cache holds an eighth of: per design the modelled time per minibatch end to
//! end, its speedup over mmap and share of DRAM-only's, and the trainer's idle share (steps
//! priced on the `[trainer]` accelerator, [`crate::end_to_end_at_scale`]). Nothing trains on
//! that graph (it has no features); the accuracy is a real GraphSAGE trained on Cora with the
//! same design's sampler on the same hardware descriptions ([`accuracy`]), with `sagessd
//! train`'s defaults for it. Every modelled figure the demo prints is the at-scale one.

use std::path::{Path, PathBuf};

use anyhow::Context;
use sagessd::compare::human_bytes;
use sagessd_emulator::HwConfig;

use crate::end_to_end::{self, Design};
use crate::{end_to_end_at_scale, smartsage};

/// What the demo ran and wrote.
#[derive(Debug)]
pub struct Demo {
    /// The sampling sweep it ran.
    pub sweep: smartsage::Sweep,
    /// The sampling comparison (one point: the demo's ratio).
    pub sampling: Vec<smartsage::Point>,
    /// The modelled end-to-end figures at scale.
    pub at_scale: end_to_end_at_scale::Section,
    /// The real training on Cora, a design each.
    pub trained: Vec<Trained>,
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
    /// The test accuracy of the same design's sampler training on Cora.
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
    progress("demo: accuracy: GraphSAGE trained on Cora with each design's sampler");
    let trained = accuracy(hw, &HwConfig::newport(), out, progress)?;
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
            "# sagessd demo\n\n`{command}`: {regime}.\n\n{}\n{}",
            at_scale.report,
            accuracy_report(&trained)
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

/// One design's real training on Cora.
#[derive(Clone, Debug, PartialEq)]
pub struct Trained {
    /// The design.
    pub design: Design,
    /// The device it sampled on.
    pub device: String,
    /// Test accuracy of the epoch with the best validation accuracy.
    pub test_accuracy: Option<f64>,
    /// Its `sagessd train` command line.
    pub command: String,
}

/// GraphSAGE trained for real (libtorch, this machine's CPU, one thread) on Cora with each
/// design's sampler, on the hardware descriptions the at-scale figures use (`hw`, `oracle` for
/// the oracle), with `sagessd train`'s defaults for Cora (50 epochs of four minibatches of 35
/// targets, fanouts 25,10): Cora is imported into `out/cora` from the wheel `scripts/setup.sh`
/// downloads, unless it is there. Every design samples the same minibatches, so every design
/// reaches the same accuracy; what it shows is that each design trains a model that learns.
pub fn accuracy(
    hw: &HwConfig,
    oracle: &HwConfig,
    out: &Path,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<Trained>> {
    #[cfg(not(feature = "train"))]
    {
        let _ = (hw, oracle, out, progress);
        anyhow::bail!("the demo's accuracy trains GraphSAGE: build with the `train` feature")
    }
    #[cfg(feature = "train")]
    {
        use sagessd_runtime::dataset::{Dataset, cora};
        let dir = out.join("cora");
        if Dataset::open(&dir).is_err() {
            let wheel = cora::find_wheel(&[])
                .context("demo: the accuracy trains on Cora (scripts/setup.sh downloads it)")?;
            cora::import(&wheel, &dir)
                .with_context(|| format!("demo: importing Cora into {}", dir.display()))?;
        }
        // Each description written once, for the commands that rerun a design.
        let mut configs = Vec::new();
        for base in [hw, oracle] {
            let config = out.join(format!(
                "accuracy-{}.toml",
                crate::file_safe(&base.device.name)
            ));
            end_to_end::write_config(&config, base)?;
            configs.push(config);
        }
        let mut trained = Vec::new();
        for design in Design::ALL {
            let (base, config) = if design == Design::Oracle {
                (oracle, &configs[1])
            } else {
                (hw, &configs[0])
            };
            let mut spec = sagessd::training::TrainSpec::new(&dir);
            spec.storage = sagessd::Storage::emulator(base.clone());
            design.apply(&mut spec);
            spec.compute = sagessd::training::DeviceChoice::Cpu;
            spec.threads = 1;
            spec.workers = sagessd::training::Workers::Fixed {
                sample: 1,
                gather: 1,
            };
            let command = spec.command_line(Some(config));
            let run = sagessd::training::train(&spec, &mut ()).with_context(|| command.clone())?;
            progress(&format!(
                "  {}: test accuracy {}",
                design.name(),
                run.outcome
                    .test_accuracy
                    .map_or("-".into(), |a| format!("{a:.4}"))
            ));
            trained.push(Trained {
                design,
                device: base.device.name.clone(),
                test_accuracy: run.outcome.test_accuracy,
                command,
            });
        }
        Ok(trained)
    }
}

/// The report's accuracy section: a row a design, with the command that reruns it.
fn accuracy_report(trained: &[Trained]) -> String {
    let mut out = String::from(
        "## Accuracy: real training on Cora\n\nGraphSAGE trained for real (libtorch, this machine's CPU) on Cora with each design's sampler on the same hardware descriptions; every design samples the same minibatches, so every design reaches the same accuracy.\n\n| design | device | test accuracy | command |\n|---|---|---:|---|\n",
    );
    for t in trained {
        out += &format!(
            "| {} | {} | {} | `{}` |\n",
            t.design.name(),
            t.device,
            t.test_accuracy.map_or("-".into(), |a| format!("{a:.4}")),
            t.command
        );
    }
    out
}
