//! A Read or Write (or Write Zeroes) page by page: the state of each flash page of a parked
//! transfer, kept in the DRAM arena, and the steps that move a page through the page buffer,
//! the host's buffer and the flash.

use sagessd_abi::nvme::Status;

use crate::backend::Backend;
use crate::config::{MAX_COMMANDS, MAX_PAGES_PER_COMMAND};
use crate::dram::Region;
use crate::flash_queue::{Tag, TagKind};
use crate::hal::{PhysPage, Sectors};
use crate::host::{CommandId, DmaError, HostInterface};
use crate::page_buffer::Acquire;
use crate::work::WorkCounters;

/// Progress of one flash page of a Read or Write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PageIo {
    Todo,
    /// Pinned in the page buffer, waiting for its flash read.
    Waiting(u32),
    /// A write's pinned slot, ready to take host data, waiting for a free flash page.
    Owned(u32),
    /// Being programmed from the slot to the physical page.
    Programming(u32, PhysPage),
    Done,
}

impl PageIo {
    const TODO: u64 = 0;
    const WAITING: u64 = 1;
    const OWNED: u64 = 2;
    const PROGRAMMING: u64 = 3;
    const DONE: u64 = 4;

    /// The state as one arena word: kind | slot << 8 | ppn << 32.
    fn pack(self) -> u64 {
        match self {
            PageIo::Todo => Self::TODO,
            PageIo::Waiting(s) => Self::WAITING | u64::from(s) << 8,
            PageIo::Owned(s) => Self::OWNED | u64::from(s) << 8,
            PageIo::Programming(s, ppn) => {
                Self::PROGRAMMING | u64::from(s) << 8 | u64::from(ppn.0) << 32
            }
            PageIo::Done => Self::DONE,
        }
    }

    /// The state [`Self::pack`] stored in `w`. Page-buffer slots fit in 24 bits (the
    /// configuration allows at most 32768).
    fn unpack(w: u64) -> Self {
        let slot = (w >> 8) as u32 & 0x00ff_ffff;
        match w & 0xff {
            Self::TODO => PageIo::Todo,
            Self::WAITING => PageIo::Waiting(slot),
            Self::OWNED => PageIo::Owned(slot),
            Self::PROGRAMMING => PageIo::Programming(slot, PhysPage((w >> 32) as u32)),
            _ => PageIo::Done,
        }
    }
}

/// The arena region holding every command slot's per-page states, `MAX_PAGES_PER_COMMAND`
/// packed [`PageIo`] words per command slot.
#[derive(Clone, Copy, Debug)]
pub(super) struct CommandPages(pub(super) Region);

impl CommandPages {
    /// Page `page` of command slot `cmd`.
    pub(super) fn get(&self, dram: &[u8], cmd: usize, page: usize) -> PageIo {
        debug_assert!(cmd < MAX_COMMANDS && page < MAX_PAGES_PER_COMMAND);
        PageIo::unpack(self.0.u64(dram, cmd * MAX_PAGES_PER_COMMAND + page))
    }

    /// Sets page `page` of command slot `cmd`.
    pub(super) fn set(&self, dram: &mut [u8], cmd: usize, page: usize, io: PageIo) {
        debug_assert!(cmd < MAX_COMMANDS && page < MAX_PAGES_PER_COMMAND);
        self.0
            .set_u64(dram, cmd * MAX_PAGES_PER_COMMAND + page, io.pack());
    }

    /// Whether every page of transfer `t`, parked in command slot `cmd`, is done.
    pub(super) fn all_done(&self, dram: &[u8], cmd: usize, t: &Transfer) -> bool {
        (0..t.page_count).all(|i| self.get(dram, cmd, i) == PageIo::Done)
    }
}

/// A Read or Write in progress. The state of each of its pages lives in the arena
/// ([`CommandPages`], under the command slot it is parked in).
#[derive(Clone, Copy, Debug)]
pub(super) struct Transfer {
    /// The byte range of the namespace it covers.
    pub(super) start_byte: u64,
    pub(super) len_bytes: u64,
    /// The logical pages that range touches, in part or whole.
    pub(super) first_lpn: u32,
    pub(super) page_count: usize,
    /// Where a Write's data comes from (a Read's is always [`Source::Host`]).
    pub(super) source: Source,
}

