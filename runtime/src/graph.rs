//! An in-memory graph in compressed sparse row (CSR) form.
//!
//! `indptr` has `node_count + 1` entries; the neighbours of node `v` are
//! `indices[indptr[v]..indptr[v + 1]]`. This is exactly the layout written to a device by
//! [`crate::load`] and described by a [`sagessd_abi::graph::GraphDescriptor`]. A graph the host
//! holds ([`HostGraph`]) is such a CSR, or a synthetic graph computed where it is read.

use sagessd_emulator::synthetic_graph::SyntheticGraph;

/// Why a pair of arrays is not a valid CSR graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// `indptr` is empty (a graph needs at least one node).
    #[error("indptr is empty: a graph needs at least one node")]
    NoNodes,
    /// `indptr[0]` is not 0.
    #[error("indptr[0] is {0}, not 0")]
    IndptrStart(u64),
    /// `indptr` decreases at `node`.
    #[error("indptr decreases at node {node}")]
    IndptrDecreases {
        /// The node whose end is below its start.
        node: u64,
    },
    /// The last `indptr` entry is not the number of indices.
    #[error("indptr ends at {indptr_end} but there are {edge_count} indices")]
    IndptrEnd {
        /// The last `indptr` entry.
        indptr_end: u64,
        /// `indices.len()`.
        edge_count: u64,
    },
    /// A neighbour id is not below the node count.
    #[error("neighbour id {id} at position {position} is not below the node count {node_count}")]
    NeighbourOutOfRange {
        /// Position in `indices`.
        position: u64,
        /// The id.
        id: u32,
        /// The node count.
        node_count: u64,
    },
    /// More nodes than 32-bit neighbour ids can name.
    #[error("{0} nodes do not fit 32-bit neighbour ids")]
    TooManyNodes(u64),
}

/// A validated CSR graph with 32-bit neighbour ids.
#[derive(Clone, PartialEq, Eq)]
pub struct CsrGraph {
    indptr: Vec<u64>,
    indices: Vec<u32>,
}

impl std::fmt::Debug for CsrGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsrGraph")
            .field("node_count", &self.node_count())
            .field("edge_count", &self.edge_count())
            .finish()
    }
}

/// Degree statistics of a graph.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DegreeStats {
    /// Number of nodes.
    pub node_count: u64,
    /// Number of stored (directed) edges.
    pub edge_count: u64,
    /// Smallest degree.
    pub min: u64,
    /// Largest degree.
    pub max: u64,
    /// Mean degree.
    pub mean: f64,
    /// Median degree (the lower median for an even node count).
    pub median: u64,
    /// Nodes of degree 0.
    pub isolated: u64,
}

impl DegreeStats {
    /// The statistics of a degree histogram: `(degree, nodes)` pairs in ascending degree, and
    /// the number of stored edges. `None` for an empty histogram.
    pub fn from_histogram(histogram: &[(u64, u64)], edge_count: u64) -> Option<Self> {
        let node_count: u64 = histogram.iter().map(|(_, n)| n).sum();
        let (&(min, _), &(max, _)) = (histogram.first()?, histogram.last()?);
        let mut below = 0;
        let mut median = max;
        for &(d, n) in histogram {
            below += n;
            if below > (node_count - 1) / 2 {
                median = d;
                break;
            }
        }
        Some(Self {
            node_count,
            edge_count,
            min,
            max,
            mean: edge_count as f64 / node_count as f64,
            median,
            isolated: histogram
                .iter()
                .find(|(d, _)| *d == 0)
                .map_or(0, |(_, n)| *n),
        })
    }
}

