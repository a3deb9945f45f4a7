//! `sagessd firmware calibrate`: the `[cores]` cycle costs measured from the firmware itself on
//! an emulated Cortex-A9.
//!
//! It builds the calibration image (`firmware/calibrate/board`: the firmware crate plus the
//! workloads of `sagessd-calibrate`, linked with `tests/board`'s start-up code) and the QEMU
//! profiling plugin (`firmware/calibrate/qemu-plugin`), boots the image on `qemu-system-arm
//! -M vexpress-a9 -cpu cortex-a9` with the description's device as its plan, and reads back
//! two things per workload: the work the firmware counted (from the UART) and the instructions
//! it executed with their modelled cache misses (from the plugin). Cycles per workload come
//! from `[core_timing]`; the cost per unit is the least-squares fit over the unit workloads,
//! and the check workload (a realistic minibatch mix, not fitted) says how well the fitted
//! costs predict what they did not see.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use sagessd_calibrate::workloads::{Aim, CHECK_JOBS};
use sagessd_experiments::calibrate::{calibrate, rewrite};
use sagessd_experiments::calibrate_fit::{UNITS, priced};
use sagessd_experiments::calibrate_floor::{InstructionFloor, check_minibatch_floor};
use sagessd_experiments::firmware_profile::{Grouping, profile};
use sagessd_qemu_a9_profile::profile::Segment;

use crate::{hw_source, load_hw};

/// Flags of `firmware calibrate`.
#[derive(Debug, Args)]
pub(crate) struct CalibrateArgs {
    /// Hardware description (TOML) whose device, `[cores]` clock and `[core_timing]` are
    /// used; default: the built-in Cosmos+ OpenSSD (hw-configs/cosmos-plus.toml).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Write the description with its `[cores]` costs replaced by the measured ones to PATH
    /// (comments are kept; review them).
    #[arg(long, value_name = "PATH")]
    write: Option<PathBuf>,
    /// Fail (exit status 1) unless every fitted cost in the description is within 3 % (or 1
    /// cycle) of the measured one: the check that shipped `[measured]` costs are current.
    #[arg(long)]
    check: bool,
    /// Seconds QEMU may run.
    #[arg(long, default_value_t = 900, value_name = "S")]
    qemu_timeout_s: u64,
    /// Where the arena lies past its 1 MiB boundary in each run, bytes (multiples of 64 below
    /// 65,536); the costs are fitted to the runs' mean. Another set than the default, with
    /// `--check`, tests whether a layout change moves any fitted cost by more than 3 %.
    #[arg(long, value_delimiter = ',', value_name = "B,B,…",
          default_values_t = sagessd_experiments::calibrate::PLACEMENTS)]
    placements: Vec<u32>,
}

/// Flags of `firmware profile`.
#[derive(Debug, Args)]
pub(crate) struct ProfileArgs {
    /// Hardware description (TOML) whose device and `[core_timing]` are used; default: the
    /// built-in Cosmos+ OpenSSD (hw-configs/cosmos-plus.toml).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The calibration workload to profile (as `firmware calibrate` names them).
    #[arg(long, default_value = "check_minibatch", value_name = "NAME")]
    workload: String,
    /// Group by `function` (the innermost function of ours each instruction was inlined
    /// from), `line` (its source line), `chain` (up to three of our functions it was inlined
    /// through, innermost first) or `symbol` (the function the linker placed it in).
    #[arg(long, default_value = "function", value_name = "HOW")]
    by: String,
    /// Rows to print (the rest are summed in one line).
    #[arg(long, default_value_t = 30, value_name = "N")]
    top: usize,
    /// Seconds QEMU may run.
    #[arg(long, default_value_t = 900, value_name = "S")]
    qemu_timeout_s: u64,
}

