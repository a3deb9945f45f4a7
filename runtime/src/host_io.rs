//! Host sampling over the host I/O stack model: mmap (page cache + faults + readahead), direct
//! I/O (SmartSAGE's software-only path), io_uring-style asynchronous reads and in-storage
//! sampling through passthrough ioctls, each a [`Sampler`] over an emulated device, with one
//! host worker or several contending for the device ([`HostIoSampler::run_workers`]).
//!
//! The host's CPU costs come from [`HostStackConfig`] (see [`sagessd_emulator::host_stack`] for
//! the formulas and their sources) and are charged to the emulated device's virtual clock with
//! `Ssd::advance_to_ns`; every read is a real NVMe Read submitted through the [`Device`], so the
//! device, its flash and its PCIe link are timed by the emulator. All three modes produce exactly
//! the subgraph bytes of the in-memory reference (they share [`SubgraphBuilder`]).
//!
//! What each mode charges, per layer of a minibatch (`C` = the host stack configuration):
//!
//! * **memory** ([`SamplerKind::Memory`]): the graph is read into host memory once, before the run
//!   (untimed: the in-memory baseline assumes memory holds it); every entry is then a load from
//!   DRAM, charged like every mode's loads below, and no I/O is made.
//! * **mmap** ([`SamplerKind::Mmap`]): every 8-byte `indptr` entry and every `indices` entry is a
//!   load from the mapped graph, in the order the sampler needs them. A load of a mapped, cached
//!   page costs nothing in the kernel; of a cached page not yet mapped, a minor fault
//!   (`C.minor_fault_ns`); of a page not cached, a major fault: `C.major_fault_ns +
//!   C.submit_ns`, one synchronous Read, then `C.complete_ns + C.context_switch_ns`. The Read
//!   covers Linux's fault read-around (`do_sync_mmap_readahead`, see
//!   [`sagessd_emulator::host_stack::FileReadahead::on_major_fault`]): `C.readahead_max_pages`
//!   pages centred on the fault, clipped to the file (`indptr` and `indices` are separate
//!   files, each with its own `mmap_miss` state), of which the run of uncached pages containing
//!   the fault is read. One I/O at a time per worker: the faulting thread blocks.
//! * **direct** ([`SamplerKind::Direct`]): per call, the LBAs holding the needed entries (the
//!   device's LBA size, 512 B or 4 KiB), deduplicated and merged into runs, each run one
//!   `pread(O_DIRECT)` into a user scratchpad (split at the device's maximum transfer size):
//!   `C.syscall_ns + C.submit_ns` before, `C.complete_ns + C.context_switch_ns` after; queue
//!   depth 1. The entries are then read from the scratchpad.
//! * **uring** ([`SamplerKind::Uring`]): the same reads, in batches of `C.uring_queue_depth`; per
//!   batch one `io_uring_enter` (`C.syscall_ns`), `C.uring_sqe_ns + C.submit_ns` per SQE (SQE
//!   *i* reaches the device when its share is done), completions handled in completion order at
//!   `C.complete_ns` each, then `C.context_switch_ns` to wake the thread and `C.uring_cqe_ns`
//!   per CQE reaped. Entry loads as for direct.
//!
//! * In every host mode (memory, mmap, direct, uring), loads from host memory cost `C.memory_access_ns`
//!   per 64-byte cache line (a load on the line the previous load touched is free:
//!   `indptr[v]` and `indptr[v + 1]` usually share one, as do a node's sampled neighbours), and
//!   the host's own sampling work costs `C.node_ns` per destination node (charged when its edge
//!   range is known) and `C.edge_sampled_ns` per sampled neighbour (charged when the neighbours
//!   are loaded): [`HostIoStats::compute_ns`].
//! * **isp** ([`SamplerKind::Isp`]): no host sampling compute or graph loads (the device
//!   samples): `NS_SUBMIT` then `NS_COLLECT`, each one synchronous
//!   passthrough ioctl: `C.syscall_ns + C.submit_ns` before, `C.complete_ns +
//!   C.context_switch_ns` after. With more workers than the device has sampling slots, an
//!   `NS_SUBMIT` the device refuses with "no free slot" leaves its worker asleep until another
//!   worker collects a job (a driver's wait on the device's slots; the refused ioctl is
//!   charged), then it submits again: [`HostIoStats::slot_waits`].
//! * **isp-ids** ([`SamplerKind::IspIds`]): as isp, the device returning sampled ids; the host
//!   builds the subgraph from them at `C.edge_sampled_ns` per sampled neighbour
//!   ([`HostStackConfig::host_build_ns`]), charged as sampling compute.
//!
//! # Workers
//!
//! Each mode is written once, as `async` code over a worker handle whose only suspension points
//! are an NVMe submission (the worker waits for its turn at its clock) and a wait for a
//! completion (or, mmap, for a page another worker is reading). A single-threaded executor
//! drives the workers in virtual time: the runnable worker with the smallest clock `t` runs until
//! its next suspension, after every device completion the host learns of by `t` has been reaped
//! (`Device::wait_next_until`, which simulates up to `t` and no further) and has woken its worker;
//! when none is runnable, the device's next completion is reaped. So every command reaches the
//! device at its worker's clock: [`HostIoStats::submit_lag_ns`], the total delay, stays 0 and is
//! kept as a check. One worker is exactly the synchronous model above.
//!
//! mmap adds a yield point before every page-cache operation (each access and each insertion
//! after a read): a worker whose clock is ahead of another runnable worker's, or that runs while
//! another worker waits on the device (whose completion may come earlier), hands control back
//! first. So the shared LRU order, the pending pages and the read-around state are touched in
//! virtual-time order; [`HostIoStats::cache_order_violations`] counts operations made earlier
//! than the one before them and stays 0 (a test runs 2 and 3 workers on a thrashing cache).
//!
//! [`HostIoStats`] counts I/Os, bytes read versus bytes of entries used, page-cache accesses,
//! faults and evictions, host CPU time charged, modelled time, and a hash of every completion
//! time (for determinism checks).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use rustc_hash::{FxHashMap, FxHashSet};

use sagessd_abi::graph::{GraphDescriptor, LbaRange};
use sagessd_abi::nvme::{SubmissionEntry, VendorStatus, io_opcode};
use sagessd_emulator::host_stack::{
    Access, CACHE_LINE_BYTES, FileReadahead, HostStackConfig, MmapWorkers, PAGE_SIZE_BYTES,
    PageCache, PageCacheStats, Window, cache_lines_touched, fault_around_window,
};
use sagessd_host_driver::{
    Completion, DEFAULT_COLLECT_CAP_BYTES, Device, DriverError, IO_QUEUE, LocalTransport,
    NAMESPACE_ID,
};

use crate::minibatch::Request;
use crate::registry::SamplerKind;

use crate::sampler::host_build::HostBuilder;
use crate::sampler::{
    EdgeRange, FNV_OFFSET, SampledSubgraph, Sampler, SamplerError, SamplerStats, SubgraphBuilder,
    fnv1a,
};
pub use graph_bytes::GraphBytes;

/// Refuses a sampler the modelled host does not run ([`SamplerKind::modelled_host`]: AGNES's
/// two, which `sagessd experiment agnes` prices), with the message every caller shows.
pub fn check_modelled(kind: SamplerKind) -> Result<(), SamplerError> {
    if kind.modelled_host() {
        return Ok(());
    }
    Err(SamplerError::InvalidRequest(format!(
        "the modelled host does not run {kind} (`sagessd experiment agnes` prices AGNES)"
    )))
}

