//! The floor of the check minibatch: the cycles no implementation of in-storage sampling of it
//! on the embedded core can go below, derived from the minibatch itself (what `sagessd
//! firmware calibrate` prints beside the firmware's measured cycles; docs/model.md derives it).
//!
//! The floor is the DRAM accesses the work cannot avoid, each at the core's DRAM penalty, plus
//! the instructions it needs, at the core's base CPI:
//!
//! * **Page data.** Every page a gather reads arrived by DMA, so each cache line of it that
//!   holds an item (a destination's bounds, a sampled neighbour's id) is read from DRAM once
//!   per gather.
//! * **New nodes.** Deduplication must remember every node of the job (tens of thousands,
//!   more than the caches hold beside the pages): each node's first entry is a line no one
//!   touched yet.
//! * **Repeats the caches cannot hold.** A node found again after more distinct nodes than the
//!   L2 has lines were seen since: even a cache holding nothing but node entries, one a line,
//!   would have lost it (a stack-distance count over the minibatch's neighbour stream).
//! * **The output**: the node list (8 B a node), `indptr` (4 B a destination) and `indices`
//!   (4 B an edge) are written once; each line is a miss (write-allocate).
//! * **The ids between the two orders.** The gather reads ids in page order, the output wants
//!   them in local order: they are written once and read once, more than the caches hold.
//! * **Instructions**: the arithmetic the specification and the data structures force, counted
//!   per unit of work for the core's instruction set ([`InstructionFloor`]).
//!
//! Nothing else is counted: the sort keys and the destinations' records, the page buffer's
//! metadata and the firmware's control flow are the implementation's, and a floor assumes
//! them free.

use std::collections::{BTreeSet, HashMap};
use std::ops::Add;

use sagessd_abi::sample::sample_positions;
use sagessd_calibrate::graphs::{Graph, SkewedGraph};
use sagessd_calibrate::workloads::{CHECK_FANOUTS, CHECK_TARGETS, check_target, job_seed};
use sagessd_emulator::config::CoreTimingConfig;

use crate::calibrate_fit::{dram_access_cycles, instruction_cycles};

/// A Fenwick tree of counts over positions `1..n`.
#[derive(Debug)]
struct Fenwick {
    tree: Vec<i64>,
    total: i64,
}

impl Fenwick {
    fn new(n: usize) -> Self {
        Self {
            tree: vec![0; n + 1],
            total: 0,
        }
    }

    fn add(&mut self, mut at: usize, delta: i64) {
        self.total += delta;
        while at < self.tree.len() {
            self.tree[at] += delta;
            at += at & at.wrapping_neg();
        }
    }

    /// The counts at positions `1..=at`.
    fn prefix(&self, mut at: usize) -> i64 {
        let mut sum = 0;
        while at > 0 {
            sum += self.tree[at];
            at -= at & at.wrapping_neg();
        }
        sum
    }

    fn total(&self) -> i64 {
        self.total
    }
}

/// The instructions one unit of the minibatch's work needs at the least, on a core.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InstructionFloor {
    /// A random draw: the counter's step, the specification's mix (two 64-bit multiplies and
    /// three xor-shifts), the draw's multiply-high, Floyd's membership test and insertion.
    pub draw: f64,
    /// A sampled edge: its position to a page offset (shift, add, compare), the id loaded and
    /// stored twice (gathered, then read back in local order), the node-table probe (hash,
    /// load, compare), its local index stored.
    pub edge: f64,
    /// A destination: its key built and sorted (a count and a scatter per radix pass), its two
    /// bounds read, its degree checked and its edges placed, its `indptr` entry stored.
    pub destination: f64,
    /// A new node: its entry and its place in the node list stored.
    pub node: f64,
}

