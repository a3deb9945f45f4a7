//! A gather: the flash reads one step of a layer needs, in page order.
//!
//! A gather walks *keys*, one per destination of the layer (or per node of the job, for
//! features), each `node << 32 | index`, sorted by node ([`super::sort`]). The graph's CSR
//! is in node order, so walking the keys in that order reads `indptr` and every neighbour
//! list in ascending address order: each page is read once per gather however many items
//! of however many minibatches it serves, and consecutive pages, which the FTL striped over
//! dies, are read in parallel. A key has *items*, the values it reads, numbered across the
//! gather in key order:
//!
//! * bounds: two per key, `indptr[v]` and `indptr[v + 1]`, into the key's [`Destination`];
//! * neighbours: one per sampled position of the key's list, into the lane's `neighbours`, in
//!   key order. The issuer samples each key as it first reaches it ([`Isp::sample_key`]): it
//!   checks its bounds, gives its edges their place after the keys before it, and draws their
//!   positions (unless the whole list is taken);
//! * features: one per key, the node's feature row, into the slot's feature array.
//!
//! Two cursors walk the items. The *issuer* runs ahead: it finds the run of items on the next
//! page, stages each one's offset in the page (where a neighbour's value will go; in the spare
//! sort buffer for the others), and pins that page in the page buffer with the sectors they
//! need (starting its flash read), up to the lane's share of the window. The *consumer* follows, page by page: once a page is there it reads
//! each of the issuer's items at the offset the issuer left, and releases the page.

use sagessd_abi::nvme::{Status, VendorStatus};
use sagessd_abi::sample::sample_positions;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::minibatch::MinibatchState;
use super::sort::sort_by_node;
use super::{Gather, Isp, Run, WindowPage};
use crate::backend::Backend;
use crate::dram::{Region, as_words, as_words_mut, split_mut};
use crate::hal::Sectors;
use crate::page_buffer::Acquire;
use crate::work::WorkCounters;

/// Items the issuer stages in one step at most (it stops at the page it is at): a step's
/// work on the lane's core stays bounded, draws included, before the others run.
const ISSUE_CHUNK_ITEMS: u32 = 4096;

/// A destination's record in the lane's `destinations`, in key order: its list's first
/// position, and then one past its last (after the bounds gather) or, once the issuer has
/// sampled it, its list's length. (Items `2q` and `2q + 1` of a bounds gather are the two
/// words of key `q`'s record; its edges' place in key order is the issuer's item count when
/// it reaches it.)
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
pub(crate) struct Destination {
    /// `indptr[v]`: its list's first position.
    pub start: u64,
    /// `indptr[v + 1]`, then its degree ([`Self::place`]).
    rest: u64,
}

const _: () = assert!(core::mem::size_of::<Destination>() == crate::dram::DESTINATION_BYTES);

impl Destination {
    /// One past its list's last position (before it is sampled).
    pub fn end(&self) -> u64 {
        self.rest
    }

    /// Records that it was sampled: its list has `degree` entries.
    pub fn place(&mut self, degree: u32) {
        self.rest = u64::from(degree);
    }

    /// Its list's length (once placed).
    pub fn degree(&self) -> u32 {
        self.rest as u32
    }
}

/// The issuer's place in a gather: a key, one of its items, and that item's number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub key: u32,
    pub item: u32,
    pub n: u32,
}

/// One bounds or feature key's items: where they are on the namespace.
#[derive(Clone, Copy, Debug)]
struct Key {
    /// Byte address of the key's first item.
    base: u64,
    /// Its items (8 bytes apart).
    count: u32,
}

/// What a bounds or feature gather reads, as its issuer sees it: the sorted keys.
struct Stream<'a> {
    gather: Gather,
    keys: &'a [u64],
    /// Byte address of the region the gather reads (`indptr` or the features).
    base: u64,
    /// A feature row's stride in bytes.
    stride: u64,
}

impl Stream<'_> {
    /// Key `q`'s items.
    #[inline(always)]
    fn key(&self, q: u32) -> Key {
        let node = self.keys[q as usize] >> 32;
        match self.gather {
            Gather::Features => Key {
                base: self.base + node * self.stride,
                count: 1,
            },
            _ => Key {
                base: self.base + (node << 3),
                count: 2,
            },
        }
    }
}

