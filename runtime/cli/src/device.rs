//! `sagessd device`: the emulated device's derived limits, its validation, and the simulator's speed.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::records::{FormatArgs, Output, Record};
use crate::{hw_source, load_hw};

/// The `device` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum DeviceCommand {
    /// Print the limits a hardware description implies on paper (capacity, parallelism,
    /// flash-internal, PCIe and controller bandwidths, unloaded QD1 latency), the cost of its
    /// checkpoints, and its boot times: booting its firmware on in-memory flash that is blank,
    /// cleanly stopped, and cut off with N and 2N pages written since the last checkpoint.
    Info(DeviceInfoArgs),
    /// Run sequential read and write, and 4 KiB random reads at QD1 and QD128, in virtual time,
    /// and print each measured figure beside its analytical bound; exit status 1 if any row is
    /// more than 2 % off (or beats its bound).
    Check(DeviceCheckArgs),
    /// Measure the simulator's own speed: simulated flash page reads per WALL-CLOCK second on
    /// one core (4 KiB random reads at QD64 over a written region of the namespace).
    Bench(DeviceBenchArgs),
    /// Cut the power at a random instant of a random workload, seed after seed, boot from what
    /// the flash holds and check every LBA against what the host was promised (the last
    /// completed write or trim, or a command in flight at the cut); media faults injected.
    /// Prints the totals; exit status 1 if any seed failed, each failure with the command that
    /// replays it.
    CrashTest(CrashTestArgs),
    /// Real SIGKILLs: `emulator serve --image` (a child) under a write load, killed at random
    /// moments, restarted on its image; every acknowledged write must read back.
    KillTest(KillTestArgs),
}

/// Flags of `device kill-test`.
#[derive(Debug, Args)]
pub(crate) struct KillTestArgs {
    /// Kills (each followed by a restart and a check of every LBA written).
    #[arg(long, default_value_t = 20)]
    kills: u32,
    /// Seed of the writes and of the moments of the kills.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// LBAs the writes fall in, from LBA 0.
    #[arg(long, default_value_t = 4096)]
    lbas: u64,
    /// Each run's load lasts between this and --max-run-ms before its kill.
    #[arg(long, default_value_t = 20)]
    min_run_ms: u64,
    /// See --min-run-ms.
    #[arg(long, default_value_t = 300)]
    max_run_ms: u64,
    /// Hardware description of the target (default: the built-in Cosmos+).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Folder of the device image (default: a new one under the temporary folder, removed
    /// after a run without losses).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    #[command(flatten)]
    output: FormatArgs,
}

/// Flags of `device crash-test`.
#[derive(Debug, Args)]
pub(crate) struct CrashTestArgs {
    /// Seeds to run, from `--first`.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Run only this seed (what a failure's replay line says).
    #[arg(long, conflicts_with_all = ["seeds", "first"])]
    seed: Option<u64>,
    #[command(flatten)]
    output: FormatArgs,
}

/// Flags of `device info`.
#[derive(Debug, Args)]
pub(crate) struct DeviceInfoArgs {
    #[command(flatten)]
    device: DeviceConfigArgs,
    /// Flash pages written before each measured boot (N; the last boot has 2N to replay):
    /// at most half the checkpoint interval, which measures the worst case. The flash is in
    /// memory and the boots write 4N pages in all: about 4N x 1.4 x page size of RAM.
    #[arg(long, default_value_t = 4096, value_name = "N")]
    boot_pages: u64,
}

/// Flags of `device info` and `device check`: the hardware description.
#[derive(Debug, Args)]
pub(crate) struct DeviceConfigArgs {
    /// Hardware description (TOML); default: the built-in Cosmos+ OpenSSD
    /// (hw-configs/cosmos-plus.toml).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
}

/// Flags of `device check`.
#[derive(Debug, Args)]
pub(crate) struct DeviceCheckArgs {
    #[command(flatten)]
    device: DeviceConfigArgs,
    #[command(flatten)]
    output: FormatArgs,
}

/// Flags of `device bench`.
#[derive(Debug, Args)]
pub(crate) struct DeviceBenchArgs {
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
    #[command(flatten)]
    output: FormatArgs,
}

/// Runs a `device` subcommand.
pub(crate) fn run(command: DeviceCommand) -> anyhow::Result<ExitCode> {
    match command {
        DeviceCommand::Info(args) => run_device_info(args),
        DeviceCommand::Check(args) => run_device_check(args),
        DeviceCommand::Bench(args) => run_device_bench(args),
        DeviceCommand::CrashTest(args) => run_crash_test(args),
        DeviceCommand::KillTest(args) => run_kill_test(args),
    }
}

