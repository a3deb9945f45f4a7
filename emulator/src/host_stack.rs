//! The host's I/O stack, in virtual nanoseconds: system calls, the block layer and NVMe driver,
//! interrupts, context switches, page faults, and a kernel page cache with readahead.
//!
//! The emulator's [`crate::Ssd`] times everything from the doorbell write to the MSI-X message
//! (`controller.doorbell_ns` … `controller.interrupt_ns`). What the *host CPU* spends around each
//! I/O is modelled here, as fixed costs per event that a host sampler charges to the device's
//! virtual clock with [`crate::Ssd::advance_to_ns`]. Nothing here reads a clock or draws a random
//! number: the same sequence of calls gives the same costs and the same cache contents.
//!
//! # Cost formulas (all in ns; `C` = [`HostStackConfig`])
//!
//! ```plain
//! synchronous pread/O_DIRECT, one I/O (thread blocks):
//!     before submit   C.syscall_ns + C.submit_ns
//!     after completion C.complete_ns + C.context_switch_ns          (IRQ + wake-up)
//! mmap major fault (page not cached), one I/O of the faulting page + read-around pages:
//!     before submit   C.major_fault_ns + C.submit_ns
//!     after completion C.complete_ns + C.context_switch_ns
//! mmap major fault: the read is the run of uncached pages containing the fault within the
//!     read-around window (see below)
//! mmap minor fault (cached, not yet mapped in this process): C.minor_fault_ns
//! loads from host memory (mapped page, user buffer): C.memory_access_ns per 64-byte cache
//!     line, a load on the line the previous load touched being free (cache_lines_touched)
//! host sampling compute, per layer: C.node_ns per destination node
//!     + C.edge_sampled_ns per sampled neighbour (none for in-storage sampling)
//! io_uring batch of n I/Os (one io_uring_enter that submits and waits):
//!     submission      C.syscall_ns + n × (C.uring_sqe_ns + C.submit_ns), SQE i issued after
//!                     C.syscall_ns + (i+1) × (C.uring_sqe_ns + C.submit_ns)
//!     completions     handled one after another in completion order, each C.complete_ns:
//!                     h_i = max(h_{i-1}, completed_at_i) + C.complete_ns
//!     wake-up + reap  C.context_switch_ns + n × C.uring_cqe_ns after the last h_i
//! ```
//!
//! When a thread blocks, switching *out* overlaps the device's work, so only the switch back in
//! after the completion is on the critical path: one `context_switch_ns` per wait.
//!
//! # Sources of the defaults ([`HostStackConfig::default`]: a typical Linux x86-64 server)
//!
//! * System call entry + exit ≈ 100 ns: minimal syscalls (getpid, close(-1)) measured at roughly
//!   60–250 ns across a range of Xeon hosts and kernels, more with Meltdown mitigations
//!   (G. Sauthoff, "On the costs of syscalls", gms.tf, 2021).
//! * Block layer + NVMe driver submission ≈ 1.5 µs and interrupt + completion handling
//!   ≈ 2.5 µs per I/O: Yang, Minturn, Hady, "When Poll Is Better than Interrupt" (FAST '12)
//!   measured the interrupt-driven kernel path of a 4 KiB read at several µs of CPU beyond the
//!   device; Lee et al., "Asynchronous I/O Stack" (ATC '19) show block-layer submission and the
//!   completion path each costing µs on the 4 KiB read path; Larsen et al. (2009) measured
//!   > 3 µs of interrupt processing per event on a Xeon. \[estimate within those ranges\]
//! * Context switch (wake a blocked thread and switch to it) ≈ 1.5 µs: the scheduler wake-up and
//!   switch the FAST '12 paper counts among the interrupt path's costs, 1–2 µs with cache
//!   effects. \[estimate\]
//! * Minor page fault ≈ 1 µs; major fault's own handling (exception, VMA lookup, page allocation,
//!   page-cache insertion, PTE update), excluding the I/O, ≈ 2 µs: minor faults are quoted at
//!   1–10 µs of OS overhead (systemoverflow.com, "Demand paging and page fault latency"), and
//!   Yang & Seymour, "Pmbench" (UNLV) find OS software overhead dominant in fault latency on fast
//!   SSDs. \[estimate\]
//! * DRAM access ≈ 100 ns: a random, LLC-missing load (60–100 ns; SmartSAGE §III-B notes
//!   sampling is latency-bound with a 62 % LLC miss rate). \[estimate\]
//! * io_uring: ≈ 100 ns per SQE (prepare in user space + `io_submit_sqes` per request) and
//!   ≈ 50 ns per CQE reaped from the shared ring: the point of io_uring is that per-request cost
//!   is memory operations, not mode switches (LWN 810414, "The rapid growth of io_uring").
//!   \[estimate\]
//! * Readahead: Linux's default `read_ahead_kb` is 128 KiB (`VM_MAX_READAHEAD`) = 32 pages. For
//!   `read(2)` (ondemand readahead, `mm/readahead.c`) the initial window for a one-page read is
//!   4 pages (`get_init_ra_size`: 4 × the request when it is small), and each sequential hit on
//!   the window doubles it (`get_next_ra_size`) up to the maximum. A page *fault* takes another
//!   path (`mm/filemap.c`, `filemap_fault` → `do_sync_mmap_readahead`): see below.
//! * Host sampling compute, per destination node and per sampled neighbour (RNG draw,
//!   deduplication hash probe, output write), beyond the graph loads charged as memory
//!   accesses: DGL 2.1's CPU `NeighborSampler`, one thread, measured on this project's machine
//!   (`/work/shared/anchors/README.md`), samples 8.7–11.6 M edges/s on cnr-2000 (a web graph
//!   with strong locality, whose CSR loads mostly hit the CPU caches) and 4.6–6.1 M edges/s on
//!   R-MAT scale 22 (random, LLC-missing loads): ~86–115 ns per sampled edge when the loads
//!   hit the caches, ~163–218 ns when they miss DRAM. The compute alone is therefore taken as
//!   `edge_sampled_ns` = 90 ns (the cache-friendly figure; DRAM misses are charged separately,
//!   `memory_access_ns` per cache line), and `node_ns` = 50 ns per destination node (the
//!   per-node loop, sample-count choice and one relabelling hash insert, a few tens of ns
//!   against a cache-resident table). \[estimate from that measurement; DGL's per-edge figure
//!   also includes its block construction, so these are if anything generous to the host\]
//! * Page cache: 64 MiB by default — a deliberately small host memory budget, so that the
//!   emulator's graphs exceed it; experiments set it explicitly. \[choice, not a measurement\]
//!
//! # The page cache, read-around and readahead
//!
//! [`PageCache`] is an LRU over 4 KiB pages ([`PAGE_SIZE_BYTES`]) holding at most
//! `capacity_bytes / 4096` pages, O(1) per operation (a `HashMap` from page to slot plus a
//! doubly linked list threaded through a `Vec` of slots). Each cached page also remembers whether
//! the process has mapped it (a minor fault maps it). Linux's active/inactive lists, fault-around
//! and dirty pages are not modelled.
//!
//! [`ReadAround`] is the page-fault path, after `do_sync_mmap_readahead` in `mm/filemap.c`
//! (mapping without `MADV_SEQUENTIAL`/`MADV_RANDOM`): a major fault at file page `index` reads
//! `ra_pages` (= `readahead_max_pages`, `read_ahead_kb`) pages starting at
//! `max(0, index − ra_pages / 2)` — a window centred on the fault — clipped to the file's end.
//! Linux also counts `mmap_miss` per file: +1 per major fault (up to `10 × MMAP_LOTSAMISS`),
//! −1 per fault that finds the page cached (`do_async_mmap_readahead`); while it exceeds
//! `MMAP_LOTSAMISS` (100), a fault reads only its own page. Both are modelled. Not modelled:
//! the asynchronous readahead Linux starts when a fault lands on the window's `PG_readahead`
//! marker page (`ra_pages / 4` from the window's end), and the window's uncached pages that are
//! not contiguous with the fault (the caller reads only the run of uncached pages containing the
//! fault; Linux reads the others too, asynchronously).
//!
//! [`Readahead`] is Linux's on-demand readahead for sequential `read(2)`, simplified: a miss at
//! the page just after the previous window is sequential and doubles the window (up to the
//! maximum); any other miss resets it to the minimum. Linux starts the next window
//! asynchronously when the reader touches a marked page inside the current one; here the next
//! window is read at the miss instead. No host mode uses `read(2)` through the page cache today
//! (direct and async bypass it), so it is kept for a buffered-read mode.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::EmulatorError;

