/*
 * cosmos_host.c — NVMe command intake, host DMA and completions for libsagessd_fw.a on the
 * Cosmos+ OpenSSD's NVMe host controller (GreedyFTL 3.0.0's nvme/host_lld.c interface).
 *
 * The rules this file follows, each from the controller's Verilog
 * (project/Predefined/2Ch8Way-1.0.3/IPRepo-1.0.3/NVMeHostController/src/) or GreedyFTL; docs/
 * openssd.md §4 cites the lines:
 *
 *  - Auto DMA (set_auto_rx_dma / set_auto_tx_dma) moves one whole 4 KiB unit of a command,
 *    addressed by the command's PRPs (dma_cmd_gen.v), and the controller counts the command's
 *    length down per unit from CDW12 bits 7:0 + 1 units, latched at fetch. When the unit that
 *    finishes equals what remains, it posts a successful CQE (dword 0 = 0) itself and releases
 *    the slot (dma_done.v → pcie_hcmd_cq_req.v). The "auto completion" bit of the request is
 *    dropped by the register interface (s_axi_reg.v keeps bits 31:14 and 12:2), so this cannot be
 *    turned off.
 *  - Direct DMA (set_direct_rx_dma / set_direct_tx_dma) moves up to 4 KiB between a board address
 *    and an explicit PCIe address, 16-byte aligned, upper word < 0x10 (asserted in host_lld.c),
 *    as one request that must not cross a host page; it never completes a command.
 *  - set_auto_nvme_cpl posts a CQE for a slot with the given dword 0 and status and releases the
 *    slot; a second CQE for the slot would complete whatever command the slot holds next.
 *
 * Hence the strategy. The library must finish a command before its CQE, and some CQEs carry a
 * result (NS_SUBMIT's tag, NS_COLLECT's size), so:
 *  - host→device commands in units (Write, GRAPH_ATTACH, NS_SUBMIT): units 0 … n−2 by auto DMA,
 *    the last unit by direct DMA (the controller's count never reaches the end, so it never
 *    completes the command), then the library, then the glue's CQE;
 *  - Read: the library first; on success all n units by auto DMA, and the controller's own CQE
 *    (success, dword 0 = 0) is exactly the library's, so the glue posts none; on failure the glue
 *    posts the library's status and moves nothing;
 *  - NS_COLLECT: the library first; the subgraph's units but the last by auto DMA, the last by
 *    direct DMA (so the controller never completes), then the glue's CQE with the size. Its host
 *    buffer must be whole 4 KiB units (CDW10 × 4 = (CDW12 + 1) × 4096): auto DMA writes whole
 *    units, so a shorter buffer would be overrun; anything else is refused with Invalid Field;
 *  - Identify and Dataset Management (whose CDW12 is no length): direct DMA only, split at the
 *    host page boundary (PRP1, then PRP2), as the stock Identify does.
 * Every length, PRP1 and the PRP list's place are checked before any DMA, so a command the
 * hardware would move differently from what the library expects is refused, not half-moved; a
 * PRP list entry that is not page-aligned is only seen when the glue reads it for the last unit
 * (the command then fails with PRP Offset Invalid after its other units moved).
 */
#include "sagessd_cosmos.h"

#include <stddef.h>

#define UNIT_BYTES 4096u
#define MAX_UNITS 256u /* CDW12 bits 7:0 + 1 */
#define HOST_PAGE 4096u

/* How a command's data moves. */
enum move {
    MOVE_NONE,       /* no data (Flush, unknown opcodes: the library answers) */
    MOVE_RX_UNITS,   /* host→device in 4 KiB units: Write, GRAPH_ATTACH, NS_SUBMIT */
    MOVE_TX_UNITS,   /* device→host in 4 KiB units, controller completes: Read */
    MOVE_TX_COLLECT, /* device→host, as many bytes as CQE dword 0 says: NS_COLLECT */
    MOVE_RX_DIRECT,  /* host→device by direct DMA only: Dataset Management */
    MOVE_TX_DIRECT,  /* device→host by direct DMA only: Identify */
};

enum state { FREE, WAIT_LIBRARY, PENDING };

