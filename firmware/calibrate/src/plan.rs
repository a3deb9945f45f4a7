//! The calibration plan: the device a calibration run boots, as the host hands it to the image
//! (QEMU's generic loader puts these bytes at [`crate::PLAN_ADDRESS`]).
//!
//! Little-endian, 64 bytes, versioned: the image refuses a plan it does not know rather than
//! measure another device than the one asked for.

use core::mem::{offset_of, size_of};

use sagessd_abi::ns_config::NsLimits;
use sagessd_firmware::FirmwareConfig;
use sagessd_firmware::hal::Geometry;
use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Magic number of a plan: the bytes `SGCP`.
pub const PLAN_MAGIC: [u8; 4] = *b"SGCP";
/// The plan version this crate writes and reads (2: the arena's offset).
pub const PLAN_VERSION: u16 = 2;

/// The flash geometry and firmware configuration of the device to calibrate.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
pub struct PlanWire {
    /// [`PLAN_MAGIC`].
    pub magic: [u8; 4],
    /// [`PLAN_VERSION`].
    pub version: U16,
    /// `FirmwareConfig::block_size_log2`.
    pub block_size_log2: u8,
    /// `FirmwareConfig::over_provisioning_percent`.
    pub over_provisioning_percent: u8,
    /// `Geometry::channels`.
    pub channels: U32,
    /// `Geometry::ways`.
    pub ways: U32,
    /// `Geometry::dies_per_way`.
    pub dies_per_way: U32,
    /// `Geometry::blocks_per_die`.
    pub blocks_per_die: U32,
    /// `Geometry::pages_per_block`.
    pub pages_per_block: U32,
    /// `Geometry::page_size_bytes`.
    pub page_size_bytes: U32,
    /// `FirmwareConfig::page_buffer_pages`.
    pub page_buffer_pages: U32,
    /// `FirmwareConfig::limits.max_targets`.
    pub max_targets: U32,
    /// `FirmwareConfig::limits.max_fanout`.
    pub max_fanout: U16,
    /// `FirmwareConfig::isp_slots`.
    pub isp_slots: u8,
    /// Reserved, 0.
    pub reserved: u8,
    /// `FirmwareConfig::max_subgraph_nodes`.
    pub max_subgraph_nodes: U32,
    /// `FirmwareConfig::max_subgraph_edges`.
    pub max_subgraph_edges: U32,
    /// `FirmwareConfig::max_transfer_bytes`.
    pub max_transfer_bytes: U32,
    /// `FirmwareConfig::checkpoint_interval_pages`.
    pub checkpoint_interval_pages: U32,
    /// [`Plan::arena_offset_bytes`].
    pub arena_offset_bytes: U32,
}

const _: () = {
    assert!(size_of::<PlanWire>() == 64);
    assert!(offset_of!(PlanWire, channels) == 8);
    assert!(offset_of!(PlanWire, page_buffer_pages) == 32);
    assert!(offset_of!(PlanWire, max_fanout) == 40);
    assert!(offset_of!(PlanWire, isp_slots) == 42);
    assert!(offset_of!(PlanWire, max_subgraph_nodes) == 44);
    assert!(offset_of!(PlanWire, checkpoint_interval_pages) == 56);
};

/// Why a plan was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// Fewer bytes than a plan.
    Short,
    /// Not a plan (magic).
    Magic,
    /// A plan version this image does not know.
    Version(u16),
}

/// A decoded plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The flash array.
    pub geometry: Geometry,
    /// The firmware's sizes. Features and the tunnel are off: the workloads use neither.
    pub config: FirmwareConfig,
    /// Where the arena starts past the image's 1 MiB boundary (a multiple of the arena's
    /// region alignment): a calibration measures several placements, so that where the
    /// tables fall in the caches' sets is averaged out rather than measured once.
    pub arena_offset_bytes: u32,
}

