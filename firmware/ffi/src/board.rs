//! The firmware's two interfaces implemented over the C board: [`BoardFlash`] (the flash HAL, over
//! the board's `submit` callback and the completions it reports) and [`BoardHost`] (the host
//! interface, over the data buffers of the commands in flight).

use core::ffi::c_void;

use heapless::Deque;
use sagessd_abi::nvme::CompletionEntry;
use sagessd_firmware::MAX_COMMANDS;
use sagessd_firmware::hal::{Flash, FlashCompletion, FlashError, FlashOp, Geometry};
use sagessd_firmware::host::{CommandId, DmaError, HostInterface};
use zerocopy::IntoBytes;

use crate::global::Global;
use crate::types::{
    FLASH_ERASE, FLASH_PROGRAM, FLASH_QUEUE_DEPTH, FLASH_READ, FLASH_SUBMIT_BUSY,
    FLASH_SUBMIT_STARTED, FlashSubmitFn, SagessdCompletion,
};

/// Flash operations started by the board and not yet handed to the firmware.
#[derive(Debug)]
pub(crate) struct FlashReports {
    /// Completions reported by `sagessd_fw_flash_complete`, oldest first.
    pub queue: Deque<FlashCompletion, { FLASH_QUEUE_DEPTH as usize }>,
    /// Operations started whose completion has not been reported yet.
    pub unreported: u32,
}

impl FlashReports {
    /// No operation in flight.
    pub const fn new() -> Self {
        Self {
            queue: Deque::new(),
            unreported: 0,
        }
    }

    /// Operations started and not yet collected by the firmware.
    fn outstanding(&self) -> usize {
        self.unreported as usize + self.queue.len()
    }
}

/// The flash reports: written by `sagessd_fw_flash_complete`, read by [`BoardFlash::poll`]. Kept
/// apart from the firmware so that a report never needs the firmware's state.
pub(crate) static FLASH_REPORTS: Global<FlashReports> = Global::new(FlashReports::new());

/// The flash HAL over the board's callbacks.
#[derive(Debug)]
pub(crate) struct BoardFlash {
    /// The board's `submit`.
    pub submit: FlashSubmitFn,
    /// Its context pointer.
    pub ctx: *mut c_void,
    /// The array's geometry.
    pub geometry: Geometry,
    /// The DRAM arena as the board handed it over (the pointer `dram_page` is derived from, so
    /// that the board's DMA writes through a pointer with the arena's own provenance).
    pub arena: *mut u8,
    /// Its length in bytes.
    pub arena_len: usize,
}

impl Flash for BoardFlash {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn submit(&mut self, tag: u32, op: FlashOp, dram: &[u8]) -> Result<(), FlashError> {
        // A page's window: its data, then its spare area.
        let page = self.geometry.window_bytes();
        let window = |offset: usize| -> Result<*mut u8, FlashError> {
            match offset.checked_add(page) {
                Some(end) if end <= self.arena_len && end <= dram.len() => {
                    // `offset + page <= arena_len`, so the result stays inside the arena (and
                    // `wrapping_add` needs no unsafe).
                    Ok(self.arena.wrapping_add(offset))
                }
                _ => Err(FlashError::OutOfRange),
            }
        };
        let (kind, address, dram_page, sectors) = match op {
            // A board may read whole pages (its controller decodes a page's codewords together),
            // which the HAL allows: a read may bring in more than the sectors it names. It is
            // told them all the same, so that it maintains its caches for those alone.
            FlashOp::Read {
                ppn,
                dram_offset_bytes,
                sectors,
            } => (
                FLASH_READ,
                ppn.0,
                window(dram_offset_bytes)?,
                u32::from(sectors.0),
            ),
            FlashOp::Program {
                ppn,
                dram_offset_bytes,
            } => (FLASH_PROGRAM, ppn.0, window(dram_offset_bytes)?, 0),
            FlashOp::Erase { block } => (FLASH_ERASE, block.0, core::ptr::null_mut(), 0),
        };
        let in_range = match op {
            FlashOp::Erase { .. } => address < self.geometry.block_count(),
            _ => u64::from(address) < self.geometry.page_count(),
        };
        if !in_range {
            return Err(FlashError::OutOfRange);
        }
        // Reserve the report before calling out, so that (a) the completion queue can never
        // overflow and (b) a board that reports from inside `submit` (which the header forbids)
        // still finds the operation counted.
        let reserved = FLASH_REPORTS.with(|r| {
            if r.outstanding() >= FLASH_QUEUE_DEPTH as usize {
                false
            } else {
                r.unreported += 1;
                true
            }
        });
        if reserved != Some(true) {
            return Err(FlashError::Busy);
        }
        // SAFETY: `submit` is the board's non-null callback, called with the context it gave
        // and, for reads and programs, a pointer to a page window (`page_size_bytes` + spare)
        // inside the arena
        // (checked above); the arena stays valid for the library's life. The header's contract
        // is that `submit` only starts the operation and returns.
        let rc = unsafe { (self.submit)(self.ctx, tag, kind, address, dram_page, sectors) };
        if rc == FLASH_SUBMIT_STARTED {
            return Ok(());
        }
        // Not started: give the reservation back. `with` can only fail if the callback is still
        // running, which it is not.
        let _ = FLASH_REPORTS.with(|r| r.unreported = r.unreported.saturating_sub(1));
        match rc {
            FLASH_SUBMIT_BUSY => Err(FlashError::Busy),
            _ => Err(FlashError::OutOfRange),
        }
    }

    fn poll(&mut self, _dram: &mut [u8]) -> Option<FlashCompletion> {
        // The board has already moved a read's data into the arena before reporting it.
        FLASH_REPORTS.with(|r| r.queue.pop_front()).flatten()
    }
}

