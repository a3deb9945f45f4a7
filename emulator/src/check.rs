//! Validation of the timing model against its own analytical limits, and the derived limits of
//! a hardware description (`sagessd device check` / `sagessd device info`).
//!
//! [`run`] drives four workloads through an [`Ssd`] and sets each one's measured figure beside
//! the bound the configuration allows on paper; [`DeviceLimits::new`] derives the limits
//! without simulating anything. The tests require every shipped `hw-configs/*.toml` to come
//! within 2 % of every bound; a model that exceeds a bound is wrong, and one far below it is
//! losing time somewhere it should not.
//!
//! # Notation
//!
//! `P` = page size, `X` = page transfer time on a channel (`P × 1000 / channel_rate_mb_s` ns),
//! `C` = `command_overhead_ns`, `D` = dies, `Ch` = channels, `T(n)` = PCIe time of an `n`-byte
//! DMA (see [`crate::pcie`]), `S` = the transfer size of one command, `k = S / P` its pages.
//!
//! # Bounds
//!
//! Throughput is the smallest of three rates:
//!
//! ```plain
//! flash read   = min(D × P / (C + tR + X),      Ch × P / (C + X))      die cycle, channel cycle
//! flash write  = min(D × P / (C + X + tPROG),   Ch × P / (C + X))
//! controller   = S / (core_ns(work of one command) + poll overhead per command)
//!                                                   (one core runs the firmware: see cores)
//! PCIe read    = S / (k × T(P) + T(16))             data DMAs, one per page, then the CQE
//! PCIe write   = S / (k × T(P) + T(64))             SQE fetch and data DMAs host→device
//! ```
//!
//! A read keeps its die busy for `C + tR + X` (command, sense, data out: the page register holds
//! the data until it is out) and its channel for `C + X`; a program keeps the die for
//! `C + X + tPROG`. The work of one command is what the firmware counts for it (commands,
//! page lookups, flash operations, bytes copied), taken from one such command run alone on an
//! idle device, without its polls; [`crate::cores`] turns it into core time. The poll-loop
//! overhead per command (`polls × cycles_per_poll + parked_checked × cycles_per_parked_command`
//! over the run, divided by its commands) depends on how many commands one sweep serves, which
//! the load decides, so it is taken from the run being checked: the bound then says the core
//! cannot be busier than 100 %, and it binds where the core saturates (newport's and gen4-ssd's
//! random reads).
//!
//! Random 4 KiB reads at queue depth `Q`, each a column read of its 4 KiB (`X₄ = X × 4096 / P`
//! of channel time, see [`crate::nand`]):
//!
//! ```plain
//! IOPS ≤ min(D / (C + tR + X₄), Ch / (C + X₄), 1 / core_ns(work), 1 / (T(4096) + T(16)),
//!            1 / T(64), DRAM / (2 × 4096), min(Q, 64) / latency_QD1)
//! ```
//!
//! the last term being Little's law (the firmware holds at most 64 commands). The unloaded
//! latency of one 4 KiB read is the sum of its stages:
//!
//! ```plain
//! doorbell + dma_read_setup + T(64)       SQE fetch (a device read of host memory)
//! + core_ns(work of one read)             firmware calls: parse, lookup + issue, DMA + complete,
//!                                         with the 2 polls on its path (issue, completion) and
//!                                         their parked-command looks, not the idle polls
//! + C + tR + X₄                           column read of the 4 KiB on an idle die and channel
//! + posted_write_setup + T(4096) + T(16)  data to the host (posted write), then the CQE
//!                                         behind it (its set-up overlaps the data's transfer)
//! + interrupt
//! ```
//!
//! # Workloads, and why they can reach their bounds
//!
//! * **Sequential read**: `max_transfer_bytes` reads at queue depth 64 over a region written
//!   beforehand at queue depth 1 (so logical page `L` sits on die `L mod D`), page buffer
//!   emptied first. Rate = bytes / time from the first submission to the last completion, so
//!   pipeline fill and drain count against the model. Fill is more than one unloaded latency:
//!   the firmware's first poll sweeps every accepted command and queues up to its per-poll
//!   budget of flash reads (512) before it services the first completion, 0.2–0.5 ms on the
//!   shipped configs; with the region at 16,384 pages (38–100 ms of transfer) that costs
//!   about 1 %. (Until the emulator dated each flash operation and DMA inside its firmware
//!   call, see [`crate::ssd`], every read of that sweep started only when the sweep ended and
//!   the loss was 2.4–3 % on the PCIe-bound configs.)
//! * **Random read QD1**: 4 KiB at a random offset of a distinct, random, unbuffered page; mean
//!   latency.
//! * **Random read QD64**: 4 KiB reads of every page of the region exactly once, in random
//!   order, *die-balanced*: the region is cut into rows of `D` consecutive logical pages (one per
//!   die), and rows are visited in random order, each row's pages in random order. Uniformly
//!   random reads at a finite queue depth leave some dies idle while others queue (a closed
//!   network of `D` servers and `Q` customers runs at about `Q / (Q + D − 1)` of its peak), so
//!   they measure the luck of the draw, not the model's limits; balanced rows measure the
//!   limits.
//! * **Sequential write**: `max_transfer_bytes` writes at queue depth 64 on a fresh device,
//!   staying inside the first block of every die: no erase and no garbage collection (which
//!   would make the bound depend on the FTL's policy, not on the hardware). Rate measured as
//!   for sequential reads. Each die programs its block's pages back to back, so the run lasts
//!   `pages_per_block` program cycles plus the fill (the first commands' data in) and drain.

