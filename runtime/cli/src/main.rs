//! The `sagessd` command-line tool.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use sagessd::compare::{self, CompareConfig, Event};
use sagessd_emulator::HwConfig;
use sagessd_host_driver::{DeviceUri, Endpoint};
use sagessd_runtime::graph_spec::GraphSpec;
use sagessd_runtime::registry::SamplerKind;
use sagessd_runtime::rmat::RmatParams;

/// mimalloc: the samplers allocate and free multi-MiB buffers every minibatch. glibc's malloc
/// hands such memory back to the kernel and then faults it in again, zeroed, page by page (a
/// third of the in-memory sampler's time); mimalloc keeps and reuses it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
#[cfg(feature = "train")]
mod bench_step;
#[cfg(feature = "train")]
mod bench_train;
mod calibrate;
mod child_target;
mod dataset;
mod demo;
mod device;
mod emulator;
mod experiment;
mod firmware;
mod host_compute;
mod records;
mod sample;
mod storage;
#[cfg(feature = "train")]
mod train;
mod validate;
mod workload_args;

/// sagessd: GNN neighbour sampling inside an (emulated) computational SSD.
#[derive(Debug, Parser)]
#[command(name = "sagessd", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The top-level subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// The main job: a GNN trained end to end on a graph that memory holds an eighth of, fed
    /// by each of SmartSAGE's design points (DRAM-only, mmap, direct I/O, in-storage sampling on
    /// the emulated Cosmos+ and on a Newport-class device); accuracy, modelled epoch and trainer
    /// idle per design, a plot and a report (needs the `train` feature).
    Demo(demo::DemoArgs),
    /// Compare the host sampling modes (mmap, direct I/O, io_uring-style async) and in-storage
    /// sampling (ISP), with one and several host workers contending for one emulated SSD (by
    /// default 1 and 4): modelled time per minibatch, ISP speedup, NVMe commands, PCIe bytes,
    /// flash pages, page-cache hits and embedded-core utilisation; every subgraph checked byte
    /// for byte against the in-memory reference (exit status 1 on a mismatch). With --device,
    /// in-storage sampling through a real transport.
    Compare(CompareArgs),
    /// The board firmware: what it needs on a real SSD controller.
    #[command(subcommand)]
    Firmware(firmware::FirmwareCommand),
    /// The emulated device: its derived limits, its validation against them, the simulator's
    /// speed.
    #[command(subcommand)]
    Device(device::DeviceCommand),
    /// The emulator as a device other programs reach.
    #[command(subcommand)]
    Emulator(emulator::EmulatorCommand),
    /// Write an NS_config payload to a file and print the NS_SUBMIT command dwords that carry
    /// it, for sending by hand (`nvme io-passthru --opcode=0x85 ...`).
    NsConfig(NsConfigArgs),
    /// Datasets: generate one, import one, describe one.
    #[command(subcommand)]
    Dataset(dataset::DatasetCommand),
    /// Check the model against the real thing: `validate host` sets the modelled host I/O
    /// stack beside the Linux kernel's counts on this machine.
    #[command(subcommand)]
    Validate(validate::ValidateCommand),
    /// Rerun a seed's comparisons on the emulated devices: one CSV per figure and a report
    /// setting each figure beside the paper's value (modelled time).
    Experiment(experiment::ExperimentArgs),
    /// Benchmarks measured on this machine's WALL CLOCK (not modelled time).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Sample a dataset from its files on this machine's storage (out of core) with one or
    /// more samplers, and print each one's storage I/O (reads, sizes, bytes read vs used,
    /// graph-buffer hits, system calls), wall-clock time split into I/O wait and compute, and
    /// peak memory; every subgraph is checked against the first sampler's. With --on-device,
    /// on an NVMe device: the in-process emulator in modelled time, or any other by the wall
    /// clock.
    Sample(sample::SampleArgs),
    /// Train a GNN (GraphSAGE, GCN, GAT; libtorch on the CPU or CUDA) on minibatches from any
    /// sampler, on files or on an NVMe device, through the producer/consumer pipeline; per
    /// epoch: loss, accuracy, wall-clock stage times, trainer idle, and on the in-process
    /// emulator the modelled epoch.
    #[cfg(feature = "train")]
    Train(Box<train::TrainArgs>),
    /// Train a GNN: not in this build, which was made without the `train` feature (libtorch).
    #[cfg(not(feature = "train"))]
    #[command(disable_help_flag = true)]
    Train {
        /// Whatever flags were given: the command refuses before reading them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
}

