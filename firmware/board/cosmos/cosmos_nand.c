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
 * Data moves through bounce buffers of a page plus its spare region: GenerateSpareDataBufAddr
 * puts the spare right after the data, so reading into the library's page window itself would
 * overwrite the next window. The bounces lie in uncached DDR, so neither side needs cache
 * maintenance (the library's arena may be cached: only the CPU touches it).
 *
 * GreedyFTL has no completion callback; the one line it needs, in GetFromNandReqQ before
 * PutToFreeReqQ(reqSlotTag), is sagessd_cosmos_nand_done(reqSlotTag, reqStatus). That hook only
 * records; sagessd_cosmos_flash_poll reports to the library from the main loop.
 */
#include "sagessd_cosmos.h"

#include <stddef.h>

#define BOUNCE_BYTES SAGESSD_COSMOS_BOUNCE_BYTES

/* The library's spare record must fit the page's spare region. */
_Static_assert(BYTES_PER_SPARE_REGION_OF_PAGE >= SAGESSD_FW_SPARE_BYTES, "spare region too small");
#define IN_FLIGHT 0xFFu

typedef struct {
    uint32_t tag;       /* the library's tag */
    uint8_t *dram_page; /* a read's destination window in the arena (data, then spare) */
    uint16_t req;       /* the scheduler request, REQ_SLOT_TAG_NONE when the bounce is free */
    uint8_t kind;       /* SAGESSD_FLASH_* */
    uint8_t status;     /* REQ_STATUS_* once retired, IN_FLIGHT before */
} bounce_entry;

static bounce_entry bounces[SAGESSD_COSMOS_NAND_BOUNCES];
/* Retired requests' bounces in the order the scheduler retired them: reported in that order,
 * which keeps each die's operations in submission order. */
static uint8_t retired[SAGESSD_COSMOS_NAND_BOUNCES];
static unsigned retired_head, retired_count;
static uint8_t *bounce_base;
/* The library's block b of die d is GreedyFTL's virtual block good_block[d × blocks per die + b]:
 * a table in the caller's area after the bounces (up to 1 MiB for 8 × 8 dies of 8,192 blocks,
 * too big for the program image). */
static uint16_t *good_block;

int sagessd_cosmos_nand_init(uint8_t *area)
{
    if (area == NULL || ((uintptr_t)area & 15u) != 0)
        return -1;
    bounce_base = area;
    good_block = (uint16_t *)(void *)(area + (size_t)SAGESSD_COSMOS_NAND_BOUNCES * BOUNCE_BYTES);
    for (unsigned i = 0; i < SAGESSD_COSMOS_NAND_BOUNCES; i++)
        bounces[i].req = REQ_SLOT_TAG_NONE;
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

static uint8_t *bounce_of(unsigned i)
{
    return bounce_base + (size_t)i * BOUNCE_BYTES;
}

static void copy(uint8_t *dst, const uint8_t *src, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        dst[i] = src[i];
}

static int32_t flash_submit(void *ctx, uint32_t tag, uint32_t kind, uint32_t address,
                            uint8_t *dram_page)
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
        if (dram_page == NULL)
            return -1;
    } else {
        return -1;
    }
    if (die >= USER_DIES)
        return -1;
    unsigned b = 0;
    while (b < SAGESSD_COSMOS_NAND_BOUNCES && bounces[b].req != REQ_SLOT_TAG_NONE)
        b++;
    /* No bounce free, or the request pool is empty (GetFromFreeReqQ would then run the
     * scheduler from inside this callback, which the library forbids): try again later. */
    if (b == SAGESSD_COSMOS_NAND_BOUNCES || freeReqQ.headReq == REQ_SLOT_TAG_NONE)
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
    } else {
        r->reqOpt.dataBufFormat = REQ_OPT_DATA_BUF_ADDR;
        r->dataBufInfo.addr = SAGESSD_COSMOS_DEV_ADDR(bounce_of(b));
        if (kind == SAGESSD_FLASH_PROGRAM) {
            /* The window's data, then the library's spare record at the start of the page's
             * spare region; the rest of that region stays erased. */
            copy(bounce_of(b), dram_page, BYTES_PER_DATA_REGION_OF_PAGE + SAGESSD_FW_SPARE_BYTES);
            for (uint32_t i = SAGESSD_FW_SPARE_BYTES; i < BYTES_PER_SPARE_REGION_OF_PAGE; i++)
                bounce_of(b)[BYTES_PER_DATA_REGION_OF_PAGE + i] = 0xFF;
        }
    }
    r->nandInfo.virtualSliceAddr =
        Vorg2VsaTranslation(die, good_block[die * SAGESSD_COSMOS_BLOCKS_PER_DIE + block], page);
    r->prevBlockingReq = REQ_SLOT_TAG_NONE;
    r->nextBlockingReq = REQ_SLOT_TAG_NONE;
    bounces[b] = (bounce_entry){tag, dram_page, (uint16_t)req, (uint8_t)kind, IN_FLIGHT};
    SelectLowLevelReqQ(req);
    return SAGESSD_FLASH_SUBMIT_STARTED;
}

const sagessd_flash_ops sagessd_cosmos_flash_ops = {flash_submit, NULL};

void sagessd_cosmos_nand_done(unsigned int reqSlotTag, unsigned int reqStatus)
{
    for (unsigned b = 0; b < SAGESSD_COSMOS_NAND_BOUNCES; b++)
        if (bounces[b].req == reqSlotTag && bounces[b].status == IN_FLIGHT) {
            bounces[b].status = (uint8_t)reqStatus;
            retired[(retired_head + retired_count) % SAGESSD_COSMOS_NAND_BOUNCES] = (uint8_t)b;
            retired_count++;
            return;
        }
}

unsigned int sagessd_cosmos_flash_poll(void)
{
    unsigned int reported = 0;
    while (retired_count > 0) {
        unsigned b = retired[retired_head];
        bounce_entry *e = &bounces[b];
        /* Only DONE is success, and a corrected read (WARNING: GreedyFTL marks the block as
         * grown bad for the next boot), which still delivers the data. Anything else — FAIL
         * after the scheduler's retries, a WARNING on a program or erase, a status this glue
         * does not know — is a media failure: the library then writes the data elsewhere or
         * reports the read, rather than trusting a page that may not hold it. */
        int ok = e->status == REQ_STATUS_DONE ||
                 (e->status == REQ_STATUS_WARNING && e->kind == SAGESSD_FLASH_READ);
        uint32_t result = ok ? SAGESSD_FLASH_OK : SAGESSD_FLASH_MEDIA;
        if (e->kind == SAGESSD_FLASH_READ && result == SAGESSD_FLASH_OK)
            copy(e->dram_page, bounce_of(b), BYTES_PER_DATA_REGION_OF_PAGE + SAGESSD_FW_SPARE_BYTES);
        if (sagessd_fw_flash_complete(e->tag, result) != SAGESSD_OK)
            break; /* the library's queue is full: report the rest next time */
        e->req = REQ_SLOT_TAG_NONE;
        retired_head = (retired_head + 1) % SAGESSD_COSMOS_NAND_BOUNCES;
        retired_count--;
        reported++;
    }
    return reported;
}
