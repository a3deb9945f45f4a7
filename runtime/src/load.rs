//! Writing a CSR graph onto a device with NVMe WRITEs and registering it with `GRAPH_ATTACH`.
//!
//! On-device layout (the one [`sagessd_abi::graph`] describes): `indptr` as `node_count + 1`
//! little-endian `u64` starting at `start_lba`, then `indices` as little-endian `u32` starting at
//! the next block boundary. The tail of each region's last block is zero.

use sagessd_abi::graph::{GraphDescriptor, LbaRange};
use sagessd_host_driver::{Device, DriverError, Transport};

use crate::graph::CsrGraph;

/// Bytes written per batch of WRITE commands (the device splits further at its transfer size).
const CHUNK_BYTES: usize = 4 << 20;

/// Why a graph could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The graph does not fit the namespace from `start_lba`.
    #[error("graph needs LBAs {start_lba}..{end_lba} but the namespace has {namespace_blocks}")]
    DoesNotFit {
        /// First LBA asked for.
        start_lba: u64,
        /// One past the last LBA needed.
        end_lba: u64,
        /// Namespace size in blocks.
        namespace_blocks: u64,
    },
    /// A WRITE, Flush or `GRAPH_ATTACH` failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
}

/// Where [`load_graph`] puts `graph` from `start_lba` on a namespace with `block_size_bytes`
/// blocks: the descriptor it will attach.
pub fn plan_layout(graph: &CsrGraph, start_lba: u64, block_size_bytes: u32) -> GraphDescriptor {
    // An in-memory graph's sizes (at most 2^32 nodes, its indices in memory) cannot overflow.
    GraphDescriptor::csr_layout(
        graph.node_count(),
        graph.edge_count(),
        start_lba,
        block_size_bytes,
    )
    .expect("an in-memory graph's layout fits 64 bits")
}

/// Writes `graph` from `start_lba`, flushes, and attaches it; returns the descriptor.
pub fn load_graph<T: Transport>(
    device: &mut Device<T>,
    graph: &CsrGraph,
    start_lba: u64,
) -> Result<GraphDescriptor, LoadError> {
    load_graph_with_progress(device, graph, start_lba, &mut |_, _| {})
}

