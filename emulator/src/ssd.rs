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

use rustc_hash::FxHashMap as FastMap;
use std::collections::VecDeque;
use std::fmt;

use sagessd_abi::nvme::{CompletionEntry, Status, SubmissionEntry};
use sagessd_firmware::host::{CommandId, DmaError, HostInterface};
use sagessd_firmware::work::WorkCounters;
use sagessd_firmware::{Busy, Firmware};

use crate::config::{ControllerConfig, HwConfig};
use crate::cores::CoreModel;
use crate::dram::Dram;
use crate::error::EmulatorError;
use crate::event_queue::EventQueue;
use crate::nand::NandArray;
#[cfg(test)]
use crate::nand::NandTiming;
use crate::pcie::{Direction, PcieLink};

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

/// What the emulated device has done since it was built; all counts are cumulative.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Commands submitted by the host.
    pub commands_submitted: u64,
    /// Commands reaped by the host.
    pub commands_completed: u64,
    /// Times the firmware answered a submit with "busy" (the command was retried later).
    pub busy_retries: u64,
    /// Completions the firmware posted for commands the host did not have outstanding.
    pub spurious_completions: u64,
    /// Firmware calls (submit and poll) simulated.
    pub firmware_calls: u64,
    /// Virtual time the firmware core spent executing calls.
    pub core_busy_ns: u64,
    /// Calls of sampling lanes on cores of their own (every lane with `[cores] isp_cores` ≥ 1;
    /// all but lane 0 when sampling time-shares the cores, lane 0's work then being in the
    /// firmware core's calls).
    pub isp_calls: u64,
    /// Virtual time the cores of their own spent executing sampling lanes' calls, summed over
    /// those cores (0 without any).
    pub isp_core_busy_ns: u64,
    /// Polls that found nothing to do (the last pass of the poll loop before it idles). Their
    /// cost is in `core_busy_ns`; their counts are in `work.polls`.
    pub idle_polls: u64,
    /// Parked commands looked at by the polls of `idle_polls` (also in `work.parked_checked`).
    pub idle_poll_parked_checked: u64,
    /// The firmware's own work counters.
    pub work: WorkCounters,
    /// Flash pages read.
    pub nand_pages_read: u64,
    /// Flash pages programmed.
    pub nand_pages_programmed: u64,
    /// Flash blocks erased.
    pub nand_blocks_erased: u64,
    /// Data bytes moved over the flash channels (all channels).
    pub nand_channel_bytes: u64,
    /// Sum over dies of their busy time.
    pub nand_die_busy_ns: u64,
    /// Payload bytes moved host→device over PCIe (SQEs, write data, vendor payloads).
    pub pcie_h2c_bytes: u64,
    /// Payload bytes moved device→host over PCIe (CQEs, read data, subgraphs).
    pub pcie_c2h_bytes: u64,
    /// Wire bytes host→device, including TLP overhead.
    pub pcie_h2c_wire_bytes: u64,
    /// Wire bytes device→host, including TLP overhead.
    pub pcie_c2h_wire_bytes: u64,
    /// Payload bytes copied SSD→FPGA over the internal `[p2p]` link (0 without one).
    pub p2p_bytes: u64,
    /// Page copies made over the `[p2p]` link.
    pub p2p_transfers: u64,
    /// Virtual time firmware calls waited for their SSD→FPGA page copies (start' − start).
    pub p2p_wait_ns: u64,
    /// Bytes moved into or out of the controller DRAM (host DMA data, flash pages, SSD→FPGA
    /// copies).
    pub dram_bytes: u64,
    /// Time the controller DRAM spent moving them.
    pub dram_busy_ns: u64,
    /// Virtual time of the last event the device has simulated.
    pub simulated_ns: u64,
}

impl fmt::Display for DeviceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "commands: {} submitted, {} completed, {} busy retries",
            self.commands_submitted, self.commands_completed, self.busy_retries
        )?;
        writeln!(
            f,
            "firmware: {} calls, {} ns core busy",
            self.firmware_calls, self.core_busy_ns
        )?;
        writeln!(
            f,
            "nand: {} pages read, {} pages programmed, {} blocks erased, {} channel bytes",
            self.nand_pages_read,
            self.nand_pages_programmed,
            self.nand_blocks_erased,
            self.nand_channel_bytes
        )?;
        write!(
            f,
            "pcie: {} B host→device, {} B device→host (payload)",
            self.pcie_h2c_bytes, self.pcie_c2h_bytes
        )
    }
}

/// A command's host-side state: its buffer and when it was submitted.
#[derive(Debug)]
struct HostCommand {
    data: Vec<u8>,
    submitted_at_ns: u64,
}

/// A command on its way to, or waiting at, the firmware.
#[derive(Debug)]
struct Incoming {
    cmd: CommandId,
    sqe: SubmissionEntry,
    host: HostCommand,
}

/// Something a firmware call did to the host, to be timed when the call ends, with the work the
/// firmware had counted when it did it (`None`: not told; dated at the end of the call).
#[derive(Debug)]
struct Effect {
    at: Option<WorkCounters>,
    kind: EffectKind,
}

#[derive(Debug)]
enum EffectKind {
    Dma {
        direction: Direction,
        bytes: u64,
    },
    Complete {
        cqe: CompletionEntry,
        host: HostCommand,
    },
}

/// The host side of the controller as the firmware sees it: command buffers and a log of what
/// the current call did.
#[derive(Debug, Default)]
struct HostSide {
    /// Commands the firmware accepted and has not completed. A queue per id only so that a
    /// firmware accepting a duplicate command id does not lose a buffer.
    buffers: FastMap<CommandId, VecDeque<HostCommand>>,
    /// The command being handed to the firmware by the current submit call. It shadows an
    /// outstanding command with the same id, so a firmware that rejects the duplicate at once
    /// completes the right one.
    incoming: Option<(CommandId, HostCommand)>,
    effects: Vec<Effect>,
    /// The work last told by [`HostInterface::note_work`] in the current call: every effect
    /// posted after it (several DMAs of one result, say) is dated by it, until the next note.
    noted: Option<WorkCounters>,
    spurious_completions: u64,
}

