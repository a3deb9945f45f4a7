//! Firmware configuration: the sizes an integrator chooses, checked once at start-up.

use sagessd_abi::ns_config::{MAX_MINIBATCHES, NsLimits};
use sagessd_abi::sample::MAX_FANOUT;

use crate::hal::Geometry;

/// Most NVMe commands the firmware holds at once (admin and I/O together).
pub const MAX_COMMANDS: usize = 64;
/// Most sampling jobs (submitted but not yet collected) the firmware holds at once.
pub const MAX_ISP_SLOTS: usize = 8;
/// Most sampling jobs the ISP engine runs at once ([`FirmwareConfig::isp_lanes`]).
pub const MAX_ISP_LANES: usize = 4;
/// Most pages one sampling lane keeps pinned ahead of its consumer.
pub const MAX_LANE_WINDOW_PAGES: u32 = 256;
/// Most flash pages one Read or Write command may touch (bounds `max_transfer_bytes`).
pub const MAX_PAGES_PER_COMMAND: usize = 64;
/// Page-buffer associativity: a logical page can live in one of this many slots.
pub const PAGE_BUFFER_WAYS: u32 = 8;

// The fixed sizes of DRAM regions, here so that the arena's layout (`crate::dram`) takes them
// from the sizing module rather than from the modules that use the regions.

/// DRAM windows checkpoint pages are programmed from (and read into at boot): this many pages
/// of a checkpoint are in flight at once (`crate::checkpoint`).
pub(crate) const CHECKPOINT_WINDOWS: usize = 16;
/// DRAM windows trim records are built in: one open while the previous one is programmed
/// (`crate::trim_log`).
pub(crate) const TRIM_LOG_WINDOWS: usize = 2;
/// Page windows of the trim log's DRAM region: the record windows and the read-back one.
pub(crate) const TRIM_LOG_REGION_WINDOWS: usize = TRIM_LOG_WINDOWS + 1;
/// Trim records opened and not yet covered by a durable checkpoint, at most (`crate::trim_log`;
/// the FTL and the boot's replay size their tables of them by it).
pub(crate) const MAX_UNSAVED_RECORDS: usize = 32;
/// Bytes of one minibatch's sampling state in DRAM (`crate::isp`'s `MinibatchState`, which
/// asserts its size against this).
pub(crate) const MINIBATCH_STATE_BYTES: usize = 112;

/// The sizes the firmware runs with. Every field is checked by [`FirmwareConfig::validate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirmwareConfig {
    /// log2 of the logical block (LBA) size: 9 (512 B) up to log2 of the flash page size.
    pub block_size_log2: u8,
    /// Share of the usable flash kept back from the namespace for garbage collection, in percent.
    pub over_provisioning_percent: u8,
    /// DRAM page-buffer slots (flash pages cached), a multiple of `PAGE_BUFFER_WAYS`, 16..=32768.
    pub page_buffer_pages: u32,
    /// Sampling jobs that may be submitted and not yet collected, 1..=[`MAX_ISP_SLOTS`].
    pub isp_slots: u8,
    /// Sampling jobs run at once, 1..=[`MAX_ISP_LANES`] and at most `isp_slots`. Each *lane*
    /// has its own DRAM working regions (node table, gathered positions, gather keys and
    /// values) and an equal share of the page-buffer window, and is stepped on its own
    /// ([`crate::Firmware::poll_isp_lane`]), so an integrator with several cores for ISP runs
    /// one lane on each.
    pub isp_lanes: u8,
    /// Pages the ISP engine keeps pinned in the page buffer ahead of what it has consumed, its
    /// flash reads in flight among them, over all lanes (each lane an equal share):
    /// `isp_lanes..=isp_lanes × MAX_LANE_WINDOW_PAGES`. A property of the device (how many reads
    /// keep its dies busy), not of the buffer's size: a smaller buffer only makes the issuers
    /// wait for free slots more often.
    pub isp_window_pages: u32,
    /// Whether the local pass reads ahead the pages the next gather will want (the `indptr`
    /// entries of the nodes it adds), so that the flash reads them while the core runs the rest
    /// of the pass.
    /// Off by default: with the measured embedded-core costs a job is core-bound, and reading
    /// ahead cost more than it saved on every shipped description (docs/model.md).
    pub isp_read_ahead: bool,
    /// NS_config limits (targets per job, fanout per layer).
    pub limits: NsLimits,
    /// Unique nodes one sampled subgraph may hold.
    pub max_subgraph_nodes: u32,
    /// Sampled edges one subgraph may hold over all its layers.
    pub max_subgraph_edges: u32,
    /// Largest data transfer of one Read or Write (MDTS), a power of two ≥ 4 KiB.
    pub max_transfer_bytes: u32,
    /// Serve the tunnel window ([`sagessd_abi::tunnel`]) at the end of the namespace, if it fits
    /// in half of it.
    pub tunnel: bool,
    /// Bytes of node features one sampling job may return (its DRAM feature buffer); 0: no
    /// in-storage feature gather.
    pub max_feature_bytes: u32,
    /// Pages programmed between two checkpoints of the FTL's tables, which bounds the replay at
    /// boot; 0: automatic (64 checkpoints' worth of pages, so checkpoints cost at most 1/64 of
    /// the flash writes).
    pub checkpoint_interval_pages: u32,
}

