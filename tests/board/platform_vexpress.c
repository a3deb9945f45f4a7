/* The self-test's platform layer on QEMU's vexpress-a9: PL011 UART0 for output, Arm semihosting
 * to exit, a fault reporter for the start-up code's exception vectors, and the few memory
 * functions a freestanding C compiler may call.
 *
 * References: Arm PrimeCell UART (PL011) Technical Reference Manual (DR at 0x000, FR at 0x018,
 * FR.TXFF = bit 5, IBRD 0x024, FBRD 0x028, LCR_H 0x02C, CR 0x030); QEMU's vexpress-a9 memory map
 * (UART0 at 0x10009000, the "legacy" motherboard map); Arm "Semihosting for AArch32 and AArch64"
 * v2 (SYS_EXIT = 0x18; on AArch32 r1 holds the reason code itself, ADP_Stopped_ApplicationExit =
 * 0x20026; the ARM-state trap is SVC 0x123456). */
#include <stddef.h>
#include <stdint.h>

#include "platform.h"

#define UART0_BASE 0x10009000u
#define UART_DR    (*(volatile uint32_t *)(UART0_BASE + 0x000))
#define UART_FR    (*(volatile uint32_t *)(UART0_BASE + 0x018))
#define UART_IBRD  (*(volatile uint32_t *)(UART0_BASE + 0x024))
#define UART_FBRD  (*(volatile uint32_t *)(UART0_BASE + 0x028))
#define UART_LCRH  (*(volatile uint32_t *)(UART0_BASE + 0x02C))
#define UART_CR    (*(volatile uint32_t *)(UART0_BASE + 0x030))
#define UART_FR_TXFF (1u << 5)
#define UART_FR_BUSY (1u << 3)

#define SYS_EXIT 0x18u
#define ADP_STOPPED_APPLICATION_EXIT 0x20026u
#define ADP_STOPPED_RUN_TIME_ERROR_UNKNOWN 0x20023u

/* startup.S: SVC 0x123456 with r0 = op, r1 = parameter. */
uint32_t semihosting_call(uint32_t op, uint32_t param);

void platform_init(void)
{
    /* 38400 8N1 from the board's 24 MHz UART clock (QEMU ignores the rate), FIFOs on, TX+RX on.
     * Newer QEMU versions, like the hardware, drop characters while UARTEN/TXE are clear. */
    UART_CR = 0;
    UART_IBRD = 39;
    UART_FBRD = 4;
    UART_LCRH = (3u << 5) | (1u << 4); /* WLEN = 8 bits, FEN */
    UART_CR = (1u << 0) | (1u << 8) | (1u << 9); /* UARTEN, TXE, RXE */
}

void platform_putc(char c)
{
    if (c == '\n')
        platform_putc('\r');
    while (UART_FR & UART_FR_TXFF)
        ;
    UART_DR = (uint32_t)(unsigned char)c;
}

static void put_text(const char *s);
static void put_decimal(uint32_t v);

/* The main stack's high-water mark: startup.S painted [__stack_bottom, __stack_top) with
 * STACK_PAINT before main; the deepest word overwritten since bounds the stack the program (the
 * firmware library included) has used. Printed as a "platform" line, which run.sh leaves out of
 * the host/board comparison. */
extern uint32_t __stack_bottom[], __stack_top[];
#define STACK_PAINT 0x5A5A5A5Au

static void report_stack(void)
{
    const uint32_t *p = __stack_bottom;
    while (p < __stack_top && *p == STACK_PAINT)
        p++;
    put_text("sagessd-selftest platform cortex-a9 stack-high-water ");
    put_decimal((uint32_t)((const char *)__stack_top - (const char *)p));
    put_text(" bytes\n");
}

void platform_exit(int code)
{
    report_stack();
    while (UART_FR & UART_FR_BUSY)
        ;
    /* QEMU (with -semihosting) exits with status 0 for ApplicationExit and 1 for any other
     * reason. Without semihosting the SVC lands in startup.S's vector and we halt there. */
    semihosting_call(SYS_EXIT, code == 0 ? ADP_STOPPED_APPLICATION_EXIT
                                         : ADP_STOPPED_RUN_TIME_ERROR_UNKNOWN);
    for (;;)
        __asm__ volatile("wfi");
}

static void put_text(const char *s)
{
    while (*s)
        platform_putc(*s++);
}

static void put_decimal(uint32_t v)
{
    static const uint32_t powers[] = {1000000000u, 100000000u, 10000000u, 1000000u, 100000u,
                                      10000u,      1000u,      100u,      10u,      1u};
    int started = 0;
    for (unsigned i = 0; i < sizeof powers / sizeof powers[0]; i++) {
        char digit = '0';
        while (v >= powers[i]) { /* no divide instruction on the A9 */
            v -= powers[i];
            digit++;
        }
        if (digit != '0' || started || powers[i] == 1) {
            platform_putc(digit);
            started = 1;
        }
    }
}

static void put_hex32(uint32_t v)
{
    put_text("0x");
    for (int shift = 28; shift >= 0; shift -= 4)
        platform_putc("0123456789abcdef"[(v >> shift) & 0xF]);
}

/* Called by startup.S's exception vectors; never returns. */
void platform_fault(uint32_t kind, uint32_t lr, uint32_t status, uint32_t address)
    __attribute__((noreturn));
void platform_fault(uint32_t kind, uint32_t lr, uint32_t status, uint32_t address)
{
    static const char *const names[] = {"?", "undefined instruction", "svc", "prefetch abort",
                                        "data abort", "irq", "fiq"};
    if (kind == 2) {
        /* An SVC that QEMU did not intercept: semihosting is off, so we cannot exit. */
        put_text("\nsagessd-selftest: semihosting is not enabled (run QEMU with -semihosting);"
                   " halting\n");
        for (;;)
            __asm__ volatile("wfi");
    }
    put_text("\nsagessd-selftest FAIL exception ");
    put_text(kind < sizeof names / sizeof names[0] ? names[kind] : "?");
    put_text(" lr ");
    put_hex32(lr);
    put_text(" status ");
    put_hex32(status);
    put_text(" address ");
    put_hex32(address);
    put_text("\n");
    platform_exit(1);
}

/* The memory functions GCC may emit calls to even in freestanding code. Weak, so the Rust
 * staticlib's own (compiler_builtins) definitions take precedence when they are linked in.
 * Byte loops: the image runs with alignment checking on. */
__attribute__((weak)) void *memcpy(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    while (n--)
        *d++ = *s++;
    return dst;
}

__attribute__((weak)) void *memmove(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    if (d < s) {
        while (n--)
            *d++ = *s++;
    } else {
        while (n--)
            d[n] = s[n];
    }
    return dst;
}

__attribute__((weak)) void *memset(void *dst, int c, size_t n)
{
    unsigned char *d = dst;
    while (n--)
        *d++ = (unsigned char)c;
    return dst;
}

__attribute__((weak)) int memcmp(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    for (; n; n--, x++, y++)
        if (*x != *y)
            return *x < *y ? -1 : 1;
    return 0;
}