impl InstructionFloor {
    /// ARMv7 (the Cortex-A9's ARM state): 64-bit arithmetic in register pairs (a 64-bit
    /// multiply is three 32-bit ones, a 64-bit xor-shift four instructions).
    pub const ARMV7: Self = Self {
        draw: 2.0 + (2.0 * 3.0 + 3.0 * 4.0) + 3.0 + 5.0 + 2.0,
        edge: 4.0 + 3.0 + 5.0 + 2.0 + 2.0,
        destination: 2.0 + 2.0 * 8.0 + 2.0 * 4.0 + 8.0 + 2.0,
        node: 5.0,
    };

    /// AArch64 (a Cortex-A53): 64-bit arithmetic in single instructions.
    pub const AARCH64: Self = Self {
        draw: 1.0 + (2.0 + 3.0 * 2.0) + 2.0 + 5.0 + 2.0,
        edge: 3.0 + 3.0 + 5.0 + 2.0 + 2.0,
        destination: 2.0 + 2.0 * 8.0 + 2.0 * 3.0 + 6.0 + 2.0,
        node: 4.0,
    };
}

/// What one check minibatch (one job) does, counted from the sampling itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MinibatchWork {
    /// Destinations, over both layers.
    pub destinations: u64,
    /// Sampled edges.
    pub edges: u64,
    /// Random draws.
    pub draws: u64,
    /// Distinct nodes of the node list.
    pub nodes: u64,
    /// Lines of page data the gathers read (each gather's distinct lines).
    pub page_lines: u64,
    /// Neighbours found again after more distinct nodes than the L2 has lines.
    pub far_repeats: u64,
    /// Lines of output written.
    pub output_lines: u64,
    /// Lines of the ids held between the gather's order and the local order (written, then
    /// read).
    pub id_lines: u64,
}

impl Add for MinibatchWork {
    type Output = Self;

    fn add(self, o: Self) -> Self {
        Self {
            destinations: self.destinations + o.destinations,
            edges: self.edges + o.edges,
            draws: self.draws + o.draws,
            nodes: self.nodes + o.nodes,
            page_lines: self.page_lines + o.page_lines,
            far_repeats: self.far_repeats + o.far_repeats,
            output_lines: self.output_lines + o.output_lines,
            id_lines: self.id_lines + o.id_lines,
        }
    }
}