/// Minibatches per in-storage hyperbatch unless [`HostIoSampler::set_hyperbatch`] says otherwise.
pub const DEFAULT_HYPERBATCH: usize = 8;

/// What a [`HostIoSampler`] did, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HostIoStats {
    /// NVMe Reads issued.
    pub ios: u64,
    /// Bytes those Reads moved.
    pub bytes_read: u64,
    /// Bytes of graph entries the sampler consumed (8 per `indptr` entry, the id width per
    /// neighbour).
    pub bytes_used: u64,
    /// System calls made (pread, io_uring_enter, passthrough ioctl); page faults are not
    /// system calls.
    pub syscalls: u64,
    /// Page-cache counters (mmap only; zero otherwise).
    pub page_cache: PageCacheStats,
    /// Host CPU time charged by the host stack model (all workers together).
    pub host_cpu_ns: u64,
    /// Modelled time of the runs: the virtual clock from each run's start to the end of its
    /// last worker (for one worker: the sum of its minibatches' times).
    pub modelled_time_ns: u64,
    /// FNV-1a 64 over every completion time, in the order the host handled them.
    pub timeline_hash: u64,
    /// Times a worker found a page another worker was reading and slept until it arrived
    /// (mmap, several workers).
    pub page_waits: u64,
    /// Times the device refused an `NS_SUBMIT` for want of a free sampling slot and its
    /// worker slept until another worker collected a job (ISP, more workers than slots).
    pub slot_waits: u64,
    /// In-storage hyperbatches sampled again as two halves because their subgraphs did not fit
    /// the device's result buffers.
    pub hyperbatch_splits: u64,
    /// Submission lag: total nanoseconds by which commands reached the device later than
    /// their worker's clock (see the module documentation; always 0 with one worker).
    pub submit_lag_ns: u64,
    /// Host sampling compute charged (`node_ns` per destination, `edge_sampled_ns` per sampled
    /// neighbour; with sampled ids, the host's build of the subgraph), included in
    /// `host_cpu_ns`; 0 for ISP that returns subgraphs.
    pub compute_ns: u64,
    /// Cache lines of host memory loaded (each charged `memory_access_ns`).
    pub memory_lines: u64,
    /// mmap: page-cache operations (accesses, insertions) made at an earlier virtual time than
    /// the one before them. A check, like `submit_lag_ns`: always 0.
    pub cache_order_violations: u64,
}

impl HostIoStats {
    /// Share of read bytes the sampler used (0 with nothing read).
    pub fn read_efficiency(&self) -> f64 {
        if self.bytes_read == 0 {
            0.0
        } else {
            self.bytes_used as f64 / self.bytes_read as f64
        }
    }
}

/// The region of the graph a load falls in: `indptr` and `indices` are two files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Region {
    Indptr = 0,
    Indices = 1,
}

/// The mmap mode's kernel state, shared by every worker: the page cache, its pages' bytes, one
/// fault readahead state per file, the pages being read, and the reads nobody waits for.
#[derive(Debug)]
struct MmapState {
    cache: PageCache,
    /// The cached pages' bytes, when they are kept ([`GraphBytes::Kept`]).
    pages: FxHashMap<u64, Vec<u8>>,
    /// A read nobody waited for that returned bytes not the graph's: the run's error.
    corrupt: Option<SamplerError>,
    /// Each mapping's readahead state of the two files (indptr, indices): one mapping for
    /// threads, one per worker for processes ([`MmapState::mapping`]).
    readahead: Vec<[FileReadahead; 2]>,
    /// How the workers map the files.
    workers: MmapWorkers,
    /// A new mapping's readahead state.
    fresh: FileReadahead,
    /// Pages being read (locked, not yet up to date).
    pending: FxHashSet<u64>,
    /// Reads in flight that no worker waits for (the rest of a read-around window, an
    /// asynchronous readahead): command → (first page, pages, the page to mark).
    background: HashMap<u16, (u64, u64, Option<u64>)>,
    /// Virtual time of the latest page-cache operation (for `cache_order_violations`).
    last_touch_ns: u64,
}

impl MmapState {
    /// The mapping worker `w` faults through: the process's one (0) for threads, its own for
    /// processes.
    fn mapping(&self, w: usize) -> usize {
        match self.workers {
            MmapWorkers::Threads => 0,
            MmapWorkers::Processes => w,
        }
    }

    /// The readahead state of `mapping`'s view of file `region`.
    fn readahead(&mut self, mapping: usize, region: Region) -> &mut FileReadahead {
        if self.readahead.len() <= mapping {
            self.readahead.resize(mapping + 1, [self.fresh; 2]);
        }
        &mut self.readahead[mapping][region as usize]
    }

    /// Inserts the pages a read brought (`data`, from page `first`), the one `mark` names
    /// with the readahead mark, and drops their pending state. `last` (a faulting page, which
    /// its fault holds until it is mapped) goes in after the others, so that none of them
    /// evicts it. Each page is checked against `bytes` first, and kept only if `bytes` says so.
    fn insert_read(
        &mut self,
        bytes: &GraphBytes,
        first: u64,
        data: &[u8],
        mark: Option<u64>,
        last: Option<u64>,
    ) -> Result<(), SamplerError> {
        let n = (data.len() as u64).div_ceil(PAGE_SIZE_BYTES);
        for (i, page) in data.chunks(PAGE_SIZE_BYTES as usize).enumerate() {
            bytes.check((first + i as u64) * PAGE_SIZE_BYTES, page)?;
        }
        let order = (first..first + n)
            .filter(|&p| Some(p) != last)
            .chain(last.filter(|p| (first..first + n).contains(p)));
        for p in order {
            if !self.cache.contains(p) {
                let evicted = self.cache.insert(p, mark == Some(p));
                if bytes.kept() {
                    // The evicted page's buffer holds the new one (no allocation per page).
                    let mut buffer = evicted
                        .and_then(|old| self.pages.remove(&old))
                        .unwrap_or_default();
                    let at = ((p - first) * PAGE_SIZE_BYTES) as usize;
                    let end = (at + PAGE_SIZE_BYTES as usize).min(data.len());
                    buffer.clear();
                    buffer.extend_from_slice(&data[at..end]);
                    self.pages.insert(p, buffer);
                }
            }
            self.pending.remove(&p);
        }
        Ok(())
    }
}

/// What a worker is doing, for the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WorkerState {
    /// Wants the CPU at its clock.
    Runnable,
    /// Blocked until command `cid` completes.
    Waiting(u16),
    /// Blocked until another worker's read of `page` is in the page cache.
    WaitingPage(u64),
    /// Blocked until another worker collects an in-storage sampling job (the device had no
    /// free sampling slot for this worker's).
    WaitingSlot,
    /// Done with its minibatches.
    Finished,
}

