//! The host's side of the emulator's synthetic graphs ([`sagessd_emulator::synthetic_graph`]):
//! the graph as a [`NeighbourSource`] (for the in-memory reference and the DRAM-only design,
//! which read it where the host would hold it), and as a dataset folder on real storage.

use std::path::Path;

use sagessd_emulator::synthetic_graph::SyntheticGraph;

use crate::dataset::{Dataset, DatasetError, DatasetWriter, Manifest};
use crate::npy::Dtype;
use crate::sampler::{EdgeRange, NeighbourSource, SamplerError};

/// Bytes computed and written per step when a synthetic graph is written out.
const WRITE_CHUNK_BYTES: u64 = 4 << 20;

/// Writes `graph` as a dataset folder `dir` (`indptr.npy` int64, `indices.npy` int32, no
/// features or labels), computing it a chunk at a time: the same bytes the emulated flash
/// serves, on real storage for the real-file samplers. `description` is the manifest's source.
pub fn write_dataset(
    graph: &SyntheticGraph,
    dir: &Path,
    name: &str,
    description: &str,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Dataset, DatasetError> {
    let w = DatasetWriter::create(dir)?;
    let total = graph.indptr_bytes() + graph.indices_bytes();
    let mut done = 0;
    let mut write = |file: &str,
                     dtype: Dtype,
                     len: u64,
                     bytes: u64,
                     fill: &dyn Fn(u64, &mut [u8])|
     -> Result<_, DatasetError> {
        let mut out = w.array(file, dtype, &[len])?;
        let mut buf = vec![0u8; WRITE_CHUNK_BYTES as usize];
        let mut at = 0;
        while at < bytes {
            let n = WRITE_CHUNK_BYTES.min(bytes - at) as usize;
            fill(at, &mut buf[..n]);
            out.write(&buf[..n])?;
            at += n as u64;
            done += n as u64;
            progress(done, total);
        }
        out.finish()
    };
    let indptr = write(
        "indptr.npy",
        Dtype::I64,
        graph.node_count() + 1,
        graph.indptr_bytes(),
        &|o, b| graph.fill_indptr(o, b),
    )?;
    let indices = write(
        "indices.npy",
        Dtype::I32,
        graph.edge_count(),
        graph.indices_bytes(),
        &|o, b| graph.fill_indices(o, b),
    )?;
    w.finish(&Manifest::graph_only(
        name,
        description.to_owned(),
        (graph.node_count(), graph.edge_count(), false),
        indptr,
        indices,
    ))
}

/// A [`NeighbourSource`] computing a synthetic graph's lists where they are asked for.
#[derive(Clone, Copy, Debug)]
pub struct SyntheticSource<'g> {
    graph: &'g SyntheticGraph,
}

impl<'g> SyntheticSource<'g> {
    /// A source reading `graph`.
    pub fn new(graph: &'g SyntheticGraph) -> Self {
        Self { graph }
    }
}

impl NeighbourSource for SyntheticSource<'_> {
    fn node_count(&self) -> u64 {
        self.graph.node_count()
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        Ok(nodes
            .iter()
            .map(|&v| EdgeRange {
                start: self.graph.indptr(v),
                degree: self.graph.degree(v),
            })
            .collect())
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        // Positions come node by node, ascending within a node: find each node once.
        let mut out = Vec::with_capacity(positions.len());
        let mut node: Option<(u64, u64, u64)> = None; // (v, start, end)
        for &p in positions {
            let (v, start) = match node {
                Some((v, start, end)) if (start..end).contains(&p) => (v, start),
                _ => {
                    let (v, i) = self.graph.owner(p);
                    let start = p - i;
                    node = Some((v, start, start + self.graph.degree(v)));
                    (v, start)
                }
            };
            out.push(u64::from(self.graph.neighbour(v, p - start)));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagessd_emulator::synthetic_graph::SyntheticSpec;

    use crate::graph::CsrGraph;
    use crate::sampler::{ReferenceSampler, Sampler};

    /// The synthetic source samples exactly what the same graph, written out as a dataset and
    /// read back (checksums verified, CSR invariants checked), does.
    #[test]
    fn samples_like_its_materialised_csr() {
        let g = SyntheticGraph::new(SyntheticSpec::cnr_2000_like(30_000, 2)).unwrap();
        let dir = std::env::temp_dir().join(format!("sagessd-synthetic-{}", std::process::id()));
        let d = write_dataset(&g, &dir, "t", "test", &mut |_, _| {}).unwrap();
        d.verify().unwrap();
        let csr: CsrGraph = d.graph().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let targets: Vec<u64> = (0..300).map(|i| i * 97 % 30_000).collect();
        let a = ReferenceSampler::new(&csr)
            .sample(5, &[25, 10], &targets)
            .unwrap();
        let b = ReferenceSampler::synthetic(&g)
            .sample(5, &[25, 10], &targets)
            .unwrap();
        assert_eq!(a.as_bytes(), b.as_bytes());
        assert!(a.edge_count() > 3000);
    }
}
