//! The driver's one error type.

use sagessd_abi::nvme::{Status, VendorStatus, admin_opcode, io_opcode, sct};
use sagessd_abi::subgraph::SubgraphError;

use crate::transport::TransportError;

/// Everything that can go wrong between a driver call and the device.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The transport failed to carry a command or its completion.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The device completed a command with an error status.
    #[error("{} failed: {} (result dword 0 = {result})", opcode_name(*.opcode, *.admin), describe_status(*.status))]
    Command {
        /// The command's opcode.
        opcode: u8,
        /// Whether it was an admin command (opcodes are per queue type).
        admin: bool,
        /// The NVMe status it completed with.
        status: Status,
        /// The sagessd vendor status, when the status is one (status code type 7).
        vendor: Option<VendorStatus>,
        /// Completion dword 0 (for `BufferTooSmall`, the size needed).
        result: u32,
    },
    /// A caller's argument cannot be turned into a valid command.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Identify data is missing a field the driver needs.
    #[error("identify data unusable: {0}")]
    Identify(&'static str),
    /// The device returned bytes that are not a valid sampled subgraph.
    #[error("device returned an invalid subgraph: {0:?}")]
    BadSubgraph(SubgraphError),
}

impl DriverError {
    /// The NVMe status, if this is a command failure.
    pub fn status(&self) -> Option<Status> {
        match self {
            Self::Command { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The decoded vendor status, if this is a command failure with a sagessd vendor status.
    pub fn vendor_status(&self) -> Option<VendorStatus> {
        match self {
            Self::Command { vendor, .. } => *vendor,
            _ => None,
        }
    }
}

/// A human-readable name for an opcode.
pub fn opcode_name(opcode: u8, admin: bool) -> &'static str {
    if admin {
        return match opcode {
            admin_opcode::IDENTIFY => "Identify",
            _ => "admin command",
        };
    }
    match opcode {
        io_opcode::FLUSH => "Flush",
        io_opcode::WRITE => "Write",
        io_opcode::READ => "Read",
        io_opcode::WRITE_ZEROES => "Write Zeroes",
        io_opcode::DATASET_MANAGEMENT => "Dataset Management",
        io_opcode::GRAPH_ATTACH => "GRAPH_ATTACH",
        io_opcode::NS_SUBMIT => "NS_SUBMIT",
        io_opcode::NS_COLLECT => "NS_COLLECT",
        _ => "I/O command",
    }
}

/// A human-readable description of an NVMe status, vendor statuses decoded.
pub fn describe_status(status: Status) -> String {
    let dnr = if status.dnr { ", do not retry" } else { "" };
    if let Some(v) = VendorStatus::from_status(status) {
        return format!("vendor status {v:?} (sc {:#04x}{dnr})", status.sc);
    }
    let name = match (status.sct, status.sc) {
        (sct::GENERIC, 0x00) => "Successful Completion",
        (sct::GENERIC, 0x01) => "Invalid Command Opcode",
        (sct::GENERIC, 0x02) => "Invalid Field in Command",
        (sct::GENERIC, 0x04) => "Data Transfer Error",
        (sct::GENERIC, 0x06) => "Internal Error",
        (sct::GENERIC, 0x0B) => "Invalid Namespace or Format",
        (sct::GENERIC, 0x0C) => "Command Sequence Error",
        (sct::GENERIC, 0x80) => "LBA Out of Range",
        (sct::GENERIC, 0x81) => "Capacity Exceeded",
        (sct::MEDIA, 0x80) => "Write Fault",
        (sct::MEDIA, 0x81) => "Unrecovered Read Error",
        _ => "status",
    };
    format!("{name} (sct {:#x}, sc {:#04x}{dnr})", status.sct, status.sc)
}
