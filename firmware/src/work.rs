//! Work the firmware did, counted in the units the emulator's core model charges.

/// Cumulative counts of firmware work since boot. The emulator converts deltas into embedded-core
/// cycles; the firmware itself never reads a clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkCounters {
    /// NVMe commands parsed and dispatched.
    pub commands: u64,
    /// Flash operations issued (reads, programs, erases).
    pub flash_ops: u64,
    /// Page-buffer lookups (hits and misses).
    pub page_lookups: u64,
    /// Flash pages whose contents the ISP engine scanned.
    pub pages_scanned: u64,
    /// Feature rows the ISP engine gathered (a job that asks for features: one per node of
    /// its node list), each found in its page and copied out. (A gather's other items are
    /// counted with their destination or sampled edge.)
    pub rows_gathered: u64,
    /// Neighbours the ISP engine sampled: each one's offset in its page staged, its id copied
    /// out of the page, probed in the node table and its local index written out.
    pub edges_sampled: u64,
    /// Neighbours the ISP engine returned as global ids without deduplicating them (the last
    /// layer of a job that returns its sampled ids, [`sagessd_abi::sampled_ids`]): each one's
    /// offset staged, its id copied out of the page, checked and written out; no probe.
    pub edges_emitted: u64,
    /// Sampled edges (and targets) whose node the node table already held since more than
    /// 4,096 nodes were added after it: the probe finds its entry where the caches have most
    /// likely lost it (counted beside the edge: the extra cost of that miss).
    pub stale_repeats: u64,
    /// Neighbour positions the ISP engine drew at random: a node whose degree exceeds its
    /// fanout gets `fanout` draws; a list taken whole draws nothing.
    pub edges_drawn: u64,
    /// Targets the ISP engine deduplicated into a job's node list at its start: each loaded,
    /// probed in the node table and written (no draw).
    pub targets_deduplicated: u64,
    /// Nodes the ISP engine added to a job's node list (a target or a neighbour seen for the
    /// first time in its minibatch): each written to the list and into the node table. Its
    /// probe is counted with the target or sampled edge it came from.
    pub nodes_added: u64,
    /// Destinations the ISP engine sampled, one per node of a job's node list per layer it
    /// is a destination of: its sort key built and placed, its bounds checked and its edges
    /// placed (the gather's two bounds items and its draws are counted on their own), its
    /// row of the local `indptr` written.
    pub destinations: u64,
    /// Bytes moved by the cores or DMA between host and DRAM.
    pub bytes_copied: u64,
    /// Keys moved by the ISP engine's radix-sort passes (each pass counts and scatters every
    /// key once; after an odd number of passes every key is copied back once more). A gather
    /// whose items lie on one page sorts nothing.
    pub sort_key_moves: u64,
    /// Radix-sort passes of the ISP engine's gathers: each clears and prefix-sums a
    /// 2,048-bucket histogram, however few keys it sorts.
    pub radix_passes: u64,
    /// Block-table entries the FTL scanned to pick garbage-collection victims.
    pub blocks_scanned: u64,
    /// Calls of `Firmware::poll`, fruitful or not: each checks the flash completions, the GC
    /// state, the command table and the ISP engine once.
    pub polls: u64,
    /// Parked commands a poll stepped (an occupied command-table slot looked at, whether or
    /// not the command could move).
    pub parked_checked: u64,
}

impl WorkCounters {
    /// Number of counters.
    pub const COUNT: usize = 18;

    /// The counters' names (their field names), in the order of [`WorkCounters::values`]: how
    /// reports and `sagessd firmware calibrate` name each unit of work.
    pub const NAMES: [&'static str; Self::COUNT] = [
        "commands",
        "flash_ops",
        "page_lookups",
        "pages_scanned",
        "rows_gathered",
        "edges_sampled",
        "edges_emitted",
        "stale_repeats",
        "edges_drawn",
        "targets_deduplicated",
        "nodes_added",
        "destinations",
        "bytes_copied",
        "sort_key_moves",
        "radix_passes",
        "blocks_scanned",
        "polls",
        "parked_checked",
    ];

    /// The counters, in the order of [`WorkCounters::NAMES`].
    pub fn values(&self) -> [u64; Self::COUNT] {
        [
            self.commands,
            self.flash_ops,
            self.page_lookups,
            self.pages_scanned,
            self.rows_gathered,
            self.edges_sampled,
            self.edges_emitted,
            self.stale_repeats,
            self.edges_drawn,
            self.targets_deduplicated,
            self.nodes_added,
            self.destinations,
            self.bytes_copied,
            self.sort_key_moves,
            self.radix_passes,
            self.blocks_scanned,
            self.polls,
            self.parked_checked,
        ]
    }

    /// Counters from their values in the order of [`WorkCounters::NAMES`].
    pub fn from_values(v: [u64; Self::COUNT]) -> Self {
        let [
            commands,
            flash_ops,
            page_lookups,
            pages_scanned,
            rows_gathered,
            edges_sampled,
            edges_emitted,
            stale_repeats,
            edges_drawn,
            targets_deduplicated,
            nodes_added,
            destinations,
            bytes_copied,
            sort_key_moves,
            radix_passes,
            blocks_scanned,
            polls,
            parked_checked,
        ] = v;
        Self {
            commands,
            flash_ops,
            page_lookups,
            pages_scanned,
            rows_gathered,
            edges_sampled,
            edges_emitted,
            stale_repeats,
            edges_drawn,
            targets_deduplicated,
            nodes_added,
            destinations,
            bytes_copied,
            sort_key_moves,
            radix_passes,
            blocks_scanned,
            polls,
            parked_checked,
        }
    }

    /// The work done since `earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        let (now, then) = (self.values(), earlier.values());
        Self::from_values(core::array::from_fn(|i| now[i] - then[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn names_and_values_follow_the_fields() {
        let values: [u64; WorkCounters::COUNT] = core::array::from_fn(|i| 100 + i as u64);
        let w = WorkCounters::from_values(values);
        assert_eq!(w.values(), values);
        // Each name is the field that holds its value (as Debug prints the fields).
        let debug = format!("{w:?}");
        for (name, value) in WorkCounters::NAMES.iter().zip(values) {
            assert!(
                debug.contains(&format!("{name}: {value}")),
                "{name} in {debug}"
            );
        }
    }
}
