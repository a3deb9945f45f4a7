//! `sagessd bench`: benchmarks timed by this machine's wall clock.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

/// The `bench` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum BenchCommand {
    /// In-memory neighbour sampling throughput (minibatches/s, sampled edges/s) with T
    /// threads. Speaks the sampler-comparison harness's `--extern` protocol: given
    /// `--graph-dir` (indptr.npy, indices.npy) and `--seeds` (int64 [W+B, batch]), its last
    /// stdout line is the JSON the harness reads.
    Sampler(BenchSamplerArgs),
    /// The host's build of subgraphs from the sampled ids a device returns (`isp-ids`): wall
    /// ns per minibatch and per sampled edge, and the bytes the device returns both ways, on a
    /// generated graph (each build checked against the reference sampler first).
    HostBuild(BenchHostBuildArgs),
    /// Training throughput on this machine's CPU: the in-memory sampler's minibatches/s,
    /// GraphSAGE's training steps/s, and the whole pipeline's minibatches/s with one worker
    /// per stage and with --workers auto, at fanouts 10,10,10 and 25,10.
    #[cfg(feature = "train")]
    Train(crate::bench_train::BenchTrainArgs),
    /// GraphSAGE's training step as the `[trainer]` model prices it, per minibatch sampled from
    /// a graph; exports the shapes for `scripts/gpu/sage_step.py` (which times the same model
    /// on a GPU) and sets its measurements beside the model.
    #[cfg(feature = "train")]
    Step(crate::bench_step::BenchStepArgs),
}

/// Flags of `bench sampler`.
#[derive(Debug, Args)]
pub(crate) struct BenchSamplerArgs {
    /// Folder with `indptr.npy` (int64) and `indices.npy` (int32 or int64), e.g. a harness
    /// graph or a sagessd dataset.
    #[arg(long, value_name = "DIR")]
    graph_dir: Option<PathBuf>,
    /// Minibatch seeds, int64 [warmup + batches, batch size] (default: drawn here).
    #[arg(long, value_name = "FILE")]
    seeds: Option<PathBuf>,
    /// Without --graph-dir: R-MAT scale of the graph generated here.
    #[arg(long, default_value_t = 22)]
    scale: u32,
    /// Without --graph-dir: R-MAT edge factor.
    #[arg(long, default_value_t = 16)]
    edge_factor: u32,
    /// Fanouts in hop order.
    #[arg(long, value_delimiter = ',', default_value = "10,10,10")]
    fanouts: Vec<u16>,
    /// Sampling threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Untimed minibatches per run.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Timed minibatches per run.
    #[arg(long, default_value_t = 200)]
    batches: usize,
    /// Runs (the summary reports the median).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Without --seeds: targets per minibatch.
    #[arg(long, default_value_t = 1000)]
    batch_size: usize,
}

/// Flags of `bench host-build`.
#[derive(Debug, Args)]
pub(crate) struct BenchHostBuildArgs {
    /// R-MAT scale of the graph generated here.
    #[arg(long, default_value_t = 22)]
    scale: u32,
    /// R-MAT edge factor.
    #[arg(long, default_value_t = 16)]
    edge_factor: u32,
    /// Fanouts in hop order.
    #[arg(long, value_delimiter = ',', default_value = "25,10")]
    fanouts: Vec<u16>,
    /// Minibatches built per run.
    #[arg(long, default_value_t = 50)]
    batches: usize,
    /// Targets per minibatch.
    #[arg(long, default_value_t = 1024)]
    batch_size: usize,
    /// Timed runs (the summary reports the median).
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

/// Runs a `bench` subcommand.
pub(crate) fn run(command: BenchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Sampler(args) => run_bench_sampler(args),
        BenchCommand::HostBuild(args) => run_bench_host_build(args),
        #[cfg(feature = "train")]
        BenchCommand::Train(args) => crate::bench_train::run_bench_train(args),
        #[cfg(feature = "train")]
        BenchCommand::Step(args) => crate::bench_step::run_bench_step(args),
    }
}