/// The page size of the host's page cache.
pub const PAGE_SIZE_BYTES: u64 = 4096;
/// Longest fixed cost any time field may hold (10 s): larger values are unit mistakes.
const MAX_COST_NS: u64 = 10_000_000_000;
/// Largest readahead window accepted (64 MiB of 4 KiB pages).
const MAX_READAHEAD_PAGES: u32 = 16_384;
/// Most commands one NVMe submission queue can hold.
const MAX_QUEUE_DEPTH: u32 = 65_535;
/// The host CPU's cache line: loads from one line, one after another, cost one DRAM access.
pub const CACHE_LINE_BYTES: u64 = 64;
/// Linux's `MMAP_LOTSAMISS` (`mm/filemap.c`): with more net misses than this, a fault stops
/// reading around.
pub const MMAP_LOTSAMISS: u32 = 100;

/// `[host]`: the host's I/O stack costs, page cache and readahead. Every field is mandatory in
/// TOML and unknown fields are rejected; [`HostStackConfig::default`] is a typical Linux x86-64
/// server (sources in the module documentation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostStackConfig {
    /// System call entry + exit (mode switch, register save/restore, mitigations). Default
    /// 100 ns (gms.tf syscall measurements: ~60–250 ns).
    pub syscall_ns: u64,
    /// Block layer + NVMe driver work to submit one I/O (bio and request allocation, blk-mq
    /// dispatch, `nvme_queue_rq`, SQE copy). Default 1,500 ns \[estimate, FAST '12 / ATC '19\].
    pub submit_ns: u64,
    /// Host interrupt handling + completion of one I/O (ISR, CQE processing, blk-mq and bio
    /// completion); the device's MSI-X delivery is `controller.interrupt_ns`, not this.
    /// Default 2,500 ns \[estimate, FAST '12; Larsen et al. 2009: > 3 µs per interrupt\].
    pub complete_ns: u64,
    /// Waking a thread blocked on I/O and switching to it (charged once per blocking wait; the
    /// switch out overlaps the device's work). Default 1,500 ns \[estimate, 1–2 µs\].
    pub context_switch_ns: u64,
    /// A minor page fault: the page is in the page cache but not mapped in this process.
    /// Default 1,000 ns \[estimate, 1–10 µs quoted\].
    pub minor_fault_ns: u64,
    /// A major page fault's own handling, excluding its I/O (exception, VMA lookup, page
    /// allocation, page-cache insertion, PTE update). Default 2,000 ns \[estimate\].
    pub major_fault_ns: u64,
    /// One access to an entry in host DRAM (a mapped page or a user buffer), cache-missing.
    /// Default 100 ns \[estimate, 60–100 ns DRAM latency\].
    pub memory_access_ns: u64,
    /// io_uring: preparing one SQE and the kernel's per-request submission work, beyond
    /// `submit_ns`. Default 100 ns \[estimate\].
    pub uring_sqe_ns: u64,
    /// io_uring: reaping one CQE from the shared completion ring. Default 50 ns \[estimate\].
    pub uring_cqe_ns: u64,
    /// io_uring queue depth: most I/Os one submission batch carries. Default 32.
    pub uring_queue_depth: u32,
    /// The host memory budget for the page cache, in bytes (whole 4 KiB pages are used).
    /// Default 64 MiB \[choice: smaller than the graphs experiments use\].
    pub page_cache_bytes: u64,
    /// Initial (and reset) readahead window, in pages, the faulting page included. Default 4
    /// (Linux `get_init_ra_size` for a one-page read).
    pub readahead_min_pages: u32,
    /// Largest readahead window, in pages, and the read-around window of a major page fault.
    /// Default 32 (Linux `read_ahead_kb` = 128 KiB).
    pub readahead_max_pages: u32,
    /// Host sampling compute per sampled neighbour (RNG draw, deduplication hash probe, output
    /// write), beyond its memory loads. Default 90 ns \[estimate from DGL's CPU sampler measured
    /// on this machine: ~86–115 ns per sampled edge with cache-resident loads\].
    pub edge_sampled_ns: u64,
    /// Host sampling compute per destination node of a layer (loop, sample-count choice,
    /// relabelling). Default 50 ns \[estimate\].
    pub node_ns: u64,
}

