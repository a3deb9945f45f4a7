//! The `sagessd` command-line tool.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use sagessd_emulator::HwConfig;
use sagessd_host_driver::{DeviceUri, Endpoint};

/// mimalloc: the samplers allocate and free multi-MiB buffers every minibatch. glibc's malloc
/// hands such memory back to the kernel and then faults it in again, zeroed, page by page (a
/// third of the in-memory sampler's time); mimalloc keeps and reuses it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use sagessd_runtime::compare::{self, CompareConfig, Event};
use sagessd_runtime::host_io::HostIoMode;

/// sagessd: GNN neighbour sampling inside an (emulated) computational SSD.
#[derive(Debug, Parser)]
#[command(name = "sagessd", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The quick default run of `compare`: generate an R-MAT graph (~1 M edges), load it on an
    /// emulated Cosmos+ SSD, sample the same minibatches with every host mode (mmap, direct I/O,
    /// io_uring-style async) and in-storage (ISP) with one worker, and print modelled time per
    /// minibatch, ISP speedup, NVMe commands, PCIe bytes, flash pages, page-cache hit rate and
    /// embedded-core utilisation; every subgraph checked byte for byte against the in-memory
    /// reference (exit status 1 on a mismatch).
    Demo(DemoArgs),
    /// Compare the host sampling modes (mmap, direct I/O, io_uring-style async) and in-storage
    /// sampling (ISP), with one and several host workers contending for one emulated SSD: the
    /// table of `demo`, by default with 1 and 4 workers.
    Compare(CompareArgs),
    /// The board firmware: what it needs on a real SSD controller.
    #[command(subcommand)]
    Firmware(FirmwareCommand),
    /// The emulated device: its derived limits, its validation against them, the simulator's
    /// speed.
    #[command(subcommand)]
    Device(DeviceCommand),
    /// The emulator as a device other programs reach.
    #[command(subcommand)]
    Emulator(EmulatorCommand),
    /// Write an NS_config payload to a file and print the NS_SUBMIT command dwords that carry
    /// it, for sending by hand (`nvme io-passthru --opcode=0x85 ...`).
    NsConfig(NsConfigArgs),
    /// Datasets: generate one, import one, describe one.
    #[command(subcommand)]
    Dataset(DatasetCommand),
    /// Benchmarks measured on this machine's WALL CLOCK (not modelled time).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Sample a dataset from its files on this machine's storage (out of core) with one or
    /// more samplers, and print each one's storage I/O (reads, sizes, bytes read vs used,
    /// graph-buffer hits, system calls), wall-clock time split into I/O wait and compute, and
    /// peak memory; every subgraph is checked against the first sampler's. With --on-device,
    /// on an emulated SSD in modelled time.
    Sample(SampleArgs),
}

#[derive(Debug, Args)]
struct SampleArgs {
    /// The dataset folder.
    #[arg(long, value_name = "DIR")]
    dataset: PathBuf,
    /// Samplers, comma-separated: memory (in-memory CSR), mmap (the CSR files mapped, page
    /// cache and readahead; I/O = major page faults), direct (O_DIRECT reads of the CSR
    /// sectors needed, one at a time), uring (the same reads through io_uring, a hop's reads in
    /// flight together), agnes (AGNES blocks per minibatch), hyperbatch (AGNES hyperbatches).
    #[arg(long, value_delimiter = ',', default_value = "hyperbatch,agnes,direct")]
    sampler: Vec<String>,
    /// Minibatches per hyperbatch.
    #[arg(long, default_value_t = 64)]
    hyperbatch: usize,
    /// Hyperbatch: read each block when it is needed instead of ahead through io_uring.
    #[arg(long)]
    no_prefetch: bool,
    /// AGNES block size in KiB (a multiple of 4).
    #[arg(long, default_value_t = 1024)]
    block_size: usize,
    /// Graph buffer of the AGNES samplers, MiB.
    #[arg(long, default_value_t = 64)]
    graph_buffer: usize,
    /// Minibatches.
    #[arg(long, default_value_t = 128)]
    batches: u32,
    /// Targets per minibatch.
    #[arg(long, default_value_t = 1024)]
    batch_size: u32,
    /// Fanouts in hop order.
    #[arg(long, value_delimiter = ',', default_value = "10,10,10")]
    fanouts: Vec<u16>,
    /// Seed of targets and sampling.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Minibatch targets: random (seeded, from all nodes) or bgl (BGL's proximity-aware order
    /// of the training nodes).
    #[arg(long, default_value = "random")]
    order: String,
    /// Gather the subgraphs' features after sampling: agnes (access-count-threshold cache,
    /// block reads), bgl (FIFO cache, row reads), or none.
    #[arg(long, default_value = "agnes")]
    features: String,
    /// Feature cache, MiB.
    #[arg(long, default_value_t = 64)]
    feature_cache: usize,
    /// Accesses after which the AGNES cache keeps a node's features.
    #[arg(long, default_value_t = 2)]
    feature_threshold: u32,
    /// Run on an NVMe device instead of this machine's files (an emulated SSD unless --device
    /// says otherwise): the CSR and the AGNES layout are written to it, and agnes, hyperbatch
    /// and isp (in-storage sampling) read it there.
    #[arg(long)]
    on_device: bool,
    /// With --on-device: the hardware description (default: the built-in Cosmos+).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// With --on-device: the device, `local:` (an in-process emulated SSD, modelled time), or
    /// tcp://HOST:PORT/NQN or passthru:/dev/ngXnY (a real or remote device, wall-clock time);
    /// it is overwritten from LBA 0.
    #[arg(long, value_name = "URI", default_value = "local:")]
    device: DeviceUri,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// In-memory neighbour sampling throughput (minibatches/s, sampled edges/s) with T
    /// threads. Speaks the sampler-comparison harness's `--extern` protocol: given
    /// `--graph-dir` (indptr.npy, indices.npy) and `--seeds` (int64 [W+B, batch]), its last
    /// stdout line is the JSON the harness reads.
    Sampler(BenchSamplerArgs),
}

