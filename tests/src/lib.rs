//! Shared fixtures of the cross-crate end-to-end tests in `tests/tests/`.
//!
//! The tests drive the whole stack the way a user does: a graph is written to an emulated SSD
//! through the host driver's NVMe WRITEs, attached with GRAPH_ATTACH, and sampled through
//! NS_SUBMIT/NS_COLLECT, and the results are compared byte for byte with the host samplers.

pub mod fuzz;
pub mod raw_host;

use sagessd_emulator::HwConfig;
use sagessd_host_driver::{Device, LocalTransport};

/// A small device for tests: the Cosmos+ timing model, shrunk to 2 × 2 dies of 64 blocks of
/// 16 pages of 2 KiB, 512-byte LBAs and a 32-page DRAM buffer, so that graphs of a few thousand
/// edges span many flash pages, hub neighbour lists span several, and the page buffer is far
/// smaller than the graph.
pub fn small_config() -> HwConfig {
    let mut hw = HwConfig::cosmos_plus();
    hw.device.name = "test-small".into();
    hw.nand.channels = 2;
    hw.nand.ways = 2;
    hw.nand.blocks_per_die = 64;
    hw.nand.pages_per_block = 16;
    hw.nand.page_size_bytes = 2048;
    hw.firmware.page_buffer_pages = 32;
    hw.firmware.block_size_bytes = 512;
    hw.firmware.max_transfer_bytes = 16 * 1024;
    hw.firmware.max_targets = 256;
    hw.firmware.max_subgraph_nodes = 1 << 16;
    hw.firmware.max_subgraph_edges = 1 << 18;
    hw.validate().expect("the small test config is valid");
    hw
}

/// A directed multigraph of `n` nodes from `seed`: `m` random edges out of the lower three
/// quarters of the nodes (the upper quarter has degree 0), plus `hub_degree` out of node 0, the
/// hub, whose list spans several 2 KiB flash pages (512 ids a page) once it passes 512.
pub fn hub_graph(
    n: u32,
    m: usize,
    hub_degree: usize,
    seed: u64,
) -> sagessd_runtime::graph::CsrGraph {
    let mut x = seed | 1;
    let mut next = move |bound: u32| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % u64::from(bound)) as u32
    };
    let active = (n * 3 / 4).max(1);
    let mut edges: Vec<(u32, u32)> = (0..m).map(|_| (next(active), next(n))).collect();
    edges.extend((0..hub_degree).map(|_| (0, next(n))));
    sagessd_runtime::graph::CsrGraph::from_edges(u64::from(n), &edges).expect("valid graph")
}

/// Opens a fresh in-process device described by `hw`.
pub fn open(hw: &HwConfig) -> Device<LocalTransport> {
    let transport = LocalTransport::from_config(hw).expect("emulator starts");
    Device::open(transport).expect("identify succeeds")
}
