//! Flash pages the array computes instead of storing: a namespace range laid out as if the host
//! had written it in order, whose data comes from a [`LogicalContent`] when it is read.
//!
//! Logical page `first_lpn + k` sits on die `k % D`, at row `k / D` of that die counted from
//! its first block (block `row / pages_per_block`, page `row % pages_per_block`): the order in
//! which an FTL that stripes consecutive writes over its dies fills them, from the bottom blocks
//! (the checkpoint slots live at the top of each die, see the firmware's checkpoint layout).
//! Each page's spare is the FTL's data record for its logical page
//! ([`sagessd_firmware::data_page_spare`]), with sequence numbers in write order, so the
//! firmware's recovering boot maps every page as it would after a crash that lost only its
//! checkpoint.
//!
//! A computed page stays until its block is erased (garbage collection, or a boot that erases
//! what it found free); a program then goes to the array's own store as usual.

use std::sync::Arc;

use sagessd_firmware::data_page_spare;
use sagessd_firmware::hal::{Geometry, SECTORS_PER_PAGE, SPARE_BYTES, Sectors};

/// Bytes of a namespace that the flash computes.
pub trait LogicalContent: Send + Sync + std::fmt::Debug {
    /// Fills `out` with the namespace's bytes from byte `offset_bytes` on.
    fn fill(&self, offset_bytes: u64, out: &mut [u8]);
}

/// Computed pages of an array (see the module documentation).
#[derive(Debug, Clone)]
pub struct SyntheticPages {
    content: Arc<dyn LogicalContent>,
    geometry: Geometry,
    first_lpn: u32,
    lpn_count: u32,
    /// Blocks erased since: their computed pages are gone.
    erased: Vec<bool>,
}

impl SyntheticPages {
    /// Logical pages `first_lpn .. first_lpn + lpn_count` of `content` on an array of
    /// `geometry`; `None` if they need more than half of every die's blocks (the FTL needs room
    /// to work, and the checkpoint slots sit at the top).
    pub fn new(
        content: Arc<dyn LogicalContent>,
        geometry: Geometry,
        first_lpn: u32,
        lpn_count: u32,
    ) -> Option<Self> {
        let rows = u64::from(lpn_count).div_ceil(u64::from(geometry.die_count()));
        let blocks = rows.div_ceil(u64::from(geometry.pages_per_block));
        (blocks * 2 <= u64::from(geometry.blocks_per_die)
            && first_lpn.checked_add(lpn_count).is_some())
        .then(|| Self {
            content,
            geometry,
            first_lpn,
            lpn_count,
            erased: vec![false; geometry.block_count() as usize],
        })
    }

    /// The physical page of the `k`-th computed page.
    fn ppn_of(&self, k: u32) -> u32 {
        let g = &self.geometry;
        let (die, row) = (k % g.die_count(), k / g.die_count());
        die * g.blocks_per_die * g.pages_per_block + row
    }

    /// The index `k` of the computed page at `ppn`, if it is one and still there.
    fn index_of(&self, ppn: u32) -> Option<u32> {
        let g = &self.geometry;
        let per_die = g.blocks_per_die * g.pages_per_block;
        let (die, row) = (ppn / per_die, ppn % per_die);
        let k = u64::from(row) * u64::from(g.die_count()) + u64::from(die);
        let block = ppn / g.pages_per_block;
        (k < u64::from(self.lpn_count) && !self.erased[block as usize]).then_some(k as u32)
    }

    /// Whether `ppn` holds a computed page.
    pub fn holds(&self, ppn: u32) -> bool {
        self.index_of(ppn).is_some()
    }

    /// Computed pages that are still there.
    pub fn live_count(&self) -> usize {
        (0..self.lpn_count)
            .filter(|&k| self.holds(self.ppn_of(k)))
            .count()
    }

    /// Reads `sectors` of computed page `ppn` and its spare into their places in `window`.
    /// `false` if `ppn` holds no computed page.
    pub fn read(&self, ppn: u32, sectors: Sectors, window: &mut [u8]) -> bool {
        self.page_read(ppn, sectors)
            .map(|read| read.fill(window))
            .is_some()
    }

    /// What reading `sectors` of computed page `ppn` returns, as a job that any thread can
    /// fill (see [`PageRead`]); `None` if `ppn` holds no computed page.
    pub fn page_read(&self, ppn: u32, sectors: Sectors) -> Option<PageRead> {
        let k = self.index_of(ppn)?;
        Some(PageRead {
            content: Arc::clone(&self.content),
            lpn: self.first_lpn + k,
            seq: u64::from(k) + 1,
            sectors,
            page_bytes: self.geometry.page_size_bytes as usize,
        })
    }

    /// Forgets the computed pages of `block` (it was erased).
    pub fn erase(&mut self, block: u32) {
        if let Some(e) = self.erased.get_mut(block as usize) {
            *e = true;
        }
    }

