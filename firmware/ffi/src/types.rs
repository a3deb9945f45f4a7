//! The `#[repr(C)]` mirrors of the structs in `sagessd_fw.h`, and every constant the header
//! defines. Sizes and offsets are asserted at compile time; the header asserts the same numbers
//! with `_Static_assert`, and the unit tests compile the header and compare the two.

use core::ffi::c_void;
use core::mem::{offset_of, size_of};

use sagessd_abi::ns_config::NsLimits;
use sagessd_firmware::hal::Geometry;
use sagessd_firmware::{ConfigError, FirmwareConfig};

/// `SAGESSD_FW_ABI_VERSION`: bumped on every incompatible change of the header.
pub const ABI_VERSION: u32 = 5;

/// `SAGESSD_OK`: success.
pub const OK: i32 = 0;
/// `SAGESSD_COMPLETED`: `sagessd_fw_submit` completed the command at once; `*cqe_out` is filled.
pub const COMPLETED: i32 = 0;
/// `SAGESSD_PENDING`: the command was accepted; its completion comes from
/// `sagessd_fw_next_completion`.
pub const PENDING: i32 = 1;
/// `SAGESSD_ERR_BUSY`: every command slot is in use (or its completion not yet taken).
pub const ERR_BUSY: i32 = -1;
/// `SAGESSD_ERR_ARGUMENT`: a null pointer, a bad length, a misaligned or overlapping buffer, a
/// non-zero reserved field.
pub const ERR_ARGUMENT: i32 = -2;
/// `SAGESSD_ERR_STATE`: not initialised, already initialised, or called from inside another
/// library call (a flash `submit` callback).
pub const ERR_STATE: i32 = -3;
/// `SAGESSD_ERR_QUEUE_FULL`: `sagessd_fw_flash_complete` found more completions than operations
/// started.
pub const ERR_QUEUE_FULL: i32 = -4;
/// `SAGESSD_ERR_CONFIG`: base of the configuration errors; `-16 - n` is [`ConfigError`] `n` of
/// [`CONFIG_ERRORS`].
pub const ERR_CONFIG: i32 = -16;

/// `SAGESSD_FLASH_READ`: read page `address` into `dram_page`.
pub const FLASH_READ: u32 = 0;
/// `SAGESSD_FLASH_PROGRAM`: program page `address` from `dram_page`.
pub const FLASH_PROGRAM: u32 = 1;
/// `SAGESSD_FLASH_ERASE`: erase block `address`.
pub const FLASH_ERASE: u32 = 2;

/// `SAGESSD_FLASH_OK`: a flash operation succeeded.
pub const FLASH_OK: u32 = 0;
/// `SAGESSD_FLASH_MEDIA`: the media failed a flash operation.
pub const FLASH_MEDIA: u32 = 1;

/// `SAGESSD_FLASH_SUBMIT_STARTED`: the `submit` callback started the operation.
pub const FLASH_SUBMIT_STARTED: i32 = 0;
/// `SAGESSD_FLASH_SUBMIT_BUSY`: the `submit` callback cannot take it now; it is offered again.
pub const FLASH_SUBMIT_BUSY: i32 = 1;

/// `SAGESSD_MAX_COMMANDS`: commands in flight at once, counting completions not yet taken.
pub const MAX_COMMANDS: u32 = sagessd_firmware::MAX_COMMANDS as u32;
/// `SAGESSD_FLASH_QUEUE_DEPTH`: flash operations started and not yet collected by
/// `sagessd_fw_poll`; the library never starts more, so reports never overflow.
pub const FLASH_QUEUE_DEPTH: u32 = 1024;
/// `SAGESSD_SQE_BYTES`: an NVMe submission queue entry.
pub const SQE_BYTES: u32 = 64;
/// `SAGESSD_CQE_BYTES`: an NVMe completion queue entry.
pub const CQE_BYTES: u32 = 16;
/// `SAGESSD_DRAM_ALIGN`: alignment of the DRAM arena, in bytes: the firmware's region alignment,
/// so that every flash DMA page window starts and ends on whole cache lines.
pub const DRAM_ALIGN: u32 = sagessd_firmware::DRAM_REGION_ALIGN_BYTES as u32;

