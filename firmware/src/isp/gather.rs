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
//! * neighbours: one per sampled position of the key's list (the positions the sample pass
//!   drew, or the whole list), into the lane's `neighbours`, where the sample pass gave the
//!   key's edges their place in key order;
//! * features: one per key, the node's feature row, into the slot's feature array.
//!
//! Two cursors walk the items. The *issuer* runs ahead: it finds the run of items on the next
//! page, stages each one's offset in the page (where a neighbour's value will go; in the spare
//! sort buffer for the others), and pins that page in the page buffer with the sectors they
//! need (starting its flash read), up to the lane's share of the window. The *consumer* follows, page by page: once a page is there it reads
//! each of the issuer's items at the offset the issuer left, and releases the page.

use sagessd_abi::nvme::Status;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::minibatch::MinibatchState;
use super::sort::sort_by_node;
use super::{Gather, Isp, Run, WindowPage};
use crate::backend::Backend;
use crate::dram::{Region, as_words, as_words_mut, split_mut};
use crate::hal::Sectors;
use crate::page_buffer::Acquire;

/// Bit of [`Destination::taken`] set when the destination's positions were drawn (stored in
/// the lane's `positions`), clear when its whole list is taken (positions `0..k`).
pub(crate) const DRAWN: u32 = 1 << 31;

/// A destination's record in the lane's `destinations`, in key order: its list's first
/// position, and then one past its last (after the bounds gather) or, once the sample pass
/// placed its edges, where they are. (Items `2q` and `2q + 1` of a bounds gather are the two
/// words of key `q`'s record.)
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
pub(crate) struct Destination {
    /// `indptr[v]`: its list's first position.
    pub start: u64,
    /// `indptr[v + 1]`, then its row and edge count ([`Self::place`]).
    rest: u64,
}

const _: () = assert!(core::mem::size_of::<Destination>() == crate::dram::DESTINATION_BYTES);

impl Destination {
    /// One past its list's last position (before the sample pass).
    pub fn end(&self) -> u64 {
        self.rest
    }

    /// Records its edges: the first at `row` among the layer's, `taken` of them (with
    /// [`DRAWN`] if their positions were drawn).
    pub fn place(&mut self, row: u32, taken: u32) {
        self.rest = u64::from(row) | u64::from(taken) << 32;
    }

    /// Its first sampled edge among the layer's (after [`Self::place`]).
    pub fn row(&self) -> u32 {
        self.rest as u32
    }

    /// Its sampled edges, with [`DRAWN`] (after [`Self::place`]).
    pub fn taken(&self) -> u32 {
        (self.rest >> 32) as u32
    }
}

/// Bit of [`Destination::taken`] set when an item's offset from its list's page does not fit
/// 32 bits (a list of gigabytes): its addresses are computed in 64 bits.
pub(crate) const WIDE: u32 = 1 << 30;

/// The issuer's place in a gather: a key, one of its items, and that item's number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub key: u32,
    pub item: u32,
    pub n: u32,
}

/// One key's items: where they are on the namespace.
#[derive(Clone, Copy, Debug)]
struct Key {
    /// Byte address of the key's position 0.
    base: u64,
    /// Its page, and its offset in that page (when the page size is a power of two).
    page: u32,
    offset: u32,
    /// Its items.
    count: u32,
    /// Whether its positions were drawn (item `n`'s is `positions[n]`; else they are
    /// `0..count`).
    drawn: bool,
    /// Whether every item's offset from the key's page fits 32 bits, with a power-of-two
    /// page: an item's page and offset are then a 32-bit add, shift and mask.
    narrow: bool,
    /// Neighbours: whether another minibatch's key has the same node next to it. Their
    /// positions interleave, so the walk visits the list's pages once per key: each page is
    /// read whole the first time, so that the next key finds every sector it needs.
    shared: bool,
}

