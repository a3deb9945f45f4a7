//! A device without in-storage sampling (`firmware.isp = false`, like hw-configs/gen4-ssd.toml)
//! still takes a graph and serves the host-side samplers over it; only GRAPH_ATTACH is refused.

use sagessd_emulator::HwConfig;
use sagessd_runtime::load::load_graph;
use sagessd_runtime::rmat::{RmatParams, generate};

#[test]
fn a_graph_loads_onto_a_device_without_isp_and_is_not_attached() {
    let text = include_str!("../../hw-configs/gen4-ssd.toml");
    let hw = HwConfig::from_toml_str(text).expect("gen4-ssd parses");
    assert!(!hw.firmware.isp, "the case needs a device without ISP");
    let mut device = sagessd_tests::open(&hw);
    let graph = generate(&RmatParams::graph500(8, 4, 1)).expect("graph");
    let desc = load_graph(&mut device, &graph, 0).expect("the graph loads without ISP");
    assert_eq!(device.attached_graph(), None);
    // The layout is on the device: the indptr reads back.
    let bs = u64::from(device.info().block_size_bytes);
    let first = device.read(desc.indptr.slba, 1).expect("indptr reads");
    assert_eq!(first.len() as u64, bs);
    assert_eq!(
        u64::from_le_bytes(first[8..16].try_into().unwrap()),
        graph.indptr()[1]
    );
    // In-storage sampling is refused with a status, not a hang or a panic.
    assert!(device.sample(1, &[2], &[0]).is_err());
}