/// Where the data of a Write comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    /// The host's buffer: a Write.
    Host,
    /// Zeros: a Write Zeroes. With `deallocate` (its DEAC bit), the flash pages it covers whole
    /// are unmapped (they read as zeros) instead of programmed, and the command completes once
    /// a trim record holds the unmapping (`crate::trim_log`); pages it covers in part are
    /// programmed with their blocks zeroed either way.
    Zeroes { deallocate: bool },
}

/// What a Read or Write steps over, borrowed apart from the command table so that a parked
/// command is advanced in place.
pub(super) struct Io<'a> {
    pub(super) backend: &'a mut Backend,
    pub(super) dram: &'a mut [u8],
    pub(super) pages: CommandPages,
}

impl Io<'_> {
    /// The part of page `i` of a transfer that the host buffer covers: (offset in the page,
    /// offset in the host buffer, length).
    fn page_span(&self, t: &Transfer, i: usize) -> (usize, usize, usize) {
        let ps = u64::from(self.backend.geometry.page_size_bytes);
        let page_start = u64::from(t.first_lpn + i as u32) * ps;
        let from = page_start.max(t.start_byte);
        let to = (page_start + ps).min(t.start_byte + t.len_bytes);
        (
            (from - page_start) as usize,
            (from - t.start_byte) as usize,
            (to - from) as usize,
        )
    }

    /// Whether `t` is a deallocating Write Zeroes covering at least one flash page whole (one
    /// it unmaps rather than programs).
    pub(super) fn unmaps_pages(&self, t: &Transfer) -> bool {
        let ps = u64::from(self.backend.geometry.page_size_bytes);
        t.source == Source::Zeroes { deallocate: true }
            && t.start_byte.div_ceil(ps) < (t.start_byte + t.len_bytes) / ps
    }

    /// Moves each page of a Read on as far as it can go (a page-buffer slot found or loaded,
    /// then its bytes DMAed to the host). Returns whether anything moved, and whether every
    /// page that did not is done or waits for a loading slot (so that nothing can move before a
    /// slot stops loading).
    pub(super) fn step_read<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        me: usize,
        t: &Transfer,
        status: &mut Status,
    ) -> (bool, bool) {
        let mut progress = false;
        let mut waits_on_loads = true;
        // Set once a page could not be started: the pages after it are started in a later
        // step, in order, rather than each paying a futile page-buffer lookup now.
        let mut starved = false;
        let page_size = self.backend.geometry.page_size_bytes as usize;
        for i in 0..t.page_count {
            let lpn = t.first_lpn + i as u32;
            let dram = &mut *self.dram;
            let before = self.pages.get(dram, me, i);
            if before == PageIo::Todo && !status.is_success() {
                // The command has failed: a page it has not touched yet is not read at all.
                self.pages.set(dram, me, i, PageIo::Done);
                progress = true;
                continue;
            }
            if before == PageIo::Todo && starved {
                waits_on_loads = false;
                continue;
            }
            let (in_page, in_host, len) = self.page_span(t, i);
            let want = Sectors::covering(in_page, len, page_size);
            let dram = &mut *self.dram;
            let mut page = before;
            let next = page_contents(self.backend, dram, lpn, (&mut page, want), status, true);
            if page != before {
                self.pages.set(dram, me, i, page);
            }
            let slot = match next {
                Next::Ready(slot) => slot,
                Next::Moved => {
                    progress = true;
                    continue;
                }
                Next::Wait => {
                    starved |= before == PageIo::Todo;
                    waits_on_loads &= matches!(before, PageIo::Waiting(_) | PageIo::Done);
                    continue;
                }
            };
            let src = self.backend.slot(slot).sub(in_page, len);
            if dma_out(
                &mut self.backend.work,
                host,
                id,
                in_host,
                src.bytes(&*self.dram),
            )
            .is_err()
            {
                *status = Status::DATA_TRANSFER_ERROR;
            }
            self.backend.buffer.unpin(&mut *self.dram, slot);
            self.pages.set(self.dram, me, i, PageIo::Done);
            progress = true;
        }
        (progress, waits_on_loads)
    }

    /// Moves each page of a Write on as far as it can go: old contents read where the write
    /// covers a page in part, host data (or zeros) into a pinned slot, a program started on a
    /// freshly allocated flash page. Returns whether anything moved.
    pub(super) fn step_write<H: HostInterface>(
        &mut self,
        host: &mut H,
        id: CommandId,
        me: usize,
        t: &Transfer,
        status: &mut Status,
    ) -> bool {
        let mut progress = false;
        let ps = self.backend.geometry.page_size_bytes as usize;
        for i in 0..t.page_count {
            let lpn = t.first_lpn + i as u32;
            let (in_page, in_host, len) = self.page_span(t, i);
            let dram = &mut *self.dram;
            let pages = self.pages;
            let next = match pages.get(dram, me, i) {
                // The command has failed (or was abandoned): a page it has not touched yet is
                // left as it is.
                PageIo::Todo if !status.is_success() => {
                    pages.set(dram, me, i, PageIo::Done);
                    progress = true;
                    continue;
                }
                // A deallocating Write Zeroes unmaps the pages it covers whole, unless a
                // checkpoint is copying the mapping out (then it waits for the copy).
                PageIo::Todo if len == ps && t.source == Source::Zeroes { deallocate: true } => {
                    if !self.backend.checkpoint.tables_frozen()
                        && self.backend.unmap_logged(dram, lpn)
                    {
                        pages.set(dram, me, i, PageIo::Done);
                        progress = true;
                    }
                    continue;
                }
                // A whole-page write needs no old data: any slot for the page will do. A new
                // slot stays "loading" until the host data is in, so readers wait for it.
                PageIo::Todo if len == ps && status.is_success() => {
                    match self.backend.buffer.acquire_for_overwrite(dram, lpn) {
                        Acquire::Valid(s) | Acquire::Miss(s, _) => Next::Ready(s),
                        Acquire::Loading(s) => {
                            pages.set(dram, me, i, PageIo::Waiting(s));
                            Next::Moved
                        }
                        Acquire::Failed(s) => {
                            // Forget the failed copy; the next poll gets a fresh slot.
                            self.backend.buffer.unpin(dram, s);
                            self.backend.buffer.detach_slot(dram, s);
                            Next::Moved
                        }
                        Acquire::Full => Next::Wait,
                    }
                }
                PageIo::Owned(s) => Next::Ready(s),
                before => {
                    let mut page = before;
                    let need_old = len < ps;
                    let next = page_contents(
                        self.backend,
                        dram,
                        lpn,
                        (&mut page, Sectors::ALL),
                        status,
                        need_old,
                    );
                    if page != before {
                        pages.set(dram, me, i, page);
                    }
                    next
                }
            };
            let slot = match next {
                Next::Ready(slot) => slot,
                Next::Moved => {
                    progress = true;
                    continue;
                }
                Next::Wait => continue,
            };
            // The slot is pinned and holds the old page (or will be overwritten whole).
            if self.backend.ftl.is_full() {
                self.backend.buffer.abandon(dram, slot);
                *status = Status::CAPACITY_EXCEEDED;
                pages.set(dram, me, i, PageIo::Done);
                progress = true;
                continue;
            }
            let ppn = match self.backend.queue.has_room(1) {
                true => self.backend.ftl.allocate(dram, false),
                false => None,
            };
            let Some(ppn) = ppn else {
                // Wait for GC or queue space; keep the slot pinned so the old data stays.
                pages.set(dram, me, i, PageIo::Owned(slot));
                continue;
            };
            let window = self.backend.slot(slot).sub(in_page, len);
            let filled = match t.source {
                Source::Host => dma_in(
                    &mut self.backend.work,
                    host,
                    id,
                    in_host,
                    window.bytes_mut(dram),
                ),
                Source::Zeroes { .. } => {
                    self.backend.work.bytes_copied += len as u64;
                    window.bytes_mut(dram).fill(0);
                    Ok(())
                }
            };
            if filled.is_err() {
                // The slot may now hold half-copied data: drop it. The allocated page is
                // still programmed (programs of a block must stay in order), with whatever
                // the slot holds, and then left unmapped.
                *status = Status::DATA_TRANSFER_ERROR;
            }
            self.backend.buffer.filled(dram, slot, Sectors::ALL);
            if !status.is_success() {
                self.backend.buffer.detach_slot(dram, slot);
            }
            // The spare says whose data this is; data the host never fully sent is nobody's.
            let owner = status.is_success().then_some(lpn);
            let spare = self.backend.buffer.spare_region(slot);
            self.backend.ftl.stamp(spare.bytes_mut(dram), owner, None);
            let op = crate::hal::FlashOp::Program {
                ppn,
                dram_offset_bytes: self.backend.slot(slot).start,
            };
            self.backend
                .queue
                .push(Tag::new(TagKind::Program, me as u16, i as u16), op);
            pages.set(dram, me, i, PageIo::Programming(slot, ppn));
            progress = true;
        }
        progress
    }
}

