//! In-storage feature gather: with one flag in the NS_config, the device returns the features
//! of the subgraph's nodes, read from the feature region registered with the graph. They must
//! equal the host's gather of the same rows, and the subgraph must equal the plain one.

use sagessd_abi::nvme::VendorStatus;
use sagessd_abi::subgraph::SubgraphView;
use sagessd_host_driver::DriverError;
use sagessd_runtime::load::{load_graph, load_graph_with_features};
use sagessd_runtime::rmat::{RmatParams, generate};
use sagessd_runtime::sampler::{ReferenceSampler, SampledSubgraph, Sampler};
use sagessd_tests::{open, small_config};

#[test]
fn the_device_gathers_the_same_features_as_the_host() {
    let mut hw = small_config();
    hw.firmware.max_feature_bytes = 1 << 20;
    let graph = generate(&RmatParams::graph500(10, 4, 5)).expect("graph");
    let n = graph.node_count() as usize;
    let row_bytes = 12u32; // three f32 per node, stored at a stride of 16
    let rows: Vec<u8> = (0..n * row_bytes as usize)
        .map(|i| (i * 31 % 251) as u8)
        .collect();
    let mut device = open(&hw);
    load_graph_with_features(&mut device, &graph, &rows, row_bytes, 0).expect("load");

    let mut reference = ReferenceSampler::new(&graph);
    for (seed, targets) in [
        (1u64, vec![1u64, 2, 3]),
        (9, (0..40).map(|i| i * 17 % 1024).collect()),
    ] {
        let got = device
            .sample_with_features(seed, &[5, 3], &targets)
            .expect("sample with features");
        let view = SubgraphView::parse(&got).expect("valid subgraph");
        assert_eq!(view.feature_row_bytes(), row_bytes as usize);
        // The host's gather of the subgraph's nodes, in node-list order.
        let expected: Vec<u8> = view
            .nodes()
            .iter()
            .flat_map(|v| rows[v.get() as usize * 12..][..12].to_vec())
            .collect();
        assert_eq!(view.features(), &expected[..]);
        // The sampling itself is unchanged.
        let reference_subgraph = reference
            .sample(seed, &[5, 3], &targets)
            .expect("reference");
        // Split apart, they are the plain subgraph and the rows, byte for byte.
        let (split, split_rows) =
            SampledSubgraph::split_features(got.clone()).expect("split features");
        assert_eq!(split, reference_subgraph);
        assert_eq!(split_rows, expected);
        let plain = reference_subgraph.view();
        assert_eq!(view.nodes(), plain.nodes());
        for l in 0..2 {
            assert_eq!(view.layer(l).indices, plain.layer(l).indices);
        }
    }

    // Without a feature region, and on a device without a feature buffer, the flag is refused.
    let mut bare = open(&hw);
    load_graph(&mut bare, &graph, 0).expect("load");
    match bare.sample_with_features(1, &[2], &[1]) {
        Err(DriverError::InvalidArgument(_)) => {}
        other => panic!("expected a refusal, got {other:?}"),
    }
    let mut without = open(&small_config());
    let err = load_graph_with_features(&mut without, &graph, &rows, row_bytes, 0)
        .map(|_| ())
        .and_then(|()| {
            without
                .sample_with_features(1, &[2], &[1])
                .map(|_| ())
                .map_err(Into::into)
        })
        .expect_err("no feature buffer");
    let status = match err {
        sagessd_runtime::load::LoadError::Driver(e) => e.vendor_status(),
        _ => None,
    };
    assert_eq!(status, Some(VendorStatus::ReservedField));
}