#[derive(Debug, Args)]
struct BenchSamplerArgs {
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

#[derive(Debug, Subcommand)]
enum DatasetCommand {
    /// Generate an R-MAT graph with community-correlated labels and features (and splits) into
    /// a dataset folder.
    Generate(DatasetGenerateArgs),
    /// Import a graph into a dataset folder.
    #[command(subcommand)]
    Import(DatasetImportCommand),
    /// Write a dataset renumbered for locality (degree or BFS order), original ids kept.
    Reorder(DatasetReorderArgs),
    /// Print a dataset's manifest summary and degree statistics; `--verify` also checks every
    /// array against its checksum.
    Info(DatasetInfoArgs),
}

#[derive(Debug, Subcommand)]
enum DatasetImportCommand {
    /// A SNAP edge list (text, `#` comments, optionally `.gz`).
    Snap(SnapImportArgs),
    /// OGB-style arrays: a folder of .npy files or one .npz (edge_index or indptr/indices,
    /// node_feat, node_label, train_idx/valid_idx/test_idx).
    Ogb(SnapImportArgs),
    /// Cora from the graphdatascience==2.2 wheel (scripts/setup.sh downloads it into
    /// target/downloads/), or a folder with its two Parquet files.
    Cora(CoraImportArgs),
}

#[derive(Debug, Args)]
struct CoraImportArgs {
    /// The wheel or folder.
    #[arg(default_value = "target/downloads/graphdatascience-2.2-py3-none-any.whl")]
    input: PathBuf,
    /// Dataset folder to write.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct DatasetGenerateArgs {
    /// Dataset folder to write.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// R-MAT scale: 2^SCALE nodes.
    #[arg(long, default_value_t = 16)]
    scale: u32,
    /// Edges drawn per node.
    #[arg(long, default_value_t = 8)]
    edge_factor: u32,
    /// Seed of graph, labels, features and splits.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Feature dimension (0: none).
    #[arg(long, default_value_t = 64)]
    features: u32,
    /// Feature element type: f32 or f16.
    #[arg(long, default_value = "f32")]
    feature_dtype: String,
    /// Label classes.
    #[arg(long, default_value_t = 8)]
    classes: u32,
    /// Dataset name (default: rmat-SCALE-EDGE_FACTOR).
    #[arg(long)]
    name: Option<String>,
}

#[derive(Debug, Args)]
struct SnapImportArgs {
    /// The file (or folder) to import.
    input: PathBuf,
    /// Dataset folder to write.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Add the reverse of every edge.
    #[arg(long)]
    symmetric: bool,
}

#[derive(Debug, Args)]
struct DatasetReorderArgs {
    /// The dataset folder.
    dir: PathBuf,
    /// Order: degree (decreasing) or bfs (breadth-first from the highest-degree node).
    #[arg(long, default_value = "bfs")]
    by: String,
    /// Dataset folder to write.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct DatasetInfoArgs {
    /// The dataset folder.
    dir: PathBuf,
    /// Check every array against its CRC32C (reads everything).
    #[arg(long)]
    verify: bool,
}

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

#[derive(Debug, Subcommand)]
enum EmulatorCommand {
    /// Serve the emulated SSD as an NVMe/TCP target until SIGINT or SIGTERM: the Linux kernel's
    /// `nvme connect -t tcp`, nvme-cli and `--device tcp://HOST:PORT/NQN` attach to it.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Hardware description (TOML); default: the built-in Cosmos+ OpenSSD.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Address to listen on (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1:4420")]
    listen: String,
    /// Subsystem NQN.
    #[arg(long, default_value = sagessd_emulator::target::DEFAULT_NQN)]
    nqn: String,
    /// Complete commands no earlier than their modelled time (wall clock); default: virtual
    /// time, as fast as the host drives it.
    #[arg(long)]
    pace: bool,
    /// Device image: the flash contents and FTL state are loaded from it if it exists, and
    /// saved to it at a clean stop (SIGINT/SIGTERM), so what was written survives restarts.
    /// Without it the device starts empty and is lost at exit.
    #[arg(long, value_name = "PATH")]
    image: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum DeviceCommand {
    /// Print the limits a hardware description implies on paper (capacity, parallelism,
    /// flash-internal, PCIe and controller bandwidths, unloaded QD1 latency); simulates nothing
    /// but three single commands that tell what the firmware counts for them.
    Info(DeviceConfigArgs),
    /// Run sequential read and write, and 4 KiB random reads at QD1 and QD128, in virtual time,
    /// and print each measured figure beside its analytical bound; exit status 1 if any row is
    /// more than 2 % off (or beats its bound).
    Check(DeviceConfigArgs),
    /// Measure the simulator's own speed: simulated flash page reads per WALL-CLOCK second on
    /// one core (4 KiB random reads at QD64 over a written region of the namespace).
    Bench(DeviceBenchArgs),
}

#[derive(Debug, Args)]
struct DeviceConfigArgs {
    /// Hardware description (TOML); default: the built-in Cosmos+ OpenSSD
    /// (hw-configs/cosmos-plus.toml).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct DeviceBenchArgs {
    /// Hardware description (TOML); default: the built-in Cosmos+ OpenSSD.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Wall-clock seconds of random reads to time (after the region is written).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Flash pages written first and then read at random (the namespace's unwritten pages read
    /// as zeros without touching flash, so only written pages measure the flash model).
    #[arg(long, default_value_t = 16_384)]
    region_pages: u64,
    /// Host queue depth.
    #[arg(long, default_value_t = 64)]
    queue_depth: usize,
}

#[derive(Debug, Subcommand)]
enum FirmwareCommand {
    /// Print the DRAM the firmware needs for a hardware description, region by region, with
    /// what each region scales with (the static .text/.data/.bss footprint of the board build is
    /// printed by scripts/footprint.sh).
    Footprint(FootprintArgs),
}

#[derive(Debug, Args)]
struct FootprintArgs {
    /// Hardware description (TOML); default: the built-in Cosmos+ OpenSSD
    /// (hw-configs/cosmos-plus.toml).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
}

/// The flags `demo` and `compare` share (everything but the worker counts' default).
#[derive(Debug, Args)]
struct RunArgs {
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
    /// QD 1), async (io_uring-style batches), isp (in-storage sampling).
    #[arg(long, value_delimiter = ',', default_value = "mmap,direct,async,isp")]
    mode: Vec<String>,
    /// Do not draw progress bars.
    #[arg(long)]
    quiet: bool,
    /// Sample in storage on this device instead of comparing modes on an in-process emulated
    /// SSD: tcp://HOST:PORT/NQN[?digest=1] (NVMe/TCP) or passthru:/dev/ngXnY (Linux NVMe
    /// passthrough); `local:` is the default comparison. `?tunnel=1` on any of them carries the
    /// sampling in Writes and Reads to the device's tunnel window.
    #[arg(long, value_name = "URI")]
    device: Option<DeviceUri>,
}

#[derive(Debug, Args)]
struct DemoArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Host worker counts, comma-separated (each mode runs with each count).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    workers: Vec<usize>,
}

#[derive(Debug, Args)]
struct CompareArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Host worker counts, comma-separated (each mode runs with each count).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    workers: Vec<usize>,
}

