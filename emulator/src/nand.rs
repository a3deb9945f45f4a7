//! The NAND flash array: sparse page storage plus a resource-based timing model.
//!
//! [`NandArray`] implements the firmware's [`Flash`] HAL. Its contents are a sparse map from
//! physical page number to page contents (its data, then its spare area: the firmware's
//! out-of-band record); an absent page is erased and reads as `0xFF`, and an erase frees the
//! block's pages. Each block
//! remembers its next programmable page, so programs out of order (or onto programmed pages)
//! fail with [`FlashError::NotErased`], as on real NAND.
//!
//! # Timing
//!
//! Time is a resource model, not a constant latency. Every die and every channel has a
//! "busy until" time; dies are numbered channel-first (die `d` sits on channel
//! `d % channels`, see [`Geometry::channel_of`]). With `cmd` = `command_overhead_ns`,
//! `xfer` = `page_size_bytes × 1000 / channel_rate_mb_s` ns and `t_issue` the time the firmware
//! issued the operation:
//!
//! ```plain
//! die free at max(t_issue, its previous operation's end)         (per-die FIFO)
//! Read:     channel [s, s+cmd)                  command + address cycles, s = channel grant
//!           die     [s+cmd, +tR)                array → page register (sense)
//!           channel [x, x+xfer'), x = channel grant after the sense   data out of the sectors
//!                                               read: xfer' = xfer × sectors / 16 (a column
//!                                               read; the spare alone: xfer × 64 / page size)
//!           done = x + xfer; the die stays busy until done (its page register holds the data)
//! Program:  channel [s, s+cmd+xfer)             command, address, data in
//!           die busy until done = s + cmd + xfer + tPROG
//! Erase:    channel [s, s+cmd)                  die busy until done = s + cmd + tBERS
//! ```
//!
//! With a controller DRAM ([`NandArray::with_dram`], as the emulator builds it) each page's
//! data also crosses DRAM while it crosses the channel (see [`crate::dram`]): a read's
//! data-out books `page_size_bytes` on the DRAM at `x` and ends at
//! `max(x + xfer, dram_done)`; a program's data-in books it at `s + cmd` and ends at
//! `max(s + cmd + xfer, dram_done)`. The channel stays busy until then. With DRAM faster than
//! a channel and idle, nothing changes; a saturated DRAM slows every channel.
//!
//! A channel is one bus: a phase that asks for it while it is busy waits, and when it comes
//! free the next waiting phase gets it — command-only phases (a read's or an erase's command
//! cycles) first, then data phases (read data-out, program command + data-in), each class in
//! request order. Serving short command cycles first is what a NAND controller's channel
//! scheduler does to keep dies sensing while data moves (way interleaving); a plain FIFO would
//! make a die that just finished wait behind every transfer already queued, so all dies of a
//! channel would end up sensing at once while the bus idles. A read's die therefore never waits
//! for more than the transfer in progress before it starts sensing, and the channel idles only
//! when no die has anything for it. Operations on one die run and complete strictly in
//! submission order.
//!
//! ## Planes (multi-plane operation)
//!
//! A die has `P` = `planes_per_die` planes; block `b` is on plane `b % P`. When a die comes
//! free, the operation at the head of its queue starts a *group*, and the operations queued
//! behind it join while they are of the same kind (all reads or all programs), each on a plane
//! the group does not use yet, up to `P` members; an operation issued to the die while its
//! group's array phase has not started (a read group's command phase not yet granted, a
//! program group's data-ins not all granted) and nothing is queued joins the same way. Erases
//! never group. An idle die starts its queue's head only after every issue of the same
//! instant has been queued, so operations issued together group. With `n` members:
//!
//! ```plain
//! Read:     channel [s, s+n·cmd)                command + address cycles of every plane
//!           die     [s+n·cmd, +tR)              one sense for all planes
//!           channel n data-outs of xfer each, requested in member order after the sense
//!           the die is free when the last member's data-out is done
//! Program:  channel n phases [s_i, s_i+cmd+xfer)  each member's command, address, data in
//!           all done = max_i(s_i+cmd+xfer) + tPROG  (one program for all planes)
//! ```
//!
//! So a die that always has `n` reads on distinct planes waiting reads `n` pages per
//! `n·cmd + tR + n·xfer` instead of one per `cmd + tR + xfer`; data transfers still serialise
//! on the channel. The grouping depends only on the order of events, so it is deterministic.
//!
//! # Driving it
//!
//! [`Flash::submit`] checks and *stages* an operation (errors are returned at once, as the HAL
//! requires); the emulator then stamps staged operations with their issue time via
//! [`NandArray::issue_staged`] once it knows when the firmware's call ended. Internal events
//! (issue, sense done, done) are processed in `(time, sequence)` order by
//! [`NandArray::advance_to`]; [`Flash::poll`] returns only operations that finished at or
//! before the time the array was advanced to. Nothing reads a clock: same calls, same timeline.

