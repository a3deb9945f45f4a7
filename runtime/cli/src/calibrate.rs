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
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::Context as _;
use clap::Args;
use sagessd_calibrate::workloads::{Aim, WORKLOADS, parse_report};
use sagessd_calibrate::{HOST_BUFFER_BYTES, MARKS_ADDRESS, PLAN_ADDRESS, Plan, RAM_MIB};
use sagessd_emulator::HwConfig;
use sagessd_emulator::config::CoreTimingConfig;
use sagessd_firmware::work::WorkCounters;
use sagessd_firmware::{Firmware, FirmwareConfig, hal::Geometry};
use zerocopy::IntoBytes;

use crate::calibrate_fit::{UNITS, check_verdict, configured, cycles, fit, priced};
use crate::{hw_source, load_hw};
use sagessd_qemu_a9_profile::profile::Segment;

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
}

/// What one workload measured.
#[derive(Clone, Debug)]
struct Measured {
    name: &'static str,
    aim: Aim,
    work: WorkCounters,
    profile: Segment,
    cycles: f64,
}

/// Guest RAM the image cannot hand to the workloads: the 1 MiB image, the marker page and the
/// 1 MiB plan region, and slack.
const RESERVED_BYTES: u64 = 4 << 20;
/// Flash pages the workloads write (two graphs of 8 MiB at most, an 8 MiB read region, the
/// firmware's checkpoints), rounded up.
const FLASH_PAGES: u64 = 8192;

/// The plan for `hw`'s device; fewer ISP slots than described if the arena would not fit the
/// guest's RAM (a slot's buffers change no per-unit cost). Returns the plan and, if slots were
/// cut, a note saying so.
fn plan_for(hw: &HwConfig) -> anyhow::Result<(Plan, Option<String>)> {
    let geometry: Geometry = hw.nand.geometry();
    // What the image boots (`Plan::decode`): one lane, the board's window.
    let mut config = FirmwareConfig {
        isp_lanes: 1,
        isp_window_pages: FirmwareConfig::quarter_buffer_window(hw.firmware.page_buffer_pages),
        tunnel: false,
        max_feature_bytes: 0,
        ..hw.firmware_config()
    };
    let ram = u64::from(RAM_MIB) << 20;
    let flash = 4 * geometry.page_count()
        + 4 * u64::from(geometry.block_count())
        + FLASH_PAGES.min(geometry.page_count()) * geometry.window_bytes() as u64;
    let described = config.isp_slots;
    loop {
        type Fw = Firmware<sagessd_emulator::NandArray, Vec<u8>>;
        let arena = Fw::dram_size_bytes(&config, &geometry)
            .map_err(|e| anyhow::anyhow!("the firmware cannot run this description: {e:?}"))?
            as u64;
        if arena + HOST_BUFFER_BYTES as u64 + flash + RESERVED_BYTES <= ram {
            break;
        }
        anyhow::ensure!(
            config.isp_slots > 1,
            "the firmware's arena ({} MiB) does not fit the calibration guest's {RAM_MIB} MiB",
            arena >> 20
        );
        config.isp_slots -= 1;
    }
    let note = (config.isp_slots != described).then(|| {
        format!(
            "isp_slots {} instead of {described}: the arena must fit the guest's {RAM_MIB} MiB \
             (a job's buffers change no per-unit cost)",
            config.isp_slots
        )
    });
    Ok((Plan { geometry, config }, note))
}

/// The repository the binary was built from (the image and plugin build from its sources).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds the image and the plugin; returns their paths.
fn build() -> anyhow::Result<(PathBuf, PathBuf)> {
    let script = repo_root().join("firmware/calibrate/board/build.sh");
    anyhow::ensure!(
        script.exists(),
        "{} not found: `firmware calibrate` builds its image from the sagessd sources it was \
         built from",
        script.display()
    );
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed ({})",
        script.display(),
        out.status
    );
    let text = String::from_utf8(out.stdout)?;
    let mut lines = text.lines().map(PathBuf::from);
    match (lines.next(), lines.next()) {
        (Some(elf), Some(plugin)) => Ok((elf, plugin)),
        _ => anyhow::bail!("{} printed {text:?}, not two paths", script.display()),
    }
}

