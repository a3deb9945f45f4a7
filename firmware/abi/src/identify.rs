//! Identify data structures (NVMe base specification §5.17.2): the fields the device fills in.
//!
//! Both structures are 4096 bytes; every field not named here is zero.

use crate::ns_config::NsLimits;

/// Size of every Identify data structure.
pub const IDENTIFY_SIZE_BYTES: usize = 4096;

/// CNS value: Identify Namespace.
pub const CNS_NAMESPACE: u8 = 0x00;
/// CNS value: Identify Controller.
pub const CNS_CONTROLLER: u8 = 0x01;

/// PCI vendor id written in Identify Controller (0xFFFF: none assigned; the emulator is not a
/// registered vendor's product).
pub const VENDOR_ID: u16 = 0xFFFF;

/// Byte offset of the vendor-specific area of Identify Controller, where sagessd reports its
/// sampling limits (`max_targets` u32, then `max_fanout` u16, after the magic `SAGE`).
pub const VENDOR_AREA_OFFSET: usize = 3072;

/// What Identify Controller reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerInfo<'a> {
    /// Serial number (ASCII, space padded to 20 bytes).
    pub serial: &'a str,
    /// Model number (ASCII, space padded to 40 bytes).
    pub model: &'a str,
    /// Firmware revision (ASCII, space padded to 8 bytes).
    pub firmware_revision: &'a str,
    /// Maximum data transfer size as a power of two of the minimum memory page size (4 KiB).
    pub mdts: u8,
    /// Number of namespaces.
    pub namespace_count: u32,
    /// The NS_config limits, reported in the vendor-specific area.
    pub limits: NsLimits,
}

fn put_ascii(out: &mut [u8], s: &str) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = s.as_bytes().get(i).copied().unwrap_or(b' ');
    }
}

impl ControllerInfo<'_> {
    /// Writes the Identify Controller data structure.
    pub fn encode(&self, out: &mut [u8; IDENTIFY_SIZE_BYTES]) {
        out.fill(0);
        out[0..2].copy_from_slice(&VENDOR_ID.to_le_bytes()); // VID
        out[2..4].copy_from_slice(&VENDOR_ID.to_le_bytes()); // SSVID
        put_ascii(&mut out[4..24], self.serial); // SN
        put_ascii(&mut out[24..64], self.model); // MN
        put_ascii(&mut out[64..72], self.firmware_revision); // FR
        out[77] = self.mdts; // MDTS
        out[80..84].copy_from_slice(&0x0002_0000u32.to_le_bytes()); // VER 2.0
        out[512] = 0x66; // SQES: 64 B
        out[513] = 0x44; // CQES: 16 B
        out[516..520].copy_from_slice(&self.namespace_count.to_le_bytes()); // NN
        out[520..522].copy_from_slice(&(1u16 << 2).to_le_bytes()); // ONCS: Dataset Management
        let v = VENDOR_AREA_OFFSET;
        out[v..v + 4].copy_from_slice(b"SAGE");
        out[v + 4..v + 8].copy_from_slice(&self.limits.max_targets.to_le_bytes());
        out[v + 8..v + 10].copy_from_slice(&self.limits.max_fanout.to_le_bytes());
    }

    /// Reads the sampling limits back from an Identify Controller structure, if it has them.
    pub fn decode_limits(data: &[u8]) -> Option<NsLimits> {
        let v = data.get(VENDOR_AREA_OFFSET..VENDOR_AREA_OFFSET + 10)?;
        if &v[..4] != b"SAGE" {
            return None;
        }
        Some(NsLimits {
            max_targets: u32::from_le_bytes(v[4..8].try_into().ok()?),
            max_fanout: u16::from_le_bytes(v[8..10].try_into().ok()?),
        })
    }
}

/// What Identify Namespace reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// Size in logical blocks (NSZE = NCAP).
    pub block_count: u64,
    /// Blocks currently mapped (NUSE).
    pub used_block_count: u64,
    /// log2 of the logical block size (LBADS of LBA format 0).
    pub block_size_log2: u8,
}

impl NamespaceInfo {
    /// Writes the Identify Namespace data structure.
    pub fn encode(&self, out: &mut [u8; IDENTIFY_SIZE_BYTES]) {
        out.fill(0);
        out[0..8].copy_from_slice(&self.block_count.to_le_bytes()); // NSZE
        out[8..16].copy_from_slice(&self.block_count.to_le_bytes()); // NCAP
        out[16..24].copy_from_slice(&self.used_block_count.to_le_bytes()); // NUSE
        out[24] = 1 << 0; // NSFEAT: thin provisioning (NUSE may be below NCAP)
        out[25] = 0; // NLBAF: one format
        out[26] = 0; // FLBAS: format 0
        out[128 + 2] = self.block_size_log2; // LBAF0.LBADS
    }

    /// Reads block count and block size back.
    pub fn decode(data: &[u8]) -> Option<Self> {
        Some(Self {
            block_count: u64::from_le_bytes(data.get(0..8)?.try_into().ok()?),
            used_block_count: u64::from_le_bytes(data.get(16..24)?.try_into().ok()?),
            block_size_log2: *data.get(130)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_fields_land_at_their_offsets() {
        let mut out = [0u8; IDENTIFY_SIZE_BYTES];
        let limits = NsLimits {
            max_targets: 4096,
            max_fanout: 64,
        };
        ControllerInfo {
            serial: "SN1",
            model: "sagessd",
            firmware_revision: "0.1",
            mdts: 5,
            namespace_count: 1,
            limits,
        }
        .encode(&mut out);
        assert_eq!(&out[4..8], b"SN1 ");
        assert_eq!(&out[24..31], b"sagessd");
        assert_eq!(out[77], 5);
        assert_eq!(out[516], 1);
        assert_eq!(ControllerInfo::decode_limits(&out), Some(limits));
    }

    #[test]
    fn namespace_round_trips() {
        let mut out = [0u8; IDENTIFY_SIZE_BYTES];
        let ns = NamespaceInfo {
            block_count: 1 << 20,
            used_block_count: 7,
            block_size_log2: 12,
        };
        ns.encode(&mut out);
        assert_eq!(NamespaceInfo::decode(&out), Some(ns));
    }
}
