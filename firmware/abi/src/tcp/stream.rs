//! Reading and writing whole PDUs on a byte stream (a TCP socket), with digests.
//!
//! [`read_pdu`] reads the common header first and checks it ([`Framing::check`]) before it
//! reads (and allocates for) the rest, so a peer can never make the reader trust a length the
//! framing does not allow.

use std::io::{self, Read, Write};
use std::vec;
use std::vec::Vec;

use zerocopy::{FromBytes, IntoBytes};

use super::{CommonHeader, DIGEST_BYTES, Fatal, Framing, PduLayout, fes};
use crate::crc32c::crc32c;

/// One received PDU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pdu {
    /// The PDU header (`hlen` bytes, common header included).
    pub header: Vec<u8>,
    /// The data (empty when there is none).
    pub data: Vec<u8>,
    /// Where the parts lay.
    pub layout: PduLayout,
}

impl Pdu {
    /// The common header.
    pub fn common(&self) -> CommonHeader {
        CommonHeader::read_from_prefix(&self.header)
            .map(|(ch, _)| ch)
            .unwrap_or_default()
    }

    /// The PDU type.
    pub fn pdu_type(&self) -> u8 {
        self.header.first().copied().unwrap_or(0xFF)
    }

    /// The header parsed as `T` (a header struct of this module's parent).
    pub fn header_as<T: FromBytes>(&self) -> Option<T> {
        T::read_from_prefix(&self.header).ok().map(|(h, _)| h)
    }
}

/// Why [`read_pdu`] returned no PDU.
#[derive(Debug)]
pub enum RecvError {
    /// The stream failed or closed.
    Io(io::Error),
    /// The header is unacceptable: the connection must end with a TermReq carrying this
    /// status and the offending header bytes.
    Fatal(Fatal, Vec<u8>),
    /// The data digest did not match; the PDU itself is returned (the command it belongs to
    /// fails, the connection lives on).
    DataDigest(Pdu),
}

impl From<io::Error> for RecvError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// The most bytes one `read` call of [`read_pdu`] asks for inside a PDU's data: data is read
/// in pieces that never cross a 4 KiB boundary counted from the data's first byte.
///
/// Why: Linux's NVMe/TCP host before 6.5 hands the pages of a write to TCP with `sendpage`
/// one bio segment at a time, so over loopback one socket buffer fragment can run from the end
/// of a transparent huge page into the next page. A receiver's `recv` copies as much of a
/// fragment as it asked for in one go, and hardened usercopy then sees a copy past the end of
/// the huge page and stops the kernel (`usercopy: Kernel memory exposure attempt detected from
/// page alloc`, `kernel BUG at mm/usercopy.c:101`, in the receiving thread). A read that ends at
/// every page boundary of the host's data never copies across one, so the BUG cannot happen
/// whenever the host's data is page-aligned (the page cache, O_DIRECT buffers of fio and most
/// programs). Seen (intermittently) with 1 MiB fio writes and transparent huge pages on in the
/// QEMU guest test while the target read through a 256 KiB buffer.
pub const DATA_READ_BYTES: usize = 4096;

/// Reads one PDU of one of the `allowed` types: the common header, the rest of the header (and
/// padding), then the data [`DATA_READ_BYTES`] at a time and its digest, each with reads of
/// exactly its length (over an unbuffered socket, no `recv` spans two parts).
pub fn read_pdu<R: Read>(r: &mut R, framing: &Framing, allowed: &[u8]) -> Result<Pdu, RecvError> {
    let mut ch_bytes = [0u8; 8];
    r.read_exact(&mut ch_bytes)?;
    let ch = CommonHeader::read_from_bytes(&ch_bytes).unwrap_or_default();
    let layout = framing
        .check(&ch, allowed)
        .map_err(|f| RecvError::Fatal(f, ch_bytes.to_vec()))?;
    // Header, header digest and padding: everything before the data.
    let mut before = vec![0u8; layout.data_offset - ch_bytes.len()];
    r.read_exact(&mut before)?;
    let mut header = Vec::with_capacity(layout.hlen);
    header.extend_from_slice(&ch_bytes);
    header.extend_from_slice(&before[..layout.hlen - ch_bytes.len()]);
    if layout.header_digest {
        let at = layout.hlen - ch_bytes.len();
        let got = u32::from_le_bytes(before[at..at + DIGEST_BYTES].try_into().unwrap_or([0; 4]));
        if got != crc32c(&header) {
            let fatal = Fatal {
                fes: fes::HEADER_DIGEST_ERROR,
                fei: 0,
            };
            return Err(RecvError::Fatal(fatal, header));
        }
    }
    let mut data = vec![0u8; layout.data_len];
    for piece in data.chunks_mut(DATA_READ_BYTES) {
        r.read_exact(piece)?;
    }
    // The data digest (when there is data and digests are on).
    let mut digest = [0u8; DIGEST_BYTES];
    let after = &mut digest[..layout.plen - layout.data_offset - layout.data_len];
    r.read_exact(after)?;
    let pdu = Pdu {
        header,
        data,
        layout,
    };
    if layout.data_digest && u32::from_le_bytes(digest) != crc32c(&pdu.data) {
        return Err(RecvError::DataDigest(pdu));
    }
    Ok(pdu)
}

