//! `[pcie]` and `[p2p]`: the host link, and the internal link of an FPGA-based CSD.

use serde::{Deserialize, Serialize};

use super::rules::{MAX_LATENCY_NS, at_most, check, in_range, power_of_two};
use crate::error::EmulatorError;

/// `[pcie]`: the host link.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieConfig {
    /// PCIe generation, 1 to 5 (2.5, 5, 8, 16, 32 GT/s per lane).
    pub generation: u8,
    /// Link width in lanes (1, 2, 4, 8, 12, 16 or 32).
    pub lanes: u8,
    /// Max Payload Size: the most data bytes one TLP carries (128 to 4096, a power of two).
    pub max_payload_bytes: u32,
    /// Bytes each TLP adds on the wire (framing, sequence number, header, LCRC).
    pub tlp_overhead_bytes: u32,
    /// Latency before the data of a device read of host memory (an SQE fetch, write data)
    /// starts to flow: the read request's round trip through the root complex.
    pub dma_read_setup_ns: u64,
    /// Latency of a device→host posted write (read data, a CQE) before its data flows:
    /// descriptor set-up and one crossing of link and root complex, no completion to wait for.
    pub posted_write_setup_ns: u64,
}

/// `[p2p]`: the PCIe link inside an FPGA-based CSD between the SSD controller and the FPGA
/// (e.g. the Samsung SmartSSD's on-card switch). Each page copy is one posted-write DMA of the
/// SSD controller into the FPGA's DRAM, modelled like one direction of [`PcieConfig`]'s link.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct P2pConfig {
    /// PCIe generation of the internal link, 1 to 5.
    pub generation: u8,
    /// Width of the internal link in lanes (1, 2, 4, 8, 12, 16 or 32).
    pub lanes: u8,
    /// Max Payload Size of the internal link (128 to 4096, a power of two).
    pub max_payload_bytes: u32,
    /// Bytes each TLP adds on the wire.
    pub tlp_overhead_bytes: u32,
    /// Fixed latency of one page copy before its data flows (DMA descriptor set-up and the
    /// crossing of the switch); overlaps other copies, as in [`crate::pcie`].
    pub setup_ns: u64,
}

impl P2pConfig {
    /// The internal link as a [`PcieConfig`] (both set-ups are the page copy's `setup_ns`).
    pub fn to_pcie_config(&self) -> PcieConfig {
        PcieConfig {
            generation: self.generation,
            lanes: self.lanes,
            max_payload_bytes: self.max_payload_bytes,
            tlp_overhead_bytes: self.tlp_overhead_bytes,
            dma_read_setup_ns: self.setup_ns,
            posted_write_setup_ns: self.setup_ns,
        }
    }
}

impl PcieConfig {
    /// Checks every field of the section.
    pub(super) fn validate(&self) -> Result<(), EmulatorError> {
        let p = self;
        validate_link(
            (
                p.generation,
                p.lanes,
                p.max_payload_bytes,
                p.tlp_overhead_bytes,
            ),
            [
                "pcie.generation",
                "pcie.lanes",
                "pcie.max_payload_bytes",
                "pcie.tlp_overhead_bytes",
            ],
        )?;
        at_most(
            p.dma_read_setup_ns,
            MAX_LATENCY_NS,
            "pcie.dma_read_setup_ns",
        )?;
        at_most(
            p.posted_write_setup_ns,
            MAX_LATENCY_NS,
            "pcie.posted_write_setup_ns",
        )
    }
}

impl P2pConfig {
    /// Checks the link's fields (that a `[p2p]` link needs in-storage processing is
    /// [`super::HwConfig::validate`]'s check, across sections).
    pub(super) fn validate(&self) -> Result<(), EmulatorError> {
        let p = self;
        validate_link(
            (
                p.generation,
                p.lanes,
                p.max_payload_bytes,
                p.tlp_overhead_bytes,
            ),
            [
                "p2p.generation",
                "p2p.lanes",
                "p2p.max_payload_bytes",
                "p2p.tlp_overhead_bytes",
            ],
        )?;
        at_most(p.setup_ns, MAX_LATENCY_NS, "p2p.setup_ns")
    }
}

/// The rules every PCIe link obeys, whichever section describes it: generation 1 to 5, a
/// link width PCIe defines, a power-of-two Max Payload Size of 128 to 4096 bytes and 1 to 128
/// bytes of TLP overhead; `fields` names them in that order.
fn validate_link(
    (generation, lanes, max_payload_bytes, tlp_overhead_bytes): (u8, u8, u32, u32),
    [generation_field, lanes_field, payload_field, overhead_field]: [&'static str; 4],
) -> Result<(), EmulatorError> {
    in_range(generation.into(), 1, 5, generation_field)?;
    check(
        matches!(lanes, 1 | 2 | 4 | 8 | 12 | 16 | 32),
        lanes_field,
        || format!("must be 1, 2, 4, 8, 12, 16 or 32 (got {lanes})"),
    )?;
    power_of_two(max_payload_bytes.into(), payload_field)?;
    in_range(max_payload_bytes.into(), 128, 4096, payload_field)?;
    in_range(tlp_overhead_bytes.into(), 1, 128, overhead_field)
}
