//! [`LocalTransport`]: an in-process emulated sagessd SSD behind the [`Transport`] trait.

use sagessd_abi::nvme::SubmissionEntry;
use sagessd_emulator::{HwConfig, Ssd};

use crate::transport::{Completion, DeviceCounters, Transport, TransportError};

/// A transport to an emulated SSD living in this process. Time is the emulator's virtual clock:
/// every completion carries its modelled submission and completion times.
#[derive(Debug)]
pub struct LocalTransport {
    ssd: Ssd,
}

impl LocalTransport {
    /// Wraps an emulated SSD.
    pub fn new(ssd: Ssd) -> Self {
        Self { ssd }
    }

    /// Builds a fresh emulated SSD from a hardware description and wraps it.
    pub fn from_config(config: &HwConfig) -> Result<Self, TransportError> {
        Ok(Self::new(
            Ssd::new(config).map_err(|e| TransportError::Device(Box::new(e)))?,
        ))
    }

    /// The emulated SSD (for its statistics and clock).
    pub fn ssd(&self) -> &Ssd {
        &self.ssd
    }

    /// The emulated SSD, mutably.
    pub fn ssd_mut(&mut self) -> &mut Ssd {
        &mut self.ssd
    }

    /// Gives the emulated SSD back.
    pub fn into_ssd(self) -> Ssd {
        self.ssd
    }
}

impl Transport for LocalTransport {
    fn submit(
        &mut self,
        sq_id: u16,
        sqe: SubmissionEntry,
        data: Vec<u8>,
    ) -> Result<(), TransportError> {
        self.ssd
            .submit(sq_id, sqe, data)
            .map_err(|e| TransportError::Device(Box::new(e)))
    }

    fn reap(&mut self) -> Result<Option<Completion>, TransportError> {
        let done = self
            .ssd
            .reap()
            .map_err(|e| TransportError::Device(Box::new(e)))?;
        Ok(done.map(completion))
    }

    fn reap_until(&mut self, t_ns: u64) -> Result<Option<Completion>, TransportError> {
        let done = self
            .ssd
            .reap_until(t_ns)
            .map_err(|e| TransportError::Device(Box::new(e)))?;
        Ok(done.map(completion))
    }

    fn now_ns(&self) -> Option<u64> {
        Some(self.ssd.now_ns())
    }

    fn device_counters(&self) -> Option<DeviceCounters> {
        let s = self.ssd.stats();
        Some(DeviceCounters {
            nand_pages_read: s.nand_pages_read,
            nand_pages_programmed: s.nand_pages_programmed,
            pcie_h2c_bytes: s.pcie_h2c_bytes,
            pcie_c2h_bytes: s.pcie_c2h_bytes,
            commands: s.commands_completed,
        })
    }

    fn drop_caches(&mut self) -> bool {
        self.ssd.drop_caches();
        true
    }
}

/// The driver's view of an emulator completion, with its modelled times.
fn completion(c: sagessd_emulator::Completed) -> Completion {
    Completion {
        cqe: c.cqe,
        data: c.data,
        submitted_at_ns: Some(c.submitted_at_ns),
        completed_at_ns: Some(c.completed_at_ns),
    }
}
