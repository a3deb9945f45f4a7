//! The embedded cores: firmware work, as counted by the firmware, converted into time.
//!
//! The firmware never reads a clock; it counts what it does in [`WorkCounters`]. After each
//! firmware call the emulator takes the counters' delta and charges
//!
//! ```plain
//! cycles = commands      × cycles_per_command
//!        + flash_ops     × cycles_per_flash_op
//!        + page_lookups  × cycles_per_page_lookup
//!        + pages_scanned × cycles_per_page_scanned
//!        + rows_gathered × cycles_per_row_gathered
//!        + edges_sampled × cycles_per_edge_sampled
//!        + edges_emitted × cycles_per_edge_emitted
//!        + stale_repeats × cycles_per_stale_repeat
//!        + edges_drawn   × cycles_per_edge_drawn
//!        + targets_deduplicated × cycles_per_target
//!        + nodes_added × cycles_per_node_added
//!        + destinations × cycles_per_destination
//!        + ceil(bytes_copied × cycles_per_kib_copied / 1024)
//!        + sort_key_moves × cycles_per_sort_key_move
//!        + radix_passes   × cycles_per_radix_pass
//!        + blocks_scanned × cycles_per_block_scanned
//!        + polls          × cycles_per_poll
//!        + parked_checked × cycles_per_parked_command
//! time_ns = ceil(cycles × 1000 / clock_mhz)
//! ```
//!
//! # Polling is not free
//!
//! The firmware is a poll loop: every `Firmware::poll` call costs `cycles_per_poll` (checking
//! the flash completion queue, the GC state, the command table and the ISP engine), and every
//! parked command it looks at costs `cycles_per_parked_command`, whether or not the command
//! can move. So a poll that finds nothing to do still occupies the core, and a deep queue of
//! parked commands makes every sweep longer. The emulator does not simulate the idle spin: an
//! idle firmware is woken at the instant of the event that gives it work (a flash completion,
//! a command arrival), as if its idle poll noticed it at once; the last, fruitless poll before
//! it goes idle is charged (it delays a wake-up that falls inside it).
//!
//! # Which core runs what
//!
//! The sagessd firmware is one poll-driven thread (no threads, no interrupts), whose ISP engine
//! samples up to `isp_lanes` jobs at once, each a state machine in its own *lane* (its own
//! DRAM working regions and share of the page-buffer window), stepped on its own
//! (`Firmware::poll_isp_lane`). The emulator calls the firmware one call at a time (it is not
//! reentrant) and charges each call's time to the core that would run it, each core a timeline
//! with its own "busy until":
//!
//! * **Dedicated ISP cores** (`isp_cores = k ≥ 1`, Newport's A53s): core 0 runs the flash
//!   firmware (`poll_io`: NVMe commands, flash completions, GC, the flash queue); each of the
//!   k ISP cores runs one lane (k lanes). A lane core is woken when a firmware call that made
//!   progress leaves its lane work (a job queued or running), and the flash reads a lane call
//!   issues are dated on its core.
//! * **Time-shared** (`isp_cores = 0`, the default, SmartSAGE's Cosmos+ prototype whose
//!   sampling "time-shares the embedded cores with the flash management firmware"): one lane
//!   per core. Lane 0 runs inside the firmware's own calls on core 0 (`poll_with_lane`: the I/O
//!   work then one step of lane 0, charged together), so a job there delays NVMe and FTL work
//!   and the other way round; lanes 1.. run on the other cores. A job goes to the lowest idle
//!   lane, so a lone job shares core 0 with the firmware.
//!
//! The lanes come from `HwConfig::isp_lanes` (at most `[firmware] isp_slots` and the
//! firmware's 4). Without in-storage processing the firmware is one core's `poll`.
//! Simplifications: a call sees the other cores' state as of their last call *start* (its
//! effects are applied at once, not at its end), optimistic by at most one call of another
//! core; the lanes depend on core 0 to retire their flash reads (as in the firmware); a lane
//! core's idle loop costs nothing (`poll_isp_lane` counts no poll). The further cores of
//! `count` with dedicated ISP cores are described but idle.

use sagessd_firmware::work::WorkCounters;

use crate::config::CoresConfig;
use crate::nand::DmaBytes;

/// Converts counted firmware work into core cycles and nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreModel {
    config: CoresConfig,
}

