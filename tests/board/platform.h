/* The self-test's whole view of its platform: one character out, and a way to stop.
 *
 * selftest.c uses nothing else (no libc, no printf), so the same program runs as a Linux process
 * (platform_host.c) and as a bare-metal image on an emulated Cortex-A9 (platform_vexpress.c). */
#ifndef SAGESSD_SELFTEST_PLATFORM_H
#define SAGESSD_SELFTEST_PLATFORM_H

/* Prepares the output device (a no-op on the host). Called once, first thing in main. */
void platform_init(void);
/* Writes one byte to the console. */
void platform_putc(char c);
/* Stops the program with `code` (0 = success). Never returns. */
void platform_exit(int code) __attribute__((noreturn));

#endif