typedef struct {
    uint8_t state, move;
    uint16_t slot; /* the controller's command slot (cmdSlotTag) */
    uint16_t sq_id, cid;
    uint32_t len;   /* bytes the library sees */
    uint32_t units; /* the controller's idea of the length, in 4 KiB units */
    uint32_t prp1_l, prp1_h, prp2_l, prp2_h;
    uint8_t sqe[SAGESSD_SQE_BYTES];
    uint8_t *staging;
} glue_cmd;

static glue_cmd cmds[SAGESSD_COSMOS_SLOTS];
static uint8_t *staging_base;
static uint32_t staging_slot_bytes;
static int shutting_down;

/* 16 bytes of the staging area (after the slots' buffers, so DMA-reachable and uncached like
 * them) for fetching a PRP list entry by direct DMA. */
static uint8_t *prp_fetch;

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int sagessd_cosmos_init(uint8_t *staging, uint32_t slot_bytes)
{
    /* Auto DMA forces device address bits 11:2 to 0 (dma_cmd_gen.v): units start on 4 KiB. */
    if (staging == NULL || ((uintptr_t)staging & (UNIT_BYTES - 1)) != 0 || slot_bytes < UNIT_BYTES ||
        slot_bytes % UNIT_BYTES != 0 || slot_bytes > MAX_UNITS * UNIT_BYTES)
        return -1;
    staging_base = staging;
    staging_slot_bytes = slot_bytes;
    prp_fetch = staging + (size_t)SAGESSD_COSMOS_SLOTS * slot_bytes;
    shutting_down = 0;
    for (unsigned i = 0; i < SAGESSD_COSMOS_SLOTS; i++) {
        cmds[i].state = FREE;
        cmds[i].staging = staging + (size_t)i * slot_bytes;
    }
    return 0;
}

static glue_cmd *free_entry(void)
{
    for (unsigned i = 0; i < SAGESSD_COSMOS_SLOTS; i++)
        if (cmds[i].state == FREE)
            return &cmds[i];
    return NULL;
}

int sagessd_cosmos_ready(void)
{
    return staging_base != NULL && !shutting_down && free_entry() != NULL;
}

/* ---- PRPs ------------------------------------------------------------------------------- */

/* Whether the transfer of `len` bytes treats PRP2 as a list pointer. The controller decides from
 * its unit count (dma_cmd_gen.v: a list unless 8 KiB − PRP1's offset covers every unit), the
 * NVMe rule (and the host) from the length; they must agree. */
static int prp2_is_list(const glue_cmd *c, uint32_t len)
{
    return (c->prp1_l & (HOST_PAGE - 1)) + len > 2 * HOST_PAGE;
}

/* Checks that direct DMA can reach every byte the glue moves by direct DMA, and that the
 * controller reads the PRPs as the host wrote them. Returns 0 or the status to answer. */
static uint16_t check_prps(const glue_cmd *c)
{
    uint32_t offset = c->prp1_l & (HOST_PAGE - 1);
    if (c->prp1_h >= 0x10 || c->prp2_h >= 0x10)
        return SAGESSD_COSMOS_STATUS_PRP_OFFSET_INVALID; /* beyond the controller's 36 bits */
    if (c->move == MOVE_NONE)
        return 0;
    /* Direct DMA starts a piece at PRP1's offset (or at a page start): 16-byte aligned. */
    if ((offset & 15u) != 0)
        return SAGESSD_COSMOS_STATUS_PRP_OFFSET_INVALID;
    uint32_t span = c->move == MOVE_RX_DIRECT || c->move == MOVE_TX_DIRECT ? c->len
                                                                          : c->units * UNIT_BYTES;
    if (prp2_is_list(c, span) != prp2_is_list(c, c->len))
        return SAGESSD_COSMOS_STATUS_PRP_OFFSET_INVALID;
    if (prp2_is_list(c, span)) {
        /* The controller reads entry k at PRP2 + 8k and follows no chain pointer: the list must
         * be 8-byte aligned and lie in one page. */
        uint32_t entries = (offset + span + HOST_PAGE - 1) / HOST_PAGE - 1;
        if ((c->prp2_l & 7u) != 0 || (c->prp2_l & (HOST_PAGE - 1)) + 8u * entries > HOST_PAGE)
            return SAGESSD_COSMOS_STATUS_PRP_OFFSET_INVALID;
    } else if ((c->prp2_l & (HOST_PAGE - 1)) != 0 && offset + c->len > HOST_PAGE) {
        return SAGESSD_COSMOS_STATUS_PRP_OFFSET_INVALID; /* a data pointer starts a page */
    }
    return 0;
}

