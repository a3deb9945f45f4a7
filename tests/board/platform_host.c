/* The self-test's platform layer on the host: stdout and exit(3). */
#include <stdio.h>
#include <stdlib.h>

#include "platform.h"

void platform_init(void) {}

void platform_putc(char c) { putchar((unsigned char)c); }

void platform_exit(int code)
{
    fflush(stdout);
    exit(code);
}
