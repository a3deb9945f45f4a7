//! The in-memory reference sampler: the DRAM-only design, and the oracle every sampler must
//! match byte for byte.

use sagessd_emulator::synthetic_graph::SyntheticGraph;

use super::{
    CsrSource, NeighbourSource, NodeIndex, SampledSubgraph, Sampler, SamplerError, SamplerStats,
    SubgraphBuilder,
};
use crate::graph::{CsrGraph, HostGraph};

/// The in-memory reference sampler: the graph lives in host DRAM (or, synthetic, is computed
/// where it is read: the same bytes).
#[derive(Debug)]
pub struct ReferenceSampler<'g> {
    graph: HostGraph<'g>,
    stats: SamplerStats,
    /// The node index its minibatches reuse.
    pub(super) index: Option<NodeIndex>,
}

impl<'g> ReferenceSampler<'g> {
    /// A sampler over `graph`.
    pub fn new(graph: &'g CsrGraph) -> Self {
        Self::over(HostGraph::Csr(graph))
    }

    /// A sampler over a synthetic graph.
    pub fn synthetic(graph: &'g SyntheticGraph) -> Self {
        Self::over(HostGraph::Synthetic(graph))
    }

    /// A sampler over either kind of graph.
    pub fn over(graph: HostGraph<'g>) -> Self {
        Self {
            graph,
            stats: SamplerStats::default(),
            index: None,
        }
    }
}

impl Sampler for ReferenceSampler<'_> {
    fn name(&self) -> &'static str {
        "in-memory"
    }

    fn sample(
        &mut self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        let s = match self.graph {
            // The CSR in memory: each layer in one pass, into a node index kept across
            // minibatches.
            HostGraph::Csr(g) => {
                let n = g.node_count();
                let index = self
                    .index
                    .take()
                    .unwrap_or_else(|| NodeIndex::for_minibatches(n));
                let mut b = SubgraphBuilder::with_index(n, seed, fanouts, targets, index)?;
                let result = (|| {
                    let mut source = CsrSource::new(g);
                    while let Some(dst) = b.destinations() {
                        let ranges = source.edge_ranges(dst)?;
                        let positions = b.set_ranges(&ranges)?;
                        let neighbours = source.neighbours_at(&positions)?;
                        b.set_neighbours(&neighbours)?;
                    }
                    Ok::<_, SamplerError>(())
                })();
                let (s, index) = b.finish_with_index();
                self.index = Some(index);
                result.and(s)?
            }
            HostGraph::Synthetic(_) => self.graph.sample(seed, fanouts, targets)?,
        };
        self.stats.add_subgraph(&s);
        Ok(s)
    }

    fn stats(&self) -> SamplerStats {
        self.stats
    }
}
