//! [`MmapSampler`]: the CSR `indices` file mapped into memory, read through the kernel's page
//! cache (page faults and readahead do the I/O), `indptr` in memory. Its I/O is counted as the
//! major page faults the process took while sampling (faults that waited for storage).

use std::fs::File;
use std::os::fd::AsRawFd;

use crate::dataset::Dataset;
use crate::npy::{self, Dtype};
use crate::sampler::{
    EdgeRange, NeighbourSource, SampledSubgraph, Sampler, SamplerError, SamplerStats,
    build_subgraph,
};

use super::IoStats;

/// mmap sampler over a dataset's CSR files.
#[derive(Debug)]
pub struct MmapSampler {
    indptr: Vec<u64>,
    map: *const u8,
    map_len: usize,
    data_offset: usize,
    element_bytes: usize,
    io: IoStats,
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
    pub fn open(dataset: &Dataset) -> Result<Self, SamplerError> {
        let corrupt = |e: String| SamplerError::GraphCorrupt(e);
        let m = &dataset.manifest;
        let indptr: Vec<u64> = npy::read_i64(&dataset.dir().join(&m.indptr.file))
            .map_err(|e| corrupt(e.to_string()))?
            .into_iter()
            .map(|v| v as u64)
            .collect();
        let path = dataset.dir().join(&m.indices.file);
        let header = npy::read_header(&path).map_err(|e| corrupt(e.to_string()))?;
        let element_bytes = match header.dtype {
            Dtype::I32 => 4,
            Dtype::I64 => 8,
            other => return Err(corrupt(format!("indices dtype {}", other.descr()))),
        };
        let file = File::open(&path).map_err(|e| corrupt(format!("{}: {e}", path.display())))?;
        let map_len = file.metadata().map_err(|e| corrupt(e.to_string()))?.len() as usize;
        let needed = header.data_offset as usize + header.len() as usize * element_bytes;
        if map_len < needed || map_len == 0 {
            return Err(corrupt(format!(
                "{}: shorter than its header says",
                path.display()
            )));
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
                path.display(),
                std::io::Error::last_os_error()
            )));
        }
        Ok(Self {
            indptr,
            map: map as *const u8,
            map_len,
            data_offset: header.data_offset as usize,
            element_bytes,
            io: IoStats::default(),
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
        self.indptr.len() as u64 - 1
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        Ok(nodes
            .iter()
            .map(|&v| EdgeRange {
                start: self.indptr[v as usize],
                degree: self.indptr[v as usize + 1] - self.indptr[v as usize],
            })
            .collect())
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
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
        let s = build_subgraph(self, seed, fanouts, targets)?;
        self.stats.add_subgraph(&s);
        Ok(s)
    }

    fn stats(&self) -> SamplerStats {
        self.stats
    }
}
