//! The driver's NVMe basics, shared by every module that builds commands: the queues and the
//! namespace it addresses, and a completion's status turned into an error.

use sagessd_abi::nvme::VendorStatus;

use crate::error::DriverError;
use crate::transport::Completion;

/// The admin submission queue.
pub const ADMIN_QUEUE: u16 = 0;
/// The I/O submission queue the driver uses.
pub const IO_QUEUE: u16 = 1;
/// The namespace the driver addresses.
pub const NAMESPACE_ID: u32 = 1;

/// Turns a completion with an error status into [`DriverError::Command`].
pub(crate) fn check(sq_id: u16, opcode: u8, c: Completion) -> Result<Completion, DriverError> {
    let status = c.cqe.status();
    if status.is_success() {
        Ok(c)
    } else {
        Err(DriverError::Command {
            opcode,
            admin: sq_id == ADMIN_QUEUE,
            status,
            vendor: VendorStatus::from_status(status),
            result: c.cqe.result.get(),
        })
    }
}