/// [`load_graph`], calling `progress(bytes_written, bytes_total)` after each batch of writes.
pub fn load_graph_with_progress<T: Transport>(
    device: &mut Device<T>,
    graph: &CsrGraph,
    start_lba: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<GraphDescriptor, LoadError> {
    let desc = write_graph_with_progress(device, graph, start_lba, progress)?;
    attach(device, &desc)?;
    Ok(desc)
}

/// [`load_graph_with_progress`] without the `GRAPH_ATTACH`: writes `graph` from `start_lba` and
/// flushes, for host sampling on a device that does not sample in storage; returns the
/// descriptor of where it lies.
pub fn write_graph_with_progress<T: Transport>(
    device: &mut Device<T>,
    graph: &CsrGraph,
    start_lba: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<GraphDescriptor, LoadError> {
    let bs = device.info().block_size_bytes;
    let desc = plan_layout(graph, start_lba, bs);
    let end_lba = desc.indices.slba + desc.indices.block_count;
    if end_lba > device.info().block_count {
        return Err(LoadError::DoesNotFit {
            start_lba,
            end_lba,
            namespace_blocks: device.info().block_count,
        });
    }
    let total = (desc.indptr.block_count + desc.indices.block_count) * u64::from(bs);
    let mut done = 0u64;
    let mut write_region = |device: &mut Device<T>,
                            region: LbaRange,
                            elem_bytes: usize,
                            elem_count: usize,
                            put: &dyn Fn(usize, &mut [u8])|
     -> Result<(), LoadError> {
        let region_bytes = region.block_count as usize * bs as usize;
        let chunk_bytes = CHUNK_BYTES - CHUNK_BYTES % bs as usize;
        let mut offset = 0;
        while offset < region_bytes {
            let len = chunk_bytes.min(region_bytes - offset);
            let mut buf = vec![0u8; len];
            let first = offset / elem_bytes;
            for (i, slot) in buf.chunks_exact_mut(elem_bytes).enumerate() {
                if first + i < elem_count {
                    put(first + i, slot);
                }
            }
            device.write(region.slba + (offset / bs as usize) as u64, &buf)?;
            offset += len;
            done += len as u64;
            progress(done, total);
        }
        Ok(())
    };
    let indptr = graph.indptr();
    write_region(device, desc.indptr, 8, indptr.len(), &|i, out| {
        out.copy_from_slice(&indptr[i].to_le_bytes())
    })?;
    let indices = graph.indices();
    if desc.indices.block_count > 0 {
        write_region(device, desc.indices, 4, indices.len(), &|i, out| {
            out.copy_from_slice(&indices[i].to_le_bytes())
        })?;
    }
    device.flush()?;
    Ok(desc)
}

/// Where [`load_graph_with_features`] puts the feature region: the first LBA at or after the
/// graph on this boundary, so that rows never straddle a flash page of any size up to it.
const FEATURE_ALIGN_BYTES: u64 = 1 << 20;

/// [`load_graph`] plus the node features: `rows` holds `row_bytes` per node, node after node;
/// they are written after the graph, at a stride of `row_bytes` rounded up to a power of two,
/// from a 1 MiB-aligned LBA, and registered with the graph for in-storage feature gather.
pub fn load_graph_with_features<T: Transport>(
    device: &mut Device<T>,
    graph: &CsrGraph,
    rows: &[u8],
    row_bytes: u32,
    start_lba: u64,
) -> Result<GraphDescriptor, LoadError> {
    let mut desc = write_graph_with_progress(device, graph, start_lba, &mut |_, _| {})?;
    let bs = u64::from(device.info().block_size_bytes);
    let stride = u64::from(row_bytes.next_power_of_two());
    let n = graph.node_count();
    if row_bytes == 0 || rows.len() as u64 != n * u64::from(row_bytes) {
        return Err(LoadError::Driver(DriverError::InvalidArgument(format!(
            "{} feature bytes for {n} rows of {row_bytes}",
            rows.len()
        ))));
    }
    let align = (FEATURE_ALIGN_BYTES / bs).max(1);
    let slba = (desc.indices.slba + desc.indices.block_count).next_multiple_of(align);
    let block_count = (n * stride).div_ceil(bs);
    let end_lba = slba + block_count;
    if end_lba > device.info().block_count {
        return Err(LoadError::DoesNotFit {
            start_lba,
            end_lba,
            namespace_blocks: device.info().block_count,
        });
    }
    let rows_per_write = (CHUNK_BYTES as u64 / stride).max(1);
    let mut v = 0u64;
    while v < n {
        let count = rows_per_write.min(n - v);
        let mut buf = vec![0u8; (count * stride).next_multiple_of(bs) as usize];
        for k in 0..count {
            let src = &rows[((v + k) * u64::from(row_bytes)) as usize..][..row_bytes as usize];
            buf[(k * stride) as usize..][..row_bytes as usize].copy_from_slice(src);
        }
        device.write(slba + v * stride / bs, &buf)?;
        v += count;
    }
    desc.features = Some(sagessd_abi::graph::FeatureRegion {
        range: LbaRange { slba, block_count },
        row_bytes,
    });
    attach(device, &desc)?;
    Ok(desc)
}

/// Attaches `desc` for in-storage sampling. A device without it (it answers Invalid Command
/// Opcode) is left with no graph attached: its host-side samplers read the same layout without
/// one, and an in-storage sampler says the device has none.
fn attach<T: Transport>(device: &mut Device<T>, desc: &GraphDescriptor) -> Result<(), LoadError> {
    match device.attach_graph(desc) {
        Err(e) if e.status() == Some(sagessd_abi::nvme::Status::INVALID_OPCODE) => {
            tracing::info!(
                "the device has no in-storage sampling: the graph is written, not attached"
            );
            Ok(())
        }
        other => Ok(other?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_starts_each_region_on_a_block_boundary() {
        let g = CsrGraph::from_edges(600, &[(0, 1), (1, 0)]).unwrap();
        let d = plan_layout(&g, 10, 4096);
        // 601 × 8 = 4808 bytes → 2 blocks; 2 × 4 bytes → 1 block.
        assert_eq!(
            d.indptr,
            LbaRange {
                slba: 10,
                block_count: 2
            }
        );
        assert_eq!(
            d.indices,
            LbaRange {
                slba: 12,
                block_count: 1
            }
        );
        assert_eq!((d.node_count, d.edge_count, d.id_width_bytes), (600, 2, 4));
        let empty = CsrGraph::new(vec![0, 0], vec![]).unwrap();
        assert_eq!(plan_layout(&empty, 0, 4096).indices.block_count, 0);
    }
    #[test]
    fn loaded_graph_reads_back_byte_for_byte() {
        let g = crate::rmat::generate(&crate::rmat::RmatParams::graph500(10, 8, 9)).unwrap();
        let transport = sagessd_host_driver::LocalTransport::from_config(
            &sagessd_emulator::HwConfig::cosmos_plus(),
        )
        .unwrap();
        let mut dev = Device::open(transport).unwrap();
        let mut calls = Vec::new();
        let d = load_graph_with_progress(&mut dev, &g, 3, &mut |done, total| {
            calls.push((done, total))
        })
        .unwrap();
        assert_eq!(d, plan_layout(&g, 3, 4096));
        assert_eq!(dev.attached_graph(), Some(&d));
        let (done, total) = *calls.last().unwrap();
        assert_eq!(done, total);
        let indptr = dev.read(d.indptr.slba, d.indptr.block_count).unwrap();
        let want: Vec<u8> = g.indptr().iter().flat_map(|v| v.to_le_bytes()).collect();
        assert!(indptr[..want.len()] == want[..]);
        assert!(indptr[want.len()..].iter().all(|b| *b == 0));
        let indices = dev.read(d.indices.slba, d.indices.block_count).unwrap();
        let want: Vec<u8> = g.indices().iter().flat_map(|v| v.to_le_bytes()).collect();
        assert!(indices[..want.len()] == want[..]);
        // The graph is attached: the device samples it.
        assert!(dev.sample(1, &[4], &[0, 1]).is_ok());
    }

    #[test]
    fn a_graph_too_large_for_the_namespace_is_refused() {
        let g = CsrGraph::from_edges(4, &[(0, 1), (1, 0)]).unwrap();
        let transport = sagessd_host_driver::LocalTransport::from_config(
            &sagessd_emulator::HwConfig::cosmos_plus(),
        )
        .unwrap();
        let mut dev = Device::open(transport).unwrap();
        let last = dev.info().block_count - 1;
        assert!(matches!(
            load_graph(&mut dev, &g, last),
            Err(LoadError::DoesNotFit { .. })
        ));
    }
}