/* The PCIe address of byte `at` of the transfer (of `span` bytes as the PRPs describe it), or 0
 * with *bad set if a PRP list entry is not page-aligned. */
static uint64_t prp_address(const glue_cmd *c, uint32_t at, uint32_t span, int *bad)
{
    uint64_t prp1 = (uint64_t)c->prp1_h << 32 | c->prp1_l;
    uint64_t prp2 = (uint64_t)c->prp2_h << 32 | c->prp2_l;
    uint32_t t = (c->prp1_l & (HOST_PAGE - 1)) + at;
    uint32_t page = t / HOST_PAGE, in_page = t % HOST_PAGE;
    if (page == 0)
        return prp1 + at;
    if (!prp2_is_list(c, span))
        return (prp2 & ~(uint64_t)(HOST_PAGE - 1)) + in_page;
    uint64_t entry = prp2 + 8u * (page - 1);
    uint64_t block = entry & ~(uint64_t)15;
    set_direct_rx_dma(SAGESSD_COSMOS_DEV_ADDR(prp_fetch), (unsigned int)(block >> 32),
                      (unsigned int)block, 16);
    check_direct_rx_dma_done();
    const uint8_t *e = prp_fetch + (unsigned)(entry - block);
    uint64_t value = (uint64_t)le32(e + 4) << 32 | le32(e);
    if ((value & (HOST_PAGE - 1)) != 0) {
        *bad = 1;
        return 0;
    }
    return value + in_page;
}

/* Moves transfer bytes [at, at + n) between the host and dev by direct DMA, one request per host
 * page piece, and waits. Returns 0 or the status to answer. */
static uint16_t direct(const glue_cmd *c, int to_host, uint32_t at, uint8_t *dev, uint32_t n,
                       uint32_t span)
{
    uint16_t status = 0;
    while (n > 0) {
        int bad = 0;
        uint64_t addr = prp_address(c, at, span, &bad);
        if (bad) {
            status = SAGESSD_COSMOS_STATUS_PRP_OFFSET_INVALID;
            break; /* but wait for the pieces already queued */
        }
        uint32_t room = HOST_PAGE - (uint32_t)(addr & (HOST_PAGE - 1));
        uint32_t piece = n < room ? n : room;
        /* The engine ignores length bits 3:0 (pcie_tx_req.v, m_axi_write.v): whole 16-byte units.
         * A host→device tail is read up to 15 bytes past the payload's end, within its page. */
        uint32_t dma_len = (piece + 15u) & ~15u;
        if (to_host)
            set_direct_tx_dma(SAGESSD_COSMOS_DEV_ADDR(dev), (unsigned int)(addr >> 32),
                              (unsigned int)addr, dma_len);
        else
            set_direct_rx_dma(SAGESSD_COSMOS_DEV_ADDR(dev), (unsigned int)(addr >> 32),
                              (unsigned int)addr, dma_len);
        at += piece;
        dev += piece;
        n -= piece;
    }
    if (to_host)
        check_direct_tx_dma_done();
    else
        check_direct_rx_dma_done();
    return status;
}

/* ---- Completions ------------------------------------------------------------------------- */

static void post(glue_cmd *c, uint32_t dw0, uint16_t status)
{
    set_auto_nvme_cpl(c->slot, dw0, status);
    c->state = FREE;
}