impl CoreModel {
    /// A model with the costs and clock of `config` (assumed validated).
    pub fn new(config: &CoresConfig) -> Self {
        Self {
            config: config.clone(),
        }
    }

    /// Cycles the work `w` costs.
    pub fn cycles(&self, w: &WorkCounters) -> u64 {
        let c = &self.config;
        let terms = [
            w.commands.saturating_mul(c.cycles_per_command),
            w.flash_ops.saturating_mul(c.cycles_per_flash_op),
            w.page_lookups.saturating_mul(c.cycles_per_page_lookup),
            w.pages_scanned.saturating_mul(c.cycles_per_page_scanned),
            w.rows_gathered.saturating_mul(c.cycles_per_row_gathered),
            w.edges_sampled.saturating_mul(c.cycles_per_edge_sampled),
            w.edges_emitted.saturating_mul(c.edge_emitted_cycles()),
            w.stale_repeats.saturating_mul(c.stale_repeat_cycles()),
            w.edges_drawn.saturating_mul(c.edge_drawn_cycles()),
            w.targets_deduplicated.saturating_mul(c.target_cycles()),
            w.nodes_added.saturating_mul(c.node_added_cycles()),
            w.destinations.saturating_mul(c.destination_cycles()),
            w.bytes_copied
                .saturating_mul(c.cycles_per_kib_copied)
                .div_ceil(1024),
            w.sort_key_moves.saturating_mul(c.cycles_per_sort_key_move),
            w.radix_passes.saturating_mul(c.radix_pass_cycles()),
            w.blocks_scanned.saturating_mul(c.cycles_per_block_scanned),
            w.polls.saturating_mul(c.cycles_per_poll),
            w.parked_checked.saturating_mul(c.cycles_per_parked_command),
        ];
        terms.iter().fold(0u64, |a, t| a.saturating_add(*t))
    }

    /// Cycles the board's glue spends keeping flash DMA coherent with the cores' caches for
    /// `dma`: the page data flash reads brought in and programs took (`NandStats::dma`). Not
    /// counted by the firmware, so not
    /// in [`Self::cycles`]: the emulator adds it to the call that issued the operations, both
    /// of a read's invalidations, although on the Cosmos+ the second runs where the glue polls
    /// for completions (core 0's main loop): a simplification that puts the second half of a
    /// lane-1 read's upkeep on core 1 instead of core 0, and dates it before the read rather
    /// than after.
    pub fn flash_dma_cycles(&self, dma: DmaBytes) -> u64 {
        let c = &self.config;
        let per_kib = |bytes: u64, cycles: u64| bytes.saturating_mul(cycles).div_ceil(1024);
        per_kib(dma.read, c.kib_flash_read_cycles())
            .saturating_add(per_kib(dma.program, c.kib_flash_program_cycles()))
    }

