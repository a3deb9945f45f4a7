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

    /// Whether every count is non-zero, the page size is a multiple of 512 bytes, and the page
    /// count fits the firmware's 32-bit physical page numbers.
    pub fn is_valid(&self) -> bool {
        let counts = [
            self.channels,
            self.ways,
            self.dies_per_way,
            self.blocks_per_die,
            self.pages_per_block,
        ];
        let total = counts
            .iter()
            .try_fold(1u64, |a, c| a.checked_mul(u64::from(*c)));
        counts.iter().all(|c| *c > 0)
            && self.page_size_bytes >= 512
            && self.page_size_bytes.is_multiple_of(512)
            && matches!(total, Some(t) if t < u64::from(u32::MAX))
    }

    /// Bytes of a page operation's DRAM window: the page's data, then its spare area.
    pub fn window_bytes(&self) -> usize {
        self.page_size_bytes as usize + SPARE_BYTES
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

/// Bytes of a page's spare (out-of-band) area that travel with it, after its data, in every
/// page operation's DRAM window. A multiple of the arena's cache line, so that windows stay
/// line-aligned.
pub const SPARE_BYTES: usize = 64;

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
    /// Read a page (data and spare) into DRAM.
    Read {
        /// The page.
        ppn: PhysPage,
        /// Where its data lands.
        dram_offset_bytes: usize,
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
/// reads queued against it); finish a Read's DMA into DRAM before reporting it; read a Program's
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
}
