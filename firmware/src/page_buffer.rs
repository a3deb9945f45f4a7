//! The DRAM page buffer: a set-associative cache of flash pages, keyed by logical page.
//!
//! Reads, read-modify-writes and the ISP engine all go through it, so a page the subgraph
//! generator needs twice is read from flash once while it stays cached. Slots are pinned while
//! someone waits on or uses them and are never evicted while pinned or loading. The buffer is
//! write-through: a slot's data always equals flash or a program in flight, so eviction never
//! writes back.

use crate::config::PAGE_BUFFER_WAYS;
use crate::dram::{Region, SLOT_META_BYTES};
use crate::hal::SPARE_BYTES;

const EMPTY: u8 = 0;
const LOADING: u8 = 1;
const VALID: u8 = 2;
const FAILED: u8 = 3;

/// The outcome of looking a logical page up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Cached; the slot's data is current.
    Valid(u32),
    /// A flash read for it is in flight.
    Loading(u32),
    /// The flash read for it failed.
    Failed(u32),
    /// Not cached: this slot now belongs to the page in state loading; the caller fills it
    /// (flash read, zeros or host data) and marks it with [`PageBuffer::fill_done`].
    Miss(u32),
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
    /// How many times a slot has left the loading state (see [`Self::loading_exits`]).
    loading_exits: core::cell::Cell<u32>,
}

