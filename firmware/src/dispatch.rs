//! The NVMe command dispatcher: the firmware's top level.
//!
//! [`Firmware::submit`] takes a command ([`submit`]: parse apart from execute) and either
//! completes it at once (admin commands, NS_SUBMIT, a Flush with nothing to make durable, every
//! error) or parks it in a command slot (Read, Write, Write Zeroes, a deallocating Dataset
//! Management, a GRAPH_ATTACH or Flush waiting for its checkpoint, NS_COLLECT).
//! [`Firmware::poll`] moves everything forward: it collects flash completions, runs the
//! checkpoint, trim log, erases and garbage collection, steps every parked command ([`parked`],
//! a Read's or Write's pages in [`transfer`]) and the ISP engine, and hands queued flash
//! operations to the HAL.

mod parked;
mod submit;
mod transfer;

use sagessd_abi::graph::GraphDescriptor;
use sagessd_abi::nvme::Status;
use sagessd_abi::tunnel::TunnelWindow;

use self::parked::{Abandoned, Op, Parked};
use self::transfer::{CommandPages, PageIo};
use crate::admin::Admin;
use crate::backend::Backend;
use crate::checkpoint::{CheckpointStats, Checkpointer, Header};
use crate::checkpoint_layout::CheckpointLayout;
use crate::config::{ConfigError, FirmwareConfig, MAX_COMMANDS, MAX_ISP_SLOTS};
use crate::dram::{DramLayout, DramRegions};
use crate::flash_queue::{FlashQueue, Tag, TagKind};
use crate::ftl::{Ftl, FtlStats, logical_page_count};
use crate::hal::{Flash, FlashCompletion, FlashError, FlashOp};
use crate::host::HostInterface;
use crate::isp::Isp;
use crate::page_buffer::PageBuffer;
use crate::recovery::BootReport;
use crate::trim_log::TrimLog;
use crate::work::WorkCounters;

/// [`Firmware::submit`] could not take the command now: every command slot is in use. Nothing
/// happened; submit it again after a [`Firmware::poll`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy;

/// Bytes of DRAM arena the firmware needs for `config` on `geometry`: what
/// [`Firmware::new`] must be given, whatever its flash HAL and arena type.
pub fn dram_size_bytes(
    config: &FirmwareConfig,
    geometry: &crate::hal::Geometry,
) -> Result<usize, ConfigError> {
    layout(config, geometry).map(|l| l.total_bytes)
}

/// Every region of the DRAM arena for `config` on `geometry`, with its size and what it
/// scales with: the footprint report. Its total equals [`dram_size_bytes`].
pub fn dram_regions(
    config: &FirmwareConfig,
    geometry: &crate::hal::Geometry,
) -> Result<DramRegions, ConfigError> {
    layout(config, geometry)
        .map(|l| l.regions(usize::from(config.isp_lanes), usize::from(config.isp_slots)))
}

/// The arena layout for a configuration, after checking it.
fn layout(
    config: &FirmwareConfig,
    geometry: &crate::hal::Geometry,
) -> Result<DramLayout, ConfigError> {
    config.validate(geometry)?;
    let pages = logical_page_count(geometry, config.over_provisioning_percent)
        .ok_or(ConfigError::TooLittleFlash)?;
    DramLayout::new(config, geometry, pages).ok_or(ConfigError::DramLayoutOverflow)
}

/// The firmware: generic over the flash HAL and over the DRAM arena's owner.
#[derive(Debug)]
pub struct Firmware<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> {
    config: FirmwareConfig,
    flash: F,
    pub(crate) dram: M,
    pub(crate) backend: Backend,
    pub(crate) isp: Isp,
    graph: Option<GraphDescriptor>,
    admin: Admin,
    /// The tunnel window, if the configuration asks for one and it fits.
    tunnel: Option<TunnelWindow>,
    /// Per tunnel slot, the tag of the job last submitted through it.
    tunnel_jobs: [Option<u32>; MAX_ISP_SLOTS],
    commands: [Option<Parked>; MAX_COMMANDS],
    /// The per-page states of the parked Reads and Writes.
    pages: CommandPages,
    next_seq: u32,
    flash_in_flight: u32,
    namespace_blocks: u64,
    /// Parked reads (a bit per command slot) whose pages all wait for loading page-buffer slots
    /// (or are done): stepping one changes nothing until a slot leaves the loading state, so
    /// the sweep only counts it as checked. Valid while the buffer's `loading_exits` equals
    /// `asleep_epoch`; cleared when it moves on.
    asleep: u64,
    asleep_epoch: u32,
    /// What the boot found (blank for [`Self::new`]).
    boot: BootReport,
}

