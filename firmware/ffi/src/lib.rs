//! The sagessd firmware as a C-ABI static library (`libsagessd_fw.a`) for OpenSSD-class boards.
//!
//! This crate wraps [`sagessd_firmware::Firmware`] — the same code the emulator runs — behind the
//! C functions declared in `firmware/include/sagessd_fw.h`, so that a board's C firmware (the
//! Cosmos+ OpenSSD's, built with the Xilinx SDK) can hand it NVMe commands and run its flash
//! operations on the board's NAND scheduler:
//!
//! ```plain
//!  board C firmware                          libsagessd_fw.a
//!  ────────────────                          ───────────────
//!  NVMe command fetched ─ sagessd_fw_submit ─► Firmware::submit ─► COMPLETED (CQE) │ PENDING
//!  main loop ──────────── sagessd_fw_poll ───► Firmware::poll ──► flash ops ─► flash.submit(...)
//!  NAND op finished ───── sagessd_fw_flash_complete ─► completion queue ─► (next poll)
//!  post CQEs ──────────── sagessd_fw_next_completion ◄─ completions of PENDING commands
//! ```
//!
//! * One firmware instance per library, in `.bss` (a `static` slot of uninitialised memory,
//!   written once by `sagessd_fw_init`, behind a re-entrancy flag). The board is
//!   single-threaded: every function must be called from the firmware's one thread (its main
//!   loop), never from an interrupt handler; a call made from inside a flash `submit` callback
//!   is refused with `SAGESSD_ERR_STATE` rather than corrupting state.
//! * No heap: every queue is bounded ([`types::MAX_COMMANDS`] commands including completions
//!   not yet taken, [`types::FLASH_QUEUE_DEPTH`] flash operations in flight).
//! * Nothing panics across the boundary: every pointer is checked for null, every length against
//!   the command and the arena, and every invalid command field becomes an NVMe status.
//!
//! Built for `armv7a-none-eabi` (Cortex-A9) and `thumbv7em-none-eabihf` it is `no_std` with its
//! own panic handler (an undefined instruction, which traps into the board's abort handler); on
//! the host it is an ordinary std static library, used by the C test programs.
#![cfg_attr(target_os = "none", no_std)]

mod board;
mod global;
pub mod types;

#[cfg(test)]
mod tests;

use core::mem::{MaybeUninit, size_of};

use sagessd_abi::nvme::SubmissionEntry;
use sagessd_firmware::hal::Geometry;
use sagessd_firmware::host::CommandId;
use sagessd_firmware::{ConfigError, Firmware};
use zerocopy::FromBytes;

use crate::board::{BoardFlash, BoardHost, FLASH_REPORTS, FlashReports, HOST};
use crate::global::Global;
use crate::types::{
    ABI_VERSION, COMPLETED, DRAM_ALIGN, ERR_ARGUMENT, ERR_BUSY, ERR_QUEUE_FULL, ERR_STATE,
    FLASH_MEDIA, FLASH_OK, OK, PENDING, SQE_BYTES, SagessdCompletion, SagessdConfig,
    SagessdFlashOps, SagessdGeometry, config_error_code,
};

/// The firmware as the library runs it: the board's flash, and the arena as a `'static` slice.
type Fw = Firmware<BoardFlash, &'static mut [u8]>;

/// The firmware instance, written once by `sagessd_fw_init`.
///
/// It lives in `.bss` (about 35 KiB on the Cortex-A9; the per-page state of parked commands
/// lives in the DRAM arena; `scripts/footprint.sh` prints it). An `Option<Firmware>` would go to
/// `.data` instead (its `None` is not all zeros) and cost that much boot image, so the slot is
/// uninitialised memory plus a flag.
#[derive(Debug)]
struct FirmwareSlot {
    /// What `Firmware::new` returned: `Ok(firmware)` if `running`.
    result: MaybeUninit<Result<Fw, ConfigError>>,
    /// Whether `result` is initialised and holds the running firmware.
    running: bool,
}