use rustc_hash::FxHashMap as FastMap;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use sagessd_firmware::hal::{
    Flash, FlashCompletion, FlashError, FlashOp, Geometry, SPARE_BYTES, Sectors,
};
use sagessd_firmware::work::WorkCounters;

use crate::config::NandConfig;
use crate::dram::Dram;
use crate::error::EmulatorError;
use crate::event_queue::EventQueue;

mod faults;
pub mod page_compute;
mod schedule;
mod store;
pub mod synthetic;
#[cfg(test)]
mod tests;

use faults::UncorrectablePages;
pub use faults::{CutReport, NandFaults};
use page_compute::{PageJob, PagePool};
use store::{FileStore, PageState, PageStore};
pub use store::{FlashFileLayout, ImageFormat};
use synthetic::SyntheticPages;

/// The timing parameters of the array, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NandTiming {
    /// Array-to-register read time (tR).
    pub t_read_ns: u64,
    /// Register-to-array program time (tPROG).
    pub t_program_ns: u64,
    /// Block erase time (tBERS).
    pub t_erase_ns: u64,
    /// Channel time to move one page between controller and die.
    pub page_transfer_ns: u64,
    /// Channel time of one operation's command/address/status cycles.
    pub command_overhead_ns: u64,
}

impl NandTiming {
    /// The timing a `[nand]` section describes.
    pub fn from_config(config: &NandConfig) -> Self {
        Self {
            t_read_ns: config.t_read_ns,
            t_program_ns: config.t_program_ns,
            t_erase_ns: config.t_erase_ns,
            page_transfer_ns: config.page_transfer_ns(),
            command_overhead_ns: config.command_overhead_ns,
        }
    }

    /// Latency of one read on an idle die and channel: `cmd + tR + xfer`.
    pub fn read_latency_ns(&self) -> u64 {
        self.command_overhead_ns + self.t_read_ns + self.page_transfer_ns
    }

    /// Channel time of `bytes` of a page of `page_size_bytes`: the page's transfer time, pro
    /// rata, rounded up (a column read of part of a page).
    pub fn transfer_ns(&self, bytes: u64, page_size_bytes: u64) -> u64 {
        (self.page_transfer_ns * bytes).div_ceil(page_size_bytes)
    }

    /// Latency of one program on an idle die and channel: `cmd + xfer + tPROG`.
    pub fn program_latency_ns(&self) -> u64 {
        self.command_overhead_ns + self.page_transfer_ns + self.t_program_ns
    }

    /// Latency of one erase on an idle die and channel: `cmd + tBERS`.
    pub fn erase_latency_ns(&self) -> u64 {
        self.command_overhead_ns + self.t_erase_ns
    }
}