/* Moves a device→host result and completes the command, given the library's completion. */
static void finish(glue_cmd *c, const sagessd_completion *done)
{
    uint32_t dw0 = le32(done->cqe);
    uint16_t status = (uint16_t)(done->cqe[14] | done->cqe[15] << 8);
    if (status != 0 || c->move == MOVE_NONE || c->move == MOVE_RX_UNITS ||
        c->move == MOVE_RX_DIRECT) {
        post(c, dw0, status);
        return;
    }
    switch (c->move) {
    case MOVE_TX_UNITS:
        /* The controller posts the CQE (success, dword 0 = 0, as the library's) when the last
         * unit is through. Wait, so that the staging buffer is free again. */
        for (uint32_t u = 0; u < c->units; u++)
            set_auto_tx_dma(c->slot, u, SAGESSD_COSMOS_DEV_ADDR(c->staging + u * UNIT_BYTES), 1);
        check_auto_tx_dma_done();
#if SAGESSD_COSMOS_FAULT == SAGESSD_COSMOS_FAULT_DOUBLE
        post(c, dw0, status);
#endif
        c->state = FREE;
        return;
    case MOVE_TX_COLLECT: {
        if (dw0 == 0 || dw0 > c->len) {
            post(c, 0, (uint16_t)(0x06u << 1)); /* Internal Error: a size the library cannot give */
            return;
        }
        uint32_t k = (dw0 + UNIT_BYTES - 1) / UNIT_BYTES;
#if SAGESSD_COSMOS_FAULT == SAGESSD_COSMOS_FAULT_OVERRUN
        for (uint32_t u = 0; u < k; u++)
            set_auto_tx_dma(c->slot, u, SAGESSD_COSMOS_DEV_ADDR(c->staging + u * UNIT_BYTES), 1);
        check_auto_tx_dma_done();
        if (k < c->units)
            post(c, dw0, status);
        else
            c->state = FREE;
        return;
#else
        for (uint32_t u = 0; u + 1 < k; u++)
            set_auto_tx_dma(c->slot, u, SAGESSD_COSMOS_DEV_ADDR(c->staging + u * UNIT_BYTES), 1);
        uint32_t last = (k - 1) * UNIT_BYTES;
        uint16_t bad = direct(c, 1, last, c->staging + last, dw0 - last, c->units * UNIT_BYTES);
        check_auto_tx_dma_done();
        post(c, dw0, bad ? bad : status);
        return;
#endif
    }
    case MOVE_TX_DIRECT: {
        uint16_t bad = direct(c, 1, 0, c->staging, c->len, c->len);
        post(c, dw0, bad ? bad : status);
        return;
    }
    default:
        post(c, dw0, status);
        return;
    }
}

/* Hands a command whose host→device data is in staging to the library. */
static void submit(glue_cmd *c)
{
    sagessd_completion done;
    int32_t rc = sagessd_fw_submit(c->sq_id, c->sqe, c->len ? c->staging : NULL, c->len, &done);
    if (rc == SAGESSD_COMPLETED) {
        finish(c, &done);
    } else if (rc == SAGESSD_PENDING) {
        c->state = PENDING;
    } else if (rc == SAGESSD_ERR_BUSY) {
        c->state = WAIT_LIBRARY; /* abandoned commands still hold library slots: retry */
    } else {
        post(c, 0, (uint16_t)(0x06u << 1)); /* Internal Error: the library refused the call */
    }
}

/* ---- Intake ----------------------------------------------------------------------------- */

#define ADMIN_DELETE_SQ 0x00u

static int run_library(void);

/* Before the stock handler deletes I/O submission queue `sq`: finish every command of it the
 * glue holds. Once the queue is gone the controller neither posts their CQEs nor frees their
 * slots (pcie_hcmd_cq_req.v: an invalid queue ends the request). */
static void finish_queue(uint16_t sq)
{
    for (;;) {
        int held = 0;
        for (unsigned i = 0; i < SAGESSD_COSMOS_SLOTS; i++)
            held |= cmds[i].state != FREE && cmds[i].sq_id == sq;
        if (!held)
            return;
        (void)run_library();
        CheckDoneNvmeDmaReq();
        SchedulingNandReq();
    }
}

/* Decides how the command's data moves and how long it is, from its opcode and dwords. Returns
 * 0, or the status to answer without running it. */
