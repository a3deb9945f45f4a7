//! Host sampling over the host I/O stack model: mmap (page cache + faults + readahead), direct
//! I/O (SmartSAGE's software-only path) and io_uring-style asynchronous reads, each a
//! [`NeighbourSource`] and a [`Sampler`] over an emulated device.
//!
//! The host's CPU costs come from [`HostStackConfig`] (see [`sagessd_emulator::host_stack`] for
//! the formulas and their sources) and are charged to the emulated device's virtual clock with
//! `Ssd::advance_to_ns`; every read is a real NVMe Read submitted through the [`Device`], so the
//! device, its flash and its PCIe link are timed by the emulator. All three modes produce exactly
//! the subgraph bytes of the in-memory reference (they share [`build_subgraph`]).
//!
//! What each mode charges, per layer of a minibatch (`C` = the host stack configuration):
//!
//! * **mmap** ([`HostIoMode::Mmap`]): every 8-byte `indptr` entry and every `indices` entry is a
//!   load from the mapped graph, in the order the sampler needs them. A load of a mapped, cached
//!   page costs `C.memory_access_ns`; of a cached page not yet mapped, a minor fault
//!   (`C.minor_fault_ns`) first; of a page not cached, a major fault: `C.major_fault_ns +
//!   C.submit_ns`, one synchronous Read of the faulting page plus its readahead window (pages up
//!   to the window, stopping at the first cached page or the end of the region — `indptr` and
//!   `indices` are separate files with their own readahead state), then `C.complete_ns +
//!   C.context_switch_ns`. One I/O at a time: the faulting thread blocks.
//! * **direct** ([`HostIoMode::Direct`]): per call, the LBAs holding the needed entries (the
//!   device's LBA size, 512 B or 4 KiB), deduplicated and merged into runs, each run one
//!   `pread(O_DIRECT)` into a user scratchpad (split at the device's maximum transfer size):
//!   `C.syscall_ns + C.submit_ns` before, `C.complete_ns + C.context_switch_ns` after; queue
//!   depth 1. Each entry then read from the scratchpad costs `C.memory_access_ns`.
//! * **async** ([`HostIoMode::Async`]): the same reads, in batches of `C.uring_queue_depth`; per
//!   batch one `io_uring_enter` (`C.syscall_ns`), `C.uring_sqe_ns + C.submit_ns` per SQE (SQE
//!   *i* reaches the device when its share is done), completions handled in completion order at
//!   `C.complete_ns` each, then `C.context_switch_ns` to wake the thread and `C.uring_cqe_ns`
//!   per CQE reaped. Entry loads as for direct.
//!
//! [`HostIoStats`] counts I/Os, bytes read versus bytes of entries used, page-cache accesses,
//! faults and evictions, host CPU time charged, modelled time, and a hash of every completion
//! time (for determinism checks).

use std::collections::HashMap;

use sagessd_abi::graph::{GraphDescriptor, LbaRange};
use sagessd_abi::nvme::{SubmissionEntry, VendorStatus};
use sagessd_emulator::host_stack::{
    Access, HostStackConfig, PAGE_SIZE_BYTES, PageCache, PageCacheStats, Readahead,
};
use sagessd_host_driver::{
    Completion, Device, DeviceCounters, DriverError, IO_QUEUE, LocalTransport, NAMESPACE_ID,
};

use crate::sampler::{
    EdgeRange, FNV_OFFSET, NeighbourSource, SampledSubgraph, Sampler, SamplerError, SamplerStats,
    build_subgraph, fnv1a,
};

/// How the host reads the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostIoMode {
    /// Memory-mapped file through the kernel page cache (page faults, readahead).
    Mmap,
    /// `O_DIRECT` reads of exactly the needed blocks into a user buffer, queue depth 1.
    Direct,
    /// io_uring-style: the same reads as direct, batched at the configured queue depth.
    Async,
}

