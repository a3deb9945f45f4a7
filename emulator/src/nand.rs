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
mod store;
pub mod synthetic;

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
    staged: Vec<(u64, Option<WorkCounters>)>,
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
        self.issue_staged_by(|_| at_ns);
    }

    /// Issues every staged operation, in submission order, at the time `issue_at` gives for the
    /// work the firmware had counted when it submitted it (`None`: it did not say), but never
    /// earlier than the array's current time or than the operation staged before it.
    pub fn issue_staged_by(&mut self, mut issue_at: impl FnMut(Option<&WorkCounters>) -> u64) {
        let mut at_least = self.now_ns;
        self.noted = None;
        for (op_id, work) in std::mem::take(&mut self.staged) {
            let at_ns = issue_at(work.as_ref()).max(at_least);
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

    fn schedule(&mut self, time_ns: u64, kind: EventKind, op_id: u64) {
        self.events.push(time_ns, (kind, op_id));
    }

    fn on_issue(&mut self, t_ns: u64, op_id: u64) {
        let die = self.ops[&op_id].die as usize;
        if self.die_group[die].is_none() {
            if self.die_queue[die].is_empty() {
                self.schedule(t_ns, EventKind::Start, die as u64);
            }
            self.die_queue[die].push_back(op_id);
        } else if self.die_queue[die].is_empty() && self.can_join(die, op_id) {
            self.join(die, op_id);
            if !self.group_is_read(die) {
                self.request_channel(t_ns, op_id, BusPhase::Program);
            }
        } else {
            self.die_queue[die].push_back(op_id);
        }
    }

    fn group_is_read(&self, die: usize) -> bool {
        self.die_group[die].as_ref().is_some_and(|g| g.read)
    }

    /// Whether `op_id` may join the die's group: same kind (read or program), a plane the group
    /// does not use yet, and the group's array phase not started.
    fn can_join(&self, die: usize, op_id: u64) -> bool {
        let Some(g) = &self.die_group[die] else {
            return false;
        };
        let op = &self.ops[&op_id];
        let same_kind = match op.kind {
            OpKind::Read { .. } => g.read,
            OpKind::Program { .. } => {
                !g.read && matches!(self.ops[&g.members[0]].kind, OpKind::Program { .. })
            }
            OpKind::Erase { .. } => false,
        };
        same_kind
            && g.ungranted > 0
            && g.plane_mask & (1 << op.plane) == 0
            && (g.members.len() as u32) < self.planes
    }

    fn join(&mut self, die: usize, op_id: u64) {
        let plane = self.ops[&op_id].plane;
        let g = self.die_group[die].as_mut().expect("a group to join");
        g.members.push(op_id);
        g.plane_mask |= 1 << plane;
        g.remaining += 1;
        if !g.read {
            g.ungranted += 1;
        }
    }

    /// The die is free: the operation starts a group, which the operations queued behind it
    /// join while they can (same kind, other planes, in order); then the group asks the
    /// channel for its first bus phases.
    fn start(&mut self, t_ns: u64, op_id: u64) {
        let op = &self.ops[&op_id];
        let die = op.die as usize;
        let (phase, read) = match op.kind {
            OpKind::Read { .. } => (BusPhase::ReadCommand, true),
            OpKind::Program { .. } => (BusPhase::Program, false),
            OpKind::Erase { .. } => (BusPhase::Erase, false),
        };
        self.die_group[die] = Some(Group {
            members: vec![op_id],
            plane_mask: 1 << op.plane,
            read,
            ungranted: 1,
            remaining: 1,
            started_ns: None,
            data_end_ns: 0,
        });
        while let Some(&next) = self.die_queue[die].front()
            && self.can_join(die, next)
        {
            self.die_queue[die].pop_front();
            self.join(die, next);
        }
        self.request_channel(t_ns, op_id, phase);
        if phase == BusPhase::Program {
            let members = self.die_group[die].as_ref().map(|g| g.members.clone());
            for &m in members.iter().flatten().skip(1) {
                self.request_channel(t_ns, m, BusPhase::Program);
            }
        }
    }

    /// The group's sense finished: every member's data-out asks the channel, in order.
    fn on_sense_done(&mut self, t_ns: u64, op_id: u64) {
        let die = self.ops[&op_id].die as usize;
        let members = self.die_group[die]
            .as_ref()
            .map(|g| g.members.clone())
            .unwrap_or_default();
        for m in members {
            self.request_channel(t_ns, m, BusPhase::ReadData);
        }
    }

    /// Asks `op_id`'s channel for `phase` at `t_ns`: granted at once if the channel is free and
    /// nobody waits, otherwise queued (command phases ahead of data phases).
    fn request_channel(&mut self, t_ns: u64, op_id: u64, phase: BusPhase) {
        let ch = self.geometry.channel_of(self.ops[&op_id].die) as usize;
        let c = &mut self.channels[ch];
        if c.busy_until_ns <= t_ns && c.commands.is_empty() && c.data.is_empty() {
            self.grant(ch, t_ns, op_id, phase);
            return;
        }
        if phase.is_command() {
            c.commands.push_back((op_id, phase));
        } else {
            c.data.push_back((op_id, phase));
        }
        if !c.wake_pending {
            c.wake_pending = true;
            let at = c.busy_until_ns.max(t_ns);
            self.schedule(at, EventKind::ChannelFree, ch as u64);
        }
    }

    /// The channel `ch` came free at `t_ns`: the next waiting phase gets it.
    fn on_channel_free(&mut self, t_ns: u64, ch: usize) {
        let c = &mut self.channels[ch];
        c.wake_pending = false;
        let next = c.commands.pop_front().or_else(|| c.data.pop_front());
        if let Some((op_id, phase)) = next {
            self.grant(ch, t_ns, op_id, phase);
        }
        let c = &mut self.channels[ch];
        if !c.commands.is_empty() || !c.data.is_empty() {
            c.wake_pending = true;
            let at = c.busy_until_ns;
            self.schedule(at, EventKind::ChannelFree, ch as u64);
        }
    }

    /// Gives channel `ch` to `phase` of `op_id` from `s` on, and schedules what follows.
    fn grant(&mut self, ch: usize, s: u64, op_id: u64, phase: BusPhase) {
        let t = self.timing;
        let cmd = t.command_overhead_ns;
        let bytes = self.channel_bytes(op_id);
        let xfer = t.transfer_ns(bytes, self.page_size_bytes as u64);
        let die = self.ops[&op_id].die as usize;
        let g = self.die_group[die]
            .as_mut()
            .expect("a granted phase has a group");
        if phase != BusPhase::ReadData {
            g.started_ns.get_or_insert(s);
            g.ungranted = g.ungranted.saturating_sub(1);
        }
        let n = g.members.len() as u64;
        let busy_ns = match phase {
            BusPhase::ReadCommand => {
                let sense_done = s + n * cmd + t.t_read_ns + self.spike_ns(op_id);
                self.schedule(sense_done, EventKind::SenseDone, op_id);
                n * cmd
            }
            BusPhase::ReadData => {
                let end = (s + xfer).max(self.dram_share(s, bytes));
                self.schedule(end, EventKind::Done, op_id);
                end - s
            }
            BusPhase::Program => {
                let end = (s + cmd + xfer).max(self.dram_share(s + cmd, bytes));
                let g = self.die_group[die]
                    .as_mut()
                    .expect("a granted phase has a group");
                g.data_end_ns = g.data_end_ns.max(end);
                if g.ungranted == 0 {
                    let done = g.data_end_ns + t.t_program_ns;
                    let members = g.members.clone();
                    let done = done + self.spike_ns(members[0]);
                    for m in members {
                        self.schedule(done, EventKind::Done, m);
                    }
                }
                end - s
            }
            BusPhase::Erase => {
                let done = s + cmd + t.t_erase_ns + self.spike_ns(op_id);
                self.schedule(done, EventKind::Done, op_id);
                cmd
            }
        };
        self.channels[ch].busy_until_ns = s + busy_ns;
        if matches!(phase, BusPhase::ReadData | BusPhase::Program) {
            self.stats.channel_bytes[ch] += bytes;
        }
    }

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
        self.staged.push((op_id, self.noted.take()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use sagessd_firmware::hal::{PhysBlock, PhysPage};

    const PAGE: usize = 4096;
    /// A page's DRAM window: its data, then its spare area.
    const WINDOW: usize = PAGE + sagessd_firmware::hal::SPARE_BYTES;

    /// 2 channels × 2 ways × 1 die, 4 blocks of 4 pages, round timings.
    fn array() -> NandArray {
        let geometry = Geometry {
            channels: 2,
            ways: 2,
            dies_per_way: 1,
            blocks_per_die: 4,
            pages_per_block: 4,
            page_size_bytes: PAGE as u32,
        };
        let timing = NandTiming {
            t_read_ns: 50_000,
            t_program_ns: 500_000,
            t_erase_ns: 3_000_000,
            page_transfer_ns: 10_000,
            command_overhead_ns: 1_000,
        };
        NandArray::with_timing(geometry, timing)
    }

    /// First page of block `block` of die `die` (16 pages per die).
    fn ppn(die: u32, page: u32) -> PhysPage {
        PhysPage(die * 16 + page)
    }

    fn run(nand: &mut NandArray, dram: &mut [u8]) -> Vec<(u32, u64, Result<(), FlashError>)> {
        nand.issue_staged(nand.now_ns());
        let mut out = Vec::new();
        while let Some(t) = nand.process_next_event() {
            while let Some(c) = nand.poll(dram) {
                out.push((c.tag, t, c.result));
            }
        }
        out
    }

    fn read(die: u32, page: u32, slot: usize) -> FlashOp {
        read_sectors(die, page, slot, Sectors::ALL)
    }

    fn read_sectors(die: u32, page: u32, slot: usize, sectors: Sectors) -> FlashOp {
        FlashOp::Read {
            ppn: ppn(die, page),
            dram_offset_bytes: slot * WINDOW,
            sectors,
        }
    }

    #[test]
    fn erased_pages_read_ff_and_programs_round_trip() {
        let mut nand = array();
        let mut dram = vec![0u8; 4 * WINDOW];
        dram[..WINDOW].fill(0xAB);
        nand.submit(1, read(0, 0, 1), &dram).unwrap();
        let program = FlashOp::Program {
            ppn: ppn(0, 0),
            dram_offset_bytes: 0,
        };
        nand.submit(2, program, &dram).unwrap();
        nand.submit(3, read(0, 0, 2), &dram).unwrap();
        let done = run(&mut nand, &mut dram);
        assert_eq!(done.iter().map(|d| d.0).collect::<Vec<_>>(), vec![1, 2, 3]);
        // Data and spare both: erased reads 0xFF, a program stores the whole window.
        assert!(dram[WINDOW..2 * WINDOW].iter().all(|b| *b == 0xFF));
        assert!(dram[2 * WINDOW..3 * WINDOW].iter().all(|b| *b == 0xAB));
        assert_eq!(nand.stats().pages_read, 2);
        assert_eq!(nand.stats().pages_programmed, 1);
    }

    #[test]
    fn a_forgotten_page_keeps_its_spare_and_frees_its_data_in_memory_and_in_a_file() {
        let dir = std::env::temp_dir().join(format!("sagessd-forget-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let format = ImageFormat {
            block_size_bytes: 512,
            over_provisioning_percent: 7,
        };
        let file = array().with_file(&dir.join("flash"), format).unwrap();
        for (mut nand, in_memory) in [(array(), true), (file, false)] {
            let mut dram = vec![0u8; 3 * WINDOW];
            dram[..PAGE].fill(0xAB);
            dram[PAGE..WINDOW].fill(0x5C);
            for page in 0..2 {
                let program = FlashOp::Program {
                    ppn: ppn(0, page),
                    dram_offset_bytes: 0,
                };
                nand.submit(page, program, &dram).unwrap();
            }
            run(&mut nand, &mut dram);
            nand.forget(ppn(0, 0));
            nand.submit(3, read(0, 0, 1), &dram).unwrap();
            nand.submit(4, read(0, 1, 2), &dram).unwrap();
            let done = run(&mut nand, &mut dram);
            assert!(done.iter().all(|d| d.2.is_ok()));
            // The forgotten page: zeros, its spare intact; the other: as programmed.
            assert!(dram[WINDOW..WINDOW + PAGE].iter().all(|b| *b == 0));
            assert!(dram[WINDOW + PAGE..2 * WINDOW].iter().all(|b| *b == 0x5C));
            assert_eq!(dram[2 * WINDOW..3 * WINDOW], dram[..WINDOW]);
            assert_eq!(nand.stats().pages_forgotten, 1);
            // In memory, only the other page's data is still held (a file's data is on disk).
            assert_eq!(nand.stored_data_pages(), usize::from(in_memory));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_computed_read_keeps_the_page_it_read_when_an_erase_follows_before_the_poll() {
        let mut nand = array();
        let pages =
            SyntheticPages::new(Arc::new(synthetic::fakes::Offsets), nand.geometry, 0, 4).unwrap();
        let mut expected = vec![0u8; WINDOW];
        assert!(pages.read(ppn(0, 0).0, Sectors::ALL, &mut expected));
        assert!(expected[..PAGE].iter().any(|b| *b != 0xFF));
        nand = nand.with_synthetic(pages);
        let mut dram = vec![0u8; 2 * WINDOW];
        nand.submit(1, read(0, 0, 0), &dram).unwrap();
        nand.submit(
            2,
            FlashOp::Erase {
                block: PhysBlock(0),
            },
            &dram,
        )
        .unwrap();
        nand.submit(3, read(0, 0, 1), &dram).unwrap();
        // Every operation completes before the first poll: the erase has run by then.
        nand.issue_staged(nand.now_ns());
        while nand.process_next_event().is_some() {}
        let mut tags = Vec::new();
        while let Some(c) = nand.poll(&mut dram) {
            assert_eq!(c.result, Ok(()));
            tags.push(c.tag);
        }
        assert_eq!(tags, vec![1, 2, 3]);
        assert_eq!(&dram[..WINDOW], &expected[..], "read before the erase");
        assert!(
            dram[WINDOW..].iter().all(|b| *b == 0xFF),
            "read after the erase"
        );
        assert!(nand.computing.is_empty());
    }

    #[test]
    fn an_erase_cut_in_its_array_phase_leaves_no_computed_page() {
        for seed in [1, 2, 3, 4] {
            let mut nand = array();
            let pages =
                SyntheticPages::new(Arc::new(synthetic::fakes::Offsets), nand.geometry, 0, 4)
                    .unwrap();
            let mut computed = vec![0u8; WINDOW];
            assert!(pages.read(ppn(0, 0).0, Sectors::ALL, &mut computed));
            nand = nand.with_synthetic(pages);
            let mut dram = vec![0u8; WINDOW];
            nand.submit(
                1,
                FlashOp::Erase {
                    block: PhysBlock(0),
                },
                &dram,
            )
            .unwrap();
            nand.issue_staged(nand.now_ns());
            while !nand.die_group[0]
                .as_ref()
                .is_some_and(|g| g.ungranted == 0 && g.started_ns.is_some())
            {
                nand.process_next_event()
                    .expect("the erase reaches its array phase");
            }
            nand.power_cut(seed);
            nand.submit(2, read(0, 0, 0), &dram).unwrap();
            let done = run(&mut nand, &mut dram);
            assert_eq!(done.len(), 1);
            // Erased (0xFF) or torn (a media error), never the page that was there.
            assert!(
                done[0].2.is_err() || dram.iter().all(|b| *b == 0xFF),
                "seed {seed}"
            );
            assert_ne!(dram, computed, "seed {seed}");
        }
    }

    #[test]
    fn a_column_read_moves_only_its_sectors_and_the_spare() {
        let mut nand = array();
        let mut dram = vec![0u8; 3 * WINDOW];
        dram[..WINDOW].fill(0xAB);
        let program = FlashOp::Program {
            ppn: ppn(0, 0),
            dram_offset_bytes: 0,
        };
        nand.submit(1, program, &dram).unwrap();
        run(&mut nand, &mut dram);
        let start = nand.now_ns();
        dram[WINDOW..].fill(0x11);
        // Sectors 1 and 2 (256 B each of a 4 KiB page) into slot 1; the spare alone into slot 2.
        nand.submit(2, read_sectors(0, 0, 1, Sectors(0b110)), &dram)
            .unwrap();
        let done = run(&mut nand, &mut dram);
        let t = *nand.timing();
        // cmd + tR + 2/16 of the page's transfer, on an idle die and channel.
        let two_sectors = (t.page_transfer_ns * 2).div_ceil(16);
        assert_eq!(
            done[0].1 - start,
            t.command_overhead_ns + t.t_read_ns + two_sectors
        );
        let w = &dram[WINDOW..2 * WINDOW];
        assert!(w[..256].iter().all(|b| *b == 0x11), "sector 0 untouched");
        assert!(
            w[256..768].iter().all(|b| *b == 0xAB),
            "sectors 1 and 2 read"
        );
        assert!(
            w[768..PAGE].iter().all(|b| *b == 0x11),
            "sectors 3.. untouched"
        );
        assert!(
            w[PAGE..].iter().all(|b| *b == 0xAB),
            "the spare comes along"
        );
        let before = nand.stats().total_channel_bytes();
        let start = nand.now_ns();
        nand.submit(3, read_sectors(0, 0, 2, Sectors::NONE), &dram)
            .unwrap();
        let done = run(&mut nand, &mut dram);
        let spare_ns = (t.page_transfer_ns * SPARE_BYTES as u64).div_ceil(PAGE as u64);
        assert_eq!(
            done[0].1 - start,
            t.command_overhead_ns + t.t_read_ns + spare_ns
        );
        assert!(
            dram[2 * WINDOW..2 * WINDOW + PAGE]
                .iter()
                .all(|b| *b == 0x11)
        );
        assert!(dram[2 * WINDOW + PAGE..].iter().all(|b| *b == 0xAB));
        assert_eq!(
            nand.stats().total_channel_bytes() - before,
            SPARE_BYTES as u64
        );
    }

    #[test]
    fn program_order_and_erase_are_enforced() {
        let mut nand = array();
        let dram = vec![0u8; WINDOW];
        let program = |page| FlashOp::Program {
            ppn: ppn(1, page),
            dram_offset_bytes: 0,
        };
        nand.submit(1, program(1), &dram).unwrap();
        assert_eq!(
            nand.submit(2, program(0), &dram),
            Err(FlashError::NotErased)
        );
        assert_eq!(
            nand.submit(3, program(1), &dram),
            Err(FlashError::NotErased)
        );
        nand.submit(4, program(3), &dram).unwrap();
        nand.submit(
            5,
            FlashOp::Erase {
                block: PhysBlock(4),
            },
            &dram,
        )
        .unwrap();
        nand.submit(6, program(0), &dram).unwrap();
        let oob = FlashOp::Read {
            ppn: PhysPage(64),
            dram_offset_bytes: 0,
            sectors: Sectors::ALL,
        };
        assert_eq!(nand.submit(7, oob, &dram), Err(FlashError::OutOfRange));
        assert_eq!(
            nand.submit(8, read(0, 0, 1), &dram),
            Err(FlashError::OutOfRange),
            "DRAM window past the arena"
        );
        let erase = FlashOp::Erase {
            block: PhysBlock(16),
        };
        assert_eq!(nand.submit(9, erase, &dram), Err(FlashError::OutOfRange));
        let mut dram = dram;
        let done = run(&mut nand, &mut dram);
        assert_eq!(
            done.iter().map(|d| d.0).collect::<Vec<_>>(),
            vec![1, 4, 5, 6]
        );
        assert_eq!(
            nand.programmed_page_count(),
            1,
            "the erase dropped pages 1 and 3"
        );
    }

    #[test]
    fn reads_on_different_channels_overlap_completely() {
        let mut nand = array();
        let mut dram = vec![0u8; 2 * WINDOW];
        nand.submit(1, read(0, 0, 0), &dram).unwrap(); // die 0, channel 0
        nand.submit(2, read(1, 0, 1), &dram).unwrap(); // die 1, channel 1
        let done = run(&mut nand, &mut dram);
        let lat = nand.timing().read_latency_ns();
        assert_eq!(done[0].1, lat);
        assert_eq!(done[1].1, lat);
    }

    #[test]
    fn reads_on_one_die_serialise() {
        let mut nand = array();
        let mut dram = vec![0u8; 2 * WINDOW];
        nand.submit(1, read(0, 0, 0), &dram).unwrap();
        nand.submit(2, read(0, 1, 1), &dram).unwrap();
        let done = run(&mut nand, &mut dram);
        let lat = nand.timing().read_latency_ns();
        assert_eq!((done[0].0, done[0].1), (1, lat));
        assert_eq!((done[1].0, done[1].1), (2, 2 * lat));
    }

    #[test]
    fn ways_on_one_channel_interleave_but_contend_for_the_bus() {
        let mut nand = array();
        let mut dram = vec![0u8; 2 * WINDOW];
        let t = *nand.timing();
        // Dies 0 and 2 are ways 0 and 1 of channel 0.
        nand.submit(1, read(0, 0, 0), &dram).unwrap();
        nand.submit(2, read(2, 0, 1), &dram).unwrap();
        let done = run(&mut nand, &mut dram);
        // The second command waits for the first one's command cycles, the two senses overlap,
        // and the second data-out waits for the first.
        assert_eq!(done[0].1, t.read_latency_ns());
        let second_sense_end = 2 * t.command_overhead_ns + t.t_read_ns;
        let expect = second_sense_end.max(t.read_latency_ns()) + t.page_transfer_ns;
        assert_eq!(done[1].1, expect);
        assert!(done[1].1 < 2 * t.read_latency_ns(), "senses overlap");
        assert!(done[1].1 > t.read_latency_ns(), "the channel is shared");
        assert_eq!(nand.stats().channel_bytes, vec![2 * PAGE as u64, 0]);
    }

    #[test]
    fn program_holds_the_channel_only_for_its_data_in() {
        let mut nand = array();
        let mut dram = vec![0u8; 2 * WINDOW];
        let t = *nand.timing();
        let program = FlashOp::Program {
            ppn: ppn(0, 0),
            dram_offset_bytes: 0,
        };
        nand.submit(1, program, &dram).unwrap();
        nand.submit(2, read(2, 0, 1), &dram).unwrap(); // same channel, other way
        let done = run(&mut nand, &mut dram);
        assert_eq!(done[0].0, 2, "the read finishes during the program");
        let read_start = t.command_overhead_ns + t.page_transfer_ns;
        assert_eq!(done[0].1, read_start + t.read_latency_ns());
        assert_eq!(done[1].1, t.program_latency_ns());
    }

    #[test]
    fn operations_on_a_die_complete_in_submission_order() {
        let mut nand = array();
        let mut dram = vec![0u8; 2 * WINDOW];
        let program = FlashOp::Program {
            ppn: ppn(3, 0),
            dram_offset_bytes: 0,
        };
        nand.submit(
            10,
            FlashOp::Erase {
                block: PhysBlock(12),
            },
            &dram,
        )
        .unwrap();
        nand.submit(11, read(3, 2, 1), &dram).unwrap();
        nand.submit(12, program, &dram).unwrap();
        nand.submit(13, read(3, 0, 1), &dram).unwrap();
        let done = run(&mut nand, &mut dram);
        let tags: Vec<u32> = done.iter().map(|d| d.0).collect();
        assert_eq!(tags, vec![10, 11, 12, 13]);
        assert!(done.windows(2).all(|w| w[0].1 < w[1].1));
    }

    #[test]
    fn reads_on_different_planes_of_a_die_share_one_sense() {
        let mut nand = array().with_planes(2);
        let mut dram = vec![0u8; 3 * WINDOW];
        let t = *nand.timing();
        // Die 0: pages 0 and 4 are in blocks 0 and 1 (planes 0 and 1), page 8 in block 2
        // (plane 0 again).
        nand.submit(1, read(0, 0, 0), &dram).unwrap();
        nand.submit(2, read(0, 4, 1), &dram).unwrap();
        nand.submit(3, read(0, 8, 2), &dram).unwrap();
        let done = run(&mut nand, &mut dram);
        let sense_end = 2 * t.command_overhead_ns + t.t_read_ns;
        assert_eq!((done[0].0, done[0].1), (1, sense_end + t.page_transfer_ns));
        assert_eq!(
            (done[1].0, done[1].1),
            (2, sense_end + 2 * t.page_transfer_ns)
        );
        // Plane 0 was taken: the third read runs alone after the pair.
        assert_eq!((done[2].0, done[2].1), (3, done[1].1 + t.read_latency_ns()));
        assert!(done[1].1 < 2 * t.read_latency_ns());
    }

    #[test]
    fn programs_on_different_planes_share_one_tprog() {
        let mut nand = array().with_planes(2);
        let mut dram = vec![0u8; WINDOW];
        let t = *nand.timing();
        let program = |page| FlashOp::Program {
            ppn: ppn(0, page),
            dram_offset_bytes: 0,
        };
        nand.submit(1, program(0), &dram).unwrap(); // block 0, plane 0
        nand.submit(2, program(4), &dram).unwrap(); // block 1, plane 1
        nand.submit(3, read(0, 1, 0), &dram).unwrap(); // a read does not join
        let done = run(&mut nand, &mut dram);
        let both = 2 * (t.command_overhead_ns + t.page_transfer_ns) + t.t_program_ns;
        assert_eq!(done[0], (1, both, Ok(())));
        assert_eq!(done[1], (2, both, Ok(())));
        assert_eq!((done[2].0, done[2].1), (3, both + t.read_latency_ns()));
        assert_eq!(nand.stats().die_busy_ns, done[2].1);
    }

    #[test]
    fn one_plane_never_groups() {
        let mut nand = array();
        let mut dram = vec![0u8; 2 * WINDOW];
        nand.submit(1, read(0, 0, 0), &dram).unwrap();
        nand.submit(2, read(0, 4, 1), &dram).unwrap();
        let done = run(&mut nand, &mut dram);
        assert_eq!(done[1].1, 2 * nand.timing().read_latency_ns());
    }

    #[test]
    fn issue_time_and_advance_bound_what_poll_returns() {
        let mut nand = array();
        let mut dram = vec![0u8; WINDOW];
        nand.submit(1, read(0, 0, 0), &dram).unwrap();
        nand.issue_staged(1_000_000);
        let lat = nand.timing().read_latency_ns();
        nand.advance_to(1_000_000 + lat - 1);
        assert!(nand.poll(&mut dram).is_none());
        assert_eq!(nand.pending_ops(), 1);
        nand.advance_to(1_000_000 + lat);
        assert_eq!(nand.poll(&mut dram).map(|c| c.tag), Some(1));
        assert_eq!(nand.pending_ops(), 0);
        assert_eq!(nand.next_event_ns(), None);
    }
}
