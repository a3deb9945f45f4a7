//! The PCIe link between host and device: one FIFO resource per direction.
//!
//! # Model
//!
//! A transfer of `n` payload bytes is cut into `ceil(n / max_payload_bytes)` TLPs, each adding
//! `tlp_overhead_bytes` on the wire (framing, sequence number, header, LCRC), so
//!
//! ```plain
//! wire_bytes    = n + ceil(n / max_payload_bytes) × tlp_overhead_bytes
//! line_rate     = GT/s per lane × lanes × encoding        (bits per ns)
//!                 encoding = 8/10 for Gen1–2 (8b/10b), 128/130 for Gen3+ (128b/130b)
//! transfer_ns   = ceil(wire_bytes × 8 / line_rate)
//! ```
//!
//! For full-size TLPs this is the familiar effective rate
//! `line_rate × payload / (payload + overhead)`; e.g. Gen2 ×8 (5 GT/s × 8 × 0.8 = 4 B/ns raw)
//! with 128-byte payloads and 24 bytes of overhead moves 3.37 GB/s of data.
//!
//! Each direction is a FIFO with a "busy until" time. A DMA requested at `t` first pays a fixed
//! set-up latency, then its data occupies the direction:
//! `start = max(t + setup, busy_until)`, `done = busy_until = start + transfer_ns`.
//! The set-up depends on the direction, because the two kinds of transaction differ:
//!
//! * **host→device** (SQE fetch, write data, vendor payloads) is a *device read of host memory*:
//!   a read-request TLP goes up, the root complex reads memory, completion TLPs come back. It
//!   pays `dma_read_setup_ns`, the read round trip.
//! * **device→host** (read data, subgraphs, CQEs) is a *posted write*: the device sends the
//!   data and waits for nothing. It pays `posted_write_setup_ns`, its descriptor set-up and one
//!   crossing of link and root complex into host memory.
//!
//! Set-up latency overlaps other transfers; bandwidth does not. Flow-control credits, ACK/NAK
//! DLLPs and replay are not modelled.

use crate::config::PcieConfig;

/// Which way data moves on the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Host to controller (submission entries, write data, NS_config payloads).
    HostToDevice,
    /// Controller to host (read data, sampled subgraphs, completion entries).
    DeviceToHost,
}

/// Counters of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Payload bytes moved.
    pub payload_bytes: u64,
    /// Bytes on the wire including TLP overhead.
    pub wire_bytes: u64,
    /// TLPs sent.
    pub tlps: u64,
    /// Transfers (DMAs) performed.
    pub transfers: u64,
    /// Time the direction spent moving data.
    pub busy_ns: u64,
}

#[derive(Clone, Debug, Default)]
struct Lane {
    busy_until_ns: u64,
    stats: LinkStats,
}

/// A PCIe link with independent host→device and device→host directions.
#[derive(Clone, Debug)]
pub struct PcieLink {
    /// Line rate numerator: `MT/s per lane × lanes × encoding numerator`.
    rate_num: u128,
    /// Line rate denominator: `1000 × encoding denominator` (so the rate is in bits per ns).
    rate_den: u128,
    max_payload_bytes: u64,
    tlp_overhead_bytes: u64,
    dma_read_setup_ns: u64,
    posted_write_setup_ns: u64,
    h2c: Lane,
    c2h: Lane,
}

impl PcieLink {
    /// A link as described by `config` (assumed validated).
    pub fn new(config: &PcieConfig) -> Self {
        let mt_s: u128 = match config.generation {
            1 => 2_500,
            2 => 5_000,
            3 => 8_000,
            4 => 16_000,
            _ => 32_000,
        };
        let (enc_num, enc_den): (u128, u128) = if config.generation <= 2 {
            (8, 10)
        } else {
            (128, 130)
        };
        Self {
            rate_num: mt_s * u128::from(config.lanes) * enc_num,
            rate_den: 1000 * enc_den,
            max_payload_bytes: u64::from(config.max_payload_bytes.max(1)),
            tlp_overhead_bytes: u64::from(config.tlp_overhead_bytes),
            dma_read_setup_ns: config.dma_read_setup_ns,
            posted_write_setup_ns: config.posted_write_setup_ns,
            h2c: Lane::default(),
            c2h: Lane::default(),
        }
    }

