//! Where a sampler reads a graph's adjacency from: the [`NeighbourSource`] trait, and its
//! sources over what the host holds (an in-memory CSR, a synthetic graph computed where it is
//! read).

use sagessd_emulator::synthetic_graph::SyntheticGraph;

use super::builder::prefetch_ahead;
use super::{SampledSubgraph, SamplerError, build_subgraph};
use crate::graph::{CsrGraph, HostGraph};

/// Where a node's neighbour list sits in a source's edge array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeRange {
    /// Position of the first neighbour.
    pub start: u64,
    /// Number of neighbours.
    pub degree: u64,
}

/// Where [`build_subgraph`] gets a graph's adjacency from, one layer at a time: first the edge
/// ranges of all of a layer's destinations, then the neighbour ids at the sampled positions.
pub trait NeighbourSource {
    /// Number of nodes of the graph.
    fn node_count(&self) -> u64;

    /// The neighbour-list range of each of `nodes`, in order.
    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError>;

    /// The neighbour ids at each of `positions` (absolute positions in the edge array), in
    /// order.
    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError>;
}

/// A [`NeighbourSource`] over an in-memory CSR graph.
#[derive(Clone, Copy, Debug)]
pub struct CsrSource<'g> {
    graph: &'g CsrGraph,
}

impl<'g> CsrSource<'g> {
    /// A source reading `graph`.
    pub fn new(graph: &'g CsrGraph) -> Self {
        Self { graph }
    }
}

impl NeighbourSource for CsrSource<'_> {
    fn node_count(&self) -> u64 {
        self.graph.node_count()
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        let indptr = self.graph.indptr();
        Ok(nodes
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                prefetch_ahead(nodes, i, indptr);
                EdgeRange {
                    start: indptr[v as usize],
                    degree: indptr[v as usize + 1] - indptr[v as usize],
                }
            })
            .collect())
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        let indices = self.graph.indices();
        Ok(positions
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                prefetch_ahead(positions, i, indices);
                u64::from(indices[p as usize])
            })
            .collect())
    }
}

/// What the samplers add to a [`HostGraph`]: the graph read as a [`NeighbourSource`], and
/// sampled through it.
impl HostGraph<'_> {
    /// The graph as a [`NeighbourSource`].
    pub fn source(&self) -> HostSource<'_> {
        match *self {
            Self::Csr(g) => HostSource::Csr(CsrSource::new(g)),
            Self::Synthetic(g) => HostSource::Synthetic(SyntheticSource::new(g)),
        }
    }

    /// Runs [`build_subgraph`] over the graph's [`NeighbourSource`].
    pub fn sample(
        &self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        build_subgraph(&mut self.source(), seed, fanouts, targets)
    }
}

/// The [`NeighbourSource`] of a [`HostGraph`].
#[derive(Clone, Copy, Debug)]
pub enum HostSource<'g> {
    /// Over an in-memory CSR.
    Csr(CsrSource<'g>),
    /// Over a synthetic graph.
    Synthetic(SyntheticSource<'g>),
}

impl NeighbourSource for HostSource<'_> {
    fn node_count(&self) -> u64 {
        match self {
            Self::Csr(s) => s.node_count(),
            Self::Synthetic(s) => s.node_count(),
        }
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        match self {
            Self::Csr(s) => s.edge_ranges(nodes),
            Self::Synthetic(s) => s.edge_ranges(nodes),
        }
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        match self {
            Self::Csr(s) => s.neighbours_at(positions),
            Self::Synthetic(s) => s.neighbours_at(positions),
        }
    }
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
