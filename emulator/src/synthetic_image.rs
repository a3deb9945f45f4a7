//! A device that holds a synthetic graph from the moment it powers on: its flash computes the
//! graph's pages ([`crate::nand::synthetic`]) and the firmware maps them by its ordinary
//! recovering boot, as if the host had written the graph and the power had then failed before
//! a checkpoint. No WRITE crosses the link and no page is stored, so a 100 GB graph costs no
//! disk and no time to load; what the device then does with it (reads, sampling, garbage
//! collection) is the firmware's own work.

use std::sync::Arc;

use sagessd_abi::graph::GraphDescriptor;
use sagessd_firmware::BootReport;

use crate::config::HwConfig;
use crate::error::EmulatorError;
use crate::nand::synthetic::{LogicalContent, SyntheticPages};
use crate::ssd::Ssd;
use crate::synthetic_graph::SyntheticGraph;

/// A synthetic graph's CSR placed on a namespace as [`GraphDescriptor::csr_layout`] lays it out:
/// the namespace's bytes, zero outside the graph's regions and in their tails.
#[derive(Debug)]
pub struct GraphContent {
    graph: Arc<SyntheticGraph>,
    indptr_at: u64,
    indices_at: u64,
}

impl GraphContent {
    /// `graph` placed as `desc` (a layout of it) says, on blocks of `block_size_bytes`.
    pub fn new(graph: Arc<SyntheticGraph>, desc: &GraphDescriptor, block_size_bytes: u32) -> Self {
        let bs = u64::from(block_size_bytes);
        Self {
            graph,
            indptr_at: desc.indptr.slba * bs,
            indices_at: desc.indices.slba * bs,
        }
    }
}

impl LogicalContent for GraphContent {
    fn fill(&self, offset_bytes: u64, out: &mut [u8]) {
        let end = offset_bytes + out.len() as u64;
        type Fill<'a> = &'a dyn Fn(u64, &mut [u8]);
        // In namespace order (the layout puts indptr first): zeros between them, each region
        // filled once.
        let regions: [(u64, u64, Fill); 2] = [
            (self.indptr_at, self.graph.indptr_bytes(), &|o, b| {
                self.graph.fill_indptr(o, b)
            }),
            (self.indices_at, self.graph.indices_bytes(), &|o, b| {
                self.graph.fill_indices(o, b)
            }),
        ];
        debug_assert!(self.indptr_at + self.graph.indptr_bytes() <= self.indices_at);
        let mut written = 0;
        for (at, len, fill) in regions {
            let (lo, hi) = (offset_bytes.max(at), end.min(at + len));
            if lo < hi {
                let (a, b) = ((lo - offset_bytes) as usize, (hi - offset_bytes) as usize);
                out[written..a].fill(0);
                fill(lo - at, &mut out[a..b]);
                written = b;
            }
        }
        out[written..].fill(0);
    }
}

impl Ssd {
    /// A device of `config` whose flash holds `graph` from LBA `start_lba` on (laid out by
    /// [`GraphDescriptor::csr_layout`]), booted by the firmware's recovery; returns the device,
    /// the descriptor to `GRAPH_ATTACH`, and what the boot did (pages read and replayed, its
    /// modelled time in the device's clock). The pages stay computed until the firmware erases
    /// their blocks.
    pub fn with_synthetic_graph(
        config: &HwConfig,
        graph: Arc<SyntheticGraph>,
        start_lba: u64,
    ) -> Result<(Self, GraphDescriptor, BootReport), EmulatorError> {
        let (nand, dram) = Self::parts(config)?;
        let bs = config.firmware.block_size_bytes;
        let too_big = |reason: String| EmulatorError::InvalidConfig {
            field: "synthetic graph",
            reason,
        };
        let desc =
            GraphDescriptor::csr_layout(graph.node_count(), graph.edge_count(), start_lba, bs)
                .ok_or_else(|| too_big("its layout overflows 64-bit LBAs".into()))?;
        let end_bytes = (desc.indices.slba + desc.indices.block_count) * u64::from(bs);
        let page = u64::from(config.nand.page_size_bytes);
        let first_lpn = start_lba * u64::from(bs) / page;
        let lpns = end_bytes.div_ceil(page) - first_lpn;
        let geometry = config.nand.geometry();
        let content = Arc::new(GraphContent::new(graph, &desc, bs));
        let pages = u32::try_from(first_lpn)
            .ok()
            .zip(u32::try_from(lpns).ok())
            .and_then(|(first, count)| SyntheticPages::new(content, geometry, first, count))
            .ok_or_else(|| {
                too_big(format!(
                    "{} bytes from LBA {start_lba} need more than half of every die's blocks",
                    end_bytes - start_lba * u64::from(bs)
                ))
            })?;
        let nand = nand.with_synthetic(pages);
        let (firmware, report) = Self::recover(config, nand, dram, &|field, reason| {
            too_big(format!(
                "the boot refused it ({}): {reason}",
                field.unwrap_or("nand")
            ))
        })?;
        if desc.indices.slba + desc.indices.block_count > firmware.namespace_block_count() {
            return Err(too_big(format!(
                "it needs LBAs up to {} but the namespace has {}",
                desc.indices.slba + desc.indices.block_count,
                firmware.namespace_block_count()
            )));
        }
        Ok((Self::around(config, firmware), desc, report))
    }
}

