//! The kernel's page cache for mapped file pages, after Linux's classic two-list LRU
//! (`mm/vmscan.c`, `mm/workingset.c`; `docs/linux-page-cache.md` §5): what stays cached, what is
//! mapped into the process, and what a reclaim evicts when the cache is full.
//!
//! * A page read in goes to the head of the **inactive** list, not mapped; one whose shadow (left
//!   when it was evicted) says it was evicted less than the active list's length of evictions
//!   ago is a refault of the working set and goes to the **active** list.
//! * Accesses do not move pages: a mapped page's access only sets its page-table **young** bit
//!   (a page mapped by a fault, fault-around included, starts young: x86 creates the entries
//!   accessed).
//! * When the cache is full, reclaim frees one page: first, while the inactive list is low
//!   (`inactive × ⌊√(10 × GiB)⌋ < active`, ratio 1 below 1 GiB), it moves the active list's tail
//!   to the inactive head (clearing its young bit, marking it workingset); then it takes the
//!   inactive tail: a young page gets a second chance (young cleared; activated if it was
//!   already marked referenced, else marked referenced and put back at the inactive head), an
//!   old one is evicted, unmapped, and leaves a shadow.
//!
//! Each page also carries Linux's `PG_readahead` mark (the read-around window's trigger for
//! asynchronous readahead, see [`super::readahead`]). Metadata only: the caller keeps the bytes.
//! Every operation is O(1) amortised (intrusive lists over a slot vector, a hash index).

use rustc_hash::FxHashMap as HashMap;

/// What an access to a page found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Mapped into the process: an ordinary memory access (its young bit is set).
    Hit,
    /// Cached, not mapped: a minor fault, which maps it (with fault-around, by the caller).
    MinorFault,
    /// Cached with the readahead mark: a minor fault that starts asynchronous readahead.
    Marked,
    /// Not cached: a major fault must read it.
    Miss,
}

/// Counters of a [`PageCache`], cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PageCacheStats {
    /// Accesses to mapped pages.
    pub hits: u64,
    /// Accesses to cached pages not mapped (minor faults), marked ones included.
    pub minor_faults: u64,
    /// Accesses to pages not cached (major faults).
    pub misses: u64,
    /// Pages inserted.
    pub insertions: u64,
    /// Pages evicted to make room.
    pub evictions: u64,
    /// Pages moved to the active list (second reference, or a refault of the working set).
    pub activations: u64,
    /// Pages inserted straight onto the active list as refaults.
    pub refault_activations: u64,
}

impl PageCacheStats {
    /// What was counted since `earlier` (a snapshot of the same cache).
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            hits: self.hits - earlier.hits,
            minor_faults: self.minor_faults - earlier.minor_faults,
            misses: self.misses - earlier.misses,
            insertions: self.insertions - earlier.insertions,
            evictions: self.evictions - earlier.evictions,
            activations: self.activations - earlier.activations,
            refault_activations: self.refault_activations - earlier.refault_activations,
        }
    }

    /// Accesses counted: hits + minor faults + misses.
    pub fn accesses(&self) -> u64 {
        self.hits + self.minor_faults + self.misses
    }

    /// Share of accesses that found the page cached (hits and minor faults); 0 with none.
    pub fn hit_rate(&self) -> f64 {
        match self.accesses() {
            0 => 0.0,
            n => (self.hits + self.minor_faults) as f64 / n as f64,
        }
    }
}

/// The bit of `process` in a page's mapper and young masks: processes are numbered from 0
/// (threads of one process all use 0); past 63 they share bits, as a bounded model must.
fn process_bit(process: usize) -> u64 {
    1 << (process % 64)
}

/// "No slot" in the intrusive lists.
const NIL: u32 = u32::MAX;
const INACTIVE: usize = 0;
const ACTIVE: usize = 1;

#[derive(Clone, Copy, Debug)]
struct Slot {
    page: u64,
    prev: u32,
    next: u32,
    list: u8,
    /// The processes mapping it, a bit each ([`process_bit`]).
    mappers: u64,
    /// The processes whose page-table entry for it is young, a bit each.
    young: u64,
    referenced: bool,
    marked: bool,
    workingset: bool,
}

#[derive(Clone, Copy, Debug)]
struct List {
    /// Most recently added.
    head: u32,
    /// Next to be scanned.
    tail: u32,
    len: usize,
}

const EMPTY_LIST: List = List {
    head: NIL,
    tail: NIL,
    len: 0,
};

/// What an evicted page leaves in the file's cache index.
#[derive(Clone, Copy, Debug)]
struct Shadow {
    /// The eviction clock when it went.
    evicted_at: u64,
    workingset: bool,
}

