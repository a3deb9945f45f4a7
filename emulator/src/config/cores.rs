//! `[cores]`: the embedded cores, and what each unit of the firmware's counted work costs them.

use serde::{Deserialize, Serialize};

use super::rules::{MAX_CYCLES, at_most, in_range};
use crate::error::EmulatorError;

/// `[cores]`: the embedded cores and what each unit of counted firmware work costs them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoresConfig {
    /// Number of cores (see [`crate::cores`] for how they are used).
    pub count: u32,
    /// Cores of `count` dedicated to in-storage processing (optional, default 0: in-storage
    /// sampling time-shares every core with the flash firmware, one sampling lane per core,
    /// lane 0 on the firmware's own core). At least 1: one lane on each, the flash firmware on
    /// a core of its own (see [`crate::cores`]). At most `count - 1` (the firmware keeps a
    /// core).
    #[serde(default)]
    pub isp_cores: u32,
    /// Core clock in MHz.
    pub clock_mhz: u32,
    /// Cycles to fetch, parse and dispatch one NVMe command.
    pub cycles_per_command: u64,
    /// Cycles to issue and retire one flash operation.
    pub cycles_per_flash_op: u64,
    /// Cycles per page-buffer lookup.
    pub cycles_per_page_lookup: u64,
    /// Cycles of per-page bookkeeping when the ISP engine scans a flash page.
    pub cycles_per_page_scanned: u64,
    /// Cycles per feature row the ISP engine gathers (found in its page and copied out).
    pub cycles_per_row_gathered: u64,
    /// Cycles per neighbour the ISP engine samples (deduplication, output).
    pub cycles_per_edge_sampled: u64,
    /// Cycles per neighbour the ISP engine returns as a global id without deduplicating it
    /// (the last layer of a job that returns its sampled ids). Optional: without it,
    /// `cycles_per_edge_sampled` (an upper bound: the same work and a probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_edge_emitted: Option<u64>,
    /// Cycles a sampled neighbour's probe adds when its node was added long before (its
    /// node-table entry most likely out of the caches). Optional: without it 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_stale_repeat: Option<u64>,
    /// Cycles per neighbour position the ISP engine draws at random (a node whose degree
    /// exceeds the fanout). Optional: without it 0, as when `cycles_per_edge_sampled` priced
    /// the draw with the rest of a sampled edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_edge_drawn: Option<u64>,
    /// Cycles per target the ISP engine deduplicates into a job's node list (a load, a
    /// node-table probe, a write). Optional: without it, `cycles_per_edge_sampled`, what a
    /// target cost while one counter priced both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_target: Option<u64>,
    /// Cycles per node the ISP engine adds to a job's node list (its node-table entry and its
    /// place in the list; the probe that found it new is the target's or sampled edge's).
    /// Optional: without it, `cycles_per_edge_sampled`, as for targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_node_added: Option<u64>,
    /// Cycles per destination the ISP engine samples in a layer (its sort key, its bounds
    /// checked, its edges placed, its local `indptr` entry). Optional: without it 0, as when
    /// the gather items priced a destination's work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_destination: Option<u64>,
    /// Cycles per KiB of data the cores copy.
    pub cycles_per_kib_copied: u64,
    /// Cycles per key per radix-sort pass of the ISP engine (count, then scatter).
    pub cycles_per_sort_key_move: u64,
    /// Fixed cycles of one radix-sort pass (clearing and prefix-summing its histogram).
    /// Optional: without it 0, as when the key moves priced the whole sort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_radix_pass: Option<u64>,
    /// Cycles per block-table entry the FTL scans when it picks a garbage-collection victim.
    pub cycles_per_block_scanned: u64,
    /// Fixed cycles of one pass of the firmware's poll loop, fruitful or not (checking the
    /// flash completion queue, the GC state, the command table and the ISP engine).
    pub cycles_per_poll: u64,
    /// Cycles to look at one parked command during a poll (load its record, test its state),
    /// whether or not it can move.
    pub cycles_per_parked_command: u64,
    /// Cycles the board's glue spends per KiB of page data a flash read brings into DRAM (the
    /// sectors it names), where the flash DMA does not snoop the cores' caches: invalidating
    /// those lines before and after the transfer. Optional: without it 0 (a coherent DMA, or
    /// a glue that does not touch the data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_kib_flash_read: Option<u64>,
    /// The same per KiB a flash program takes from DRAM: cleaning the page's lines to DRAM
    /// before the transfer. Optional: without it 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_kib_flash_program: Option<u64>,
}

