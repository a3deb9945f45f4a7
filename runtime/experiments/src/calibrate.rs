//! The `[cores]` cycle costs measured from the firmware itself on an emulated Cortex-A9 (what
//! `sagessd firmware calibrate` prints and writes).
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

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context as _;
use sagessd_calibrate::workloads::{Aim, WORKLOADS, parse_report};
use sagessd_calibrate::{Board, HOST_BUFFER_BYTES, Plan, RAM_MIB, VEXPRESS_A9, VIRT_A53};
use sagessd_emulator::HwConfig;
use sagessd_emulator::config::CoreTimingConfig;
use sagessd_firmware::work::WorkCounters;
use sagessd_firmware::{FirmwareConfig, hal::Geometry};
use sagessd_qemu_a9_profile::profile::Segment;
use zerocopy::IntoBytes;

use crate::calibrate_fit::{UNITS, configured, cycles, fit, priced};

/// What a calibration measured and fitted.
#[derive(Clone, Debug)]
pub struct Calibration {
    /// The core's timing model (`[core_timing]`).
    pub timing: CoreTimingConfig,
    /// The machine QEMU emulated.
    pub machine: Board,
    /// Why the image ran with fewer ISP slots than described, if it did.
    pub note: Option<String>,
    /// QEMU's runs, seconds of wall clock.
    pub qemu_s: f64,
    /// The arena placements measured ([`PLACEMENTS`] unless asked otherwise).
    pub placements: Vec<u32>,
    /// How many of their runs were kept from an earlier identical run (not run again).
    pub kept: usize,
    /// Per unit, the largest relative difference between its cost fitted on one placement and
    /// on their average: how much the layout of the tables in the caches moves it.
    pub spread: [f64; WorkCounters::COUNT],
    /// Per unit, the relative difference between its costs fitted on the mean of every other
    /// placement (the even-numbered ones) and on the mean of the rest, relative to their
    /// average: how much a mean of half the placements moves when the other half replace them,
    /// an estimate (not a bound) of what a layout change does to a mean of that many, and more
    /// than it does to the mean of all of them. `None` with fewer than two placements.
    pub halves: Option<[f64; WorkCounters::COUNT]>,
    /// Each workload, its cycles averaged over the placements.
    pub measured: Vec<Measured>,
    /// The fitted cost per unit (cycles), in [`UNITS`] order.
    pub costs: [f64; WorkCounters::COUNT],
    /// The units the workloads fitted.
    pub fitted: Vec<usize>,
    /// The costs as a description holds them: fitted ones in whole cycles, the others as
    /// configured.
    pub held: [f64; WorkCounters::COUNT],
    /// Cycles the board's glue adds to each unit.
    pub board: [u64; WorkCounters::COUNT],
    /// What a description should hold: the firmware's whole cycles plus the board's.
    pub described: [u64; WorkCounters::COUNT],
    /// What the description holds now.
    pub configured: [u64; WorkCounters::COUNT],
    /// The fitted units the description prices more than 3 % (and 1 cycle) off.
    pub stale: Vec<String>,
}

impl Calibration {
    /// The check workloads' (not fitted) cycles against what the fitted and the configured
    /// costs predict: (workload, measured, fitted prediction, configured prediction).
    pub fn checks(&self) -> Vec<(&'static str, f64, f64, f64)> {
        self.measured
            .iter()
            .filter(|m| m.aim == Aim::Check)
            .map(|m| {
                (
                    m.name,
                    m.cycles,
                    priced(&m.work, &self.held),
                    priced(&m.work, &self.configured.map(|c| c as f64)),
                )
            })
            .collect()
    }

    /// A fitted unit the workloads did not isolate (priced at zero cycles or fewer), if any.
    pub fn unisolated(&self) -> Option<usize> {
        self.fitted.iter().copied().find(|u| self.costs[*u] <= 0.0)
    }
}