/// Everything the workers share: one device, one kernel, one set of counters; and the
/// scheduler's view of each worker.
#[derive(Debug)]
struct Shared {
    device: Device<LocalTransport>,
    graph: GraphDescriptor,
    mode: SamplerKind,
    host: HostStackConfig,
    mmap: Option<MmapState>,
    /// Memory mode: `indptr` and `indices` as read from the device before the run (kept bytes
    /// only: [`GraphBytes`]).
    resident: Option<[Vec<u8>; 2]>,
    /// Where the page cache's and the resident copy's bytes come from.
    bytes: GraphBytes,
    stats: HostIoStats,
    clocks: Vec<u64>,
    states: Vec<WorkerState>,
    /// Completions reaped and not yet claimed by their worker.
    done: HashMap<u16, Completion>,
    /// ISP: the run's sampling slots as the host sees them ([`Worker::isp_sample`]).
    slots: SlotQueue,
    /// ISP with sampled ids: the host's builder of subgraphs from them (its node index made at
    /// its first build, so that the other modes allocate none).
    builder: HostBuilder,
}

/// The host's side of the device's sampling slots in ISP mode: workers the device refused wait
/// in arrival order, and a slot freed by a collect is handed to the first of them, so that no
/// worker submits ahead of one that has waited longer.
#[derive(Debug, Default)]
struct SlotQueue {
    /// Workers waiting for a slot, first come first.
    waiting: std::collections::VecDeque<usize>,
    /// Workers handed a freed slot and not yet submitted into it.
    handed: HashSet<usize>,
    /// Jobs this run's workers hold on the device (submitted, not yet collected).
    held: usize,
    /// Slots freed so far: a refusal that raced a collect sees it changed and submits again.
    freed: u64,
}

/// A future that is pending exactly once: the point where a worker hands control back to the
/// scheduler.
struct Park(bool);

impl Future for Park {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// One worker's handle on the shared state.
struct Worker {
    sh: Rc<RefCell<Shared>>,
    w: usize,
}

fn command_error(opcode: u8, c: &Completion) -> SamplerError {
    let status = c.cqe.status();
    DriverError::Command {
        opcode,
        admin: false,
        status,
        vendor: VendorStatus::from_status(status),
        result: c.cqe.result.get(),
    }
    .into()
}

impl Worker {
    fn clock(&self) -> u64 {
        self.sh.borrow().clocks[self.w]
    }

    /// Charges `ns` of host CPU time to this worker.
    fn charge(&self, ns: u64) {
        let mut s = self.sh.borrow_mut();
        s.clocks[self.w] += ns;
        s.stats.host_cpu_ns += ns;
    }

    /// A yield point before touching shared kernel state (the mmap page cache): if another
    /// worker could act earlier — a runnable one with a smaller clock, or one blocked on a
    /// command the device may complete before this worker's clock — or a readahead in flight
    /// may land before it, hand control back to the scheduler, which delivers what completes
    /// first and runs the earliest worker. With one worker and no readahead in flight it never
    /// yields.
    async fn yield_to_earlier(&self) {
        let must = {
            let s = self.sh.borrow();
            let me = (s.clocks[self.w], self.w);
            let readahead = s.mmap.as_ref().is_some_and(|m| !m.background.is_empty());
            readahead
                || s.states.iter().enumerate().any(|(w, st)| {
                    w != self.w
                        && match st {
                            WorkerState::Runnable => (s.clocks[w], w) < me,
                            WorkerState::Waiting(_) => true,
                            WorkerState::WaitingPage(_)
                            | WorkerState::WaitingSlot
                            | WorkerState::Finished => false,
                        }
                })
        };
        if must {
            self.sh.borrow_mut().states[self.w] = WorkerState::Runnable;
            Park(false).await;
        }
    }

    /// Records a page-cache operation at this worker's clock (the time-order check).
    fn touch_cache(&self) {
        let mut s = self.sh.borrow_mut();
        let now = s.clocks[self.w];
        let state = s.mmap.as_mut().expect("mmap mode");
        let late = now < state.last_touch_ns;
        state.last_touch_ns = state.last_touch_ns.max(now);
        s.stats.cache_order_violations += u64::from(late);
    }

    /// Charges `lines` cache-line loads from host memory.
    fn charge_lines(&self, lines: u64) {
        let ns = lines * self.sh.borrow().host.memory_access_ns;
        self.sh.borrow_mut().stats.memory_lines += lines;
        self.charge(ns);
    }

    /// Charges `ns` of host sampling compute.
    fn charge_compute(&self, ns: u64) {
        self.sh.borrow_mut().stats.compute_ns += ns;
        self.charge(ns);
    }

    fn note_completion(&self, c: &Completion) {
        let t = c.completed_at_ns.unwrap_or(0);
        let mut s = self.sh.borrow_mut();
        s.stats.timeline_hash = fnv1a(s.stats.timeline_hash, &t.to_le_bytes());
    }

    /// Submits a command at this worker's clock, once every worker with an earlier clock has
    /// had its turn.
    async fn submit(&self, sqe: SubmissionEntry, data: Vec<u8>) -> Result<u16, SamplerError> {
        self.sh.borrow_mut().states[self.w] = WorkerState::Runnable;
        Park(false).await;
        let mut s = self.sh.borrow_mut();
        let t = s.clocks[self.w];
        let ssd = s.device.transport_mut().ssd_mut();
        let lag = ssd.now_ns().saturating_sub(t);
        ssd.advance_to_ns(t);
        s.stats.submit_lag_ns += lag;
        Ok(s.device.submit(IO_QUEUE, sqe, data)?)
    }

    /// Blocks until command `cid` completes; the clock moves to its completion.
    async fn wait(&self, cid: u16) -> Result<Completion, SamplerError> {
        let ready = self.sh.borrow().done.contains_key(&cid);
        if !ready {
            self.sh.borrow_mut().states[self.w] = WorkerState::Waiting(cid);
            Park(false).await;
        }
        let mut s = self.sh.borrow_mut();
        let c = s
            .done
            .remove(&cid)
            .ok_or_else(|| SamplerError::InvalidRequest(format!("woken without command {cid}")))?;
        let t = c.completed_at_ns.unwrap_or(0);
        let clock = &mut s.clocks[self.w];
        *clock = (*clock).max(t);
        Ok(c)
    }

    fn block_size(&self) -> u64 {
        u64::from(self.sh.borrow().device.info().block_size_bytes)
    }

    fn read_command(slba: u64, blocks: u32) -> SubmissionEntry {
        SubmissionEntry::read_write(false, 0, NAMESPACE_ID, slba, blocks)
    }

    /// One blocking Read of `blocks` blocks at `slba`: `before_ns` of host time, the I/O, then
    /// `after_ns`.
    async fn read_blocking(
        &self,
        slba: u64,
        blocks: u32,
        before_ns: u64,
        after_ns: u64,
    ) -> Result<Vec<u8>, SamplerError> {
        let len = blocks as usize * self.block_size() as usize;
        self.charge(before_ns);
        let cid = self
            .submit(Self::read_command(slba, blocks), vec![0; len])
            .await?;
        let c = self.wait(cid).await?;
        self.note_completion(&c);
        if !c.cqe.status().is_success() {
            return Err(command_error(io_opcode::READ, &c));
        }
        {
            let mut s = self.sh.borrow_mut();
            s.stats.ios += 1;
            s.stats.bytes_read += len as u64;
        }
        self.charge(after_ns);
        let mut data = c.data;
        if data.len() < len {
            return Err(SamplerError::GraphCorrupt(format!(
                "a {len}-byte read returned {} bytes",
                data.len()
            )));
        }
        data.truncate(len);
        Ok(data)
    }

