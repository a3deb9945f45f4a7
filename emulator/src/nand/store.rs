//! Where the NAND array keeps its pages: in RAM, or in a file that *is* the flash.
//!
//! [`PageStore::Memory`] is a sparse map: only programmed pages take memory, an erase frees
//! its block's pages, and a page the firmware says is dead ([`PageStore::forget`]) keeps only
//! its spare. [`PageStore::File`] (`sagessd emulator serve --image PATH`) writes every
//! program and erase through to a file as the array performs it, so the file always holds the
//! flash as it is: a process killed at any instant leaves exactly the pages whose programs had
//! finished, and the firmware boots from them ([`sagessd_firmware::Firmware::recover`]). The
//! file is sparse; an erase punches its block out of it, and a dead page's data is punched out
//! too, so it holds about the live data.
//!
//! File layout, every region 4 KiB-aligned:
//!
//! ```plain
//!   header   4 KiB: magic "SGSSDNAN", version, geometry (6 × u32), spare bytes, the namespace
//!            format (block size, over-provisioning), CRC32C of the fields before it
//!   states   1 byte per page: 0 erased, 1 programmed, 2 torn (fails its reads until erased)
//!   spares   64 bytes per page
//!   data     page_size_bytes per page
//! ```
//!
//! A program writes the data, then the spare, then the state byte: a process killed before the
//! state byte leaves the page erased, which is what the HAL allows for an interrupted program.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use rustc_hash::{FxHashMap, FxHashSet};
use sagessd_abi::crc32c::crc32c;
use sagessd_firmware::hal::{Geometry, SECTORS_PER_PAGE, SPARE_BYTES, Sectors};

use crate::error::EmulatorError;

/// Magic of a flash file.
const MAGIC: [u8; 8] = *b"SGSSDNAN";
/// Version of the flash-file format.
const VERSION: u32 = 3;
/// Bytes of the header region.
const HEADER_BYTES: u64 = 4096;
/// Bytes the header's CRC covers.
const HEADER_FIELDS: usize = 52;

const ERASED: u8 = 0;
const PROGRAMMED: u8 = 1;
const TORN: u8 = 2;

/// What a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PageState {
    /// Erased (reads as 0xFF).
    Erased,
    /// Programmed.
    Programmed,
    /// Torn or failed: fails its reads until its block is erased.
    Torn,
}

/// The namespace format a flash file belongs to, checked when it is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageFormat {
    /// Logical block size.
    pub block_size_bytes: u32,
    /// Over-provisioning, percent.
    pub over_provisioning_percent: u32,
}

/// The pages of an array.
#[derive(Debug)]
pub(crate) enum PageStore {
    /// In RAM.
    Memory {
        pages: FxHashMap<u32, Box<[u8]>>,
        torn: FxHashSet<u32>,
    },
    /// In a flash file.
    File(FileStore),
}

/// Fills `sectors` of a page window and its spare with `byte` (what a read of an erased page
/// brings).
fn fill_sectors(sectors: Sectors, page_size: usize, window: &mut [u8], byte: u8) {
    let sector = page_size / SECTORS_PER_PAGE;
    for (first, count) in sectors.runs() {
        window[first * sector..(first + count) * sector].fill(byte);
    }
    window[page_size..].fill(byte);
}

impl Default for PageStore {
    fn default() -> Self {
        Self::Memory {
            pages: FxHashMap::default(),
            torn: FxHashSet::default(),
        }
    }
}

impl PageStore {
    /// What page `ppn` holds.
    pub fn state(&self, ppn: u32) -> PageState {
        match self {
            Self::Memory { pages, torn } => {
                if torn.contains(&ppn) {
                    PageState::Torn
                } else if pages.contains_key(&ppn) {
                    PageState::Programmed
                } else {
                    PageState::Erased
                }
            }
            Self::File(f) => match f.states.get(ppn as usize) {
                Some(&PROGRAMMED) => PageState::Programmed,
                Some(&TORN) => PageState::Torn,
                _ => PageState::Erased,
            },
        }
    }