/// What a gather reads, as its issuer sees it: the sorted keys and, for neighbours, the
/// records and positions the sample pass left.
struct Stream<'a> {
    gather: Gather,
    keys: &'a [u64],
    destinations: &'a [Destination],
    positions: &'a [u32],
    /// Byte address of the region the gather reads (`indptr`, `indices` or the features).
    base: u64,
    /// log2 of an item's step: 8-byte bounds, 4- or 8-byte ids.
    shift: u32,
    /// A feature row's stride in bytes.
    stride: u64,
    /// log2 of the page size, if it is a power of two.
    page_shift: Option<u32>,
}

impl Stream<'_> {
    /// Key `q`'s items.
    #[inline(always)]
    fn key(&self, q: u32) -> Key {
        let node = self.keys[q as usize] >> 32;
        let (base, count, drawn, wide, shared) = match self.gather {
            Gather::Bounds => (self.base + (node << 3), 2, false, false, false),
            Gather::Neighbours => {
                let d = self.destinations[q as usize];
                let same = |k: Option<&u64>| k.is_some_and(|k| k >> 32 == node);
                let q = q as usize;
                let taken = d.taken();
                (
                    self.base + (d.start << self.shift),
                    taken & !(DRAWN | WIDE),
                    taken & DRAWN != 0,
                    taken & WIDE != 0,
                    same(self.keys.get(q + 1))
                        || q.checked_sub(1).is_some_and(|p| same(self.keys.get(p))),
                )
            }
            Gather::Features => (self.base + node * self.stride, 1, false, false, false),
        };
        let (page, offset) = match self.page_shift {
            Some(ps) => ((base >> ps) as u32, (base & ((1 << ps) - 1)) as u32),
            None => (0, 0),
        };
        Key {
            base,
            page,
            offset,
            count,
            drawn,
            narrow: !wide && self.page_shift.is_some(),
            shared,
        }
    }

    /// The page and in-page offset of item `i` of key `k`, the gather's item `n`;
    /// `split(address)` divides a 64-bit address.
    #[inline(always)]
    fn item(&self, k: &Key, i: u32, n: u32, split: impl Fn(u64) -> (u32, u32)) -> (u32, u32) {
        let p = if k.drawn {
            self.positions[n as usize]
        } else {
            i
        };
        match self.page_shift {
            Some(ps) if k.narrow => {
                let byte = k.offset + (p << self.shift);
                (k.page + (byte >> ps), byte & ((1 << ps) - 1))
            }
            _ => split(k.base + (u64::from(p) << self.shift)),
        }
    }
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

    /// The byte address of the region a gather of `run` reads, the shift of its items and the
    /// stride of its rows.
    fn stream_geometry(&self, run: &Run) -> (u64, u32, u64) {
        let bs = self.block_size_bytes;
        match run.gather {
            Gather::Bounds => (run.graph.indptr.slba * bs, 3, 0),
            Gather::Neighbours => (
                run.graph.indices.slba * bs,
                u32::from(run.graph.id_width_bytes).trailing_zeros(),
                0,
            ),
            // Attached graphs with features always have a region (checked at submit).
            Gather::Features => run.graph.features.map_or((0, 0, 0), |f| {
                (f.range.slba * bs, 0, f.stride_bytes())
            }),
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
    /// order, once the sample pass has placed them.
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
    /// gather's keys, with the items the sample pass placed.
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
        run.pass = None;
        match gather {
            Gather::Neighbours => run.items = run.layer_edges,
            _ => {
                run.key_count = match gather {
                    Gather::Bounds => run.dst_count,
                    _ => self.jobs[run.slot].node_count,
                };
                run.items = match gather {
                    Gather::Bounds => 2 * run.key_count,
                    _ => run.key_count,
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

    /// Pins pages ahead of `lane`'s consumer, up to its window, each with the sectors its
    /// items need; returns whether it pinned any.
    pub(super) fn issue(&mut self, lane: usize, dram: &mut [u8], backend: &mut Backend) -> bool {
        let Some(mut run) = self.lanes[lane].run else {
            return false;
        };
        let mut progress = false;
        while run.issued.n < run.items && self.lanes[lane].window.len() < self.window_pages {
            let Some((page, want, items, next)) = self.scan_page(lane, dram, &run) else {
                break;
            };
            let slot = match backend.request_page(dram, page, want) {
                Acquire::Full => break,
                Acquire::Valid(slot)
                | Acquire::Loading(slot)
                | Acquire::Failed(slot)
                | Acquire::Miss(slot, _) => slot,
            };
            // The window has room (checked above).
            let _ = self.lanes[lane].window.push_back(WindowPage {
                page,
                slot,
                want,
                items,
            });
            run.issued = next;
            progress = true;
        }
        self.lanes[lane].run = Some(run);
        progress
    }

    /// The run of items from `run`'s issuer on that lie on one page: their page, the sectors
    /// they need, how many they are and the cursor after them, each one's offset in the page
    /// staged for the consumer; `None` if no item is left. Finding an item's page and sectors
    /// is part of its gather item's work.
    fn scan_page(
        &self,
        lane: usize,
        dram: &mut [u8],
        run: &Run,
    ) -> Option<(u32, Sectors, u32, Cursor)> {
        let r = self.lanes[lane].regions;
        let (base, shift, stride) = self.stream_geometry(run);
        let staged_in = match run.gather {
            Gather::Neighbours => r.neighbours,
            _ => self.spare_buffer(lane, run),
        };
        let [keys, destinations, positions, staged] = split_mut(
            dram,
            [
                self.sorted_keys(lane, run),
                r.destinations,
                r.positions,
                staged_in,
            ],
        );
        let stream = Stream {
            gather: run.gather,
            keys: as_words(keys),
            destinations: as_words(destinations),
            positions: as_words(positions),
            base,
            shift,
            stride,
            page_shift: self.page_shift,
        };
        let staged = as_words_mut::<u32>(staged);
        let bytes = self.item_bytes(run);
        let split = |address| self.split_address(address);
        let mut c = run.issued;
        let mut page = None;
        let mut want = Sectors::NONE;
        let mut items = 0u32;
        while c.key < run.key_count {
            let k = stream.key(c.key);
            while c.item < k.count {
                let (p, offset) = stream.item(&k, c.item, c.n, split);
                match page {
                    None => page = Some(p),
                    Some(q) if q != p => return Some((q, want, items, c)),
                    Some(_) => {}
                }
                staged[c.n as usize] = offset;
                want = if k.shared {
                    Sectors::ALL
                } else {
                    want.union(self.sectors_of(offset, bytes))
                };
                items += 1;
                c.item += 1;
                c.n += 1;
            }
            c.key += 1;
            c.item = 0;
        }
        page.map(|p| (p, want, items, c))
    }

    /// Copies the items of each page at the front of `lane`'s window out as it arrives, and
    /// releases it; once the gather is complete, starts the pass after it (or ends the job
    /// after the features). Returns whether anything happened.
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
            backend.work.edges_scanned += u64::from(front.items);
            if let Some(done) = self.lanes[lane].window.pop_front() {
                backend.buffer.unpin(dram, done.slot);
                backend.work.pages_scanned += 1;
            }
            progress = true;
        }
        self.lanes[lane].run = Some(run);
        if run.consumed == run.items {
            if run.gather == Gather::Features {
                self.lanes[lane].run = None;
                self.finish(dram, run.slot, None);
            } else {
                // Its pass runs in chunks from the next step on.
                run.pass = Some((0, 0));
                self.lanes[lane].run = Some(run);
            }
            progress = true;
        }
        Ok(progress)
    }

    /// Reads the next `items` items of `run`'s consumer out of the page in `slot`, each at the
    /// offset the issuer staged.
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
