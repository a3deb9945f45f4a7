//! What the kernel reads on page faults of a mapped file, per open file (Linux 6.18,
//! `mm/filemap.c` and `mm/readahead.c`; `docs/linux-page-cache.md` §1–§4 for the rules and the
//! measurements on this project's machine):
//!
//! * **Read-around** (`do_sync_mmap_readahead`): a major fault at page `i` reads the window of
//!   `ra_pages` (= `read_ahead_kb / 4`) pages from `max(0, i − ra_pages/2)`, clipped to the file,
//!   every page of it not cached; the page `ra_pages/4` before the window's end carries the
//!   readahead mark. Each major fault adds one to `mmap_miss` (up to 1,000); above
//!   [`MMAP_LOTSAMISS`] a fault reads only its own page.
//! * **Fault-around** (`filemap_map_pages`): every fault maps the cached, unmarked pages of the
//!   16-page aligned block around it ([`fault_around_window`]), and takes the ones not marked as
//!   working set off `mmap_miss`, so under random access read-around never stops.
//! * **Asynchronous readahead** (`page_cache_async_ra`): a fault on a marked page starts the
//!   next window: right after the last one if the mark was its own (a sequential stream), else
//!   from the first uncached page after the fault; its first page carries the next mark.
//!
//! Not modelled: large folios (6.18 ext4 reads its asynchronous windows in folios of growing
//! order, which trims their ends to the folio size), `VM_HUGEPAGE`, `MADV_SEQUENTIAL`.

use std::ops::Range;

/// Linux's `MMAP_LOTSAMISS`: with more net misses than this, a fault stops reading around.
pub const MMAP_LOTSAMISS: u32 = 100;
/// Pages fault-around maps: `fault_around_bytes` (64 KiB) of 4 KiB pages.
pub const FAULT_AROUND_PAGES: u64 = 16;

/// Pages the kernel reads for one fault (those of them not cached), and the one it marks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// File pages.
    pub pages: Range<u64>,
    /// The page that gets the readahead mark, if any (only if the read brings it in).
    pub mark: Option<u64>,
}

/// One open file's fault readahead state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileReadahead {
    ra_pages: u64,
    mmap_miss: u32,
    /// The last window: `start`, `size`, `async_size` of Linux's `file_ra_state`.
    start: u64,
    size: u64,
    async_size: u64,
    /// Major faults that read a window around the fault.
    pub around_reads: u64,
    /// Major faults that read only their page (`mmap_miss` above [`MMAP_LOTSAMISS`]).
    pub single_page_reads: u64,
    /// Asynchronous readaheads started at a mark.
    pub async_reads: u64,
}

impl FileReadahead {
    /// A fresh state with a window of `ra_pages` (at least 1).
    pub fn new(ra_pages: u32) -> Self {
        Self {
            ra_pages: u64::from(ra_pages.max(1)),
            mmap_miss: 0,
            start: 0,
            size: 0,
            async_size: 0,
            around_reads: 0,
            single_page_reads: 0,
            async_reads: 0,
        }
    }

    /// Linux's `mmap_miss` counter now.
    pub fn mmap_miss(&self) -> u32 {
        self.mmap_miss
    }

    /// A major fault at file page `index` of a file of `file_pages` pages: what to read.
    pub fn on_major_fault(&mut self, index: u64, file_pages: u64) -> Window {
        let file_pages = file_pages.max(index + 1);
        if self.mmap_miss < MMAP_LOTSAMISS * 10 {
            self.mmap_miss += 1;
        }
        if self.mmap_miss > MMAP_LOTSAMISS {
            self.single_page_reads += 1;
            return Window {
                pages: index..index + 1,
                mark: None,
            };
        }
        self.around_reads += 1;
        self.start = index.saturating_sub(self.ra_pages / 2);
        self.size = self.ra_pages;
        self.async_size = self.ra_pages / 4;
        self.window(file_pages)
    }

    /// The current window, clipped to the file, marked `async_size` pages before its end.
    fn window(&self, file_pages: u64) -> Window {
        let end = (self.start + self.size).min(file_pages);
        let mark = self.start + self.size - self.async_size;
        Window {
            pages: self.start..end,
            mark: (mark < end).then_some(mark),
        }
    }

    /// Fault-around found `hits` cached pages not marked as working set.
    pub fn on_fault_around(&mut self, hits: u64) {
        self.mmap_miss = self
            .mmap_miss
            .saturating_sub(u32::try_from(hits).unwrap_or(u32::MAX));
    }

    /// A fault on marked page `index` (cached): `mmap_miss` goes down by one, and the next
    /// window to read asynchronously, if any. `next_miss(from, limit)` is the first page in
    /// `from..limit` that is not cached.
    pub fn on_marked_fault(
        &mut self,
        index: u64,
        file_pages: u64,
        next_miss: impl Fn(u64, u64) -> Option<u64>,
    ) -> Option<Window> {
        self.mmap_miss = self.mmap_miss.saturating_sub(1);
        let max = self.ra_pages;
        if index == self.start + self.size - self.async_size && self.size > 0 {
            // The window's own mark: the stream goes on right after it.
            self.start += self.size;
            self.size = next_ra_size(self.size, max);
        } else {
            let s = next_miss(index + 1, (index + 1 + max).min(file_pages))?;
            self.start = s;
            self.size = next_ra_size(s - index + max, max);
        }
        self.async_size = self.size;
        if self.start >= file_pages {
            return None;
        }
        self.async_reads += 1;
        Some(self.window(file_pages))
    }
}

