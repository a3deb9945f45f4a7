//! The transport abstraction: how NVMe commands reach a device and how their completions return.
//!
//! A transport moves submission entries plus one data buffer each to a device, and hands back
//! completion entries plus the (possibly device-written) buffer. It knows nothing about command
//! semantics; command-id allocation, splitting and error decoding live in
//! [`crate::Device`]. Implementations: [`crate::LocalTransport`] (an in-process emulated SSD);
//! NVMe/TCP and Linux passthrough transports plug in behind the same trait.

use sagessd_abi::nvme::{CompletionEntry, SubmissionEntry};

/// One completed command as a transport reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The completion queue entry (status, result dwords, submission queue and command id).
    pub cqe: CompletionEntry,
    /// The command's data buffer after completion: for a device→host command, the bytes the
    /// device wrote (the buffer has the length the host asked for); for a host→device command,
    /// the payload the host sent.
    pub data: Vec<u8>,
    /// When the command was submitted, in the transport's modelled time (virtual nanoseconds),
    /// if the transport models time.
    pub submitted_at_ns: Option<u64>,
    /// When the command completed, in the transport's modelled time, if it models time.
    pub completed_at_ns: Option<u64>,
}

impl Completion {
    /// The submission queue the command came from.
    pub fn sq_id(&self) -> u16 {
        self.cqe.sq_id.get()
    }

    /// The command identifier.
    pub fn cid(&self) -> u16 {
        self.cqe.cid.get()
    }
}

/// Cumulative counters a transport can read from the device itself (not every transport can).
/// All figures are since the device was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// NAND pages read from flash (by host reads, ISP and garbage collection).
    pub nand_pages_read: u64,
    /// NAND pages programmed.
    pub nand_pages_programmed: u64,
    /// Bytes moved host→device over the PCIe link (payload as the device's link model counts it).
    pub pcie_h2c_bytes: u64,
    /// Bytes moved device→host over the PCIe link.
    pub pcie_c2h_bytes: u64,
    /// Commands the device completed.
    pub commands: u64,
}

impl DeviceCounters {
    /// The counts accumulated since `earlier` (saturating at zero).
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            nand_pages_read: self.nand_pages_read.saturating_sub(earlier.nand_pages_read),
            nand_pages_programmed: self
                .nand_pages_programmed
                .saturating_sub(earlier.nand_pages_programmed),
            pcie_h2c_bytes: self.pcie_h2c_bytes.saturating_sub(earlier.pcie_h2c_bytes),
            pcie_c2h_bytes: self.pcie_c2h_bytes.saturating_sub(earlier.pcie_c2h_bytes),
            commands: self.commands.saturating_sub(earlier.commands),
        }
    }
}

/// A failure of the transport itself (not an NVMe status, which arrives in a [`Completion`]).
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The device or link refused or lost the command.
    #[error("transport failure: {0}")]
    Device(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// A completion arrived for a command the caller did not expect.
    #[error("unexpected completion for queue {sq_id} command {cid}")]
    UnexpectedCompletion {
        /// Its submission queue.
        sq_id: u16,
        /// Its command identifier.
        cid: u16,
    },
    /// The caller asked for completions by a point in modelled time, and the transport does not
    /// model time (real hardware cannot look ahead).
    #[error("this transport does not model time")]
    NoModelledTime,
    /// The caller waited for a command but the transport has nothing outstanding.
    #[error("waited for queue {sq_id} command {cid}, but no command is outstanding")]
    NothingOutstanding {
        /// The awaited command's submission queue.
        sq_id: u16,
        /// The awaited command's identifier.
        cid: u16,
    },
}

/// A way to send NVMe commands to one device.
///
/// Queue 0 is the admin queue; I/O queues are numbered from 1. Every command carries one data
/// buffer: the payload for a host→device command, or a buffer of the wanted length for a
/// device→host command (the data-direction bits of the opcode say which).
pub trait Transport {
    /// Submits `sqe` (its command id already set by the caller) on queue `sq_id` with its data
    /// buffer. Returns once the command is handed over; its completion comes from
    /// [`Self::reap`].
    fn submit(
        &mut self,
        sq_id: u16,
        sqe: SubmissionEntry,
        data: Vec<u8>,
    ) -> Result<(), TransportError>;