/// Writes one PDU: `header` is the PDU-specific header struct (common header included, whose
/// type and type-specific flags are kept; digest flags, `pdo` and `plen` are set here), then
/// `data`. One `write_all` per PDU, so a PDU is never interleaved with another writer's.
pub fn write_pdu<W: Write, H: IntoBytes + FromBytes + zerocopy::Immutable>(
    w: &mut W,
    framing: &Framing,
    header: &H,
    data: &[u8],
) -> io::Result<()> {
    let bytes = header.as_bytes();
    let ch = CommonHeader::read_from_prefix(bytes)
        .map(|(ch, _)| ch)
        .unwrap_or_default();
    let ch = framing.outgoing(ch.pdu_type, ch.flags & !0x3, bytes.len(), data.len());
    let plen = ch.plen.get() as usize;
    let mut out = Vec::with_capacity(plen);
    out.extend_from_slice(ch.as_bytes());
    out.extend_from_slice(&bytes[ch.as_bytes().len()..]);
    if ch.flags & super::flags::HDGST != 0 {
        let digest = crc32c(&out);
        out.extend_from_slice(&digest.to_le_bytes());
    }
    if !data.is_empty() {
        out.resize(usize::from(ch.pdo), 0);
        out.extend_from_slice(data);
        if ch.flags & super::flags::DDGST != 0 {
            out.extend_from_slice(&crc32c(data).to_le_bytes());
        }
    }
    debug_assert_eq!(out.len(), plen);
    w.write_all(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::SubmissionEntry;
    use crate::tcp::{CapsuleCmd, pdu_type};

    #[test]
    fn a_capsule_round_trips_with_digests_and_a_corrupt_data_digest_is_reported() {
        let framing = Framing {
            header_digest: true,
            data_digest: true,
            max_data_bytes: 4096,
            data_alignment_bytes: 4,
        };
        let cmd = CapsuleCmd {
            ch: CommonHeader {
                pdu_type: pdu_type::CAPSULE_CMD,
                ..CommonHeader::default()
            },
            sqe: SubmissionEntry::new(0x01, 7, 1),
        };
        let mut wire = Vec::new();
        write_pdu(&mut wire, &framing, &cmd, &[9u8; 100]).unwrap();
        let pdu = read_pdu(&mut wire.as_slice(), &framing, &[pdu_type::CAPSULE_CMD]).unwrap();
        assert_eq!(pdu.header_as::<CapsuleCmd>().unwrap().sqe, cmd.sqe);
        assert_eq!(pdu.data, vec![9u8; 100]);

        let last = wire.len() - 1;
        wire[last] ^= 1;
        assert!(matches!(
            read_pdu(&mut wire.as_slice(), &framing, &[pdu_type::CAPSULE_CMD]),
            Err(RecvError::DataDigest(_))
        ));
        wire[last] ^= 1;
        wire[20] ^= 1; // inside the SQE: the header digest catches it
        assert!(matches!(
            read_pdu(&mut wire.as_slice(), &framing, &[pdu_type::CAPSULE_CMD]),
            Err(RecvError::Fatal(
                Fatal {
                    fes: fes::HEADER_DIGEST_ERROR,
                    ..
                },
                _
            ))
        ));
    }
}