    /// What page `ppn` holds, after copying `sectors` of it and its spare into their places in
    /// `window` (the page's data, then its spare) unless it is torn (then `window` is left as
    /// it is); an erased page reads 0xFF. The window's other sectors are left as they are. One
    /// lookup of the page: this is every stored read's path.
    pub fn read(
        &self,
        ppn: u32,
        sectors: Sectors,
        window: &mut [u8],
    ) -> std::io::Result<PageState> {
        let page_size = window.len() - SPARE_BYTES;
        match self {
            Self::Memory { pages, torn } => {
                if torn.contains(&ppn) {
                    return Ok(PageState::Torn);
                }
                Ok(match pages.get(&ppn) {
                    // Forgotten: the spare alone is kept.
                    Some(spare) if spare.len() == SPARE_BYTES => {
                        fill_sectors(sectors, page_size, window, 0);
                        window[page_size..].copy_from_slice(spare);
                        PageState::Programmed
                    }
                    Some(page) => {
                        sectors.copy_window(page_size, page, window);
                        PageState::Programmed
                    }
                    None => {
                        fill_sectors(sectors, page_size, window, 0xFF);
                        PageState::Erased
                    }
                })
            }
            Self::File(f) => {
                let state = self.state(ppn);
                match state {
                    PageState::Torn => {}
                    PageState::Erased => fill_sectors(sectors, page_size, window, 0xFF),
                    PageState::Programmed => f.read(ppn, sectors, window)?,
                }
                Ok(state)
            }
        }
    }

    /// A copy of page `ppn`, if programmed (a read overtaken by its block's erase).
    pub fn copy(&self, ppn: u32, window_bytes: usize) -> Option<Box<[u8]>> {
        if self.state(ppn) != PageState::Programmed {
            return None;
        }
        let mut page = vec![0u8; window_bytes].into_boxed_slice();
        self.read(ppn, Sectors::ALL, &mut page).ok().map(|_| page)
    }

    /// Drops the data of programmed page `ppn` (the firmware's [`Flash::forget`] hint): its
    /// spare stays; its data reads as zeros from now on. Returns whether data was dropped (a
    /// file on a file system without hole punching keeps it).
    ///
    /// [`Flash::forget`]: sagessd_firmware::hal::Flash::forget
    pub fn forget(&mut self, ppn: u32) -> std::io::Result<bool> {
        match self {
            Self::Memory { pages, .. } => match pages.get_mut(&ppn) {
                Some(page) if page.len() > SPARE_BYTES => {
                    let spare: Box<[u8]> = page[page.len() - SPARE_BYTES..].into();
                    *page = spare;
                    Ok(true)
                }
                _ => Ok(false),
            },
            // Only where holes can be punched: zeros written over it would cost a page write
            // and free nothing.
            Self::File(f) if f.states.get(ppn as usize) == Some(&PROGRAMMED) => {
                f.try_punch(f.data_at + u64::from(ppn) * f.page_bytes, f.page_bytes)
            }
            Self::File(_) => Ok(false),
        }
    }

    /// Stores a programmed page.
    pub fn program(&mut self, ppn: u32, window: Box<[u8]>) -> std::io::Result<()> {
        match self {
            Self::Memory { pages, torn } => {
                torn.remove(&ppn);
                pages.insert(ppn, window);
                Ok(())
            }
            Self::File(f) => f.program(ppn, &window),
        }
    }

    /// Marks page `ppn` torn.
    pub fn tear(&mut self, ppn: u32) -> std::io::Result<()> {
        match self {
            Self::Memory { pages, torn } => {
                pages.remove(&ppn);
                torn.insert(ppn);
                Ok(())
            }
            Self::File(f) => f.set_state(ppn, TORN),
        }
    }

    /// Erases the `count` pages from `first`.
    pub fn erase(&mut self, first: u32, count: u32) -> std::io::Result<()> {
        match self {
            Self::Memory { pages, torn } => {
                for p in first..first + count {
                    pages.remove(&p);
                    torn.remove(&p);
                }
                Ok(())
            }
            Self::File(f) => f.erase(first, count),
        }
    }

    /// Pages whose data is held in memory (a flash file's are on disk: 0).
    pub fn data_count(&self) -> usize {
        match self {
            Self::Memory { pages, .. } => pages.values().filter(|p| p.len() > SPARE_BYTES).count(),
            Self::File(_) => 0,
        }
    }

    /// Pages holding programmed data.
    pub fn programmed_count(&self) -> usize {
        match self {
            Self::Memory { pages, .. } => pages.len(),
            Self::File(f) => f.states.iter().filter(|s| **s == PROGRAMMED).count(),
        }
    }

