//! A seeded R-MAT graph generator with the Graph500 parameters.
//!
//! R-MAT (Chakrabarti, Zhan and Faloutsos, SDM 2004) places each edge by descending `scale`
//! levels of the adjacency matrix, choosing one quadrant per level with probabilities
//! `a, b, c, d`; the Graph500 benchmark uses `a = 0.57, b = 0.19, c = 0.19, d = 0.05`, which
//! yields the power-law degree distribution of real graphs. This generator:
//!
//! 1. draws `edge_factor × 2^scale` edges with [`SplitMix64`] (no per-level noise);
//! 2. relabels vertices by a random permutation drawn from the same seed (as Graph500 does, so
//!    that high-degree vertices are not clustered at low ids);
//! 3. symmetrises (adds every reverse edge), drops self loops and duplicates, and sorts every
//!    neighbour list — the result is a simple undirected graph stored as a symmetric CSR.
//!
//! The output is a pure function of the parameters: same seed, same graph, on every platform.

use crate::graph::{CsrGraph, GraphError};
use crate::rng::SplitMix64;

/// R-MAT parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmatParams {
    /// log2 of the node count (1..=[`MAX_SCALE`]).
    pub scale: u32,
    /// Edges drawn per node before symmetrisation and deduplication (≥ 1).
    pub edge_factor: u32,
    /// Seed of the edge draws and of the vertex permutation.
    pub seed: u64,
    /// Probability of the top-left quadrant.
    pub a: f64,
    /// Probability of the top-right quadrant.
    pub b: f64,
    /// Probability of the bottom-left quadrant (the bottom-right gets `1 - a - b - c`).
    pub c: f64,
}

/// Largest supported scale (node ids are 32-bit).
pub const MAX_SCALE: u32 = 31;
/// Largest number of edges drawn (`edge_factor << scale`), to keep memory bounded (~32 GiB of
/// edge pairs would be needed beyond it).
pub const MAX_DRAWN_EDGES: u64 = 1 << 31;

impl RmatParams {
    /// The Graph500 quadrant probabilities with the given size and seed.
    pub fn graph500(scale: u32, edge_factor: u32, seed: u64) -> Self {
        Self {
            scale,
            edge_factor,
            seed,
            a: 0.57,
            b: 0.19,
            c: 0.19,
        }
    }

    /// Number of edges drawn before symmetrisation.
    pub fn drawn_edges(&self) -> u64 {
        u64::from(self.edge_factor) << self.scale.min(MAX_SCALE)
    }
}

/// Why R-MAT parameters are unusable.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RmatError {
    /// The scale is 0 or above [`MAX_SCALE`].
    #[error("scale {0} is outside 1..={MAX_SCALE}")]
    Scale(u32),
    /// The edge factor is 0, or the drawn edge count exceeds [`MAX_DRAWN_EDGES`].
    #[error(
        "edge factor {edge_factor} at scale {scale} is 0 or draws more than {MAX_DRAWN_EDGES} edges"
    )]
    EdgeFactor {
        /// The edge factor.
        edge_factor: u32,
        /// The scale.
        scale: u32,
    },
    /// The quadrant probabilities are negative or sum above 1.
    #[error("quadrant probabilities a={a} b={b} c={c} are not a distribution")]
    Probabilities {
        /// a.
        a: f64,
        /// b.
        b: f64,
        /// c.
        c: f64,
    },
    /// The built graph failed validation (a generator bug).
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// The random relabelling of `params`' graph: draw `d` names node `permutation[d]`.
pub fn permutation(params: &RmatParams) -> Vec<u32> {
    let mut permutation: Vec<u32> = (0..1u64 << params.scale).map(|v| v as u32).collect();
    SplitMix64::stream(params.seed, 1).shuffle(&mut permutation);
    permutation
}

/// Calls `edge(u, v)` for every drawn edge that is not a self loop, in draw order, with the
/// nodes relabelled by `permutation` (duplicates included).
fn for_each_edge(params: &RmatParams, permutation: &[u32], mut edge: impl FnMut(u32, u32)) {
    let RmatParams {
        scale,
        seed,
        a,
        b,
        c,
        ..
    } = *params;
    let mut rng = SplitMix64::stream(seed, 0);
    let (ab, abc) = (a + b, a + b + c);
    for _ in 0..params.drawn_edges() {
        let (mut u, mut v) = (0usize, 0usize);
        for _ in 0..scale {
            let r = rng.next_f64();
            let (du, dv) = if r < a {
                (0, 0)
            } else if r < ab {
                (0, 1)
            } else if r < abc {
                (1, 0)
            } else {
                (1, 1)
            };
            u = (u << 1) | du;
            v = (v << 1) | dv;
        }
        let (u, v) = (permutation[u], permutation[v]);
        if u != v {
            edge(u, v);
        }
    }
}