use std::fmt;

use sagessd_abi::nvme::{Status, SubmissionEntry};
use sagessd_abi::rng::SplitMix64;
use sagessd_firmware::MAX_COMMANDS;
use sagessd_firmware::work::WorkCounters;

use crate::config::HwConfig;
use crate::cores::CoreModel;
use crate::dram::Dram;
use crate::error::EmulatorError;
use crate::nand::{DmaBytes, NandTiming};
use crate::pcie::PcieLink;
use crate::ssd::{Completed, Ssd};

/// The namespace every command addresses.
const NSID: u32 = 1;
/// Bytes of a submission entry, a completion entry, and a random read.
const SQE_BYTES: u64 = 64;
const CQE_BYTES: u64 = 16;
const SMALL_READ_BYTES: u64 = 4096;

/// Limits of a configuration that follow from its parameters alone.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceLimits {
    /// Device name.
    pub name: String,
    /// Bytes of flash (all physical pages).
    pub raw_capacity_bytes: u64,
    /// Bytes of the namespace (after reserves and over-provisioning).
    pub namespace_bytes: u64,
    /// Dies that operate in parallel.
    pub die_count: u32,
    /// Channels.
    pub channel_count: u32,
    /// Channel time of one page (`X`).
    pub page_transfer_ns: u64,
    /// Die time of one page read: `C + tR + X`.
    pub die_read_cycle_ns: u64,
    /// Flash-internal read bandwidth, bytes per second (min of the die and channel limits).
    pub flash_read_bytes_s: f64,
    /// Flash-internal program bandwidth, bytes per second.
    pub flash_write_bytes_s: f64,
    /// PCIe effective bandwidth device→host with full-size TLPs, bytes per second.
    pub pcie_c2h_bytes_s: f64,
    /// PCIe effective bandwidth host→device with full-size TLPs, bytes per second.
    pub pcie_h2c_bytes_s: f64,
    /// Controller DRAM bandwidth, bytes per second (`[dram] bandwidth_mb_s`), shared by both
    /// directions: a read's bytes cross it twice (flash in, host out), a write's too.
    pub dram_bytes_s: f64,
    /// Controller (core) time of one 4 KiB read that misses the page buffer, alone on an idle
    /// device: its own work plus the polls on its critical path (not the idle ones).
    pub controller_read_4k_ns: u64,
    /// Controller time of one `max_transfer_bytes` sequential read, without poll overhead.
    pub controller_read_max_ns: u64,
    /// Controller time of one `max_transfer_bytes` write, without poll overhead.
    pub controller_write_max_ns: u64,
    /// The work the firmware counts for those commands, without poll-loop overhead, and the
    /// flash DMA they cause.
    unit_read_4k: UnitCost,
    unit_read_max: UnitCost,
    unit_write_max: UnitCost,
    /// Largest transfer of one command.
    pub max_transfer_bytes: u64,
    /// Unloaded latency of one 4 KiB read (sum of stages).
    pub qd1_read_latency_ns: u64,
    /// Whether the device accepts the ISP (vendor) commands.
    pub isp: bool,
}