#[cfg(test)]
mod tests {
    use sagessd_abi::nvme::{Status, SubmissionEntry};

    use super::*;
    use crate::ssd::tests::small_config;
    use crate::synthetic_graph::SyntheticSpec;

    /// Every LBA of the graph reads back as the content says, through NVMe Reads of odd sizes,
    /// and a write over part of it reads back as written (the computed page is replaced).
    #[test]
    fn the_namespace_reads_as_the_graph() {
        let config = small_config();
        let graph = Arc::new(SyntheticGraph::new(SyntheticSpec::cnr_2000_like(20_000, 3)).unwrap());
        let (mut ssd, desc, report) = Ssd::with_synthetic_graph(&config, graph.clone(), 8).unwrap();
        let bs = u64::from(ssd.block_size_bytes());
        let end = desc.indices.slba + desc.indices.block_count;
        assert!(report.pages_replayed > 0 && report.checkpoint_id.is_none());
        assert_eq!(
            report.pages_replayed,
            (end * bs).div_ceil(16384) - 8 * bs / 16384
        );
        let content = GraphContent::new(graph.clone(), &desc, ssd.block_size_bytes());
        let mut lba = 0u64;
        let mut cid = 0u16;
        for n in [3u64, 1, 7, 16, 2].iter().cycle() {
            if lba >= end + 4 {
                break;
            }
            cid = cid.wrapping_add(1);
            let sqe = SubmissionEntry::read_write(false, cid, 1, lba, *n as u32);
            let done = ssd.execute(1, sqe, vec![0; (n * bs) as usize]).unwrap();
            assert_eq!(done.cqe.status(), Status::SUCCESS, "read at {lba}");
            let mut expected = vec![0u8; (n * bs) as usize];
            if lba >= 8 {
                content.fill(lba * bs, &mut expected);
            } else {
                // Below the graph: never written, reads zeros (the namespace's unwritten LBAs).
                let skip = ((8 - lba).min(*n) * bs) as usize;
                content.fill(8 * bs, &mut expected[skip..]);
            }
            assert_eq!(done.data, expected, "LBAs {lba}..{}", lba + n);
            lba += n;
        }
        // indptr's last entry is the edge count; indices' first entry is node 0's first
        // neighbour.
        let last = desc.indptr.slba * bs + graph.node_count() * 8;
        let mut b = [0u8; 8];
        content.fill(last, &mut b);
        assert_eq!(u64::from_le_bytes(b), graph.edge_count());
        let w = SubmissionEntry::read_write(true, 999, 1, desc.indices.slba, 1);
        let data = vec![0xA5u8; bs as usize];
        assert_eq!(
            ssd.execute(1, w, data.clone()).unwrap().cqe.status(),
            Status::SUCCESS
        );
        let r = SubmissionEntry::read_write(false, 1000, 1, desc.indices.slba, 1);
        assert_eq!(ssd.execute(1, r, vec![0; bs as usize]).unwrap().data, data);
    }

    #[test]
    fn a_graph_too_big_for_the_flash_is_refused() {
        let config = small_config();
        let graph =
            Arc::new(SyntheticGraph::new(SyntheticSpec::cnr_2000_like(2_000_000, 1)).unwrap());
        let err = Ssd::with_synthetic_graph(&config, graph, 0).unwrap_err();
        assert!(err.to_string().contains("half of every die"), "{err}");
    }
}