    /// Reads `runs` (split at the maximum transfer size) the direct or async way; returns one
    /// buffer per run.
    async fn read_runs(&self, runs: &[LbaRange]) -> Result<Vec<Vec<u8>>, SamplerError> {
        let bs = self.block_size();
        let (max_blocks, mode, host) = {
            let s = self.sh.borrow();
            let m = u64::from(s.device.info().max_transfer_blocks()).max(1);
            (m, s.mode, s.host.clone())
        };
        let mut out: Vec<Vec<u8>> = runs
            .iter()
            .map(|r| vec![0u8; (r.block_count * bs) as usize])
            .collect();
        // (run, byte offset in its buffer, slba, blocks)
        let mut chunks: Vec<(usize, usize, u64, u32)> = Vec::new();
        for (i, r) in runs.iter().enumerate() {
            let mut done = 0;
            while done < r.block_count {
                let n = (r.block_count - done).min(max_blocks);
                chunks.push((i, (done * bs) as usize, r.slba + done, n as u32));
                done += n;
            }
        }
        if mode == SamplerKind::Uring {
            let qd = host.uring_queue_depth as usize;
            for batch in chunks.chunks(qd) {
                let datas = self.read_batch(batch).await?;
                for (&(r, off, _, _), d) in batch.iter().zip(datas) {
                    out[r][off..off + d.len()].copy_from_slice(&d);
                }
            }
        } else {
            for &(r, off, slba, n) in &chunks {
                self.sh.borrow_mut().stats.syscalls += 1;
                let d = self
                    .read_blocking(
                        slba,
                        n,
                        host.sync_read_submit_ns(),
                        host.blocking_completion_ns(),
                    )
                    .await?;
                out[r][off..off + d.len()].copy_from_slice(&d);
            }
        }
        Ok(out)
    }