/// The work the firmware counts for one command run alone on an idle device.
#[derive(Clone, Copy, Debug)]
struct UnitWork {
    /// Everything counted from the submission to the completion, idle polls included.
    all: WorkCounters,
    /// Polls in `all` that found nothing to do, and the parked commands they looked at.
    idle_polls: u64,
    idle_parked: u64,
    /// Page data the command's flash operations DMA'd into and out of DRAM.
    dma: DmaBytes,
}

/// Counted work and the flash DMA that goes with it: what one command costs the cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct UnitCost {
    work: WorkCounters,
    dma: DmaBytes,
}

impl UnitCost {
    /// Its cycles: the work's, and the glue's for keeping the DMA coherent.
    fn cycles(&self, cores: &CoreModel) -> u64 {
        cores
            .cycles(&self.work)
            .saturating_add(cores.flash_dma_cycles(self.dma))
    }
}

impl UnitWork {
    /// The work on the command's critical path: without the idle polls (the last pass of the
    /// poll loop before the firmware waits for flash, which ends long before the flash does).
    fn critical(&self) -> UnitCost {
        UnitCost {
            work: WorkCounters {
                polls: self.all.polls - self.idle_polls,
                parked_checked: self.all.parked_checked - self.idle_parked,
                ..self.all
            },
            dma: self.dma,
        }
    }

    /// The command's own work, without any poll-loop overhead (which a loaded controller
    /// shares among the commands of one sweep).
    fn without_polling(&self) -> UnitCost {
        UnitCost {
            work: WorkCounters {
                polls: 0,
                parked_checked: 0,
                ..self.all
            },
            dma: self.dma,
        }
    }
}

fn unit_work(config: &HwConfig, write: bool, bytes: u64) -> Result<UnitWork, EmulatorError> {
    let mut ssd = Ssd::new(config)?;
    let block = u64::from(ssd.block_size_bytes());
    let blocks = (bytes / block) as u32;
    if !write {
        // The page must be mapped (an unmapped page reads as zeros without flash).
        let sqe = SubmissionEntry::read_write(true, 1, NSID, 0, blocks);
        expect_ok(ssd.execute(1, sqe, vec![0x5A; bytes as usize])?)?;
        ssd.drop_caches();
    }
    let before = ssd.stats();
    let sqe = SubmissionEntry::read_write(write, 2, NSID, 0, blocks);
    expect_ok(ssd.execute(1, sqe, vec![0xA5; bytes as usize])?)?;
    let after = ssd.stats();
    Ok(UnitWork {
        all: after.work.since(&before.work),
        idle_polls: after.idle_polls - before.idle_polls,
        idle_parked: after.idle_poll_parked_checked - before.idle_poll_parked_checked,
        dma: after.nand_dma.since(before.nand_dma),
    })
}

fn expect_ok(done: Completed) -> Result<Completed, EmulatorError> {
    if done.cqe.status() == Status::SUCCESS {
        Ok(done)
    } else {
        Err(EmulatorError::CheckFailed(format!(
            "command {} failed with {:?}",
            done.cqe.cid.get(),
            done.cqe.status()
        )))
    }
}

fn rate(bytes: u64, ns: u64) -> f64 {
    bytes as f64 * 1e9 / ns.max(1) as f64
}