impl FirmwareSlot {
    /// The running firmware, if `sagessd_fw_init` succeeded.
    fn firmware(&mut self) -> Option<&mut Fw> {
        if !self.running {
            return None;
        }
        // SAFETY: `running` is set only after `result` was written.
        unsafe { self.result.assume_init_mut() }.as_mut().ok()
    }
}

/// The one firmware instance of the library.
static FIRMWARE: Global<FirmwareSlot> = Global::new(FirmwareSlot {
    result: MaybeUninit::uninit(),
    running: false,
});

/// Panics cannot happen on host input (the firmware turns every bad field into an NVMe status);
/// if one happens anyway on the board, stop at an undefined instruction so that the board's
/// abort handler (or a debugger) sees where.
#[cfg(target_os = "none")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    #[cfg(target_arch = "arm")]
    // SAFETY: `udf` only raises the undefined-instruction exception; it touches no memory.
    unsafe {
        core::arch::asm!("udf #0", options(nomem, nostack));
    }
    loop {
        core::hint::spin_loop();
    }
}

/// Whether `len` bytes from `ptr` form a valid address range (no wrap, at most `isize::MAX`).
fn range_ok(ptr: *const u8, len: usize) -> bool {
    len <= isize::MAX as usize && (ptr as usize).checked_add(len).is_some()
}

/// Reads the configuration and geometry a caller passed; `Err` is the return code.
///
/// # Safety
///
/// Each pointer is null or points to a readable struct of its type.
unsafe fn read_config(
    config: *const SagessdConfig,
    geometry: *const SagessdGeometry,
) -> Result<(sagessd_firmware::FirmwareConfig, Geometry), i32> {
    if config.is_null() || geometry.is_null() {
        return Err(ERR_ARGUMENT);
    }
    // SAFETY: both are non-null and, by the caller's contract, point to readable structs; the
    // unaligned reads make no assumption about the C side's alignment. Every bit pattern is a
    // valid value of these plain-integer structs.
    let (config, geometry) = unsafe { (config.read_unaligned(), geometry.read_unaligned()) };
    let config = config.to_firmware().ok_or(ERR_ARGUMENT)?;
    Ok((config, geometry.into()))
}

/// `SAGESSD_FW_ABI_VERSION` of the library: compare with the header's at start-up.
#[unsafe(no_mangle)]
pub extern "C" fn sagessd_fw_abi_version() -> u32 {
    ABI_VERSION
}

/// Bytes of DRAM arena the firmware needs for `config` on `geometry`, written to `*bytes_out`.
/// Returns `SAGESSD_OK`, `SAGESSD_ERR_ARGUMENT` (a null pointer, a non-zero reserved field) or
/// `SAGESSD_ERR_CONFIG - n`.
///
/// # Safety
///
/// Each pointer is null or valid for its struct (`bytes_out` for writing a `size_t`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sagessd_fw_dram_size(
    config: *const SagessdConfig,
    geometry: *const SagessdGeometry,
    bytes_out: *mut usize,
) -> i32 {
    if bytes_out.is_null() {
        return ERR_ARGUMENT;
    }
    // SAFETY: forwarded from this function's contract.
    let (config, geometry) = match unsafe { read_config(config, geometry) } {
        Ok(v) => v,
        Err(code) => return code,
    };
    match sagessd_firmware::dram_size_bytes(&config, &geometry) {
        Ok(bytes) => {
            // SAFETY: non-null, and by the contract valid for writing a `size_t`.
            unsafe { bytes_out.write_unaligned(bytes) };
            OK
        }
        Err(e) => config_error_code(e),
    }
}

