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
//! * Readahead: Linux's default `read_ahead_kb` is 128 KiB (`VM_READAHEAD_PAGES`: 32 pages); a
//!   block device can have another (this project's machine kind: 8,192 on its disk), and the
//!   model takes it as `read_ahead_kb`.
//! * Host sampling compute, per destination node and per sampled neighbour (RNG draw,
//!   deduplication hash probe, output write), beyond the graph loads charged as memory
//!   accesses: measured from this project's own host sampler by `sagessd validate
//!   host-compute` on this project's machine kind (AMD EPYC Zen 4): its instructions per unit
//!   counted exactly under callgrind (146 per destination node, 215 per sampled edge), turned
//!   into time by that machine's measured cost per instruction and per L2 miss, and fitted over
//!   six workloads whose minibatches each deduplicate 0.2–0.5 M nodes: `node_ns` = 24 and
//!   `edge_sampled_ns` = 38. The fit prices its workloads within −13..+27 % and a held-out
//!   GraphSAGE minibatch 20 % low; the best native runs fit 9 and 41 ns. \[measured\] (They
//!   were estimates of 50 and 90 ns, from DGL 2.1's CPU sampler on this machine, 86–115 ns per
//!   sampled edge with cache-resident loads: DGL's figure also holds its Python and block
//!   construction.)
//! * Page cache: 64 MiB by default — a deliberately small host memory budget, so that the
//!   emulator's graphs exceed it; experiments set it explicitly. \[choice, not a measurement\]
//!
//! # The page cache, read-around and readahead
//!
//! They follow what Linux 6.18 does for a mapped file (`docs/linux-page-cache.md` has the rules,
//! read from its source and measured on this project's machine):
//!
//! * [`page_cache`]: the classic two-list LRU (inactive and active lists, second chance for a
//!   page found referenced, activation on a second reference or a quick refault, the inactive
//!   list kept at `1 / ⌊√(10 × GiB)⌋` of the active one), pages mapped into the process or not,
//!   and the readahead mark;
//! * [`readahead`]: per open file, the fault read-around window (`read_ahead_kb`, centred on the
//!   fault, every uncached page of it), `mmap_miss`, fault-around's 16-page block and its effect
//!   on `mmap_miss`, and the asynchronous readahead a fault on a marked page starts.
//!
//! The runtime's mmap mode (`runtime/src/host_io.rs`) drives them fault by fault.

pub mod page_cache;
pub mod readahead;

use serde::{Deserialize, Serialize};

pub use page_cache::{Access, PageCache, PageCacheStats};
pub use readahead::{
    FAULT_AROUND_PAGES, FileReadahead, MMAP_LOTSAMISS, Window, fault_around_window,
};

use crate::error::EmulatorError;

/// The page size of the host's page cache.
pub const PAGE_SIZE_BYTES: u64 = 4096;
/// Longest fixed cost any time field may hold (10 s): larger values are unit mistakes.
const MAX_COST_NS: u64 = 10_000_000_000;
/// Largest readahead window accepted, KiB (64 MiB).
const MAX_READ_AHEAD_KB: u32 = 65_536;
/// Most commands one NVMe submission queue can hold.
const MAX_QUEUE_DEPTH: u32 = 65_535;
/// The host CPU's cache line: loads from one line, one after another, cost one DRAM access.
pub const CACHE_LINE_BYTES: u64 = 64;

/// How a host's sampling workers map a file: threads of one process share one mapping (one set
/// of page tables, one open file's readahead state); processes (a PyTorch DataLoader's workers)
/// each map it for themselves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MmapWorkers {
    /// One mapping: a page one worker faulted in is mapped for all.
    #[default]
    Threads,
    /// A mapping per worker: a page another worker faulted in is a minor fault (and a
    /// fault-around) here, each worker's faults drive its own read-around and `mmap_miss`, and
    /// a page young in two workers' page tables is activated by the first scan that sees it.
    Processes,
}

/// `[host]`: the host's I/O stack costs, page cache and readahead. Every field but
/// `mmap_workers` (default `threads`) is mandatory in TOML and unknown fields are rejected;
/// [`HostStackConfig::default`] is a typical Linux x86-64 server (sources in the module
/// documentation).
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
    /// The block device's `read_ahead_kb`: a major page fault reads a window of this many KiB
    /// around the fault, and each asynchronous readahead as much. A multiple of 4. Default 128
    /// (Linux's `VM_READAHEAD_PAGES`).
    pub read_ahead_kb: u32,
    /// Host sampling compute per sampled neighbour (RNG draw, deduplication hash probe, output
    /// write), beyond its memory loads. Default 29 ns \[measured: `sagessd validate
    /// host-compute`, this project's sampler on an AMD EPYC Zen 4\].
    pub edge_sampled_ns: u64,
    /// Host sampling compute per destination node of a layer (loop, sample-count choice,
    /// relabelling). Default 31 ns \[measured: `sagessd validate host-compute`\].
    pub node_ns: u64,
    /// Whether the mmap sampler's workers are threads sharing one mapping (default; what
    /// `compare` and the experiments model) or processes mapping the file each.
    #[serde(default)]
    pub mmap_workers: MmapWorkers,
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
            read_ahead_kb: 128,
            edge_sampled_ns: 29,
            node_ns: 31,
            mmap_workers: MmapWorkers::Threads,
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

    /// Host compute for building a subgraph of `sampled_edges` neighbours from the sampled ids a
    /// device returned ([`sagessd_abi::sampled_ids`]): per neighbour the per-edge share of
    /// sampling, `edge_sampled_ns` (its deduplication probe and output write, and a random draw
    /// the build does not make: an upper bound). No per-node work: the device sampled.
    pub fn host_build_ns(&self, sampled_edges: u64) -> u64 {
        sampled_edges * self.edge_sampled_ns
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
        if !(4..=MAX_READ_AHEAD_KB).contains(&self.read_ahead_kb)
            || !self.read_ahead_kb.is_multiple_of(4)
        {
            return Err(invalid(
                "host.read_ahead_kb",
                format!(
                    "must be a multiple of 4 in 4..={MAX_READ_AHEAD_KB} (got {})",
                    self.read_ahead_kb
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

    /// The readahead window, in 4 KiB pages (`read_ahead_kb / 4`).
    pub fn ra_pages(&self) -> u32 {
        self.read_ahead_kb / 4
    }

    /// A fresh fault readahead state for one open file.
    pub fn file_readahead(&self) -> FileReadahead {
        FileReadahead::new(self.ra_pages())
    }

    /// A page cache of this configuration's capacity.
    pub fn page_cache(&self) -> PageCache {
        PageCache::new(self.page_cache_pages())
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
        for bad in [0, 6, 65_540] {
            assert_eq!(
                field_of(HostStackConfig {
                    read_ahead_kb: bad,
                    ..d()
                }),
                "host.read_ahead_kb"
            );
        }
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
}
