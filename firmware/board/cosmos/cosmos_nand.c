/*
 * cosmos_nand.c — libsagessd_fw.a's flash HAL on GreedyFTL 3.0.0's NAND request scheduler.
 *
 * Each flash operation the library starts becomes one scheduler request, built the way
 * GreedyFTL's own boot code builds raw requests (EraseUserBlockSpace in address_translation.c):
 * REQ_TYPE_NAND, a virtual slice address (so GenerateNandRowAddr applies GreedyFTL's bad-block
 * remapping and the SLC page translation), no row-address dependency check (it could reorder
 * requests of a die; the library already orders them), handed to SelectLowLevelReqQ, which
 * appends it to its die's FIFO nandReqQ[ch][way]. The scheduler retires requests of one die in
 * that order (ExecuteNandReq → GetFromNandReqQ), which is the order the library requires.
 *
 * Page data moves by the NSC's own DMA, straight between the flash and the library's page window
 * in its (cached) arena: no copy by the core. The NSC does not snoop the A9's caches, so the glue
 * maintains them on whole 32-byte lines (Xil_DCacheFlushRange, Xil_DCacheInvalidateRange):
 *  - a program cleans the window's data to DDR before the request is queued;
 *  - a read invalidates the sectors the library named before the request is queued (so that no
 *    dirty line is written back over the data the NSC brings) and again after it retired and
 *    before the library hears of it (so that no line the core fetched speculatively meanwhile
 *    hides that data). The NSC moves the whole page; the library relies on its named sectors
 *    only (sagessd_fw.h), so the others are left alone.
 * The page's 256 spare bytes travel apart, in a spare buffer of the glue's own per operation in
 * uncached DDR: GreedyFTL puts a REQ_OPT_DATA_BUF_ADDR request's spare right after its data
 * (GenerateSpareDataBufAddr), which in the library's window would overwrite the next window, so
 * a one-line patch there asks sagessd_cosmos_spare_addr first. A program copies the library's
 * spare record into it and erases the rest; a read copies the record back into the window.
 *
 * GreedyFTL has no completion callback; the one line it needs, in GetFromNandReqQ before
 * PutToFreeReqQ(reqSlotTag), is sagessd_cosmos_nand_done(reqSlotTag, reqStatus). That hook only
 * records; sagessd_cosmos_flash_poll reports to the library from the main loop.
 */
#include "sagessd_cosmos.h"

#include <stddef.h>

#define DATA_BYTES BYTES_PER_DATA_REGION_OF_PAGE
#define SPARE_REGION_BYTES BYTES_PER_SPARE_REGION_OF_PAGE
#define LINE SAGESSD_COSMOS_CACHE_LINE
#define SECTOR_BYTES (DATA_BYTES / 16u)

/* The library's spare record must fit the page's spare region; a sector must be whole cache
 * lines, so that invalidating the named sectors never touches a line of another (and never has
 * to clean a partial line, which would write stale bytes over the NSC's); words move the record. */
_Static_assert(SPARE_REGION_BYTES >= SAGESSD_FW_SPARE_BYTES, "spare region too small");
_Static_assert(SECTOR_BYTES % LINE == 0, "a sector is not whole cache lines");
_Static_assert(SAGESSD_FW_SPARE_BYTES % 4 == 0 && SPARE_REGION_BYTES % 4 == 0, "word copies");
#define IN_FLIGHT 0xFFu

typedef struct {
    uint32_t tag;       /* the library's tag */
    uint8_t *dram_page; /* the library's window (data, then spare record) */
    uint16_t req;       /* the scheduler request, REQ_SLOT_TAG_NONE when the slot is free */
    uint16_t sectors;   /* a read's named sectors */
    uint8_t kind;       /* SAGESSD_FLASH_* */
    uint8_t status;     /* REQ_STATUS_* once retired, IN_FLIGHT before */
} op_slot;

static op_slot slots[SAGESSD_COSMOS_NAND_SLOTS];
/* Retired requests' slots in the order the scheduler retired them: reported in that order,
 * which keeps each die's operations in submission order. */
static uint8_t retired[SAGESSD_COSMOS_NAND_SLOTS];
static unsigned retired_head, retired_count;
/* Each slot's spare buffer: SPARE_REGION_BYTES, word-aligned, in the caller's uncached area. */
static uint32_t *spare_base;
/* The library's block b of die d is GreedyFTL's virtual block good_block[d × blocks per die + b]:
 * a table in the caller's area after the spare buffers (up to 1 MiB for 8 × 8 dies of 8,192
 * blocks, too big for the program image). */
static uint16_t *good_block;