impl<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> Firmware<F, M> {
    /// Boots on freshly erased flash: formats the FTL and clears the firmware's tables.
    /// The arena must be at least [`dram_size_bytes`] long and zero-filled (the mapping
    /// tables, which scale with capacity, are not cleared here).
    pub fn new(config: FirmwareConfig, flash: F, mut dram: M) -> Result<Self, ConfigError> {
        let geometry = flash.geometry();
        config.validate(&geometry)?;
        let pages = logical_page_count(&geometry, config.over_provisioning_percent)
            .ok_or(ConfigError::TooLittleFlash)?;
        let layout =
            DramLayout::new(&config, &geometry, pages).ok_or(ConfigError::DramLayoutOverflow)?;
        let arena = dram.as_mut();
        if arena.len() < layout.total_bytes {
            return Err(ConfigError::DramTooSmall);
        }
        let checkpoint_layout =
            CheckpointLayout::new(&geometry, pages).ok_or(ConfigError::TooLittleFlash)?;
        let ftl = Ftl::format(geometry, &layout, pages, checkpoint_layout, arena);
        let checkpoint = Checkpointer::new(
            checkpoint_layout,
            layout.checkpoint_windows,
            geometry.window_bytes(),
        );
        let buffer = PageBuffer::new(
            layout.slot_meta,
            layout.slot_data,
            config.page_buffer_pages,
            geometry.page_size_bytes,
            arena,
        );
        let isp = Isp::new(&layout, &config, geometry.page_size_bytes, arena);
        let blocks_per_page = u64::from(geometry.page_size_bytes / config.block_size_bytes());
        // The tunnel window takes the last logical blocks; the namespace ends where it begins.
        let logical_blocks = u64::from(pages) * blocks_per_page;
        let tunnel = config
            .tunnel
            .then(|| {
                TunnelWindow::new(
                    logical_blocks,
                    config.block_size_bytes(),
                    u16::from(config.isp_slots),
                    config.limits.max_targets,
                    config.max_subgraph_nodes,
                    config.max_subgraph_edges,
                )
            })
            .flatten();
        let namespace_blocks = tunnel.map_or(logical_blocks, |t| t.base_lba);
        Ok(Self {
            config,
            flash,
            dram,
            backend: Backend {
                geometry,
                ftl,
                buffer,
                queue: FlashQueue::default(),
                checkpoint,
                work: WorkCounters::default(),
                retries_due: 0,
                trim_log: TrimLog::new(
                    layout.trim_log,
                    geometry.window_bytes(),
                    geometry.page_size_bytes as usize,
                ),
            },
            isp,
            graph: None,
            admin: Admin::new(),
            tunnel,
            tunnel_jobs: [None; MAX_ISP_SLOTS],
            commands: [None; MAX_COMMANDS],
            pages: CommandPages(layout.command_pages),
            asleep: 0,
            asleep_epoch: 0,
            next_seq: 0,
            flash_in_flight: 0,
            namespace_blocks,
            boot: BootReport {
                blank: true,
                ..BootReport::default()
            },
        })
    }

    /// Size of namespace 1 in logical blocks.
    pub fn namespace_block_count(&self) -> u64 {
        self.namespace_blocks
    }

    /// Logical block size in bytes.
    pub fn block_size_bytes(&self) -> u32 {
        self.config.block_size_bytes()
    }

    /// The configuration the firmware runs with.
    pub fn config(&self) -> &FirmwareConfig {
        &self.config
    }

    /// Work done since boot.
    pub fn work(&self) -> WorkCounters {
        self.backend.work
    }

    /// FTL counters.
    pub fn ftl_stats(&self) -> FtlStats {
        self.backend.ftl.stats
    }

    /// Trim records programmed since boot (`crate::trim_log`).
    pub fn trim_log_stats(&self) -> crate::TrimLogStats {
        self.backend.trim_log.stats
    }

    /// Reads retried and reads unrecoverable since boot (`crate::read_retry`).
    pub fn read_retry_stats(&self) -> crate::ReadRetryStats {
        self.backend.ftl.reads
    }

