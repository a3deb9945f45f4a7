//! Identify data structures (NVMe base specification §5.17.2) and the log pages (§5.16) the
//! device fills in: only the fields named here; every other byte is zero.

use crate::ns_config::NsLimits;
use crate::tunnel::TunnelWindow;

/// Offset of the tunnel window's fields within the vendor area.
const TUNNEL_OFFSET: usize = 16;

/// Size of every Identify data structure.
pub const IDENTIFY_SIZE_BYTES: usize = 4096;

/// CNS value: Identify Namespace.
pub const CNS_NAMESPACE: u8 = 0x00;
/// CNS value: Identify Controller.
pub const CNS_CONTROLLER: u8 = 0x01;
/// CNS value: Active Namespace ID list.
pub const CNS_ACTIVE_NAMESPACES: u8 = 0x02;
/// CNS value: Namespace Identification Descriptor list.
pub const CNS_NAMESPACE_DESCRIPTORS: u8 = 0x03;
/// CNS value: I/O Command Set specific Identify Controller.
pub const CNS_CSI_CONTROLLER: u8 = 0x06;
/// Command set identifier of the NVM command set.
pub const CSI_NVM: u8 = 0x00;

/// PCI vendor id written in Identify Controller (0xFFFF: none assigned; the emulator is not a
/// registered vendor's product).
pub const VENDOR_ID: u16 = 0xFFFF;

/// Byte offset of the vendor-specific area of Identify Controller, where sagessd reports its
/// sampling limits (`max_targets` u32, `max_fanout` u16, then `max_minibatches` u16, after the
/// magic `SAGE`).
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
    /// The tunnel window, reported in the vendor-specific area after the limits.
    pub tunnel: Option<TunnelWindow>,
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
        // ONCS: Write Zeroes (bit 3) and Dataset Management (bit 2).
        out[520..522].copy_from_slice(&(1u16 << 3 | 1 << 2).to_le_bytes());
        // VWC: no volatile write cache. A write completes only once its pages are programmed,
        // and the mapping is rebuilt from the pages after a power loss, so every completed
        // write is durable; a Flush has nothing to flush, and FUA changes nothing.
        out[525] = 0;
        let v = VENDOR_AREA_OFFSET;
        out[v..v + 4].copy_from_slice(b"SAGE");
        out[v + 4..v + 8].copy_from_slice(&self.limits.max_targets.to_le_bytes());
        out[v + 8..v + 10].copy_from_slice(&self.limits.max_fanout.to_le_bytes());
        out[v + 10..v + 12].copy_from_slice(&self.limits.max_minibatches.to_le_bytes());
        if let Some(t) = self.tunnel {
            t.encode(&mut out[v + TUNNEL_OFFSET..]);
        }
    }

    /// Reads the tunnel window back from an Identify Controller structure, if it has one.
    pub fn decode_tunnel(data: &[u8]) -> Option<TunnelWindow> {
        ControllerInfo::decode_limits(data)?;
        TunnelWindow::decode(data.get(VENDOR_AREA_OFFSET + TUNNEL_OFFSET..)?)
    }

    /// Reads the sampling limits back from an Identify Controller structure, if it has them
    /// (a device that reports no minibatch limit takes plain NS_configs only).
    pub fn decode_limits(data: &[u8]) -> Option<NsLimits> {
        let v = data.get(VENDOR_AREA_OFFSET..VENDOR_AREA_OFFSET + 12)?;
        if &v[..4] != b"SAGE" {
            return None;
        }
        Some(NsLimits {
            max_targets: u32::from_le_bytes(v[4..8].try_into().ok()?),
            max_fanout: u16::from_le_bytes(v[8..10].try_into().ok()?),
            max_minibatches: u16::from_le_bytes(v[10..12].try_into().ok()?).max(1),
        })
    }
}

/// Writes the NVM command set's Identify Controller data structure (CNS 06h, CSI 00h). Only
/// WZSL is set: a Write Zeroes may name as many bytes as one transfer (`mdts`, the same
/// power-of-two units), since the device zeroes a range a transfer's pages at a time; the other
/// limits are zero (none reported).
pub fn encode_nvm_controller(mdts: u8, out: &mut [u8; IDENTIFY_SIZE_BYTES]) {
    out.fill(0);
    out[1] = mdts; // WZSL
}

