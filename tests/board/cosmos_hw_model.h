/*
 * cosmos_hw_model.h — a model of the Cosmos+ OpenSSD's NVMe host controller (its DMA engine,
 * command slots and completion logic, as the Verilog in the public Cosmos+ repository's
 * project/Predefined/2Ch8Way-1.0.3/IPRepo-1.0.3/NVMeHostController/src/ implements them) and of
 * the few GreedyFTL 3.0.0 interfaces the board glue uses (host_lld.h's driver calls, the NVMe task
 * state, the NAND request pool and scheduler), under the same names, so that
 * firmware/board/cosmos/ compiles unchanged against it (-DSAGESSD_COSMOS_MODEL).
 *
 * The model is also the glue's judge. It fails the run (cosmos_model_fail) when:
 *  - a CQE is posted for a slot that holds no command (double completion),
 *  - a CQE is posted while DMA of its command is still queued, or before the library finished
 *    the command, or with another status or dword 0 than the library's (early / wrong
 *    completion; the library's results are taken from its own calls, wrapped with ld --wrap),
 *  - a DMA writes host memory outside the command's buffer or reads outside it (overrun),
 *  - a direct DMA breaks a rule of host_lld.c or of the engine (length over 4 KiB, not 16-byte
 *    aligned or sized, crossing a host page), or an auto DMA goes past the command's length,
 *  - a command is released without a completion that the host still waits for, a CQE is posted
 *    for a command of a deleted submission queue (the controller would drop it and keep the
 *    slot), or slots are left holding commands after shutdown (leaks),
 *  - a page moves through the NAND scheduler other than straight between the flash and the
 *    library's window, or its caches are not kept: the NSC does not snoop the A9's caches, so a
 *    program must clean its window's data before it is queued, and a read must invalidate the
 *    sectors the library named before it is queued and again before the library hears of it.
 *    The model's NSC writes a read's page where the core sees it only when those lines are
 *    invalidated after the DMA (the worst a cache can do), and checks the named bytes and the
 *    spare record the library is handed against the page (stale read, unclean program, cache).
 * Host memory is the test's own buffers: each command's data buffer through a device window of
 * its own whose pages are in reverse order (as an IOMMU scatters them), PRP lists at
 * 0x1_0000_0000 + their address. Host→device and device→host DMA run apart, each in order.
 */
#ifndef SAGESSD_COSMOS_HW_MODEL_H
#define SAGESSD_COSMOS_HW_MODEL_H

#include <stdint.h>

#include "sagessd_fw.h"

/* ---- GreedyFTL's geometry constants (ftl_config.h), as the self-test's board has them. ---- */
#ifndef USER_CHANNELS
#define USER_CHANNELS 2u
#endif
#ifndef USER_WAYS
#define USER_WAYS 2u
#endif
#define USER_DIES (USER_CHANNELS * USER_WAYS)
#ifndef USER_BLOCKS_PER_DIE
#define USER_BLOCKS_PER_DIE 18u /* two of each die's are bad (cosmos_hw_model.c) */
#endif
#ifndef USER_PAGES_PER_BLOCK
#define USER_PAGES_PER_BLOCK 16u
#endif
#ifndef BYTES_PER_DATA_REGION_OF_PAGE
#define BYTES_PER_DATA_REGION_OF_PAGE 4096u
#endif
#define BYTES_PER_SPARE_REGION_OF_PAGE 256u
#define SLICES_PER_BLOCK USER_PAGES_PER_BLOCK
#define Vorg2VsaTranslation(dieNo, blockNo, pageNo) \
    ((dieNo) + (USER_DIES) * ((blockNo) * (SLICES_PER_BLOCK) + (pageNo)))

/* ---- The NVMe task (nvme/nvme.h, nvme_main.c). ---- */
typedef struct {
    unsigned short qID;
    unsigned short cmdSlotTag;
    unsigned int cmdSeqNum;
    unsigned int cmdDword[16];
} NVME_COMMAND;

typedef struct {
    unsigned int status;
    unsigned int cacheEn;
} NVME_CONTEXT;
extern NVME_CONTEXT g_nvmeTask;

#define NVME_TASK_IDLE 0x0
#define NVME_TASK_WAIT_CC_EN 0x1
#define NVME_TASK_RUNNING 0x2
#define NVME_TASK_SHUTDOWN 0x3
#define NVME_TASK_WAIT_RESET 0x4
#define NVME_TASK_RESET 0x5

