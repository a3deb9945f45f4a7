//! [`MmapSampler`]: the CSR files (`indptr` and `indices`) mapped into memory and read through
//! the kernel's page cache: page faults, fault-around and readahead do the I/O. Its I/O is what
//! the kernel says it did for the process while it sampled: the bytes it read from storage
//! (`/proc/self/io` `read_bytes`, read-around and readahead included) and the major and minor
//! page faults (`getrusage`).

use std::fs::File;
use std::os::fd::AsRawFd;

use crate::dataset::Dataset;
use crate::sampler::{
    EdgeRange, NeighbourSource, SampledSubgraph, Sampler, SamplerError, SamplerStats,
    build_subgraph,
};

use super::{ArrayFile, IoStats};

/// A read-only private mapping of a whole file.
#[derive(Debug)]
struct Mapping {
    ptr: *const u8,
    len: usize,
}

impl Mapping {
    fn open(array: &ArrayFile) -> Result<Self, SamplerError> {
        let corrupt = SamplerError::GraphCorrupt;
        let path = &array.path;
        let file = File::open(path).map_err(|e| corrupt(format!("{}: {e}", path.display())))?;
        let len = file.metadata().map_err(|e| corrupt(e.to_string()))?.len() as usize;
        if len == 0 {
            return Err(corrupt(format!("{}: empty", path.display())));
        }
        // SAFETY: a private read-only mapping of a file we opened; checked for errors below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(corrupt(format!(
                "mmap {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            )));
        }
        Ok(Self {
            ptr: ptr as *const u8,
            len,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is a live mapping of `len` bytes until drop.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Element `i` of `array` (which this maps; its header checked the length).
    fn element(&self, array: &ArrayFile, i: u64) -> u64 {
        let at = array.byte_of(i) as usize;
        array.decode(&self.bytes()[at..at + array.element_bytes as usize])
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this value created, once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// What the kernel has counted for this process: bytes it read from storage
/// (`/proc/self/io` `read_bytes`), major and minor page faults (`getrusage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCounters {
    /// Bytes the process caused to be read from storage.
    pub read_bytes: u64,
    /// Page faults that waited for I/O.
    pub major_faults: u64,
    /// Page faults served from the page cache.
    pub minor_faults: u64,
}

impl KernelCounters {
    /// The counters now. `read_bytes` is 0 where `/proc/self/io` cannot be read (a kernel
    /// without task I/O accounting).
    pub fn now() -> Self {
        let read_bytes = std::fs::read_to_string("/proc/self/io")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("read_bytes:"))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0);
        // SAFETY: getrusage fills the struct we own.
        let usage = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut usage);
            usage
        };
        Self {
            read_bytes,
            major_faults: usage.ru_majflt as u64,
            minor_faults: usage.ru_minflt as u64,
        }
    }

    /// The counts since `earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            major_faults: self.major_faults.saturating_sub(earlier.major_faults),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
        }
    }
}

/// mmap sampler over a dataset's CSR files.
#[derive(Debug)]
pub struct MmapSampler {
    csr: super::CsrFiles,
    indptr: Mapping,
    indices: Mapping,
    io: IoStats,
    /// The hop the next `neighbours_at` call serves (reset per minibatch).
    hop: usize,
    /// The I/O statistics when the current hop began (at its `edge_ranges`).
    hop_start: IoStats,
    stats: SamplerStats,
}

// SAFETY: the mappings are read-only and owned by the sampler; nothing else unmaps them.
unsafe impl Send for MmapSampler {}

impl MmapSampler {
    /// Maps `dataset`'s `indptr` and `indices` files.
    ///
    /// # Limits
    /// The files must not change while they are mapped: truncating one kills the process with
    /// SIGBUS on the next access, as with any mapping (the baseline measures the page cache,
    /// not a robust reader).
    pub fn open(dataset: &Dataset) -> Result<Self, SamplerError> {
        let csr = super::CsrFiles::open(dataset)?;
        Ok(Self {
            indptr: Mapping::open(&csr.indptr)?,
            indices: Mapping::open(&csr.indices)?,
            csr,
            io: IoStats::default(),
            hop: 0,
            hop_start: IoStats::default(),
            stats: SamplerStats::default(),
        })
    }

    /// The storage I/O so far: one read per major page fault, the bytes the kernel read.
    pub fn io_stats(&self) -> &IoStats {
        &self.io
    }

    /// Charges what the kernel counted since `before` to the I/O statistics.
    fn charge(&mut self, before: KernelCounters, used_bytes: u64) {
        let d = KernelCounters::now().since(&before);
        self.io.reads += d.major_faults;
        self.io.bytes_read += d.read_bytes;
        self.io.bytes_used += used_bytes;
        self.io.major_faults += d.major_faults;
        self.io.minor_faults += d.minor_faults;
    }
}

impl NeighbourSource for MmapSampler {
    fn node_count(&self) -> u64 {
        self.csr.node_count()
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        self.hop_start = self.io.clone();
        let before = KernelCounters::now();
        let ranges = nodes
            .iter()
            .map(|&v| {
                let (a, b) = (
                    self.indptr.element(&self.csr.indptr, v),
                    self.indptr.element(&self.csr.indptr, v + 1),
                );
                self.csr.range(v, a, b)
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.charge(before, 16 * nodes.len() as u64);
        Ok(ranges)
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        let before = KernelCounters::now();
        let out = positions
            .iter()
            .map(|&p| self.indices.element(&self.csr.indices, p))
            .collect();
        self.charge(
            before,
            positions.len() as u64 * self.csr.indices.element_bytes,
        );
        let hop_start = std::mem::take(&mut self.hop_start);
        self.io.charge_hop(self.hop, &hop_start);
        self.hop += 1;
        Ok(out)
    }
}

impl Sampler for MmapSampler {
    fn name(&self) -> &'static str {
        "mmap (files)"
    }

    fn sample(
        &mut self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        self.hop = 0;
        let s = build_subgraph(self, seed, fanouts, targets)?;
        self.stats.add_subgraph(&s);
        Ok(s)
    }

    fn stats(&self) -> SamplerStats {
        self.stats
    }
}
