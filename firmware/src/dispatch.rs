//! The NVMe command dispatcher: the firmware's top level.
//!
//! [`Firmware::submit`] parses a command (parse apart from execute: [`AdminCommand::parse`],
//! [`IoCommand::parse`]) and either completes it at once (Identify, Flush, Dataset Management,
//! GRAPH_ATTACH, NS_SUBMIT, and every error) or parks it in a command slot (Read, Write,
//! NS_COLLECT). [`Firmware::poll`] moves everything forward: it collects flash completions, runs
//! garbage collection, steps every parked command and the ISP engine, and hands queued flash
//! operations to the HAL.

use sagessd_abi::graph::GraphDescriptor;
use sagessd_abi::identify::IDENTIFY_SIZE_BYTES;
use sagessd_abi::nvme::{
    AdminCommand, CompletionEntry, DsmRange, IoCommand, Status, SubmissionEntry, VendorStatus,
};
use sagessd_abi::tunnel::{TunnelAccess, TunnelWindow};
use zerocopy::FromBytes;

use crate::admin::{Admin, Facts, NSID};
use crate::backend::Backend;
use crate::checkpoint::{CheckpointLayout, CheckpointStats, Checkpointer, Header, Ticket};
use crate::config::{
    ConfigError, FirmwareConfig, MAX_COMMANDS, MAX_ISP_SLOTS, MAX_PAGES_PER_COMMAND,
};
use crate::dram::{DramLayout, DramRegions, Region};
use crate::flash_queue::{FlashQueue, Tag, TagKind};
use crate::ftl::{Ftl, FtlStats, logical_page_count};
use crate::hal::{Flash, FlashCompletion, FlashError, FlashOp, PhysPage, Sectors};
use crate::host::{CommandId, DmaError, HostInterface};
use crate::isp::{Collect, Isp};
use crate::page_buffer::{Acquire, PageBuffer};
use crate::recovery::BootReport;
use crate::trim_log::TrimLog;
use crate::work::WorkCounters;

/// Most logical pages one poll trims, bounding the time a poll can take.
const TRIM_PAGES_PER_POLL: u32 = 1024;
/// Command ID Conflict (generic status 0x03).
const COMMAND_ID_CONFLICT: Status = Status::generic(0x03, true);

/// [`Firmware::submit`] could not take the command now: every command slot is in use. Nothing
/// happened; submit it again after a [`Firmware::poll`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy;

/// Progress of one flash page of a Read or Write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PageIo {
    Todo,
    /// Pinned in the page buffer, waiting for its flash read.
    Waiting(u32),
    /// A write's pinned slot, ready to take host data, waiting for a free flash page.
    Owned(u32),
    /// Being programmed from the slot to the physical page.
    Programming(u32, PhysPage),
    Done,
}

impl PageIo {
    const TODO: u64 = 0;
    const WAITING: u64 = 1;
    const OWNED: u64 = 2;
    const PROGRAMMING: u64 = 3;
    const DONE: u64 = 4;

    /// The state as one arena word: kind | slot << 8 | ppn << 32.
    fn pack(self) -> u64 {
        match self {
            PageIo::Todo => Self::TODO,
            PageIo::Waiting(s) => Self::WAITING | u64::from(s) << 8,
            PageIo::Owned(s) => Self::OWNED | u64::from(s) << 8,
            PageIo::Programming(s, ppn) => {
                Self::PROGRAMMING | u64::from(s) << 8 | u64::from(ppn.0) << 32
            }
            PageIo::Done => Self::DONE,
        }
    }

    /// The state [`Self::pack`] stored in `w`. Page-buffer slots fit in 24 bits (the
    /// configuration allows at most 32768).
    fn unpack(w: u64) -> Self {
        let slot = (w >> 8) as u32 & 0x00ff_ffff;
        match w & 0xff {
            Self::TODO => PageIo::Todo,
            Self::WAITING => PageIo::Waiting(slot),
            Self::OWNED => PageIo::Owned(slot),
            Self::PROGRAMMING => PageIo::Programming(slot, PhysPage((w >> 32) as u32)),
            _ => PageIo::Done,
        }
    }
}

/// The arena region holding every command slot's per-page states, `MAX_PAGES_PER_COMMAND`
/// packed [`PageIo`] words per command slot.
#[derive(Clone, Copy, Debug)]
struct CommandPages(Region);

impl CommandPages {
    /// Page `page` of command slot `cmd`.
    fn get(&self, dram: &[u8], cmd: usize, page: usize) -> PageIo {
        debug_assert!(cmd < MAX_COMMANDS && page < MAX_PAGES_PER_COMMAND);
        PageIo::unpack(self.0.u64(dram, cmd * MAX_PAGES_PER_COMMAND + page))
    }

    /// Sets page `page` of command slot `cmd`.
    fn set(&self, dram: &mut [u8], cmd: usize, page: usize, io: PageIo) {
        debug_assert!(cmd < MAX_COMMANDS && page < MAX_PAGES_PER_COMMAND);
        self.0
            .set_u64(dram, cmd * MAX_PAGES_PER_COMMAND + page, io.pack());
    }

    /// Whether every page of transfer `t`, parked in command slot `cmd`, is done.
    fn all_done(&self, dram: &[u8], cmd: usize, t: &Transfer) -> bool {
        (0..t.page_count).all(|i| self.get(dram, cmd, i) == PageIo::Done)
    }
}

