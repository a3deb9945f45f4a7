//! Tests of the samplers: byte identity with the reference, statistics, errors.

use super::*;
use crate::graph::CsrGraph;
use sagessd_abi::sample::sample_positions;
use sagessd_host_driver::Device;
use std::collections::BTreeSet;

use sagessd_abi::graph::GraphDescriptor;

use crate::host_io::HostIoSampler;
use crate::registry::SamplerKind;
use crate::rmat::{RmatParams, generate};

/// A brute-force, obviously-correct rendering of the module's semantics, independent of
/// [`build_subgraph`]: returns (node list, per layer (dst, src, edges as (dst idx, src idx))).
#[allow(clippy::type_complexity)]
fn brute_force(
    g: &CsrGraph,
    seed: u64,
    fanouts: &[u16],
    targets: &[u64],
) -> (Vec<u64>, Vec<(usize, usize, Vec<(usize, usize)>)>) {
    let mut nodes: Vec<u64> = Vec::new();
    for t in targets {
        if !nodes.contains(t) {
            nodes.push(*t);
        }
    }
    let mut layers = Vec::new();
    for (l, &f) in fanouts.iter().enumerate() {
        let dst = nodes.len();
        let mut edges = Vec::new();
        for d in 0..dst {
            let v = nodes[d];
            let nbrs = g.neighbours(v);
            let mut pos = vec![0u64; nbrs.len().max(1)];
            let k = sample_positions(seed, l as u8, v, nbrs.len() as u64, f, &mut pos).unwrap();
            // Positions are a subset of the list, distinct, ascending, min(degree, f) many.
            assert_eq!(k, nbrs.len().min(f as usize));
            assert!(pos[..k].windows(2).all(|w| w[0] < w[1]));
            for p in &pos[..k] {
                let n = u64::from(nbrs[*p as usize]);
                let s = match nodes.iter().position(|x| *x == n) {
                    Some(s) => s,
                    None => {
                        nodes.push(n);
                        nodes.len() - 1
                    }
                };
                edges.push((d, s));
            }
        }
        layers.push((dst, nodes.len(), edges));
    }
    (nodes, layers)
}

fn check_against_brute_force(g: &CsrGraph, seed: u64, fanouts: &[u16], targets: &[u64]) {
    let s = ReferenceSampler::new(g)
        .sample(seed, fanouts, targets)
        .unwrap();
    let (nodes, layers) = brute_force(g, seed, fanouts, targets);
    let v = s.view();
    assert_eq!(v.seed(), seed);
    assert_eq!(v.nodes().iter().map(|n| n.get()).collect::<Vec<_>>(), nodes);
    assert_eq!(v.layer_count(), layers.len());
    for (l, (dst, src, edges)) in layers.iter().enumerate() {
        let lv = v.layer(l);
        assert_eq!(lv.counts.dst_count as usize, *dst);
        assert_eq!(lv.counts.src_count as usize, *src);
        let mut got = Vec::new();
        for d in 0..*dst {
            for e in lv.indptr[d].get()..lv.indptr[d + 1].get() {
                got.push((d, lv.indices[e as usize].get() as usize));
            }
        }
        assert_eq!(&got, edges);
        // Every sampled edge is a real edge of the graph.
        for (d, s) in &got {
            let (dn, sn) = (nodes[*d], nodes[*s]);
            assert!(g.neighbours(dn).contains(&(sn as u32)));
        }
    }
}

fn tiny_graphs() -> Vec<CsrGraph> {
    vec![
        // A path 0-1-2-3 plus an isolated node 4.
        CsrGraph::from_edges(5, &[(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)]).unwrap(),
        // A star: node 0 with 30 leaves (degree ≫ fanout).
        CsrGraph::from_edges(
            31,
            &(1..31u32)
                .flat_map(|i| [(0, i), (i, 0)])
                .collect::<Vec<_>>(),
        )
        .unwrap(),
        // A directed graph with duplicate neighbours and a self loop.
        CsrGraph::from_edges(3, &[(0, 1), (0, 1), (0, 0), (1, 2), (2, 0)]).unwrap(),
        generate(&RmatParams::graph500(7, 4, 3)).unwrap(),
    ]
}

#[test]
fn reference_matches_brute_force_on_tiny_graphs() {
    for (gi, g) in tiny_graphs().iter().enumerate() {
        let n = g.node_count();
        for seed in 0..6u64 {
            for fanouts in [&[1u16][..], &[2, 2], &[3, 1, 2], &[5, 5, 5, 5], &[25]] {
                let targets: Vec<u64> = (0..(seed % 4 + 1)).map(|i| (i * 7 + seed) % n).collect();
                check_against_brute_force(g, seed, fanouts, &targets);
                // Repeated targets collapse to their first occurrence.
                let mut repeated = targets.clone();
                repeated.extend(targets.iter().rev());
                check_against_brute_force(g, seed, fanouts, &repeated);
            }
        }
        // Degree-0 target only.
        if gi == 0 {
            check_against_brute_force(g, 1, &[3, 3], &[4]);
        }
    }
}