/// Copies from the host, counting the bytes.
pub(super) fn dma_in<H: HostInterface>(
    work: &mut WorkCounters,
    host: &mut H,
    id: CommandId,
    offset: usize,
    dst: &mut [u8],
) -> Result<(), DmaError> {
    work.bytes_copied += dst.len() as u64;
    host.note_work(work);
    host.dma_from_host(id, offset, dst)
}

/// Copies to the host, counting the bytes.
pub(super) fn dma_out<H: HostInterface>(
    work: &mut WorkCounters,
    host: &mut H,
    id: CommandId,
    offset: usize,
    src: &[u8],
) -> Result<(), DmaError> {
    work.bytes_copied += src.len() as u64;
    host.note_work(work);
    host.dma_to_host(id, offset, src)
}

/// Zero-fills bytes `[from, to)` of command `cmd`'s host buffer.
pub(super) fn zero<H: HostInterface>(
    host: &mut H,
    cmd: CommandId,
    from: usize,
    to: usize,
) -> Result<(), DmaError> {
    const ZEROS: [u8; 512] = [0; 512];
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZEROS.len());
        host.dma_to_host(cmd, at, &ZEROS[..n])?;
        at += n;
    }
    Ok(())
}

/// What a page of a Read or Write needs next.
enum Next {
    /// Its slot is pinned and valid: use it.
    Ready(u32),
    /// Something changed (a read started, the page ended); look again next poll.
    Moved,
    /// Nothing to do until a flash completion or a free slot.
    Wait,
}

