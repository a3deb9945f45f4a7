/* The C API of libsagessd_fw.a exercised from C, against the host build of the library.
 *
 * Built and run by firmware/ffi/tests/c_api.rs (`cargo test -p sagessd-firmware-ffi`):
 *   cc -std=c11 -I firmware/include host_test.c libsagessd_fw.a -lpthread -ldl -lm -lrt -lutil
 *
 * Plays the board: a RAM-backed NAND array whose operations complete later, from the main loop
 * (never inside the flash submit callback), a main loop that polls the firmware, and NVMe
 * commands built byte by byte as a board's NVMe front end would fetch them. Checks the error
 * paths (NULL pointers, bad configurations, double init, re-entry from a callback), Identify,
 * a WRITE/READ round trip, GRAPH_ATTACH of a small CSR graph written with WRITEs, NS_SUBMIT +
 * NS_COLLECT (the sampled subgraph must only hold real edges of the graph), command slots
 * running out, an unknown opcode and malformed NS_configs.
 *
 * Exits 0 and prints "host_test: OK" on success; prints the failed check and exits 1 otherwise. */
#include "sagessd_fw.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                    \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "host_test: FAILED at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fputc('\n', stderr);                                                            \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

#define CHECK_EQ(got, want)                                                                 \
    CHECK((long long)(got) == (long long)(want), "got %lld, want %lld", (long long)(got),   \
          (long long)(want))

/* ---- NVMe status fields (the 15-bit field of CQE bytes 14..15 without the phase bit). ---- */
#define ST_SUCCESS 0x0000
#define ST_INVALID_OPCODE 0x4001    /* generic 0x01, DNR */
#define ST_DATA_TRANSFER_ERROR 0x0004
#define ST_VENDOR(sc, dnr) (0x0700 | (sc) | ((dnr) ? 0x4000 : 0))
#define VS_BAD_MAGIC 0x01
#define VS_BAD_FANOUT 0x04
#define VS_NODE_OUT_OF_RANGE 0x06
#define VS_UNKNOWN_TAG 0x0A
#define VS_BUFFER_TOO_SMALL 0x0C

/* ---- The device: 2 channels x 2 ways, 16 blocks of 8 pages of 2 KiB (512 KiB raw). -------- */
static const sagessd_geometry GEOMETRY = {2, 2, 1, 16, 8, 2048};
#define PAGE_BYTES 2048u
/* A page as the fake stores it and as the library's windows hold it: data, then spare. */
#define WINDOW_BYTES (PAGE_BYTES + SAGESSD_FW_SPARE_BYTES)
#define PAGES (2u * 2u * 1u * 16u * 8u)
#define BLOCKS (2u * 2u * 1u * 16u)
#define PAGES_PER_BLOCK 8u
#define BLOCK_BYTES 512u /* logical block (LBA) size: block_size_log2 = 9 */

static sagessd_config good_config(void)
{
    sagessd_config c;
    memset(&c, 0, sizeof c);
    c.block_size_log2 = 9;
    c.over_provisioning_percent = 7;
    c.isp_slots = 2;
    c.page_buffer_pages = 16;
    c.max_targets = 64;
    c.max_fanout = 16;
    c.max_subgraph_nodes = 4096;
    c.max_subgraph_edges = 16384;
    c.max_transfer_bytes = 16 * 1024;
    return c;
}

/* ---- RAM-backed NAND with deferred completions. ----------------------------------------- */
static uint8_t nand[PAGES * WINDOW_BYTES];
static uint32_t next_page[BLOCKS]; /* programs of a block must come in page order */

typedef struct {
    uint32_t tag, kind, address;
    uint8_t *dram_page;
    uint32_t sectors;
} flash_op;

#define FLASH_QUEUE 8u /* operations the "NAND scheduler" holds; beyond that: busy */
static flash_op pending[FLASH_QUEUE];
static unsigned pending_head, pending_count;
static unsigned long flash_ops_done, flash_reads, flash_busy_answers, flash_violations;
static int in_flash_submit;
static int reentry_checked;
static const uint8_t *arena_start, *arena_end;

