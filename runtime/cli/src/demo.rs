//! `sagessd demo`: its flags and table (the run is `sagessd_experiments::demo`'s). The README's
//! main job: SmartSAGE's design points (DRAM-only, mmap, direct
//! I/O, in-storage sampling on the emulated Cosmos+ and on its Newport-class sibling) feeding a
//! GNN trainer, on a graph of 1.12 GiB (`synthetic:16M`, the emulated flash computes it) that
//! the host page cache holds an eighth of, the controller the hardware description's own: per
//! design the modelled time per minibatch end to end, its speedup over mmap and share of
//! DRAM-only's, and the trainer's idle share (steps priced on the `[trainer]` accelerator,
//! `sagessd_experiments::end_to_end_at_scale`). Nothing trains on that graph (it has no features);
//! the accuracy column is a real GraphSAGE trained on Cora with the same design's sampler on the
//! same devices, as the demo says. About half a minute (release build).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use sagessd_experiments::compare_rows::regime_fields;

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

/// Runs `demo` (`sagessd_experiments::demo`) and prints its table.
pub(crate) fn run(a: DemoArgs) -> anyhow::Result<ExitCode> {
    let hw = load_hw(a.config.as_ref())?;
    eprintln!(
        "demo: SSD {} ({})",
        hw.device.name,
        hw_source(a.config.as_ref())
    );
    let wall = std::time::Instant::now();
    let command = format!(
        "sagessd demo{}",
        a.config
            .as_ref()
            .map_or(String::new(), |c| format!(" --config {}", c.display()))
    );
    let demo =
        sagessd_experiments::demo::run(&hw, &a.out, &command, &mut |line| eprintln!("{line}"))?;
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
    for row in demo.rows() {
        let p = row.point;
        let times = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}x"));
        out.text(format!(
            "{:<18}  {:<12}  {:>17.2}  {:>9}  {:>13}  {:>11.1}%  {:>13}\n",
            p.design.name(),
            p.device,
            row.per_minibatch_ms,
            times(row.vs_mmap),
            times(row.of_dram_only),
            100.0 * p.idle_fraction,
            row.test_accuracy.map_or("-".into(), |t| format!("{t:.4}"))
        ));
        let head = Record::new("demo.design")
            .with("design", p.design.name())
            .with("device", p.device.as_str());
        let head = match row.sampling {
            Some(s) => regime_fields(head.with("r", p.ratio), &s.report),
            None => head,
        };
        out.record(
            head.with("modelled_time_per_minibatch_ns", row.per_minibatch_ms * 1e6)
                .with("speedup_vs_mmap", row.vs_mmap)
                .with("performance_vs_dram_only", row.of_dram_only)
                .with("trainer_idle_fraction", p.idle_fraction)
                .with("test_accuracy_small_graph", row.test_accuracy)
                .with("timing", "modelled"),
        )?;
    }
    out.text(format!("{}\n", demo.regime));
    out.text(format!(
        "samples identical: yes (every design's {} minibatches byte-identical to the in-memory reference's; checksum {:#018x})\n",
        demo.sweep.batches, demo.checksum
    ));
    out.record(
        Record::new("demo.samples")
            .with("minibatches", demo.sweep.batches)
            .with("samples_identical", true)
            .with("checksum", format!("{:#018x}", demo.checksum)),
    )?;
    out.note(format!(
        "modelled times (the producers' virtual time on the emulated device and host, each step priced on the [trainer] accelerator, GraphSAGE 128-256-172); test accuracy: GraphSAGE trained for real (this machine's CPU) on Cora with each design's sampler on the same devices, `sagessd train`'s defaults (the big graph has no features; every design samples the same minibatches, so every design reaches the same accuracy). Plot: {}; the rest in {} ({:.0} s wall clock)",
        demo.plot.display(),
        demo.report.display(),
        wall.elapsed().as_secs_f64()
    ));
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
