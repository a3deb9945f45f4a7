//! NVMe/TCP protocol data units (NVMe/TCP Transport Specification 1.0, §3.6).
//!
//! Every PDU starts with an 8-byte common header; a fixed PDU-specific header follows (its
//! length is `hlen`), then an optional 4-byte header digest, padding up to the data offset
//! `pdo`, the data, and an optional 4-byte data digest; `plen` counts all of it. Digests are
//! CRC32C ([`crate::crc32c`]), little-endian on the wire.
//!
//! Both ends of the link use this module: the emulator's target and the host driver's
//! initiator. [`Framing::check`] validates a received common header before either side reads
//! the rest of the PDU, so a peer's lengths are never trusted further than their checks.

use core::mem::{offset_of, size_of};
use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::nvme::{CompletionEntry, SubmissionEntry};

#[cfg(feature = "std")]
pub mod stream;

/// PDU types (the common header's first byte).
pub mod pdu_type {
    /// Initialize Connection Request (host → controller).
    pub const IC_REQ: u8 = 0x00;
    /// Initialize Connection Response (controller → host).
    pub const IC_RESP: u8 = 0x01;
    /// Host to Controller Terminate Connection Request.
    pub const H2C_TERM_REQ: u8 = 0x02;
    /// Controller to Host Terminate Connection Request.
    pub const C2H_TERM_REQ: u8 = 0x03;
    /// Command capsule (host → controller).
    pub const CAPSULE_CMD: u8 = 0x04;
    /// Response capsule (controller → host).
    pub const CAPSULE_RESP: u8 = 0x05;
    /// Host to Controller Data.
    pub const H2C_DATA: u8 = 0x06;
    /// Controller to Host Data.
    pub const C2H_DATA: u8 = 0x07;
    /// Ready to Transfer (controller → host).
    pub const R2T: u8 = 0x09;
}

/// Common-header flag bits.
pub mod flags {
    /// A header digest follows the PDU header.
    pub const HDGST: u8 = 0x01;
    /// A data digest follows the PDU data.
    pub const DDGST: u8 = 0x02;
    /// H2CData / C2HData: the last data PDU of the command.
    pub const DATA_LAST: u8 = 0x04;
    /// C2HData: the command succeeded; no response capsule follows (only with `DATA_LAST`).
    pub const DATA_SUCCESS: u8 = 0x08;
}

/// ICReq/ICResp digest-enable bits.
pub mod digest {
    /// Header digests on every PDU after the connection is set up.
    pub const HEADER: u8 = 0x01;
    /// Data digests on every PDU carrying data.
    pub const DATA: u8 = 0x02;
}

/// Fatal error status codes of a Terminate Connection Request (§3.6.2.8).
pub mod fes {
    /// A header field is invalid; FEI is its byte offset.
    pub const INVALID_HEADER_FIELD: u16 = 0x01;
    /// A PDU arrived that the protocol does not allow now.
    pub const PDU_SEQUENCE_ERROR: u16 = 0x02;
    /// The header digest does not match.
    pub const HEADER_DIGEST_ERROR: u16 = 0x03;
    /// Data fell outside the range of its command.
    pub const DATA_OUT_OF_RANGE: u16 = 0x04;
    /// More data than allowed in one PDU.
    pub const DATA_LIMIT_EXCEEDED: u16 = 0x05;
    /// A parameter value is not supported.
    pub const UNSUPPORTED_PARAMETER: u16 = 0x06;
}

/// Bytes of a header or data digest.
pub const DIGEST_BYTES: usize = 4;

/// The 8-byte common header of every PDU.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct CommonHeader {
    /// PDU type ([`pdu_type`]).
    pub pdu_type: u8,
    /// Flags ([`flags`]).
    pub flags: u8,
    /// Length of the PDU header, common header included, digest excluded.
    pub hlen: u8,
    /// Offset of the data from the start of the PDU (0: no data).
    pub pdo: u8,
    /// Length of the whole PDU, digests and padding included.
    pub plen: U32,
}

/// ICReq: the first PDU the host sends.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcReq {
    /// Common header (type 0x00, hlen 128, plen 128).
    pub ch: CommonHeader,
    /// PDU format version (0).
    pub pfv: U16,
    /// Host PDU data alignment, in dwords, 0-based.
    pub hpda: u8,
    /// Digests the host wants ([`digest`]).
    pub digest: u8,
    /// Most outstanding R2Ts per command, 0-based.
    pub maxr2t: U32,
    /// Reserved.
    pub reserved: [u8; 112],
}