/// Linux's `get_next_ra_size`: ×4 while below a sixteenth of the maximum, ×2 up to half of
/// it, then the maximum.
fn next_ra_size(cur: u64, max: u64) -> u64 {
    if cur < max / 16 {
        4 * cur
    } else if cur <= max / 2 {
        2 * cur
    } else {
        max
    }
}

/// The pages fault-around looks at for a fault at `index`: the [`FAULT_AROUND_PAGES`]-aligned
/// block holding it, clipped to the file (the mapping is aligned to it).
pub fn fault_around_window(index: u64, file_pages: u64) -> Range<u64> {
    let start = index - index % FAULT_AROUND_PAGES;
    start..(start + FAULT_AROUND_PAGES).min(file_pages.max(index + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The windows measured on this machine's kernel (docs/linux-page-cache.md §1).
    #[test]
    fn read_around_is_the_whole_window_centred_on_the_fault() {
        let mut ra = FileReadahead::new(2048);
        let p = 100_000;
        assert_eq!(
            ra.on_major_fault(p, 1 << 20),
            Window {
                pages: p - 1024..p + 1024,
                mark: Some(p + 512)
            }
        );
        let mut ra = FileReadahead::new(32);
        assert_eq!(
            ra.on_major_fault(p, 1 << 20),
            Window {
                pages: p - 16..p + 16,
                mark: Some(p + 8)
            }
        );
        // Clipped at both ends of the file; a mark past the end is none.
        assert_eq!(ra.on_major_fault(3, 1000).pages, 0..32);
        assert_eq!(
            ra.on_major_fault(990, 1000),
            Window {
                pages: 974..1000,
                mark: Some(998)
            }
        );
        assert_eq!(ra.on_major_fault(5, 6).mark, None);
    }

    #[test]
    fn mmap_miss_stops_read_around_unless_fault_around_brings_it_down() {
        let mut ra = FileReadahead::new(32);
        for i in 0..u64::from(MMAP_LOTSAMISS) {
            assert_eq!(ra.on_major_fault(i * 100, 1 << 20).pages.count(), 32);
        }
        assert_eq!(ra.on_major_fault(50_000, 1 << 20).pages, 50_000..50_001);
        assert_eq!((ra.around_reads, ra.single_page_reads), (100, 1));
        // One fault-around of 16 cached pages: read-around again, as on a real kernel where
        // every major fault's retry maps its block.
        ra.on_fault_around(16);
        assert_eq!(ra.on_major_fault(60_000, 1 << 20).pages.count(), 32);
        for _ in 0..5000 {
            ra.on_major_fault(0, 10);
        }
        assert_eq!(ra.mmap_miss(), MMAP_LOTSAMISS * 10);
    }

    /// A read-around at P marks P + 8 (of 32); touching the mark reads the next window right
    /// after it, marked on its first page; touching that mark goes on; a stale mark reads from
    /// the next uncached page (the measured cases of docs/linux-page-cache.md §3, at 32 pages).
    #[test]
    fn a_mark_starts_the_next_window() {
        let mut ra = FileReadahead::new(32);
        let p = 1000;
        let w = ra.on_major_fault(p, 1 << 20);
        // `next_miss` of a cache holding `cached`.
        let next_miss = |cached: Range<u64>| {
            move |from: u64, limit: u64| (from..limit).find(|q| !cached.contains(q))
        };
        let w2 = ra
            .on_marked_fault(p + 8, 1 << 20, next_miss(w.pages.clone()))
            .unwrap();
        assert_eq!(
            w2,
            Window {
                pages: p + 16..p + 48,
                mark: Some(p + 16)
            }
        );
        let w3 = ra
            .on_marked_fault(p + 16, 1 << 20, next_miss(p - 16..p + 48))
            .unwrap();
        assert_eq!(w3.pages, p + 48..p + 80);
        // A mark left by an older window (the state has moved on): a window from the first
        // uncached page after it, if that is within a window's length; else nothing.
        let stale = ra
            .on_marked_fault(p + 8, 1 << 20, next_miss(p - 16..p + 16))
            .unwrap();
        assert_eq!(
            stale,
            Window {
                pages: p + 16..p + 48,
                mark: Some(p + 16)
            }
        );
        assert_eq!(
            ra.on_marked_fault(p - 8, 1 << 20, next_miss(p - 16..p + 80)),
            None
        );
        assert_eq!(ra.async_reads, 3);
        // At the end of the file nothing is read.
        let mut end = FileReadahead::new(32);
        end.on_major_fault(90, 100);
        assert_eq!(end.on_marked_fault(98, 100, |_, _| None), None);
    }

    #[test]
    fn fault_around_is_the_aligned_block() {
        assert_eq!(fault_around_window(0, 1000), 0..16);
        assert_eq!(fault_around_window(37, 1000), 32..48);
        assert_eq!(fault_around_window(995, 1000), 992..1000);
        assert_eq!(next_ra_size(1, 32), 4);
        assert_eq!(next_ra_size(8, 32), 16);
        assert_eq!(next_ra_size(32, 32), 32);
    }
}
