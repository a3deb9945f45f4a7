/*
 * cosmos_hw_model.c — the Cosmos+ NVMe host controller and GreedyFTL's NAND scheduler as the
 * board glue sees them (see cosmos_hw_model.h). Each behaviour cites the Verilog file of
 * NVMeHostController/src/ or the GreedyFTL file it follows.
 */
#include "cosmos_hw_model.h"
#include "sagessd_cosmos.h"

#include <stddef.h>

#define SLOTS 128u            /* 7-bit cmdSlotTag */
#define DMA_FIFO 256u /* dma_cmd_fifo.v: 256 requests; RX and TX then run apart, each in order */
#define HOST_PAGE 4096u
#define UNIT 4096u
/* The host's addresses as the device sees them: PRP lists at 0x1_0000_0000 + their address;
 * each slot's data buffer through its own 2 MiB window at 0x2_0000_0000 + slot × 2 MiB, its
 * pages in reverse order (an IOMMU's scattering), so that only the PRPs lead to the data. */
#define HOST_PCIE_BASE 0x100000000ull
#define IOVA_BASE 0x200000000ull
#define IOVA_SLOT_SHIFT 21u
#define CQ_DEPTH 64u
#define LISTS 32u
#define LIST_BYTES 1024u /* PRP lists come from aligned chunks (Linux: 256 B or a page), never across a page */

enum { AUTO_RX, AUTO_TX, DIRECT_RX, DIRECT_TX, KINDS };

typedef struct {
    int valid;      /* the slot holds a command (pcie_hcmd_slot_mgt.v) */
    int abandoned;  /* the host dropped it (CC.EN cleared): no CQE may come */
    uint16_t sq_id, cid;
    uint32_t dw[16];
    uint32_t units;     /* CDW12[7:0] + 1, latched at fetch (pcie_hcmd_sq_recv.v) */
    uint32_t remaining; /* bytes the auto DMA still counts down (pcie_hcmd_nlb.v) */
    uint8_t *buf;       /* the host's data buffer */
    uint32_t len;
    int list;           /* PRP list chunk, or -1 */
    uint32_t expect;
} slot_t;

typedef struct {
    uint8_t kind;
    uint8_t slot;
    uint16_t unit;
    uint32_t dev;
    uint64_t pcie;
    uint32_t len;
} dma_t;

typedef struct {
    int valid;
    uint16_t sq_id, cid, status;
    uint32_t dw0;
} library_result;

static slot_t slots[SLOTS];
static uint8_t fetch_queue[SLOTS];
static unsigned fetch_head, fetch_count;
/* Queued DMA requests per direction: 0 host→device (RX), 1 device→host (TX). */
static dma_t fifo[2][DMA_FIFO];
static unsigned fifo_head[2], fifo_count[2];
static uint32_t issued[KINDS], done[KINDS];
static sagessd_completion cq[CQ_DEPTH];
static unsigned cq_head, cq_count;
static uint8_t lists[LISTS][LIST_BYTES] __attribute__((aligned(LIST_BYTES)));
static int list_used[LISTS];
static library_result results[SLOTS];
static unsigned int cc_en, cc_shn, csts_shst, csts_rdy, queues_on;
/* I/O submission queues 1..8 (set_io_sq's index + 1): valid or deleted. */
static unsigned int sq_valid[9];
static cosmos_model_stats stats;
static uint32_t seq;

NVME_CONTEXT g_nvmeTask;

/* The board's one-line hook in GetFromNandReqQ (firmware/board/cosmos/sagessd_cosmos.h). */
void sagessd_cosmos_nand_done(unsigned int reqSlotTag, unsigned int reqStatus);
static int bbt_written; /* since shutdown processing began */

static void pool_init(void);

/* ---- small helpers ------------------------------------------------------------------------ */

