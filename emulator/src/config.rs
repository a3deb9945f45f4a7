//! The hardware description of an emulated SSD, loaded from TOML (`hw-configs/*.toml`).
//!
//! One [`HwConfig`] describes everything the timing model needs: the NAND array, the PCIe link,
//! the controller's fixed costs, the embedded cores, the DRAM, and the firmware's sizing. Every
//! field is mandatory (except `firmware.isp`, which defaults to `true`) and unknown fields are
//! rejected, so a typo never silently falls back to a default. [`HwConfig::validate`] checks every field and names the offending one in its error,
//! e.g. `invalid hw config field nand.page_size_bytes: must be a multiple of 512 (got 1000)`.

use std::path::Path;

use sagessd_abi::ns_config::MAX_MINIBATCHES;
use sagessd_abi::ns_config::NsLimits;
use sagessd_abi::sample::MAX_FANOUT;
use sagessd_firmware::hal::Geometry;
use sagessd_firmware::{
    ConfigError, Firmware, FirmwareConfig, MAX_ISP_LANES, MAX_ISP_SLOTS, MAX_LANE_WINDOW_PAGES,
};
use serde::{Deserialize, Serialize};

use crate::error::EmulatorError;
use crate::host_stack::HostStackConfig;
use crate::nand::NandArray;
use crate::trainer_model::TrainerConfig;

/// Longest fixed latency any time field may hold (10 s): larger values are unit mistakes.
const MAX_LATENCY_NS: u64 = 10_000_000_000;
/// Largest per-unit cycle cost accepted (10^9 cycles): larger values are unit mistakes.
const MAX_CYCLES: u64 = 1_000_000_000;

/// A complete hardware description. See `hw-configs/cosmos-plus.toml` for a documented example.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HwConfig {
    /// Identity of the device.
    pub device: DeviceConfig,
    /// The NAND flash array.
    pub nand: NandConfig,
    /// The PCIe link to the host.
    pub pcie: PcieConfig,
    /// Fixed costs of the NVMe controller's queue handling.
    pub controller: ControllerConfig,
    /// The embedded cores that run the firmware.
    pub cores: CoresConfig,
    /// The controller's DRAM.
    pub dram: DramConfig,
    /// Sizing of the firmware's tables and buffers.
    pub firmware: FirmwareSection,
    /// The host's I/O stack that the host sampling modes pay (syscalls, interrupts, faults, page
    /// cache). Optional: without a `[host]` table, the documented typical Linux server of
    /// [`HostStackConfig::default`].
    #[serde(default)]
    pub host: HostStackConfig,
    /// The accelerator training runs on, for modelled training steps. Optional: without a
    /// `[trainer]` table, [`TrainerConfig::default`] (an NVIDIA V100 PCIe).
    #[serde(default)]
    pub trainer: TrainerConfig,
    /// The internal peer-to-peer link of an FPGA-based computational SSD, between the SSD
    /// controller and the FPGA that runs the sampling kernel. Optional: without a `[p2p]` table
    /// the ISP engine works on pages in the controller's own DRAM (a firmware-based CSD). With
    /// it, every page the ISP engine scans is first copied SSD→FPGA over this link (see
    /// [`crate::ssd`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p2p: Option<P2pConfig>,
    /// The embedded core's micro-architecture, as `sagessd firmware calibrate` needs it to
    /// turn the firmware's instruction counts and modelled cache misses into the `[cores]`
    /// cycle costs. Optional: the emulator itself never reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_timing: Option<CoreTimingConfig>,
}

/// `[core_timing]`: the caches and latencies of the core that runs the firmware, for
/// calibration. Cycles of a run are
/// `instructions × base_cycles_per_1000_instructions / 1000 + (L1 misses that hit L2) ×
/// l2_hit_penalty_cycles + (L2 misses) × (dram_penalty_cycles + dram_penalty_ns × clock)`,
/// instruction fetches and
/// data accesses alike, with the misses counted by replaying the run's accesses through
/// caches of this shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreTimingConfig {
    /// The core, for reports (e.g. "Cortex-A9").
    pub cpu: String,
    /// L1 instruction cache capacity.
    pub l1i_bytes: u32,
    /// L1 data cache capacity.
    pub l1d_bytes: u32,
    /// Ways of each L1.
    pub l1_ways: u32,
    /// Unified L2 capacity.
    pub l2_bytes: u32,
    /// Ways of the L2.
    pub l2_ways: u32,
    /// Line size of every level (a power of two).
    pub line_bytes: u32,
    /// Cycles per 1,000 instructions when every access hits L1 (the base CPI × 1000).
    pub base_cycles_per_1000_instructions: u32,
    /// Cycles an L1 miss that hits L2 adds.
    pub l2_hit_penalty_cycles: u32,
    /// Cycles an L2 miss adds on the core's side of the memory controller (the L2 lookup
    /// and the path to the controller), beside [`Self::dram_penalty_ns`].
    #[serde(default)]
    pub dram_penalty_cycles: u32,
    /// Nanoseconds an L2 miss adds in DRAM, converted at `cores.clock_mhz`.
    pub dram_penalty_ns: u32,
    /// Cycles the board's glue spends per NVMe command outside the firmware library (reading
    /// the command from the controller, posting its completion: uncached register accesses
    /// the calibration image does not have), added to the measured `cycles_per_command`.
    #[serde(default)]
    pub board_cycles_per_command: u64,
    /// The same per flash operation (the flash controller's registers), added to the measured
    /// `cycles_per_flash_op`.
    #[serde(default)]
    pub board_cycles_per_flash_op: u64,
    /// The same per poll (the status registers a poll reads), added to the measured
    /// `cycles_per_poll`.
    #[serde(default)]
    pub board_cycles_per_poll: u64,
}

