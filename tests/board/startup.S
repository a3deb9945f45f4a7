/* Bare-metal start-up for the self-test on QEMU's vexpress-a9 (Cortex-A9, ARM state).
 *
 * QEMU's -kernel loads the ELF image into RAM at its link addresses and starts the CPU at the
 * ELF entry point (_reset) in a privileged mode with the MMU and caches off. We mask interrupts,
 * give the abort/undefined/IRQ/FIQ modes a small stack each (so a fault can still be reported),
 * point VBAR at our vector table, turn on alignment checking (SCTLR.A) so that an unaligned access
 * traps under QEMU as it would on the board (with the MMU off every data access is to
 * strongly-ordered memory, where unaligned accesses fault), enable the VFP, zero .bss, and call
 * main with the stack at the top of a 1 MiB region (vexpress-a9.ld).
 */
    .syntax unified
    .arch   armv7-a
    .fpu    vfpv3                   /* only for the FPEXC write below */
    .arm

    .equ MODE_FIQ, 0x11
    .equ MODE_IRQ, 0x12
    .equ MODE_SVC, 0x13
    .equ MODE_ABT, 0x17
    .equ MODE_UND, 0x1B

    .equ STACK_PAINT, 0x5A5A5A5A    /* platform_vexpress.c counts the words still holding it */

    .equ FAULT_UNDEF, 1
    .equ FAULT_SVC,   2
    .equ FAULT_PABT,  3
    .equ FAULT_DABT,  4
    .equ FAULT_IRQ,   5
    .equ FAULT_FIQ,   6

/* The exception vector table; VBAR requires 32-byte alignment. */
    .section .vectors, "ax", %progbits
    .align  5
    .global _vectors
_vectors:
    ldr     pc, addr_reset
    ldr     pc, addr_undef
    ldr     pc, addr_svc
    ldr     pc, addr_pabt
    ldr     pc, addr_dabt
    nop                             /* reserved */
    ldr     pc, addr_irq
    ldr     pc, addr_fiq
addr_reset: .word _reset
addr_undef: .word undef_handler
addr_svc:   .word svc_handler
addr_pabt:  .word pabt_handler
addr_dabt:  .word dabt_handler
addr_irq:   .word irq_handler
addr_fiq:   .word fiq_handler

    .text
    .global _reset
    .type   _reset, %function
_reset:
    cpsid   if
    /* One small stack per exception mode we may enter, then the main stack in SVC mode. */
    cps     #MODE_ABT
    ldr     sp, =__abt_stack_top
    cps     #MODE_UND
    ldr     sp, =__und_stack_top
    cps     #MODE_IRQ
    ldr     sp, =__irq_stack_top
    cps     #MODE_FIQ
    ldr     sp, =__fiq_stack_top
    cps     #MODE_SVC
    ldr     sp, =__stack_top

    /* Exceptions go to our table (VBAR), not to the high or low fixed vectors. */
    ldr     r0, =_vectors
    mcr     p15, 0, r0, c12, c0, 0
    mrc     p15, 0, r0, c1, c0, 0   /* SCTLR */
    bic     r0, r0, #(1 << 13)      /* V = 0: use VBAR */
    orr     r0, r0, #(1 << 1)       /* A = 1: fault on every unaligned access */
    mcr     p15, 0, r0, c1, c0, 0
    isb

    /* Let C code built for the hard-float ABI (run.sh's third build) use the VFP: CP10/CP11 full
     * access in CPACR, then FPEXC.EN. The soft-float builds never execute a VFP instruction. */
    mrc     p15, 0, r0, c1, c0, 2
    orr     r0, r0, #(0xF << 20)
    mcr     p15, 0, r0, c1, c0, 2
    isb
    mov     r0, #(1 << 30)
    vmsr    fpexc, r0

    /* Paint the main stack (nothing is on it yet) so platform_exit can report its high-water mark. */
    ldr     r0, =__stack_bottom
    ldr     r1, =__stack_top
    ldr     r2, =STACK_PAINT
    mov     r3, r2
0:  cmp     r0, r1
    strdlo  r2, r3, [r0], #8
    blo     0b

    /* Zero .bss and the DDR section (each 8-byte aligned at both ends by the linker script). */
    ldr     r0, =__bss_start
    ldr     r1, =__bss_end
    bl      zero_range
    ldr     r0, =__ddr_start
    ldr     r1, =__ddr_end
    bl      zero_range

    bl      main
    bl      platform_exit           /* r0 = main's return value; never returns */
2:  b       2b
    .size   _reset, . - _reset

/* Zeroes [r0, r1), both 8-byte aligned; clobbers r0, r2, r3. */
    .type   zero_range, %function
zero_range:
    mov     r2, #0
    mov     r3, #0
1:  cmp     r0, r1
    strdlo  r2, r3, [r0], #8
    blo     1b
    bx      lr
    .size   zero_range, . - zero_range

/* Every unexpected exception reports itself through platform_fault(kind, lr, status, address),
 * which prints a FAIL line and stops. An SVC lands here only when QEMU did not intercept the
 * semihosting call (no -semihosting); platform_fault then halts in a loop. */
    .type   undef_handler, %function
undef_handler:
    mov     r0, #FAULT_UNDEF
    mov     r1, lr
    mov     r2, #0
    mov     r3, #0
    b       platform_fault

    .type   svc_handler, %function
svc_handler:
    mov     r0, #FAULT_SVC
    mov     r1, lr
    mov     r2, #0
    mov     r3, #0
    b       platform_fault

    .type   pabt_handler, %function
pabt_handler:
    mov     r0, #FAULT_PABT
    mov     r1, lr
    mrc     p15, 0, r2, c5, c0, 1   /* IFSR */
    mrc     p15, 0, r3, c6, c0, 2   /* IFAR */
    b       platform_fault

    .type   dabt_handler, %function
dabt_handler:
    mov     r0, #FAULT_DABT
    mov     r1, lr
    mrc     p15, 0, r2, c5, c0, 0   /* DFSR */
    mrc     p15, 0, r3, c6, c0, 0   /* DFAR */
    b       platform_fault

    .type   irq_handler, %function
irq_handler:
    mov     r0, #FAULT_IRQ
    mov     r1, lr
    mov     r2, #0
    mov     r3, #0
    b       platform_fault

    .type   fiq_handler, %function
fiq_handler:
    mov     r0, #FAULT_FIQ
    mov     r1, lr
    mov     r2, #0
    mov     r3, #0
    b       platform_fault

/* Semihosting call (ARM state): r0 = operation, r1 = parameter; returns r0. */
    .global semihosting_call
    .type   semihosting_call, %function
semihosting_call:
    svc     0x123456
    bx      lr
    .size   semihosting_call, . - semihosting_call
