//! NVMe queue entries, status codes, opcodes, and the parsed commands the device serves.
//!
//! Layouts follow the NVM Express Base Specification 2.0 (§4.2 submission queue entry, §4.6
//! completion queue entry) and the NVM Command Set Specification 1.0 (§3 I/O commands).
//! Vendor-specific I/O opcodes (0x80–0xFF) obey the data-direction convention of the base
//! specification: bits 1:0 of the opcode say whether data moves host→controller (`01`),
//! controller→host (`10`), both (`11`) or not at all (`00`). Linux derives the DMA direction of a
//! passthrough command from those bits, so one passthrough command moves data one way only.

use core::mem::{offset_of, size_of};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A 64-byte NVMe submission queue entry, exactly as it sits in a submission queue.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct SubmissionEntry {
    /// CDW0 bits 7:0: the opcode.
    pub opcode: u8,
    /// CDW0 bits 15:8: fused operation (1:0) and PRP/SGL selection (7:6).
    pub flags: u8,
    /// CDW0 bits 31:16: the command identifier, unique within its submission queue.
    pub cid: U16,
    /// Namespace identifier.
    pub nsid: U32,
    /// Command dword 2 (command specific).
    pub cdw2: U32,
    /// Command dword 3 (command specific).
    pub cdw3: U32,
    /// Metadata pointer.
    pub mptr: U64,
    /// Data pointer, first half: PRP entry 1 (or the first half of an SGL descriptor).
    pub prp1: U64,
    /// Data pointer, second half: PRP entry 2.
    pub prp2: U64,
    /// Command dword 10 (command specific).
    pub cdw10: U32,
    /// Command dword 11 (command specific).
    pub cdw11: U32,
    /// Command dword 12 (command specific).
    pub cdw12: U32,
    /// Command dword 13 (command specific).
    pub cdw13: U32,
    /// Command dword 14 (command specific).
    pub cdw14: U32,
    /// Command dword 15 (command specific).
    pub cdw15: U32,
}

const _: () = {
    assert!(size_of::<SubmissionEntry>() == 64);
    assert!(offset_of!(SubmissionEntry, cid) == 2);
    assert!(offset_of!(SubmissionEntry, nsid) == 4);
    assert!(offset_of!(SubmissionEntry, mptr) == 16);
    assert!(offset_of!(SubmissionEntry, prp1) == 24);
    assert!(offset_of!(SubmissionEntry, prp2) == 32);
    assert!(offset_of!(SubmissionEntry, cdw10) == 40);
    assert!(offset_of!(SubmissionEntry, cdw15) == 60);
};

impl SubmissionEntry {
    /// A command with the given opcode, command identifier and namespace; every other field zero.
    pub fn new(opcode: u8, cid: u16, nsid: u32) -> Self {
        Self {
            opcode,
            cid: cid.into(),
            nsid: nsid.into(),
            ..Self::default()
        }
    }

    /// A Write (`write`, opcode 0x01) or Read (opcode 0x02) of `block_count` logical blocks
    /// starting at `slba`; `block_count` must be ≥ 1 (it is sent 0-based).
    pub fn read_write(write: bool, cid: u16, nsid: u32, slba: u64, block_count: u32) -> Self {
        let opcode = if write {
            io_opcode::WRITE
        } else {
            io_opcode::READ
        };
        let mut sqe = Self::new(opcode, cid, nsid);
        sqe.cdw10 = (slba as u32).into();
        sqe.cdw11 = ((slba >> 32) as u32).into();
        sqe.cdw12 = block_count.saturating_sub(1).into();
        sqe
    }

    /// A Write Zeroes (opcode 0x08) of `block_count` logical blocks starting at `slba`
    /// (`block_count` ≥ 1, sent 0-based), with its Deallocate bit (CDW12 bit 25) if
    /// `deallocate`.
    pub fn write_zeroes(
        cid: u16,
        nsid: u32,
        slba: u64,
        block_count: u32,
        deallocate: bool,
    ) -> Self {
        let mut sqe = Self::read_write(true, cid, nsid, slba, block_count);
        sqe.opcode = io_opcode::WRITE_ZEROES;
        sqe.cdw12 = (sqe.cdw12.get() | u32::from(deallocate) << 25).into();
        sqe
    }