/// `SIZE:WAYS:LINE` of one cache, as the plugin takes it.
fn geometry_arg(bytes: u32, ways: u32, line: u32) -> String {
    format!("{bytes}:{ways}:{line}")
}

/// Boots the image under QEMU with the plugin; returns the UART output and the profile.
fn run_qemu(
    elf: &Path,
    plugin: &Path,
    plan: &Plan,
    timing: &CoreTimingConfig,
    timeout_s: u64,
) -> anyhow::Result<(String, String)> {
    let dir = elf
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{} has no folder", elf.display()))?;
    let plan_path = dir.join("plan.bin");
    std::fs::write(&plan_path, plan.encode().as_bytes())
        .with_context(|| format!("writing {}", plan_path.display()))?;
    let profile_path = dir.join("profile.txt");
    let _ = std::fs::remove_file(&profile_path);
    let plugin_arg = format!(
        "{},marks={MARKS_ADDRESS:#x},out={},l1i={},l1d={},l2={}",
        plugin.display(),
        profile_path.display(),
        geometry_arg(timing.l1i_bytes, timing.l1_ways, timing.line_bytes),
        geometry_arg(timing.l1d_bytes, timing.l1_ways, timing.line_bytes),
        geometry_arg(timing.l2_bytes, timing.l2_ways, timing.line_bytes),
    );
    let loader = format!(
        "loader,file={},addr={PLAN_ADDRESS:#x},force-raw=on",
        plan_path.display()
    );
    let out = Command::new("timeout")
        .arg(timeout_s.to_string())
        .args(["qemu-system-arm", "-M", "vexpress-a9", "-cpu", "cortex-a9"])
        .args(["-m", &format!("{RAM_MIB}M")])
        .args([
            "-nographic",
            "-monitor",
            "none",
            "-serial",
            "stdio",
            "-nic",
            "none",
        ])
        .args(["-audiodev", "none,id=snd", "-global", "pl041.audiodev=snd"])
        .args(["-semihosting-config", "enable=on,target=native"])
        .args(["-device", &loader, "-plugin", &plugin_arg, "-d", "plugin"])
        .arg("-kernel")
        .arg(elf)
        .stdin(Stdio::null())
        .output()
        .context("running qemu-system-arm (apt-get install qemu-system-arm)")?;
    let uart = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    let failed = uart.lines().find(|l| l.starts_with("calibrate FAIL"));
    anyhow::ensure!(
        out.status.success() && failed.is_none(),
        "the calibration image failed ({}): {}\n{}",
        out.status,
        failed.unwrap_or("no report"),
        String::from_utf8_lossy(&out.stderr)
    );
    let profile = std::fs::read_to_string(&profile_path)
        .with_context(|| format!("reading the plugin's profile {}", profile_path.display()))?;
    Ok((uart, profile))
}

/// Pairs each workload's UART line with its profile segment.
fn measure(
    uart: &str,
    profile: &str,
    timing: &CoreTimingConfig,
    clock_mhz: u32,
) -> anyhow::Result<Vec<Measured>> {
    let segments: Vec<Segment> = profile
        .lines()
        .enumerate()
        .map(|(i, line)| match Segment::parse(line) {
            Some((k, segment)) if k == i => Ok(segment),
            _ => anyhow::bail!("profile line {} is not segment {i}: {line:?}", i + 1),
        })
        .collect::<anyhow::Result<_>>()?;
    let reports: Vec<_> = uart.lines().filter_map(parse_report).collect();
    let mut out = Vec::new();
    for w in WORKLOADS {
        let (_, segment, work) = reports
            .iter()
            .find(|r| r.0 == w.name)
            .ok_or_else(|| anyhow::anyhow!("the image reported nothing for {}", w.name))?;
        let profile = *segments.get(*segment).ok_or_else(|| {
            anyhow::anyhow!(
                "{} names segment {segment}; the profile has {}",
                w.name,
                segments.len()
            )
        })?;
        out.push(Measured {
            name: w.name,
            aim: w.aim,
            work: *work,
            profile,
            cycles: cycles(&profile, timing, clock_mhz),
        });
    }
    Ok(out)
}