/// `bench host-build`.
fn run_bench_host_build(a: BenchHostBuildArgs) -> anyhow::Result<ExitCode> {
    use sagessd_experiments::bench_sampler;
    anyhow::ensure!(
        a.runs > 0 && a.batches > 0,
        "--runs and --batches must be ≥ 1"
    );
    let graph = sagessd_runtime::rmat::generate(&sagessd_runtime::rmat::RmatParams::graph500(
        a.scale,
        a.edge_factor,
        1,
    ))?;
    let rows = bench_sampler::harness_seeds(&graph, a.batches, a.batch_size, 0);
    let r = bench_sampler::host_build(&graph, &rows, &a.fanouts, a.runs)?;
    let mut times = r.runs_s.clone();
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let per_mb = |x: f64| x / r.minibatches as f64;
    println!(
        "host build from sampled ids: R-MAT scale {} edge factor {} ({} nodes), fanouts {:?}, {} minibatches of {} targets, {} runs, one thread (WALL CLOCK)",
        a.scale,
        a.edge_factor,
        graph.node_count(),
        a.fanouts,
        r.minibatches,
        a.batch_size,
        a.runs
    );
    println!(
        "  median {:.3} ms a minibatch, {:.1} ns a sampled edge ({:.0} edges a minibatch)",
        per_mb(median) * 1e3,
        median * 1e9 / r.edges as f64,
        per_mb(r.edges as f64)
    );
    println!(
        "  device to host: {:.1} KiB of sampled ids a minibatch, {:.1} KiB of subgraph when the device builds it ({:.1} % less)",
        per_mb(r.ids_bytes as f64) / 1024.0,
        per_mb(r.subgraph_bytes as f64) / 1024.0,
        100.0 * (1.0 - r.ids_bytes as f64 / r.subgraph_bytes as f64)
    );
    Ok(ExitCode::SUCCESS)
}

/// `bench sampler`.
fn run_bench_sampler(a: BenchSamplerArgs) -> anyhow::Result<ExitCode> {
    use sagessd_experiments::bench_sampler::{self, BenchConfig};
    let setup = std::time::Instant::now();
    let graph = match &a.graph_dir {
        Some(dir) => bench_sampler::load_graph(dir)?,
        None => sagessd_runtime::rmat::generate(&sagessd_runtime::rmat::RmatParams::graph500(
            a.scale,
            a.edge_factor,
            1,
        ))?,
    };
    let rows = a.warmup + a.batches;
    let seeds: Vec<Vec<u64>> = match &a.seeds {
        Some(path) => bench_sampler::read_seeds(path)?,
        None => bench_sampler::harness_seeds(&graph, rows, a.batch_size, 0),
    };
    let setup_s = setup.elapsed().as_secs_f64();
    let config = BenchConfig {
        fanouts: a.fanouts.clone(),
        threads: a.threads,
        warmup: a.warmup,
        batches: a.batches,
        runs: a.runs,
    };
    anyhow::ensure!(
        a.runs > 0 && a.batches > 0,
        "--runs and --batches must be ≥ 1"
    );
    let runs = bench_sampler::run(&graph, &seeds, &config)?;
    let mut times: Vec<f64> = runs.iter().map(|r| r.time_s).collect();
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let per_batch = |x: u64| x as f64 / a.batches as f64;
    eprintln!(
        "in-memory sampler, {} nodes / {} CSR entries, fanouts {:?}, {} thread(s), {} timed minibatches x {} runs (setup {setup_s:.1} s)",
        graph.node_count(),
        graph.edge_count(),
        a.fanouts,
        a.threads,
        a.batches,
        a.runs
    );
    eprintln!(
        "  median: {:.2} minibatches/s, {:.2} M sampled edges/s (WALL CLOCK); {:.0} edges and {:.0} unique nodes per minibatch",
        a.batches as f64 / median,
        runs[0].edges as f64 / median / 1e6,
        per_batch(runs[0].edges),
        per_batch(runs[0].unique_nodes)
    );
    let entries: Vec<String> = runs
        .iter()
        .map(|r| {
            format!(
                "{{\"time_s\": {:.6}, \"edges\": {}, \"unique_nodes\": {}}}",
                r.time_s, r.edges, r.unique_nodes
            )
        })
        .collect();
    println!(
        "{{\"runs\": [{}], \"version\": \"{}\", \"impl\": \"sagessd in-memory reference sampler (Rust, {} thread(s))\"}}",
        entries.join(", "),
        env!("CARGO_PKG_VERSION"),
        a.threads
    );
    Ok(ExitCode::SUCCESS)
}
