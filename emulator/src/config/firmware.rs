//! `[firmware]`: the firmware's sizing, and the firmware configuration a description boots.

use sagessd_abi::ns_config::{MAX_MINIBATCHES, NsLimits};
use sagessd_abi::sample::MAX_FANOUT;
use sagessd_firmware::{
    ConfigError, FirmwareConfig, MAX_ISP_LANES, MAX_ISP_SLOTS, MAX_LANE_WINDOW_PAGES,
};
use serde::{Deserialize, Serialize};

use super::HwConfig;
use super::rules::{check, in_range, invalid, non_zero, power_of_two};
use crate::error::EmulatorError;

/// `[firmware] max_minibatches` when a description does not give it.
fn default_max_minibatches() -> u16 {
    16
}

/// `[firmware]`: sizing of the firmware's tables and buffers (see `FirmwareConfig`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirmwareSection {
    /// Whether the device does in-storage processing (optional, default `true`). A device
    /// without it (a commodity SSD) answers every vendor-specific I/O opcode (0x80–0xFF, the
    /// ISP exchange among them) with Invalid Opcode; the emulator does so before the firmware
    /// sees the command, charging the core one command's parse (`cycles_per_command`), as the
    /// firmware would for an opcode it does not know. See [`crate::ssd`].
    #[serde(default = "on_by_default")]
    pub isp: bool,
    /// Pages held by the DRAM page buffer.
    pub page_buffer_pages: u32,
    /// Sampling jobs the ISP engine holds at once (submitted and not yet collected).
    pub isp_slots: u8,
    /// Pages the ISP engine keeps pinned ahead of what it consumed, its flash reads in flight
    /// among them, over all its sampling lanes (optional; default four per flash die, enough to
    /// keep every die busy). The device's own figure: an experiment that shrinks
    /// `page_buffer_pages` leaves it as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isp_window_pages: Option<u32>,
    /// Whether the sampling passes read ahead what the next gather will want, so that the
    /// flash reads it while the core runs the rest of the pass (optional, default `false`:
    /// with the measured core costs a job is core-bound and reading ahead cost more than it
    /// saved; docs/model.md).
    #[serde(default)]
    pub isp_read_ahead: bool,
    /// Most target nodes one NS_config may carry.
    pub max_targets: u32,
    /// Largest fanout per layer.
    pub max_fanout: u16,
    /// Most minibatches one hyperbatch NS_config may carry (optional, default 16; 1: plain
    /// NS_configs only). A hyperbatch's subgraphs share the job's result buffers
    /// (`max_subgraph_nodes`, `max_subgraph_edges`, `max_feature_bytes`) and its `max_targets`.
    #[serde(default = "default_max_minibatches")]
    pub max_minibatches: u16,
    /// Most nodes of one sampled subgraph (all layers).
    pub max_subgraph_nodes: u32,
    /// Most edges of one sampled subgraph (all layers).
    pub max_subgraph_edges: u32,
    /// Largest data transfer of one command (NVMe MDTS), in bytes.
    pub max_transfer_bytes: u32,
    /// Share of the physical pages hidden from the namespace for garbage collection.
    pub over_provisioning_percent: u8,
    /// Logical block (LBA) size of the namespace.
    pub block_size_bytes: u32,
    /// Bytes of node features one sampling job may return (optional, default 0: no in-storage
    /// feature gather); each sampling slot holds a DRAM buffer of this size.
    #[serde(default)]
    pub max_feature_bytes: u32,
    /// Pages programmed between two checkpoints of the FTL's tables (optional, default 0:
    /// automatic, 64 checkpoints' worth); smaller means a shorter replay at boot and more flash
    /// spent on checkpoints.
    #[serde(default)]
    pub checkpoint_interval_pages: u32,
}

/// `firmware.isp` when absent: devices do in-storage processing unless they say otherwise.
fn on_by_default() -> bool {
    true
}