/// A neighbour list as [`stage_run`] walks it: its first position's page and offset there, in
/// a power-of-two page of sectors that are powers of two.
#[derive(Clone, Copy, Debug)]
struct StagedList {
    first_page: u32,
    first_offset: u32,
    /// log2 of an id's bytes.
    shift: u32,
    page_shift: u32,
    sector_shift: u32,
}

/// What [`stage_run`] staged.
#[derive(Clone, Copy, Debug)]
struct StagedRun {
    page: u32,
    items: u32,
    sectors: u32,
}

impl StagedList {
    /// The page and the offset in it of position `p`.
    #[inline(always)]
    fn place(&self, p: u32) -> (u32, u32) {
        let byte = self.first_offset + (p << self.shift);
        (
            self.first_page + (byte >> self.page_shift),
            byte & ((1 << self.page_shift) - 1),
        )
    }
}

/// Stages the offsets of a list's items `items` (`positions[i]`, or `i` where the list is
/// taken whole: `positions` empty) that lie on one page into `staged[0..]`, up to the first
/// item on another page than `page` (the run's, if it has one yet; else the first item's).
/// `items` is not empty.
fn stage_run(
    positions: &[u64],
    list: StagedList,
    items: core::ops::Range<u32>,
    staged: &mut [u32],
    page: Option<u32>,
) -> StagedRun {
    if positions.is_empty() {
        return stage_whole(list, items, staged, page);
    }
    let positions = &positions[items.start as usize..items.end as usize];
    // Below the degree, which fits u32.
    let page = page.unwrap_or(list.place(positions[0] as u32).0);
    let (n, sectors) = stage_drawn(positions, list, staged, page);
    StagedRun {
        page,
        items: n,
        sectors,
    }
}

/// [`stage_run`] of drawn positions: stages each one's offset while it lies on `page`;
/// returns how many did and their sectors. Its own function, so that its loop keeps every
/// value in a register.
#[inline(never)]
fn stage_drawn(positions: &[u64], list: StagedList, staged: &mut [u32], page: u32) -> (u32, u32) {
    let mut sectors = 0u32;
    let mut n = 0u32;
    for (&p, slot) in positions.iter().zip(staged.iter_mut()) {
        let (pg, offset) = list.place(p as u32);
        if pg != page {
            break;
        }
        *slot = offset;
        sectors |= 1 << (offset >> list.sector_shift);
        n += 1;
    }
    (n, sectors)
}

/// [`stage_run`] of a whole list's positions `items`: consecutive, so the run on one page is
/// found by arithmetic, and its sectors are the range they cover.
fn stage_whole(
    list: StagedList,
    items: core::ops::Range<u32>,
    staged: &mut [u32],
    page: Option<u32>,
) -> StagedRun {
    let (first_page, first) = list.place(items.start);
    let page = page.unwrap_or(first_page);
    if first_page != page {
        return StagedRun {
            page,
            items: 0,
            sectors: 0,
        };
    }
    let left_on_page = ((1u32 << list.page_shift) - first) >> list.shift;
    let n = (items.end - items.start).min(left_on_page);
    let width = 1u32 << list.shift;
    for (i, slot) in staged[..n as usize].iter_mut().enumerate() {
        *slot = first + (i as u32) * width;
    }
    let last = first + (n - 1) * width;
    let sectors = (2u32 << (last >> list.sector_shift)) - (1 << (first >> list.sector_shift));
    StagedRun {
        page,
        items: n,
        sectors,
    }
}

/// What the issuer found: the run of items on its next page.
#[derive(Clone, Copy, Debug)]
struct Scan {
    page: u32,
    want: Sectors,
    items: u32,
    /// The issuer's place after them.
    next: Cursor,
}

impl Isp {
    /// The page of byte `address` of the namespace (a shift for the usual power-of-two page:
    /// the A9 has no divide instruction, and a 64-bit division in software costs it more than
    /// the rest of a gather item).
    #[inline(always)]
    pub(super) fn page_of(&self, address: u64) -> u32 {
        let page = match self.page_shift {
            Some(shift) => address >> shift,
            None => address / self.page_size_bytes,
        };
        // Validated descriptors keep addresses inside the namespace, whose pages fit in u32.
        page as u32
    }

