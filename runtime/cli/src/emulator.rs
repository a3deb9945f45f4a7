//! `sagessd emulator serve`: the emulator as an NVMe/TCP target other programs reach;
//! `sagessd emulator load`: a checked random load against such a target, with its throughput
//! and memory.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use sagessd_abi::auth::secret::Secret;
use sagessd_abi::auth::{DhGroup, HashId};
use sagessd_emulator::AllowedHosts;
use sagessd_emulator::nvme_tcp_target::auth::{AuthOptions, HostSecrets};

use crate::child_target::ChildTarget;
use crate::{hw_source, load_hw};

/// The `emulator` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum EmulatorCommand {
    /// Serve the emulated SSD as an NVMe/TCP target until SIGINT or SIGTERM: the Linux kernel's
    /// `nvme connect -t tcp`, nvme-cli and `--device tcp://HOST:PORT/NQN` attach to it.
    Serve(ServeArgs),
    /// Drive a target with random reads and writes on many I/O queues at full depth, check
    /// every completion and every byte read against a model (0 lost, duplicated or misrouted
    /// completions; data read = data written), and print the sustained IOPS and the target's
    /// peak RSS. By default it starts its own `emulator serve` (a child process, whose memory
    /// it reads from /proc).
    Load(LoadArgs),
}

/// Flags of `emulator load`.
#[derive(Debug, Args)]
pub(crate) struct LoadArgs {
    /// An existing target instead of a child `emulator serve` (its RSS is then not known):
    /// `HOST:PORT` (the emulator's subsystem), or a device URI
    /// `tcp://HOST:PORT/NQN[?hostnqn=…&dhchap_secret=…&dhchap_ctrl_secret=…&digest=1]` for any
    /// NVMe/TCP target.
    #[arg(long, value_name = "ADDR|URI")]
    connect: Option<String>,
    /// Hardware description of the child target (TOML); default: the built-in Cosmos+.
    #[arg(long, value_name = "PATH", conflicts_with = "connect")]
    config: Option<PathBuf>,
    /// Device image of the child target (`emulator serve --image`): its flash then lives in
    /// that file rather than in the target's memory.
    #[arg(long, value_name = "PATH", conflicts_with = "connect")]
    image: Option<PathBuf>,
    /// I/O queues (one connection each).
    #[arg(long, default_value_t = 64)]
    queues: u16,
    /// Commands in flight per queue.
    #[arg(long, default_value_t = 128)]
    depth: u16,
    /// Commands in all.
    #[arg(long, default_value_t = 1_000_000)]
    commands: u64,
    /// Share of reads, in percent.
    #[arg(long, default_value_t = 50)]
    read_percent: u8,
    /// Bytes per command, in KiB.
    #[arg(long, default_value_t = 4)]
    kib: u32,
    /// LBAs used, in MiB from LBA 0.
    #[arg(long, default_value_t = 1024)]
    span_mib: u64,
    /// Seed of the command mix and data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Flags of `emulator serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Hardware description (TOML); default: the built-in Cosmos+ OpenSSD.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Address to listen on (loopback unless told otherwise; beyond loopback, --allow-host or
    /// --allow-any-host is needed).
    #[arg(long, default_value = "127.0.0.1:4420")]
    listen: String,
    /// A host NQN that may connect (repeatable); a Connect from any other gets Connect Invalid
    /// Host. Without it (and without --allow-any-host) any host may, on loopback only.
    #[arg(long = "allow-host", value_name = "NQN")]
    allow_host: Vec<String>,
    /// Any host that reaches the port may connect, and read and write the namespace, wherever
    /// the target listens.
    #[arg(long, conflicts_with = "allow_host")]
    allow_any_host: bool,
    /// A host that must authenticate with DH-HMAC-CHAP before its queues serve anything, and
    /// its secret (repeatable): `NQN=DHHC-1:XX:BASE64:` as `nvme gen-dhchap-key` prints it, or
    /// `NQN=@FILE` to read it from a file (a secret on the command line shows in `ps`).
    /// Implies --allow-host NQN.
    #[arg(long = "host-secret", value_name = "NQN=SECRET")]
    host_secret: Vec<String>,
    /// The controller's secret for a host given --host-secret (repeatable), for bidirectional
    /// authentication: the target proves it knows it when the host asks (`nvme connect
    /// --dhchap-ctrl-secret`). `NQN=SECRET` or `NQN=@FILE`.
    #[arg(long = "ctrl-secret", value_name = "NQN=SECRET")]
    ctrl_secret: Vec<String>,
    /// DH-HMAC-CHAP hash functions to choose from, best first (the first the host offers).
    #[arg(long, value_name = "LIST", default_value = "sha256,sha384,sha512")]
    dhchap_hash: String,
    /// DH-HMAC-CHAP Diffie-Hellman groups to choose from, best first (`null`: none).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "ffdhe2048,ffdhe3072,ffdhe4096,ffdhe6144,ffdhe8192,null"
    )]
    dhchap_dhgroup: String,
    /// Subsystem NQN.
    #[arg(long, default_value = sagessd_emulator::nvme_tcp_target::DEFAULT_NQN)]
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
        EmulatorCommand::Load(args) => run_load(args),
    }
}