#[test]
fn hand_worked_example() {
    // Path 0-1-2-3: target 1, fanout 10 takes every neighbour: 1 → {0, 2}.
    let g = &tiny_graphs()[0];
    let s = ReferenceSampler::new(g).sample(9, &[10, 10], &[1]).unwrap();
    let v = s.view();
    let nodes: Vec<u64> = v.nodes().iter().map(|n| n.get()).collect();
    // Layer 0: dst [1], src [1, 0, 2]; layer 1: dst [1, 0, 2] → 1:{0,2} 0:{1} 2:{1,3}.
    assert_eq!(nodes, vec![1, 0, 2, 3]);
    let l0 = v.layer(0);
    assert_eq!(
        (
            l0.counts.dst_count,
            l0.counts.src_count,
            l0.counts.edge_count
        ),
        (1, 3, 2)
    );
    let l1 = v.layer(1);
    assert_eq!(
        (
            l1.counts.dst_count,
            l1.counts.src_count,
            l1.counts.edge_count
        ),
        (3, 4, 5)
    );
    let idx: Vec<u32> = l1.indices.iter().map(|i| i.get()).collect();
    assert_eq!(idx, vec![1, 2, 0, 0, 3]);
}

#[test]
fn invalid_requests_are_refused() {
    let g = &tiny_graphs()[0];
    let mut s = ReferenceSampler::new(g);
    for (fanouts, targets) in [
        (&[][..], &[0u64][..]),
        (&[1, 1, 1, 1, 1][..], &[0][..]),
        (&[0][..], &[0][..]),
        (&[MAX_FANOUT + 1][..], &[0][..]),
        (&[2][..], &[][..]),
        (&[2][..], &[5][..]),
    ] {
        assert!(
            matches!(
                s.sample(1, fanouts, targets),
                Err(SamplerError::InvalidRequest(_))
            ),
            "{fanouts:?} {targets:?}"
        );
    }
    assert_eq!(s.stats().minibatches, 0);
}

#[test]
fn a_sampler_reusing_its_node_table_samples_what_a_hash_map_does() {
    let g = generate(&RmatParams::graph500(9, 8, 11)).unwrap();
    let n = g.node_count();
    let mut reused = ReferenceSampler::new(&g);
    for seed in 0..20u64 {
        let targets: Vec<u64> = (0..(seed % 7 + 1) * 9)
            .map(|i| (i * 13 + seed) % n)
            .collect();
        // A fresh builder interns into a hash map.
        let fresh = build_subgraph(&mut CsrSource::new(&g), seed, &[10, 5, 3], &targets);
        let got = reused.sample(seed, &[10, 5, 3], &targets).unwrap();
        assert_eq!(got, fresh.unwrap(), "minibatch {seed}");
    }
    assert!(matches!(
        reused.index,
        Some(NodeIndex::Table { epoch: 20, .. })
    ));
    // 2^32 minibatches on, the epoch wraps: slots written in epoch 1 must not look current.
    let (seed, fanouts, targets) = (4, [5u16, 5], [1u64, 2, 3]);
    let want = build_subgraph(&mut CsrSource::new(&g), seed, &fanouts, &targets).unwrap();
    let stale = NodeIndex::Table {
        epoch: u32::MAX,
        slots: vec![1 << 32 | 7; n as usize],
    };
    let mut b = SubgraphBuilder::with_index(n, seed, &fanouts, &targets, stale).unwrap();
    let mut source = CsrSource::new(&g);
    while let Some(dst) = b.destinations() {
        let ranges = source.edge_ranges(dst).unwrap();
        let positions = b.set_ranges(&ranges).unwrap();
        let neighbours = source.neighbours_at(&positions).unwrap();
        b.set_neighbours(&neighbours).unwrap();
    }
    assert_eq!(b.finish().unwrap(), want);
}

#[test]
fn sampled_nodes_are_unique_and_deterministic() {
    let g = generate(&RmatParams::graph500(9, 8, 11)).unwrap();
    let targets: Vec<u64> = (0..64).map(|i| i * 7 % g.node_count()).collect();
    let a = ReferenceSampler::new(&g)
        .sample(5, &[10, 5, 3], &targets)
        .unwrap();
    let b = ReferenceSampler::new(&g)
        .sample(5, &[10, 5, 3], &targets)
        .unwrap();
    assert_eq!(a, b);
    let c = ReferenceSampler::new(&g)
        .sample(6, &[10, 5, 3], &targets)
        .unwrap();
    assert_ne!(a, c);
    let nodes: Vec<u64> = a.view().nodes().iter().map(|n| n.get()).collect();
    assert_eq!(nodes.iter().collect::<BTreeSet<_>>().len(), nodes.len());
}