impl HostIoMode {
    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mmap => "mmap",
            Self::Direct => "direct",
            Self::Async => "async",
        }
    }
}

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
    /// System calls made (pread, io_uring_enter); page faults are not system calls.
    pub syscalls: u64,
    /// Page-cache counters (mmap only; zero otherwise).
    pub page_cache: PageCacheStats,
    /// Host CPU time charged by the host stack model.
    pub host_cpu_ns: u64,
    /// Modelled time of the minibatches: the virtual clock from each minibatch's start to its
    /// end (last completion handled and every host cost charged).
    pub modelled_time_ns: u64,
    /// FNV-1a 64 over every Read's completion time, in the order the host handled them.
    pub timeline_hash: u64,
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

/// The mmap mode's kernel state: the page cache, its pages' bytes and one readahead state per
/// file.
#[derive(Debug)]
struct MmapState {
    cache: PageCache,
    pages: HashMap<u64, Vec<u8>>,
    readahead: [Readahead; 2],
}

/// A host sampler reading a graph from an emulated device through a modelled host I/O stack.
/// Implements [`NeighbourSource`] (for [`build_subgraph`]) and [`Sampler`].
#[derive(Debug)]
pub struct HostIoSampler {
    device: Device<LocalTransport>,
    graph: GraphDescriptor,
    mode: HostIoMode,
    host: HostStackConfig,
    mmap: Option<MmapState>,
    stats: HostIoStats,
    sampler: SamplerStats,
}

impl HostIoSampler {
    /// A sampler in `mode` reading `graph` (already written to the namespace) from `device`,
    /// with host costs `host` (validated). The page cache starts cold.
    pub fn new(
        device: Device<LocalTransport>,
        graph: GraphDescriptor,
        mode: HostIoMode,
        host: HostStackConfig,
    ) -> Result<Self, SamplerError> {
        host.validate()
            .map_err(|e| SamplerError::InvalidRequest(e.to_string()))?;
        let bs = u64::from(device.info().block_size_bytes);
        if mode == HostIoMode::Mmap && (bs > PAGE_SIZE_BYTES || !PAGE_SIZE_BYTES.is_multiple_of(bs))
        {
            return Err(SamplerError::InvalidRequest(format!(
                "mmap mode needs a block size dividing {PAGE_SIZE_BYTES} (got {bs})"
            )));
        }
        let mmap = (mode == HostIoMode::Mmap).then(|| MmapState {
            cache: host.page_cache(),
            pages: HashMap::new(),
            readahead: [host.readahead(), host.readahead()],
        });
        Ok(Self {
            device,
            graph,
            mode,
            host,
            mmap,
            stats: HostIoStats {
                timeline_hash: FNV_OFFSET,
                ..HostIoStats::default()
            },
            sampler: SamplerStats::default(),
        })
    }

    /// The mode.
    pub fn mode(&self) -> HostIoMode {
        self.mode
    }

    /// The host stack model's statistics so far.
    pub fn host_stats(&self) -> HostIoStats {
        let mut s = self.stats;
        if let Some(m) = &self.mmap {
            s.page_cache = m.cache.stats();
        }
        s
    }

    /// The device.
    pub fn device(&self) -> &Device<LocalTransport> {
        &self.device
    }

    /// Gives the device back.
    pub fn into_device(self) -> Device<LocalTransport> {
        self.device
    }

    fn now_ns(&self) -> u64 {
        self.device.transport().ssd().now_ns()
    }

    /// Charges `ns` of host CPU time: the host clock moves forward.
    fn charge(&mut self, ns: u64) {
        let t = self.now_ns() + ns;
        self.device.transport_mut().ssd_mut().advance_to_ns(t);
        self.stats.host_cpu_ns += ns;
    }

    fn note_completion(&mut self, c: &Completion) {
        let t = c.completed_at_ns.unwrap_or(0);
        self.stats.timeline_hash = fnv1a(self.stats.timeline_hash, &t.to_le_bytes());
    }

    fn read_command(slba: u64, blocks: u32) -> SubmissionEntry {
        SubmissionEntry::read_write(false, 0, NAMESPACE_ID, slba, blocks)
    }