impl CoresConfig {
    /// Cycles per target deduplicated: `cycles_per_target`, else `cycles_per_edge_sampled`.
    pub fn target_cycles(&self) -> u64 {
        self.cycles_per_target
            .unwrap_or(self.cycles_per_edge_sampled)
    }

    /// Cycles per neighbour emitted undeduplicated: `cycles_per_edge_emitted`, else
    /// `cycles_per_edge_sampled`.
    pub fn edge_emitted_cycles(&self) -> u64 {
        self.cycles_per_edge_emitted
            .unwrap_or(self.cycles_per_edge_sampled)
    }

    /// Cycles per random draw: `cycles_per_edge_drawn`, else 0.
    pub fn edge_drawn_cycles(&self) -> u64 {
        self.cycles_per_edge_drawn.unwrap_or(0)
    }

    /// Cycles per KiB of flash-read data kept coherent: `cycles_per_kib_flash_read`, else 0.
    pub fn kib_flash_read_cycles(&self) -> u64 {
        self.cycles_per_kib_flash_read.unwrap_or(0)
    }

    /// Cycles per KiB of flash-program data kept coherent: `cycles_per_kib_flash_program`,
    /// else 0.
    pub fn kib_flash_program_cycles(&self) -> u64 {
        self.cycles_per_kib_flash_program.unwrap_or(0)
    }

    /// Cycles per radix-sort pass: `cycles_per_radix_pass`, else 0.
    pub fn radix_pass_cycles(&self) -> u64 {
        self.cycles_per_radix_pass.unwrap_or(0)
    }

    /// Cycles per stale repeat: `cycles_per_stale_repeat`, else 0.
    pub fn stale_repeat_cycles(&self) -> u64 {
        self.cycles_per_stale_repeat.unwrap_or(0)
    }

    /// Cycles per destination sampled: `cycles_per_destination`, else 0.
    pub fn destination_cycles(&self) -> u64 {
        self.cycles_per_destination.unwrap_or(0)
    }

    /// Cycles per node added to a job's node list: `cycles_per_node_added`, else
    /// `cycles_per_edge_sampled`.
    pub fn node_added_cycles(&self) -> u64 {
        self.cycles_per_node_added
            .unwrap_or(self.cycles_per_edge_sampled)
    }

    /// Checks every field of the section (a cost past 10^9 cycles is a unit mistake).
    pub(super) fn validate(&self) -> Result<(), EmulatorError> {
        let c = self;
        in_range(c.count.into(), 1, 64, "cores.count")?;
        in_range(c.clock_mhz.into(), 1, 100_000, "cores.clock_mhz")?;
        in_range(
            c.isp_cores.into(),
            0,
            u64::from(c.count.saturating_sub(1)),
            "cores.isp_cores",
        )?;
        for (cycles, field) in [
            (c.cycles_per_command, "cores.cycles_per_command"),
            (c.cycles_per_flash_op, "cores.cycles_per_flash_op"),
            (c.cycles_per_page_lookup, "cores.cycles_per_page_lookup"),
            (c.cycles_per_page_scanned, "cores.cycles_per_page_scanned"),
            (c.cycles_per_row_gathered, "cores.cycles_per_row_gathered"),
            (c.cycles_per_edge_sampled, "cores.cycles_per_edge_sampled"),
            (c.edge_emitted_cycles(), "cores.cycles_per_edge_emitted"),
            (c.target_cycles(), "cores.cycles_per_target"),
            (c.edge_drawn_cycles(), "cores.cycles_per_edge_drawn"),
            (c.radix_pass_cycles(), "cores.cycles_per_radix_pass"),
            (c.node_added_cycles(), "cores.cycles_per_node_added"),
            (c.stale_repeat_cycles(), "cores.cycles_per_stale_repeat"),
            (c.destination_cycles(), "cores.cycles_per_destination"),
            (c.cycles_per_kib_copied, "cores.cycles_per_kib_copied"),
            (c.cycles_per_sort_key_move, "cores.cycles_per_sort_key_move"),
            (c.cycles_per_block_scanned, "cores.cycles_per_block_scanned"),
            (c.cycles_per_poll, "cores.cycles_per_poll"),
            (
                c.cycles_per_parked_command,
                "cores.cycles_per_parked_command",
            ),
            (c.kib_flash_read_cycles(), "cores.cycles_per_kib_flash_read"),
            (
                c.kib_flash_program_cycles(),
                "cores.cycles_per_kib_flash_program",
            ),
        ] {
            at_most(cycles, MAX_CYCLES, field)?;
        }
        Ok(())
    }
}
