//! [`DirectSampler`]: the CSR arrays read with `O_DIRECT`, exactly the 4 KiB blocks a hop needs
//! (its destinations' `indptr` entries, then its sampled positions in `indices`; adjacent
//! blocks coalesced into one read). Synchronously, one read at a time (SmartSAGE's host
//! baseline), or through io_uring: a hop's reads all submitted at once, up to
//! [`super::file::RING_DEPTH`] in flight.

use std::path::Path;

use crate::dataset::Dataset;
use crate::sampler::{
    EdgeRange, NeighbourSource, SampledSubgraph, Sampler, SamplerError, SamplerStats,
    build_subgraph,
};

use super::IoStats;
use super::file::{ALIGN_BYTES, DataFile, ExtentReader};

/// Largest single read: runs of adjacent sectors are split here.
const MAX_EXTENT_BYTES: u64 = 1 << 20;

/// Direct-I/O sampler over a dataset's CSR files.
pub struct DirectSampler {
    csr: super::CsrFiles,
    indptr: DataFile,
    indices: DataFile,
    reader: ExtentReader,
    io: IoStats,
    /// The hop the next `neighbours_at` call serves (reset per minibatch).
    hop: usize,
    /// The I/O statistics when the current hop began (at its `edge_ranges`).
    hop_start: IoStats,
    stats: SamplerStats,
}

impl std::fmt::Debug for DirectSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectSampler")
            .field("reader", &self.reader)
            .field("io", &self.io)
            .finish_non_exhaustive()
    }
}

impl DirectSampler {
    /// Opens `dataset`'s CSR files (both stay on storage); `uring`: read through io_uring.
    pub fn open(dataset: &Dataset, uring: bool) -> Result<Self, SamplerError> {
        let csr = super::CsrFiles::open(dataset)?;
        Ok(Self {
            indptr: open_data(&csr.indptr.path)?,
            indices: open_data(&csr.indices.path)?,
            csr,
            reader: ExtentReader::new(uring)
                .map_err(|e| SamplerError::GraphCorrupt(format!("io_uring: {e}")))?,
            io: IoStats::default(),
            hop: 0,
            hop_start: IoStats::default(),
            stats: SamplerStats::default(),
        })
    }

    /// Reads elements `positions` of `indptr` (`false`) or `indices` (`true`): the blocks they
    /// fall in, runs of adjacent blocks as one read; returns them in the order asked.
    fn read_elements(
        &mut self,
        indices: bool,
        positions: &[u64],
    ) -> Result<Vec<u64>, SamplerError> {
        let (array, file) = if indices {
            (&self.csr.indices, &self.indices)
        } else {
            (&self.csr.indptr, &self.indptr)
        };
        let sector = ALIGN_BYTES as u64;
        let element = array.element_bytes;
        // The sectors the positions fall in, sorted; runs of adjacent sectors are one read.
        let mut order: Vec<usize> = (0..positions.len()).collect();
        order.sort_unstable_by_key(|&i| positions[i]);
        let mut extents: Vec<(u64, usize)> = Vec::new();
        let mut members: Vec<std::ops::Range<usize>> = Vec::new();
        let mut i = 0;
        while i < order.len() {
            let first = array.byte_of(positions[order[i]]) / sector;
            let mut last = first;
            let mut j = i;
            // Adjacent sectors join the read, up to MAX_EXTENT_BYTES.
            while j < order.len() {
                let s = array.byte_of(positions[order[j]]) / sector;
                if s > last + 1 || (s - first + 1) * sector > MAX_EXTENT_BYTES {
                    break;
                }
                last = last.max(s);
                j += 1;
            }
            extents.push((first * sector, ((last + 1 - first) * sector) as usize));
            members.push(i..j);
            i = j;
        }
        let mut out = vec![0u64; positions.len()];
        let result = self.reader.read(file, &extents, &mut self.io, |e, bytes| {
            let start = extents[e].0;
            for &k in &order[members[e].clone()] {
                let at = (array.byte_of(positions[k]) - start) as usize;
                out[k] = array.decode(&bytes[at..at + element as usize]);
            }
        });
        result.map_err(|e| SamplerError::GraphCorrupt(e.to_string()))?;
        self.io.bytes_used += positions.len() as u64 * element;
        Ok(out)
    }

    /// The storage I/O so far.
    pub fn io_stats(&self) -> &IoStats {
        &self.io
    }
}

pub(super) fn open_data(path: &Path) -> Result<DataFile, SamplerError> {
    DataFile::open(path, true)
        .map_err(|e| SamplerError::GraphCorrupt(format!("{}: {e}", path.display())))
}

impl NeighbourSource for DirectSampler {
    fn node_count(&self) -> u64 {
        self.csr.node_count()
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        self.hop_start = self.io.clone();
        let positions: Vec<u64> = nodes.iter().flat_map(|&v| [v, v + 1]).collect();
        let offsets = self.read_elements(false, &positions)?;
        nodes
            .iter()
            .zip(offsets.chunks_exact(2))
            .map(|(&v, o)| self.csr.range(v, o[0], o[1]))
            .collect()
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        let out = self.read_elements(true, positions)?;
        let hop_start = std::mem::take(&mut self.hop_start);
        self.io.charge_hop(self.hop, &hop_start);
        self.hop += 1;
        Ok(out)
    }
}

impl Sampler for DirectSampler {
    fn name(&self) -> &'static str {
        if self.reader.uses_uring() {
            "io_uring (files)"
        } else {
            "direct I/O (files)"
        }
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
