//! NVMe over Fabrics commands (NVMe Base Specification 2.0, §6), the controller properties they
//! read and write, and the SGL data descriptors fabrics transports put in a command's data
//! pointer (§4.1.2).

use core::mem::{offset_of, size_of};
use zerocopy::little_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::nvme::{DataDirection, Status, SubmissionEntry};

/// The opcode of every Fabrics command; the command type is in [`FabricsCommand`]'s `fctype`.
pub const FABRICS_OPCODE: u8 = 0x7F;

/// Fabrics command types (byte 4 of the submission entry).
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
    /// Authentication Send.
    pub const AUTH_SEND: u8 = 0x05;
    /// Authentication Receive.
    pub const AUTH_RECEIVE: u8 = 0x06;
    /// Disconnect (an I/O queue).
    pub const DISCONNECT: u8 = 0x08;
}

/// Controller property offsets (the registers a PCIe controller has in BAR0).
pub mod property {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset (4 bytes).
    pub const NSSR: u32 = 0x20;
}

/// Command-specific statuses of Connect (SCT 1).
pub mod connect_status {
    use crate::nvme::{Status, sct};

    /// Connect Incompatible Format (record format not supported).
    pub const INCOMPATIBLE_FORMAT: Status = Status {
        sct: sct::COMMAND_SPECIFIC,
        sc: 0x80,
        dnr: true,
    };
    /// Connect Controller Busy (no controller can be allocated).
    pub const CONTROLLER_BUSY: Status = Status {
        sct: sct::COMMAND_SPECIFIC,
        sc: 0x81,
        dnr: false,
    };
    /// Connect Invalid Parameters (CDW0/1 of the completion name the bad field).
    pub const INVALID_PARAMETERS: Status = Status {
        sct: sct::COMMAND_SPECIFIC,
        sc: 0x82,
        dnr: true,
    };
    /// Connect Invalid Host.
    pub const INVALID_HOST: Status = Status {
        sct: sct::COMMAND_SPECIFIC,
        sc: 0x84,
        dnr: true,
    };
    /// Invalid Queue Type (an I/O queue's parameters are out of range).
    pub const INVALID_QUEUE_TYPE: Status = Status {
        sct: sct::COMMAND_SPECIFIC,
        sc: 0x85,
        dnr: true,
    };
}

/// Which way a command moves data: from its opcode, or for a Fabrics command (whose opcode's
/// bits are not a direction) from its command type.
pub fn data_direction(sqe: &SubmissionEntry) -> DataDirection {
    if sqe.opcode != FABRICS_OPCODE {
        return DataDirection::of(sqe.opcode);
    }
    match sqe.as_bytes()[4] {
        fctype::CONNECT | fctype::AUTH_SEND => DataDirection::HostToDevice,
        fctype::AUTH_RECEIVE => DataDirection::DeviceToHost,
        _ => DataDirection::None,
    }
}

/// A parsed Fabrics command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FabricsCommand {
    /// Connect a queue. The 1024-byte [`ConnectData`] comes as the command's data.
    Connect {
        /// Record format (0).
        recfmt: u16,
        /// Queue to create: 0 the admin queue, otherwise an I/O queue.
        qid: u16,
        /// Submission queue size, 0-based.
        sqsize: u16,
        /// Keep-alive timeout in milliseconds (admin queue only; 0: none).
        kato_ms: u32,
    },
    /// Read a property.
    PropertyGet {
        /// 8-byte access (otherwise 4).
        wide: bool,
        /// Property offset ([`property`]).
        offset: u32,
    },
    /// Write a property.
    PropertySet {
        /// 8-byte access (otherwise 4).
        wide: bool,
        /// Property offset ([`property`]).
        offset: u32,
        /// The value.
        value: u64,
    },
    /// Disconnect the queue the command arrived on.
    Disconnect,
    /// Authentication Send: `len` bytes of an authentication message, host to controller.
    AuthSend {
        /// Security protocol ([`crate::auth::SECP_AUTH`]).
        secp: u8,
        /// SP Specific 0 and 1 ([`crate::auth::SPSP_DHCHAP`] each).
        spsp: [u8; 2],
        /// Transfer length.
        len: u32,
    },
    /// Authentication Receive: the controller's next message, in `len` bytes.
    AuthReceive {
        /// Security protocol ([`crate::auth::SECP_AUTH`]).
        secp: u8,
        /// SP Specific 0 and 1 ([`crate::auth::SPSP_DHCHAP`] each).
        spsp: [u8; 2],
        /// Allocation length.
        len: u32,
    },
    /// Any other command type.
    Unsupported(u8),
}

