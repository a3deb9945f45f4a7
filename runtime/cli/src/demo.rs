//! `sagessd demo`: the README's main job. A GNN trained end to end on a graph that memory
//! holds an eighth of, fed by each of SmartSAGE's design points (DRAM-only, mmap, direct I/O,
//! in-storage sampling on the emulated Cosmos+ and on its Newport-class sibling): accuracy,
//! modelled epoch and trainer idle per design, one plot, in about 10 s (release build).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::experiment::end_to_end::{self, Sweep};
use crate::records::{FormatArgs, Output, Record};
use crate::{hw_source, load_hw};

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
    let sweep = Sweep::demo();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let wall = std::time::Instant::now();
    eprintln!(
        "demo: GraphSAGE on a generated graph (R-MAT scale {}, {} features, {} classes) that memory holds 1/{} of, {} epochs per design point; SSD {} ({}), oracle on newport",
        sweep.scale,
        sweep.feature_dim,
        sweep.classes,
        sweep.ratios[0],
        sweep.epochs,
        hw.device.name,
        hw_source(a.config.as_ref())
    );
    let section = end_to_end::section(&hw, &sweep, &a.out, false)?;
    let points = &section.points;
    let mut out = Output::new(a.output.format());
    out.text(format!(
        "{:<18}  {:<12}  {:>18}  {:>11}  {:>14}  {:>12}  {:>13}\n",
        "design",
        "device",
        "modelled epoch",
        "vs mmap",
        "of DRAM-only",
        "trainer idle",
        "test accuracy"
    ));
    for p in points {
        let times = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}x"));
        out.text(format!(
            "{:<18}  {:<12}  {:>16.2} ms  {:>11}  {:>14}  {:>11.1}%  {:>13}\n",
            p.design.name(),
            p.device,
            1e3 * p.epoch_s,
            times(end_to_end::speedup_vs_mmap(points, p)),
            times(end_to_end::of_dram_only(points, p)),
            100.0 * p.idle_fraction,
            p.test_accuracy.map_or("-".into(), |t| format!("{t:.4}"))
        ));
        out.record(
            Record::new("demo.design")
                .with("design", p.design.name())
                .with("device", p.device.as_str())
                .with("graph_to_memory_ratio", p.ratio)
                .with("modelled_epoch_s", p.epoch_s)
                .with("speedup_vs_mmap", end_to_end::speedup_vs_mmap(points, p))
                .with(
                    "performance_vs_dram_only",
                    end_to_end::of_dram_only(points, p),
                )
                .with("trainer_idle_fraction", p.idle_fraction)
                .with("test_accuracy", p.test_accuracy)
                .with("timing", "modelled"),
        )?;
    }
    let report = a.out.join("report.md");
    std::fs::write(
        &report,
        format!(
            "# sagessd demo\n\n`sagessd demo{}`\n\n{}",
            a.config
                .as_ref()
                .map_or(String::new(), |c| format!(" --config {}", c.display())),
            section.report
        ),
    )
    .with_context(|| format!("writing {}", report.display()))?;
    out.note(format!(
        "modelled epochs (the producer's virtual time, each step priced on the [trainer] accelerator); accuracy from real training on this machine's CPU; every design trains on the same minibatches. Plot: {}; the rest in {} ({:.0} s wall clock)",
        a.out.join("fig18_end_to_end_".to_string() + &crate::experiment::file_safe(&hw.device.name) + ".svg").display(),
        report.display(),
        wall.elapsed().as_secs_f64()
    ));
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