/* ---- nvme/host_lld.h: the host controller's driver calls. ---- */
unsigned int check_nvme_cc_en(void);
void set_nvme_csts_rdy(unsigned int rdy);
void set_nvme_csts_shst(unsigned int shst);
void set_nvme_admin_queue(unsigned int sqValid, unsigned int cqValid, unsigned int cqIrqEn);
unsigned int get_nvme_cmd(unsigned short *qID, unsigned short *cmdSlotTag, unsigned int *cmdSeqNum,
                          unsigned int *cmdDword);
void set_auto_nvme_cpl(unsigned int cmdSlotTag, unsigned int specific, unsigned int statusFieldWord);
void set_nvme_slot_release(unsigned int cmdSlotTag);
void set_nvme_cpl(unsigned int sqId, unsigned int cid, unsigned int specific,
                  unsigned int statusFieldWord);
void set_io_sq(unsigned int ioSqIdx, unsigned int valid, unsigned int cqVector, unsigned int qSzie,
               unsigned int pcieBaseAddrL, unsigned int pcieBaseAddrH);
void set_io_cq(unsigned int ioCqIdx, unsigned int valid, unsigned int irqEn, unsigned int irqVector,
               unsigned int qSzie, unsigned int pcieBaseAddrL, unsigned int pcieBaseAddrH);
void set_direct_tx_dma(unsigned int devAddr, unsigned int pcieAddrH, unsigned int pcieAddrL,
                       unsigned int len);
void set_direct_rx_dma(unsigned int devAddr, unsigned int pcieAddrH, unsigned int pcieAddrL,
                       unsigned int len);
void set_auto_tx_dma(unsigned int cmdSlotTag, unsigned int cmd4KBOffset, unsigned int devAddr,
                     unsigned int autoCompletion);
void set_auto_rx_dma(unsigned int cmdSlotTag, unsigned int cmd4KBOffset, unsigned int devAddr,
                     unsigned int autoCompletion);
void check_direct_tx_dma_done(void);
void check_direct_rx_dma_done(void);
void check_auto_tx_dma_done(void);
void check_auto_rx_dma_done(void);

/* ---- GreedyFTL's NAND request pool and scheduler (request_format.h, request_allocation.h,
 * request_schedule.h, request_transform.h, address_translation.h), the fields the glue sets. ---- */
#define REQ_TYPE_NAND 0x1
#define REQ_CODE_WRITE 0x00
#define REQ_CODE_READ 0x08
#define REQ_CODE_ERASE 0x0C
#define REQ_OPT_DATA_BUF_ADDR 2
#define REQ_OPT_DATA_BUF_NONE 3
#define REQ_OPT_NAND_ADDR_VSA 0
#define REQ_OPT_NAND_ECC_ON 1
#define REQ_OPT_NAND_ECC_WARNING_ON 1
#define REQ_OPT_ROW_ADDR_DEPENDENCY_NONE 0
#define REQ_OPT_BLOCK_SPACE_MAIN 0
#define LOGICAL_SLICE_ADDR_NONE 0xffffffffu
#define REQ_SLOT_TAG_NONE 0xffffu
#define REQ_STATUS_DONE 1
#define REQ_STATUS_FAIL 2
#define REQ_STATUS_WARNING 3
/* Smaller than GreedyFTL's USER_DIES × 128, so that the glue meets an empty pool. */
#define AVAILABLE_OUNTSTANDING_REQ_COUNT (USER_DIES * 2u)

typedef struct {
    unsigned int reqType, reqCode, nvmeCmdSlotTag, logicalSliceAddr;
    struct {
        unsigned int dataBufFormat, nandAddr, nandEcc, nandEccWarning, rowAddrDependencyCheck,
            blockSpace;
    } reqOpt;
    struct {
        unsigned int addr;
    } dataBufInfo;
    struct {
        unsigned int virtualSliceAddr;
    } nandInfo;
    unsigned int prevReq, nextReq, prevBlockingReq, nextBlockingReq;
} SSD_REQ_FORMAT;
typedef struct {
    SSD_REQ_FORMAT reqPool[AVAILABLE_OUNTSTANDING_REQ_COUNT];
} REQ_POOL;
typedef struct {
    unsigned int headReq, tailReq, reqCnt;
} FREE_REQUEST_QUEUE;
typedef struct {
    struct {
        unsigned int bad;
    } block[USER_DIES][USER_BLOCKS_PER_DIE];
} VIRTUAL_BLOCK_MAP;