impl HostSide {
    fn buffer(&mut self, cmd: CommandId) -> Option<&mut HostCommand> {
        match &mut self.incoming {
            Some((id, host)) if *id == cmd => Some(host),
            _ => self.buffers.get_mut(&cmd).and_then(|q| q.front_mut()),
        }
    }

    fn push(&mut self, kind: EffectKind) {
        let at = self.noted;
        self.effects.push(Effect { at, kind });
    }

    fn take(&mut self, cmd: CommandId) -> Option<HostCommand> {
        if self.incoming.as_ref().is_some_and(|(id, _)| *id == cmd) {
            return self.incoming.take().map(|(_, host)| host);
        }
        let queue = self.buffers.get_mut(&cmd)?;
        let host = queue.pop_front();
        if queue.is_empty() {
            self.buffers.remove(&cmd);
        }
        host
    }
}

impl HostInterface for HostSide {
    fn dma_from_host(
        &mut self,
        cmd: CommandId,
        offset_bytes: usize,
        dst: &mut [u8],
    ) -> Result<(), DmaError> {
        let host = self.buffer(cmd).ok_or(DmaError)?;
        let end = offset_bytes.checked_add(dst.len()).ok_or(DmaError)?;
        dst.copy_from_slice(host.data.get(offset_bytes..end).ok_or(DmaError)?);
        self.push(EffectKind::Dma {
            direction: Direction::HostToDevice,
            bytes: dst.len() as u64,
        });
        Ok(())
    }

    fn dma_to_host(
        &mut self,
        cmd: CommandId,
        offset_bytes: usize,
        src: &[u8],
    ) -> Result<(), DmaError> {
        let host = self.buffer(cmd).ok_or(DmaError)?;
        let end = offset_bytes.checked_add(src.len()).ok_or(DmaError)?;
        host.data
            .get_mut(offset_bytes..end)
            .ok_or(DmaError)?
            .copy_from_slice(src);
        self.push(EffectKind::Dma {
            direction: Direction::DeviceToHost,
            bytes: src.len() as u64,
        });
        Ok(())
    }

    fn note_work(&mut self, work: &WorkCounters) {
        self.noted = Some(*work);
    }

