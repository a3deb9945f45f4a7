//! The flash hardware interface: geometry plus split-phase page read, program and erase.
//!
//! ```plain
//!   NVMe commands ── dispatch ── FTL / page buffer / ISP
//!                                    │  this trait
//!                       emulator NAND │ in-memory fake │ board NAND scheduler
//! ```
//!
//! Operations are split-phase (Tock TRD 3): [`Flash::submit`] starts one and returns at once;
//! its outcome arrives later from [`Flash::poll`], never from inside `submit`. Data moves by DMA
//! into and out of the firmware's DRAM arena, addressed by byte offset, exactly as a NAND
//! controller's DMA engine addresses the board's DRAM.
//!
//! Every page has a spare (out-of-band) area next to its data, as NAND pages do. A page
//! operation's DRAM window is [`Geometry::window_bytes`] long: the page's data, then
//! [`SPARE_BYTES`] of spare, which a program stores and a read returns with the data. The FTL
//! keeps each page's logical owner and sequence numbers there (`crate::oob`), which is what lets
//! it rebuild its mapping after a power cut.
//!
//! A read names the [`Sectors`] of the page it needs: after the array senses the page into its
//! register, the controller moves out only those columns (ONFI's Change Read Column), so a read
//! of 1 KiB of a 16 KiB page holds the channel for 1 KiB. A sector is a sixteenth of the page's
//! data (1 KiB of a 16 KiB page: an error-correction codeword's worth, the smallest unit a
//! controller can check), and the spare always comes with it; a read of no sector reads the
//! spare alone, which is how boot scans learn what a page holds.

/// The shape of the NAND array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Independent channels (buses).
    pub channels: u32,
    /// Chips (ways) per channel.
    pub ways: u32,
    /// Dies (LUNs) per chip.
    pub dies_per_way: u32,
    /// Erase blocks per die.
    pub blocks_per_die: u32,
    /// Pages per erase block.
    pub pages_per_block: u32,
    /// Bytes of user data per page.
    pub page_size_bytes: u32,
}

impl Geometry {
    /// Number of dies in the array.
    pub fn die_count(&self) -> u32 {
        self.channels * self.ways * self.dies_per_way
    }

    /// Number of erase blocks in the array.
    pub fn block_count(&self) -> u32 {
        self.die_count() * self.blocks_per_die
    }

    /// Number of pages in the array.
    pub fn page_count(&self) -> u64 {
        u64::from(self.block_count()) * u64::from(self.pages_per_block)
    }

    /// Whether every count is non-zero, the page size is a multiple of 512 bytes, the page
    /// count fits the firmware's 32-bit physical page numbers, and the block count fits the 28
    /// bits a flash tag has for a block ([`MAX_BLOCKS`]).
    pub fn is_valid(&self) -> bool {
        let counts = [
            self.channels,
            self.ways,
            self.dies_per_way,
            self.blocks_per_die,
            self.pages_per_block,
        ];
        let product = |n: usize| {
            counts[..n]
                .iter()
                .try_fold(1u64, |a, c| a.checked_mul(u64::from(*c)))
        };
        counts.iter().all(|c| *c > 0)
            && self.page_size_bytes >= 512
            && self.page_size_bytes.is_multiple_of(512)
            && matches!(product(5), Some(t) if t < u64::from(u32::MAX))
            && matches!(product(4), Some(b) if b <= u64::from(MAX_BLOCKS))
    }

    /// Bytes of a page operation's DRAM window: the page's data, then its spare area.
    pub fn window_bytes(&self) -> usize {
        self.page_size_bytes as usize + SPARE_BYTES
    }

    /// Bytes of one sector, the unit of a column read ([`Sectors`]).
    pub fn sector_bytes(&self) -> usize {
        self.page_size_bytes as usize / SECTORS_PER_PAGE
    }

    /// The channel a die sits on. Dies are numbered channel-first (die `d` is on channel
    /// `d % channels`, way `(d / channels) % ways`), so consecutive dies use different channels.
    pub fn channel_of(&self, die: u32) -> u32 {
        die % self.channels
    }

    /// The way (chip enable) a die sits on.
    pub fn way_of(&self, die: u32) -> u32 {
        (die / self.channels) % self.ways
    }

    /// The block physical page `ppn` belongs to, and its place in it.
    pub fn block_and_page(&self, ppn: PhysPage) -> (PhysBlock, u32) {
        (
            PhysBlock(ppn.0 / self.pages_per_block),
            ppn.0 % self.pages_per_block,
        )
    }

    /// The die holding physical page `ppn` (see [`PhysPage`]).
    pub fn die_of(&self, ppn: PhysPage) -> u32 {
        ppn.0 / self.pages_per_block / self.blocks_per_die
    }
}

/// Most erase blocks an array may have: the firmware names a block in the 28 bits of a flash
/// tag (the lazy eraser's erases).
pub const MAX_BLOCKS: u32 = 1 << 28;