static int32_t flash_submit(void *ctx, uint32_t tag, uint32_t kind, uint32_t address,
                            uint8_t *dram_page, uint32_t sectors)
{
    CHECK(ctx == (void *)nand, "ctx is passed back unchanged");
    CHECK(kind == SAGESSD_FLASH_READ ? sectors <= 0xFFFFu : sectors == 0,
          "sectors name a read's part of the page (0 for programs and erases): %u", sectors);
    CHECK(!in_flash_submit, "submit is not re-entered");
    if (!reentry_checked) {
        /* The library refuses calls from inside its own callback instead of corrupting state. */
        sagessd_completion c;
        uint8_t sqe[64] = {0};
        reentry_checked = 1;
        CHECK_EQ(sagessd_fw_poll(), SAGESSD_ERR_STATE);
        CHECK_EQ(sagessd_fw_submit(1, sqe, NULL, 0, &c), SAGESSD_ERR_STATE);
    }
    if (kind == SAGESSD_FLASH_ERASE) {
        CHECK(dram_page == NULL, "erase has no DRAM page");
        if (address >= BLOCKS)
            return -1;
    } else {
        CHECK(kind == SAGESSD_FLASH_READ || kind == SAGESSD_FLASH_PROGRAM, "kind %u", kind);
        CHECK(dram_page != NULL && dram_page >= arena_start &&
                  dram_page + WINDOW_BYTES <= arena_end,
              "the DRAM page lies inside the arena");
        if (address >= PAGES)
            return -1;
    }
    if (pending_count == FLASH_QUEUE) {
        flash_busy_answers++;
        return SAGESSD_FLASH_SUBMIT_BUSY;
    }
    pending[(pending_head + pending_count) % FLASH_QUEUE] = (flash_op){tag, kind, address, dram_page, sectors};
    pending_count++;
    return SAGESSD_FLASH_SUBMIT_STARTED;
}

/* Completes the oldest started operation (FIFO keeps every die's order), doing its work now. */
static int complete_one_flash_op(void)
{
    if (pending_count == 0)
        return 0;
    flash_op op = pending[pending_head];
    pending_head = (pending_head + 1) % FLASH_QUEUE;
    pending_count--;
    uint32_t status = SAGESSD_FLASH_OK;
    switch (op.kind) {
    case SAGESSD_FLASH_READ:
        flash_reads++;
        /* Only the sectors the library named, and the spare: the others are left as they were,
         * so a library that relied on bytes it did not ask for reads stale data and the checks
         * below fail. */
        for (uint32_t i = 0; i < 16; i++)
            if (op.sectors >> i & 1)
                memcpy(op.dram_page + i * (PAGE_BYTES / 16),
                       &nand[(size_t)op.address * WINDOW_BYTES + i * (PAGE_BYTES / 16)],
                       PAGE_BYTES / 16);
        memcpy(op.dram_page + PAGE_BYTES, &nand[(size_t)op.address * WINDOW_BYTES + PAGE_BYTES],
               WINDOW_BYTES - PAGE_BYTES);
        break;
    case SAGESSD_FLASH_PROGRAM: {
        uint32_t block = op.address / PAGES_PER_BLOCK;
        if (op.address % PAGES_PER_BLOCK != next_page[block]) {
            flash_violations++;
            status = SAGESSD_FLASH_MEDIA;
            break;
        }
        next_page[block]++;
        memcpy(&nand[(size_t)op.address * WINDOW_BYTES], op.dram_page, WINDOW_BYTES);
        break;
    }
    case SAGESSD_FLASH_ERASE:
        memset(&nand[(size_t)op.address * PAGES_PER_BLOCK * WINDOW_BYTES], 0xFF,
               PAGES_PER_BLOCK * WINDOW_BYTES);
        next_page[op.address] = 0;
        break;
    }
    flash_ops_done++;
    CHECK_EQ(sagessd_fw_flash_complete(op.tag, status), SAGESSD_OK);
    return 1;
}

/* ---- The board's main loop. ---------------------------------------------------------------- */
#define MAX_DONE 256
static sagessd_completion done[MAX_DONE];
static unsigned done_count;

/* One turn of the main loop: poll until idle, take completions, complete a few flash ops. */
static int main_loop_turn(void)
{
    int progress = 0, rc;
    while ((rc = sagessd_fw_poll()) > 0)
        progress = 1;
    CHECK_EQ(rc, 0);
    sagessd_completion c;
    while ((rc = sagessd_fw_next_completion(&c)) == 1) {
        CHECK(done_count < MAX_DONE, "too many completions");
        done[done_count++] = c;
        progress = 1;
    }
    CHECK_EQ(rc, 0);
    for (int i = 0; i < 3; i++)
        progress |= complete_one_flash_op();
    return progress;
}

/* Runs the main loop until completion (sq_id, cid) arrives; returns it. */
static sagessd_completion wait_for(uint16_t sq_id, uint16_t cid)
{
    for (unsigned long turns = 0; turns < 1000000; turns++) {
        for (unsigned i = 0; i < done_count; i++) {
            if (done[i].sq_id == sq_id && done[i].cid == cid) {
                sagessd_completion c = done[i];
                done[i] = done[--done_count];
                return c;
            }
        }
        if (!main_loop_turn() && pending_count == 0) {
            CHECK(0, "the firmware went idle without completing command %u/%u", sq_id, cid);
        }
    }
    CHECK(0, "command %u/%u never completed", sq_id, cid);
    return done[0];
}

