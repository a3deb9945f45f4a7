//! The subgraph generator: one job per sampling lane, layer by layer, as a poll-driven state
//! machine. A job's minibatches (one, or a hyperbatch's) go through each layer together. Each
//! layer has two *gathers* that read flash for all of them, each followed by an in-order pass,
//! minibatch after minibatch, that does not:
//!
//! 1. **Bounds gather**: read `indptr[v]` and `indptr[v + 1]` of every destination node;
//!    **sample pass**: for each destination in order, draw the sampled positions with
//!    [`sample_positions`] and append their global edge positions;
//! 2. **Neighbour gather**: read the neighbour id at every sampled position;
//!    **dedup pass**: for each sampled edge in order, deduplicate its neighbour into the node list
//!    and record its local index.
//!
//! A gather sorts its reads by logical page (`page << 29 | item` keys, an LSD radix sort on the
//! page, stable so items of a page stay in order), so every page is read once per gather however
//! many items, of however many minibatches, it serves, and consecutive pages, which the FTL
//! striped over dies, are read in parallel. Two cursors walk the sorted keys: the *issuer* runs
//! ahead pinning up to the lane's share of the window of pages in the page buffer (starting
//! their flash reads), the *consumer* copies each item's value out as its page arrives. The passes after a gather run in item
//! order, so the output never depends on the order pages arrive in, nor on which lane runs the
//! job or what the other lanes do; and a minibatch's passes read only its own items, so its
//! subgraph is the same in a hyperbatch as alone.

use sagessd_abi::nvme::{Status, VendorStatus};
use sagessd_abi::sample::sample_positions;

use super::minibatch::{MinibatchState, PHASES};
use super::{Gather, ITEM_BITS, Isp, JobState, RADIX_BITS, Run, feature_section_fits};
use crate::backend::{Backend, ReadAhead};
use crate::dram::{LaneRegions, SlotRegions};
use crate::hal::Sectors;
use crate::page_buffer::Acquire;
use crate::work::WorkCounters;