impl CsrGraph {
    /// Builds a graph from its arrays, checking every invariant (see [`GraphError`]).
    pub fn new(indptr: Vec<u64>, indices: Vec<u32>) -> Result<Self, GraphError> {
        let Some(&first) = indptr.first() else {
            return Err(GraphError::NoNodes);
        };
        if first != 0 {
            return Err(GraphError::IndptrStart(first));
        }
        let node_count = indptr.len() as u64 - 1;
        if node_count == 0 {
            return Err(GraphError::NoNodes);
        }
        if node_count > u64::from(u32::MAX) + 1 {
            return Err(GraphError::TooManyNodes(node_count));
        }
        if let Some(node) = indptr.windows(2).position(|w| w[1] < w[0]) {
            return Err(GraphError::IndptrDecreases { node: node as u64 });
        }
        let end = *indptr.last().unwrap_or(&0);
        if end != indices.len() as u64 {
            return Err(GraphError::IndptrEnd {
                indptr_end: end,
                edge_count: indices.len() as u64,
            });
        }
        if let Some(position) = indices.iter().position(|&id| u64::from(id) >= node_count) {
            return Err(GraphError::NeighbourOutOfRange {
                position: position as u64,
                id: indices[position],
                node_count,
            });
        }
        Ok(Self { indptr, indices })
    }

    /// Builds a graph of `node_count` nodes from directed edges `(source, neighbour)`, keeping
    /// them as given (duplicates and self loops included), neighbour lists in input order.
    pub fn from_edges(node_count: u64, edges: &[(u32, u32)]) -> Result<Self, GraphError> {
        if node_count == 0 {
            return Err(GraphError::NoNodes);
        }
        if node_count > u64::from(u32::MAX) + 1 {
            return Err(GraphError::TooManyNodes(node_count));
        }
        let n = node_count as usize;
        let mut indptr = vec![0u64; n + 1];
        for (position, &(u, v)) in edges.iter().enumerate() {
            for id in [u, v] {
                if u64::from(id) >= node_count {
                    return Err(GraphError::NeighbourOutOfRange {
                        position: position as u64,
                        id,
                        node_count,
                    });
                }
            }
            indptr[u as usize + 1] += 1;
        }
        for i in 0..n {
            indptr[i + 1] += indptr[i];
        }
        let mut fill: Vec<u64> = indptr[..n].to_vec();
        let mut indices = vec![0u32; edges.len()];
        for &(u, v) in edges {
            indices[fill[u as usize] as usize] = v;
            fill[u as usize] += 1;
        }
        Self::new(indptr, indices)
    }

    /// Number of nodes.
    pub fn node_count(&self) -> u64 {
        self.indptr.len() as u64 - 1
    }

    /// Number of stored (directed) edges.
    pub fn edge_count(&self) -> u64 {
        self.indices.len() as u64
    }

    /// The row pointers (`node_count + 1` entries).
    pub fn indptr(&self) -> &[u64] {
        &self.indptr
    }

    /// The neighbour ids of all nodes, concatenated.
    pub fn indices(&self) -> &[u32] {
        &self.indices
    }

    /// The neighbours of `node` (`node < node_count`).
    pub fn neighbours(&self, node: u64) -> &[u32] {
        let v = node as usize;
        &self.indices[self.indptr[v] as usize..self.indptr[v + 1] as usize]
    }

    /// The degree of `node` (`node < node_count`).
    pub fn degree(&self, node: u64) -> u64 {
        let v = node as usize;
        self.indptr[v + 1] - self.indptr[v]
    }

    /// Whether every edge `u → v` has its reverse `v → u` (neighbour lists must be sorted for
    /// this check to be exact: it binary-searches them).
    pub fn is_symmetric(&self) -> bool {
        (0..self.node_count()).all(|u| {
            self.neighbours(u).iter().all(|&v| {
                self.neighbours(u64::from(v))
                    .binary_search(&(u as u32))
                    .is_ok()
            })
        })
    }

    /// Whether the graph is simple with sorted lists: every neighbour list strictly ascending
    /// (no duplicates) and no self loops.
    pub fn is_simple_sorted(&self) -> bool {
        (0..self.node_count()).all(|u| {
            let n = self.neighbours(u);
            n.windows(2).all(|w| w[0] < w[1]) && n.binary_search(&(u as u32)).is_err()
        })
    }

    /// Degree statistics.
    pub fn degree_stats(&self) -> DegreeStats {
        let mut degrees: Vec<u64> = self.indptr.windows(2).map(|w| w[1] - w[0]).collect();
        degrees.sort_unstable();
        let n = degrees.len();
        DegreeStats {
            node_count: n as u64,
            edge_count: self.edge_count(),
            min: degrees[0],
            max: degrees[n - 1],
            mean: self.edge_count() as f64 / n as f64,
            median: degrees[(n - 1) / 2],
            isolated: degrees.partition_point(|&d| d == 0) as u64,
        }
    }
}

