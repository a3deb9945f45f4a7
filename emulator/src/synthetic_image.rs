//! A device that holds computed regions — a synthetic graph's CSR, a layout of it — from the
//! moment it powers on: its flash computes their pages ([`crate::nand::synthetic`]) and the
//! firmware maps them by its ordinary recovering boot, as if the host had written them and the
//! power had then failed before a checkpoint. No WRITE crosses the link and no page is stored, so a 100 GB graph costs no
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

/// One computed region of a namespace: `len_bytes` of `content` (from its byte 0) placed at
/// namespace byte `at_bytes`.
#[derive(Clone, Debug)]
pub struct Region {
    /// Where it starts on the namespace.
    pub at_bytes: u64,
    /// Its length.
    pub len_bytes: u64,
    /// Its bytes.
    pub content: Arc<dyn LogicalContent>,
}

/// A namespace's bytes: computed regions, in order and apart, and zeros between and around
/// them (the namespace's unwritten bytes).
#[derive(Debug)]
pub struct RegionContent {
    regions: Vec<Region>,
}

impl RegionContent {
    /// `regions` on one namespace; `None` if two overlap or one ends past 2^64 bytes.
    pub fn new(mut regions: Vec<Region>) -> Option<Self> {
        regions.sort_by_key(|r| r.at_bytes);
        let mut end = 0;
        for r in &regions {
            if r.at_bytes < end {
                return None;
            }
            end = r.at_bytes.checked_add(r.len_bytes)?;
        }
        Some(Self { regions })
    }

    /// Where the last region ends (0 without regions).
    pub fn end_bytes(&self) -> u64 {
        self.regions.last().map_or(0, |r| r.at_bytes + r.len_bytes)
    }

    /// Where the first region starts (0 without regions).
    pub fn start_bytes(&self) -> u64 {
        self.regions.first().map_or(0, |r| r.at_bytes)
    }
}

impl LogicalContent for RegionContent {
    fn fill(&self, offset_bytes: u64, out: &mut [u8]) {
        let end = offset_bytes.saturating_add(out.len() as u64);
        // Each region filled once, zeros between them.
        let mut written = 0;
        for r in &self.regions {
            let (lo, hi) = (
                offset_bytes.max(r.at_bytes),
                end.min(r.at_bytes + r.len_bytes),
            );
            if lo < hi {
                let (a, b) = ((lo - offset_bytes) as usize, (hi - offset_bytes) as usize);
                out[written..a].fill(0);
                r.content.fill(lo - r.at_bytes, &mut out[a..b]);
                written = b;
            }
        }
        out[written..].fill(0);
    }
}

/// A synthetic graph's `indptr` bytes.
#[derive(Debug)]
struct IndptrBytes(Arc<SyntheticGraph>);
impl LogicalContent for IndptrBytes {
    fn fill(&self, offset_bytes: u64, out: &mut [u8]) {
        self.0.fill_indptr(offset_bytes, out);
    }
}

/// A synthetic graph's `indices` bytes.
#[derive(Debug)]
struct IndicesBytes(Arc<SyntheticGraph>);
impl LogicalContent for IndicesBytes {
    fn fill(&self, offset_bytes: u64, out: &mut [u8]) {
        self.0.fill_indices(offset_bytes, out);
    }
}

/// The CSR's two regions as `desc` places them (`None` on an overflowing descriptor).
fn csr_regions(
    graph: &Arc<SyntheticGraph>,
    desc: &GraphDescriptor,
    block_size_bytes: u32,
) -> Option<Vec<Region>> {
    let bs = u64::from(block_size_bytes);
    Some(vec![
        Region {
            at_bytes: desc.indptr.slba.checked_mul(bs)?,
            len_bytes: graph.indptr_bytes(),
            content: Arc::new(IndptrBytes(Arc::clone(graph))),
        },
        Region {
            at_bytes: desc.indices.slba.checked_mul(bs)?,
            len_bytes: graph.indices_bytes(),
            content: Arc::new(IndicesBytes(Arc::clone(graph))),
        },
    ])
}