extern REQ_POOL *reqPoolPtr;
extern FREE_REQUEST_QUEUE freeReqQ;
extern VIRTUAL_BLOCK_MAP *virtualBlockMapPtr;
unsigned int GetFromFreeReqQ(void);
void SelectLowLevelReqQ(unsigned int reqSlotTag);
/* Retires the head request of the next die that has one (GetFromNandReqQ calls the glue's
 * sagessd_cosmos_nand_done hook, as the one-line patch does on the board). */
void SchedulingNandReq(void);
void CheckDoneNvmeDmaReq(void);
#define RESERVED_DATA_BUFFER_BASE_ADDR 0x10451000u

/* ---- The standalone BSP's cache maintenance (xil_cache.h), on the NSC's view of DDR. ---- */
typedef intptr_t INTPTR;
typedef uint32_t u32;
void Xil_DCacheFlushRange(INTPTR adr, u32 len);
void Xil_DCacheInvalidateRange(INTPTR adr, u32 len);
void UpdateBadBlockTableForGrownBadBlock(unsigned int tempBufAddr);

/* ---- The test's side. ---- */

/* Prepares the model (slots free, CC.EN = 0, NAND scheduler empty, bad blocks marked). */
void cosmos_model_init(void);

/* One step of the hardware: the DMA engine moves the oldest queued request. Returns whether it
 * did anything. The driver calls above also step it while they wait. */
int cosmos_model_tick(void);

/* The host submits command `sqe` on queue sq_id with data buffer buf[0..len): the model builds
 * its PRPs (PRP1 = buf, PRP2 a page or a list), puts it in a free slot and queues it for
 * get_nvme_cmd. `expect` is COSMOS_EXPECT_LIBRARY (its CQE must be the library's) or the status
 * field the glue must answer without the library. Returns 0, or -1 when no slot is free. */
#define COSMOS_EXPECT_LIBRARY 0xFFFFFFFFu
int cosmos_host_submit(uint16_t sq_id, const uint8_t sqe[64], uint8_t *buf, uint32_t len,
                       uint32_t expect);
/* Takes the oldest CQE the host has received: 1 with *out filled (dword 0 in cqe[0..3], the
 * status field with phase 0 in cqe[14..15]), 0 if none. */
int cosmos_host_reap(sagessd_completion *out);
/* The host's controller configuration: CC.EN (dropping it abandons every command in flight)
 * and CC.SHN = 1 (normal shutdown). */
void cosmos_host_set_enable(unsigned int en);
/* Creates (valid = 1) or deletes I/O submission queue sq_id, as the stock admin handler's
 * set_io_sq does for Create and Delete I/O Submission Queue. */
void cosmos_host_set_sq(uint16_t sq_id, unsigned int valid);
void cosmos_host_request_shutdown(void);
/* CSTS.SHST and CSTS.RDY as the firmware last set them; the host's CC.SHN request. */
unsigned int cosmos_host_shst(void);
unsigned int cosmos_host_rdy(void);
unsigned int cosmos_host_shn(void);
/* Command slots holding a command; NAND requests queued or not yet retired. */
unsigned int cosmos_model_slots_in_use(void);
unsigned int cosmos_model_nand_queued(void);
/* Counts for the transcript: auto and direct DMA requests, CQEs by the hardware itself. */
typedef struct {
    uint32_t auto_units, direct_requests, hardware_cqes, firmware_cqes, slot_releases, bbt_updates;
    /* Pages the NSC moved, and the cache lines the glue cleaned and invalidated around them. */
    uint32_t nand_reads, nand_programs, lines_cleaned, lines_invalidated;
} cosmos_model_stats;
cosmos_model_stats cosmos_model_counts(void);

/* The test hands the library a flash HAL that calls this before each call of the glue's submit:
 * what the library asked for (the model cannot see the sectors in the scheduler's request). */
void cosmos_model_flash_submitting(uint32_t tag, uint32_t kind, const uint8_t *dram_page,
                                   uint32_t sectors);

/* Implemented by the test program: report a failed check and stop. */
void cosmos_model_fail(const char *check, const char *what, uint32_t value)
    __attribute__((noreturn));
/* Implemented by the test program: run one NAND operation on its RAM NAND (kind
 * SAGESSD_FLASH_*, `page` the array's page number, `block` its block number for an erase) with
 * `data` a window as the library's are (the page's data, then its SAGESSD_FW_SPARE_BYTES record);
 * returns REQ_STATUS_DONE or REQ_STATUS_FAIL. */
unsigned int cosmos_nand_execute(uint32_t kind, uint32_t address, uint8_t *data);

#endif /* SAGESSD_COSMOS_HW_MODEL_H */