/// Flags of `ns-config`.
#[derive(Debug, Args)]
struct NsConfigArgs {
    /// Seed of the sampling function.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fanout per layer, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10,10")]
    fanouts: Vec<u16>,
    /// Target node ids, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    targets: Vec<u64>,
    /// Where to write the payload.
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
}

/// The flags of `compare` but its worker counts.
#[derive(Debug, Args)]
struct RunArgs {
    /// The graph: rmat:SCALE[:EDGE_FACTOR[:SEED]], synthetic:NODES[,seed=S][,local-bins=B]
    /// [,profile=FILE] (a graph the emulator's flash computes, following a real graph's degree
    /// and neighbour-gap profile; cnr-2000 by default), papers100m (synthetic:111059956), or a
    /// dataset folder. Without it, the R-MAT of --scale, --edge-factor and --graph-seed.
    // clap's help text, not intra-doc links.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, value_name = "GRAPH")]
    graph: Option<String>,
    /// R-MAT scale: the graph has 2^SCALE nodes.
    #[arg(long, default_value_t = 16)]
    scale: u32,
    /// R-MAT edges drawn per node before symmetrisation and deduplication.
    #[arg(long, default_value_t = 8)]
    edge_factor: u32,
    /// Seed of the generated graph.
    #[arg(long, default_value_t = 1)]
    graph_seed: u64,
    /// Number of minibatches each mode samples (shared among its workers).
    #[arg(long, default_value_t = 8)]
    batches: u32,
    /// Minibatches each mode samples first and does not count, so that the page cache and the
    /// controller's page buffer are warm (drawn after the counted ones: those stay the same).
    #[arg(long, default_value_t = 0)]
    warmup_batches: u32,
    /// Target nodes per minibatch.
    #[arg(long, default_value_t = 1024)]
    batch_size: u32,
    /// Fanout per layer, hop order (first the targets' neighbours), comma-separated; 1 to 4 layers.
    #[arg(long, value_delimiter = ',', default_value = "10,10,10")]
    fanouts: Vec<u16>,
    /// Seed of target selection and of the sampling function.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Hardware description (TOML) of the emulated SSD, its optional `[host]` table (the host I/O
    /// stack) included; default: the built-in Cosmos+ OpenSSD (hw-configs/cosmos-plus.toml).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Modes to run, comma-separated, in this order: mmap (page cache), direct (O_DIRECT reads at
    /// QD 1), uring (io_uring batches), isp (in-storage sampling), isp-ids (in-storage
    /// sampling returning sampled ids, the host building the subgraph); also memory (the graph
    /// resident in host memory: the in-memory baseline) and isp-hyperbatch (in-storage
    /// hyperbatches of --hyperbatch minibatches, one NS_config each). The old names dram
    /// (memory) and async (uring) are still accepted, deprecated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "mmap,direct,uring,isp,isp-ids",
        value_parser = parse_modelled_mode
    )]
    mode: Vec<SamplerKind>,
    /// Minibatches per in-storage hyperbatch (--mode isp-hyperbatch).
    #[arg(long, default_value_t = sagessd_runtime::host_io::DEFAULT_HYPERBATCH)]
    hyperbatch: usize,
    /// Do not draw progress bars.
    #[arg(long)]
    quiet: bool,
    /// Sample in storage on this device instead of comparing modes on an in-process emulated
    /// SSD: tcp://HOST:PORT/NQN[?digest=1] (NVMe/TCP) or passthru:/dev/ngXnY (Linux NVMe
    /// passthrough); `local:` is the default comparison. `?tunnel=1` on any of them carries the
    /// sampling in Writes and Reads to the device's tunnel window.
    #[arg(long, value_name = "URI")]
    device: Option<DeviceUri>,
    #[command(flatten)]
    output: records::FormatArgs,
}

