//! `[nand]`: the flash array's geometry and timing.

use sagessd_firmware::hal::Geometry;
use serde::{Deserialize, Serialize};

use super::rules::{MAX_LATENCY_NS, at_most, check, in_range, invalid, non_zero};
use crate::error::EmulatorError;

/// `[nand]`: geometry and timing of the flash array.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NandConfig {
    /// Independent flash channels (buses).
    pub channels: u32,
    /// Chips (chip enables) per channel.
    pub ways: u32,
    /// Independently operating dies per chip.
    pub dies_per_way: u32,
    /// Erase blocks per die.
    pub blocks_per_die: u32,
    /// Pages per erase block.
    pub pages_per_block: u32,
    /// User-data bytes per page (the spare area is not modelled).
    pub page_size_bytes: u32,
    /// Array-to-page-register read time (tR).
    pub t_read_ns: u64,
    /// Page-register-to-array program time (tPROG).
    pub t_program_ns: u64,
    /// Block erase time (tBERS).
    pub t_erase_ns: u64,
    /// Data rate of one channel bus, in MB/s (10^6 bytes per second).
    pub channel_rate_mb_s: u32,
    /// Channel time of one operation's command, address and status cycles.
    pub command_overhead_ns: u64,
    /// Planes per die (a power of two, at most 8, dividing `blocks_per_die`; block `b` sits on
    /// plane `b % planes_per_die`). Reads or programs of one die on different planes that wait
    /// together share one tR or tPROG (multi-plane operation, see [`crate::nand`]). Optional:
    /// 1 when absent.
    #[serde(default = "one_plane")]
    pub planes_per_die: u32,
}

fn one_plane() -> u32 {
    1
}

impl NandConfig {
    /// The firmware-facing geometry of this array.
    pub fn geometry(&self) -> Geometry {
        Geometry {
            channels: self.channels,
            ways: self.ways,
            dies_per_way: self.dies_per_way,
            blocks_per_die: self.blocks_per_die,
            pages_per_block: self.pages_per_block,
            page_size_bytes: self.page_size_bytes,
        }
    }

    /// Channel time to move one page: `ceil(page_size_bytes × 1000 / channel_rate_mb_s)` ns
    /// (1 MB/s moves one byte per 1000 ns).
    pub fn page_transfer_ns(&self) -> u64 {
        (u64::from(self.page_size_bytes) * 1000).div_ceil(u64::from(self.channel_rate_mb_s.max(1)))
    }

    /// Checks every field of the section.
    pub(super) fn validate(&self) -> Result<(), EmulatorError> {
        let n = self;
        non_zero(n.channels.into(), "nand.channels")?;
        non_zero(n.ways.into(), "nand.ways")?;
        non_zero(n.dies_per_way.into(), "nand.dies_per_way")?;
        non_zero(n.blocks_per_die.into(), "nand.blocks_per_die")?;
        non_zero(n.pages_per_block.into(), "nand.pages_per_block")?;
        check(
            n.page_size_bytes >= 512 && n.page_size_bytes.is_multiple_of(512),
            "nand.page_size_bytes",
            || format!("must be a multiple of 512 (got {})", n.page_size_bytes),
        )?;
        let pages = [
            n.channels,
            n.ways,
            n.dies_per_way,
            n.blocks_per_die,
            n.pages_per_block,
        ]
        .iter()
        .try_fold(1u64, |acc, c| acc.checked_mul(u64::from(*c)));
        check(
            matches!(pages, Some(p) if p < u64::from(u32::MAX)),
            "nand.blocks_per_die",
            || {
                "channels × ways × dies_per_way × blocks_per_die × pages_per_block \
                 must be below 2^32 physical pages"
                    .to_string()
            },
        )?;
        in_range(n.t_read_ns, 1, MAX_LATENCY_NS, "nand.t_read_ns")?;
        in_range(n.t_program_ns, 1, MAX_LATENCY_NS, "nand.t_program_ns")?;
        in_range(n.t_erase_ns, 1, MAX_LATENCY_NS, "nand.t_erase_ns")?;
        non_zero(n.channel_rate_mb_s.into(), "nand.channel_rate_mb_s")?;
        at_most(
            n.command_overhead_ns,
            MAX_LATENCY_NS,
            "nand.command_overhead_ns",
        )?;
        let planes = n.planes_per_die;
        if !(planes.is_power_of_two() && planes <= 8 && n.blocks_per_die.is_multiple_of(planes)) {
            return Err(invalid(
                "nand.planes_per_die",
                format!("must be 1, 2, 4 or 8 and divide blocks_per_die, not {planes}"),
            ));
        }
        Ok(())
    }
}