/// A Read or Write in progress. The state of each of its pages lives in the arena
/// ([`CommandPages`], under the command slot it is parked in).
#[derive(Clone, Copy, Debug)]
struct Transfer {
    start_byte: u64,
    len_bytes: u64,
    first_lpn: u32,
    page_count: usize,
    /// Where a Write's data comes from (a Read's is always [`Source::Host`]).
    source: Source,
}

/// Where the data of a Write comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// The host's buffer: a Write.
    Host,
    /// Zeros: a Write Zeroes. With `deallocate` (its DEAC bit), the flash pages it covers whole
    /// are unmapped (they read as zeros) instead of programmed, and the command completes once
    /// a trim record holds the unmapping (`crate::trim_log`); pages it covers in part are
    /// programmed with their blocks zeroed either way.
    Zeroes { deallocate: bool },
}

/// A Dataset Management deallocate in progress.
#[derive(Clone, Copy, Debug)]
struct Trim {
    range_count: u32,
    /// The next range to fetch from the host.
    range: u32,
    /// The next logical page of the current range, and one past its last.
    next_lpn: u32,
    end_lpn: u32,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Read(Transfer),
    Write(Transfer),
    Deallocate(Trim),
    /// A Flush or a GRAPH_ATTACH waiting for the checkpoint that makes it durable;
    /// `give_ups`: the writer's give-up count when it started waiting.
    Durable {
        ticket: Ticket,
        give_ups: u32,
    },
    /// A finished Dataset Management or deallocating Write Zeroes waiting for the trim records
    /// `from + 1 ..= to` that hold its unmaps (`crate::trim_log`).
    Logged {
        from: u64,
        to: u64,
    },
    /// `window`: the byte offset of a windowed collect; `zero_fill`: a tunnel Read, whose
    /// buffer is zero past the subgraph's end (a window may start past it); `discard`: end the
    /// job without returning it.
    Collect {
        tag: u32,
        data_len_bytes: usize,
        window: Option<usize>,
        zero_fill: bool,
        discard: bool,
    },
}

#[derive(Clone, Copy, Debug)]
struct Parked {
    id: CommandId,
    seq: u32,
    op: Op,
    status: Status,
    /// Abandoned by [`Firmware::abandon_commands`]: it only finishes its flash work (no host
    /// DMA, no completion), and its id may be reused at once.
    abandoned: bool,
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
    /// Bytes of DRAM arena the firmware needs for `config` on `geometry`.
    pub fn dram_size_bytes(
        config: &FirmwareConfig,
        geometry: &crate::hal::Geometry,
    ) -> Result<usize, ConfigError> {
        Self::layout(config, geometry).map(|l| l.total_bytes)
    }

    /// Every region of the DRAM arena for `config` on `geometry`, with its size and what it
    /// scales with: the footprint report. Its total equals [`Self::dram_size_bytes`].
    pub fn dram_regions(
        config: &FirmwareConfig,
        geometry: &crate::hal::Geometry,
    ) -> Result<DramRegions, ConfigError> {
        Self::layout(config, geometry)
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

    /// Boots on freshly erased flash: formats the FTL and clears the firmware's tables.
    /// The arena must be at least [`Self::dram_size_bytes`] long and zero-filled (the mapping
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

    /// Takes one command. Completes it through `host` at once when it can; otherwise parks it
    /// until [`Self::poll`] finishes it. `Err(Busy)`: no slot free, nothing was done.
    pub fn submit<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        sqe: &SubmissionEntry,
    ) -> Result<(), Busy> {
        let free = self.commands.iter().position(Option::is_none).ok_or(Busy)?;
        self.backend.work.commands += 1;
        if self
            .commands
            .iter()
            .flatten()
            .any(|c| c.id == id && !c.abandoned)
        {
            host.note_work(&self.backend.work);
            host.complete(
                id,
                CompletionEntry::new(id.sq_id, id.cid, COMMAND_ID_CONFLICT, 0),
            );
            return Ok(());
        }
        let outcome = if id.sq_id == 0 {
            self.admin(host, id, sqe)
        } else {
            self.io(host, id, sqe)
        };
        match outcome {
            Ok(Some(op)) => {
                if let Op::Read(t) | Op::Write(t) = &op {
                    let dram = self.dram.as_mut();
                    for p in 0..t.page_count {
                        self.pages.set(dram, free, p, PageIo::Todo);
                    }
                }
                self.asleep &= !(1u64 << free);
                self.commands[free] = Some(Parked {
                    id,
                    seq: self.next_seq,
                    op,
                    status: Status::SUCCESS,
                    abandoned: false,
                });
                self.next_seq = self.next_seq.wrapping_add(1);
            }
            Ok(None) => {}
            Err((status, result)) => {
                host.note_work(&self.backend.work);
                host.complete(id, CompletionEntry::new(id.sq_id, id.cid, status, result))
            }
        }
        Ok(())
    }