    /// Returns the next completion, waiting for one (in the transport's notion of time) while
    /// commands are outstanding; `Ok(None)` when no command is outstanding.
    fn reap(&mut self) -> Result<Option<Completion>, TransportError>;

    /// For transports that model time: the next completion the host learns of no later than
    /// `t_ns`, having simulated up to `t_ns` and no further; `Ok(None)` if nothing completes by
    /// then. Other transports answer [`TransportError::NoModelledTime`].
    fn reap_until(&mut self, t_ns: u64) -> Result<Option<Completion>, TransportError> {
        let _ = t_ns;
        Err(TransportError::NoModelledTime)
    }

    /// The transport's current modelled time in nanoseconds, if it models time (an emulator's
    /// virtual clock); `None` for transports to real hardware.
    fn now_ns(&self) -> Option<u64> {
        None
    }

    /// Device-side counters (flash and link), if the transport can read them.
    fn device_counters(&self) -> Option<DeviceCounters> {
        None
    }

    /// Makes the device forget the pages it caches (its controller page buffer), so that a
    /// measurement starts cold; only an in-process emulator can. Returns whether it did.
    fn drop_caches(&mut self) -> bool {
        false
    }

    /// Convenience for callers with nothing else outstanding on this transport: submits one
    /// command and waits for its completion. A completion for any other command is an error
    /// ([`TransportError::UnexpectedCompletion`]); callers that keep several commands in flight
    /// use [`crate::Device`], which multiplexes completions.
    fn execute(
        &mut self,
        sq_id: u16,
        sqe: SubmissionEntry,
        data: Vec<u8>,
    ) -> Result<Completion, TransportError> {
        let cid = sqe.cid.get();
        self.submit(sq_id, sqe, data)?;
        match self.reap()? {
            Some(c) if c.sq_id() == sq_id && c.cid() == cid => Ok(c),
            Some(c) => Err(TransportError::UnexpectedCompletion {
                sq_id: c.sq_id(),
                cid: c.cid(),
            }),
            None => Err(TransportError::NothingOutstanding { sq_id, cid }),
        }
    }
}

impl<T: Transport + ?Sized> Transport for &mut T {
    fn submit(
        &mut self,
        sq_id: u16,
        sqe: SubmissionEntry,
        data: Vec<u8>,
    ) -> Result<(), TransportError> {
        (**self).submit(sq_id, sqe, data)
    }

    fn reap(&mut self) -> Result<Option<Completion>, TransportError> {
        (**self).reap()
    }

    fn reap_until(&mut self, t_ns: u64) -> Result<Option<Completion>, TransportError> {
        (**self).reap_until(t_ns)
    }

    fn now_ns(&self) -> Option<u64> {
        (**self).now_ns()
    }

    fn device_counters(&self) -> Option<DeviceCounters> {
        (**self).device_counters()
    }

    fn drop_caches(&mut self) -> bool {
        (**self).drop_caches()
    }
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn submit(
        &mut self,
        sq_id: u16,
        sqe: SubmissionEntry,
        data: Vec<u8>,
    ) -> Result<(), TransportError> {
        (**self).submit(sq_id, sqe, data)
    }

    fn reap(&mut self) -> Result<Option<Completion>, TransportError> {
        (**self).reap()
    }

    fn reap_until(&mut self, t_ns: u64) -> Result<Option<Completion>, TransportError> {
        (**self).reap_until(t_ns)
    }

    fn now_ns(&self) -> Option<u64> {
        (**self).now_ns()
    }

    fn device_counters(&self) -> Option<DeviceCounters> {
        (**self).device_counters()
    }

    fn drop_caches(&mut self) -> bool {
        (**self).drop_caches()
    }
}
