//! A dataset placed on an NVMe device for on-device runs: the CSR (attached for in-storage
//! sampling), the feature rows as a feature region when asked for, and the AGNES block layout
//! after them, aligned to its block size. `sagessd sample --on-device` and `sagessd train
//! --on-device` place a dataset the same way.

use sagessd_abi::graph::GraphDescriptor;
use sagessd_host_driver::{Device, Transport};

use crate::dataset::FeatureRows;
use crate::graph::CsrGraph;
use crate::ooc::AgnesLayout;

/// Where a placed dataset lies on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The attached graph (its feature region included, when placed with features).
    pub graph: GraphDescriptor,
    /// First LBA of the AGNES layout.
    pub layout_slba: u64,
}

/// Writes `graph` from LBA 0 (attaching it, with `features` as its feature region when given),
/// then `layout` at the next multiple of its block size.
pub fn place<T: Transport>(
    device: &mut Device<T>,
    graph: &CsrGraph,
    features: Option<&FeatureRows>,
    layout: &AgnesLayout,
) -> Result<Placement, Box<dyn std::error::Error + Send + Sync>> {
    let desc = match features {
        Some(rows) => crate::load::load_graph_with_features(
            device,
            graph,
            &rows.bytes,
            u32::try_from(rows.row_bytes())?,
            0,
        )?,
        None => crate::load::load_graph(device, graph, 0)?,
    };
    let lba = u64::from(device.info().block_size_bytes);
    let align = (layout.manifest.block_bytes / lba).max(1);
    let end = desc
        .features
        .map_or(desc.indices.slba + desc.indices.block_count, |f| {
            f.range.slba + f.range.block_count
        });
    let layout_slba = end.next_multiple_of(align);
    layout.write_to_device(device, layout_slba)?;
    Ok(Placement {
        graph: desc,
        layout_slba,
    })
}

/// A per-job feature buffer for an emulated firmware that has none: room for the largest
/// subgraphs a job of `minibatches` minibatches (an in-storage hyperbatch's share the buffer;
/// 1 otherwise) of `batch_size` targets at `fanouts` can sample (each its targets and every
/// sampled neighbour, at most, and no more than the graph's nodes; all together no more than
/// the firmware's node limit), at `row_bytes` a row, capped at `u32::MAX`.
pub fn feature_buffer_bytes(
    node_count: u64,
    max_subgraph_nodes: u32,
    minibatches: u64,
    batch_size: u64,
    fanouts: &[u16],
    row_bytes: u64,
) -> u32 {
    let most_nodes = fanouts
        .iter()
        .fold(batch_size, |k, &f| k.saturating_mul(1 + u64::from(f)));
    let rows = node_count
        .min(most_nodes)
        .saturating_mul(minibatches.max(1))
        .min(u64::from(max_subgraph_nodes));
    u32::try_from(rows.saturating_mul(row_bytes)).unwrap_or(u32::MAX)
}