/// Every [`ConfigError`] in code order: `SAGESSD_ERR_CONFIG - i` is `CONFIG_ERRORS[i]`. The
/// order is stable: new variants are appended, never inserted. The names are the header's
/// `SAGESSD_ERR_CONFIG_*` suffixes.
pub const CONFIG_ERRORS: [(ConfigError, &str); 16] = [
    (ConfigError::Geometry, "GEOMETRY"),
    (ConfigError::BlockSize, "BLOCK_SIZE"),
    (ConfigError::OverProvisioning, "OVER_PROVISIONING"),
    (ConfigError::PageBufferPages, "PAGE_BUFFER_PAGES"),
    (ConfigError::IspSlots, "ISP_SLOTS"),
    (ConfigError::MaxTargets, "MAX_TARGETS"),
    (ConfigError::MaxFanout, "MAX_FANOUT"),
    (ConfigError::MaxSubgraphNodes, "MAX_SUBGRAPH_NODES"),
    (ConfigError::MaxSubgraphEdges, "MAX_SUBGRAPH_EDGES"),
    (ConfigError::MaxTransfer, "MAX_TRANSFER"),
    (ConfigError::TooLittleFlash, "TOO_LITTLE_FLASH"),
    (ConfigError::DramTooSmall, "DRAM_TOO_SMALL"),
    (ConfigError::DramLayoutOverflow, "DRAM_LAYOUT_OVERFLOW"),
    (ConfigError::IspLanes, "ISP_LANES"),
    (ConfigError::IspWindow, "ISP_WINDOW"),
    (ConfigError::MaxMinibatches, "MAX_MINIBATCHES"),
];

/// The return code of a configuration error: `SAGESSD_ERR_CONFIG - n`.
pub fn config_error_code(error: ConfigError) -> i32 {
    // An exhaustive match, so a new ConfigError variant fails to compile until it has a code
    // (append it to CONFIG_ERRORS and the header).
    let n = match error {
        ConfigError::Geometry => 0,
        ConfigError::BlockSize => 1,
        ConfigError::OverProvisioning => 2,
        ConfigError::PageBufferPages => 3,
        ConfigError::IspSlots => 4,
        ConfigError::MaxTargets => 5,
        ConfigError::MaxFanout => 6,
        ConfigError::MaxSubgraphNodes => 7,
        ConfigError::MaxSubgraphEdges => 8,
        ConfigError::MaxTransfer => 9,
        ConfigError::TooLittleFlash => 10,
        ConfigError::DramTooSmall => 11,
        ConfigError::DramLayoutOverflow => 12,
        ConfigError::IspLanes => 13,
        ConfigError::IspWindow => 14,
        ConfigError::MaxMinibatches => 15,
    };
    ERR_CONFIG - n
}

/// `sagessd_geometry`: the NAND array's shape (= [`Geometry`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SagessdGeometry {
    /// Independent channels.
    pub channels: u32,
    /// Chips per channel.
    pub ways: u32,
    /// Dies per chip.
    pub dies_per_way: u32,
    /// Erase blocks per die.
    pub blocks_per_die: u32,
    /// Pages per erase block.
    pub pages_per_block: u32,
    /// User bytes per page.
    pub page_size_bytes: u32,
}

const _: () = {
    assert!(size_of::<SagessdGeometry>() == 24);
    assert!(offset_of!(SagessdGeometry, ways) == 4);
    assert!(offset_of!(SagessdGeometry, dies_per_way) == 8);
    assert!(offset_of!(SagessdGeometry, blocks_per_die) == 12);
    assert!(offset_of!(SagessdGeometry, pages_per_block) == 16);
    assert!(offset_of!(SagessdGeometry, page_size_bytes) == 20);
};

impl From<SagessdGeometry> for Geometry {
    fn from(g: SagessdGeometry) -> Self {
        Geometry {
            channels: g.channels,
            ways: g.ways,
            dies_per_way: g.dies_per_way,
            blocks_per_die: g.blocks_per_die,
            pages_per_block: g.pages_per_block,
            page_size_bytes: g.page_size_bytes,
        }
    }
}