/// Flags of `compare`: the shared ones, with 1 and 4 workers by default.
#[derive(Debug, Args)]
struct CompareArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Host worker counts, comma-separated (each mode runs with each count).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    workers: Vec<usize>,
}

impl RunArgs {
    /// The comparison engine's configuration: these flags, with `hw`, `modes` and `workers`.
    fn compare_config(
        &self,
        hw: HwConfig,
        modes: Vec<SamplerKind>,
        workers: Vec<usize>,
    ) -> anyhow::Result<CompareConfig> {
        let graph = match &self.graph {
            Some(word) => GraphSpec::parse(word).map_err(anyhow::Error::msg)?,
            None => GraphSpec::Rmat(RmatParams::graph500(
                self.scale,
                self.edge_factor,
                self.graph_seed,
            )),
        };
        Ok(CompareConfig {
            graph,
            batches: self.batches,
            warmup_batches: self.warmup_batches,
            batch_size: self.batch_size,
            fanouts: self.fanouts.clone(),
            seed: self.seed,
            hw,
            modes,
            workers,
            hyperbatch: self.hyperbatch,
        })
    }
}

/// A `--mode`: a sampler by its name or an old one (the comparison refuses those the modelled
/// host does not run).
fn parse_modelled_mode(name: &str) -> Result<SamplerKind, String> {
    SamplerKind::from_name(name.trim()).ok_or_else(|| {
        let modes: Vec<&str> = SamplerKind::modelled().map(SamplerKind::name).collect();
        format!("unknown mode (modes: {})", modes.join(", "))
    })
}