    /// One io_uring batch: one `io_uring_enter` submits every chunk and waits for all of them.
    async fn read_batch(
        &self,
        batch: &[(usize, usize, u64, u32)],
    ) -> Result<Vec<Vec<u8>>, SamplerError> {
        let bs = self.block_size() as usize;
        let h = self.sh.borrow().host.clone();
        self.sh.borrow_mut().stats.syscalls += 1;
        self.charge(h.syscall_ns);
        let mut cids = Vec::with_capacity(batch.len());
        let mut first_err: Option<SamplerError> = None;
        for &(_, _, slba, n) in batch {
            self.charge(h.uring_per_sqe_ns());
            match self
                .submit(Self::read_command(slba, n), vec![0; n as usize * bs])
                .await
            {
                Ok(cid) => cids.push(cid),
                Err(e) => {
                    first_err = Some(e);
                    break;
                }
            }
        }
        let submitted_end = self.clock();
        // Drain every submitted command, even after a failure.
        let mut done: Vec<(usize, Completion)> = Vec::with_capacity(cids.len());
        for (i, &cid) in cids.iter().enumerate() {
            match self.wait(cid).await {
                Ok(c) => done.push((i, c)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        // Interrupts handled one after another, in completion order.
        done.sort_by_key(|(i, c)| (c.completed_at_ns.unwrap_or(0), *i));
        let mut handled = submitted_end;
        for (_, c) in &done {
            handled = handled.max(c.completed_at_ns.unwrap_or(0)) + h.complete_ns;
        }
        for (_, c) in &done {
            self.note_completion(c);
        }
        let n = done.len() as u64;
        let end = handled + h.context_switch_ns + n * h.uring_cqe_ns;
        {
            // Host CPU busy: the handlers, the wake-up and the reaping (the waits are idle).
            let mut s = self.sh.borrow_mut();
            s.stats.host_cpu_ns += n * h.complete_ns + h.context_switch_ns + n * h.uring_cqe_ns;
            let clock = &mut s.clocks[self.w];
            *clock = (*clock).max(end);
        }
        done.sort_by_key(|(i, _)| *i);
        let mut out = Vec::with_capacity(done.len());
        for ((_, c), &(_, _, _, blocks)) in done.into_iter().zip(batch) {
            if !c.cqe.status().is_success() {
                return Err(command_error(io_opcode::READ, &c));
            }
            let len = blocks as usize * bs;
            {
                let mut s = self.sh.borrow_mut();
                s.stats.ios += 1;
                s.stats.bytes_read += len as u64;
            }
            let mut d = c.data;
            if d.len() < len {
                return Err(SamplerError::GraphCorrupt(format!(
                    "a {len}-byte read returned {} bytes",
                    d.len()
                )));
            }
            d.truncate(len);
            out.push(d);
        }
        Ok(out)
    }

    /// The region of `region`: first LBA and block count.
    fn region(&self, region: Region) -> LbaRange {
        let s = self.sh.borrow();
        match region {
            Region::Indptr => s.graph.indptr,
            Region::Indices => s.graph.indices,
        }
    }

    /// Loads `len` bytes at byte `byte` of `region` through the page cache (mmap mode), the
    /// way Linux 6.18 serves a mapped file ([`sagessd_emulator::host_stack`]): a mapped page is
    /// a memory access; a cached one a minor fault, which maps the cached pages of its 16-page
    /// block (and starts asynchronous readahead if it carries the mark); a missing one a major
    /// fault, which reads the uncached pages of its read-around window, waits for its own
    /// read only, and maps its block. The memory access itself is charged by the caller.
    async fn mmap_load(
        &self,
        region: Region,
        byte: u64,
        len: usize,
    ) -> Result<Vec<u8>, SamplerError> {
        let bs = self.block_size();
        let r = self.region(region);
        let addr = r.slba * bs + byte;
        let page = addr / PAGE_SIZE_BYTES;
        let in_page = (addr % PAGE_SIZE_BYTES) as usize;
        // The file: the region's pages.
        let first_page = r.slba * bs / PAGE_SIZE_BYTES;
        let file_pages = ((r.slba + r.block_count) * bs).div_ceil(PAGE_SIZE_BYTES) - first_page;
        let h = self.sh.borrow().host.clone();
        let mut waited = false;
        loop {
            // The page cache is touched in virtual-time order.
            self.yield_to_earlier().await;
            let pending = {
                let s = self.sh.borrow();
                s.mmap.as_ref().expect("mmap mode").pending.contains(&page)
            };
            if !pending {
                break;
            }
            // The page is being read: sleep on its lock until it is up to date (a minor fault
            // on 6.18, whose per-VMA-lock retry does not count as major).
            self.sh.borrow_mut().states[self.w] = WorkerState::WaitingPage(page);
            Park(false).await;
            self.sh.borrow_mut().stats.page_waits += 1;
            self.charge(h.context_switch_ns);
            waited = true;
        }
        self.touch_cache();
        let access = {
            let mut s = self.sh.borrow_mut();
            let state = s.mmap.as_mut().expect("mmap mode");
            let mapping = state.mapping(self.w);
            state.cache.access(page, mapping)
        };
        if waited && access != Access::Miss {
            self.charge(h.minor_fault_ns);
        }
        // The load completes with the fault: its bytes are taken before anything else can run
        // (a later await lets other workers evict the page).
        let bytes_now = |me: &Self| -> Result<Vec<u8>, SamplerError> {
            let mut s = me.sh.borrow_mut();
            s.stats.bytes_used += len as u64;
            let mut out = vec![0; len];
            if s.bytes.fill(addr, &mut out) {
                return Ok(out);
            }
            let state = s.mmap.as_ref().expect("mmap mode");
            let bytes = state.pages.get(&page).ok_or_else(|| {
                SamplerError::GraphCorrupt(format!("page {page} is not cached after its fault"))
            })?;
            out.copy_from_slice(&bytes[in_page..in_page + len]);
            Ok(out)
        };
        match access {
            Access::Hit => bytes_now(self),
            Access::MinorFault => {
                if !waited {
                    self.charge(h.minor_fault_ns);
                }
                self.fault_around(region, page, first_page, file_pages);
                bytes_now(self)
            }
            Access::Marked => {
                if !waited {
                    self.charge(h.minor_fault_ns);
                }
                self.fault_around(region, page, first_page, file_pages);
                let window = {
                    let mut s = self.sh.borrow_mut();
                    let state = s.mmap.as_mut().expect("mmap mode");
                    state.cache.clear_mark(page);
                    let mapping = state.mapping(self.w);
                    state.cache.map(page, mapping);
                    state.readahead(mapping, region);
                    let (cache, pending) = (&state.cache, &state.pending);
                    state.readahead[mapping][region as usize].on_marked_fault(
                        page - first_page,
                        file_pages,
                        |from, limit| {
                            (from..limit).find(|&q| {
                                !cache.contains(first_page + q)
                                    && !pending.contains(&(first_page + q))
                            })
                        },
                    )
                };
                let bytes = bytes_now(self)?;
                if let Some(w) = window {
                    self.read_window(&w, first_page, None, h.submit_ns).await?;
                }
                Ok(bytes)
            }
            Access::Miss => {
                let window = {
                    let mut s = self.sh.borrow_mut();
                    let state = s.mmap.as_mut().expect("mmap mode");
                    let mapping = state.mapping(self.w);
                    state
                        .readahead(mapping, region)
                        .on_major_fault(page - first_page, file_pages)
                };
                // Returns with the page inserted and mapped, nothing run in between.
                self.read_window(&window, first_page, Some(page), h.major_fault_submit_ns())
                    .await?;
                self.fault_around(region, page, first_page, file_pages);
                bytes_now(self)
            }
        }
    }

    /// Reads the pages of `window` (file pages, from `first_page` on the device) that are
    /// neither cached nor being read, one Read per run of them (split at the transfer limit),
    /// submitted one after another: `first_ns` of host time before the first, `submit_ns` before
    /// each other. A major fault waits for the Read holding `wait_for` (its page); every other
    /// Read lands in the background ([`deliver`]).
    async fn read_window(
        &self,
        window: &Window,
        first_page: u64,
        wait_for: Option<u64>,
        first_ns: u64,
    ) -> Result<(), SamplerError> {
        let (runs, block_count, per_page, h) = {
            let mut s = self.sh.borrow_mut();
            let info = s.device.info().clone();
            let h = s.host.clone();
            let state = s.mmap.as_mut().expect("mmap mode");
            let (lo, hi) = (
                first_page + window.pages.start,
                first_page + window.pages.end,
            );
            let per_page = PAGE_SIZE_BYTES / u64::from(info.block_size_bytes);
            let max_pages = (u64::from(info.max_transfer_blocks()) / per_page).max(1);
            let mut runs: Vec<(u64, u64)> = Vec::new();
            for p in lo..hi {
                if state.cache.contains(p) || state.pending.contains(&p) {
                    continue;
                }
                state.pending.insert(p);
                match runs.last_mut() {
                    Some((start, n)) if *start + *n == p && *n < max_pages => *n += 1,
                    _ => runs.push((p, 1)),
                }
            }
            (runs, info.block_count, per_page, h)
        };
        let mark = window.mark.map(|m| first_page + m);
        let mut before = first_ns;
        let mut own: Option<(u16, u64, u64)> = None;
        for &(start, n) in &runs {
            // Never past the namespace's end (a region's last page may be partial).
            let lba = start * per_page;
            let blocks = (n * per_page).min(block_count.saturating_sub(lba));
            self.charge(before);
            before = h.submit_ns;
            let cid = self
                .submit(
                    Self::read_command(lba, blocks as u32),
                    vec![0; (n * PAGE_SIZE_BYTES) as usize],
                )
                .await?;
            if wait_for.is_some_and(|p| (start..start + n).contains(&p)) {
                own = Some((cid, start, n));
            } else {
                let mut s = self.sh.borrow_mut();
                let state = s.mmap.as_mut().expect("mmap mode");
                state.background.insert(cid, (start, n, mark));
            }
        }
        let Some((cid, start, n)) = own else {
            return Ok(());
        };
        let c = self.wait(cid).await?;
        self.note_completion(&c);
        if !c.cqe.status().is_success() {
            return Err(command_error(io_opcode::READ, &c));
        }
        let len = (n * PAGE_SIZE_BYTES) as usize;
        let mut data = c.data;
        data.resize(len, 0);
        {
            let mut s = self.sh.borrow_mut();
            s.stats.ios += 1;
            s.stats.bytes_read += len as u64;
        }
        self.charge(h.blocking_completion_ns());
        self.yield_to_earlier().await;
        self.touch_cache();
        let mut s = self.sh.borrow_mut();
        let now = s.clocks[self.w];
        let Shared { mmap, bytes, .. } = &mut *s;
        let state = mmap.as_mut().expect("mmap mode");
        if let Err(e) = state.insert_read(bytes, start, &data, mark, wait_for) {
            for p in start..start + n {
                state.pending.remove(&p);
            }
            return Err(e);
        }
        // The fault maps its page at once (fault-around follows).
        if let Some(p) = wait_for {
            let mapping = state.mapping(self.w);
            state.cache.map(p, mapping);
        }
        // Wake the workers sleeping on these pages.
        let Shared { states, clocks, .. } = &mut *s;
        for (st, clock) in states.iter_mut().zip(clocks.iter_mut()) {
            if let WorkerState::WaitingPage(p) = *st
                && (start..start + n).contains(&p)
            {
                *st = WorkerState::Runnable;
                *clock = (*clock).max(now);
            }
        }
        Ok(())
    }

    /// Fault-around for a fault at `page`: maps the cached pages of its 16-page block that are
    /// neither marked nor being read, and takes those not marked as working set off the file's
    /// `mmap_miss`.
    fn fault_around(&self, region: Region, page: u64, first_page: u64, file_pages: u64) {
        let mut s = self.sh.borrow_mut();
        let state = s.mmap.as_mut().expect("mmap mode");
        let mapping = state.mapping(self.w);
        let mut hits = 0;
        for q in fault_around_window(page - first_page, file_pages) {
            let p = first_page + q;
            if state.cache.contains(p) && !state.cache.is_marked(p) && !state.pending.contains(&p) {
                hits += u64::from(!state.cache.is_workingset(p));
                state.cache.map(p, mapping);
            }
        }
        state.readahead(mapping, region).on_fault_around(hits);
    }

    /// The entries at byte offsets `entries` (each `len` bytes) of the host's resident copy
    /// (DRAM mode): one memory access per cache line ([`cache_lines_touched`]), no I/O.
    fn resident_load(
        &self,
        region: Region,
        entries: &[u64],
        len: usize,
    ) -> Result<Vec<Vec<u8>>, SamplerError> {
        let mut out = Vec::with_capacity(entries.len());
        if !self.sh.borrow().bytes.kept() {
            let r = self.region(region);
            let (at, size) = (
                r.slba * self.block_size(),
                r.block_count * self.block_size(),
            );
            let s = self.sh.borrow();
            for &b in entries {
                if b.checked_add(len as u64).is_none_or(|end| end > size) {
                    return Err(SamplerError::GraphCorrupt(format!(
                        "a load at byte {b} of {region:?} lies past its {size} bytes"
                    )));
                }
                let mut entry = vec![0; len];
                s.bytes.fill(at + b, &mut entry);
                out.push(entry);
            }
        } else {
            let s = self.sh.borrow();
            let bytes = &s.resident.as_ref().expect("memory mode")[region as usize];
            for &b in entries {
                let entry = usize::try_from(b)
                    .ok()
                    .and_then(|at| bytes.get(at..at.checked_add(len)?))
                    .ok_or_else(|| {
                        SamplerError::GraphCorrupt(format!(
                            "a load at byte {b} of {region:?} lies past its {} bytes",
                            bytes.len()
                        ))
                    })?;
                out.push(entry.to_vec());
            }
        }
        self.charge_lines(cache_lines_touched(entries, len));
        self.sh.borrow_mut().stats.bytes_used += entries.len() as u64 * len as u64;
        Ok(out)
    }

    /// Reads the blocks holding the entries at byte offsets `entries` (each `len` bytes) the
    /// direct/async way and returns each entry's bytes, charging one memory access per cache
    /// line ([`cache_lines_touched`]).
    async fn scratchpad_load(
        &self,
        region: Region,
        entries: &[u64],
        len: usize,
    ) -> Result<Vec<Vec<u8>>, SamplerError> {
        let bs = self.block_size();
        let slba = self.region(region).slba;
        let mut lbas: Vec<u64> = entries
            .iter()
            .flat_map(|&b| [slba + b / bs, slba + (b + len as u64 - 1) / bs])
            .collect();
        lbas.sort_unstable();
        lbas.dedup();
        let mut runs: Vec<LbaRange> = Vec::new();
        for &lba in &lbas {
            match runs.last_mut() {
                Some(r) if r.slba + r.block_count == lba => r.block_count += 1,
                _ => runs.push(LbaRange {
                    slba: lba,
                    block_count: 1,
                }),
            }
        }
        let data = self.read_runs(&runs).await?;
        let mut out = Vec::with_capacity(entries.len());
        for &b in entries {
            let lba = slba + b / bs;
            let i = runs.partition_point(|r| r.slba <= lba) - 1;
            let at = ((lba - runs[i].slba) * bs + b % bs) as usize;
            out.push(data[i][at..at + len].to_vec());
        }
        let n = entries.len() as u64;
        self.charge_lines(cache_lines_touched(entries, len));
        self.sh.borrow_mut().stats.bytes_used += n * len as u64;
        Ok(out)
    }

    /// Loads entries of `region` at byte offsets `entries`, each `len` bytes, by the mode's path.
    async fn load(
        &self,
        region: Region,
        entries: &[u64],
        len: usize,
    ) -> Result<Vec<Vec<u8>>, SamplerError> {
        let mode = self.sh.borrow().mode;
        if mode == SamplerKind::Memory {
            return self.resident_load(region, entries, len);
        }
        if mode == SamplerKind::Mmap {
            // Each load through the page cache, then its memory access if it moves to another
            // cache line (the same count as `cache_lines_touched`, charged as the loads happen).
            let mut out = Vec::with_capacity(entries.len());
            let mut last_line: Option<u64> = None;
            for &b in entries {
                out.push(self.mmap_load(region, b, len).await?);
                let first = b / CACHE_LINE_BYTES;
                let end = (b + len.max(1) as u64 - 1) / CACHE_LINE_BYTES;
                self.charge_lines(end - first + u64::from(last_line != Some(first)));
                last_line = Some(end);
            }
            Ok(out)
        } else {
            self.scratchpad_load(region, entries, len).await
        }
    }

    async fn edge_ranges(&self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        let offsets: Vec<u64> = nodes.iter().flat_map(|&v| [8 * v, 8 * v + 8]).collect();
        let words = self.load(Region::Indptr, &offsets, 8).await?;
        let edge_count = self.sh.borrow().graph.edge_count;
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        nodes
            .iter()
            .zip(words.chunks_exact(2))
            .map(|(&v, w)| {
                let (start, end) = (word(&w[0]), word(&w[1]));
                if end < start || end > edge_count {
                    return Err(SamplerError::GraphCorrupt(format!(
                        "indptr of node {v} is {start}..{end} with {edge_count} edges"
                    )));
                }
                Ok(EdgeRange {
                    start,
                    degree: end - start,
                })
            })
            .collect()
    }

    async fn neighbours_at(&self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        if positions.is_empty() {
            return Ok(Vec::new());
        }
        let width = u64::from(self.sh.borrow().graph.id_width_bytes);
        let offsets: Vec<u64> = positions.iter().map(|&p| width * p).collect();
        let ids = self.load(Region::Indices, &offsets, width as usize).await?;
        Ok(ids
            .iter()
            .map(|b| {
                if width == 4 {
                    u64::from(u32::from_le_bytes(b[..].try_into().expect("4 bytes")))
                } else {
                    u64::from_le_bytes(b[..].try_into().expect("8 bytes"))
                }
            })
            .collect())
    }

    /// One synchronous passthrough ioctl: syscall + submission, the command, completion +
    /// wake-up.
    async fn ioctl(&self, sqe: SubmissionEntry, data: Vec<u8>) -> Result<Completion, SamplerError> {
        let h = self.sh.borrow().host.clone();
        self.sh.borrow_mut().stats.syscalls += 1;
        self.charge(h.sync_read_submit_ns());
        let cid = self.submit(sqe, data).await?;
        let c = self.wait(cid).await?;
        self.note_completion(&c);
        self.charge(h.blocking_completion_ns());
        Ok(c)
    }

    /// One minibatch by the mode's path.
    async fn sample(
        &self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        let (mode, node_count) = {
            let s = self.sh.borrow();
            (s.mode, s.graph.node_count)
        };
        if mode.in_storage() {
            return self.isp_sample(seed, fanouts, targets).await;
        }
        let mut b = SubgraphBuilder::new(node_count, seed, fanouts, targets)?;
        let (node_ns, edge_ns) = {
            let h = &self.sh.borrow().host;
            (h.node_ns, h.edge_sampled_ns)
        };
        while let Some(dst) = b.destinations() {
            let dst = dst.to_vec();
            let ranges = self.edge_ranges(&dst).await?;
            // Per destination: sample count, RNG draws' setup, the next layer's bookkeeping.
            self.charge_compute(dst.len() as u64 * node_ns);
            let positions = b.set_ranges(&ranges)?;
            let neighbours = self.neighbours_at(&positions).await?;
            // Per sampled neighbour: RNG draw, deduplication probe, output write.
            self.charge_compute(positions.len() as u64 * edge_ns);
            b.set_neighbours(&neighbours)?;
        }
        b.finish()
    }
}

/// What [`HostIoSampler::run_workers`] produced.
#[derive(Clone, Debug)]
pub struct WorkersRun {
    /// Each request's subgraph, in request order.
    pub subgraphs: Vec<SampledSubgraph>,
    /// Virtual time from the run's start to the end of its last worker.
    pub makespan_ns: u64,
    /// Each worker's finishing time, relative to the start.
    pub worker_end_ns: Vec<u64>,
    /// When each request's subgraph was done (its worker's clock then), relative to the start,
    /// in request order.
    pub done_ns: Vec<u64>,
}

type WorkerFuture = Pin<Box<dyn Future<Output = Result<(), SamplerError>>>>;

/// Drives the workers' futures to completion in virtual time: the runnable worker with the
/// smallest clock (then the smallest index) runs until it parks; when none is runnable, the
/// device's next completion is reaped and wakes its worker.
/// After each poll, `progress(n)` learns the number `n` of requests sampled so far (`finished`),
/// when it changed.
fn drive(
    sh: &Rc<RefCell<Shared>>,
    mut futures: Vec<WorkerFuture>,
    finished: &Cell<u64>,
    progress: &mut dyn FnMut(u64),
) -> Result<(), SamplerError> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut reported = 0;
    loop {
        let pick = {
            let s = sh.borrow();
            (0..futures.len())
                .filter(|&w| s.states[w] == WorkerState::Runnable)
                .min_by_key(|&w| (s.clocks[w], w))
        };
        if let Some(w) = pick {
            // Everything the device finishes before this worker's clock happens first: it may
            // wake a worker whose next step comes earlier.
            let t = sh.borrow().clocks[w];
            let early = sh.borrow_mut().device.wait_next_until(t)?;
            if let Some(c) = early {
                deliver(&mut sh.borrow_mut(), c);
                continue;
            }
            let poll = futures[w].as_mut().poll(&mut cx);
            if finished.get() != reported {
                reported = finished.get();
                progress(reported);
            }
            if let Poll::Ready(result) = poll {
                sh.borrow_mut().states[w] = WorkerState::Finished;
                result?;
            }
            continue;
        }
        if sh
            .borrow()
            .states
            .iter()
            .all(|s| *s == WorkerState::Finished)
        {
            return Ok(());
        }
        let mut s = sh.borrow_mut();
        let Some(c) = s.device.wait_next()? else {
            return Err(SamplerError::InvalidRequest(
                "every worker is blocked and nothing is outstanding".into(),
            ));
        };
        deliver(&mut s, c);
    }
}

/// Hands a completion to the worker waiting for it, which becomes runnable at the completion's
/// time (or later, if its clock is already past it).
fn deliver(s: &mut Shared, c: Completion) {
    let cid = c.cid();
    let t = c.completed_at_ns.unwrap_or(0);
    if let Some(state) = s.mmap.as_mut()
        && let Some((first, pages, mark)) = state.background.remove(&cid)
    {
        // A read nobody waits for: its pages enter the cache now; its interrupt and
        // completion are host CPU time off every worker's path.
        let len = (pages * PAGE_SIZE_BYTES) as usize;
        if c.cqe.status().is_success() && c.data.len() >= len {
            if let Err(e) = state.insert_read(&s.bytes, first, &c.data[..len], mark, None) {
                for p in first..first + pages {
                    state.pending.remove(&p);
                }
                state.corrupt.get_or_insert(e);
            }
        } else {
            // A failed readahead leaves its pages uncached; a fault on one reads it again.
            for p in first..first + pages {
                state.pending.remove(&p);
            }
        }
        state.last_touch_ns = state.last_touch_ns.max(t);
        s.stats.ios += 1;
        s.stats.bytes_read += len as u64;
        s.stats.host_cpu_ns += s.host.complete_ns;
        s.stats.timeline_hash = fnv1a(s.stats.timeline_hash, &t.to_le_bytes());
        let Shared { states, clocks, .. } = s;
        for (st, clock) in states.iter_mut().zip(clocks.iter_mut()) {
            if let WorkerState::WaitingPage(p) = *st
                && (first..first + pages).contains(&p)
            {
                *st = WorkerState::Runnable;
                *clock = (*clock).max(t);
            }
        }
        return;
    }
    s.done.insert(cid, c);
    let Shared { states, clocks, .. } = s;
    if let Some(w) = states
        .iter()
        .position(|st| *st == WorkerState::Waiting(cid))
    {
        states[w] = WorkerState::Runnable;
        clocks[w] = clocks[w].max(t);
    }
}

/// A host sampler reading a graph from an emulated device through a modelled host I/O stack
/// (or asking the device to sample, [`SamplerKind::Isp`]), with one worker
/// ([`Sampler::sample`]) or several contending for the device ([`Self::run_workers`]).
#[derive(Debug)]
pub struct HostIoSampler {
    shared: Option<Shared>,
    sampler: SamplerStats,
    /// Minibatches per hyperbatch ([`SamplerKind::IspHyperbatch`]).
    hyperbatch: usize,
}

impl HostIoSampler {
    /// A sampler in `mode` reading `graph` (already written to the namespace, and attached for
    /// ISP) from `device`, with host costs `host` (validated). The page cache starts cold.
    pub fn new(
        device: Device<LocalTransport>,
        graph: GraphDescriptor,
        mode: SamplerKind,
        host: HostStackConfig,
    ) -> Result<Self, SamplerError> {
        Self::with_graph_bytes(device, graph, mode, host, GraphBytes::Kept)
    }

    /// [`Self::new`], the host's copies of the graph's bytes held as `bytes` says (computed
    /// from the content the device's flash computes its pages from, for a computed graph:
    /// the same loads and modelled times, without holding the page cache's bytes).
    pub fn with_graph_bytes(
        device: Device<LocalTransport>,
        graph: GraphDescriptor,
        mode: SamplerKind,
        host: HostStackConfig,
        bytes: GraphBytes,
    ) -> Result<Self, SamplerError> {
        host.validate()
            .map_err(|e| SamplerError::InvalidRequest(e.to_string()))?;
        check_modelled(mode)?;
        let bs = u64::from(device.info().block_size_bytes);
        if mode == SamplerKind::Mmap
            && (bs > PAGE_SIZE_BYTES || !PAGE_SIZE_BYTES.is_multiple_of(bs))
        {
            return Err(SamplerError::InvalidRequest(format!(
                "mmap mode needs a block size dividing {PAGE_SIZE_BYTES} (got {bs})"
            )));
        }
        let mmap = (mode == SamplerKind::Mmap).then(|| MmapState {
            cache: host.page_cache(),
            pages: FxHashMap::default(),
            corrupt: None,
            readahead: Vec::new(),
            workers: host.mmap_workers,
            fresh: host.file_readahead(),
            pending: FxHashSet::default(),
            background: HashMap::new(),
            last_touch_ns: 0,
        });
        let mut device = device;
        let resident = match mode {
            SamplerKind::Memory if bytes.kept() => {
                let mut read = |r: LbaRange| match r.block_count {
                    0 => Ok(Vec::new()),
                    _ => device.read(r.slba, r.block_count),
                };
                Some([read(graph.indptr)?, read(graph.indices)?])
            }
            _ => None,
        };
        Ok(Self {
            shared: Some(Shared {
                device,
                graph,
                mode,
                host,
                mmap,
                resident,
                bytes,
                stats: HostIoStats {
                    timeline_hash: FNV_OFFSET,
                    ..HostIoStats::default()
                },
                clocks: Vec::new(),
                states: Vec::new(),
                done: HashMap::new(),
                slots: SlotQueue::default(),
                builder: HostBuilder::default(),
            }),
            sampler: SamplerStats::default(),
            hyperbatch: DEFAULT_HYPERBATCH,
        })
    }

    fn shared(&self) -> &Shared {
        self.shared.as_ref().expect("not inside a run")
    }

    /// The mode.
    pub fn mode(&self) -> SamplerKind {
        self.shared().mode
    }

    /// The host stack model's statistics so far.
    pub fn host_stats(&self) -> HostIoStats {
        let sh = self.shared();
        let mut s = sh.stats;
        if let Some(m) = &sh.mmap {
            s.page_cache = m.cache.stats();
        }
        s
    }

    /// The device.
    pub fn device(&self) -> &Device<LocalTransport> {
        &self.shared().device
    }

    /// Gives the device back.
    pub fn into_device(self) -> Device<LocalTransport> {
        self.shared.expect("not inside a run").device
    }

    /// Minibatches of each in-storage hyperbatch ([`SamplerKind::IspHyperbatch`]; default
    /// [`DEFAULT_HYPERBATCH`]; at least 1).
    pub fn set_hyperbatch(&mut self, minibatches: usize) {
        self.hyperbatch = minibatches.max(1);
    }

    /// Samples `requests` with `workers` host workers sharing the device (and, for mmap, the
    /// page cache): worker `w` takes requests `w`, `w + workers`, …, one after another, on its
    /// own clock, all starting at the device's current time ([`SamplerKind::IspHyperbatch`]:
    /// hyperbatches, in request order, in the same way). Deterministic: no threads, no
    /// wall clock (see the module documentation for the scheduling).
    pub fn run_workers(
        &mut self,
        workers: usize,
        fanouts: &[u16],
        requests: &[Request],
    ) -> Result<WorkersRun, SamplerError> {
        self.run_workers_with_progress(workers, fanouts, requests, &mut |_| {})
    }

    /// [`Self::run_workers`], telling `progress` how many requests are sampled so far each time
    /// one more is (for a progress bar; it does not affect the run).
    pub fn run_workers_with_progress(
        &mut self,
        workers: usize,
        fanouts: &[u16],
        requests: &[Request],
        progress: &mut dyn FnMut(u64),
    ) -> Result<WorkersRun, SamplerError> {
        if workers == 0 {
            return Err(SamplerError::InvalidRequest("no workers".into()));
        }
        let mut shared = self.shared.take().expect("not inside a run");
        // Minibatches a worker samples at once: a hyperbatch's, or one.
        let group = if shared.mode == SamplerKind::IspHyperbatch {
            self.hyperbatch
        } else {
            1
        };
        let start = shared.device.transport().ssd().now_ns();
        let driver_before = shared.device.stats();
        let device_before = shared.device.device_counters();
        shared.clocks = vec![start; workers];
        shared.states = vec![WorkerState::Runnable; workers];
        shared.slots = SlotQueue::default();
        shared.done.clear();
        let sh = Rc::new(RefCell::new(shared));
        let results: Rc<RefCell<Vec<Option<SampledSubgraph>>>> =
            Rc::new(RefCell::new(vec![None; requests.len()]));
        let done: Rc<RefCell<Vec<u64>>> = Rc::new(RefCell::new(vec![0; requests.len()]));
        let finished = Rc::new(Cell::new(0u64));
        let futures: Vec<WorkerFuture> = (0..workers)
            .map(|w| {
                let worker = Worker { sh: sh.clone(), w };
                let results = results.clone();
                let done = done.clone();
                let finished = finished.clone();
                let mine: Vec<(usize, Vec<Request>)> = requests
                    .chunks(group)
                    .enumerate()
                    .skip(w)
                    .step_by(workers)
                    .map(|(g, chunk)| (g * group, chunk.to_vec()))
                    .collect();
                let fanouts = fanouts.to_vec();
                Box::pin(async move {
                    for (first, chunk) in mine {
                        let subs = match chunk.as_slice() {
                            [r] if group == 1 => {
                                vec![worker.sample(r.seed, &fanouts, &r.targets).await?]
                            }
                            _ => worker.isp_hyperbatch(&fanouts, &chunk).await?,
                        };
                        let now = worker.sh.borrow().clocks[w] - start;
                        for (k, sg) in subs.into_iter().enumerate() {
                            results.borrow_mut()[first + k] = Some(sg);
                            done.borrow_mut()[first + k] = now;
                            finished.set(finished.get() + 1);
                        }
                    }
                    Ok(())
                }) as WorkerFuture
            })
            .collect();
        let outcome = drive(&sh, futures, &finished, progress).and_then(|()| {
            // Readahead still in flight lands now, so that the next run starts with none.
            loop {
                let mut s = sh.borrow_mut();
                if s.mmap.as_ref().is_none_or(|m| m.background.is_empty()) {
                    return Ok(());
                }
                match s.device.wait_next()? {
                    Some(c) => deliver(&mut s, c),
                    None => return Ok(()),
                }
            }
        });
        let mut shared = Rc::try_unwrap(sh)
            .expect("the workers are gone")
            .into_inner();
        // A read nobody waited for that returned bytes not the graph's fails the run.
        let corrupt = shared.mmap.as_mut().and_then(|m| m.corrupt.take());
        let outcome = outcome.and(corrupt.map_or(Ok(()), Err));
        if outcome.is_err() {
            // Leave no command behind for the next run.
            while let Ok(Some(_)) = shared.device.wait_next() {}
        }
        let end = shared.clocks.iter().copied().max().unwrap_or(start);
        let worker_end_ns = shared.clocks.iter().map(|c| c - start).collect();
        shared.device.transport_mut().ssd_mut().advance_to_ns(end);
        let makespan_ns = end - start;
        shared.stats.modelled_time_ns += makespan_ns;
        // The driver's and the device's counters, as for any sampler.
        let d = shared.device.stats().since(&driver_before);
        self.sampler
            .add_counters(&d, device_before.zip(shared.device.device_counters()));
        if makespan_ns > 0 {
            self.sampler.modelled_time_ns =
                Some(self.sampler.modelled_time_ns.unwrap_or(0) + makespan_ns);
        }
        self.shared = Some(shared);
        outcome?;
        let subgraphs: Vec<SampledSubgraph> = Rc::try_unwrap(results)
            .expect("the workers are gone")
            .into_inner()
            .into_iter()
            .map(|s| s.expect("every request was sampled"))
            .collect();
        for sg in &subgraphs {
            self.sampler.minibatches += 1;
            self.sampler.nodes += sg.node_count() as u64;
            self.sampler.edges += sg.edge_count();
            self.sampler.subgraph_bytes += sg.as_bytes().len() as u64;
        }
        let done_ns = Rc::try_unwrap(done)
            .expect("the workers are gone")
            .into_inner();
        Ok(WorkersRun {
            subgraphs,
            makespan_ns,
            worker_end_ns,
            done_ns,
        })
    }
}

impl Sampler for HostIoSampler {
    fn name(&self) -> &'static str {
        self.mode().description()
    }

    fn sample(
        &mut self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        let request = Request {
            seed,
            targets: targets.to_vec(),
        };
        let mut run = self.run_workers(1, fanouts, std::slice::from_ref(&request))?;
        Ok(run.subgraphs.pop().expect("one request"))
    }

    fn stats(&self) -> SamplerStats {
        self.sampler
    }
}

mod graph_bytes;
mod isp;
#[cfg(test)]
mod tests;