    /// Runs an admin command to completion. `Err` carries (status, result dword 0).
    fn admin<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        sqe: &SubmissionEntry,
    ) -> Result<Option<Op>, (Status, u32)> {
        let page_blocks =
            u64::from(self.backend.geometry.page_size_bytes / self.block_size_bytes());
        let facts = Facts {
            mdts: (self.config.max_transfer_bytes / 4096).trailing_zeros() as u8,
            limits: self.isp.limits(),
            namespace_blocks: self.namespace_blocks,
            used_blocks: self.backend.ftl.mapped_pages() * page_blocks,
            block_size_log2: self.config.block_size_log2,
            spare_percent: self.backend.ftl.spare_percent(),
            tunnel: self.tunnel,
        };
        let mut data = [0u8; IDENTIFY_SIZE_BYTES];
        let (len, result) = self
            .admin
            .execute(AdminCommand::parse(sqe), &facts, &mut data)
            .map_err(|s| (s, 0))?;
        if len > 0 {
            dma_out(&mut self.backend.work, host, id, 0, &data[..len])
                .map_err(|_| (Status::DATA_TRANSFER_ERROR, 0))?;
        }
        Err((Status::SUCCESS, result))
    }

    /// Starts an I/O command. `Ok(Some(op))`: park it; `Err`: complete now with (status, dw0).
    fn io<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        sqe: &SubmissionEntry,
    ) -> Result<Option<Op>, (Status, u32)> {
        let cmd = IoCommand::parse(sqe).map_err(|s| (s, 0))?;
        if matches!(cmd, IoCommand::Unsupported(_)) {
            return Err((Status::INVALID_OPCODE, 0));
        }
        if sqe.nsid.get() != NSID {
            return Err((Status::INVALID_NAMESPACE, 0));
        }
        let vendor = |v: VendorStatus| (Status::from(v), 0);
        // Past the namespace's end lies the tunnel window: a Read or Write wholly inside one
        // of its slots is the sampling exchange; anything else out there is out of range.
        if let IoCommand::Read { slba, block_count } | IoCommand::Write { slba, block_count } = cmd
            && let Some(window) = self.tunnel
            && slba.saturating_add(u64::from(block_count)) > self.namespace_blocks
        {
            let TunnelAccess::Slot {
                slot,
                offset_blocks,
            } = window.locate(slba, block_count)
            else {
                return Err((Status::LBA_OUT_OF_RANGE, 0));
            };
            let bs = self.block_size_bytes() as usize;
            let (offset, len) = (offset_blocks as usize * bs, block_count as usize * bs);
            return if matches!(cmd, IoCommand::Write { .. }) {
                self.tunnel_submit(host, id, slot, offset, len)
            } else {
                self.tunnel_collect(slot, offset, len)
            };
        }
        match cmd {
            // Every write completes only once programmed (the device reports no volatile write
            // cache), so a Flush has nothing to make durable; it takes a checkpoint when the
            // pages a boot would replay are at least a checkpoint's worth.
            IoCommand::Flush => {
                let b = &self.backend;
                if b.ftl.programs_since_snapshot() >= u64::from(b.checkpoint.layout.pages) {
                    Ok(Some(self.durable()))
                } else {
                    Err((Status::SUCCESS, 0))
                }
            }
            IoCommand::Read { slba, block_count } => {
                let t = self.transfer(slba, block_count)?;
                let health = &mut self.admin.health;
                health.host_reads += 1;
                health.sectors_read += u64::from(block_count) << (self.config.block_size_log2 - 9);
                Ok(Some(Op::Read(t)))
            }
            IoCommand::Write { slba, block_count } => {
                let t = self.transfer(slba, block_count)?;
                let health = &mut self.admin.health;
                health.host_writes += 1;
                health.sectors_written +=
                    u64::from(block_count) << (self.config.block_size_log2 - 9);
                Ok(Some(Op::Write(t)))
            }
            IoCommand::WriteZeroes {
                slba,
                block_count,
                deallocate,
            } => {
                // No data moves, but a command zeroes at most a transfer's pages (WZSL = MDTS
                // in Identify), so it fits a command slot like a Write.
                let mut t = self.transfer(slba, block_count)?;
                t.source = Source::Zeroes { deallocate };
                Ok(Some(Op::Write(t)))
            }
            IoCommand::DatasetManagement {
                range_count,
                deallocate,
            } => match deallocate {
                // Without the deallocate attribute the ranges are only hints: nothing to do.
                false => Err((Status::SUCCESS, 0)),
                true => Ok(Some(Op::Deallocate(Trim {
                    range_count,
                    range: 0,
                    next_lpn: 0,
                    end_lpn: 0,
                }))),
            },
            IoCommand::GraphAttach { data_len_bytes } => {
                // The descriptor, and its feature region if it has one.
                let mut wire = [0u8; 128];
                let n = (data_len_bytes as usize).min(wire.len());
                dma_in(&mut self.backend.work, host, id, 0, &mut wire[..n])
                    .map_err(|_| (Status::DATA_TRANSFER_ERROR, 0))?;
                let g = GraphDescriptor::parse(
                    &wire[..n],
                    self.block_size_bytes(),
                    self.namespace_blocks,
                )
                .map_err(vendor)?;
                // Feature rows are gathered a page at a time: none may straddle two pages.
                let page = u64::from(self.backend.geometry.page_size_bytes);
                if let Some(f) = g.features {
                    let start = f.range.slba * u64::from(self.block_size_bytes());
                    if !start.is_multiple_of(page) || f.stride_bytes() > page {
                        return Err(vendor(VendorStatus::BadDescriptor));
                    }
                }
                self.graph = Some(g);
                Ok(Some(self.durable()))
            }
            IoCommand::NsSubmit { data_len_bytes } => {
                let tag = self.ns_submit(host, id, data_len_bytes as usize, true)?;
                Err((Status::SUCCESS, tag))
            }
            IoCommand::NsCollect {
                tag,
                data_len_bytes,
                window,
                discard,
            } => match self.isp.collect_state(self.dram.as_ref(), tag) {
                Collect::Unknown => Err(vendor(VendorStatus::UnknownTag)),
                _ if window.is_some_and(|o| o % 4 != 0) => Err((Status::INVALID_FIELD, 0)),
                _ if discard => Ok(Some(Op::Collect {
                    tag,
                    data_len_bytes: 0,
                    window: None,
                    zero_fill: false,
                    discard: true,
                })),
                _ => Ok(Some(Op::Collect {
                    tag,
                    data_len_bytes: data_len_bytes as usize,
                    window: window.map(|o| o as usize),
                    zero_fill: false,
                    discard: false,
                })),
            },
            IoCommand::Unsupported(_) => Err((Status::INVALID_OPCODE, 0)),
        }
    }

    /// A command that completes once a checkpoint holding the current state is on flash.
    fn durable(&mut self) -> Op {
        durable(&mut self.backend.checkpoint)
    }

    /// NS_SUBMIT's work: takes a free sampling slot, DMAs the NS_config of `len` bytes into it
    /// and queues the job; returns its tag. `hyperbatch`: whether the path it came by can
    /// collect a hyperbatch's minibatches one by one.
    fn ns_submit<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        len: usize,
        hyperbatch: bool,
    ) -> Result<u32, (Status, u32)> {
        let vendor = |v: VendorStatus| (Status::from(v), 0);
        let graph = self.graph.ok_or(vendor(VendorStatus::NoGraphAttached))?;
        let (slot, window) = self
            .isp
            .free_slot()
            .ok_or(vendor(VendorStatus::NoFreeSlot))?;
        let n = len.min(window.len);
        let dram = self.dram.as_mut();
        dma_in(
            &mut self.backend.work,
            host,
            id,
            0,
            window.sub(0, n).bytes_mut(dram),
        )
        .map_err(|_| (Status::DATA_TRANSFER_ERROR, 0))?;
        self.isp
            .accept(dram, slot, n, &graph, hyperbatch)
            .map_err(vendor)
    }

    /// A Write into tunnel slot `slot`: an NS_SUBMIT of its data, which must start at the
    /// slot's first LBA. A finished, uncollected job of the slot is dropped first; a running
    /// one makes the Write fail with "no free slot" (retry after reading it).
    fn tunnel_submit<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        slot: usize,
        offset: usize,
        len: usize,
    ) -> Result<Option<Op>, (Status, u32)> {
        if offset != 0 {
            return Err((Status::INVALID_FIELD, 0));
        }
        if let Some(old) = self.tunnel_jobs[slot] {
            match self.isp.collect_state(self.dram.as_ref(), old) {
                Collect::Pending => return Err((VendorStatus::NoFreeSlot.into(), 0)),
                Collect::Unknown => {}
                Collect::Done(_) | Collect::Failed(_) => self.isp.release(old),
            }
        }
        // A tunnel slot's Reads name no minibatch: it carries plain NS_configs only.
        let tag = self.ns_submit(host, id, len, false)?;
        self.tunnel_jobs[slot] = Some(tag);
        Err((Status::SUCCESS, tag))
    }

    /// A Read inside tunnel slot `slot`: the bytes of its job's subgraph from `offset`,
    /// zero-filled past the end; waits while the job runs.
    fn tunnel_collect(
        &mut self,
        slot: usize,
        offset: usize,
        len: usize,
    ) -> Result<Option<Op>, (Status, u32)> {
        let tag = self.tunnel_jobs[slot]
            .filter(|t| {
                !matches!(
                    self.isp.collect_state(self.dram.as_ref(), *t),
                    Collect::Unknown
                )
            })
            .ok_or((VendorStatus::UnknownTag.into(), 0))?;
        Ok(Some(Op::Collect {
            tag,
            data_len_bytes: len,
            window: Some(offset),
            zero_fill: true,
            discard: false,
        }))
    }

    /// Checks a Read/Write range and lays out its pages.
    fn transfer(&self, slba: u64, block_count: u32) -> Result<Transfer, (Status, u32)> {
        let end = slba
            .checked_add(u64::from(block_count))
            .ok_or((Status::LBA_OUT_OF_RANGE, 0))?;
        if end > self.namespace_blocks {
            return Err((Status::LBA_OUT_OF_RANGE, 0));
        }
        let bs = u64::from(self.block_size_bytes());
        let len_bytes = u64::from(block_count) * bs;
        if len_bytes > u64::from(self.config.max_transfer_bytes) {
            return Err((Status::INVALID_FIELD, 0));
        }
        let ps = u64::from(self.backend.geometry.page_size_bytes);
        let start_byte = slba * bs;
        let first = start_byte / ps;
        let last = (start_byte + len_bytes - 1) / ps;
        Ok(Transfer {
            start_byte,
            len_bytes,
            first_lpn: first as u32,
            page_count: (last - first + 1) as usize,
            source: Source::Host,
        })
    }

    /// Advances a Dataset Management deallocate by at most [`TRIM_PAGES_PER_POLL`] pages, so a
    /// command naming the whole namespace cannot stall the poll loop. Ranges are fetched from the
    /// host one at a time; only flash pages wholly inside a range are trimmed, and pages a write
    /// is changing are skipped (deallocation is advisory). Returns whether it finished.
    fn step_trim<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        t: &mut Trim,
        status: &mut Status,
    ) -> bool {
        let bs = u64::from(self.block_size_bytes());
        let ps = u64::from(self.backend.geometry.page_size_bytes);
        let mut budget = TRIM_PAGES_PER_POLL;
        while budget > 0 {
            if t.next_lpn == t.end_lpn {
                if t.range == t.range_count {
                    return true;
                }
                let mut wire = [0u8; 16];
                if dma_in(
                    &mut self.backend.work,
                    host,
                    id,
                    16 * t.range as usize,
                    &mut wire,
                )
                .is_err()
                {
                    *status = Status::DATA_TRANSFER_ERROR;
                    return true;
                }
                t.range += 1;
                let Ok(r) = DsmRange::read_from_bytes(&wire) else {
                    continue;
                };
                let (slba, blocks) = (r.slba.get(), u64::from(r.block_count.get()));
                let Some(end) = slba
                    .checked_add(blocks)
                    .filter(|e| *e <= self.namespace_blocks)
                else {
                    *status = Status::LBA_OUT_OF_RANGE;
                    return true;
                };
                t.next_lpn = (slba * bs).div_ceil(ps) as u32;
                t.end_lpn = (end * bs / ps).max(u64::from(t.next_lpn)) as u32;
                continue;
            }
            let lpn = t.next_lpn;
            let busy = self.commands.iter().flatten().any(|c| match c.op {
                Op::Write(w) => (w.first_lpn..w.first_lpn + w.page_count as u32).contains(&lpn),
                _ => false,
            });
            if !busy && !self.backend.unmap_logged(self.dram.as_mut(), lpn) {
                // The trim log is full: go on once a record is on flash.
                return false;
            }
            t.next_lpn += 1;
            budget -= 1;
        }
        false
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
                    let old = self.backend.ftl.lookup(dram, lpn);
                    self.backend.ftl.commit(dram, lpn, ppn, None);
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

    /// Advances parked command `i` in place; completes it when it is done.
    fn step_command<H: HostInterface>(&mut self, host: &mut H, i: usize) -> bool {
        if self.commands[i].is_none() {
            return false;
        }
        self.backend.work.parked_checked += 1;
        let (blocked, trim) = match &self.commands[i] {
            None => return false,
            Some(Parked {
                op: Op::Write(t),
                seq,
                ..
            }) => (self.write_blocked(i, *seq, t), false),
            Some(Parked {
                op: Op::Deallocate(_),
                ..
            }) => (false, true),
            Some(_) => (false, false),
        };
        if trim {
            return self.step_deallocate(host, i);
        }
        let Self {
            backend,
            dram,
            commands,
            pages,
            isp,
            asleep,
            ..
        } = self;
        let Some(cmd) = commands[i].as_mut() else {
            return false;
        };
        let mut io = Io {
            backend,
            dram: dram.as_mut(),
            pages: *pages,
        };
        let (progress, done, result) = match &mut cmd.op {
            Op::Read(t) => {
                let (p, waits_on_loads) = io.step_read(host, cmd.id, i, t, &mut cmd.status);
                let done = io.pages.all_done(io.dram, i, t);
                if !p && !done && waits_on_loads {
                    *asleep |= 1u64 << i;
                }
                (p, done, 0)
            }
            Op::Write(t) => {
                let p = !blocked && io.step_write(host, cmd.id, i, t, &mut cmd.status);
                let done = io.pages.all_done(io.dram, i, t);
                if done && cmd.status.is_success() && io.unmaps_pages(t) {
                    // Unmapped pages are on flash once the trim records holding them are.
                    let (from, to) = io.backend.trim_log.seal_all();
                    cmd.op = Op::Logged { from, to };
                    (true, false, 0)
                } else {
                    (p, done, 0)
                }
            }
            // Handled above: trimming looks at the whole command table.
            Op::Deallocate(_) => (false, false, 0),
            Op::Logged { from, to } => {
                waited(io.backend.trim_log.outcome(*from, *to), &mut cmd.status)
            }
            Op::Durable { ticket, give_ups } => waited(
                io.backend.checkpoint.outcome(*ticket, *give_ups),
                &mut cmd.status,
            ),
            Op::Collect {
                tag,
                data_len_bytes,
                window,
                zero_fill,
                discard,
            } => match isp.collect_state(io.dram, *tag) {
                Collect::Pending => (false, false, 0),
                Collect::Unknown => {
                    cmd.status = VendorStatus::UnknownTag.into();
                    (true, true, 0)
                }
                Collect::Failed(_) | Collect::Done(_) if *discard => {
                    isp.release(*tag);
                    (true, true, 0)
                }
                Collect::Failed(s) => {
                    cmd.status = s;
                    isp.release(*tag);
                    (true, true, 0)
                }
                Collect::Done(size) if window.is_none() && size > *data_len_bytes => {
                    cmd.status = VendorStatus::BufferTooSmall.into();
                    (true, true, size as u32)
                }
                Collect::Done(size) if !*zero_fill && window.is_some_and(|o| o > size) => {
                    cmd.status = Status::INVALID_FIELD;
                    (true, true, size as u32)
                }
                Collect::Done(size) => {
                    let start = window.unwrap_or(0).min(size);
                    let len = (*data_len_bytes).min(size - start);
                    // The subgraph's bytes, and for a tunnel Read the zeros after them.
                    io.backend.work.bytes_copied +=
                        if *zero_fill { *data_len_bytes } else { len } as u64;
                    host.note_work(&io.backend.work);
                    let mut to = Window {
                        host: &mut *host,
                        start,
                        len,
                    };
                    let written = isp
                        .write_result(io.dram, *tag, &mut to, cmd.id)
                        .and_then(|_| {
                            if *zero_fill {
                                zero(host, cmd.id, len, *data_len_bytes)
                            } else {
                                Ok(())
                            }
                        });
                    match written {
                        Ok(()) if start + len == size => isp.release(*tag),
                        Ok(()) => {}
                        Err(DmaError) => cmd.status = Status::DATA_TRANSFER_ERROR,
                    }
                    (true, true, size as u32)
                }
            },
        };
        if done {
            host.note_work(&io.backend.work);
            host.complete(
                cmd.id,
                CompletionEntry::new(cmd.id.sq_id, cmd.id.cid, cmd.status, result),
            );
            commands[i] = None;
        }
        progress || done
    }

    /// Advances parked Dataset Management command `i` (a copy of it: trimming consults the
    /// whole command table); completes it when it is done.
    fn step_deallocate<H: HostInterface>(&mut self, host: &mut H, i: usize) -> bool {
        let Some(mut cmd) = self.commands[i] else {
            return false;
        };
        let Op::Deallocate(mut t) = cmd.op else {
            return false;
        };
        // A checkpoint is copying the mapping out: it must not change meanwhile.
        if self.backend.checkpoint.tables_frozen() {
            return false;
        }
        let before = (t.range, t.next_lpn, t.end_lpn);
        let done = self.step_trim(host, cmd.id, &mut t, &mut cmd.status);
        // Nothing moved: the trim log has no room until a record is on flash.
        let progress = done || before != (t.range, t.next_lpn, t.end_lpn);
        if done && cmd.status.is_success() {
            // Trims are on flash once the records holding them are.
            let (from, to) = self.backend.trim_log.seal_all();
            cmd.op = Op::Logged { from, to };
            self.commands[i] = Some(cmd);
        } else if done {
            host.note_work(&self.backend.work);
            host.complete(
                cmd.id,
                CompletionEntry::new(cmd.id.sq_id, cmd.id.cid, cmd.status, 0),
            );
            self.commands[i] = None;
        } else {
            cmd.op = Op::Deallocate(t);
            self.commands[i] = Some(cmd);
        }
        progress
    }

    /// Whether an older write that overlaps `t` is still in progress (writes to one page must
    /// not interleave their read-modify-write).
    fn write_blocked(&self, me: usize, seq: u32, t: &Transfer) -> bool {
        let (a0, a1) = (t.first_lpn, t.first_lpn + t.page_count as u32);
        self.commands
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != me)
            .filter_map(|(_, c)| c.as_ref())
            .any(|c| match c.op {
                Op::Write(o) => {
                    let older = c.seq.wrapping_sub(seq) > u32::MAX / 2;
                    older && o.first_lpn < a1 && a0 < o.first_lpn + o.page_count as u32
                }
                _ => false,
            })
    }
}