impl Default for HostStackConfig {
    fn default() -> Self {
        Self {
            syscall_ns: 100,
            submit_ns: 1_500,
            complete_ns: 2_500,
            context_switch_ns: 1_500,
            minor_fault_ns: 1_000,
            major_fault_ns: 2_000,
            memory_access_ns: 100,
            uring_sqe_ns: 100,
            uring_cqe_ns: 50,
            uring_queue_depth: 32,
            page_cache_bytes: 64 << 20,
            readahead_min_pages: 4,
            readahead_max_pages: 32,
            edge_sampled_ns: 90,
            node_ns: 50,
        }
    }
}

fn invalid(field: &'static str, reason: String) -> EmulatorError {
    EmulatorError::InvalidConfig { field, reason }
}

impl HostStackConfig {
    /// Host time of one synchronous I/O (a `pread` or a passthrough ioctl): the system call
    /// and submission before it, the completion and the wake-up after it.
    pub fn sync_io_ns(&self) -> u64 {
        self.syscall_ns + self.submit_ns + self.complete_ns + self.context_switch_ns
    }

    /// Host sampling compute for `dst_nodes` destination nodes (over all layers) and
    /// `sampled_edges` neighbours, when the graph is in host memory: per node its sampling work
    /// and two cache-missing loads (its index entry, and the line its sampled neighbours
    /// usually share), per edge its sampling work.
    pub fn sampling_ns(&self, dst_nodes: u64, sampled_edges: u64) -> u64 {
        dst_nodes * (self.node_ns + 2 * self.memory_access_ns)
            + sampled_edges * self.edge_sampled_ns
    }

