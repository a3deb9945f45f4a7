//! `[core_timing]`: the embedded core's micro-architecture, for `sagessd firmware calibrate`.

use serde::{Deserialize, Serialize};

use super::rules::{at_most, check, in_range, power_of_two};
use crate::error::EmulatorError;

/// `[core_timing]`: the caches and latencies of the core that runs the firmware, for
/// calibration. Cycles of a run are
/// `instructions × base_cycles_per_1000_instructions / 1000 + (L1 misses that hit L2) ×
/// l2_hit_penalty_cycles + (L2 misses) × (dram_penalty_cycles + dram_penalty_ns × clock)`,
/// instruction fetches and
/// data accesses alike, with the misses counted by replaying the run's accesses through
/// caches of this shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreTimingConfig {
    /// The core, for reports (e.g. "Cortex-A9").
    pub cpu: String,
    /// L1 instruction cache capacity.
    pub l1i_bytes: u32,
    /// L1 data cache capacity.
    pub l1d_bytes: u32,
    /// Ways of each L1.
    pub l1_ways: u32,
    /// Unified L2 capacity.
    pub l2_bytes: u32,
    /// Ways of the L2.
    pub l2_ways: u32,
    /// Line size of every level (a power of two).
    pub line_bytes: u32,
    /// Cycles per 1,000 instructions when every access hits L1 (the base CPI × 1000).
    pub base_cycles_per_1000_instructions: u32,
    /// Cycles an L1 miss that hits L2 adds.
    pub l2_hit_penalty_cycles: u32,
    /// Cycles an L2 miss adds on the core's side of the memory controller (the L2 lookup
    /// and the path to the controller), beside [`Self::dram_penalty_ns`].
    #[serde(default)]
    pub dram_penalty_cycles: u32,
    /// Nanoseconds an L2 miss adds in DRAM, converted at `cores.clock_mhz`.
    pub dram_penalty_ns: u32,
    /// Cycles the board's glue spends per NVMe command outside the firmware library (reading
    /// the command from the controller, posting its completion: uncached register accesses
    /// the calibration image does not have), added to the measured `cycles_per_command`.
    #[serde(default)]
    pub board_cycles_per_command: u64,
    /// The same per flash operation (the flash controller's registers), added to the measured
    /// `cycles_per_flash_op`.
    #[serde(default)]
    pub board_cycles_per_flash_op: u64,
    /// The same per poll (the status registers a poll reads), added to the measured
    /// `cycles_per_poll`.
    #[serde(default)]
    pub board_cycles_per_poll: u64,
}

impl CoreTimingConfig {
    /// Checks every field of the section.
    pub(super) fn validate(&self) -> Result<(), EmulatorError> {
        let m = self;
        power_of_two(m.line_bytes.into(), "core_timing.line_bytes")?;
        in_range(m.line_bytes.into(), 16, 256, "core_timing.line_bytes")?;
        for (bytes, ways, field) in [
            (m.l1i_bytes, m.l1_ways, "core_timing.l1i_bytes"),
            (m.l1d_bytes, m.l1_ways, "core_timing.l1d_bytes"),
            (m.l2_bytes, m.l2_ways, "core_timing.l2_bytes"),
        ] {
            in_range(ways.into(), 1, 64, field)?;
            let way_bytes = u64::from(ways) * u64::from(m.line_bytes);
            check(
                u64::from(bytes).is_multiple_of(way_bytes)
                    && (u64::from(bytes) / way_bytes).is_power_of_two(),
                field,
                || {
                    format!(
                        "{bytes} bytes is not a power-of-two number of {ways}-way sets of {}-byte lines",
                        m.line_bytes
                    )
                },
            )?;
        }
        in_range(
            m.base_cycles_per_1000_instructions.into(),
            100,
            100_000,
            "core_timing.base_cycles_per_1000_instructions",
        )?;
        at_most(
            m.l2_hit_penalty_cycles.into(),
            10_000,
            "core_timing.l2_hit_penalty_cycles",
        )?;
        at_most(
            m.dram_penalty_cycles.into(),
            10_000,
            "core_timing.dram_penalty_cycles",
        )?;
        at_most(
            m.dram_penalty_ns.into(),
            100_000,
            "core_timing.dram_penalty_ns",
        )
    }
}
