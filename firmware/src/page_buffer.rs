//! The DRAM page buffer: a set-associative cache of flash pages, keyed by logical page, that
//! holds each page sector by sector ([`Sectors`]).
//!
//! Reads, read-modify-writes and the ISP engine all go through it, so a page the subgraph
//! generator needs twice is read from flash once while it stays cached. A slot knows which of
//! its page's sectors it holds (`valid`) and which a flash read is bringing in (`loading`); a
//! reader that needs other sectors reads just those into the same slot (one read in flight per
//! slot: a reader that finds one waits for it, then asks again). Slots are pinned while someone
//! waits on or uses them and are never evicted while pinned or loading. The buffer is
//! write-through: a slot's sectors always equal flash or a program in flight, so eviction never
//! writes back.

use crate::config::PAGE_BUFFER_WAYS;
use crate::dram::{Region, SLOT_META_BYTES};
use crate::hal::{SPARE_BYTES, Sectors};

const EMPTY: u8 = 0;
const PRESENT: u8 = 2;
const FAILED: u8 = 3;

/// The outcome of looking a logical page up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Cached with every sector asked for.
    Valid(u32),
    /// A flash read into the slot is in flight: poll again, then ask again.
    Loading(u32),
    /// The flash read for it failed.
    Failed(u32),
    /// These sectors are missing: the slot (pinned) now counts them as loading, and the caller
    /// fills them (a flash read, then [`PageBuffer::load_done`]; or zeros or host data, then
    /// [`PageBuffer::filled`]) or gives up ([`PageBuffer::abandon`]).
    Miss(u32, Sectors),
    /// Not cached and every slot of its set is pinned or loading: try again later.
    Full,
}

/// Page-buffer bookkeeping outside the arena.
#[derive(Debug)]
pub(crate) struct PageBuffer {
    meta: Region,
    data: Region,
    slots: u32,
    page_size_bytes: u32,
    clock: u32,
    /// How many times a slot has stopped loading (see [`Self::loading_exits`]).
    loading_exits: core::cell::Cell<u32>,
}

#[derive(Clone, Copy)]
struct Meta {
    key: u32,
    stamp: u32,
    pins: u16,
    state: u8,
    valid: Sectors,
    loading: Sectors,
    /// The read in flight's retry record ([`ReadRetry`], encoded).
    retry: u8,
}

impl Meta {
    /// A free slot (its LRU stamp kept).
    fn empty(stamp: u32) -> Self {
        Self {
            key: 0,
            stamp,
            pins: 0,
            state: EMPTY,
            valid: Sectors::NONE,
            loading: Sectors::NONE,
            retry: 0,
        }
    }
}

/// A slot's record of the flash read loading into it, kept while the read is retried
/// (`crate::read_retry`): how many attempts failed, whether the next one waits for flash-queue
/// room, and whose read it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadRetry {
    /// Attempts that failed so far (at most 15).
    pub failures: u8,
    /// The next attempt is due but not queued yet.
    pub due: bool,
    /// `Some(lane)`: a read-ahead of that sampling lane (it holds the slot's read pin), not a
    /// fill its reader waits for.
    pub prefetch_lane: Option<u8>,
}

impl ReadRetry {
    /// Bits 0..4 failures, bit 4 due, bit 5 read-ahead, bits 6..8 its lane.
    fn encode(self) -> u8 {
        (self.failures & 0x0F)
            | (u8::from(self.due) << 4)
            | self.prefetch_lane.map_or(0, |l| 0x20 | ((l & 3) << 6))
    }

    fn decode(b: u8) -> Self {
        Self {
            failures: b & 0x0F,
            due: b & 0x10 != 0,
            prefetch_lane: (b & 0x20 != 0).then_some(b >> 6),
        }
    }
}

// A read-ahead's lane must fit the record's two bits.
const _: () = assert!(crate::config::MAX_ISP_LANES <= 4);

