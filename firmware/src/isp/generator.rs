//! The subgraph generator: one job per sampling lane, layer by layer, as a poll-driven state
//! machine. A job's minibatches (one, or a hyperbatch's) go through each layer together. Each
//! layer sorts its destinations by node id, then reads flash for all of them in that order
//! with two *gathers* ([`super::gather`]), then runs a pass, minibatch after minibatch, that
//! does not:
//!
//! 1. **Bounds gather**: read `indptr[v]` and `indptr[v + 1]` of every destination node;
//! 2. **Neighbour gather**: sample each destination as it is reached (check its bounds, place
//!    its edges, draw its positions with `sample_positions` unless its whole list is taken)
//!    and read the neighbour id at every sampled position;
//! 3. **Local pass**: for each destination in local order, fill the layer's local `indptr`;
//!    for each of its sampled edges, deduplicate its neighbour into the node list
//!    ([`super::node_table`]) and record its local index. A job that returns its sampled ids
//!    ([`sagessd_abi::sampled_ids`]) records the neighbour's global id instead, and in its last
//!    layer, whose nodes are no layer's destinations, deduplicates nothing.
//!
//! The local pass runs in local-id order, so the output never depends on the order pages
//! arrive in, nor on which lane runs the job or what the other lanes do; and a minibatch's
//! pass reads only its own items, so its subgraph is the same in a hyperbatch as alone. The
//! pass also reads ahead the pages of the new nodes' `indptr`, which the next bounds gather
//! will want, so that flash works while the core does.
//!
//! Every table is read and written as aligned native words of the arena; what crosses to the
//! host (the node list, `indptr`, `indices`) is stored little-endian.

use sagessd_abi::nvme::{Status, VendorStatus};

use super::minibatch::MinibatchState;
use super::node_table::{Entry, NodeTable, Probe};
use super::{Gather, Isp, JobState, Run, feature_section_fits};
use crate::backend::{Backend, ReadAhead};
use crate::dram::{Region, as_words, as_words_mut, split_mut};
use crate::hal::Sectors;
use crate::work::WorkCounters;

/// Items of a pass one step runs: between two chunks the lane's core lets the others (and, when
/// it time-shares the firmware's core, the flash firmware) run, and the read-aheads the chunk
/// started are in flight.
const PASS_CHUNK_ITEMS: u32 = 512;
/// Read-aheads in a row that find their page in the buffer after which a chunk stops reading
/// ahead: the pages its pass needs are cached, and each look costs a page lookup.
const PRESENT_RUN_LIMIT: u32 = 32;

/// Nodes added since a node's own addition after which finding it again is counted as a stale
/// repeat (`WorkCounters::stale_repeats`): a node table's entries take a cache line each, and
/// the embedded cores' L2 caches hold 16,384 lines (512 KiB of 32-byte lines on the Cortex-A9,
/// 1 MiB of 64-byte ones on a Cortex-A53 cluster), shared with the pages and tables a job
/// streams through, so an entry that 4,096 others followed is likely gone.
const STALE_AFTER_NODES: u32 = 4096;

/// A pass's read-aheads within one chunk: whether it still reads ahead, and how many looks in a
/// row found their page present.
#[derive(Clone, Copy, Debug, Default)]
struct Ahead {
    stopped: bool,
    present_run: u32,
}

impl Ahead {
    /// Counts what a read-ahead did; stops reading ahead when the window is full or the pages
    /// keep being there.
    fn saw(&mut self, what: ReadAhead) {
        match what {
            ReadAhead::Started => self.present_run = 0,
            ReadAhead::Present => {
                self.present_run += 1;
                self.stopped |= self.present_run >= PRESENT_RUN_LIMIT;
            }
            ReadAhead::NoRoom => self.stopped = true,
        }
    }
}

/// A job's deduplication into one minibatch's node list: the lane's node table, the slot's
/// node list and its length, shared by the targets at a job's start and the local pass.
struct Dedup<'a> {
    table: NodeTable,
    entries: &'a mut [Entry],
    /// The slot's node list (little-endian `u64`s, as the host gets them).
    nodes: &'a mut [u64],
    /// Nodes in it, all minibatches together.
    node_count: &'a mut u32,
    max_nodes: u32,
    /// The minibatch's salt of the table's hash ([`NodeTable::salt`]).
    salt: u32,
    /// Whether the job has one minibatch: its positions are its local ids.
    alone: bool,
}