impl DeviceLimits {
    /// Derives the limits of `config` (validated first). Runs three single commands on a
    /// scratch device to learn what the firmware counts for them.
    pub fn new(config: &HwConfig) -> Result<Self, EmulatorError> {
        let ssd = Ssd::new(config)?;
        let n = &config.nand;
        let g = n.geometry();
        let t = NandTiming::from_config(n);
        let link = PcieLink::new(&config.pcie);
        let page = u64::from(n.page_size_bytes);
        let dies = g.die_count();
        let channel_cycle = t.command_overhead_ns + t.page_transfer_ns;
        let die_read = t.read_latency_ns();
        let die_write = t.program_latency_ns();
        let per_channel = |cycle: u64| rate(page * u64::from(n.channels), cycle);
        let per_die = |cycle: u64| rate(page * u64::from(dies), cycle);
        let cores = ssd.cores();
        let max = u64::from(config.firmware.max_transfer_bytes);
        let read_4k = unit_work(config, false, SMALL_READ_BYTES)?;
        let read_max = unit_work(config, false, max)?;
        let write_max = unit_work(config, true, max)?;
        let read_4k_critical = cores.cycles_to_ns(read_4k.critical().cycles(cores));
        let p = &config.pcie;
        let c = &config.controller;
        let dram = Dram::new(&config.dram);
        // A page's data-out and the 4 KiB DMA each end when both their link and their DRAM
        // share are done (on an idle DRAM: the slower of the two).
        let qd1 = c.doorbell_ns
            + p.dma_read_setup_ns
            + link.transfer_ns(SQE_BYTES)
            + read_4k_critical
            + t.command_overhead_ns
            + t.t_read_ns
            + t.transfer_ns(SMALL_READ_BYTES, page)
                .max(dram.transfer_ns(SMALL_READ_BYTES))
            + p.posted_write_setup_ns
            + link
                .transfer_ns(SMALL_READ_BYTES)
                .max(dram.transfer_ns(SMALL_READ_BYTES))
            + link.transfer_ns(CQE_BYTES)
            + c.interrupt_ns;
        let pcie_bytes_s = link.effective_rate_mb_s() * 1e6;
        Ok(Self {
            name: config.device.name.clone(),
            raw_capacity_bytes: g.page_count() * page,
            namespace_bytes: ssd.namespace_block_count() * u64::from(ssd.block_size_bytes()),
            die_count: dies,
            channel_count: n.channels,
            page_transfer_ns: t.page_transfer_ns,
            die_read_cycle_ns: die_read,
            flash_read_bytes_s: per_die(die_read).min(per_channel(channel_cycle)),
            flash_write_bytes_s: per_die(die_write).min(per_channel(channel_cycle)),
            pcie_c2h_bytes_s: pcie_bytes_s,
            pcie_h2c_bytes_s: pcie_bytes_s,
            dram_bytes_s: dram.bytes_per_s(),
            controller_read_4k_ns: read_4k_critical,
            controller_read_max_ns: cores.cycles_to_ns(read_max.without_polling().cycles(cores)),
            controller_write_max_ns: cores.cycles_to_ns(write_max.without_polling().cycles(cores)),
            unit_read_4k: read_4k.without_polling(),
            unit_read_max: read_max.without_polling(),
            unit_write_max: write_max.without_polling(),
            max_transfer_bytes: max,
            qd1_read_latency_ns: qd1,
            isp: config.firmware.isp,
        })
    }
}

impl fmt::Display for DeviceLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        let gbs = |r: f64| r / 1e9;
        writeln!(f, "device {}", self.name)?;
        writeln!(
            f,
            "  raw capacity                 {:>12.2} GiB",
            gib(self.raw_capacity_bytes)
        )?;
        writeln!(
            f,
            "  namespace                    {:>12.2} GiB",
            gib(self.namespace_bytes)
        )?;
        writeln!(
            f,
            "  dies / channels              {:>12} / {}",
            self.die_count, self.channel_count
        )?;
        writeln!(
            f,
            "  page transfer (X)            {:>12} ns",
            self.page_transfer_ns
        )?;
        writeln!(
            f,
            "  die read cycle (C + tR + X)  {:>12} ns",
            self.die_read_cycle_ns
        )?;
        writeln!(
            f,
            "  flash-internal read          {:>12.3} GB/s",
            gbs(self.flash_read_bytes_s)
        )?;
        writeln!(
            f,
            "  flash-internal program       {:>12.3} GB/s",
            gbs(self.flash_write_bytes_s)
        )?;
        writeln!(
            f,
            "  PCIe device→host (effective) {:>12.3} GB/s",
            gbs(self.pcie_c2h_bytes_s)
        )?;
        writeln!(
            f,
            "  PCIe host→device (effective) {:>12.3} GB/s",
            gbs(self.pcie_h2c_bytes_s)
        )?;
        writeln!(
            f,
            "  controller DRAM (both ways)  {:>12.3} GB/s",
            gbs(self.dram_bytes_s)
        )?;
        writeln!(
            f,
            "  controller, 4 KiB read       {:>12} ns per command",
            self.controller_read_4k_ns
        )?;
        writeln!(
            f,
            "  controller, {} KiB read    {:>12} ns per command",
            self.max_transfer_bytes / 1024,
            self.controller_read_max_ns
        )?;
        writeln!(
            f,
            "  controller, {} KiB write   {:>12} ns per command",
            self.max_transfer_bytes / 1024,
            self.controller_write_max_ns
        )?;
        writeln!(
            f,
            "  QD1 4 KiB read latency bound {:>12.2} us",
            self.qd1_read_latency_ns as f64 / 1000.0
        )?;
        write!(
            f,
            "  in-storage processing        {:>12}",
            if self.isp {
                "yes"
            } else {
                "no (vendor opcodes refused)"
            }
        )
    }
}