    /// The flash HAL.
    pub fn flash(&self) -> &F {
        &self.flash
    }

    /// The flash HAL, mutable (the emulator advances its clock through this).
    pub fn flash_mut(&mut self) -> &mut F {
        &mut self.flash
    }

    /// Takes the firmware apart into its flash and its DRAM arena: what is left of a device
    /// when its controller stops (a power cut, or a shutdown before [`Self::recover`] boots
    /// another firmware over the same flash).
    pub fn into_parts(self) -> (F, M) {
        (self.flash, self.dram)
    }

    /// Empties the DRAM page buffer of every page no command is using, so that the next reads
    /// come from flash (the buffer is write-through: nothing is lost). The emulator uses it to
    /// start measurements cold, as a board would be after a power cycle.
    pub fn drop_page_buffer(&mut self) {
        self.backend.buffer.drop_unpinned(self.dram.as_mut());
    }

    /// Whether no command is parked and no flash operation, garbage collection or checkpoint
    /// is under way. Sampling jobs may still hold results; they do not persist.
    pub fn is_quiet(&self) -> bool {
        self.commands.iter().all(Option::is_none)
            && self.backend.queue.is_empty()
            && self.flash_in_flight == 0
            && self.backend.retries_due == 0
            && self.backend.trim_log.is_idle()
            && !self.backend.ftl.gc_running()
            && self.backend.checkpoint.is_idle()
    }

    /// Asks for a checkpoint of the FTL's tables if anything changed since the last one (a
    /// clean shutdown does, so that the next boot replays nothing); [`Self::is_quiet`] says
    /// when it is written.
    pub fn request_checkpoint(&mut self) {
        if self.backend.ftl.changed_since_snapshot() || !self.backend.checkpoint.is_idle() {
            self.backend.checkpoint.request();
        }
    }

    /// Pages programmed between two checkpoints: the configuration's, or automatically 64
    /// checkpoints' worth (at least one page per die and block), so that checkpoints cost at
    /// most 1/64 of the flash writes.
    pub fn checkpoint_interval_pages(&self) -> u64 {
        let b = &self.backend;
        match self.config.checkpoint_interval_pages {
            0 => (u64::from(b.checkpoint.layout.pages) * 64)
                .max(u64::from(b.geometry.pages_per_block) * u64::from(b.geometry.die_count())),
            n => u64::from(n),
        }
    }

    /// Checkpoint counters since boot.
    pub fn checkpoint_stats(&self) -> CheckpointStats {
        self.backend.checkpoint.stats
    }

    /// What the boot found and did.
    pub fn boot_report(&self) -> BootReport {
        self.boot
    }

    /// The FTL.
    pub(crate) fn ftl(&self) -> &Ftl {
        &self.backend.ftl
    }

    /// The FTL and the arena, both mutable (boot).
    pub(crate) fn ftl_dram(&mut self) -> (&mut Ftl, &mut [u8]) {
        (&mut self.backend.ftl, self.dram.as_mut())
    }

    /// The checkpoint writer.
    pub(crate) fn checkpointer(&self) -> &Checkpointer {
        &self.backend.checkpoint
    }

    /// The DRAM arena.
    pub(crate) fn dram_bytes(&self) -> &[u8] {
        self.dram.as_ref()
    }

    /// Starts a flash operation directly (boot, before the flash queue is in use).
    pub(crate) fn submit_boot_op(&mut self, tag: u32, op: FlashOp) -> Result<(), FlashError> {
        self.flash.submit(tag, op, self.dram.as_ref())
    }

    /// Collects a flash completion directly (boot).
    pub(crate) fn poll_boot_flash(&mut self) -> Option<FlashCompletion> {
        self.flash.poll(self.dram.as_mut())
    }

    /// Ends a boot: the checkpoint's graph is attached again, the checkpoint writer continues
    /// after the newest checkpoint found, and the report is kept.
    pub(crate) fn finish_boot(
        &mut self,
        checkpoint: Option<(Header, u32)>,
        highest_id: u64,
        report: BootReport,
    ) {
        self.graph = checkpoint.and_then(|(h, _)| h.graph);
        self.backend
            .checkpoint
            .resume_after(checkpoint.map(|(h, slot)| (h.id, slot)), highest_id);
        self.boot = report;
    }