impl PageBuffer {
    /// A buffer of `slots` pages over the given arena regions; clears the metadata.
    pub fn new(
        meta: Region,
        data: Region,
        slots: u32,
        page_size_bytes: u32,
        dram: &mut [u8],
    ) -> Self {
        meta.bytes_mut(dram).fill(0);
        Self {
            meta,
            data,
            slots,
            page_size_bytes,
            clock: 0,
            loading_exits: core::cell::Cell::new(0),
        }
    }

    /// How many slots are pinned (for tests: none once everything has finished).
    #[cfg(test)]
    pub fn pinned_slots(&self, dram: &[u8]) -> usize {
        (0..self.slots)
            .filter(|s| self.get(dram, *s).pins > 0)
            .count()
    }

    /// A slot's metadata, for test failure messages.
    #[cfg(test)]
    pub fn describe_slot(&self, dram: &[u8], slot: u32) -> std::string::String {
        let m = self.get(dram, slot);
        std::format!(
            "slot {slot}: key {} pins {} state {} valid {:?} loading {:?}",
            m.key,
            m.pins,
            m.state,
            m.valid,
            m.loading
        )
    }

    fn get(&self, dram: &[u8], slot: u32) -> Meta {
        let m = self
            .meta
            .sub(slot as usize * SLOT_META_BYTES, SLOT_META_BYTES);
        let b = m.bytes(dram);
        Meta {
            key: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            stamp: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            pins: u16::from_le_bytes([b[8], b[9]]),
            state: b[10],
            retry: b[11],
            valid: Sectors(u16::from_le_bytes([b[12], b[13]])),
            loading: Sectors(u16::from_le_bytes([b[14], b[15]])),
        }
    }

    fn put(&self, dram: &mut [u8], slot: u32, m: Meta) {
        let r = self
            .meta
            .sub(slot as usize * SLOT_META_BYTES, SLOT_META_BYTES);
        let b = r.bytes_mut(dram);
        if b[14..16] != [0, 0] && m.loading.is_empty() {
            self.loading_exits
                .set(self.loading_exits.get().wrapping_add(1));
        }
        b[0..4].copy_from_slice(&m.key.to_le_bytes());
        b[4..8].copy_from_slice(&m.stamp.to_le_bytes());
        b[8..10].copy_from_slice(&m.pins.to_le_bytes());
        b[10] = m.state;
        b[11] = m.retry;
        b[12..14].copy_from_slice(&m.valid.0.to_le_bytes());
        b[14..16].copy_from_slice(&m.loading.0.to_le_bytes());
    }

    fn set_range(&self, lpn: u32) -> core::ops::Range<u32> {
        let sets = self.slots / PAGE_BUFFER_WAYS;
        let set = (lpn.wrapping_mul(0x9E37_79B1) >> 7) % sets;
        set * PAGE_BUFFER_WAYS..(set + 1) * PAGE_BUFFER_WAYS
    }

    /// Whether `lpn` has a slot (in any state).
    pub fn contains(&self, dram: &[u8], lpn: u32) -> bool {
        self.find(dram, lpn).is_some()
    }

    fn find(&self, dram: &[u8], lpn: u32) -> Option<u32> {
        self.set_range(lpn)
            .find(|s| self.get(dram, *s).key == lpn + 1)
    }

    /// A new slot for `lpn` from its set (the least recently used one nobody holds), pinned,
    /// with `loading` as given; `None` when every way is pinned or loading.
    fn claim(&mut self, dram: &mut [u8], lpn: u32, loading: Sectors) -> Option<u32> {
        let (slot, _) = self
            .set_range(lpn)
            .map(|s| (s, self.get(dram, s)))
            .filter(|(_, m)| m.pins == 0 && m.loading.is_empty())
            .max_by_key(|(_, m)| (m.state == EMPTY, self.clock.wrapping_sub(m.stamp)))?;
        self.put(
            dram,
            slot,
            Meta {
                key: lpn + 1,
                stamp: self.clock,
                pins: 1,
                state: PRESENT,
                valid: Sectors::NONE,
                loading,
                retry: 0,
            },
        );
        Some(slot)
    }