/// Brings the sectors `want` of logical page `lpn` of a transfer into the page buffer with
/// their current contents: starts the read when the page is still to do, waits while it loads
/// (and asks again if the read that landed was another reader's), and hands back the pinned
/// slot once they are valid. A failed read ends the page with Unrecovered Read Error, unless
/// `need_old` is false (the caller overwrites the whole page), in which case the slot is handed
/// back all the same. A page of a command that already failed is not started.
fn page_contents(
    backend: &mut Backend,
    dram: &mut [u8],
    lpn: u32,
    (page, want): (&mut PageIo, Sectors),
    status: &mut Status,
    need_old: bool,
) -> Next {
    if let PageIo::Waiting(s) = *page
        && need_old
        && !backend.buffer.is_loading(dram, s)
        && !backend.buffer.is_failed(dram, s)
        && !backend.buffer.has(dram, s, want)
    {
        // The read that landed brought someone else's sectors: ask for ours.
        backend.buffer.unpin(dram, s);
        *page = PageIo::Todo;
    }
    let failed = match *page {
        PageIo::Todo if !status.is_success() => {
            *page = PageIo::Done;
            return Next::Moved;
        }
        PageIo::Todo => match backend.request_page(dram, lpn, want) {
            Acquire::Valid(s) => return Next::Ready(s),
            Acquire::Loading(s) => {
                *page = PageIo::Waiting(s);
                return Next::Moved;
            }
            Acquire::Failed(s) | Acquire::Miss(s, _) => s,
            Acquire::Full => return Next::Wait,
        },
        PageIo::Waiting(s) if backend.buffer.is_loading(dram, s) => return Next::Wait,
        PageIo::Waiting(s) if backend.buffer.is_failed(dram, s) && need_old => s,
        PageIo::Waiting(s) | PageIo::Owned(s) => return Next::Ready(s),
        PageIo::Programming(..) | PageIo::Done => return Next::Wait,
    };
    backend.buffer.unpin(dram, failed);
    *status = Status::UNRECOVERED_READ_ERROR;
    *page = PageIo::Done;
    Next::Moved
}
