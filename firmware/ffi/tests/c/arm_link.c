/* Link check of libsagessd_fw.a for a bare-metal board (firmware/ffi/tests/arm_link.sh).
 *
 * Compiled freestanding for the Cortex-A9 (and for a Cortex-M4F), linked with --gc-sections
 * against the Rust static library: it calls every function of sagessd_fw.h so that each symbol
 * must resolve, with the board's calling convention and float ABI. It is never run; the
 * bare-metal QEMU self-test (tests/board/) runs the library for real. The linked ELF is also what
 * scripts/footprint.sh measures: exactly the code and data a board links in. */
#include "sagessd_fw.h"

#if !defined(__STDC_HOSTED__) || __STDC_HOSTED__ != 0
#error "compile with -ffreestanding"
#endif

/* Where the DRAM arena would be: DDR above the program (never touched, the program never runs). */
#define ARENA_ADDRESS 0x70000000u

static volatile uint32_t sink;
static uint8_t link_check_sqe[SAGESSD_SQE_BYTES];
static uint8_t link_check_data[4096];

static int32_t flash_submit(void *ctx, uint32_t tag, uint32_t kind, uint32_t address,
                            uint8_t *dram_page, uint32_t sectors)
{
    (void)ctx;
    (void)dram_page;
    sink = tag ^ kind ^ address ^ sectors;
    return SAGESSD_FLASH_SUBMIT_STARTED;
}

void _start(void) __attribute__((noreturn, section(".text._start")));

void _start(void)
{
    static const sagessd_geometry geometry = {8, 8, 1, 512, 256, 16384};
    static const sagessd_config config = {
        .block_size_log2 = 12,
        .over_provisioning_percent = 10,
        .isp_slots = 4,
        .page_buffer_pages = 1024,
        .max_targets = 4096,
        .max_fanout = 64,
        .max_subgraph_nodes = 1u << 21,
        .max_subgraph_edges = 1u << 21,
        .max_transfer_bytes = 512u * 1024u,
    };
    static const sagessd_flash_ops ops = {flash_submit, 0};
    sagessd_completion completion;
    size_t bytes = 0;

    sink = sagessd_fw_abi_version();
    sink = (uint32_t)sagessd_fw_dram_size(&config, &geometry, &bytes);
    sink = (uint32_t)sagessd_fw_init(&config, &geometry, (uint8_t *)ARENA_ADDRESS, bytes, &ops);
    link_check_sqe[0] = SAGESSD_ADMIN_IDENTIFY;
    sink = (uint32_t)sagessd_fw_submit(0, link_check_sqe, link_check_data, sizeof link_check_data,
                                       &completion);
    while (sagessd_fw_poll() > 0) {
    }
    sink = (uint32_t)sagessd_fw_flash_complete(0, SAGESSD_FLASH_OK);
    sink = (uint32_t)sagessd_fw_next_completion(&completion);
    sink = (uint32_t)sagessd_fw_idle();
    sink = (uint32_t)sagessd_fw_reset();
    for (;;) {
    }
}