    /// TLPs needed for `bytes` of payload (at least one: a zero-length read still sends one).
    pub fn tlp_count(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.max_payload_bytes).max(1)
    }

    /// Bytes on the wire for `bytes` of payload.
    pub fn wire_bytes(&self, bytes: u64) -> u64 {
        bytes + self.tlp_count(bytes) * self.tlp_overhead_bytes
    }

    /// Time the link is occupied moving `bytes` of payload in one direction.
    pub fn transfer_ns(&self, bytes: u64) -> u64 {
        let bits = u128::from(self.wire_bytes(bytes)) * 8 * self.rate_den;
        bits.div_ceil(self.rate_num) as u64
    }

    /// Effective data bandwidth with full-size TLPs, in MB/s (10^6 bytes per second).
    pub fn effective_rate_mb_s(&self) -> f64 {
        let line_bytes_per_ns = self.rate_num as f64 / self.rate_den as f64 / 8.0;
        let mps = self.max_payload_bytes as f64;
        line_bytes_per_ns * mps / (mps + self.tlp_overhead_bytes as f64) * 1000.0
    }

    /// Fixed latency before a DMA's data flows: the read round trip host→device, the posted
    /// write's set-up device→host.
    pub fn setup_ns(&self, direction: Direction) -> u64 {
        match direction {
            Direction::HostToDevice => self.dma_read_setup_ns,
            Direction::DeviceToHost => self.posted_write_setup_ns,
        }
    }

    /// Performs a DMA of `bytes` requested at `at_ns`; returns when its last byte has arrived.
    pub fn transfer(&mut self, direction: Direction, at_ns: u64, bytes: u64) -> u64 {
        let duration = self.transfer_ns(bytes);
        let wire = self.wire_bytes(bytes);
        let tlps = self.tlp_count(bytes);
        let setup = self.setup_ns(direction);
        let lane = match direction {
            Direction::HostToDevice => &mut self.h2c,
            Direction::DeviceToHost => &mut self.c2h,
        };
        let start = (at_ns + setup).max(lane.busy_until_ns);
        lane.busy_until_ns = start + duration;
        lane.stats.payload_bytes += bytes;
        lane.stats.wire_bytes += wire;
        lane.stats.tlps += tlps;
        lane.stats.transfers += 1;
        lane.stats.busy_ns += duration;
        lane.busy_until_ns
    }

    /// Keeps `direction` occupied until at least `until_ns`: a transfer whose other end (the
    /// controller DRAM, see [`crate::dram`]) was slower than the link holds it until it is done.
    pub fn hold_until(&mut self, direction: Direction, until_ns: u64) {
        let lane = match direction {
            Direction::HostToDevice => &mut self.h2c,
            Direction::DeviceToHost => &mut self.c2h,
        };
        lane.busy_until_ns = lane.busy_until_ns.max(until_ns);
    }

    /// Counters of one direction.
    pub fn stats(&self, direction: Direction) -> LinkStats {
        match direction {
            Direction::HostToDevice => self.h2c.stats,
            Direction::DeviceToHost => self.c2h.stats,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(generation: u8, lanes: u8) -> PcieLink {
        PcieLink::new(&PcieConfig {
            generation,
            lanes,
            max_payload_bytes: 128,
            tlp_overhead_bytes: 24,
            dma_read_setup_ns: 500,
            posted_write_setup_ns: 300,
        })
    }

    #[test]
    fn gen2_x8_moves_four_raw_bytes_per_ns() {
        let l = link(2, 8);
        // 16 KiB: 128 TLPs × (128 + 24) = 19456 wire bytes at 4 B/ns.
        assert_eq!(l.wire_bytes(16384), 19456);
        assert_eq!(l.transfer_ns(16384), 4864);
        assert!((l.effective_rate_mb_s() - 4000.0 * 128.0 / 152.0).abs() < 1e-6);
        // One 64-byte submission entry: one TLP of 88 bytes = 22 ns.
        assert_eq!(l.transfer_ns(64), 22);
    }

    #[test]
    fn gen3_uses_128b130b_encoding() {
        let l = link(3, 4);
        // 8 GT/s × 4 × 128/130 = 31.5 bits/ns; 152 wire bytes = 1216 bits → 38.6 ns.
        assert_eq!(l.transfer_ns(128), 39);
        assert!(link(5, 16).transfer_ns(1 << 20) < link(4, 16).transfer_ns(1 << 20));
    }

    #[test]
    fn directions_are_independent_fifos_and_setup_overlaps() {
        let mut l = link(2, 8);
        let a = l.transfer(Direction::DeviceToHost, 0, 16384);
        assert_eq!(a, 300 + 4864);
        // Requested while the first is in flight: its set-up overlaps, its data queues.
        let b = l.transfer(Direction::DeviceToHost, 100, 16384);
        assert_eq!(b, a + 4864);
        // The other direction is free.
        let c = l.transfer(Direction::HostToDevice, 0, 64);
        assert_eq!(c, 500 + 22);
        let s = l.stats(Direction::DeviceToHost);
        assert_eq!((s.payload_bytes, s.tlps, s.transfers), (32768, 256, 2));
        assert_eq!(l.stats(Direction::HostToDevice).wire_bytes, 88);
    }
}