/* ---- NVMe commands. ------------------------------------------------------------------------ */
static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, (uint16_t)v); put16(p + 2, (uint16_t)(v >> 16)); }
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t *p) { return get16(p) | ((uint32_t)get16(p + 2) << 16); }
static uint64_t get64(const uint8_t *p) { return get32(p) | ((uint64_t)get32(p + 4) << 32); }

static uint16_t next_cid = 1;

typedef struct {
    uint16_t status; /* the 15-bit status field */
    uint32_t dw0;
    int completed_in_submit;
} result;

static result decode(const sagessd_completion *c, uint16_t sq_id, uint16_t cid, int now)
{
    CHECK_EQ(c->sq_id, sq_id);
    CHECK_EQ(c->cid, cid);
    CHECK_EQ(get16(c->cqe + 10), sq_id); /* CQE SQ identifier */
    CHECK_EQ(get16(c->cqe + 12), cid);   /* CQE command identifier */
    result r = {(uint16_t)(get16(c->cqe + 14) >> 1), get32(c->cqe), now};
    return r;
}

/* Submits one command and runs the main loop until it completes. */
static result command(uint16_t sq_id, uint8_t opcode, uint32_t nsid, uint32_t cdw10,
                      uint32_t cdw11, uint32_t cdw12, uint32_t cdw13, uint8_t *data,
                      uint32_t len)
{
    uint8_t sqe[SAGESSD_SQE_BYTES];
    uint16_t cid = next_cid++;
    memset(sqe, 0, sizeof sqe);
    sqe[0] = opcode;
    put16(sqe + 2, cid);
    put32(sqe + 4, nsid);
    put32(sqe + 40, cdw10);
    put32(sqe + 44, cdw11);
    put32(sqe + 48, cdw12);
    put32(sqe + 52, cdw13);
    sagessd_completion c;
    int32_t rc;
    while ((rc = sagessd_fw_submit(sq_id, sqe, data, len, &c)) == SAGESSD_ERR_BUSY)
        main_loop_turn();
    if (rc == SAGESSD_COMPLETED)
        return decode(&c, sq_id, cid, 1);
    CHECK_EQ(rc, SAGESSD_PENDING);
    c = wait_for(sq_id, cid);
    return decode(&c, sq_id, cid, 0);
}

/* A vendor command's length in 4 KiB units, 0-based, for CDW12 (see SubmissionEntry::vendor). */
static uint32_t units(uint32_t len)
{
    return len ? (len + 4095) / 4096 - 1 : 0;
}

static result write_blocks(uint64_t slba, uint8_t *data, uint32_t blocks)
{
    return command(1, SAGESSD_IO_WRITE, SAGESSD_NSID, (uint32_t)slba, (uint32_t)(slba >> 32),
                   blocks - 1, 0, data, blocks * BLOCK_BYTES);
}

static result read_blocks(uint64_t slba, uint8_t *data, uint32_t blocks)
{
    return command(1, SAGESSD_IO_READ, SAGESSD_NSID, (uint32_t)slba, (uint32_t)(slba >> 32),
                   blocks - 1, 0, data, blocks * BLOCK_BYTES);
}

/* ---- The graph: 24 nodes, node v linked to v+1, v+2, v+5 and v+11 (mod 24). ---------------- */
#define NODES 24u
#define DEGREE 4u
#define EDGES (NODES * DEGREE)
#define INDPTR_SLBA 100u
#define INDICES_SLBA 101u
#define INDICES_BLOCKS ((EDGES * 4u + BLOCK_BYTES - 1) / BLOCK_BYTES)

static uint32_t neighbour(uint32_t v, uint32_t i)
{
    static const uint32_t step[DEGREE] = {1, 2, 5, 11};
    return (v + step[i]) % NODES;
}

static int is_edge(uint64_t v, uint64_t u)
{
    for (uint32_t i = 0; i < DEGREE; i++)
        if (neighbour((uint32_t)v, i) == u)
            return 1;
    return 0;
}

static void write_graph(void)
{
    static uint8_t indptr[BLOCK_BYTES], indices[INDICES_BLOCKS * BLOCK_BYTES];
    CHECK((NODES + 1) * 8 <= sizeof indptr, "indptr fits one block");
    for (uint32_t v = 0; v <= NODES; v++)
        put64(indptr + 8 * v, (uint64_t)v * DEGREE);
    for (uint32_t v = 0; v < NODES; v++)
        for (uint32_t i = 0; i < DEGREE; i++)
            put32(indices + 4 * (v * DEGREE + i), neighbour(v, i));
    CHECK_EQ(write_blocks(INDPTR_SLBA, indptr, 1).status, ST_SUCCESS);
    CHECK_EQ(write_blocks(INDICES_SLBA, indices, INDICES_BLOCKS).status, ST_SUCCESS);
}