    /// The page of byte `address` of the namespace and its offset in that page.
    #[inline(always)]
    pub(super) fn split_address(&self, address: u64) -> (u32, u32) {
        let offset = match self.page_shift {
            Some(_) => address & (self.page_size_bytes - 1),
            None => address % self.page_size_bytes,
        };
        (self.page_of(address), offset as u32)
    }

    /// The sectors of a page that bytes `offset..offset + len` of it lie in (a shift, not a
    /// division, for a power-of-two page; one sector for an item that cannot straddle two).
    #[inline(always)]
    fn sectors_of(&self, offset: u32, len: u32) -> Sectors {
        match self.sector_shift {
            // An aligned id or bound of 8 bytes at most lies in one sector.
            Some(shift) if len <= 8 => Sectors(1 << (offset >> shift)),
            Some(shift) if len > 0 => {
                let (first, last) = (offset >> shift, (offset + len - 1) >> shift);
                // Both below 16: the bytes lie in the page.
                Sectors((((1u32 << (last + 1)) - 1) & !((1u32 << first) - 1)) as u16)
            }
            _ => Sectors::covering(offset as usize, len as usize, self.page_size_bytes as usize),
        }
    }

    /// The byte address of the region a gather of `run` reads and the stride of its rows.
    fn stream_geometry(&self, run: &Run) -> (u64, u64) {
        let bs = self.block_size_bytes;
        match run.gather {
            Gather::Bounds => (run.graph.indptr.slba * bs, 0),
            Gather::Neighbours => (run.graph.indices.slba * bs, 0),
            // Attached graphs with features always have a region (checked at submit).
            Gather::Features => run
                .graph
                .features
                .map_or((0, 0), |f| (f.range.slba * bs, f.stride_bytes())),
        }
    }

    /// The bytes of one item of `run`'s gather.
    fn item_bytes(&self, run: &Run) -> u32 {
        match run.gather {
            Gather::Bounds => 8,
            Gather::Neighbours => u32::from(run.graph.id_width_bytes),
            Gather::Features => self.jobs[run.slot].feature_row_bytes,
        }
    }

    /// The region holding `run`'s sorted keys.
    pub(super) fn sorted_keys(&self, lane: usize, run: &Run) -> Region {
        let r = &self.lanes[lane].regions;
        let region = if run.sorted_in_scratch {
            r.sort_scratch
        } else {
            r.keys
        };
        region.sub(0, 8 * run.key_count as usize)
    }

    /// The sort buffer not holding `run`'s sorted keys: the issuer's staged offsets during a
    /// bounds or feature gather, then each destination's `(row, count)` of edges in local
    /// order, once the neighbour gather's issuer has placed them.
    pub(super) fn spare_buffer(&self, lane: usize, run: &Run) -> Region {
        let r = &self.lanes[lane].regions;
        if run.sorted_in_scratch {
            r.keys
        } else {
            r.sort_scratch
        }
    }

    /// Makes `gather` `lane`'s running one: for bounds and features builds its keys (the
    /// layer's destinations, or the job's nodes) and sorts them; neighbours keep the bounds
    /// gather's keys, each sampled as the issuer reaches it.
    pub(super) fn start_gather(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        backend: &mut Backend,
        mut run: Run,
        gather: Gather,
    ) {
        run.gather = gather;
        run.issued = Cursor::default();
        run.consumed = 0;
        run.sampled = 0;
        run.pass = None;
        match gather {
            Gather::Neighbours => {}
            _ => {
                run.key_count = match gather {
                    Gather::Bounds => run.dst_count,
                    _ => self.jobs[run.slot].node_count,
                };
                let highest = self.place_keys(lane, dram, &run);
                let r = self.lanes[lane].regions;
                let n = run.key_count as usize;
                let [keys, scratch] = split_mut(dram, [r.keys, r.sort_scratch]);
                let keys = &mut as_words_mut::<u64>(keys)[..n];
                let scratch = as_words_mut::<u64>(scratch);
                let (passes, in_scratch) =
                    sort_by_node(keys, scratch, &mut self.radix_counts, highest);
                run.sorted_in_scratch = in_scratch;
                backend.work.sort_key_moves += n as u64 * u64::from(passes);
                backend.work.radix_passes += u64::from(passes);
            }
        }
        self.lanes[lane].run = Some(run);
    }