static void fail(const char *check, const char *what, uint32_t value)
{
    cosmos_model_fail(check, what, value);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint64_t pcie_of(const void *p)
{
    return HOST_PCIE_BASE + (uint64_t)(uintptr_t)p;
}

static uint32_t pages_of(const slot_t *c)
{
    uint32_t off = (uint32_t)(uintptr_t)c->buf & (HOST_PAGE - 1);
    return c->len ? (off + c->len + HOST_PAGE - 1) / HOST_PAGE : 0;
}

/* The device address of byte `at` of slot s's data buffer. */
static uint64_t iova_of(unsigned s, uint32_t at)
{
    const slot_t *c = &slots[s];
    uint32_t t = ((uint32_t)(uintptr_t)c->buf & (HOST_PAGE - 1)) + at;
    uint32_t page = t / HOST_PAGE;
    return IOVA_BASE + ((uint64_t)s << IOVA_SLOT_SHIFT) +
           (uint64_t)(pages_of(c) - 1 - page) * HOST_PAGE + (t % HOST_PAGE);
}

/* The slot whose data window holds `pcie`, or -1 (a PRP list address). */
static int slot_of_iova(uint64_t pcie)
{
    if (pcie < IOVA_BASE)
        return -1;
    uint64_t s = (pcie - IOVA_BASE) >> IOVA_SLOT_SHIFT;
    return s < SLOTS ? (int)s : -1;
}

static uint8_t *host_ptr(uint64_t pcie)
{
    int s = slot_of_iova(pcie);
    if (s >= 0) {
        const slot_t *c = &slots[s];
        uint32_t j = (uint32_t)((pcie - IOVA_BASE) >> 12) & ((1u << (IOVA_SLOT_SHIFT - 12)) - 1);
        if (!c->valid || j >= pages_of(c))
            fail("overrun", "a DMA to a device address no host page is mapped at, low word",
                 (uint32_t)pcie);
        uintptr_t first = (uintptr_t)c->buf & ~(uintptr_t)(HOST_PAGE - 1);
        return (uint8_t *)(first + (uintptr_t)(pages_of(c) - 1 - j) * HOST_PAGE +
                           (uintptr_t)(pcie & (HOST_PAGE - 1)));
    }
    if (pcie < HOST_PCIE_BASE || pcie - HOST_PCIE_BASE > 0xFFFFFFFFull)
        fail("overrun", "a DMA to a PCIe address outside host memory, upper word",
             (uint32_t)(pcie >> 32));
    return (uint8_t *)(uintptr_t)(pcie - HOST_PCIE_BASE);
}

static void copy(uint8_t *dst, const uint8_t *src, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        dst[i] = src[i];
}

/* ---- the library's results, from its own calls (ld --wrap) ---------------------------------- */

int32_t __real_sagessd_fw_submit(uint16_t, const uint8_t *, uint8_t *, uint32_t,
                                 sagessd_completion *);
int32_t __real_sagessd_fw_next_completion(sagessd_completion *);
int32_t __real_sagessd_fw_reset(void);
int32_t __wrap_sagessd_fw_submit(uint16_t, const uint8_t *, uint8_t *, uint32_t,
                                 sagessd_completion *);
int32_t __wrap_sagessd_fw_next_completion(sagessd_completion *);
int32_t __wrap_sagessd_fw_reset(void);

static void record(const sagessd_completion *c)
{
    for (unsigned i = 0; i < SLOTS; i++)
        if (!results[i].valid) {
            results[i] = (library_result){1, c->sq_id, c->cid,
                                          (uint16_t)(c->cqe[14] | c->cqe[15] << 8), le32(c->cqe)};
            return;
        }
    fail("model", "more library results than slots", SLOTS);
}

int32_t __wrap_sagessd_fw_submit(uint16_t sq_id, const uint8_t *sqe, uint8_t *data, uint32_t len,
                                 sagessd_completion *out)
{
    int32_t rc = __real_sagessd_fw_submit(sq_id, sqe, data, len, out);
    if (rc == SAGESSD_COMPLETED)
        record(out);
    return rc;
}

int32_t __wrap_sagessd_fw_next_completion(sagessd_completion *out)
{
    int32_t rc = __real_sagessd_fw_next_completion(out);
    if (rc == 1)
        record(out);
    return rc;
}

int32_t __wrap_sagessd_fw_reset(void)
{
    for (unsigned i = 0; i < SLOTS; i++)
        results[i].valid = 0;
    return __real_sagessd_fw_reset();
}

/* ---- The NSC's view of DDR: zero-copy page moves and the A9's caches ---------------------- */

#define LINE SAGESSD_COSMOS_CACHE_LINE
#define PAGE_DATA BYTES_PER_DATA_REGION_OF_PAGE
#define SECTOR (PAGE_DATA / 16u)
#define PAGE_LINES (PAGE_DATA / LINE)

/* One flash operation as the library asked for it (cosmos_model_flash_submitting). */
typedef struct {
    uint32_t tag, kind, sectors;
    uint8_t *window;
} library_op;
static library_op submitting; /* the operation the glue's submit is building */
static int submitting_valid;
static library_op request_op[AVAILABLE_OUNTSTANDING_REQ_COUNT]; /* per scheduler request */

/* The cache maintenance the glue did since the library's last submit. */
#define CACHE_LOG 32u
static struct {
    uintptr_t start, end;
    int clean;
} cache_log[CACHE_LOG];
static unsigned cache_log_count;

/* Reads the NSC finished whose page the core does not see until it invalidates the lines. */
#define PENDING_READS 16u
typedef struct {
    int used;
    uint32_t tag, sectors;
    uint8_t *window;
    uint8_t data[PAGE_DATA];                 /* what the NSC wrote to DDR */
    uint8_t record[SAGESSD_FW_SPARE_BYTES];  /* the page's spare record */
    uint8_t seen[PAGE_LINES];                /* lines invalidated since the NSC wrote them */
} pending_read;
static pending_read pending[PENDING_READS];

static void cache_op(INTPTR adr, u32 len, int clean)
{
    uintptr_t start = (uintptr_t)adr, end = start + len;
    if ((start & (LINE - 1u)) != 0 || (len & (LINE - 1u)) != 0 || len == 0)
        fail("cache", "maintenance of a range that is not whole 32-byte lines (an edge line "
                      "would be cleaned over the NSC's data), length",
             len);
    if (submitting_valid) { /* inside the glue's submit: what SelectLowLevelReqQ checks */
        if (cache_log_count == CACHE_LOG)
            fail("model", "more cache operations in one flash submit than the model keeps",
                 cache_log_count);
        cache_log[cache_log_count].start = start;
        cache_log[cache_log_count].end = end;
        cache_log[cache_log_count++].clean = clean;
    }
    /* The lines are gone from the caches: the core now sees what DDR holds, which for a read
     * the NSC has finished is the page. */
    for (unsigned i = 0; i < PENDING_READS; i++) {
        pending_read *p = &pending[i];
        uintptr_t w = (uintptr_t)p->window;
        if (!p->used || end <= w || start >= w + PAGE_DATA)
            continue;
        for (uint32_t l = 0; l < PAGE_LINES; l++) {
            uintptr_t a = w + l * LINE;
            if (a >= start && a + LINE <= end) {
                for (uint32_t b = 0; b < LINE; b++)
                    p->window[l * LINE + b] = p->data[l * LINE + b];
                p->seen[l] = 1;
            }
        }
    }
}

void Xil_DCacheFlushRange(INTPTR adr, u32 len)
{
    stats.lines_cleaned += len / LINE;
    cache_op(adr, len, 1);
}

void Xil_DCacheInvalidateRange(INTPTR adr, u32 len)
{
    stats.lines_invalidated += len / LINE;
    cache_op(adr, len, 0);
}

/* Whether this submit's cache operations cover [start, end), with cleaning if `clean`. */
static int covered(uintptr_t start, uintptr_t end, int clean)
{
    for (uintptr_t a = start; a < end; a += LINE) {
        int hit = 0;
        for (unsigned i = 0; i < cache_log_count && !hit; i++)
            hit = cache_log[i].start <= a && a + LINE <= cache_log[i].end &&
                  (cache_log[i].clean || !clean);
        if (!hit)
            return 0;
    }
    return 1;
}

void cosmos_model_flash_submitting(uint32_t tag, uint32_t kind, const uint8_t *dram_page,
                                   uint32_t sectors)
{
    submitting = (library_op){tag, kind, sectors, (uint8_t *)(uintptr_t)dram_page};
    submitting_valid = 1;
    cache_log_count = 0;
}

static pending_read *pending_of(uint32_t tag)
{
    for (unsigned i = 0; i < PENDING_READS; i++)
        if (pending[i].used && pending[i].tag == tag)
            return &pending[i];
    return NULL;
}

/* What the core sees of a finished read when the library hears of it: the named sectors must
 * have been invalidated since the NSC wrote them, and then hold the page, as must the record. */
static void check_read_delivered(const pending_read *p)
{
    for (uint32_t i = 0; i < 16u; i++) {
        if (!(p->sectors >> i & 1u))
            continue;
        for (uint32_t l = i * (SECTOR / LINE); l < (i + 1) * (SECTOR / LINE); l++)
            if (!p->seen[l])
                fail("stale read", "a read reported to the library before its named sectors "
                                   "were invalidated after the NSC wrote them, tag",
                     p->tag);
        for (uint32_t b = i * SECTOR; b < (i + 1) * SECTOR; b++)
            if (p->window[b] != p->data[b])
                fail("cache", "a read's named sector in the library's window differs from the "
                              "page, byte",
                     b);
    }
    for (uint32_t b = 0; b < SAGESSD_FW_SPARE_BYTES; b++)
        if (p->window[PAGE_DATA + b] != p->record[b])
            fail("cache", "a read's spare record in the library's window differs from the "
                          "page's, byte",
                 b);
}

/* What the library must hear for each NAND request, in the order the scheduler retired them
 * (the glue reports in that order): success only for DONE, or a WARNING on a read (a corrected
 * read still delivers its data); a media failure for anything else. */
static uint8_t expected_results[256];
static unsigned expected_head, expected_count;

static void expect_result(unsigned int status, uint32_t kind)
{
    int ok = status == REQ_STATUS_DONE ||
             (status == REQ_STATUS_WARNING && kind == SAGESSD_FLASH_READ);
    if (expected_count == sizeof expected_results)
        fail("model", "more NAND requests retired and not reported than the model keeps",
             expected_count);
    expected_results[(expected_head + expected_count++) % sizeof expected_results] =
        (uint8_t)(ok ? SAGESSD_FLASH_OK : SAGESSD_FLASH_MEDIA);
}

int32_t __real_sagessd_fw_flash_complete(uint32_t tag, uint32_t status);
int32_t __wrap_sagessd_fw_flash_complete(uint32_t tag, uint32_t status);

int32_t __wrap_sagessd_fw_flash_complete(uint32_t tag, uint32_t status)
{
    pending_read *read = pending_of(tag);
    if (read != NULL && status == SAGESSD_FLASH_OK)
        check_read_delivered(read);
    int32_t rc = __real_sagessd_fw_flash_complete(tag, status);
    if (rc == SAGESSD_OK) {
        if (read != NULL)
            read->used = 0;
        if (expected_count == 0)
            fail("flash status", "a NAND completion reported that the scheduler never retired",
                 tag);
        uint8_t want = expected_results[expected_head];
        expected_head = (expected_head + 1) % sizeof expected_results;
        expected_count--;
        if (status != want)
            fail("flash status", "the glue reported a NAND request's result as another: got",
                 status);
    }
    return rc;
}

/* Library polls since the main loop last ran the stock scheduler step (CheckDoneNvmeDmaReq): the
 * loop fetches commands, admin ones too, only between such steps, so a glue that polls on while
 * the library has work (a sampling job whose pages are all cached) starves them. */
static unsigned polls_this_turn;

int32_t __real_sagessd_fw_poll(void);
int32_t __wrap_sagessd_fw_poll(void);

int32_t __wrap_sagessd_fw_poll(void)
{
    if (++polls_this_turn > SAGESSD_COSMOS_POLLS_PER_TURN)
        fail("starvation", "library polls in one main-loop turn past the glue's budget",
             polls_this_turn);
    return __real_sagessd_fw_poll();
}

/* ---- completions (pcie_hcmd_cq_req.v) ------------------------------------------------------ */

static int queued_for(unsigned s)
{
    for (unsigned dir = 0; dir < 2; dir++)
        for (unsigned i = 0; i < fifo_count[dir]; i++) {
            const dma_t *d = &fifo[dir][(fifo_head[dir] + i) % DMA_FIFO];
            int auto_dma = d->kind == AUTO_RX || d->kind == AUTO_TX;
            if (auto_dma ? d->slot == s : slot_of_iova(d->pcie) == (int)s)
                return 1;
        }
    return 0;
}

/* A CQE for slot s: checked against the library's result (or the refusal the host expects),
 * handed to the host, and the slot released when `release` (types 1 and the hardware's). */
static void post_cqe(unsigned s, uint32_t dw0, uint32_t status, int release, int by_hardware)
{
    slot_t *c = &slots[s];
    if (!c->valid)
        fail("double completion", "a CQE for a slot that holds no command, slot", s);
    if (c->abandoned)
        fail("double completion", "a CQE for a command abandoned by the controller reset, cid",
             c->cid);
    if (queued_for(s))
        fail("early completion", "a CQE while DMA of its command is still queued, cid", c->cid);
    status &= 0xFFFEu; /* the phase bit is the controller's */
    if (c->expect == COSMOS_EXPECT_LIBRARY) {
        library_result *r = NULL;
        for (unsigned i = 0; i < SLOTS && r == NULL; i++)
            if (results[i].valid && results[i].sq_id == c->sq_id && results[i].cid == c->cid)
                r = &results[i];
        if (r == NULL)
            fail("early completion",
                 by_hardware ? "the controller completed a command before the library finished it, cid"
                             : "a CQE before the library finished the command, cid",
                 c->cid);
        if ((r->status & 0xFFFEu) != status)
            fail("wrong completion", "the CQE's status differs from the library's, cid", c->cid);
        if (r->dw0 != dw0)
            fail("wrong completion", "the CQE's dword 0 differs from the library's, cid", c->cid);
        r->valid = 0;
    } else {
        for (unsigned i = 0; i < SLOTS; i++)
            if (results[i].valid && results[i].sq_id == c->sq_id && results[i].cid == c->cid)
                fail("wrong completion", "the glue let the library run a command it must refuse, cid",
                     c->cid);
    }
    if (c->expect != COSMOS_EXPECT_LIBRARY && (c->expect & 0xFFFEu) != status) {
        fail("wrong completion", "the glue refused a command with another status, cid", c->cid);
    }
    if (!queues_on)
        fail("double completion", "a CQE while the queues are off, cid", c->cid);
    /* pcie_hcmd_cq_req.v: with the command's queue invalid the CQE is dropped and, for type 1,
     * the slot is never freed. */
    if (c->sq_id > 0 && (c->sq_id > 8 || !sq_valid[c->sq_id]))
        fail("lost completion", "a CQE for a command of a deleted submission queue, cid", c->cid);
    if (cq_count == CQ_DEPTH)
        fail("model", "the host's completion queue is full", CQ_DEPTH);
    sagessd_completion *out = &cq[(cq_head + cq_count++) % CQ_DEPTH];
    out->sq_id = c->sq_id;
    out->cid = c->cid;
    for (unsigned i = 0; i < 16; i++)
        out->cqe[i] = 0;
    put32(out->cqe, dw0);
    out->cqe[10] = (uint8_t)c->sq_id;
    out->cqe[12] = (uint8_t)c->cid;
    out->cqe[13] = (uint8_t)(c->cid >> 8);
    out->cqe[14] = (uint8_t)status;
    out->cqe[15] = (uint8_t)(status >> 8);
    if (by_hardware)
        stats.hardware_cqes++;
    else
        stats.firmware_cqes++;
    if (release) {
        if (c->list >= 0)
            list_used[c->list] = 0;
        c->valid = 0;
    }
}

void set_auto_nvme_cpl(unsigned int cmdSlotTag, unsigned int specific, unsigned int statusFieldWord)
{
    if (cmdSlotTag >= SLOTS)
        fail("double completion", "a CQE for a slot number past 127", cmdSlotTag);
    post_cqe(cmdSlotTag, specific, statusFieldWord, 1, 0);
}

void set_nvme_cpl(unsigned int sqId, unsigned int cid, unsigned int specific,
                  unsigned int statusFieldWord)
{
    /* Type 0: the CQE names its command; the slot stays taken. */
    for (unsigned s = 0; s < SLOTS; s++)
        if (slots[s].valid && !slots[s].abandoned && slots[s].sq_id == sqId && slots[s].cid == cid) {
            post_cqe(s, specific, statusFieldWord, 0, 0);
            return;
        }
    fail("double completion", "a CQE (set_nvme_cpl) for a command no slot holds, cid", cid);
}

void set_nvme_slot_release(unsigned int cmdSlotTag)
{
    /* Type 2: the slot is freed without a CQE; only right for a command the host gave up. */
    if (cmdSlotTag >= SLOTS || !slots[cmdSlotTag].valid)
        fail("double completion", "releasing a slot that holds no command, slot", cmdSlotTag);
    if (!slots[cmdSlotTag].abandoned)
        fail("lost completion", "a command the host waits for was released without a CQE, cid",
             slots[cmdSlotTag].cid);
    if (slots[cmdSlotTag].list >= 0)
        list_used[slots[cmdSlotTag].list] = 0;
    slots[cmdSlotTag].valid = 0;
    stats.slot_releases++;
}

/* ---- the DMA engine (dma_cmd_gen.v, dma_done.v) -------------------------------------------- */

static unsigned direction(int kind) { return kind == AUTO_TX || kind == DIRECT_TX; }

static void run_one(unsigned dir);

static void queue_dma(dma_t d)
{
    /* host_lld.c waits while 255 requests of a kind are outstanding. */
    unsigned dir = direction(d.kind);
    while (fifo_count[dir] == DMA_FIFO)
        run_one(dir);
    fifo[dir][(fifo_head[dir] + fifo_count[dir]++) % DMA_FIFO] = d;
    issued[d.kind]++;
}

/* Whether host bytes [p, p + n) lie in command s's buffer (writes), or in its buffer rounded up
 * to 16 bytes within its last page or its PRP list (reads: the engine moves 16-byte units). */
static int in_host_range(unsigned s, const uint8_t *p, uint32_t n, int write)
{
    if (!slots[s].valid)
        return 0;
    const uint8_t *lo = slots[s].buf, *hi = slots[s].buf + slots[s].len;
    if (!write) {
        uintptr_t up = ((uintptr_t)hi + 15u) & ~(uintptr_t)15u;
        uintptr_t page_end = (((uintptr_t)hi + HOST_PAGE - 1) & ~(uintptr_t)(HOST_PAGE - 1));
        hi = (const uint8_t *)(up < page_end ? up : page_end);
        /* The list's entries (the glue reads them in 16-byte units). */
        uint32_t list_bytes = (8u * (pages_of(&slots[s]) - 1) + 15u) & ~15u;
        if (slots[s].list >= 0 && p >= lists[slots[s].list] &&
            p + n <= lists[slots[s].list] + list_bytes)
            return 1;
    }
    return slots[s].len > 0 && p >= lo && p + n <= hi;
}

static void check_host_range(unsigned s, const uint8_t *p, uint32_t n, int write)
{
    if (!in_host_range(s, p, n, write))
        fail("overrun", write ? "the device wrote host memory outside the command's buffer, cid"
                              : "the device read host memory outside the command's buffer, cid",
             slots[s].cid);
}

/* The slot a direct DMA to [pcie, pcie + n) belongs to: the data window's, or the one whose
 * PRP list holds it; -1 if none (or, for a data window, if the range leaves the buffer). */
static int owner_of(uint64_t pcie, uint32_t n, int write)
{
    int s = slot_of_iova(pcie);
    if (s >= 0)
        return in_host_range((unsigned)s, host_ptr(pcie), n, write) ? s : -1;
    for (unsigned t = 0; t < SLOTS; t++)
        if (!write && in_host_range(t, host_ptr(pcie), n, 0))
            return (int)t;
    return -1;
}

static void move_piece(unsigned s, int to_host, uint8_t *dev, uint64_t pcie, uint32_t n)
{
    uint8_t *host = host_ptr(pcie);
    check_host_range(s, host, n, to_host);
    if (to_host)
        copy(host, dev, n);
    else
        copy(dev, host, n);
}

/* One auto unit: 4 KiB of the command's data at its offset, split at host pages, addressed by
 * PRP1, PRP2 or PRP list entries as dma_cmd_gen.v computes them. */
static void run_auto(const dma_t *d)
{
    slot_t *c = &slots[d->slot];
    if (!c->valid)
        fail("double completion", "an auto DMA for a slot that holds no command, slot", d->slot);
    if (d->unit >= c->units)
        fail("overrun", "an auto DMA past the command's length (CDW12 + 1 units), cid", c->cid);
    if ((d->dev & 0xFFFu) != 0)
        fail("dma rule", "an auto DMA's device address is not 4 KiB aligned (bits 11:2 are forced to 0)",
             d->dev);
    uint64_t prp1 = (uint64_t)c->dw[7] << 32 | c->dw[6];
    uint64_t prp2 = (uint64_t)c->dw[9] << 32 | c->dw[8];
    uint32_t off = (uint32_t)prp1 & (HOST_PAGE - 1);
    if ((off & 15u) != 0)
        fail("dma rule", "PRP1 is not 16-byte aligned: the engine drops address bits 3:0, cid",
             c->cid);
    int list = 2u * HOST_PAGE - off < c->units * UNIT;
    uint32_t t = d->unit * UNIT + off, page = t / HOST_PAGE, in = t % HOST_PAGE;
    uint8_t *dev = (uint8_t *)(uintptr_t)d->dev;
    for (unsigned piece = 0; piece < 2; piece++) {
        uint32_t p = page + piece;
        uint32_t n = piece == 0 ? HOST_PAGE - in : in;
        if (n == 0)
            break;
        uint64_t base;
        if (p == 0) {
            base = prp1 & ~(uint64_t)(HOST_PAGE - 1);
        } else if (!list) {
            base = prp2 & ~(uint64_t)(HOST_PAGE - 1);
        } else {
            uint8_t *entry = host_ptr(prp2 + 8u * (p - 1));
            check_host_range(d->slot, entry, 8, 0);
            base = ((uint64_t)le32(entry + 4) << 32 | le32(entry)) & ~(uint64_t)(HOST_PAGE - 1);
        }
        move_piece(d->slot, d->kind == AUTO_TX, dev, base + (piece == 0 ? in : 0), n);
        dev += n;
    }
    stats.auto_units++;
    /* dma_done.v: the unit that equals what remains completes the command. */
    if (c->remaining == UNIT) {
        c->remaining = 0;
        post_cqe(d->slot, 0, 0, 1, 1);
    } else {
        c->remaining -= UNIT;
    }
}

static void run_direct(const dma_t *d)
{
    if (d->len > 0x1000u)
        fail("dma rule", "a direct DMA longer than 4 KiB (host_lld.c asserts), length", d->len);
    if ((d->pcie >> 32) >= 0x10u || (d->pcie & 15u) != 0)
        fail("dma rule", "a direct DMA's PCIe address is not 16-byte aligned or past 36 bits",
             (uint32_t)d->pcie);
    if ((d->len & 15u) != 0 || d->len == 0)
        fail("dma rule", "a direct DMA length that is not a positive multiple of 16 bytes", d->len);
    if ((d->dev & 15u) != 0)
        fail("dma rule", "a direct DMA's device address is not 16-byte aligned", d->dev);
    if ((uint32_t)(d->pcie & (HOST_PAGE - 1)) + d->len > HOST_PAGE)
        fail("dma rule", "a direct DMA crosses a host page (one PCIe request may not), length",
             d->len);
    int s = owner_of(d->pcie, d->len, d->kind == DIRECT_TX);
    if (s < 0)
        fail("overrun",
             d->kind == DIRECT_TX ? "a direct DMA wrote host memory outside every command's buffer, address low"
                                  : "a direct DMA read host memory outside every command's buffer, address low",
             (uint32_t)d->pcie);
    move_piece((unsigned)s, d->kind == DIRECT_TX, (uint8_t *)(uintptr_t)d->dev, d->pcie, d->len);
    stats.direct_requests++;
}

/* Runs the oldest queued request of one direction. */
static void run_one(unsigned dir)
{
    if (fifo_count[dir] == 0)
        return;
    dma_t d = fifo[dir][fifo_head[dir]];
    fifo_head[dir] = (fifo_head[dir] + 1) % DMA_FIFO;
    fifo_count[dir]--;
    if (d.kind == AUTO_RX || d.kind == AUTO_TX)
        run_auto(&d);
    else
        run_direct(&d);
    done[d.kind]++;
}

int cosmos_model_tick(void)
{
    int moved = fifo_count[0] + fifo_count[1] > 0;
    run_one(0);
    run_one(1);
    return moved;
}

static void check_dev(unsigned int devAddr)
{
    if (devAddr == 0)
        fail("dma rule", "a DMA with device address 0", 0);
}

/* host_lld.c's four DMA calls: an auto request names a slot and a unit (the "auto completion"
 * argument goes nowhere: s_axi_reg.v drops bit 13), a direct one an address and a length. */
static void queue_auto(int kind, unsigned int slot, unsigned int unit, unsigned int dev)
{
    check_dev(dev);
    if (unit >= 256 || slot >= SLOTS)
        fail("dma rule", "an auto DMA's unit or slot out of range (host_lld.c asserts), unit", unit);
    queue_dma((dma_t){(uint8_t)kind, (uint8_t)slot, (uint16_t)unit, dev, 0, UNIT});
}

static void queue_direct(int kind, unsigned int dev, unsigned int high, unsigned int low,
                         unsigned int len)
{
    check_dev(dev);
    queue_dma((dma_t){(uint8_t)kind, 0, 0, dev, (uint64_t)high << 32 | low, len});
}

void set_auto_rx_dma(unsigned int cmdSlotTag, unsigned int cmd4KBOffset, unsigned int devAddr,
                     unsigned int autoCompletion)
{
    (void)autoCompletion;
    queue_auto(AUTO_RX, cmdSlotTag, cmd4KBOffset, devAddr);
}

void set_auto_tx_dma(unsigned int cmdSlotTag, unsigned int cmd4KBOffset, unsigned int devAddr,
                     unsigned int autoCompletion)
{
    (void)autoCompletion;
    queue_auto(AUTO_TX, cmdSlotTag, cmd4KBOffset, devAddr);
}

void set_direct_rx_dma(unsigned int devAddr, unsigned int pcieAddrH, unsigned int pcieAddrL,
                       unsigned int len)
{
    queue_direct(DIRECT_RX, devAddr, pcieAddrH, pcieAddrL, len);
}

void set_direct_tx_dma(unsigned int devAddr, unsigned int pcieAddrH, unsigned int pcieAddrL,
                       unsigned int len)
{
    queue_direct(DIRECT_TX, devAddr, pcieAddrH, pcieAddrL, len);
}

/* The done counters at 0x204: waiting on one kind moves only its direction (the other may be
 * slower; nothing orders them). */
static void wait_kind(int kind)
{
    while (done[kind] != issued[kind])
        run_one(direction(kind));
}

void check_direct_tx_dma_done(void) { wait_kind(DIRECT_TX); }
void check_direct_rx_dma_done(void) { wait_kind(DIRECT_RX); }
void check_auto_tx_dma_done(void) { wait_kind(AUTO_TX); }
void check_auto_rx_dma_done(void) { wait_kind(AUTO_RX); }

/* ---- commands, queues, controller status ---------------------------------------------------- */

unsigned int get_nvme_cmd(unsigned short *qID, unsigned short *cmdSlotTag, unsigned int *cmdSeqNum,
                          unsigned int *cmdDword)
{
    (void)cosmos_model_tick();
    if (fetch_count == 0)
        return 0;
    unsigned s = fetch_queue[fetch_head];
    fetch_head = (fetch_head + 1) % SLOTS;
    fetch_count--;
    *qID = slots[s].sq_id;
    *cmdSlotTag = (unsigned short)s;
    *cmdSeqNum = seq++ & 0xFFu;
    for (unsigned i = 0; i < 16; i++)
        cmdDword[i] = slots[s].dw[i];
    return 1;
}

unsigned int check_nvme_cc_en(void) { return cc_en; }
void set_nvme_csts_rdy(unsigned int rdy) { csts_rdy = rdy; }

void set_nvme_csts_shst(unsigned int shst)
{
    if (shst == 1)
        bbt_written = 0;
    if (shst == 2) {
        if (cosmos_model_slots_in_use() != 0)
            fail("leak", "shutdown reported complete with slots still holding commands",
                 cosmos_model_slots_in_use());
        if (!bbt_written || cosmos_model_nand_queued() != 0)
            fail("shutdown", "shutdown reported complete before the NAND work and the bad-block"
                             " table were written",
                 cosmos_model_nand_queued());
    }
    csts_shst = shst;
}

void set_nvme_admin_queue(unsigned int sqValid, unsigned int cqValid, unsigned int cqIrqEn)
{
    (void)cqIrqEn;
    queues_on = sqValid && cqValid;
}

void set_io_sq(unsigned int ioSqIdx, unsigned int valid, unsigned int cqVector, unsigned int qSzie,
               unsigned int pcieBaseAddrL, unsigned int pcieBaseAddrH)
{
    (void)cqVector, (void)qSzie, (void)pcieBaseAddrL, (void)pcieBaseAddrH;
    if (ioSqIdx >= 8)
        fail("model", "set_io_sq for a queue index past 7", ioSqIdx);
    sq_valid[ioSqIdx + 1] = valid;
}

void set_io_cq(unsigned int ioCqIdx, unsigned int valid, unsigned int irqEn, unsigned int irqVector,
               unsigned int qSzie, unsigned int pcieBaseAddrL, unsigned int pcieBaseAddrH)
{
    (void)ioCqIdx, (void)valid, (void)irqEn, (void)irqVector, (void)qSzie, (void)pcieBaseAddrL,
        (void)pcieBaseAddrH;
}

/* ---- the host's side ---------------------------------------------------------------------- */

void cosmos_model_init(void)
{
    for (unsigned s = 0; s < SLOTS; s++)
        slots[s].valid = 0;
    for (unsigned i = 0; i < LISTS; i++)
        list_used[i] = 0;
    fetch_head = fetch_count = cq_head = cq_count = 0;
    fifo_head[0] = fifo_head[1] = fifo_count[0] = fifo_count[1] = 0;
    for (int k = 0; k < KINDS; k++)
        issued[k] = done[k] = 0;
    cc_en = cc_shn = csts_shst = csts_rdy = queues_on = 0;
    for (unsigned q = 0; q < 9; q++)
        sq_valid[q] = 0;
    g_nvmeTask.status = NVME_TASK_IDLE;
    g_nvmeTask.cacheEn = 0;
    submitting_valid = 0;
    cache_log_count = 0;
    for (unsigned i = 0; i < PENDING_READS; i++)
        pending[i].used = 0;
    pool_init();
    static uint8_t probe;
    if ((uintptr_t)&probe > 0xFFFFFFFFu)
        fail("model", "board addresses must fit 32 bits (build the host test with -no-pie)", 0);
}

int cosmos_host_submit(uint16_t sq_id, const uint8_t sqe[64], uint8_t *buf, uint32_t len,
                       uint32_t expect)
{
    unsigned s = 0;
    while (s < SLOTS && slots[s].valid)
        s++;
    if (s == SLOTS || !cc_en)
        return -1;
    slot_t *c = &slots[s];
    for (unsigned i = 0; i < 16; i++)
        c->dw[i] = le32(sqe + 4 * i);
    c->sq_id = sq_id;
    c->cid = (uint16_t)(c->dw[0] >> 16);
    c->buf = buf;
    c->len = len;
    c->list = -1;
    c->expect = expect;
    c->abandoned = 0;
    c->units = (c->dw[12] & 0xFFu) + 1u;
    c->remaining = c->units * UNIT;
    /* PRPs as an NVMe host builds them, over the buffer's pages as the device sees them. */
    uint64_t prp1 = len ? iova_of(s, 0) : 0, prp2 = 0;
    uint32_t off = (uint32_t)(uintptr_t)buf & (HOST_PAGE - 1);
    uint32_t pages = pages_of(c);
    if (pages == 2) {
        prp2 = iova_of(s, HOST_PAGE - off);
    } else if (pages > 2) {
        if (pages - 1 > LIST_BYTES / 8)
            fail("model", "a transfer longer than the test host's PRP lists cover, pages", pages);
        int l = 0;
        while (l < (int)LISTS && list_used[l])
            l++;
        if (l == (int)LISTS)
            fail("model", "the test host ran out of PRP lists", LISTS);
        list_used[l] = 1;
        c->list = l;
        for (uint32_t i = 0; i + 1 < pages; i++) {
            uint64_t e = iova_of(s, HOST_PAGE * (i + 1) - off);
            put32(lists[l] + 8 * i, (uint32_t)e);
            put32(lists[l] + 8 * i + 4, (uint32_t)(e >> 32));
        }
        prp2 = pcie_of(lists[l]);
    }
    c->dw[6] = (uint32_t)prp1;
    c->dw[7] = (uint32_t)(prp1 >> 32);
    c->dw[8] = (uint32_t)prp2;
    c->dw[9] = (uint32_t)(prp2 >> 32);
    c->valid = 1;
    fetch_queue[(fetch_head + fetch_count++) % SLOTS] = (uint8_t)s;
    return 0;
}

int cosmos_host_reap(sagessd_completion *out)
{
    if (cq_count == 0)
        return 0;
    *out = cq[cq_head];
    cq_head = (cq_head + 1) % CQ_DEPTH;
    cq_count--;
    return 1;
}

void cosmos_host_set_sq(uint16_t sq_id, unsigned int valid)
{
    if (sq_id >= 1 && sq_id <= 8)
        sq_valid[sq_id] = valid;
}

void cosmos_host_set_enable(unsigned int en)
{
    if (!en) {
        /* The host gives up every command in flight and the CQEs it has not read. The
         * controller keeps its slots (pcie_hcmd_slot_mgt.v clears them only on a PCIe reset). */
        for (unsigned s = 0; s < SLOTS; s++)
            if (slots[s].valid)
                slots[s].abandoned = 1;
        cq_count = 0;
        cc_shn = 0;
    }
    cc_en = en;
}

void cosmos_host_request_shutdown(void) { cc_shn = 1; }
unsigned int cosmos_host_shst(void) { return csts_shst; }
unsigned int cosmos_host_rdy(void) { return csts_rdy; }
unsigned int cosmos_host_shn(void) { return cc_shn; }

unsigned int cosmos_model_slots_in_use(void)
{
    unsigned n = 0;
    for (unsigned s = 0; s < SLOTS; s++)
        n += slots[s].valid != 0;
    return n;
}

cosmos_model_stats cosmos_model_counts(void) { return stats; }

/* ---- GreedyFTL's NAND request pool and scheduler -------------------------------------------- */

static REQ_POOL pool;
REQ_POOL *reqPoolPtr = &pool;
FREE_REQUEST_QUEUE freeReqQ = {REQ_SLOT_TAG_NONE, REQ_SLOT_TAG_NONE, 0};
static VIRTUAL_BLOCK_MAP block_map;
VIRTUAL_BLOCK_MAP *virtualBlockMapPtr = &block_map;
/* Per die, a FIFO of requests (nandReqQ[ch][way]), linked through nextReq. */
static unsigned int die_head[USER_DIES], die_tail[USER_DIES], die_count[USER_DIES];
static unsigned next_die;

static void put_free(unsigned int r)
{
    pool.reqPool[r].nextReq = REQ_SLOT_TAG_NONE;
    if (freeReqQ.tailReq == REQ_SLOT_TAG_NONE)
        freeReqQ.headReq = r;
    else
        pool.reqPool[freeReqQ.tailReq].nextReq = r;
    freeReqQ.tailReq = r;
    freeReqQ.reqCnt++;
}

static void pool_init(void)
{
    freeReqQ = (FREE_REQUEST_QUEUE){REQ_SLOT_TAG_NONE, REQ_SLOT_TAG_NONE, 0};
    for (unsigned int r = 0; r < AVAILABLE_OUNTSTANDING_REQ_COUNT; r++)
        put_free(r);
    for (unsigned d = 0; d < USER_DIES; d++) {
        die_head[d] = die_tail[d] = REQ_SLOT_TAG_NONE;
        die_count[d] = 0;
        /* InitFTL's bad-block scan found two bad blocks per die. */
        block_map.block[d][2 + d].bad = 1;
        block_map.block[d][9 + 2 * d].bad = 1;
    }
}

unsigned int GetFromFreeReqQ(void)
{
    unsigned int r = freeReqQ.headReq;
    if (r == REQ_SLOT_TAG_NONE)
        fail("nand", "GetFromFreeReqQ on an empty pool (GreedyFTL would run the scheduler"
                     " inside the flash callback)", 0);
    freeReqQ.headReq = pool.reqPool[r].nextReq;
    if (freeReqQ.headReq == REQ_SLOT_TAG_NONE)
        freeReqQ.tailReq = REQ_SLOT_TAG_NONE;
    freeReqQ.reqCnt--;
    return r;
}

void SelectLowLevelReqQ(unsigned int r)
{
    const SSD_REQ_FORMAT *q = &pool.reqPool[r];
    if (q->reqType != REQ_TYPE_NAND || q->reqOpt.nandAddr != REQ_OPT_NAND_ADDR_VSA ||
        q->reqOpt.rowAddrDependencyCheck != REQ_OPT_ROW_ADDR_DEPENDENCY_NONE ||
        q->prevBlockingReq != REQ_SLOT_TAG_NONE || q->nextBlockingReq != REQ_SLOT_TAG_NONE)
        fail("nand", "a request not built as GreedyFTL's raw NAND requests are, slot", r);
    if (!submitting_valid)
        fail("nand", "a request queued outside the library's flash submit, slot", r);
    submitting_valid = 0;
    if (q->reqCode != REQ_CODE_ERASE) {
        uintptr_t w = (uintptr_t)submitting.window;
        if (q->reqOpt.dataBufFormat != REQ_OPT_DATA_BUF_ADDR || q->dataBufInfo.addr != w)
            fail("zero copy", "the NSC is given a buffer other than the library's window",
                 q->dataBufInfo.addr);
        if (q->reqCode == REQ_CODE_WRITE && !covered(w, w + PAGE_DATA, 1))
            fail("unclean program", "a page queued for programming before its window's data "
                                    "was cleaned from the caches, tag",
                 submitting.tag);
        for (uint32_t i = 0; i < 16u; i++)
            if (q->reqCode == REQ_CODE_READ && submitting.sectors >> i & 1u &&
                !covered(w + i * SECTOR, w + (i + 1) * SECTOR, 0))
                fail("cache", "a read queued before its named sectors were invalidated (a dirty "
                              "line could be written back over the NSC's data), sector",
                     i);
    }
    request_op[r] = submitting;
    unsigned d = q->nandInfo.virtualSliceAddr % USER_DIES;
    pool.reqPool[r].nextReq = REQ_SLOT_TAG_NONE;
    if (die_tail[d] == REQ_SLOT_TAG_NONE)
        die_head[d] = r;
    else
        pool.reqPool[die_tail[d]].nextReq = r;
    die_tail[d] = r;
    die_count[d]++;
}

void SchedulingNandReq(void)
{
    for (unsigned tries = 0; tries < USER_DIES; tries++) {
        unsigned d = next_die;
        next_die = (next_die + 1) % USER_DIES;
        if (die_count[d] == 0)
            continue;
        unsigned int r = die_head[d];
        SSD_REQ_FORMAT *q = &pool.reqPool[r];
        die_head[d] = q->nextReq;
        if (die_head[d] == REQ_SLOT_TAG_NONE)
            die_tail[d] = REQ_SLOT_TAG_NONE;
        die_count[d]--;
        unsigned int vsa = q->nandInfo.virtualSliceAddr;
        unsigned int rest = vsa / USER_DIES;
        unsigned int block = rest / USER_PAGES_PER_BLOCK, page = rest % USER_PAGES_PER_BLOCK;
        if (block >= USER_BLOCKS_PER_DIE || block_map.block[d][block].bad)
            fail("nand", "a request to a bad or missing virtual block", block);
        uint32_t kind = q->reqCode == REQ_CODE_READ    ? SAGESSD_FLASH_READ
                        : q->reqCode == REQ_CODE_WRITE ? SAGESSD_FLASH_PROGRAM
                                                       : SAGESSD_FLASH_ERASE;
        uint8_t *data = NULL, *spare = NULL;
        if (kind != SAGESSD_FLASH_ERASE) {
            if (q->reqOpt.dataBufFormat != REQ_OPT_DATA_BUF_ADDR)
                fail("nand", "a page request without a data buffer address, slot", r);
            data = (uint8_t *)(uintptr_t)q->dataBufInfo.addr;
            /* GenerateSpareDataBufAddr with the board's one-line patch: the glue's spare
             * buffer, or (unpatched, or not the glue's request) right after the data. */
            unsigned int s = sagessd_cosmos_spare_addr(r);
            if (s == 0)
                fail("nand", "a request with no spare buffer of the glue's (its 256 spare bytes "
                             "would land after the window's data, over the next window), slot",
                     r);
            spare = (uint8_t *)(uintptr_t)s;
            if (((uintptr_t)data | (uintptr_t)spare) & 3u)
                fail("nand", "an NSC buffer not on its 4-byte beats, slot", r);
        }
        uint32_t nand_block = d * USER_BLOCKS_PER_DIE + block;
        uint32_t address = kind == SAGESSD_FLASH_ERASE ? nand_block
                                                       : nand_block * USER_PAGES_PER_BLOCK + page;
        /* The page as the RAM NAND keeps it: its data, then the library's record. */
        static uint8_t page_window[PAGE_DATA + SAGESSD_FW_SPARE_BYTES];
        if (kind == SAGESSD_FLASH_PROGRAM) {
            for (uint32_t i = SAGESSD_FW_SPARE_BYTES; i < BYTES_PER_SPARE_REGION_OF_PAGE; i++)
                if (spare[i] != 0xFFu)
                    fail("nand", "a program's spare region past the library's record is not "
                                 "erased, byte",
                         i);
            for (uint32_t i = 0; i < PAGE_DATA; i++)
                page_window[i] = data[i]; /* cleaned to DDR, so the NSC reads what the core wrote */
            for (uint32_t i = 0; i < SAGESSD_FW_SPARE_BYTES; i++)
                page_window[PAGE_DATA + i] = spare[i];
            stats.nand_programs++;
        }
        unsigned int status =
            cosmos_nand_execute(kind, address, kind == SAGESSD_FLASH_ERASE ? NULL : page_window);
        if (kind == SAGESSD_FLASH_READ) {
            /* The NSC writes the page to DDR, where the core sees it only once it invalidates
             * the lines, and the whole spare region to the spare buffer: the record, then
             * bytes the glue must not copy into the library's window. */
            unsigned i = 0;
            while (i < PENDING_READS && pending[i].used)
                i++;
            if (i == PENDING_READS)
                fail("model", "more finished reads not reported than the model keeps", i);
            pending_read *p = &pending[i];
            p->used = 1;
            p->tag = request_op[r].tag;
            p->sectors = request_op[r].sectors;
            p->window = data;
            for (uint32_t b = 0; b < PAGE_DATA; b++)
                p->data[b] = page_window[b];
            for (uint32_t b = 0; b < SAGESSD_FW_SPARE_BYTES; b++)
                spare[b] = p->record[b] = page_window[PAGE_DATA + b];
            for (uint32_t b = SAGESSD_FW_SPARE_BYTES; b < BYTES_PER_SPARE_REGION_OF_PAGE; b++)
                spare[b] = 0x5Au;
            for (uint32_t l = 0; l < PAGE_LINES; l++)
                p->seen[l] = 0;
            stats.nand_reads++;
        }
        /* GetFromNandReqQ, with the board's one-line hook before PutToFreeReqQ. */
        expect_result(status, kind);
        sagessd_cosmos_nand_done(r, status);
        put_free(r);
        return;
    }
}

void CheckDoneNvmeDmaReq(void) { polls_this_turn = 0; }

void UpdateBadBlockTableForGrownBadBlock(unsigned int tempBufAddr)
{
    if (tempBufAddr != RESERVED_DATA_BUFFER_BASE_ADDR)
        fail("shutdown", "the bad-block table written through another buffer", tempBufAddr);
    if (cosmos_model_nand_queued() != 0 || cosmos_model_slots_in_use() != 0)
        fail("shutdown", "the bad-block table written while NAND work or commands remain",
             cosmos_model_nand_queued());
    stats.bbt_updates++;
    bbt_written = 1;
}

unsigned int cosmos_model_nand_queued(void)
{
    unsigned n = 0;
    for (unsigned d = 0; d < USER_DIES; d++)
        n += die_count[d];
    return n;
}