/// What the array has done since it was built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NandStats {
    /// Pages read (completed reads).
    pub pages_read: u64,
    /// Pages programmed (completed programs).
    pub pages_programmed: u64,
    /// Blocks erased (completed erases).
    pub blocks_erased: u64,
    /// Data bytes moved over each channel (reads out plus programs in), indexed by channel.
    pub channel_bytes: Vec<u64>,
    /// Sum over dies of the time each was busy with an operation.
    pub die_busy_ns: u64,
    /// Programs, erases or reads a flash file could not do (each failed as a media error).
    pub store_errors: u64,
    /// Reads the media failed (injected faults: transient, or of an uncorrectable page).
    pub read_failures: u64,
    /// Programs the faults left uncorrectable ([`NandFaults::uncorrectable_ppm`]).
    pub uncorrectable_pages: u64,
    /// Pages whose data was freed when the firmware said they were dead (`Flash::forget`).
    pub pages_forgotten: u64,
    /// Page data the flash DMA moves into the firmware's DRAM (a read's named sectors) and
    /// takes from it (a program's page), counted when the operation is accepted: what a board's
    /// glue keeps coherent with the cores' caches (`[cores] cycles_per_kib_flash_read`,
    /// `cycles_per_kib_flash_program`).
    pub dma: DmaBytes,
}

/// Page data the flash DMA has moved into DRAM (reads: their named sectors) and out of it
/// (programs), cumulative: what a board's glue keeps coherent with the cores' caches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaBytes {
    /// Into DRAM, by reads.
    pub read: u64,
    /// Out of DRAM, by programs.
    pub program: u64,
}

impl DmaBytes {
    /// What was moved since `before`.
    pub fn since(self, before: DmaBytes) -> DmaBytes {
        DmaBytes {
            read: self.read - before.read,
            program: self.program - before.program,
        }
    }
}

impl NandStats {
    /// Data bytes moved over all channels together.
    pub fn total_channel_bytes(&self) -> u64 {
        self.channel_bytes.iter().sum()
    }
}

#[derive(Debug)]
enum OpKind {
    Read {
        ppn: u32,
        dram_offset_bytes: usize,
        sectors: Sectors,
    },
    Program {
        ppn: u32,
        data: Box<[u8]>,
    },
    Erase {
        block: u32,
    },
}

#[derive(Debug)]
struct Op {
    tag: u32,
    die: u32,
    /// The plane of the operation's block (`block % planes`).
    plane: u32,
    kind: OpKind,
}

/// The operations a die runs together: one alone, or a multi-plane read or program of up to
/// one operation per plane, in submission order.
#[derive(Debug)]
struct Group {
    /// The first member (whose events drive the group's command and sense phases).
    members: Vec<u64>,
    /// Planes taken by members.
    plane_mask: u32,
    /// Whether the members are reads (`false`: programs, or a lone erase).
    read: bool,
    /// Channel phases that must still be granted before the array phase starts: for a read
    /// group its one command phase, for a program group each member's data-in. While this is
    /// non-zero, an operation of the same kind on a free plane may join.
    ungranted: usize,
    /// Members not yet done.
    remaining: usize,
    /// When the group's first channel phase was granted.
    started_ns: Option<u64>,
    /// End of the latest program data-in.
    data_end_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventKind {
    /// The firmware's issue of the operation reaches the die's queue.
    Issue,
    /// An idle die (the event's id is the die) starts the head of its queue, after every
    /// issue of the same instant has been queued behind it.
    Start,
    /// A read's sense (tR) finished; its data-out needs the channel.
    SenseDone,
    /// The operation finished; its die is free.
    Done,
    /// A busy channel (the event's id is the channel) came free and someone waits for it.
    ChannelFree,
}

/// A phase of an operation that occupies its channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BusPhase {
    /// A read's command and address cycles.
    ReadCommand,
    /// A read's data out of the page register.
    ReadData,
    /// A program's command, address and data-in cycles.
    Program,
    /// An erase's command and address cycles.
    Erase,
}

impl BusPhase {
    /// Short command-only phases, which a waiting channel serves before data phases.
    fn is_command(self) -> bool {
        matches!(self, Self::ReadCommand | Self::Erase)
    }
}

/// One channel (bus): when it is next free and who waits for it.
#[derive(Clone, Debug, Default)]
struct Channel {
    busy_until_ns: u64,
    /// Waiting command phases (served first), in request order.
    commands: VecDeque<(u64, BusPhase)>,
    /// Waiting data phases, in request order.
    data: VecDeque<(u64, BusPhase)>,
    /// Whether a `ChannelFree` event is scheduled.
    wake_pending: bool,
}

