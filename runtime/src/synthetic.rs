//! The host's side of the emulator's synthetic graphs ([`sagessd_emulator::synthetic_graph`]):
//! the graph as a [`NeighbourSource`] (for the in-memory reference and the DRAM-only design,
//! which read it where the host would hold it), and as a dataset folder on real storage.

use sagessd_emulator::synthetic_graph::SyntheticGraph;

use crate::sampler::{EdgeRange, NeighbourSource, SamplerError};

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

    /// The synthetic source samples exactly what the same graph, materialised as a CSR, does.
    #[test]
    fn samples_like_its_materialised_csr() {
        let g = SyntheticGraph::new(SyntheticSpec::cnr_2000_like(30_000, 2)).unwrap();
        let mut indptr = vec![0u8; g.indptr_bytes() as usize];
        let mut indices = vec![0u8; g.indices_bytes() as usize];
        g.fill_indptr(0, &mut indptr);
        g.fill_indices(0, &mut indices);
        let csr = CsrGraph::new(
            indptr
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            indices
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        )
        .unwrap();
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
