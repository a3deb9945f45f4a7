//! A minibatch as PyG's neighbour sampler returns it (`torch_geometric.sampler.SamplerOutput`).
//!
//! The sampling function samples in the DGL block convention (`sagessd_abi::subgraph`): hop
//! `l + 1` samples the neighbours of *every* node reached so far, the targets again included.
//! PyG's sampler samples each node once, at the hop after it was first reached. So the PyG view
//! keeps, at each hop, the edges into the nodes first reached at the hop before (the targets
//! at hop 0) and the nodes those edges and the targets touch; it drops the rest (the targets'
//! second draw and the nodes only it reached). What remains is a sample PyG's sampler could
//! have drawn: each node's neighbours drawn once, uniformly, without replacement, up to the
//! hop's fanout.
//!
//! Nodes come hop by hop, each hop in first-seen order, so `node[..k]` are the `k` targets in
//! order, then the nodes first reached at hop 1, hop 2, … (`num_sampled_nodes`); edges are
//! grouped by hop
//! (`num_sampled_edges`) and point from the sampled neighbour (`row`) to the node it was sampled
//! for (`col`), local indices into `node`, as PyG's `edge_index = [row, col]` wants.

use sagessd_runtime::sampler::SampledSubgraph;

/// The arrays of a PyG `SamplerOutput` for one minibatch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PygOutput {
    /// Global node ids, the targets first.
    pub node: Vec<i64>,
    /// Each edge's source: the sampled neighbour, a local index into `node`.
    pub row: Vec<i64>,
    /// Each edge's destination: the node it was sampled for, a local index into `node`.
    pub col: Vec<i64>,
    /// Nodes per hop: the targets, then those first reached at each hop.
    pub num_sampled_nodes: Vec<i64>,
    /// Edges per hop.
    pub num_sampled_edges: Vec<i64>,
    /// For each of `node`, its position in the subgraph's node list: the feature rows a loader
    /// gathered (in that list's order) are `rows[kept[i]]`.
    pub kept: Vec<u32>,
}

