//! The project's strongest oracle: for any graph, seed, fanouts and targets, the subgraph the
//! firmware samples inside the emulated SSD (or the host builds from the sampled ids the firmware
//! returns) is byte-identical to the in-memory reference and to the host-over-device samplers (direct I/O, mmap and io_uring-style reads of the graph through
//! the device).

use proptest::prelude::*;
use sagessd_abi::subgraph::SubgraphView;
use sagessd_runtime::graph::CsrGraph;
use sagessd_runtime::host_io::HostIoSampler;
use sagessd_runtime::load::{load_graph, load_graph_with_features};
use sagessd_runtime::registry::SamplerKind;
use sagessd_runtime::sampler::{IspSampler, ReferenceSampler, Sampler};
use sagessd_tests::{hub_graph, open, small_config};

/// A random directed multigraph with isolated nodes and one hub whose neighbour list spans
/// several 2 KiB flash pages (512 ids per page).
fn graph() -> impl Strategy<Value = CsrGraph> {
    (2u32..1200, 0usize..4000, 0usize..2500, any::<u64>())
        .prop_map(|(n, m, hub_degree, seed)| hub_graph(n, m, hub_degree, seed))
}

fn request(node_count: u64) -> impl Strategy<Value = (u64, Vec<u16>, Vec<u64>)> {
    let targets = proptest::collection::vec(0..node_count.min(40), 1..48).prop_map(move |mut t| {
        // Repeated targets are likely (ids < 40), and the hub and the last node always appear.
        t.push(0);
        t.push(node_count - 1);
        t
    });
    (
        any::<u64>(),
        proptest::collection::vec(1u16..=16, 1..=4),
        targets,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn isp_host_over_device_and_reference_are_byte_identical(
        (g, requests) in graph().prop_flat_map(|g| {
            let n = g.node_count();
            (Just(g), proptest::collection::vec(request(n), 1..4))
        })
    ) {
        let hw = small_config();
        let mut isp_device = open(&hw);
        let descriptor = load_graph(&mut isp_device, &g, 0).expect("load");
        isp_device.transport_mut().ssd_mut().drop_caches();
        let mut reference = ReferenceSampler::new(&g);
        let mut isp = IspSampler::new(isp_device);
        // The device returns sampled ids and the host builds the subgraph from them.
        let mut host_built = {
            let mut device = open(&hw);
            assert_eq!(load_graph(&mut device, &g, 0).expect("load"), descriptor);
            IspSampler::new(device).with_host_build()
        };
        // Host-over-device: direct I/O (SmartSAGE's software path), and the same graph read
        // through the page cache (mmap) and in io_uring-style batches, each on its own device.
        let mut hosts: Vec<HostIoSampler> = [SamplerKind::Direct, SamplerKind::Mmap, SamplerKind::Uring]
            .into_iter()
            .map(|mode| {
                let mut device = open(&hw);
                let d = load_graph(&mut device, &g, 0).expect("load");
                assert_eq!(d, descriptor);
                HostIoSampler::new(device, d, mode, hw.host.clone()).expect("host sampler")
            })
            .collect();
        for (seed, fanouts, targets) in requests {
            let want = reference.sample(seed, &fanouts, &targets).expect("reference");
            let got = isp.sample(seed, &fanouts, &targets).expect("isp");
            prop_assert!(want == got, "ISP differs: seed {seed} fanouts {fanouts:?} targets {targets:?}");
            let got = host_built.sample(seed, &fanouts, &targets).expect("host-built ISP");
            prop_assert!(
                want == got,
                "host-built ISP differs: seed {seed} fanouts {fanouts:?} targets {targets:?}"
            );
            for host in &mut hosts {
                let got = host.sample(seed, &fanouts, &targets).expect("host-over-device");
                prop_assert!(
                    want == got,
                    "{} differs: seed {seed} fanouts {fanouts:?} targets {targets:?}",
                    host.name()
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// In-storage feature gather on the same random graphs, with rows of any size (4 bytes up
    /// to a whole flash page, strides of many rows per page down to one) and every node's row
    /// its own: the subgraph is the reference's, with the header's size and feature_row_bytes
    /// set, zero padding, and each node's stored row after it, in node order.
    #[test]
    fn isp_features_are_the_stored_rows_of_the_reference_nodes(
        (g, requests, row_words, fill) in graph().prop_flat_map(|g| {
            let n = g.node_count();
            (Just(g), proptest::collection::vec(request(n), 1..3), 1u32..=512, any::<u64>())
        })
    ) {
        let mut hw = small_config();
        hw.firmware.max_feature_bytes = 4 << 20;
        assert!(4 * 512 <= hw.nand.page_size_bytes, "the largest row fits a page");
        let row_bytes = 4 * row_words;
        let n = g.node_count() as usize;
        // Word w of node v's row: a hash of (v, w, fill), so no two rows are alike.
        let rows: Vec<u8> = (0..n * row_words as usize)
            .flat_map(|i| {
                let h = (i as u64 ^ fill).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                ((h >> 32) as u32).to_le_bytes()
            })
            .collect();
        let mut device = open(&hw);
        load_graph_with_features(&mut device, &g, &rows, row_bytes, 0).expect("load");
        device.transport_mut().ssd_mut().drop_caches();
        let mut reference = ReferenceSampler::new(&g);
        for (seed, fanouts, targets) in requests {
            let want = reference.sample(seed, &fanouts, &targets).expect("reference");
            let want = want.as_bytes();
            let got = device
                .sample_with_features(seed, &fanouts, &targets)
                .expect("isp with features");
            let view = SubgraphView::parse(&got).expect("a valid subgraph");
            prop_assert_eq!(view.feature_row_bytes(), row_bytes as usize);
            let at = want.len().next_multiple_of(8);
            prop_assert_eq!(got.len(), at + view.nodes().len() * row_bytes as usize);
            for (i, (a, b)) in got[..want.len()].iter().zip(want).enumerate() {
                // Only the header's total size and feature_row_bytes differ.
                prop_assert!(a == b || (16..24).contains(&i), "byte {} differs", i);
            }
            prop_assert!(got[want.len()..at].iter().all(|&b| b == 0));
            let expected: Vec<u8> = view
                .nodes()
                .iter()
                .flat_map(|v| {
                    let r = row_bytes as usize;
                    rows[v.get() as usize * r..][..r].iter().copied()
                })
                .collect();
            prop_assert!(view.features() == &expected[..], "features differ");
        }
    }
}

/// A graph several times larger than the page buffer, sampled many times from a cold cache:
/// the ISP engine's gathers, page buffer and the FTL all work under eviction pressure.
#[test]
fn a_graph_larger_than_the_device_buffer_samples_identically() {
    let params = sagessd_runtime::rmat::RmatParams::graph500(14, 8, 7);
    let g = sagessd_runtime::rmat::generate(&params).expect("rmat");
    let hw = small_config();
    let mut device = open(&hw);
    load_graph(&mut device, &g, 0).expect("load");
    device.transport_mut().ssd_mut().drop_caches();
    let graph_bytes = 8 * g.indptr().len() + 4 * g.indices().len();
    let buffer_bytes = (hw.firmware.page_buffer_pages * hw.nand.page_size_bytes) as usize;
    assert!(
        graph_bytes > 8 * buffer_bytes,
        "{graph_bytes} vs {buffer_bytes}"
    );
    let mut reference = ReferenceSampler::new(&g);
    let mut isp = IspSampler::new(device);
    for batch in 0..6u64 {
        let targets: Vec<u64> = (0..200)
            .map(|i| (i * 7919 + batch * 104_729) % g.node_count())
            .collect();
        let want = reference
            .sample(batch, &[10, 5, 3], &targets)
            .expect("reference");
        let got = isp.sample(batch, &[10, 5, 3], &targets).expect("isp");
        assert!(want == got, "batch {batch} differs");
    }
    let stats = isp.device().transport().ssd().stats();
    assert!(stats.nand_pages_read > 0);
}