static uint16_t classify(glue_cmd *c)
{
    uint8_t opcode = c->sqe[0];
    uint32_t cdw10 = le32(c->sqe + 40), cdw12 = le32(c->sqe + 48);
    /* The controller latches CDW12 bits 7:0 + 1 as the length in units (pcie_hcmd_sq_recv.v). */
    c->units = (cdw12 & 0xFFu) + 1u;
    c->move = MOVE_NONE;
    c->len = 0;
    if (c->sq_id == 0) { /* only Identify comes here */
        c->move = MOVE_TX_DIRECT;
        c->len = 4096;
        return check_prps(c);
    }
    switch (opcode) {
    case SAGESSD_IO_WRITE:
    case SAGESSD_IO_READ:
        /* 4 KiB logical blocks (the library's block_size_log2 = 12, as BYTES_PER_NVME_BLOCK).
         * More than 256 blocks: the controller would move only CDW12 bits 7:0 + 1 units. */
        if ((cdw12 & 0xFFFFu) > 0xFFu)
            return SAGESSD_COSMOS_STATUS_INVALID_FIELD;
        c->move = opcode == SAGESSD_IO_WRITE ? MOVE_RX_UNITS : MOVE_TX_UNITS;
        c->len = c->units * UNIT_BYTES;
        break;
    case SAGESSD_IO_GRAPH_ATTACH:
    case SAGESSD_IO_NS_SUBMIT:
        c->move = MOVE_RX_UNITS;
        c->len = cdw10 * 4u;
        if (cdw10 > MAX_UNITS * UNIT_BYTES / 4u || (cdw12 & 0xFF00u) != 0 ||
            (c->len + UNIT_BYTES - 1) / UNIT_BYTES != c->units)
            return SAGESSD_COSMOS_STATUS_INVALID_FIELD;
        break;
    case SAGESSD_IO_NS_COLLECT:
        c->move = MOVE_TX_COLLECT;
        c->len = cdw10 * 4u;
#if SAGESSD_COSMOS_FAULT != SAGESSD_COSMOS_FAULT_OVERRUN
        if (cdw10 > MAX_UNITS * UNIT_BYTES / 4u || (cdw12 & 0xFF00u) != 0 ||
            c->len != c->units * UNIT_BYTES)
            return SAGESSD_COSMOS_STATUS_INVALID_FIELD;
#endif
        break;
    case SAGESSD_IO_DSM:
        c->move = MOVE_RX_DIRECT;
        c->len = ((cdw10 & 0xFFu) + 1u) * 16u; /* NR + 1 ranges of 16 bytes */
        break;
    default:
        break; /* Flush, and opcodes the library answers with Invalid Opcode */
    }
    if (c->len > staging_slot_bytes)
        return SAGESSD_COSMOS_STATUS_INVALID_FIELD;
    return check_prps(c);
}

int sagessd_cosmos_accept(const NVME_COMMAND *cmd)
{
    const uint8_t opcode = (uint8_t)(cmd->cmdDword[0] & 0xFFu);
    if (cmd->qID == 0 && opcode == ADMIN_DELETE_SQ)
        finish_queue((uint16_t)(cmd->cmdDword[10] & 0xFFFFu));
    if (cmd->qID == 0 && opcode != SAGESSD_ADMIN_IDENTIFY)
        return 0;
    glue_cmd *c = free_entry();
    if (c == NULL) {
        /* The caller broke the sagessd_cosmos_ready rule: answer, never hand an I/O command to
         * the admin handler. */
        set_auto_nvme_cpl(cmd->cmdSlotTag, 0, (uint16_t)(0x06u << 1));
        return 1;
    }
    for (unsigned i = 0; i < 16; i++) {
        uint32_t w = cmd->cmdDword[i];
        c->sqe[4 * i] = (uint8_t)w;
        c->sqe[4 * i + 1] = (uint8_t)(w >> 8);
        c->sqe[4 * i + 2] = (uint8_t)(w >> 16);
        c->sqe[4 * i + 3] = (uint8_t)(w >> 24);
    }
    c->slot = cmd->cmdSlotTag;
    c->sq_id = cmd->qID;
    c->cid = (uint16_t)(cmd->cmdDword[0] >> 16);
    c->prp1_l = cmd->cmdDword[6];
    c->prp1_h = cmd->cmdDword[7];
    c->prp2_l = cmd->cmdDword[8];
    c->prp2_h = cmd->cmdDword[9];
    c->state = WAIT_LIBRARY;
    uint16_t refuse = classify(c);
    if (refuse != 0) {
        post(c, 0, refuse);
        return 1;
    }
    if (c->move == MOVE_RX_UNITS) {
#if SAGESSD_COSMOS_FAULT == SAGESSD_COSMOS_FAULT_EARLY
        for (uint32_t u = 0; u < c->units; u++)
            set_auto_rx_dma(c->slot, u, SAGESSD_COSMOS_DEV_ADDR(c->staging + u * UNIT_BYTES), 0);
        check_auto_rx_dma_done();
#else
        for (uint32_t u = 0; u + 1 < c->units; u++)
            set_auto_rx_dma(c->slot, u, SAGESSD_COSMOS_DEV_ADDR(c->staging + u * UNIT_BYTES), 0);
        uint32_t last = (c->units - 1) * UNIT_BYTES;
        refuse = direct(c, 0, last, c->staging + last, c->len - last, c->units * UNIT_BYTES);
        check_auto_rx_dma_done();
#endif
    } else if (c->move == MOVE_RX_DIRECT) {
        refuse = direct(c, 0, 0, c->staging, c->len, c->len);
    }
    if (refuse != 0)
        post(c, 0, refuse);
    else
        submit(c);
    return 1;
}

