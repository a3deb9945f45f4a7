/* sagessd firmware self-test: one portable C program for the host and for a bare Cortex-A9.
 *
 * It drives the firmware only through its C ABI (firmware/include/sagessd_fw.h), exactly as a
 * board's C firmware would:
 *
 *   1. boots the firmware over a zero-filled DRAM arena and a RAM-backed NAND array (below);
 *   2. lays out a small deterministic graph as CSR (indptr u64, indices u32) and stores it with
 *      NVMe WRITEs (several in flight), then rewrites a filler range until the FTL has run out of
 *      free blocks and garbage collection has moved the graph's pages and erased blocks, and READs
 *      the graph back;
 *   3. registers it with GRAPH_ATTACH;
 *   4. samples K minibatches with NS_SUBMIT + NS_COLLECT (two jobs in flight at a time, fixed
 *      seeds, 2 and 3 layers, repeated targets, the hub and degree-0 nodes among the targets),
 *      writing filler before each pair so that the small page buffer has forgotten the graph and
 *      sampling reads flash; plus the expected errors: a third job while both slots are busy
 *      (NoFreeSlot), an unknown tag (UnknownTag), a collect into a too-small buffer
 *      (BufferTooSmall with the size needed; the job stays collectable), a collected tag;
 *   5. checks every subgraph byte for byte against a reference built here from the sampling
 *      specification (firmware/abi/src/sample.rs, subgraph.rs), and folds all subgraph bytes, in
 *      batch order, into one FNV-1a 64 checksum;
 *   6. reads the graph and the filler back once more and checks that nothing is left in flight.

 * Output (tests/board/run.sh compares all of it between host and board, and above all the
 * checksum line):
 *
 *   sagessd-selftest start
 *   sagessd-selftest abi <v> arena <bytes> bytes nand <pages> pages of <bytes> bytes
 *   sagessd-selftest graph nodes <n> edges <e> hub-degree <d> stored, survived garbage collection
 *   sagessd-selftest batch <b> layers <L> targets <T> nodes <n> edges <e> bytes <s>
 *   sagessd-selftest flash reads <r> programs <p> erases <e> busy <b>
 *   sagessd-selftest checksum 0x<16 hex digits> batches <K>
 *   sagessd-selftest PASS
 *
 * or a line starting "sagessd-selftest FAIL" and exit status 1 on any unexpected status.
 *
 * The RAM-backed flash HAL keeps the NAND rules a real array enforces: a page can be programmed
 * only after its block was erased and only in page order within the block (erased pages read
 * 0xFF). Operations are never executed inside submit: they wait in a small pending queue (whose
 * capacity also makes the firmware see "busy") and are completed later from the main loop, one
 * per loop step, choosing dies round-robin so operations on different dies complete out of
 * submission order while those on one die keep their order, as the contract requires.
 *
 * Everything is deterministic: the graph and the minibatches come from SplitMix64 streams with
 * fixed seeds, so the host and the board must print identical transcripts.
 *
 * Needs no libc: output goes through platform.h (platform_host.c or platform_vexpress.c), numbers
 * are printed by the small formatters below, and every division is by a power of two (the
 * Cortex-A9 has no divide instruction; nothing here needs a division helper).
 */
#include <stddef.h>
#include <stdint.h>

#include "platform.h"
#include "sagessd_fw.h"
#ifdef SELFTEST_COSMOS
/* The same program through the Cosmos+ board glue (firmware/board/cosmos/) over a model of the
 * board's NVMe host controller and NAND scheduler (cosmos_hw_model.c): every command is submitted
 * by a modelled host with PRPs, fetched, moved and completed by the glue, and judged by the
 * model; the flash operations go through GreedyFTL's request scheduler as modelled. */
#include "sagessd_cosmos.h"
#endif

/* ---------------------------------------------------------------- output ---------------------- */

static void put_str(const char *s)
{
    while (*s)
        platform_putc(*s++);
}

static void put_u32(uint32_t v)
{
    static const uint32_t powers[] = {1000000000u, 100000000u, 10000000u, 1000000u, 100000u,
                                      10000u,      1000u,      100u,      10u,      1u};
    int started = 0;
    for (unsigned i = 0; i < sizeof powers / sizeof powers[0]; i++) {
        char digit = '0';
        while (v >= powers[i]) {
            v -= powers[i];
            digit++;
        }
        if (digit != '0' || started || i + 1 == sizeof powers / sizeof powers[0]) {
            platform_putc(digit);
            started = 1;
        }
    }
}

static void put_i32(int32_t v)
{
    if (v < 0) {
        platform_putc('-');
        put_u32(0u - (uint32_t)v);
    } else {
        put_u32((uint32_t)v);
    }
}

static void put_hex(uint64_t v, int digits)
{
    put_str("0x");
    for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4)
        platform_putc("0123456789abcdef"[(v >> shift) & 0xF]);
}

static void fail(const char *what) __attribute__((noreturn));
static void fail(const char *what)
{
    put_str("sagessd-selftest FAIL ");
    put_str(what);
    platform_putc('\n');
    platform_exit(1);
}

/* "FAIL <what> <value>" for a failing return code or status. */
static void fail_code(const char *what, int32_t code) __attribute__((noreturn));
static void fail_code(const char *what, int32_t code)
{
    put_str("sagessd-selftest FAIL ");
    put_str(what);
    put_str(" (code ");
    put_i32(code);
    put_str(")\n");
    platform_exit(1);
}

/* ---------------------------------------------------------------- bytes and numbers ------------ */

static void put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint16_t get_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint64_t get_le64(const uint8_t *p) { return get_le32(p) | (uint64_t)get_le32(p + 4) << 32; }

static void copy_bytes(uint8_t *dst, const uint8_t *src, uint32_t n)
{
    while (n--)
        *dst++ = *src++;
}

static void fill_bytes(uint8_t *dst, uint8_t value, uint32_t n)
{
    while (n--)
        *dst++ = value;
}

/* SplitMix64 (the `mix` of firmware/abi/src/sample.rs): the graph generator, the minibatch
 * generator and the reference sampler all use it, so there is one definition of randomness. */
#define GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t mix64(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A SplitMix64 stream: state += GOLDEN, output mix64(state). */
typedef struct {
    uint64_t state;
} rng;

static uint64_t rng_next(rng *r)
{
    r->state += GOLDEN;
    return mix64(r->state);
}

/* A draw in 0..n-1 for n >= 1: the top 32 bits of the next word, scaled by n (multiply-high, no
 * division). */