    /// Writes `run`'s keys into the lane's `keys` region: for bounds each destination's (the
    /// minibatches one after another, each in local-id order, noting where each one's
    /// destinations start), for features each node's of the job's node list. Returns the
    /// highest node id.
    #[inline(never)]
    fn place_keys(&self, lane: usize, dram: &mut [u8], run: &Run) -> u32 {
        let regions = self.regions[run.slot];
        let [keys, nodes, states] = split_mut(
            dram,
            [
                self.lanes[lane].regions.keys,
                regions.nodes,
                regions.minibatches,
            ],
        );
        let keys = as_words_mut::<u64>(keys);
        let nodes = as_words::<u64>(nodes);
        let states = as_words_mut::<MinibatchState>(states);
        let mut highest = 0u32;
        let mut key = |j: usize, position: usize| {
            // Node ids are below the graph's node count, which fits u32 (checked at attach).
            let v = u64::from_le(nodes[position]) as u32;
            highest = highest.max(v);
            keys[j] = u64::from(v) << 32 | j as u64;
        };
        if run.gather == Gather::Features {
            for j in 0..run.key_count as usize {
                key(j, j);
            }
            return highest;
        }
        let mut j = 0usize;
        for st in &mut states[..usize::from(self.jobs[run.slot].minibatch_count)] {
            st.dst_first = j as u32;
            for p in 0..=run.layer {
                let start = st.segment_start[p] as usize;
                for position in start..start + st.segment_len[p] as usize {
                    key(j, position);
                    j += 1;
                }
            }
        }
        highest
    }

    /// Pins pages ahead of `lane`'s consumer, up to its window and about [`ISSUE_CHUNK_ITEMS`]
    /// items a step, each with the sectors its items need; returns whether it pinned any, or
    /// the status a key it sampled fails the job with.
    pub(super) fn issue(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        backend: &mut Backend,
    ) -> Result<bool, Status> {
        let Some(mut run) = self.lanes[lane].run else {
            return Ok(false);
        };
        let mut progress = false;
        // The key whose drawn positions are in the shared scratch (none yet in this step: the
        // lanes share it, and a key resumed in a later step draws them again).
        let mut drawn = None;
        let mut issued = 0u32;
        while run.issued.key < run.key_count
            && self.lanes[lane].window.len() < self.window_pages
            && issued < ISSUE_CHUNK_ITEMS
        {
            let scan = match run.gather {
                Gather::Neighbours => {
                    self.scan_neighbours(lane, dram, &mut backend.work, &mut run, &mut drawn)
                }
                _ => Ok(self.scan_page(lane, dram, &run)),
            };
            // A key placed before a failure stays placed: the job fails.
            self.lanes[lane].run = Some(run);
            let Some(scan) = scan? else {
                run.issued = Cursor {
                    key: run.key_count,
                    item: 0,
                    n: run.issued.n,
                };
                break;
            };
            let slot = match backend.request_page(dram, scan.page, scan.want) {
                Acquire::Full => break,
                Acquire::Valid(slot)
                | Acquire::Loading(slot)
                | Acquire::Failed(slot)
                | Acquire::Miss(slot, _) => slot,
            };
            // The window has room (checked above).
            let _ = self.lanes[lane].window.push_back(WindowPage {
                page: scan.page,
                slot,
                want: scan.want,
                items: scan.items,
            });
            run.issued = scan.next;
            issued += scan.items;
            progress = true;
        }
        self.lanes[lane].run = Some(run);
        Ok(progress)
    }