impl Dedup<'_> {
    /// The local id of `node` in the minibatch (state `st`), adding it to the node list and to
    /// the minibatch's `phase` segment if new; `None` if the node list is full. Counts a new
    /// node in `work`.
    #[inline(always)]
    fn local_id(
        &mut self,
        st: &mut MinibatchState,
        phase: usize,
        node: u32,
        work: &mut WorkCounters,
    ) -> Option<u32> {
        let home = self.table.home(node, self.salt);
        let alone = self.alone;
        let probe = self.table.probe(self.entries, node, home, |position| {
            alone || st.local_id(position).is_some()
        });
        if let Probe::Found(position) = probe {
            // Found again long after it was added: its entry has most likely left the caches.
            work.stale_repeats += u64::from(*self.node_count - position > STALE_AFTER_NODES);
        }
        match probe {
            Probe::Found(position) if alone => Some(position),
            Probe::Found(position) => st.local_id(position),
            Probe::Free(at) => {
                let position = *self.node_count;
                if position >= self.max_nodes {
                    return None;
                }
                let local = if alone { position } else { st.node_count() };
                self.nodes[position as usize] = u64::from(node).to_le();
                self.table.insert(self.entries, at, node, position);
                *self.node_count += 1;
                st.segment_len[phase] += 1;
                work.nodes_added += 1;
                Some(local)
            }
        }
    }
}

/// The arrays a local pass reads and writes, for one minibatch's destinations of one layer.
struct Pass<'a> {
    /// Each destination's edges among the gathered neighbours, `k << 32 | first`, in the
    /// layer's order of destinations (all minibatches together).
    local: &'a [u64],
    /// The neighbour ids the gather read, in key order.
    neighbours: &'a [u32],
    /// The slot's edges (what each sampled edge is written as).
    indices: &'a mut [u32],
    /// The slot's `indptr` rows.
    indptr: &'a mut [u32],
    /// The minibatch's row of this layer in `indptr`.
    row: usize,
    /// The minibatch's first destination among the layer's.
    dst_first: u32,
    /// The minibatch's first edge among the layer's.
    edge_first: u32,
    /// The graph's node count (a neighbour id at or past it is corruption).
    node_count: u64,
}

impl Pass<'_> {
    /// For destinations `from..end` in local order, until about [`PASS_CHUNK_ITEMS`] edges are
    /// done: writes what `edge` makes of each sampled neighbour's id (its local id, or its
    /// global id; `None`: the node list is full) and the destination's `indptr` entry. Returns
    /// the destination it stopped before.
    #[inline(always)]
    fn destinations(
        &mut self,
        run: &mut Run,
        from: u32,
        end: u32,
        mut edge: impl FnMut(u32) -> Option<u32>,
    ) -> Result<u32, Status> {
        let (mut i, mut done) = (from, 0u32);
        while i < end {
            let placed = self.local[(self.dst_first + i) as usize];
            let (first, k) = (placed as u32, (placed >> 32) as u32);
            for &id in &self.neighbours[first as usize..(first + k) as usize] {
                if u64::from(id) >= self.node_count {
                    return Err(VendorStatus::GraphCorrupt.into());
                }
                let Some(out) = edge(id) else {
                    return Err(VendorStatus::ResultTooLarge.into());
                };
                self.indices[(run.edge_base + run.local_edges) as usize] = out.to_le();
                run.local_edges += 1;
            }
            self.indptr[self.row + i as usize + 1] = (run.local_edges - self.edge_first).to_le();
            i += 1;
            done += k + 1;
            if done >= PASS_CHUNK_ITEMS && i < end {
                return Ok(i);
            }
        }
        Ok(end)
    }
}

impl Isp {
    /// Advances every lane once, in lane order; returns whether anything happened.
    pub fn step(&mut self, dram: &mut [u8], backend: &mut Backend) -> bool {
        let mut progress = false;
        for lane in 0..self.lane_count {
            progress |= self.step_lane(lane, dram, backend);
        }
        progress
    }

