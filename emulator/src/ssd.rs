//! The emulated SSD: firmware + NAND array + PCIe link + embedded cores, in virtual time.
//!
//! [`Ssd`] owns a [`Firmware`] running over a [`NandArray`] and exposes an in-process NVMe
//! queue pair: [`Ssd::submit`] a 64-byte submission entry with its host buffer, then
//! [`Ssd::reap`] completions in completion-time order, each with its data and its modelled
//! submission and completion times. Nothing reads a clock and nothing is random: the same
//! sequence of calls gives the same timeline, bit for bit.
//!
//! # Time model
//!
//! One command's life. Each thing a firmware call does (flash operation, DMA, completion) is
//! dated `at(e) = start + core_ns(work counted from the call's start up to e)`: the firmware
//! tells its HAL and host interface its work counters just before each (`note_work`), so an
//! operation is issued when the core has done the work before it, not when the call ends.
//!
//! ```plain
//! host submit at now ─ doorbell_ns ─ 64-B SQE fetch (PCIe host→device, a device read of
//!                                   host memory: dma_read_setup_ns + transfer) ─► arrival
//! arrival ─► firmware submit call (on the core) ─► poll calls ... each call:
//!     start  = max(the core is free, the event that woke it)
//!     end    = start + core_ns(work counted during the call)      (see `cores`)
//!     host→device DMA e: requested at at(e) (PCIe)
//!     flash operation e: issued at max(at(e), end of the call's host→device DMAs posted
//!                        by at(e))                                (see `nand`)
//!     device→host DMA e: requested at at(e), in call order (PCIe posted write:
//!                        posted_write_setup_ns + transfer)
//!     completion e: 16-B CQE requested at max(at(e), host→device DMAs posted by then), after
//!                   the command's data on the device→host FIFO, then + interrupt_ns
//! ```
//!
//! Every DMA's data (not the SQE or CQE) also crosses the controller DRAM (`[dram]
//! bandwidth_mb_s`, see [`crate::dram`]): its DRAM share is requested when its link transfer
//! starts, it is done at `max(link_done, dram_done)`, and the link direction is held until
//! then; flash pages book the same DRAM from [`crate::nand`] as they cross their channel, and
//! SSD→FPGA copies as they cross the `[p2p]` link.
//!
//! The firmware is polled until it reports no progress; then virtual time jumps to the next
//! flash completion or command arrival. The firmware is one thread on one core (see
//! [`crate::cores`]): calls never overlap, and what a call *sees* (flash completions, new
//! commands) is what had happened when it started. Sampling lanes on cores of their own
//! (`Firmware::poll_isp_lane`; see [`crate::cores`] for which lanes those are) run on a
//! timeline each, woken by a call that made progress while their lane has a job queued or
//! running; the calls of all cores are simulated in order of their start times (the firmware
//! core first on a tie, then the lowest lane), and a lane call that made progress wakes the
//! idle firmware core and the idle lanes with work at its end. The DMA engine runs on its own:
//! the core does not wait for a DMA, but whatever depends on DMA'd host data does.
//!
//! Dating each effect inside its call, rather than at the call's end, matters for long calls:
//! the first poll after a burst of deep commands sweeps all of them (page-buffer lookups for
//! thousands of pages, hundreds of flash operations: 0.3–1.8 ms of core time on the shipped
//! configs). With every effect at the call's end, no flash read started before that sweep was
//! over, so a sequential read's device→host link idled for the whole sweep (the ≈ 0.9 ms gap
//! of a 38 ms run on gen4-ssd), and a sequential write's first programs waited for the
//! DMA of every queued command's data (newport's "fill/drain" loss). Bookings on each PCIe
//! direction stay in nondecreasing request time within a call (work counters only grow) and
//! across calls (a call starts after the previous one ended), so a FIFO "busy until" per
//! direction is exact for them. One exception remains: an SQE fetch is booked at the host's
//! submission, which the lazy simulation may reach after a call has booked write data further
//! ahead on host→device; that fetch then queues behind the data (FIFO) instead of using the
//! idle time before it. It costs a fetch at most one queued DMA; the validation shows no loss.
//!
//! A device without in-storage processing (`[firmware] isp = false`) answers a vendor-specific
//! I/O opcode (0x80–0xFF) itself, in the call that would have handed it to the firmware: that
//! call costs `cycles_per_command` on the core and posts an Invalid Opcode completion, exactly
//! as the firmware's answer to an opcode it does not know is timed.
//!
//! # FPGA-based CSDs: the SSD→FPGA copy (`[p2p]`)
//!
//! With a `[p2p]` table (an FPGA-based CSD such as the Samsung SmartSSD) the sampling kernel
//! does not run next to the controller's DRAM: every flash page the ISP engine scans
//! (`WorkCounters::pages_scanned`) must first be copied SSD→FPGA over the internal PCIe link,
//! one posted-write DMA of `page_size_bytes` per page, on its own [`PcieLink`] FIFO ("busy
//! until", set-up overlapping, bandwidth not). A call that scans `k` pages books its `k`
//! copies at its start and cannot start its work before the last of them has landed:
//!
//! ```plain
//! p2p_done = last of k page copies requested at start   (p2p link FIFO)
//! start'   = max(start, p2p_done)
//! end      = start' + core_ns(work of the call)          (the [cores] rates: the FPGA kernel's)
//! ```
//!
//! The result then goes to the host over the normal host link (`[pcie]`), as for any ISP
//! device. Simplifications: (1) the copy is requested when the engine consumes the page (the
//! call's start), not when the flash read ended, so copies never use the idle time before the
//! call, and the whole call (including any NVMe work in it) waits for them (slower than a
//! real FPGA CSD); (2) the model still has one core clock: the controller's work (commands,
//! flash operations, polls) is charged in cycles of that clock, which `[cores]` then
//! describes as the FPGA kernel's; (3) a page-buffer hit is copied again (the FPGA keeps no
//! cache of its own in this model); (4) the device issues the copies itself, with no host
//! software cost (in SmartSAGE's FPGA-CSD the host orchestrates the P2P reads: faster than
//! the real one). Host-facing I/O never touches the `[p2p]` link.
//!
//! The simulation is lazy: it runs inside [`Ssd::reap`], never past the earliest posted
//! completion, so a host that submits after a reap (or after [`Ssd::advance_to_ns`]) is never
//! in the simulation's past.
//!
//! Here: the device and its queue pair. The simulation's calls and their dating are in
//! `timeline`, the firmware's view of the host in `host_side`, the counters in [`DeviceStats`].