int sagessd_cosmos_nand_init(uint8_t *area)
{
    if (area == NULL || ((uintptr_t)area & 15u) != 0)
        return -1;
    spare_base = (uint32_t *)(void *)area;
    good_block = (uint16_t *)(void *)(area + (size_t)SAGESSD_COSMOS_NAND_SLOTS * SPARE_REGION_BYTES);
    for (unsigned i = 0; i < SAGESSD_COSMOS_NAND_SLOTS; i++)
        slots[i].req = REQ_SLOT_TAG_NONE;
    retired_head = retired_count = 0;
    /* The virtual blocks InitFTL found good, in order; the library gets the first ones. */
    for (unsigned die = 0; die < USER_DIES; die++) {
        unsigned n = 0;
        for (unsigned b = 0; b < USER_BLOCKS_PER_DIE && n < SAGESSD_COSMOS_BLOCKS_PER_DIE; b++)
            if (!virtualBlockMapPtr->block[die][b].bad)
                good_block[die * SAGESSD_COSMOS_BLOCKS_PER_DIE + n++] = (uint16_t)b;
        if (n < SAGESSD_COSMOS_BLOCKS_PER_DIE)
            return -1; /* this die has too few good blocks for the geometry */
    }
    return 0;
}

void sagessd_cosmos_geometry(sagessd_geometry *geometry)
{
    geometry->channels = USER_CHANNELS;
    geometry->ways = USER_WAYS;
    geometry->dies_per_way = 1;
    geometry->blocks_per_die = SAGESSD_COSMOS_BLOCKS_PER_DIE;
    geometry->pages_per_block = USER_PAGES_PER_BLOCK;
    geometry->page_size_bytes = BYTES_PER_DATA_REGION_OF_PAGE;
}

static uint32_t *spare_of(unsigned i)
{
    return spare_base + (size_t)i * (SPARE_REGION_BYTES / 4u);
}

/* The window's spare record, as words (the window is line-aligned, so the record is too). */
static uint32_t *record_of(uint8_t *dram_page)
{
    return (uint32_t *)(void *)(dram_page + DATA_BYTES);
}

/* Invalidates the named sectors of a window, one call per run of adjacent sectors. */
static void invalidate_sectors(uint8_t *dram_page, uint32_t sectors)
{
    uint32_t i = 0;
    while (i < 16u) {
        if (!(sectors >> i & 1u)) {
            i++;
            continue;
        }
        uint32_t first = i;
        while (i < 16u && sectors >> i & 1u)
            i++;
        Xil_DCacheInvalidateRange(SAGESSD_COSMOS_CACHE_ADDR(dram_page + first * SECTOR_BYTES),
                                  (i - first) * SECTOR_BYTES);
    }
}

static int32_t flash_submit(void *ctx, uint32_t tag, uint32_t kind, uint32_t address,
                            uint8_t *dram_page, uint32_t sectors)
{
    (void)ctx;
    const uint32_t pages_per_die = USER_PAGES_PER_BLOCK * SAGESSD_COSMOS_BLOCKS_PER_DIE;
    uint32_t die, block, page = 0;
    if (kind == SAGESSD_FLASH_ERASE) {
        die = address / SAGESSD_COSMOS_BLOCKS_PER_DIE;
        block = address % SAGESSD_COSMOS_BLOCKS_PER_DIE;
    } else if (kind == SAGESSD_FLASH_READ || kind == SAGESSD_FLASH_PROGRAM) {
        die = address / pages_per_die;
        block = (address % pages_per_die) / USER_PAGES_PER_BLOCK;
        page = address % USER_PAGES_PER_BLOCK;
        /* The NSC moves the page in 4-byte beats; the caches are kept in whole lines. The
         * library's windows are SAGESSD_DRAM_ALIGN-aligned, so this only refuses a bug. */
        if (dram_page == NULL || ((uintptr_t)dram_page & (LINE - 1u)) != 0 || sectors > 0xFFFFu)
            return -1;
    } else {
        return -1;
    }
    if (die >= USER_DIES)
        return -1;
    unsigned s = 0;
    while (s < SAGESSD_COSMOS_NAND_SLOTS && slots[s].req != REQ_SLOT_TAG_NONE)
        s++;
    /* No slot free, or the request pool is empty (GetFromFreeReqQ would then run the scheduler
     * from inside this callback, which the library forbids): try again later. */
    if (s == SAGESSD_COSMOS_NAND_SLOTS || freeReqQ.headReq == REQ_SLOT_TAG_NONE)
        return SAGESSD_FLASH_SUBMIT_BUSY;
    unsigned int req = GetFromFreeReqQ();
    SSD_REQ_FORMAT *r = &reqPoolPtr->reqPool[req];
    r->reqType = REQ_TYPE_NAND;
    r->reqCode = kind == SAGESSD_FLASH_READ    ? REQ_CODE_READ
                 : kind == SAGESSD_FLASH_PROGRAM ? REQ_CODE_WRITE
                                                 : REQ_CODE_ERASE;
    r->nvmeCmdSlotTag = 0;
    r->logicalSliceAddr = LOGICAL_SLICE_ADDR_NONE;
    r->reqOpt.nandAddr = REQ_OPT_NAND_ADDR_VSA;
    r->reqOpt.rowAddrDependencyCheck = REQ_OPT_ROW_ADDR_DEPENDENCY_NONE;
    r->reqOpt.blockSpace = REQ_OPT_BLOCK_SPACE_MAIN;
    r->reqOpt.nandEcc = REQ_OPT_NAND_ECC_ON;
    r->reqOpt.nandEccWarning = REQ_OPT_NAND_ECC_WARNING_ON;
    if (kind == SAGESSD_FLASH_ERASE) {
        r->reqOpt.dataBufFormat = REQ_OPT_DATA_BUF_NONE;
        sectors = 0;
    } else {
        r->reqOpt.dataBufFormat = REQ_OPT_DATA_BUF_ADDR;
        r->dataBufInfo.addr = SAGESSD_COSMOS_DEV_ADDR(dram_page);
        if (kind == SAGESSD_FLASH_PROGRAM) {
            /* The library's spare record at the start of the page's spare region; the rest of
             * that region stays erased. Then the page's data out of the caches to DDR. */
            uint32_t *spare = spare_of(s);
            const uint32_t *record = record_of(dram_page);
            for (uint32_t w = 0; w < SAGESSD_FW_SPARE_BYTES / 4u; w++)
                spare[w] = record[w];
            for (uint32_t w = SAGESSD_FW_SPARE_BYTES / 4u; w < SPARE_REGION_BYTES / 4u; w++)
                spare[w] = 0xFFFFFFFFu;
#if SAGESSD_COSMOS_FAULT != SAGESSD_COSMOS_FAULT_UNCLEAN
            Xil_DCacheFlushRange(SAGESSD_COSMOS_CACHE_ADDR(dram_page), DATA_BYTES);
#endif
            sectors = 0;
        } else {
            invalidate_sectors(dram_page, sectors);
        }
    }
    r->nandInfo.virtualSliceAddr =
        Vorg2VsaTranslation(die, good_block[die * SAGESSD_COSMOS_BLOCKS_PER_DIE + block], page);
    r->prevBlockingReq = REQ_SLOT_TAG_NONE;
    r->nextBlockingReq = REQ_SLOT_TAG_NONE;
    slots[s] = (op_slot){tag, dram_page, (uint16_t)req, (uint16_t)sectors, (uint8_t)kind, IN_FLIGHT};
    SelectLowLevelReqQ(req);
    return SAGESSD_FLASH_SUBMIT_STARTED;
}

