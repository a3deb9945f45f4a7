//! [`MmapSampler`]: the CSR `indices` file mapped into memory, read through the kernel's page
//! cache (page faults and readahead do the I/O), `indptr` in memory. Its I/O is counted as the
//! major page faults the process took while sampling (faults that waited for storage).

use std::fs::File;
use std::os::fd::AsRawFd;

use crate::dataset::Dataset;
use crate::sampler::{
    EdgeRange, NeighbourSource, SampledSubgraph, Sampler, SamplerError, SamplerStats,
    build_subgraph,
};

use super::IoStats;

/// mmap sampler over a dataset's CSR files.
#[derive(Debug)]
pub struct MmapSampler {
    csr: super::CsrFiles,
    map: *const u8,
    map_len: usize,
    data_offset: usize,
    element_bytes: usize,
    io: IoStats,
    /// The hop the next `neighbours_at` call serves (reset per minibatch).
    hop: usize,
    stats: SamplerStats,
}

// SAFETY: the mapping is read-only and owned by the sampler; nothing else unmaps it.
unsafe impl Send for MmapSampler {}

/// Major page faults of this process so far.
fn major_faults() -> u64 {
    // SAFETY: getrusage fills the struct we own.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage.ru_majflt as u64
    }
}

impl MmapSampler {
    /// Maps `dataset`'s `indices` file and loads `indptr`.
    ///
    /// # Limits
    /// The file must not change while it is mapped: truncating it kills the process with
    /// SIGBUS on the next access, as with any mapping (the baseline measures the page cache,
    /// not a robust reader).
    pub fn open(dataset: &Dataset) -> Result<Self, SamplerError> {
        let corrupt = SamplerError::GraphCorrupt;
        let csr = super::CsrFiles::open(dataset)?;
        let file =
            File::open(&csr.path).map_err(|e| corrupt(format!("{}: {e}", csr.path.display())))?;
        let map_len = file.metadata().map_err(|e| corrupt(e.to_string()))?.len() as usize;
        if map_len == 0 {
            return Err(corrupt(format!("{}: empty", csr.path.display())));
        }
        // SAFETY: a private read-only mapping of a file we opened; checked for errors below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(corrupt(format!(
                "mmap {}: {}",
                csr.path.display(),
                std::io::Error::last_os_error()
            )));
        }
        Ok(Self {
            map: map as *const u8,
            map_len,
            data_offset: csr.data_offset as usize,
            element_bytes: csr.element_bytes as usize,
            csr,
            io: IoStats::default(),
            hop: 0,
            stats: SamplerStats::default(),
        })
    }

    /// The storage I/O so far (major page faults, a page each).
    pub fn io_stats(&self) -> &IoStats {
        &self.io
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `map` is a live mapping of `map_len` bytes until drop.
        unsafe { std::slice::from_raw_parts(self.map, self.map_len) }
    }
}

impl Drop for MmapSampler {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this sampler created, once.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

impl NeighbourSource for MmapSampler {
    fn node_count(&self) -> u64 {
        self.csr.indptr.len() as u64 - 1
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        Ok(nodes.iter().map(|&v| self.csr.range(v)).collect())
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        let before = self.io.clone();
        let faults = major_faults();
        let (offset, element) = (self.data_offset, self.element_bytes);
        let bytes = self.bytes();
        let out = positions
            .iter()
            .map(|&p| {
                let at = offset + p as usize * element;
                let raw = &bytes[at..at + element];
                match element {
                    4 => u64::from(u32::from_le_bytes(raw.try_into().unwrap_or([0; 4]))),
                    _ => u64::from_le_bytes(raw.try_into().unwrap_or([0; 8])),
                }
            })
            .collect();
        let new = major_faults().saturating_sub(faults);
        for _ in 0..new {
            self.io.record(4096, 0);
        }
        self.io.bytes_used += (positions.len() * element) as u64;
        self.io.charge_hop(self.hop, &before);
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