    /// Advances `lane` (starting the oldest queued job if it has none); returns whether
    /// anything happened. A lane outside the configuration does nothing.
    pub fn step_lane(&mut self, lane: usize, dram: &mut [u8], backend: &mut Backend) -> bool {
        if lane >= self.lane_count {
            return false;
        }
        if self.lanes[lane].run.is_none() && !self.start_next(lane, dram, backend) {
            return false;
        }
        if self.lanes[lane].run.is_some_and(|r| r.pass.is_some()) {
            if let Err(status) = self.pass_step(lane, dram, backend) {
                self.fail_run(lane, dram, backend, status);
            }
            return true;
        }
        let done = self
            .issue(lane, dram, backend)
            .and_then(|issued| Ok(self.consume(lane, dram, backend)? || issued));
        match done {
            Ok(progress) => progress,
            Err(status) => {
                self.fail_run(lane, dram, backend, status);
                true
            }
        }
    }

    /// Runs the next chunk of `lane`'s local pass; when the pass is over, starts the next
    /// layer (or the features, or the job's end).
    fn pass_step(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        backend: &mut Backend,
    ) -> Result<(), Status> {
        let Some(mut run) = self.lanes[lane].run else {
            return Ok(());
        };
        let Some((m, from)) = run.pass else {
            return Ok(());
        };
        match run.gather {
            Gather::Neighbours => {
                let states = self.regions[run.slot].minibatches;
                let mut st = MinibatchState::load(states, dram, usize::from(m));
                let end = st.nodes_through(run.layer);
                let done = self.local_pass(lane, dram, backend, &mut run, m, &mut st, from, end);
                // Stored even after a failure: the job's end reads every minibatch's state.
                st.store(states, dram, usize::from(m));
                let to = done?;
                if to < end {
                    run.pass = Some((m, to));
                    self.lanes[lane].run = Some(run);
                } else if m + 1 < self.jobs[run.slot].minibatch_count {
                    run.pass = Some((m + 1, 0));
                    self.lanes[lane].run = Some(run);
                } else {
                    self.next_layer(lane, dram, backend, run);
                }
            }
            // No pass follows a bounds or feature gather.
            Gather::Bounds | Gather::Features => return Err(Status::INTERNAL_ERROR),
        }
        Ok(())
    }

    /// Reads `page` ahead, whole, for `lane`, if its read-aheads in flight leave room in its
    /// share of the window. Whole: the gather will want sectors of it that the pass does not
    /// know of yet, and a second read for them would cost more than the bytes.
    fn read_ahead(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        backend: &mut Backend,
        page: u32,
        ahead: &mut Ahead,
    ) {
        let what = if self.lanes[lane].prefetching as usize >= self.window_pages {
            ReadAhead::NoRoom
        } else {
            backend.prefetch_page(dram, page, Sectors::ALL, lane as u16)
        };
        if what == ReadAhead::Started {
            self.lanes[lane].prefetching += 1;
            #[cfg(test)]
            {
                self.lanes[lane].read_aheads += 1;
            }
        }
        ahead.saw(what);
    }

