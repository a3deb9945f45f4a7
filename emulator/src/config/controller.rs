//! `[controller]`: the NVMe controller's fixed costs.

use serde::{Deserialize, Serialize};

use super::rules::{MAX_LATENCY_NS, at_most};
use crate::error::EmulatorError;

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

impl ControllerConfig {
    /// Checks every field of the section.
    pub(super) fn validate(&self) -> Result<(), EmulatorError> {
        at_most(self.doorbell_ns, MAX_LATENCY_NS, "controller.doorbell_ns")?;
        at_most(self.interrupt_ns, MAX_LATENCY_NS, "controller.interrupt_ns")
    }
}