    /// Checks every field; the error names the first bad one (e.g. `host.submit_ns`).
    pub fn validate(&self) -> Result<(), EmulatorError> {
        for (value, field) in [
            (self.syscall_ns, "host.syscall_ns"),
            (self.submit_ns, "host.submit_ns"),
            (self.complete_ns, "host.complete_ns"),
            (self.context_switch_ns, "host.context_switch_ns"),
            (self.minor_fault_ns, "host.minor_fault_ns"),
            (self.major_fault_ns, "host.major_fault_ns"),
            (self.memory_access_ns, "host.memory_access_ns"),
            (self.uring_sqe_ns, "host.uring_sqe_ns"),
            (self.uring_cqe_ns, "host.uring_cqe_ns"),
            (self.edge_sampled_ns, "host.edge_sampled_ns"),
            (self.node_ns, "host.node_ns"),
        ] {
            if value > MAX_COST_NS {
                return Err(invalid(
                    field,
                    format!("must be at most {MAX_COST_NS} ns (got {value})"),
                ));
            }
        }
        if !(1..=MAX_QUEUE_DEPTH).contains(&self.uring_queue_depth) {
            return Err(invalid(
                "host.uring_queue_depth",
                format!(
                    "must be 1..={MAX_QUEUE_DEPTH} (got {})",
                    self.uring_queue_depth
                ),
            ));
        }
        if self.page_cache_bytes < PAGE_SIZE_BYTES {
            return Err(invalid(
                "host.page_cache_bytes",
                format!(
                    "must hold at least one {PAGE_SIZE_BYTES}-byte page (got {})",
                    self.page_cache_bytes
                ),
            ));
        }
        if !(1..=MAX_READAHEAD_PAGES).contains(&self.readahead_max_pages) {
            return Err(invalid(
                "host.readahead_max_pages",
                format!(
                    "must be 1..={MAX_READAHEAD_PAGES} (got {})",
                    self.readahead_max_pages
                ),
            ));
        }
        if !(1..=self.readahead_max_pages).contains(&self.readahead_min_pages) {
            return Err(invalid(
                "host.readahead_min_pages",
                format!(
                    "must be 1..=readahead_max_pages ({}) (got {})",
                    self.readahead_max_pages, self.readahead_min_pages
                ),
            ));
        }
        Ok(())
    }

    /// Host CPU time before a synchronous `pread` (O_DIRECT) reaches the device: syscall entry
    /// and exit plus block-layer/driver submission.
    pub fn sync_read_submit_ns(&self) -> u64 {
        self.syscall_ns + self.submit_ns
    }

    /// Host time after a blocking I/O's completion reaches the host: interrupt and completion
    /// handling, then waking the blocked thread.
    pub fn blocking_completion_ns(&self) -> u64 {
        self.complete_ns + self.context_switch_ns
    }

    /// Host CPU time before a major fault's read reaches the device: fault handling plus
    /// block-layer/driver submission.
    pub fn major_fault_submit_ns(&self) -> u64 {
        self.major_fault_ns + self.submit_ns
    }

    /// Host CPU time per SQE of an io_uring batch, after the batch's one `syscall_ns`.
    pub fn uring_per_sqe_ns(&self) -> u64 {
        self.uring_sqe_ns + self.submit_ns
    }

    /// Pages the page cache holds: `page_cache_bytes / 4096`, at least 1.
    pub fn page_cache_pages(&self) -> usize {
        usize::try_from(self.page_cache_bytes / PAGE_SIZE_BYTES)
            .unwrap_or(usize::MAX)
            .max(1)
    }

    /// A readahead state with this configuration's window bounds.
    pub fn readahead(&self) -> Readahead {
        Readahead::new(self.readahead_min_pages, self.readahead_max_pages)
    }

    /// A page-fault read-around state with this configuration's window.
    pub fn read_around(&self) -> ReadAround {
        ReadAround::new(self.readahead_max_pages)
    }