/// Boots the firmware over the DRAM arena `dram[0..dram_len]` and the board's flash HAL. The
/// library zeroes and uses the first `sagessd_fw_dram_size` bytes of the arena; they belong to it
/// from a successful init on. Returns `SAGESSD_OK`, `SAGESSD_ERR_ARGUMENT`, `SAGESSD_ERR_STATE`
/// (initialised already) or `SAGESSD_ERR_CONFIG - n` (nothing is kept; init may be retried).
///
/// # Safety
///
/// `config`, `geometry` and `flash` are null or valid for reading their structs; `dram` is null
/// or valid for reads and writes of `dram_len` bytes for the rest of the program, and nothing but
/// the flash DMA the library asks for touches the part it uses; `flash->submit` follows the
/// header's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sagessd_fw_init(
    config: *const SagessdConfig,
    geometry: *const SagessdGeometry,
    dram: *mut u8,
    dram_len: usize,
    flash: *const SagessdFlashOps,
) -> i32 {
    if dram.is_null() || flash.is_null() {
        return ERR_ARGUMENT;
    }
    // SAFETY: forwarded from this function's contract.
    let (config, geometry) = match unsafe { read_config(config, geometry) } {
        Ok(v) => v,
        Err(code) => return code,
    };
    // SAFETY: non-null, and by the contract valid for reading a `sagessd_flash_ops`, whose
    // fields (a nullable function pointer and a pointer) accept what C stores in them.
    let ops = unsafe { flash.read_unaligned() };
    let Some(submit) = ops.submit else {
        return ERR_ARGUMENT;
    };
    if !(dram as usize).is_multiple_of(DRAM_ALIGN as usize) || !range_ok(dram, dram_len) {
        return ERR_ARGUMENT;
    }
    let need = match sagessd_firmware::dram_size_bytes(&config, &geometry) {
        Ok(n) => n,
        Err(e) => return config_error_code(e),
    };
    if dram_len < need {
        return config_error_code(ConfigError::DramTooSmall);
    }
    FIRMWARE
        .with(|slot| {
            if slot.running {
                return ERR_STATE;
            }
            // SAFETY: `dram` is non-null and, by the contract, valid for reads and writes of
            // `dram_len >= need` bytes for the rest of the program and used by nobody else; the
            // range was checked not to wrap. No firmware runs (checked above) and the slot is
            // held, so no other reference to those bytes exists: an earlier failed init dropped
            // its slice, and the successful one keeps its slice in the slot for good.
            let arena: &'static mut [u8] = unsafe { core::slice::from_raw_parts_mut(dram, need) };
            arena.fill(0);
            let reset_flash = FLASH_REPORTS.with(|r| *r = FlashReports::new());
            let reset_host = HOST.with(|h| *h = BoardHost::new());
            if reset_flash.is_none() || reset_host.is_none() {
                return ERR_STATE;
            }
            let flash = BoardFlash {
                submit,
                ctx: ops.ctx,
                geometry,
                arena: dram,
                arena_len: need,
            };
            // The value is moved into the static once. Rust cannot promise to build it there
            // directly, so `Firmware::new` and the move take about 58 KiB of stack on the
            // Cortex-A9, once, at boot (scripts/footprint.sh measures it); see the header.
            // Writing over an earlier failed init's `Err` leaks nothing (it owns nothing).
            if let Err(e) = slot.result.write(Fw::new(config, flash, arena)) {
                return config_error_code(*e);
            }
            let start = dram as usize;
            let ready = HOST.with(|h| {
                h.ready = true;
                h.arena = (start, start + need);
            });
            if ready.is_none() {
                // Only another thread of a hosted build can hold the host state now; keep
                // nothing, so that the library stays consistently uninitialised.
                // SAFETY: `result` was just written.
                unsafe { slot.result.assume_init_drop() };
                return ERR_STATE;
            }
            slot.running = true;
            OK
        })
        .unwrap_or(ERR_STATE)
}

