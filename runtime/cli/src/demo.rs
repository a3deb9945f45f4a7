//! `sagessd demo`: the README's main job. SmartSAGE's design points (DRAM-only, mmap, direct
//! I/O, in-storage sampling on the emulated Cosmos+ and on its Newport-class sibling) feeding a
//! GNN trainer, on a graph of 1.12 GiB (`synthetic:16M`, the emulated flash computes it) that
//! the host page cache holds an eighth of, the controller the hardware description's own: per
//! design the modelled time per minibatch end to end, its speedup over mmap and share of
//! DRAM-only's, and the trainer's idle share (steps priced on the `[trainer]` accelerator,
//! `sagessd_experiments::end_to_end_at_scale`). Nothing trains on that graph (it has no features);
//! the accuracy column is a real GraphSAGE trained with the same design's sampler on a small
//! generated, labelled graph, as the demo says. About a minute (release build).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::records::{FormatArgs, Output, Record};
use crate::{hw_source, load_hw};
use sagessd_experiments::{end_to_end, end_to_end_at_scale, smartsage};

/// Flags of `demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Where the run's CSVs, plots, report and generated dataset go.
    #[arg(long, value_name = "DIR", default_value = "target/demo")]
    out: PathBuf,
    /// Hardware description of the SSD (default: the built-in Cosmos+ OpenSSD); the oracle
    /// design runs on the built-in Newport-class description.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(flatten)]
    output: FormatArgs,
}

/// Runs `demo`.
pub(crate) fn run(a: DemoArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        cfg!(feature = "train"),
        "demo trains a GNN, and this sagessd was built without the `train` feature (libtorch); `sagessd compare` samples without training"
    );
    let hw = load_hw(a.config.as_ref())?;
    let sweep = smartsage::Sweep::demo();
    let small = end_to_end::Sweep::demo();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let wall = std::time::Instant::now();
    eprintln!(
        "demo: {} at r = {} (host page cache 1/{} of it), {} minibatches of {}, fanouts {:?}, {:?} host workers; SSD {} ({}), oracle on newport",
        sweep.graph.describe(),
        sweep.ratios[0],
        sweep.ratios[0],
        sweep.batches,
        sweep.batch_size,
        sweep.fanouts,
        sweep.workers,
        hw.device.name,
        hw_source(a.config.as_ref())
    );
    let sampling = smartsage::run(&hw, &sweep, &mut |line| eprintln!("{line}"))?;
    let at_scale =
        end_to_end_at_scale::section(&hw, &sampling, &a.out, &mut |line| eprintln!("{line}"))?;
    eprintln!(
        "demo: accuracy: GraphSAGE trained with each design's sampler on a generated labelled graph (R-MAT scale {}, {} features, {} classes), {} epochs",
        small.scale, small.feature_dim, small.classes, small.epochs
    );
    let trained = end_to_end::section(&hw, &small, &a.out, false, &mut |line| eprintln!("{line}"))?;
    let points = &at_scale.points;
    let regime = sampling
        .first()
        .map(|p| {
            let c = &p.report.config;
            format!(
                "{} ({}) at r = {}: host page cache {}, a minibatch's footprint {:.1} % of it; controller page buffer {}",
                c.graph.word(),
                sagessd_runtime::compare::human_bytes(p.report.graph_bytes()),
                p.ratio,
                sagessd_runtime::compare::human_bytes(c.hw.host.page_cache_bytes),
                100.0 * p.report.footprint.share_of(c.hw.host.page_cache_bytes),
                sagessd_runtime::compare::human_bytes(
                    u64::from(c.hw.firmware.page_buffer_pages)
                        * u64::from(c.hw.nand.page_size_bytes)
                )
            )
        })
        .unwrap_or_default();
    let mut out = Output::new(a.output.format());
    out.text(format!(
        "{:<18}  {:<12}  {:>17}  {:>9}  {:>13}  {:>12}  {:>13}\n",
        "design",
        "device",
        "ms per minibatch",
        "vs mmap",
        "of DRAM-only",
        "trainer idle",
        "test accuracy"
    ));
    for p in points {
        let times = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}x"));
        let accuracy = trained
            .points
            .iter()
            .find(|t| t.design == p.design)
            .and_then(|t| t.test_accuracy);
        let per_minibatch_ms = 1e3 * p.epoch_s / f64::from(sweep.batches.max(1));
        out.text(format!(
            "{:<18}  {:<12}  {:>17.2}  {:>9}  {:>13}  {:>11.1}%  {:>13}\n",
            p.design.name(),
            p.device,
            per_minibatch_ms,
            times(end_to_end::speedup_vs_mmap(points, p)),
            times(end_to_end::of_dram_only(points, p)),
            100.0 * p.idle_fraction,
            accuracy.map_or("-".into(), |t| format!("{t:.4}"))
        ));
        let head = Record::new("demo.design")
            .with("design", p.design.name())
            .with("device", p.device.as_str());
        let head = match sampling.iter().find(|s| s.ratio == p.ratio) {
            Some(s) => {
                sagessd_experiments::compare_rows::regime_fields(head.with("r", p.ratio), &s.report)
            }
            None => head,
        };
        out.record(
            head.with("modelled_time_per_minibatch_ns", per_minibatch_ms * 1e6)
                .with("speedup_vs_mmap", end_to_end::speedup_vs_mmap(points, p))
                .with(
                    "performance_vs_dram_only",
                    end_to_end::of_dram_only(points, p),
                )
                .with("trainer_idle_fraction", p.idle_fraction)
                .with("test_accuracy_small_graph", accuracy)
                .with("timing", "modelled"),
        )?;
    }
    out.text(format!("{regime}\n"));
    let report = a.out.join("report.md");
    std::fs::write(
        &report,
        format!(
            "# sagessd demo\n\n`sagessd demo{}`: {regime}.\n\n{}\n## Accuracy: real training on a small labelled graph\n\n{}",
            a.config
                .as_ref()
                .map_or(String::new(), |c| format!(" --config {}", c.display())),
            at_scale.report,
            trained.report
        ),
    )
    .with_context(|| format!("writing {}", report.display()))?;
    out.note(format!(
        "modelled times (the producers' virtual time on the emulated device and host, each step priced on the [trainer] accelerator, GraphSAGE 128-256-172); test accuracy: the same designs' samplers training GraphSAGE for real (this machine's CPU) on a small generated labelled graph, the big one having no features. Plot: {}; the rest in {} ({:.0} s wall clock)",
        a.out.join("fig18_end_to_end_at_scale_".to_string() + &sagessd_experiments::file_safe(&hw.device.name) + ".svg").display(),
        report.display(),
        wall.elapsed().as_secs_f64()
    ));
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