/// Items of a pass one step runs: between two chunks the lane's core lets the others (and, when
/// it time-shares the firmware's core, the flash firmware) run, and the read-aheads the chunk
/// started are in flight.
const PASS_CHUNK_ITEMS: u32 = 512;
/// Read-aheads in a row that find their page in the buffer after which a chunk stops reading
/// ahead: the pages its pass needs are cached, and each look costs a page lookup.
const PRESENT_RUN_LIMIT: u32 = 32;

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
        let issued = self.issue(lane, dram, backend);
        match self.consume(lane, dram, backend) {
            Ok(consumed) => issued || consumed,
            Err(status) => {
                self.fail_run(lane, dram, backend, status);
                true
            }
        }
    }

    /// Runs the next chunk of `lane`'s pass; when the pass is over, starts what follows it
    /// (the neighbour gather after a sample pass, the next layer after a dedup pass).
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
        let states = self.regions[run.slot].minibatches;
        let mut st = MinibatchState::load(states, dram, usize::from(m));
        let (end, sampling) = match run.gather {
            Gather::Bounds => (st.nodes_through(run.layer), true),
            Gather::Neighbours => (st.edge_count[run.layer], false),
            // No pass follows a feature gather.
            Gather::Features => return Err(Status::INTERNAL_ERROR),
        };
        let to = end.min(from.saturating_add(PASS_CHUNK_ITEMS));
        let done = if sampling {
            self.sample_pass(lane, dram, backend, &mut run, &mut st, from, to)
        } else {
            self.dedup_pass(lane, dram, backend, &run, m, &mut st, from, to)
        };
        if to == end && sampling {
            st.edge_count[run.layer] = run.layer_edges - st.edge_first;
        }
        // Stored even after a failure: the job's end clears the node table from it.
        st.store(states, dram, usize::from(m));
        done?;
        if to < end {
            run.pass = Some((m, to));
            self.lanes[lane].run = Some(run);
        } else if m + 1 < self.jobs[run.slot].minibatch_count {
            run.pass = Some((m + 1, 0));
            self.lanes[lane].run = Some(run);
        } else if sampling {
            self.start_gather(lane, dram, backend, run, Gather::Neighbours);
        } else {
            self.next_layer(lane, dram, backend, run);
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

    /// The page of byte `address` of the namespace (a shift for the usual power-of-two page:
    /// the A9 has no divide instruction, and a 64-bit division in software costs it more than
    /// the rest of a gather item).
    fn page_of(&self, address: u64) -> u32 {
        let page = if self.page_size_bytes.is_power_of_two() {
            address >> self.page_size_bytes.trailing_zeros()
        } else {
            address / self.page_size_bytes
        };
        // Validated descriptors keep addresses inside the namespace, whose pages fit in u32.
        page as u32
    }

    /// The offset of byte `address` of the namespace in its page (a mask for a power-of-two
    /// page, as [`Self::page_of`]).
    fn offset_in_page(&self, address: u64) -> usize {
        let offset = if self.page_size_bytes.is_power_of_two() {
            address & (self.page_size_bytes - 1)
        } else {
            address % self.page_size_bytes
        };
        offset as usize
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
        let SlotRegions {
            config,
            minibatches: states,
            ..
        } = self.regions[slot];
        for m in 0..usize::from(self.jobs[slot].minibatch_count) {
            // As accepted: its seed and targets, nothing sampled.
            let mut st = MinibatchState::load(states, dram, m);
            st.segment_start[0] = self.jobs[slot].node_count;
            let mut fits = true;
            for i in 0..st.target_count as usize {
                let target = config.u64(dram, st.target_word as usize + i);
                if self
                    .dedup(lane, dram, slot, m, &mut st, 0, target)
                    .is_none()
                {
                    fits = false;
                    break;
                }
            }
            // Stored even when full: the job's end clears the node table from it.
            st.store(states, dram, m);
            if !fits {
                // The minibatches not reached yet have no nodes to clear.
                let too_large = Some(VendorStatus::ResultTooLarge.into());
                self.finish(lane, dram, &mut backend.work, slot, too_large);
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
            item_count: 0,
            issued: 0,
            consumed: 0,
            last_issued: None,
            pass: None,
            edge_base: 0,
            layer_edges: 0,
            dst_count: dst,
        };
        self.start_gather(lane, dram, backend, run, Gather::Bounds);
        true
    }

    /// The byte address (on the namespace) of gather item `item` of `lane`'s `run`.
    fn item_address(&self, lane: usize, dram: &[u8], run: &Run, item: u32) -> u64 {
        match run.gather {
            Gather::Bounds => {
                // The destination's id waits in the item's value slot until it is read.
                let v = self.lanes[lane]
                    .regions
                    .gather_values
                    .u64(dram, item as usize);
                run.graph.indptr.slba * self.block_size_bytes + 8 * (v + u64::from(item & 1))
            }
            Gather::Neighbours => {
                let e = self.lanes[lane].regions.entries.u64(dram, item as usize);
                run.graph.indices.slba * self.block_size_bytes
                    + u64::from(run.graph.id_width_bytes) * e
            }
            Gather::Features => {
                let v = self.regions[run.slot].nodes.u64(dram, item as usize);
                // Attached graphs with features always have a region (checked at submit).
                run.graph.features.map_or(0, |f| {
                    f.range.slba * self.block_size_bytes + v * f.stride_bytes()
                })
            }
        }
    }

    /// Builds and sorts the keys of a gather and makes it `lane`'s running one.
    fn start_gather(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        backend: &mut Backend,
        mut run: Run,
        gather: Gather,
    ) {
        run.gather = gather;
        run.item_count = match gather {
            Gather::Bounds => 2 * run.dst_count,
            Gather::Neighbours => run.layer_edges,
            Gather::Features => self.jobs[run.slot].node_count,
        };
        run.issued = 0;
        run.consumed = 0;
        run.last_issued = None;
        run.pass = None;
        if gather == Gather::Bounds {
            self.place_destinations(lane, dram, &run);
        }
        let keys = self.lanes[lane].regions.gather_keys;
        for item in 0..run.item_count {
            let page = u64::from(self.page_of(self.item_address(lane, dram, &run, item)));
            keys.set_u64(dram, item as usize, (page << ITEM_BITS) | u64::from(item));
        }
        self.sort_keys(lane, dram, backend, run.item_count as usize);
        self.lanes[lane].run = Some(run);
    }

    /// Puts each destination's id of `run`'s layer in the value slots of its two bounds items
    /// (item `2j` and `2j + 1` for the layer's destination `j`, the minibatches one after
    /// another, each in local-id order), and notes where each minibatch's destinations start.
    fn place_destinations(&self, lane: usize, dram: &mut [u8], run: &Run) {
        let states = self.regions[run.slot].minibatches;
        let nodes = self.regions[run.slot].nodes;
        let values = self.lanes[lane].regions.gather_values;
        let mut item = 0usize;
        for m in 0..usize::from(self.jobs[run.slot].minibatch_count) {
            let mut st = MinibatchState::load(states, dram, m);
            st.dst_first = (item / 2) as u32;
            st.store(states, dram, m);
            for p in 0..=run.layer {
                let start = st.segment_start[p] as usize;
                for position in start..start + st.segment_len[p] as usize {
                    let v = nodes.u64(dram, position);
                    values.set_u64(dram, item, v);
                    values.set_u64(dram, item + 1, v);
                    item += 2;
                }
            }
        }
    }

    /// Sorts the first `n` gather keys by page: least-significant-digit radix passes of
    /// [`RADIX_BITS`] over the page's offset from the lowest page, as many as the page range
    /// needs. Stable, so a page's items stay in item order. Counts the passes and the keys
    /// they move (and copy back after an odd number of passes) as sort work; building a key
    /// and finding the range are part of its gather item's work (`edges_scanned`).
    fn sort_keys(&mut self, lane: usize, dram: &mut [u8], backend: &mut Backend, n: usize) {
        let page = |key: u64| key >> ITEM_BITS;
        let LaneRegions {
            gather_keys: keys,
            gather_scratch: keys_scratch,
            ..
        } = self.lanes[lane].regions;
        let (lo, hi) = (0..n)
            .map(|i| page(keys.u64(dram, i)))
            .fold((u64::MAX, 0), |(lo, hi), p| (lo.min(p), hi.max(p)));
        if n < 2 || lo == hi {
            return;
        }
        let bits = u64::BITS - (hi - lo).leading_zeros();
        let passes = bits.div_ceil(RADIX_BITS);
        let (mut src, mut dst) = (keys, keys_scratch);
        for pass in 0..passes {
            let digit = |key: u64| {
                ((page(key) - lo) >> (pass * RADIX_BITS)) as usize & ((1 << RADIX_BITS) - 1)
            };
            self.radix_counts.fill(0);
            for i in 0..n {
                self.radix_counts[digit(src.u64(dram, i))] += 1;
            }
            let mut sum = 0;
            for c in self.radix_counts.iter_mut() {
                let count = *c;
                *c = sum;
                sum += count;
            }
            for i in 0..n {
                let key = src.u64(dram, i);
                let d = digit(key);
                dst.set_u64(dram, self.radix_counts[d] as usize, key);
                self.radix_counts[d] += 1;
            }
            core::mem::swap(&mut src, &mut dst);
        }
        if src != keys {
            dram.copy_within(src.start..src.start + 8 * n, keys.start);
        }
        backend.work.sort_key_moves += n as u64 * u64::from(passes + passes % 2);
        backend.work.radix_passes += u64::from(passes);
    }

    /// The page and item of sorted key `k` of `lane`'s running gather.
    fn key(&self, lane: usize, dram: &[u8], k: u32) -> (u32, u32) {
        let key = self.lanes[lane].regions.gather_keys.u64(dram, k as usize);
        // Validated descriptors keep addresses inside the namespace, whose pages fit in u32.
        (
            (key >> ITEM_BITS) as u32,
            (key & ((1 << ITEM_BITS) - 1)) as u32,
        )
    }

    /// The width in bytes of one item of the running gather.
    fn item_width(&self, run: &Run) -> usize {
        match run.gather {
            Gather::Bounds => 8,
            Gather::Neighbours => usize::from(run.graph.id_width_bytes),
            Gather::Features => self.jobs[run.slot].feature_row_bytes as usize,
        }
    }

    /// The sectors of `page` that the items from sorted key `from` on need (the keys of a
    /// page are consecutive); looking at a key is part of its gather item's work.
    fn page_sectors(&self, lane: usize, dram: &[u8], run: &Run, page: u32, from: u32) -> Sectors {
        let width = self.item_width(run);
        let page_size = self.page_size_bytes as usize;
        let mut want = Sectors::NONE;
        let mut k = from;
        while k < run.item_count {
            let (p, item) = self.key(lane, dram, k);
            if p != page {
                break;
            }
            let offset = self.offset_in_page(self.item_address(lane, dram, run, item));
            want = want.union(Sectors::covering(offset, width, page_size));
            k += 1;
        }
        want
    }

    /// Pins pages ahead of `lane`'s consumer, up to its window, each with the sectors its
    /// items need.
    fn issue(&mut self, lane: usize, dram: &mut [u8], backend: &mut Backend) -> bool {
        let Some(mut run) = self.lanes[lane].run else {
            return false;
        };
        let mut progress = false;
        while run.issued < run.item_count {
            let (page, _) = self.key(lane, dram, run.issued);
            if run.last_issued != Some(page) {
                if self.lanes[lane].window.len() >= self.window_pages {
                    // A full window whose items are all consumed holds only the last page
                    // (the consumer releases a page when it moves past it): release it, or a
                    // one-page window would wait for itself.
                    if run.consumed < run.issued {
                        break;
                    }
                    if let Some((_, slot, _)) = self.lanes[lane].window.pop_front() {
                        backend.buffer.unpin(dram, slot);
                        backend.work.pages_scanned += 1;
                    }
                }
                let want = self.page_sectors(lane, dram, &run, page, run.issued);
                match backend.request_page(dram, page, want) {
                    Acquire::Full => break,
                    Acquire::Valid(slot)
                    | Acquire::Loading(slot)
                    | Acquire::Failed(slot)
                    | Acquire::Miss(slot, _) => {
                        // The window has room (checked above).
                        let _ = self.lanes[lane].window.push_back((page, slot, want));
                        run.last_issued = Some(page);
                        progress = true;
                    }
                }
            }
            run.issued += 1;
        }
        self.lanes[lane].run = Some(run);
        progress
    }

    /// The front window page's slot once it holds the sectors its items need: `Ok(None)` while
    /// a read is in flight (or none can start yet). A read that landed with another reader's
    /// sectors is followed by one for ours.
    fn front_page(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        backend: &mut Backend,
    ) -> Result<Option<u32>, Status> {
        let Some(&(page, slot, want)) = self.lanes[lane].window.front() else {
            return Err(Status::INTERNAL_ERROR);
        };
        if backend.buffer.is_failed(dram, slot) {
            return Err(Status::UNRECOVERED_READ_ERROR);
        }
        if backend.buffer.is_loading(dram, slot) {
            return Ok(None);
        }
        if backend.buffer.has(dram, slot, want) {
            return Ok(Some(slot));
        }
        let (again, ready) = match backend.request_page(dram, page, want) {
            Acquire::Full => return Ok(None),
            Acquire::Valid(again) => (again, true),
            Acquire::Loading(again) | Acquire::Failed(again) | Acquire::Miss(again, _) => {
                (again, false)
            }
        };
        // The new request holds its own pin.
        backend.buffer.unpin(dram, slot);
        if let Some(front) = self.lanes[lane].window.front_mut() {
            front.1 = again;
        }
        Ok(ready.then_some(again))
    }

    /// Copies issued items' values out of their pages, in key order, while pages are present;
    /// runs the in-order pass and the next gather when the gather is complete.
    fn consume(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        backend: &mut Backend,
    ) -> Result<bool, Status> {
        let Some(mut run) = self.lanes[lane].run else {
            return Ok(false);
        };
        let mut progress = false;
        let width = self.item_width(&run);
        let values = self.lanes[lane].regions.gather_values;
        while run.consumed < run.issued {
            let (page, item) = self.key(lane, dram, run.consumed);
            let window = &mut self.lanes[lane].window;
            while window.front().is_some_and(|(p, _, _)| *p != page) {
                if let Some((_, slot, _)) = window.pop_front() {
                    backend.buffer.unpin(dram, slot);
                    backend.work.pages_scanned += 1;
                }
            }
            let Some(slot) = self.front_page(lane, dram, backend)? else {
                break;
            };
            let offset = self.offset_in_page(self.item_address(lane, dram, &run, item));
            if run.gather == Gather::Features {
                // A whole row: rows never straddle a page (checked at GRAPH_ATTACH).
                let from = backend.slot(slot).start + offset;
                // In bounds: the section (node count × width) fit the region before the gather.
                let to = self.regions[run.slot]
                    .features
                    .sub(item as usize * width, width);
                dram.copy_within(from..from + width, to.start);
                backend.work.bytes_copied += width as u64;
            } else {
                let mut b = [0u8; 8];
                b[..width].copy_from_slice(&backend.slot(slot).bytes(dram)[offset..offset + width]);
                values.set_u64(dram, item as usize, u64::from_le_bytes(b));
            }
            backend.work.edges_scanned += 1;
            run.consumed += 1;
            progress = true;
        }
        self.lanes[lane].run = Some(run);
        if run.consumed == run.item_count {
            self.drain_window(lane, dram, backend);
            if run.gather == Gather::Features {
                self.lanes[lane].run = None;
                self.finish(lane, dram, &mut backend.work, run.slot, None);
            } else {
                // Its pass runs in chunks from the next step on.
                run.pass = Some((0, 0));
                self.lanes[lane].run = Some(run);
            }
            progress = true;
        }
        Ok(progress)
    }

    /// For destinations `from..to`, in order: check its bounds, draw its sampled positions
    /// (counted as draws where its degree exceeds the fanout) and append their global edge
    /// positions, filling the layer's local `indptr`; and read ahead the pages of the
    /// neighbour ids at those positions, which the neighbour gather will want.
    #[allow(clippy::too_many_arguments)]
    fn sample_pass(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        backend: &mut Backend,
        run: &mut Run,
        st: &mut MinibatchState,
        from: u32,
        to: u32,
    ) -> Result<(), Status> {
        let fanout = self.jobs[run.slot].fanouts[run.layer];
        // One minibatch: its local ids are positions (see `dedup`).
        let alone = self.jobs[run.slot].minibatch_count == 1;
        let SlotRegions { indptr, nodes, .. } = self.regions[run.slot];
        let LaneRegions {
            entries,
            gather_values: values,
            ..
        } = self.lanes[lane].regions;
        if from == 0 {
            // This minibatch's row of the layer, after the rows before it.
            let dst_count = st.nodes_through(run.layer);
            let job = &mut self.jobs[run.slot];
            st.indptr_row[run.layer] = job.indptr_words;
            job.indptr_words += dst_count + 1;
            st.edge_first = run.layer_edges;
            st.edge_start[run.layer] = run.edge_base + run.layer_edges;
            indptr.set_u32(dram, st.indptr_row[run.layer] as usize, 0);
        }
        let row = st.indptr_row[run.layer] as usize;
        let width = usize::from(run.graph.id_width_bytes);
        let base = run.graph.indices.slba * self.block_size_bytes;
        // Consecutive positions of a page are read ahead once.
        let mut last_page = None;
        let mut ahead = Ahead {
            stopped: !self.read_ahead,
            present_run: 0,
        };
        for i in from..to {
            let v = nodes.u64(dram, if alone { i } else { st.position(i) } as usize);
            let j = (st.dst_first + i) as usize;
            let (start, end) = (values.u64(dram, 2 * j), values.u64(dram, 2 * j + 1));
            if start > end || end > run.graph.edge_count {
                return Err(VendorStatus::GraphCorrupt.into());
            }
            let k = sample_positions(
                st.seed,
                run.layer as u8,
                v,
                end - start,
                fanout,
                &mut self.scratch,
            )
            .ok_or(Status::INTERNAL_ERROR)?;
            if end - start > u64::from(fanout) {
                backend.work.edges_drawn += k as u64;
            }
            if u64::from(run.edge_base) + u64::from(run.layer_edges) + k as u64
                > u64::from(self.max_edges)
            {
                return Err(VendorStatus::ResultTooLarge.into());
            }
            for j in 0..k {
                let position = start + self.scratch[j];
                entries.set_u64(dram, run.layer_edges as usize, position);
                run.layer_edges += 1;
                if !ahead.stopped {
                    let page = self.page_of(base + width as u64 * position);
                    if last_page != Some(page) {
                        self.read_ahead(lane, dram, backend, page, &mut ahead);
                        last_page = Some(page);
                    }
                }
            }
            indptr.set_u32(dram, row + i as usize + 1, run.layer_edges - st.edge_first);
        }
        Ok(())
    }

    /// For sampled edges `from..to`, in order: deduplicate its neighbour and record its local
    /// index; and, when another layer follows, read ahead the page of each new node's `indptr`
    /// entries, which its bounds gather will want. Counted once per edge as "sampled" (a
    /// probe and a write; the draw that chose it, if its list was not taken whole, was counted
    /// by the sample pass).
    #[allow(clippy::too_many_arguments)]
    fn dedup_pass(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        backend: &mut Backend,
        run: &Run,
        m: u16,
        st: &mut MinibatchState,
        from: u32,
        to: u32,
    ) -> Result<(), Status> {
        let values = self.lanes[lane].regions.gather_values;
        let phase = run.layer + 1;
        if from == 0 {
            st.segment_start[phase] = self.jobs[run.slot].node_count;
        }
        let another_layer = run.layer + 1 < usize::from(self.jobs[run.slot].layer_count);
        let base = run.graph.indptr.slba * self.block_size_bytes;
        let mut ahead = Ahead {
            stopped: !(self.read_ahead && another_layer),
            present_run: 0,
        };
        let mut last_page = None;
        for k in from..to {
            let e = st.edge_first + k;
            let id = values.u64(dram, e as usize);
            if id >= run.graph.node_count {
                return Err(VendorStatus::GraphCorrupt.into());
            }
            let known = self.jobs[run.slot].node_count;
            let local = self
                .dedup(lane, dram, run.slot, usize::from(m), st, phase, id)
                .ok_or(Status::from(VendorStatus::ResultTooLarge))?;
            self.regions[run.slot]
                .indices
                .set_u32(dram, (run.edge_base + e) as usize, local);
            if !ahead.stopped && self.jobs[run.slot].node_count > known {
                let page = self.page_of(base + 8 * id);
                if last_page != Some(page) {
                    self.read_ahead(lane, dram, backend, page, &mut ahead);
                    last_page = Some(page);
                }
            }
        }
        backend.work.edges_sampled += u64::from(to - from);
        Ok(())
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
                self.finish(lane, dram, &mut backend.work, run.slot, None);
            } else if !fits {
                let too_large = Some(VendorStatus::ResultTooLarge.into());
                self.finish(lane, dram, &mut backend.work, run.slot, too_large);
            } else {
                self.start_gather(lane, dram, backend, run, Gather::Features);
            }
            return;
        }
        run.layer += 1;
        run.edge_base += run.layer_edges;
        run.layer_edges = 0;
        run.dst_count = job.node_count;
        self.start_gather(lane, dram, backend, run, Gather::Bounds);
    }

    /// Releases every page `lane` pinned.
    fn drain_window(&mut self, lane: usize, dram: &mut [u8], backend: &mut Backend) {
        while let Some((_, slot, _)) = self.lanes[lane].window.pop_front() {
            backend.buffer.unpin(dram, slot);
            backend.work.pages_scanned += 1;
        }
    }

    fn fail_run(&mut self, lane: usize, dram: &mut [u8], backend: &mut Backend, status: Status) {
        self.drain_window(lane, dram, backend);
        if let Some(run) = self.lanes[lane].run.take() {
            self.finish(lane, dram, &mut backend.work, run.slot, Some(status));
        }
    }

    /// Ends job `slot`, which `lane` ran (successfully if `error` is `None`), and clears its
    /// minibatches' entries from the lane's node table, one probe per node.
    fn finish(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        work: &mut WorkCounters,
        slot: usize,
        error: Option<Status>,
    ) {
        let SlotRegions {
            nodes,
            minibatches: states,
            ..
        } = self.regions[slot];
        let node_hash = self.lanes[lane].regions.node_hash;
        let job = self.jobs[slot];
        let mut fits = true;
        for m in 0..usize::from(job.minibatch_count) {
            let st = MinibatchState::load(states, dram, m);
            fits &= job.layout(&st).is_some();
            for p in 0..PHASES {
                let start = st.segment_start[p];
                for position in start..start + st.segment_len[p] {
                    let node = nodes.u64(dram, position as usize);
                    let mut h = self.home(node, m);
                    // Deleting in arbitrary order would cut probe chains, so find each entry by
                    // value.
                    while node_hash.u32(dram, h) != position + 1 {
                        h = (h + 1) & self.hash_mask;
                    }
                    node_hash.set_u32(dram, h, 0);
                }
            }
        }
        work.nodes_cleared += u64::from(job.node_count);
        let job = &mut self.jobs[slot];
        job.state = match error {
            _ if job.orphaned => JobState::Free,
            None if fits => JobState::Done,
            None => JobState::Failed(VendorStatus::ResultTooLarge.into()),
            Some(s) => JobState::Failed(s),
        };
    }

    /// Where (`node`, minibatch `m`) starts probing the node table: the minibatches of a
    /// hyperbatch share nodes, and each one's probe for a shared node starts elsewhere.
    fn home(&self, node: u64, m: usize) -> usize {
        // Minibatch 0 (every plain NS_config's) keys on the node alone.
        let key = if m == 0 {
            node
        } else {
            node ^ (m as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)
        };
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & self.hash_mask
    }

    /// The local id of `node` in minibatch `m` (state `st`) of job `slot`, which `lane` runs,
    /// adding it to the node array and to the minibatch's `phase` segment if new; `None` if the
    /// node array is full. A table entry is a node's position in the node array + 1. Inlined
    /// into its two callers' loops: with this many arguments a call passes most of them on the
    /// stack, which the embedded cores pay for on every sampled edge.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn dedup(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        slot: usize,
        m: usize,
        st: &mut MinibatchState,
        phase: usize,
        node: u64,
    ) -> Option<u32> {
        let nodes = self.regions[slot].nodes;
        let node_hash = self.lanes[lane].regions.node_hash;
        // A job of one minibatch holds only its nodes, in order: a position is a local id (the
        // segment arithmetic would say the same, at a cost on every probe).
        let alone = self.jobs[slot].minibatch_count == 1;
        let mut h = self.home(node, m);
        loop {
            let e = node_hash.u32(dram, h);
            if e == 0 {
                let job = &mut self.jobs[slot];
                if job.node_count >= self.max_nodes {
                    return None;
                }
                let local = if alone {
                    job.node_count
                } else {
                    st.node_count()
                };
                nodes.set_u64(dram, job.node_count as usize, node);
                job.node_count += 1;
                node_hash.set_u32(dram, h, job.node_count);
                st.segment_len[phase] += 1;
                return Some(local);
            }
            if nodes.u64(dram, e as usize - 1) == node {
                if alone {
                    return Some(e - 1);
                }
                if let Some(local) = st.local_id(e - 1) {
                    return Some(local);
                }
            }
            h = (h + 1) & self.hash_mask;
        }
    }
}