/// A finished operation waiting for [`Flash::poll`]; reads carry the page as it was when the
/// read finished.
#[derive(Debug)]
struct Finished {
    tag: u32,
    /// The media failed the operation (an injected fault).
    failed: bool,
    read: Option<(usize, Sectors, ReadData)>,
}

/// The data of a finished read. A page cannot change between the read's end and the poll
/// that returns it except by an erase of its block, which first turns the read into a
/// snapshot; so the common case copies the page once, from the array into DRAM, at the poll.
#[derive(Debug)]
enum ReadData {
    /// Still the contents of this physical page.
    Page(u32),
    /// A copy taken before an erase (`None` = erased when read).
    Snapshot(Option<Box<[u8]>>),
    /// A computed page's read, filled by a [`PageJob`] started when it was issued.
    Computed(Arc<PageJob>),
}

/// An emulated NAND array: see the [module documentation](self) for the model.
#[derive(Debug)]
pub struct NandArray {
    geometry: Geometry,
    timing: NandTiming,
    page_size_bytes: usize,
    /// Bytes of a page as stored and moved to DRAM: its data, then its spare area.
    window_bytes: usize,
    store: PageStore,
    /// Per block: the lowest page that may still be programmed.
    next_page: Vec<u32>,
    /// Planes per die (1: no multi-plane operation).
    planes: u32,
    die_group: Vec<Option<Group>>,
    die_queue: Vec<VecDeque<u64>>,
    channels: Vec<Channel>,
    ops: FastMap<u64, Op>,
    next_op_id: u64,
    /// Operations submitted and not yet issued, with the work the firmware had counted when it
    /// submitted each (see [`Flash::note_work`]).
    staged: Vec<(u64, Option<WorkCounters>, DmaBytes)>,
    /// The work last told by [`Flash::note_work`], until the next submit takes it.
    noted: Option<WorkCounters>,
    events: EventQueue<(EventKind, u64)>,
    finished: VecDeque<Finished>,
    now_ns: u64,
    stats: NandStats,
    /// The controller DRAM page data streams into (reads) and out of (programs), if modelled.
    dram: Option<Dram>,
    /// Injected faults, if any.
    faults: Option<NandFaults>,
    /// Pages the faults left uncorrectable until their block is erased.
    uncorrectable: UncorrectablePages,
    /// Pages the array computes instead of storing (a synthetic image), if any.
    synthetic: Option<SyntheticPages>,
    /// The threads that compute those pages ahead of their polls (with `synthetic`).
    page_pool: Option<PagePool>,
    /// Reads of computed pages issued and not yet done: operation → its job.
    computing: FastMap<u64, Arc<PageJob>>,
}

impl NandArray {
    /// An erased array of the geometry and timing of `config` (assumed validated).
    pub fn new(config: &NandConfig) -> Self {
        Self::with_timing(config.geometry(), NandTiming::from_config(config))
            .with_planes(config.planes_per_die)
    }

    /// The same array with `planes` planes per die (a power of two dividing the blocks per
    /// die; 0 is taken as 1).
    pub fn with_planes(mut self, planes: u32) -> Self {
        self.planes = planes.max(1);
        self
    }

    /// An erased array with an explicit geometry and timing.
    pub fn with_timing(geometry: Geometry, timing: NandTiming) -> Self {
        let dies = geometry.die_count() as usize;
        Self {
            geometry,
            timing,
            page_size_bytes: geometry.page_size_bytes as usize,
            window_bytes: geometry.window_bytes(),
            store: PageStore::default(),
            next_page: vec![0; geometry.block_count() as usize],
            planes: 1,
            die_group: (0..dies).map(|_| None).collect(),
            die_queue: vec![VecDeque::new(); dies],
            channels: vec![Channel::default(); geometry.channels as usize],
            ops: FastMap::default(),
            next_op_id: 0,
            staged: Vec::new(),
            noted: None,
            events: EventQueue::default(),
            finished: VecDeque::new(),
            now_ns: 0,
            stats: NandStats {
                channel_bytes: vec![0; geometry.channels as usize],
                ..NandStats::default()
            },
            dram: None,
            faults: None,
            uncorrectable: UncorrectablePages::default(),
            synthetic: None,
            page_pool: None,
            computing: FastMap::default(),
        }
    }