/// The namespace's bytes when it holds `graph` as `desc` places it on LBAs of
/// `block_size_bytes`: the content the device's flash computes its pages from
/// ([`Ssd::with_synthetic_graph`]), for a host that needs the file's bytes without holding
/// them (the modelled host's page cache); `None` on an overflowing descriptor.
pub fn csr_content(
    graph: &Arc<SyntheticGraph>,
    desc: &GraphDescriptor,
    block_size_bytes: u32,
) -> Option<RegionContent> {
    RegionContent::new(csr_regions(graph, desc, block_size_bytes)?)
}

impl Ssd {
    /// A device of `config` whose flash holds `graph` from LBA `start_lba` on (laid out by
    /// [`GraphDescriptor::csr_layout`]), booted by the firmware's recovery
    /// ([`Ssd::with_synthetic_regions`]); returns the device, the descriptor to `GRAPH_ATTACH`,
    /// and what the boot did (pages read and replayed, its modelled time in the device's clock).
    pub fn with_synthetic_graph(
        config: &HwConfig,
        graph: Arc<SyntheticGraph>,
        start_lba: u64,
    ) -> Result<(Self, GraphDescriptor, BootReport), EmulatorError> {
        let bs = config.firmware.block_size_bytes;
        let desc =
            GraphDescriptor::csr_layout(graph.node_count(), graph.edge_count(), start_lba, bs)
                .ok_or_else(|| too_big("its layout overflows 64-bit LBAs".into()))?;
        let regions = csr_regions(&graph, &desc, bs)
            .ok_or_else(|| too_big("its layout overflows 64-bit bytes".into()))?;
        let (ssd, report) = Self::with_synthetic_regions(config, regions)?;
        Ok((ssd, desc, report))
    }

    /// A device of `config` whose flash holds computed `regions` from the moment it powers on,
    /// booted by the firmware's recovery (see the module documentation); returns the device
    /// and what the boot did. The pages stay computed until the firmware erases their blocks.
    pub fn with_synthetic_regions(
        config: &HwConfig,
        regions: Vec<Region>,
    ) -> Result<(Self, BootReport), EmulatorError> {
        let (nand, dram) = Self::parts(config)?;
        let bs = u64::from(config.firmware.block_size_bytes);
        let content = RegionContent::new(regions)
            .ok_or_else(|| too_big("its regions overlap or overflow".into()))?;
        let (start, end) = (content.start_bytes(), content.end_bytes());
        let page = u64::from(config.nand.page_size_bytes);
        let first_lpn = start / page;
        let lpns = end.div_ceil(page) - first_lpn;
        let geometry = config.nand.geometry();
        let pages = u32::try_from(first_lpn)
            .ok()
            .zip(u32::try_from(lpns).ok())
            .and_then(|(first, count)| {
                SyntheticPages::new(Arc::new(content), geometry, first, count)
            })
            .ok_or_else(|| {
                too_big(format!(
                    "{} bytes from byte {start} need more than half of every die's blocks",
                    end - start
                ))
            })?;
        let nand = nand.with_synthetic(pages);
        let (firmware, report) = Self::recover(config, nand, dram, &|field, reason| {
            too_big(format!(
                "the boot refused it ({}): {reason}",
                field.unwrap_or("nand")
            ))
        })?;
        let end_lba = end.div_ceil(bs);
        if end_lba > firmware.namespace_block_count() {
            return Err(too_big(format!(
                "it needs LBAs up to {end_lba} but the namespace has {}",
                firmware.namespace_block_count()
            )));
        }
        Ok((Self::around(config, firmware), report))
    }
}

/// The error of a synthetic image the device cannot hold.
fn too_big(reason: String) -> EmulatorError {
    EmulatorError::InvalidConfig {
        field: "synthetic graph",
        reason,
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
        let content =
            RegionContent::new(csr_regions(&graph, &desc, ssd.block_size_bytes()).unwrap())
                .unwrap();
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