/// Builds the calibration image and plugin, runs them under QEMU (at most `timeout_s`) on
/// `hw`'s device (`source` names where its description came from), once per arena placement of
/// `placements` (see [`check_placements`]), and fits the costs to the runs' mean.
pub fn calibrate(
    hw: &HwConfig,
    source: &str,
    timeout_s: u64,
    placements: &[u32],
) -> anyhow::Result<Calibration> {
    check_placements(placements)?;
    let timing = hw.core_timing.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "{source} has no [core_timing] table: calibration needs the core's caches and latencies"
        )
    })?;
    let (plan, note) = plan_for(hw)?;
    let machine = board_for(&timing)?;
    let (elf, plugin) = build(&machine)?;
    let started = std::time::Instant::now();
    let runs = run_placements(
        &machine, &elf, &plugin, &plan, &timing, timeout_s, placements,
    )?;
    let qemu_s = started.elapsed().as_secs_f64();
    let kept = runs.iter().filter(|r| r.kept).count();
    let per_placement: Vec<Vec<Measured>> = runs
        .iter()
        .map(|r| measure(&r.uart, &r.profile, &timing, hw.cores.clock_mhz))
        .collect::<anyhow::Result<_>>()?;
    let measured = average(&per_placement)?;
    let (costs, fitted) = fit_costs(&measured, hw)?;
    // Each placement fitted on its own: how far a unit moves with where the arena lies.
    let mut spread = [0.0f64; WorkCounters::COUNT];
    for one in &per_placement {
        let (c, _) = fit_costs(one, hw)?;
        for u in &fitted {
            spread[*u] = spread[*u].max((c[*u] / costs[*u] - 1.0).abs());
        }
    }
    let halves = match per_placement.len() {
        0 | 1 => None,
        _ => {
            // The fit on the mean of every other placement, from the `first`.
            let fit_half = |first: usize| {
                let runs: Vec<Vec<Measured>> = per_placement
                    .iter()
                    .skip(first)
                    .step_by(2)
                    .cloned()
                    .collect();
                fit_costs(&average(&runs)?, hw).map(|(c, _)| c)
            };
            let (a, b) = (fit_half(0)?, fit_half(1)?);
            let mut d = [0.0f64; WorkCounters::COUNT];
            for u in &fitted {
                // A unit one half prices at nothing or less has no spread to speak of.
                let mean = (a[*u] + b[*u]) / 2.0;
                d[*u] = if mean > 0.0 && a[*u] > 0.0 && b[*u] > 0.0 {
                    (a[*u] - b[*u]).abs() / mean
                } else {
                    f64::INFINITY
                };
            }
            Some(d)
        }
    };
    let old = configured(&hw.cores);
    let held: [f64; WorkCounters::COUNT] = std::array::from_fn(|u| {
        if fitted.contains(&u) {
            whole(costs[u]) as f64
        } else {
            costs[u]
        }
    });
    let board = board_cycles(&timing);
    let described: [u64; WorkCounters::COUNT] = std::array::from_fn(|u| whole(costs[u]) + board[u]);
    let stale = fitted
        .iter()
        .filter(|&&u| {
            let m = described[u];
            m.abs_diff(old[u]) > 1 && m.abs_diff(old[u]) * 100 > 3 * m
        })
        .map(|&u| {
            format!(
                "{} = {} (measured {})",
                UNITS[u].field, old[u], described[u]
            )
        })
        .collect();
    Ok(Calibration {
        timing,
        machine,
        note,
        qemu_s,
        placements: placements.to_vec(),
        kept,
        spread,
        halves,
        measured,
        costs,
        fitted,
        held,
        board,
        described,
        configured: old,
        stale,
    })
}

