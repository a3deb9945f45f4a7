//! A dataset's degree and neighbour-gap profile: what a synthetic graph
//! ([`sagessd_emulator::synthetic_graph`]) copies from a real one.
//!
//! `sagessd dataset profile DIR` prints it as TOML; the emulator's built-in cnr-2000 profile is
//! this function's output for the cnr-2000 web graph.

use sagessd_emulator::synthetic_graph::GraphProfile;

use crate::graph::CsrGraph;

/// The profile of `graph`: its degree histogram and its entries' gaps `|u − v|` by
/// `⌊log2⌋` (self loops are left out of the gaps).
pub fn profile(graph: &CsrGraph, name: &str, source: &str) -> GraphProfile {
    let mut degrees: Vec<u64> = graph.indptr().windows(2).map(|w| w[1] - w[0]).collect();
    degrees.sort_unstable();
    let mut histogram: Vec<[u64; 2]> = Vec::new();
    for d in degrees {
        match histogram.last_mut() {
            Some([last, count]) if *last == d => *count += 1,
            _ => histogram.push([d, 1]),
        }
    }
    let mut gaps = vec![0u64; 32];
    for u in 0..graph.node_count() {
        for &v in graph.neighbours(u) {
            let gap = u.abs_diff(u64::from(v));
            if gap > 0 {
                gaps[gap.ilog2() as usize] += 1;
            }
        }
    }
    while gaps.last() == Some(&0) {
        gaps.pop();
    }
    GraphProfile {
        name: name.to_owned(),
        source: source.to_owned(),
        node_count: graph.node_count(),
        degrees: histogram,
        gap_log2_edges: gaps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_degrees_and_gaps() {
        // 0 → 1 (gap 1), 0 → 3 (gap 3), 1 → 0 (1), 2 → 2 (self loop), 3 → 0 (3); 4 isolated.
        let g = CsrGraph::from_edges(5, &[(0, 1), (0, 3), (1, 0), (2, 2), (3, 0)]).unwrap();
        let p = profile(&g, "t", "test");
        assert_eq!(p.degrees, vec![[0, 1], [1, 3], [2, 1]]);
        assert_eq!(p.gap_log2_edges, vec![2, 2]);
        assert_eq!(p.node_count, 5);
        p.validate("t").unwrap();
    }
}