impl FabricsCommand {
    /// Parses a submission entry whose opcode is [`FABRICS_OPCODE`]. Never fails: unknown
    /// command types become data.
    pub fn parse(sqe: &SubmissionEntry) -> Self {
        let bytes = sqe.as_bytes();
        let fctype = bytes[4];
        let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
        let wide = sqe.cdw10.get() & 0x7 == 1;
        match fctype {
            fctype::CONNECT => Self::Connect {
                recfmt: u16_at(40),
                qid: u16_at(42),
                sqsize: u16_at(44),
                kato_ms: sqe.cdw12.get(),
            },
            fctype::PROPERTY_GET => Self::PropertyGet {
                wide,
                offset: sqe.cdw11.get(),
            },
            fctype::PROPERTY_SET => Self::PropertySet {
                wide,
                offset: sqe.cdw11.get(),
                value: u64::from(sqe.cdw12.get()) | (u64::from(sqe.cdw13.get()) << 32),
            },
            fctype::DISCONNECT => Self::Disconnect,
            fctype::AUTH_SEND => Self::AuthSend {
                secp: bytes[43],
                spsp: [bytes[41], bytes[42]],
                len: sqe.cdw11.get(),
            },
            fctype::AUTH_RECEIVE => Self::AuthReceive {
                secp: bytes[43],
                spsp: [bytes[41], bytes[42]],
                len: sqe.cdw11.get(),
            },
            other => Self::Unsupported(other),
        }
    }

    /// A Connect submission entry (the host side of [`Self::parse`]).
    pub fn connect(cid: u16, qid: u16, sqsize: u16, kato_ms: u32) -> SubmissionEntry {
        let mut sqe = Self::entry(cid, fctype::CONNECT);
        sqe.cdw10 = (u32::from(qid) << 16).into(); // RECFMT 0, QID
        sqe.cdw11 = u32::from(sqsize).into();
        sqe.cdw12 = kato_ms.into();
        sqe
    }

    /// A Property Get submission entry.
    pub fn property_get(cid: u16, offset: u32, wide: bool) -> SubmissionEntry {
        let mut sqe = Self::entry(cid, fctype::PROPERTY_GET);
        sqe.cdw10 = u32::from(wide).into();
        sqe.cdw11 = offset.into();
        sqe
    }

    /// A Property Set submission entry.
    pub fn property_set(cid: u16, offset: u32, value: u64, wide: bool) -> SubmissionEntry {
        let mut sqe = Self::entry(cid, fctype::PROPERTY_SET);
        sqe.cdw10 = u32::from(wide).into();
        sqe.cdw11 = offset.into();
        sqe.cdw12 = (value as u32).into();
        sqe.cdw13 = ((value >> 32) as u32).into();
        sqe
    }

    /// An Authentication Send (DH-HMAC-CHAP) submission entry for a `len`-byte message; the
    /// transport fills the data pointer.
    pub fn auth_send(cid: u16, len: u32) -> SubmissionEntry {
        Self::auth(cid, fctype::AUTH_SEND, len)
    }

    /// An Authentication Receive (DH-HMAC-CHAP) submission entry for up to `len` bytes.
    pub fn auth_receive(cid: u16, len: u32) -> SubmissionEntry {
        Self::auth(cid, fctype::AUTH_RECEIVE, len)
    }

    fn auth(cid: u16, fctype: u8, len: u32) -> SubmissionEntry {
        use crate::auth::{SECP_AUTH, SPSP_DHCHAP};
        let mut sqe = Self::entry(cid, fctype);
        // CDW10: SECP in bits 31:24, SPSP1 in 23:16, SPSP0 in 15:8.
        sqe.cdw10 = u32::from_le_bytes([0, SPSP_DHCHAP, SPSP_DHCHAP, SECP_AUTH]).into();
        sqe.cdw11 = len.into();
        sqe
    }

    fn entry(cid: u16, fctype: u8) -> SubmissionEntry {
        let mut sqe = SubmissionEntry::new(FABRICS_OPCODE, cid, 0);
        sqe.nsid = u32::from(fctype).into();
        sqe
    }
}

/// The data of a Connect command (1024 bytes).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectData {
    /// The host identifier (a UUID).
    pub host_id: [u8; 16],
    /// Controller id: 0xFFFF on the admin queue (dynamic model: any), the admin queue's
    /// controller on an I/O queue.
    pub cntlid: U16,
    /// Reserved.
    pub reserved: [u8; 238],
    /// NVM subsystem NQN (NUL-terminated UTF-8).
    pub subnqn: [u8; 256],
    /// Host NQN (NUL-terminated UTF-8).
    pub hostnqn: [u8; 256],
    /// Reserved.
    pub reserved2: [u8; 256],
}