/// The fitted costs, in [`UNITS`] order, and which units were fitted.
fn fit_costs(
    measured: &[Measured],
    hw: &HwConfig,
) -> anyhow::Result<([f64; WorkCounters::COUNT], Vec<usize>)> {
    let mut fitted: Vec<usize> = measured
        .iter()
        .filter_map(|m| match m.aim {
            Aim::Unit(name) => UNITS.iter().position(|u| u.counter == name),
            Aim::Check => None,
        })
        .collect();
    fitted.sort_unstable();
    fitted.dedup();
    let fixed = configured(&hw.cores).map(|c| c as f64);
    let rows: Vec<(WorkCounters, f64)> = measured
        .iter()
        .filter(|m| m.aim != Aim::Check)
        .map(|m| (m.work, m.cycles))
        .collect();
    let costs = fit(&rows, &fitted, &fixed)?;
    Ok((costs, fitted))
}

/// Rounds a fitted cost to the whole cycles a description holds (at least 1).
fn whole(cost: f64) -> u64 {
    (cost.round() as u64).max(1)
}

/// Cycles the board's glue adds to each unit (`[core_timing]`'s `board_cycles_per_*`), in
/// [`UNITS`] order.
fn board_cycles(timing: &CoreTimingConfig) -> [u64; WorkCounters::COUNT] {
    std::array::from_fn(|u| match UNITS[u].field {
        "cycles_per_command" => timing.board_cycles_per_command,
        "cycles_per_flash_op" => timing.board_cycles_per_flash_op,
        "cycles_per_poll" => timing.board_cycles_per_poll,
        _ => 0,
    })
}

