//! Out-of-core sampling on real files: the graph stays on storage and every neighbour list is
//! read when a minibatch needs it, with the I/O counted.
//!
//! * [`DirectSampler`] ([`direct`]): SmartSAGE's host baseline. The CSR arrays of a dataset,
//!   with `indptr` in memory and `indices` read with `O_DIRECT` into an aligned scratchpad,
//!   exactly the sectors each sampled neighbour list covers.
//! * [`MmapSampler`] ([`mmap`]): the same files mapped, read through the page cache.
//! * [`agnes`]: AGNES's block layout (fixed-size blocks of node objects, an object index) and
//!   its two samplers. Per minibatch, every block a hop needs is read through a bounded LRU
//!   graph buffer. Per hyperbatch, a block × minibatch bucket matrix means each block is read
//!   once per hop for all the minibatches that need it.
//!
//! * [`features`]: feature gathering with AGNES's access-count-threshold cache or BGL's FIFO
//!   cache and proximity-aware order.
//! * [`store`]: where the AGNES readers and the gatherers read: a file, or a region of an NVMe
//!   device ([`BlockDevice`]).
//!
//! All of them produce the same bytes as the in-memory reference for the same request: they
//! drive the same [`SubgraphBuilder`](crate::sampler::SubgraphBuilder).

pub mod agnes;
pub mod direct;
pub mod features;
pub mod file;
pub mod mmap;
pub mod store;

pub use agnes::{AgnesLayout, AgnesSampler};
pub use direct::DirectSampler;
pub use mmap::MmapSampler;
pub use store::{BlockDevice, SharedDevice};

/// One CSR array as it lies in its `.npy` file: where its elements start and how wide they are.
#[derive(Clone, Debug)]
pub(crate) struct ArrayFile {
    /// The file.
    pub path: std::path::PathBuf,
    /// Byte offset of its first element (a multiple of the element size).
    pub data_offset: u64,
    /// 4 (int32) or 8 (int64).
    pub element_bytes: u64,
    /// Elements.
    pub len: u64,
}

impl ArrayFile {
    /// The array `file` of `dataset`, checked: integer elements of 4 or 8 bytes, aligned, and
    /// the file as long as its header says.
    fn open(
        dataset: &crate::dataset::Dataset,
        file: &str,
    ) -> Result<Self, crate::sampler::SamplerError> {
        use crate::npy::{self, Dtype};
        let corrupt = crate::sampler::SamplerError::GraphCorrupt;
        let path = dataset.dir().join(file);
        let header = npy::read_header(&path).map_err(|e| corrupt(e.to_string()))?;
        let element_bytes = match header.dtype {
            Dtype::I32 => 4,
            Dtype::I64 => 8,
            other => {
                return Err(corrupt(format!(
                    "{}: dtype {}, not int32 or int64",
                    path.display(),
                    other.descr()
                )));
            }
        };
        let len = header.len();
        let file_len = std::fs::metadata(&path)
            .map_err(|e| corrupt(format!("{}: {e}", path.display())))?
            .len();
        let end = len
            .checked_mul(element_bytes)
            .and_then(|b| b.checked_add(header.data_offset));
        if header.data_offset % element_bytes != 0 || end.is_none_or(|end| file_len < end) {
            return Err(corrupt(format!(
                "{}: data misaligned or shorter than its header says",
                path.display()
            )));
        }
        Ok(Self {
            path,
            data_offset: header.data_offset,
            element_bytes,
            len,
        })
    }

    /// Byte offset in the file of element `i`.
    pub fn byte_of(&self, i: u64) -> u64 {
        self.data_offset + i * self.element_bytes
    }

    /// Element `i` from its little-endian bytes.
    pub fn decode(&self, raw: &[u8]) -> u64 {
        match self.element_bytes {
            4 => u64::from(u32::from_le_bytes(raw[..4].try_into().unwrap_or([0; 4]))),
            _ => u64::from_le_bytes(raw[..8].try_into().unwrap_or([0; 8])),
        }
    }
}

/// A dataset's CSR as the file-backed samplers read it: both arrays stay in their files (the
/// samplers read `indptr` entries like `indices` entries, through their own path, as the
/// modelled host modes do), checked for shape; their values are checked as they are read
/// ([`CsrFiles::range`]).
#[derive(Debug)]
pub(crate) struct CsrFiles {
    /// `indptr`: `n + 1` offsets.
    pub indptr: ArrayFile,
    /// `indices`: `m` neighbour ids.
    pub indices: ArrayFile,
}

impl CsrFiles {
    pub(crate) fn open(
        dataset: &crate::dataset::Dataset,
    ) -> Result<Self, crate::sampler::SamplerError> {
        let m = &dataset.manifest;
        let indptr = ArrayFile::open(dataset, &m.indptr.file)?;
        let indices = ArrayFile::open(dataset, &m.indices.file)?;
        if indptr.len != m.node_count + 1 || indptr.element_bytes != 8 {
            return Err(crate::sampler::SamplerError::GraphCorrupt(format!(
                "{}: not {} int64 offsets",
                indptr.path.display(),
                m.node_count + 1
            )));
        }
        Ok(Self { indptr, indices })
    }