/// A graph the host holds: a CSR in memory, or a synthetic graph computed where it is read.
#[derive(Clone, Copy, Debug)]
pub enum HostGraph<'g> {
    /// An in-memory CSR.
    Csr(&'g CsrGraph),
    /// A synthetic graph ([`sagessd_emulator::synthetic_graph`]).
    Synthetic(&'g SyntheticGraph),
}

impl HostGraph<'_> {
    /// Nodes.
    pub fn node_count(&self) -> u64 {
        match self {
            Self::Csr(g) => g.node_count(),
            Self::Synthetic(g) => g.node_count(),
        }
    }

    /// CSR entries.
    pub fn edge_count(&self) -> u64 {
        match self {
            Self::Csr(g) => g.edge_count(),
            Self::Synthetic(g) => g.edge_count(),
        }
    }

    /// Node `v`'s neighbour list, into `out` (cleared first).
    pub fn neighbours_into(&self, v: u64, out: &mut Vec<u32>) {
        match self {
            Self::Csr(g) => {
                out.clear();
                out.extend_from_slice(g.neighbours(v));
            }
            Self::Synthetic(g) => g.neighbours_into(v, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_and_reads_back() {
        let g = CsrGraph::from_edges(4, &[(0, 1), (1, 0), (1, 2), (2, 0), (0, 2), (2, 1)]).unwrap();
        assert_eq!(g.node_count(), 4);
        assert_eq!(g.edge_count(), 6);
        assert_eq!(g.neighbours(0), &[1, 2]);
        assert_eq!(g.neighbours(1), &[0, 2]);
        assert_eq!(g.neighbours(3), &[] as &[u32]);
        assert!(g.is_symmetric());
        assert!(g.is_simple_sorted());
        let s = g.degree_stats();
        assert_eq!((s.min, s.max, s.median, s.isolated), (0, 2, 2, 1));
        assert!((s.mean - 1.5).abs() < 1e-12);
        // Degrees 2, 2, 2, 0: the same statistics from the histogram.
        assert_eq!(DegreeStats::from_histogram(&[(0, 1), (2, 3)], 6), Some(s));
        let even = DegreeStats::from_histogram(&[(1, 2), (5, 2)], 12).unwrap();
        assert_eq!(
            (even.median, even.isolated, even.node_count),
            (1, 0, 4),
            "lower median"
        );
        assert_eq!(DegreeStats::from_histogram(&[], 0), None);
    }

    #[test]
    fn every_invariant_is_checked() {
        assert_eq!(CsrGraph::new(vec![], vec![]), Err(GraphError::NoNodes));
        assert_eq!(CsrGraph::new(vec![0], vec![]), Err(GraphError::NoNodes));
        assert_eq!(
            CsrGraph::new(vec![1, 1], vec![0]),
            Err(GraphError::IndptrStart(1))
        );
        assert_eq!(
            CsrGraph::new(vec![0, 2, 1], vec![0, 1]),
            Err(GraphError::IndptrDecreases { node: 1 })
        );
        assert_eq!(
            CsrGraph::new(vec![0, 1, 1], vec![0, 1]),
            Err(GraphError::IndptrEnd {
                indptr_end: 1,
                edge_count: 2
            })
        );
        assert_eq!(
            CsrGraph::new(vec![0, 1, 2], vec![0, 2]),
            Err(GraphError::NeighbourOutOfRange {
                position: 1,
                id: 2,
                node_count: 2
            })
        );
        assert!(CsrGraph::from_edges(2, &[(0, 5)]).is_err());
    }

    #[test]
    fn asymmetry_and_duplicates_are_detected() {
        let g = CsrGraph::from_edges(3, &[(0, 1)]).unwrap();
        assert!(!g.is_symmetric());
        let g = CsrGraph::from_edges(3, &[(0, 1), (0, 1), (1, 0)]).unwrap();
        assert!(!g.is_simple_sorted());
        let g = CsrGraph::from_edges(3, &[(1, 1)]).unwrap();
        assert!(!g.is_simple_sorted());
    }
}