const _: () = {
    assert!(size_of::<ConnectData>() == 1024);
    assert!(offset_of!(ConnectData, cntlid) == 16);
    assert!(offset_of!(ConnectData, subnqn) == 256);
    assert!(offset_of!(ConnectData, hostnqn) == 512);
};

/// Controller id that asks the subsystem to allocate any controller (dynamic controller model).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;

impl ConnectData {
    /// Connect data for `subnqn`, `hostnqn`, `host_id` and `cntlid`; names longer than 255
    /// bytes are cut.
    pub fn new(host_id: [u8; 16], cntlid: u16, subnqn: &str, hostnqn: &str) -> Self {
        let mut data = Self {
            host_id,
            cntlid: cntlid.into(),
            reserved: [0; 238],
            subnqn: [0; 256],
            hostnqn: [0; 256],
            reserved2: [0; 256],
        };
        put_nqn(&mut data.subnqn, subnqn);
        put_nqn(&mut data.hostnqn, hostnqn);
        data
    }

    /// The subsystem NQN, if it is NUL-terminated UTF-8.
    pub fn subnqn(&self) -> Option<&str> {
        nqn(&self.subnqn)
    }

    /// The host NQN, if it is NUL-terminated UTF-8.
    pub fn hostnqn(&self) -> Option<&str> {
        nqn(&self.hostnqn)
    }
}

fn put_nqn(out: &mut [u8; 256], s: &str) {
    let n = s.len().min(255);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
}

fn nqn(field: &[u8; 256]) -> Option<&str> {
    let end = field.iter().position(|b| *b == 0)?;
    core::str::from_utf8(&field[..end]).ok()
}

/// Where a command's data is, from the SGL descriptor in its data pointer (bytes 24–39).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataPointer {
    /// No data (length 0).
    None,
    /// In the command capsule, at `offset` from the start of the in-capsule data.
    InCapsule {
        /// Offset within the in-capsule data.
        offset: u64,
        /// Bytes.
        len: u32,
    },
    /// Moved by the transport (NVMe/TCP: R2T + H2CData, or C2HData).
    Transport {
        /// Bytes.
        len: u32,
    },
}

/// SGL descriptor type byte of a Data Block with the Offset subtype (in-capsule data).
pub const SGL_IN_CAPSULE: u8 = 0x01;
/// SGL descriptor type byte of a Transport SGL Data Block, transport-specific subtype.
pub const SGL_TRANSPORT: u8 = 0x5A;
/// CDW0 flags value selecting SGLs for the data pointer (PSDT = 01b).
pub const PSDT_SGL: u8 = 0x40;

impl DataPointer {
    /// Reads the data pointer of a fabrics command. A descriptor type the transport does not
    /// define is `Err(INVALID_FIELD)`; a zero length is [`Self::None`].
    pub fn parse(sqe: &SubmissionEntry) -> Result<Self, Status> {
        let b = sqe.as_bytes();
        let addr = u64::from_le_bytes(b[24..32].try_into().unwrap_or([0; 8]));
        let len = u32::from_le_bytes([b[32], b[33], b[34], b[35]]);
        match b[39] {
            _ if len == 0 => Ok(Self::None),
            SGL_IN_CAPSULE => Ok(Self::InCapsule { offset: addr, len }),
            SGL_TRANSPORT => Ok(Self::Transport { len }),
            _ => Err(Status::INVALID_FIELD),
        }
    }

    /// Writes this data pointer into `sqe` (selecting SGLs in CDW0).
    pub fn encode(self, sqe: &mut SubmissionEntry) {
        let (addr, len, kind) = match self {
            Self::None => (0, 0, SGL_TRANSPORT),
            Self::InCapsule { offset, len } => (offset, len, SGL_IN_CAPSULE),
            Self::Transport { len } => (0, len, SGL_TRANSPORT),
        };
        sqe.flags = (sqe.flags & 0x3F) | PSDT_SGL;
        sqe.prp1 = addr.into();
        sqe.prp2 = (u64::from(len) | (u64::from(kind) << 56)).into();
    }

    /// Bytes of data the command moves.
    pub fn len(self) -> u32 {
        match self {
            Self::None => 0,
            Self::InCapsule { len, .. } | Self::Transport { len } => len,
        }
    }

    /// Whether the command moves no data.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// A subset of Controller Capabilities: what a fabrics host reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Maximum queue entries supported, 0-based (MQES).
    pub mqes: u16,
    /// Worst-case time to become ready, in 500 ms units (TO).
    pub timeout_500ms: u8,
}

impl Capabilities {
    /// The CAP register value: MQES, contiguous queues required, TO, the NVM command set, and a
    /// 4 KiB memory page size (MPSMIN = MPSMAX = 0).
    pub fn encode(self) -> u64 {
        u64::from(self.mqes) | (1 << 16) | (u64::from(self.timeout_500ms) << 24) | (1 << 37)
    }