    /// Looks `lpn` up for the sectors `want` and, if `pin`, pins the slot found (a miss always
    /// pins its slot). A new slot answers [`Acquire::Miss`] with `want`; a slot that lacks some
    /// of `want` while no read is in flight into it, with every sector it lacks (the rest of the
    /// page), now loading.
    pub fn acquire(&mut self, dram: &mut [u8], lpn: u32, want: Sectors, pin: bool) -> Acquire {
        self.clock = self.clock.wrapping_add(1);
        let Some(slot) = self.find(dram, lpn) else {
            return match self.claim(dram, lpn, want) {
                Some(slot) => Acquire::Miss(slot, want),
                None => Acquire::Full,
            };
        };
        let mut m = self.get(dram, slot);
        m.stamp = self.clock;
        let missing = want.without(m.valid);
        let answer = if m.state == FAILED {
            Acquire::Failed(slot)
        } else if missing.is_empty() {
            Acquire::Valid(slot)
        } else if !m.loading.is_empty() {
            Acquire::Loading(slot)
        } else {
            // A page asked for again is likely to be asked for once more: the second read
            // brings the rest of it, so no page costs more than two reads while it stays.
            let rest = Sectors::ALL.without(m.valid);
            m.loading = rest;
            Acquire::Miss(slot, rest)
        };
        m.pins += u16::from(pin || matches!(answer, Acquire::Miss(..)));
        self.put(dram, slot, m);
        answer
    }

    /// Looks `lpn` up for a write of its whole page, which needs none of its old data: a slot
    /// no read is loading into is handed back pinned as [`Acquire::Valid`] (the caller
    /// overwrites it and calls [`Self::filled`] with every sector); a new one comes as
    /// [`Acquire::Miss`] of every sector, loading until the caller has filled it.
    pub fn acquire_for_overwrite(&mut self, dram: &mut [u8], lpn: u32) -> Acquire {
        self.clock = self.clock.wrapping_add(1);
        let Some(slot) = self.find(dram, lpn) else {
            return match self.claim(dram, lpn, Sectors::ALL) {
                Some(slot) => Acquire::Miss(slot, Sectors::ALL),
                None => Acquire::Full,
            };
        };
        let mut m = self.get(dram, slot);
        m.stamp = self.clock;
        m.pins += 1;
        self.put(dram, slot, m);
        if m.state == FAILED {
            Acquire::Failed(slot)
        } else if !m.loading.is_empty() {
            Acquire::Loading(slot)
        } else {
            Acquire::Valid(slot)
        }
    }

    /// A flash read into the slot has landed (`ok`) or failed: the sectors it loaded are now
    /// valid, or the slot failed. A slot detached while it loaded, and no longer held, is freed
    /// now that its read has landed.
    pub fn load_done(&self, dram: &mut [u8], slot: u32, ok: bool) {
        let mut m = self.get(dram, slot);
        if ok {
            m.valid = m.valid.union(m.loading);
        } else {
            m.state = FAILED;
        }
        m.loading = Sectors::NONE;
        m.retry = 0;
        if m.key == 0 && m.pins == 0 {
            m.state = EMPTY;
        }
        self.put(dram, slot, m);
    }

    /// The retry record of the read loading into `slot`.
    pub fn retry(&self, dram: &[u8], slot: u32) -> ReadRetry {
        ReadRetry::decode(self.get(dram, slot).retry)
    }

    /// Replaces the retry record of the read loading into `slot`.
    pub fn set_retry(&self, dram: &mut [u8], slot: u32, retry: ReadRetry) {
        let mut m = self.get(dram, slot);
        m.retry = retry.encode();
        self.put(dram, slot, m);
    }