/// ICResp: the controller's answer to [`IcReq`].
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcResp {
    /// Common header (type 0x01, hlen 128, plen 128).
    pub ch: CommonHeader,
    /// PDU format version (0).
    pub pfv: U16,
    /// Controller PDU data alignment, in dwords, 0-based.
    pub cpda: u8,
    /// Digests enabled for the connection ([`digest`]).
    pub digest: u8,
    /// Most data bytes the host may send in one H2CData PDU.
    pub maxh2cdata: U32,
    /// Reserved.
    pub reserved: [u8; 112],
}

/// A command capsule: the submission entry (in-capsule data may follow).
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct CapsuleCmd {
    /// Common header (type 0x04, hlen 72).
    pub ch: CommonHeader,
    /// The command.
    pub sqe: SubmissionEntry,
}

/// A response capsule: the completion entry.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct CapsuleResp {
    /// Common header (type 0x05, hlen 24).
    pub ch: CommonHeader,
    /// The completion.
    pub cqe: CompletionEntry,
}

/// H2CData and C2HData headers: one contiguous piece of a command's data.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct DataHeader {
    /// Common header (type 0x06 or 0x07, hlen 24).
    pub ch: CommonHeader,
    /// The command's identifier.
    pub cccid: U16,
    /// H2CData: the R2T's transfer tag; C2HData: reserved.
    pub ttag: U16,
    /// Offset of this piece within the command's data.
    pub datao: U32,
    /// Bytes in this piece.
    pub datal: U32,
    /// Reserved.
    pub reserved: [u8; 4],
}

/// R2T: the controller asks for a range of a command's data.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct R2t {
    /// Common header (type 0x09, hlen 24).
    pub ch: CommonHeader,
    /// The command's identifier.
    pub cccid: U16,
    /// Tag the host echoes in its H2CData PDUs.
    pub ttag: U16,
    /// Offset of the requested range.
    pub r2to: U32,
    /// Length of the requested range.
    pub r2tl: U32,
    /// Reserved.
    pub reserved: [u8; 4],
}

/// H2CTermReq / C2HTermReq: the sender is closing the connection because of a fatal error.
/// The header of the offending PDU follows as data.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct TermReq {
    /// Common header (type 0x02 or 0x03, hlen 24).
    pub ch: CommonHeader,
    /// Fatal error status ([`fes`]).
    pub fes: U16,
    /// Fatal error information (for an invalid field: its byte offset).
    pub fei: U32,
    /// Reserved.
    pub reserved: [u8; 10],
}

/// Most bytes of the offending PDU's header a TermReq carries (the PDU is at most 152 bytes).
pub const TERM_REQ_MAX_DATA_BYTES: usize = 152 - size_of::<TermReq>();

const _: () = {
    assert!(size_of::<CommonHeader>() == 8);
    assert!(offset_of!(CommonHeader, plen) == 4);
    assert!(size_of::<IcReq>() == 128);
    assert!(offset_of!(IcReq, hpda) == 10);
    assert!(offset_of!(IcReq, maxr2t) == 12);
    assert!(size_of::<IcResp>() == 128);
    assert!(offset_of!(IcResp, maxh2cdata) == 12);
    assert!(size_of::<CapsuleCmd>() == 72);
    assert!(size_of::<CapsuleResp>() == 24);
    assert!(size_of::<DataHeader>() == 24);
    assert!(offset_of!(DataHeader, datao) == 12);
    assert!(offset_of!(DataHeader, datal) == 16);
    assert!(size_of::<R2t>() == 24);
    assert!(offset_of!(R2t, r2tl) == 16);
    assert!(size_of::<TermReq>() == 24);
    assert!(offset_of!(TermReq, fei) == 10);
};

/// The header length each PDU type must have (`None`: not a PDU type).
pub fn header_len(pdu_type: u8) -> Option<usize> {
    Some(match pdu_type {
        pdu_type::IC_REQ | pdu_type::IC_RESP => 128,
        pdu_type::CAPSULE_CMD => size_of::<CapsuleCmd>(),
        pdu_type::CAPSULE_RESP => size_of::<CapsuleResp>(),
        pdu_type::H2C_DATA | pdu_type::C2H_DATA | pdu_type::R2T => 24,
        pdu_type::H2C_TERM_REQ | pdu_type::C2H_TERM_REQ => size_of::<TermReq>(),
        _ => return None,
    })
}