    /// A page cache of this configuration's capacity.
    pub fn page_cache(&self) -> PageCache {
        PageCache::new(self.page_cache_pages())
    }
}

/// What a [`PageCache::access`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Cached and mapped: an ordinary memory access.
    Hit,
    /// Cached but not mapped in this process: a minor fault maps it (now it is).
    MinorFault,
    /// Not cached: a major fault must read it.
    Miss,
}

/// Counters of a [`PageCache`], cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PageCacheStats {
    /// Accesses to cached, mapped pages.
    pub hits: u64,
    /// Accesses to cached pages not yet mapped (minor faults).
    pub minor_faults: u64,
    /// Accesses to pages not cached (major faults).
    pub misses: u64,
    /// Pages inserted.
    pub insertions: u64,
    /// Pages evicted to make room.
    pub evictions: u64,
}

impl PageCacheStats {
    /// Accesses counted: hits + minor faults + misses.
    pub fn accesses(&self) -> u64 {
        self.hits + self.minor_faults + self.misses
    }

    /// Share of accesses that found the page cached (hits and minor faults); 0 with none.
    pub fn hit_rate(&self) -> f64 {
        match self.accesses() {
            0 => 0.0,
            n => (self.hits + self.minor_faults) as f64 / n as f64,
        }
    }
}

/// "No slot" in the intrusive list.
const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Slot {
    page: u64,
    prev: u32,
    next: u32,
    mapped: bool,
}

/// An LRU page cache over 4 KiB pages, identified by page number. Metadata only: the caller
/// keeps the pages' bytes (and drops those of the pages [`PageCache::insert`] evicts).
#[derive(Clone, Debug)]
pub struct PageCache {
    capacity_pages: usize,
    index: HashMap<u64, u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
    stats: PageCacheStats,
}

impl PageCache {
    /// An empty cache holding at most `capacity_pages` pages (at least 1).
    pub fn new(capacity_pages: usize) -> Self {
        let capacity_pages = capacity_pages.clamp(1, NIL as usize - 1);
        Self {
            capacity_pages,
            index: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            stats: PageCacheStats::default(),
        }
    }

    /// Most pages held.
    pub fn capacity_pages(&self) -> usize {
        self.capacity_pages
    }

    /// Pages held now.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no page is held.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether `page` is cached (does not count as an access, does not touch the LRU order).
    pub fn contains(&self, page: u64) -> bool {
        self.index.contains_key(&page)
    }

    /// The counters so far.
    pub fn stats(&self) -> PageCacheStats {
        self.stats
    }

    /// An access to `page` by the process: a cached page becomes most recently used (and mapped,
    /// if it was not); a miss changes nothing but the counters (the caller reads the page and
    /// [`Self::insert`]s it).
    pub fn access(&mut self, page: u64) -> Access {
        let Some(&slot) = self.index.get(&page) else {
            self.stats.misses += 1;
            return Access::Miss;
        };
        self.unlink(slot);
        self.push_front(slot);
        let s = &mut self.slots[slot as usize];
        if s.mapped {
            self.stats.hits += 1;
            Access::Hit
        } else {
            s.mapped = true;
            self.stats.minor_faults += 1;
            Access::MinorFault
        }
    }

    /// Inserts `page` as most recently used (`mapped`: whether the process maps it at once, as
    /// for the faulting page), evicting the least recently used page if the cache is full and
    /// returning it. Inserting a cached page only refreshes it (and maps it if `mapped`).
    pub fn insert(&mut self, page: u64, mapped: bool) -> Option<u64> {
        if let Some(&slot) = self.index.get(&page) {
            self.unlink(slot);
            self.push_front(slot);
            self.slots[slot as usize].mapped |= mapped;
            return None;
        }
        let mut evicted = None;
        if self.index.len() >= self.capacity_pages {
            let victim = self.tail;
            self.unlink(victim);
            let old = self.slots[victim as usize].page;
            self.index.remove(&old);
            self.free.push(victim);
            self.stats.evictions += 1;
            evicted = Some(old);
        }
        let slot = Slot {
            page,
            prev: NIL,
            next: NIL,
            mapped,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.push_front(i);
        self.index.insert(page, i);
        self.stats.insertions += 1;
        evicted
    }

    /// Cached pages from most to least recently used (for tests and reports; O(n)).
    pub fn lru_order(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.len());
        let mut at = self.head;
        while at != NIL {
            let s = &self.slots[at as usize];
            out.push(s.page);
            at = s.next;
        }
        out
    }