    /// Per block, the page after the last one programmed or torn: the program pointer the
    /// contents imply.
    pub fn program_pointers(&self, geometry: &Geometry) -> Vec<u32> {
        let ppb = geometry.pages_per_block;
        (0..geometry.block_count())
            .map(|b| {
                (0..ppb)
                    .rev()
                    .find(|p| self.state(b * ppb + p) != PageState::Erased)
                    .map_or(0, |p| p + 1)
            })
            .collect()
    }

    /// Makes everything written so far durable (a file store's `fsync`).
    pub fn sync(&self) -> std::io::Result<()> {
        match self {
            Self::Memory { .. } => Ok(()),
            Self::File(f) => f.file.sync_all(),
        }
    }
}

/// Where the regions of a flash file for a geometry lie (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashFileLayout {
    /// Bytes of the header its CRC32C covers (the CRC follows them).
    pub header_fields_bytes: usize,
    /// Offset of the page states.
    pub states_at: u64,
    /// Offset of the spare areas.
    pub spares_at: u64,
    /// Offset of the page data.
    pub data_at: u64,
    /// Length of the file.
    pub len_bytes: u64,
}

impl FlashFileLayout {
    /// The layout for `geometry`.
    pub fn new(geometry: &Geometry) -> Self {
        let pages = geometry.page_count();
        let states_at = HEADER_BYTES;
        let spares_at = states_at + align(pages);
        let data_at = spares_at + align(pages * SPARE_BYTES as u64);
        Self {
            header_fields_bytes: HEADER_FIELDS,
            states_at,
            spares_at,
            data_at,
            len_bytes: data_at + pages * u64::from(geometry.page_size_bytes),
        }
    }
}

/// A flash file (see the module documentation).
#[derive(Debug)]
pub(crate) struct FileStore {
    file: File,
    /// Every page's state, mirrored from the file's states region.
    states: Vec<u8>,
    page_bytes: u64,
    states_at: u64,
    spares_at: u64,
    data_at: u64,
}

fn align(n: u64) -> u64 {
    n.div_ceil(4096) * 4096
}