/// What a row of the check measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Bytes per second; more is better, the bound is a ceiling.
    Throughput,
    /// Commands per second; more is better, the bound is a ceiling.
    Iops,
    /// Nanoseconds; less is better, the bound is a floor.
    Latency,
}

/// One workload: its measured figure beside its bound.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckRow {
    /// Workload name.
    pub workload: String,
    /// What is measured.
    pub metric: Metric,
    /// The simulated figure.
    pub measured: f64,
    /// The analytical bound.
    pub bound: f64,
    /// Which resource sets the bound.
    pub limited_by: &'static str,
}

impl CheckRow {
    /// Measured over bound for rates, bound over measured for latency: 1.0 means the model
    /// reaches its limit, below 1.0 that it falls short, above 1.0 that it beats it (a bug).
    pub fn ratio(&self) -> f64 {
        match self.metric {
            Metric::Latency => self.bound / self.measured,
            _ => self.measured / self.bound,
        }
    }

    /// Whether the model reaches its bound to within `tolerance` (e.g. 0.02 for 2 %) without
    /// beating it (a ratio above 1 means the bound or the model is wrong).
    pub fn within(&self, tolerance: f64) -> bool {
        let ratio = self.ratio();
        ratio <= 1.0 + 1e-9 && 1.0 - ratio <= tolerance
    }

    fn unit(&self) -> &'static str {
        match self.metric {
            Metric::Throughput => "GB/s",
            Metric::Iops => "kIOPS",
            Metric::Latency => "us",
        }
    }

    fn scaled(&self, v: f64) -> f64 {
        match self.metric {
            Metric::Throughput => v / 1e9,
            Metric::Iops => v / 1e3,
            Metric::Latency => v / 1e3,
        }
    }
}

/// The result of [`run`]: one row per workload.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckReport {
    /// Device name.
    pub name: String,
    /// The rows, in workload order.
    pub rows: Vec<CheckRow>,
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "device {} (virtual time)", self.name)?;
        writeln!(
            f,
            "  {:<28} {:>10} {:>10} {:>6} {:>7}  limited by",
            "workload", "measured", "bound", "unit", "ratio"
        )?;
        for (i, r) in self.rows.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(
                f,
                "  {:<28} {:>10.3} {:>10.3} {:>6} {:>7.4}  {}",
                r.workload,
                r.scaled(r.measured),
                r.scaled(r.bound),
                r.unit(),
                r.ratio(),
                r.limited_by
            )?;
        }
        Ok(())
    }
}

/// Sizes of the check's workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckOptions {
    /// Flash pages in the read region (rounded down to whole rows of one page per die, and to
    /// whole `max_transfer_bytes` commands) and pages written by the write workload (capped at
    /// one block per die).
    pub region_pages: u32,
    /// Host queue depth of the deep workloads.
    pub queue_depth: u32,
    /// Reads of the QD1 workload.
    pub qd1_reads: u32,
    /// Seed of the random orders.
    pub seed: u64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            region_pages: 16384,
            queue_depth: 128,
            qd1_reads: 128,
            seed: 1,
        }
    }
}

/// One I/O of a workload: write or read, first block, block count.
#[derive(Clone, Copy, Debug)]
struct Io {
    write: bool,
    slba: u64,
    blocks: u32,
}

/// Timing of a closed-loop run at a fixed queue depth.
#[derive(Debug)]
struct RunTiming {
    first_submit_ns: u64,
    last_completion_ns: u64,
    total_latency_ns: u64,
    count: u64,
    /// Polls during the run, and parked commands they looked at.
    polls: u64,
    parked_checked: u64,
}