/// `[device]`: what the device is called.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Human-readable name, reported in statistics.
    pub name: String,
}

/// `[nand]`: geometry and timing of the flash array.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NandConfig {
    /// Independent flash channels (buses).
    pub channels: u32,
    /// Chips (chip enables) per channel.
    pub ways: u32,
    /// Independently operating dies per chip.
    pub dies_per_way: u32,
    /// Erase blocks per die.
    pub blocks_per_die: u32,
    /// Pages per erase block.
    pub pages_per_block: u32,
    /// User-data bytes per page (the spare area is not modelled).
    pub page_size_bytes: u32,
    /// Array-to-page-register read time (tR).
    pub t_read_ns: u64,
    /// Page-register-to-array program time (tPROG).
    pub t_program_ns: u64,
    /// Block erase time (tBERS).
    pub t_erase_ns: u64,
    /// Data rate of one channel bus, in MB/s (10^6 bytes per second).
    pub channel_rate_mb_s: u32,
    /// Channel time of one operation's command, address and status cycles.
    pub command_overhead_ns: u64,
    /// Planes per die (a power of two, at most 8, dividing `blocks_per_die`; block `b` sits on
    /// plane `b % planes_per_die`). Reads or programs of one die on different planes that wait
    /// together share one tR or tPROG (multi-plane operation, see [`crate::nand`]). Optional:
    /// 1 when absent.
    #[serde(default = "one_plane")]
    pub planes_per_die: u32,
}

fn one_plane() -> u32 {
    1
}

impl NandConfig {
    /// The firmware-facing geometry of this array.
    pub fn geometry(&self) -> Geometry {
        Geometry {
            channels: self.channels,
            ways: self.ways,
            dies_per_way: self.dies_per_way,
            blocks_per_die: self.blocks_per_die,
            pages_per_block: self.pages_per_block,
            page_size_bytes: self.page_size_bytes,
        }
    }

    /// Channel time to move one page: `ceil(page_size_bytes × 1000 / channel_rate_mb_s)` ns
    /// (1 MB/s moves one byte per 1000 ns).
    pub fn page_transfer_ns(&self) -> u64 {
        (u64::from(self.page_size_bytes) * 1000).div_ceil(u64::from(self.channel_rate_mb_s.max(1)))
    }
}

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

/// `[controller]`: the fixed costs of the NVMe queue mechanics that are not data transfers.
///
/// Fetching a 64-byte submission entry and posting a 16-byte completion entry are modelled as
/// PCIe transfers on the link (see [`crate::pcie`]); these fields add the parts that are not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerConfig {
    /// From the host's doorbell write until the controller starts fetching the entry.
    pub doorbell_ns: u64,
    /// From the completion entry landing in host memory until the host is interrupted.
    pub interrupt_ns: u64,
}