    fn unlink(&mut self, i: u32) {
        let Slot { prev, next, .. } = self.slots[i as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
        let s = &mut self.slots[i as usize];
        s.prev = NIL;
        s.next = NIL;
    }

    fn push_front(&mut self, i: u32) {
        let old = self.head;
        {
            let s = &mut self.slots[i as usize];
            s.prev = NIL;
            s.next = old;
        }
        if old == NIL {
            self.tail = i;
        } else {
            self.slots[old as usize].prev = i;
        }
        self.head = i;
    }
}

/// One file's (one mapping's) on-demand readahead state, simplified from Linux (see the module
/// documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readahead {
    min_pages: u32,
    max_pages: u32,
    window_pages: u32,
    /// The page right after the last window read: a miss there is sequential.
    next_page: Option<u64>,
    /// Windows that doubled (or stayed at the maximum) on a sequential miss.
    pub sequential_misses: u64,
    /// Misses that were not sequential (the window restarted at the minimum).
    pub random_misses: u64,
}

impl Readahead {
    /// A fresh state; windows lie in `min_pages..=max_pages` (both at least 1).
    pub fn new(min_pages: u32, max_pages: u32) -> Self {
        let max_pages = max_pages.max(1);
        let min_pages = min_pages.clamp(1, max_pages);
        Self {
            min_pages,
            max_pages,
            window_pages: min_pages,
            next_page: None,
            sequential_misses: 0,
            random_misses: 0,
        }
    }

    /// The current window, in pages.
    pub fn window_pages(&self) -> u32 {
        self.window_pages
    }

    /// A miss at `page`: returns the window to read, in pages, starting at `page` (the caller
    /// may read fewer, e.g. at the end of the file or up to the next cached page). A miss right
    /// after the previous window doubles the window up to the maximum; any other miss resets
    /// it to the minimum.
    pub fn on_miss(&mut self, page: u64) -> u32 {
        if self.next_page == Some(page) {
            self.window_pages = self.window_pages.saturating_mul(2).min(self.max_pages);
            self.sequential_misses += 1;
        } else {
            self.window_pages = self.min_pages;
            self.random_misses += 1;
        }
        self.next_page = Some(page + u64::from(self.window_pages));
        self.window_pages
    }
}

/// One file's page-fault read-around state (`do_sync_mmap_readahead`, see the module
/// documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadAround {
    ra_pages: u32,
    mmap_miss: u32,
    /// Major faults that read a window around the fault.
    pub around_reads: u64,
    /// Major faults that read only their page (`mmap_miss` above [`MMAP_LOTSAMISS`]).
    pub single_page_reads: u64,
}

impl ReadAround {
    /// A fresh state reading `ra_pages` (at least 1) around a fault.
    pub fn new(ra_pages: u32) -> Self {
        Self {
            ra_pages: ra_pages.max(1),
            mmap_miss: 0,
            around_reads: 0,
            single_page_reads: 0,
        }
    }

    /// Linux's `mmap_miss` counter now.
    pub fn mmap_miss(&self) -> u32 {
        self.mmap_miss
    }

    /// A major fault at file page `index` of a file of `file_pages` pages: the file pages to
    /// read, `start..end`, which contains `index`. `max(0, index − ra_pages/2)` for
    /// `ra_pages` pages, clipped to the file; only `index` once `mmap_miss` exceeds
    /// [`MMAP_LOTSAMISS`].
    pub fn on_miss(&mut self, index: u64, file_pages: u64) -> std::ops::Range<u64> {
        let file_pages = file_pages.max(index + 1);
        if self.mmap_miss < MMAP_LOTSAMISS * 10 {
            self.mmap_miss += 1;
        }
        if self.mmap_miss > MMAP_LOTSAMISS {
            self.single_page_reads += 1;
            return index..index + 1;
        }
        self.around_reads += 1;
        let ra = u64::from(self.ra_pages);
        let start = index.saturating_sub(ra / 2);
        start..(start + ra).min(file_pages)
    }

    /// A fault that found its page cached (a minor fault): `mmap_miss` goes down by one
    /// (`do_async_mmap_readahead`).
    pub fn on_cached_fault(&mut self) {
        self.mmap_miss = self.mmap_miss.saturating_sub(1);
    }
}