    /// Per block, the first page that may still be programmed: past the computed pages.
    pub fn program_pointers(&self, pointers: &mut [u32]) {
        let ppb = self.geometry.pages_per_block;
        for k in 0..self.lpn_count {
            let ppn = self.ppn_of(k);
            let block = (ppn / ppb) as usize;
            pointers[block] = pointers[block].max(ppn % ppb + 1);
        }
    }
}

/// One read of a computed page, detached from the array: a pure function of the page's
/// content, so it can be filled on another thread ahead of the poll that delivers it (the
/// contents stay those of the read even if the block is erased meanwhile).
#[derive(Debug, Clone)]
pub struct PageRead {
    content: Arc<dyn LogicalContent>,
    lpn: u32,
    seq: u64,
    sectors: Sectors,
    page_bytes: usize,
}

impl PageRead {
    /// Fills the read's sectors and the page's spare into their places in `window` (a page
    /// window: data, then spare); its other sectors are left as they are.
    pub fn fill(&self, window: &mut [u8]) {
        let page = self.page_bytes;
        let sector = page / SECTORS_PER_PAGE;
        let base = u64::from(self.lpn) * page as u64;
        for (first, count) in self.sectors.runs() {
            let (a, b) = (first * sector, (first + count) * sector);
            self.content.fill(base + a as u64, &mut window[a..b]);
        }
        window[page..page + SPARE_BYTES]
            .copy_from_slice(&data_page_spare(self.lpn, self.seq, self.seq));
    }

    /// The logical page read.
    pub fn lpn(&self) -> u32 {
        self.lpn
    }

    /// The sectors read.
    pub fn sectors(&self) -> Sectors {
        self.sectors
    }
}

/// What the array's tests compute pages of.
#[cfg(test)]
pub(crate) mod fakes {
    use super::*;

    /// Namespace bytes that name their offset (modulo a prime, so pages differ).
    #[derive(Debug)]
    pub struct Offsets;
    impl LogicalContent for Offsets {
        fn fill(&self, offset: u64, out: &mut [u8]) {
            for (i, b) in out.iter_mut().enumerate() {
                *b = ((offset + i as u64) % 251) as u8;
            }
        }
    }

    /// 4 dies of 8 blocks of 4 pages of 16 KiB: 32 pages a die, 64 computed at most.
    pub fn geometry() -> Geometry {
        Geometry {
            channels: 2,
            ways: 2,
            dies_per_way: 1,
            blocks_per_die: 8,
            pages_per_block: 4,
            page_size_bytes: 16384,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fakes::geometry;
    use super::*;

    #[derive(Debug)]
    struct Counting;
    impl LogicalContent for Counting {
        fn fill(&self, offset: u64, out: &mut [u8]) {
            for (i, b) in out.iter_mut().enumerate() {
                *b = ((offset + i as u64) / 1024) as u8;
            }
        }
    }

    #[test]
    fn pages_stripe_over_dies_and_read_their_logical_bytes() {
        let g = geometry();
        let mut s = SyntheticPages::new(Arc::new(Counting), g, 10, 9).unwrap();
        // k = 0..9 on dies 0,1,2,3,0,1,... rows 0,0,0,0,1,1,...
        assert_eq!(s.ppn_of(0), 0);
        assert_eq!(s.ppn_of(1), 32);
        assert_eq!(s.ppn_of(4), 1);
        assert_eq!(s.ppn_of(8), 2);
        assert_eq!(s.live_count(), 9);
        let mut w = vec![0u8; 16384 + SPARE_BYTES];
        assert!(s.read(s.ppn_of(5), Sectors(0b10), &mut w));
        // Logical page 15: its sector 1 is bytes 15 × 16 KiB + 1 KiB.. → value (15 × 16 + 1).
        assert!(w[1024..2048].iter().all(|&b| b == (15 * 16 + 1) as u8));
        assert!(w[..1024].iter().all(|&b| b == 0), "sector 0 not read");
        assert!(
            !s.read(3, Sectors::ALL, &mut w),
            "ppn 3 is past die 0's pages"
        );
        let mut ptr = vec![0u32; 32];
        s.program_pointers(&mut ptr);
        assert_eq!(&ptr[..1], &[3], "die 0 block 0 holds k = 0, 4, 8");
        assert_eq!(ptr[8], 2, "die 1 block 0 holds k = 1, 5");
        s.erase(0);
        assert!(!s.holds(0) && s.holds(32));
        assert_eq!(s.live_count(), 6);
    }

    #[test]
    fn too_much_for_the_dies_is_refused() {
        let g = geometry();
        assert!(SyntheticPages::new(Arc::new(Counting), g, 0, 4 * 4 * 4).is_some());
        assert!(SyntheticPages::new(Arc::new(Counting), g, 0, 4 * 4 * 4 + 1).is_none());
        assert!(SyntheticPages::new(Arc::new(Counting), g, u32::MAX, 2).is_none());
    }
}