const sagessd_flash_ops sagessd_cosmos_flash_ops = {flash_submit, NULL};

unsigned int sagessd_cosmos_spare_addr(unsigned int reqSlotTag)
{
    for (unsigned s = 0; s < SAGESSD_COSMOS_NAND_SLOTS; s++)
        if (slots[s].req == reqSlotTag && slots[s].status == IN_FLIGHT)
            return SAGESSD_COSMOS_DEV_ADDR(spare_of(s));
    return 0; /* not the glue's: GreedyFTL's own rule applies */
}

void sagessd_cosmos_nand_done(unsigned int reqSlotTag, unsigned int reqStatus)
{
    for (unsigned s = 0; s < SAGESSD_COSMOS_NAND_SLOTS; s++)
        if (slots[s].req == reqSlotTag && slots[s].status == IN_FLIGHT) {
            slots[s].status = (uint8_t)reqStatus;
            retired[(retired_head + retired_count) % SAGESSD_COSMOS_NAND_SLOTS] = (uint8_t)s;
            retired_count++;
            return;
        }
}

unsigned int sagessd_cosmos_flash_poll(void)
{
    unsigned int reported = 0;
    while (retired_count > 0) {
        unsigned s = retired[retired_head];
        op_slot *e = &slots[s];
        /* Only DONE is success, and a corrected read (WARNING: GreedyFTL marks the block as
         * grown bad for the next boot), which still delivers the data. Anything else — FAIL
         * after the scheduler's retries, a WARNING on a program or erase, a status this glue
         * does not know — is a media failure: the library then writes the data elsewhere or
         * reports the read, rather than trusting a page that may not hold it. */
        int ok = e->status == REQ_STATUS_DONE ||
                 (e->status == REQ_STATUS_WARNING && e->kind == SAGESSD_FLASH_READ);
        uint32_t result = ok ? SAGESSD_FLASH_OK : SAGESSD_FLASH_MEDIA;
        if (e->kind == SAGESSD_FLASH_READ) {
            /* Lines the core fetched while the NSC wrote: gone, whatever the outcome (a failed
             * read may have written part of the page). If the library's queue is full below,
             * this runs again next time, which is harmless: the library has not touched the
             * window meanwhile. */
#if SAGESSD_COSMOS_FAULT != SAGESSD_COSMOS_FAULT_STALE
            invalidate_sectors(e->dram_page, e->sectors);
#endif
            if (result == SAGESSD_FLASH_OK) {
                uint32_t *record = record_of(e->dram_page);
                const uint32_t *spare = spare_of(s);
                for (uint32_t w = 0; w < SAGESSD_FW_SPARE_BYTES / 4u; w++)
                    record[w] = spare[w];
            }
        }
        if (sagessd_fw_flash_complete(e->tag, result) != SAGESSD_OK)
            break; /* the library's queue is full: report the rest next time */
        e->req = REQ_SLOT_TAG_NONE;
        retired_head = (retired_head + 1) % SAGESSD_COSMOS_NAND_SLOTS;
        retired_count--;
        reported++;
    }
    return reported;
}
