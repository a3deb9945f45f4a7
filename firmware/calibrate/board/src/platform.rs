//! The AArch64 image's platform layer on QEMU's virt (Cortex-A53, EL1): start-up, the PL011
//! UART, Arm semihosting to exit.
//!
//! Start-up (`_start`, the ELF's entry) sets the stack, lets EL1 use the FP/SIMD registers
//! (the compiler's memcpy does), zeroes `.bss`, and turns the MMU and caches on with an
//! identity map of 1 GiB blocks: the first GiB (the UART's) as Device memory, the second (the
//! RAM QEMU gives, `-m 1024M` from 0x4000_0000) as Normal write-back memory, so that the code
//! runs as firmware on an A53 does, unaligned accesses allowed. QEMU models no caches (the
//! profiling plugin does), but with the MMU off every access would be to Device memory, which
//! must be aligned.

core::arch::global_asm!(
    r#"
    .section .text.boot, "ax"
    .global _start
_start:
    ldr     x0, =__stack_top
    mov     sp, x0
    // CPACR_EL1.FPEN = 0b11: no trap on FP/SIMD at EL1 or EL0.
    mov     x0, #(3 << 20)
    msr     cpacr_el1, x0
    isb
    // Zero .bss.
    ldr     x0, =__bss_start
    ldr     x1, =__bss_end
1:  cmp     x0, x1
    b.hs    2f
    str     xzr, [x0], #8
    b       1b
2:
    // MAIR_EL1: attribute 0 Device-nGnRnE, attribute 1 Normal write-back read/write-allocate.
    mov     x0, #0xff00
    msr     mair_el1, x0
    // The level-1 table: 1 GiB blocks, access flag set; entry 1 Normal, inner shareable.
    ldr     x1, =__page_table
    mov     x0, #0x401
    str     x0, [x1]
    ldr     x0, =0x40000705
    str     x0, [x1, #8]
    msr     ttbr0_el1, x1
    // TCR_EL1: T0SZ 25 (39-bit addresses, a level-1 start), write-back walks, inner
    // shareable, 4 KiB granule, no TTBR1 walks (EPD1), 36-bit physical addresses.
    ldr     x0, =((25) | (1 << 8) | (1 << 10) | (3 << 12) | (1 << 23) | (1 << 32))
    msr     tcr_el1, x0
    isb
    // SCTLR_EL1: MMU, data and instruction caches on; alignment checks off.
    mrs     x0, sctlr_el1
    orr     x0, x0, #(1 << 0)
    orr     x0, x0, #(1 << 2)
    orr     x0, x0, #(1 << 12)
    bic     x0, x0, #(1 << 1)
    msr     sctlr_el1, x0
    isb
    bl      main
    bl      platform_exit
3:  wfe
    b       3b
"#
);

/// The PL011's data register (QEMU virt's UART0).
const UART_DR: usize = 0x0900_0000;

/// Semihosting's SYS_EXIT.
const SYS_EXIT: u64 = 0x18;
/// ADP_Stopped_ApplicationExit: QEMU exits with the status that follows it.
const ADP_STOPPED_APPLICATION_EXIT: u64 = 0x20026;

/// The UART needs no set-up on QEMU.
#[unsafe(no_mangle)]
pub extern "C" fn platform_init() {}

/// Writes one byte to the UART.
#[unsafe(no_mangle)]
pub extern "C" fn platform_putc(c: core::ffi::c_char) {
    // SAFETY: the PL011's data register, mapped as Device memory by the start-up code.
    unsafe { (UART_DR as *mut u32).write_volatile(u32::from(c as u8)) };
}

/// Ends the run: QEMU exits with `code` (semihosting must be enabled).
#[unsafe(no_mangle)]
pub extern "C" fn platform_exit(code: i32) -> ! {
    let block = [ADP_STOPPED_APPLICATION_EXIT, code as u64];
    // SAFETY: the AArch64 semihosting call (HLT #0xF000) with SYS_EXIT and its parameter
    // block; QEMU ends the process, and without semihosting the loop below halts.
    unsafe {
        core::arch::asm!(
            "hlt #0xf000",
            in("x0") SYS_EXIT,
            in("x1") block.as_ptr(),
            options(nostack)
        );
    }
    loop {
        core::hint::spin_loop();
    }
}