/// Writes the Active Namespace ID list: the ids of `namespace_count` namespaces (numbered from
/// 1) greater than `after`, ascending, zero-terminated.
pub fn encode_active_namespaces(
    namespace_count: u32,
    after: u32,
    out: &mut [u8; IDENTIFY_SIZE_BYTES],
) {
    out.fill(0);
    let ids = (after.saturating_add(1).max(1)..=namespace_count).take(IDENTIFY_SIZE_BYTES / 4);
    for (slot, id) in out.chunks_exact_mut(4).zip(ids) {
        slot.copy_from_slice(&id.to_le_bytes());
    }
}

/// Bytes of the SMART / Health Information and Firmware Slot Information log pages.
pub const LOG_PAGE_BYTES: usize = 512;

/// What the SMART / Health Information log page reports (counters since the device booted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealthLog {
    /// Data read by the host, in 512-byte units (the log reports thousands of them).
    pub sectors_read: u64,
    /// Data written by the host, in 512-byte units.
    pub sectors_written: u64,
    /// Read commands completed.
    pub host_reads: u64,
    /// Write commands completed.
    pub host_writes: u64,
    /// Percentage of the flash's free blocks in use as spare (0–100).
    pub spare_percent: u8,
}

impl HealthLog {
    /// Writes the SMART / Health Information log page.
    pub fn encode(&self, out: &mut [u8; LOG_PAGE_BYTES]) {
        out.fill(0);
        out[1..3].copy_from_slice(&293u16.to_le_bytes()); // composite temperature: 20 °C
        out[3] = self.spare_percent; // available spare
        out[4] = 10; // available spare threshold
        let put = |out: &mut [u8; LOG_PAGE_BYTES], at: usize, v: u64| {
            out[at..at + 8].copy_from_slice(&v.to_le_bytes());
        };
        // Data units are thousands of 512-byte units, rounded up.
        put(out, 32, self.sectors_read.div_ceil(1000));
        put(out, 48, self.sectors_written.div_ceil(1000));
        put(out, 64, self.host_reads);
        put(out, 80, self.host_writes);
    }
}

/// Writes the Firmware Slot Information log page: slot 1 active, holding `revision`.
pub fn encode_firmware_slot_log(revision: &str, out: &mut [u8; LOG_PAGE_BYTES]) {
    out.fill(0);
    out[0] = 1; // AFI: slot 1 active
    put_ascii(&mut out[8..16], revision); // FRS1
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
    /// Namespace globally unique identifier (NGUID).
    pub nguid: [u8; 16],
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
        // DLFEAT: a deallocated (or never written) block reads as zeros (bits 2:0 = 001b), and
        // Write Zeroes honours its Deallocate bit (bit 3).
        out[33] = 1 << 3 | 0b001;
        out[104..120].copy_from_slice(&self.nguid); // NGUID
        out[128 + 2] = self.block_size_log2; // LBAF0.LBADS
    }

    /// Writes the Namespace Identification Descriptor list: one NGUID descriptor.
    pub fn encode_descriptors(&self, out: &mut [u8; IDENTIFY_SIZE_BYTES]) {
        out.fill(0);
        out[0] = 0x02; // NIDT: NGUID
        out[1] = 16; // NIDL
        out[4..20].copy_from_slice(&self.nguid);
    }

    /// Reads block count and block size back.
    pub fn decode(data: &[u8]) -> Option<Self> {
        Some(Self {
            block_count: u64::from_le_bytes(data.get(0..8)?.try_into().ok()?),
            used_block_count: u64::from_le_bytes(data.get(16..24)?.try_into().ok()?),
            block_size_log2: *data.get(130)?,
            nguid: data.get(104..120)?.try_into().ok()?,
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
            max_minibatches: 16,
        };
        ControllerInfo {
            serial: "SN1",
            model: "sagessd",
            firmware_revision: "0.1",
            mdts: 5,
            namespace_count: 1,
            limits,
            tunnel: None,
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
            nguid: [7; 16],
        };
        ns.encode(&mut out);
        assert_eq!(NamespaceInfo::decode(&out), Some(ns));
    }
}