    /// A sagessd vendor command moving `data_len_bytes`, with `cdw13` command specific (the tag
    /// of `NS_COLLECT`). The length goes in twice: CDW10 is its dword count (NDT, rounded up:
    /// host buffers should be a multiple of 4 bytes), which the firmware uses; CDW12 bits 15:0
    /// are its count of 4 KiB units, 0-based, exactly where a Read or Write of 4 KiB blocks
    /// keeps its block count, so that controllers whose DMA engine takes a command's length
    /// from CDW12 (Cosmos+ OpenSSD's) move vendor payloads like reads and writes.
    pub fn vendor(opcode: u8, cid: u16, nsid: u32, data_len_bytes: u32, cdw13: u32) -> Self {
        let mut sqe = Self::new(opcode, cid, nsid);
        sqe.cdw10 = data_len_bytes.div_ceil(4).into();
        sqe.cdw12 = (data_len_bytes.div_ceil(4096).saturating_sub(1) & 0xFFFF).into();
        sqe.cdw13 = cdw13.into();
        sqe
    }

    /// An NS_COLLECT that discards job `tag` once it has finished, returning no data.
    pub fn ns_discard(cid: u16, nsid: u32, tag: u32) -> Self {
        let mut sqe = Self::vendor(io_opcode::NS_COLLECT, cid, nsid, 0, tag);
        sqe.cdw15 = 2.into();
        sqe
    }

    /// The fused-operation bits (CDW0 9:8); non-zero means part of a fused pair.
    pub fn fused(&self) -> u8 {
        self.flags & 0x3
    }
}

/// A 16-byte NVMe completion queue entry.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct CompletionEntry {
    /// Dword 0: command-specific result.
    pub result: U32,
    /// Dword 1: command-specific result (upper half).
    pub result_hi: U32,
    /// The submission queue head pointer after this command was consumed.
    pub sq_head: U16,
    /// The submission queue this command came from.
    pub sq_id: U16,
    /// The command identifier of the completed command.
    pub cid: U16,
    /// Phase tag (bit 0) and status field (bits 15:1).
    pub status: U16,
}

const _: () = {
    assert!(size_of::<CompletionEntry>() == 16);
    assert!(offset_of!(CompletionEntry, result_hi) == 4);
    assert!(offset_of!(CompletionEntry, sq_head) == 8);
    assert!(offset_of!(CompletionEntry, sq_id) == 10);
    assert!(offset_of!(CompletionEntry, cid) == 12);
    assert!(offset_of!(CompletionEntry, status) == 14);
};

impl CompletionEntry {
    /// A completion for command `cid` of queue `sq_id` with `status` and result dword 0.
    pub fn new(sq_id: u16, cid: u16, status: Status, result: u32) -> Self {
        Self {
            result: result.into(),
            sq_id: sq_id.into(),
            cid: cid.into(),
            status: (status.to_field() << 1).into(),
            ..Self::default()
        }
    }

    /// The status of this completion (phase tag ignored).
    pub fn status(&self) -> Status {
        Status::from_field(self.status.get() >> 1)
    }
}

/// Status code types (SCT, status field bits 11:9 in the 15-bit field).
pub mod sct {
    /// Generic command status.
    pub const GENERIC: u8 = 0;
    /// Command-specific status.
    pub const COMMAND_SPECIFIC: u8 = 1;
    /// Media and data integrity errors.
    pub const MEDIA: u8 = 2;
    /// Vendor specific: the sagessd codes of [`super::VendorStatus`].
    pub const VENDOR: u8 = 7;
}

/// An NVMe status: status code type, status code and the Do Not Retry bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Status {
    /// Status code type.
    pub sct: u8,
    /// Status code.
    pub sc: u8,
    /// Do Not Retry: retrying the same command will fail the same way.
    pub dnr: bool,
}