/* ---- The main loop ---------------------------------------------------------------------- */

/* Runs the library for at most SAGESSD_COSMOS_POLLS_PER_TURN polls (it goes on next turn, so
 * that the main loop takes commands meanwhile) and posts what it finished. Returns whether
 * anything moved. */
static int run_library(void)
{
    int moved = sagessd_cosmos_flash_poll() > 0;
    for (unsigned n = 0; n < SAGESSD_COSMOS_POLLS_PER_TURN && sagessd_fw_poll() > 0; n++)
        moved = 1;
    sagessd_completion done;
    while (sagessd_fw_next_completion(&done) == 1) {
        moved = 1;
        for (unsigned i = 0; i < SAGESSD_COSMOS_SLOTS; i++) {
            glue_cmd *c = &cmds[i];
            if (c->state == PENDING && c->sq_id == done.sq_id && c->cid == done.cid) {
                finish(c, &done);
                break;
            }
        }
    }
    for (unsigned i = 0; i < SAGESSD_COSMOS_SLOTS; i++)
        if (cmds[i].state == WAIT_LIBRARY) {
            submit(&cmds[i]);
            moved = 1;
        }
    return moved;
}

int sagessd_cosmos_poll(void)
{
    return run_library();
}

static void queues_off(void)
{
    for (unsigned int q = 0; q < 8; q++) {
        set_io_cq(q, 0, 0, 0, 0, 0, 0);
        set_io_sq(q, 0, 0, 0, 0, 0);
    }
    set_nvme_admin_queue(0, 0, 0);
    g_nvmeTask.cacheEn = 0;
}

void sagessd_cosmos_reset(void)
{
    /* The library forgets the commands; no CQE is posted for them. The controller keeps its
     * slots across CC.EN (pcie_hcmd_slot_mgt.v clears them only on a PCIe reset), and with the
     * queues off a CQE would neither be posted nor free the slot (pcie_hcmd_cq_req.v), so every
     * slot of an abandoned command is released without one (type 2) — the taken ones, and those
     * the controller fetched that were not taken yet. */
    (void)sagessd_fw_reset();
    queues_off(); /* first, so that the controller fetches nothing more */
    for (unsigned i = 0; i < SAGESSD_COSMOS_SLOTS; i++)
        if (cmds[i].state != FREE) {
            set_nvme_slot_release(cmds[i].slot);
            cmds[i].state = FREE;
        }
    NVME_COMMAND stale;
    while (get_nvme_cmd(&stale.qID, &stale.cmdSlotTag, &stale.cmdSeqNum, stale.cmdDword) == 1)
        set_nvme_slot_release(stale.cmdSlotTag);
    set_nvme_csts_shst(0);
    set_nvme_csts_rdy(0);
    g_nvmeTask.status = NVME_TASK_IDLE;
}

static int glue_busy(void)
{
    for (unsigned i = 0; i < SAGESSD_COSMOS_SLOTS; i++)
        if (cmds[i].state != FREE)
            return 1;
    return 0;
}

void sagessd_cosmos_shutdown(void)
{
    set_nvme_csts_shst(1);
    shutting_down = 1;
    /* Finish what was taken; the NAND scheduler must run for the library's requests. A reset
     * meanwhile (CC.EN cleared, or the interrupt handler's RESET on a link loss) wins: the host
     * has torn its queues down, so nothing more may be posted. */
    while (glue_busy() || sagessd_fw_idle() != 1) {
        if (!check_nvme_cc_en() || g_nvmeTask.status == NVME_TASK_RESET) {
            shutting_down = 0;
            sagessd_cosmos_reset();
            return;
        }
        (void)run_library();
        CheckDoneNvmeDmaReq();
        SchedulingNandReq();
    }
    UpdateBadBlockTableForGrownBadBlock(RESERVED_DATA_BUFFER_BASE_ADDR);
    queues_off();
    set_nvme_csts_shst(2);
    g_nvmeTask.status = NVME_TASK_WAIT_RESET;
    shutting_down = 0;
}