static uint32_t rng_below(rng *r, uint32_t n)
{
    return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* The high 64 bits of a * b, in 32-bit pieces (no __int128 on 32-bit targets). */
static uint64_t mul_high64(uint64_t a, uint64_t b)
{
    uint64_t a_lo = (uint32_t)a, a_hi = a >> 32, b_lo = (uint32_t)b, b_hi = b >> 32;
    uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
    uint64_t cross = (lo_lo >> 32) + (uint32_t)hi_lo + lo_hi;
    return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

/* FNV-1a 64 over the subgraph bytes. */
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv1a(uint64_t h, const uint8_t *p, uint32_t n)
{
    while (n--) {
        h ^= *p++;
        h *= FNV_PRIME;
    }
    return h;
}

/* ---------------------------------------------------------------- the device ------------------- */

/* A small array: 4 dies (2 channels x 2 ways), 16 blocks of 16 pages of 4 KiB = 4 MiB, small
 * enough that the filler writes below force garbage collection. Each size can be overridden with
 * -D (e.g. a board's page size): the checksum must not change, because a sampled subgraph is a
 * function of the graph, the NS_config and the seed only. With other sizes, also pass
 * -DSELFTEST_SMALL_ARRAY_CHECKS=0: the checks that garbage collection ran and that sampling read
 * flash rely on the default array and page buffer being this small. */
#ifndef CHANNELS
#define CHANNELS 2u
#endif
#ifndef WAYS
#define WAYS 2u
#endif
#ifndef DIES_PER_WAY
#define DIES_PER_WAY 1u
#endif
#ifndef BLOCKS_PER_DIE
#define BLOCKS_PER_DIE 16u
#endif
#ifndef PAGES_PER_BLOCK
#define PAGES_PER_BLOCK 16u
#endif
#ifndef PAGE_BYTES
#define PAGE_BYTES 4096u
#endif
#ifndef SELFTEST_SMALL_ARRAY_CHECKS
#define SELFTEST_SMALL_ARRAY_CHECKS 1
#endif
#define DIES (CHANNELS * WAYS * DIES_PER_WAY)
#define BLOCKS (DIES * BLOCKS_PER_DIE)
#define PAGES (BLOCKS * PAGES_PER_BLOCK)
/* The RAM NAND: the firmware's blocks, or through the glue GreedyFTL's virtual blocks, bad ones
 * included (the glue maps the firmware's blocks onto the good ones). */
#ifdef SELFTEST_COSMOS
#define NAND_BLOCKS (DIES * USER_BLOCKS_PER_DIE)
#else
#define NAND_BLOCKS BLOCKS
#endif
#define NAND_PAGES (NAND_BLOCKS * PAGES_PER_BLOCK)

#define LBA_BYTES 4096u
#define MAX_TRANSFER_BYTES 16384u
#define NSID SAGESSD_NSID
#define IO_QUEUE 1u

/* Sizes for a small device: the smallest page buffer (16 pages), so sampling reads flash. */
static const sagessd_config config = {
    .block_size_log2 = 12,
    .over_provisioning_percent = 10,
    .isp_slots = 2,
    .reserved0 = 0,
    .page_buffer_pages = 16,
    .max_targets = 256,
    .max_fanout = 32,
    .reserved1 = 0,
    .max_subgraph_nodes = 16384,
    .max_subgraph_edges = 65536,
    .max_transfer_bytes = MAX_TRANSFER_BYTES,
    .max_feature_bytes = 32768, /* every node's row fits: in-storage feature gather is on */
};

static const sagessd_geometry geometry = {
    .channels = CHANNELS,
    .ways = WAYS,
    .dies_per_way = DIES_PER_WAY,
    .blocks_per_die = BLOCKS_PER_DIE,
    .pages_per_block = PAGES_PER_BLOCK,
    .page_size_bytes = PAGE_BYTES,
};

/* Large arrays live outside the program image, as on a Cosmos+ board, whose image must stay in
 * its 1 MiB segment (docs/openssd.md §6): the linker script places this section in DDR after the
 * image (vexpress-a9.ld; on the host it is ordinary .bss), and the start-up code zeroes it. */
#define SELFTEST_DDR __attribute__((section(".bss.sagessd_ddr")))

/* The firmware's DRAM arena (zero-filled). */
#ifndef ARENA_BYTES
#define ARENA_BYTES (6u << 20)
#endif
static uint8_t arena[ARENA_BYTES] SELFTEST_DDR __attribute__((aligned(64)));

/* ---------------------------------------------------------------- RAM-backed NAND -------------- */

/* Each page as the library's windows hold it: its data, then its spare record. */
#define WINDOW_BYTES (PAGE_BYTES + SAGESSD_FW_SPARE_BYTES)
static uint8_t nand[NAND_PAGES][WINDOW_BYTES] SELFTEST_DDR;
/* Next programmable page of each block; pages at and past it are erased. */
static uint16_t write_point[NAND_BLOCKS];

typedef struct {
    uint32_t tag, kind, address;
    uint8_t *dram_page;
    uint64_t page_hash; /* a PROGRAM's data when submitted: the firmware must not change it */
    uint32_t sectors;   /* a READ's named sectors (bit i: the i-th sixteenth of the data) */
} flash_op;

/* The part of the arena the firmware was given (sagessd_fw_dram_size). */
static uint32_t arena_used;

static struct {
    uint32_t reads, programs, erases, busy;
} flash_stats;

#ifndef SELFTEST_COSMOS
/* The pending queue: small on purpose, so the firmware also sees "busy". */
#define PENDING_MAX 12u
static flash_op pending[PENDING_MAX];
static uint32_t pending_count;
static uint32_t next_die; /* round-robin pointer of the completion order */

static uint32_t die_of_op(const flash_op *op)
{
    uint32_t block = op->kind == SAGESSD_FLASH_ERASE ? op->address : op->address / PAGES_PER_BLOCK;
    uint32_t die = 0;
    while (block >= BLOCKS_PER_DIE) { /* block / BLOCKS_PER_DIE without a divide */
        block -= BLOCKS_PER_DIE;
        die++;
    }
    return die;
}

static int32_t flash_submit(void *ctx, uint32_t tag, uint32_t kind, uint32_t address,
                            uint8_t *dram_page, uint32_t sectors)
{
    if (ctx != (void *)nand)
        fail("flash submit: wrong context pointer");
    if (kind == SAGESSD_FLASH_READ ? sectors > 0xFFFFu : sectors != 0)
        fail("flash submit: sectors other than a read's sixteenths (0 for programs and erases)");
    /* A real board would refuse (< 0) what it cannot do; from this firmware and this geometry
     * every such request is a bug, so it fails the test. */
    switch (kind) {
    case SAGESSD_FLASH_READ:
    case SAGESSD_FLASH_PROGRAM:
        if (address >= PAGES)
            fail("flash submit: page address out of range");
        if (dram_page == NULL || dram_page < arena || dram_page + WINDOW_BYTES > arena + arena_used)
            fail("flash submit: DRAM page outside the arena");
        break;
    case SAGESSD_FLASH_ERASE:
        if (address >= BLOCKS)
            fail("flash submit: block address out of range");
        if (dram_page != NULL)
            fail("flash submit: an erase with a DRAM page");
        break;
    default:
        fail("flash submit: unknown kind");
    }
    if (pending_count == PENDING_MAX) {
        flash_stats.busy++;
        return SAGESSD_FLASH_SUBMIT_BUSY;
    }
    uint64_t hash = kind == SAGESSD_FLASH_PROGRAM ? fnv1a(FNV_OFFSET, dram_page, WINDOW_BYTES) : 0;
    pending[pending_count++] = (flash_op){tag, kind, address, dram_page, hash, sectors};
    return SAGESSD_FLASH_SUBMIT_STARTED;
}
#endif

/* Executes one operation as the NAND would, enforcing its rules. */
static uint32_t flash_execute(const flash_op *op)
{
    switch (op->kind) {
    case SAGESSD_FLASH_READ:
        /* The named sectors and the spare record only: a firmware that relied on bytes it did
         * not ask for would read what the window held before, and the checks would fail. */
        flash_stats.reads++;
        for (uint32_t i = 0; i < 16u; i++)
            if (op->sectors >> i & 1u)
                copy_bytes(op->dram_page + i * (PAGE_BYTES / 16u),
                           nand[op->address] + i * (PAGE_BYTES / 16u), PAGE_BYTES / 16u);
        copy_bytes(op->dram_page + PAGE_BYTES, nand[op->address] + PAGE_BYTES,
                   SAGESSD_FW_SPARE_BYTES);
        return SAGESSD_FLASH_OK;
    case SAGESSD_FLASH_PROGRAM: {
        uint32_t block = op->address / PAGES_PER_BLOCK;
        uint32_t page = op->address % PAGES_PER_BLOCK;
        flash_stats.programs++;
        if (page != write_point[block]) {
            put_str("sagessd-selftest FAIL flash rule: program of page ");
            put_u32(page);
            put_str(" of block ");
            put_u32(block);
            put_str(page < write_point[block] ? " which is not erased\n"
                                              : " out of order (next erased page ");
            if (page > write_point[block]) {
                put_u32(write_point[block]);
                put_str(")\n");
            }
            platform_exit(1);
        }
        if (fnv1a(FNV_OFFSET, op->dram_page, WINDOW_BYTES) != op->page_hash)
            fail("the firmware changed a page while its PROGRAM was in flight");
        write_point[block]++;
        copy_bytes(nand[op->address], op->dram_page, WINDOW_BYTES);
        return SAGESSD_FLASH_OK;
    }
    default: {
        uint32_t first = op->address * PAGES_PER_BLOCK;
        flash_stats.erases++;
        for (uint32_t p = 0; p < PAGES_PER_BLOCK; p++)
            fill_bytes(nand[first + p], 0xFF, WINDOW_BYTES);
        write_point[op->address] = 0;
        return SAGESSD_FLASH_OK;
    }
    }
}

#ifdef SELFTEST_COSMOS
/* The modelled NAND scheduler runs each request on the RAM NAND here. */
unsigned int cosmos_nand_execute(uint32_t kind, uint32_t address, uint8_t *data)
{
    if (kind == SAGESSD_FLASH_ERASE ? address >= NAND_BLOCKS : address >= NAND_PAGES)
        fail("the NAND scheduler got an address past the array");
    uint64_t hash = kind == SAGESSD_FLASH_PROGRAM ? fnv1a(FNV_OFFSET, data, WINDOW_BYTES) : 0;
    /* Two programs fail with statuses other than FAIL: the 300th with WARNING, the 600th with
     * a status the glue does not know. Each consumes its page and leaves garbage in it, as a
     * failed program does; the library must hear of a media failure (and write the data
     * elsewhere), or a later read returns the garbage and the checks catch it. */
    static uint32_t programs_seen;
    if (kind == SAGESSD_FLASH_PROGRAM && (++programs_seen == 300 || programs_seen == 600)) {
        uint32_t block = address / PAGES_PER_BLOCK;
        if (address % PAGES_PER_BLOCK != write_point[block])
            fail("the NAND scheduler programmed a page out of order");
        write_point[block]++;
        fill_bytes(nand[address], 0xEE, WINDOW_BYTES);
        flash_stats.programs++;
        return programs_seen == 300 ? REQ_STATUS_WARNING : 0x7Fu;
    }
    /* The NSC moves whole pages. */
    flash_op op = {0, kind, address, data, hash, kind == SAGESSD_FLASH_READ ? 0xFFFFu : 0};
    return flash_execute(&op) == SAGESSD_FLASH_OK ? REQ_STATUS_DONE : REQ_STATUS_FAIL;
}

/* The library's flash HAL: the glue's, with what the library asked for told to the model
 * first (the sectors a read names reach the glue, not the scheduler's request). */
static int32_t recorded_flash_submit(void *ctx, uint32_t tag, uint32_t kind, uint32_t address,
                                     uint8_t *dram_page, uint32_t sectors)
{
    cosmos_model_flash_submitting(tag, kind, dram_page, sectors);
    return sagessd_cosmos_flash_ops.submit(ctx, tag, kind, address, dram_page, sectors);
}

void cosmos_model_fail(const char *check, const char *what, uint32_t value)
{
    put_str("sagessd-selftest FAIL cosmos model: ");
    put_str(check);
    put_str(": ");
    put_str(what);
    platform_putc(' ');
    put_u32(value);
    platform_putc('\n');
    platform_exit(1);
}
#else
/* Completes one pending operation: the oldest one of the next die (round-robin) that has any.
 * Returns whether there was one. */
static int flash_complete_one(void)
{
    if (pending_count == 0)
        return 0;
    uint32_t pick = 0;
    for (uint32_t tries = 0; tries < DIES; tries++) {
        uint32_t die = next_die;
        next_die = next_die + 1 == DIES ? 0 : next_die + 1;
        uint32_t i = 0;
        while (i < pending_count && die_of_op(&pending[i]) != die)
            i++;
        if (i < pending_count) {
            pick = i;
            break;
        }
    }
    flash_op op = pending[pick];
    uint32_t status = flash_execute(&op);
    int32_t rc = sagessd_fw_flash_complete(op.tag, status);
    if (rc == SAGESSD_ERR_QUEUE_FULL) {
        /* The firmware's completion queue is full: undoing is not possible for a program or an
         * erase, and the firmware's queue is sized above our pending queue, so this is a bug. */
        fail("sagessd_fw_flash_complete: queue full with only a few operations pending");
    }
    if (rc != SAGESSD_OK)
        fail_code("sagessd_fw_flash_complete", rc);
    for (uint32_t i = pick; i + 1 < pending_count; i++)
        pending[i] = pending[i + 1];
    pending_count--;
    return 1;
}
#endif

/* ---------------------------------------------------------------- commands --------------------- */

#define MAX_OUTSTANDING 16u

typedef struct {
    int in_use, done;
    uint16_t cid, sq_id;
    sagessd_completion completion;
} outstanding;

static outstanding commands[MAX_OUTSTANDING];
static uint16_t next_cid = 1;
static uint32_t loop_steps;

static outstanding *find_command(uint16_t cid)
{
    for (uint32_t i = 0; i < MAX_OUTSTANDING; i++)
        if (commands[i].in_use && commands[i].cid == cid)
            return &commands[i];
    return NULL;
}

/* Hands completion c to the outstanding command it names. */
static void take_completion(const sagessd_completion *c)
{
    outstanding *o = find_command(c->cid);
    if (o == NULL || o->done || c->sq_id != o->sq_id)
        fail("a completion for a command that is not outstanding");
    o->completion = *c;
    o->done = 1;
}

#ifdef SELFTEST_COSMOS
/* One turn of the board's main loop, as nvme_main.c runs it with the glue: the controller's
 * state changes (dev_irq_handler's part), fetching a command when the glue has room, the glue's
 * poll, one step of the NAND scheduler; then the host reads its completion queue. */
static int board_turn(void)
{
    int moved = cosmos_model_tick();
    if (g_nvmeTask.status == NVME_TASK_RUNNING && !check_nvme_cc_en())
        g_nvmeTask.status = NVME_TASK_RESET;
    if (g_nvmeTask.status == NVME_TASK_RUNNING && cosmos_host_shn())
        g_nvmeTask.status = NVME_TASK_SHUTDOWN;
    switch (g_nvmeTask.status) {
    case NVME_TASK_IDLE:
    case NVME_TASK_WAIT_CC_EN:
        if (check_nvme_cc_en()) {
            set_nvme_admin_queue(1, 1, 1);
            set_nvme_csts_rdy(1);
            g_nvmeTask.status = NVME_TASK_RUNNING;
            moved = 1;
        }
        break;
    case NVME_TASK_RUNNING:
        if (sagessd_cosmos_ready()) {
            NVME_COMMAND cmd;
            if (get_nvme_cmd(&cmd.qID, &cmd.cmdSlotTag, &cmd.cmdSeqNum, cmd.cmdDword) == 1) {
                if (!sagessd_cosmos_accept(&cmd)) {
                    /* The stock handle_nvme_admin_cmd; the test sends it Delete I/O SQ only. */
                    if (cmd.qID != 0 || (cmd.cmdDword[0] & 0xFFu) != 0x00u)
                        fail("the glue left a command to the stock admin handler");
                    set_io_sq((cmd.cmdDword[10] & 0xFFFFu) - 1u, 0, 0, 0, 0, 0);
                    set_auto_nvme_cpl(cmd.cmdSlotTag, 0, 0);
                }
                moved = 1;
            }
        }
        break;
    case NVME_TASK_SHUTDOWN:
        sagessd_cosmos_shutdown();
        moved = 1;
        break;
    case NVME_TASK_RESET:
        sagessd_cosmos_reset();
        moved = 1;
        break;
    case NVME_TASK_WAIT_RESET:
        if (!check_nvme_cc_en()) {
            set_nvme_csts_shst(0);
            set_nvme_csts_rdy(0);
            g_nvmeTask.status = NVME_TASK_IDLE;
            moved = 1;
        }
        break;
    default:
        fail("the NVMe task in an unknown state");
    }
    moved |= sagessd_cosmos_poll();
    CheckDoneNvmeDmaReq();
    if (cosmos_model_nand_queued() > 0) {
        SchedulingNandReq();
        moved = 1;
    }
    sagessd_completion c;
    while (cosmos_host_reap(&c) == 1) {
        take_completion(&c);
        moved = 1;
    }
    return moved;
}

/* The status the glue must answer the next command with, without the library (once). */
static uint32_t cosmos_expect = COSMOS_EXPECT_LIBRARY;
/* The queue of the next command (once): admin (0) or the I/O queue. */
static uint16_t cosmos_queue = IO_QUEUE;
#endif

/* One turn of the main loop: run the firmware, take its completions, complete one flash
 * operation. Returns whether anything happened. */
static int main_loop_step(void)
{
    loop_steps++;
#ifdef SELFTEST_COSMOS
    return board_turn();
#else
    int progress = 0;
    int32_t rc = sagessd_fw_poll();
    if (rc < 0)
        fail_code("sagessd_fw_poll", rc);
    progress |= rc > 0;
    sagessd_completion c;
    for (;;) {
        rc = sagessd_fw_next_completion(&c);
        if (rc < 0)
            fail_code("sagessd_fw_next_completion", rc);
        if (rc == 0)
            break;
        take_completion(&c);
        progress = 1;
    }
    progress |= flash_complete_one();
    return progress;
#endif
}

static void sqe_init(uint8_t sqe[64], uint8_t opcode, uint16_t cid)
{
    fill_bytes(sqe, 0, 64);
    sqe[0] = opcode;
    put_le16(sqe + 2, cid);
    put_le32(sqe + 4, NSID);
}

/* Hands in a command; retries while every command slot is in use. Returns its cid. */
static uint16_t start_command(uint8_t sqe[64], uint8_t *data, uint32_t data_len)
{
    uint16_t cid = next_cid++;
    put_le16(sqe + 2, cid);
    outstanding *o = NULL;
    for (uint32_t i = 0; i < MAX_OUTSTANDING && o == NULL; i++)
        if (!commands[i].in_use)
            o = &commands[i];
    if (o == NULL)
        fail("test bug: too many outstanding commands");
    *o = (outstanding){.in_use = 1, .done = 0, .cid = cid, .sq_id = IO_QUEUE};
#ifdef SELFTEST_COSMOS
    uint32_t expect = cosmos_expect;
    cosmos_expect = COSMOS_EXPECT_LIBRARY;
    o->sq_id = cosmos_queue;
    cosmos_queue = IO_QUEUE;
    while (cosmos_host_submit(o->sq_id, sqe, data, data_len, expect) != 0)
        if (!main_loop_step())
            fail("no controller slot frees up");
    return cid;
#else
    for (;;) {
        int32_t rc = sagessd_fw_submit(IO_QUEUE, sqe, data, data_len, &o->completion);
        if (rc == SAGESSD_COMPLETED) {
            if (o->completion.cid != cid || o->completion.sq_id != IO_QUEUE)
                fail("an immediate completion names another command");
            o->done = 1;
            return cid;
        }
        if (rc == SAGESSD_PENDING)
            return cid;
        if (rc != SAGESSD_ERR_BUSY)
            fail_code("sagessd_fw_submit", rc);
        if (!main_loop_step())
            fail("sagessd_fw_submit is busy and nothing moves");
    }
#endif
}

/* Runs the main loop until command `cid` completes; returns its CQE's status field (15 bits,
 * phase tag dropped) and stores dword 0 in *dw0. */
static uint16_t wait_command(uint16_t cid, uint32_t *dw0)
{
    outstanding *o = find_command(cid);
    if (o == NULL)
        fail("test bug: waiting for an unknown command");
    uint32_t idle = 0;
    while (!o->done) {
        if (main_loop_step())
            idle = 0;
        else if (++idle > 4)
            fail("stuck: a command is pending, the firmware is idle and no flash operation is"
                 " outstanding");
    }
    o->in_use = 0;
    if (get_le16(o->completion.cqe + 12) != cid)
        fail("the CQE's command identifier is not the command's");
    if (dw0 != NULL)
        *dw0 = get_le32(o->completion.cqe);
    return (uint16_t)(get_le16(o->completion.cqe + 14) >> 1);
}

#define STATUS_CODE(field) ((field) & 0x7FFu) /* SCT (10:8) and SC (7:0), no DNR/More */
#define VENDOR_STATUS(sc) (0x700u | (sc))
#define VS_UNKNOWN_TAG 0x0Au
#define VS_BUFFER_TOO_SMALL 0x0Cu
#define VS_NO_FREE_SLOT 0x0Fu

static void expect_status(const char *what, uint16_t field, uint32_t want)
{
    if (STATUS_CODE(field) == want)
        return;
    put_str("sagessd-selftest FAIL ");
    put_str(what);
    put_str(": status ");
    put_hex(STATUS_CODE(field), 3);
    put_str(", expected ");
    put_hex(want, 3);
    platform_putc('\n');
    platform_exit(1);
}

/* ---------------------------------------------------------------- the graph -------------------- */

/* N nodes; node HUB has HUB_DEGREE random neighbours (12 KB of ids: it spans 3-4 flash pages);
 * every node v with v % 50 == 17 has no neighbours; every other node v has its ring neighbours
 * v+1 and v-1 (mod N), then 0-4 extra neighbours drawn R-MAT style (each of the 11 id bits is 1
 * with probability 0.24, so low ids are popular; ids >= N are redrawn), and with probability 1/8
 * the hub. All draws come, in this order, from one SplitMix64 stream seeded with GRAPH_SEED. */
#define NODES 1536u
#define HUB 3u
#define HUB_DEGREE 3000u
#define GRAPH_SEED 0x5A6E55D0C0FFEE01ull
#define MAX_EDGES (HUB_DEGREE + NODES * 7u)

static uint64_t indptr[NODES + 1];
static uint32_t indices[MAX_EDGES];
static uint32_t edge_count;

static int is_degree_zero(uint32_t v)
{
    uint32_t r = v;
    while (r >= 50)
        r -= 50;
    return r == 17;
}

static uint32_t rmat_node(rng *r)
{
    for (;;) {
        uint32_t v = 0;
        for (int bit = 0; bit < 11; bit++)
            v = (v << 1) | ((uint32_t)(rng_next(r) >> 32) < 0x3D70A3D7u); /* 0.24 * 2^32 */
        if (v < NODES)
            return v;
    }
}

static void build_graph(void)
{
    rng r = {GRAPH_SEED};
    edge_count = 0;
    indptr[0] = 0;
    for (uint32_t v = 0; v < NODES; v++) {
        if (v == HUB) {
            for (uint32_t i = 0; i < HUB_DEGREE; i++)
                indices[edge_count++] = rng_below(&r, NODES);
        } else if (!is_degree_zero(v)) {
            indices[edge_count++] = v + 1 == NODES ? 0 : v + 1;
            indices[edge_count++] = v == 0 ? NODES - 1 : v - 1;
            uint32_t extra = rng_below(&r, 5);
            for (uint32_t i = 0; i < extra; i++)
                indices[edge_count++] = rmat_node(&r);
            if (rng_below(&r, 8) == 0)
                indices[edge_count++] = HUB;
        }
        indptr[v + 1] = edge_count;
    }
}

/* The namespace image the test writes: indptr from LBA 0, one unwritten LBA, then indices, then
 * the feature rows (FEATURE_ROW_BYTES per node, a power of two, so rows lie back to back). */
#define INDPTR_SLBA 0u
#define INDPTR_BYTES ((NODES + 1) * 8u)
#define INDPTR_LBAS ((INDPTR_BYTES + LBA_BYTES - 1) / LBA_BYTES)
#define INDICES_SLBA (INDPTR_SLBA + INDPTR_LBAS + 1)
#define MAX_INDICES_LBAS ((MAX_EDGES * 4u + LBA_BYTES - 1) / LBA_BYTES)
#define FEATURE_ROW_BYTES 16u
/* The firmware wants the feature region to start on a flash page. */
#define PAGE_LBAS (PAGE_BYTES / LBA_BYTES)
#define FEATURES_SLBA ((INDICES_SLBA + MAX_INDICES_LBAS + PAGE_LBAS - 1) / PAGE_LBAS * PAGE_LBAS)
#define FEATURES_LBAS ((NODES * FEATURE_ROW_BYTES + LBA_BYTES - 1) / LBA_BYTES)
#define IMAGE_LBAS (FEATURES_SLBA + FEATURES_LBAS)
_Static_assert(NODES * FEATURE_ROW_BYTES <= 32768u, "max_feature_bytes holds every row");
_Static_assert(FEATURES_SLBA * LBA_BYTES % PAGE_BYTES == 0, "the feature region starts a page");

/* Word w of node v's feature row: mix64(v << 8 | w) truncated to 32 bits. */
static uint32_t feature_word(uint32_t v, uint32_t w)
{
    return (uint32_t)mix64((uint64_t)v << 8 | w);
}

static uint8_t image[IMAGE_LBAS * LBA_BYTES] SELFTEST_DDR __attribute__((aligned(4096)));
/* Big enough for the graph and for the filler region (64 LBAs, below). */
#define READBACK_LBAS (IMAGE_LBAS > 64u ? IMAGE_LBAS : 64u)
static uint8_t readback[READBACK_LBAS * LBA_BYTES] SELFTEST_DDR __attribute__((aligned(4096)));

static uint32_t indices_lbas(void) { return (edge_count * 4u + LBA_BYTES - 1) / LBA_BYTES; }

static void lay_out_image(void)
{
    for (uint32_t v = 0; v <= NODES; v++)
        put_le64(image + INDPTR_SLBA * LBA_BYTES + 8u * v, indptr[v]);
    for (uint32_t e = 0; e < edge_count; e++)
        put_le32(image + INDICES_SLBA * LBA_BYTES + 4u * e, indices[e]);
    for (uint32_t v = 0; v < NODES; v++)
        for (uint32_t w = 0; w < FEATURE_ROW_BYTES / 4; w++)
            put_le32(image + FEATURES_SLBA * LBA_BYTES + v * FEATURE_ROW_BYTES + 4u * w,
                     feature_word(v, w));
}

/* WRITEs (write != 0) or READs LBAs [slba, slba + count) from/into `buffer` (which holds LBA slba
 * at offset 0), up to MAX_TRANSFER_BYTES per command and up to 6 commands in flight. */
static void transfer_range(int write, uint32_t slba, uint32_t count, uint8_t *buffer)
{
    enum { IN_FLIGHT = 6 };
    uint16_t cids[IN_FLIGHT];
    uint32_t in_flight = 0;
    const uint32_t per_command = MAX_TRANSFER_BYTES / LBA_BYTES;
    for (uint32_t lba = slba; lba < slba + count || in_flight > 0;) {
        if (lba < slba + count && in_flight < IN_FLIGHT) {
            uint32_t n = slba + count - lba < per_command ? slba + count - lba : per_command;
            uint8_t sqe[64];
            sqe_init(sqe, write ? SAGESSD_IO_WRITE : SAGESSD_IO_READ, 0);
            put_le32(sqe + 40, lba);   /* CDW10: SLBA low */
            put_le32(sqe + 44, 0);     /* CDW11: SLBA high */
            put_le32(sqe + 48, n - 1); /* CDW12: NLB, 0-based */
            cids[in_flight++] = start_command(sqe, buffer + (lba - slba) * LBA_BYTES, n * LBA_BYTES);
            lba += n;
            continue;
        }
        uint16_t status = wait_command(cids[0], NULL);
        expect_status(write ? "WRITE" : "READ", status, 0);
        for (uint32_t i = 1; i < in_flight; i++)
            cids[i - 1] = cids[i];
        in_flight--;
    }
}

/* Reads the graph back and compares it with the image (the unwritten LBA between is skipped). */
static void check_graph_on_flash(const char *when)
{
    transfer_range(0, INDPTR_SLBA, INDPTR_LBAS, readback + INDPTR_SLBA * LBA_BYTES);
    transfer_range(0, INDICES_SLBA, indices_lbas(), readback + INDICES_SLBA * LBA_BYTES);
    for (uint32_t i = 0; i < (INDICES_SLBA + indices_lbas()) * LBA_BYTES; i++) {
        int gap = i >= (INDPTR_SLBA + INDPTR_LBAS) * LBA_BYTES && i < INDICES_SLBA * LBA_BYTES;
        if (!gap && readback[i] != image[i]) {
            put_str("sagessd-selftest FAIL the graph read back ");
            put_str(when);
            put_str(" differs at byte ");
            put_u32(i);
            platform_putc('\n');
            platform_exit(1);
        }
    }
}

/* Filler data: FILLER_LBAS logical blocks rewritten over and over, so that the FTL runs out of
 * free blocks and garbage-collects (moving the graph's pages and erasing blocks), and so that the
 * small page buffer forgets the graph and sampling has to read flash. Word w of LBA l in pass p
 * is mix64(p << 40 | l << 20 | w) truncated to 32 bits. */
#define FILLER_SLBA 64u
#define FILLER_LBAS 64u
#define FILLER_PASSES 20u
_Static_assert(FILLER_LBAS <= READBACK_LBAS, "readback holds the filler");
_Static_assert(FILLER_SLBA >= IMAGE_LBAS, "the filler does not overlap the graph");
static uint8_t filler[FILLER_LBAS * LBA_BYTES] SELFTEST_DDR __attribute__((aligned(4096)));
static uint32_t filler_pass;

static void fill_filler(uint32_t pass)
{
    for (uint32_t l = 0; l < FILLER_LBAS; l++)
        for (uint32_t w = 0; w < LBA_BYTES / 4; w++)
            put_le32(filler + l * LBA_BYTES + 4 * w,
                     (uint32_t)mix64((uint64_t)pass << 40 | (uint64_t)(FILLER_SLBA + l) << 20 | w));
}

/* Writes filler LBAs [first, first + count) of the current pass. */
static void write_filler(uint32_t first, uint32_t count)
{
    transfer_range(1, FILLER_SLBA + first, count, filler + first * LBA_BYTES);
}

/* ---------------------------------------------------------------- reference sampler ------------ */

#define MAX_LAYERS 4u
#define MAX_FANOUT 32u
#define MAX_TARGETS 96u
#define MAX_SUB_EDGES 32768u

/* sample_positions of firmware/abi/src/sample.rs: k = min(fanout, degree) distinct positions in
 * ascending order; all of them when degree <= fanout, else Floyd's algorithm over a keyed
 * SplitMix64 stream. */
static uint32_t sample_positions(uint64_t seed, uint32_t layer, uint64_t node, uint64_t degree,
                                 uint32_t fanout, uint64_t out[MAX_FANOUT])
{
    if (degree <= fanout) {
        for (uint32_t i = 0; i < degree; i++)
            out[i] = i;
        return (uint32_t)degree;
    }
    uint32_t k = fanout;
    uint64_t key = mix64(mix64(seed ^ (GOLDEN * (uint64_t)(layer + 1))) ^ node);
    for (uint32_t i = 0; i < k; i++) {
        uint64_t j = degree - k + i;
        uint64_t r = mix64(key + GOLDEN * (uint64_t)(i + 1));
        uint64_t t = mul_high64(r, j + 1);
        int seen = 0;
        for (uint32_t m = 0; m < i; m++)
            seen |= out[m] == t;
        out[i] = seen ? j : t;
    }
    for (uint32_t i = 1; i < k; i++) { /* insertion sort, k <= MAX_FANOUT */
        uint64_t x = out[i];
        uint32_t m = i;
        while (m > 0 && out[m - 1] > x) {
            out[m] = out[m - 1];
            m--;
        }
        out[m] = x;
    }
    return k;
}

static int32_t local_of[NODES];
static uint64_t ref_nodes[NODES];
static uint32_t ref_indptr[MAX_LAYERS][NODES + 1];
static uint32_t ref_indices[MAX_SUB_EDGES] SELFTEST_DDR;

typedef struct {
    uint64_t seed;
    uint32_t layer_count;
    uint16_t fanouts[MAX_LAYERS];
    uint32_t target_count;
    uint64_t targets[MAX_TARGETS];
} minibatch;

/* Builds the message-flow graph of firmware/abi/src/subgraph.rs into out; returns its size. */
static uint32_t reference_subgraph(const minibatch *mb, uint8_t *out, uint32_t out_len)
{
    uint32_t node_count = 0, edges = 0;
    uint32_t dst[MAX_LAYERS], src[MAX_LAYERS], layer_edges[MAX_LAYERS];
    for (uint32_t v = 0; v < NODES; v++)
        local_of[v] = -1;
#define DEDUP(v)                                                                                   \
    (local_of[v] < 0 ? (ref_nodes[node_count] = (v), local_of[v] = (int32_t)node_count++)         \
                     : local_of[v])
    for (uint32_t i = 0; i < mb->target_count; i++)
        (void)DEDUP(mb->targets[i]);
    for (uint32_t l = 0; l < mb->layer_count; l++) {
        dst[l] = node_count;
        layer_edges[l] = 0;
        ref_indptr[l][0] = 0;
        for (uint32_t i = 0; i < dst[l]; i++) {
            uint64_t v = ref_nodes[i];
            uint64_t positions[MAX_FANOUT];
            uint32_t k = sample_positions(mb->seed, l, v, indptr[v + 1] - indptr[v],
                                          mb->fanouts[l], positions);
            for (uint32_t p = 0; p < k; p++) {
                uint32_t neighbour = indices[indptr[v] + positions[p]];
                if (edges == MAX_SUB_EDGES)
                    fail("test bug: reference subgraph too large");
                ref_indices[edges++] = (uint32_t)DEDUP(neighbour);
                layer_edges[l]++;
            }
            ref_indptr[l][i + 1] = layer_edges[l];
        }
        src[l] = node_count;
    }
#undef DEDUP
    uint32_t size = 32 + 16 * mb->layer_count + 8 * node_count;
    for (uint32_t l = 0; l < mb->layer_count; l++)
        size += 4 * (dst[l] + 1 + layer_edges[l]);
    if (size > out_len)
        fail("test bug: reference buffer too small");
    fill_bytes(out, 0, size);
    copy_bytes(out, (const uint8_t *)"SGRF", 4);
    put_le16(out + 4, 1);
    put_le16(out + 6, (uint16_t)mb->layer_count);
    put_le32(out + 8, node_count);
    put_le32(out + 12, edges);
    put_le32(out + 16, size);
    put_le64(out + 24, mb->seed);
    uint8_t *p = out + 32;
    for (uint32_t l = 0; l < mb->layer_count; l++, p += 16) {
        put_le32(p, dst[l]);
        put_le32(p + 4, src[l]);
        put_le32(p + 8, layer_edges[l]);
    }
    for (uint32_t i = 0; i < node_count; i++, p += 8)
        put_le64(p, ref_nodes[i]);
    uint32_t edge_base = 0;
    for (uint32_t l = 0; l < mb->layer_count; l++) {
        for (uint32_t i = 0; i <= dst[l]; i++, p += 4)
            put_le32(p, ref_indptr[l][i]);
        for (uint32_t e = 0; e < layer_edges[l]; e++, p += 4)
            put_le32(p, ref_indices[edge_base + e]);
        edge_base += layer_edges[l];
    }
    return size;
}

/* ---------------------------------------------------------------- minibatches ------------------ */

/* K minibatches from one SplitMix64 stream seeded with BATCH_SEED: even batches sample 2 layers
 * with fanouts (10, 5), odd ones 3 layers with (8, 4, 3); 48-79 targets, the first the hub in
 * even batches, the second a degree-0 node, and about one in six a repeat of an earlier one. */
#define BATCHES 12u
#define BATCH_SEED 0xB0A4D5E1F7E57001ull

static minibatch batches[BATCHES];

static void build_batches(void)
{
    rng r = {BATCH_SEED};
    for (uint32_t b = 0; b < BATCHES; b++) {
        minibatch *mb = &batches[b];
        mb->seed = rng_next(&r);
        if ((b & 1) == 0) {
            mb->layer_count = 2;
            mb->fanouts[0] = 10;
            mb->fanouts[1] = 5;
        } else {
            mb->layer_count = 3;
            mb->fanouts[0] = 8;
            mb->fanouts[1] = 4;
            mb->fanouts[2] = 3;
        }
        mb->target_count = 48 + rng_below(&r, 32);
        for (uint32_t i = 0; i < mb->target_count; i++) {
            uint64_t t;
            if (i == 0 && (b & 1) == 0)
                t = HUB;
            else if (i == 1)
                t = 17 + 50 * (uint64_t)rng_below(&r, NODES / 50);
            else if (i > 1 && rng_below(&r, 6) == 0)
                t = mb->targets[rng_below(&r, i)];
            else
                t = rng_below(&r, NODES);
            mb->targets[i] = t;
        }
    }
}

#define NS_CONFIG_MAX (32u + 8u * MAX_TARGETS)
static uint8_t ns_config[2][NS_CONFIG_MAX] __attribute__((aligned(4096)));

/* NS_SUBMIT of minibatch mb from buffer slot `which`, asking for the nodes' features too when
 * `features` is set; returns its cid. */
static uint16_t start_ns_submit_with(const minibatch *mb, uint32_t which, int features)
{
    uint8_t *c = ns_config[which];
    uint32_t size = 32 + 8 * mb->target_count;
    fill_bytes(c, 0, NS_CONFIG_MAX);
    copy_bytes(c, (const uint8_t *)"NSCF", 4);
    put_le16(c + 4, 1);
    c[6] = (uint8_t)mb->layer_count;
    c[7] = features ? 1u : 0u; /* NS_FLAG_FEATURES */
    put_le64(c + 8, mb->seed);
    for (uint32_t l = 0; l < mb->layer_count; l++)
        put_le16(c + 16 + 2 * l, mb->fanouts[l]);
    put_le32(c + 24, mb->target_count);
    for (uint32_t i = 0; i < mb->target_count; i++)
        put_le64(c + 32 + 8 * i, mb->targets[i]);
    uint8_t sqe[64];
    sqe_init(sqe, SAGESSD_IO_NS_SUBMIT, 0);
    put_le32(sqe + 40, size / 4);               /* CDW10: NDT, dwords */
    put_le32(sqe + 48, (size + 4095) / 4096 - 1); /* CDW12: 4 KiB units, 0-based */
    return start_command(sqe, c, size);
}

static uint16_t start_ns_submit(const minibatch *mb, uint32_t which)
{
    return start_ns_submit_with(mb, which, 0);
}

static uint32_t ns_submit(const minibatch *mb, uint32_t which)
{
    uint32_t tag;
    expect_status("NS_SUBMIT", wait_command(start_ns_submit(mb, which), &tag), 0);
    return tag;
}

#define RESULT_BYTES (256u * 1024u)
static uint8_t result[RESULT_BYTES] SELFTEST_DDR __attribute__((aligned(4096)));
static uint8_t reference[RESULT_BYTES] SELFTEST_DDR __attribute__((aligned(8)));

/* NS_COLLECT of `tag` into result[..buffer_len]; returns the status field, dword 0 in *dw0. */
static uint16_t ns_collect(uint32_t tag, uint32_t buffer_len, uint32_t *dw0)
{
    uint8_t sqe[64];
    sqe_init(sqe, SAGESSD_IO_NS_COLLECT, 0);
    put_le32(sqe + 40, buffer_len / 4);               /* CDW10: NDT, dwords */
    put_le32(sqe + 48, (buffer_len + 4095) / 4096 - 1); /* CDW12: 4 KiB units, 0-based */
    put_le32(sqe + 52, tag);                          /* CDW13: the tag */
    return wait_command(start_command(sqe, result, buffer_len), dw0);
}

static uint64_t checksum = FNV_OFFSET;

/* Collects batch b's subgraph, checks it against the reference, folds it into the checksum. */
static void collect_and_check(uint32_t b, uint32_t tag)
{
    const minibatch *mb = &batches[b];
    uint32_t size;
    fill_bytes(result, 0xA5, RESULT_BYTES);
    expect_status("NS_COLLECT", ns_collect(tag, RESULT_BYTES, &size), 0);
    uint32_t want = reference_subgraph(mb, reference, RESULT_BYTES);
    if (size != want || get_le32(result + 16) != want) {
        put_str("sagessd-selftest FAIL batch ");
        put_u32(b);
        put_str(": subgraph of ");
        put_u32(size);
        put_str(" bytes, the reference has ");
        put_u32(want);
        put_str("\n");
        platform_exit(1);
    }
    for (uint32_t i = 0; i < size; i++) {
        if (result[i] != reference[i]) {
            put_str("sagessd-selftest FAIL batch ");
            put_u32(b);
            put_str(": subgraph differs from the reference at byte ");
            put_u32(i);
            put_str("\n");
            platform_exit(1);
        }
    }
    checksum = fnv1a(checksum, result, size);
    put_str("sagessd-selftest batch ");
    put_u32(b);
    put_str(" layers ");
    put_u32(mb->layer_count);
    put_str(" targets ");
    put_u32(mb->target_count);
    put_str(" nodes ");
    put_u32(get_le32(result + 8));
    put_str(" edges ");
    put_u32(get_le32(result + 12));
    put_str(" bytes ");
    put_u32(size);
    put_str("\n");
}

/* Batch b sampled again with its nodes' features: the subgraph is the plain one with the
 * header's feature_row_bytes set, and after it (8-byte aligned) each node's row, read by the
 * firmware from the feature region. */
static void check_features(uint32_t b)
{
    const minibatch *mb = &batches[b];
    uint32_t tag, size;
    expect_status("NS_SUBMIT with features", wait_command(start_ns_submit_with(mb, 0, 1), &tag), 0);
    fill_bytes(result, 0xA5, RESULT_BYTES);
    expect_status("NS_COLLECT with features", ns_collect(tag, RESULT_BYTES, &size), 0);
    uint32_t plain = reference_subgraph(mb, reference, RESULT_BYTES);
    uint32_t nodes = get_le32(reference + 8);
    uint32_t at = (plain + 7u) & ~7u;
    if (size != at + nodes * FEATURE_ROW_BYTES || get_le32(result + 16) != size)
        fail_code("the subgraph with features has the wrong size", (int32_t)size);
    if (get_le32(result + 20) != FEATURE_ROW_BYTES)
        fail_code("feature_row_bytes", (int32_t)get_le32(result + 20));
    for (uint32_t i = 0; i < plain; i++) {
        /* The header differs in its size and feature_row_bytes words only. */
        int size_word = i >= 16 && i < 24;
        if (!size_word && result[i] != reference[i])
            fail_code("the subgraph with features differs from the reference at byte", (int32_t)i);
    }
    for (uint32_t i = plain; i < at; i++)
        if (result[i] != 0)
            fail_code("the padding before the features is not zero at byte", (int32_t)i);
    for (uint32_t n = 0; n < nodes; n++) {
        uint32_t v = (uint32_t)get_le64(reference + 32 + 16 * mb->layer_count + 8 * n);
        for (uint32_t w = 0; w < FEATURE_ROW_BYTES / 4; w++)
            if (get_le32(result + at + n * FEATURE_ROW_BYTES + 4 * w) != feature_word(v, w))
                fail_code("a feature row differs from the node's; node", (int32_t)v);
    }
    put_str("sagessd-selftest features batch ");
    put_u32(b);
    put_str(" rows ");
    put_u32(nodes);
    put_str(" of ");
    put_u32(FEATURE_ROW_BYTES);
    put_str(" bytes equal the stored ones\n");
}

#ifdef SELFTEST_COSMOS
/* ---------------------------------------------------------------- reset and shutdown ----------- */

/* The commands whose data the glue moves by direct DMA only (Identify at a page offset, so that
 * it spans two host pages; Dataset Management), and those it must refuse before any DMA: a PRP1
 * that direct DMA cannot reach, more blocks than the controller's 8-bit length holds, a vendor
 * command whose CDW12 disagrees with its length. Commands without data go to the library. */
static void cosmos_commands(void)
{
    uint8_t sqe[64];
    uint8_t *id = result + 0x200;
    sqe_init(sqe, SAGESSD_ADMIN_IDENTIFY, 0);
    put_le32(sqe + 4, 0);
    put_le32(sqe + 40, 1); /* CNS 1: the controller */
    cosmos_queue = 0;
    expect_status("Identify controller", wait_command(start_command(sqe, id, 4096), NULL), 0);
    if (get_le16(id) != 0xFFFF || id[3072] != 'S' || id[3073] != 'A' || id[3074] != 'G' ||
        id[3075] != 'E' || get_le32(id + 3076) != config.max_targets)
        fail("Identify controller through the glue: wrong data");
    sqe_init(sqe, SAGESSD_ADMIN_IDENTIFY, 0);
    put_le32(sqe + 40, 0); /* CNS 0: the namespace */
    cosmos_queue = 0;
    expect_status("Identify namespace", wait_command(start_command(sqe, result, 4096), NULL), 0);
    if (result[130] != 12)
        fail("Identify namespace through the glue: LBADS is not 12");
    /* CNS values the stock Identify stops on (ASSERT): the library serves the active namespace
     * list and refuses what it does not know. */
    sqe_init(sqe, SAGESSD_ADMIN_IDENTIFY, 0);
    put_le32(sqe + 4, 0);
    put_le32(sqe + 40, 0x02);
    cosmos_queue = 0;
    expect_status("Identify active namespaces", wait_command(start_command(sqe, result, 4096), NULL),
                  0);
    if (get_le32(result) != NSID || get_le32(result + 4) != 0)
        fail("Identify active namespaces through the glue: not just namespace 1");
    sqe_init(sqe, SAGESSD_ADMIN_IDENTIFY, 0);
    put_le32(sqe + 40, 0x10);
    cosmos_queue = 0;
    expect_status("Identify with an unknown CNS",
                  wait_command(start_command(sqe, result, 4096), NULL), 0x002);

    /* Deallocate four filler blocks: they read as zeros afterwards. */
    static uint8_t range[16] __attribute__((aligned(16)));
    fill_bytes(range, 0, sizeof range);
    put_le32(range + 4, 4);
    put_le64(range + 8, FILLER_SLBA + 60);
    sqe_init(sqe, SAGESSD_IO_DSM, 0);
    put_le32(sqe + 40, 0);      /* NR: one range */
    put_le32(sqe + 44, 1u << 2); /* AD: deallocate */
    expect_status("Dataset Management", wait_command(start_command(sqe, range, 16), NULL), 0);
    transfer_range(0, FILLER_SLBA + 60, 4, readback);
    for (uint32_t i = 0; i < 4 * LBA_BYTES; i++)
        if (readback[i] != 0)
            fail_code("a deallocated block does not read as zeros at byte", (int32_t)i);

    /* Host buffers at a page offset: every auto unit is split at the host's pages, and the
     * last unit's direct DMA too (a Write and a Read at offsets 0x200 and 0xFF0; a collect). */
    for (uint32_t k = 0; k < 2; k++) {
        uint32_t off = k ? 0xFF0u : 0x200u;
        for (uint32_t i = 0; i < 4 * LBA_BYTES; i++)
            readback[off + i] = (uint8_t)(i * 13u + k);
        transfer_range(1, FILLER_SLBA + 40, 4, readback + off);
        fill_bytes(result, 0, 5 * LBA_BYTES);
        transfer_range(0, FILLER_SLBA + 40, 4, result + off);
        for (uint32_t i = 0; i < 4 * LBA_BYTES; i++)
            if (result[off + i] != (uint8_t)(i * 13u + k))
                fail_code("a Read at a page offset differs from the Write at byte", (int32_t)i);
    }
    {
        uint32_t tag, size;
        expect_status("NS_SUBMIT", wait_command(start_ns_submit(&batches[1], 0), &tag), 0);
        sqe_init(sqe, SAGESSD_IO_NS_COLLECT, 0);
        put_le32(sqe + 40, 5 * 4096 / 4);
        put_le32(sqe + 48, 4);
        put_le32(sqe + 52, tag);
        expect_status("NS_COLLECT at a page offset",
                      wait_command(start_command(sqe, result + 0x200, 5 * 4096), &size), 0);
        uint32_t want = reference_subgraph(&batches[1], reference, RESULT_BYTES);
        if (size != want || want <= 3 * 4096 || want > 5 * 4096)
            fail_code("NS_COLLECT at a page offset: size", (int32_t)size);
        for (uint32_t i = 0; i < want; i++)
            if (result[0x200 + i] != reference[i])
                fail_code("NS_COLLECT at a page offset differs from the reference at byte",
                          (int32_t)i);
    }

    sqe_init(sqe, SAGESSD_IO_WRITE, 0);
    put_le32(sqe + 40, FILLER_SLBA);
    cosmos_expect = SAGESSD_COSMOS_STATUS_PRP_OFFSET_INVALID;
    expect_status("WRITE from a PRP1 that is not 16-byte aligned",
                  wait_command(start_command(sqe, readback + 8, LBA_BYTES), NULL), 0x013);
    sqe_init(sqe, SAGESSD_IO_READ, 0);
    put_le32(sqe + 40, FILLER_SLBA);
    put_le32(sqe + 48, 256); /* 257 blocks: CDW12 bits 7:0 would say 1 */
    cosmos_expect = SAGESSD_COSMOS_STATUS_INVALID_FIELD;
    expect_status("READ of 257 blocks", wait_command(start_command(sqe, result, RESULT_BYTES), NULL),
                  0x002);
    sqe_init(sqe, SAGESSD_IO_NS_SUBMIT, 0);
    put_le32(sqe + 40, 800 / 4);
    put_le32(sqe + 48, 1); /* two units for 800 bytes */
    cosmos_expect = SAGESSD_COSMOS_STATUS_INVALID_FIELD;
    expect_status("NS_SUBMIT whose CDW12 disagrees with CDW10",
                  wait_command(start_command(sqe, ns_config[0], 800), NULL), 0x002);
    sqe_init(sqe, 0xC4, 0);
    expect_status("an unknown I/O opcode", wait_command(start_command(sqe, NULL, 0), NULL), 0x001);
    sqe_init(sqe, SAGESSD_IO_FLUSH, 0);
    expect_status("Flush", wait_command(start_command(sqe, NULL, 0), NULL), 0);

    /* Delete I/O Submission Queue with a Write of that queue in the glue: the glue finishes it
     * first (afterwards the controller would drop its CQE and keep its slot), then the stock
     * handler deletes the queue; the host creates it again. */
    fill_bytes(readback, 0x3C, 4 * LBA_BYTES);
    sqe_init(sqe, SAGESSD_IO_WRITE, 0);
    put_le32(sqe + 40, FILLER_SLBA + 44);
    put_le32(sqe + 48, 3);
    uint16_t write = start_command(sqe, readback, 4 * LBA_BYTES);
    sqe_init(sqe, 0x00, 0); /* Delete I/O Submission Queue */
    put_le32(sqe + 4, 0);
    put_le32(sqe + 40, IO_QUEUE);
    cosmos_queue = 0;
    cosmos_expect = 0; /* the stock handler's success; the library never sees it */
    uint16_t del = start_command(sqe, NULL, 0);
    expect_status("WRITE before its queue is deleted", wait_command(write, NULL), 0);
    expect_status("Delete I/O Submission Queue", wait_command(del, NULL), 0);
    cosmos_host_set_sq(IO_QUEUE, 1);
    transfer_range(0, FILLER_SLBA + 44, 4, result);
    for (uint32_t i = 0; i < 4 * LBA_BYTES; i++)
        if (result[i] != 0x3C)
            fail_code("the Write finished before its queue was deleted reads back wrong at byte",
                      (int32_t)i);
}

/* A controller reset (CC.EN cleared) with commands everywhere: writes, a read and a collect in
 * the glue, in the library and still in the controller's fetch queue, NAND work in flight. The
 * model fails the run if any of them completes afterwards or keeps its slot. Then the device must
 * be consistent: the graph intact, each filler block old or new, an old tag unknown, sampling
 * unchanged. Last, a normal shutdown, which the model checks is reported complete only after
 * every command, the NAND work and the bad-block table are done. */
static void cosmos_reset_and_shutdown(void)
{
    enum { WRITES = 4, WRITE_LBAS = 4 };
    uint16_t cids[WRITES + 2];
    uint32_t n = 0;
    uint32_t tag = ns_submit(&batches[0], 0);
    fill_bytes(readback, 0xC3, WRITES * WRITE_LBAS * LBA_BYTES);
    for (uint32_t k = 0; k < WRITES; k++) {
        uint8_t sqe[64];
        sqe_init(sqe, SAGESSD_IO_WRITE, 0);
        put_le32(sqe + 40, FILLER_SLBA + WRITE_LBAS * k);
        put_le32(sqe + 48, WRITE_LBAS - 1);
        cids[n++] = start_command(sqe, readback + k * WRITE_LBAS * LBA_BYTES,
                                  WRITE_LBAS * LBA_BYTES);
    }
    uint8_t sqe[64];
    sqe_init(sqe, SAGESSD_IO_READ, 0);
    put_le32(sqe + 40, INDICES_SLBA);
    put_le32(sqe + 48, 3);
    cids[n++] = start_command(sqe, readback + 32 * LBA_BYTES, 4 * LBA_BYTES);
    sqe_init(sqe, SAGESSD_IO_NS_COLLECT, 0);
    put_le32(sqe + 40, RESULT_BYTES / 4);
    put_le32(sqe + 48, RESULT_BYTES / 4096 - 1);
    put_le32(sqe + 52, tag);
    cids[n++] = start_command(sqe, result, RESULT_BYTES);
    for (uint32_t i = 0; i < 4; i++)
        main_loop_step();
    uint32_t abandoned = 0;
    for (uint32_t i = 0; i < n; i++)
        abandoned += !find_command(cids[i])->done;
    if (abandoned == 0 || cosmos_model_nand_queued() == 0)
        fail("test bug: the reset found nothing in flight");
    cosmos_model_stats before = cosmos_model_counts();
    cosmos_host_set_enable(0);
    for (uint32_t i = 0; i < 8 && g_nvmeTask.status != NVME_TASK_IDLE; i++)
        main_loop_step();
    if (g_nvmeTask.status != NVME_TASK_IDLE || cosmos_host_rdy())
        fail("the controller reset did not end in the idle state");
    for (uint32_t i = 0; i < n; i++)
        find_command(cids[i])->in_use = 0; /* the host forgets them */
    if (cosmos_model_slots_in_use() != 0)
        fail_code("controller slots still hold commands after the reset", (int32_t)cosmos_model_slots_in_use());
    cosmos_host_set_enable(1);
    cosmos_host_set_sq(IO_QUEUE, 1);
    for (uint32_t i = 0; i < 8 && !cosmos_host_rdy(); i++)
        main_loop_step();
    for (uint32_t i = 0; sagessd_fw_idle() != 1; i++) {
        if (i > 1000000)
            fail("the library never finished the abandoned work");
        main_loop_step();
    }
    check_graph_on_flash("after a controller reset");
    transfer_range(0, FILLER_SLBA, WRITES * WRITE_LBAS, readback);
    for (uint32_t l = 0; l < WRITES * WRITE_LBAS; l++) {
        const uint8_t *got = readback + l * LBA_BYTES;
        uint32_t old = 1, new_ = 1;
        for (uint32_t i = 0; i < LBA_BYTES; i++) {
            old &= got[i] == filler[l * LBA_BYTES + i];
            new_ &= got[i] == 0xC3;
        }
        if (!old && !new_)
            fail_code("after the reset a filler block holds neither its old nor its new data",
                      (int32_t)l);
    }
    expect_status("NS_COLLECT of a tag from before the reset", ns_collect(tag, 4096, NULL),
                  VENDOR_STATUS(VS_UNKNOWN_TAG));
    uint32_t size;
    expect_status("NS_SUBMIT after the reset", wait_command(start_ns_submit(&batches[0], 0), &tag), 0);
    expect_status("NS_COLLECT after the reset", ns_collect(tag, RESULT_BYTES, &size), 0);
    uint32_t want = reference_subgraph(&batches[0], reference, RESULT_BYTES);
    for (uint32_t i = 0; i < want; i++)
        if (size != want || result[i] != reference[i])
            fail_code("the subgraph after the reset differs from the reference at byte", (int32_t)i);
    cosmos_model_stats after_reset = cosmos_model_counts();

    cosmos_host_request_shutdown();
    for (uint32_t i = 0; i < 8 && cosmos_host_shst() != 2; i++)
        main_loop_step();
    if (cosmos_host_shst() != 2 || g_nvmeTask.status != NVME_TASK_WAIT_RESET)
        fail("the shutdown was not reported complete");
    cosmos_host_set_enable(0);
    for (uint32_t i = 0; i < 8 && g_nvmeTask.status != NVME_TASK_IDLE; i++)
        main_loop_step();
    cosmos_model_stats c = cosmos_model_counts();
    put_str("sagessd-selftest cosmos reset abandoned ");
    put_u32(abandoned);
    put_str(" of ");
    put_u32(n);
    put_str(" commands, released ");
    put_u32(after_reset.slot_releases - before.slot_releases);
    put_str(" slots; shutdown complete after ");
    put_u32(c.bbt_updates);
    put_str(" bad-block table write\n");
    put_str("sagessd-selftest cosmos dma auto-units ");
    put_u32(c.auto_units);
    put_str(" direct ");
    put_u32(c.direct_requests);
    put_str(" cqes controller ");
    put_u32(c.hardware_cqes);
    put_str(" glue ");
    put_u32(c.firmware_cqes);
    put_str("\n");
    put_str("sagessd-selftest cosmos nand pages read ");
    put_u32(c.nand_reads);
    put_str(" programmed ");
    put_u32(c.nand_programs);
    put_str(" by the NSC's DMA in the library's windows (named bytes checked), cache lines "
            "invalidated ");
    put_u32(c.lines_invalidated);
    put_str(" cleaned ");
    put_u32(c.lines_cleaned);
    put_str("\n");
}
#endif

/* ---------------------------------------------------------------- main ------------------------- */

_Static_assert(sizeof(sagessd_geometry) == 24, "sagessd_geometry is 24 bytes");
_Static_assert(sizeof(sagessd_config) == 32, "sagessd_config is 32 bytes");
_Static_assert(sizeof(sagessd_completion) == 20, "sagessd_completion is 20 bytes");
_Static_assert(offsetof(sagessd_completion, cqe) == 4, "cqe at offset 4");

int main(void)
{
    platform_init();
    put_str("sagessd-selftest start\n");
    if (sagessd_fw_abi_version() != SAGESSD_FW_ABI_VERSION)
        fail_code("ABI version mismatch: library reports", (int32_t)sagessd_fw_abi_version());

    /* Boot over erased NAND and a zeroed arena. */
    for (uint32_t p = 0; p < NAND_PAGES; p++)
        fill_bytes(nand[p], 0xFF, WINDOW_BYTES);
    size_t dram_bytes = 0;
    int32_t rc = sagessd_fw_dram_size(&config, &geometry, &dram_bytes);
    if (rc != SAGESSD_OK)
        fail_code("sagessd_fw_dram_size", rc);
    if (dram_bytes > sizeof arena)
        fail_code("the firmware needs more DRAM than the arena; KiB needed",
                  (int32_t)(dram_bytes >> 10));
    put_str("sagessd-selftest abi ");
    put_u32(sagessd_fw_abi_version());
    put_str(" arena ");
    put_u32((uint32_t)dram_bytes);
    put_str(" bytes nand ");
    put_u32(PAGES);
    put_str(" pages of ");
    put_u32(PAGE_BYTES);
    put_str(" bytes\n");
    arena_used = (uint32_t)dram_bytes;
#ifdef SELFTEST_COSMOS
    cosmos_model_init();
    {
        sagessd_geometry g;
        sagessd_cosmos_geometry(&g);
        if (g.channels != geometry.channels || g.ways != geometry.ways ||
            g.dies_per_way != geometry.dies_per_way || g.blocks_per_die != geometry.blocks_per_die ||
            g.pages_per_block != geometry.pages_per_block ||
            g.page_size_bytes != geometry.page_size_bytes)
            fail("the glue's geometry is not the self-test's");
    }
    static uint8_t nand_area[SAGESSD_COSMOS_NAND_AREA_BYTES] SELFTEST_DDR
        __attribute__((aligned(16)));
    if (sagessd_cosmos_nand_init(nand_area) != 0)
        fail("sagessd_cosmos_nand_init");
    const sagessd_flash_ops ops = {recorded_flash_submit, sagessd_cosmos_flash_ops.ctx};
#else
    sagessd_flash_ops ops = {.submit = flash_submit, .ctx = (void *)nand};
#endif
    rc = sagessd_fw_init(&config, &geometry, arena, dram_bytes, &ops);
    if (rc != SAGESSD_OK)
        fail_code("sagessd_fw_init", rc);
    if (sagessd_fw_init(&config, &geometry, arena, dram_bytes, &ops) != SAGESSD_ERR_STATE)
        fail("a second sagessd_fw_init did not return SAGESSD_ERR_STATE");
#ifdef SELFTEST_COSMOS
    static uint8_t staging[SAGESSD_COSMOS_STAGING_BYTES(COSMOS_STAGING_BYTES)] SELFTEST_DDR
        __attribute__((aligned(4096)));
    if (sagessd_cosmos_init(staging, COSMOS_STAGING_BYTES) != 0)
        fail("sagessd_cosmos_init");
    cosmos_host_set_enable(1);
    cosmos_host_set_sq(IO_QUEUE, 1); /* as Create I/O Submission Queue would */
    for (uint32_t i = 0; i < 8 && !cosmos_host_rdy(); i++)
        main_loop_step();
    if (!cosmos_host_rdy())
        fail("the controller never became ready");
#endif

    /* Store the graph, churn the flash until garbage collection has moved it, read it back. */
    build_graph();
    lay_out_image();
    transfer_range(1, INDPTR_SLBA, INDPTR_LBAS, image + INDPTR_SLBA * LBA_BYTES);
    transfer_range(1, INDICES_SLBA, indices_lbas(), image + INDICES_SLBA * LBA_BYTES);
    transfer_range(1, FEATURES_SLBA, FEATURES_LBAS, image + FEATURES_SLBA * LBA_BYTES);
    for (filler_pass = 0; filler_pass < FILLER_PASSES; filler_pass++) {
        fill_filler(filler_pass);
        write_filler(0, FILLER_LBAS);
    }
    if (SELFTEST_SMALL_ARRAY_CHECKS && flash_stats.erases == 0)
        fail("the filler writes did not make the FTL erase a block");
    check_graph_on_flash("after garbage collection");
    put_str("sagessd-selftest graph nodes ");
    put_u32(NODES);
    put_str(" edges ");
    put_u32(edge_count);
    put_str(" hub-degree ");
    put_u32(HUB_DEGREE);
    put_str(" stored, survived garbage collection\n");

    /* Attach it, with its feature region (a 64-byte extension after the descriptor). */
    static uint8_t descriptor[128] __attribute__((aligned(16)));
    copy_bytes(descriptor, (const uint8_t *)"GRPH", 4);
    put_le16(descriptor + 4, 1);
    descriptor[6] = 4; /* id width */
    descriptor[7] = 1; /* GRAPH_FLAG_FEATURES */
    copy_bytes(descriptor + 64, (const uint8_t *)"FEAT", 4);
    put_le32(descriptor + 68, FEATURE_ROW_BYTES);
    put_le64(descriptor + 72, FEATURES_SLBA);
    put_le64(descriptor + 80, FEATURES_LBAS);
    put_le64(descriptor + 8, NODES);
    put_le64(descriptor + 16, edge_count);
    put_le64(descriptor + 24, INDPTR_SLBA);
    put_le64(descriptor + 32, INDPTR_LBAS);
    put_le64(descriptor + 40, INDICES_SLBA);
    put_le64(descriptor + 48, indices_lbas());
    uint8_t sqe[64];
    sqe_init(sqe, SAGESSD_IO_GRAPH_ATTACH, 0);
    put_le32(sqe + 40, 128 / 4);
    expect_status("GRAPH_ATTACH", wait_command(start_command(sqe, descriptor, 128), NULL), 0);

    /* Sample: two jobs in flight, collected in order. */
    build_batches();
    uint32_t reads_before_sampling = flash_stats.reads;
    for (uint32_t b = 0; b < BATCHES; b += 2) {
        /* Push the graph out of the page buffer first: the samples must come from flash. */
        write_filler(0, 24);
        uint32_t tag0 = ns_submit(&batches[b], 0);
        uint32_t tag1 = ns_submit(&batches[b + 1], 1);
        uint32_t dw0;
        if (b == 0) {
            /* Both slots hold jobs: a third is refused, and may be retried later. */
            expect_status("NS_SUBMIT with both slots busy",
                          wait_command(start_ns_submit(&batches[b], 0), NULL),
                          VENDOR_STATUS(VS_NO_FREE_SLOT));
            expect_status("NS_COLLECT of an unknown tag", ns_collect(0xFFFFFFFFu, 4096, NULL),
                          VENDOR_STATUS(VS_UNKNOWN_TAG));
            /* Too small a buffer: the size needed comes back, the job stays collectable. */
            uint32_t want = reference_subgraph(&batches[b], reference, RESULT_BYTES);
            if (want <= 4096)
                fail("test bug: batch 0's subgraph fits 4 KiB, so it cannot be too big for one");
            expect_status("NS_COLLECT into 4 KiB", ns_collect(tag0, 4096, &dw0),
                          VENDOR_STATUS(VS_BUFFER_TOO_SMALL));
            if (dw0 != want)
                fail_code("BufferTooSmall reported the wrong size", (int32_t)dw0);
#ifdef SELFTEST_COSMOS
            /* A buffer that is not whole 4 KiB units: the glue refuses it (auto DMA would write
             * the whole last unit past its end); one exactly as big as the subgraph, too. */
            if (((want + 15u) & 4095u) == 0)
                fail("test bug: batch 0's subgraph is whole 4 KiB units");
            cosmos_expect = SAGESSD_COSMOS_STATUS_INVALID_FIELD;
            expect_status("NS_COLLECT into a buffer of the subgraph's size",
                          ns_collect(tag0, (want + 15u) & ~15u, &dw0), 0x002);
            cosmos_expect = SAGESSD_COSMOS_STATUS_INVALID_FIELD;
            expect_status("NS_COLLECT into 64 bytes", ns_collect(tag0, 64, &dw0), 0x002);
#else
            expect_status("NS_COLLECT into 64 bytes", ns_collect(tag0, 64, &dw0),
                          VENDOR_STATUS(VS_BUFFER_TOO_SMALL));
            if (dw0 != want)
                fail_code("BufferTooSmall reported the wrong size", (int32_t)dw0);
#endif
        }
        collect_and_check(b, tag0);
        collect_and_check(b + 1, tag1);
        if (b == 0)
            expect_status("NS_COLLECT of a collected tag", ns_collect(tag0, 4096, NULL),
                          VENDOR_STATUS(VS_UNKNOWN_TAG));
    }

    if (SELFTEST_SMALL_ARRAY_CHECKS && flash_stats.reads == reads_before_sampling)
        fail("sampling never read flash (the page buffer held the whole graph)");

    /* In-storage feature gather: two batches again, with their nodes' features. */
    for (uint32_t b = 0; b < 2; b++)
        check_features(b);

    /* Everything still on flash: the graph, and the filler's last pass. */
    check_graph_on_flash("after sampling");
    transfer_range(0, FILLER_SLBA, FILLER_LBAS, readback);
    for (uint32_t i = 0; i < FILLER_LBAS * LBA_BYTES; i++)
        if (readback[i] != filler[i])
            fail_code("the filler read back differs at byte", (int32_t)i);

    /* Quiesce: nothing may be left in flight. */
    for (uint32_t i = 0; i < 64 && main_loop_step(); i++)
        ;
#ifdef SELFTEST_COSMOS
    if (cosmos_model_nand_queued() != 0)
        fail("flash operations still pending at the end");
    cosmos_commands();
    cosmos_reset_and_shutdown();
#else
    if (pending_count != 0)
        fail("flash operations still pending at the end");
#endif

    put_str("sagessd-selftest flash reads ");
    put_u32(flash_stats.reads);
    put_str(" programs ");
    put_u32(flash_stats.programs);
    put_str(" erases ");
    put_u32(flash_stats.erases);
    put_str(" busy ");
    put_u32(flash_stats.busy);
    put_str("\n");
    put_str("sagessd-selftest checksum ");
    put_hex(checksum, 16);
    put_str(" batches ");
    put_u32(BATCHES);
    put_str("\n");
    put_str("sagessd-selftest PASS\n");
    platform_exit(0);
}
