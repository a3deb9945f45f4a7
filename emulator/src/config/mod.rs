//! The hardware description of an emulated SSD, loaded from TOML (`hw-configs/*.toml`).
//!
//! One [`HwConfig`] describes everything the timing model needs: the NAND array, the PCIe link,
//! the controller's fixed costs, the embedded cores, the DRAM, and the firmware's sizing, each
//! section in a module of its own with its checks. Every field is mandatory (except those
//! documented as optional) and unknown fields are rejected, so a typo never silently falls back
//! to a default. [`HwConfig::validate`] checks every field and names the offending one in its
//! error, e.g. `invalid hw config field nand.page_size_bytes: must be a multiple of 512 (got
//! 1000)`.

mod controller;
mod core_timing;
mod cores;
mod dram;
mod firmware;
mod nand;
mod pcie;
mod rules;
#[cfg(test)]
pub(crate) mod tests;

use std::path::Path;

use sagessd_firmware::MAX_ISP_LANES;
use serde::{Deserialize, Serialize};

pub use self::controller::ControllerConfig;
pub use self::core_timing::CoreTimingConfig;
pub use self::cores::CoresConfig;
pub use self::dram::DramConfig;
pub use self::firmware::FirmwareSection;
pub use self::nand::NandConfig;
pub use self::pcie::{P2pConfig, PcieConfig};
use self::rules::check;
use crate::error::EmulatorError;
use crate::host_stack::HostStackConfig;
use crate::trainer_model::TrainerConfig;

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

/// `[device]`: what the device is called.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Human-readable name, reported in statistics.
    pub name: String,
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

    /// Checks every field; the error names the first offending field and the value given.
    pub fn validate(&self) -> Result<(), EmulatorError> {
        check(!self.device.name.trim().is_empty(), "device.name", || {
            "must not be empty".to_string()
        })?;
        self.nand.validate()?;
        self.pcie.validate()?;
        self.controller.validate()?;
        self.cores.validate()?;
        self.validate_firmware()?;
        self.dram.validate(self.firmware_dram_bytes()? as u64)?;
        if let Some(p2p) = &self.p2p {
            p2p.validate()?;
            check(self.firmware.isp, "p2p", || {
                "a [p2p] link needs in-storage processing (firmware.isp = true)".to_string()
            })?;
        }
        if let Some(timing) = &self.core_timing {
            timing.validate()?;
        }
        self.trainer.validate()?;
        self.host.validate()
    }
}

/// The shipped Cosmos+ description (hw-configs/cosmos-plus.toml), compiled in so
/// [`HwConfig::cosmos_plus`] needs no file.
pub const COSMOS_PLUS_TOML: &str = include_str!("../../../hw-configs/cosmos-plus.toml");
const NEWPORT_TOML: &str = include_str!("../../../hw-configs/newport.toml");