impl Status {
    /// Successful completion.
    pub const SUCCESS: Self = Self::generic(0x00, false);
    /// Invalid Command Opcode.
    pub const INVALID_OPCODE: Self = Self::generic(0x01, true);
    /// Invalid Field in Command.
    pub const INVALID_FIELD: Self = Self::generic(0x02, true);
    /// Data Transfer Error: the host buffer could not be read or written.
    pub const DATA_TRANSFER_ERROR: Self = Self::generic(0x04, false);
    /// Internal Error: the device failed without the command being at fault.
    pub const INTERNAL_ERROR: Self = Self::generic(0x06, false);
    /// Command Abort Requested: the command was abandoned (a controller reset); its
    /// completion is never posted, but this status makes the firmware stop its work.
    pub const ABORT_REQUESTED: Self = Self::generic(0x07, false);
    /// Invalid Namespace or Format.
    pub const INVALID_NAMESPACE: Self = Self::generic(0x0B, true);
    /// Command Sequence Error.
    pub const COMMAND_SEQUENCE_ERROR: Self = Self::generic(0x0C, true);
    /// LBA Out of Range (NVM command set status 0x80).
    pub const LBA_OUT_OF_RANGE: Self = Self::generic(0x80, true);
    /// Invalid Log Page (command specific 0x09).
    pub const INVALID_LOG_PAGE: Self = Self {
        sct: sct::COMMAND_SPECIFIC,
        sc: 0x09,
        dnr: true,
    };
    /// Feature Identifier Not Saveable (command specific 0x0D).
    pub const FEATURE_NOT_SAVEABLE: Self = Self {
        sct: sct::COMMAND_SPECIFIC,
        sc: 0x0D,
        dnr: true,
    };
    /// Capacity Exceeded (0x81): no free flash left for the write.
    pub const CAPACITY_EXCEEDED: Self = Self::generic(0x81, true);
    /// Unrecovered Read Error (media error 0x81).
    pub const UNRECOVERED_READ_ERROR: Self = Self {
        sct: sct::MEDIA,
        sc: 0x81,
        dnr: false,
    };
    /// Write Fault (media error 0x80).
    pub const WRITE_FAULT: Self = Self {
        sct: sct::MEDIA,
        sc: 0x80,
        dnr: false,
    };

    /// A generic-command-status code.
    pub const fn generic(sc: u8, dnr: bool) -> Self {
        Self {
            sct: sct::GENERIC,
            sc,
            dnr,
        }
    }

    /// Whether this is successful completion.
    pub fn is_success(self) -> bool {
        self.sct == sct::GENERIC && self.sc == 0
    }

    /// The 15-bit status field (completion dword 3 bits 31:17, without the phase tag).
    pub fn to_field(self) -> u16 {
        u16::from(self.sc) | (u16::from(self.sct & 0x7) << 8) | (u16::from(self.dnr) << 14)
    }

    /// Decodes a 15-bit status field.
    pub fn from_field(field: u16) -> Self {
        Self {
            sc: (field & 0xFF) as u8,
            sct: ((field >> 8) & 0x7) as u8,
            dnr: field & (1 << 14) != 0,
        }
    }
}

/// The sagessd vendor-specific status codes (status code type 7), one per way a vendor command
/// can be wrong, so that the host learns exactly which field it got wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum VendorStatus {
    /// The payload's magic number is not the one of its format.
    BadMagic = 0x01,
    /// The payload's format version is not supported.
    BadVersion = 0x02,
    /// Layer count is 0 or above [`crate::ns_config::MAX_LAYERS`].
    BadLayerCount = 0x03,
    /// A fanout is 0, above the device's limit, or set for a layer that is not used.
    BadFanout = 0x04,
    /// Target count is 0 or above the device's limit, or a hyperbatch's minibatches' target
    /// counts (each at least 1) do not add up to it.
    BadTargetCount = 0x05,
    /// A target node id is not below the attached graph's node count.
    NodeOutOfRange = 0x06,
    /// No graph is attached to the namespace.
    NoGraphAttached = 0x07,
    /// The payload is shorter than its header says (or the command's data length is).
    Truncated = 0x08,
    /// A reserved field or an unknown flag is set.
    ReservedField = 0x09,
    /// `NS_COLLECT` named a tag that is not a submitted job.
    UnknownTag = 0x0A,
    /// The sampled subgraph does not fit the device's result buffer.
    ResultTooLarge = 0x0B,
    /// The host's buffer is smaller than the result; result dword 0 holds the size needed and the
    /// result stays available for another `NS_COLLECT`.
    BufferTooSmall = 0x0C,
    /// The graph on flash is inconsistent (an `indptr` that decreases or points past the edges).
    GraphCorrupt = 0x0D,
    /// The graph descriptor is invalid (id width, LBA ranges, sizes).
    BadDescriptor = 0x0E,
    /// Every sampling slot holds a job that has not been collected.
    NoFreeSlot = 0x0F,
    /// A hyperbatch's minibatch count is 0 or above the device's limit.
    BadMinibatchCount = 0x10,
    /// The attached graph is beyond what the device samples: more than 2^32 − 1 nodes (at
    /// GRAPH_ATTACH), or a node with 2^32 or more neighbours (when a job reaches it).
    GraphTooLarge = 0x11,
}