    /// One blocking Read of `blocks` blocks at `slba`: `before_ns` of host time, the I/O, then
    /// `after_ns`.
    fn read_blocking(
        &mut self,
        slba: u64,
        blocks: u32,
        before_ns: u64,
        after_ns: u64,
    ) -> Result<Vec<u8>, SamplerError> {
        let bs = self.device.info().block_size_bytes as usize;
        self.charge(before_ns);
        let len = blocks as usize * bs;
        let c = self
            .device
            .execute(IO_QUEUE, Self::read_command(slba, blocks), vec![0; len])?;
        self.note_completion(&c);
        self.stats.ios += 1;
        self.stats.bytes_read += len as u64;
        self.charge(after_ns);
        let mut data = c.data;
        data.truncate(len);
        if data.len() != len {
            return Err(SamplerError::GraphCorrupt(format!(
                "a {len}-byte read returned {} bytes",
                data.len()
            )));
        }
        Ok(data)
    }

    /// Reads `runs` (split at the maximum transfer size) the direct or async way; returns one
    /// buffer per run.
    fn read_runs(&mut self, runs: &[LbaRange]) -> Result<Vec<Vec<u8>>, SamplerError> {
        let bs = u64::from(self.device.info().block_size_bytes);
        let max_blocks = u64::from(self.device.info().max_transfer_blocks()).max(1);
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
        match self.mode {
            HostIoMode::Async => {
                let qd = self.host.uring_queue_depth as usize;
                for batch in chunks.chunks(qd) {
                    let datas = self.read_batch(batch)?;
                    for (&(r, off, _, _), d) in batch.iter().zip(datas) {
                        out[r][off..off + d.len()].copy_from_slice(&d);
                    }
                }
            }
            _ => {
                for &(r, off, slba, n) in &chunks {
                    self.stats.syscalls += 1;
                    let d = self.read_blocking(
                        slba,
                        n,
                        self.host.sync_read_submit_ns(),
                        self.host.blocking_completion_ns(),
                    )?;
                    out[r][off..off + d.len()].copy_from_slice(&d);
                }
            }
        }
        Ok(out)
    }