    fn complete(&mut self, cmd: CommandId, cqe: CompletionEntry) {
        match self.take(cmd) {
            Some(host) => self.push(EffectKind::Complete { cqe, host }),
            None => {
                self.spurious_completions += 1;
                tracing::warn!(?cmd, "firmware completed a command the host does not have");
            }
        }
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

    /// Whether the firmware has something to do right now (at `fw_time_ns`).
    fn has_immediate_work(&self) -> bool {
        if !self.blocked.is_empty() {
            return self.retry_blocked;
        }
        self.arrivals
            .peek_time()
            .is_some_and(|t| t <= self.fw_time_ns)
    }

    /// Advances the simulation by one firmware call, unless that call would start at or after
    /// `horizon` (the earliest posted completion, which must be handed out first).
    fn step(&mut self, horizon: Option<u64>) -> Result<Step, EmulatorError> {
        loop {
            // The earliest lane core with a call to make (the lowest lane on a tie).
            let lane_call = self
                .lane_cores
                .iter()
                .enumerate()
                .filter(|(_, l)| l.hot)
                .map(|(i, l)| (i, l.time_ns))
                .min_by_key(|&(_, t)| t);
            if self.hot && lane_call.is_none_or(|(_, t)| t >= self.fw_time_ns) {
                if horizon.is_some_and(|h| h <= self.fw_time_ns) {
                    return Ok(Step::Horizon);
                }
                self.call(self.fw_time_ns)?;
                return Ok(Step::Ran);
            }
            // A lane core's call comes first unless the (idle) firmware core is woken earlier.
            // The firmware is idle: find what wakes it next. Arrivals wait while the firmware
            // is full (they would only be answered busy).
            let next_arrival = if self.blocked.is_empty() {
                self.arrivals.peek_time()
            } else {
                None
            };
            let next_flash = self.firmware.flash().next_event_ns();
            let next = match (next_arrival, next_flash) {
                (Some(a), Some(f)) => Some(a.min(f)),
                (Some(t), None) | (None, Some(t)) => Some(t),
                (None, None) => None,
            };
            if let Some((i, t)) = lane_call
                && (self.hot || next.is_none_or(|n| t < n))
            {
                if horizon.is_some_and(|h| h <= t) {
                    return Ok(Step::Horizon);
                }
                self.call_lane(i, t)?;
                return Ok(Step::Ran);
            }
            let Some(next) = next else {
                return Ok(Step::Quiet);
            };
            if horizon.is_some_and(|h| h <= next) {
                return Ok(Step::Horizon);
            }
            if next_flash == Some(next) {
                let nand = self.firmware.flash_mut();
                nand.process_next_event();
                if nand.has_finished() {
                    self.wake(next);
                }
            } else {
                self.wake(next);
            }
        }
    }

    fn wake(&mut self, t_ns: u64) {
        self.fw_time_ns = self.fw_time_ns.max(t_ns);
        self.hot = true;
    }

    /// One firmware call starting at `start_ns`: a submit (a retried or newly arrived command)
    /// or a poll; then its work is charged and its effects are timed.
    fn call(&mut self, start_ns: u64) -> Result<(), EmulatorError> {
        self.firmware.flash_mut().advance_to(start_ns);
        self.forget_dram();
        let before = self.firmware.work();
        let mut extra_cycles = 0;
        // A submit always makes progress in the sense that a poll must follow it (to run the
        // command, or to free a slot after "busy"); only a fruitless poll idles the firmware.
        let progress = if !self.blocked.is_empty() && self.retry_blocked {
            let incoming = self.blocked.pop_front().expect("checked non-empty");
            self.submit_to_firmware(incoming, true);
            true
        } else if self.blocked.is_empty()
            && self.arrivals.peek_time().is_some_and(|t| t <= start_ns)
        {
            let (_, incoming) = self.arrivals.pop().expect("checked non-empty");
            if !self.isp && incoming.cmd.sq_id != 0 && incoming.sqe.opcode >= 0x80 {
                // No ISP on this device: the vendor opcode is refused before the firmware.
                extra_cycles = self.cycles_per_command;
                let Incoming { cmd, host, .. } = incoming;
                let cqe = CompletionEntry::new(cmd.sq_id, cmd.cid, Status::INVALID_OPCODE, 0);
                self.host.push(EffectKind::Complete { cqe, host });
            } else {
                self.submit_to_firmware(incoming, false);
            }
            true
        } else {
            let progress = match self.shared_lane {
                Some(lane) => self.firmware.poll_with_lane(&mut self.host, lane),
                // No ISP: nothing queues a job.
                None if self.lane_cores.is_empty() => self.firmware.poll(&mut self.host),
                None => self.firmware.poll_io(&mut self.host),
            };
            if progress {
                self.retry_blocked = true;
            } else {
                self.stats.idle_polls += 1;
                self.stats.idle_poll_parked_checked +=
                    self.firmware.work().parked_checked - before.parked_checked;
            }
            progress
        };
        let work = self.firmware.work().since(&before);
        let core_ns = self
            .cores
            .cycles_to_ns(self.cores.cycles(&work).saturating_add(extra_cycles));
        let start_ns = self.wait_for_p2p(start_ns, &work);
        let end_ns = start_ns + core_ns;
        self.stats.firmware_calls += 1;
        self.stats.core_busy_ns += core_ns;
        self.stamp_effects(start_ns, &before, end_ns);
        self.fw_time_ns = end_ns;
        self.hot = progress || self.has_immediate_work();
        // What the call did (a job accepted, its pages read) may give the lane cores work.
        if progress {
            self.wake_lanes(end_ns, None);
        }
        self.count_livelock(core_ns, progress, end_ns)
    }

    /// Wakes at `t_ns` every idle lane core (but `except`) whose lane has work.
    fn wake_lanes(&mut self, t_ns: u64, except: Option<usize>) {
        for (i, l) in self.lane_cores.iter_mut().enumerate() {
            if !l.hot && except != Some(i) && self.firmware.isp_lane_busy(l.lane) {
                l.hot = true;
                l.time_ns = l.time_ns.max(t_ns);
            }
        }
    }

    /// Lets the DRAM forget its past: no request will name a time before the earliest core's
    /// next call or the NAND's next event. An idle lane core does not hold it back: when it is
    /// woken, its next call is no earlier than the waking core's time then.
    fn forget_dram(&mut self) {
        let lanes = self
            .lane_cores
            .iter()
            .filter(|l| l.hot)
            .map(|l| l.time_ns)
            .fold(u64::MAX, u64::min);
        let nand = self.firmware.flash_mut();
        let floor = self.fw_time_ns.min(lanes).min(nand.now_ns());
        if let Some(d) = nand.dram_mut() {
            d.forget_before(floor);
        }
    }

    /// An FPGA CSD: the call's scanned pages are copied SSD→FPGA before its work can start;
    /// returns when it can start.
    fn wait_for_p2p(&mut self, start_ns: u64, work: &WorkCounters) -> u64 {
        match self.p2p.as_mut() {
            Some(link) if work.pages_scanned > 0 => {
                let mut done = start_ns;
                let mut dram = self.firmware.flash_mut().dram_mut();
                for _ in 0..work.pages_scanned {
                    done = dma(
                        link,
                        dram.as_deref_mut(),
                        Direction::DeviceToHost,
                        start_ns,
                        self.page_size_bytes,
                    );
                }
                self.stats.p2p_wait_ns += done.saturating_sub(start_ns);
                start_ns.max(done)
            }
            _ => start_ns,
        }
    }

    /// One call of lane core `i`'s sampling lane starting at `start_ns`: its work is charged
    /// to that core and the flash reads it issued are dated on it.
    fn call_lane(&mut self, i: usize, start_ns: u64) -> Result<(), EmulatorError> {
        self.firmware.flash_mut().advance_to(start_ns);
        let before = self.firmware.work();
        let progress = self.firmware.poll_isp_lane(self.lane_cores[i].lane);
        let work = self.firmware.work().since(&before);
        let core_ns = self.cores.ns(&work);
        let start_ns = self.wait_for_p2p(start_ns, &work);
        let end_ns = start_ns + core_ns;
        self.stats.isp_calls += 1;
        self.stats.isp_core_busy_ns += core_ns;
        self.stamp_effects(start_ns, &before, end_ns);
        self.lane_cores[i].time_ns = end_ns;
        self.lane_cores[i].hot = progress;
        // The firmware core and the other lanes see what the lane did (a finished job to
        // collect, freed page-buffer slots) when the call ends.
        if progress {
            if !self.hot {
                self.wake(end_ns);
            }
            self.wake_lanes(end_ns, Some(i));
        }
        self.count_livelock(core_ns, progress, end_ns)
    }

    fn count_livelock(
        &mut self,
        core_ns: u64,
        progress: bool,
        end_ns: u64,
    ) -> Result<(), EmulatorError> {
        if core_ns == 0 && progress {
            self.calls_at_instant += 1;
            if self.calls_at_instant >= LIVELOCK_CALLS {
                return Err(EmulatorError::Livelock {
                    now_ns: end_ns,
                    calls: self.calls_at_instant,
                });
            }
        } else {
            self.calls_at_instant = 0;
        }
        Ok(())
    }

    /// Hands a command to the firmware; on "busy" it waits in `blocked` for a retry.
    fn submit_to_firmware(&mut self, incoming: Incoming, retried: bool) {
        let Incoming { cmd, sqe, host } = incoming;
        self.host.incoming = Some((cmd, host));
        match self.firmware.submit(&mut self.host, cmd, &sqe) {
            Ok(()) => {
                if let Some((id, host)) = self.host.incoming.take() {
                    self.host.buffers.entry(id).or_default().push_back(host);
                }
            }
            Err(Busy) => {
                self.stats.busy_retries += 1;
                self.retry_blocked = false;
                // A firmware that answers busy must not have touched the command; if it
                // completed it anyway, the completion stands and there is nothing to retry.
                if let Some((_, host)) = self.host.incoming.take() {
                    let back = Incoming { cmd, sqe, host };
                    if retried {
                        self.blocked.push_front(back);
                    } else {
                        self.blocked.push_back(back);
                    }
                }
            }
        }
    }

    /// Times what the last call (`start_ns` to `end_ns`, firmware work counted from `before`)
    /// did; see the module documentation for the rules.
    fn stamp_effects(&mut self, start_ns: u64, before: &WorkCounters, end_ns: u64) {
        let cores = &self.cores;
        let base_cycles = cores.cycles(before);
        // When the core had done the work counted up to `at`: the call's start plus the core
        // time of the work since `before` (never past the call's end).
        let dated = |at: Option<&WorkCounters>| match at {
            Some(w) => {
                let cycles = cores.cycles(w).saturating_sub(base_cycles);
                (start_ns + cores.cycles_to_ns(cycles)).min(end_ns)
            }
            None => end_ns,
        };
        let effects = std::mem::take(&mut self.host.effects);
        self.host.noted = None;
        // Host→device DMAs first, each requested when the core posted it: what the call issued
        // afterwards may depend on their data. `h2c` holds (requested at, done at), in call
        // order, so both columns are nondecreasing.
        let mut h2c: Vec<(u64, u64)> = Vec::new();
        for e in &effects {
            if let EffectKind::Dma {
                direction: Direction::HostToDevice,
                bytes,
            } = e.kind
            {
                let at = dated(e.at.as_ref());
                let done = dma(
                    &mut self.pcie,
                    self.firmware.flash_mut().dram_mut(),
                    Direction::HostToDevice,
                    at,
                    bytes,
                );
                let done = h2c.last().map_or(done, |&(_, d)| d.max(done));
                h2c.push((at, done));
            }
        }
        // The host→device data a thing dated `t` may depend on: every such DMA posted by then.
        let h2c_by = |t: u64| -> u64 {
            let n = h2c.partition_point(|&(at, _)| at <= t);
            if n == 0 { t } else { t.max(h2c[n - 1].1) }
        };
        self.firmware
            .flash_mut()
            .issue_staged_by(|w| h2c_by(dated(w)));
        // Device→host DMAs and completions in call order (a command's data before its CQE),
        // each requested when the core posted it; a completion also waits for the host→device
        // DMAs posted before it.
        for effect in effects {
            let at = dated(effect.at.as_ref());
            match effect.kind {
                EffectKind::Dma {
                    direction: Direction::HostToDevice,
                    ..
                } => {}
                EffectKind::Dma {
                    direction: Direction::DeviceToHost,
                    bytes,
                } => {
                    dma(
                        &mut self.pcie,
                        self.firmware.flash_mut().dram_mut(),
                        Direction::DeviceToHost,
                        at,
                        bytes,
                    );
                }
                EffectKind::Complete { cqe, host } => {
                    let cqe_done =
                        self.pcie
                            .transfer(Direction::DeviceToHost, h2c_by(at), CQE_BYTES);
                    let completed_at_ns = cqe_done + self.controller.interrupt_ns;
                    self.posted.push(
                        completed_at_ns,
                        Completed {
                            cqe,
                            data: host.data,
                            submitted_at_ns: host.submitted_at_ns,
                            completed_at_ns,
                        },
                    );
                }
            }
        }
    }
}

/// A DMA of `bytes` on `link` requested at `at_ns`, its data streaming through `dram` while
/// it crosses the link: done at `max(link_done, dram_done)`, the DRAM share requested when
/// the link's data phase starts; the link is held until then.
fn dma(
    link: &mut PcieLink,
    dram: Option<&mut Dram>,
    direction: Direction,
    at_ns: u64,
    bytes: u64,
) -> u64 {
    let done = link.transfer(direction, at_ns, bytes);
    let Some(dram) = dram else {
        return done;
    };
    let start = done - link.transfer_ns(bytes);
    let dram_done = dram.transfer(start, bytes);
    if dram_done > done {
        link.hold_until(direction, dram_done);
    }
    done.max(dram_done)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sagessd_abi::identify::{
        CNS_CONTROLLER, CNS_NAMESPACE, ControllerInfo, IDENTIFY_SIZE_BYTES, NamespaceInfo,
    };
    use sagessd_abi::nvme::admin_opcode;

    const NSID: u32 = 1;
    const BLOCK: usize = 4096;

    /// The Cosmos+ description shrunk to a few dies and blocks, so tests build in milliseconds.
    pub(crate) fn small_config() -> HwConfig {
        let mut c = HwConfig::cosmos_plus();
        c.nand.channels = 2;
        c.nand.ways = 2;
        c.nand.blocks_per_die = 16;
        c.nand.pages_per_block = 16;
        c.firmware.page_buffer_pages = 16;
        c.firmware.isp_slots = 1;
        c.firmware.max_targets = 64;
        c.firmware.max_subgraph_nodes = 4096;
        c.firmware.max_subgraph_edges = 4096;
        c.firmware.max_transfer_bytes = 64 * 1024;
        c.validate().expect("small test config is valid");
        c
    }

    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    fn write(ssd: &mut Ssd, cid: u16, lba: u64, data: Vec<u8>) -> Completed {
        let blocks = (data.len() / BLOCK) as u32;
        let sqe = SubmissionEntry::read_write(true, cid, NSID, lba, blocks);
        let done = ssd.execute(1, sqe, data).unwrap();
        assert_eq!(done.cqe.status(), Status::SUCCESS, "write of LBA {lba}");
        done
    }

    fn read(ssd: &mut Ssd, cid: u16, lba: u64, blocks: u32) -> Completed {
        let sqe = SubmissionEntry::read_write(false, cid, NSID, lba, blocks);
        ssd.execute(1, sqe, vec![0; blocks as usize * BLOCK])
            .unwrap()
    }

    /// Writes 32 flash pages at logical pages 16..48, pushing older pages out of the test
    /// configuration's 16-slot page buffer so that reading them takes flash reads.
    fn evict_page_buffer(ssd: &mut Ssd) {
        for i in 0..32u16 {
            write(ssd, 500 + i, 64 + u64::from(i) * 4, pattern(2, 4 * BLOCK));
        }
    }

    fn identify(cns: u8, cid: u16) -> SubmissionEntry {
        let mut sqe = SubmissionEntry::new(admin_opcode::IDENTIFY, cid, NSID);
        sqe.cdw10 = u32::from(cns).into();
        sqe
    }

    #[test]
    fn identify_reports_the_namespace_and_the_sampling_limits() {
        let config = small_config();
        let mut ssd = Ssd::new(&config).unwrap();
        let ctrl = ssd
            .execute(0, identify(CNS_CONTROLLER, 1), vec![0; IDENTIFY_SIZE_BYTES])
            .unwrap();
        assert_eq!(ctrl.cqe.status(), Status::SUCCESS);
        let limits = ControllerInfo::decode_limits(&ctrl.data).expect("vendor area");
        assert_eq!(limits.max_targets, config.firmware.max_targets);
        assert_eq!(limits.max_fanout, config.firmware.max_fanout);
        assert_eq!(ctrl.data[77], 4, "MDTS: 64 KiB = 4 KiB × 2^4");

        let ns = ssd
            .execute(0, identify(CNS_NAMESPACE, 2), vec![0; IDENTIFY_SIZE_BYTES])
            .unwrap();
        assert_eq!(ns.cqe.status(), Status::SUCCESS);
        let info = NamespaceInfo::decode(&ns.data).unwrap();
        assert_eq!(info.block_count, ssd.namespace_block_count());
        assert_eq!(1u32 << info.block_size_log2, ssd.block_size_bytes());
        assert!(ns.submitted_at_ns >= ctrl.completed_at_ns);
        assert!(ns.latency_ns() > 0);
    }

    #[test]
    fn write_then_read_round_trips() {
        let mut ssd = Ssd::new(&small_config()).unwrap();
        let data = pattern(7, 3 * BLOCK);
        // Blocks 6, 7 and 8: unaligned to the 4-block flash pages, so two read-modify-writes.
        write(&mut ssd, 1, 6, data.clone());
        let back = read(&mut ssd, 2, 6, 3);
        assert_eq!(back.cqe.status(), Status::SUCCESS);
        assert_eq!(back.data, data);
        let part = read(&mut ssd, 3, 7, 1);
        assert_eq!(part.data, data[BLOCK..2 * BLOCK]);
        let stats = ssd.stats();
        assert_eq!(stats.commands_submitted, 3);
        assert_eq!(stats.commands_completed, 3);
        assert_eq!(stats.nand_pages_programmed, 2);
        // SQEs and write data in; CQEs and read data out.
        assert_eq!(stats.pcie_h2c_bytes, 3 * 64 + 3 * BLOCK as u64);
        assert_eq!(stats.pcie_c2h_bytes, 3 * 16 + 4 * BLOCK as u64);
        assert!(stats.core_busy_ns > 0);
        assert_eq!(ssd.reap().unwrap(), None);
    }

    #[test]
    fn unknown_opcodes_are_answered_and_later_commands_still_work() {
        let mut ssd = Ssd::new(&small_config()).unwrap();
        let admin = ssd
            .execute(0, SubmissionEntry::new(0x7F, 1, 0), Vec::new())
            .unwrap();
        assert_eq!(admin.cqe.status(), Status::INVALID_OPCODE);
        let io = ssd
            .execute(1, SubmissionEntry::new(0xC4, 2, NSID), vec![0; 512])
            .unwrap();
        assert_eq!(io.cqe.status(), Status::INVALID_OPCODE);
        assert_eq!(io.cqe.cid.get(), 2);
        let data = pattern(3, BLOCK);
        write(&mut ssd, 3, 0, data.clone());
        assert_eq!(read(&mut ssd, 4, 0, 1).data, data);
    }

    #[test]
    fn a_device_without_isp_refuses_vendor_opcodes_before_the_firmware() {
        use sagessd_abi::nvme::io_opcode;
        let mut config = small_config();
        config.firmware.isp = false;
        let mut ssd = Ssd::new(&config).unwrap();
        for (cid, opcode) in [
            (1, io_opcode::GRAPH_ATTACH),
            (2, io_opcode::NS_SUBMIT),
            (3, io_opcode::NS_COLLECT),
            (4, 0xC4),
        ] {
            let before = ssd.stats();
            let done = ssd
                .execute(
                    1,
                    SubmissionEntry::vendor(opcode, cid, NSID, 4096, 0),
                    vec![0; 4096],
                )
                .unwrap();
            assert_eq!(
                done.cqe.status(),
                Status::INVALID_OPCODE,
                "opcode {opcode:#x}"
            );
            assert_eq!(done.cqe.cid.get(), cid);
            let after = ssd.stats();
            // The firmware never saw it: only its poll loop ran (the idle pass after the call).
            let work = after.work.since(&before.work);
            assert_eq!(
                WorkCounters {
                    polls: 0,
                    parked_checked: 0,
                    ..work
                },
                WorkCounters::default(),
                "the firmware never saw it"
            );
            assert_eq!(
                after.core_busy_ns - before.core_busy_ns,
                ssd.cores().cycles_to_ns(config.cores.cycles_per_command) + ssd.cores().ns(&work)
            );
        }
        // Ordinary I/O still works.
        let data = pattern(5, BLOCK);
        write(&mut ssd, 10, 0, data.clone());
        assert_eq!(read(&mut ssd, 11, 0, 1).data, data);
    }

    #[test]
    fn many_outstanding_commands_all_complete_in_time_order() {
        let mut ssd = Ssd::new(&small_config()).unwrap();
        // More commands than the firmware has slots (64): some are answered busy and retried.
        for i in 0..100u16 {
            let lba = u64::from(i % 40) * 4;
            let sqe = SubmissionEntry::read_write(true, i, NSID, lba, 4);
            ssd.submit(1, sqe, pattern(i as u8, 4 * BLOCK)).unwrap();
        }
        let mut last = 0;
        let mut cids = Vec::new();
        while let Some(done) = ssd.reap().unwrap() {
            assert_eq!(done.cqe.status(), Status::SUCCESS);
            assert!(
                done.completed_at_ns >= last,
                "completions come in time order"
            );
            last = done.completed_at_ns;
            assert_eq!(ssd.now_ns(), last);
            cids.push(done.cqe.cid.get());
        }
        cids.sort_unstable();
        assert_eq!(cids, (0..100).collect::<Vec<_>>());
        assert!(ssd.stats().busy_retries > 0);
        assert_eq!(ssd.outstanding(), 0);
        // The newest write of each LBA wins (writes to one page are applied in order).
        for lba_page in 0..40u16 {
            let newest = lba_page + 80;
            let newest = if newest < 100 { newest } else { lba_page + 40 };
            let back = read(&mut ssd, 1000 + lba_page, u64::from(lba_page) * 4, 4);
            assert_eq!(
                back.data,
                pattern(newest as u8, 4 * BLOCK),
                "page {lba_page}"
            );
        }
    }

    #[test]
    fn a_duplicate_command_id_is_rejected_without_losing_the_first() {
        let mut ssd = Ssd::new(&small_config()).unwrap();
        let data = pattern(9, BLOCK);
        write(&mut ssd, 1, 8, data.clone());
        // Push the page out of the page buffer so the read has to wait for flash.
        evict_page_buffer(&mut ssd);
        let first = SubmissionEntry::read_write(false, 5, NSID, 8, 1);
        ssd.submit(1, first, vec![0; BLOCK]).unwrap();
        ssd.submit(1, first, vec![0; BLOCK]).unwrap();
        let a = ssd.reap().unwrap().unwrap();
        let b = ssd.reap().unwrap().unwrap();
        assert_eq!(
            a.cqe.status(),
            Status::generic(0x03, true),
            "command id conflict"
        );
        assert_eq!(b.cqe.status(), Status::SUCCESS);
        assert_eq!(b.data, data);
    }

    /// Latency of reading two flash pages written together, after evicting them from the page
    /// buffer, and the flash reads it took.
    fn two_page_read_latency(config: &HwConfig) -> (u64, u64) {
        let mut ssd = Ssd::new(config).unwrap();
        write(&mut ssd, 1, 0, pattern(1, 8 * BLOCK));
        evict_page_buffer(&mut ssd);
        let before = ssd.stats().nand_pages_read;
        let done = read(&mut ssd, 99, 0, 8);
        assert_eq!(done.data, pattern(1, 8 * BLOCK));
        (done.latency_ns(), ssd.stats().nand_pages_read - before)
    }

    #[test]
    fn reads_on_different_dies_overlap_and_on_one_die_serialise() {
        let mut one_die = small_config();
        one_die.nand.channels = 1;
        one_die.nand.ways = 1;
        one_die.nand.blocks_per_die = 32;
        one_die.nand.t_read_ns = 1_000_000; // make the flash dominate the host-side overheads
        let mut two_dies = one_die.clone();
        two_dies.nand.channels = 2;
        let read_ns = NandTiming::from_config(&one_die.nand).read_latency_ns();

        let (serial, reads) = two_page_read_latency(&one_die);
        assert_eq!(reads, 2);
        let (parallel, reads) = two_page_read_latency(&two_dies);
        assert_eq!(reads, 2);
        // One die: the two page reads run back to back.
        assert!(serial >= 2 * read_ns, "serial {serial} < 2 × {read_ns}");
        // Two dies on two channels: they overlap; only host-side overheads come on top.
        assert!(parallel >= read_ns, "parallel {parallel} < {read_ns}");
        assert!(
            parallel < read_ns + read_ns / 4,
            "parallel {parallel} vs {read_ns}"
        );
        assert!(serial - parallel >= read_ns - read_ns / 4);
    }

    fn scripted_run() -> (Vec<Completed>, DeviceStats) {
        let mut ssd = Ssd::new(&small_config()).unwrap();
        let mut log = Vec::new();
        for round in 0..3u16 {
            for i in 0..6u16 {
                let cid = round * 100 + i;
                let lba = u64::from((i * 7 + round) % 30) * 2;
                let sqe = if i % 3 == 2 {
                    SubmissionEntry::read_write(false, cid, NSID, lba, 3)
                } else {
                    SubmissionEntry::read_write(true, cid, NSID, lba, 3)
                };
                ssd.submit(1, sqe, pattern(cid as u8, 3 * BLOCK)).unwrap();
                ssd.advance_to_ns(ssd.now_ns() + 1_000);
            }
            for _ in 0..3 {
                let d = ssd.reap().unwrap().unwrap();
                log.push(d);
            }
        }
        while let Some(d) = ssd.reap().unwrap() {
            log.push(d);
        }
        (log, ssd.stats())
    }

    #[test]
    fn identical_runs_give_identical_timelines() {
        let (log_a, stats_a) = scripted_run();
        let (log_b, stats_b) = scripted_run();
        assert_eq!(log_a.len(), 18);
        assert_eq!(log_a, log_b);
        assert_eq!(stats_a, stats_b);
        assert!(stats_a.nand_pages_programmed > 0);
    }

    #[test]
    fn a_single_read_costs_what_its_parts_add_up_to() {
        let config = small_config();
        let mut ssd = Ssd::new(&config).unwrap();
        write(&mut ssd, 1, 0, pattern(4, 4 * BLOCK));
        evict_page_buffer(&mut ssd);
        let before = ssd.stats().nand_pages_read;
        let done = read(&mut ssd, 2, 0, 1);
        assert_eq!(ssd.stats().nand_pages_read - before, 1);
        // A column read: the block's sectors cross the channel, not the whole page.
        let t = NandTiming::from_config(&config.nand);
        let flash = t.command_overhead_ns
            + t.t_read_ns
            + t.transfer_ns(BLOCK as u64, u64::from(config.nand.page_size_bytes));
        let link = PcieLink::new(&config.pcie);
        let fixed = config.controller.doorbell_ns
            + config.pcie.dma_read_setup_ns
            + link.transfer_ns(64)
            + config.pcie.posted_write_setup_ns
            + link.transfer_ns(BLOCK as u64)
            + link.transfer_ns(16)
            + config.controller.interrupt_ns;
        let lat = done.latency_ns();
        assert!(
            lat >= flash + fixed,
            "latency {lat} below flash {flash} + fixed {fixed}"
        );
        // Firmware time on top is a few microseconds at 1 GHz.
        assert!(lat < flash + fixed + 20_000, "latency {lat}");
        assert_eq!(
            format!("{}", ssd.stats()).lines().count(),
            4,
            "Display prints one line per subsystem"
        );
    }

    #[test]
    fn reap_with_nothing_outstanding_is_none() {
        let mut ssd = Ssd::new(&small_config()).unwrap();
        assert_eq!(ssd.reap().unwrap(), None);
        ssd.advance_to_ns(5_000);
        assert_eq!(ssd.now_ns(), 5_000);
        ssd.advance_to_ns(1_000);
        assert_eq!(ssd.now_ns(), 5_000, "time never goes back");
    }

    #[test]
    fn in_storage_sampling_runs_through_the_queue_pair() {
        let (before, after, submitted, collected) = sample_in_storage(&small_config());
        let work = after.work.since(&before.work);
        assert!(work.pages_scanned > 0 && work.edges_sampled > 0, "{work:?}");
        // Each unit counted once for what it is: the five targets, the sampled edges of the
        // subgraph's layers, and one node-table clear per node of its node list.
        let size = collected.cqe.result.get() as usize;
        let view = sagessd_abi::subgraph::SubgraphView::parse(&collected.data[..size]).unwrap();
        let edges: u64 = (0..view.layer_count())
            .map(|l| u64::from(view.layer(l).counts.edge_count))
            .sum();
        assert_eq!(work.targets_deduplicated, 5);
        assert_eq!(work.edges_sampled, edges);
        assert_eq!(work.nodes_cleared, view.nodes().len() as u64);
        assert!(
            after.nand_pages_read > before.nand_pages_read,
            "the sampler read flash"
        );
        assert!(after.core_busy_ns > before.core_busy_ns);
        assert!(collected.completed_at_ns > submitted.completed_at_ns);
        assert_eq!(after.p2p_bytes, 0, "no [p2p] link, no SSD→FPGA copies");
    }

    #[test]
    fn an_isp_core_takes_the_sampling_work_off_the_firmware_core() {
        let mut shared = small_config();
        shared.cores.isp_cores = 0;
        let mut split = shared.clone();
        split.cores.isp_cores = 1;
        let (b0, a0, _, c0) = sample_in_storage(&shared);
        let (b1, a1, _, c1) = sample_in_storage(&split);
        assert_eq!(a0.isp_core_busy_ns, 0);
        assert_eq!(a0.isp_calls, 0);
        assert!(a1.isp_calls > 0 && a1.isp_core_busy_ns > b1.isp_core_busy_ns);
        assert!(
            a1.core_busy_ns - b1.core_busy_ns < a0.core_busy_ns - b0.core_busy_ns,
            "the firmware core no longer runs the sampler"
        );
        assert_eq!(c0.data, c1.data, "the same subgraph");
        assert_eq!(
            a1.work.since(&b1.work).edges_sampled,
            a0.work.since(&b0.work).edges_sampled
        );
    }

    /// `small_config`'s shrinking applied to the shipped SmartSSD description.
    fn small_smartssd_config() -> HwConfig {
        let mut c =
            HwConfig::from_toml_str(include_str!("../../hw-configs/smartssd-fpga.toml")).unwrap();
        let small = small_config();
        c.nand.channels = small.nand.channels;
        c.nand.ways = small.nand.ways;
        c.nand.blocks_per_die = small.nand.blocks_per_die;
        c.nand.pages_per_block = small.nand.pages_per_block;
        c.firmware = small.firmware.clone();
        c.firmware.block_size_bytes = 4096;
        c.validate().expect("small SmartSSD config is valid");
        c
    }

    #[test]
    fn fpga_csd_sampling_pays_an_ssd_to_fpga_copy_per_scanned_page() {
        let config = small_smartssd_config();
        let (before, after, submitted, collected) = sample_in_storage(&config);
        let work = after.work.since(&before.work);
        assert!(work.pages_scanned > 0, "{work:?}");
        let page = u64::from(config.nand.page_size_bytes);
        assert_eq!(
            after.p2p_bytes - before.p2p_bytes,
            work.pages_scanned * page,
            "p2p link bytes = pages scanned × page size"
        );
        assert_eq!(
            after.p2p_transfers - before.p2p_transfers,
            work.pages_scanned
        );
        assert!(
            after.p2p_wait_ns > before.p2p_wait_ns,
            "the kernel waited for copies"
        );
        // Host-facing traffic stays on the host link; the copies are not host traffic.
        assert!(after.pcie_c2h_bytes - before.pcie_c2h_bytes < after.p2p_bytes - before.p2p_bytes);

        // The same device without the link: the same work, and ISP is faster by the copies.
        let mut no_link = config.clone();
        no_link.p2p = None;
        let (b2, a2, s2, c2) = sample_in_storage(&no_link);
        assert_eq!(
            a2.work.since(&b2.work),
            work,
            "the copy changes time, not work"
        );
        assert_eq!(a2.p2p_bytes, 0);
        let with = collected.completed_at_ns - submitted.submitted_at_ns;
        let without = c2.completed_at_ns - s2.submitted_at_ns;
        // Each page copy occupies the link for at least its transfer time.
        let link = PcieLink::new(&config.p2p.as_ref().unwrap().to_pcie_config());
        assert!(
            with > without && with - without >= link.transfer_ns(page),
            "with p2p {with} ns, without {without} ns"
        );
    }

    /// Writes a 200-node graph, attaches it, samples 5 targets in storage and collects the
    /// subgraph; returns the stats before the submit and after the collect, and the two
    /// completions.
    fn sample_in_storage(config: &HwConfig) -> (DeviceStats, DeviceStats, Completed, Completed) {
        use sagessd_abi::graph::{GraphDescriptor, LbaRange};
        use sagessd_abi::ns_config::{encode_ns_config, ns_config_size_bytes};
        use sagessd_abi::nvme::io_opcode;
        use sagessd_abi::subgraph::SubgraphView;
        use zerocopy::IntoBytes;

        let mut ssd = Ssd::new(config).unwrap();
        // A 200-node graph; node v has v % 13 neighbours (some have none).
        let nodes = 200u64;
        let mut indptr = vec![0u64];
        let mut indices = Vec::new();
        for v in 0..nodes {
            for k in 0..v % 13 {
                indices.push(((v * 7 + k * 31 + 1) % nodes) as u32);
            }
            indptr.push(indices.len() as u64);
        }
        let blocks = |bytes: usize| bytes.div_ceil(BLOCK) as u64;
        let mut indptr_bytes = indptr.as_bytes().to_vec();
        indptr_bytes.resize(blocks(indptr_bytes.len()) as usize * BLOCK, 0);
        let mut indices_bytes = indices.as_bytes().to_vec();
        indices_bytes.resize(blocks(indices_bytes.len()) as usize * BLOCK, 0);
        let indices_slba = 16;
        let (indptr_blocks, indices_blocks) =
            (blocks(indptr_bytes.len()), blocks(indices_bytes.len()));
        write(&mut ssd, 1, 0, indptr_bytes);
        write(&mut ssd, 2, indices_slba, indices_bytes);
        evict_page_buffer(&mut ssd);

        let graph = GraphDescriptor {
            node_count: nodes,
            edge_count: indices.len() as u64,
            id_width_bytes: 4,
            indptr: LbaRange {
                slba: 0,
                block_count: indptr_blocks,
            },
            indices: LbaRange {
                slba: indices_slba,
                block_count: indices_blocks,
            },
            features: None,
        };
        let wire = graph.to_wire().as_bytes().to_vec();
        let attach =
            SubmissionEntry::vendor(io_opcode::GRAPH_ATTACH, 3, NSID, wire.len() as u32, 0);
        let attached = ssd.execute(1, attach, wire).unwrap();
        assert_eq!(attached.cqe.status(), Status::SUCCESS);

        let targets = [3u64, 12, 25, 199, 0];
        let mut config = vec![0u8; ns_config_size_bytes(targets.len())];
        encode_ns_config(42, &[4, 3], &targets, &mut config).unwrap();
        let submit = SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 4, NSID, config.len() as u32, 0);
        let before = ssd.stats();
        let submitted = ssd.execute(1, submit, config).unwrap();
        assert_eq!(submitted.cqe.status(), Status::SUCCESS);
        let tag = submitted.cqe.result.get();

        let len = 64 * 1024;
        let collect = SubmissionEntry::vendor(io_opcode::NS_COLLECT, 5, NSID, len as u32, tag);
        let collected = ssd.execute(1, collect, vec![0; len]).unwrap();
        assert_eq!(collected.cqe.status(), Status::SUCCESS);
        let size = collected.cqe.result.get() as usize;
        let view = SubgraphView::parse(&collected.data[..size]).unwrap();
        assert_eq!(view.layer_count(), 2);
        let first: Vec<u64> = view.nodes()[..targets.len()]
            .iter()
            .map(|n| n.get())
            .collect();
        assert_eq!(first, targets);
        (before, ssd.stats(), submitted, collected)
    }
}