impl VendorStatus {
    /// Every vendor status, for tables and tests.
    pub const ALL: [Self; 17] = [
        Self::BadMagic,
        Self::BadVersion,
        Self::BadLayerCount,
        Self::BadFanout,
        Self::BadTargetCount,
        Self::NodeOutOfRange,
        Self::NoGraphAttached,
        Self::Truncated,
        Self::ReservedField,
        Self::UnknownTag,
        Self::ResultTooLarge,
        Self::BufferTooSmall,
        Self::GraphCorrupt,
        Self::BadDescriptor,
        Self::NoFreeSlot,
        Self::BadMinibatchCount,
        Self::GraphTooLarge,
    ];

    /// The vendor status carried by an NVMe status, if it is one.
    pub fn from_status(status: Status) -> Option<Self> {
        if status.sct != sct::VENDOR {
            return None;
        }
        Self::ALL.into_iter().find(|v| *v as u8 == status.sc)
    }
}

impl From<VendorStatus> for Status {
    fn from(v: VendorStatus) -> Self {
        // Retrying can succeed after "no free slot" (once a job is collected) and after "buffer
        // too small" (with a larger buffer); every other vendor status is final.
        Status {
            sct: sct::VENDOR,
            sc: v as u8,
            dnr: !matches!(v, VendorStatus::NoFreeSlot | VendorStatus::BufferTooSmall),
        }
    }
}

/// Admin command opcodes the device knows.
pub mod admin_opcode {
    /// Get Log Page (controller→host).
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0A;
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    /// Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
}

/// Feature identifiers (Get/Set Features CDW10 bits 7:0).
pub mod feature {
    /// Arbitration.
    pub const ARBITRATION: u8 = 0x01;
    /// Power Management.
    pub const POWER_MANAGEMENT: u8 = 0x02;
    /// Temperature Threshold.
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    /// Error Recovery.
    pub const ERROR_RECOVERY: u8 = 0x05;
    /// Volatile Write Cache.
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    /// Number of Queues.
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    /// Interrupt Coalescing.
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    /// Write Atomicity Normal.
    pub const WRITE_ATOMICITY: u8 = 0x0A;
    /// Asynchronous Event Configuration.
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    /// Keep Alive Timer.
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
}

/// Log page identifiers.
pub mod log_page {
    /// Error Information (64-byte entries).
    pub const ERROR_INFORMATION: u8 = 0x01;
    /// SMART / Health Information (512 bytes).
    pub const SMART_HEALTH: u8 = 0x02;
    /// Firmware Slot Information (512 bytes).
    pub const FIRMWARE_SLOT: u8 = 0x03;
}

/// I/O command opcodes the device knows (NVM command set and sagessd vendor commands).
pub mod io_opcode {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write (host→controller).
    pub const WRITE: u8 = 0x01;
    /// Read (controller→host).
    pub const READ: u8 = 0x02;
    /// Write Zeroes (no data): the range reads as zeros afterwards; CDW12 bit 25 (DEAC) lets
    /// the device deallocate it instead of writing zeros.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management (host→controller): deallocate (trim) ranges.
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    /// Vendor: register a graph descriptor (host→controller, bits 1:0 = 01).
    pub const GRAPH_ATTACH: u8 = 0x81;
    /// Vendor: submit an NS_config (host→controller, bits 1:0 = 01); result dword 0 is the tag.
    pub const NS_SUBMIT: u8 = 0x85;
    /// Vendor: collect a sampled subgraph (controller→host, bits 1:0 = 10); CDW13 is the tag
    /// (bits 31:24: which minibatch of a hyperbatch);
    /// CDW15 bit 0 set: a window of it starting at byte CDW14 (result dword 0: its whole size);
    /// CDW15 bit 1 set: discard the job once finished.
    pub const NS_COLLECT: u8 = 0x86;
}

/// Which way a command moves data, from bits 1:0 of its opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataDirection {
    /// No data transfer.
    None,
    /// Host to controller.
    HostToDevice,
    /// Controller to host.
    DeviceToHost,
    /// Both directions.
    Bidirectional,
}