/// Runs `firmware profile`: one workload's cycles by function or line.
pub(crate) fn run_profile(args: ProfileArgs) -> anyhow::Result<ExitCode> {
    let grouping = match args.by.as_str() {
        "function" => Grouping::Function,
        "line" => Grouping::Line,
        "symbol" => Grouping::Symbol,
        "chain" => Grouping::Chain,
        other => anyhow::bail!("--by {other:?}: want function, line, chain or symbol"),
    };
    let hw = load_hw(args.config.as_ref())?;
    let source = hw_source(args.config.as_ref());
    let p = profile(&hw, &args.workload, grouping, args.qemu_timeout_s)?;
    let total = &p.total;
    let mut out = String::new();
    writeln!(
        out,
        "Firmware profile: {} on {} ({source}), QEMU run {:.0} s: {:.1} Mcycles modelled, {} \
         instructions, {} L1D misses, {} DRAM accesses",
        p.workload,
        hw.device.name,
        p.qemu_s,
        p.cycles / 1e6,
        total.instructions,
        total.misses.l1d_misses,
        total.misses.l2_data_misses + total.misses.l2_instruction_misses
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:>6} {:>6} {:>9} {:>12} {:>10} {:>9} {:>9}  {}",
        "share", "cum", "Mcycles", "instructions", "accesses", "L1D miss", "DRAM", args.by
    )?;
    let mut cumulative = 0.0;
    let line = |out: &mut String, name: &str, c: &Segment, cycles: f64, cumulative: f64| {
        let m = &c.misses;
        writeln!(
            out,
            "{:>5.1}% {:>5.1}% {:>9.2} {:>12} {:>10} {:>9} {:>9}  {name}",
            100.0 * cycles / p.cycles,
            100.0 * cumulative / p.cycles,
            cycles / 1e6,
            c.instructions,
            m.data_accesses,
            m.l1d_misses,
            m.l2_data_misses + m.l2_instruction_misses,
        )
    };
    for row in p.rows.iter().take(args.top) {
        cumulative += row.cycles;
        line(&mut out, &row.name, &row.counts, row.cycles, cumulative)?;
    }
    if p.rows.len() > args.top {
        let mut rest = Segment::default();
        let mut cycles = 0.0;
        for row in &p.rows[args.top..] {
            rest.add(&row.counts);
            cycles += row.cycles;
        }
        cumulative += cycles;
        let name = format!("({} others)", p.rows.len() - args.top);
        line(&mut out, &name, &rest, cycles, cumulative)?;
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// Runs `firmware calibrate`: the calibration's tables, the description rewritten with
/// `--write`, and with `--check` the verdict.
pub(crate) fn run(args: CalibrateArgs) -> anyhow::Result<ExitCode> {
    let hw = load_hw(args.config.as_ref())?;
    let source = hw_source(args.config.as_ref());
    let c = calibrate(&hw, &source, args.qemu_timeout_s, &args.placements)?;
    let timing = &c.timing;
    let mut out = String::new();
    writeln!(
        out,
        "Firmware calibration: {} ({source}), {} at {} MHz; QEMU {} {} runs, {:.0} s in all \
         (arena placements {:?}; {} kept from an identical earlier run)",
        hw.device.name,
        timing.cpu,
        hw.cores.clock_mhz,
        c.machine.machine,
        c.placements.len(),
        c.qemu_s,
        c.placements,
        c.kept
    )?;
    if let Some(note) = &c.note {
        writeln!(out, "note: {note}")?;
    }
    writeln!(
        out,
        "cycles = instructions x {:.3} + L2 hits x {} + DRAM accesses x ({} + {} ns); caches L1I {} KiB, \
         L1D {} KiB ({}-way), L2 {} KiB ({}-way), {} B lines",
        f64::from(timing.base_cycles_per_1000_instructions) / 1000.0,
        timing.l2_hit_penalty_cycles,
        timing.dram_penalty_cycles,
        timing.dram_penalty_ns,
        timing.l1i_bytes >> 10,
        timing.l1d_bytes >> 10,
        timing.l1_ways,
        timing.l2_bytes >> 10,
        timing.l2_ways,
        timing.line_bytes
    )?;
    writeln!(out)?;
    // The costs as a description holds them (whole cycles), and what they make of each
    // workload: the fit's residual per workload, and the checks' error.
    writeln!(
        out,
        "least squares over {} fitted workloads for {} units (each workload's relative error \
         weighs the same); cycles are the placements' mean",
        c.measured.iter().filter(|m| m.aim != Aim::Check).count(),
        c.fitted.len()
    )?;
    writeln!(
        out,
        "{:<26} {:>14} {:>10} {:>10} {:>9} {:>5} {:>9}  fitted unit",
        "workload", "instructions", "L1D miss", "DRAM", "Mcycles", "IPC", "residual"
    )?;
    for m in &c.measured {
        let unit = match m.aim {
            Aim::Unit(name) => name,
            Aim::Mix => "(a mix, fitted)",
            Aim::Check => "(check, not fitted)",
        };
        writeln!(
            out,
            "{:<26} {:>14} {:>10} {:>10} {:>9.2} {:>5.2} {:>+8.1}%  {unit}",
            m.name,
            m.profile.instructions,
            m.profile.misses.l1d_misses,
            m.profile.misses.l2_data_misses + m.profile.misses.l2_instruction_misses,
            m.cycles / 1e6,
            m.profile.instructions as f64 / m.cycles,
            100.0 * (priced(&m.work, &c.held) / m.cycles - 1.0)
        )?;
    }
    writeln!(out)?;
    // What a description holds: the firmware's measured cycles, plus what the board's glue
    // spends outside the library on the units that touch hardware registers.
    writeln!(
        out,
        "{:<28} {:>9} {:>8} {:>9} {:>11}  {:>7} {:>9} {:>7}",
        "[cores] cost",
        "firmware",
        "+ board",
        "measured",
        "configured",
        "ratio",
        "placement",
        "halves"
    )?;
    for (u, unit) in UNITS.iter().enumerate() {
        let old = c.configured[u];
        if !c.fitted.contains(&u) {
            writeln!(
                out,
                "{:<28} {:>9} {:>8} {:>9} {:>11}  not measured",
                unit.field, "-", "-", "-", old
            )?;
            continue;
        }
        let m = c.described[u];
        let halves = c
            .halves
            .map_or_else(|| "-".to_string(), |h| format!("{:.1}%", 100.0 * h[u]));
        writeln!(
            out,
            "{:<28} {:>9.0} {:>8} {:>9} {:>11}  {:>6.2}x {:>8.1}% {:>7}",
            unit.field,
            c.costs[u],
            c.board[u],
            m,
            old,
            m as f64 / old.max(1) as f64,
            100.0 * c.spread[u],
            halves
        )?;
    }
    writeln!(
        out,
        "(placement: the most a unit's cost fitted on one arena placement differs from the \
         costs fitted on their mean; halves: how far its costs fitted on the mean of every other \
         placement and on the mean of the rest lie apart, what swapping one half of the \
         placements for the other does to a mean of half of them)"
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "held-out checks (not fitted): what the firmware measured beside what the fitted costs \
         predict"
    )?;
    for (name, measured, fitted, configured) in c.checks() {
        writeln!(
            out,
            "check {name}: the firmware measured {:.1} Mcycles; its fitted costs predict {:.1} \
             ({:+.1} %); the description's costs, board glue included, {:.1} ({:+.1} %)",
            measured / 1e6,
            fitted / 1e6,
            100.0 * (fitted / measured - 1.0),
            configured / 1e6,
            100.0 * (configured / measured - 1.0)
        )?;
    }
    if let Some(m) = c.measured.iter().find(|m| m.name == "check_minibatch") {
        let per_job = m.cycles / f64::from(CHECK_JOBS);
        writeln!(
            out,
            "check minibatch (1,024 targets, fanouts 25,10): {:.1} Mcycles a minibatch on the \
             firmware (the mean of its {} jobs)",
            per_job / 1e6,
            CHECK_JOBS
        )?;
        let isa = if c.machine == sagessd_calibrate::VIRT_A53 {
            InstructionFloor::AARCH64
        } else {
            InstructionFloor::ARMV7
        };
        let (floor, dram, instructions, _) =
            check_minibatch_floor(timing, hw.cores.clock_mhz, &isa, CHECK_JOBS);
        writeln!(
            out,
            "its floor (docs/model.md): {:.1} Mcycles ({:.0} k DRAM accesses it cannot avoid, \
             {:.1} M instructions it needs); the firmware is {:.2}x the floor",
            floor / 1e6,
            dram / 1e3,
            instructions / 1e6,
            per_job / floor
        )?;
    }
    print!("{out}");
    if let Some(u) = c.unisolated() {
        anyhow::bail!(
            "the fit priced {} at {:.1} cycles: the workloads do not isolate it",
            UNITS[u].field,
            c.costs[u]
        );
    }
    if let Some(path) = &args.write {
        let text = match &args.config {
            Some(p) => {
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
            }
            None => sagessd_emulator::config::COSMOS_PLUS_TOML.to_string(),
        };
        let values: Vec<(&str, u64)> = c
            .fitted
            .iter()
            .map(|u| (UNITS[*u].field, c.described[*u]))
            .collect();
        std::fs::write(path, rewrite(&text, &values))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {} with the measured costs", path.display());
    }
    Ok(check_verdict(
        args.check,
        &c.stale,
        &format!("{source} prices these units more than 3 % off what the firmware measures"),
        &format!("every measured cost in {source} is current (within 3 %)"),
    ))
}

/// The end of a calibration's report: with `check`, `FAIL: {fail}` and exit status 1 if any
/// cost in `stale` is off, `OK: {ok}` otherwise.
pub(crate) fn check_verdict(
    check: bool,
    stale: &[String],
    fail: &str,
    ok: &str,
) -> std::process::ExitCode {
    if check && !stale.is_empty() {
        println!("FAIL: {fail}: {}", stale.join(", "));
        return std::process::ExitCode::FAILURE;
    }
    if check {
        println!("OK: {ok}");
    }
    std::process::ExitCode::SUCCESS
}