    /// A deduplication into minibatch `m` of job `slot`, which `lane` runs, over the lane's
    /// node table (`entries`) and the slot's node list (`nodes`).
    fn dedup<'a>(
        &'a mut self,
        lane: usize,
        slot: usize,
        m: usize,
        entries: &'a mut [u8],
        nodes: &'a mut [u8],
    ) -> Dedup<'a> {
        let alone = self.jobs[slot].minibatch_count == 1;
        Dedup {
            table: self.lanes[lane].table,
            entries: as_words_mut(entries),
            nodes: as_words_mut(nodes),
            node_count: &mut self.jobs[slot].node_count,
            max_nodes: self.max_nodes,
            salt: NodeTable::salt(m as u32),
            alone,
        }
    }

    /// Starts the oldest queued job on `lane`: deduplicates each minibatch's targets into its
    /// node list and starts the first layer's bounds gather.
    fn start_next(&mut self, lane: usize, dram: &mut [u8], backend: &mut Backend) -> bool {
        let next = (0..self.slot_count)
            .filter(|s| self.jobs[*s].state == JobState::Queued)
            .min_by_key(|s| self.jobs[*s].seq.wrapping_sub(self.next_seq));
        let Some(slot) = next else { return false };
        let graph = self.jobs[slot].graph;
        self.jobs[slot].state = JobState::Running;
        self.jobs[slot].node_count = 0;
        self.jobs[slot].indptr_words = 0;
        let regions = self.regions[slot];
        let table_region = self.lanes[lane].regions.node_table;
        {
            let mut table = self.lanes[lane].table;
            table.begin_job(table_region.words_mut(dram));
            self.lanes[lane].table = table;
        }
        for m in 0..usize::from(self.jobs[slot].minibatch_count) {
            let [config, states, entries, nodes] = split_mut(
                dram,
                [
                    regions.config,
                    regions.minibatches,
                    table_region,
                    regions.nodes,
                ],
            );
            let states_region = Region {
                start: 0,
                len: states.len(),
            };
            // As accepted: its seed and targets, nothing sampled.
            let mut st = MinibatchState::load(states_region, states, m);
            st.segment_start[0] = self.jobs[slot].node_count;
            let targets = as_words::<u64>(config);
            let first = st.target_word as usize;
            let work = &mut backend.work;
            let mut dedup = self.dedup(lane, slot, m, entries, nodes);
            let mut fits = true;
            for &target in &targets[first..first + st.target_count as usize] {
                // Targets are below the node count (checked at submit), which fits u32.
                let target = u64::from_le(target) as u32;
                if dedup.local_id(&mut st, 0, target, work).is_none() {
                    fits = false;
                    break;
                }
            }
            st.store(states_region, states, m);
            if !fits {
                let too_large = Some(VendorStatus::ResultTooLarge.into());
                self.finish(dram, slot, too_large);
                return true;
            }
            backend.work.targets_deduplicated += u64::from(st.target_count);
        }
        let dst = self.jobs[slot].node_count;
        let run = Run {
            slot,
            graph,
            layer: 0,
            gather: Gather::Bounds,
            key_count: 0,
            sorted_in_scratch: false,
            sampled: 0,
            issued: super::Cursor::default(),
            consumed: 0,
            pass: None,
            edge_base: 0,
            layer_edges: 0,
            local_edges: 0,
            dst_count: dst,
        };
        self.start_gather(lane, dram, backend, run, Gather::Bounds);
        true
    }

    /// For destinations `from..end` of minibatch `m` (state `st`), in local order, until about
    /// [`PASS_CHUNK_ITEMS`] edges are done: fill the layer's local `indptr` row, and for each
    /// of its sampled edges deduplicate the neighbour the gather read and record its local
    /// index (a job returning sampled ids: its global id, and in the last layer no
    /// deduplication); then, when another layer follows, read ahead the page of each new node's
    /// `indptr` entries, which its bounds gather will want. Returns the destination it stopped
    /// before. Counted once per edge as "sampled" (a probe and a write; the draw that chose
    /// it, if its list was not taken whole, was counted by the issuer that drew it) or, with no
    /// probe, "emitted", and once per new node as "added".
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn local_pass(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        backend: &mut Backend,
        run: &mut Run,
        m: u16,
        st: &mut MinibatchState,
        from: u32,
        end: u32,
    ) -> Result<u32, Status> {
        let phase = run.layer + 1;
        let regions = self.regions[run.slot];
        if from == 0 {
            // This minibatch's row of the layer, after the rows before it.
            let job = &mut self.jobs[run.slot];
            st.indptr_row[run.layer] = job.indptr_words;
            job.indptr_words += end + 1;
            st.edge_first = run.local_edges;
            st.edge_start[run.layer] = run.edge_base + run.local_edges;
            st.segment_start[phase] = job.node_count;
            regions.indptr.words_mut::<u32>(dram)[st.indptr_row[run.layer] as usize] = 0;
        }
        let known = self.jobs[run.slot].node_count;
        let another_layer = run.layer + 1 < usize::from(self.jobs[run.slot].layer_count);
        let lane_regions = self.lanes[lane].regions;
        let node_count = run.graph.node_count;
        let row = st.indptr_row[run.layer] as usize;
        let result = {
            let [local, neighbours, entries, nodes, indices, indptr] = split_mut(
                dram,
                [
                    self.spare_buffer(lane, run),
                    lane_regions.neighbours,
                    lane_regions.node_table,
                    regions.nodes,
                    regions.indices,
                    regions.indptr,
                ],
            );
            let mut pass = Pass {
                local: as_words::<u64>(local),
                neighbours: as_words::<u32>(neighbours),
                indices: as_words_mut::<u32>(indices),
                indptr: as_words_mut::<u32>(indptr),
                row,
                dst_first: st.dst_first,
                edge_first: st.edge_first,
                node_count,
            };
            let work = &mut backend.work;
            let emit = self.jobs[run.slot].sampled_ids && !another_layer;
            let global = self.jobs[run.slot].sampled_ids;
            let mut dedup = self.dedup(lane, run.slot, usize::from(m), entries, nodes);
            let before = run.local_edges;
            // One loop, monomorphised for what an edge writes, so no edge tests the mode.
            let result = if emit {
                // The host builds the subgraph: no node of the last layer is a destination
                // again, so none is deduplicated.
                pass.destinations(run, from, end, Some)
            } else if global {
                pass.destinations(run, from, end, |id| {
                    dedup.local_id(st, phase, id, work).map(|_| id)
                })
            } else {
                pass.destinations(run, from, end, |id| dedup.local_id(st, phase, id, work))
            };
            let edges = u64::from(run.local_edges - before);
            if emit {
                work.edges_emitted += edges;
            } else {
                work.edges_sampled += edges;
            }
            result
        };
        if result == Ok(end) {
            st.edge_count[run.layer] = run.local_edges - st.edge_first;
        }
        if self.read_ahead && another_layer && result.is_ok() {
            // The nodes this chunk added, in the order it added them.
            let base = run.graph.indptr.slba * self.block_size_bytes;
            let mut ahead = Ahead::default();
            let mut last_page = None;
            for position in known..self.jobs[run.slot].node_count {
                if ahead.stopped {
                    break;
                }
                let id = u64::from_le(regions.nodes.words::<u64>(dram)[position as usize]);
                let page = self.page_of(base + 8 * id);
                if last_page != Some(page) {
                    self.read_ahead(lane, dram, backend, page, &mut ahead);
                    last_page = Some(page);
                }
            }
        }
        result
    }

    /// Starts the next layer, or the feature gather, or finishes the job.
    fn next_layer(&mut self, lane: usize, dram: &mut [u8], backend: &mut Backend, mut run: Run) {
        let job = &self.jobs[run.slot];
        if run.layer + 1 == usize::from(job.layer_count) {
            let fits = feature_section_fits(
                job.node_count,
                job.feature_row_bytes,
                self.max_feature_bytes,
            );
            let feature_row_bytes = job.feature_row_bytes;
            self.lanes[lane].run = None;
            if feature_row_bytes == 0 {
                self.finish(dram, run.slot, None);
            } else if !fits {
                let too_large = Some(VendorStatus::ResultTooLarge.into());
                self.finish(dram, run.slot, too_large);
            } else {
                self.start_gather(lane, dram, backend, run, Gather::Features);
            }
            return;
        }
        run.layer += 1;
        run.edge_base += run.layer_edges;
        run.layer_edges = 0;
        run.local_edges = 0;
        run.dst_count = job.node_count;
        self.start_gather(lane, dram, backend, run, Gather::Bounds);
    }

    /// Releases every page `lane` pinned.
    fn drain_window(&mut self, lane: usize, dram: &mut [u8], backend: &mut Backend) {
        while let Some(w) = self.lanes[lane].window.pop_front() {
            backend.buffer.unpin(dram, w.slot);
            backend.work.pages_scanned += 1;
        }
    }

    fn fail_run(&mut self, lane: usize, dram: &mut [u8], backend: &mut Backend, status: Status) {
        self.drain_window(lane, dram, backend);
        if let Some(run) = self.lanes[lane].run.take() {
            self.finish(dram, run.slot, Some(status));
        }
    }

    /// Ends job `slot` (successfully if `error` is `None`). Its lane's node table needs no
    /// clearing: the lane's next job starts a new generation of it.
    pub(super) fn finish(&mut self, dram: &[u8], slot: usize, error: Option<Status>) {
        let states = self.regions[slot].minibatches;
        let job = self.jobs[slot];
        let fits = (0..usize::from(job.minibatch_count)).all(|m| {
            job.result_size(&MinibatchState::load(states, dram, m))
                .is_some()
        });
        let job = &mut self.jobs[slot];
        job.state = match error {
            _ if job.orphaned => JobState::Free,
            None if fits => JobState::Done,
            None => JobState::Failed(VendorStatus::ResultTooLarge.into()),
            Some(s) => JobState::Failed(s),
        };
    }
}