/// Hands in one NVMe command: `sqe` (64 bytes) from submission queue `sq_id` (0 = admin), with
/// its data buffer `data[0..data_len]` in board memory. Returns `SAGESSD_COMPLETED` (the
/// command completed now; `*cqe_out` holds its completion), `SAGESSD_PENDING` (its completion
/// comes later from `sagessd_fw_next_completion`; `data` must stay valid until then),
/// `SAGESSD_ERR_BUSY` (no command slot free: poll, take completions, submit again),
/// `SAGESSD_ERR_ARGUMENT` or `SAGESSD_ERR_STATE`.
///
/// # Safety
///
/// `sqe` is null or valid for reading 64 bytes; `data` is null (then `data_len` is 0) or valid
/// for reads and writes of `data_len` bytes until the command completes, outside the arena;
/// `cqe_out` is null or valid for writing a `sagessd_completion`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sagessd_fw_submit(
    sq_id: u16,
    sqe: *const u8,
    data: *mut u8,
    data_len: u32,
    cqe_out: *mut SagessdCompletion,
) -> i32 {
    let len = data_len as usize;
    if sqe.is_null() || cqe_out.is_null() || (data.is_null() && len != 0) || !range_ok(data, len) {
        return ERR_ARGUMENT;
    }
    // SAFETY: `sqe` is non-null and by the contract valid for reading 64 bytes; `[u8; 64]` has
    // alignment 1.
    let bytes = unsafe { sqe.cast::<[u8; SQE_BYTES as usize]>().read() };
    let Ok(sqe) = SubmissionEntry::read_from_bytes(&bytes) else {
        return ERR_ARGUMENT;
    };
    let id = CommandId {
        sq_id,
        cid: sqe.cid.get(),
    };
    let outcome = FIRMWARE.with(|fw| {
        let Some(fw) = fw.firmware() else {
            return Err(ERR_STATE);
        };
        HOST.with(|host| {
            let (start, end) = host.arena;
            let data_start = data as usize;
            if len != 0 && data_start < end && start < data_start + len {
                return Err(ERR_ARGUMENT);
            }
            if !host.has_room() {
                return Err(ERR_BUSY);
            }
            host.begin(id, data, len);
            let taken = fw.submit(host, id, &sqe).is_ok();
            match (host.end(taken), taken) {
                (Some(cqe), _) => Ok(Some(cqe)),
                (None, true) => Ok(None),
                (None, false) => Err(ERR_BUSY),
            }
        })
        .unwrap_or(Err(ERR_STATE))
    });
    match outcome {
        Some(Ok(Some(cqe))) => {
            let mut out = SagessdCompletion {
                sq_id,
                cid: id.cid,
                cqe: [0; 16],
            };
            out.cqe.copy_from_slice(zerocopy::IntoBytes::as_bytes(&cqe));
            // SAFETY: non-null, and by the contract valid for writing a `sagessd_completion`.
            unsafe { cqe_out.write_unaligned(out) };
            COMPLETED
        }
        Some(Ok(None)) => PENDING,
        Some(Err(code)) => code,
        None => ERR_STATE,
    }
}

/// Runs the firmware once: collects flash completions, advances parked commands, garbage
/// collection and sampling, and starts queued flash operations. Returns 1 if anything happened
/// (call again), 0 if nothing can move until a flash operation completes, `SAGESSD_ERR_STATE`
/// if not initialised (or called from a callback).
#[unsafe(no_mangle)]
pub extern "C" fn sagessd_fw_poll() -> i32 {
    with_running(|fw, host| i32::from(fw.poll(host)))
}

/// Runs `f` on the running firmware and the host state; `SAGESSD_ERR_STATE` if the library is
/// not initialised (or the call comes from inside a flash callback).
fn with_running(f: impl FnOnce(&mut Fw, &mut BoardHost) -> i32) -> i32 {
    FIRMWARE
        .with(|slot| {
            let Some(fw) = slot.firmware() else {
                return ERR_STATE;
            };
            HOST.with(|host| f(fw, host)).unwrap_or(ERR_STATE)
        })
        .unwrap_or(ERR_STATE)
}