/// Runs the comparison engine (`demo` and `compare`): the report on stdout, progress bars and
/// the wall-clock time on stderr.
fn run_compare(args: RunArgs, workers: Vec<usize>) -> anyhow::Result<ExitCode> {
    if let Some(uri) = args
        .device
        .clone()
        .filter(|u| u.endpoint != Endpoint::Local || u.tunnel)
    {
        return run_on_device(args, &uri);
    }
    let modes = args
        .mode
        .iter()
        .map(|m| {
            HostIoMode::from_name(m.trim())
                .ok_or_else(|| anyhow::anyhow!("unknown mode {m:?} (mmap, direct, async, isp)"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let config = CompareConfig {
        scale: args.scale,
        edge_factor: args.edge_factor,
        graph_seed: args.graph_seed,
        batches: args.batches,
        batch_size: args.batch_size,
        fanouts: args.fanouts,
        seed: args.seed,
        hw: load_hw(args.config.as_ref())?,
        modes,
        workers,
    };
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
        Command::Demo(args) => run_compare(args.run, args.workers),
        Command::Compare(args) => run_compare(args.run, args.workers),
        Command::Firmware(FirmwareCommand::Footprint(args)) => run_footprint(args),
        Command::Device(DeviceCommand::Info(args)) => run_device_info(args),
        Command::Device(DeviceCommand::Check(args)) => run_device_check(args),
        Command::Device(DeviceCommand::Bench(args)) => run_device_bench(args),
        Command::Emulator(EmulatorCommand::Serve(args)) => run_serve(args),
        Command::NsConfig(args) => run_ns_config(args),
        Command::Dataset(command) => run_dataset(command),
        Command::Bench(BenchCommand::Sampler(args)) => run_bench_sampler(args),
        Command::Sample(args) => run_sample(args),
    }
}

/// `sample`: out-of-core samplers on real files, with their I/O.
fn run_sample(a: SampleArgs) -> anyhow::Result<ExitCode> {
    use sagessd_runtime::compare::{human_bytes, minibatch_seed, minibatch_targets};
    use sagessd_runtime::dataset::Dataset;
    use sagessd_runtime::ooc::{
        AgnesLayout, BlockSampler, DirectSampler, HyperbatchSampler, IoStats,
    };
    use sagessd_runtime::sampler::{ReferenceSampler, SampledSubgraph, Sampler};

    anyhow::ensure!(
        a.batch_size > 0 && a.batches > 0,
        "--batches and --batch-size must be ≥ 1"
    );
    // Bad flags are refused before any work.
    sagessd_runtime::sampler::validate_request(&a.fanouts, &[0], 1)?;
    let known: &[&str] = if a.on_device {
        &["agnes", "hyperbatch", "isp"]
    } else {
        &["memory", "mmap", "direct", "uring", "agnes", "hyperbatch"]
    };
    if let Some(bad) = a.sampler.iter().find(|s| !known.contains(&s.as_str())) {
        anyhow::bail!(
            "unknown sampler {bad:?}{} ({})",
            if a.on_device { " with --on-device" } else { "" },
            known.join(", ")
        );
    }
    let dataset = Dataset::open(&a.dataset)?;
    let n = dataset.manifest.node_count;
    let requests: Vec<(u64, Vec<u64>)> = match a.order.as_str() {
        "random" => (0..a.batches)
            .map(|b| {
                (
                    minibatch_seed(a.seed, b),
                    minibatch_targets(a.seed, b, a.batch_size, n),
                )
            })
            .collect(),
        "bgl" => {
            let graph = dataset.graph()?;
            let train = match &dataset.manifest.train {
                Some(entry) => {
                    let path = dataset.dir().join(&entry.file);
                    let ids = sagessd_runtime::npy::read_i64(&path)?;
                    if let Some(i) = ids.iter().position(|v| !(0..n as i64).contains(v)) {
                        anyhow::bail!(
                            "{}: entry {i} ({}) is not a node id",
                            path.display(),
                            ids[i]
                        );
                    }
                    ids.into_iter().map(|v| v as u64).collect()
                }
                None => (0..n).collect::<Vec<u64>>(),
            };
            let order = sagessd_runtime::ooc::features::bgl_order(&graph, &train, 8, a.seed);
            order
                .chunks(a.batch_size.max(1) as usize)
                .take(a.batches as usize)
                .enumerate()
                .map(|(b, t)| (minibatch_seed(a.seed, b as u32), t.to_vec()))
                .collect()
        }
        other => anyhow::bail!("--order {other:?}: random or bgl"),
    };
    let block_bytes = a.block_size * 1024;
    let buffer_bytes = a.graph_buffer << 20;
    if a.on_device {
        return run_sample_on_device(&a, &dataset, &requests, block_bytes, buffer_bytes);
    }
    let needs_layout = a.sampler.iter().any(|s| s == "agnes" || s == "hyperbatch");
    let layout = if needs_layout {
        let (layout, written) = AgnesLayout::for_dataset(&dataset, block_bytes)?;
        let bytes = layout.manifest.block_count * layout.manifest.block_bytes;
        println!(
            "AGNES layout {} ({}): {} blocks of {} = {}, {} split nodes; graph buffer {} ({:.1}x smaller)",
            layout.dir().display(),
            if written { "written now" } else { "existing" },
            layout.manifest.block_count,
            human_bytes(layout.manifest.block_bytes),
            human_bytes(bytes),
            layout.manifest.split_nodes,
            human_bytes(buffer_bytes as u64),
            bytes as f64 / buffer_bytes as f64
        );
        Some(layout)
    } else {
        None
    };
    println!(
        "dataset {}: {} nodes, {} CSR entries; {} minibatches of {} targets, fanouts {:?}",
        dataset.manifest.name, n, dataset.manifest.edge_count, a.batches, a.batch_size, a.fanouts
    );
    let graph = a
        .sampler
        .iter()
        .any(|s| s == "memory")
        .then(|| dataset.graph())
        .transpose()?;
    // Subgraphs are checked by checksum and dropped as they come, so memory stays bounded by
    // the buffers and caches, not by the number of minibatches.
    let mut first: Option<(String, Vec<u64>)> = None;
    let mut mismatch = false;
    let mut gatherer = match a.features.as_str() {
        "none" => None,
        _ if dataset.manifest.features.is_none() => {
            println!("features: the dataset has none");
            None
        }
        kind => Some(Gatherer::new(kind, &dataset, &a, block_bytes)?),
    };
    println!(
        "{:<12} {:>10} {:>12} {:>12} {:>8} {:>9} {:>24} {:>10} {:>10} {:>10} {:>10}",
        "sampler",
        "reads",
        "bytes read",
        "bytes used",
        "used %",
        "buf hits",
        "reads ≤4K/≤64K/≤1M/>1M",
        "syscalls",
        "sample s",
        "I/O wait s",
        "compute s"
    );
    // The largest set of subgraphs (and their features) alive at once: a minibatch's, or a
    // hyperbatch's; and what it was.
    let mut peak_output: (u64, String) = (0, "nothing".into());
    for (k, name) in a.sampler.iter().enumerate() {
        let started = std::time::Instant::now();
        let mut sums: Vec<u64> = Vec::with_capacity(requests.len());
        let mut gather_s = 0.0;
        // The first sampler's subgraphs also get their features gathered. Each call takes one
        // minibatch's or one hyperbatch's subgraphs, which are alive together with their
        // features until it returns.
        let mut sink = |subs: Vec<SampledSubgraph>| -> anyhow::Result<()> {
            let mut bytes: u64 = subs.iter().map(|s| s.as_bytes().len() as u64).sum();
            let mut with = "";
            if let Some(g) = gatherer.as_mut().filter(|_| k == 0) {
                let t = std::time::Instant::now();
                bytes += g.gather(&subs)?;
                gather_s += t.elapsed().as_secs_f64();
                with = " and their features";
            }
            if bytes > peak_output.0 {
                peak_output = (bytes, format!("{name}: {} subgraph(s){with}", subs.len()));
            }
            sums.extend(subs.iter().map(SampledSubgraph::checksum));
            Ok(())
        };
        let io: IoStats = match name.as_str() {
            "memory" => {
                let g = graph.as_ref().ok_or_else(|| anyhow::anyhow!("no graph"))?;
                let mut s = ReferenceSampler::new(g);
                for (seed, t) in &requests {
                    sink(vec![s.sample(*seed, &a.fanouts, t)?])?;
                }
                IoStats::default()
            }
            "mmap" => {
                let mut s = sagessd_runtime::ooc::MmapSampler::open(&dataset)?;
                for (seed, t) in &requests {
                    sink(vec![s.sample(*seed, &a.fanouts, t)?])?;
                }
                s.io_stats().clone()
            }
            "direct" | "uring" => {
                let mut s = DirectSampler::open(&dataset, name == "uring")?;
                for (seed, t) in &requests {
                    sink(vec![s.sample(*seed, &a.fanouts, t)?])?;
                }
                s.io_stats().clone()
            }
            "agnes" => {
                let l = layout
                    .as_ref()
                    .ok_or_else(|| anyhow::anyhow!("no layout"))?;
                let mut s = BlockSampler::new(l, buffer_bytes)?;
                for (seed, t) in &requests {
                    sink(vec![s.sample(*seed, &a.fanouts, t)?])?;
                }
                s.io_stats().clone()
            }
            "hyperbatch" => {
                let l = layout
                    .as_ref()
                    .ok_or_else(|| anyhow::anyhow!("no layout"))?;
                let mut s = HyperbatchSampler::new(l, buffer_bytes, !a.no_prefetch)?;
                for chunk in requests.chunks(a.hyperbatch.max(1)) {
                    sink(s.sample_hyperbatch(&a.fanouts, chunk)?)?;
                }
                s.io_stats().clone()
            }
            other => anyhow::bail!("unknown sampler {other:?}"),
        };
        let wall = started.elapsed().as_secs_f64() - gather_s;
        let io_wait_s = io.io_wait_ns as f64 / 1e9;
        let h = io.size_histogram;
        println!(
            "{:<12} {:>10} {:>12} {:>12} {:>8} {:>9} {:>24} {:>10} {:>10.2} {:>10} {:>10}",
            name,
            io.reads,
            human_bytes(io.bytes_read),
            human_bytes(io.bytes_used),
            // mmap reads through the page cache: what it used may not have been read now.
            if io.bytes_read >= io.bytes_used && io.bytes_read > 0 {
                format!(
                    "{:.2}%",
                    100.0 * io.bytes_used as f64 / io.bytes_read as f64
                )
            } else {
                "-".into()
            },
            io.hit_ratio()
                .map_or("-".into(), |r| format!("{:.1}%", 100.0 * r)),
            format!("{}/{}/{}/{}", h[0], h[1], h[2], h[3]),
            // An mmap sampler reads in page faults, the in-memory one not at all.
            if matches!(name.as_str(), "mmap" | "memory") {
                "-".into()
            } else {
                io.syscalls.to_string()
            },
            wall,
            // An mmap sampler's reads happen inside page faults: its wait cannot be told apart.
            if name == "mmap" {
                "-".into()
            } else {
                format!("{:.2}", io_wait_s)
            },
            if name == "mmap" {
                "-".into()
            } else {
                format!("{:.2}", (wall - io_wait_s).max(0.0))
            },
        );
        if k == 0
            && let Some(g) = &gatherer
        {
            g.report(&a, gather_s);
        }
        match &first {
            None => first = Some((name.clone(), sums)),
            Some((reference, expected)) => {
                if let Some(b) = (0..expected.len()).find(|&b| expected[b] != sums[b]) {
                    eprintln!("error: {name} differs from {reference} on minibatch {b}");
                    mismatch = true;
                }
            }
        }
    }
    if let Some((name, _)) = &first
        && !mismatch
    {
        println!(
            "samples identical: yes (every sampler's subgraphs have the checksums of {name}'s)"
        );
    }
    let feature_cache = if gatherer.is_some() {
        (a.feature_cache as u64) << 20
    } else {
        0
    };
    println!(
        "memory: peak RSS {}; bounded by flags: graph buffer {} + feature cache {}; largest output alive at once {} ({})",
        peak_rss_bytes().map_or("unknown".into(), human_bytes),
        human_bytes(if needs_layout { buffer_bytes as u64 } else { 0 }),
        human_bytes(feature_cache),
        human_bytes(peak_output.0),
        peak_output.1,
    );
    Ok(if mismatch {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// This process's peak resident set size so far.
fn peak_rss_bytes() -> Option<u64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the pointer it is given.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    // SAFETY: filled by the successful call (and zeroed before it).
    (rc == 0).then(|| unsafe { usage.assume_init() }.ru_maxrss as u64 * 1024)
}

/// `sample --on-device`: the samplers against an NVMe device, in modelled time on an emulated
/// one.
fn run_sample_on_device(
    a: &SampleArgs,
    dataset: &sagessd_runtime::dataset::Dataset,
    requests: &[(u64, Vec<u64>)],
    block_bytes: usize,
    buffer_bytes: usize,
) -> anyhow::Result<ExitCode> {
    use sagessd_runtime::compare::human_bytes;
    use sagessd_runtime::ooc::{AgnesLayout, BlockSampler, HyperbatchSampler, IoStats};
    use sagessd_runtime::sampler::{SampledSubgraph, Sampler};
    let hw = load_hw(a.config.as_ref())?;
    let graph = dataset.graph()?;
    let (layout, _) = AgnesLayout::for_dataset(dataset, block_bytes)?;
    let mut device = sagessd_host_driver::open_device(&a.device, &hw)?;
    let desc = sagessd_runtime::load::load_graph(&mut device, &graph, 0)?;
    let lba = u64::from(device.info().block_size_bytes);
    let align = (block_bytes as u64 / lba).max(1);
    let slba = (desc.indices.slba + desc.indices.block_count).next_multiple_of(align);
    layout.write_to_device(&mut device, slba)?;
    drop(graph);
    let cold = device.transport_mut().drop_caches();
    // An emulator models time; a real device (or a remote target) is timed by the wall clock,
    // host and device work together.
    let modelled = device.now_ns().is_some();
    println!(
        "on {}: CSR at LBA 0, AGNES layout ({} blocks of {}) at LBA {slba}; graph buffer {}{}",
        match a.device.endpoint {
            sagessd_host_driver::Endpoint::Local => {
                format!("{} ({})", hw.device.name, hw_source(a.config.as_ref()))
            }
            _ => a.device.to_string(),
        },
        layout.manifest.block_count,
        human_bytes(layout.manifest.block_bytes),
        human_bytes(buffer_bytes as u64),
        if cold {
            ""
        } else {
            "; the device's caches could not be dropped (it may start warm)"
        }
    );
    println!(
        "{:<12} {:>10} {:>12} {:>12} {:>14} {:>12} {:>13}",
        "sampler", "reads", "bytes read", "NAND pages", "device ms/mb", "host ms/mb", "total ms/mb"
    );
    let mut first: Option<(String, Vec<u64>)> = None;
    let mut mismatch = false;
    for name in &a.sampler {
        let t0 = device.now_ns().unwrap_or(0);
        let wall = std::time::Instant::now();
        let pages0 = device.device_counters().map(|c| c.nand_pages_read);
        // The host's own work, modelled with the [host] costs: each NVMe command a synchronous
        // I/O (a block larger than MDTS takes several), and the sampling compute of each
        // subgraph a host sampler built.
        let mut host_ns = 0u64;
        let commands0 = device.stats().commands;
        let mut took = |g: &SampledSubgraph| {
            let v = g.view();
            let dst: u64 = (0..v.layer_count())
                .map(|l| u64::from(v.layer(l).counts.dst_count))
                .sum();
            host_ns += hw.host.sampling_ns(dst, g.edge_count());
            g.checksum()
        };
        let (sums, io): (Vec<u64>, IoStats) = match name.as_str() {
            "agnes" => {
                let mut s = BlockSampler::on_device(&layout, buffer_bytes, &mut device, slba)?;
                let sums = requests
                    .iter()
                    .map(|(seed, t)| s.sample(*seed, &a.fanouts, t).map(|g| took(&g)))
                    .collect::<Result<_, _>>()?;
                (sums, s.io_stats().clone())
            }
            "hyperbatch" => {
                let mut s = HyperbatchSampler::on_device(&layout, buffer_bytes, &mut device, slba)?;
                let mut sums = Vec::new();
                for chunk in requests.chunks(a.hyperbatch.max(1)) {
                    sums.extend(
                        s.sample_hyperbatch(&a.fanouts, chunk)?
                            .iter()
                            .map(&mut took),
                    );
                }
                (sums, s.io_stats().clone())
            }
            "isp" => {
                let before = device.stats();
                let out = device.sample_many(&a.fanouts, requests, 4)?;
                let d = device.stats().since(&before);
                let io = IoStats {
                    reads: d.ns_submits + d.ns_collects,
                    bytes_read: d.c2h_bytes,
                    ..IoStats::default()
                };
                let sums = out
                    .into_iter()
                    .map(|b| SampledSubgraph::from_bytes(b).map(|g| g.checksum()))
                    .collect::<Result<_, _>>()?;
                (sums, io)
            }
            other => anyhow::bail!("unknown sampler {other:?}"),
        };
        host_ns += (device.stats().commands - commands0) * hw.host.sync_io_ns();
        let per_mb_ms = |ns: u64| format!("{:.3}", ns as f64 / 1e6 / requests.len() as f64);
        let pages = pages0
            .zip(device.device_counters())
            .map_or("-".into(), |(p0, c)| (c.nand_pages_read - p0).to_string());
        let (device_ms, host_ms, total_ms) = if modelled {
            let device_ns = device.now_ns().unwrap_or(0) - t0;
            (
                per_mb_ms(device_ns),
                per_mb_ms(host_ns),
                per_mb_ms(device_ns + host_ns),
            )
        } else {
            let wall_ns = wall.elapsed().as_nanos() as u64;
            ("-".into(), "-".into(), per_mb_ms(wall_ns))
        };
        println!(
            "{:<12} {:>10} {:>12} {:>12} {:>14} {:>12} {:>13}",
            name,
            io.reads,
            human_bytes(io.bytes_read),
            pages,
            device_ms,
            host_ms,
            total_ms
        );
        match &first {
            None => first = Some((name.clone(), sums)),
            Some((reference, expected)) => {
                if let Some(b) = (0..expected.len()).find(|&b| expected[b] != sums[b]) {
                    eprintln!("error: {name} differs from {reference} on minibatch {b}");
                    mismatch = true;
                }
            }
        }
    }
    if modelled {
        println!(
            "modelled per minibatch: device = the device's virtual time (NVMe, PCIe, NAND, firmware cores); host = the host's work with the [host] costs (each NVMe command a synchronous I/O, plus the sampling compute of the subgraphs the host builds); total = device + host (the host samplers' reads are synchronous; ISP's few host µs overlap in truth)"
        );
    } else {
        println!(
            "total ms/mb: this machine's wall clock per minibatch, host and device work together"
        );
    }
    if let Some((name, _)) = first.filter(|_| !mismatch) {
        println!(
            "samples identical: yes (every sampler's subgraphs have the checksums of {name}'s)"
        );
    }
    Ok(if mismatch {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The feature half of `sample`: each subgraph's node features gathered from storage into one
/// buffer per minibatch, with AGNES's or BGL's cache.
enum Gatherer {
    Agnes(sagessd_runtime::ooc::features::ThresholdCache),
    Bgl(sagessd_runtime::ooc::features::FifoCache),
}

impl Gatherer {
    fn new(
        kind: &str,
        dataset: &sagessd_runtime::dataset::Dataset,
        a: &SampleArgs,
        block_bytes: usize,
    ) -> anyhow::Result<Self> {
        use sagessd_runtime::ooc::features::{FeatureFile, FifoCache, ThresholdCache};
        let file = FeatureFile::open(dataset)?;
        let cache_bytes = a.feature_cache << 20;
        Ok(match kind {
            "agnes" => Self::Agnes(ThresholdCache::new(
                file,
                cache_bytes,
                a.feature_threshold,
                block_bytes,
            )),
            "bgl" => Self::Bgl(FifoCache::new(file, cache_bytes)),
            other => anyhow::bail!("--features {other:?}: agnes, bgl or none"),
        })
    }

    /// Gathers the features of `subs` (a minibatch, or a hyperbatch's minibatches): AGNES
    /// reads a hyperbatch's misses together, each feature block once; BGL gathers minibatch by
    /// minibatch. Returns the bytes gathered.
    fn gather(
        &mut self,
        subs: &[sagessd_runtime::sampler::SampledSubgraph],
    ) -> anyhow::Result<u64> {
        let nodes: Vec<Vec<u64>> = subs
            .iter()
            .map(|s| s.view().nodes().iter().map(|v| v.get()).collect())
            .collect();
        Ok(match self {
            Self::Agnes(g) => {
                let lists: Vec<&[u64]> = nodes.iter().map(Vec::as_slice).collect();
                g.gather_many(&lists)?.iter().map(|o| o.len() as u64).sum()
            }
            // One minibatch's buffer at a time.
            Self::Bgl(g) => nodes
                .iter()
                .map(|n| g.gather(n).map(|o| o.len() as u64))
                .sum::<Result<u64, _>>()?,
        })
    }

    fn report(&self, a: &SampleArgs, wall_s: f64) {
        use sagessd_runtime::compare::human_bytes;
        let stats = match self {
            Self::Agnes(g) => &g.stats,
            Self::Bgl(g) => &g.stats,
        };
        println!(
            "features ({}, cache {}): {} rows gathered, cache hits {:.1}%, {} reads, {} read, {} used, {:.2} s wall ({:.2} s I/O wait)",
            a.features,
            human_bytes((a.feature_cache as u64) << 20),
            stats.rows,
            100.0 * stats.hit_ratio(),
            stats.io.reads,
            human_bytes(stats.io.bytes_read),
            human_bytes(stats.io.bytes_used),
            wall_s,
            stats.io.io_wait_ns as f64 / 1e9
        );
    }
}

/// `bench sampler`.
fn run_bench_sampler(a: BenchSamplerArgs) -> anyhow::Result<ExitCode> {
    use sagessd_runtime::bench::{self, BenchConfig};
    use sagessd_runtime::npy::{self, Dtype};
    let setup = std::time::Instant::now();
    let graph = match &a.graph_dir {
        Some(dir) => load_npy_graph(dir)?,
        None => sagessd_runtime::rmat::generate(&sagessd_runtime::rmat::RmatParams::graph500(
            a.scale,
            a.edge_factor,
            1,
        ))?,
    };
    let rows = a.warmup + a.batches;
    let seeds: Vec<Vec<u64>> = match &a.seeds {
        Some(path) => {
            let (shape, raw) = npy::read_raw(path, Dtype::I64, 2)?;
            let width = shape[1] as usize;
            raw.chunks_exact(8 * width.max(1))
                .map(|row| {
                    row.chunks_exact(8)
                        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                        .collect()
                })
                .collect()
        }
        None => bench::harness_seeds(&graph, rows, a.batch_size, 0),
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
    let runs = bench::run(&graph, &seeds, &config)?;
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

/// A CSR graph from `indptr.npy` (int64) and `indices.npy` (int32 or int64) in `dir`.
fn load_npy_graph(dir: &std::path::Path) -> anyhow::Result<sagessd_runtime::graph::CsrGraph> {
    use sagessd_runtime::npy::{self, Dtype};
    let indptr: Vec<u64> = npy::read_i64(&dir.join("indptr.npy"))?
        .into_iter()
        .map(|v| v as u64)
        .collect();
    let file = dir.join("indices.npy");
    let indices: Vec<u32> = match npy::read_header(&file)?.dtype {
        Dtype::I32 => npy::read_raw(&file, Dtype::I32, 1)?
            .1
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
            .collect(),
        _ => npy::read_i64(&file)?
            .into_iter()
            .map(|v| u32::try_from(v).with_context(|| format!("{}: id {v}", file.display())))
            .collect::<anyhow::Result<_>>()?,
    };
    sagessd_runtime::graph::CsrGraph::new(indptr, indices)
        .with_context(|| format!("{}: not a valid CSR graph", dir.display()))
}

/// `dataset generate|import|info`.
fn run_dataset(command: DatasetCommand) -> anyhow::Result<ExitCode> {
    use sagessd_runtime::dataset::{Dataset, generate, snap};
    use sagessd_runtime::npy::Dtype;
    let wall = std::time::Instant::now();
    let dataset = match command {
        DatasetCommand::Generate(a) => {
            let feature_dtype = match a.feature_dtype.as_str() {
                "f32" => Dtype::F32,
                "f16" => Dtype::F16,
                other => anyhow::bail!("--feature-dtype {other:?}: f32 or f16"),
            };
            let params = generate::GenerateParams {
                name: a
                    .name
                    .unwrap_or_else(|| format!("rmat-{}-{}", a.scale, a.edge_factor)),
                scale: a.scale,
                edge_factor: a.edge_factor,
                seed: a.seed,
                feature_dim: a.features,
                feature_dtype,
                classes: a.classes,
            };
            generate::generate(&a.out, &params)?
        }
        DatasetCommand::Import(DatasetImportCommand::Snap(a)) => {
            snap::import(&a.input, &a.out, a.symmetric)?
        }
        DatasetCommand::Import(DatasetImportCommand::Cora(a)) => {
            sagessd_runtime::dataset::cora::import(&a.input, &a.out)?
        }
        DatasetCommand::Import(DatasetImportCommand::Ogb(a)) => {
            sagessd_runtime::dataset::ogb::import(&a.input, &a.out, a.symmetric)?
        }
        DatasetCommand::Reorder(a) => {
            use sagessd_runtime::dataset::reorder::{Order, reorder};
            let by = match a.by.as_str() {
                "degree" => Order::Degree,
                "bfs" => Order::Bfs,
                other => anyhow::bail!("--by {other:?}: degree or bfs"),
            };
            reorder(&Dataset::open(&a.dir)?, by, &a.out)?
        }
        DatasetCommand::Info(a) => {
            let d = Dataset::open(&a.dir)?;
            if a.verify {
                d.verify()?;
                println!("checksums: all arrays match their manifest CRC32C");
            }
            d
        }
    };
    let m = &dataset.manifest;
    println!("dataset {} ({})", m.name, dataset.dir().display());
    println!("  source        {}", m.source);
    println!(
        "  nodes         {:>14}\n  CSR entries   {:>14}   ({})",
        m.node_count,
        m.edge_count,
        if m.symmetric { "symmetric" } else { "directed" }
    );
    if let Some(c) = m.class_count {
        println!("  classes       {c:>14}");
    }
    for (name, entry) in dataset.arrays() {
        println!(
            "  {name:<13} {:<14} {:>6} {:?}  crc32c {}",
            entry.file, entry.dtype, entry.shape, entry.crc32c
        );
    }
    let stats = dataset.graph()?.degree_stats();
    println!(
        "  degrees       mean {:.2}, median {}, max {}, isolated {}",
        stats.mean, stats.median, stats.max, stats.isolated
    );
    eprintln!("(wall-clock time: {:.1} s)", wall.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
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
    let config = CompareConfig {
        scale: args.scale,
        edge_factor: args.edge_factor,
        graph_seed: args.graph_seed,
        batches: args.batches,
        batch_size: args.batch_size,
        fanouts: args.fanouts,
        seed: args.seed,
        hw,
        modes: vec![HostIoMode::Isp],
        workers: vec![1],
    };
    let report = compare::run_on_device(&config, &mut device, &name, &mut |_| {})?;
    print!("{}", report.render());
    Ok(if report.mismatch.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `emulator serve`: the NVMe/TCP target until SIGINT or SIGTERM.
fn run_serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let hw = load_hw(args.config.as_ref())?;
    // Block the stop signals before any thread starts (threads inherit the mask), then wait for
    // one here: a clean stop lets every accepted command finish.
    let signals = stop_signals();
    let ssd = match &args.image {
        Some(path) => sagessd_emulator::Ssd::open_image(&hw, path)?,
        None => sagessd_emulator::Ssd::new(&hw)?,
    };
    let options = sagessd_emulator::TargetOptions {
        nqn: args.nqn.clone(),
        paced: args.pace,
        ..sagessd_emulator::TargetOptions::default()
    };
    let target = sagessd_emulator::Target::start(ssd, args.listen.as_str(), options)?;
    println!(
        "serving {} ({}) as NVMe/TCP subsystem {} on {}{}",
        hw.device.name,
        hw_source(args.config.as_ref()),
        args.nqn,
        target.local_addr(),
        if args.pace {
            ", paced to modelled time"
        } else {
            ", virtual time"
        }
    );
    std::io::stdout().flush()?;
    let signal = wait_for(&signals);
    let mut ssd = target.stop();
    if let Some(path) = &args.image {
        ssd.save_image(path)?;
        println!("saved the device to {}", path.display());
    }
    let stats = ssd.stats();
    println!(
        "stopped by signal {signal}: {} commands completed, {} flash pages read, {} programmed",
        stats.commands_completed, stats.nand_pages_read, stats.nand_pages_programmed
    );
    Ok(ExitCode::SUCCESS)
}

/// SIGINT and SIGTERM, blocked in this thread (and so in every thread it starts).
fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise the set we own; pthread_sigmask only changes
    // this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits for one of `set`'s signals and returns its number.
fn wait_for(set: &libc::sigset_t) -> i32 {
    let mut signal = 0;
    // SAFETY: `set` is an initialised signal set and `signal` a valid out-pointer.
    unsafe { libc::sigwait(set, &mut signal) };
    signal
}

/// Loads the hardware description named on the command line, or the built-in Cosmos+.
fn load_hw(config: Option<&PathBuf>) -> anyhow::Result<HwConfig> {
    match config {
        Some(path) => HwConfig::load(path)
            .with_context(|| format!("loading hardware description {}", path.display())),
        None => Ok(HwConfig::cosmos_plus()),
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// How the firmware's DRAM arena scales, for `sagessd firmware footprint`.
const FOOTPRINT_IN_WORDS: &str = "\
In words: the arena is the sum of five parts.
* FTL mapping scales with flash capacity: about 8 B per physical page (4 B of l2p per logical
  page, 4 B of p2l per physical page), plus 9 B per erase block and 16 B per die.
* The page buffer is page_buffer_pages x (page_size_bytes + 12 B), plus one page for GC.
* The sampling working set is shared by all jobs: 4 B x next_pow2(2 x max_subgraph_nodes) for
  the node hash, 8 B x max_subgraph_edges for a layer's entries, and 3 x 8 B x
  max(2 x max_subgraph_nodes, max_subgraph_edges) for the page-sorted gathers.
* Each of the isp_slots pending-subgraph buffers holds its NS_config (32 B + 8 B x max_targets)
  and its result: 8 B x max_subgraph_nodes (node ids) + 16 B x (max_subgraph_nodes + 1)
  (4 layers of local indptr) + 4 B x max_subgraph_edges (local indices).
* The parked Reads and Writes keep the state of each of their flash pages in command_pages:
  8 B x 64 command slots x 64 pages, 32 KiB whatever the configuration.
max_fanout sizes nothing: it bounds the work; the subgraph limits bound the memory (a job whose
sample would exceed them fails with ResultTooLarge). Outside the arena, the board links the
library's static state (.bss), which scripts/footprint.sh prints.";

fn run_footprint(args: FootprintArgs) -> anyhow::Result<ExitCode> {
    use std::fmt::Write as _;
    type Fw = sagessd_firmware::Firmware<sagessd_emulator::NandArray, Vec<u8>>;

    let hw = load_hw(args.config.as_ref())?;
    let source = args
        .config
        .as_ref()
        .map_or("built-in hw-configs/cosmos-plus.toml".to_string(), |p| {
            p.display().to_string()
        });
    let geometry = hw.nand.geometry();
    let config = hw.firmware.to_firmware_config();
    let regions = Fw::dram_regions(&config, &geometry)
        .map_err(|e| anyhow::anyhow!("the firmware cannot run this configuration: {e:?}"))?;
    let f = &hw.firmware;
    let mut out = String::new();
    writeln!(
        out,
        "Firmware DRAM footprint: {} ({source})",
        hw.device.name
    )?;
    writeln!(
        out,
        "flash: {} channels x {} ways x {} dies/way x {} blocks/die x {} pages/block x {} B pages \
         = {} physical pages ({:.0} MiB raw)",
        geometry.channels,
        geometry.ways,
        geometry.dies_per_way,
        geometry.blocks_per_die,
        geometry.pages_per_block,
        geometry.page_size_bytes,
        geometry.page_count(),
        mib(geometry.page_count() * u64::from(geometry.page_size_bytes)),
    )?;
    writeln!(
        out,
        "firmware: page_buffer_pages {}, isp_slots {}, max_targets {}, max_fanout {}, \
         max_subgraph_nodes {}, max_subgraph_edges {}, max_transfer_bytes {}, \
         over_provisioning_percent {}, block_size_bytes {}",
        f.page_buffer_pages,
        f.isp_slots,
        f.max_targets,
        f.max_fanout,
        f.max_subgraph_nodes,
        f.max_subgraph_edges,
        f.max_transfer_bytes,
        f.over_provisioning_percent,
        f.block_size_bytes,
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<18} {:>14} {:>10}  scales with",
        "region", "bytes", "MiB"
    )?;
    // Group subtotals: what a board integrator trades against each other.
    let group_of = |name: &str| match name {
        "l2p" | "p2l" | "block_valid" | "block_next_free" | "block_state" | "dies" => 0,
        "page_buffer_meta" | "page_buffer_data" | "gc_page" => 1,
        n if n.starts_with("slot") => 3,
        "command_pages" => 4,
        _ => 2,
    };
    let mut groups = [0u64; 5];
    for r in regions.iter() {
        let bytes = r.size_bytes as u64;
        groups[group_of(r.name)] += bytes;
        writeln!(
            out,
            "{:<18} {:>14} {:>10.2}  {}",
            r.name,
            bytes,
            mib(bytes),
            r.formula
        )?;
    }
    let total = regions.total_bytes() as u64;
    let capacity = u64::from(hw.dram.capacity_mib) << 20;
    writeln!(
        out,
        "{:<18} {:>14} {:>10.2}  (regions + alignment padding) = {:.1}% of \
         dram.capacity_mib = {} MiB",
        "total",
        total,
        mib(total),
        100.0 * total as f64 / capacity as f64,
        hw.dram.capacity_mib,
    )?;
    writeln!(out)?;
    let names = [
        "FTL mapping (l2p, p2l, block tables, dies)",
        "page buffer (+ GC page)",
        "sampling working set (node_hash, entries, gather_*)",
        "pending subgraphs (slotN.*, isp_slots of them)",
        "parked commands' page states (command_pages)",
    ];
    for (name, bytes) in names.iter().zip(groups) {
        writeln!(out, "  {name:<55} {:>10.2} MiB", mib(bytes))?;
    }
    writeln!(out)?;
    writeln!(out, "{}", FOOTPRINT_IN_WORDS)?;
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// Names the hardware description for the tables: the path, or the built-in one.
fn hw_source(config: Option<&PathBuf>) -> String {
    config.map_or("built-in hw-configs/cosmos-plus.toml".to_string(), |p| {
        p.display().to_string()
    })
}

fn run_device_info(args: DeviceConfigArgs) -> anyhow::Result<ExitCode> {
    let hw = load_hw(args.config.as_ref())?;
    let limits = sagessd_emulator::check::DeviceLimits::new(&hw)?;
    println!("{}", hw_source(args.config.as_ref()));
    println!("{limits}");
    Ok(ExitCode::SUCCESS)
}

fn run_device_check(args: DeviceConfigArgs) -> anyhow::Result<ExitCode> {
    use sagessd_emulator::check::{CheckOptions, run};
    const TOLERANCE: f64 = 0.02;
    let hw = load_hw(args.config.as_ref())?;
    println!("{}", hw_source(args.config.as_ref()));
    let report = run(&hw, &CheckOptions::default())?;
    println!("{report}");
    let bad: Vec<_> = report
        .rows
        .iter()
        .filter(|r| !r.within(TOLERANCE))
        .collect();
    if bad.is_empty() {
        println!("every row within {:.0} % of its bound", TOLERANCE * 100.0);
        Ok(ExitCode::SUCCESS)
    } else {
        for r in bad {
            println!(
                "OUT OF TOLERANCE: {} ratio {:.4} (limited by {})",
                r.workload,
                r.ratio(),
                r.limited_by
            );
        }
        Ok(ExitCode::from(1))
    }
}

fn run_device_bench(args: DeviceBenchArgs) -> anyhow::Result<ExitCode> {
    use sagessd_abi::nvme::{Status, SubmissionEntry};
    use sagessd_emulator::Ssd;
    use std::time::Instant;

    let hw = load_hw(args.config.as_ref())?;
    let mut ssd = Ssd::new(&hw)?;
    let block = u64::from(ssd.block_size_bytes());
    let page = u64::from(hw.nand.page_size_bytes);
    let blocks_per_page = page / block;
    let max_blocks = u64::from(hw.firmware.max_transfer_bytes) / block;
    let region_blocks = (args.region_pages * blocks_per_page).min(ssd.namespace_block_count());
    anyhow::ensure!(region_blocks > 0, "empty region");
    // Write the region once (max-size writes at QD1), then start cold.
    let mut lba = 0;
    let mut cid: u16 = 0;
    while lba < region_blocks {
        let n = max_blocks.min(region_blocks - lba);
        cid = cid.wrapping_add(1);
        let sqe = SubmissionEntry::read_write(true, cid, 1, lba, n as u32);
        let done = ssd.execute(1, sqe, vec![0x5A; (n * block) as usize])?;
        anyhow::ensure!(done.cqe.status() == Status::SUCCESS, "write failed");
        lba += n;
    }
    ssd.drop_caches();

    let read_blocks = (4096 / block).max(1);
    let slots = region_blocks / read_blocks;
    let mut rng = sagessd_runtime::rng::SplitMix64::new(1);
    let mut next_read = |cid: u16| {
        let slba = rng.next_u64() % slots * read_blocks;
        SubmissionEntry::read_write(false, cid, 1, slba, read_blocks as u32)
    };
    let before = ssd.stats();
    let sim_start_ns = ssd.now_ns();
    let buffer = (read_blocks * block) as usize;
    let started = Instant::now();
    let mut completed = 0u64;
    for _ in 0..args.queue_depth.max(1) {
        cid = cid.wrapping_add(1);
        ssd.submit(1, next_read(cid), vec![0; buffer])?;
    }
    let mut stop = false;
    while let Some(done) = ssd.reap()? {
        anyhow::ensure!(done.cqe.status() == Status::SUCCESS, "read failed");
        completed += 1;
        if completed.is_multiple_of(4096) && started.elapsed().as_secs_f64() >= args.seconds {
            stop = true;
        }
        if !stop {
            cid = cid.wrapping_add(1);
            // The completed command's buffer carries the next read (no allocation per command).
            ssd.submit(1, next_read(cid), done.data)?;
        }
    }
    let wall_s = started.elapsed().as_secs_f64();
    let after = ssd.stats();
    let pages = after.nand_pages_read - before.nand_pages_read;
    let sim_s = (ssd.now_ns() - sim_start_ns) as f64 * 1e-9;
    println!(
        "device {} ({}), 4 KiB random reads at QD{} over {} written pages",
        hw.device.name,
        hw_source(args.config.as_ref()),
        args.queue_depth,
        region_blocks / blocks_per_page
    );
    println!("  commands completed            {completed:>14}");
    println!("  flash pages read              {pages:>14}");
    println!(
        "  wall-clock time               {wall_s:>14.3} s   (WALL CLOCK, this machine, one core)"
    );
    println!(
        "  simulated flash page reads    {:>14.0} per wall-clock second",
        pages as f64 / wall_s
    );
    println!(
        "  simulated commands            {:>14.0} per wall-clock second",
        completed as f64 / wall_s
    );
    println!("  virtual time simulated        {sim_s:>14.6} s   (modelled)");
    println!(
        "  simulated IOPS                {:>14.0} per virtual second (modelled)",
        completed as f64 / sim_s.max(1e-12)
    );
    Ok(ExitCode::SUCCESS)
}
