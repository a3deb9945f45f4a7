//! `sagessd validate host-compute`: its flags and report (the measurement is
//! `sagessd_experiments::host_compute`'s). The host's sampling compute costs (`[host] node_ns` and
//! `edge_sampled_ns`) measured from this machine's host sampler, the same way `firmware
//! calibrate` measures the firmware's.
//!
//! Every host sampler builds its subgraphs with the one [`build_subgraph`](sagessd_runtime::sampler::build_subgraph) loop (the mmap,
//! direct and io_uring samplers feed it from the modelled page cache; the model charges their
//! compute as `node_ns` per destination and `edge_sampled_ns` per sampled neighbour, and their
//! graph loads apart, as memory accesses and page-cache work). This command runs that loop over
//! workloads that mix the two units in different proportions, on a graph whose adjacency is
//! computed rather than loaded (so that only the sampler's own work is measured), and:
//!
//! * counts the instructions of the sampling alone, exactly, under `valgrind --tool=callgrind`
//!   (repeatable whatever else the machine does), with callgrind's cache simulation of this
//!   machine's L1s and L2;
//! * turns them into time with [`HostTiming`](sagessd_experiments::host_compute::HostTiming): a cost per instruction and per L2 miss;
//! * fits the cost per destination node and per sampled edge by least squares, and predicts a
//!   check workload it did not fit;
//! * times the same workloads natively (best of `--runs`), for the wall-clock fit beside the
//!   modelled one and a refit of `HostTiming`'s two costs.
//!
//! It needs the release build: a debug build's instructions are not the shipped sampler's.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use clap::Args;
use sagessd_experiments::host_compute::{
    Aim, HostCompute, NODE_COUNT, measure_all, priced, run_workload,
};

use crate::calibrate::check_verdict;
use crate::{hw_source, load_hw};

/// Flags of `validate host-compute`.
#[derive(Debug, Args)]
pub(crate) struct HostComputeArgs {
    /// Hardware description whose `[host]` costs are checked; default: the built-in Cosmos+
    /// OpenSSD (whose `[host]` is the documented default).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Fail (exit status 1) unless the description's `node_ns` and `edge_sampled_ns` are within
    /// 5 % (or 1 ns) of the costs measured from instructions.
    #[arg(long)]
    check: bool,
    /// Native runs of each workload for the wall-clock column (the best one counts).
    #[arg(long, default_value_t = 7)]
    runs: u32,
    /// Runs one workload in this process and prints its counts and wall-clock times (what the
    /// command runs natively and under callgrind).
    #[arg(long, hide = true, value_name = "NAME")]
    run_workload: Option<String>,
}

/// Runs `validate host-compute`.
pub(crate) fn run(args: HostComputeArgs) -> anyhow::Result<ExitCode> {
    if let Some(name) = &args.run_workload {
        println!("{}", run_workload(name, args.runs)?.line());
        return Ok(ExitCode::SUCCESS);
    }
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    let hw = load_hw(args.config.as_ref())?;
    let source = hw_source(args.config.as_ref());
    let exe = std::env::current_exe()?;
    // Each workload runs in a child of this binary: `validate host-compute --run-workload`.
    let workload_command = |name: &str, runs: u32| {
        let mut c = Command::new(&exe);
        c.args(["validate", "host-compute", "--runs"])
            .arg(runs.to_string())
            .args(["--run-workload", name]);
        c
    };
    let HostCompute {
        timing,
        measured,
        live_timing,
        modelled,
        wall,
        instructions,
        configured,
        stale,
    } = measure_all(&hw, args.runs, &workload_command)?;

    let mut out = String::new();
    writeln!(
        out,
        "Host sampling compute: this machine's host sampler (build_subgraph, release build) \
         over a computed graph of {NODE_COUNT} nodes"
    )?;
    writeln!(
        out,
        "time = instructions x {} ns + L2 misses x {} ns ({}; callgrind's caches: L1I, L1D {} \
         KiB {}-way, L2 {} KiB {}-way, {} B lines)",
        timing.ns_per_instruction,
        timing.ns_per_l2_miss,
        timing.cpu,
        timing.l1_bytes >> 10,
        timing.l1_ways,
        timing.l2_bytes >> 10,
        timing.l2_ways,
        timing.line_bytes
    )?;
    writeln!(
        out,
        "this run's best native times refit it as instructions x {:.4} ns + L2 misses x {:.2} ns",
        live_timing[0], live_timing[1]
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<26} {:>8} {:>8} {:>12} {:>9} {:>9} {:>9} {:>9}",
        "workload", "dst", "edges", "instructions", "L1 miss", "L2 miss", "model ms", "wall ms",
    )?;
    for m in &measured {
        writeln!(
            out,
            "{:<26} {:>8} {:>8} {:>12} {:>9} {:>9} {:>9.3} {:>9.3}{}",
            m.workload.name,
            m.counts.dst_nodes,
            m.counts.edges_sampled,
            m.profile.instructions,
            m.profile.l1_misses,
            m.profile.l2_misses,
            m.ns / 1e6,
            m.wall_ns / 1e6,
            if m.workload.aim == Aim::Check {
                "  (check, not fitted)"
            } else {
                ""
            }
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<22} {:>9} {:>12} {:>12} {:>11}  {:>6}",
        "cost", "measured", "wall clock", "instructions", "configured", "ratio"
    )?;
    for (i, field) in ["host.node_ns", "host.edge_sampled_ns"].iter().enumerate() {
        let m = modelled[i].round().max(0.0) as u64;
        let c = configured[i];
        writeln!(
            out,
            "{field:<22} {:>6.1} ns {:>9.1} ns {:>12.0} {:>8} ns  {:>5.2}x",
            modelled[i],
            wall[i],
            instructions[i],
            c,
            m as f64 / c.max(1) as f64
        )?;
    }
    writeln!(out)?;
    let held = modelled.map(f64::round);
    let described = configured.map(|c| c as f64);
    for m in &measured {
        writeln!(
            out,
            "{} {}: the measured costs price it {:+.1} % off its modelled time, the \
             description's {:+.1} %; the wall-clock costs {:+.1} % off its best run",
            if m.workload.aim == Aim::Check {
                "check"
            } else {
                "fit"
            },
            m.workload.name,
            100.0 * (priced(m, &held) / m.ns - 1.0),
            100.0 * (priced(m, &described) / m.ns - 1.0),
            100.0 * (priced(m, &wall) / m.wall_ns - 1.0),
        )?;
    }
    print!("{out}");
    Ok(check_verdict(
        args.check,
        &stale,
        &format!("{source}'s [host] costs are more than 5 % off this machine's sampler"),
        &format!("{source}'s host.node_ns and host.edge_sampled_ns are current (within 5 %)"),
    ))
}