impl Default for FirmwareConfig {
    fn default() -> Self {
        Self {
            block_size_log2: 12,
            over_provisioning_percent: 7,
            page_buffer_pages: 512,
            isp_slots: 2,
            isp_lanes: 1,
            isp_window_pages: 128,
            isp_read_ahead: false,
            limits: NsLimits {
                max_targets: 4096,
                max_fanout: 64,
                max_minibatches: 16,
            },
            max_subgraph_nodes: 1 << 20,
            max_subgraph_edges: 1 << 22,
            max_transfer_bytes: 128 * 1024,
            tunnel: true,
            max_feature_bytes: 0,
            checkpoint_interval_pages: 0,
        }
    }
}

/// Why a configuration cannot run; each variant names the field at fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// The flash geometry is empty, has a bad page size, or has more than 2^32 pages.
    Geometry,
    /// `block_size_log2` is below 9 or the block is larger than a flash page.
    BlockSize,
    /// `over_provisioning_percent` is 50 or more.
    OverProvisioning,
    /// `page_buffer_pages` is outside 16..=32768 or not a multiple of `PAGE_BUFFER_WAYS`.
    PageBufferPages,
    /// `isp_slots` is 0 or above [`MAX_ISP_SLOTS`].
    IspSlots,
    /// `isp_lanes` is 0, above [`MAX_ISP_LANES`] or above `isp_slots`.
    IspLanes,
    /// `isp_window_pages` is below `isp_lanes` or above `isp_lanes × MAX_LANE_WINDOW_PAGES`.
    IspWindow,
    /// `limits.max_targets` is 0 or above `max_subgraph_nodes`.
    MaxTargets,
    /// `limits.max_fanout` is 0 or above the sampling function's maximum.
    MaxFanout,
    /// `limits.max_minibatches` is 0 or above [`sagessd_abi::ns_config::MAX_MINIBATCHES`].
    MaxMinibatches,
    /// `max_subgraph_nodes` is 0 or above 2^28.
    MaxSubgraphNodes,
    /// `max_subgraph_edges` is 0 or above 2^28.
    MaxSubgraphEdges,
    /// `max_transfer_bytes` is not a power of two ≥ 4 KiB, or a transfer that size starting
    /// mid-page (`max_transfer_bytes / page_size_bytes + 1` pages) would not stay below
    /// `MAX_PAGES_PER_COMMAND` pages.
    MaxTransfer,
    /// The flash is too small to hold a namespace after reserves and over-provisioning.
    TooLittleFlash,
    /// The DRAM arena given is smaller than [`crate::dram_size_bytes`].
    DramTooSmall,
    /// The arena this configuration needs does not fit the address space.
    DramLayoutOverflow,
}

impl FirmwareConfig {
    /// Checks every field against itself and against `geometry`.
    pub fn validate(&self, geometry: &Geometry) -> Result<(), ConfigError> {
        if !geometry.is_valid() {
            return Err(ConfigError::Geometry);
        }
        if self.block_size_log2 < 9
            || (1u64 << self.block_size_log2.min(40)) > u64::from(geometry.page_size_bytes)
        {
            return Err(ConfigError::BlockSize);
        }
        if self.over_provisioning_percent >= 50 {
            return Err(ConfigError::OverProvisioning);
        }
        if self.page_buffer_pages < 16
            || !self.page_buffer_pages.is_multiple_of(PAGE_BUFFER_WAYS)
            || self.page_buffer_pages > 1 << 15
        {
            return Err(ConfigError::PageBufferPages);
        }
        if self.isp_slots == 0 || usize::from(self.isp_slots) > MAX_ISP_SLOTS {
            return Err(ConfigError::IspSlots);
        }
        if self.isp_lanes == 0
            || usize::from(self.isp_lanes) > MAX_ISP_LANES
            || self.isp_lanes > self.isp_slots
        {
            return Err(ConfigError::IspLanes);
        }
        let lanes = u32::from(self.isp_lanes);
        if !(lanes..=lanes * MAX_LANE_WINDOW_PAGES).contains(&self.isp_window_pages) {
            return Err(ConfigError::IspWindow);
        }
        if self.max_subgraph_nodes == 0 || self.max_subgraph_nodes > 1 << 28 {
            return Err(ConfigError::MaxSubgraphNodes);
        }
        if self.max_subgraph_edges == 0 || self.max_subgraph_edges > 1 << 28 {
            return Err(ConfigError::MaxSubgraphEdges);
        }
        if self.limits.max_targets == 0 || self.limits.max_targets > self.max_subgraph_nodes {
            return Err(ConfigError::MaxTargets);
        }
        if self.limits.max_fanout == 0 || self.limits.max_fanout > MAX_FANOUT {
            return Err(ConfigError::MaxFanout);
        }
        if self.limits.max_minibatches == 0 || self.limits.max_minibatches > MAX_MINIBATCHES {
            return Err(ConfigError::MaxMinibatches);
        }
        let t = self.max_transfer_bytes;
        if !t.is_power_of_two()
            || t < 4096
            || t / geometry.page_size_bytes + 1 >= MAX_PAGES_PER_COMMAND as u32
        {
            return Err(ConfigError::MaxTransfer);
        }
        Ok(())
    }

    /// The window a configuration that does not choose one gets: a quarter of the page buffer,
    /// at most one lane's [`MAX_LANE_WINDOW_PAGES`] (the board's C configuration, and the
    /// calibration's plan, which carry no window).
    pub fn quarter_buffer_window(page_buffer_pages: u32) -> u32 {
        (page_buffer_pages / 4).clamp(1, MAX_LANE_WINDOW_PAGES)
    }

    /// The logical block size in bytes.
    pub fn block_size_bytes(&self) -> u32 {
        1 << self.block_size_log2
    }
}