    /// The same array with page data moving through `dram`: a read's data-out and a program's
    /// data-in each book one page on it (see the module documentation).
    pub fn with_dram(mut self, dram: Dram) -> Self {
        self.dram = Some(dram);
        self
    }

    /// The controller DRAM, if the array books its page transfers on one.
    pub fn dram(&self) -> Option<&Dram> {
        self.dram.as_ref()
    }

    /// The controller DRAM, for the other transfers that share it (host DMAs).
    pub fn dram_mut(&mut self) -> Option<&mut Dram> {
        self.dram.as_mut()
    }

    /// When the DRAM share of `bytes` of page data, requested at `at_ns`, is done (`at_ns`
    /// without a DRAM).
    fn dram_share(&mut self, at_ns: u64, bytes: u64) -> u64 {
        self.dram
            .as_mut()
            .map_or(at_ns, |d| d.transfer(at_ns, bytes))
    }

    /// Bytes operation `op_id` moves over its channel: a read's sectors (its spare alone when
    /// it names none; the spare is not charged when data moves with it), a program's page.
    fn channel_bytes(&self, op_id: u64) -> u64 {
        match self.ops[&op_id].kind {
            OpKind::Read { sectors, .. } if sectors.is_empty() => SPARE_BYTES as u64,
            OpKind::Read { sectors, .. } => sectors.data_bytes(self.page_size_bytes) as u64,
            _ => self.page_size_bytes as u64,
        }
    }

    /// The timing parameters.
    pub fn timing(&self) -> &NandTiming {
        &self.timing
    }

    /// Counters since construction.
    pub fn stats(&self) -> &NandStats {
        &self.stats
    }

    /// The time the array has been advanced to.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Pages whose data the store holds in memory (forgotten pages keep only their spare; a
    /// flash file holds its pages on disk: 0).
    pub fn stored_data_pages(&self) -> usize {
        self.store.data_count()
    }

    /// Pages currently holding programmed data (computed pages included).
    pub fn programmed_page_count(&self) -> usize {
        self.store.programmed_count() + self.synthetic.as_ref().map_or(0, |s| s.live_count())
    }

    /// The same array with computed pages (see [`synthetic`]): they read as programmed until
    /// their block is erased, and their blocks take programs only past them.
    pub fn with_synthetic(mut self, pages: SyntheticPages) -> Self {
        pages.program_pointers(&mut self.next_page);
        self.synthetic = Some(pages);
        self.page_pool = Some(PagePool::for_this_machine());
        self
    }

    /// The same array kept in the flash file at `path` (created erased if it does not exist):
    /// every program and erase is written through to it as it happens (see `store`).
    pub fn with_file(mut self, path: &Path, format: ImageFormat) -> Result<Self, EmulatorError> {
        self.store = PageStore::File(FileStore::open(path, &self.geometry, format)?);
        self.next_page = self.store.program_pointers(&self.geometry);
        Ok(self)
    }

    /// Makes everything the array has written durable (`fsync` of a flash file).
    pub fn sync(&self) -> std::io::Result<()> {
        self.store.sync()
    }

    /// Waits for the next completion: issues what is staged and processes events until an
    /// operation has finished (or none is left). What a booting firmware calls when it has
    /// nothing to do but wait for the flash ([`sagessd_firmware::Firmware::recover`]).
    pub fn wait_for_completion(&mut self) {
        self.issue_staged(self.now_ns);
        while !self.has_finished() && self.process_next_event().is_some() {}
    }

    /// Operations accepted and not yet returned by [`Flash::poll`] (staged, queued, running or
    /// finished).
    pub fn pending_ops(&self) -> usize {
        self.ops.len() + self.finished.len()
    }