impl DataDirection {
    /// The direction an opcode implies (NVMe base specification, Figure "Opcodes for Data
    /// Transfer").
    pub fn of(opcode: u8) -> Self {
        match opcode & 0x3 {
            0 => Self::None,
            1 => Self::HostToDevice,
            2 => Self::DeviceToHost,
            _ => Self::Bidirectional,
        }
    }
}

/// A parsed admin command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminCommand {
    /// Identify with Controller or Namespace Structure (CNS) `cns` for namespace `nsid`.
    Identify {
        /// The data structure asked for.
        cns: u8,
        /// The namespace it concerns (CNS 0, 3), or the last one not to list (CNS 2).
        nsid: u32,
        /// Command set identifier (CNS 5, 6).
        csi: u8,
    },
    /// Get Log Page `lid`: `len_bytes` from byte `offset` of the page.
    GetLogPage {
        /// Log page identifier.
        lid: u8,
        /// Bytes wanted (NUMD + 1 dwords).
        len_bytes: u32,
        /// Byte offset into the log page.
        offset: u64,
    },
    /// Get Features `fid` (`select` 0: current, 1: default, 2: saved, 3: capabilities).
    GetFeatures {
        /// Feature identifier.
        fid: u8,
        /// Which value.
        select: u8,
    },
    /// Set Features `fid` to `value` (CDW11).
    SetFeatures {
        /// Feature identifier.
        fid: u8,
        /// The feature-specific value.
        value: u32,
        /// Save bit: keep the value across resets.
        save: bool,
    },
    /// Asynchronous Event Request: completes when an event happens.
    AsyncEventRequest,
    /// Keep Alive.
    KeepAlive,
    /// Any opcode the device does not implement.
    Unsupported(u8),
}

impl AdminCommand {
    /// Parses an admin submission entry. Never fails: unknown opcodes become data.
    pub fn parse(sqe: &SubmissionEntry) -> Self {
        let cdw10 = sqe.cdw10.get();
        match sqe.opcode {
            admin_opcode::IDENTIFY => Self::Identify {
                cns: (cdw10 & 0xFF) as u8,
                nsid: sqe.nsid.get(),
                csi: (sqe.cdw11.get() >> 24) as u8,
            },
            admin_opcode::GET_LOG_PAGE => {
                let numd = u64::from(cdw10 >> 16) | (u64::from(sqe.cdw11.get() & 0xFFFF) << 16);
                Self::GetLogPage {
                    lid: (cdw10 & 0xFF) as u8,
                    len_bytes: ((numd + 1) * 4).min(u64::from(u32::MAX)) as u32,
                    offset: u64::from(sqe.cdw12.get()) | (u64::from(sqe.cdw13.get()) << 32),
                }
            }
            admin_opcode::GET_FEATURES => Self::GetFeatures {
                fid: (cdw10 & 0xFF) as u8,
                select: ((cdw10 >> 8) & 0x7) as u8,
            },
            admin_opcode::SET_FEATURES => Self::SetFeatures {
                fid: (cdw10 & 0xFF) as u8,
                value: sqe.cdw11.get(),
                save: cdw10 >> 31 != 0,
            },
            admin_opcode::ASYNC_EVENT_REQUEST => Self::AsyncEventRequest,
            admin_opcode::KEEP_ALIVE => Self::KeepAlive,
            op => Self::Unsupported(op),
        }
    }
}