    /// One io_uring batch: one `io_uring_enter` submits every chunk and waits for all of them.
    fn read_batch(
        &mut self,
        batch: &[(usize, usize, u64, u32)],
    ) -> Result<Vec<Vec<u8>>, SamplerError> {
        let bs = self.device.info().block_size_bytes as usize;
        let h = self.host.clone();
        self.stats.syscalls += 1;
        self.charge(h.syscall_ns);
        let mut cids = Vec::with_capacity(batch.len());
        let mut first_err: Option<DriverError> = None;
        for &(_, _, slba, n) in batch {
            self.charge(h.uring_per_sqe_ns());
            match self.device.submit(
                IO_QUEUE,
                Self::read_command(slba, n),
                vec![0; n as usize * bs],
            ) {
                Ok(cid) => cids.push(cid),
                Err(e) => {
                    first_err = Some(e);
                    break;
                }
            }
        }
        let submitted_end = self.now_ns();
        // Drain every submitted command, even after a failure.
        let mut done: Vec<(usize, Completion)> = Vec::with_capacity(cids.len());
        for (i, &cid) in cids.iter().enumerate() {
            match self.device.wait(IO_QUEUE, cid) {
                Ok(c) => done.push((i, c)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e.into());
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
        // Host CPU busy: the handlers, the wake-up and the reaping (the waits are idle).
        self.stats.host_cpu_ns += n * h.complete_ns + h.context_switch_ns + n * h.uring_cqe_ns;
        self.device.transport_mut().ssd_mut().advance_to_ns(end);
        done.sort_by_key(|(i, _)| *i);
        let mut out = Vec::with_capacity(done.len());
        for ((_, c), &(_, _, _, blocks)) in done.into_iter().zip(batch) {
            let status = c.cqe.status();
            if !status.is_success() {
                return Err(DriverError::Command {
                    opcode: sagessd_abi::nvme::io_opcode::READ,
                    admin: false,
                    status,
                    vendor: VendorStatus::from_status(status),
                    result: c.cqe.result.get(),
                }
                .into());
            }
            let len = blocks as usize * bs;
            self.stats.ios += 1;
            self.stats.bytes_read += len as u64;
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
        match region {
            Region::Indptr => self.graph.indptr,
            Region::Indices => self.graph.indices,
        }
    }

    /// Loads `len` bytes at byte `byte` of `region` through the page cache (mmap mode).
    fn mmap_load(
        &mut self,
        region: Region,
        byte: u64,
        len: usize,
    ) -> Result<Vec<u8>, SamplerError> {
        let bs = u64::from(self.device.info().block_size_bytes);
        let r = self.region(region);
        let addr = r.slba * bs + byte;
        let page = addr / PAGE_SIZE_BYTES;
        let in_page = (addr % PAGE_SIZE_BYTES) as usize;
        let h = self.host.clone();
        let state = self.mmap.as_mut().expect("mmap mode");
        match state.cache.access(page) {
            Access::Hit => {}
            Access::MinorFault => self.charge(h.minor_fault_ns),
            Access::Miss => {
                // The file ends at the region's last page.
                let end_page = ((r.slba + r.block_count) * bs).div_ceil(PAGE_SIZE_BYTES);
                let state = self.mmap.as_mut().expect("mmap mode");
                let window = u64::from(state.readahead[region as usize].on_miss(page));
                let mut count = 1;
                while count < window
                    && page + count < end_page
                    && !state.cache.contains(page + count)
                {
                    count += 1;
                }
                let per_page = PAGE_SIZE_BYTES / bs;
                // Never past the namespace's end (a region's last page may be partial).
                let first_lba = page * per_page;
                let last_lba = ((page + count) * per_page).min(self.device.info().block_count);
                let mut data = Vec::with_capacity((count * PAGE_SIZE_BYTES) as usize);
                let max_blocks = u64::from(self.device.info().max_transfer_blocks()).max(1);
                let mut lba = first_lba;
                // One fault, one blocking I/O (split only if it exceeds the transfer limit).
                let mut before = h.major_fault_submit_ns();
                while lba < last_lba {
                    let n = (last_lba - lba).min(max_blocks);
                    let d =
                        self.read_blocking(lba, n as u32, before, h.blocking_completion_ns())?;
                    data.extend_from_slice(&d);
                    before = h.submit_ns;
                    lba += n;
                }
                data.resize((count * PAGE_SIZE_BYTES) as usize, 0);
                let state = self.mmap.as_mut().expect("mmap mode");
                // Readahead pages first, the faulting page last (most recently used, mapped).
                for i in (0..count).rev() {
                    let p = page + i;
                    let bytes = data
                        [(i * PAGE_SIZE_BYTES) as usize..((i + 1) * PAGE_SIZE_BYTES) as usize]
                        .to_vec();
                    if let Some(old) = state.cache.insert(p, i == 0) {
                        state.pages.remove(&old);
                    }
                    state.pages.insert(p, bytes);
                }
            }
        }
        self.charge(h.memory_access_ns);
        self.stats.bytes_used += len as u64;
        let state = self.mmap.as_ref().expect("mmap mode");
        let bytes = state.pages.get(&page).expect("an accessed page is cached");
        Ok(bytes[in_page..in_page + len].to_vec())
    }

    /// Reads the blocks holding `bytes` (each `(byte offset in region, len)`) the direct/async
    /// way and returns each entry's bytes, charging one memory access per entry.
    fn scratchpad_load(
        &mut self,
        region: Region,
        entries: &[u64],
        len: usize,
    ) -> Result<Vec<Vec<u8>>, SamplerError> {
        let bs = u64::from(self.device.info().block_size_bytes);
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
        let data = self.read_runs(&runs)?;
        let mut out = Vec::with_capacity(entries.len());
        for &b in entries {
            let lba = slba + b / bs;
            let i = runs.partition_point(|r| r.slba <= lba) - 1;
            let at = ((lba - runs[i].slba) * bs + b % bs) as usize;
            out.push(data[i][at..at + len].to_vec());
        }
        let n = entries.len() as u64;
        self.charge(n * self.host.memory_access_ns);
        self.stats.bytes_used += n * len as u64;
        Ok(out)
    }

    /// Loads entries of `region` at byte offsets `entries`, each `len` bytes, by the mode's path.
    fn load(
        &mut self,
        region: Region,
        entries: &[u64],
        len: usize,
    ) -> Result<Vec<Vec<u8>>, SamplerError> {
        match self.mode {
            HostIoMode::Mmap => entries
                .iter()
                .map(|&b| self.mmap_load(region, b, len))
                .collect(),
            HostIoMode::Direct | HostIoMode::Async => self.scratchpad_load(region, entries, len),
        }
    }
}

impl NeighbourSource for HostIoSampler {
    fn node_count(&self) -> u64 {
        self.graph.node_count
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        let offsets: Vec<u64> = nodes.iter().flat_map(|&v| [8 * v, 8 * v + 8]).collect();
        let words = self.load(Region::Indptr, &offsets, 8)?;
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        nodes
            .iter()
            .zip(words.chunks_exact(2))
            .map(|(&v, w)| {
                let (start, end) = (word(&w[0]), word(&w[1]));
                if end < start || end > self.graph.edge_count {
                    return Err(SamplerError::GraphCorrupt(format!(
                        "indptr of node {v} is {start}..{end} with {} edges",
                        self.graph.edge_count
                    )));
                }
                Ok(EdgeRange {
                    start,
                    degree: end - start,
                })
            })
            .collect()
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        if positions.is_empty() {
            return Ok(Vec::new());
        }
        let width = u64::from(self.graph.id_width_bytes);
        let offsets: Vec<u64> = positions.iter().map(|&p| width * p).collect();
        let ids = self.load(Region::Indices, &offsets, width as usize)?;
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
}

impl Sampler for HostIoSampler {
    fn name(&self) -> &'static str {
        match self.mode {
            HostIoMode::Mmap => "host mmap",
            HostIoMode::Direct => "host direct I/O",
            HostIoMode::Async => "host async I/O",
        }
    }

    fn sample(
        &mut self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        let driver_before = self.device.stats();
        let device_before = self.device.device_counters();
        let start_ns = self.now_ns();
        let result = build_subgraph(self, seed, fanouts, targets);
        let elapsed = self.now_ns() - start_ns;
        self.stats.modelled_time_ns += elapsed;
        let d = self.device.stats().since(&driver_before);
        let s = &mut self.sampler.driver;
        s.commands += d.commands;
        s.admin_commands += d.admin_commands;
        s.reads += d.reads;
        s.writes += d.writes;
        s.ns_submits += d.ns_submits;
        s.ns_collects += d.ns_collects;
        s.other_commands += d.other_commands;
        s.failed_commands += d.failed_commands;
        s.h2c_bytes += d.h2c_bytes;
        s.c2h_bytes += d.c2h_bytes;
        if let (Some(before), Some(after)) = (device_before, self.device.device_counters()) {
            let delta = after.since(&before);
            let acc = self
                .sampler
                .device
                .get_or_insert_with(DeviceCounters::default);
            acc.nand_pages_read += delta.nand_pages_read;
            acc.nand_pages_programmed += delta.nand_pages_programmed;
            acc.pcie_h2c_bytes += delta.pcie_h2c_bytes;
            acc.pcie_c2h_bytes += delta.pcie_c2h_bytes;
            acc.commands += delta.commands;
        }
        if elapsed > 0 {
            self.sampler.modelled_time_ns =
                Some(self.sampler.modelled_time_ns.unwrap_or(0) + elapsed);
        }
        let sg = result?;
        self.sampler.minibatches += 1;
        self.sampler.nodes += sg.node_count() as u64;
        self.sampler.edges += sg.edge_count();
        self.sampler.subgraph_bytes += sg.as_bytes().len() as u64;
        Ok(sg)
    }

    fn stats(&self) -> SamplerStats {
        self.sampler
    }
}

#[cfg(test)]
mod tests;
