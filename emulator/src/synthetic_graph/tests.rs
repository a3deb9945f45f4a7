//! Tests of the synthetic graph against its profile (the real graph's statistics, read from the
//! profile's own numbers, not recomputed by the generator's code) and against CSR invariants.

use super::*;

fn graph(n: u64, seed: u64) -> SyntheticGraph {
    SyntheticGraph::new(SyntheticSpec::cnr_2000_like(n, seed)).unwrap()
}

/// The whole graph as (indptr, indices), read through the byte fills in odd-sized pieces.
fn materialise(g: &SyntheticGraph) -> (Vec<u64>, Vec<u32>) {
    let read = |total: u64, fill: &dyn Fn(u64, &mut [u8])| {
        let mut bytes = vec![0u8; total as usize + 1000];
        let mut at = 0;
        for (i, chunk) in bytes.chunks_mut(4093).enumerate() {
            // Odd lengths and offsets: every piece boundary splits an entry somewhere.
            let _ = i;
            fill(at, chunk);
            at += chunk.len() as u64;
        }
        assert!(
            bytes[total as usize..].iter().all(|&b| b == 0),
            "past-the-end bytes"
        );
        bytes.truncate(total as usize);
        bytes
    };
    let indptr = read(g.indptr_bytes(), &|o, out| g.fill_indptr(o, out));
    let indices = read(g.indices_bytes(), &|o, out| g.fill_indices(o, out));
    (
        indptr
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        indices
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    )
}

#[test]
fn bytes_form_a_valid_csr_that_matches_the_accessors() {
    let g = graph(20_000, 5);
    let (indptr, indices) = materialise(&g);
    assert_eq!(indptr.len() as u64, g.node_count() + 1);
    assert_eq!(indptr[0], 0);
    assert_eq!(*indptr.last().unwrap(), g.edge_count());
    assert_eq!(indices.len() as u64, g.edge_count());
    let mut list = Vec::new();
    for v in 0..g.node_count() {
        let (s, e) = (indptr[v as usize], indptr[v as usize + 1]);
        assert!(s <= e, "indptr decreases at {v}");
        assert_eq!(e - s, g.degree(v));
        assert_eq!(g.indptr(v), s);
        g.neighbours_into(v, &mut list);
        assert_eq!(&indices[s as usize..e as usize], &list[..], "node {v}");
        for (i, &u) in list.iter().enumerate() {
            assert!(
                u64::from(u) < g.node_count() && u64::from(u) != v,
                "{v}: {u}"
            );
            assert_eq!(g.owner(s + i as u64), (v, i as u64));
            assert_eq!(g.neighbour(v, i as u64), u);
        }
    }
}

#[test]
fn same_spec_same_bytes_other_seed_other_graph() {
    let (a, b, c) = (graph(50_000, 9), graph(50_000, 9), graph(50_000, 10));
    let mut x = vec![0u8; 64 << 10];
    let mut y = vec![0u8; 64 << 10];
    for offset in [0u64, 4096, 123_456, a.indices_bytes() - 1000] {
        a.fill_indices(offset, &mut x);
        b.fill_indices(offset, &mut y);
        assert_eq!(x, y);
        a.fill_indptr(offset.min(a.indptr_bytes()), &mut x);
        b.fill_indptr(offset.min(a.indptr_bytes()), &mut y);
        assert_eq!(x, y);
    }
    a.fill_indices(4096, &mut x);
    c.fill_indices(4096, &mut y);
    assert_ne!(x, y);
}

/// The degree distribution is the profile's, read from the profile's numbers directly.
#[test]
fn degrees_follow_the_profile() {
    let profile = GraphProfile::cnr_2000();
    let n0 = profile.node_count as f64;
    let n = 1_000_000u64;
    let g = graph(n, 3);
    let mut count_by_degree = std::collections::HashMap::<u64, u64>::new();
    let mut max = 0;
    for v in 0..n {
        let d = g.degree(v);
        *count_by_degree.entry(d).or_default() += 1;
        max = max.max(d);
    }
    // Each degree's share is the profile's, to one node of rounding per class.
    for &[d, c] in &profile.degrees {
        let expected = c as f64 / n0 * n as f64;
        let got = count_by_degree.get(&d).copied().unwrap_or(0) as f64;
        assert!(
            (got - expected).abs() <= 1.0,
            "degree {d}: {got} nodes, {expected} expected"
        );
    }
    assert_eq!(max, profile.degrees.last().unwrap()[0]);
    let mean = g.edge_count() as f64 / n as f64;
    let profile_mean = profile.entry_count() as f64 / n0;
    assert!(
        (mean / profile_mean - 1.0).abs() < 1e-3,
        "mean {mean} vs {profile_mean}"
    );
}