/// A parsed I/O command, before any check against the device's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoCommand {
    /// Flush volatile write cache.
    Flush,
    /// Read `block_count` blocks from `slba`.
    Read {
        /// Starting logical block address.
        slba: u64,
        /// Number of logical blocks (1-based).
        block_count: u32,
    },
    /// Write `block_count` blocks at `slba`.
    Write {
        /// Starting logical block address.
        slba: u64,
        /// Number of logical blocks (1-based).
        block_count: u32,
    },
    /// Write Zeroes over `block_count` blocks at `slba`.
    WriteZeroes {
        /// Starting logical block address.
        slba: u64,
        /// Number of logical blocks (1-based).
        block_count: u32,
        /// Deallocate (CDW12 bit 25): the host lets the device deallocate the blocks, which
        /// read as zeros (DLFEAT), instead of writing zeros.
        deallocate: bool,
    },
    /// Dataset Management with `range_count` ranges (each 16 B in the data buffer).
    DatasetManagement {
        /// Number of ranges (1-based).
        range_count: u32,
        /// Attribute Deallocate: the ranges may be trimmed.
        deallocate: bool,
    },
    /// Vendor GRAPH_ATTACH carrying a graph descriptor of `data_len_bytes`.
    GraphAttach {
        /// Length of the host buffer (CDW10 NDT × 4).
        data_len_bytes: u32,
    },
    /// Vendor NS_SUBMIT carrying an NS_config of `data_len_bytes`.
    NsSubmit {
        /// Length of the host buffer (CDW10 NDT × 4).
        data_len_bytes: u32,
    },
    /// Vendor NS_COLLECT returning the subgraph of job `tag` into `data_len_bytes`.
    NsCollect {
        /// The tag NS_SUBMIT returned (CDW13).
        tag: u32,
        /// Length of the host buffer (CDW10 NDT × 4).
        data_len_bytes: u32,
        /// Windowed collect (CDW15 bit 0): return the subgraph's bytes from `offset_bytes`, as
        /// many as fit, so a subgraph larger than one transfer (MDTS) comes in several
        /// commands; the job ends with the window that reaches its end.
        window: Option<u32>,
        /// Discard (CDW15 bit 1): end the job once it has finished, returning nothing (a host
        /// giving up on a job, or a target cleaning up after a host that left).
        discard: bool,
    },
    /// Any opcode the device does not implement.
    Unsupported(u8),
}

impl IoCommand {
    /// Parses an I/O submission entry. Only structurally impossible commands (fused operations,
    /// which the device does not support) are errors; unknown opcodes become data.
    pub fn parse(sqe: &SubmissionEntry) -> Result<Self, Status> {
        if sqe.fused() != 0 {
            return Err(Status::INVALID_FIELD);
        }
        let slba = u64::from(sqe.cdw10.get()) | (u64::from(sqe.cdw11.get()) << 32);
        let block_count = (sqe.cdw12.get() & 0xFFFF) + 1;
        let data_len_bytes = sqe.cdw10.get().saturating_mul(4);
        Ok(match sqe.opcode {
            io_opcode::FLUSH => Self::Flush,
            io_opcode::READ => Self::Read { slba, block_count },
            io_opcode::WRITE => Self::Write { slba, block_count },
            io_opcode::WRITE_ZEROES => Self::WriteZeroes {
                slba,
                block_count,
                deallocate: sqe.cdw12.get() & (1 << 25) != 0,
            },
            io_opcode::DATASET_MANAGEMENT => Self::DatasetManagement {
                range_count: (sqe.cdw10.get() & 0xFF) + 1,
                deallocate: sqe.cdw11.get() & (1 << 2) != 0,
            },
            io_opcode::GRAPH_ATTACH => Self::GraphAttach { data_len_bytes },
            io_opcode::NS_SUBMIT => Self::NsSubmit { data_len_bytes },
            io_opcode::NS_COLLECT => Self::NsCollect {
                tag: sqe.cdw13.get(),
                data_len_bytes,
                window: (sqe.cdw15.get() & 1 != 0).then(|| sqe.cdw14.get()),
                discard: sqe.cdw15.get() & 2 != 0,
            },
            op => Self::Unsupported(op),
        })
    }
}

/// One range of a Dataset Management command (16 B).
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct DsmRange {
    /// Context attributes.
    pub attributes: U32,
    /// Length in logical blocks.
    pub block_count: U32,
    /// Starting LBA.
    pub slba: U64,
}