/// A command that completes once a checkpoint holding the current state is on flash.
fn durable(checkpoint: &mut Checkpointer) -> Op {
    Op::Durable {
        ticket: checkpoint.request(),
        give_ups: checkpoint.gave_up(),
    }
}

/// A step of a command that waits for its changes to be durable (`Some(true)`) or given up
/// (`Some(false)`: Write Fault): (progress, done, result).
fn waited(outcome: Option<bool>, status: &mut Status) -> (bool, bool, u32) {
    match outcome {
        None => (false, false, 0),
        Some(durable) => {
            if !durable {
                *status = Status::WRITE_FAULT;
            }
            (true, true, 0)
        }
    }
}

/// What a Read or Write steps over, borrowed apart from the command table so that a parked
/// command is advanced in place.
struct Io<'a> {
    backend: &'a mut Backend,
    dram: &'a mut [u8],
    pages: CommandPages,
}

impl Io<'_> {
    /// The part of page `i` of a transfer that the host buffer covers: (offset in the page,
    /// offset in the host buffer, length).
    fn page_span(&self, t: &Transfer, i: usize) -> (usize, usize, usize) {
        let ps = u64::from(self.backend.geometry.page_size_bytes);
        let page_start = u64::from(t.first_lpn + i as u32) * ps;
        let from = page_start.max(t.start_byte);
        let to = (page_start + ps).min(t.start_byte + t.len_bytes);
        (
            (from - page_start) as usize,
            (from - t.start_byte) as usize,
            (to - from) as usize,
        )
    }

    /// Whether `t` is a deallocating Write Zeroes covering at least one flash page whole (one
    /// it unmaps rather than programs).
    fn unmaps_pages(&self, t: &Transfer) -> bool {
        let ps = u64::from(self.backend.geometry.page_size_bytes);
        t.source == Source::Zeroes { deallocate: true }
            && t.start_byte.div_ceil(ps) < (t.start_byte + t.len_bytes) / ps
    }

    /// Returns whether anything moved, and whether every page that did not is done or waits
    /// for a loading slot (so that nothing can move before a slot stops loading).
    fn step_read<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        me: usize,
        t: &Transfer,
        status: &mut Status,
    ) -> (bool, bool) {
        let mut progress = false;
        let mut waits_on_loads = true;
        let page_size = self.backend.geometry.page_size_bytes as usize;
        for i in 0..t.page_count {
            let lpn = t.first_lpn + i as u32;
            let (in_page, in_host, len) = self.page_span(t, i);
            let want = Sectors::covering(in_page, len, page_size);
            let dram = &mut *self.dram;
            let before = self.pages.get(dram, me, i);
            if before == PageIo::Todo && !status.is_success() {
                // The command has failed: a page it has not touched yet is not read at all.
                self.pages.set(dram, me, i, PageIo::Done);
                progress = true;
                continue;
            }
            let mut page = before;
            let next = page_contents(self.backend, dram, lpn, (&mut page, want), status, true);
            if page != before {
                self.pages.set(dram, me, i, page);
            }
            let slot = match next {
                Next::Ready(slot) => slot,
                Next::Moved => {
                    progress = true;
                    continue;
                }
                Next::Wait => {
                    waits_on_loads &= matches!(before, PageIo::Waiting(_) | PageIo::Done);
                    continue;
                }
            };
            let src = self.backend.slot(slot).sub(in_page, len);
            if dma_out(
                &mut self.backend.work,
                host,
                id,
                in_host,
                src.bytes(&*self.dram),
            )
            .is_err()
            {
                *status = Status::DATA_TRANSFER_ERROR;
            }
            self.backend.buffer.unpin(&mut *self.dram, slot);
            self.pages.set(self.dram, me, i, PageIo::Done);
            progress = true;
        }
        (progress, waits_on_loads)
    }

    fn step_write<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        me: usize,
        t: &Transfer,
        status: &mut Status,
    ) -> bool {
        let mut progress = false;
        let ps = self.backend.geometry.page_size_bytes as usize;
        for i in 0..t.page_count {
            let lpn = t.first_lpn + i as u32;
            let (in_page, in_host, len) = self.page_span(t, i);
            let dram = &mut *self.dram;
            let pages = self.pages;
            let next = match pages.get(dram, me, i) {
                // The command has failed (or was abandoned): a page it has not touched yet is
                // left as it is.
                PageIo::Todo if !status.is_success() => {
                    pages.set(dram, me, i, PageIo::Done);
                    progress = true;
                    continue;
                }
                // A deallocating Write Zeroes unmaps the pages it covers whole, unless a
                // checkpoint is copying the mapping out (then it waits for the copy).
                PageIo::Todo if len == ps && t.source == Source::Zeroes { deallocate: true } => {
                    if !self.backend.checkpoint.tables_frozen()
                        && self.backend.unmap_logged(dram, lpn)
                    {
                        pages.set(dram, me, i, PageIo::Done);
                        progress = true;
                    }
                    continue;
                }
                // A whole-page write needs no old data: any slot for the page will do. A new
                // slot stays "loading" until the host data is in, so readers wait for it.
                PageIo::Todo if len == ps && status.is_success() => {
                    match self.backend.buffer.acquire_for_overwrite(dram, lpn) {
                        Acquire::Valid(s) | Acquire::Miss(s, _) => Next::Ready(s),
                        Acquire::Loading(s) => {
                            pages.set(dram, me, i, PageIo::Waiting(s));
                            Next::Moved
                        }
                        Acquire::Failed(s) => {
                            // Forget the failed copy; the next poll gets a fresh slot.
                            self.backend.buffer.unpin(dram, s);
                            self.backend.buffer.detach_slot(dram, s);
                            Next::Moved
                        }
                        Acquire::Full => Next::Wait,
                    }
                }
                PageIo::Owned(s) => Next::Ready(s),
                before => {
                    let mut page = before;
                    let need_old = len < ps;
                    let next = page_contents(
                        self.backend,
                        dram,
                        lpn,
                        (&mut page, Sectors::ALL),
                        status,
                        need_old,
                    );
                    if page != before {
                        pages.set(dram, me, i, page);
                    }
                    next
                }
            };
            let slot = match next {
                Next::Ready(slot) => slot,
                Next::Moved => {
                    progress = true;
                    continue;
                }
                Next::Wait => continue,
            };
            // The slot is pinned and holds the old page (or will be overwritten whole).
            if self.backend.ftl.is_full() {
                self.backend.buffer.abandon(dram, slot);
                *status = Status::CAPACITY_EXCEEDED;
                pages.set(dram, me, i, PageIo::Done);
                progress = true;
                continue;
            }
            let ppn = match self.backend.queue.has_room(1) {
                true => self.backend.ftl.allocate(dram, false),
                false => None,
            };
            let Some(ppn) = ppn else {
                // Wait for GC or queue space; keep the slot pinned so the old data stays.
                pages.set(dram, me, i, PageIo::Owned(slot));
                continue;
            };
            let window = self.backend.slot(slot).sub(in_page, len);
            let filled = match t.source {
                Source::Host => dma_in(
                    &mut self.backend.work,
                    host,
                    id,
                    in_host,
                    window.bytes_mut(dram),
                ),
                Source::Zeroes { .. } => {
                    self.backend.work.bytes_copied += len as u64;
                    window.bytes_mut(dram).fill(0);
                    Ok(())
                }
            };
            if filled.is_err() {
                // The slot may now hold half-copied data: drop it. The allocated page is
                // still programmed (programs of a block must stay in order), with whatever
                // the slot holds, and then left unmapped.
                *status = Status::DATA_TRANSFER_ERROR;
            }
            self.backend.buffer.filled(dram, slot, Sectors::ALL);
            if !status.is_success() {
                self.backend.buffer.detach_slot(dram, slot);
            }
            // The spare says whose data this is; data the host never fully sent is nobody's.
            let owner = status.is_success().then_some(lpn);
            let spare = self.backend.buffer.spare_region(slot);
            self.backend.ftl.stamp(spare.bytes_mut(dram), owner, None);
            let op = crate::hal::FlashOp::Program {
                ppn,
                dram_offset_bytes: self.backend.slot(slot).start,
            };
            self.backend
                .queue
                .push(Tag::new(TagKind::Program, me as u16, i as u16), op);
            pages.set(dram, me, i, PageIo::Programming(slot, ppn));
            progress = true;
        }
        progress
    }
}