/// A command in flight: its id and data buffer.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    id: CommandId,
    data: *mut u8,
    len: usize,
}

/// The host interface over the data buffers of the commands in flight.
#[derive(Debug)]
pub(crate) struct BoardHost {
    /// Whether the library is initialised.
    pub ready: bool,
    /// The arena's address range, which no data buffer may overlap.
    pub arena: (usize, usize),
    /// Parked commands, by (sq_id, cid).
    table: [Option<InFlight>; MAX_COMMANDS],
    /// The command `sagessd_fw_submit` is handing in right now.
    current: Option<InFlight>,
    /// Its completion, if the firmware completed it inside `submit`.
    immediate: Option<CompletionEntry>,
    /// Completions of parked commands, for `sagessd_fw_next_completion`.
    completions: Deque<SagessdCompletion, MAX_COMMANDS>,
}

/// The host side: command buffers and completions. Locked after the firmware when both are
/// needed (`submit`, `poll`), alone by `sagessd_fw_next_completion`.
pub(crate) static HOST: Global<BoardHost> = Global::new(BoardHost::new());

impl BoardHost {
    /// Nothing in flight, not initialised.
    pub const fn new() -> Self {
        Self {
            ready: false,
            arena: (0, 0),
            table: [None; MAX_COMMANDS],
            current: None,
            immediate: None,
            completions: Deque::new(),
        }
    }

    /// Whether another command may be handed in: every parked command and every completion not
    /// yet taken holds one of the [`MAX_COMMANDS`] places, so completions never overflow.
    pub fn has_room(&self) -> bool {
        self.table.iter().flatten().count() + self.completions.len() < MAX_COMMANDS
    }

    /// Whether no command is parked and no completion waits to be taken.
    pub fn is_empty(&self) -> bool {
        self.table.iter().all(Option::is_none) && self.completions.is_empty()
    }

    /// Starts handing in command `id` with data buffer `data` of `len` bytes.
    pub fn begin(&mut self, id: CommandId, data: *mut u8, len: usize) {
        self.current = Some(InFlight { id, data, len });
        self.immediate = None;
    }

    /// Ends handing in the current command: its completion if the firmware completed it, else
    /// it is parked (when `parked`) until the firmware completes it from `poll`.
    pub fn end(&mut self, parked: bool) -> Option<CompletionEntry> {
        let current = self.current.take();
        if let Some(cqe) = self.immediate.take() {
            return Some(cqe);
        }
        if let (true, Some(c)) = (parked, current)
            && let Some(free) = self.table.iter_mut().find(|e| e.is_none())
        {
            *free = Some(c);
        }
        None
    }

    /// Forgets every command and every completion not yet taken (a controller reset): the
    /// buffers are the board's again, and the ids may be reused.
    pub fn abandon(&mut self) {
        self.table = [None; MAX_COMMANDS];
        self.current = None;
        self.immediate = None;
        self.completions.clear();
    }

    /// Takes the oldest completion of a parked command.
    pub fn next_completion(&mut self) -> Option<SagessdCompletion> {
        self.completions.pop_front()
    }

    /// The buffer of command `id`: the one being handed in, else a parked one.
    fn buffer(&self, id: CommandId) -> Option<InFlight> {
        self.current
            .filter(|c| c.id == id)
            .or_else(|| self.table.iter().flatten().find(|c| c.id == id).copied())
    }

    /// The address `offset..offset + n` of command `id`'s buffer, if it lies inside it.
    fn window(&self, id: CommandId, offset: usize, n: usize) -> Result<*mut u8, DmaError> {
        let b = self.buffer(id).ok_or(DmaError)?;
        match offset.checked_add(n) {
            Some(end) if end <= b.len => Ok(b.data.wrapping_add(offset)),
            _ => Err(DmaError),
        }
    }
}

impl HostInterface for BoardHost {
    fn dma_from_host(
        &mut self,
        cmd: CommandId,
        offset_bytes: usize,
        dst: &mut [u8],
    ) -> Result<(), DmaError> {
        if dst.is_empty() {
            return Ok(());
        }
        let src = self.window(cmd, offset_bytes, dst.len())?;
        // SAFETY: `src..src + dst.len()` lies inside the command's data buffer, which the board
        // guaranteed valid until the command completes (it has not: it is being handed in or is
        // parked). `sagessd_fw_submit` checked that the buffer does not overlap the arena, where
        // `dst` lives.
        unsafe { core::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn dma_to_host(
        &mut self,
        cmd: CommandId,
        offset_bytes: usize,
        src: &[u8],
    ) -> Result<(), DmaError> {
        if src.is_empty() {
            return Ok(());
        }
        let dst = self.window(cmd, offset_bytes, src.len())?;
        // SAFETY: as in `dma_from_host`: `dst..dst + src.len()` lies inside the command's live,
        // writable data buffer, which does not overlap the arena `src` is read from.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    fn complete(&mut self, cmd: CommandId, cqe: CompletionEntry) {
        if self.current.is_some_and(|c| c.id == cmd) {
            self.immediate = Some(cqe);
            return;
        }
        if let Some(e) = self
            .table
            .iter_mut()
            .find(|e| e.is_some_and(|c| c.id == cmd))
        {
            *e = None;
        }
        let mut out = SagessdCompletion {
            sq_id: cmd.sq_id,
            cid: cmd.cid,
            cqe: [0; 16],
        };
        out.cqe.copy_from_slice(cqe.as_bytes());
        // Cannot fail: `has_room` keeps parked commands plus completions at most MAX_COMMANDS.
        let _ = self.completions.push_back(out);
    }
}