/// Where the arena starts past the image's 1 MiB boundary in each run: offsets that put the
/// tables in other sets of every modelled cache (the L1s' 8 KiB ways, a Cortex-A9 L2's 64 KiB
/// and a Cortex-A53 L2's 64 KiB ways), so that the costs are those of no one layout. Offset k
/// is `(k × 391 mod 1024) × 64`: 16 lines of 64 bytes spread over the L2's way, 448 bytes apart
/// in the L1's. Sixteen, because the mean of four still moved a unit by 4.8 % when four other
/// placements replaced them (the page scanned; `--placements`); the runs are short (about 35 s
/// each on the A9 and 24 s on the A53, two at a time on this machine's two cores), so sixteen
/// cost about five and three minutes.
pub const PLACEMENTS: [u32; 16] = [
    0, 25_024, 50_048, 9_536, 34_560, 59_584, 19_072, 44_096, 3_584, 28_608, 53_632, 13_120,
    38_144, 63_168, 22_656, 47_680,
];

/// The arena's alignment past its 1 MiB boundary that a placement keeps: its cache line and
/// its widest word, as at offset 0.
pub const PLACEMENT_ALIGN: u32 = 64;
/// Placements beyond the L2's 64 KiB way put the tables in sets a smaller offset reaches.
pub const PLACEMENT_LIMIT: u32 = 64 << 10;

/// Checks a set of arena placements: at least one, none repeated, each a multiple of
/// [`PLACEMENT_ALIGN`] below [`PLACEMENT_LIMIT`]. Another set than [`PLACEMENTS`] measures
/// whether a layout change moves the fitted costs (`firmware calibrate --placements … --check`).
pub fn check_placements(placements: &[u32]) -> anyhow::Result<()> {
    anyhow::ensure!(!placements.is_empty(), "no arena placement to run");
    for (i, &p) in placements.iter().enumerate() {
        anyhow::ensure!(
            p % PLACEMENT_ALIGN == 0 && p < PLACEMENT_LIMIT,
            "arena placement {p}: want a multiple of {PLACEMENT_ALIGN} below {PLACEMENT_LIMIT}"
        );
        anyhow::ensure!(
            !placements[..i].contains(&p),
            "arena placement {p} given twice"
        );
    }
    Ok(())
}

/// Runs the image once per placement of `placements`, as many at once as the machine has
/// cores; returns each run, in placement order.
fn run_placements(
    board: &Board,
    elf: &Path,
    plugin: &Path,
    plan: &Plan,
    timing: &CoreTimingConfig,
    timeout_s: u64,
    placements: &[u32],
) -> anyhow::Result<Vec<Run>> {
    let parallel = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out: Vec<Option<anyhow::Result<Run>>> = (0..placements.len()).map(|_| None).collect();
    for batch in (0..placements.len()).collect::<Vec<_>>().chunks(parallel) {
        std::thread::scope(|scope| {
            let handles: Vec<_> = batch
                .iter()
                .map(|&k| {
                    let plan = Plan {
                        arena_offset_bytes: placements[k],
                        ..*plan
                    };
                    let tag = format!("placement{k}");
                    scope.spawn(move || {
                        run_qemu(board, elf, plugin, &plan, timing, timeout_s, &[], &tag)
                    })
                })
                .collect();
            for (&k, h) in batch.iter().zip(handles) {
                out[k] = Some(
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a QEMU run's thread panicked"))),
                );
            }
        });
    }
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("a placement did not run"))))
        .collect()
}

/// The workloads of several runs with their cycles averaged: each run must have counted the
/// same work (the firmware's work does not depend on where its tables lie).
fn average(runs: &[Vec<Measured>]) -> anyhow::Result<Vec<Measured>> {
    let first = runs.first().ok_or_else(|| anyhow::anyhow!("no run"))?;
    let mut out = first.clone();
    for (i, m) in out.iter_mut().enumerate() {
        for run in &runs[1..] {
            anyhow::ensure!(
                run[i].work == m.work,
                "{} counted other work in another placement: {:?} against {:?}",
                m.name,
                run[i].work,
                m.work
            );
        }
        m.cycles = runs.iter().map(|r| r[i].cycles).sum::<f64>() / runs.len() as f64;
        // The profile shown: the runs' counts added up, then divided (to the nearest count).
        let mut sum = Segment::default();
        for run in runs {
            sum.add(&run[i].profile);
        }
        m.profile = sum.divided(runs.len() as u64);
    }
    Ok(out)
}