/// Runs the comparison engine (`compare`): the report on stdout, progress bars and
/// the wall-clock time on stderr.
fn run_compare(args: RunArgs, workers: Vec<usize>) -> anyhow::Result<ExitCode> {
    if let Some(uri) = args
        .device
        .clone()
        .filter(|u| u.endpoint != Endpoint::Local || u.tunnel)
    {
        return run_on_device(args, &uri);
    }
    let modes = args.mode.clone();
    let config = args.compare_config(load_hw(args.config.as_ref())?, modes, workers)?;
    let config_arg = args.config.as_ref().map(|p| p.display().to_string());

    let mut bar: Option<ProgressBar> = None;
    let quiet = args.quiet;
    let mut on_event = |event: Event<'_>| match event {
        Event::Phase { name, total, bytes } if !quiet => {
            let b = if total == 0 {
                let b = ProgressBar::new_spinner();
                b.enable_steady_tick(std::time::Duration::from_millis(100));
                b
            } else {
                let b = ProgressBar::new(total);
                let template = if bytes {
                    "{msg:40} [{bar:30}] {bytes}/{total_bytes} ({eta})"
                } else {
                    "{msg:40} [{bar:30}] {pos}/{len} minibatches ({eta})"
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
        Event::Progress { done } => {
            if let Some(b) = &bar {
                b.set_position(done);
            }
        }
        Event::PhaseDone => {
            if let Some(b) = bar.take() {
                b.finish_and_clear();
            }
        }
        Event::Phase { .. } => {}
    };
    let wall = std::time::Instant::now();
    let report = compare::run(&config, config_arg.as_deref(), &mut on_event)?;
    let mut out = records::Output::new(args.output.format());
    out.text(report.render());
    for record in sagessd_experiments::compare_rows::compare_records(&report) {
        out.record(record)?;
    }
    out.finish()?;
    // Wall time is not part of the deterministic report: it goes to stderr, labelled.
    eprintln!(
        "(wall-clock time of this run, not modelled: {:.1} s)",
        wall.elapsed().as_secs_f64()
    );
    if let Some(m) = &report.mismatch {
        eprintln!(
            "error: {} with {} worker(s) differs from the in-memory reference on minibatch {}; replay with: {}",
            m.mode.name(),
            m.workers,
            m.batch,
            m.replay
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Parses the command line and runs the subcommand.
fn main() -> anyhow::Result<ExitCode> {
    // Die quietly when stdout is a closed pipe (`sagessd ... | head`), like other Unix tools,
    // instead of panicking on the failed write.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match Cli::parse().command {
        Command::Demo(args) => demo::run(args),
        Command::Compare(args) => run_compare(args.run, args.workers),
        Command::Firmware(command) => firmware::run(command),
        Command::Experiment(args) => experiment::run(args),
        Command::Device(command) => device::run(command),
        Command::Emulator(command) => emulator::run(command),
        Command::NsConfig(args) => run_ns_config(args),
        Command::Dataset(command) => dataset::run(command),
        Command::Validate(command) => validate::run(command),
        Command::Bench(command) => bench::run(command),
        Command::Sample(args) => sample::run_sample(args),
        #[cfg(feature = "train")]
        Command::Train(args) => train::run_train(*args),
        #[cfg(not(feature = "train"))]
        Command::Train { .. } => anyhow::bail!(
            "this sagessd was built without the `train` feature, so it cannot train (it does not \
             link libtorch): build it with its default features, `cargo build --release -p \
             sagessd`, after scripts/setup.sh has installed libtorch"
        ),
    }
}

/// `ns-config`: the payload and the dwords of one NS_SUBMIT.
fn run_ns_config(args: NsConfigArgs) -> anyhow::Result<ExitCode> {
    let (sqe, payload) =
        sagessd_host_driver::ns::ns_submit(args.seed, &args.fanouts, &args.targets)?;
    std::fs::write(&args.output, &payload)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    println!(
        "opcode=0x{:02x} data-len={} cdw10={} cdw12={} file={}",
        sqe.opcode,
        payload.len(),
        sqe.cdw10.get(),
        sqe.cdw12.get(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `demo --device URI` on a device behind a real transport: in-storage sampling only.
fn run_on_device(args: RunArgs, uri: &DeviceUri) -> anyhow::Result<ExitCode> {
    let hw = load_hw(args.config.as_ref())?;
    let name = uri.to_string();
    let mut device = sagessd_host_driver::open_device(uri, &hw)?;
    let config = args.compare_config(hw, vec![SamplerKind::Isp], vec![1])?;
    let report = compare::run_on_device(&config, &mut device, &name, &mut |_| {})?;
    let mut out = records::Output::new(args.output.format());
    out.text(report.render());
    out.record(
        records::Record::new("compare.device")
            .with("device", report.device.as_str())
            .with("minibatches", report.minibatches)
            .with("wall_ns_per_minibatch", report.wall_ns_per_minibatch)
            .with("subgraph_bytes", report.subgraph_bytes)
            .with("checksum", format!("{:#018x}", report.checksum))
            .with("first_mismatch_minibatch", report.mismatch)
            .with("timing", "wall clock"),
    )?;
    out.finish()?;
    Ok(if report.mismatch.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Loads the hardware description named on the command line, or the built-in Cosmos+.
fn load_hw(config: Option<&PathBuf>) -> anyhow::Result<HwConfig> {
    match config {
        Some(path) => HwConfig::load(path)
            .with_context(|| format!("loading hardware description {}", path.display())),
        None => Ok(HwConfig::cosmos_plus()),
    }
}

/// Names the hardware description for the tables: the path, or the built-in one.
fn hw_source(config: Option<&PathBuf>) -> String {
    config.map_or("built-in hw-configs/cosmos-plus.toml".to_string(), |p| {
        p.display().to_string()
    })
}