    /// Nanoseconds `cycles` take at the core clock (rounded up).
    pub fn cycles_to_ns(&self, cycles: u64) -> u64 {
        let ns = (u128::from(cycles) * 1000).div_ceil(u128::from(self.config.clock_mhz.max(1)));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// Nanoseconds the work `w` takes on one core.
    pub fn ns(&self, w: &WorkCounters) -> u64 {
        self.cycles_to_ns(self.cycles(w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(clock_mhz: u32) -> CoreModel {
        CoreModel::new(&CoresConfig {
            count: 2,
            isp_cores: 0,
            clock_mhz,
            cycles_per_command: 1000,
            cycles_per_flash_op: 100,
            cycles_per_page_lookup: 10,
            cycles_per_page_scanned: 20,
            cycles_per_row_gathered: 2,
            cycles_per_edge_sampled: 50,
            cycles_per_edge_emitted: Some(17),
            cycles_per_edge_drawn: Some(11),
            cycles_per_target: Some(70),
            cycles_per_node_added: Some(30),
            cycles_per_destination: Some(13),
            cycles_per_stale_repeat: Some(19),
            cycles_per_kib_copied: 512,
            cycles_per_sort_key_move: 3,
            cycles_per_radix_pass: Some(500),
            cycles_per_block_scanned: 4,
            cycles_per_poll: 40,
            cycles_per_parked_command: 6,
            cycles_per_kib_flash_read: Some(1280),
            cycles_per_kib_flash_program: Some(640),
        })
    }

    #[test]
    fn flash_dma_is_charged_per_kib_each_way_and_rounded_up() {
        let m = model(1000);
        // A one-sector read of a 16 KiB page (1 KiB), a program of the page, and a 4-byte
        // remainder that still costs a whole cycle.
        let dma = |read, program| DmaBytes { read, program };
        assert_eq!(m.flash_dma_cycles(dma(1024, 0)), 1280);
        assert_eq!(m.flash_dma_cycles(dma(0, 16384)), 16 * 640);
        assert_eq!(m.flash_dma_cycles(dma(1024, 16384)), 1280 + 16 * 640);
        assert_eq!(m.flash_dma_cycles(dma(4, 0)), 5);
        let mut coherent = m.config.clone();
        (
            coherent.cycles_per_kib_flash_read,
            coherent.cycles_per_kib_flash_program,
        ) = (None, None);
        assert_eq!(
            CoreModel::new(&coherent).flash_dma_cycles(dma(1024, 16384)),
            0
        );
    }

    #[test]
    fn each_counter_is_charged_its_cost() {
        let m = model(1000);
        let w = WorkCounters {
            commands: 1,
            flash_ops: 2,
            page_lookups: 3,
            pages_scanned: 4,
            rows_gathered: 5,
            edges_sampled: 6,
            edges_emitted: 3,
            stale_repeats: 2,
            edges_drawn: 10,
            targets_deduplicated: 8,
            nodes_added: 9,
            destinations: 4,
            bytes_copied: 2048,
            sort_key_moves: 7,
            radix_passes: 2,
            blocks_scanned: 5,
            polls: 2,
            parked_checked: 3,
        };
        assert_eq!(
            m.cycles(&w),
            1000 + 200
                + 30
                + 80
                + 10
                + 300
                + 3 * 17
                + 2 * 19
                + 10 * 11
                + 8 * 70
                + 9 * 30
                + 4 * 13
                + 1024
                + 21
                + 2 * 500
                + 20
                + 80
                + 18
        );
        assert_eq!(m.ns(&w), 4864);
        assert_eq!(m.ns(&WorkCounters::default()), 0);
    }

    #[test]
    fn a_description_without_the_split_costs_prices_targets_and_clears_as_sampled_edges() {
        let mut config = model(1000).config;
        (config.cycles_per_target, config.cycles_per_node_added) = (None, None);
        let m = CoreModel::new(&config);
        let w = |targets, cleared| WorkCounters {
            targets_deduplicated: targets,
            nodes_added: cleared,
            ..WorkCounters::default()
        };
        assert_eq!(m.cycles(&w(3, 0)), 3 * 50);
        assert_eq!(m.cycles(&w(0, 4)), 4 * 50);
        // With them, each is its own price (70 and 30 in `model`).
        assert_eq!(model(1000).cycles(&w(3, 4)), 3 * 70 + 4 * 30);
    }

    #[test]
    fn a_description_without_an_emitted_edge_cost_prices_it_as_a_sampled_edge() {
        let mut config = model(1000).config;
        config.cycles_per_edge_emitted = None;
        let w = WorkCounters {
            edges_emitted: 5,
            ..WorkCounters::default()
        };
        assert_eq!(CoreModel::new(&config).cycles(&w), 5 * 50);
        assert_eq!(model(1000).cycles(&w), 5 * 17);
    }

    #[test]
    fn a_description_without_draw_and_pass_costs_prices_them_at_nothing() {
        let mut config = model(1000).config;
        (config.cycles_per_edge_drawn, config.cycles_per_radix_pass) = (None, None);
        let w = WorkCounters {
            edges_drawn: 7,
            radix_passes: 3,
            ..WorkCounters::default()
        };
        assert_eq!(CoreModel::new(&config).cycles(&w), 0);
        assert_eq!(model(1000).cycles(&w), 7 * 11 + 3 * 500);
    }

    #[test]
    fn time_scales_with_the_clock_and_rounds_up() {
        assert_eq!(model(500).cycles_to_ns(1000), 2000);
        assert_eq!(model(667).cycles_to_ns(1), 2);
        assert_eq!(model(1000).cycles_to_ns(u64::MAX), u64::MAX);
        let w = WorkCounters {
            bytes_copied: 1,
            ..WorkCounters::default()
        };
        assert_eq!(model(1000).cycles(&w), 1, "partial KiB rounds up");
    }
}