/// Generates the symmetric simple R-MAT graph of `params` (see the module documentation).
/// Memory: the CSR arrays with every drawn edge in both directions, then compacted; the edge
/// list is never held apart from them.
pub fn generate(params: &RmatParams) -> Result<CsrGraph, RmatError> {
    let RmatParams {
        scale,
        edge_factor,
        a,
        b,
        c,
        ..
    } = *params;
    if !(1..=MAX_SCALE).contains(&scale) {
        return Err(RmatError::Scale(scale));
    }
    let drawn = params.drawn_edges();
    if edge_factor == 0 || drawn > MAX_DRAWN_EDGES {
        return Err(RmatError::EdgeFactor { edge_factor, scale });
    }
    let probabilities_ok = [a, b, c].iter().all(|p| p.is_finite() && *p >= 0.0) && a + b + c <= 1.0;
    if !probabilities_ok {
        return Err(RmatError::Probabilities { a, b, c });
    }
    let node_count = 1u64 << scale;
    let permutation = permutation(params);
    let n = node_count as usize;
    // Two passes over the same seeded draws, so the edge list never exists on its own: the
    // first counts each node's (directed, possibly repeated) neighbours, the second writes them
    // into their rows. Then each row is sorted and deduplicated in place.
    let mut indptr = vec![0u64; n + 1];
    for_each_edge(params, &permutation, |u, v| {
        indptr[u as usize + 1] += 1;
        indptr[v as usize + 1] += 1;
    });
    for i in 0..n {
        indptr[i + 1] += indptr[i];
    }
    let mut indices = vec![0u32; indptr[n] as usize];
    let mut next: Vec<u64> = indptr[..n].to_vec();
    for_each_edge(params, &permutation, |u, v| {
        for (from, to) in [(u, v), (v, u)] {
            let slot = &mut next[from as usize];
            indices[*slot as usize] = to;
            *slot += 1;
        }
    });
    drop(next);
    let mut write = 0usize;
    for node in 0..n {
        let (start, end) = (indptr[node] as usize, indptr[node + 1] as usize);
        indices[start..end].sort_unstable();
        indptr[node] = write as u64;
        let mut last = None;
        for i in start..end {
            let x = indices[i];
            if last != Some(x) {
                indices[write] = x;
                write += 1;
                last = Some(x);
            }
        }
    }
    indptr[n] = write as u64;
    indices.truncate(write);
    indices.shrink_to_fit();
    Ok(CsrGraph::new(indptr, indices)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_symmetric_and_simple() {
        let p = RmatParams::graph500(10, 8, 42);
        let g = generate(&p).unwrap();
        assert_eq!(g, generate(&p).unwrap());
        assert_eq!(g.node_count(), 1024);
        assert!(g.is_symmetric());
        assert!(g.is_simple_sorted());
        assert!(g.edge_count() > 8 * 1024, "{}", g.edge_count());
        assert!(g.edge_count() <= 2 * 8 * 1024);
        let other = generate(&RmatParams::graph500(10, 8, 43)).unwrap();
        assert_ne!(g, other);
    }

    #[test]
    fn degrees_are_skewed() {
        let g = generate(&RmatParams::graph500(12, 8, 1)).unwrap();
        let s = g.degree_stats();
        // A power-law graph: the largest degree is far above the mean, many nodes are isolated.
        assert!(s.max as f64 > 20.0 * s.mean, "{s:?}");
        assert!(s.isolated > 0, "{s:?}");
        assert!((s.median as f64) < s.mean, "{s:?}");
    }

    #[test]
    fn golden_graph_pins_the_generator() {
        // Any change here changes every generated data set; do it on purpose only.
        let g = generate(&RmatParams::graph500(4, 2, 7)).unwrap();
        let fingerprint = g
            .indptr()
            .iter()
            .chain(
                g.indices()
                    .iter()
                    .map(|&i| u64::from(i))
                    .collect::<Vec<_>>()
                    .iter(),
            )
            .fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
                (h ^ x).wrapping_mul(0x0000_0100_0000_01b3)
            });
        assert_eq!((g.edge_count(), fingerprint), GOLDEN_4_2_7);
    }

    const GOLDEN_4_2_7: (u64, u64) = (36, 2_279_945_120_105_992_025);

    #[test]
    fn bad_parameters_are_rejected() {
        assert_eq!(
            generate(&RmatParams::graph500(0, 8, 1)),
            Err(RmatError::Scale(0))
        );
        assert_eq!(
            generate(&RmatParams::graph500(32, 8, 1)),
            Err(RmatError::Scale(32))
        );
        assert!(matches!(
            generate(&RmatParams::graph500(4, 0, 1)),
            Err(RmatError::EdgeFactor { .. })
        ));
        assert!(matches!(
            generate(&RmatParams::graph500(31, 8, 1)),
            Err(RmatError::EdgeFactor { .. })
        ));
        let mut p = RmatParams::graph500(4, 1, 1);
        p.a = 0.9;
        assert!(matches!(generate(&p), Err(RmatError::Probabilities { .. })));
    }
}
