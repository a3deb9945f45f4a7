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
    /// The board firmware: what it needs on a real SSD controller.
    #[command(subcommand)]
    Firmware(FirmwareCommand),
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
        Command::Firmware(FirmwareCommand::Footprint(args)) => run_footprint(args),
    }
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
In words: the arena is the sum of four parts.
* FTL mapping scales with flash capacity: about 8 B per physical page (4 B of l2p per logical
  page, 4 B of p2l per physical page), plus 9 B per erase block and 16 B per die.
* The page buffer is page_buffer_pages x (page_size_bytes + 12 B), plus one page for GC.
* The sampling working set is shared by all jobs: 4 B x next_pow2(2 x max_subgraph_nodes) for
  the node hash, 8 B x max_subgraph_edges for a layer's entries, and 3 x 8 B x
  max(2 x max_subgraph_nodes, max_subgraph_edges) for the page-sorted gathers.
* Each of the isp_slots pending-subgraph buffers holds its NS_config (32 B + 8 B x max_targets)
  and its result: 8 B x max_subgraph_nodes (node ids) + 16 B x (max_subgraph_nodes + 1)
  (4 layers of local indptr) + 4 B x max_subgraph_edges (local indices).
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
        _ => 2,
    };
    let mut groups = [0u64; 4];
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
    ];
    for (name, bytes) in names.iter().zip(groups) {
        writeln!(out, "  {name:<55} {:>10.2} MiB", mib(bytes))?;
    }
    writeln!(out)?;
    writeln!(out, "{}", FOOTPRINT_IN_WORDS)?;
    print!("{out}");
    Ok(ExitCode::SUCCESS)
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