static result graph_attach(void)
{
    static uint8_t d[64];
    memset(d, 0, sizeof d);
    memcpy(d, "GRPH", 4);
    put16(d + 4, 1);      /* version */
    d[6] = 4;             /* id width */
    put64(d + 8, NODES);
    put64(d + 16, EDGES);
    put64(d + 24, INDPTR_SLBA);
    put64(d + 32, 1);
    put64(d + 40, INDICES_SLBA);
    put64(d + 48, INDICES_BLOCKS);
    return command(1, SAGESSD_IO_GRAPH_ATTACH, SAGESSD_NSID, sizeof d / 4, 0, units(sizeof d), 0, d,
                   sizeof d);
}

/* An NS_config of `targets` with fanouts 3 and 2; `corrupt` 1: bad magic, 2: a zero fanout,
   3: a target out of range. */
static result ns_submit(uint64_t seed, const uint64_t *targets, uint32_t count, int corrupt)
{
    static uint8_t cfg[32 + 8 * 64];
    CHECK(count <= 64, "targets fit");
    memset(cfg, 0, sizeof cfg);
    memcpy(cfg, corrupt == 1 ? "XXXX" : "NSCF", 4);
    put16(cfg + 4, 1); /* version */
    cfg[6] = 2;        /* layers */
    put64(cfg + 8, seed);
    put16(cfg + 16, 3);
    put16(cfg + 18, corrupt == 2 ? 0 : 2);
    put32(cfg + 24, count);
    for (uint32_t i = 0; i < count; i++)
        put64(cfg + 32 + 8 * i, corrupt == 3 ? NODES + i : targets[i]);
    uint32_t len = 32 + 8 * count;
    return command(1, SAGESSD_IO_NS_SUBMIT, SAGESSD_NSID, len / 4, 0, units(len), 0, cfg, len);
}

static result ns_collect(uint32_t tag, uint8_t *buf, uint32_t len)
{
    return command(1, SAGESSD_IO_NS_COLLECT, SAGESSD_NSID, len / 4, 0, units(len), tag, buf, len);
}

/* FNV-1a 64 of the subgraph bytes. */
static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Checks a sampled subgraph (format: firmware/abi/src/subgraph.rs) against the graph. */
static void check_subgraph(const uint8_t *s, uint32_t size, uint64_t seed, const uint64_t *targets,
                           uint32_t count)
{
    CHECK(memcmp(s, "SGRF", 4) == 0, "subgraph magic");
    CHECK_EQ(get16(s + 4), 1);
    uint32_t layers = get16(s + 6), nodes = get32(s + 8), edges = get32(s + 12);
    CHECK_EQ(layers, 2);
    CHECK_EQ(get32(s + 16), size);
    CHECK_EQ(get64(s + 24), seed);
    const uint8_t *node_ids = s + 32 + 16 * layers;
    CHECK(nodes >= count && nodes <= NODES, "node count %u", nodes);
    for (uint32_t i = 0; i < count; i++)
        CHECK_EQ(get64(node_ids + 8 * i), targets[i]); /* distinct targets come first, in order */
    const uint8_t *p = node_ids + 8 * (size_t)nodes;
    uint32_t total_edges = 0, prev_src = count;
    for (uint32_t l = 0; l < layers; l++) {
        const uint8_t *e = s + 32 + 16 * l;
        uint32_t dst = get32(e), src = get32(e + 4), n_edges = get32(e + 8);
        CHECK_EQ(dst, prev_src); /* layer l + 1's destinations are layer l's sources */
        CHECK(src >= dst && src <= nodes, "layer %u: src %u dst %u", l, src, dst);
        uint32_t fanout = l == 0 ? 3 : 2;
        const uint8_t *indptr = p, *indices = p + 4 * ((size_t)dst + 1);
        CHECK_EQ(get32(indptr), 0);
        for (uint32_t d = 0; d < dst; d++) {
            uint32_t a = get32(indptr + 4 * d), b = get32(indptr + 4 * (d + 1));
            CHECK(b >= a && b - a <= fanout, "layer %u node %u: %u neighbours", l, d, b - a);
            for (uint32_t k = a; k < b; k++) {
                uint32_t j = get32(indices + 4 * k);
                CHECK(j < src, "local index %u < %u", j, src);
                CHECK(is_edge(get64(node_ids + 8 * d), get64(node_ids + 8 * j)),
                      "layer %u: %llu -> %llu is an edge of the graph", l,
                      (unsigned long long)get64(node_ids + 8 * d),
                      (unsigned long long)get64(node_ids + 8 * j));
            }
        }
        CHECK_EQ(get32(indptr + 4 * dst), n_edges);
        total_edges += n_edges;
        prev_src = src;
        p = indices + 4 * (size_t)n_edges;
    }
    CHECK_EQ(total_edges, edges);
    CHECK_EQ(prev_src, nodes);
    CHECK_EQ(p - s, size);
}

