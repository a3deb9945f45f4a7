//! The controller's DRAM as a bandwidth resource (`[dram] bandwidth_mb_s`).
//!
//! # Model
//!
//! Every byte moved into or out of the controller's DRAM occupies it: host DMA data (write
//! data in, read data and subgraphs out), a flash page's data on its way in from a read or out
//! to a program, and, on an FPGA-based CSD, a page's SSD→FPGA copy. A transfer of `n` bytes
//! occupies the DRAM for
//!
//! ```plain
//! dram_ns(n) = ceil(n × 1000 / bandwidth_mb_s)
//! ```
//!
//! and streams *alongside* the link that carries it (PCIe direction, flash channel, `[p2p]`
//! link): its DRAM share is requested when the link's data phase starts, and the transfer is
//! done at `max(link_done, dram_done)`; the link stays occupied until then (a DMA engine or a
//! channel controller cannot move bytes faster than DRAM takes or gives them). So a page-buffer
//! hit costs DRAM time (its DMA to the host reads DRAM), a miss costs NAND time plus DRAM time.
//!
//! The DRAM is one resource shared by all of these, but its requests do not come in time
//! order: host-side transfers are booked when a firmware call is simulated (possibly far ahead
//! on a queued PCIe direction), flash transfers as the NAND's events are processed. A FIFO
//! "busy until" would make a flash transfer wait behind a DMA booked earlier for a later time.
//! The DRAM is therefore a calendar of busy intervals: a transfer requested at `t` takes the
//! DRAM's free time from `t` on, in as many pieces as it needs (a DRAM controller interleaves
//! the bursts of its masters), and is done when it has had `dram_ns(n)` of it. Earlier bookings
//! keep their time (no reshuffling); the DRAM never idles while a booked transfer could use
//! it. Intervals before the earliest time any future request can name are forgotten.
//!
//! Not modelled: the firmware's own DRAM accesses (mapping table, page-buffer metadata; their
//! cost is in the core's cycle counts), SQE/CQE traffic (controller queues), refresh, bank
//! conflicts and read/write turnaround (the bandwidth is the configured figure, peak unless the
//! configuration says otherwise).

use std::collections::BTreeMap;

use crate::config::DramConfig;

/// Counters of the DRAM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DramStats {
    /// Bytes moved into or out of DRAM.
    pub bytes: u64,
    /// Transfers booked.
    pub transfers: u64,
    /// Time the DRAM spent moving data.
    pub busy_ns: u64,
}

/// The controller DRAM's bandwidth calendar.
#[derive(Clone, Debug)]
pub struct Dram {
    bandwidth_mb_s: u64,
    /// Busy intervals, start → end, disjoint and not touching (merged).
    busy: BTreeMap<u64, u64>,
    stats: DramStats,
}

impl Dram {
    /// The DRAM of `config` (assumed validated).
    pub fn new(config: &DramConfig) -> Self {
        Self::with_bandwidth(config.bandwidth_mb_s)
    }

    /// A DRAM moving `bandwidth_mb_s` MB/s (10^6 bytes per second; 0 is taken as 1).
    pub fn with_bandwidth(bandwidth_mb_s: u32) -> Self {
        Self {
            bandwidth_mb_s: u64::from(bandwidth_mb_s.max(1)),
            busy: BTreeMap::new(),
            stats: DramStats::default(),
        }
    }

    /// DRAM time of `bytes`: `ceil(bytes × 1000 / bandwidth_mb_s)`.
    pub fn transfer_ns(&self, bytes: u64) -> u64 {
        (u128::from(bytes) * 1000).div_ceil(u128::from(self.bandwidth_mb_s)) as u64
    }

    /// Bandwidth in bytes per second.
    pub fn bytes_per_s(&self) -> f64 {
        self.bandwidth_mb_s as f64 * 1e6
    }

    /// Counters.
    pub fn stats(&self) -> DramStats {
        self.stats
    }

    /// Moves `bytes` from `at_ns` on, in the DRAM's free time; returns when the last byte has
    /// moved.
    pub fn transfer(&mut self, at_ns: u64, bytes: u64) -> u64 {
        let mut need = self.transfer_ns(bytes);
        self.stats.bytes += bytes;
        self.stats.transfers += 1;
        self.stats.busy_ns += need;
        if need == 0 {
            return at_ns;
        }
        let mut t = at_ns;
        if let Some((_, &end)) = self.busy.range(..=t).next_back()
            && end > t
        {
            t = end;
        }
        loop {
            // `t` is free here; the next busy interval (if any) starts after it.
            match self.busy.range(t..).next().map(|(&s, &e)| (s, e)) {
                Some((s, e)) if s - t < need => {
                    need -= s - t;
                    self.insert(t, s);
                    t = e;
                }
                _ => {
                    self.insert(t, t + need);
                    return t + need;
                }
            }
        }
    }

    /// Busy intervals the calendar holds (what its memory grows with).
    pub fn interval_count(&self) -> usize {
        self.busy.len()
    }

    /// Forgets busy intervals that end at or before `t_ns` (no request will name an earlier
    /// time).
    pub fn forget_before(&mut self, t_ns: u64) {
        while let Some((&s, &e)) = self.busy.first_key_value() {
            if e > t_ns {
                break;
            }
            self.busy.remove(&s);
        }
    }

    /// Marks `[start, end)` busy, merging it with the intervals it touches.
    fn insert(&mut self, start: u64, end: u64) {
        let (mut start, mut end) = (start, end);
        if let Some((&s, &e)) = self.busy.range(..=start).next_back()
            && e >= start
        {
            start = s;
            end = end.max(e);
            self.busy.remove(&s);
        }
        while let Some((&s, &e)) = self.busy.range(start..).next() {
            if s > end {
                break;
            }
            end = end.max(e);
            self.busy.remove(&s);
        }
        self.busy.insert(start, end);
    }

    /// Busy intervals held (for tests).
    #[cfg(test)]
    fn intervals(&self) -> Vec<(u64, u64)> {
        self.busy.iter().map(|(&s, &e)| (s, e)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_time_is_bytes_over_bandwidth() {
        // 4,264 MB/s (32-bit DDR3-1066): a 16 KiB page takes 3,843 ns.
        let d = Dram::with_bandwidth(4264);
        assert_eq!(d.transfer_ns(16384), 3843);
        assert_eq!(d.transfer_ns(0), 0);
    }

    #[test]
    fn back_to_back_requests_queue() {
        let mut d = Dram::with_bandwidth(1000); // 1 byte per ns
        assert_eq!(d.transfer(0, 100), 100);
        assert_eq!(d.transfer(50, 100), 200);
        assert_eq!(d.transfer(500, 10), 510);
        assert_eq!(d.intervals(), vec![(0, 200), (500, 510)]);
        let s = d.stats();
        assert_eq!((s.bytes, s.transfers, s.busy_ns), (210, 3, 210));
    }

    #[test]
    fn an_earlier_request_booked_later_uses_the_free_time_before() {
        let mut d = Dram::with_bandwidth(1000);
        // A DMA booked ahead, for t = 1000.
        assert_eq!(d.transfer(1000, 100), 1100);
        // A flash transfer at t = 0 does not wait behind it.
        assert_eq!(d.transfer(0, 100), 100);
        // One that does not fit in the gap takes the gap, then continues after the interval.
        assert_eq!(d.transfer(950, 100), 1150);
        assert_eq!(d.intervals(), vec![(0, 100), (950, 1150)]);
        d.forget_before(100);
        assert_eq!(d.intervals(), vec![(950, 1150)]);
    }
}
