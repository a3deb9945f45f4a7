//! AGNES's block layout of a synthetic graph, computed instead of written: the bytes
//! [`AgnesLayout`](super::AgnesLayout) would write for the graph, as a pure function of
//! the graph and the block size, so that the emulated flash can serve a papers100M-sized layout
//! (about 7 GiB) that no disk holds and no pass writes.
//!
//! The layout depends only on the degrees (objects are packed in id order by
//! [`object_start`]), so one pass over them tables each [`CHUNK_NODES`]-th node's object
//! offset (8 bytes per 64 nodes: 14 MB at papers100M's size); an offset is a table entry plus
//! a walk of at most 63 degrees, and a block's bytes are the `indices` bytes of the objects
//! that overlap it, computed by [`SyntheticGraph::fill_indices`] (one call per run of objects
//! between paddings).

use std::sync::Arc;

use sagessd_emulator::nand::synthetic::LogicalContent;
use sagessd_emulator::synthetic_graph::{CHUNK_NODES, SyntheticGraph};

use super::format::{block_bytes_valid, object_start};

/// A synthetic graph's AGNES layout (see the module documentation).
#[derive(Debug)]
pub struct SyntheticLayout {
    graph: Arc<SyntheticGraph>,
    block_bytes: u64,
    /// The object offset of every [`CHUNK_NODES`]-th node.
    chunk_offset: Vec<u64>,
    /// Bytes of objects and padding up to the end of the last object.
    stream_bytes: u64,
    split_nodes: u64,
}

impl SyntheticLayout {
    /// The layout of `graph` in blocks of `block_bytes` (a multiple of 4 KiB up to 1 GiB);
    /// `None` for another block size.
    pub fn new(graph: Arc<SyntheticGraph>, block_bytes: u64) -> Option<Self> {
        if !block_bytes_valid(block_bytes) {
            return None;
        }
        let n = graph.node_count();
        let mut chunk_offset = Vec::with_capacity(n.div_ceil(CHUNK_NODES) as usize);
        let (mut at, mut split_nodes) = (0u64, 0u64);
        for v in 0..n {
            let len = 4 * graph.degree(v);
            at = object_start(at, len, block_bytes);
            if v % CHUNK_NODES == 0 {
                chunk_offset.push(at);
            }
            split_nodes += u64::from(len > block_bytes);
            at += len;
        }
        Some(Self {
            graph,
            block_bytes,
            chunk_offset,
            stream_bytes: at,
            split_nodes,
        })
    }

    /// Bytes per block.
    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// Blocks (at least one, as a written layout has).
    pub fn block_count(&self) -> u64 {
        self.stream_bytes.div_ceil(self.block_bytes).max(1)
    }

    /// Nodes whose object spans more than one block.
    pub fn split_nodes(&self) -> u64 {
        self.split_nodes
    }

    /// The graph laid out.
    pub fn graph(&self) -> &Arc<SyntheticGraph> {
        &self.graph
    }

    /// Byte offset of node `v`'s object in the block stream (`v < n`).
    pub fn offset(&self, v: u64) -> u64 {
        let chunk = v / CHUNK_NODES;
        let mut at = self.chunk_offset[chunk as usize];
        for u in chunk * CHUNK_NODES..v {
            at = object_start(
                at + 4 * self.graph.degree(u),
                4 * self.graph.degree(u + 1),
                self.block_bytes,
            );
        }
        at
    }
}

