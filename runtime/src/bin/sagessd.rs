//! The `sagessd` command-line tool.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use sagessd_emulator::HwConfig;
use sagessd_runtime::demo::{self, DemoConfig, DemoEvent};

/// sagessd: GNN neighbour sampling inside an (emulated) computational SSD.
#[derive(Debug, Parser)]
#[command(name = "sagessd", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate an R-MAT graph, load it on an emulated SSD, and compare host-over-device sampling
    /// with in-storage (ISP) sampling: modelled time, NVMe commands, PCIe bytes, flash pages, and
    /// byte-identity of every sampled subgraph against the in-memory reference.
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// R-MAT scale: the graph has 2^SCALE nodes.
    #[arg(long, default_value_t = 16)]
    scale: u32,
    /// R-MAT edges drawn per node before symmetrisation and deduplication.
    #[arg(long, default_value_t = 8)]
    edge_factor: u32,
    /// Seed of the generated graph.
    #[arg(long, default_value_t = 1)]
    graph_seed: u64,
    /// Number of minibatches to sample with each sampler.
    #[arg(long, default_value_t = 8)]
    batches: u32,
    /// Target nodes per minibatch.
    #[arg(long, default_value_t = 1024)]
    batch_size: u32,
    /// Fanout per layer, hop order (first the targets' neighbours), comma-separated; 1 to 4 layers.
    #[arg(long, value_delimiter = ',', default_value = "10,10,10")]
    fanouts: Vec<u16>,
    /// Seed of target selection and of the sampling function.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Hardware description (TOML) of the emulated SSD; default: the built-in Cosmos+ OpenSSD
    /// (hw-configs/cosmos-plus.toml).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Do not draw progress bars.
    #[arg(long)]
    quiet: bool,
}

fn main() -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match Cli::parse().command {
        Command::Demo(args) => run_demo(args),
    }
}

fn run_demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let hw = match &args.config {
        Some(path) => HwConfig::load(path)
            .with_context(|| format!("loading hardware description {}", path.display()))?,
        None => HwConfig::cosmos_plus(),
    };
    let config = DemoConfig {
        scale: args.scale,
        edge_factor: args.edge_factor,
        graph_seed: args.graph_seed,
        batches: args.batches,
        batch_size: args.batch_size,
        fanouts: args.fanouts,
        seed: args.seed,
        hw,
    };
    let config_arg = args.config.as_ref().map(|p| p.display().to_string());

    let mut bar: Option<ProgressBar> = None;
    let quiet = args.quiet;
    let mut on_event = |event: DemoEvent<'_>| match event {
        DemoEvent::Phase { name, total, bytes } if !quiet => {
            let b = if total == 0 {
                let b = ProgressBar::new_spinner();
                b.enable_steady_tick(std::time::Duration::from_millis(100));
                b
            } else {
                let b = ProgressBar::new(total);
                let template = if bytes {
                    "{msg:40} [{bar:30}] {bytes}/{total_bytes} ({eta})"
                } else {
                    "{msg:40} [{bar:30}] {pos}/{len} ({eta})"
                };
                b.set_style(
                    ProgressStyle::with_template(template)
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                );
                b
            };
            b.set_message(name.to_string());
            bar = Some(b);
        }
        DemoEvent::Progress { done } => {
            if let Some(b) = &bar {
                b.set_position(done);
            }
        }
        DemoEvent::PhaseDone => {
            if let Some(b) = bar.take() {
                b.finish_and_clear();
            }
        }
        DemoEvent::Phase { .. } => {}
    };
    let wall = std::time::Instant::now();
    let report = demo::run(&config, config_arg.as_deref(), &mut on_event)?;
    let mut stdout = std::io::stdout().lock();
    write!(stdout, "{}", report.render())?;
    stdout.flush()?;
    drop(stdout);
    // Wall time is not part of the deterministic report: it goes to stderr, labelled.
    eprintln!(
        "(wall-clock time of this run, not modelled: {:.1} s)",
        wall.elapsed().as_secs_f64()
    );
    if let Some(m) = &report.mismatch {
        eprintln!(
            "error: minibatch {} differs between {} and {}; replay with: {}",
            m.batch, m.sampler, m.against, m.replay
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