const _: () = {
    assert!(size_of::<DsmRange>() == 16);
    assert!(offset_of!(DsmRange, block_count) == 4);
    assert!(offset_of!(DsmRange, slba) == 8);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_zeroes_parses_back() {
        let sqe = SubmissionEntry::write_zeroes(3, 1, 0x1_0000_0007, 16, true);
        assert_eq!(sqe.opcode, 0x08);
        assert_eq!(sqe.cdw12.get(), 15 | 1 << 25);
        assert_eq!(
            IoCommand::parse(&sqe),
            Ok(IoCommand::WriteZeroes {
                slba: 0x1_0000_0007,
                block_count: 16,
                deallocate: true,
            })
        );
        let plain = SubmissionEntry::write_zeroes(3, 1, 0, 1, false);
        assert_eq!(
            IoCommand::parse(&plain),
            Ok(IoCommand::WriteZeroes {
                slba: 0,
                block_count: 1,
                deallocate: false,
            })
        );
    }

    #[test]
    fn submission_entry_golden_bytes() {
        let sqe = SubmissionEntry::read_write(false, 0x1234, 1, 0x1_0000_0002, 8);
        let mut golden = [0u8; 64];
        golden[0] = 0x02;
        golden[2..4].copy_from_slice(&[0x34, 0x12]);
        golden[4] = 1;
        golden[40..44].copy_from_slice(&[2, 0, 0, 0]);
        golden[44..48].copy_from_slice(&[1, 0, 0, 0]);
        golden[48] = 7;
        assert_eq!(sqe.as_bytes(), &golden);
        assert_eq!(SubmissionEntry::read_from_bytes(&golden).unwrap(), sqe);
        assert_eq!(
            IoCommand::parse(&sqe),
            Ok(IoCommand::Read {
                slba: 0x1_0000_0002,
                block_count: 8
            })
        );
    }

    #[test]
    fn vendor_entry_golden_bytes() {
        let sqe = SubmissionEntry::vendor(io_opcode::NS_COLLECT, 9, 1, 8192 + 4, 0x0102);
        let mut golden = [0u8; 64];
        golden[0] = 0x86;
        golden[2] = 9;
        golden[4] = 1;
        golden[40..44].copy_from_slice(&2049u32.to_le_bytes()); // CDW10: NDT
        golden[48] = 2; // CDW12: three 4 KiB units, 0-based
        golden[52..56].copy_from_slice(&0x0102u32.to_le_bytes()); // CDW13: the tag
        assert_eq!(sqe.as_bytes(), &golden);
        assert_eq!(
            IoCommand::parse(&sqe),
            Ok(IoCommand::NsCollect {
                tag: 0x0102,
                data_len_bytes: 8196,
                window: None,
                discard: false,
            })
        );
    }

    #[test]
    fn completion_entry_golden_bytes() {
        let cqe = CompletionEntry::new(3, 0xBEEF, VendorStatus::NodeOutOfRange.into(), 0xAABBCCDD);
        let golden = [
            0xDD, 0xCC, 0xBB, 0xAA, 0, 0, 0, 0, 0, 0, 3, 0, 0xEF, 0xBE, 0x0C, 0x8E,
        ];
        // status field: sc 0x06, sct 7, dnr → (0x06 | 7<<8 | 1<<14) << 1 = 0x8E0C.
        assert_eq!(cqe.as_bytes(), &golden);
        assert_eq!(
            cqe.status(),
            Status {
                sct: sct::VENDOR,
                sc: 0x06,
                dnr: true
            }
        );
        assert_eq!(
            VendorStatus::from_status(cqe.status()),
            Some(VendorStatus::NodeOutOfRange)
        );
    }

    #[test]
    fn status_field_round_trips() {
        for field in 0..(1u16 << 15) {
            let s = Status::from_field(field);
            // bits 13:12 (CRD) and 11 are not modelled; everything we keep must round-trip.
            assert_eq!(s.to_field(), field & 0x47FF);
        }
        assert_eq!(Status::INVALID_OPCODE.to_field(), 0x4001);
    }

    #[test]
    fn vendor_opcodes_respect_direction_bits() {
        assert_eq!(
            DataDirection::of(io_opcode::GRAPH_ATTACH),
            DataDirection::HostToDevice
        );
        assert_eq!(
            DataDirection::of(io_opcode::NS_SUBMIT),
            DataDirection::HostToDevice
        );
        assert_eq!(
            DataDirection::of(io_opcode::NS_COLLECT),
            DataDirection::DeviceToHost
        );
        assert_eq!(
            DataDirection::of(io_opcode::WRITE),
            DataDirection::HostToDevice
        );
        assert_eq!(
            DataDirection::of(io_opcode::READ),
            DataDirection::DeviceToHost
        );
    }

    #[test]
    fn unknown_opcodes_and_fused_commands_are_data_not_panics() {
        assert_eq!(
            IoCommand::parse(&SubmissionEntry::new(0xC4, 1, 1)),
            Ok(IoCommand::Unsupported(0xC4))
        );
        let mut fused = SubmissionEntry::new(io_opcode::WRITE, 1, 1);
        fused.flags = 1;
        assert_eq!(IoCommand::parse(&fused), Err(Status::INVALID_FIELD));
        assert_eq!(
            AdminCommand::parse(&SubmissionEntry::new(0x7F, 1, 0)),
            AdminCommand::Unsupported(0x7F)
        );
    }
}