impl LogicalContent for SyntheticLayout {
    /// The block stream's bytes from `offset_bytes` (zeros between objects and past the last).
    fn fill(&self, offset_bytes: u64, out: &mut [u8]) {
        out.fill(0);
        let end = offset_bytes.saturating_add(out.len() as u64);
        let n = self.graph.node_count();
        if n == 0 || offset_bytes >= self.stream_bytes {
            return;
        }
        // Objects are in id order, so none before the last chunk starting at or before the
        // offset reaches it.
        let chunk = self
            .chunk_offset
            .partition_point(|&o| o <= offset_bytes)
            .saturating_sub(1);
        let mut v = chunk as u64 * CHUNK_NODES;
        let mut at = self.chunk_offset[chunk];
        let mut position = self.graph.indptr(v);
        // Objects that follow one another without padding are one run of `indices`: each run
        // is filled by one call. `run`: namespace bytes lo..hi and the indices byte at lo.
        let mut run: Option<(u64, u64, u64)> = None;
        let mut flush = |run: Option<(u64, u64, u64)>| {
            if let Some((lo, hi, from)) = run {
                let dst = &mut out[(lo - offset_bytes) as usize..(hi - offset_bytes) as usize];
                self.graph.fill_indices(from, dst);
            }
        };
        while v < n && at < end {
            let degree = self.graph.degree(v);
            let len = 4 * degree;
            let (lo, hi) = (at.max(offset_bytes), (at + len).min(end));
            if lo < hi {
                run = match run {
                    Some((first, last, from)) if last == lo => Some((first, hi, from)),
                    other => {
                        flush(other);
                        Some((lo, hi, 4 * position + (lo - at)))
                    }
                };
            }
            position += degree;
            v += 1;
            if v < n {
                at = object_start(at + len, 4 * self.graph.degree(v), self.block_bytes);
            }
        }
        flush(run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::Dataset;
    use crate::ooc::agnes::{AgnesLayout, AgnesSampler};
    use sagessd_emulator::synthetic_graph::SyntheticSpec;

    /// A graph small enough to write, whose hubs (cnr-2000's degrees reach 18,236: 71 KiB)
    /// span 4 KiB and 64 KiB blocks.
    fn graph() -> Arc<SyntheticGraph> {
        Arc::new(SyntheticGraph::new(SyntheticSpec::cnr_2000_like(30_000, 7)).unwrap())
    }

    /// `graph` written as a dataset folder of its own (removed by the caller).
    fn written(graph: &SyntheticGraph, test: &str) -> (Dataset, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "sagessd-agnes-synthetic-{test}-{}",
            std::process::id()
        ));
        let dataset =
            crate::synthetic::write_dataset(graph, &dir, "t", "test", &mut |_, _| {}).unwrap();
        (dataset, dir)
    }

