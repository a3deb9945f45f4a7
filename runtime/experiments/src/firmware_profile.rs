//! Where a calibration workload's modelled cycles go in the firmware (`sagessd firmware
//! profile`).
//!
//! The calibration image runs as for `sagessd firmware calibrate`, with the profiling plugin
//! told to count one workload's segment per instruction address as well
//! ([`sagessd_qemu_a9_profile::profile::PcLine`]). Each address is then mapped to the function
//! and source line it came from with the image's line tables (`arm-none-eabi-addr2line`, which
//! follows inlining), and its counts are priced with the description's `[core_timing]` as a
//! workload's are. The groups therefore add up to the workload's cycles: the profile says where
//! in the code the cycles the fit prices go, instructions and cache misses apart.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Context as _;
use sagessd_calibrate::workloads::{WORKLOADS, segment_of};
use sagessd_emulator::HwConfig;
use sagessd_qemu_a9_profile::profile::{PcLine, Segment};

use crate::calibrate::{board_for, build, plan_for, repo_root, run_qemu};
use crate::calibrate_fit::cycles;

/// How a profile groups instruction addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grouping {
    /// By the function the linker placed them in (everything inlined into it counts there).
    Symbol,
    /// By the innermost function of this repository's sources they were inlined from (a
    /// library function such as `copy_from_slice` counts in the caller of ours that used it).
    Function,
    /// By the source line of that function.
    Line,
    /// By the chain of our functions it was inlined through, innermost first (up to three:
    /// `u64 < item_address < start_gather`): which caller's use of a helper costs what.
    Chain,
}

/// One group of a profile.
#[derive(Clone, Debug)]
pub struct Row {
    /// The group's name: a function (`name (file)`) or a line (`file:line (function)`).
    pub name: String,
    /// Its instructions and cache behaviour.
    pub counts: Segment,
    /// Its modelled cycles.
    pub cycles: f64,
}

/// A workload's profile.
#[derive(Clone, Debug)]
pub struct FirmwareProfile {
    /// The workload.
    pub workload: &'static str,
    /// Its whole segment, as `firmware calibrate` measures it.
    pub total: Segment,
    /// Its modelled cycles.
    pub cycles: f64,
    /// The groups, most cycles first.
    pub rows: Vec<Row>,
    /// QEMU's run, seconds of wall clock.
    pub qemu_s: f64,
}

/// Runs the calibration image on `hw`'s device (QEMU at most `timeout_s`) with `workload`'s
/// segment counted per instruction address, and groups the counts by `grouping`.
pub fn profile(
    hw: &HwConfig,
    workload: &str,
    grouping: Grouping,
    timeout_s: u64,
) -> anyhow::Result<FirmwareProfile> {
    let Some(w) = WORKLOADS.iter().find(|w| w.name == workload) else {
        let names: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
        anyhow::bail!(
            "no calibration workload is called {workload:?}; there are {}",
            names.join(", ")
        );
    };
    let segment = segment_of(w.name).context("every workload has a segment")?;
    let timing = hw.core_timing.clone().ok_or_else(|| {
        anyhow::anyhow!("the description has no [core_timing] table: profiling prices with it")
    })?;
    let (plan, _) = plan_for(hw)?;
    let board = board_for(&timing)?;
    let (elf, plugin) = build(&board)?;
    let started = std::time::Instant::now();
    let report = run_qemu(
        &board,
        &elf,
        &plugin,
        &plan,
        &timing,
        timeout_s,
        &[segment],
        "profile",
    )?
    .profile;
    let qemu_s = started.elapsed().as_secs_f64();
    let total = report
        .lines()
        .filter_map(Segment::parse)
        .find(|(k, _)| *k == segment)
        .map(|(_, s)| s)
        .with_context(|| format!("the profile has no segment {segment}"))?;
    let lines: Vec<PcLine> = report
        .lines()
        .filter_map(PcLine::parse)
        .filter(|l| l.segment == segment)
        .collect();
    anyhow::ensure!(
        !lines.is_empty(),
        "the plugin attributed nothing to segment {segment}"
    );
    let addresses: Vec<u64> = lines.iter().map(|l| l.address).collect();
    let addr2line = if board == sagessd_calibrate::VIRT_A53 {
        "aarch64-linux-gnu-addr2line"
    } else {
        "arm-none-eabi-addr2line"
    };
    let frames = symbolize(addr2line, &elf, &addresses)?;
    let root = repo_root()
        .canonicalize()
        .unwrap_or_else(|_| repo_root())
        .display()
        .to_string();
    let mut groups: HashMap<String, Segment> = HashMap::new();
    for (line, frames) in lines.iter().zip(&frames) {
        groups
            .entry(group_name(frames, grouping, &root))
            .or_default()
            .add(&line.counts);
    }
    let clock_mhz = hw.cores.clock_mhz;
    let mut rows: Vec<Row> = groups
        .into_iter()
        .map(|(name, counts)| Row {
            name,
            cycles: cycles(&counts, &timing, clock_mhz),
            counts,
        })
        .collect();
    rows.sort_by(|a, b| b.cycles.total_cmp(&a.cycles).then(a.name.cmp(&b.name)));
    Ok(FirmwareProfile {
        workload: w.name,
        total,
        cycles: cycles(&total, &timing, clock_mhz),
        rows,
        qemu_s,
    })
}