/// The target of `device kill-test`: a child `emulator serve` on the image.
struct KilledChild {
    config: Option<PathBuf>,
    image: PathBuf,
    child: Option<crate::child_target::ChildTarget>,
}

impl sagessd_experiments::kill_campaign::KillableTarget for KilledChild {
    fn start(&mut self) -> anyhow::Result<String> {
        let child =
            crate::child_target::ChildTarget::start(self.config.as_ref(), Some(&self.image))?;
        let addr = child.addr.clone();
        self.child = Some(child);
        Ok(addr)
    }

    fn kill(&mut self) -> anyhow::Result<()> {
        match self.child.take() {
            Some(child) => child.kill(),
            None => Ok(()),
        }
    }
}

/// `device kill-test`: the SIGKILL campaign (`sagessd_experiments::kill_campaign`).
fn run_kill_test(args: KillTestArgs) -> anyhow::Result<ExitCode> {
    use sagessd_experiments::kill_campaign::{Settings, run};
    let (dir, made) = match &args.dir {
        Some(d) => (d.clone(), false),
        None => {
            let d = std::env::temp_dir().join(format!("sagessd-kill-test-{}", std::process::id()));
            std::fs::create_dir_all(&d)?;
            (d, true)
        }
    };
    let image = dir.join("flash.img");
    let mut target = KilledChild {
        config: args.config.clone(),
        image: image.clone(),
        child: None,
    };
    let started = std::time::Instant::now();
    let report = run(
        &mut target,
        &Settings {
            kills: args.kills,
            seed: args.seed,
            lbas: args.lbas,
            run_between: (
                std::time::Duration::from_millis(args.min_run_ms),
                std::time::Duration::from_millis(args.max_run_ms),
            ),
            nqn: sagessd_emulator::nvme_tcp_target::DEFAULT_NQN.into(),
        },
        &mut |line| eprintln!("{line}"),
    )?;
    let wall_s = started.elapsed().as_secs_f64();
    let mut out = Output::new(args.output.format());
    out.text(format!(
        "SIGKILLs: {} kills of `emulator serve --image {}` under writes to {} LBAs (seed {}), {:.1} s\n\
         writes acknowledged       {:>10}\n\
         flushes acknowledged      {:>10}\n\
         kills with a write flying {:>10}\n\
         LBAs checked after boots  {:>10}\n\
         acknowledged writes lost  {:>10}\n",
        report.kills,
        image.display(),
        args.lbas,
        args.seed,
        wall_s,
        report.writes_acknowledged,
        report.flushes,
        report.in_flight_at_kill,
        report.lbas_checked,
        report.lost.len(),
    ));
    out.record(
        Record::new("device.kill_test")
            .with("kills", report.kills)
            .with("seed", args.seed)
            .with("lbas", args.lbas)
            .with("writes_acknowledged", report.writes_acknowledged)
            .with("flushes", report.flushes)
            .with("in_flight_at_kill", report.in_flight_at_kill)
            .with("lbas_checked", report.lbas_checked)
            .with("lost", report.lost.len() as u64)
            .with("wall_s", wall_s),
    )?;
    for lost in &report.lost {
        out.note(format!("LOST {lost}"));
    }
    out.finish()?;
    if report.lost.is_empty() {
        if made {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("the image is kept in {}", dir.display());
        Ok(ExitCode::from(1))
    }
}

/// `device crash-test`: the power-cut campaign (`sagessd_emulator::crash_sim`).
fn run_crash_test(args: CrashTestArgs) -> anyhow::Result<ExitCode> {
    use sagessd_emulator::crash_sim::run_campaign;
    use std::time::Instant;

    let (first, count) = match args.seed {
        Some(seed) => (seed, 1),
        None => (args.first, args.seeds),
    };
    let started = Instant::now();
    let c = run_campaign(first, count);
    let wall_s = started.elapsed().as_secs_f64();
    let mut out = Output::new(args.output.format());
    out.text(format!(
        "power cuts: {} seeds ({first}..{}), one cut each, {:.1} s\n\
         commands before the cuts    {:>10}\n\
         writes completed (promised) {:>10}\n\
         writes/trims failed         {:>10}\n\
         commands in flight at cuts  {:>10}\n\
         programs torn               {:>10}\n\
         erases torn                 {:>10}\n\
         checkpoints torn, skipped   {:>10}\n\
         pages replayed at boot      {:>10}\n\
         seeds with GC before cut    {:>10}\n\
         seeds with checkpoints      {:>10}\n\
         LBAs checked after boot     {:>10}\n\
         media read failures         {:>10}\n\
         reads retried               {:>10}\n\
         pages made uncorrectable    {:>10}\n\
         unrecovered reads/LBAs      {:>10}\n\
         seeds failed                {:>10}\n",
        c.seeds,
        first + count,
        wall_s,
        c.commands,
        c.writes_completed,
        c.commands_failed,
        c.in_flight_at_cut,
        c.torn_programs,
        c.torn_erases,
        c.torn_checkpoints,
        c.pages_replayed,
        c.seeds_with_gc,
        c.seeds_with_checkpoints,
        c.lbas_checked,
        c.media_read_failures,
        c.read_retries,
        c.uncorrectable_pages,
        c.unrecovered,
        c.failures.len(),
    ));
    out.record(
        Record::new("device.crash_test")
            .with("first_seed", first)
            .with("seeds", c.seeds)
            .with("commands", c.commands)
            .with("writes_completed", c.writes_completed)
            .with("commands_failed", c.commands_failed)
            .with("in_flight_at_cut", c.in_flight_at_cut)
            .with("torn_programs", c.torn_programs)
            .with("torn_erases", c.torn_erases)
            .with("torn_checkpoints", c.torn_checkpoints)
            .with("pages_replayed", c.pages_replayed)
            .with("media_read_failures", c.media_read_failures)
            .with("read_retries", c.read_retries)
            .with("uncorrectable_pages", c.uncorrectable_pages)
            .with("unrecovered", c.unrecovered)
            .with("seeds_with_gc", c.seeds_with_gc)
            .with("lbas_checked", c.lbas_checked)
            .with("failures", c.failures.len() as u64)
            .with("wall_s", wall_s),
    )?;
    for f in &c.failures {
        out.note(format!("FAILED {f}"));
    }
    out.finish()?;
    Ok(if c.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `device info`: the limits a hardware description implies, its checkpoints and boot times.
fn run_device_info(args: DeviceInfoArgs) -> anyhow::Result<ExitCode> {
    let config = args.device.config.as_ref();
    let hw = load_hw(config)?;
    let limits = sagessd_emulator::check::DeviceLimits::new(&hw)?;
    println!("{}", hw_source(config));
    println!("{limits}");
    println!("{}", checkpoint_summary(&hw)?);
    let costs = sagessd_emulator::boot_cost::measure(&hw, args.boot_pages)?;
    print!("{}", boot_table(&costs));
    Ok(ExitCode::SUCCESS)
}

/// What the FTL's checkpoints cost on flash for `hw` (`device info`, `firmware footprint`).
pub(crate) fn checkpoint_summary(hw: &sagessd_emulator::HwConfig) -> anyhow::Result<String> {
    let (stats, interval) = sagessd_emulator::Ssd::new(hw)?.checkpoints();
    Ok(format!(
        "checkpoints of the FTL's tables: {} pages each, {} blocks reserved for two slots; one \
         every {interval} programmed pages (at most 1/{} of the flash writes), and at a Flush \
         past a checkpoint's worth of pages, a GRAPH_ATTACH and a clean stop; a trim is made \
         durable by a one-page trim record instead",
        stats.pages_per_checkpoint,
        stats.reserved_blocks,
        interval / u64::from(stats.pages_per_checkpoint.max(1)),
    ))
}

/// The boot times `device info` prints, one line per measured boot.
fn boot_table(c: &sagessd_emulator::boot_cost::BootCosts) -> String {
    use std::fmt::Write as _;
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut out = format!(
        "boot, modelled flash time (this firmware booted on in-memory flash):\n  {:<40} {:>9} \
         {:>9} {:>9} {:>12} {:>15}\n",
        "flash holds", "read", "replayed", "boot ms", "erased after", "erasing after ms"
    );
    let n = c.pages_written;
    let rows = [
        ("nothing (formatted)".to_string(), c.blank),
        (format!("{n} pages, then a clean stop"), c.clean),
        (format!("{n} more pages since it, power cut"), c.cut),
        (
            format!("{} pages since the checkpoint, cut", 2 * n),
            c.cut_twice,
        ),
    ];
    for (what, b) in rows {
        let _ = writeln!(
            out,
            "  {what:<40} {:>9} {:>9} {:>9.1} {:>12} {:>15.1}",
            b.report.pages_read,
            b.report.pages_replayed,
            ms(b.duration_ns),
            b.blocks_erased_after,
            ms(b.erasing_after_ns),
        );
    }
    let _ = writeln!(
        out,
        "  (read/replayed: pages. A boot erases nothing: the blocks it leaves free are erased \
         as they are needed, one per die kept ready, in the background once it is up. A cut \
         leaves at most {} pages to replay, one \
         checkpoint interval: --boot-pages {} measures that worst case.)",
        c.interval_pages,
        c.interval_pages.saturating_sub(1) / 2,
    );
    out
}

/// `device check`: measured figures beside their bounds; exit status 1 if one is off.
fn run_device_check(args: DeviceCheckArgs) -> anyhow::Result<ExitCode> {
    use sagessd_emulator::check::{CheckOptions, Metric, run};
    const TOLERANCE: f64 = 0.02;
    let config = args.device.config.as_ref();
    let hw = load_hw(config)?;
    let mut out = Output::new(args.output.format());
    out.text(format!("{}\n", hw_source(config)));
    let report = run(&hw, &CheckOptions::default())?;
    out.text(format!("{report}\n"));
    for r in &report.rows {
        let unit = match r.metric {
            Metric::Throughput => "B/s",
            Metric::Iops => "IOPS",
            Metric::Latency => "ns",
        };
        out.record(
            Record::new("device.check")
                .with("device", report.name.as_str())
                .with("config", hw_source(config))
                .with("workload", r.workload.as_str())
                .with("measured", r.measured)
                .with("bound", r.bound)
                .with("unit", unit)
                .with("ratio", r.ratio())
                .with("within_tolerance", r.within(TOLERANCE))
                .with("limited_by", r.limited_by)
                .with("timing", "modelled"),
        )?;
    }
    let bad: Vec<_> = report
        .rows
        .iter()
        .filter(|r| !r.within(TOLERANCE))
        .collect();
    if bad.is_empty() {
        out.note(format!(
            "every row within {:.0} % of its bound",
            TOLERANCE * 100.0
        ));
    }
    for r in &bad {
        out.note(format!(
            "OUT OF TOLERANCE: {} ratio {:.4} (limited by {})",
            r.workload,
            r.ratio(),
            r.limited_by
        ));
    }
    out.finish()?;
    Ok(if bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `device bench`: simulated flash page reads per wall-clock second.
fn run_device_bench(args: DeviceBenchArgs) -> anyhow::Result<ExitCode> {
    let hw = load_hw(args.config.as_ref())?;
    let b = sagessd_experiments::device_bench::run(
        &hw,
        &sagessd_experiments::device_bench::Settings {
            region_pages: args.region_pages,
            queue_depth: args.queue_depth,
            seconds: args.seconds,
        },
    )?;
    let (completed, pages, wall_s, sim_s, ceiling) = (
        b.commands,
        b.flash_pages_read,
        b.wall_s,
        b.virtual_s,
        b.copies_alone_per_wall_s,
    );
    let mut out = Output::new(args.output.format());
    out.text(format!(
        "device {} ({}), 4 KiB random reads at QD{} over {} written pages\n",
        hw.device.name,
        hw_source(args.config.as_ref()),
        b.queue_depth,
        b.region_pages
    ));
    out.text(format!("  commands completed            {completed:>14}\n"));
    out.text(format!("  flash pages read              {pages:>14}\n"));
    out.text(format!(
        "  wall-clock time               {wall_s:>14.3} s   (WALL CLOCK, this machine, one core)\n"
    ));
    out.text(format!(
        "  simulated flash page reads    {:>14.0} per wall-clock second\n",
        pages as f64 / wall_s
    ));
    out.text(format!(
        "  simulated commands            {:>14.0} per wall-clock second\n",
        completed as f64 / wall_s
    ));
    out.text(format!(
        "  copies alone                  {ceiling:>14.0} per wall-clock second   (the bytes each read moves, \
         flash store -> page buffer -> host buffer, with no simulation: this machine's ceiling)\n"
    ));
    out.text(format!(
        "  virtual time simulated        {sim_s:>14.6} s   (modelled)\n"
    ));
    out.text(format!(
        "  simulated IOPS                {:>14.0} per virtual second (modelled)\n",
        completed as f64 / sim_s.max(1e-12)
    ));
    out.record(
        Record::new("device.bench")
            .with("device", hw.device.name.as_str())
            .with("config", hw_source(args.config.as_ref()))
            .with("queue_depth", b.queue_depth)
            .with("region_pages", b.region_pages)
            .with("commands", completed)
            .with("flash_pages_read", pages)
            .with("wall_s", wall_s)
            .with("flash_pages_per_wall_s", pages as f64 / wall_s)
            .with("commands_per_wall_s", completed as f64 / wall_s)
            .with("copies_alone_per_wall_s", ceiling)
            .with("virtual_s", sim_s)
            .with(
                "commands_per_virtual_s",
                completed as f64 / sim_s.max(1e-12),
            )
            .with("timing", "wall clock and modelled"),
    )?;
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
