//! [`DirectSampler`]: the CSR `indices` array read with `O_DIRECT`, exactly the sectors the
//! sampled positions fall in (adjacent sectors coalesced into one read), `indptr` in memory.

use std::path::Path;

use crate::dataset::Dataset;
use crate::npy::{self, Dtype};
use crate::sampler::{
    EdgeRange, NeighbourSource, SampledSubgraph, Sampler, SamplerError, SamplerStats,
    build_subgraph,
};

use super::IoStats;
use super::file::{ALIGN_BYTES, DataFile};

/// Direct-I/O sampler over a dataset's CSR files.
#[derive(Debug)]
pub struct DirectSampler {
    indptr: Vec<u64>,
    indices: DataFile,
    data_offset: u64,
    element_bytes: u64,
    io: IoStats,
    stats: SamplerStats,
}

impl DirectSampler {
    /// Opens `dataset`'s CSR: `indptr` is loaded, `indices` stays on storage.
    pub fn open(dataset: &Dataset) -> Result<Self, SamplerError> {
        let m = &dataset.manifest;
        let io = |e: String| SamplerError::GraphCorrupt(e);
        let indptr: Vec<u64> = npy::read_i64(&dataset.dir().join(&m.indptr.file))
            .map_err(|e| io(e.to_string()))?
            .into_iter()
            .map(|v| v as u64)
            .collect();
        let path = dataset.dir().join(&m.indices.file);
        let header = npy::read_header(&path).map_err(|e| io(e.to_string()))?;
        let element_bytes = match header.dtype {
            Dtype::I32 => 4,
            Dtype::I64 => 8,
            other => return Err(io(format!("indices dtype {}", other.descr()))),
        };
        Ok(Self {
            indptr,
            indices: open_data(&path)?,
            data_offset: header.data_offset,
            element_bytes,
            io: IoStats::default(),
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
        let sector = ALIGN_BYTES as u64;
        let byte = |p: u64| self.data_offset + p * self.element_bytes;
        // The sectors the positions fall in, sorted; runs of adjacent sectors are one read.
        let mut order: Vec<usize> = (0..positions.len()).collect();
        order.sort_unstable_by_key(|&i| positions[i]);
        let mut out = vec![0u64; positions.len()];
        let mut i = 0;
        while i < order.len() {
            let first = byte(positions[order[i]]) / sector;
            let mut last = first;
            let mut j = i;
            while j < order.len() && byte(positions[order[j]]) / sector <= last + 1 {
                last = last.max(byte(positions[order[j]]) / sector);
                j += 1;
            }
            let used = (j - i) * self.element_bytes as usize;
            let start = first * sector;
            let len = ((last + 1) * sector - start) as usize;
            let (buf, _) = self
                .indices
                .read_covering(start, len, &mut self.io)
                .map_err(|e| SamplerError::GraphCorrupt(e.to_string()))?;
            self.io.bytes_used += used as u64;
            for &k in &order[i..j] {
                let at = (byte(positions[k]) - start) as usize;
                let raw = &buf.bytes()[at..at + self.element_bytes as usize];
                out[k] = match self.element_bytes {
                    4 => u64::from(u32::from_le_bytes(raw.try_into().unwrap_or([0; 4]))),
                    _ => u64::from_le_bytes(raw.try_into().unwrap_or([0; 8])),
                };
            }
            i = j;
        }
        Ok(out)
    }
}

impl Sampler for DirectSampler {
    fn name(&self) -> &'static str {
        "direct I/O (files)"
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