impl FileStore {
    /// Opens the flash file at `path`, or creates an erased one. The geometry and format must
    /// match the file's; errors name the file and the field.
    pub fn open(
        path: &Path,
        geometry: &Geometry,
        format: ImageFormat,
    ) -> Result<Self, EmulatorError> {
        let io = |source| EmulatorError::ImageIo {
            path: path.to_owned(),
            source,
        };
        let bad = |field: &str, reason: String| EmulatorError::Image {
            path: path.to_owned(),
            field: field.to_owned(),
            reason,
        };
        let pages = geometry.page_count();
        let page_bytes = u64::from(geometry.page_size_bytes);
        let FlashFileLayout {
            states_at,
            spares_at,
            data_at,
            len_bytes: total,
            ..
        } = FlashFileLayout::new(geometry);
        let header = header(geometry, format);
        let exists = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(!exists)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        if !exists {
            file.write_all_at(&header, 0).map_err(io)?;
            file.set_len(total).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        let len = file.metadata().map_err(io)?.len();
        let mut found = [0u8; HEADER_FIELDS + 4];
        if len < HEADER_BYTES {
            return Err(bad(
                "header",
                "the file is too short to be a flash image".into(),
            ));
        }
        file.read_exact_at(&mut found, 0).map_err(io)?;
        if found[..8] != MAGIC {
            return Err(bad("magic", "not a sagessd flash image".into()));
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([found[i], found[i + 1], found[i + 2], found[i + 3]]);
        let crc = u32_at(HEADER_FIELDS);
        if crc32c(&found[..HEADER_FIELDS]) != crc {
            return Err(bad("header checksum", "the header is damaged".into()));
        }
        let version = u32_at(8);
        if version != VERSION {
            return Err(bad(
                "version",
                format!("{version}, this build reads {VERSION}"),
            ));
        }
        let names = [
            "nand.channels",
            "nand.ways",
            "nand.dies_per_way",
            "nand.blocks_per_die",
            "nand.pages_per_block",
            "nand.page_size_bytes",
            "spare bytes",
            "firmware.block_size_bytes",
            "firmware.over_provisioning_percent",
        ];
        for (i, (name, want)) in names
            .iter()
            .zip(&header_words(geometry, format)[1..])
            .enumerate()
        {
            let got = u32_at(12 + 4 * i);
            if got != *want {
                return Err(bad(name, format!("the image has {got}, the config {want}")));
            }
        }
        if len != total {
            return Err(bad(
                "length",
                format!("{len} bytes, the geometry needs {total}"),
            ));
        }
        let mut states = vec![0u8; pages as usize];
        file.read_exact_at(&mut states, states_at).map_err(io)?;
        if let Some(p) = states.iter().position(|s| *s > TORN) {
            return Err(bad(
                "page state",
                format!("page {p} has state {}", states[p]),
            ));
        }
        Ok(Self {
            file,
            states,
            page_bytes,
            states_at,
            spares_at,
            data_at,
        })
    }

    /// Copies `sectors` of programmed page `ppn` and its spare into `window`.
    fn read(&self, ppn: u32, sectors: Sectors, window: &mut [u8]) -> std::io::Result<()> {
        let page_size = self.page_bytes as usize;
        let (data, spare) = window.split_at_mut(page_size);
        let sector = page_size / SECTORS_PER_PAGE;
        let page_at = self.data_at + u64::from(ppn) * self.page_bytes;
        for (first, count) in sectors.runs() {
            let (a, b) = (first * sector, (first + count) * sector);
            self.file
                .read_exact_at(&mut data[a..b], page_at + a as u64)?;
        }
        self.file
            .read_exact_at(spare, self.spares_at + u64::from(ppn) * SPARE_BYTES as u64)
    }

    fn program(&mut self, ppn: u32, window: &[u8]) -> std::io::Result<()> {
        let (data, spare) = window.split_at(self.page_bytes as usize);
        self.file
            .write_all_at(data, self.data_at + u64::from(ppn) * self.page_bytes)?;
        self.file
            .write_all_at(spare, self.spares_at + u64::from(ppn) * SPARE_BYTES as u64)?;
        self.set_state(ppn, PROGRAMMED)
    }

    fn set_state(&mut self, ppn: u32, state: u8) -> std::io::Result<()> {
        self.file
            .write_all_at(&[state], self.states_at + u64::from(ppn))?;
        if let Some(s) = self.states.get_mut(ppn as usize) {
            *s = state;
        }
        Ok(())
    }

    fn erase(&mut self, first: u32, count: u32) -> std::io::Result<()> {
        let (a, n) = (u64::from(first), u64::from(count));
        // States first: a process killed half-way leaves the pages erased, not half-erased.
        self.file
            .write_all_at(&vec![ERASED; count as usize], self.states_at + a)?;
        for s in &mut self.states[first as usize..(first + count) as usize] {
            *s = ERASED;
        }
        self.punch(
            self.spares_at + a * SPARE_BYTES as u64,
            n * SPARE_BYTES as u64,
        )?;
        self.punch(self.data_at + a * self.page_bytes, n * self.page_bytes)
    }

    /// Frees `[at, at + len)` of the file (it reads as zeros afterwards).
    fn punch(&self, at: u64, len: u64) -> std::io::Result<()> {
        if self.try_punch(at, len)? {
            return Ok(());
        }
        // A file system without hole punching: write zeros instead (the space stays used).
        self.file.write_all_at(&vec![0u8; len as usize], at)
    }

    /// Punches a hole over `[at, at + len)`; `false` if the file system cannot.
    fn try_punch(&self, at: u64, len: u64) -> std::io::Result<bool> {
        // SAFETY: fallocate on a descriptor we own, with a range inside the file.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                at as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EOPNOTSUPP) => Ok(false),
            _ => Err(err),
        }
    }
}

/// The header's words after the magic: version, geometry, spare bytes, namespace format.
fn header_words(geometry: &Geometry, format: ImageFormat) -> [u32; 10] {
    [
        VERSION,
        geometry.channels,
        geometry.ways,
        geometry.dies_per_way,
        geometry.blocks_per_die,
        geometry.pages_per_block,
        geometry.page_size_bytes,
        SPARE_BYTES as u32,
        format.block_size_bytes,
        format.over_provisioning_percent,
    ]
}

/// The header bytes of a flash file for `geometry` and `format`.
fn header(geometry: &Geometry, format: ImageFormat) -> Vec<u8> {
    let mut h = vec![0u8; HEADER_FIELDS + 4];
    h[..8].copy_from_slice(&MAGIC);
    for (i, w) in header_words(geometry, format).iter().enumerate() {
        h[8 + 4 * i..12 + 4 * i].copy_from_slice(&w.to_le_bytes());
    }
    let crc = crc32c(&h[..HEADER_FIELDS]);
    h[HEADER_FIELDS..].copy_from_slice(&crc.to_le_bytes());
    h
}