    /// Nodes.
    pub(crate) fn node_count(&self) -> u64 {
        self.indptr.len - 1
    }

    /// The whole `indptr`, read and checked (from 0, non-decreasing, ending at the number of
    /// `indices`): for preprocessing that walks every node (AGNES's layout).
    pub(crate) fn load_indptr(&self) -> Result<Vec<u64>, crate::sampler::SamplerError> {
        let corrupt = crate::sampler::SamplerError::GraphCorrupt;
        let indptr: Vec<u64> = crate::npy::read_i64(&self.indptr.path)
            .map_err(|e| corrupt(e.to_string()))?
            .into_iter()
            .map(|v| u64::try_from(v).unwrap_or(u64::MAX))
            .collect();
        let valid = indptr.first() == Some(&0)
            && indptr.windows(2).all(|w| w[0] <= w[1])
            && indptr.last() == Some(&self.indices.len);
        if !valid {
            return Err(corrupt(format!(
                "{}: indptr is not {} offsets from 0 to {}, non-decreasing",
                self.indptr.path.display(),
                self.indptr.len,
                self.indices.len
            )));
        }
        Ok(indptr)
    }

    /// The edge range of node `v` from its two `indptr` entries as read, checked.
    pub(crate) fn range(
        &self,
        v: u64,
        start: u64,
        end: u64,
    ) -> Result<crate::sampler::EdgeRange, crate::sampler::SamplerError> {
        if start > end || end > self.indices.len {
            return Err(crate::sampler::SamplerError::GraphCorrupt(format!(
                "{}: node {v}'s offsets {start}..{end} are not a range of the {} indices",
                self.indptr.path.display(),
                self.indices.len
            )));
        }
        Ok(crate::sampler::EdgeRange {
            start,
            degree: end - start,
        })
    }
}

/// Storage I/O a sampler did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Reads issued.
    pub reads: u64,
    /// Bytes read from storage.
    pub bytes_read: u64,
    /// Bytes of what was read that the sampling used (neighbour ids taken).
    pub bytes_used: u64,
    /// Reads by size: `[≤4 KiB, ≤64 KiB, ≤1 MiB, >1 MiB]`.
    pub size_histogram: [u64; 4],
    /// Graph-buffer lookups that found their block.
    pub buffer_hits: u64,
    /// Graph-buffer lookups that had to read.
    pub buffer_misses: u64,
    /// Wall time spent blocked on storage: in synchronous reads, or waiting for asynchronous
    /// ones to complete. The rest of a sampler's time is its own work (page faults excepted:
    /// an mmap sampler's I/O happens inside them and is not counted here).
    pub io_wait_ns: u64,
    /// System calls the reads took (`pread`s, `io_uring_enter`s); 0 where reads are not
    /// system calls (page faults, an in-process device).
    pub syscalls: u64,
    /// Major page faults (mmap: faults that waited for storage).
    pub major_faults: u64,
    /// Minor page faults (mmap: faults served from the page cache).
    pub minor_faults: u64,
    /// Each hop's share (hop order, summed over minibatches).
    pub hops: [HopIo; sagessd_abi::ns_config::MAX_LAYERS],
}

/// One hop's share of a sampler's storage I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HopIo {
    /// Reads issued.
    pub reads: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Wall time blocked on them.
    pub io_wait_ns: u64,
}

impl IoStats {
    /// Counts one read of `bytes` of which `used` are wanted.
    pub fn record(&mut self, bytes: usize, used: usize) {
        self.reads += 1;
        self.bytes_read += bytes as u64;
        self.bytes_used += used as u64;
        let bucket = match bytes {
            0..=4096 => 0,
            4097..=65536 => 1,
            65537..=1_048_576 => 2,
            _ => 3,
        };
        self.size_histogram[bucket] += 1;
    }

    /// Runs `wait` (a blocking read or a wait for completions) and counts its wall time as
    /// I/O wait.
    pub fn timed<T>(&mut self, wait: impl FnOnce() -> T) -> T {
        let started = std::time::Instant::now();
        let result = wait();
        self.io_wait_ns += started.elapsed().as_nanos() as u64;
        result
    }

    /// Adds what was read since `before` (an earlier copy of these statistics) to hop `hop`.
    pub(crate) fn charge_hop(&mut self, hop: usize, before: &IoStats) {
        let (reads, bytes_read, io_wait_ns) = (
            self.reads - before.reads,
            self.bytes_read - before.bytes_read,
            self.io_wait_ns - before.io_wait_ns,
        );
        if let Some(h) = self.hops.get_mut(hop) {
            h.reads += reads;
            h.bytes_read += bytes_read;
            h.io_wait_ns += io_wait_ns;
        }
    }

    /// The buffer hit ratio, if the sampler has a buffer.
    pub fn hit_ratio(&self) -> Option<f64> {
        let lookups = self.buffer_hits + self.buffer_misses;
        (lookups > 0).then(|| self.buffer_hits as f64 / lookups as f64)
    }
}