    /// Whether a finished operation is waiting for [`Flash::poll`].
    pub fn has_finished(&self) -> bool {
        !self.finished.is_empty()
    }

    /// Time of the next internal event, if any operation is in flight.
    pub fn next_event_ns(&self) -> Option<u64> {
        self.events.peek_time()
    }

    /// Issues every staged operation at `at_ns` (never earlier than the array's current time).
    pub fn issue_staged(&mut self, at_ns: u64) {
        self.issue_staged_by(|_, _| at_ns);
    }

    /// Page data the flash DMA has moved so far, reads and programs.
    pub fn dma_bytes(&self) -> DmaBytes {
        self.stats.dma
    }

    /// Issues every staged operation, in submission order, at the time `issue_at` gives for the
    /// work the firmware had counted when it submitted it (`None`: it did not say) and the page
    /// data the DMA had moved by then, the operation's own included ([`Self::dma_bytes`]), but
    /// never earlier than the array's current time or than the operation staged before it.
    pub fn issue_staged_by(
        &mut self,
        mut issue_at: impl FnMut(Option<&WorkCounters>, DmaBytes) -> u64,
    ) {
        let mut at_least = self.now_ns;
        self.noted = None;
        for (op_id, work, dma) in std::mem::take(&mut self.staged) {
            let at_ns = issue_at(work.as_ref(), dma).max(at_least);
            at_least = at_ns;
            self.schedule(at_ns, EventKind::Issue, op_id);
        }
    }

    /// Processes every internal event up to and including `t_ns` and moves the array's clock
    /// there. Operations still staged are issued at the array's current time first.
    pub fn advance_to(&mut self, t_ns: u64) {
        self.issue_staged(self.now_ns);
        while self.events.peek_time().is_some_and(|t| t <= t_ns) {
            self.process_next_event();
        }
        self.now_ns = self.now_ns.max(t_ns);
    }

    /// Processes the single earliest internal event (if any) and moves the clock to its time.
    /// Returns that time.
    pub fn process_next_event(&mut self) -> Option<u64> {
        let (time_ns, (kind, op_id)) = self.events.pop()?;
        self.now_ns = self.now_ns.max(time_ns);
        match kind {
            EventKind::Issue => self.on_issue(time_ns, op_id),
            EventKind::Start => {
                let die = op_id as usize;
                if self.die_group[die].is_none()
                    && let Some(next) = self.die_queue[die].pop_front()
                {
                    self.start(time_ns, next);
                }
            }
            EventKind::SenseDone => self.on_sense_done(time_ns, op_id),
            EventKind::Done => self.on_done(time_ns, op_id),
            EventKind::ChannelFree => self.on_channel_free(time_ns, op_id as usize),
        }
        Some(time_ns)
    }