/// Converts a sampled subgraph to PyG's view of it (see the module's documentation).
pub fn to_pyg(subgraph: &SampledSubgraph) -> PygOutput {
    let view = subgraph.view();
    let nodes = view.nodes();
    let layers = view.layer_count();
    if layers == 0 {
        return PygOutput::default();
    }
    // The hop at which PyG's sampler first reaches each node: the targets at hop 0; a node
    // at hop `l + 1` when a node of hop `l` draws it at layer `l` (its one draw); never when
    // only the draws PyG does not make reach it.
    const NEVER: u8 = u8::MAX;
    let targets = view.layer(0).counts.dst_count as usize;
    let mut hop = vec![NEVER; nodes.len()];
    hop[..targets].fill(0);
    let mut edges: Vec<(u32, u32)> = Vec::new();
    let mut num_sampled_edges = Vec::with_capacity(layers);
    for l in 0..layers {
        let layer = view.layer(l);
        let before = edges.len();
        // Nodes of hop `l` were sources of layer `l - 1`: all lie among layer `l`'s
        // destinations.
        for dst in 0..layer.counts.dst_count as usize {
            if hop[dst] != l as u8 {
                continue;
            }
            let (lo, hi) = (layer.indptr[dst].get(), layer.indptr[dst + 1].get());
            for src in &layer.indices[lo as usize..hi as usize] {
                let src = src.get();
                if hop[src as usize] == NEVER {
                    hop[src as usize] = l as u8 + 1;
                }
                edges.push((src, dst as u32));
            }
        }
        num_sampled_edges.push((edges.len() - before) as i64);
    }
    // The kept nodes hop by hop, each hop in first-seen order, renumbered.
    let mut local = vec![u32::MAX; nodes.len()];
    let mut out = PygOutput {
        num_sampled_edges,
        ..PygOutput::default()
    };
    for h in 0..=layers as u8 {
        let before = out.node.len();
        for (i, _) in hop.iter().enumerate().filter(|&(_, &at)| at == h) {
            local[i] = out.node.len() as u32;
            out.node.push(nodes[i].get() as i64);
            out.kept.push(i as u32);
        }
        out.num_sampled_nodes.push((out.node.len() - before) as i64);
    }
    out.row = edges
        .iter()
        .map(|&(s, _)| i64::from(local[s as usize]))
        .collect();
    out.col = edges
        .iter()
        .map(|&(_, d)| i64::from(local[d as usize]))
        .collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagessd_runtime::graph::CsrGraph;
    use sagessd_runtime::sampler::{ReferenceSampler, Sampler};

    /// A path 0-1-2-3-4-5 and a star around 6 (neighbours 7, 8, 9), undirected.
    fn graph() -> CsrGraph {
        let edges = [
            (0, 1),
            (1, 2),
            (2, 3),
            (3, 4),
            (4, 5),
            (6, 7),
            (6, 8),
            (6, 9),
        ];
        let both: Vec<(u32, u32)> = edges.iter().flat_map(|&(a, b)| [(a, b), (b, a)]).collect();
        CsrGraph::from_edges(10, &both).unwrap()
    }

    #[test]
    fn each_node_is_sampled_once_at_the_hop_after_it_was_reached() {
        let g = graph();
        // Fanouts above every degree: the sample is the whole 2-hop neighbourhood.
        let sub = ReferenceSampler::new(&g)
            .sample(1, &[5, 5], &[2, 6])
            .unwrap();
        let out = to_pyg(&sub);
        // Targets, then hop 1 (1, 3 around 2; 7, 8, 9 around 6), then hop 2 (0 and 4).
        assert_eq!(out.node[..2], [2, 6]);
        assert_eq!(out.num_sampled_nodes, [2, 5, 2]);
        let mut hop1: Vec<i64> = out.node[2..7].to_vec();
        hop1.sort_unstable();
        assert_eq!(hop1, [1, 3, 7, 8, 9]);
        let mut hop2: Vec<i64> = out.node[7..].to_vec();
        hop2.sort_unstable();
        assert_eq!(hop2, [0, 4]);
        // Hop 0: 2 + 3 edges into the targets; hop 1: the hop-1 nodes' edges, each drawn
        // once: 1 (0, 2), 3 (2, 4), 7, 8, 9 (6 each) = 7. The targets are not drawn again.
        assert_eq!(out.num_sampled_edges, [5, 7]);
        // Every edge exists in the graph, from row to col, and points inside `node`.
        for (&r, &c) in out.row.iter().zip(&out.col) {
            let (src, dst) = (out.node[r as usize] as u32, out.node[c as usize] as u64);
            assert!(g.neighbours(dst).contains(&src), "{src} -> {dst}");
        }
        // Hop-0 edges end at targets, hop-1 edges at hop-1 nodes.
        assert!(out.col[..5].iter().all(|&c| c < 2));
        assert!(out.col[5..].iter().all(|&c| (2..7).contains(&c)));
        // `kept` points back at the same nodes in the subgraph's list.
        let all: Vec<u64> = sub.view().nodes().iter().map(|v| v.get()).collect();
        for (i, &k) in out.kept.iter().enumerate() {
            assert_eq!(all[k as usize] as i64, out.node[i]);
        }
    }

    /// Checks PyG's invariants on `out`: local indices inside `node`, each hop's edges ending
    /// at the nodes of the hop before, each node but the targets first reached by an edge of
    /// the hop before its own, every edge in the graph.
    fn check(g: &CsrGraph, out: &PygOutput) {
        let starts: Vec<usize> = std::iter::once(0)
            .chain(out.num_sampled_nodes.iter().scan(0, |a, &n| {
                *a += n as usize;
                Some(*a)
            }))
            .collect();
        assert_eq!(*starts.last().unwrap(), out.node.len());
        let hop_of = |i: usize| starts.iter().rposition(|&s| s <= i).unwrap();
        let mut first = 0;
        for (h, &count) in out.num_sampled_edges.iter().enumerate() {
            for e in first..first + count as usize {
                let (r, c) = (out.row[e] as usize, out.col[e] as usize);
                assert!(r < out.node.len() && c < out.node.len(), "{out:?}");
                assert_eq!(hop_of(c), h, "edge {e} of {out:?}");
                assert!(hop_of(r) <= h + 1, "edge {e} of {out:?}");
                let (src, dst) = (out.node[r] as u32, out.node[c] as u64);
                assert!(g.neighbours(dst).contains(&src), "{src} -> {dst}");
            }
            first += count as usize;
        }
        for i in out.num_sampled_nodes[0] as usize..out.node.len() {
            let h = hop_of(i);
            let reached = (0..out.row.len())
                .any(|e| out.row[e] as usize == i && hop_of(out.col[e] as usize) + 1 == h);
            assert!(reached, "node {i} of {out:?}");
        }
    }

    #[test]
    fn three_hops_keep_the_hops_pyg_reaches() {
        let g = graph();
        for seed in 0..64 {
            for fanouts in [[1u16, 1, 1], [2, 1, 2], [1, 2, 1]] {
                let sub = ReferenceSampler::new(&g)
                    .sample(seed, &fanouts, &[1, 7])
                    .unwrap();
                check(&g, &to_pyg(&sub));
            }
        }
    }

    #[test]
    fn a_node_only_the_targets_second_draw_reached_is_dropped() {
        let g = graph();
        // Fanout 1 at both hops from target 1: hop 0 draws one of {0, 2}; at hop 1 the block
        // convention draws again for 1 too. Over many seeds, some second draw reaches a node
        // no hop-1 node reaches; the PyG view must not hold it.
        let mut dropped = 0;
        for seed in 0..64 {
            let sub = ReferenceSampler::new(&g)
                .sample(seed, &[1, 1], &[1])
                .unwrap();
            let out = to_pyg(&sub);
            assert_eq!(out.num_sampled_edges, [1, 1]);
            assert_eq!(out.row.len(), 2);
            dropped += sub.node_count() - out.node.len();
            // Every kept node but the target is the source of a kept edge.
            for i in 1..out.node.len() as i64 {
                assert!(out.row.contains(&i), "node {i} of {out:?}");
            }
        }
        assert!(dropped > 0, "no seed dropped a node: the test cannot fail");
    }
}