/// Copies from the host, counting the bytes.
fn dma_in<H: HostInterface>(
    work: &mut WorkCounters,
    host: &mut H,
    id: CommandId,
    offset: usize,
    dst: &mut [u8],
) -> Result<(), DmaError> {
    work.bytes_copied += dst.len() as u64;
    host.note_work(work);
    host.dma_from_host(id, offset, dst)
}

/// Copies to the host, counting the bytes.
fn dma_out<H: HostInterface>(
    work: &mut WorkCounters,
    host: &mut H,
    id: CommandId,
    offset: usize,
    src: &[u8],
) -> Result<(), DmaError> {
    work.bytes_copied += src.len() as u64;
    host.note_work(work);
    host.dma_to_host(id, offset, src)
}

/// Zero-fills bytes `[from, to)` of command `cmd`'s host buffer.
fn zero<H: HostInterface>(
    host: &mut H,
    cmd: CommandId,
    from: usize,
    to: usize,
) -> Result<(), DmaError> {
    const ZEROS: [u8; 512] = [0; 512];
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZEROS.len());
        host.dma_to_host(cmd, at, &ZEROS[..n])?;
        at += n;
    }
    Ok(())
}

/// The host as a window `[start, start + len)` of a command's result sees it: the result is
/// written whole, and only the window's bytes reach the host buffer, at offset 0 (a windowed
/// NS_COLLECT).
struct Window<'a, H> {
    host: &'a mut H,
    start: usize,
    len: usize,
}