/// The inline chain of one address, as `addr2line -f -i` prints it: the linker's symbol, then
/// (function, location) from the innermost frame out. The innermost frame's function is the
/// symbol's name (addr2line names it so); each location is a line inside its frame's function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frames {
    /// The function the address lies in, as the symbol table names it.
    pub symbol: String,
    /// `(function, file:line)`, innermost first; the outermost is the symbol's own.
    pub frames: Vec<(String, String)>,
}

/// Maps `addresses` of `elf` to their inline chains with `addr2line` (the image's binutils:
/// `arm-none-eabi-addr2line` or `aarch64-linux-gnu-addr2line`).
fn symbolize(addr2line: &str, elf: &Path, addresses: &[u64]) -> anyhow::Result<Vec<Frames>> {
    let mut child = Command::new(addr2line)
        .args(["-a", "-f", "-i", "-C", "-e"])
        .arg(elf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!("running {addr2line} (apt-get install binutils-arm-none-eabi binutils-aarch64-linux-gnu)")
        })?;
    let input: String = addresses.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut stdin = child.stdin.take().context("addr2line's stdin")?;
    // addr2line answers as it reads: feed it from another thread so neither pipe fills up.
    let feeder = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().context("waiting for addr2line")?;
    feeder
        .join()
        .map_err(|_| anyhow::anyhow!("addr2line's feeder panicked"))?
        .context("writing addresses to addr2line")?;
    anyhow::ensure!(
        out.status.success(),
        "{addr2line} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let chains = parse_addr2line(&String::from_utf8_lossy(&out.stdout));
    anyhow::ensure!(
        chains.len() == addresses.len(),
        "addr2line answered {} addresses of {}",
        chains.len(),
        addresses.len()
    );
    Ok(chains)
}

/// Parses `addr2line -a -f -i` output: each address's record starts with its `0x…` line.
pub fn parse_addr2line(text: &str) -> Vec<Frames> {
    let mut out: Vec<Frames> = Vec::new();
    let mut name: Option<String> = None;
    for line in text.lines() {
        if line.starts_with("0x") && line[2..].chars().all(|c| c.is_ascii_hexdigit()) {
            out.push(Frames::default());
            name = None;
            continue;
        }
        let Some(record) = out.last_mut() else {
            continue;
        };
        match name.take() {
            None => name = Some(line.to_string()),
            Some(function) => {
                // "file:line (discriminator n)": the discriminator splits a line's basic
                // blocks, which a profile by line does not.
                let location = line
                    .split_once(" (discriminator")
                    .map_or(line, |(l, _)| l)
                    .to_string();
                if record.frames.is_empty() {
                    record.symbol = function.clone();
                }
                record.frames.push((function, location));
            }
        }
    }
    out
}