/// Bytes of a page's spare (out-of-band) area that travel with it, after its data, in every
/// page operation's DRAM window. A multiple of the arena's cache line, so that windows stay
/// line-aligned.
pub const SPARE_BYTES: usize = 64;

/// Sectors per page: the unit of a column read is `page_size_bytes / SECTORS_PER_PAGE`.
pub const SECTORS_PER_PAGE: usize = 16;

/// A set of a page's sectors (bit `i`: bytes `i × sector .. (i + 1) × sector` of its data).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sectors(pub u16);

impl Sectors {
    /// The whole page.
    pub const ALL: Self = Self(u16::MAX);
    /// No data: the spare alone.
    pub const NONE: Self = Self(0);

    /// The sectors holding bytes `offset .. offset + len` of a page of `page_size_bytes`
    /// (`NONE` when `len` is 0; bytes past the page are ignored).
    pub fn covering(offset: usize, len: usize, page_size_bytes: usize) -> Self {
        let sector = page_size_bytes / SECTORS_PER_PAGE;
        if len == 0 || sector == 0 || offset >= page_size_bytes {
            return Self::NONE;
        }
        let first = offset / sector;
        let last = (offset + len - 1).min(page_size_bytes - 1) / sector;
        let upto = if last + 1 >= 16 {
            u16::MAX
        } else {
            (1u16 << (last + 1)) - 1
        };
        Self(upto & !((1u16 << first) - 1))
    }

    /// Every sector of both.
    pub fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// The sectors of `self` not in `other`.
    pub fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// Whether every sector of `other` is in `self`.
    pub fn contains(self, other: Self) -> bool {
        other.0 & !self.0 == 0
    }

    /// Whether no sector is named.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Sectors named.
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    /// Copies what a read of these sectors moves from one page window (data, then spare) to
    /// another: each named sector, and the spare; `to`'s other sectors are left as they are.
    pub fn copy_window(self, page_size_bytes: usize, from: &[u8], to: &mut [u8]) {
        let sector = page_size_bytes / SECTORS_PER_PAGE;
        for (first, count) in self.runs() {
            let (a, b) = (first * sector, (first + count) * sector);
            to[a..b].copy_from_slice(&from[a..b]);
        }
        to[page_size_bytes..].copy_from_slice(&from[page_size_bytes..]);
    }

    /// Bytes of page data a read of these sectors moves.
    pub fn data_bytes(self, page_size_bytes: usize) -> usize {
        self.count() as usize * (page_size_bytes / SECTORS_PER_PAGE)
    }

    /// The runs of consecutive sectors, as `(first, count)`, in order.
    pub fn runs(self) -> impl Iterator<Item = (usize, usize)> {
        let mut rest = self.0;
        core::iter::from_fn(move || {
            if rest == 0 {
                return None;
            }
            let first = rest.trailing_zeros() as usize;
            let count = (rest >> first).trailing_ones() as usize;
            rest &= !(((1u32 << count) - 1) << first) as u16;
            Some((first, count))
        })
    }
}

/// A physical page number: `(die * blocks_per_die + block) * pages_per_block + page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PhysPage(pub u32);

/// A physical erase block number: `die * blocks_per_die + block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PhysBlock(pub u32);

impl PhysBlock {
    /// The `page`-th page of this block.
    pub fn page(self, geometry: &Geometry, page: u32) -> PhysPage {
        PhysPage(self.0 * geometry.pages_per_block + page)
    }
}

/// One flash operation. `dram_offset_bytes` addresses a window of [`Geometry::window_bytes`]
/// of the DRAM arena: the page's data, then its spare area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashOp {
    /// Read sectors of a page, and its spare, into DRAM.
    Read {
        /// The page.
        ppn: PhysPage,
        /// Where its data lands (the window of the whole page: sector `i` lands at
        /// `i × sector_bytes` in it, the spare after the data).
        dram_offset_bytes: usize,
        /// The sectors needed.
        sectors: Sectors,
    },
    /// Program an erased page (data and spare) from DRAM. The window must stay untouched until
    /// completion.
    Program {
        /// The page.
        ppn: PhysPage,
        /// Where its data is.
        dram_offset_bytes: usize,
    },
    /// Erase a block (every page, spare included, reads 0xFF afterwards).
    Erase {
        /// The block.
        block: PhysBlock,
    },
}

impl FlashOp {
    /// Whether the page or block the operation names exists in `geometry` (what an array
    /// checks before it accepts the operation).
    pub fn is_within(&self, geometry: &Geometry) -> bool {
        match self {
            FlashOp::Read { ppn, .. } | FlashOp::Program { ppn, .. } => {
                u64::from(ppn.0) < geometry.page_count()
            }
            FlashOp::Erase { block } => block.0 < geometry.block_count(),
        }
    }
}

/// The one error enum of the flash interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashError {
    /// The request queue is full; submit again after a completion.
    Busy,
    /// The page, block or DRAM window is outside the array or the arena.
    OutOfRange,
    /// A program targeted a page that is not erased, or pages of a block out of order.
    NotErased,
    /// The media reported a failure: a program or erase that did not take, or a read whose data
    /// the error correction could not recover (a page whose program was cut short by a power
    /// loss reads either as erased or with this error).
    Media,
}