/// Why a received common header is unacceptable: the TermReq status and field offset to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fatal {
    /// Fatal error status ([`fes`]).
    pub fes: u16,
    /// Fatal error information: byte offset of the bad field.
    pub fei: u32,
}

impl Fatal {
    /// An invalid header field at byte offset `fei`.
    pub const fn field(fei: u32) -> Self {
        Self {
            fes: fes::INVALID_HEADER_FIELD,
            fei,
        }
    }
}

/// Where the parts of a checked PDU lie, relative to the PDU's first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PduLayout {
    /// PDU header length (common header included).
    pub hlen: usize,
    /// Whether a header digest follows the header.
    pub header_digest: bool,
    /// Offset of the data (`plen` when there is none).
    pub data_offset: usize,
    /// Bytes of data.
    pub data_len: usize,
    /// Whether a data digest follows the data.
    pub data_digest: bool,
    /// Total PDU length.
    pub plen: usize,
}

/// What one end of a connection accepts: digests negotiated, size bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Framing {
    /// Header digests are on (after ICReq/ICResp).
    pub header_digest: bool,
    /// Data digests are on.
    pub data_digest: bool,
    /// Most data bytes one received PDU may carry.
    pub max_data_bytes: usize,
    /// Alignment the peer asked for the data of the PDUs sent to it (HPDA/CPDA + 1 dwords), in
    /// bytes.
    pub data_alignment_bytes: usize,
}

impl Framing {
    /// The framing before ICReq/ICResp: no digests, no data.
    pub const INITIAL: Self = Self {
        header_digest: false,
        data_digest: false,
        max_data_bytes: 0,
        data_alignment_bytes: 4,
    };

    /// Validates a received common header and says where the PDU's parts lie. Checks the type
    /// is one `allowed`, `hlen` matches the type, the digest flags match what was negotiated
    /// (ICReq/ICResp never carry digests), `pdo` and `plen` are consistent and the data fits
    /// `max_data_bytes`. Never trusts a length beyond these checks.
    pub fn check(&self, ch: &CommonHeader, allowed: &[u8]) -> Result<PduLayout, Fatal> {
        if !allowed.contains(&ch.pdu_type) {
            let fes = match header_len(ch.pdu_type) {
                Some(_) => fes::PDU_SEQUENCE_ERROR,
                None => fes::INVALID_HEADER_FIELD,
            };
            return Err(Fatal { fes, fei: 0 });
        }
        let hlen = header_len(ch.pdu_type).ok_or(Fatal::field(0))?;
        if usize::from(ch.hlen) != hlen {
            return Err(Fatal::field(2));
        }
        let ic = matches!(ch.pdu_type, pdu_type::IC_REQ | pdu_type::IC_RESP);
        let may_carry_data = matches!(
            ch.pdu_type,
            pdu_type::CAPSULE_CMD
                | pdu_type::H2C_DATA
                | pdu_type::C2H_DATA
                | pdu_type::H2C_TERM_REQ
                | pdu_type::C2H_TERM_REQ
        );
        let header_digest = ch.flags & flags::HDGST != 0;
        let data_digest = ch.flags & flags::DDGST != 0;
        let term = matches!(ch.pdu_type, pdu_type::H2C_TERM_REQ | pdu_type::C2H_TERM_REQ);
        // TermReqs carry no digests; every other PDU after ICReq/ICResp carries the negotiated
        // ones (a data digest only when there is data).
        if (ic || term) && (header_digest || data_digest) {
            return Err(Fatal::field(1));
        }
        if !ic && !term && header_digest != self.header_digest {
            return Err(Fatal::field(1));
        }
        let plen = ch.plen.get() as usize;
        let header_end = hlen + if header_digest { DIGEST_BYTES } else { 0 };
        let pdo = usize::from(ch.pdo);
        let (data_offset, data_len) = if pdo == 0 {
            if data_digest {
                return Err(Fatal::field(1));
            }
            (header_end, 0)
        } else {
            if !may_carry_data || pdo < header_end {
                return Err(Fatal::field(3));
            }
            if !term && data_digest != self.data_digest {
                return Err(Fatal::field(1));
            }
            let tail = if data_digest { DIGEST_BYTES } else { 0 };
            let len = plen.checked_sub(pdo + tail).ok_or(Fatal::field(4))?;
            (pdo, len)
        };
        if pdo == 0 && plen != header_end {
            return Err(Fatal::field(4));
        }
        let limit = if term {
            TERM_REQ_MAX_DATA_BYTES
        } else {
            self.max_data_bytes
        };
        if data_len > limit {
            return Err(Fatal {
                fes: fes::DATA_LIMIT_EXCEEDED,
                fei: 4,
            });
        }
        Ok(PduLayout {
            hlen,
            header_digest,
            data_offset,
            data_len,
            data_digest: data_len > 0 && data_digest,
            plen,
        })
    }