/// Replaces the values of `fields` in the `[cores]` table of `text`.
fn rewrite(text: &str, values: &[(&str, u64)]) -> String {
    let mut table = "";
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            table = trimmed;
        }
        let replaced = (table == "[cores]")
            .then(|| {
                values.iter().find_map(|(field, v)| {
                    let rest = trimmed.strip_prefix(field)?.trim_start();
                    rest.starts_with('=').then(|| format!("{field} = {v}"))
                })
            })
            .flatten();
        out.push_str(replaced.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Runs `firmware calibrate`.
pub(crate) fn run(args: CalibrateArgs) -> anyhow::Result<ExitCode> {
    let hw = load_hw(args.config.as_ref())?;
    let source = hw_source(args.config.as_ref());
    let timing = hw.core_timing.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "{source} has no [core_timing] table: calibration needs the core's caches and latencies"
        )
    })?;
    let (plan, note) = plan_for(&hw)?;
    let (elf, plugin) = build()?;
    let started = std::time::Instant::now();
    let (uart, profile) = run_qemu(&elf, &plugin, &plan, &timing, args.qemu_timeout_s)?;
    let qemu_s = started.elapsed().as_secs_f64();
    let measured = measure(&uart, &profile, &timing, hw.cores.clock_mhz)?;
    let (costs, fitted) = fit_costs(&measured, &hw)?;
    let old = configured(&hw.cores);

    let mut out = String::new();
    writeln!(
        out,
        "Firmware calibration: {} ({source}), {} at {} MHz; QEMU vexpress-a9 run {qemu_s:.0} s",
        hw.device.name, timing.cpu, hw.cores.clock_mhz
    )?;
    if let Some(note) = &note {
        writeln!(out, "note: {note}")?;
    }
    writeln!(
        out,
        "cycles = instructions x {:.3} + L2 hits x {} + DRAM accesses x {} ns; caches L1I {} KiB, \
         L1D {} KiB ({}-way), L2 {} KiB ({}-way), {} B lines",
        f64::from(timing.base_cycles_per_1000_instructions) / 1000.0,
        timing.l2_hit_penalty_cycles,
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
    // workload: the fit's error per workload, and the check's.
    let held: [f64; WorkCounters::COUNT] = std::array::from_fn(|u| {
        if fitted.contains(&u) {
            whole(costs[u]) as f64
        } else {
            costs[u]
        }
    });
    writeln!(
        out,
        "{:<26} {:>14} {:>10} {:>10} {:>9} {:>5} {:>7}  fitted unit",
        "workload", "instructions", "L1D miss", "DRAM", "Mcycles", "IPC", "priced"
    )?;
    for m in &measured {
        let unit = match m.aim {
            Aim::Unit(name) => name,
            Aim::Check => "(check, not fitted)",
        };
        writeln!(
            out,
            "{:<26} {:>14} {:>10} {:>10} {:>9.2} {:>5.2} {:>+6.1}%  {unit}",
            m.name,
            m.profile.instructions,
            m.profile.misses.l1d_misses,
            m.profile.misses.l2_data_misses + m.profile.misses.l2_instruction_misses,
            m.cycles / 1e6,
            m.profile.instructions as f64 / m.cycles,
            100.0 * (priced(&m.work, &held) / m.cycles - 1.0)
        )?;
    }
    writeln!(out)?;
    // What a description holds: the firmware's measured cycles, plus what the board's glue
    // spends outside the library on the units that touch hardware registers.
    let board = board_cycles(&timing);
    let described: [u64; WorkCounters::COUNT] = std::array::from_fn(|u| whole(costs[u]) + board[u]);
    writeln!(
        out,
        "{:<28} {:>9} {:>8} {:>9} {:>11}  {:>7}",
        "[cores] cost", "firmware", "+ board", "measured", "configured", "ratio"
    )?;
    let mut stale = Vec::new();
    for (u, unit) in UNITS.iter().enumerate() {
        if !fitted.contains(&u) {
            writeln!(
                out,
                "{:<28} {:>9} {:>8} {:>9} {:>11}  not measured",
                unit.field, "-", "-", "-", old[u]
            )?;
            continue;
        }
        let m = described[u];
        writeln!(
            out,
            "{:<28} {:>9.0} {:>8} {:>9} {:>11}  {:>6.2}x",
            unit.field,
            costs[u],
            board[u],
            m,
            old[u],
            m as f64 / old[u].max(1) as f64
        )?;
        if m.abs_diff(old[u]) > 1 && m.abs_diff(old[u]) * 100 > 3 * m {
            stale.push(format!("{} = {} (measured {m})", unit.field, old[u]));
        }
    }
    writeln!(out)?;
    for m in measured.iter().filter(|m| m.aim == Aim::Check) {
        let fitted_prediction = priced(&m.work, &held);
        let configured_prediction = priced(&m.work, &old.map(|c| c as f64));
        writeln!(
            out,
            "check {}: the firmware measured {:.1} Mcycles; its fitted costs predict {:.1} \
             ({:+.1} %); the description's costs, board glue included, {:.1} ({:+.1} %)",
            m.name,
            m.cycles / 1e6,
            fitted_prediction / 1e6,
            100.0 * (fitted_prediction / m.cycles - 1.0),
            configured_prediction / 1e6,
            100.0 * (configured_prediction / m.cycles - 1.0)
        )?;
    }
    print!("{out}");
    if let Some(u) = fitted.iter().find(|u| costs[**u] <= 0.0) {
        anyhow::bail!(
            "the fit priced {} at {:.1} cycles: the workloads do not isolate it",
            UNITS[*u].field,
            costs[*u]
        );
    }
    if let Some(path) = &args.write {
        let text = match &args.config {
            Some(p) => {
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
            }
            None => sagessd_emulator::config::COSMOS_PLUS_TOML.to_string(),
        };
        let values: Vec<(&str, u64)> = fitted
            .iter()
            .map(|u| (UNITS[*u].field, described[*u]))
            .collect();
        std::fs::write(path, rewrite(&text, &values))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {} with the measured costs", path.display());
    }
    Ok(check_verdict(
        args.check,
        &stale,
        &format!("{source} prices these units more than 3 % off what the firmware measures"),
        &format!("every measured cost in {source} is current (within 3 %)"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrite_touches_only_cores_values() {
        let text = "[nand]\ncycles_per_command = 5\n[cores]\n# cost\ncycles_per_command = 2_000\n\
                    cycles_per_command_x = 3\n[dram]\n";
        let out = rewrite(text, &[("cycles_per_command", 4321)]);
        assert_eq!(
            out,
            "[nand]\ncycles_per_command = 5\n[cores]\n# cost\ncycles_per_command = 4321\n\
             cycles_per_command_x = 3\n[dram]\n"
        );
    }

    #[test]
    fn the_shipped_descriptions_fit_the_guest() {
        for hw in [HwConfig::cosmos_plus(), HwConfig::newport()] {
            let (plan, _) = plan_for(&hw).unwrap();
            assert_eq!(plan.geometry, hw.nand.geometry());
        }
    }
}
#[cfg(test)]
mod isolation {
    use super::*;
    use sagessd_calibrate::workloads::run;
    use sagessd_calibrate::{HOST_BUFFER_BYTES, NoMarks};

    /// Each unit workload isolates its unit: it is where the fit learns that unit's cost. Run
    /// natively, the workloads count the same work as on the A9; cycles priced at the shipped
    /// Cosmos+ costs stand in for a measurement. When one workload's cycles rise by 10 %, the
    /// refit must put most of that rise on the unit it aims at (the change of each unit's cost
    /// times its count in that workload).
    #[test]
    fn each_unit_workload_is_where_its_unit_is_priced() {
        let hw = HwConfig::cosmos_plus();
        let (plan, _) = plan_for(&hw).unwrap();
        let mut memory = vec![0u8; 600 << 20];
        let mut out = String::new();
        run(&plan, &mut memory, HOST_BUFFER_BYTES, NoMarks, &mut out).unwrap();
        let shipped = configured(&hw.cores).map(|c| c as f64);
        let rows: Vec<(Aim, WorkCounters, f64)> = out
            .lines()
            .filter_map(parse_report)
            .map(|(name, _, work)| {
                let w = WORKLOADS.iter().find(|w| w.name == name).unwrap();
                (w.aim, work, priced(&work, &shipped))
            })
            .filter(|r| r.0 != Aim::Check)
            .collect();
        assert_eq!(rows.len(), 12, "one workload per fitted unit");
        let unit_of = |aim: Aim| match aim {
            Aim::Unit(name) => UNITS.iter().position(|u| u.counter == name).unwrap(),
            Aim::Check => unreachable!(),
        };
        let mut fitted: Vec<usize> = rows.iter().map(|r| unit_of(r.0)).collect();
        fitted.sort_unstable();
        fitted.dedup();
        let fit_with = |bumped: Option<usize>| {
            let rows: Vec<(WorkCounters, f64)> = rows
                .iter()
                .enumerate()
                .map(|(i, r)| (r.1, if Some(i) == bumped { r.2 * 1.1 } else { r.2 }))
                .collect();
            fit(&rows, &fitted, &shipped).unwrap()
        };
        let base = fit_with(None);
        for u in &fitted {
            assert!(
                (base[*u] / shipped[*u] - 1.0).abs() < 1e-6,
                "{}",
                UNITS[*u].field
            );
        }
        let names: Vec<&str> = WORKLOADS
            .iter()
            .filter(|w| w.aim != Aim::Check)
            .map(|w| w.name)
            .collect();
        let mut wrong = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let moved = fit_with(Some(i));
            let counts = row.1.values();
            let change = |u: usize| {
                (moved[u] - base[u]).abs() * counts[u] as f64 / UNITS[u].per as f64 / row.2
            };
            let aim = unit_of(row.0);
            let most = *fitted
                .iter()
                .max_by(|a, b| change(**a).total_cmp(&change(**b)))
                .unwrap();
            if most != aim {
                wrong.push(format!(
                    "{}: of its +10 % cycles the refit put {:.1} % on {}, {:.1} % on its own unit",
                    names[i],
                    100.0 * change(most),
                    UNITS[most].field,
                    100.0 * change(aim)
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