int main(void)
{
    sagessd_config cfg = good_config();
    sagessd_geometry geo = GEOMETRY;
    size_t bytes = 0;

    /* ---- Version and DRAM size, with their error paths. ---- */
    CHECK_EQ(sagessd_fw_abi_version(), SAGESSD_FW_ABI_VERSION);
    CHECK_EQ(sagessd_fw_dram_size(NULL, &geo, &bytes), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_dram_size(&cfg, NULL, &bytes), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_dram_size(&cfg, &geo, NULL), SAGESSD_ERR_ARGUMENT);
    {
        sagessd_config bad = cfg;
        bad.isp_slots = 0;
        CHECK_EQ(sagessd_fw_dram_size(&bad, &geo, &bytes), SAGESSD_ERR_CONFIG_ISP_SLOTS);
        bad = cfg;
        bad.page_buffer_pages = 17;
        CHECK_EQ(sagessd_fw_dram_size(&bad, &geo, &bytes), SAGESSD_ERR_CONFIG_PAGE_BUFFER_PAGES);
        bad = cfg;
        bad.max_transfer_bytes = 3000;
        CHECK_EQ(sagessd_fw_dram_size(&bad, &geo, &bytes), SAGESSD_ERR_CONFIG_MAX_TRANSFER);
        bad = cfg;
        bad.reserved1 = 1;
        CHECK_EQ(sagessd_fw_dram_size(&bad, &geo, &bytes), SAGESSD_ERR_ARGUMENT);
        sagessd_geometry g = geo;
        g.page_size_bytes = 1000;
        CHECK_EQ(sagessd_fw_dram_size(&cfg, &g, &bytes), SAGESSD_ERR_CONFIG_GEOMETRY);
        CHECK_EQ(SAGESSD_ERR_CONFIG_GEOMETRY, SAGESSD_ERR_CONFIG - 0);
    }
    CHECK_EQ(sagessd_fw_dram_size(&cfg, &geo, &bytes), SAGESSD_OK);
    CHECK(bytes > PAGE_BYTES * cfg.page_buffer_pages, "arena of %zu bytes", bytes);
    printf("host_test: DRAM arena %zu bytes\n", bytes);

    /* ---- Nothing works before init. ---- */
    sagessd_completion c;
    uint8_t sqe[SAGESSD_SQE_BYTES] = {0};
    CHECK_EQ(sagessd_fw_poll(), SAGESSD_ERR_STATE);
    CHECK_EQ(sagessd_fw_next_completion(&c), SAGESSD_ERR_STATE);
    CHECK_EQ(sagessd_fw_submit(1, sqe, NULL, 0, &c), SAGESSD_ERR_STATE);
    CHECK_EQ(sagessd_fw_flash_complete(0, SAGESSD_FLASH_OK), SAGESSD_ERR_STATE);
    CHECK_EQ(sagessd_fw_reset(), SAGESSD_ERR_STATE);
    CHECK_EQ(sagessd_fw_idle(), SAGESSD_ERR_STATE);

    /* ---- Init and its error paths. The arena is deliberately not zeroed. ---- */
    size_t arena_len = (bytes + 64 + 7) & ~(size_t)7;
    uint8_t *arena = aligned_alloc(SAGESSD_DRAM_ALIGN, arena_len);
    CHECK(arena != NULL, "allocating the arena");
    memset(arena, 0xA5, arena_len);
    arena_start = arena;
    arena_end = arena + bytes;
    memset(nand, 0xFF, sizeof nand);
    sagessd_flash_ops ops = {flash_submit, nand};
    sagessd_flash_ops no_submit = {NULL, nand};
    CHECK_EQ(sagessd_fw_init(NULL, &geo, arena, arena_len, &ops), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_init(&cfg, NULL, arena, arena_len, &ops), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_init(&cfg, &geo, NULL, arena_len, &ops), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_init(&cfg, &geo, arena, arena_len, NULL), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_init(&cfg, &geo, arena, arena_len, &no_submit), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_init(&cfg, &geo, arena + 4, bytes, &ops), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_init(&cfg, &geo, arena, bytes - 1, &ops), SAGESSD_ERR_CONFIG_DRAM_TOO_SMALL);
    {
        sagessd_config bad = cfg;
        bad.max_targets = 5000; /* above max_subgraph_nodes */
        CHECK_EQ(sagessd_fw_init(&bad, &geo, arena, arena_len, &ops), SAGESSD_ERR_CONFIG_MAX_TARGETS);
        bad = cfg;
        bad.block_size_log2 = 12; /* 4 KiB blocks on 2 KiB pages */
        CHECK_EQ(sagessd_fw_init(&bad, &geo, arena, arena_len, &ops), SAGESSD_ERR_CONFIG_BLOCK_SIZE);
    }
    CHECK_EQ(sagessd_fw_init(&cfg, &geo, arena, arena_len, &ops), SAGESSD_OK);
    CHECK_EQ(sagessd_fw_init(&cfg, &geo, arena, arena_len, &ops), SAGESSD_ERR_STATE);
    CHECK(arena[bytes] == 0xA5, "the library leaves the bytes past its arena alone");
    CHECK_EQ(sagessd_fw_idle(), 1);

    /* ---- Argument checks of submit and flash_complete. ---- */
    static uint8_t buf[64 * 1024];
    sqe[0] = SAGESSD_IO_FLUSH;
    put32(sqe + 4, SAGESSD_NSID);
    CHECK_EQ(sagessd_fw_submit(1, NULL, buf, 16, &c), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_submit(1, sqe, buf, 16, NULL), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_submit(1, sqe, NULL, 16, &c), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_submit(1, sqe, arena + 4096, 16, &c), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_next_completion(NULL), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_flash_complete(0, 7), SAGESSD_ERR_ARGUMENT);
    CHECK_EQ(sagessd_fw_flash_complete(0, SAGESSD_FLASH_OK), SAGESSD_ERR_STATE);
    CHECK_EQ(sagessd_fw_submit(1, sqe, NULL, 0, &c), SAGESSD_COMPLETED); /* Flush */
    CHECK_EQ(get16(c.cqe + 14) >> 1, ST_SUCCESS);

    /* ---- Identify. ---- */
    result r = command(0, SAGESSD_ADMIN_IDENTIFY, 0, 0x01, 0, 0, 0, buf, 4096);
    CHECK(r.completed_in_submit, "Identify completes inside submit");
    CHECK_EQ(r.status, ST_SUCCESS);
    CHECK_EQ(get16(buf), 0xFFFF);                    /* VID */
    CHECK(memcmp(buf + 3072, "SAGE", 4) == 0, "sampling limits in the vendor area");
    CHECK_EQ(get32(buf + 3076), cfg.max_targets);
    CHECK_EQ(get16(buf + 3080), cfg.max_fanout);
    r = command(0, SAGESSD_ADMIN_IDENTIFY, SAGESSD_NSID, 0x00, 0, 0, 0, buf, 4096);
    CHECK_EQ(r.status, ST_SUCCESS);
    uint64_t ns_blocks = get64(buf);
    CHECK(ns_blocks > 0 && ns_blocks < (uint64_t)PAGES * PAGE_BYTES / BLOCK_BYTES, "%llu blocks",
          (unsigned long long)ns_blocks);
    CHECK_EQ(buf[130], 9); /* LBADS */
    r = command(0, SAGESSD_ADMIN_IDENTIFY, 0, 0x01, 0, 0, 0, buf, 100);
    CHECK_EQ(r.status, ST_DATA_TRANSFER_ERROR); /* a buffer too small for the data */

    /* ---- Unknown opcodes: Invalid Command Opcode, Do Not Retry. ---- */
    r = command(1, 0xC4, SAGESSD_NSID, 0, 0, 0, 0, NULL, 0);
    CHECK_EQ(r.status, ST_INVALID_OPCODE);
    r = command(0, 0x7F, 0, 0, 0, 0, 0, NULL, 0);
    CHECK_EQ(r.status, ST_INVALID_OPCODE);

    /* ---- WRITE then READ, starting mid-page, across three pages. ---- */
    static uint8_t out[8 * BLOCK_BYTES], in[8 * BLOCK_BYTES];
    for (size_t i = 0; i < sizeof out; i++)
        out[i] = (uint8_t)(i * 7 + 3);
    r = write_blocks(3, out, 8);
    CHECK(!r.completed_in_submit, "a write waits for flash");
    CHECK_EQ(r.status, ST_SUCCESS);
    memset(in, 0, sizeof in);
    r = read_blocks(3, in, 8);
    CHECK_EQ(r.status, ST_SUCCESS);
    CHECK(memcmp(in, out, sizeof in) == 0, "read back what was written");
    /* More pages than the page buffer holds, so that reading them back needs flash reads. */
    {
        static uint8_t big[32 * BLOCK_BYTES], back[32 * BLOCK_BYTES];
        for (uint32_t k = 0; k < 5; k++) {
            for (size_t i = 0; i < sizeof big; i++)
                big[i] = (uint8_t)(i ^ (k * 31));
            CHECK_EQ(write_blocks(400 + 32 * k, big, 32).status, ST_SUCCESS);
        }
        unsigned long reads_before = flash_reads;
        for (uint32_t k = 0; k < 5; k++) {
            CHECK_EQ(read_blocks(400 + 32 * k, back, 32).status, ST_SUCCESS);
            for (size_t i = 0; i < sizeof back; i++)
                CHECK(back[i] == (uint8_t)(i ^ (k * 31)), "byte %zu of chunk %u", i, k);
        }
        CHECK(flash_reads > reads_before, "reads came from flash");
    }
    r = read_blocks(ns_blocks - 1, in, 2);
    CHECK_EQ(r.status, 0x4080); /* LBA Out of Range */

    /* ---- Command slots run out: SAGESSD_MAX_COMMANDS writes without polling, then busy. ---- */
    {
        static uint8_t wbuf[SAGESSD_MAX_COMMANDS][BLOCK_BYTES];
        uint16_t first = next_cid;
        for (unsigned i = 0; i < SAGESSD_MAX_COMMANDS; i++) {
            memset(wbuf[i], (int)i, BLOCK_BYTES);
            memset(sqe, 0, sizeof sqe);
            sqe[0] = SAGESSD_IO_WRITE;
            put16(sqe + 2, next_cid++);
            put32(sqe + 4, SAGESSD_NSID);
            put32(sqe + 40, 200 + i);
            CHECK_EQ(sagessd_fw_submit(1, sqe, wbuf[i], BLOCK_BYTES, &c), SAGESSD_PENDING);
        }
        put16(sqe + 2, next_cid);
        CHECK_EQ(sagessd_fw_submit(1, sqe, wbuf[0], BLOCK_BYTES, &c), SAGESSD_ERR_BUSY);
        for (unsigned i = 0; i < SAGESSD_MAX_COMMANDS; i++) {
            sagessd_completion w = wait_for(1, (uint16_t)(first + i));
            CHECK_EQ(get16(w.cqe + 14) >> 1, ST_SUCCESS);
        }
        r = read_blocks(200 + 37, in, 1);
        CHECK_EQ(r.status, ST_SUCCESS);
        CHECK(in[0] == 37 && in[BLOCK_BYTES - 1] == 37, "write 37 landed");
    }

    /* ---- A CSR graph written with WRITEs, attached, sampled in the device. ---- */
    write_graph();
    r = graph_attach();
    CHECK_EQ(r.status, ST_SUCCESS);
    const uint64_t targets[4] = {0, 7, 13, 22};
    const uint64_t seed = 42;
    r = ns_submit(seed, targets, 4, 0);
    CHECK(r.completed_in_submit, "NS_SUBMIT completes inside submit");
    CHECK_EQ(r.status, ST_SUCCESS);
    uint32_t tag = r.dw0;
    memset(buf, 0, sizeof buf);
    r = ns_collect(tag, buf, sizeof buf);
    CHECK(!r.completed_in_submit, "NS_COLLECT waits for the sampling");
    CHECK_EQ(r.status, ST_SUCCESS);
    uint32_t size = r.dw0;
    CHECK(size > 32 && size <= sizeof buf, "subgraph of %u bytes", size);
    check_subgraph(buf, size, seed, targets, 4);
    uint64_t checksum = fnv1a(buf, size);
    printf("host_test: subgraph of %u bytes, %u nodes, %u edges, FNV-1a 0x%016llx\n", size,
           get32(buf + 8), get32(buf + 12), (unsigned long long)checksum);
    r = ns_collect(tag, buf, sizeof buf);
    CHECK_EQ(r.status, ST_VENDOR(VS_UNKNOWN_TAG, 1)); /* collected once only */

    /* The same seed gives the same subgraph; a buffer too small says how big it must be. */
    r = ns_submit(seed, targets, 4, 0);
    CHECK_EQ(r.status, ST_SUCCESS);
    tag = r.dw0;
    r = ns_collect(tag, buf, 64);
    CHECK_EQ(r.status, ST_VENDOR(VS_BUFFER_TOO_SMALL, 0));
    CHECK_EQ(r.dw0, size);
    memset(buf, 0, sizeof buf);
    r = ns_collect(tag, buf, sizeof buf);
    CHECK_EQ(r.status, ST_SUCCESS);
    CHECK_EQ(r.dw0, size);
    CHECK(fnv1a(buf, size) == checksum, "same seed, same subgraph");

    /* ---- Malformed NS_configs become vendor statuses, not crashes. ---- */
    CHECK_EQ(ns_submit(seed, targets, 4, 1).status, ST_VENDOR(VS_BAD_MAGIC, 1));
    CHECK_EQ(ns_submit(seed, targets, 4, 2).status, ST_VENDOR(VS_BAD_FANOUT, 1));
    CHECK_EQ(ns_submit(seed, targets, 4, 3).status, ST_VENDOR(VS_NODE_OUT_OF_RANGE, 1));

    /* ---- Controller reset with writes, a read, a job and its collect in flight. ---- */
    {
        static uint8_t wbuf[4][8 * BLOCK_BYTES], rbuf[8 * BLOCK_BYTES], cbuf[16384];
        static uint8_t before[8 * BLOCK_BYTES];
        CHECK_EQ(read_blocks(600, before, 8).status, ST_SUCCESS);
        r = ns_submit(seed, targets, 4, 0);
        CHECK_EQ(r.status, ST_SUCCESS);
        uint32_t old_tag = r.dw0;
        uint16_t first = next_cid;
        for (unsigned i = 0; i < 4; i++) {
            memset(wbuf[i], 0xD0 + (int)i, sizeof wbuf[i]);
            memset(sqe, 0, sizeof sqe);
            sqe[0] = SAGESSD_IO_WRITE;
            put16(sqe + 2, next_cid++);
            put32(sqe + 4, SAGESSD_NSID);
            put32(sqe + 40, 600);
            put32(sqe + 48, 7);
            CHECK_EQ(sagessd_fw_submit(1, sqe, wbuf[i], sizeof wbuf[i], &c), SAGESSD_PENDING);
        }
        sqe[0] = SAGESSD_IO_READ;
        put16(sqe + 2, next_cid++);
        memset(rbuf, 0x11, sizeof rbuf);
        CHECK_EQ(sagessd_fw_submit(1, sqe, rbuf, sizeof rbuf, &c), SAGESSD_PENDING);
        memset(sqe, 0, sizeof sqe);
        sqe[0] = SAGESSD_IO_NS_COLLECT;
        put16(sqe + 2, next_cid++);
        put32(sqe + 4, SAGESSD_NSID);
        put32(sqe + 40, sizeof cbuf / 4);
        put32(sqe + 48, units(sizeof cbuf));
        put32(sqe + 52, old_tag);
        memset(cbuf, 0x22, sizeof cbuf);
        CHECK_EQ(sagessd_fw_submit(1, sqe, cbuf, sizeof cbuf, &c), SAGESSD_PENDING);
        sagessd_fw_poll();
        complete_one_flash_op();
        CHECK_EQ(sagessd_fw_idle(), 0);
        unsigned posted = done_count;
        CHECK_EQ(sagessd_fw_reset(), SAGESSD_OK);
        /* The buffers are the board's again: scribble over them. */
        memset(wbuf, 0xEE, sizeof wbuf);
        memset(rbuf, 0x11, sizeof rbuf);
        memset(cbuf, 0x22, sizeof cbuf);
        for (unsigned long turns = 0; sagessd_fw_idle() != 1; turns++) {
            CHECK(turns < 1000000, "the abandoned work never ended");
            main_loop_turn();
        }
        CHECK_EQ(done_count, posted); /* no abandoned command completed */
        for (size_t i = 0; i < sizeof rbuf; i++)
            CHECK(rbuf[i] == 0x11, "the abandoned read wrote byte %zu", i);
        for (size_t i = 0; i < sizeof cbuf; i++)
            CHECK(cbuf[i] == 0x22, "the abandoned collect wrote byte %zu", i);
        /* Each page holds its old data or one abandoned write's, never the scribbles. */
        CHECK_EQ(read_blocks(600, in, 8).status, ST_SUCCESS);
        for (unsigned b = 0; b < 8; b++) {
            const uint8_t *blk = in + b * BLOCK_BYTES;
            int old = memcmp(blk, before + b * BLOCK_BYTES, BLOCK_BYTES) == 0;
            int new_ = blk[0] >= 0xD0 && blk[0] <= 0xD3;
            for (unsigned i = 0; new_ && i < BLOCK_BYTES; i++)
                new_ = blk[i] == blk[0];
            CHECK(old || new_, "block %u after the reset", b);
        }
        CHECK_EQ(ns_collect(old_tag, buf, sizeof buf).status, ST_VENDOR(VS_UNKNOWN_TAG, 1));
        /* An abandoned id may be used again at once. */
        uint16_t saved = next_cid;
        next_cid = first;
        CHECK_EQ(write_blocks(600, out, 8).status, ST_SUCCESS);
        next_cid = saved;
        CHECK_EQ(read_blocks(600, in, 8).status, ST_SUCCESS);
        CHECK(memcmp(in, out, 8 * BLOCK_BYTES) == 0, "written after the reset");
    }

    /* ---- Drain: everything done, every flash op reported, nothing broke NAND rules. ---- */
    while (main_loop_turn() || pending_count > 0) {
    }
    CHECK_EQ(done_count, 0);
    CHECK_EQ(flash_violations, 0);
    CHECK(reentry_checked, "the re-entry check ran");
    CHECK_EQ(sagessd_fw_poll(), 0);
    CHECK_EQ(sagessd_fw_idle(), 1);
    printf("host_test: %lu flash operations (%lu reads, %lu busy answers)\n", flash_ops_done,
           flash_reads, flash_busy_answers);
    CHECK(flash_busy_answers > 0, "the busy answer of the flash HAL was exercised");
    printf("host_test: OK\n");
    free(arena);
    return 0;
}