/// Runs `ios` keeping `queue_depth` outstanding; every command must succeed.
fn closed_loop(ssd: &mut Ssd, ios: &[Io], queue_depth: u32) -> Result<RunTiming, EmulatorError> {
    let block = ssd.block_size_bytes() as usize;
    let mut next = 0usize;
    let mut cid: u16 = 0;
    let first_submit_ns = ssd.now_ns();
    let work_before = ssd.stats().work;
    let mut last_completion_ns = first_submit_ns;
    let mut total_latency_ns = 0;
    let mut submit = |ssd: &mut Ssd, io: &Io| {
        cid = cid.wrapping_add(1);
        let sqe = SubmissionEntry::read_write(io.write, cid, NSID, io.slba, io.blocks);
        let fill = if io.write { 0x3C } else { 0 };
        ssd.submit(1, sqe, vec![fill; io.blocks as usize * block])
    };
    while next < ios.len() && ssd.outstanding() < queue_depth as usize {
        submit(ssd, &ios[next])?;
        next += 1;
    }
    while let Some(done) = ssd.reap()? {
        let done = expect_ok(done)?;
        last_completion_ns = done.completed_at_ns;
        total_latency_ns += done.latency_ns();
        if next < ios.len() {
            submit(ssd, &ios[next])?;
            next += 1;
        }
    }
    let work = ssd.stats().work.since(&work_before);
    Ok(RunTiming {
        first_submit_ns,
        last_completion_ns,
        total_latency_ns,
        count: ios.len() as u64,
        polls: work.polls,
        parked_checked: work.parked_checked,
    })
}

impl RunTiming {
    /// Commands per second over the whole run, from the first submission to the last
    /// completion: pipeline fill and drain count against the model, so the figure can only
    /// fall short of a bound (by one unloaded latency over the run's length), never beat it.
    fn rate(&self) -> f64 {
        self.count as f64 * 1e9 / self.elapsed_ns().max(1) as f64
    }

    fn mean_latency_ns(&self) -> f64 {
        self.total_latency_ns as f64 / self.count.max(1) as f64
    }

    fn elapsed_ns(&self) -> u64 {
        self.last_completion_ns - self.first_submit_ns
    }

    /// Core time per command: the work one such command counts alone (`unit`, without poll
    /// overhead) plus this run's poll-loop overhead per command (its polls and parked-command
    /// looks, divided by its commands). How many polls and looks a command shares depends on
    /// the load, so that part is observed, not derived; the core cannot be busier than the run
    /// is long, so this is still a ceiling on the rate.
    fn controller_ns(&self, config: &HwConfig, cores: &CoreModel, unit: &UnitCost) -> f64 {
        let c = &config.cores;
        let per_command = self.count.max(1) as f64;
        let poll_cycles = (self.polls as f64 * c.cycles_per_poll as f64
            + self.parked_checked as f64 * c.cycles_per_parked_command as f64)
            / per_command;
        let cycles = unit.cycles(cores) as f64 + poll_cycles;
        (cycles * 1000.0 / f64::from(c.clock_mhz.max(1))).max(1.0)
    }
}

