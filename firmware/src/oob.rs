//! Out-of-band page metadata: what the FTL writes into every page's spare area.
//!
//! Each programmed page says what it is and when it was written, so that the mapping can be
//! rebuilt from the flash alone after a power cut (`crate::recovery`):
//!
//! ```plain
//! offset  size  field
//!      0     4  magic "SGPG"
//!      4     4  kind: 1 = data page of a logical page, 2 = checkpoint page, 3 = trim record
//!      8     4  index: the logical page (data), the page's place in its checkpoint, or the
//!               number of ranges a trim record holds (`crate::trim_log`)
//!     12     4  reserved, 0
//!     16     8  data sequence: when the data was written by the host (a GC copy keeps the
//!               source's), the checkpoint's id, or when the trims a record holds were made
//!     24     8  program sequence: when this page was programmed (unique, increasing)
//!     32     4  CRC32C of bytes 0..32
//!     36    28  0
//! ```
//!
//! All little-endian. The page data itself is protected by the flash's error correction (a page
//! whose program was interrupted reads as erased or fails), so the CRC covers only these fields:
//! a spare that is neither erased nor intact is refused rather than trusted.

use sagessd_abi::crc32c::crc32c;

use crate::hal::SPARE_BYTES;

const MAGIC: [u8; 4] = *b"SGPG";
const KIND_DATA: u32 = 1;
const KIND_CHECKPOINT: u32 = 2;
const KIND_TRIM: u32 = 3;
/// Bytes the CRC covers.
const COVERED_BYTES: usize = 32;

/// What a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PageKind {
    /// Logical page `index`'s data.
    Data,
    /// Page `index` of a checkpoint.
    Checkpoint,
    /// A trim record of `index` ranges (`crate::trim_log`).
    Trim,
}

/// One page's out-of-band record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Spare {
    /// What the page holds.
    pub kind: PageKind,
    /// Its logical page, or its place in its checkpoint.
    pub index: u32,
    /// The version of the data (host write order), or the checkpoint's id.
    pub data_seq: u64,
    /// When the page was programmed.
    pub program_seq: u64,
}

/// A spare area as read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadSpare {
    /// Every byte 0xFF: the page was never programmed since its block's erase.
    Erased,
    /// An intact record.
    Valid(Spare),
    /// Neither: not written by this firmware, or damaged.
    Garbled,
}

impl Spare {
    /// Writes the record into `out` (the first [`SPARE_BYTES`] bytes).
    pub fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..SPARE_BYTES];
        out.fill(0);
        out[0..4].copy_from_slice(&MAGIC);
        let kind = match self.kind {
            PageKind::Data => KIND_DATA,
            PageKind::Checkpoint => KIND_CHECKPOINT,
            PageKind::Trim => KIND_TRIM,
        };
        out[4..8].copy_from_slice(&kind.to_le_bytes());
        out[8..12].copy_from_slice(&self.index.to_le_bytes());
        out[16..24].copy_from_slice(&self.data_seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.program_seq.to_le_bytes());
        let crc = crc32c(&out[..COVERED_BYTES]);
        out[32..36].copy_from_slice(&crc.to_le_bytes());
    }

    /// Reads a record back from a spare area of at least [`SPARE_BYTES`] bytes.
    pub fn decode(spare: &[u8]) -> ReadSpare {
        let Some(spare) = spare.get(..SPARE_BYTES) else {
            return ReadSpare::Garbled;
        };
        if spare.iter().all(|b| *b == 0xFF) {
            return ReadSpare::Erased;
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([spare[i], spare[i + 1], spare[i + 2], spare[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | (u64::from(u32_at(i + 4)) << 32);
        let intact = spare[0..4] == MAGIC
            && u32_at(12) == 0
            && crc32c(&spare[..COVERED_BYTES]) == u32_at(32);
        let kind = match u32_at(4) {
            KIND_DATA => PageKind::Data,
            KIND_CHECKPOINT => PageKind::Checkpoint,
            KIND_TRIM => PageKind::Trim,
            _ => return ReadSpare::Garbled,
        };
        if !intact {
            return ReadSpare::Garbled;
        }
        ReadSpare::Valid(Spare {
            kind,
            index: u32_at(8),
            data_seq: u64_at(16),
            program_seq: u64_at(24),
        })
    }
}

/// The out-of-band record of logical page `lpn`'s data, as the FTL writes it beside the page:
/// what a tool that lays out a device image (the emulator's synthetic images) writes for each
/// data page it places, so that [`crate::Firmware::recover`] maps it. Sequence numbers must
/// grow in the order the pages would have been programmed.
pub fn data_page_spare(lpn: u32, data_seq: u64, program_seq: u64) -> [u8; SPARE_BYTES] {
    let mut out = [0u8; SPARE_BYTES];
    Spare {
        kind: PageKind::Data,
        index: lpn,
        data_seq,
        program_seq,
    }
    .encode(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_refused() {
        let spare = Spare {
            kind: PageKind::Data,
            index: 0xDEAD_BEEF,
            data_seq: 0x0102_0304_0506_0708,
            program_seq: u64::MAX - 1,
        };
        let mut bytes = [0xFFu8; SPARE_BYTES];
        assert_eq!(Spare::decode(&bytes), ReadSpare::Erased);
        spare.encode(&mut bytes);
        assert_eq!(Spare::decode(&bytes), ReadSpare::Valid(spare));
        // The layout is the documented one, checked byte by byte rather than by round trip.
        assert_eq!(&bytes[0..4], b"SGPG");
        assert_eq!(bytes[4..8], [1, 0, 0, 0]);
        assert_eq!(bytes[8..12], [0xEF, 0xBE, 0xAD, 0xDE]);
        assert_eq!(bytes[16..24], [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(
            u32::from_le_bytes(bytes[32..36].try_into().unwrap()),
            crc32c(&bytes[..32])
        );
        for at in 0..36 {
            let mut damaged = bytes;
            damaged[at] ^= 0x10;
            assert_eq!(Spare::decode(&damaged), ReadSpare::Garbled, "byte {at}");
        }
        assert_eq!(Spare::decode(&[0u8; SPARE_BYTES]), ReadSpare::Garbled);
        assert_eq!(Spare::decode(&bytes[..10]), ReadSpare::Garbled);
    }
}
