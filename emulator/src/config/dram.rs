//! `[dram]`: the controller's DRAM.

use serde::{Deserialize, Serialize};

use super::rules::{check, non_zero};
use crate::error::EmulatorError;

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

impl DramConfig {
    /// Checks every field of the section; `firmware_needs` is the arena the firmware needs
    /// for the description ([`super::HwConfig::firmware_dram_bytes`]), which must fit.
    pub(super) fn validate(&self, firmware_needs: u64) -> Result<(), EmulatorError> {
        non_zero(self.capacity_mib.into(), "dram.capacity_mib")?;
        non_zero(self.bandwidth_mb_s.into(), "dram.bandwidth_mb_s")?;
        let have = u64::from(self.capacity_mib) << 20;
        check(firmware_needs <= have, "dram.capacity_mib", || {
            format!(
                "the firmware needs {firmware_needs} bytes ({} MiB) for this configuration, more \
                 than the capacity (got {} MiB)",
                firmware_needs.div_ceil(1 << 20),
                self.capacity_mib
            )
        })
    }
}