/// The smallest of named limits.
fn min_of(limits: &[(&'static str, f64)]) -> (&'static str, f64) {
    limits.iter().copied().fold(
        ("none", f64::INFINITY),
        |a, b| if b.1 < a.1 { b } else { a },
    )
}

/// Runs the four validation workloads on `config` and reports measured vs bound.
pub fn run(config: &HwConfig, options: &CheckOptions) -> Result<CheckReport, EmulatorError> {
    let limits = DeviceLimits::new(config)?;
    let n = &config.nand;
    let g = n.geometry();
    let t = NandTiming::from_config(n);
    let link = PcieLink::new(&config.pcie);
    let page = u64::from(n.page_size_bytes);
    let dies = u64::from(g.die_count());
    let channels = u64::from(n.channels);
    let max = u64::from(config.firmware.max_transfer_bytes);
    let k = max / page;
    let qd = options.queue_depth.max(1);
    let block = u64::from(config.firmware.block_size_bytes);
    let blocks_per_page = page / block;
    let mut rng = SplitMix64::new(options.seed);

    // The read region: whole rows of one page per die, and whole max-size commands.
    let row_pages = dies.max(k);
    let unit = if row_pages.is_multiple_of(k) {
        row_pages
    } else {
        dies * k
    };
    let region_pages = (u64::from(options.region_pages) / unit).max(1) * unit;
    let cmd_blocks = (max / block) as u32;
    let sequential = |write: bool, pages: u64| -> Vec<Io> {
        (0..pages / k)
            .map(|i| Io {
                write,
                slba: i * k * blocks_per_page,
                blocks: cmd_blocks,
            })
            .collect()
    };

    let mut rows = Vec::new();
    let cores = CoreModel::new(&config.cores);
    let channel_cycle = t.command_overhead_ns + t.page_transfer_ns;

    // Sequential write on a fresh device, inside the first block of every die.
    {
        let pages = (region_pages.min(dies * u64::from(n.pages_per_block)) / k).max(1) * k;
        let mut ssd = Ssd::new(config)?;
        let run = closed_loop(&mut ssd, &sequential(true, pages), qd)?;
        let measured = run.rate() * max as f64;
        let (limited_by, bound) = min_of(&[
            (
                "flash dies (program)",
                rate(page * dies, t.program_latency_ns()),
            ),
            ("flash channels", rate(page * channels, channel_cycle)),
            (
                "controller",
                max as f64 * 1e9 / run.controller_ns(config, &cores, &limits.unit_write_max),
            ),
            (
                "PCIe host→device",
                rate(
                    max,
                    k * link.transfer_ns(page) + link.transfer_ns(SQE_BYTES),
                ),
            ),
            ("controller DRAM", limits.dram_bytes_s / 2.0),
        ]);
        rows.push(CheckRow {
            workload: format!("seq write {} KiB QD{qd}", max / 1024),
            metric: Metric::Throughput,
            measured,
            bound,
            limited_by,
        });
    }

    // The read device: the region written at QD1, so logical page L sits on die L mod D.
    let mut ssd = Ssd::new(config)?;
    closed_loop(&mut ssd, &sequential(true, region_pages), 1)?;

    // Sequential read.
    {
        ssd.drop_caches();
        let run = closed_loop(&mut ssd, &sequential(false, region_pages), qd)?;
        let measured = run.rate() * max as f64;
        let (limited_by, bound) = min_of(&[
            ("flash dies", rate(page * dies, t.read_latency_ns())),
            ("flash channels", rate(page * channels, channel_cycle)),
            (
                "controller",
                max as f64 * 1e9 / run.controller_ns(config, &cores, &limits.unit_read_max),
            ),
            (
                "PCIe device→host",
                rate(
                    max,
                    k * link.transfer_ns(page) + link.transfer_ns(CQE_BYTES),
                ),
            ),
            ("controller DRAM", limits.dram_bytes_s / 2.0),
        ]);
        rows.push(CheckRow {
            workload: format!("seq read {} KiB QD{qd}", max / 1024),
            metric: Metric::Throughput,
            measured,
            bound,
            limited_by,
        });
    }

    let small_blocks = (SMALL_READ_BYTES / block).max(1) as u32;
    let small_read = |lpn: u64, rng: &mut SplitMix64| Io {
        write: false,
        slba: lpn * blocks_per_page
            + rng.below(blocks_per_page / u64::from(small_blocks)) * u64::from(small_blocks),
        blocks: small_blocks,
    };

    // Random 4 KiB reads at QD1: distinct random pages, page buffer emptied first.
    {
        ssd.drop_caches();
        let mut pages: Vec<u64> = (0..region_pages).collect();
        rng.shuffle(&mut pages);
        let ios: Vec<Io> = pages
            .iter()
            .take(options.qd1_reads as usize)
            .map(|&p| small_read(p, &mut rng))
            .collect();
        let run = closed_loop(&mut ssd, &ios, 1)?;
        rows.push(CheckRow {
            workload: "rand read 4 KiB QD1".to_string(),
            metric: Metric::Latency,
            measured: run.mean_latency_ns(),
            bound: limits.qd1_read_latency_ns as f64,
            limited_by: "sum of stages",
        });
    }

    // Random 4 KiB reads at depth: every page once, die-balanced rows in random order.
    {
        ssd.drop_caches();
        // Rows inside the first block of every die only: the FTL fills one block per die at a
        // time, so all these pages sit on one plane and no read pairs with another
        // (multi-plane grouping, see `crate::nand`); the die bound is the one-plane bound.
        // Rows of a second block (possibly another plane) would pair by chance and beat it.
        let die_rows = (region_pages / dies).min(u64::from(n.pages_per_block));
        let mut row_order: Vec<u64> = (0..die_rows).collect();
        rng.shuffle(&mut row_order);
        let mut ios = Vec::with_capacity((die_rows * dies) as usize);
        let mut cols: Vec<u64> = (0..dies).collect();
        for row in row_order {
            rng.shuffle(&mut cols);
            for &c in &cols {
                ios.push(small_read(row * dies + c, &mut rng));
            }
        }
        let run = closed_loop(&mut ssd, &ios, qd)?;
        let in_firmware = qd.min(MAX_COMMANDS as u32);
        let x4 = t.transfer_ns(SMALL_READ_BYTES, page);
        let (limited_by, bound) = min_of(&[
            (
                "flash dies",
                dies as f64 * 1e9 / (t.command_overhead_ns + t.t_read_ns + x4) as f64,
            ),
            (
                "flash channels",
                channels as f64 * 1e9 / (t.command_overhead_ns + x4) as f64,
            ),
            (
                "controller",
                1e9 / run.controller_ns(config, &cores, &limits.unit_read_4k),
            ),
            (
                "PCIe device→host",
                1e9 / (link.transfer_ns(SMALL_READ_BYTES) + link.transfer_ns(CQE_BYTES)) as f64,
            ),
            ("PCIe host→device", 1e9 / link.transfer_ns(SQE_BYTES) as f64),
            (
                "controller DRAM",
                limits.dram_bytes_s / (2 * SMALL_READ_BYTES) as f64,
            ),
            (
                "queue depth / QD1 latency",
                f64::from(in_firmware) * 1e9 / limits.qd1_read_latency_ns as f64,
            ),
        ]);
        rows.push(CheckRow {
            workload: format!("rand read 4 KiB QD{qd}"),
            metric: Metric::Iops,
            measured: run.rate(),
            bound,
            limited_by,
        });
    }

    Ok(CheckReport {
        name: config.device.name.clone(),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> Vec<HwConfig> {
        crate::config::tests::shipped_configs()
            .into_iter()
            .map(|(_, c)| c)
            .collect()
    }

    #[test]
    fn every_shipped_config_reaches_its_bounds_within_two_percent() {
        // Known gaps, pinned so that a change either way is noticed: newport's sequential reads
        // are controller-bound and complete at 0.99 of the bound in the steady state, but the
        // run's first polls leave ~800 pages of host DMA queued on the link, which drain at its
        // pace after the core's last work (docs/model.md, "Known limits").
        const KNOWN_SHORTFALLS: [(&str, &str, f64, f64); 1] =
            [("newport", "seq read 512 KiB QD128", 0.93, 0.96)];
        for config in shipped() {
            let report = run(&config, &CheckOptions::default()).unwrap();
            println!("{report}");
            for row in &report.rows {
                if let Some((.., low, high)) = KNOWN_SHORTFALLS
                    .iter()
                    .find(|k| k.0 == config.device.name && k.1 == row.workload)
                {
                    assert!(
                        (*low..=*high).contains(&row.ratio()),
                        "{}: {} ratio {:.4}: the known shortfall moved\n{report}",
                        config.device.name,
                        row.workload,
                        row.ratio()
                    );
                    continue;
                }
                let tolerance = 0.02;
                assert!(
                    row.ratio() <= 1.0 + 1e-9,
                    "{}: {} beats its bound\n{report}",
                    config.device.name,
                    row.workload
                );
                assert!(
                    row.within(tolerance),
                    "{}: {} ratio {:.4} outside {tolerance}\n{report}",
                    config.device.name,
                    row.workload,
                    row.ratio()
                );
            }
        }
    }

    #[test]
    fn limits_of_cosmos_plus_follow_from_its_parameters() {
        let l = DeviceLimits::new(&HwConfig::cosmos_plus()).unwrap();
        assert_eq!(l.die_count, 64);
        // 16 KiB at 200 MB/s = 81,920 ns; + 600 ns command + 60 us sense.
        assert_eq!(l.page_transfer_ns, 81_920);
        assert_eq!(l.die_read_cycle_ns, 600 + 60_000 + 81_920);
        // Channel-bound: 8 × 16 KiB / 82.52 us.
        assert!((l.flash_read_bytes_s - 8.0 * 16384.0 / 82_520e-9).abs() < 1.0);
        assert_eq!(l.raw_capacity_bytes, 128 << 30);
        assert!(l.namespace_bytes < l.raw_capacity_bytes);
        // A 4 KiB read is a column read: 4 KiB of the page cross the channel (20,480 ns).
        assert!(l.qd1_read_latency_ns > 600 + 60_000 + 20_480);
        assert!(l.qd1_read_latency_ns < l.die_read_cycle_ns);
        assert!(format!("{l}").contains("QD1 4 KiB read latency bound"));
    }
}