    /// Reads MQES and TO back.
    pub fn decode(cap: u64) -> Self {
        Self {
            mqes: (cap & 0xFFFF) as u16,
            timeout_500ms: ((cap >> 24) & 0xFF) as u8,
        }
    }
}

/// Controller Configuration bits a fabrics controller acts on.
pub mod cc {
    /// Enable.
    pub const EN: u32 = 1 << 0;
    /// Shutdown notification (bits 15:14; 01 normal, 10 abrupt).
    pub const SHN_MASK: u32 = 0b11 << 14;
}

/// Controller Status bits.
pub mod csts {
    /// Ready.
    pub const RDY: u32 = 1 << 0;
    /// Controller fatal status.
    pub const CFS: u32 = 1 << 1;
    /// Shutdown processing complete (SHST = 10b).
    pub const SHST_COMPLETE: u32 = 0b10 << 2;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_round_trips() {
        let sqe = FabricsCommand::connect(7, 3, 127, 0);
        assert_eq!(sqe.opcode, FABRICS_OPCODE);
        assert_eq!(sqe.as_bytes()[4], fctype::CONNECT);
        assert_eq!(
            FabricsCommand::parse(&sqe),
            FabricsCommand::Connect {
                recfmt: 0,
                qid: 3,
                sqsize: 127,
                kato_ms: 0
            }
        );
        let data = ConnectData::new([1; 16], CNTLID_DYNAMIC, "nqn.a", "nqn.host");
        assert_eq!(data.subnqn(), Some("nqn.a"));
        assert_eq!(data.hostnqn(), Some("nqn.host"));
        assert_eq!(data.as_bytes()[16..18], [0xFF, 0xFF]);
    }

    #[test]
    fn properties_round_trip() {
        let sqe = FabricsCommand::property_set(1, property::CC, 0x46_0001, false);
        assert_eq!(
            FabricsCommand::parse(&sqe),
            FabricsCommand::PropertySet {
                wide: false,
                offset: property::CC,
                value: 0x46_0001
            }
        );
        let sqe = FabricsCommand::property_get(2, property::CAP, true);
        assert_eq!(
            FabricsCommand::parse(&sqe),
            FabricsCommand::PropertyGet {
                wide: true,
                offset: property::CAP
            }
        );
        let cap = Capabilities {
            mqes: 127,
            timeout_500ms: 10,
        };
        assert_eq!(Capabilities::decode(cap.encode()), cap);
    }

    #[test]
    fn auth_commands_carry_the_protocol_in_cdw10_bytes_41_to_43() {
        let sqe = FabricsCommand::auth_send(3, 72);
        // Byte offsets as Linux's struct nvmf_auth_send_command lays them out.
        let b = sqe.as_bytes();
        assert_eq!((b[4], b[41], b[42], b[43]), (fctype::AUTH_SEND, 1, 1, 0xE9));
        assert_eq!(&b[44..48], &72u32.to_le_bytes());
        assert_eq!(
            FabricsCommand::parse(&sqe),
            FabricsCommand::AuthSend {
                secp: 0xE9,
                spsp: [1, 1],
                len: 72
            }
        );
        assert_eq!(data_direction(&sqe), DataDirection::HostToDevice);
        let sqe = FabricsCommand::auth_receive(4, 4096);
        assert_eq!(
            FabricsCommand::parse(&sqe),
            FabricsCommand::AuthReceive {
                secp: 0xE9,
                spsp: [1, 1],
                len: 4096
            }
        );
        assert_eq!(data_direction(&sqe), DataDirection::DeviceToHost);
    }

    #[test]
    fn data_pointers_round_trip_and_unknown_types_are_errors() {
        for dp in [
            DataPointer::InCapsule {
                offset: 0,
                len: 1024,
            },
            DataPointer::Transport { len: 1 << 20 },
        ] {
            let mut sqe = SubmissionEntry::new(0x02, 1, 1);
            dp.encode(&mut sqe);
            assert_eq!(sqe.flags & 0xC0, PSDT_SGL);
            assert_eq!(DataPointer::parse(&sqe), Ok(dp));
        }
        let mut sqe = SubmissionEntry::new(0x02, 1, 1);
        sqe.prp2 = (16u64 | (0x20u64 << 56)).into();
        assert_eq!(DataPointer::parse(&sqe), Err(Status::INVALID_FIELD));
        assert_eq!(
            DataPointer::parse(&SubmissionEntry::new(0x02, 1, 1)),
            Ok(DataPointer::None)
        );
    }
}