use rustc_hash::FxHashMap as FastMap;
use std::collections::VecDeque;
use std::fmt;

use sagessd_abi::nvme::{CompletionEntry, SubmissionEntry};
use sagessd_firmware::Firmware;
use sagessd_firmware::host::CommandId;

use crate::config::{ControllerConfig, HwConfig};
use crate::cores::CoreModel;
use crate::dram::Dram;
use crate::error::EmulatorError;
use crate::event_queue::EventQueue;
use crate::nand::NandArray;
use crate::pcie::{Direction, PcieLink};

mod host_side;
mod stats;
#[cfg(test)]
pub(crate) mod tests;
mod timeline;

use self::host_side::{HostCommand, HostSide, Incoming};
pub use self::stats::DeviceStats;

/// Bytes of an NVMe submission queue entry.
const SQE_BYTES: u64 = 64;
/// Bytes of an NVMe completion queue entry.
const CQE_BYTES: u64 = 16;
/// Most commands one NVMe submission queue can hold (65,536 entries, one always empty).
const MAX_QUEUE_DEPTH: usize = 65_535;
/// Consecutive firmware calls at one virtual instant after which the run is declared a
/// livelock (a real poll loop that keeps reporting progress must eventually spend time).
const LIVELOCK_CALLS: u64 = 1 << 24;

/// A finished command, as the host reaps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completed {
    /// The completion queue entry the firmware posted.
    pub cqe: CompletionEntry,
    /// The command's host buffer after the command (read data, or the buffer as submitted).
    pub data: Vec<u8>,
    /// Virtual time at which the host submitted the command.
    pub submitted_at_ns: u64,
    /// Virtual time at which the host learns of the completion (CQE posted, interrupt taken).
    pub completed_at_ns: u64,
}

