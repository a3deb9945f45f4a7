//! `sagessd firmware footprint`: what the board firmware needs on a real SSD controller; and
//! `sagessd firmware calibrate` and `sagessd firmware profile` (in `calibrate`): what its work
//! costs a board's core, and where in the code.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::load_hw;

/// The `firmware` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum FirmwareCommand {
    /// Print the DRAM the firmware needs for a hardware description, region by region, with
    /// what each region scales with (the static .text/.data/.bss footprint of the board build is
    /// printed by scripts/footprint.sh).
    Footprint(FootprintArgs),
    /// Measure the `[cores]` cycle costs: run the firmware's calibration workloads on an
    /// emulated Cortex-A9 (QEMU with a profiling plugin), count each workload's instructions
    /// and modelled cache misses, fit cycles per unit of counted work, and print them beside the
    /// description's (needs qemu-system-arm and gcc-arm-none-eabi; builds from the sources).
    Calibrate(crate::calibrate::CalibrateArgs),
    /// Show where one calibration workload's modelled cycles go in the firmware: its
    /// instructions and cache misses counted per instruction address under QEMU (as
    /// `calibrate` counts them per workload), mapped to functions or source lines through the
    /// image's line tables, heaviest first (needs what `calibrate` needs).
    Profile(crate::calibrate::ProfileArgs),
}

/// Flags of `firmware footprint`.
#[derive(Debug, Args)]
pub(crate) struct FootprintArgs {
    /// Hardware description (TOML); default: the built-in Cosmos+ OpenSSD
    /// (hw-configs/cosmos-plus.toml).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
}

/// Runs a `firmware` subcommand.
pub(crate) fn run(command: FirmwareCommand) -> anyhow::Result<ExitCode> {
    match command {
        FirmwareCommand::Footprint(args) => run_footprint(args),
        FirmwareCommand::Calibrate(args) => crate::calibrate::run(args),
        FirmwareCommand::Profile(args) => crate::calibrate::run_profile(args),
    }
}

/// Bytes as MiB, for tables.
fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// How the firmware's DRAM arena scales, for `sagessd firmware footprint`.
const FOOTPRINT_IN_WORDS: &str = "\
In words: the arena is the sum of five parts.
* FTL mapping scales with flash capacity: about 8 B per physical page (4 B of l2p per logical
  page, 4 B of p2l per physical page), plus 9 B per erase block and 16 B per die.
* The page buffer is page_buffer_pages x (page_size_bytes + 64 B spare + 16 B of state), plus
  a page for GC, 16 for the checkpoint writer and 3 for the trim log.
* Each sampling lane (a job running; one per ISP core, or per core when sampling time-shares
  the firmware's) has its working set: 16 B x next_pow2(2 x max_subgraph_nodes) for the node
  table, 2 x 8 B x max_subgraph_nodes for the destinations' sort keys and their radix sort's
  second buffer, 16 B x max_subgraph_nodes for the destinations' list bounds and places, and
  4 B x max_subgraph_edges for a layer's sampled neighbours. A board runs one lane.
* Each of the isp_slots pending-subgraph buffers holds its NS_config (32 B + 8 B x max_targets,
  + 16 B x max_minibatches when hyperbatches are taken), 112 B of state per minibatch, and its
  result: 8 B x max_subgraph_nodes (node ids) + 16 B x (max_subgraph_nodes + max_minibatches)
  (4 layers of local indptr) + 4 B x max_subgraph_edges (local indices). A hyperbatch's
  minibatches share one job's result: it costs no more DRAM than one minibatch.
* The parked Reads and Writes keep the state of each of their flash pages in command_pages:
  8 B x 64 command slots x 64 pages, 32 KiB whatever the configuration.
max_fanout sizes nothing: it bounds the work; the subgraph limits bound the memory (a job whose
sample would exceed them fails with ResultTooLarge). Outside the arena, the board links the
library's static state (.bss), which scripts/footprint.sh prints.";

/// `firmware footprint`: the DRAM arena, region by region.
fn run_footprint(args: FootprintArgs) -> anyhow::Result<ExitCode> {
    use std::fmt::Write as _;
    let hw = load_hw(args.config.as_ref())?;
    let source = args
        .config
        .as_ref()
        .map_or("built-in hw-configs/cosmos-plus.toml".to_string(), |p| {
            p.display().to_string()
        });
    let geometry = hw.nand.geometry();
    let config = hw.firmware_config();
    let regions = sagessd_firmware::dram_regions(&config, &geometry)
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
        "firmware: page_buffer_pages {}, isp_slots {}, isp_lanes {} (from [cores]), max_targets \
         {}, max_fanout {}, max_minibatches {}, max_subgraph_nodes {}, max_subgraph_edges {}, \
         max_transfer_bytes {}, over_provisioning_percent {}, block_size_bytes {}",
        f.page_buffer_pages,
        f.isp_slots,
        config.isp_lanes,
        f.max_targets,
        f.max_fanout,
        f.max_minibatches,
        f.max_subgraph_nodes,
        f.max_subgraph_edges,
        f.max_transfer_bytes,
        f.over_provisioning_percent,
        f.block_size_bytes,
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<21} {:>14} {:>10}  scales with",
        "region", "bytes", "MiB"
    )?;
    // Group subtotals: what a board integrator trades against each other.
    let group_of = |name: &str| match name {
        "l2p" | "p2l" | "block_valid" | "block_next_free" | "block_state" | "dies" => 0,
        "page_buffer_meta" | "page_buffer_data" | "gc_page" | "checkpoint_windows" | "trim_log" => {
            1
        }
        n if n.starts_with("slot") => 3,
        n if n.starts_with("lane") => 2,
        "command_pages" => 4,
        _ => unreachable!("region {name} is in no group"),
    };
    let mut groups = [0u64; 5];
    for r in regions.iter() {
        let bytes = r.size_bytes as u64;
        groups[group_of(r.name)] += bytes;
        writeln!(
            out,
            "{:<21} {:>14} {:>10.2}  {}",
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
        "{:<21} {:>14} {:>10.2}  (regions + alignment padding) = {:.1}% of \
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
        "page buffer (+ GC page, checkpoint windows)",
        "sampling lanes (laneN.*, isp_lanes of them)",
        "pending subgraphs (slotN.*, isp_slots of them)",
        "parked commands' page states (command_pages)",
    ];
    for (name, bytes) in names.iter().zip(groups) {
        writeln!(out, "  {name:<55} {:>10.2} MiB", mib(bytes))?;
    }
    let lane_bytes = groups[2] / u64::from(config.isp_lanes);
    writeln!(
        out,
        "each sampling lane costs {:.2} MiB of DRAM: {} lane(s) {:.2} MiB, four {:.2} MiB",
        mib(lane_bytes),
        config.isp_lanes,
        mib(groups[2]),
        mib(4 * lane_bytes)
    )?;
    writeln!(out)?;
    writeln!(out, "{}", FOOTPRINT_IN_WORDS)?;
    writeln!(out)?;
    writeln!(
        out,
        "On flash: {}.",
        crate::device::checkpoint_summary(&hw)?
    )?;
    writeln!(
        out,
        "Boot times (blank, after a clean stop, after a power cut): sagessd device info."
    )?;
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}