    /// The run of items from `run`'s issuer on that lie on one page of a bounds or feature
    /// gather, each one's offset in the page staged for the consumer; `None` if no item is
    /// left. Finding an item's page and sectors is part of its gather item's work.
    #[inline(never)]
    fn scan_page(&self, lane: usize, dram: &mut [u8], run: &Run) -> Option<Scan> {
        let (base, stride) = self.stream_geometry(run);
        let [keys, staged] = split_mut(
            dram,
            [self.sorted_keys(lane, run), self.spare_buffer(lane, run)],
        );
        let stream = Stream {
            gather: run.gather,
            keys: as_words(keys),
            base,
            stride,
        };
        let staged = as_words_mut::<u32>(staged);
        let bytes = self.item_bytes(run);
        let mut c = run.issued;
        let mut page = None;
        let mut want = Sectors::NONE;
        let mut items = 0u32;
        while c.key < run.key_count {
            let k = stream.key(c.key);
            while c.item < k.count {
                let (p, offset) = self.split_address(k.base + 8 * u64::from(c.item));
                match page {
                    None => page = Some(p),
                    Some(q) if q != p => {
                        return Some(Scan {
                            page: q,
                            want,
                            items,
                            next: c,
                        });
                    }
                    Some(_) => {}
                }
                staged[c.n as usize] = offset;
                want = want.union(self.sectors_of(offset, bytes));
                items += 1;
                c.item += 1;
                c.n += 1;
            }
            c.key += 1;
            c.item = 0;
        }
        page.map(|page| Scan {
            page,
            want,
            items,
            next: c,
        })
    }

    /// The run of items from `run`'s issuer on that lie on one page of a neighbour gather,
    /// each one's offset in the page staged in its slot of `neighbours`; `None` if no item is
    /// left. Each key is sampled when first reached; `drawn` names the key whose drawn
    /// positions the scratch holds.
    #[inline(never)]
    fn scan_neighbours(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        work: &mut WorkCounters,
        run: &mut Run,
        drawn: &mut Option<u32>,
    ) -> Result<Option<Scan>, Status> {
        let r = self.lanes[lane].regions;
        let [keys, destinations, local, states, staged] = split_mut(
            dram,
            [
                self.sorted_keys(lane, run),
                r.destinations,
                self.spare_buffer(lane, run),
                self.regions[run.slot].minibatches,
                r.neighbours,
            ],
        );
        let keys = as_words::<u64>(keys);
        let destinations = as_words_mut::<Destination>(destinations);
        let local = as_words_mut::<u64>(local);
        let minibatches = usize::from(self.jobs[run.slot].minibatch_count);
        let states = &as_words::<MinibatchState>(states)[..minibatches];
        let staged = as_words_mut::<u32>(staged);
        let fanout = self.jobs[run.slot].fanouts[run.layer];
        let shift = u32::from(run.graph.id_width_bytes).trailing_zeros();
        let bytes = u32::from(run.graph.id_width_bytes);
        let base = run.graph.indices.slba * self.block_size_bytes;
        let mut c = run.issued;
        let mut page = None;
        let mut want = Sectors::NONE;
        let mut items = 0u32;
        while c.key < run.key_count {
            let q = c.key as usize;
            let key = keys[q];
            let (v, j) = (key >> 32, key as u32);
            if c.key >= run.sampled {
                self.place_key(run, &mut destinations[q], &mut local[j as usize])?;
                work.destinations += 1;
            }
            let d = destinations[q];
            let (degree, k) = (d.degree(), u32::from(fanout).min(d.degree()));
            if degree > u32::from(fanout) && *drawn != Some(c.key) {
                // The minibatch whose destinations (numbered from its `dst_first` on) hold j.
                let m = states.partition_point(|s| s.dst_first <= j) - 1;
                let seed = states[m].seed;
                let layer = run.layer as u8;
                sample_positions(seed, layer, v, u64::from(degree), fanout, &mut self.scratch)
                    .ok_or(Status::INTERNAL_ERROR)?;
                work.edges_drawn += u64::from(k);
                *drawn = Some(c.key);
            }
            let list = base + (d.start << shift);
            let (first_page, first_offset) = self.split_address(list);
            // Another minibatch's key with the same node next to it: their positions
            // interleave, so the walk visits the list's pages once per key; each page is read
            // whole the first time, so that the next key finds every sector it needs.
            let same = |k: Option<&u64>| k.is_some_and(|k| k >> 32 == v);
            let shared =
                same(keys.get(q + 1)) || q.checked_sub(1).is_some_and(|p| same(keys.get(p)));
            let drawn_positions: &[u64] = if degree > u32::from(fanout) {
                &self.scratch[..k as usize]
            } else {
                &[]
            };
            let position = |i: u32| match drawn_positions.get(i as usize) {
                // Below the degree, which fits u32.
                Some(&p) => p as u32,
                None => i,
            };
            // The usual case: a power-of-two page, each item's offset from the list's page in
            // 32 bits (unless the list is gigabytes), each item in one sector.
            let fast = match (self.page_shift, self.sector_shift) {
                (Some(ps), Some(ss))
                    if u64::from(first_offset) + (u64::from(degree) << shift)
                        <= u64::from(u32::MAX) =>
                {
                    Some((ps, ss))
                }
                _ => None,
            };
            if c.item >= k {
                // No items (a node without neighbours).
            } else if let Some((ps, ss)) = fast {
                let run = stage_run(
                    drawn_positions,
                    StagedList {
                        first_page,
                        first_offset,
                        shift,
                        page_shift: ps,
                        sector_shift: ss,
                    },
                    c.item..k,
                    &mut staged[c.n as usize..],
                    if items == 0 { None } else { page },
                );
                page = Some(run.page);
                items += run.items;
                c.item += run.items;
                c.n += run.items;
                want = if shared {
                    Sectors::ALL
                } else {
                    want.union(Sectors(run.sectors as u16))
                };
            } else {
                while c.item < k {
                    let (pg, offset) =
                        self.split_address(list + (u64::from(position(c.item)) << shift));
                    if items == 0 {
                        page = Some(pg);
                    } else if page != Some(pg) {
                        break;
                    }
                    staged[c.n as usize] = offset;
                    want = if shared {
                        Sectors::ALL
                    } else {
                        want.union(self.sectors_of(offset, bytes))
                    };
                    items += 1;
                    c.item += 1;
                    c.n += 1;
                }
            }
            if c.item < k {
                // The next item is on another page.
                return Ok(page.map(|page| Scan {
                    page,
                    want,
                    items,
                    next: c,
                }));
            }
            c.key += 1;
            c.item = 0;
        }
        Ok(page.map(|page| Scan {
            page,
            want,
            items,
            next: c,
        }))
    }