    /// Whether nothing is parked, queued, running or in flight.
    pub fn is_idle(&self) -> bool {
        self.is_quiet() && self.isp.is_idle()
    }

    /// Abandons every command and sampling job, as a controller reset (CC.EN cleared) does: from
    /// now on no abandoned command reads or writes its data buffer or posts a completion, and
    /// every job is forgotten (its tag names nothing), so the host's buffers and ids are free
    /// at once. Flash operations already started still complete, and the FTL finishes them
    /// consistently: a page whose program was started is left unmapped (its logical page keeps
    /// its old data), pages not yet started are skipped, and a running job ends at its next
    /// step. The attached graph stays attached (it is device state, like the namespace).
    /// Until that work is done the abandoned commands hold their slots, so `submit` may answer
    /// [`Busy`]; [`Self::is_idle`] says when it is over.
    pub fn abandon_commands(&mut self) {
        for cmd in self.commands.iter_mut().flatten() {
            cmd.abandoned = true;
            cmd.status = Status::ABORT_REQUESTED;
            if let Op::Collect { discard, .. } = &mut cmd.op {
                *discard = true;
            }
        }
        self.asleep = 0;
        self.isp.abandon_jobs();
        self.tunnel_jobs = [None; MAX_ISP_SLOTS];
    }

    /// Moves everything forward once. Returns whether anything happened; the caller polls again
    /// until it returns false, then waits for flash time to pass.
    ///
    /// The same as [`Self::poll_io`] then the ISP step of [`Self::poll_isp`] (without its own
    /// flash-queue budget): one pass of a firmware that runs NVMe, FTL and ISP on one core.
    pub fn poll<H: HostInterface>(&mut self, host: &mut H) -> bool {
        let io = self.poll_io(host);
        let isp = self.isp_pass(None);
        io || isp
    }

    /// [`Self::poll_io`] then one step of sampling lane `lane`: one pass of a core that runs
    /// the NVMe, FTL and one lane's ISP work time-shared, while cores of their own run the other
    /// lanes ([`Self::poll_isp_lane`]). With one lane, the same as [`Self::poll`].
    pub fn poll_with_lane<H: HostInterface>(&mut self, host: &mut H, lane: usize) -> bool {
        let io = self.poll_io(host);
        let isp = self.isp_pass(Some(lane));
        io || isp
    }

    /// The I/O half of [`Self::poll`]: flash completions, garbage collection, the parked
    /// commands and the flash queue (counted as one poll). An integrator with a core for ISP
    /// calls this on the firmware core and [`Self::poll_isp`] on the ISP core, one call at a
    /// time (the firmware is not reentrant; the two share the page buffer and flash queue).
    pub fn poll_io<H: HostInterface>(&mut self, host: &mut H) -> bool {
        self.backend.work.polls += 1;
        self.backend.queue.begin_poll();
        let mut progress = false;
        while let Some(c) = self.next_flash_completion() {
            self.flash_completed(c);
            progress = true;
        }
        progress |= self.step_read_retries();
        progress |= self.step_checkpoint();
        progress |= self.backend.trim_log.step(
            self.dram.as_mut(),
            &mut self.backend.ftl,
            &mut self.backend.queue,
            &mut self.backend.checkpoint,
        );
        progress |= self
            .backend
            .ftl
            .erase_step(self.dram.as_mut(), &mut self.backend.queue);
        progress |= self.backend.ftl.gc_step(
            self.dram.as_mut(),
            &mut self.backend.queue,
            &mut self.backend.work,
        );
        let mut taken = self.drain_flash_queue();
        // The slots holding a command (or asleep) when the sweep starts: an idle sweep then
        // costs a scan of the table, not 64 steps. A sweep only removes commands, and a slot it
        // has not reached yet cannot fall asleep, so no slot outside this set needs a look.
        let mut live = self
            .commands
            .iter()
            .enumerate()
            .fold(self.asleep, |m, (i, c)| m | (u64::from(c.is_some()) << i));
        while live != 0 {
            let i = live.trailing_zeros() as usize;
            live &= live - 1;
            let epoch = self.backend.buffer.loading_exits();
            if epoch != self.asleep_epoch {
                self.asleep = 0;
                self.asleep_epoch = epoch;
            }
            if self.asleep & (1u64 << i) != 0 {
                // What stepping it would count, and all it would do.
                self.backend.work.parked_checked += 1;
            } else if let Some(command) = &self.commands[i] {
                // By reference: a parked command's record is ~100 bytes, and an idle sweep
                // looks at 64 slots.
                if command.abandoned {
                    progress |= self.step_command(&mut Abandoned, i);
                } else {
                    progress |= self.step_command(host, i);
                }
            } else {
                // An empty slot: nothing to step and nothing queued since the last drain.
                continue;
            }
            // Start what the command queued before looking at the next one, so the flash works
            // while the core goes on (the first command's reads need not wait for the sweep).
            taken += self.drain_flash_queue();
        }
        progress || taken > 0
    }