    /// `op_id` ended at `t_ns`: its effect on the pages is applied (or the media failure the
    /// fault model gives it), its completion waits for the firmware's poll, and the die starts
    /// what is queued behind its group once the whole group is done.
    fn on_done(&mut self, t_ns: u64, op_id: u64) {
        let Some(op) = self.ops.remove(&op_id) else {
            return;
        };
        let job = self.computing.remove(&op_id);
        let mut failed = false;
        let read = match op.kind {
            OpKind::Read { ppn, .. }
            | OpKind::Program { ppn, .. }
            | OpKind::Erase { block: ppn }
                if self.fails(op_id, &op.kind) =>
            {
                self.fail_media(&op.kind, ppn);
                failed = true;
                None
            }
            OpKind::Read {
                ppn,
                dram_offset_bytes,
                sectors,
            } => {
                self.stats.pages_read += 1;
                // A job started at the issue holds this read's contents while the page is
                // still the computed one (it stops being so only by an erase, for good).
                let data = match job {
                    Some(job) if self.synthetic.as_ref().is_some_and(|s| s.holds(ppn)) => {
                        ReadData::Computed(job)
                    }
                    _ => ReadData::Page(ppn),
                };
                Some((dram_offset_bytes, sectors, data))
            }
            OpKind::Program { ppn, data } => {
                // A flash file that cannot take the page (a full disk) fails the program, as
                // media would: the firmware writes it elsewhere or fails the command.
                match self.store.program(ppn, data) {
                    Ok(()) => {
                        self.stats.pages_programmed += 1;
                        self.maybe_uncorrectable(op_id, ppn);
                    }
                    Err(_) => {
                        self.stats.store_errors += 1;
                        let _ = self.store.tear(ppn);
                        failed = true;
                    }
                }
                None
            }
            OpKind::Erase { block } => {
                self.stats.blocks_erased += 1;
                let first = block * self.geometry.pages_per_block;
                let pages_per_block = self.geometry.pages_per_block;
                for f in &mut self.finished {
                    if let Some((_, _, data)) = &mut f.read
                        && let ReadData::Page(ppn) = *data
                        && (first..first + pages_per_block).contains(&ppn)
                    {
                        let computed = self.synthetic.as_ref().filter(|s| s.holds(ppn));
                        *data = ReadData::Snapshot(match computed {
                            Some(s) => {
                                let mut page = vec![0u8; self.window_bytes].into_boxed_slice();
                                s.read(ppn, Sectors::ALL, &mut page);
                                Some(page)
                            }
                            None => self.store.copy(ppn, self.window_bytes),
                        });
                    }
                }
                if let Some(s) = &mut self.synthetic {
                    s.erase(block);
                }
                self.uncorrectable.erased(first, pages_per_block);
                if self.store.erase(first, pages_per_block).is_err() {
                    self.stats.store_errors += 1;
                    failed = true;
                }
                None
            }
        };
        self.finished.push_back(Finished {
            tag: op.tag,
            failed,
            read,
        });
        let die = op.die as usize;
        let g = self.die_group[die]
            .as_mut()
            .expect("a running op has a group");
        g.remaining -= 1;
        if g.remaining > 0 {
            return;
        }
        let started = g.started_ns.unwrap_or(t_ns);
        self.stats.die_busy_ns += t_ns - started;
        self.die_group[die] = None;
        if let Some(next) = self.die_queue[die].pop_front() {
            self.start(t_ns, next);
        }
    }

    fn check_dram(&self, offset: usize, dram: &[u8]) -> Result<(), FlashError> {
        match offset.checked_add(self.window_bytes) {
            Some(end) if end <= dram.len() => Ok(()),
            _ => Err(FlashError::OutOfRange),
        }
    }

    fn check_ppn(&self, ppn: u32) -> Result<(), FlashError> {
        if u64::from(ppn) < self.geometry.page_count() {
            Ok(())
        } else {
            Err(FlashError::OutOfRange)
        }
    }
}