/// `[cores]`: the embedded cores and what each unit of counted firmware work costs them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoresConfig {
    /// Number of cores (see [`crate::cores`] for how they are used).
    pub count: u32,
    /// Cores of `count` dedicated to in-storage processing (optional, default 0: in-storage
    /// sampling time-shares every core with the flash firmware, one sampling lane per core,
    /// lane 0 on the firmware's own core). At least 1: one lane on each, the flash firmware on
    /// a core of its own (see [`crate::cores`]). At most `count - 1` (the firmware keeps a
    /// core).
    #[serde(default)]
    pub isp_cores: u32,
    /// Core clock in MHz.
    pub clock_mhz: u32,
    /// Cycles to fetch, parse and dispatch one NVMe command.
    pub cycles_per_command: u64,
    /// Cycles to issue and retire one flash operation.
    pub cycles_per_flash_op: u64,
    /// Cycles per page-buffer lookup.
    pub cycles_per_page_lookup: u64,
    /// Cycles of per-page bookkeeping when the ISP engine scans a flash page.
    pub cycles_per_page_scanned: u64,
    /// Cycles per feature row the ISP engine gathers (found in its page and copied out).
    pub cycles_per_row_gathered: u64,
    /// Cycles per neighbour the ISP engine samples (deduplication, output).
    pub cycles_per_edge_sampled: u64,
    /// Cycles per neighbour the ISP engine returns as a global id without deduplicating it
    /// (the last layer of a job that returns its sampled ids). Optional: without it,
    /// `cycles_per_edge_sampled` (an upper bound: the same work and a probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_edge_emitted: Option<u64>,
    /// Cycles a sampled neighbour's probe adds when its node was added long before (its
    /// node-table entry most likely out of the caches). Optional: without it 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_stale_repeat: Option<u64>,
    /// Cycles per neighbour position the ISP engine draws at random (a node whose degree
    /// exceeds the fanout). Optional: without it 0, as when `cycles_per_edge_sampled` priced
    /// the draw with the rest of a sampled edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_edge_drawn: Option<u64>,
    /// Cycles per target the ISP engine deduplicates into a job's node list (a load, a
    /// node-table probe, a write). Optional: without it, `cycles_per_edge_sampled`, what a
    /// target cost while one counter priced both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_target: Option<u64>,
    /// Cycles per node the ISP engine adds to a job's node list (its node-table entry and its
    /// place in the list; the probe that found it new is the target's or sampled edge's).
    /// Optional: without it, `cycles_per_edge_sampled`, as for targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_node_added: Option<u64>,
    /// Cycles per destination the ISP engine samples in a layer (its sort key, its bounds
    /// checked, its edges placed, its local `indptr` entry). Optional: without it 0, as when
    /// the gather items priced a destination's work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_destination: Option<u64>,
    /// Cycles per KiB of data the cores copy.
    pub cycles_per_kib_copied: u64,
    /// Cycles per key per radix-sort pass of the ISP engine (count, then scatter).
    pub cycles_per_sort_key_move: u64,
    /// Fixed cycles of one radix-sort pass (clearing and prefix-summing its histogram).
    /// Optional: without it 0, as when the key moves priced the whole sort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_radix_pass: Option<u64>,
    /// Cycles per block-table entry the FTL scans when it picks a garbage-collection victim.
    pub cycles_per_block_scanned: u64,
    /// Fixed cycles of one pass of the firmware's poll loop, fruitful or not (checking the
    /// flash completion queue, the GC state, the command table and the ISP engine).
    pub cycles_per_poll: u64,
    /// Cycles to look at one parked command during a poll (load its record, test its state),
    /// whether or not it can move.
    pub cycles_per_parked_command: u64,
    /// Cycles the board's glue spends per KiB of page data a flash read brings into DRAM (the
    /// sectors it names), where the flash DMA does not snoop the cores' caches: invalidating
    /// those lines before and after the transfer. Optional: without it 0 (a coherent DMA, or
    /// a glue that does not touch the data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_kib_flash_read: Option<u64>,
    /// The same per KiB a flash program takes from DRAM: cleaning the page's lines to DRAM
    /// before the transfer. Optional: without it 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_kib_flash_program: Option<u64>,
}

impl CoresConfig {
    /// Cycles per target deduplicated: `cycles_per_target`, else `cycles_per_edge_sampled`.
    pub fn target_cycles(&self) -> u64 {
        self.cycles_per_target
            .unwrap_or(self.cycles_per_edge_sampled)
    }

    /// Cycles per neighbour emitted undeduplicated: `cycles_per_edge_emitted`, else
    /// `cycles_per_edge_sampled`.
    pub fn edge_emitted_cycles(&self) -> u64 {
        self.cycles_per_edge_emitted
            .unwrap_or(self.cycles_per_edge_sampled)
    }

    /// Cycles per random draw: `cycles_per_edge_drawn`, else 0.
    pub fn edge_drawn_cycles(&self) -> u64 {
        self.cycles_per_edge_drawn.unwrap_or(0)
    }

    /// Cycles per KiB of flash-read data kept coherent: `cycles_per_kib_flash_read`, else 0.
    pub fn kib_flash_read_cycles(&self) -> u64 {
        self.cycles_per_kib_flash_read.unwrap_or(0)
    }

    /// Cycles per KiB of flash-program data kept coherent: `cycles_per_kib_flash_program`,
    /// else 0.
    pub fn kib_flash_program_cycles(&self) -> u64 {
        self.cycles_per_kib_flash_program.unwrap_or(0)
    }

    /// Cycles per radix-sort pass: `cycles_per_radix_pass`, else 0.
    pub fn radix_pass_cycles(&self) -> u64 {
        self.cycles_per_radix_pass.unwrap_or(0)
    }

    /// Cycles per stale repeat: `cycles_per_stale_repeat`, else 0.
    pub fn stale_repeat_cycles(&self) -> u64 {
        self.cycles_per_stale_repeat.unwrap_or(0)
    }

    /// Cycles per destination sampled: `cycles_per_destination`, else 0.
    pub fn destination_cycles(&self) -> u64 {
        self.cycles_per_destination.unwrap_or(0)
    }

    /// Cycles per node added to a job's node list: `cycles_per_node_added`, else
    /// `cycles_per_edge_sampled`.
    pub fn node_added_cycles(&self) -> u64 {
        self.cycles_per_node_added
            .unwrap_or(self.cycles_per_edge_sampled)
    }
}

/// `[dram]`: the controller's DRAM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DramConfig {
    /// Capacity in MiB; the firmware's needs for this configuration must fit.
    pub capacity_mib: u32,
    /// Bandwidth in MB/s (10^6 bytes per second) shared by every byte moved into or out of
    /// the DRAM: host DMA data, flash page data, SSD→FPGA copies (see [`crate::dram`]).
    pub bandwidth_mb_s: u32,
}

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

fn invalid(field: &'static str, reason: impl Into<String>) -> EmulatorError {
    EmulatorError::InvalidConfig {
        field,
        reason: reason.into(),
    }
}

fn check(
    ok: bool,
    field: &'static str,
    reason: impl FnOnce() -> String,
) -> Result<(), EmulatorError> {
    if ok {
        Ok(())
    } else {
        Err(invalid(field, reason()))
    }
}