/// The page cache: see the module documentation.
#[derive(Clone, Debug)]
pub struct PageCache {
    capacity_pages: usize,
    index: HashMap<u64, u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    lists: [List; 2],
    shadows: HashMap<u64, Shadow>,
    /// Linux's `nonresident_age`: evictions and activations so far.
    age: u64,
    stats: PageCacheStats,
}

impl PageCache {
    /// An empty cache holding at most `capacity_pages` pages (at least 1).
    pub fn new(capacity_pages: usize) -> Self {
        Self {
            capacity_pages: capacity_pages.clamp(1, NIL as usize - 1),
            index: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            lists: [EMPTY_LIST; 2],
            shadows: HashMap::default(),
            age: 0,
            stats: PageCacheStats::default(),
        }
    }

    /// Most pages held.
    pub fn capacity_pages(&self) -> usize {
        self.capacity_pages
    }

    /// Pages held now.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no page is held.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether `page` is cached (not an access).
    pub fn contains(&self, page: u64) -> bool {
        self.index.contains_key(&page)
    }

    /// Whether `page` is cached and mapped into `process`.
    pub fn is_mapped(&self, page: u64, process: usize) -> bool {
        self.slot(page)
            .is_some_and(|s| s.mappers & process_bit(process) != 0)
    }

    /// Whether `page` is cached with the readahead mark.
    pub fn is_marked(&self, page: u64) -> bool {
        self.slot(page).is_some_and(|s| s.marked)
    }

    /// Whether `page` is cached and marked as part of the working set (deactivated or refaulted
    /// while active): fault-around does not count such pages against `mmap_miss`.
    pub fn is_workingset(&self, page: u64) -> bool {
        self.slot(page).is_some_and(|s| s.workingset)
    }

    /// The counters so far.
    pub fn stats(&self) -> PageCacheStats {
        self.stats
    }

    /// Pages on the (inactive, active) lists.
    pub fn list_lengths(&self) -> (usize, usize) {
        (self.lists[INACTIVE].len, self.lists[ACTIVE].len)
    }

    fn slot(&self, page: u64) -> Option<&Slot> {
        self.index.get(&page).map(|&i| &self.slots[i as usize])
    }

    /// An access to `page` by `process` (counted): if the page is mapped into it, its
    /// page-table entry's young bit is set; cached but not mapped there, a minor fault.
    pub fn access(&mut self, page: u64, process: usize) -> Access {
        let Some(&i) = self.index.get(&page) else {
            self.stats.misses += 1;
            return Access::Miss;
        };
        let s = &mut self.slots[i as usize];
        let bit = process_bit(process);
        if s.mappers & bit != 0 {
            s.young |= bit;
            self.stats.hits += 1;
            Access::Hit
        } else {
            self.stats.minor_faults += 1;
            if s.marked {
                Access::Marked
            } else {
                Access::MinorFault
            }
        }
    }

    /// Maps cached `page` into `process` (a fault, or fault-around), young; `false` if it is
    /// not cached.
    pub fn map(&mut self, page: u64, process: usize) -> bool {
        let Some(&i) = self.index.get(&page) else {
            return false;
        };
        let s = &mut self.slots[i as usize];
        let bit = process_bit(process);
        s.mappers |= bit;
        s.young |= bit;
        true
    }

    /// Clears `page`'s readahead mark (its asynchronous readahead has started).
    pub fn clear_mark(&mut self, page: u64) {
        if let Some(&i) = self.index.get(&page) {
            self.slots[i as usize].marked = false;
        }
    }