/// The firmware's derived configuration and its checks, which read the other sections too
/// (the flash geometry, the cores that set the sampling lanes).
impl HwConfig {
    /// The firmware configuration this description boots: `[firmware]`'s sizes with
    /// [`Self::isp_lanes`] sampling lanes and [`Self::isp_window_pages`].
    pub fn firmware_config(&self) -> FirmwareConfig {
        let f = &self.firmware;
        FirmwareConfig {
            block_size_log2: f.block_size_bytes.trailing_zeros() as u8,
            over_provisioning_percent: f.over_provisioning_percent,
            page_buffer_pages: f.page_buffer_pages,
            isp_slots: f.isp_slots,
            isp_lanes: self.isp_lanes(),
            isp_window_pages: self.isp_window_pages(),
            isp_read_ahead: f.isp_read_ahead,
            limits: NsLimits {
                max_targets: f.max_targets,
                max_fanout: f.max_fanout,
                max_minibatches: f.max_minibatches,
            },
            max_subgraph_nodes: f.max_subgraph_nodes,
            max_subgraph_edges: f.max_subgraph_edges,
            max_transfer_bytes: f.max_transfer_bytes,
            // A device without in-storage sampling has no tunnel to it either.
            tunnel: f.isp,
            max_feature_bytes: f.max_feature_bytes,
            checkpoint_interval_pages: f.checkpoint_interval_pages,
        }
    }

    /// `[firmware] isp_window_pages`, or four pages per flash die (within what the lanes
    /// take: one to [`MAX_LANE_WINDOW_PAGES`] each).
    pub fn isp_window_pages(&self) -> u32 {
        self.firmware.isp_window_pages.unwrap_or_else(|| {
            let dies = self.nand.channels * self.nand.ways * self.nand.dies_per_way;
            let lanes = u32::from(self.isp_lanes());
            dies.saturating_mul(4)
                .clamp(lanes, lanes * MAX_LANE_WINDOW_PAGES)
        })
    }

    /// The DRAM the firmware needs for this configuration, in bytes.
    pub fn firmware_dram_bytes(&self) -> Result<usize, EmulatorError> {
        sagessd_firmware::dram_size_bytes(&self.firmware_config(), &self.nand.geometry())
            .map_err(|e| self.firmware_error(e))
    }