/// What one workload measured.
#[derive(Clone, Debug)]
pub struct Measured {
    /// The workload.
    pub name: &'static str,
    /// The unit it isolates, or the check.
    pub aim: Aim,
    /// The work the firmware counted.
    pub work: WorkCounters,
    /// Its instructions and modelled cache misses.
    pub profile: Segment,
    /// Its cycles on the description's core.
    pub cycles: f64,
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
pub(crate) fn plan_for(hw: &HwConfig) -> anyhow::Result<(Plan, Option<String>)> {
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
        let arena = sagessd_firmware::dram_size_bytes(&config, &geometry)
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
    Ok((
        Plan {
            geometry,
            config,
            arena_offset_bytes: 0,
        },
        note,
    ))
}

/// The repository the binary was built from (the image and plugin build from its sources).
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The board QEMU emulates for a description's `[core_timing]` core: the Cortex-A9 in ARM
/// state (ARMv7-A) on vexpress-a9, the Cortex-A53 in AArch64 on virt.
pub fn board_for(timing: &CoreTimingConfig) -> anyhow::Result<Board> {
    match timing.cpu.as_str() {
        "Cortex-A9" => Ok(VEXPRESS_A9),
        "Cortex-A53" => Ok(VIRT_A53),
        other => anyhow::bail!(
            "[core_timing] cpu = {other:?}: the calibration image runs on a Cortex-A9 \
             (vexpress-a9) or a Cortex-A53 (virt)"
        ),
    }
}

/// Builds the image for `board` and the plugin; returns their paths.
pub(crate) fn build(board: &Board) -> anyhow::Result<(PathBuf, PathBuf)> {
    let script = repo_root().join("firmware/calibrate/board/build.sh");
    anyhow::ensure!(
        script.exists(),
        "{} not found: `firmware calibrate` builds its image from the sagessd sources it was \
         built from",
        script.display()
    );
    let arch = if *board == VIRT_A53 {
        "aarch64"
    } else {
        "armv7a"
    };
    let out = Command::new(&script)
        .arg(arch)
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

/// One run of the image: what its UART printed, the plugin's profile, and whether it was kept
/// from an earlier identical run rather than run now.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    pub uart: String,
    pub profile: String,
    pub kept: bool,
}

/// What an ELF image loads: its `PT_LOAD` segments' addresses and bytes, in order (what QEMU
/// runs; the symbol table, which the C compiler's local names make differ from one link to
/// the next, is left out).
fn loaded_bytes(elf: &[u8]) -> anyhow::Result<Vec<u8>> {
    let bad = || anyhow::anyhow!("the calibration image is not an ELF file QEMU could load");
    let field = |at: usize, len: usize| -> anyhow::Result<u64> {
        let b = elf.get(at..at + len).ok_or_else(bad)?;
        Ok(b.iter().rev().fold(0u64, |v, x| v << 8 | u64::from(*x)))
    };
    anyhow::ensure!(elf.starts_with(b"\x7fELF") && elf.get(5) == Some(&1), bad());
    let wide = elf.get(4) == Some(&2);
    let (phoff, phentsize, phnum) = if wide {
        (field(0x20, 8)?, field(0x36, 2)?, field(0x38, 2)?)
    } else {
        (field(0x1c, 4)?, field(0x2a, 2)?, field(0x2c, 2)?)
    };
    let mut out = Vec::new();
    for i in 0..phnum {
        let ph = (phoff + i * phentsize) as usize;
        if field(ph, 4)? != 1 {
            continue;
        }
        let (offset, address, size) = if wide {
            (field(ph + 8, 8)?, field(ph + 16, 8)?, field(ph + 32, 8)?)
        } else {
            (field(ph + 4, 4)?, field(ph + 8, 4)?, field(ph + 16, 4)?)
        };
        out.extend_from_slice(&address.to_le_bytes());
        let bytes = elf
            .get(offset as usize..(offset + size) as usize)
            .ok_or_else(bad)?;
        out.extend_from_slice(bytes);
    }
    Ok(out)
}

/// FNV-1a (64 bits): the key of a kept run.
#[derive(Debug)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// `SIZE:WAYS:LINE` of one cache, as the plugin takes it.
fn geometry_arg(bytes: u32, ways: u32, line: u32) -> String {
    format!("{bytes}:{ways}:{line}")
}

/// Boots the image under QEMU with the plugin, the segments in `attribute` also counted per
/// instruction address; returns the UART output and the profile. `tag` names the run's files
/// beside the image (runs at once need their own). A run is a pure function of the image, the
/// plugin, the plan and the caches modelled (QEMU counts exactly, the cache model is
/// deterministic), so its results are kept beside the image under a hash of those, and the
/// same run again (another description of the same core and device, a `--check` after a
/// `--write`) reads them instead of booting QEMU.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_qemu(
    board: &Board,
    elf: &Path,
    plugin: &Path,
    plan: &Plan,
    timing: &CoreTimingConfig,
    timeout_s: u64,
    attribute: &[usize],
    tag: &str,
) -> anyhow::Result<Run> {
    let dir = elf
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{} has no folder", elf.display()))?;
    let plan_path = dir.join(format!("plan-{tag}.bin"));
    std::fs::write(&plan_path, plan.encode().as_bytes())
        .with_context(|| format!("writing {}", plan_path.display()))?;
    let profile_path = dir.join(format!("profile-{tag}.txt"));
    let _ = std::fs::remove_file(&profile_path);
    let mut plugin_arg = format!(
        "{},marks={:#x},out={},l1i={},l1d={},l2={}",
        plugin.display(),
        board.marks_address(),
        profile_path.display(),
        geometry_arg(timing.l1i_bytes, timing.l1_ways, timing.line_bytes),
        geometry_arg(timing.l1d_bytes, timing.l1_ways, timing.line_bytes),
        geometry_arg(timing.l2_bytes, timing.l2_ways, timing.line_bytes),
    );
    if !attribute.is_empty() {
        let segments: Vec<String> = attribute.iter().map(usize::to_string).collect();
        plugin_arg += &format!(",attribute={}", segments.join(":"));
    }
    let cache = dir.join("runs");
    let key = {
        let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
        let mut h = Fnv::default();
        h.write(&loaded_bytes(&read(elf)?)?);
        h.write(&read(plugin)?);
        h.write(plan.encode().as_bytes());
        // The plugin's arguments but its output file's name.
        h.write(
            plugin_arg
                .replace(&profile_path.display().to_string(), "")
                .as_bytes(),
        );
        h.write(board.qemu.as_bytes());
        format!("{:016x}", h.0)
    };
    let (cached_uart, cached_profile) = (
        cache.join(format!("{key}.uart")),
        cache.join(format!("{key}.profile")),
    );
    if let (Ok(uart), Ok(profile)) = (
        std::fs::read_to_string(&cached_uart),
        std::fs::read_to_string(&cached_profile),
    ) {
        return Ok(Run {
            uart,
            profile,
            kept: true,
        });
    }
    let loader = format!(
        "loader,file={},addr={:#x},force-raw=on",
        plan_path.display(),
        board.plan_address()
    );
    let mut qemu = Command::new("timeout");
    qemu.arg(timeout_s.to_string())
        .args([board.qemu, "-M", board.machine, "-cpu", board.cpu])
        .args(["-m", &format!("{RAM_MIB}M")])
        .args([
            "-nographic",
            "-monitor",
            "none",
            "-serial",
            "stdio",
            "-nic",
            "none",
        ]);
    if *board == VEXPRESS_A9 {
        // Its sound device wants a backend, or QEMU warns on every run.
        qemu.args(["-audiodev", "none,id=snd", "-global", "pl041.audiodev=snd"]);
    }
    let out = qemu
        .args(["-semihosting-config", "enable=on,target=native"])
        .args(["-device", &loader, "-plugin", &plugin_arg, "-d", "plugin"])
        .arg("-kernel")
        .arg(elf)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} (apt-get install qemu-system-arm)", board.qemu))?;
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
    // Kept for the same run again; a failure to keep them costs only a rerun.
    if std::fs::create_dir_all(&cache).is_ok() {
        let _ = std::fs::write(&cached_profile, &profile);
        let _ = std::fs::write(&cached_uart, &uart);
    }
    Ok(Run {
        uart,
        profile,
        kept: false,
    })
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
            Aim::Mix | Aim::Check => None,
        })
        .collect();
    fitted.sort_unstable();
    fitted.dedup();
    let fixed = image_costs(&configured(&hw.cores).map(|c| c as f64));
    let rows: Vec<(WorkCounters, f64)> = measured
        .iter()
        .filter(|m| m.aim != Aim::Check)
        .map(|m| (m.work, m.cycles))
        .collect();
    let costs = fit(&rows, &fitted, &fixed)?;
    Ok((costs, fitted))
}