impl Completed {
    /// Modelled latency of the command: `completed_at_ns - submitted_at_ns`.
    pub fn latency_ns(&self) -> u64 {
        self.completed_at_ns - self.submitted_at_ns
    }
}

/// What one step of the simulation did.
enum Step {
    /// A firmware call ran.
    Ran,
    /// The next call would start at or after the earliest posted completion.
    Horizon,
    /// Nothing can happen any more.
    Quiet,
}

/// An emulated NVMe SSD: see the [module documentation](self) for the time model.
pub struct Ssd {
    name: String,
    firmware: Firmware<NandArray, Vec<u8>>,
    host: HostSide,
    pcie: PcieLink,
    /// The SSD→FPGA link of an FPGA-based CSD (`[p2p]`); see the module documentation.
    p2p: Option<PcieLink>,
    /// Bytes of one flash page: what one SSD→FPGA copy moves.
    page_size_bytes: u64,
    cores: CoreModel,
    controller: ControllerConfig,
    /// Whether vendor-specific I/O opcodes reach the firmware (`[firmware] isp`).
    isp: bool,
    /// Core cycles of one command's parse, charged when the emulator refuses a vendor opcode.
    cycles_per_command: u64,
    /// The host's clock: new commands are submitted at this time.
    now_ns: u64,
    /// When the boot ended and the device became ready.
    ready_ns: u64,
    /// When the firmware core is next free (end of its last call).
    fw_time_ns: u64,
    /// The sampling lanes that run on cores of their own, a timeline each (see
    /// [`crate::cores`]).
    lane_cores: Vec<LaneCore>,
    /// The sampling lane the firmware core runs in its own calls (sampling time-shares the
    /// cores: `[cores] isp_cores` = 0), if any.
    shared_lane: Option<usize>,
    /// Whether the firmware should be called again at `fw_time_ns`.
    hot: bool,
    /// Whether a poll made progress since the firmware last answered busy.
    retry_blocked: bool,
    arrivals: EventQueue<Incoming>,
    blocked: VecDeque<Incoming>,
    posted: EventQueue<Completed>,
    reaped_early: VecDeque<Completed>,
    outstanding_per_sq: FastMap<u16, usize>,
    outstanding: usize,
    calls_at_instant: u64,
    stats: DeviceStats,
}

/// A core that runs one sampling lane: when it is next free, and whether its lane has a call
/// to make then.
#[derive(Clone, Copy, Debug)]
struct LaneCore {
    /// The firmware's lane it runs.
    lane: usize,
    /// When the core is next free (end of its last call).
    time_ns: u64,
    /// Whether the lane should be called again at `time_ns`.
    hot: bool,
}