/// The group an address with inline chain `frames` falls in; `root` is this repository's path
/// as the line tables spell it.
pub fn group_name(frames: &Frames, grouping: Grouping, root: &str) -> String {
    if grouping == Grouping::Symbol || frames.frames.is_empty() {
        return frames.symbol.clone();
    }
    let ours = |location: &str| location.starts_with(root);
    if grouping == Grouping::Chain {
        let chain: Vec<&str> = frames
            .frames
            .iter()
            .filter(|(_, l)| ours(l))
            .take(3)
            .map(|(f, _)| short(f))
            .collect();
        return if chain.is_empty() {
            short(&frames.symbol).to_string()
        } else {
            chain.join(" < ")
        };
    }
    // The innermost frame in our sources, or the outermost (the symbol's) if none is.
    let (function, location) = frames
        .frames
        .iter()
        .find(|(_, l)| ours(l))
        .or(frames.frames.last())
        .map(|(f, l)| (f.as_str(), l.as_str()))
        .unwrap_or_default();
    let location = location
        .strip_prefix(root)
        .map_or(location, |l| l.trim_start_matches('/'));
    let (file, _) = location.rsplit_once(':').unwrap_or((location, ""));
    match grouping {
        Grouping::Line => format!("{location} ({})", short(function)),
        _ => format!("{} ({file})", short(function)),
    }
}

/// A function's name without its module path or generic arguments (`a::b::<impl X>::f` →
/// `<impl X>::f`, `a::g<c::T>` → `g`): the path ends at the last `::` outside angle brackets,
/// and an impl block stays, since `f` alone does not say whose method it is.
fn short(function: &str) -> &str {
    // Where each path segment starts: after every `::` outside angle brackets.
    let mut starts = vec![0];
    let mut depth = 0i32;
    let bytes = function.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'<' => depth += 1,
            b'>' => depth -= 1,
            b':' if depth == 0 && i > 0 && bytes[i - 1] == b':' => starts.push(i + 1),
            _ => {}
        }
    }
    let last = starts[starts.len() - 1];
    let name = match starts.len().checked_sub(2).map(|k| starts[k]) {
        Some(before) if function[before..].starts_with("<impl ") => &function[before..],
        _ => &function[last..],
    };
    // A generic function's arguments (`poll_io<F, M, H>`) say which instance, which the
    // file beside the name already does well enough.
    match name.find('<') {
        Some(at) if at > 0 && !name.starts_with("<impl ") => &name[..at],
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What addr2line 2.40 prints for two addresses of the calibration image (one inlined
    /// five deep, one in the C start-up code with no line).
    const OUTPUT: &str = "\
0x6000a2e0
sagessd_firmware::isp::generator::<impl sagessd_firmware::isp::Isp>::step_lane
/rustc/abc/library/core/src/slice/mod.rs:547
copy_from_slice<u8>
/rustc/abc/library/core/src/slice/mod.rs:4325
u32
/work/main/firmware/src/dram.rs:42
dedup
/work/main/firmware/src/isp/generator.rs:828 (discriminator 2)
step_lane
/work/main/firmware/src/isp/generator.rs:81
0x60000010
_start
??:0
";

    #[test]
    fn inline_chains_parse_and_group() {
        let chains = parse_addr2line(OUTPUT);
        assert_eq!(chains.len(), 2);
        let a = &chains[0];
        assert_eq!(
            a.symbol,
            "sagessd_firmware::isp::generator::<impl sagessd_firmware::isp::Isp>::step_lane"
        );
        assert_eq!(a.frames.len(), 5);
        assert_eq!(
            a.frames[3].1,
            "/work/main/firmware/src/isp/generator.rs:828"
        );
        let root = "/work/main";
        assert_eq!(
            group_name(a, Grouping::Function, root),
            "u32 (firmware/src/dram.rs)"
        );
        assert_eq!(
            group_name(a, Grouping::Line, root),
            "firmware/src/dram.rs:42 (u32)"
        );
        assert_eq!(
            group_name(a, Grouping::Symbol, root),
            "sagessd_firmware::isp::generator::<impl sagessd_firmware::isp::Isp>::step_lane"
        );
        // Nothing of ours: the symbol's own frame.
        assert_eq!(
            group_name(&chains[1], Grouping::Function, root),
            "_start (??)"
        );
        assert_eq!(
            group_name(a, Grouping::Chain, root),
            "u32 < dedup < step_lane"
        );
        assert_eq!(short("a::b::<impl a::X>::f"), "<impl a::X>::f");
        assert_eq!(short("a::b::g<c::d::T<e::U>>"), "g");
        assert_eq!(short("f"), "f");
    }
}
