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

/// Reads one PDU of one of the `allowed` types.
pub fn read_pdu<R: Read>(r: &mut R, framing: &Framing, allowed: &[u8]) -> Result<Pdu, RecvError> {
    let mut ch_bytes = [0u8; 8];
    r.read_exact(&mut ch_bytes)?;
    let ch = CommonHeader::read_from_bytes(&ch_bytes).unwrap_or_default();
    let layout = framing
        .check(&ch, allowed)
        .map_err(|f| RecvError::Fatal(f, ch_bytes.to_vec()))?;
    let mut rest = vec![0u8; layout.plen - ch_bytes.len()];
    r.read_exact(&mut rest)?;
    let mut header = Vec::with_capacity(layout.hlen);
    header.extend_from_slice(&ch_bytes);
    header.extend_from_slice(&rest[..layout.hlen - ch_bytes.len()]);
    if layout.header_digest {
        let at = layout.hlen - ch_bytes.len();
        let got = u32::from_le_bytes(rest[at..at + DIGEST_BYTES].try_into().unwrap_or([0; 4]));
        if got != crc32c(&header) {
            let fatal = Fatal {
                fes: fes::HEADER_DIGEST_ERROR,
                fei: 0,
            };
            return Err(RecvError::Fatal(fatal, header));
        }
    }
    let start = layout.data_offset - ch_bytes.len();
    let data = rest[start..start + layout.data_len].to_vec();
    let pdu = Pdu {
        header,
        data,
        layout,
    };
    if layout.data_digest {
        let at = start + layout.data_len;
        let got = u32::from_le_bytes(rest[at..at + DIGEST_BYTES].try_into().unwrap_or([0; 4]));
        if got != crc32c(&pdu.data) {
            return Err(RecvError::DataDigest(pdu));
        }
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