/// `emulator load`: the checked load and what it measured.
fn run_load(args: LoadArgs) -> anyhow::Result<ExitCode> {
    use sagessd::compare::human_bytes;
    use sagessd_host_driver::load::{LoadSpec, run_load};
    use sagessd_host_driver::{Device, TcpOptions, TcpTransport};
    let (child, addr) = match &args.connect {
        Some(addr) => (None, addr.clone()),
        None => {
            let child = ChildTarget::start(args.config.as_ref(), args.image.as_ref())?;
            let addr = child.addr.clone();
            (Some(child), addr)
        }
    };
    let (addr, connection) = match addr.strip_prefix("tcp://") {
        None => (
            addr,
            TcpOptions::new(sagessd_emulator::nvme_tcp_target::DEFAULT_NQN),
        ),
        Some(_) => {
            let uri: sagessd_host_driver::DeviceUri = addr
                .parse()
                .map_err(|e: String| anyhow::anyhow!("--connect {e}"))?;
            match uri.endpoint.tcp_options() {
                Some((addr, options)) if !uri.tunnel => (addr.to_owned(), options),
                _ => anyhow::bail!("--connect {addr:?}: an NVMe/TCP URI without tunnel=1"),
            }
        }
    };
    let info = Device::open(TcpTransport::connect(addr.as_str(), &connection)?)?
        .info()
        .clone();
    let block = info.block_size_bytes;
    let bytes = args
        .kib
        .checked_mul(1024)
        .filter(|b| *b >= block && b % block == 0 && *b <= info.max_transfer_bytes)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--kib {}: a multiple of the {block}-byte block, at most {} KiB",
                args.kib,
                info.max_transfer_bytes / 1024
            )
        })?;
    let span_blocks = args
        .span_mib
        .saturating_mul(1 << 20)
        .checked_div(u64::from(block))
        .unwrap_or(0)
        .min(info.block_count);
    let spec = LoadSpec {
        queues: args.queues,
        depth: args.depth,
        commands: args.commands,
        read_percent: args.read_percent,
        span_blocks,
        block_bytes: block,
        blocks_per_command: bytes / block,
        seed: args.seed,
    };
    let options = TcpOptions {
        io_queues: args.queues,
        queue_entries: args.depth,
        command_timeout: Some(Duration::from_secs(60)),
        ..connection
    };
    let mut transport = TcpTransport::connect(addr.as_str(), &options)?;
    let rss_before = child.as_ref().and_then(|c| c.status_bytes("VmRSS:"));
    let report = run_load(&mut transport, &spec)?;
    drop(transport);
    let peak = child.as_ref().and_then(|c| c.status_bytes("VmHWM:"));
    let now = child.as_ref().and_then(|c| c.status_bytes("VmRSS:"));
    let show = |b: Option<u64>| b.map_or("unknown (--connect)".into(), human_bytes);
    println!(
        "{} commands ({} reads, {} of written data; {} writes) of {} KiB on {} I/O queues × \
         depth {} against {} at {addr}",
        report.commands,
        report.reads,
        report.reads_of_written,
        report.writes,
        args.kib,
        args.queues,
        args.depth,
        info.model
    );
    println!(
        "0 lost, 0 duplicated, 0 misrouted completions; every read equal to the model; \
         {:.1} s, {:.0} IOPS sustained (wall clock)",
        report.elapsed.as_secs_f64(),
        report.iops()
    );
    println!(
        "target RSS: {} before the load, {} peak, {} after",
        show(rss_before),
        show(peak),
        show(now)
    );
    Ok(ExitCode::SUCCESS)
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
                "booted from {}: {}, {} pages read ({} read again), {} replayed, {} torn \
                 checkpoints skipped; {:.1} ms of flash time (modelled)",
                path.display(),
                match (boot.blank, boot.checkpoint_id) {
                    (true, _) => "blank flash".to_string(),
                    (false, Some(id)) => format!("checkpoint {id}"),
                    (false, None) => "no intact checkpoint (everything replayed)".to_string(),
                },
                boot.pages_read,
                boot.read_retries,
                boot.pages_replayed,
                boot.torn_checkpoints,
                ready_ns as f64 / 1e6,
            );
            ssd
        }
        None => sagessd_emulator::Ssd::new(&hw)?,
    };
    let auth = auth_options(&args)?;
    let mut named: Vec<String> = args.allow_host.clone();
    named.extend(
        auth.hosts
            .keys()
            .filter(|h| !named.contains(h))
            .cloned()
            .collect::<Vec<_>>(),
    );
    let hosts = match (&named[..], args.allow_any_host) {
        (_, true) => AllowedHosts::Any,
        ([], false) => AllowedHosts::AnyOnLoopback,
        (hosts, false) => AllowedHosts::Only(hosts.to_vec()),
    };
    let options = sagessd_emulator::TargetOptions {
        nqn: args.nqn.clone(),
        paced: args.pace,
        hosts: hosts.clone(),
        auth: auth.clone(),
        ..sagessd_emulator::TargetOptions::default()
    };
    let target =
        sagessd_emulator::Target::start(ssd, args.listen.as_str(), options).with_context(|| {
            format!(
                "serving on {}{}",
                args.listen,
                if hosts == AllowedHosts::AnyOnLoopback {
                    " (add --allow-host NQN or --host-secret NQN=SECRET, repeatable, or \
                     --allow-any-host)"
                } else {
                    ""
                }
            )
        })?;
    // One line, which hosts read for the address: "… on ADDR, …".
    println!(
        "serving {} ({}) as NVMe/TCP subsystem {} on {}{}; hosts: {}{}",
        hw.device.name,
        hw_source(args.config.as_ref()),
        args.nqn,
        target.local_addr(),
        if args.pace {
            ", paced to modelled time"
        } else {
            ", virtual time"
        },
        match &hosts {
            AllowedHosts::AnyOnLoopback => "any (loopback only)".to_string(),
            AllowedHosts::Any => "any that reaches the port (--allow-any-host)".to_string(),
            AllowedHosts::Only(hosts) => format!("only {}", hosts.join(" ")),
        },
        if auth.hosts.is_empty() {
            String::new()
        } else {
            format!(
                "; DH-HMAC-CHAP for {} ({}; {})",
                auth.hosts.keys().cloned().collect::<Vec<_>>().join(" "),
                auth.hashes
                    .iter()
                    .map(|h| h.name())
                    .collect::<Vec<_>>()
                    .join(","),
                auth.dh_groups
                    .iter()
                    .map(|g| g.name())
                    .collect::<Vec<_>>()
                    .join(","),
            )
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

/// The DH-HMAC-CHAP options `serve`'s flags name.
fn auth_options(args: &ServeArgs) -> anyhow::Result<AuthOptions> {
    let mut options = AuthOptions::default();
    for flag in &args.host_secret {
        let (nqn, secret) = nqn_and_secret("--host-secret", flag)?;
        let secrets = HostSecrets {
            host: secret,
            ctrl: None,
        };
        if options.hosts.insert(nqn.clone(), secrets).is_some() {
            anyhow::bail!("--host-secret: {nqn} has two secrets");
        }
    }
    for flag in &args.ctrl_secret {
        let (nqn, secret) = nqn_and_secret("--ctrl-secret", flag)?;
        let Some(secrets) = options.hosts.get_mut(&nqn) else {
            anyhow::bail!(
                "--ctrl-secret: {nqn} has no --host-secret (the host authenticates first)"
            );
        };
        secrets.ctrl = Some(secret);
    }
    options.hashes = names(&args.dhchap_hash, "--dhchap-hash", HashId::from_name)?;
    options.dh_groups = names(&args.dhchap_dhgroup, "--dhchap-dhgroup", DhGroup::from_name)?;
    Ok(options)
}

/// `NQN=SECRET` or `NQN=@FILE`, the secret parsed.
fn nqn_and_secret(flag: &str, value: &str) -> anyhow::Result<(String, Secret)> {
    let (nqn, secret) = value
        .split_once('=')
        .filter(|(nqn, _)| !nqn.is_empty())
        .with_context(|| format!("{flag} {value:?}: expected NQN=SECRET or NQN=@FILE"))?;
    let (text, from) = match secret.strip_prefix('@') {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("{flag}: reading the secret of {nqn} from {path}"))?;
            (text.trim().to_owned(), format!(" (from {path})"))
        }
        None => (secret.to_owned(), String::new()),
    };
    let secret = Secret::parse(&text)
        .map_err(|e| anyhow::anyhow!("{flag}: the secret of {nqn}{from}: {e}"))?;
    Ok((nqn.to_owned(), secret))
}

/// A comma-separated list of names, each known to `parse`.
fn names<T>(list: &str, flag: &str, parse: impl Fn(&str) -> Option<T>) -> anyhow::Result<Vec<T>> {
    let parsed: Option<Vec<T>> = list.split(',').map(|n| parse(n.trim())).collect();
    match parsed {
        Some(v) if !v.is_empty() => Ok(v),
        _ => anyhow::bail!("{flag} {list:?}: unknown name in the list"),
    }
}