    /// Inserts a page just read (not mapped; `marked`: it carries the readahead mark), on the
    /// inactive list, or the active one if it is a refault of the working set; first evicts one
    /// page if the cache is full, and returns it. A cached page is left as it is.
    pub fn insert(&mut self, page: u64, marked: bool) -> Option<u64> {
        if self.index.contains_key(&page) {
            return None;
        }
        let evicted = (self.index.len() >= self.capacity_pages).then(|| self.reclaim_one());
        let mut list = INACTIVE;
        let mut workingset = false;
        if let Some(shadow) = self.shadows.remove(&page)
            && self.age - shadow.evicted_at <= self.lists[ACTIVE].len as u64
        {
            list = ACTIVE;
            workingset = shadow.workingset;
            self.age += 1;
            self.stats.activations += 1;
            self.stats.refault_activations += 1;
        }
        let slot = Slot {
            page,
            prev: NIL,
            next: NIL,
            list: list as u8,
            mappers: 0,
            young: 0,
            referenced: false,
            marked,
            workingset,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.push_head(list, i);
        self.index.insert(page, i);
        self.stats.insertions += 1;
        evicted
    }

    /// Whether the inactive list is low against the active one (`inactive_is_low`).
    fn inactive_is_low(&self) -> bool {
        let (inactive, active) = self.list_lengths();
        let gib = ((inactive + active) as u64 * super::PAGE_SIZE_BYTES) >> 30;
        let ratio = if gib == 0 { 1 } else { (10 * gib).isqrt() };
        (inactive as u64) * ratio < active as u64
    }

    /// Frees one page (the cache holds at least one) and returns it.
    fn reclaim_one(&mut self) -> u64 {
        loop {
            if self.inactive_is_low() || self.lists[INACTIVE].len == 0 {
                // Deactivate the active list's tail (its young bit is consumed).
                let i = self.lists[ACTIVE].tail;
                self.unlink(i);
                let s = &mut self.slots[i as usize];
                s.young = 0;
                s.workingset = true;
                s.list = INACTIVE as u8;
                self.push_head(INACTIVE, i);
                continue;
            }
            let i = self.lists[INACTIVE].tail;
            let s = self.slots[i as usize];
            if s.young != 0 {
                // Referenced since the last scan: keep it, or activate it the second time, or
                // at once when several processes' entries were young (`folio_check_references`:
                // more than one referenced PTE activates).
                self.unlink(i);
                let list = if s.referenced || s.young.count_ones() > 1 {
                    ACTIVE
                } else {
                    INACTIVE
                };
                let slot = &mut self.slots[i as usize];
                slot.young = 0;
                slot.referenced = list == INACTIVE;
                slot.list = list as u8;
                if list == ACTIVE {
                    self.age += 1;
                    self.stats.activations += 1;
                }
                self.push_head(list, i);
                continue;
            }
            self.unlink(i);
            self.index.remove(&s.page);
            self.free.push(i);
            self.shadows.insert(
                s.page,
                Shadow {
                    evicted_at: self.age,
                    workingset: s.workingset,
                },
            );
            self.age += 1;
            self.stats.evictions += 1;
            return s.page;
        }
    }

    /// Cached pages of one list, head (newest) first: `active` or inactive (for tests and
    /// reports; O(n)).
    pub fn list_order(&self, active: bool) -> Vec<u64> {
        let mut out = Vec::new();
        let mut at = self.lists[usize::from(active)].head;
        while at != NIL {
            let s = &self.slots[at as usize];
            out.push(s.page);
            at = s.next;
        }
        out
    }

    fn unlink(&mut self, i: u32) {
        let Slot {
            prev, next, list, ..
        } = self.slots[i as usize];
        let l = &mut self.lists[list as usize];
        if prev == NIL {
            l.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        let l = &mut self.lists[list as usize];
        if next == NIL {
            l.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
        self.lists[list as usize].len -= 1;
        let s = &mut self.slots[i as usize];
        s.prev = NIL;
        s.next = NIL;
    }

    fn push_head(&mut self, list: usize, i: u32) {
        let old = self.lists[list].head;
        {
            let s = &mut self.slots[i as usize];
            s.prev = NIL;
            s.next = old;
            s.list = list as u8;
        }
        if old == NIL {
            self.lists[list].tail = i;
        } else {
            self.slots[old as usize].prev = i;
        }
        self.lists[list].head = i;
        self.lists[list].len += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_arrive_inactive_unmapped_and_faults_map_them() {
        let mut pc = PageCache::new(4);
        assert_eq!(pc.access(1, 0), Access::Miss);
        assert_eq!(pc.insert(1, false), None);
        assert_eq!(pc.insert(2, true), None);
        assert_eq!(pc.access(1, 0), Access::MinorFault);
        assert!(pc.map(1, 0));
        assert_eq!(pc.access(1, 0), Access::Hit);
        assert_eq!(pc.access(2, 0), Access::Marked);
        pc.clear_mark(2);
        assert_eq!(pc.access(2, 0), Access::MinorFault);
        assert!(!pc.map(9, 0));
        assert_eq!(pc.list_order(false), vec![2, 1]);
        assert_eq!(pc.list_order(true), Vec::<u64>::new());
        let s = pc.stats();
        assert_eq!((s.hits, s.minor_faults, s.misses), (1, 3, 1));
    }

    /// An untouched page is evicted before a touched one: the touched one gets a second
    /// chance, and is activated when it is found touched again.
    #[test]
    fn second_chance_then_activation() {
        let mut pc = PageCache::new(3);
        for p in [1, 2, 3] {
            pc.insert(p, false);
            pc.map(p, 0); // young
        }
        // Page 1 (the inactive tail) was young: kept, referenced; 2 and 3 too; then 1 again,
        // now old: evicted.
        assert_eq!(pc.insert(4, false), Some(1));
        // 2 and 3 are referenced and old; touch 2 again: it will be activated.
        assert_eq!(pc.access(2, 0), Access::Hit);
        assert_eq!(pc.insert(5, false), Some(3));
        assert_eq!(pc.list_order(true), vec![2]);
        assert!(pc.stats().activations >= 1);
    }

    /// A page evicted and read again within the active list's length of evictions returns
    /// straight to the active list; one read again later goes to the inactive list.
    #[test]
    fn a_quick_refault_is_activated() {
        let mut pc = PageCache::new(4);
        for p in [1, 2, 3, 4] {
            pc.insert(p, false);
            pc.map(p, 0);
        }
        // One pass gives every page a second chance; 1, the oldest, is then evicted.
        assert_eq!(pc.insert(5, false), Some(1));
        // 2 and 3 are touched again: the next reclaim activates them and evicts 4.
        pc.access(2, 0);
        pc.access(3, 0);
        assert_eq!(pc.insert(6, false), Some(4));
        assert_eq!(pc.list_order(true), vec![3, 2]);
        // 4 comes back two evictions later, within the active list's two pages: active.
        assert_eq!(pc.insert(4, false), Some(5));
        assert_eq!(pc.list_order(true), vec![4, 3, 2]);
        assert_eq!(pc.stats().refault_activations, 1);
        // Making room, reclaim first deactivates the active tail (2: the inactive list is
        // low), then evicts 6. 1 was evicted long ago (seven evictions and activations back):
        // inactive.
        assert_eq!(pc.insert(1, false), Some(6));
        assert_eq!(pc.list_order(false), vec![1, 2]);
        assert!(pc.is_workingset(2));
        assert_eq!(pc.stats().refault_activations, 1);
    }

    #[test]
    fn capacity_is_a_hard_bound_and_storage_is_reused() {
        let cap = 17;
        let mut pc = PageCache::new(cap);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let page = x % 60;
            match pc.access(page, 0) {
                Access::Miss => {
                    let evicted = pc.insert(page, x & 64 == 0);
                    assert!(evicted.is_none_or(|e| e != page && !pc.contains(e)));
                    pc.map(page, 0);
                }
                Access::MinorFault | Access::Marked => {
                    pc.clear_mark(page);
                    assert!(pc.map(page, 0));
                }
                Access::Hit => {}
            }
            assert!(pc.len() <= cap);
            let (i, a) = pc.list_lengths();
            assert_eq!(i + a, pc.len());
            assert_eq!(
                pc.list_order(false).len() + pc.list_order(true).len(),
                pc.len()
            );
        }
        assert!(pc.slots.len() <= cap);
        let s = pc.stats();
        assert_eq!(s.insertions - s.evictions, pc.len() as u64);
        assert!(s.activations > 0 && s.evictions > 0);
    }

    /// A page used all along survives a stream of read-around pages nobody maps, many times
    /// the cache's size: it is found referenced, kept, then activated; the stream is evicted
    /// from the inactive list without reaching the active one.
    #[test]
    fn a_hot_page_survives_a_stream_of_cold_ones() {
        let mut pc = PageCache::new(64);
        pc.insert(7, false);
        pc.map(7, 0);
        for p in 1000..11_000u64 {
            assert_eq!(
                pc.access(7, 0),
                Access::Hit,
                "hot page lost before cold page {p}"
            );
            pc.insert(p, false);
        }
        assert_eq!(pc.list_order(true), vec![7]);
        assert_eq!(pc.stats().evictions, 10_000 - 63);
        assert_eq!(pc.stats().activations, 1);
    }

    /// Pages mapped when they arrive start young (x86 maps them accessed): each is passed over
    /// once before an untouched one is evicted.
    #[test]
    fn pages_mapped_on_arrival_are_passed_over_once() {
        let mut pc = PageCache::new(2);
        pc.insert(1, false);
        pc.map(1, 0);
        pc.insert(2, false);
        assert_eq!(pc.insert(3, false), Some(2), "1 is young: 2 goes first");
        assert_eq!(
            pc.insert(4, false),
            Some(1),
            "1 was passed over once, untouched since"
        );
    }

    /// Processes map a cached page each for themselves (a page another process mapped is a
    /// minor fault here), and a page young in two processes' page tables is activated at the
    /// first scan that finds it so, where one process's touch only earns a second chance.
    #[test]
    fn processes_map_separately_and_two_young_mappings_activate() {
        let mut pc = PageCache::new(3);
        pc.insert(1, false);
        pc.insert(2, false);
        assert!(pc.map(1, 0));
        assert_eq!(pc.access(1, 0), Access::Hit);
        assert_eq!(pc.access(1, 1), Access::MinorFault);
        assert!(pc.is_mapped(1, 0) && !pc.is_mapped(1, 1));
        assert!(pc.map(1, 1));
        assert!(pc.map(2, 0));
        pc.insert(3, false);
        // Full: the scan finds 1 young in both processes (activated), 2 young in one (second
        // chance), 3 untouched (evicted).
        assert_eq!(pc.insert(4, false), Some(3));
        assert_eq!(pc.list_order(true), vec![1]);
        assert_eq!(pc.list_order(false), vec![4, 2]);
    }
}