/// Short links keep the profile's gap shares, and long links land on nodes in proportion to
/// their degree: the mean degree of a long link's endpoint is the profile's size-biased mean
/// `Σ d² c / Σ d c`.
#[test]
fn locality_and_degree_bias_follow_the_profile() {
    let profile = GraphProfile::cnr_2000();
    let n = 2_000_000u64;
    let g = graph(n, 4);
    let local = DEFAULT_LOCAL_BINS as usize;
    let total: u64 = profile.gap_log2_edges.iter().sum();
    let mut bins = vec![0u64; 33];
    let (mut long, mut long_degree_sum, mut entries) = (0u64, 0f64, 0u64);
    let mut list = Vec::new();
    for v in (0..n).step_by(7) {
        g.neighbours_into(v, &mut list);
        for &u in &list {
            let gap = v.abs_diff(u64::from(u));
            entries += 1;
            let b = gap.ilog2() as usize;
            bins[b] += 1;
            if b > local {
                long += 1;
                long_degree_sum += g.degree(u64::from(u)) as f64;
            }
        }
    }
    for (b, &c) in profile.gap_log2_edges[..local].iter().enumerate() {
        let expected = c as f64 / total as f64;
        let got = bins[b] as f64 / entries as f64;
        assert!(
            (got - expected).abs() < 0.004,
            "gap bin {b}: {got:.4} vs {expected:.4}"
        );
    }
    let (mut s1, mut s2) = (0f64, 0f64);
    for &[d, c] in &profile.degrees {
        s1 += (d * c) as f64;
        s2 += (d * d * c) as f64;
    }
    // Long links (gaps ≥ 2^(local+1), leaving out local links that landed in the first global
    // bin) are global draws; their endpoints' degrees are size-biased.
    let mean = long_degree_sum / long as f64;
    assert!(
        (mean / (s2 / s1) - 1.0).abs() < 0.1,
        "long-link endpoint degree {mean} vs {}",
        s2 / s1
    );
}

#[test]
fn papers100m_size_meets_the_seeds_scale() {
    let g = SyntheticGraph::new(SyntheticSpec::papers100m_size(1)).unwrap();
    assert_eq!(g.node_count(), PAPERS100M_NODES);
    assert!(
        g.edge_count() >= 1_500_000_000,
        "{} entries",
        g.edge_count()
    );
    assert!(g.indptr_bytes() + g.indices_bytes() >= 6 << 30);
    // The last list ends at the last entry, and a list deep inside reads back.
    let last = g.node_count() - 1;
    assert_eq!(g.indptr(last) + g.degree(last), g.edge_count());
    let v = 77_777_777;
    let mut list = Vec::new();
    g.neighbours_into(v, &mut list);
    let mut bytes = vec![0u8; list.len() * 4];
    g.fill_indices(g.indptr(v) * 4, &mut bytes);
    let read: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(read, list);
}

#[test]
fn bad_specs_are_refused() {
    let mut spec = SyntheticSpec::cnr_2000_like(0, 1);
    assert!(matches!(
        SyntheticGraph::new(spec.clone()),
        Err(SyntheticError::NodeCount(0))
    ));
    spec.node_count = MAX_NODES + 1;
    assert!(matches!(
        SyntheticGraph::new(spec.clone()),
        Err(SyntheticError::NodeCount(_))
    ));
    spec.node_count = 10;
    spec.local_bins = 33;
    assert!(matches!(
        SyntheticGraph::new(spec),
        Err(SyntheticError::LocalBins(33))
    ));
    // Tiny graphs still work (lists longer than the graph repeat nodes, never the node itself).
    let g = graph(3, 1);
    let mut list = Vec::new();
    for v in 0..3 {
        g.neighbours_into(v, &mut list);
        assert!(list.iter().all(|&u| u64::from(u) != v && u < 3));
    }
}