    /// Samples a key of `run`'s neighbour gather the first time the issuer reaches it: checks
    /// its bounds and places its edges after those of the keys before it (its entry in local
    /// order, `local`, says where: `row | count << 32`; its record `d` keeps its degree).
    #[inline(always)]
    fn place_key(&self, run: &mut Run, d: &mut Destination, local: &mut u64) -> Result<(), Status> {
        let (start, end) = (d.start, d.end());
        if start > end || end > run.graph.edge_count {
            return Err(VendorStatus::GraphCorrupt.into());
        }
        // A degree is kept in 32 bits: a list of 2^32 or more is refused.
        let degree = u32::try_from(end - start).map_err(|_| VendorStatus::GraphTooLarge)?;
        let k = u32::from(self.jobs[run.slot].fanouts[run.layer]).min(degree);
        if u64::from(run.edge_base) + u64::from(run.layer_edges) + u64::from(k)
            > u64::from(self.max_edges)
        {
            return Err(VendorStatus::ResultTooLarge.into());
        }
        d.place(degree);
        *local = u64::from(run.layer_edges) | u64::from(k) << 32;
        run.layer_edges += k;
        run.sampled += 1;
        Ok(())
    }

    /// Copies the items of each page at the front of `lane`'s window out as it arrives, and
    /// releases it; once the gather is complete, starts what follows it (the neighbour gather
    /// after the bounds, the local pass after the neighbours, the job's end after the
    /// features). Returns whether anything happened.
    pub(super) fn consume(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        backend: &mut Backend,
    ) -> Result<bool, Status> {
        let Some(mut run) = self.lanes[lane].run else {
            return Ok(false);
        };
        let mut progress = false;
        while let Some(&front) = self.lanes[lane].window.front() {
            let Some(slot) = self.front_page(lane, dram, backend)? else {
                break;
            };
            self.copy_out(lane, dram, backend, &run, slot, front.items);
            run.consumed += front.items;
            if run.gather == Gather::Features {
                backend.work.rows_gathered += u64::from(front.items);
            }
            if let Some(done) = self.lanes[lane].window.pop_front() {
                backend.buffer.unpin(dram, done.slot);
                backend.work.pages_scanned += 1;
            }
            progress = true;
        }
        self.lanes[lane].run = Some(run);
        if run.issued.key == run.key_count && self.lanes[lane].window.is_empty() {
            match run.gather {
                Gather::Bounds => self.start_gather(lane, dram, backend, run, Gather::Neighbours),
                Gather::Neighbours => {
                    // The local pass runs in chunks from the next step on.
                    run.pass = Some((0, 0));
                    self.lanes[lane].run = Some(run);
                }
                Gather::Features => {
                    self.lanes[lane].run = None;
                    self.finish(dram, run.slot, None);
                }
            }
            progress = true;
        }
        Ok(progress)
    }

