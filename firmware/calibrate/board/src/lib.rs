//! The calibration image's entry point under QEMU: reads the plan the host loaded at its
//! board's `plan_address`, gives the RAM between the image and the marker page to the
//! workloads, runs them with marker stores at `marks_address` for the profiling plugin, and
//! prints their reports on the UART. Built only for `target_os = "none"`, for two boards
//! ([`sagessd_calibrate::Board`]):
//!
//! * `armv7a-none-eabi`, QEMU's vexpress-a9 (Cortex-A9, MMU and caches off): `build.sh` links
//!   the static library with `tests/board/startup.S`, `platform_vexpress.c` and
//!   `vexpress-a9.ld`;
//! * `aarch64-unknown-none`, QEMU's virt (Cortex-A53 in AArch64): the library carries its own
//!   start-up code ([`platform`]), and `build.sh` links it with `rust-lld` and
//!   `aarch64-virt.ld`.
#![cfg_attr(target_os = "none", no_std)]

#[cfg(all(target_os = "none", target_arch = "aarch64"))]
mod platform;

#[cfg(target_os = "none")]
mod image {
    use core::fmt::Write;

    use sagessd_calibrate::{HOST_BUFFER_BYTES, IMAGE_BOARD, Marks, Plan, workloads};

    unsafe extern "C" {
        fn platform_init();
        fn platform_putc(c: core::ffi::c_char);
        fn platform_exit(code: i32) -> !;
        /// End of the image's sections (its linker script): free RAM starts after it.
        static __ddr_end: u8;
    }

    /// The UART, as `core::fmt` output.
    struct Uart;

    impl Write for Uart {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            for b in s.bytes() {
                // SAFETY: platform_putc writes one byte to the UART's data register.
                unsafe { platform_putc(b as core::ffi::c_char) };
            }
            Ok(())
        }
    }

    /// Marker stores the profiling plugin watches (it sees the address, not the value).
    #[derive(Clone, Copy, Debug)]
    struct BoardMarks;

    impl BoardMarks {
        fn store(word: usize) {
            let at = (IMAGE_BOARD.marks_address() as usize + 4 * word) as *mut u32;
            // SAFETY: the marker page lies in RAM below the plan, outside every other use
            // (main hands out RAM only up to the marker page).
            unsafe { at.write_volatile(1) };
        }
    }

    impl Marks for BoardMarks {
        #[inline(always)]
        fn enter(self) {
            Self::store(0);
        }
        #[inline(always)]
        fn leave(self) {
            Self::store(1);
        }
        #[inline(always)]
        fn segment(self) {
            Self::store(2);
        }
    }

    /// The image's `main`, called by the start-up code.
    #[unsafe(no_mangle)]
    pub extern "C" fn main() -> i32 {
        // SAFETY: sets up the UART; called once, first.
        unsafe { platform_init() };
        let mut out = Uart;
        let _ = writeln!(out, "calibrate start");
        // SAFETY: the host loaded the plan there (QEMU's loader) before the CPU started; the
        // page is RAM that nothing else uses.
        let plan_bytes = unsafe {
            core::slice::from_raw_parts(IMAGE_BOARD.plan_address() as usize as *const u8, 64)
        };
        let plan = match Plan::decode(plan_bytes) {
            Ok(plan) => plan,
            Err(e) => {
                let _ = writeln!(out, "calibrate FAIL plan {e:?}");
                return 1;
            }
        };
        // `__ddr_end` is a linker symbol: only its address is taken.
        let start = core::ptr::addr_of!(__ddr_end) as usize;
        // On a 1 MiB boundary, whatever the image's size: where the arena and the host buffer
        // sit modulo the modelled caches' way size (64 KiB at most) would otherwise move with
        // every change to the code, and the cache misses of the workloads that copy pages with
        // it (a Newport-class L2 flipped a page lookup between 455 and 625 cycles). Then the
        // plan's offset: the host runs several placements and averages them.
        let start = start.next_multiple_of(1 << 20) + plan.arena_offset_bytes as usize;
        let end = IMAGE_BOARD.marks_address() as usize;
        if end <= start {
            let _ = writeln!(out, "calibrate FAIL no RAM after the image");
            return 1;
        }
        // SAFETY: RAM from the end of the image's sections to the marker page belongs to no
        // one else (the start-up code's stacks and sections lie below it); QEMU starts it
        // zero-filled, as the firmware's arena must be.
        let memory = unsafe { core::slice::from_raw_parts_mut(start as *mut u8, end - start) };
        match workloads::run(&plan, memory, HOST_BUFFER_BYTES, BoardMarks, &mut out) {
            Ok(()) => 0,
            Err(e) => {
                let _ = writeln!(out, "calibrate FAIL {e:?}");
                1
            }
        }
    }

    /// A panic is a harness bug: say so and stop with a failure.
    #[panic_handler]
    fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
        let _ = writeln!(Uart, "calibrate FAIL panic {info}");
        // SAFETY: ends the run through semihosting.
        unsafe { platform_exit(1) }
    }
}