fn non_zero(value: u64, field: &'static str) -> Result<(), EmulatorError> {
    check(value > 0, field, || {
        "must be greater than 0 (got 0)".to_string()
    })
}

fn in_range(value: u64, min: u64, max: u64, field: &'static str) -> Result<(), EmulatorError> {
    check((min..=max).contains(&value), field, || {
        format!("must be between {min} and {max} (got {value})")
    })
}

fn at_most(value: u64, max: u64, field: &'static str) -> Result<(), EmulatorError> {
    check(value <= max, field, || {
        format!("must be at most {max} (got {value})")
    })
}

fn power_of_two(value: u64, field: &'static str) -> Result<(), EmulatorError> {
    check(value.is_power_of_two(), field, || {
        format!("must be a power of two (got {value})")
    })
}

impl HwConfig {
    /// Parses and validates a TOML description.
    pub fn from_toml_str(text: &str) -> Result<Self, EmulatorError> {
        let config: Self =
            toml::from_str(text).map_err(|e| EmulatorError::ParseConfig(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Reads, parses and validates a TOML file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, EmulatorError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| EmulatorError::ReadConfig {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&text)
    }

    /// The Cosmos+ OpenSSD, as described (with a source for every number) by the shipped
    /// `hw-configs/cosmos-plus.toml`.
    pub fn cosmos_plus() -> Self {
        Self::from_toml_str(COSMOS_PLUS_TOML)
            .expect("hw-configs/cosmos-plus.toml is valid (checked by this crate's tests)")
    }

    /// The Newport-class computational SSD with dedicated ISP cores, as described by the shipped
    /// `hw-configs/newport.toml` (SmartSAGE's "oracle" design point runs on it).
    pub fn newport() -> Self {
        Self::from_toml_str(NEWPORT_TOML)
            .expect("hw-configs/newport.toml is valid (checked by this crate's tests)")
    }

    /// How many sampling jobs the device runs at once: one per ISP core (`[cores] isp_cores` ≥
    /// 1), or, when in-storage sampling time-shares the firmware's cores (`isp_cores` = 0), one
    /// per core; at most `[firmware] isp_slots` and the firmware's [`MAX_ISP_LANES`]. One on a
    /// device without in-storage processing.
    pub fn isp_lanes(&self) -> u8 {
        let cores = match (self.firmware.isp, self.cores.isp_cores) {
            (false, _) => 1,
            (true, 0) => self.cores.count,
            (true, k) => k,
        };
        cores
            .min(u32::from(self.firmware.isp_slots))
            .clamp(1, MAX_ISP_LANES as u32) as u8
    }

    /// How many sampling lanes run on cores of their own: every lane with ISP cores
    /// (`isp_cores` ≥ 1), all but the one the firmware core runs when sampling time-shares the
    /// cores (`isp_cores` = 0), none without in-storage processing.
    pub fn isp_lane_cores(&self) -> u32 {
        match (self.firmware.isp, self.cores.isp_cores) {
            (false, _) => 0,
            (true, 0) => u32::from(self.isp_lanes()) - 1,
            (true, _) => u32::from(self.isp_lanes()),
        }
    }

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
        Firmware::<NandArray, Vec<u8>>::dram_size_bytes(
            &self.firmware_config(),
            &self.nand.geometry(),
        )
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

    /// Checks every field; the error names the first offending field and the value given.
    pub fn validate(&self) -> Result<(), EmulatorError> {
        self.validate_device()?;
        self.validate_nand()?;
        self.validate_pcie()?;
        self.validate_controller()?;
        self.validate_cores()?;
        self.validate_firmware()?;
        self.validate_dram()?;
        self.validate_p2p()?;
        self.validate_core_timing()?;
        self.trainer.validate()?;
        self.host.validate()
    }

    fn validate_p2p(&self) -> Result<(), EmulatorError> {
        let Some(p) = &self.p2p else {
            return Ok(());
        };
        in_range(p.generation.into(), 1, 5, "p2p.generation")?;
        check(
            matches!(p.lanes, 1 | 2 | 4 | 8 | 12 | 16 | 32),
            "p2p.lanes",
            || format!("must be 1, 2, 4, 8, 12, 16 or 32 (got {})", p.lanes),
        )?;
        power_of_two(p.max_payload_bytes.into(), "p2p.max_payload_bytes")?;
        in_range(
            p.max_payload_bytes.into(),
            128,
            4096,
            "p2p.max_payload_bytes",
        )?;
        in_range(
            p.tlp_overhead_bytes.into(),
            1,
            128,
            "p2p.tlp_overhead_bytes",
        )?;
        at_most(p.setup_ns, MAX_LATENCY_NS, "p2p.setup_ns")?;
        check(self.firmware.isp, "p2p", || {
            "a [p2p] link needs in-storage processing (firmware.isp = true)".to_string()
        })
    }

    fn validate_core_timing(&self) -> Result<(), EmulatorError> {
        let Some(m) = &self.core_timing else {
            return Ok(());
        };
        power_of_two(m.line_bytes.into(), "core_timing.line_bytes")?;
        in_range(m.line_bytes.into(), 16, 256, "core_timing.line_bytes")?;
        for (bytes, ways, field) in [
            (m.l1i_bytes, m.l1_ways, "core_timing.l1i_bytes"),
            (m.l1d_bytes, m.l1_ways, "core_timing.l1d_bytes"),
            (m.l2_bytes, m.l2_ways, "core_timing.l2_bytes"),
        ] {
            in_range(ways.into(), 1, 64, field)?;
            let way_bytes = u64::from(ways) * u64::from(m.line_bytes);
            check(
                u64::from(bytes).is_multiple_of(way_bytes)
                    && (u64::from(bytes) / way_bytes).is_power_of_two(),
                field,
                || {
                    format!(
                        "{bytes} bytes is not a power-of-two number of {ways}-way sets of {}-byte lines",
                        m.line_bytes
                    )
                },
            )?;
        }
        in_range(
            m.base_cycles_per_1000_instructions.into(),
            100,
            100_000,
            "core_timing.base_cycles_per_1000_instructions",
        )?;
        at_most(
            m.l2_hit_penalty_cycles.into(),
            10_000,
            "core_timing.l2_hit_penalty_cycles",
        )?;
        at_most(
            m.dram_penalty_cycles.into(),
            10_000,
            "core_timing.dram_penalty_cycles",
        )?;
        at_most(
            m.dram_penalty_ns.into(),
            100_000,
            "core_timing.dram_penalty_ns",
        )
    }

    fn validate_device(&self) -> Result<(), EmulatorError> {
        check(!self.device.name.trim().is_empty(), "device.name", || {
            "must not be empty".to_string()
        })
    }

    fn validate_nand(&self) -> Result<(), EmulatorError> {
        let n = &self.nand;
        non_zero(n.channels.into(), "nand.channels")?;
        non_zero(n.ways.into(), "nand.ways")?;
        non_zero(n.dies_per_way.into(), "nand.dies_per_way")?;
        non_zero(n.blocks_per_die.into(), "nand.blocks_per_die")?;
        non_zero(n.pages_per_block.into(), "nand.pages_per_block")?;
        check(
            n.page_size_bytes >= 512 && n.page_size_bytes.is_multiple_of(512),
            "nand.page_size_bytes",
            || format!("must be a multiple of 512 (got {})", n.page_size_bytes),
        )?;
        let pages = [
            n.channels,
            n.ways,
            n.dies_per_way,
            n.blocks_per_die,
            n.pages_per_block,
        ]
        .iter()
        .try_fold(1u64, |acc, c| acc.checked_mul(u64::from(*c)));
        check(
            matches!(pages, Some(p) if p < u64::from(u32::MAX)),
            "nand.blocks_per_die",
            || {
                "channels × ways × dies_per_way × blocks_per_die × pages_per_block \
                 must be below 2^32 physical pages"
                    .to_string()
            },
        )?;
        in_range(n.t_read_ns, 1, MAX_LATENCY_NS, "nand.t_read_ns")?;
        in_range(n.t_program_ns, 1, MAX_LATENCY_NS, "nand.t_program_ns")?;
        in_range(n.t_erase_ns, 1, MAX_LATENCY_NS, "nand.t_erase_ns")?;
        non_zero(n.channel_rate_mb_s.into(), "nand.channel_rate_mb_s")?;
        at_most(
            n.command_overhead_ns,
            MAX_LATENCY_NS,
            "nand.command_overhead_ns",
        )?;
        let planes = n.planes_per_die;
        if !(planes.is_power_of_two() && planes <= 8 && n.blocks_per_die.is_multiple_of(planes)) {
            return Err(invalid(
                "nand.planes_per_die",
                format!("must be 1, 2, 4 or 8 and divide blocks_per_die, not {planes}"),
            ));
        }
        Ok(())
    }

    fn validate_pcie(&self) -> Result<(), EmulatorError> {
        let p = &self.pcie;
        in_range(p.generation.into(), 1, 5, "pcie.generation")?;
        check(
            matches!(p.lanes, 1 | 2 | 4 | 8 | 12 | 16 | 32),
            "pcie.lanes",
            || format!("must be 1, 2, 4, 8, 12, 16 or 32 (got {})", p.lanes),
        )?;
        power_of_two(p.max_payload_bytes.into(), "pcie.max_payload_bytes")?;
        in_range(
            p.max_payload_bytes.into(),
            128,
            4096,
            "pcie.max_payload_bytes",
        )?;
        in_range(
            p.tlp_overhead_bytes.into(),
            1,
            128,
            "pcie.tlp_overhead_bytes",
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

    fn validate_controller(&self) -> Result<(), EmulatorError> {
        at_most(
            self.controller.doorbell_ns,
            MAX_LATENCY_NS,
            "controller.doorbell_ns",
        )?;
        at_most(
            self.controller.interrupt_ns,
            MAX_LATENCY_NS,
            "controller.interrupt_ns",
        )
    }

    fn validate_cores(&self) -> Result<(), EmulatorError> {
        let c = &self.cores;
        in_range(c.count.into(), 1, 64, "cores.count")?;
        in_range(c.clock_mhz.into(), 1, 100_000, "cores.clock_mhz")?;
        in_range(
            c.isp_cores.into(),
            0,
            u64::from(c.count.saturating_sub(1)),
            "cores.isp_cores",
        )?;
        at_most(c.cycles_per_command, MAX_CYCLES, "cores.cycles_per_command")?;
        at_most(
            c.cycles_per_flash_op,
            MAX_CYCLES,
            "cores.cycles_per_flash_op",
        )?;
        at_most(
            c.cycles_per_page_lookup,
            MAX_CYCLES,
            "cores.cycles_per_page_lookup",
        )?;
        at_most(
            c.cycles_per_page_scanned,
            MAX_CYCLES,
            "cores.cycles_per_page_scanned",
        )?;
        at_most(
            c.cycles_per_row_gathered,
            MAX_CYCLES,
            "cores.cycles_per_row_gathered",
        )?;
        at_most(
            c.cycles_per_edge_sampled,
            MAX_CYCLES,
            "cores.cycles_per_edge_sampled",
        )?;
        at_most(
            c.edge_emitted_cycles(),
            MAX_CYCLES,
            "cores.cycles_per_edge_emitted",
        )?;
        at_most(c.target_cycles(), MAX_CYCLES, "cores.cycles_per_target")?;
        at_most(
            c.edge_drawn_cycles(),
            MAX_CYCLES,
            "cores.cycles_per_edge_drawn",
        )?;
        at_most(
            c.radix_pass_cycles(),
            MAX_CYCLES,
            "cores.cycles_per_radix_pass",
        )?;
        at_most(
            c.node_added_cycles(),
            MAX_CYCLES,
            "cores.cycles_per_node_added",
        )?;
        at_most(
            c.stale_repeat_cycles(),
            MAX_CYCLES,
            "cores.cycles_per_stale_repeat",
        )?;
        at_most(
            c.destination_cycles(),
            MAX_CYCLES,
            "cores.cycles_per_destination",
        )?;
        at_most(
            c.cycles_per_kib_copied,
            MAX_CYCLES,
            "cores.cycles_per_kib_copied",
        )?;
        at_most(
            c.cycles_per_sort_key_move,
            MAX_CYCLES,
            "cores.cycles_per_sort_key_move",
        )?;
        at_most(
            c.cycles_per_block_scanned,
            MAX_CYCLES,
            "cores.cycles_per_block_scanned",
        )?;
        at_most(c.cycles_per_poll, MAX_CYCLES, "cores.cycles_per_poll")?;
        at_most(
            c.cycles_per_parked_command,
            MAX_CYCLES,
            "cores.cycles_per_parked_command",
        )?;
        at_most(
            c.kib_flash_read_cycles(),
            MAX_CYCLES,
            "cores.cycles_per_kib_flash_read",
        )?;
        at_most(
            c.kib_flash_program_cycles(),
            MAX_CYCLES,
            "cores.cycles_per_kib_flash_program",
        )
    }

    fn validate_firmware(&self) -> Result<(), EmulatorError> {
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

    fn validate_dram(&self) -> Result<(), EmulatorError> {
        non_zero(self.dram.capacity_mib.into(), "dram.capacity_mib")?;
        non_zero(self.dram.bandwidth_mb_s.into(), "dram.bandwidth_mb_s")?;
        let need = self.firmware_dram_bytes()? as u64;
        let have = u64::from(self.dram.capacity_mib) << 20;
        check(need <= have, "dram.capacity_mib", || {
            format!(
                "the firmware needs {need} bytes ({} MiB) for this configuration, more than \
                 the capacity (got {} MiB)",
                need.div_ceil(1 << 20),
                self.dram.capacity_mib
            )
        })
    }
}

/// The shipped Cosmos+ description (hw-configs/cosmos-plus.toml), compiled in so
/// [`HwConfig::cosmos_plus`] needs no file.
pub const COSMOS_PLUS_TOML: &str = include_str!("../../hw-configs/cosmos-plus.toml");
const NEWPORT_TOML: &str = include_str!("../../hw-configs/newport.toml");

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn cosmos_plus_parses_and_validates() {
        let c = HwConfig::cosmos_plus();
        assert_eq!(c.nand.channels, 8);
        assert_eq!(c.nand.ways, 8);
        assert_eq!(c.nand.page_size_bytes, 16384);
        assert_eq!(c.pcie.generation, 2);
        assert_eq!(c.pcie.lanes, 8);
        assert_eq!(c.cores.count, 2);
        assert!(c.nand.geometry().page_count() <= 1 << 24);
        assert!(c.firmware_dram_bytes().unwrap() as u64 <= u64::from(c.dram.capacity_mib) << 20);
        let n = HwConfig::newport();
        assert_eq!(n.device.name, "newport");
        assert!(n.cores.isp_cores > 0 && n.validate().is_ok());
    }

    /// Every `hw-configs/*.toml` the project ships, in path order (shared with the validation
    /// tests).
    pub(crate) fn shipped_configs() -> Vec<(std::path::PathBuf, HwConfig)> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../hw-configs");
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .map(|p| {
                let c = HwConfig::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                (p, c)
            })
            .collect()
    }

    #[test]
    fn every_shipped_config_parses_validates_and_round_trips() {
        let configs = shipped_configs();
        let names: Vec<_> = configs
            .iter()
            .map(|(_, c)| c.device.name.as_str())
            .collect();
        for expected in ["cosmos-plus", "gen4-ssd", "newport", "smartssd-fpga"] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
        for (path, c) in &configs {
            let stem = path.file_stem().unwrap().to_str().unwrap();
            assert_eq!(c.device.name, stem, "device.name matches the file name");
            let text = toml::to_string(c).unwrap();
            assert_eq!(&HwConfig::from_toml_str(&text).unwrap(), c, "{stem}");
            let dram = c.firmware_dram_bytes().unwrap() as u64;
            assert!(dram <= u64::from(c.dram.capacity_mib) << 20, "{stem}");
        }
        let gen4 = &configs
            .iter()
            .find(|(_, c)| c.device.name == "gen4-ssd")
            .unwrap()
            .1;
        assert!(!gen4.firmware.isp, "the commodity SSD has no ISP");
        assert!(HwConfig::cosmos_plus().firmware.isp, "isp defaults to true");
        assert!(
            HwConfig::cosmos_plus().p2p.is_none(),
            "p2p defaults to absent"
        );
        let smartssd = &configs
            .iter()
            .find(|(_, c)| c.device.name == "smartssd-fpga")
            .unwrap()
            .1;
        let p2p = smartssd
            .p2p
            .as_ref()
            .expect("the FPGA CSD has a [p2p] link");
        assert_eq!((p2p.generation, p2p.lanes), (3, 4));
        assert!(smartssd.firmware.isp);
    }

    #[test]
    fn every_shipped_parameter_has_a_source_comment() {
        // Each `key = value` line must follow a comment (its source or reasoning), directly or
        // as part of a commented group of keys.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../hw-configs");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let mut commented = false;
            for line in text.lines() {
                let t = line.trim();
                if t.starts_with('#') {
                    commented = true;
                } else if t.is_empty() || t.starts_with('[') {
                    commented = false;
                } else {
                    assert!(commented, "{}: `{t}` has no source comment", path.display());
                }
            }
        }
    }

    #[test]
    fn round_trips_through_toml() {
        let c = HwConfig::cosmos_plus();
        let text = toml::to_string(&c).unwrap();
        assert_eq!(HwConfig::from_toml_str(&text).unwrap(), c);
    }

    #[test]
    fn load_reads_a_file_and_names_a_missing_one() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../hw-configs/cosmos-plus.toml"
        );
        assert_eq!(HwConfig::load(path).unwrap(), HwConfig::cosmos_plus());
        let err = HwConfig::load("/nonexistent/x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/x.toml"), "{err}");
    }

    /// The shipped text with one `key = value` line of `section` replaced.
    fn patched(section: &str, key: &str, value: &str) -> String {
        let mut out = String::new();
        let mut current = String::new();
        let mut replaced = false;
        for line in COSMOS_PLUS_TOML.lines() {
            let t = line.trim_start();
            if t.starts_with('[') {
                current = t.trim_matches(|c| c == '[' || c == ']').to_string();
            }
            let is_key = t
                .split_once('=')
                .is_some_and(|(k, _)| k.trim() == key && !t.starts_with('#'));
            if current == section && is_key {
                out.push_str(&format!("{key} = {value}\n"));
                replaced = true;
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        assert!(replaced, "{section}.{key} not found in cosmos-plus.toml");
        out
    }

    fn rejects(section: &str, key: &str, value: &str, expect: &str) {
        let err = HwConfig::from_toml_str(&patched(section, key, value))
            .expect_err(&format!("{section}.{key} = {value} must be rejected"))
            .to_string();
        let field = format!("{section}.{key}");
        assert!(
            err.contains(&field) || err.contains(key),
            "error for {field} = {value} does not name the field: {err}"
        );
        assert!(err.contains(expect), "error for {field} = {value}: {err}");
    }

    #[test]
    fn every_invalid_field_is_rejected_with_its_name() {
        rejects("device", "name", "\"  \"", "must not be empty");
        rejects("nand", "channels", "0", "greater than 0");
        rejects("nand", "ways", "0", "greater than 0");
        rejects("nand", "dies_per_way", "0", "greater than 0");
        rejects("nand", "blocks_per_die", "0", "greater than 0");
        rejects("nand", "blocks_per_die", "4000000000", "2^32");
        rejects("nand", "pages_per_block", "0", "greater than 0");
        rejects(
            "nand",
            "page_size_bytes",
            "1000",
            "multiple of 512 (got 1000)",
        );
        rejects("nand", "page_size_bytes", "0", "multiple of 512");
        rejects("nand", "t_read_ns", "0", "between 1 and");
        rejects("nand", "t_program_ns", "0", "between 1 and");
        rejects("nand", "t_erase_ns", "20000000000", "between 1 and");
        rejects("nand", "channel_rate_mb_s", "0", "greater than 0");
        rejects("nand", "command_overhead_ns", "20000000000", "at most");
        rejects("pcie", "generation", "0", "between 1 and 5 (got 0)");
        rejects("pcie", "generation", "6", "between 1 and 5 (got 6)");
        rejects("pcie", "lanes", "3", "(got 3)");
        rejects("pcie", "max_payload_bytes", "100", "power of two (got 100)");
        rejects("pcie", "max_payload_bytes", "64", "between 128 and 4096");
        rejects("pcie", "tlp_overhead_bytes", "0", "between 1 and 128");
        rejects("pcie", "dma_read_setup_ns", "20000000000", "at most");
        rejects("pcie", "posted_write_setup_ns", "20000000000", "at most");
        rejects("controller", "doorbell_ns", "20000000000", "at most");
        rejects("controller", "interrupt_ns", "20000000000", "at most");
        rejects("cores", "count", "0", "between 1 and 64");
        rejects("cores", "clock_mhz", "0", "between 1 and");
        rejects("cores", "isp_cores", "2", "between 0 and 1");
        rejects("cores", "cycles_per_command", "2000000000", "at most");
        rejects("cores", "cycles_per_flash_op", "2000000000", "at most");
        rejects("cores", "cycles_per_page_lookup", "2000000000", "at most");
        rejects("cores", "cycles_per_page_scanned", "2000000000", "at most");
        rejects("cores", "cycles_per_row_gathered", "2000000000", "at most");
        rejects("cores", "cycles_per_edge_sampled", "2000000000", "at most");
        rejects("cores", "cycles_per_target", "2000000000", "at most");
        rejects("cores", "cycles_per_node_added", "2000000000", "at most");
        rejects("cores", "cycles_per_destination", "2000000000", "at most");
        rejects("cores", "cycles_per_stale_repeat", "2000000000", "at most");
        rejects("cores", "cycles_per_edge_emitted", "2000000000", "at most");
        rejects("cores", "cycles_per_edge_drawn", "2000000000", "at most");
        rejects("cores", "cycles_per_radix_pass", "2000000000", "at most");
        rejects("cores", "cycles_per_kib_copied", "2000000000", "at most");
        rejects("cores", "cycles_per_sort_key_move", "2000000000", "at most");
        rejects("cores", "cycles_per_block_scanned", "2000000000", "at most");
        rejects("cores", "cycles_per_poll", "2000000000", "at most");
        rejects(
            "cores",
            "cycles_per_parked_command",
            "2000000000",
            "at most",
        );
        rejects(
            "cores",
            "cycles_per_kib_flash_read",
            "2000000000",
            "at most",
        );
        rejects(
            "cores",
            "cycles_per_kib_flash_program",
            "2000000000",
            "at most",
        );
        rejects("dram", "capacity_mib", "0", "greater than 0");
        rejects("dram", "bandwidth_mb_s", "0", "greater than 0");
        rejects("dram", "capacity_mib", "1", "the firmware needs");
        rejects("firmware", "page_buffer_pages", "0", "greater than 0");
        rejects("firmware", "isp_slots", "0", "between 1 and");
        rejects("firmware", "isp_slots", "255", "between 1 and");
        // Cosmos+ has two sampling lanes: 2..=512 pages.
        rejects("firmware", "isp_window_pages", "1", "between 2 and 512");
        rejects("firmware", "isp_window_pages", "513", "between 2 and 512");
        rejects("firmware", "max_targets", "0", "greater than 0");
        rejects("firmware", "max_fanout", "0", "between 1 and 1024");
        rejects("firmware", "max_subgraph_nodes", "0", "greater than 0");
        rejects("firmware", "max_subgraph_edges", "0", "greater than 0");
        rejects("firmware", "max_transfer_bytes", "5000", "power of two");
        rejects("firmware", "max_transfer_bytes", "2048", "power of two");
        rejects(
            "firmware",
            "over_provisioning_percent",
            "50",
            "between 0 and 49",
        );
        rejects("firmware", "page_buffer_pages", "1004", "multiple");
        rejects("firmware", "page_buffer_pages", "8", "between 16 and 32768");
        rejects("firmware", "max_fanout", "2000", "between 1 and 1024");
        rejects("firmware", "max_targets", "3000000", "max_subgraph_nodes");
        rejects("firmware", "max_subgraph_edges", "300000000", "2^28");
        rejects(
            "firmware",
            "max_transfer_bytes",
            "1048576",
            "fewer than 63 flash pages",
        );
        rejects(
            "firmware",
            "block_size_bytes",
            "1000",
            "power of two (got 1000)",
        );
        rejects(
            "firmware",
            "block_size_bytes",
            "256",
            "between 512 and 16384",
        );
        rejects(
            "firmware",
            "block_size_bytes",
            "32768",
            "between 512 and 16384",
        );
    }

    #[test]
    fn unknown_missing_and_mistyped_fields_are_named() {
        let unknown = COSMOS_PLUS_TOML.replace("[nand]", "[nand]\nt_read_us = 5");
        let err = HwConfig::from_toml_str(&unknown).unwrap_err().to_string();
        assert!(err.contains("t_read_us"), "{err}");

        let unknown_section = format!("{COSMOS_PLUS_TOML}\n[gpu]\ncount = 1\n");
        let err = HwConfig::from_toml_str(&unknown_section)
            .unwrap_err()
            .to_string();
        assert!(err.contains("gpu"), "{err}");

        let missing: String = COSMOS_PLUS_TOML
            .lines()
            .filter(|l| !l.trim_start().starts_with("t_erase_ns"))
            .map(|l| format!("{l}\n"))
            .collect();
        let err = HwConfig::from_toml_str(&missing).unwrap_err().to_string();
        assert!(err.contains("t_erase_ns"), "{err}");

        let err = HwConfig::from_toml_str(&patched("pcie", "lanes", "\"eight\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("lanes"), "{err}");
    }
}