    /// Reads the next `items` items of `run`'s consumer out of the page in `slot`, each at the
    /// offset the issuer staged.
    #[inline(never)]
    fn copy_out(
        &self,
        lane: usize,
        dram: &mut [u8],
        backend: &Backend,
        run: &Run,
        slot: u32,
        items: u32,
    ) {
        let r = self.lanes[lane].regions;
        let [keys, destinations, neighbours, spare, page, features] = split_mut(
            dram,
            [
                self.sorted_keys(lane, run),
                r.destinations,
                r.neighbours,
                self.spare_buffer(lane, run),
                backend.slot(slot),
                self.regions[run.slot].features,
            ],
        );
        let page: &[u8] = page;
        let items = run.consumed as usize..(run.consumed + items) as usize;
        match run.gather {
            Gather::Bounds => {
                let words = as_words::<u64>(page);
                let offsets = &as_words::<u32>(spare)[items.clone()];
                let out = &mut as_words_mut::<u64>(destinations)[items];
                for (v, &offset) in out.iter_mut().zip(offsets) {
                    *v = u64::from_le(words[offset as usize / 8]);
                }
            }
            Gather::Neighbours if run.graph.id_width_bytes == 8 => {
                let words = as_words::<u64>(page);
                for v in &mut as_words_mut::<u32>(neighbours)[items] {
                    // An id past u32 is past every node count: kept as u32::MAX, which the
                    // local pass refuses (node counts are below it).
                    let id = u64::from_le(words[*v as usize / 8]);
                    *v = u32::try_from(id).unwrap_or(u32::MAX);
                }
            }
            Gather::Neighbours => {
                let words = as_words::<u32>(page);
                for v in &mut as_words_mut::<u32>(neighbours)[items] {
                    *v = u32::from_le(words[*v as usize / 4]);
                }
            }
            Gather::Features => {
                let width = self.item_bytes(run) as usize;
                let keys = as_words::<u64>(keys);
                let offsets = as_words::<u32>(spare);
                for n in items {
                    // A whole row: rows never straddle a page (checked at GRAPH_ATTACH), and
                    // the section (node count × width) fit the region before the gather.
                    let from = offsets[n] as usize;
                    let to = (keys[n] as u32) as usize * width;
                    features[to..to + width].copy_from_slice(&page[from..from + width]);
                }
            }
        }
    }

    /// The front window page's slot once it holds the sectors its items need: `Ok(None)`
    /// while a read is in flight (or none can start yet). A read that landed with another
    /// reader's sectors is followed by one for ours.
    fn front_page(
        &mut self,
        lane: usize,
        dram: &mut [u8],
        backend: &mut Backend,
    ) -> Result<Option<u32>, Status> {
        let Some(&front) = self.lanes[lane].window.front() else {
            return Err(Status::INTERNAL_ERROR);
        };
        if backend.buffer.is_failed(dram, front.slot) {
            return Err(Status::UNRECOVERED_READ_ERROR);
        }
        if backend.buffer.is_loading(dram, front.slot) {
            return Ok(None);
        }
        if backend.buffer.has(dram, front.slot, front.want) {
            return Ok(Some(front.slot));
        }
        let (again, ready) = match backend.request_page(dram, front.page, front.want) {
            Acquire::Full => return Ok(None),
            Acquire::Valid(again) => (again, true),
            Acquire::Loading(again) | Acquire::Failed(again) | Acquire::Miss(again, _) => {
                (again, false)
            }
        };
        // The new request holds its own pin.
        backend.buffer.unpin(dram, front.slot);
        if let Some(f) = self.lanes[lane].window.front_mut() {
            f.slot = again;
        }
        Ok(ready.then_some(again))
    }
}