impl<H: HostInterface> HostInterface for Window<'_, H> {
    fn dma_from_host(&mut self, _: CommandId, _: usize, _: &mut [u8]) -> Result<(), DmaError> {
        Err(DmaError)
    }

    fn dma_to_host(&mut self, cmd: CommandId, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        let end = (offset + src.len()).min(self.start + self.len);
        let from = offset.max(self.start);
        if from >= end {
            return Ok(());
        }
        let piece = &src[from - offset..end - offset];
        self.host.dma_to_host(cmd, from - self.start, piece)
    }

    fn complete(&mut self, cmd: CommandId, cqe: CompletionEntry) {
        self.host.complete(cmd, cqe);
    }
}

/// The host as an abandoned command sees it: no buffer to move data to or from, and nobody to
/// take its completion.
struct Abandoned;

impl HostInterface for Abandoned {
    fn dma_from_host(&mut self, _: CommandId, _: usize, _: &mut [u8]) -> Result<(), DmaError> {
        Err(DmaError)
    }

    fn dma_to_host(&mut self, _: CommandId, _: usize, _: &[u8]) -> Result<(), DmaError> {
        Err(DmaError)
    }

    fn complete(&mut self, _: CommandId, _: CompletionEntry) {}
}

/// What a page of a Read or Write needs next.
enum Next {
    /// Its slot is pinned and valid: use it.
    Ready(u32),
    /// Something changed (a read started, the page ended); look again next poll.
    Moved,
    /// Nothing to do until a flash completion or a free slot.
    Wait,
}