    /// The sectors a flash read is bringing into `slot`.
    pub fn loading(&self, dram: &[u8], slot: u32) -> Sectors {
        self.get(dram, slot).loading
    }

    /// Number of slots.
    pub fn slot_count(&self) -> u32 {
        self.slots
    }

    /// The caller has written `sectors` of the slot itself (zeros or host data): they are valid
    /// and no longer loading.
    pub fn filled(&self, dram: &mut [u8], slot: u32, sectors: Sectors) {
        let mut m = self.get(dram, slot);
        m.valid = m.valid.union(sectors);
        m.loading = m.loading.without(sectors);
        self.put(dram, slot, m);
    }

    /// Whether the slot holds every sector of `sectors`.
    pub fn has(&self, dram: &[u8], slot: u32, sectors: Sectors) -> bool {
        self.get(dram, slot).valid.contains(sectors)
    }

    /// Gives up the sectors a miss asked the caller to fill (and the pin it holds): they stop
    /// loading; a slot left with no valid sector is marked failed, so that it is freed with its
    /// last pin.
    pub fn abandon(&self, dram: &mut [u8], slot: u32) {
        let mut m = self.get(dram, slot);
        if !m.loading.is_empty() {
            m.loading = Sectors::NONE;
            if m.valid.is_empty() {
                m.state = FAILED;
            }
            self.put(dram, slot, m);
        }
        self.unpin(dram, slot);
    }

    /// A count that changes whenever any slot leaves the loading state: while it stays the
    /// same, every slot that was loading still is (the firmware uses it to skip re-examining
    /// reads that only wait for loading slots).
    pub fn loading_exits(&self) -> u32 {
        self.loading_exits.get()
    }

    /// Whether a read into the slot is in flight (or a fill it awaits from its holder).
    pub fn is_loading(&self, dram: &[u8], slot: u32) -> bool {
        !self.get(dram, slot).loading.is_empty()
    }

    /// Whether the slot's read failed.
    pub fn is_failed(&self, dram: &[u8], slot: u32) -> bool {
        self.get(dram, slot).state == FAILED
    }

    /// Drops one pin. A slot that failed or was detached is freed when its last pin goes, unless
    /// a flash read into it is still in flight ([`Self::load_done`] frees it then).
    pub fn unpin(&self, dram: &mut [u8], slot: u32) {
        let mut m = self.get(dram, slot);
        m.pins = m.pins.saturating_sub(1);
        if m.pins == 0 && m.loading.is_empty() && (m.state == FAILED || m.key == 0) {
            m = Meta::empty(m.stamp);
        }
        self.put(dram, slot, m);
    }

    /// Makes `lpn` unreachable in the buffer (its data is stale); current holders keep their slot
    /// until they unpin it.
    pub fn detach(&self, dram: &mut [u8], lpn: u32) {
        if let Some(slot) = self.find(dram, lpn) {
            self.detach_slot(dram, slot);
        }
    }

    /// Makes a slot unreachable by lookups (see [`Self::detach`]).
    pub fn detach_slot(&self, dram: &mut [u8], slot: u32) {
        let mut m = self.get(dram, slot);
        m.key = 0;
        if m.pins == 0 && m.loading.is_empty() {
            m = Meta::empty(m.stamp);
        }
        self.put(dram, slot, m);
    }

    /// Empties every slot nobody holds: the buffer is write-through, so this loses nothing and
    /// leaves the buffer as cold as after a power cycle.
    pub fn drop_unpinned(&self, dram: &mut [u8]) {
        for slot in 0..self.slots {
            let m = self.get(dram, slot);
            if m.pins == 0 && m.loading.is_empty() {
                self.put(dram, slot, Meta::empty(m.stamp));
            }
        }
    }

    /// The arena window holding slot `slot`'s page (its data; the spare follows).
    pub fn slot_region(&self, slot: u32) -> Region {
        let size = self.page_size_bytes as usize;
        self.data.sub(slot as usize * (size + SPARE_BYTES), size)
    }