impl Plan {
    /// The wire form.
    pub fn encode(&self) -> PlanWire {
        let (g, c) = (&self.geometry, &self.config);
        PlanWire {
            magic: PLAN_MAGIC,
            version: PLAN_VERSION.into(),
            block_size_log2: c.block_size_log2,
            over_provisioning_percent: c.over_provisioning_percent,
            channels: g.channels.into(),
            ways: g.ways.into(),
            dies_per_way: g.dies_per_way.into(),
            blocks_per_die: g.blocks_per_die.into(),
            pages_per_block: g.pages_per_block.into(),
            page_size_bytes: g.page_size_bytes.into(),
            page_buffer_pages: c.page_buffer_pages.into(),
            max_targets: c.limits.max_targets.into(),
            max_fanout: c.limits.max_fanout.into(),
            isp_slots: c.isp_slots,
            reserved: 0,
            max_subgraph_nodes: c.max_subgraph_nodes.into(),
            max_subgraph_edges: c.max_subgraph_edges.into(),
            max_transfer_bytes: c.max_transfer_bytes.into(),
            checkpoint_interval_pages: c.checkpoint_interval_pages.into(),
            arena_offset_bytes: self.arena_offset_bytes.into(),
        }
    }

    /// Decodes a plan from the front of `bytes`; the values are checked when the firmware
    /// boots on them.
    pub fn decode(bytes: &[u8]) -> Result<Self, PlanError> {
        let (w, _) = PlanWire::read_from_prefix(bytes).map_err(|_| PlanError::Short)?;
        if w.magic != PLAN_MAGIC {
            return Err(PlanError::Magic);
        }
        if w.version.get() != PLAN_VERSION {
            return Err(PlanError::Version(w.version.get()));
        }
        Ok(Self {
            geometry: Geometry {
                channels: w.channels.get(),
                ways: w.ways.get(),
                dies_per_way: w.dies_per_way.get(),
                blocks_per_die: w.blocks_per_die.get(),
                pages_per_block: w.pages_per_block.get(),
                page_size_bytes: w.page_size_bytes.get(),
            },
            config: FirmwareConfig {
                block_size_log2: w.block_size_log2,
                over_provisioning_percent: w.over_provisioning_percent,
                page_buffer_pages: w.page_buffer_pages.get(),
                isp_slots: w.isp_slots,
                // The costs per unit are measured on one lane.
                isp_lanes: 1,
                isp_window_pages: FirmwareConfig::quarter_buffer_window(w.page_buffer_pages.get()),
                isp_read_ahead: false,
                limits: NsLimits {
                    max_targets: w.max_targets.get(),
                    max_fanout: w.max_fanout.get(),
                    max_minibatches: 1,
                },
                max_subgraph_nodes: w.max_subgraph_nodes.get(),
                max_subgraph_edges: w.max_subgraph_edges.get(),
                max_transfer_bytes: w.max_transfer_bytes.get(),
                tunnel: false,
                max_feature_bytes: 0,
                checkpoint_interval_pages: w.checkpoint_interval_pages.get(),
            },
            arena_offset_bytes: w.arena_offset_bytes.get(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_round_trips_and_bad_ones_are_refused() {
        let mut plan = Plan {
            geometry: Geometry {
                channels: 8,
                ways: 8,
                dies_per_way: 1,
                blocks_per_die: 512,
                pages_per_block: 256,
                page_size_bytes: 16384,
            },
            config: FirmwareConfig {
                tunnel: false,
                ..FirmwareConfig::default()
            },
            arena_offset_bytes: 16448,
        };
        // The plan carries no hyperbatch size: the image samples plain NS_configs.
        plan.config.limits.max_minibatches = 1;
        let wire = plan.encode();
        assert_eq!(Plan::decode(wire.as_bytes()), Ok(plan));
        assert_eq!(Plan::decode(&wire.as_bytes()[..63]), Err(PlanError::Short));
        let mut bad = wire;
        bad.magic = *b"NSCF";
        assert_eq!(Plan::decode(bad.as_bytes()), Err(PlanError::Magic));
        let mut bad = wire;
        bad.version = 9.into();
        assert_eq!(Plan::decode(bad.as_bytes()), Err(PlanError::Version(9)));
    }
}
