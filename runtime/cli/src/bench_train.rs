//! `sagessd bench train`: its flags and table; the measurement is
//! `sagessd_experiments::bench_train`'s. Training throughput on this machine's CPU, by the wall
//! clock: the
//! in-memory sampler's minibatches per second, GraphSAGE's training steps per second on
//! minibatches sampled and gathered beforehand, and the whole pipeline's minibatches per second
//! (sampling, feature gather from the dataset's file, training) with `--workers auto` and with
//! one worker per stage.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use sagessd_experiments::bench_train::{self, Settings};
use sagessd_runtime::dataset::Dataset;

/// Flags of `bench train`.
#[derive(Debug, Args)]
pub(crate) struct BenchTrainArgs {
    /// The dataset (features, labels, a train split); default: an R-MAT dataset of --scale
    /// generated once under target/bench/.
    #[arg(long, value_name = "DIR")]
    dataset: Option<PathBuf>,
    /// Without --dataset: R-MAT scale (edge factor 8, 64 f32 features, 8 classes).
    #[arg(long, default_value_t = 16)]
    scale: u32,
    /// Minibatches timed per measurement.
    #[arg(long, default_value_t = 20)]
    batches: usize,
    /// Targets per minibatch.
    #[arg(long, default_value_t = 1024)]
    batch_size: usize,
    /// GraphSAGE's hidden width.
    #[arg(long, default_value_t = 64)]
    hidden: i64,
    /// libtorch's CPU threads.
    #[arg(long, default_value_t = 1)]
    threads: i32,
}

/// `bench train`.
pub(crate) fn run_bench_train(a: BenchTrainArgs) -> anyhow::Result<ExitCode> {
    let dataset = match &a.dataset {
        Some(dir) => Dataset::open(dir)?,
        None => bench_train::generated(
            &PathBuf::from(format!("target/bench/rmat-{}-8-f64", a.scale)),
            a.scale,
            &mut |line| eprintln!("{line}"),
        )?,
    };
    let m = &dataset.manifest;
    let dim = dataset.feature_shape()?.map_or(0, |(dim, _)| dim);
    println!(
        "bench train: {} ({} nodes, {} CSR entries, {dim} features, {} classes), GraphSAGE hidden {}, batch {}, {} minibatches per figure, {} libtorch thread(s); WALL CLOCK on this machine",
        m.name,
        m.node_count,
        m.edge_count,
        m.class_count.unwrap_or(0),
        a.hidden,
        a.batch_size,
        a.batches,
        a.threads.max(1)
    );
    let rows = bench_train::measure(
        &dataset,
        &Settings {
            batches: a.batches,
            batch_size: a.batch_size,
            hidden: a.hidden,
            threads: a.threads,
        },
    )?;
    println!(
        "{:<10} {:>16} {:>14} {:>14} {:>16} {:>16} {:>8}",
        "fanouts", "sampled mb/s", "steps/s", "copy ms/mb", "pipeline 1 mb/s", "auto mb/s", "auto"
    );
    for r in rows {
        println!(
            "{:<10} {:>16.1} {:>14.2} {:>14.2} {:>16.2} {:>16.2} {:>8}",
            sagessd_experiments::compare_rows::join_fanouts(&r.fanouts),
            r.sampled_per_s,
            r.steps_per_s,
            r.copy_ms,
            r.pipeline_one_per_s,
            r.pipeline_auto_per_s,
            format!("{}+{}", r.auto_workers.0, r.auto_workers.1),
        );
    }
    println!(
        "sampled mb/s: the in-memory sampler alone; steps/s: forward, backward and Adam on minibatches sampled and gathered beforehand (after 3 untimed steps, as before each pipeline run); copy: building a minibatch's tensors; pipeline: sampling, feature gather (BGL cache over the features file) and training, 1 worker per stage or --workers auto (sampling+gather workers chosen)"
    );
    Ok(ExitCode::SUCCESS)
}