impl fmt::Debug for Ssd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ssd")
            .field("name", &self.name)
            .field("now_ns", &self.now_ns)
            .field("fw_time_ns", &self.fw_time_ns)
            .field("outstanding", &self.outstanding)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Ssd {
    /// A freshly formatted device as `config` describes (validated first). Its DRAM arena is
    /// exactly what the firmware needs, lazily zeroed by the OS.
    pub fn new(config: &HwConfig) -> Result<Self, EmulatorError> {
        let (nand, dram) = Self::parts(config)?;
        let firmware = Firmware::new(config.firmware_config(), nand, dram)
            .map_err(|e| config.firmware_error(e))?;
        Ok(Self::around(config, firmware))
    }

    /// The erased NAND array and zeroed DRAM arena `config` describes (validated first).
    pub(crate) fn parts(config: &HwConfig) -> Result<(NandArray, Vec<u8>), EmulatorError> {
        config.validate()?;
        let dram = vec![0u8; config.firmware_dram_bytes()?];
        let nand = NandArray::new(&config.nand).with_dram(Dram::new(&config.dram));
        Ok((nand, dram))
    }

    /// The device around a booted firmware.
    pub(crate) fn around(config: &HwConfig, mut firmware: Firmware<NandArray, Vec<u8>>) -> Self {
        // A recovering boot took flash time: the device is ready when it ended. Anything the
        // firmware started while booting is issued then.
        let ready_ns = firmware.flash().now_ns();
        firmware.flash_mut().issue_staged(ready_ns);
        Self {
            name: config.device.name.clone(),
            firmware,
            host: HostSide::default(),
            pcie: PcieLink::new(&config.pcie),
            p2p: config
                .p2p
                .as_ref()
                .map(|p| PcieLink::new(&p.to_pcie_config())),
            page_size_bytes: u64::from(config.nand.page_size_bytes),
            cores: CoreModel::new(&config.cores),
            controller: config.controller.clone(),
            isp: config.firmware.isp,
            cycles_per_command: config.cores.cycles_per_command,
            now_ns: ready_ns,
            ready_ns,
            fw_time_ns: ready_ns,
            lane_cores: {
                let lanes = u32::from(config.isp_lanes());
                let own = config.isp_lane_cores();
                (lanes - own..lanes)
                    .map(|lane| LaneCore {
                        lane: lane as usize,
                        time_ns: ready_ns,
                        hot: false,
                    })
                    .collect()
            },
            shared_lane: (config.firmware.isp && config.cores.isp_cores == 0).then_some(0),
            hot: true,
            retry_blocked: false,
            arrivals: EventQueue::default(),
            blocked: VecDeque::new(),
            posted: EventQueue::default(),
            reaped_early: VecDeque::new(),
            outstanding_per_sq: FastMap::default(),
            outstanding: 0,
            calls_at_instant: 0,
            stats: DeviceStats::default(),
        }
    }

    /// The device's name (`[device] name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Submits a command on queue `sq_id` (0 = admin) at the current virtual time.
    ///
    /// `data` is the command's host buffer: the payload of a host→device command, or a buffer
    /// of the wanted size for a device→host one (it comes back in [`Completed::data`]). Invalid
    /// commands, including command-id conflicts, are the firmware's to answer with a status.
    pub fn submit(
        &mut self,
        sq_id: u16,
        sqe: SubmissionEntry,
        data: Vec<u8>,
    ) -> Result<(), EmulatorError> {
        let per_sq = self.outstanding_per_sq.entry(sq_id).or_default();
        if *per_sq >= MAX_QUEUE_DEPTH {
            return Err(EmulatorError::QueueFull {
                sq_id,
                outstanding: *per_sq,
            });
        }
        *per_sq += 1;
        self.outstanding += 1;
        self.stats.commands_submitted += 1;
        let doorbell_at = self.now_ns + self.controller.doorbell_ns;
        let arrives_at = self
            .pcie
            .transfer(Direction::HostToDevice, doorbell_at, SQE_BYTES);
        let cmd = CommandId {
            sq_id,
            cid: sqe.cid.get(),
        };
        self.arrivals.push(
            arrives_at,
            Incoming {
                cmd,
                sqe,
                host: HostCommand {
                    data,
                    submitted_at_ns: self.now_ns,
                },
            },
        );
        Ok(())
    }

    /// Runs the simulation until the next completion (in completion-time order) and returns
    /// it, moving the host clock to its time; `None` if no command is outstanding.
    ///
    /// Fails with [`EmulatorError::Stalled`] if commands are outstanding but nothing can ever
    /// complete them.
    pub fn reap(&mut self) -> Result<Option<Completed>, EmulatorError> {
        if let Some(done) = self.reaped_early.pop_front() {
            return Ok(Some(done));
        }
        loop {
            let horizon = self.posted.peek_time();
            match self.step(horizon)? {
                Step::Ran => continue,
                Step::Horizon | Step::Quiet => {
                    if let Some((_, done)) = self.posted.pop() {
                        return Ok(Some(self.finish(done)));
                    }
                    if self.outstanding == 0 {
                        return Ok(None);
                    }
                    return Err(EmulatorError::Stalled {
                        now_ns: self.fw_time_ns.max(self.now_ns),
                        outstanding: self.outstanding,
                    });
                }
            }
        }
    }

    /// Like [`Ssd::reap`], but only a completion the host learns of no later than `t_ns`: runs
    /// the simulation up to `t_ns` and no further, so the host may then submit at `t_ns` without
    /// landing in the simulation's past. `None`: nothing completes by `t_ns` (several host
    /// workers use this to interleave their submissions with device completions in time order).
    pub fn reap_until(&mut self, t_ns: u64) -> Result<Option<Completed>, EmulatorError> {
        if let Some(i) = self
            .reaped_early
            .iter()
            .position(|c| c.completed_at_ns <= t_ns)
        {
            return Ok(self.reaped_early.remove(i));
        }
        loop {
            let horizon = self.posted.peek_time().map_or(t_ns, |p| p.min(t_ns));
            match self.step(Some(horizon))? {
                Step::Ran => continue,
                Step::Horizon | Step::Quiet => {
                    if self.posted.peek_time().is_some_and(|p| p <= t_ns)
                        && let Some((_, done)) = self.posted.pop()
                    {
                        return Ok(Some(self.finish(done)));
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// Submits one command and runs until it completes; completions of other commands reaped
    /// meanwhile are kept for later [`Ssd::reap`] calls, in order.
    pub fn execute(
        &mut self,
        sq_id: u16,
        sqe: SubmissionEntry,
        data: Vec<u8>,
    ) -> Result<Completed, EmulatorError> {
        let cid = sqe.cid.get();
        self.submit(sq_id, sqe, data)?;
        let mut early = Vec::new();
        let result = loop {
            match self.reap_simulated() {
                Ok(Some(done)) if done.cqe.sq_id.get() == sq_id && done.cqe.cid.get() == cid => {
                    break Ok(done);
                }
                Ok(Some(other)) => early.push(other),
                Ok(None) => {
                    break Err(EmulatorError::Stalled {
                        now_ns: self.now_ns,
                        outstanding: self.outstanding,
                    });
                }
                Err(e) => break Err(e),
            }
        };
        self.reaped_early.extend(early);
        result
    }

    /// [`Ssd::reap`] without the completions kept by [`Ssd::execute`].
    fn reap_simulated(&mut self) -> Result<Option<Completed>, EmulatorError> {
        let early = std::mem::take(&mut self.reaped_early);
        let result = self.reap();
        self.reaped_early = early;
        result
    }

    /// Runs the simulation until nothing is pending, background garbage collection included,
    /// so that the firmware is quiet (its state can be saved). Every command must have been
    /// reaped.
    pub fn settle(&mut self) -> Result<(), EmulatorError> {
        if self.outstanding > 0 {
            return Err(EmulatorError::Stalled {
                now_ns: self.now_ns,
                outstanding: self.outstanding,
            });
        }
        while let Step::Ran = self.step(None)? {}
        self.now_ns = self.now_ns.max(self.fw_time_ns);
        Ok(())
    }

    /// Writes a checkpoint of the FTL's tables if anything changed since the last one, and
    /// waits for it: a clean stop, after which a boot has nothing to replay.
    pub fn checkpoint(&mut self) -> Result<(), EmulatorError> {
        self.firmware.request_checkpoint();
        self.hot = true;
        self.settle()
    }

    /// The firmware (for saving its state).
    pub(crate) fn firmware(&self) -> &Firmware<NandArray, Vec<u8>> {
        &self.firmware
    }

    /// The firmware, the device around it dropped (the host's queues with it): what a power
    /// cut leaves to boot from.
    pub(crate) fn into_firmware(self) -> Firmware<NandArray, Vec<u8>> {
        self.firmware
    }

    /// What the boot found (a device built by [`Self::new`] booted blank), and the flash time
    /// it took: the device was ready at that virtual time.
    pub fn boot(&self) -> (sagessd_firmware::BootReport, u64) {
        (self.firmware.boot_report(), self.ready_ns)
    }

    /// The checkpoint writer's counters and its interval in programmed pages.
    pub fn checkpoints(&self) -> (sagessd_firmware::CheckpointStats, u64) {
        (
            self.firmware.checkpoint_stats(),
            self.firmware.checkpoint_interval_pages(),
        )
    }

    /// Flash pages whose data the NAND model holds in memory (without `--image`): about the
    /// live data, since the firmware says which pages are dead (`Flash::forget`).
    pub fn stored_data_pages(&self) -> usize {
        self.firmware.flash().stored_data_pages()
    }

    /// Busy intervals the controller DRAM's calendar holds: bounded by the transfers still in
    /// flight, however long the device runs.
    pub fn dram_calendar_len(&self) -> usize {
        self.firmware
            .flash()
            .dram()
            .map_or(0, crate::dram::Dram::interval_count)
    }

    /// The host's current virtual time.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Moves the host's clock forward to `t_ns` (host think time); never backwards.
    pub fn advance_to_ns(&mut self, t_ns: u64) {
        self.now_ns = self.now_ns.max(t_ns);
    }

    /// Empties the controller's DRAM page buffer (write-through, so nothing is lost): the next
    /// reads come from NAND, as on a board just powered on. Takes no virtual time.
    pub fn drop_caches(&mut self) {
        self.firmware.drop_page_buffer();
    }

    /// Commands submitted and not yet reaped.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Logical block size of the namespace, in bytes.
    pub fn block_size_bytes(&self) -> u32 {
        self.firmware.block_size_bytes()
    }

    /// Largest data transfer of one command the controller reports (MDTS).
    pub fn max_transfer_bytes(&self) -> u32 {
        self.firmware.config().max_transfer_bytes
    }

    /// Number of logical blocks of the namespace.
    pub fn namespace_block_count(&self) -> u64 {
        self.firmware.namespace_block_count()
    }

    /// The NAND array (contents and statistics).
    pub fn nand(&self) -> &NandArray {
        self.firmware.flash()
    }

    /// The PCIe link (statistics, transfer-time formula).
    pub fn pcie(&self) -> &PcieLink {
        &self.pcie
    }

    /// The core model (cycle costs, clock).
    pub fn cores(&self) -> &CoreModel {
        &self.cores
    }

    /// A snapshot of everything counted so far.
    pub fn stats(&self) -> DeviceStats {
        let nand = self.firmware.flash().stats();
        let h2c = self.pcie.stats(Direction::HostToDevice);
        let c2h = self.pcie.stats(Direction::DeviceToHost);
        DeviceStats {
            spurious_completions: self.host.spurious_completions,
            work: self.firmware.work(),
            nand_pages_read: nand.pages_read,
            nand_pages_programmed: nand.pages_programmed,
            nand_blocks_erased: nand.blocks_erased,
            nand_channel_bytes: nand.total_channel_bytes(),
            nand_dma: nand.dma,
            nand_die_busy_ns: nand.die_busy_ns,
            pcie_h2c_bytes: h2c.payload_bytes,
            pcie_c2h_bytes: c2h.payload_bytes,
            pcie_h2c_wire_bytes: h2c.wire_bytes,
            pcie_c2h_wire_bytes: c2h.wire_bytes,
            p2p_bytes: self
                .p2p
                .as_ref()
                .map_or(0, |l| l.stats(Direction::DeviceToHost).payload_bytes),
            p2p_transfers: self
                .p2p
                .as_ref()
                .map_or(0, |l| l.stats(Direction::DeviceToHost).transfers),
            dram_bytes: self.nand().dram().map_or(0, |d| d.stats().bytes),
            dram_busy_ns: self.nand().dram().map_or(0, |d| d.stats().busy_ns),
            simulated_ns: self
                .lane_cores
                .iter()
                .map(|l| l.time_ns)
                .fold(self.fw_time_ns, u64::max)
                .max(self.firmware.flash().now_ns()),
            ..self.stats.clone()
        }
    }

    fn finish(&mut self, done: Completed) -> Completed {
        self.now_ns = self.now_ns.max(done.completed_at_ns);
        self.outstanding -= 1;
        if let Some(n) = self.outstanding_per_sq.get_mut(&done.cqe.sq_id.get()) {
            *n = n.saturating_sub(1);
        }
        self.stats.commands_completed += 1;
        done
    }
}