    /// Requests a checkpoint when the interval's pages have been programmed since the last one,
    /// and advances the writer; programs are held while one is requested or written.
    fn step_checkpoint(&mut self) -> bool {
        let interval = self.checkpoint_interval_pages();
        let b = &mut self.backend;
        if b.checkpoint.is_idle()
            && (b.ftl.programs_since_snapshot() >= interval || b.ftl.wants_checkpoint())
        {
            b.checkpoint.request();
        }
        let progress = b
            .checkpoint
            .step(self.dram.as_mut(), &mut b.ftl, &mut b.queue, self.graph);
        b.ftl.hold_programs = b.checkpoint.holds_programs();
        progress
    }

    /// The ISP half of [`Self::poll`]: one step of every sampling lane (starting a queued
    /// job, issuing the page reads of its gathers, consuming the pages that arrived), then the
    /// flash queue is drained so that its reads start. It does not count a poll (the ISP core's
    /// own loop is the generator's counted work) and never touches the host interface. Returns
    /// whether anything happened.
    pub fn poll_isp(&mut self) -> bool {
        self.backend.queue.begin_poll();
        self.isp_pass(None)
    }

    /// [`Self::poll_isp`] for one sampling lane (`0..`[`Self::isp_lanes`]): what an integrator
    /// with a core per lane calls on each of them, one call at a time. A lane outside the
    /// configuration does nothing.
    pub fn poll_isp_lane(&mut self, lane: usize) -> bool {
        self.backend.queue.begin_poll();
        self.isp_pass(Some(lane))
    }

    /// How many sampling jobs run at once ([`FirmwareConfig::isp_lanes`]).
    pub fn isp_lanes(&self) -> usize {
        self.isp.lane_count()
    }

    /// Whether the ISP engine has a job queued or running (work for [`Self::poll_isp`]).
    pub fn isp_busy(&self) -> bool {
        !self.isp.is_idle()
    }

    /// Read-aheads the sampling lanes started, and page-buffer slots pinned now (for tests).
    #[cfg(test)]
    pub(crate) fn isp_read_aheads_and_pins(&self) -> (u32, usize) {
        (
            self.isp.read_aheads(),
            self.backend.buffer.pinned_slots(self.dram.as_ref()),
        )
    }

    /// How many lanes run a job now, the most pages one of them has pinned, and how many each
    /// may pin (for tests).
    #[cfg(test)]
    pub(crate) fn isp_lane_state(&self) -> (usize, usize, usize) {
        let (running, pinned) = self.isp.running_lanes();
        (running, pinned, self.isp.window_pages())
    }

    /// The layer and gather (0 bounds, 1 neighbours, 2 features) `lane`'s job is at, if it
    /// runs one (for tests).
    #[cfg(test)]
    pub(crate) fn isp_lane_gather(&self, lane: usize) -> Option<(usize, usize)> {
        self.isp.lane_gather(lane)
    }

    /// Whether sampling lane `lane` has work for [`Self::poll_isp_lane`]: a job running, or a
    /// job queued that it would start.
    pub fn isp_lane_busy(&self, lane: usize) -> bool {
        self.isp.lane_busy(lane)
    }

    /// One step of `lane` (of every lane if `None`), then the flash queue drained.
    fn isp_pass(&mut self, lane: Option<usize>) -> bool {
        let (dram, backend) = (self.dram.as_mut(), &mut self.backend);
        let progress = match lane {
            Some(lane) => self.isp.step_lane(lane, dram, backend),
            None => self.isp.step(dram, backend),
        };
        let taken = self.drain_flash_queue();
        progress || taken > 0
    }