    /// The spare area that follows slot `slot`'s page.
    pub fn spare_region(&self, slot: u32) -> Region {
        let size = self.page_size_bytes as usize;
        self.data
            .sub(slot as usize * (size + SPARE_BYTES) + size, SPARE_BYTES)
    }

    /// The logical page slot `slot` belongs to, if any.
    pub fn lpn_of(&self, dram: &[u8], slot: u32) -> Option<u32> {
        self.get(dram, slot).key.checked_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    const ALL: Sectors = Sectors::ALL;

    fn buffer(slots: u32) -> (PageBuffer, std::vec::Vec<u8>) {
        let window = 16 + SPARE_BYTES;
        let mut dram = vec![0u8; slots as usize * (SLOT_META_BYTES + window)];
        let meta = Region {
            start: 0,
            len: slots as usize * SLOT_META_BYTES,
        };
        let data = Region {
            start: meta.len,
            len: slots as usize * window,
        };
        (PageBuffer::new(meta, data, slots, 16, &mut dram), dram)
    }

    #[test]
    fn miss_fill_hit_and_eviction_order() {
        let (mut pb, mut dram) = buffer(8);
        let Acquire::Miss(s, ALL) = pb.acquire(&mut dram, 5, ALL, true) else {
            panic!()
        };
        assert_eq!(pb.acquire(&mut dram, 5, ALL, false), Acquire::Loading(s));
        pb.load_done(&mut dram, s, true);
        assert_eq!(pb.acquire(&mut dram, 5, ALL, false), Acquire::Valid(s));
        pb.unpin(&mut dram, s);
        // Fill the one set (8 ways) with other pages; 5 is least recently used once they are in.
        for lpn in 100..107 {
            let Acquire::Miss(x, _) = pb.acquire(&mut dram, lpn, ALL, true) else {
                panic!()
            };
            pb.load_done(&mut dram, x, true);
            pb.unpin(&mut dram, x);
        }
        assert_eq!(pb.acquire(&mut dram, 5, ALL, false), Acquire::Valid(s));
        let Acquire::Miss(..) = pb.acquire(&mut dram, 200, ALL, true) else {
            panic!()
        };
        // 100 was the least recently used page and went; 5 stays.
        assert!(matches!(
            pb.acquire(&mut dram, 100, ALL, false),
            Acquire::Miss(..)
        ));
    }

    #[test]
    fn sectors_load_one_read_at_a_time() {
        let (mut pb, mut dram) = buffer(8);
        let (a, b) = (Sectors(0b0011), Sectors(0b0110));
        let Acquire::Miss(s, m) = pb.acquire(&mut dram, 7, a, true) else {
            panic!()
        };
        assert_eq!(m, a);
        // Another reader needs sector 2 too: it waits for the read in flight, then asks again.
        assert_eq!(pb.acquire(&mut dram, 7, b, true), Acquire::Loading(s));
        pb.load_done(&mut dram, s, true);
        assert!(pb.has(&dram, s, a) && !pb.has(&dram, s, b));
        assert_eq!(pb.acquire(&mut dram, 7, a, true), Acquire::Valid(s));
        // The second read of a page brings all of the rest of it.
        assert_eq!(
            pb.acquire(&mut dram, 7, b, true),
            Acquire::Miss(s, Sectors(0xFFFC))
        );
        assert!(pb.is_loading(&dram, s));
        // Giving up a partial miss keeps what the slot held.
        pb.abandon(&mut dram, s);
        assert!(!pb.is_loading(&dram, s) && !pb.is_failed(&dram, s));
        assert_eq!(pb.acquire(&mut dram, 7, a, false), Acquire::Valid(s));
        assert_eq!(
            pb.acquire(&mut dram, 7, b, true),
            Acquire::Miss(s, Sectors(0xFFFC))
        );
        pb.load_done(&mut dram, s, true);
        assert!(pb.has(&dram, s, ALL));
    }

    #[test]
    fn an_overwrite_takes_a_slot_without_reading_it() {
        let (mut pb, mut dram) = buffer(8);
        let Acquire::Miss(s, ALL) = pb.acquire_for_overwrite(&mut dram, 3) else {
            panic!()
        };
        // Readers wait until the writer has filled the new slot.
        assert_eq!(
            pb.acquire(&mut dram, 3, Sectors(1), false),
            Acquire::Loading(s)
        );
        pb.filled(&mut dram, s, ALL);
        assert_eq!(pb.acquire(&mut dram, 3, ALL, false), Acquire::Valid(s));
        pb.unpin(&mut dram, s);
        // A slot with a read in flight is not handed to a writer until the read lands.
        pb.detach(&mut dram, 3);
        let Acquire::Miss(t, _) = pb.acquire(&mut dram, 4, Sectors(1), true) else {
            panic!()
        };
        assert_eq!(pb.acquire_for_overwrite(&mut dram, 4), Acquire::Loading(t));
        pb.load_done(&mut dram, t, true);
        assert_eq!(pb.acquire_for_overwrite(&mut dram, 4), Acquire::Valid(t));
    }

    #[test]
    fn pinned_and_loading_slots_are_never_evicted() {
        let (mut pb, mut dram) = buffer(8);
        for lpn in 0..8 {
            assert!(matches!(
                pb.acquire(&mut dram, lpn, ALL, true),
                Acquire::Miss(..)
            ));
        }
        assert_eq!(pb.acquire(&mut dram, 99, ALL, true), Acquire::Full);
    }

    #[test]
    fn a_detached_slot_is_not_reused_while_its_read_is_in_flight() {
        let (mut pb, mut dram) = buffer(8);
        let Acquire::Miss(s, _) = pb.acquire(&mut dram, 1, ALL, true) else {
            panic!()
        };
        pb.detach(&mut dram, 1);
        pb.unpin(&mut dram, s);
        // Every other slot of the set gets a page; the loading one must not be handed out.
        for lpn in 10..17 {
            assert!(matches!(pb.acquire(&mut dram, lpn, ALL, true), Acquire::Miss(x, _) if x != s));
        }
        assert_eq!(pb.acquire(&mut dram, 20, ALL, true), Acquire::Full);
        pb.load_done(&mut dram, s, true);
        assert_eq!(pb.acquire(&mut dram, 20, ALL, true), Acquire::Miss(s, ALL));
    }

    #[test]
    fn an_abandoned_miss_is_freed() {
        let (mut pb, mut dram) = buffer(8);
        let Acquire::Miss(s, _) = pb.acquire(&mut dram, 1, ALL, true) else {
            panic!()
        };
        pb.abandon(&mut dram, s);
        // All eight ways of the set are free again.
        for lpn in 10..18 {
            assert!(matches!(
                pb.acquire(&mut dram, lpn, ALL, true),
                Acquire::Miss(..)
            ));
        }
    }

    #[test]
    fn detached_and_failed_slots_are_freed_on_last_unpin() {
        let (mut pb, mut dram) = buffer(8);
        let Acquire::Miss(s, _) = pb.acquire(&mut dram, 1, ALL, true) else {
            panic!()
        };
        pb.load_done(&mut dram, s, false);
        assert_eq!(pb.acquire(&mut dram, 1, ALL, false), Acquire::Failed(s));
        pb.unpin(&mut dram, s);
        assert!(matches!(
            pb.acquire(&mut dram, 1, ALL, true),
            Acquire::Miss(..)
        ));
        let Acquire::Miss(t, _) = pb.acquire(&mut dram, 2, ALL, true) else {
            panic!()
        };
        pb.load_done(&mut dram, t, true);
        pb.detach(&mut dram, 2);
        assert!(matches!(
            pb.acquire(&mut dram, 2, ALL, false),
            Acquire::Miss(..)
        ));
    }
}