/// Takes the oldest completion of a `SAGESSD_PENDING` command: returns 1 with `*out` filled, 0 if
/// there is none, `SAGESSD_ERR_ARGUMENT` if `out` is null, `SAGESSD_ERR_STATE` if not
/// initialised.
///
/// # Safety
///
/// `out` is null or valid for writing a `sagessd_completion`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sagessd_fw_next_completion(out: *mut SagessdCompletion) -> i32 {
    if out.is_null() {
        return ERR_ARGUMENT;
    }
    let next = HOST.with(|host| match host.ready {
        true => Ok(host.next_completion()),
        false => Err(ERR_STATE),
    });
    match next {
        Some(Ok(Some(c))) => {
            // SAFETY: non-null, and by the contract valid for writing a `sagessd_completion`.
            unsafe { out.write_unaligned(c) };
            1
        }
        Some(Ok(None)) => 0,
        Some(Err(code)) => code,
        None => ERR_STATE,
    }
}

/// The board's report that the flash operation started with `tag` finished with `status`
/// (`SAGESSD_FLASH_OK` or `SAGESSD_FLASH_MEDIA`). Returns `SAGESSD_OK`, `SAGESSD_ERR_ARGUMENT`
/// (unknown status), `SAGESSD_ERR_STATE` (no operation is waiting for a report) or
/// `SAGESSD_ERR_QUEUE_FULL`.
#[unsafe(no_mangle)]
pub extern "C" fn sagessd_fw_flash_complete(tag: u32, status: u32) -> i32 {
    let result = match status {
        FLASH_OK => Ok(()),
        FLASH_MEDIA => Err(sagessd_firmware::hal::FlashError::Media),
        _ => return ERR_ARGUMENT,
    };
    FLASH_REPORTS
        .with(|r| {
            if r.unreported == 0 {
                return ERR_STATE;
            }
            let c = sagessd_firmware::hal::FlashCompletion { tag, result };
            if r.queue.push_back(c).is_err() {
                return ERR_QUEUE_FULL;
            }
            r.unreported -= 1;
            OK
        })
        .unwrap_or(ERR_STATE)
}

/// Abandons every command in flight and every sampling job, for an NVMe controller reset (CC.EN
/// cleared) or a queue teardown: no abandoned command touches its data buffer or produces a
/// completion after this call, completions not yet taken are dropped, and no tag handed out
/// before names a job. Flash operations already started must still be reported with
/// `sagessd_fw_flash_complete`; the FTL finishes them so that each logical page holds its old or
/// its new data. Until that work is done the abandoned commands keep their slots (`submit` may
/// answer `SAGESSD_ERR_BUSY`); `sagessd_fw_idle` says when it is over. The attached graph stays
/// attached. Returns `SAGESSD_OK` or `SAGESSD_ERR_STATE` (not initialised).
#[unsafe(no_mangle)]
pub extern "C" fn sagessd_fw_reset() -> i32 {
    with_running(|fw, host| {
        fw.abandon_commands();
        host.abandon();
        OK
    })
}

/// Whether the library has nothing to do: 1 when no command is in flight, no completion waits to
/// be taken, no sampling job is queued or running, no flash operation is outstanding and garbage
/// collection is not under way; 0 otherwise; `SAGESSD_ERR_STATE` if not initialised. A board
/// shutting down (CC.SHN) polls until it is 1 before it reports shutdown complete.
#[unsafe(no_mangle)]
pub extern "C" fn sagessd_fw_idle() -> i32 {
    // The firmware counts a flash operation until it has collected its report.
    with_running(|fw, host| i32::from(fw.is_idle() && host.is_empty()))
}

/// Bytes of `.bss` the firmware instance takes (for footprint reports and tests).
pub const FIRMWARE_STATE_BYTES: usize = size_of::<FirmwareSlot>();
