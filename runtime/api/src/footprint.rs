//! What a minibatch's sampling touches on storage: the distinct 4 KiB pages of `indptr` and
//! `indices` it reads, per destination node, and as a share of a page cache.
//!
//! The pages are those of the on-device layout ([`sagessd_runtime::load::plan_layout`]: `indptr` as
//! 8-byte entries, `indices` as 4-byte ids, each region from its own page boundary), counted by
//! replaying the sampler with a [`NeighbourSource`] that records every entry it hands out: node
//! `v`'s range reads `indptr[v]` and `indptr[v + 1]`, each sampled position `p` reads
//! `indices[p]`. This is the footprint of the reference sampler's reads, which every host mode
//! makes (mmap and the page cache then read around it; direct I/O reads whole LBAs of it).

use std::collections::HashSet;

use sagessd_runtime::graph::HostGraph;
use sagessd_runtime::minibatch::Request;
use sagessd_runtime::sampler::{EdgeRange, NeighbourSource, SamplerError, SubgraphBuilder};

/// Bytes of a page.
pub const PAGE_BYTES: u64 = 4096;

/// What the minibatches of a run touch, summed over them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Footprint {
    /// Minibatches measured.
    pub minibatches: u64,
    /// Destination nodes (every layer's, summed).
    pub dst_nodes: u64,
    /// Distinct `indptr` pages per minibatch, summed.
    pub indptr_pages: u64,
    /// Distinct `indices` pages per minibatch, summed.
    pub indices_pages: u64,
    /// Distinct pages over the whole run (the union of every minibatch's).
    pub run_pages: u64,
    /// Pages the destination nodes' whole lists span, summed over destination nodes.
    pub list_pages: u64,
}

impl Footprint {
    /// Distinct pages a minibatch touches, on average.
    pub fn pages_per_minibatch(&self) -> f64 {
        (self.indptr_pages + self.indices_pages) as f64 / self.minibatches.max(1) as f64
    }

    /// Bytes a minibatch touches, on average (whole pages).
    pub fn bytes_per_minibatch(&self) -> f64 {
        self.pages_per_minibatch() * PAGE_BYTES as f64
    }

    /// Distinct pages per destination node of a minibatch.
    pub fn pages_per_node(&self) -> f64 {
        (self.indptr_pages + self.indices_pages) as f64 / self.dst_nodes.max(1) as f64
    }

    /// Pages a destination node's whole list spans, on average.
    pub fn list_pages_per_node(&self) -> f64 {
        self.list_pages as f64 / self.dst_nodes.max(1) as f64
    }

    /// A minibatch's footprint as a share of a page cache of `cache_bytes`.
    pub fn share_of(&self, cache_bytes: u64) -> f64 {
        self.bytes_per_minibatch() / cache_bytes.max(1) as f64
    }
}

/// Pages `[first_byte, end_byte)` spans.
fn pages(first_byte: u64, end_byte: u64) -> std::ops::Range<u64> {
    first_byte / PAGE_BYTES..end_byte.div_ceil(PAGE_BYTES)
}

/// Records the pages a [`NeighbourSource`]'s answers come from.
struct Recorder<'a, S> {
    inner: S,
    indptr: &'a mut HashSet<u64>,
    indices: &'a mut HashSet<u64>,
    list_pages: &'a mut u64,
}

impl<S: NeighbourSource> NeighbourSource for Recorder<'_, S> {
    fn node_count(&self) -> u64 {
        self.inner.node_count()
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        let ranges = self.inner.edge_ranges(nodes)?;
        for (&v, r) in nodes.iter().zip(&ranges) {
            self.indptr.extend(pages(8 * v, 8 * v + 16));
            *self.list_pages += pages(4 * r.start, 4 * (r.start + r.degree)).count() as u64;
        }
        Ok(ranges)
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        self.indices
            .extend(positions.iter().map(|&p| 4 * p / PAGE_BYTES));
        self.inner.neighbours_at(positions)
    }
}

/// The footprint of sampling `requests` with `fanouts` from `graph`.
pub fn measure(
    graph: HostGraph<'_>,
    requests: &[Request],
    fanouts: &[u16],
) -> Result<Footprint, SamplerError> {
    let mut f = Footprint::default();
    let (mut run_indptr, mut run_indices) = (HashSet::new(), HashSet::new());
    for Request { seed, targets } in requests {
        let (mut indptr, mut indices) = (HashSet::new(), HashSet::new());
        let mut b = SubgraphBuilder::new(graph.node_count(), *seed, fanouts, targets)?;
        let mut recorder = Recorder {
            inner: graph.source(),
            indptr: &mut indptr,
            indices: &mut indices,
            list_pages: &mut f.list_pages,
        };
        while let Some(dst) = b.destinations() {
            f.dst_nodes += dst.len() as u64;
            let ranges = recorder.edge_ranges(dst)?;
            let positions = b.set_ranges(&ranges)?;
            let neighbours = recorder.neighbours_at(&positions)?;
            b.set_neighbours(&neighbours)?;
        }
        f.minibatches += 1;
        f.indptr_pages += indptr.len() as u64;
        f.indices_pages += indices.len() as u64;
        run_indptr.extend(indptr);
        run_indices.extend(indices);
    }
    f.run_pages = (run_indptr.len() + run_indices.len()) as u64;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagessd_runtime::graph::CsrGraph;

    #[test]
    fn counts_pages_by_hand() {
        // Node 0 has 2,000 neighbours (8,000 bytes of indices: pages 0 and 1), node 1 none.
        let edges: Vec<(u32, u32)> = (0..2000).map(|_| (0, 1)).collect();
        let g = CsrGraph::from_edges(600, &edges).unwrap();
        // One layer, fanout 1024 of node 0's 2,000: indptr page 0, indices pages 0 and 1.
        let f = measure(
            HostGraph::Csr(&g),
            &[Request {
                seed: 1,
                targets: vec![0],
            }],
            &[1024],
        )
        .unwrap();
        assert_eq!((f.indptr_pages, f.indices_pages, f.dst_nodes), (1, 2, 1));
        assert_eq!(f.list_pages, 2);
        // Node 599's indptr entries (bytes 4792..4808) sit on page 1.
        let f = measure(
            HostGraph::Csr(&g),
            &[
                Request {
                    seed: 1,
                    targets: vec![599],
                },
                Request {
                    seed: 2,
                    targets: vec![0],
                },
            ],
            &[1],
        )
        .unwrap();
        assert_eq!(f.indptr_pages, 2, "page 1 for node 599, page 0 for node 0");
        assert_eq!(
            f.indices_pages, 1,
            "node 599 has no neighbours; node 0 one sample"
        );
        assert_eq!(f.run_pages, 3);
        assert!((f.pages_per_minibatch() - 1.5).abs() < 1e-12);
    }
}