    /// Hands the queued flash operations to the HAL; returns how many it took.
    #[inline]
    fn drain_flash_queue(&mut self) -> u64 {
        if self.backend.queue.nothing_pending() {
            return 0;
        }
        let taken =
            self.backend
                .queue
                .drain(&mut self.flash, self.dram.as_ref(), &mut self.backend.work);
        self.flash_in_flight += taken as u32;
        taken
    }

    fn next_flash_completion(&mut self) -> Option<FlashCompletion> {
        if let Some(c) = self.backend.queue.take_refused() {
            return Some(c);
        }
        let c = self.flash.poll(self.dram.as_mut())?;
        self.flash_in_flight = self.flash_in_flight.saturating_sub(1);
        Some(c)
    }

    fn flash_completed(&mut self, c: FlashCompletion) {
        let Some(tag) = Tag::decode(c.tag) else {
            return;
        };
        let dram = self.dram.as_mut();
        match tag.kind {
            TagKind::Fill | TagKind::Prefetch => self.buffer_read_finished(tag, c.result),
            TagKind::CheckpointErase | TagKind::CheckpointProgram | TagKind::CheckpointVerify => {
                self.backend
                    .checkpoint
                    .complete(dram, tag.kind, tag.index, c.result)
            }
            TagKind::Program => {
                let Some(cmd) = self
                    .commands
                    .get_mut(usize::from(tag.owner))
                    .and_then(Option::as_mut)
                else {
                    return;
                };
                let Op::Write(t) = &cmd.op else { return };
                let (owner, index) = (usize::from(tag.owner), usize::from(tag.index));
                // Pages past the transfer's end are never started (their words may be stale).
                if index >= t.page_count {
                    return;
                }
                let PageIo::Programming(slot, ppn) = self.pages.get(dram, owner, index) else {
                    return;
                };
                let lpn = t.first_lpn + u32::from(tag.index);
                self.backend
                    .ftl
                    .program_finished(dram, ppn, c.result.is_ok());
                if c.result.is_ok() && cmd.status.is_success() {
                    let old = self.backend.ftl.commit(dram, lpn, ppn);
                    self.backend.ftl.stats.host_pages_written += 1;
                    // The new version is on flash: the old one's data is dead (a GC copy's
                    // source is not told: its block is erased next anyway).
                    if let Some(old) = old {
                        self.flash.forget(old);
                    }
                } else if c.result == Err(FlashError::Media) && cmd.status.is_success() {
                    // The media failed the page (its block is being retired): the slot still
                    // holds the data, pinned; program it again elsewhere.
                    self.pages.set(dram, owner, index, PageIo::Owned(slot));
                    return;
                } else {
                    // The slot holds data flash does not: nobody may find it any more.
                    self.backend.buffer.detach_slot(dram, slot);
                    if cmd.status.is_success() {
                        cmd.status = Status::WRITE_FAULT;
                    }
                }
                self.backend.buffer.unpin(dram, slot);
                self.pages.set(dram, owner, index, PageIo::Done);
            }
            TagKind::TrimRecord => self.backend.trim_log.programmed(
                dram,
                &mut self.backend.ftl,
                &mut self.backend.queue,
                usize::from(tag.index),
                c.result,
            ),
            TagKind::TrimRecordVerify => {
                self.backend
                    .trim_log
                    .read_back(dram, usize::from(tag.index), c.result)
            }
            TagKind::FreeErase => {
                self.backend
                    .ftl
                    .free_erase_done(dram, tag.owner, tag.index, c.result.is_ok())
            }
            TagKind::GcRead | TagKind::GcProgram | TagKind::GcErase => self
                .backend
                .ftl
                .gc_complete(dram, &mut self.backend.queue, tag.kind, c.result),
        }
    }
}

#[cfg(test)]
impl<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> Firmware<F, M> {
    /// A description of every parked command and the GC state, for test failure messages.
    pub(crate) fn describe(&self) -> std::string::String {
        std::format!(
            "commands: {:?}\ngc: {} full: {} queue empty: {} in flight: {}\n{}",
            self.commands
                .iter()
                .flatten()
                .map(|c| (c.id, c.op))
                .collect::<std::vec::Vec<_>>(),
            self.backend.ftl.describe_gc(),
            self.backend.ftl.is_full(),
            self.backend.queue.is_empty(),
            self.flash_in_flight,
            self.isp.describe_lanes(self.dram.as_ref(), &self.backend)
        )
    }
}