impl Flash for NandArray {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn submit(&mut self, tag: u32, op: FlashOp, dram: &[u8]) -> Result<(), FlashError> {
        let g = self.geometry;
        let (die, kind) = match op {
            FlashOp::Read {
                ppn,
                dram_offset_bytes,
                sectors,
            } => {
                self.check_ppn(ppn.0)?;
                self.check_dram(dram_offset_bytes, dram)?;
                (
                    g.die_of(ppn),
                    OpKind::Read {
                        ppn: ppn.0,
                        dram_offset_bytes,
                        sectors,
                    },
                )
            }
            FlashOp::Program {
                ppn,
                dram_offset_bytes,
            } => {
                self.check_ppn(ppn.0)?;
                self.check_dram(dram_offset_bytes, dram)?;
                let block = (ppn.0 / g.pages_per_block) as usize;
                let page = ppn.0 % g.pages_per_block;
                if page < self.next_page[block] {
                    return Err(FlashError::NotErased);
                }
                self.next_page[block] = page + 1;
                let data = dram[dram_offset_bytes..dram_offset_bytes + self.window_bytes].into();
                (g.die_of(ppn), OpKind::Program { ppn: ppn.0, data })
            }
            FlashOp::Erase { block } => {
                if block.0 >= g.block_count() {
                    return Err(FlashError::OutOfRange);
                }
                self.next_page[block.0 as usize] = 0;
                (block.0 / g.blocks_per_die, OpKind::Erase { block: block.0 })
            }
        };
        let block = match &kind {
            OpKind::Read { ppn, .. } | OpKind::Program { ppn, .. } => ppn / g.pages_per_block,
            OpKind::Erase { block } => *block,
        };
        let plane = block % self.planes;
        let op_id = self.next_op_id;
        self.next_op_id += 1;
        match &kind {
            OpKind::Read { sectors, .. } => {
                self.stats.dma.read += sectors.data_bytes(self.page_size_bytes) as u64
            }
            OpKind::Program { .. } => self.stats.dma.program += self.page_size_bytes as u64,
            OpKind::Erase { .. } => {}
        }
        if let (OpKind::Read { ppn, sectors, .. }, Some(s), Some(pool)) =
            (&kind, &self.synthetic, &self.page_pool)
            && let Some(read) = s.page_read(*ppn, *sectors)
        {
            self.computing
                .insert(op_id, pool.start(read, self.window_bytes));
        }
        self.ops.insert(
            op_id,
            Op {
                tag,
                die,
                plane,
                kind,
            },
        );
        self.staged.push((op_id, self.noted.take(), self.stats.dma));
        Ok(())
    }

    fn note_work(&mut self, work: &WorkCounters) {
        self.noted = Some(*work);
    }

    fn forget(&mut self, ppn: sagessd_firmware::hal::PhysPage) {
        // Computed pages take no memory.
        if self.synthetic.as_ref().is_some_and(|s| s.holds(ppn.0)) {
            return;
        }
        // A read that has finished but not been polled yet still gets the page as it was.
        for f in &mut self.finished {
            if let Some((_, _, data)) = &mut f.read
                && matches!(data, ReadData::Page(p) if *p == ppn.0)
            {
                *data = ReadData::Snapshot(self.store.copy(ppn.0, self.window_bytes));
            }
        }
        match self.store.forget(ppn.0) {
            Ok(true) => self.stats.pages_forgotten += 1,
            Ok(false) => {}
            Err(_) => self.stats.store_errors += 1,
        }
    }

    fn poll(&mut self, dram: &mut [u8]) -> Option<FlashCompletion> {
        let done = self.finished.pop_front()?;
        let mut result = if done.failed {
            Err(FlashError::Media)
        } else {
            Ok(())
        };
        if let Some((offset, sectors, data)) = done.read
            && result.is_ok()
        {
            let page_size = self.page_size_bytes;
            result = match (dram.get_mut(offset..offset + self.window_bytes), data) {
                (None, _) => Err(FlashError::OutOfRange),
                (Some(window), ReadData::Page(ppn)) => {
                    match self.synthetic.as_ref().filter(|s| s.holds(ppn)) {
                        // A computed page is torn only if the store says so.
                        Some(_) if self.store.state(ppn) == PageState::Torn => {
                            Err(FlashError::Media)
                        }
                        Some(s) => {
                            s.read(ppn, sectors, window);
                            Ok(())
                        }
                        None => match self.store.read(ppn, sectors, window) {
                            Ok(PageState::Torn) => Err(FlashError::Media),
                            Ok(_) => Ok(()),
                            Err(_) => {
                                self.stats.store_errors += 1;
                                Err(FlashError::Media)
                            }
                        },
                    }
                }
                (Some(window), ReadData::Computed(job)) => {
                    let pool = self.page_pool.as_ref().expect("computed reads have a pool");
                    sectors.copy_window(page_size, &pool.take(&job), window);
                    Ok(())
                }
                (Some(window), ReadData::Snapshot(page)) => {
                    match page {
                        Some(page) => sectors.copy_window(page_size, &page, window),
                        None => sectors.copy_window(page_size, &vec![0xFF; window.len()], window),
                    }
                    Ok(())
                }
            };
        }
        Some(FlashCompletion {
            tag: done.tag,
            result,
        })
    }
}