#[test]
fn from_bytes_rejects_garbage_and_trailing_bytes() {
    let g = &tiny_graphs()[0];
    let s = ReferenceSampler::new(g).sample(1, &[2], &[1]).unwrap();
    let mut bytes = s.clone().into_bytes();
    bytes.push(0);
    assert!(SampledSubgraph::from_bytes(bytes).is_err());
    assert!(SampledSubgraph::from_bytes(vec![0; 64]).is_err());
    assert_eq!(
        SampledSubgraph::from_bytes(s.as_bytes().to_vec()).unwrap(),
        s
    );
}
fn loaded_device(g: &CsrGraph) -> (Device<sagessd_host_driver::LocalTransport>, GraphDescriptor) {
    let transport = sagessd_host_driver::LocalTransport::from_config(
        &sagessd_emulator::HwConfig::cosmos_plus(),
    )
    .unwrap();
    let mut dev = Device::open(transport).unwrap();
    let desc = crate::load::load_graph(&mut dev, g, 7).unwrap();
    (dev, desc)
}

#[test]
fn host_over_device_and_isp_equal_the_reference() {
    // A power-law graph, plus a star whose hub's list spans many blocks and flash pages.
    let star = CsrGraph::from_edges(
        20_001,
        &(1..20_001u32)
            .flat_map(|i| [(0, i), (i, 0)])
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for g in [generate(&RmatParams::graph500(9, 8, 5)).unwrap(), star] {
        let (dev, desc) = loaded_device(&g);
        let mut host =
            HostIoSampler::new(dev, desc, SamplerKind::Direct, Default::default()).unwrap();
        let (dev, _) = loaded_device(&g);
        let mut isp = IspSampler::new(dev);
        let mut reference = ReferenceSampler::new(&g);
        let n = g.node_count();
        for (seed, fanouts) in [
            (1u64, &[10u16, 10, 10][..]),
            (2, &[25, 10][..]),
            (3, &[3, 2, 2, 2][..]),
            (4, &[64][..]),
        ] {
            let mut targets: Vec<u64> = (0..50).map(|i| (i * 37 + seed * 11) % n).collect();
            targets.push(targets[3]);
            targets.push(0);
            let r = reference.sample(seed, fanouts, &targets).unwrap();
            let h = host.sample(seed, fanouts, &targets).unwrap();
            let i = isp.sample(seed, fanouts, &targets).unwrap();
            assert!(
                h == r,
                "host-over-device differs: seed {seed} fanouts {fanouts:?}"
            );
            assert!(i == r, "ISP differs: seed {seed} fanouts {fanouts:?}");
        }
        let (hs, is) = (host.stats(), isp.stats());
        assert_eq!(hs.minibatches, 4);
        assert_eq!(is.driver.commands, 2 * 4);
        assert_eq!((is.driver.ns_submits, is.driver.ns_collects), (4, 4));
        assert_eq!(hs.driver.commands, hs.driver.reads);
        assert!(hs.modelled_time_ns.unwrap() > 0 && is.modelled_time_ns.unwrap() > 0);
        assert!(hs.device.is_some() && is.device.is_some());
        assert_eq!(hs.edges, reference.stats().edges);
    }
}

#[test]
fn device_errors_surface_from_the_isp_sampler() {
    let g = &tiny_graphs()[0];
    let (dev, _) = loaded_device(g);
    let mut isp = IspSampler::new(dev);
    let e = isp.sample(1, &[2], &[99]).unwrap_err();
    assert!(
        matches!(&e, SamplerError::Driver(d) if d.vendor_status()
            == Some(sagessd_abi::nvme::VendorStatus::NodeOutOfRange)),
        "{e}"
    );
    assert!(isp.sample(1, &[2], &[1]).is_ok());
    assert_eq!(isp.stats().minibatches, 1);
}

/// The synthetic source samples exactly what the same graph, written out as a dataset and
/// read back (checksums verified, CSR invariants checked), does.
#[test]
fn samples_like_its_materialised_csr() {
    let g = sagessd_emulator::synthetic_graph::SyntheticGraph::new(
        sagessd_emulator::synthetic_graph::SyntheticSpec::cnr_2000_like(30_000, 2),
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("sagessd-synthetic-{}", std::process::id()));
    let d = crate::synthetic::write_dataset(&g, &dir, "t", "test", &mut |_, _| {}).unwrap();
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