    /// Names the field behind a firmware configuration error, with the firmware's rule.
    pub(crate) fn firmware_error(&self, error: ConfigError) -> EmulatorError {
        let f = &self.firmware;
        let (field, reason) = match error {
            ConfigError::Geometry => (
                "nand.blocks_per_die",
                "the firmware cannot use this flash geometry".to_string(),
            ),
            ConfigError::BlockSize => (
                "firmware.block_size_bytes",
                format!(
                    "must be between 512 and nand.page_size_bytes = {} (got {})",
                    self.nand.page_size_bytes, f.block_size_bytes
                ),
            ),
            ConfigError::OverProvisioning => (
                "firmware.over_provisioning_percent",
                format!("must be below 50 (got {})", f.over_provisioning_percent),
            ),
            ConfigError::PageBufferPages => (
                "firmware.page_buffer_pages",
                format!(
                    "the firmware needs a multiple of its page-buffer associativity (8) \
                     between 16 and 32768 (got {})",
                    f.page_buffer_pages
                ),
            ),
            ConfigError::IspSlots => (
                "firmware.isp_slots",
                format!(
                    "must be between 1 and {MAX_ISP_SLOTS} (got {})",
                    f.isp_slots
                ),
            ),
            ConfigError::IspWindow => {
                let lanes = u32::from(self.isp_lanes());
                (
                    "firmware.isp_window_pages",
                    format!(
                        "must be between {lanes} and {} for {lanes} sampling lanes (got {})",
                        lanes * MAX_LANE_WINDOW_PAGES,
                        self.isp_window_pages()
                    ),
                )
            }
            // Derived from the cores and slots, and clamped to the firmware's range.
            ConfigError::IspLanes => (
                "cores.isp_cores",
                format!(
                    "gives {} sampling lanes; the firmware runs 1 to {MAX_ISP_LANES}",
                    self.isp_lanes()
                ),
            ),
            ConfigError::MaxTargets => (
                "firmware.max_targets",
                format!(
                    "must be between 1 and firmware.max_subgraph_nodes = {} (got {})",
                    f.max_subgraph_nodes, f.max_targets
                ),
            ),
            ConfigError::MaxFanout => (
                "firmware.max_fanout",
                format!("must be between 1 and {MAX_FANOUT} (got {})", f.max_fanout),
            ),
            ConfigError::MaxMinibatches => (
                "firmware.max_minibatches",
                format!(
                    "must be between 1 and {MAX_MINIBATCHES} (got {})",
                    f.max_minibatches
                ),
            ),
            ConfigError::MaxSubgraphNodes => (
                "firmware.max_subgraph_nodes",
                format!("must be between 1 and 2^28 (got {})", f.max_subgraph_nodes),
            ),
            ConfigError::MaxSubgraphEdges => (
                "firmware.max_subgraph_edges",
                format!("must be between 1 and 2^28 (got {})", f.max_subgraph_edges),
            ),
            ConfigError::MaxTransfer => (
                "firmware.max_transfer_bytes",
                format!(
                    "must be a power of two of at least 4096 spanning fewer than 63 flash pages \
                     of {} bytes (got {})",
                    self.nand.page_size_bytes, f.max_transfer_bytes
                ),
            ),
            ConfigError::TooLittleFlash => (
                "nand.blocks_per_die",
                "the flash is too small for a namespace after the firmware's reserves and \
                 over-provisioning"
                    .to_string(),
            ),
            ConfigError::DramTooSmall => (
                "dram.capacity_mib",
                "is smaller than the firmware's DRAM layout for this configuration".to_string(),
            ),
            ConfigError::DramLayoutOverflow => (
                "firmware",
                "the firmware's tables for this configuration overflow the address space"
                    .to_string(),
            ),
        };
        invalid(field, reason)
    }

    pub(super) fn validate_firmware(&self) -> Result<(), EmulatorError> {
        let f = &self.firmware;
        let page = self.nand.page_size_bytes;
        non_zero(f.page_buffer_pages.into(), "firmware.page_buffer_pages")?;
        in_range(
            f.isp_slots.into(),
            1,
            MAX_ISP_SLOTS as u64,
            "firmware.isp_slots",
        )?;
        non_zero(f.max_targets.into(), "firmware.max_targets")?;
        in_range(
            f.max_fanout.into(),
            1,
            MAX_FANOUT.into(),
            "firmware.max_fanout",
        )?;
        in_range(
            f.max_minibatches.into(),
            1,
            MAX_MINIBATCHES.into(),
            "firmware.max_minibatches",
        )?;
        non_zero(f.max_subgraph_nodes.into(), "firmware.max_subgraph_nodes")?;
        non_zero(f.max_subgraph_edges.into(), "firmware.max_subgraph_edges")?;
        in_range(
            f.over_provisioning_percent.into(),
            0,
            49,
            "firmware.over_provisioning_percent",
        )?;
        power_of_two(f.block_size_bytes.into(), "firmware.block_size_bytes")?;
        in_range(
            f.block_size_bytes.into(),
            512,
            page.into(),
            "firmware.block_size_bytes",
        )?;
        // NVMe expresses MDTS as a power of two of the 4 KiB minimum memory page size.
        check(
            f.max_transfer_bytes >= 4096 && f.max_transfer_bytes.is_power_of_two(),
            "firmware.max_transfer_bytes",
            || {
                format!(
                    "must be 4096 × a power of two (NVMe MDTS) (got {})",
                    f.max_transfer_bytes
                )
            },
        )?;
        // The firmware's own rules (page-buffer associativity, per-command page bound, ...).
        self.firmware_config()
            .validate(&self.nand.geometry())
            .map_err(|e| self.firmware_error(e))
    }
}