/// The outcome of one operation, identified by the tag given to [`Flash::submit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashCompletion {
    /// The submitter's tag.
    pub tag: u32,
    /// Success, or why not.
    pub result: Result<(), FlashError>,
}

/// A NAND array driven by the firmware.
///
/// Implementations MUST: report each accepted operation exactly once from [`Flash::poll`];
/// execute and complete the operations of one die in the order they were submitted (the FTL
/// relies on it: a block's pages are programmed in order, and a block is erased only after the
/// reads queued against it); finish a Read's DMA into DRAM before reporting it, bringing in at
/// least the sectors it names and the spare (hardware that reads whole pages may bring the
/// rest of the page too; the firmware never relies on the others either way); read a Program's
/// data no later than its completion; keep erased pages at 0xFF; refuse a program that is not
/// the next page of its block; move a page's spare area with its data; after a power loss,
/// report a page whose program was interrupted either as erased or with [`FlashError::Media`]
/// when it is read (never as the data it was being given), and a block whose erase was
/// interrupted as failing its reads until it is erased again.
pub trait Flash {
    /// The array's geometry; constant for the life of the implementation.
    fn geometry(&self) -> Geometry;

    /// Starts `op`. On `Err` nothing was started and no completion will come.
    fn submit(&mut self, tag: u32, op: FlashOp, dram: &[u8]) -> Result<(), FlashError>;

    /// Returns one finished operation, if any, after moving a Read's data into `dram`.
    fn poll(&mut self, dram: &mut [u8]) -> Option<FlashCompletion>;

    /// The work the firmware has counted since boot, told just before each [`Flash::submit`]
    /// (the submitted operation's own cost included). Hardware ignores it (the default); a
    /// timing model dates the operation by it: the core issues an operation when it has done
    /// the work before it, not at the end of the poll call that issued it.
    fn note_work(&mut self, work: &crate::work::WorkCounters) {
        let _ = work;
    }

    /// A hint, given when a newer version of its logical page has been programmed: nothing will
    /// need page `ppn`'s data again (a read of it may return anything), but its spare must
    /// still read as programmed, since a boot scans spares. Hardware ignores it (the default);
    /// an array that keeps its pages in memory frees the data, so that it holds about the live
    /// data rather than every page programmed since the block's erase.
    fn forget(&mut self, ppn: PhysPage) {
        let _ = ppn;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn sectors_cover_byte_ranges() {
        let page = 16384;
        assert_eq!(Sectors::covering(0, page, page), Sectors::ALL);
        assert_eq!(Sectors::covering(0, 1, page), Sectors(1));
        assert_eq!(Sectors::covering(1023, 2, page), Sectors(0b11));
        assert_eq!(Sectors::covering(4096, 4096, page), Sectors(0xF0));
        assert_eq!(Sectors::covering(15 * 1024, 5000, page), Sectors(0x8000));
        assert_eq!(Sectors::covering(5, 0, page), Sectors::NONE);
        assert_eq!(Sectors::covering(page, 8, page), Sectors::NONE);
        assert!(Sectors::ALL.contains(Sectors(0x0F0F)));
        assert!(!Sectors(0x0F0F).contains(Sectors(0x1000)));
        assert_eq!(Sectors(0x0FF0).without(Sectors(0x00FF)), Sectors(0x0F00));
        let runs: Vec<_> = Sectors(0b1100_0111_0000_0001).runs().collect();
        assert_eq!(runs, [(0, 1), (8, 3), (14, 2)]);
        assert_eq!(Sectors::ALL.runs().collect::<Vec<_>>(), [(0, 16)]);
        assert_eq!(Sectors::NONE.runs().count(), 0);
    }

    #[test]
    fn a_geometry_is_valid_only_if_its_pages_and_blocks_fit_their_numbers() {
        let g = Geometry {
            channels: 8,
            ways: 8,
            dies_per_way: 1,
            blocks_per_die: 4096,
            pages_per_block: 256,
            page_size_bytes: 16384,
        };
        assert!(g.is_valid());
        // 2^31 pages in blocks of one page: the pages fit 32 bits, the blocks not 28.
        let one_page_blocks = Geometry {
            channels: 1,
            ways: 1,
            dies_per_way: 1,
            blocks_per_die: 1 << 31,
            pages_per_block: 1,
            page_size_bytes: 512,
        };
        assert!(!one_page_blocks.is_valid());
        let at_the_limit = Geometry {
            blocks_per_die: MAX_BLOCKS,
            ..one_page_blocks
        };
        assert!(at_the_limit.is_valid());
        assert!(
            !Geometry {
                channels: u32::MAX,
                ways: u32::MAX,
                ..g
            }
            .is_valid()
        );
        assert!(
            !Geometry {
                page_size_bytes: 1000,
                ..g
            }
            .is_valid()
        );
    }
}