/// Number of CPU cache lines loads of `len` bytes at byte offsets `entries`, in this order,
/// cost when a load on the line the previous load ended on is free (it is in L1): one per line
/// change. The first load counts.
pub fn cache_lines_touched(entries: &[u64], len: usize) -> u64 {
    let mut last: Option<u64> = None;
    let mut n = 0;
    for &b in entries {
        let first = b / CACHE_LINE_BYTES;
        let end = (b + len.max(1) as u64 - 1) / CACHE_LINE_BYTES;
        n += end - first + u64::from(last != Some(first));
        last = Some(end);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip_through_toml() {
        let c = HostStackConfig::default();
        c.validate().unwrap();
        let text = toml::to_string(&c).unwrap();
        let back: HostStackConfig = toml::from_str(&text).unwrap();
        assert_eq!(back, c);
        // Unknown and missing fields are refused.
        assert!(toml::from_str::<HostStackConfig>(&format!("{text}\nbogus_ns = 1\n")).is_err());
        let missing: String = text
            .lines()
            .filter(|l| !l.starts_with("submit_ns"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(toml::from_str::<HostStackConfig>(&missing).is_err());
    }

    #[test]
    fn validate_names_the_bad_field() {
        let field_of = |c: HostStackConfig| match c.validate() {
            Err(EmulatorError::InvalidConfig { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        };
        let d = HostStackConfig::default;
        assert_eq!(
            field_of(HostStackConfig {
                complete_ns: MAX_COST_NS + 1,
                ..d()
            }),
            "host.complete_ns"
        );
        assert_eq!(
            field_of(HostStackConfig {
                uring_queue_depth: 0,
                ..d()
            }),
            "host.uring_queue_depth"
        );
        assert_eq!(
            field_of(HostStackConfig {
                page_cache_bytes: 4095,
                ..d()
            }),
            "host.page_cache_bytes"
        );
        assert_eq!(
            field_of(HostStackConfig {
                readahead_min_pages: 64,
                ..d()
            }),
            "host.readahead_min_pages"
        );
        assert_eq!(
            field_of(HostStackConfig {
                readahead_max_pages: 0,
                ..d()
            }),
            "host.readahead_max_pages"
        );
        let e = HostStackConfig {
            submit_ns: u64::MAX,
            ..d()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("host.submit_ns"), "{e}");
    }

    #[test]
    fn cost_accounting() {
        let c = HostStackConfig::default();
        assert_eq!(c.sync_read_submit_ns(), 100 + 1_500);
        assert_eq!(c.blocking_completion_ns(), 2_500 + 1_500);
        assert_eq!(c.major_fault_submit_ns(), 2_000 + 1_500);
        assert_eq!(c.uring_per_sqe_ns(), 100 + 1_500);
        // 4 KiB at 10 GB/s = 409.6 ns → 410 (rounded up).
        assert_eq!(c.page_cache_pages(), 16_384);
        let small = HostStackConfig {
            page_cache_bytes: 3 * 4096 + 100,
            ..c
        };
        assert_eq!(small.page_cache_pages(), 3);
        assert_eq!(small.page_cache().capacity_pages(), 3);
        // A synchronous direct read costs the host 5.6 µs around the device's own latency.
        assert_eq!(c.sync_read_submit_ns() + c.blocking_completion_ns(), 5_600);
    }

    #[test]
    fn lru_order_hits_and_minor_faults() {
        let mut pc = PageCache::new(3);
        assert_eq!(pc.access(1), Access::Miss);
        assert_eq!(pc.insert(1, true), None);
        assert_eq!(pc.insert(2, false), None);
        assert_eq!(pc.insert(3, false), None);
        assert_eq!(pc.lru_order(), vec![3, 2, 1]);
        // A mapped page hits; an unmapped one minor-faults once, then hits.
        assert_eq!(pc.access(1), Access::Hit);
        assert_eq!(pc.lru_order(), vec![1, 3, 2]);
        assert_eq!(pc.access(2), Access::MinorFault);
        assert_eq!(pc.access(2), Access::Hit);
        assert_eq!(pc.lru_order(), vec![2, 1, 3]);
        // The least recently used page (3) is evicted.
        assert_eq!(pc.insert(4, true), Some(3));
        assert_eq!(pc.lru_order(), vec![4, 2, 1]);
        assert!(!pc.contains(3));
        assert_eq!(pc.access(3), Access::Miss);
        // Re-inserting a cached page refreshes it without evicting.
        assert_eq!(pc.insert(1, false), None);
        assert_eq!(pc.lru_order(), vec![1, 4, 2]);
        let s = pc.stats();
        assert_eq!(
            (s.hits, s.minor_faults, s.misses, s.insertions, s.evictions),
            (2, 1, 2, 4, 1)
        );
        assert!((s.hit_rate() - 3.0 / 5.0).abs() < 1e-12);
    }

    #[test]
    fn capacity_is_a_hard_bound_and_matches_an_oracle() {
        // Against a naive Vec-based LRU, over a deterministic pseudo-random page stream.
        let cap = 17;
        let mut pc = PageCache::new(cap);
        let mut oracle: Vec<u64> = Vec::new(); // MRU first
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let page = x % 40;
            let hit = pc.access(page) != Access::Miss;
            let pos = oracle.iter().position(|p| *p == page);
            assert_eq!(hit, pos.is_some());
            match pos {
                Some(i) => {
                    oracle.remove(i);
                    oracle.insert(0, page);
                }
                None => {
                    let evicted = pc.insert(page, true);
                    oracle.insert(0, page);
                    let expected = (oracle.len() > cap).then(|| oracle.pop().unwrap());
                    assert_eq!(evicted, expected);
                }
            }
            assert!(pc.len() <= cap);
            assert_eq!(pc.lru_order(), oracle);
        }
        assert_eq!(pc.len(), cap);
        // Slots are reused: storage never grows past the capacity.
        assert!(pc.slots.len() <= cap);
    }

    #[test]
    fn read_around_is_centred_on_the_fault_and_clipped_to_the_file() {
        let mut ra = ReadAround::new(32);
        assert_eq!(ra.on_miss(100, 1000), 84..116);
        assert_eq!(ra.on_miss(3, 1000), 0..32); // clipped at the start
        assert_eq!(ra.on_miss(990, 1000), 974..1000); // and at the end
        assert_eq!(ra.on_miss(5, 6), 0..6);
        assert_eq!(ReadAround::new(1).on_miss(7, 10), 7..8);
        assert_eq!(ra.mmap_miss(), 4);
        ra.on_cached_fault();
        assert_eq!(ra.mmap_miss(), 3);
        // More than MMAP_LOTSAMISS net misses: only the faulting page.
        let mut ra = ReadAround::new(32);
        for i in 0..u64::from(MMAP_LOTSAMISS) {
            assert_eq!(
                ra.on_miss(i * 100, 1 << 20).end - (i * 100).saturating_sub(16),
                32
            );
        }
        assert_eq!(ra.on_miss(50_000, 1 << 20), 50_000..50_001);
        assert_eq!((ra.around_reads, ra.single_page_reads), (100, 1));
        // Two cached faults bring it back to 99: read-around again.
        ra.on_cached_fault();
        ra.on_cached_fault();
        assert_eq!(ra.on_miss(60_000, 1 << 20), 59_984..60_016);
        // The counter saturates at 10 × MMAP_LOTSAMISS.
        for _ in 0..5000 {
            ra.on_miss(0, 10);
        }
        assert_eq!(ra.mmap_miss(), MMAP_LOTSAMISS * 10);
    }

    #[test]
    fn cache_lines_are_charged_once_per_line_change() {
        // indptr[v], indptr[v+1] share a line unless v+1 starts the next one.
        assert_eq!(cache_lines_touched(&[0, 8], 8), 1);
        assert_eq!(cache_lines_touched(&[56, 64], 8), 2);
        assert_eq!(cache_lines_touched(&[0, 8, 128, 136, 0], 8), 3);
        // Ascending positions in one list: one per line.
        let ids: Vec<u64> = (0..40).map(|i| 4 * i).collect();
        assert_eq!(cache_lines_touched(&ids, 4), 3);
        // A straddling load touches two lines.
        assert_eq!(cache_lines_touched(&[60], 8), 2);
        assert_eq!(cache_lines_touched(&[], 8), 0);
    }

    #[test]
    fn readahead_grows_on_sequential_misses_and_resets_on_random_ones() {
        let mut ra = Readahead::new(4, 32);
        assert_eq!(ra.on_miss(100), 4); // first miss: minimum window
        assert_eq!(ra.on_miss(104), 8); // right after the window: doubles
        assert_eq!(ra.on_miss(112), 16);
        assert_eq!(ra.on_miss(128), 32);
        assert_eq!(ra.on_miss(160), 32); // capped at the maximum
        assert_eq!(ra.window_pages(), 32);
        assert_eq!(ra.on_miss(5), 4); // random: reset
        assert_eq!(ra.on_miss(10), 4); // not at 5 + 4: random again
        assert_eq!(ra.on_miss(14), 8);
        assert_eq!((ra.sequential_misses, ra.random_misses), (5, 3));
        // MADV_RANDOM-like and read-around-like settings.
        let mut one = Readahead::new(1, 1);
        assert_eq!((one.on_miss(0), one.on_miss(1), one.on_miss(9)), (1, 1, 1));
        let mut around = Readahead::new(32, 32);
        assert_eq!(around.on_miss(7), 32);
        // Out-of-order bounds are clamped.
        assert_eq!(Readahead::new(0, 0).on_miss(3), 1);
    }
}
