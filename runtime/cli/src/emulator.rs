//! `sagessd emulator serve`: the emulator as an NVMe/TCP target other programs reach.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::{hw_source, load_hw};

/// The `emulator` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum EmulatorCommand {
    /// Serve the emulated SSD as an NVMe/TCP target until SIGINT or SIGTERM: the Linux kernel's
    /// `nvme connect -t tcp`, nvme-cli and `--device tcp://HOST:PORT/NQN` attach to it.
    Serve(ServeArgs),
}

/// Flags of `emulator serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
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
    /// Device image: a (sparse) file that is the device's flash, created erased if it does not
    /// exist (its folder must). Every page is written to it as it is programmed and the device
    /// boots from it with power-loss recovery, so every completed write survives a restart,
    /// even after SIGKILL; a clean stop (SIGINT/SIGTERM) adds a checkpoint and an fsync.
    /// Without it the device starts empty and is lost at exit.
    #[arg(long, value_name = "PATH")]
    image: Option<PathBuf>,
    /// The firmware's per-job buffer for in-storage feature gather, in KiB (instead of the
    /// description's `[firmware] max_feature_bytes`; 0 turns the gather off).
    #[arg(long, value_name = "KIB")]
    feature_buffer: Option<u32>,
}

/// Runs an `emulator` subcommand.
pub(crate) fn run(command: EmulatorCommand) -> anyhow::Result<ExitCode> {
    match command {
        EmulatorCommand::Serve(args) => run_serve(args),
    }
}

/// `emulator serve`: the NVMe/TCP target until SIGINT or SIGTERM.
fn run_serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut hw = load_hw(args.config.as_ref())?;
    if let Some(kib) = args.feature_buffer {
        hw.firmware.max_feature_bytes = kib
            .checked_mul(1024)
            .ok_or_else(|| anyhow::anyhow!("--feature-buffer {kib} KiB: at most 4 GiB"))?;
    }
    // Block the stop signals before any thread starts (threads inherit the mask), then wait for
    // one here: a clean stop lets every accepted command finish.
    let signals = stop_signals();
    let ssd = match &args.image {
        Some(path) => {
            let ssd = sagessd_emulator::Ssd::open_image(&hw, path)?;
            let (boot, ready_ns) = ssd.boot();
            println!(
                "booted from {}: {}, {} pages read, {} replayed, {} torn checkpoints skipped, \
                 {} blocks erased; {:.1} ms of flash time (modelled)",
                path.display(),
                match (boot.blank, boot.checkpoint_id) {
                    (true, _) => "blank flash".to_string(),
                    (false, Some(id)) => format!("checkpoint {id}"),
                    (false, None) => "no intact checkpoint (everything replayed)".to_string(),
                },
                boot.pages_read,
                boot.pages_replayed,
                boot.torn_checkpoints,
                boot.blocks_erased,
                ready_ns as f64 / 1e6,
            );
            ssd
        }
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
        ssd.close_image(path)?;
        println!("checkpointed and synced the device in {}", path.display());
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