/// The check minibatch's job `job` sampled on the host, its work counted for caches of
/// `line_bytes` lines and an L2 of `l2_lines` of them.
pub fn check_minibatch_work(job: u32, line_bytes: u64, l2_lines: usize) -> MinibatchWork {
    let graph = SkewedGraph;
    let n = graph.node_count();
    let mut indptr = Vec::with_capacity(n as usize + 1);
    let mut sum = 0u64;
    indptr.push(0);
    for v in 0..n {
        sum += u64::from(graph.degree(v));
        indptr.push(sum);
    }
    let seed = job_seed(job);
    let mut w = MinibatchWork::default();
    // The node list in first-seen order, and each node's place in it.
    let mut nodes: Vec<u64> = Vec::new();
    let mut seen: HashMap<u64, usize> = HashMap::new();
    let mut add = |v: u64, nodes: &mut Vec<u64>| {
        seen.entry(v).or_insert_with(|| {
            nodes.push(v);
            nodes.len() - 1
        });
    };
    for i in 0..CHECK_TARGETS {
        add(check_target(seed, i), &mut nodes);
    }
    // Stack distances of the neighbour stream: a mark at each node's last use, so that the
    // distinct nodes used since a node's last use are the marks after it (a Fenwick tree over
    // the uses).
    let uses: usize = CHECK_FANOUTS
        .iter()
        .fold(CHECK_TARGETS as usize, |a, f| a * (1 + usize::from(*f)));
    let mut marks = Fenwick::new(uses + 1);
    let mut last_use: HashMap<u64, usize> = HashMap::new();
    let mut clock = 0usize;
    let mut scratch = vec![0u64; 1024];
    for (layer, &fanout) in CHECK_FANOUTS.iter().enumerate() {
        let destinations: Vec<u64> = nodes.clone();
        w.destinations += destinations.len() as u64;
        let mut bound_lines = BTreeSet::new();
        let mut id_lines = BTreeSet::new();
        let mut layer_edges = 0u64;
        let mut sampled: Vec<u64> = Vec::new();
        for &v in &destinations {
            bound_lines.insert(8 * v / line_bytes);
            bound_lines.insert((8 * v + 8) / line_bytes);
            let (start, end) = (indptr[v as usize], indptr[v as usize + 1]);
            let degree = end - start;
            let k =
                sample_positions(seed, layer as u8, v, degree, fanout, &mut scratch).unwrap_or(0);
            if degree > u64::from(fanout) {
                w.draws += k as u64;
            }
            for &p in &scratch[..k] {
                id_lines.insert(4 * (start + p) / line_bytes);
                sampled.push(u64::from(graph.neighbour(v, p as u32)));
            }
            layer_edges += k as u64;
        }
        for &u in &sampled {
            clock += 1;
            if let Some(t) = last_use.insert(u, clock) {
                // Distinct nodes used since u's last use: the marks after it.
                if marks.total() - marks.prefix(t) >= l2_lines as i64 {
                    w.far_repeats += 1;
                }
                marks.add(t, -1);
            }
            marks.add(clock, 1);
            add(u, &mut nodes);
        }
        w.edges += layer_edges;
        w.page_lines += (bound_lines.len() + id_lines.len()) as u64;
        w.output_lines += (4 * (destinations.len() as u64 + 1)).div_ceil(line_bytes)
            + (4 * layer_edges).div_ceil(line_bytes);
        w.id_lines += 2 * (4 * layer_edges).div_ceil(line_bytes);
    }
    w.nodes = nodes.len() as u64;
    w.output_lines += (8 * w.nodes).div_ceil(line_bytes);
    w
}

/// The floor of one check minibatch on a core of `timing` at `clock_mhz`, with `floor`'s
/// instruction counts: (its cycles, the DRAM accesses, the instructions), from the mean of
/// the check's jobs.
pub fn check_minibatch_floor(
    timing: &CoreTimingConfig,
    clock_mhz: u32,
    floor: &InstructionFloor,
    jobs: u32,
) -> (f64, f64, f64, MinibatchWork) {
    let line = u64::from(timing.line_bytes);
    let l2_lines = (timing.l2_bytes / timing.line_bytes) as usize;
    let sum = (0..jobs)
        .map(|job| check_minibatch_work(job, line, l2_lines))
        .fold(MinibatchWork::default(), Add::add);
    let mean = |x: u64| x as f64 / f64::from(jobs);
    let dram = mean(sum.page_lines)
        + mean(sum.nodes)
        + mean(sum.far_repeats)
        + mean(sum.output_lines)
        + mean(sum.id_lines);
    let instructions = mean(sum.draws) * floor.draw
        + mean(sum.edges) * floor.edge
        + mean(sum.destinations) * floor.destination
        + mean(sum.nodes) * floor.node;
    let cycles =
        instruction_cycles(instructions, timing) + dram * dram_access_cycles(timing, clock_mhz);
    (cycles, dram, instructions, sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_counts_what_the_firmware_counts_of_the_same_minibatch() {
        // What the firmware counts of the check minibatch's 4 jobs (the calibration image's
        // report, run natively: runtime/experiments' isolation test has the same run).
        let w = (0..4)
            .map(|job| check_minibatch_work(job, 32, 16_384))
            .fold(MinibatchWork::default(), Add::add);
        assert_eq!(w.destinations, 67_438);
        assert_eq!(w.edges, 650_734);
        assert_eq!(w.nodes, 217_657);
        // The firmware draws some lists again when a step ends inside them.
        assert!((551_000..=552_845).contains(&w.draws), "{}", w.draws);
    }
}