    /// The common header of a PDU sent under this framing: type `pdu_type`, type-specific
    /// `extra_flags`, a header of `hlen` bytes and `data_len` bytes of data (its offset padded
    /// to the peer's alignment). TermReqs go without digests.
    pub fn outgoing(
        &self,
        pdu_type: u8,
        extra_flags: u8,
        hlen: usize,
        data_len: usize,
    ) -> CommonHeader {
        let term = matches!(pdu_type, pdu_type::H2C_TERM_REQ | pdu_type::C2H_TERM_REQ);
        let mut f = extra_flags;
        let mut end = hlen;
        if self.header_digest && !term {
            f |= flags::HDGST;
            end += DIGEST_BYTES;
        }
        let (pdo, plen) = if data_len == 0 {
            (0, end)
        } else {
            let align = self.data_alignment_bytes.max(1);
            let pdo = end.div_ceil(align) * align;
            let mut plen = pdo + data_len;
            if self.data_digest && !term {
                f |= flags::DDGST;
                plen += DIGEST_BYTES;
            }
            (pdo, plen)
        };
        CommonHeader {
            pdu_type,
            flags: f,
            hlen: hlen as u8,
            pdo: pdo as u8,
            plen: (plen as u32).into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pdu_type: u8, flags: u8, hlen: u8, pdo: u8, plen: u32) -> CommonHeader {
        CommonHeader {
            pdu_type,
            flags,
            hlen,
            pdo,
            plen: plen.into(),
        }
    }

    #[test]
    fn capsule_with_in_capsule_data_and_both_digests() {
        let framing = Framing {
            header_digest: true,
            data_digest: true,
            max_data_bytes: 8192,
            data_alignment_bytes: 4,
        };
        let ch = framing.outgoing(pdu_type::CAPSULE_CMD, 0, 72, 1024);
        assert_eq!((ch.flags, ch.pdo, ch.plen.get()), (3, 76, 76 + 1024 + 4));
        let layout = framing.check(&ch, &[pdu_type::CAPSULE_CMD]).unwrap();
        assert_eq!(layout.data_offset, 76);
        assert_eq!(layout.data_len, 1024);
        assert!(layout.header_digest && layout.data_digest);
    }

    #[test]
    fn bad_headers_name_their_field() {
        let f = Framing {
            max_data_bytes: 4096,
            ..Framing::INITIAL
        };
        let cmd = [pdu_type::CAPSULE_CMD];
        // Unknown type, type out of sequence, wrong hlen, unnegotiated digest, pdo inside the
        // header, plen shorter than pdo, too much data.
        assert_eq!(
            f.check(&header(0x42, 0, 72, 0, 72), &cmd),
            Err(Fatal::field(0))
        );
        assert_eq!(
            f.check(&header(pdu_type::H2C_DATA, 0, 24, 0, 24), &cmd)
                .unwrap_err()
                .fes,
            fes::PDU_SEQUENCE_ERROR
        );
        assert_eq!(
            f.check(&header(pdu_type::CAPSULE_CMD, 0, 70, 0, 72), &cmd),
            Err(Fatal::field(2))
        );
        assert_eq!(
            f.check(
                &header(pdu_type::CAPSULE_CMD, flags::HDGST, 72, 0, 76),
                &cmd
            ),
            Err(Fatal::field(1))
        );
        assert_eq!(
            f.check(&header(pdu_type::CAPSULE_CMD, 0, 72, 10, 100), &cmd),
            Err(Fatal::field(3))
        );
        assert_eq!(
            f.check(&header(pdu_type::CAPSULE_CMD, 0, 72, 72, 60), &cmd),
            Err(Fatal::field(4))
        );
        assert_eq!(
            f.check(&header(pdu_type::CAPSULE_CMD, 0, 72, 0, 80), &cmd),
            Err(Fatal::field(4))
        );
        assert_eq!(
            f.check(&header(pdu_type::CAPSULE_CMD, 0, 72, 72, 72 + 4097), &cmd)
                .unwrap_err()
                .fes,
            fes::DATA_LIMIT_EXCEEDED
        );
    }
}
