//! [`DirectSampler`]: the CSR `indices` array read with `O_DIRECT`, exactly the sectors the
//! sampled positions fall in (adjacent sectors coalesced into one read), `indptr` in memory.
//! Synchronously, one read at a time (SmartSAGE's host baseline), or through io_uring: a hop's
//! reads all submitted at once, up to [`super::file::RING_DEPTH`] in flight.

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
    indices: DataFile,
    reader: ExtentReader,
    io: IoStats,
    /// The hop the next `neighbours_at` call serves (reset per minibatch).
    hop: usize,
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
    /// Opens `dataset`'s CSR: `indptr` is loaded, `indices` stays on storage; `uring`: read
    /// through io_uring.
    pub fn open(dataset: &Dataset, uring: bool) -> Result<Self, SamplerError> {
        let csr = super::CsrFiles::open(dataset)?;
        Ok(Self {
            indices: open_data(&csr.path)?,
            csr,
            reader: ExtentReader::new(uring)
                .map_err(|e| SamplerError::GraphCorrupt(format!("io_uring: {e}")))?,
            io: IoStats::default(),
            hop: 0,
            stats: SamplerStats::default(),
        })
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
        self.csr.indptr.len() as u64 - 1
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        Ok(nodes.iter().map(|&v| self.csr.range(v)).collect())
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        let before = self.io.clone();
        let sector = ALIGN_BYTES as u64;
        let element = self.csr.element_bytes;
        let offset = self.csr.data_offset;
        let byte = |p: u64| offset + p * element;
        // The sectors the positions fall in, sorted; runs of adjacent sectors are one read.
        let mut order: Vec<usize> = (0..positions.len()).collect();
        order.sort_unstable_by_key(|&i| positions[i]);
        let mut extents: Vec<(u64, usize)> = Vec::new();
        let mut members: Vec<std::ops::Range<usize>> = Vec::new();
        let mut i = 0;
        while i < order.len() {
            let first = byte(positions[order[i]]) / sector;
            let mut last = first;
            let mut j = i;
            // Adjacent sectors join the read, up to MAX_EXTENT_BYTES.
            while j < order.len()
                && byte(positions[order[j]]) / sector <= last + 1
                && (byte(positions[order[j]]) / sector - first + 1) * sector <= MAX_EXTENT_BYTES
            {
                last = last.max(byte(positions[order[j]]) / sector);
                j += 1;
            }
            extents.push((first * sector, ((last + 1 - first) * sector) as usize));
            members.push(i..j);
            i = j;
        }
        let mut out = vec![0u64; positions.len()];
        let result = self
            .reader
            .read(&self.indices, &extents, &mut self.io, |e, bytes| {
                let start = extents[e].0;
                for &k in &order[members[e].clone()] {
                    let at = (byte(positions[k]) - start) as usize;
                    let raw = &bytes[at..at + element as usize];
                    out[k] = match element {
                        4 => u64::from(u32::from_le_bytes(raw.try_into().unwrap_or([0; 4]))),
                        _ => u64::from_le_bytes(raw.try_into().unwrap_or([0; 8])),
                    };
                }
            });
        result.map_err(|e| SamplerError::GraphCorrupt(e.to_string()))?;
        self.io.bytes_used += positions.len() as u64 * element;
        self.io.charge_hop(self.hop, &before);
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