    #[test]
    fn equals_the_layout_written_from_the_same_graph() {
        let g = graph();
        let (dataset, dir) = written(&g, "equal");
        for block_bytes in [4096u64, 64 << 10] {
            let (layout, _) = AgnesLayout::for_dataset(&dataset, block_bytes as usize).unwrap();
            let computed = SyntheticLayout::new(g.clone(), block_bytes).unwrap();
            assert_eq!(computed.block_count(), layout.manifest.block_count);
            assert_eq!(computed.split_nodes(), layout.manifest.split_nodes);
            if block_bytes == 4096 {
                assert!(computed.split_nodes() > 0, "a hub spans blocks");
            }
            for v in 0..g.node_count() {
                assert_eq!(computed.offset(v), 4 * layout.range(v).start, "node {v}");
            }
            let file = std::fs::read(layout.dir().unwrap().join("blocks.bin")).unwrap();
            // Whole blocks, and windows that start and end inside objects and padding.
            let mut bytes = vec![0u8; file.len()];
            computed.fill(0, &mut bytes);
            assert!(bytes == file, "{block_bytes}-byte blocks differ");
            for (at, len) in [(2, 4093), (4097, 9000), (file.len() as u64 - 7, 7)] {
                let mut window = vec![0xEEu8; len];
                computed.fill(at, &mut window);
                assert_eq!(window, file[at as usize..at as usize + len]);
            }
            let mut past = vec![0xEEu8; 64];
            computed.fill(file.len() as u64, &mut past);
            assert!(past.iter().all(|&b| b == 0), "past the end reads 0");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn another_graphs_layout_is_told_apart() {
        // The comparison above can fail: another seed's graph has other bytes and offsets.
        let (dataset, dir) = written(&graph(), "other");
        let (layout, _) = AgnesLayout::for_dataset(&dataset, 4096).unwrap();
        let other = Arc::new(SyntheticGraph::new(SyntheticSpec::cnr_2000_like(30_000, 8)).unwrap());
        let computed = SyntheticLayout::new(other, 4096).unwrap();
        let file = std::fs::read(layout.dir().unwrap().join("blocks.bin")).unwrap();
        let mut bytes = vec![0u8; file.len()];
        computed.fill(0, &mut bytes);
        assert!(bytes != file);
        assert!((0..30_000).any(|v| computed.offset(v) != 4 * layout.range(v).start));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A device that powers on holding the computed layout (nothing written) serves AGNES's
    /// samplers, per minibatch and per hyperbatch, the reference's subgraphs; so does the
    /// layout written to a device by NVMe Writes from the computed blocks.
    #[test]
    fn agnes_samples_the_reference_from_a_device_that_computes_the_layout() {
        use crate::sampler::{ReferenceSampler, Sampler};
        use sagessd_emulator::synthetic_image::Region;
        use sagessd_emulator::{HwConfig, Ssd};
        use sagessd_host_driver::{Device, LocalTransport};

        let g = graph();
        let block_bytes = 64 << 10;
        let computed = Arc::new(SyntheticLayout::new(g.clone(), block_bytes).unwrap());
        let layout = AgnesLayout::computed(computed.clone());
        assert_eq!(layout.manifest.block_count, computed.block_count());
        let slba = 64;
        let config = HwConfig::cosmos_plus();
        let lba_bytes = u64::from(config.firmware.block_size_bytes);
        let region = Region {
            at_bytes: slba * lba_bytes,
            len_bytes: computed.block_count() * block_bytes,
            content: computed,
        };
        let (ssd, _) = Ssd::with_synthetic_regions(&config, vec![region]).unwrap();
        let mut booted = Device::open(LocalTransport::new(ssd)).unwrap();
        let mut written = Device::open(LocalTransport::from_config(&config).unwrap()).unwrap();
        layout.write_to_device(&mut written, slba).unwrap();

        let fanouts = [10u16, 5];
        let requests: Vec<crate::minibatch::Request> = (0..4u64)
            .map(|m| {
                crate::minibatch::Request::new(
                    m + 1,
                    (0..64).map(|i| (i * 131 + m * 7_919) % 30_000).collect(),
                )
            })
            .collect();
        let mut reference = ReferenceSampler::synthetic(&g);
        let expected: Vec<_> = requests
            .iter()
            .map(|r| reference.sample(r.seed, &fanouts, &r.targets).unwrap())
            .collect();
        let buffer = 8 * block_bytes as usize;
        for device in [&mut booted, &mut written] {
            let mut hyper = AgnesSampler::on_device(&layout, buffer, device, slba).unwrap();
            assert_eq!(
                hyper.sample_hyperbatch(&fanouts, &requests).unwrap(),
                expected
            );
            assert!(hyper.io_stats().reads > 0);
            let mut per_batch = AgnesSampler::on_device(&layout, buffer, device, slba).unwrap();
            for (
                crate::minibatch::Request {
                    seed: s,
                    targets: t,
                },
                e,
            ) in requests.iter().zip(&expected)
            {
                assert_eq!(&per_batch.sample(*s, &fanouts, t).unwrap(), e);
            }
        }
        assert!(
            AgnesSampler::new(&layout, buffer, false).is_err(),
            "a computed layout has no file to read"
        );
    }

    #[test]
    fn refuses_a_block_size_the_layouts_refuse() {
        for bad in [0, 1000, 4097, 2 << 30] {
            assert!(SyntheticLayout::new(graph(), bad).is_none(), "{bad}");
        }
    }
}