/// `sagessd_config`: the firmware's sizes (= [`FirmwareConfig`], with two reserved fields).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SagessdConfig {
    /// log2 of the logical block size.
    pub block_size_log2: u8,
    /// Over-provisioning in percent.
    pub over_provisioning_percent: u8,
    /// Sampling slots.
    pub isp_slots: u8,
    /// Must be 0.
    pub reserved0: u8,
    /// Page-buffer slots.
    pub page_buffer_pages: u32,
    /// Most targets per NS_config.
    pub max_targets: u32,
    /// Largest fanout.
    pub max_fanout: u16,
    /// Must be 0.
    pub reserved1: u16,
    /// Most unique nodes per subgraph.
    pub max_subgraph_nodes: u32,
    /// Most sampled edges per subgraph.
    pub max_subgraph_edges: u32,
    /// Largest Read/Write transfer (MDTS) in bytes.
    pub max_transfer_bytes: u32,
    /// Bytes of node features one sampling job may return (a DRAM buffer per slot); 0: no
    /// in-storage feature gather.
    pub max_feature_bytes: u32,
}

const _: () = {
    assert!(size_of::<SagessdConfig>() == 32);
    assert!(offset_of!(SagessdConfig, over_provisioning_percent) == 1);
    assert!(offset_of!(SagessdConfig, isp_slots) == 2);
    assert!(offset_of!(SagessdConfig, reserved0) == 3);
    assert!(offset_of!(SagessdConfig, page_buffer_pages) == 4);
    assert!(offset_of!(SagessdConfig, max_targets) == 8);
    assert!(offset_of!(SagessdConfig, max_fanout) == 12);
    assert!(offset_of!(SagessdConfig, reserved1) == 14);
    assert!(offset_of!(SagessdConfig, max_subgraph_nodes) == 16);
    assert!(offset_of!(SagessdConfig, max_subgraph_edges) == 20);
    assert!(offset_of!(SagessdConfig, max_transfer_bytes) == 24);
    assert!(offset_of!(SagessdConfig, max_feature_bytes) == 28);
};

impl SagessdConfig {
    /// The firmware configuration, or `None` if a reserved field is not zero.
    pub fn to_firmware(&self) -> Option<FirmwareConfig> {
        if self.reserved0 != 0 || self.reserved1 != 0 {
            return None;
        }
        Some(FirmwareConfig {
            block_size_log2: self.block_size_log2,
            over_provisioning_percent: self.over_provisioning_percent,
            page_buffer_pages: self.page_buffer_pages,
            isp_slots: self.isp_slots,
            // A board polls the ISP engine from one loop: one job at a time.
            isp_lanes: 1,
            isp_window_pages: FirmwareConfig::quarter_buffer_window(self.page_buffer_pages),
            isp_read_ahead: false,
            limits: NsLimits {
                max_targets: self.max_targets,
                max_fanout: self.max_fanout,
                // The board takes plain NS_configs: its C configuration has no hyperbatch size.
                max_minibatches: 1,
            },
            max_subgraph_nodes: self.max_subgraph_nodes,
            max_subgraph_edges: self.max_subgraph_edges,
            max_transfer_bytes: self.max_transfer_bytes,
            // A board's stock host stack may refuse vendor opcodes: always offer the tunnel.
            tunnel: true,
            max_feature_bytes: self.max_feature_bytes,
            checkpoint_interval_pages: 0,
        })
    }
}

/// The board's flash `submit` callback: starts one operation and returns at once.
pub type FlashSubmitFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    tag: u32,
    kind: u32,
    address: u32,
    dram_page: *mut u8,
    sectors: u32,
) -> i32;

/// `sagessd_flash_ops`: the board's flash HAL.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SagessdFlashOps {
    /// Starts an operation (`NULL` is refused by `sagessd_fw_init`).
    pub submit: Option<FlashSubmitFn>,
    /// Passed back to `submit` unchanged.
    pub ctx: *mut c_void,
}

const _: () = {
    assert!(size_of::<SagessdFlashOps>() == 2 * size_of::<usize>());
    assert!(offset_of!(SagessdFlashOps, ctx) == size_of::<usize>());
};

/// `sagessd_completion`: one command's completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SagessdCompletion {
    /// The submission queue the command came from.
    pub sq_id: u16,
    /// Its command identifier.
    pub cid: u16,
    /// The 16-byte NVMe completion queue entry, little-endian. SQ head and phase tag are 0: the
    /// board's queue logic fills them in.
    pub cqe: [u8; 16],
}

const _: () = {
    assert!(size_of::<SagessdCompletion>() == 20);
    assert!(offset_of!(SagessdCompletion, cid) == 2);
    assert!(offset_of!(SagessdCompletion, cqe) == 4);
};