/// `costs` as the calibration image pays them: the units it runs at their price, the bytes
/// copied at none (the image's DMA stands in for a DMA engine; a board's per-request glue is
/// what `cycles_per_kib_copied` prices, and it is not in the image).
pub fn image_costs(costs: &[f64; WorkCounters::COUNT]) -> [f64; WorkCounters::COUNT] {
    std::array::from_fn(|u| {
        if UNITS[u].field == "cycles_per_kib_copied" {
            0.0
        } else {
            costs[u]
        }
    })
}

/// Rounds a fitted cost to the whole cycles a description holds (at least 1).
pub fn whole(cost: f64) -> u64 {
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
pub fn rewrite(text: &str, values: &[(&str, u64)]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_are_aligned_distinct_and_within_the_l2_way() {
        check_placements(&PLACEMENTS).expect("the default set");
        // Each in sets of its own in the L1's 8 KiB way as in the L2's 64 KiB one.
        let mut l1: Vec<u32> = PLACEMENTS.iter().map(|p| p % 8192).collect();
        l1.sort_unstable();
        l1.dedup();
        assert_eq!(l1.len(), PLACEMENTS.len());
        for (k, p) in PLACEMENTS.iter().enumerate() {
            assert_eq!(*p, (k as u32 * 391 % 1024) * 64, "offset {k} as documented");
        }
        check_placements(&[9_024, 20_416, 42_880, 62_784]).expect("another set");
        for (bad, why) in [
            (&[][..], "no arena placement"),
            (&[0, 100][..], "multiple of 64"),
            (&[65_536][..], "below 65536"),
            (&[64, 128, 64][..], "given twice"),
        ] {
            let err = check_placements(bad).expect_err("refused").to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

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
    fn a_kept_run_is_keyed_on_what_the_image_loads_not_its_symbols() {
        // An ELF32 header, one PT_LOAD of 4 bytes at 0x6000_0000 from offset 0x54, then a
        // byte outside every segment (a symbol table's, say).
        let mut elf = vec![0u8; 0x59];
        elf[..4].copy_from_slice(b"\x7fELF");
        (elf[4], elf[5]) = (1, 1);
        elf[0x1c..0x20].copy_from_slice(&0x34u32.to_le_bytes());
        elf[0x2a..0x2c].copy_from_slice(&32u16.to_le_bytes());
        elf[0x2c..0x2e].copy_from_slice(&1u16.to_le_bytes());
        let ph = 0x34;
        elf[ph..ph + 4].copy_from_slice(&1u32.to_le_bytes());
        elf[ph + 4..ph + 8].copy_from_slice(&0x54u32.to_le_bytes());
        elf[ph + 8..ph + 12].copy_from_slice(&0x6000_0000u32.to_le_bytes());
        elf[ph + 16..ph + 20].copy_from_slice(&4u32.to_le_bytes());
        elf[0x54..0x58].copy_from_slice(b"code");
        let loaded = loaded_bytes(&elf).unwrap();
        assert_eq!(
            loaded,
            [&0x6000_0000u64.to_le_bytes()[..], b"code"].concat()
        );
        let mut other_symbols = elf.clone();
        other_symbols[0x58] = 7;
        assert_eq!(loaded_bytes(&other_symbols).unwrap(), loaded);
        let mut other_code = elf.clone();
        other_code[0x55] = b'x';
        assert_ne!(loaded_bytes(&other_code).unwrap(), loaded);
        assert!(loaded_bytes(b"not an elf").is_err());
        assert!(
            loaded_bytes(&elf[..0x40]).is_err(),
            "a segment past the file"
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

    /// The workloads determine every fitted unit, and what the costs predict does not hang on
    /// one workload. Run natively, the workloads count the same work as on the A9; cycles
    /// priced at the shipped Cosmos+ costs stand in for a measurement. The fit must give those
    /// costs back; in each workload aimed at a unit, that unit must be a part of the cycles
    /// that a 10 % error would show (5 % at least: it is where the fit learns its cost; an ISP
    /// page's scan is small beside its lookup and its destination); and when any one fitted
    /// workload's cycles rise by 10 %, no held-out check's prediction may move by more than 7 %
    /// (a check made mostly of one unit moves with that unit's workload; a unit collinear with
    /// another, a page lookup with a page scanned, can move more: what counts is what their
    /// sum prices).
    #[test]
    fn the_workloads_determine_each_unit_where_they_aim() {
        let hw = HwConfig::cosmos_plus();
        let (plan, _) = plan_for(&hw).unwrap();
        let mut memory = vec![0u8; 700 << 20];
        let mut out = String::new();
        run(&plan, &mut memory, HOST_BUFFER_BYTES, NoMarks, &mut out).unwrap();
        let shipped = image_costs(&configured(&hw.cores).map(|c| c as f64));
        let rows: Vec<(&str, Aim, WorkCounters, f64)> = out
            .lines()
            .filter_map(parse_report)
            .map(|(name, _, work)| {
                let w = WORKLOADS.iter().find(|w| w.name == name).unwrap();
                (w.name, w.aim, work, priced(&work, &shipped))
            })
            .filter(|r| r.1 != Aim::Check)
            .collect();
        let aimed = |aim: Aim| match aim {
            Aim::Unit(name) => UNITS.iter().position(|u| u.counter == name),
            _ => None,
        };
        let mut fitted: Vec<usize> = rows.iter().filter_map(|r| aimed(r.1)).collect();
        fitted.sort_unstable();
        fitted.dedup();
        assert!(rows.len() > fitted.len(), "more workloads than units");
        let fit_with = |bumped: Option<usize>| {
            let rows: Vec<(WorkCounters, f64)> = rows
                .iter()
                .enumerate()
                .map(|(i, r)| (r.2, if Some(i) == bumped { r.3 * 1.1 } else { r.3 }))
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
        let checks: Vec<(&str, WorkCounters)> = out
            .lines()
            .filter_map(parse_report)
            .filter(|(name, ..)| {
                WORKLOADS
                    .iter()
                    .any(|w| w.name == *name && w.aim == Aim::Check)
            })
            .map(|(name, _, work)| (name, work))
            .collect();
        assert!(!checks.is_empty());
        let mut wrong = Vec::new();
        for (name, aim, work, cycles) in &rows {
            let Some(u) = aimed(*aim) else { continue };
            let share = work.values()[u] as f64 / UNITS[u].per as f64 * shipped[u] / cycles;
            if share < 0.05 {
                wrong.push(format!(
                    "{name}: {} is {:.1} % of its cycles",
                    UNITS[u].field,
                    100.0 * share
                ));
            }
        }
        for (i, (name, ..)) in rows.iter().enumerate() {
            let moved = fit_with(Some(i));
            for (check, work) in &checks {
                let change = priced(work, &moved) / priced(work, &base) - 1.0;
                if change.abs() > 0.07 {
                    wrong.push(format!(
                        "{name} +10 % moved the prediction of {check} by {:+.1} %",
                        100.0 * change
                    ));
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