/// Brings the sectors `want` of logical page `lpn` of a transfer into the page buffer with
/// their current contents: starts the read when the page is still to do, waits while it loads
/// (and asks again if the read that landed was another reader's), and hands back the pinned
/// slot once they are valid. A failed read ends the page with Unrecovered Read Error, unless
/// `need_old` is false (the caller overwrites the whole page), in which case the slot is handed
/// back all the same. A page of a command that already failed is not started.
fn page_contents(
    backend: &mut Backend,
    dram: &mut [u8],
    lpn: u32,
    (page, want): (&mut PageIo, Sectors),
    status: &mut Status,
    need_old: bool,
) -> Next {
    if let PageIo::Waiting(s) = *page
        && need_old
        && !backend.buffer.is_loading(dram, s)
        && !backend.buffer.is_failed(dram, s)
        && !backend.buffer.has(dram, s, want)
    {
        // The read that landed brought someone else's sectors: ask for ours.
        backend.buffer.unpin(dram, s);
        *page = PageIo::Todo;
    }
    let failed = match *page {
        PageIo::Todo if !status.is_success() => {
            *page = PageIo::Done;
            return Next::Moved;
        }
        PageIo::Todo => match backend.request_page(dram, lpn, want) {
            Acquire::Valid(s) => return Next::Ready(s),
            Acquire::Loading(s) => {
                *page = PageIo::Waiting(s);
                return Next::Moved;
            }
            Acquire::Failed(s) | Acquire::Miss(s, _) => s,
            Acquire::Full => return Next::Wait,
        },
        PageIo::Waiting(s) if backend.buffer.is_loading(dram, s) => return Next::Wait,
        PageIo::Waiting(s) if backend.buffer.is_failed(dram, s) && need_old => s,
        PageIo::Waiting(s) | PageIo::Owned(s) => return Next::Ready(s),
        PageIo::Programming(..) | PageIo::Done => return Next::Wait,
    };
    backend.buffer.unpin(dram, failed);
    *status = Status::UNRECOVERED_READ_ERROR;
    *page = PageIo::Done;
    Next::Moved
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