#[derive(Clone, Copy)]
struct Meta {
    key: u32,
    stamp: u32,
    pins: u16,
    state: u8,
}

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
        }
    }

    fn put(&self, dram: &mut [u8], slot: u32, m: Meta) {
        let r = self
            .meta
            .sub(slot as usize * SLOT_META_BYTES, SLOT_META_BYTES);
        let b = r.bytes_mut(dram);
        if b[10] == LOADING && m.state != LOADING {
            self.loading_exits
                .set(self.loading_exits.get().wrapping_add(1));
        }
        b[0..4].copy_from_slice(&m.key.to_le_bytes());
        b[4..8].copy_from_slice(&m.stamp.to_le_bytes());
        b[8..10].copy_from_slice(&m.pins.to_le_bytes());
        b[10] = m.state;
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

    /// Looks `lpn` up and, if `pin`, pins the slot found (a miss always pins its new slot).
    pub fn acquire(&mut self, dram: &mut [u8], lpn: u32, pin: bool) -> Acquire {
        self.clock = self.clock.wrapping_add(1);
        if let Some(slot) = self.find(dram, lpn) {
            let mut m = self.get(dram, slot);
            m.stamp = self.clock;
            m.pins += u16::from(pin);
            self.put(dram, slot, m);
            return match m.state {
                VALID => Acquire::Valid(slot),
                LOADING => Acquire::Loading(slot),
                _ => Acquire::Failed(slot),
            };
        }
        let victim = self
            .set_range(lpn)
            .map(|s| (s, self.get(dram, s)))
            .filter(|(_, m)| m.pins == 0 && m.state != LOADING)
            .max_by_key(|(_, m)| (m.state == EMPTY, self.clock.wrapping_sub(m.stamp)));
        match victim {
            Some((slot, _)) => {
                self.put(
                    dram,
                    slot,
                    Meta {
                        key: lpn + 1,
                        stamp: self.clock,
                        pins: 1,
                        state: LOADING,
                    },
                );
                Acquire::Miss(slot)
            }
            None => Acquire::Full,
        }
    }

    /// Marks a loading slot filled (or failed). A slot detached while it loaded, and no longer
    /// held, is freed now that its read has landed.
    pub fn fill_done(&self, dram: &mut [u8], slot: u32, ok: bool) {
        let mut m = self.get(dram, slot);
        m.state = match (ok, m.key == 0 && m.pins == 0) {
            (_, true) => EMPTY,
            (true, false) => VALID,
            (false, false) => FAILED,
        };
        self.put(dram, slot, m);
    }

    /// Gives up a slot the caller got from a miss and never filled (or holds pinned): it is
    /// marked failed if still loading, so that it is freed with its last pin.
    pub fn abandon(&self, dram: &mut [u8], slot: u32) {
        let mut m = self.get(dram, slot);
        if m.state == LOADING {
            m.state = FAILED;
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

    /// Whether the slot is still loading.
    pub fn is_loading(&self, dram: &[u8], slot: u32) -> bool {
        self.get(dram, slot).state == LOADING
    }

    /// Whether the slot's read failed.
    pub fn is_failed(&self, dram: &[u8], slot: u32) -> bool {
        self.get(dram, slot).state == FAILED
    }

    /// Drops one pin. A slot that failed or was detached is freed when its last pin goes, unless
    /// a flash read into it is still in flight ([`Self::fill_done`] frees it then).
    pub fn unpin(&self, dram: &mut [u8], slot: u32) {
        let mut m = self.get(dram, slot);
        m.pins = m.pins.saturating_sub(1);
        if m.pins == 0 && m.state != LOADING && (m.state == FAILED || m.key == 0) {
            m = Meta {
                key: 0,
                stamp: m.stamp,
                pins: 0,
                state: EMPTY,
            };
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
        if m.pins == 0 && m.state != LOADING {
            m.state = EMPTY;
        }
        self.put(dram, slot, m);
    }

    /// Empties every slot nobody holds: the buffer is write-through, so this loses nothing and
    /// leaves the buffer as cold as after a power cycle.
    pub fn drop_unpinned(&self, dram: &mut [u8]) {
        for slot in 0..self.slots {
            let m = self.get(dram, slot);
            if m.pins == 0 && m.state != LOADING {
                self.put(
                    dram,
                    slot,
                    Meta {
                        key: 0,
                        stamp: m.stamp,
                        pins: 0,
                        state: EMPTY,
                    },
                );
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
        let Acquire::Miss(s) = pb.acquire(&mut dram, 5, true) else {
            panic!()
        };
        assert_eq!(pb.acquire(&mut dram, 5, false), Acquire::Loading(s));
        pb.fill_done(&mut dram, s, true);
        assert_eq!(pb.acquire(&mut dram, 5, false), Acquire::Valid(s));
        pb.unpin(&mut dram, s);
        // Fill the one set (8 ways) with other pages; 5 is least recently used once they are in.
        for lpn in 100..107 {
            let Acquire::Miss(x) = pb.acquire(&mut dram, lpn, true) else {
                panic!()
            };
            pb.fill_done(&mut dram, x, true);
            pb.unpin(&mut dram, x);
        }
        assert_eq!(pb.acquire(&mut dram, 5, false), Acquire::Valid(s));
        let Acquire::Miss(_) = pb.acquire(&mut dram, 200, true) else {
            panic!()
        };
        // 100 was the least recently used page and went; 5 stays.
        assert!(matches!(
            pb.acquire(&mut dram, 100, false),
            Acquire::Miss(_)
        ));
    }

    #[test]
    fn pinned_and_loading_slots_are_never_evicted() {
        let (mut pb, mut dram) = buffer(8);
        for lpn in 0..8 {
            assert!(matches!(pb.acquire(&mut dram, lpn, true), Acquire::Miss(_)));
        }
        assert_eq!(pb.acquire(&mut dram, 99, true), Acquire::Full);
    }

    #[test]
    fn a_detached_slot_is_not_reused_while_its_read_is_in_flight() {
        let (mut pb, mut dram) = buffer(8);
        let Acquire::Miss(s) = pb.acquire(&mut dram, 1, true) else {
            panic!()
        };
        pb.detach(&mut dram, 1);
        pb.unpin(&mut dram, s);
        // Every other slot of the set gets a page; the loading one must not be handed out.
        for lpn in 10..17 {
            assert!(matches!(pb.acquire(&mut dram, lpn, true), Acquire::Miss(x) if x != s));
        }
        assert_eq!(pb.acquire(&mut dram, 20, true), Acquire::Full);
        pb.fill_done(&mut dram, s, true);
        assert_eq!(pb.acquire(&mut dram, 20, true), Acquire::Miss(s));
    }

    #[test]
    fn an_abandoned_miss_is_freed() {
        let (mut pb, mut dram) = buffer(8);
        let Acquire::Miss(s) = pb.acquire(&mut dram, 1, true) else {
            panic!()
        };
        pb.abandon(&mut dram, s);
        // All eight ways of the set are free again.
        for lpn in 10..18 {
            assert!(matches!(pb.acquire(&mut dram, lpn, true), Acquire::Miss(_)));
        }
    }

    #[test]
    fn detached_and_failed_slots_are_freed_on_last_unpin() {
        let (mut pb, mut dram) = buffer(8);
        let Acquire::Miss(s) = pb.acquire(&mut dram, 1, true) else {
            panic!()
        };
        pb.fill_done(&mut dram, s, false);
        assert_eq!(pb.acquire(&mut dram, 1, false), Acquire::Failed(s));
        pb.unpin(&mut dram, s);
        assert!(matches!(pb.acquire(&mut dram, 1, true), Acquire::Miss(_)));
        let Acquire::Miss(t) = pb.acquire(&mut dram, 2, true) else {
            panic!()
        };
        pb.fill_done(&mut dram, t, true);
        pb.detach(&mut dram, 2);
        assert!(matches!(pb.acquire(&mut dram, 2, false), Acquire::Miss(_)));
    }
}
