/*
 * sagessd_cosmos.h — the board glue between the Cosmos+ OpenSSD's stock firmware (GreedyFTL 3.0.0)
 * and libsagessd_fw.a: NVMe command intake, host DMA, completions, controller reset and shutdown
 * (cosmos_host.c), and the library's flash HAL on GreedyFTL's NAND request scheduler
 * (cosmos_nand.c). docs/openssd.md explains every rule used here and where in the Cosmos+
 * sources it comes from.
 *
 * Drop firmware/board/cosmos/ and firmware/include/ into the GreedyFTL project, link
 * libsagessd_fw.a, and change nvme/nvme_main.c's loop (sketch; the full patch is in
 * docs/openssd.md §3):
 *
 *   boot:      InitFTL(); sagessd_fw_init(&cfg, &geo, arena, n, &sagessd_cosmos_flash_ops);
 *              sagessd_cosmos_init(staging, slot_bytes);
 *   RUNNING:   if (sagessd_cosmos_ready() && get_nvme_cmd(...) == 1)
 *                  if (!sagessd_cosmos_accept(&nvmeCmd)) handle_nvme_admin_cmd(&nvmeCmd);
 *              sagessd_cosmos_poll();
 *   SHUTDOWN:  sagessd_cosmos_shutdown();          (instead of the stock branch's body)
 *   RESET:     sagessd_cosmos_reset();             (instead of the stock branch's body)
 *   always:    CheckDoneNvmeDmaReq(); SchedulingNandReq();   (the stock scheduler step)
 *   and in request_allocation.c's GetFromNandReqQ, before PutToFreeReqQ(reqSlotTag):
 *              sagessd_cosmos_nand_done(reqSlotTag, reqStatus);
 *   and in request_schedule.c's GenerateSpareDataBufAddr, REQ_OPT_DATA_BUF_ADDR case, first:
 *              unsigned int spare = sagessd_cosmos_spare_addr(reqSlotTag);
 *              if (spare != 0) return spare;
 *
 * All functions run on the firmware's one thread (the main loop), like the library's.
 */
#ifndef SAGESSD_COSMOS_H
#define SAGESSD_COSMOS_H

#include <stdint.h>

#include "cosmos_port.h"
#include "sagessd_fw.h"

/* Commands the glue holds at once (hardware slots it has accepted and not completed); at most
 * SAGESSD_MAX_COMMANDS. Each needs one staging buffer. */
#ifndef SAGESSD_COSMOS_SLOTS
#define SAGESSD_COSMOS_SLOTS 16u
#endif

/* Flash operations in flight on the NAND scheduler at once: one spare buffer of a page's spare
 * region each (BYTES_PER_SPARE_REGION_OF_PAGE; the data moves straight into the library's window).
 * At most 255, and fewer than the scheduler's request pool (AVAILABLE_OUNTSTANDING_REQ_COUNT). */
#ifndef SAGESSD_COSMOS_NAND_SLOTS
#define SAGESSD_COSMOS_NAND_SLOTS 32u
#endif

/* Bytes of a line of the A9's L1 data cache and of its PL310 L2: the unit of cache maintenance. */
#define SAGESSD_COSMOS_CACHE_LINE 32u

/* Library polls (sagessd_fw_poll) one sagessd_cosmos_poll runs at most. The main loop fetches
 * commands, admin ones too, and runs the NAND scheduler only between turns, so a long sampling
 * job whose pages are all in the page buffer (it never waits for the flash) must not run to its
 * end in one turn: it goes on next turn, and the host's commands are taken meanwhile. */
#ifndef SAGESSD_COSMOS_POLLS_PER_TURN
#define SAGESSD_COSMOS_POLLS_PER_TURN 8u
#endif

/* The library's blocks per die: the first this many good virtual blocks of each die (at most
 * USER_BLOCKS_PER_DIE, and no more than the worst die has good ones). Fewer blocks make a
 * smaller arena (docs/openssd.md §6). */
#ifndef SAGESSD_COSMOS_BLOCKS_PER_DIE
#define SAGESSD_COSMOS_BLOCKS_PER_DIE USER_BLOCKS_PER_DIE
#endif

/* NVMe status fields (CQE bits 15:1 as Cosmos' statusFieldWord holds them, phase bit 0 = 0) the
 * glue answers itself, before the library sees the command: Invalid Field in Command (a length
 * the host controller would move differently, or one larger than a staging buffer) and PRP Offset
 * Invalid (a buffer direct DMA cannot reach: PRP1 not 16-byte aligned, a PRP list that crosses a
 * page). Both with Do Not Retry. */
#define SAGESSD_COSMOS_STATUS_INVALID_FIELD      ((uint16_t)((1u << 15) | (0x02u << 1)))
#define SAGESSD_COSMOS_STATUS_PRP_OFFSET_INVALID ((uint16_t)((1u << 15) | (0x13u << 1)))

/* Fault variants for tests/board/run.sh, which must see each caught by the controller model.
 * Never define SAGESSD_COSMOS_FAULT on a board. */
#define SAGESSD_COSMOS_FAULT_EARLY 1   /* host→device data all by auto DMA (the old §4 design) */
#define SAGESSD_COSMOS_FAULT_DOUBLE 2  /* a Read's CQE posted after the controller's own */
#define SAGESSD_COSMOS_FAULT_OVERRUN 3 /* NS_COLLECT in whole units, any buffer length */
#define SAGESSD_COSMOS_FAULT_STALE 4   /* a read reported without invalidating its sectors after the DMA */
#define SAGESSD_COSMOS_FAULT_UNCLEAN 5 /* a page programmed without cleaning it from the cache */
#ifndef SAGESSD_COSMOS_FAULT
#define SAGESSD_COSMOS_FAULT 0
#endif

/* Bytes of the staging area for staging buffers of `slot_bytes`: one per slot, and 64 bytes the
   glue's own small DMAs use (fetching PRP list entries). */
#define SAGESSD_COSMOS_STAGING_BYTES(slot_bytes) \
    ((uint32_t)SAGESSD_COSMOS_SLOTS * (uint32_t)(slot_bytes) + 64u)

/* Boot, after InitFTL() and a successful sagessd_fw_init: `staging` is
   SAGESSD_COSMOS_STAGING_BYTES(slot_bytes) bytes of DDR that the host DMA engine reaches and
   nothing else uses (uncached, see docs/openssd.md §6), 4 KiB aligned; `slot_bytes` a multiple
   of 4096, at least 4096 and at most 1 MiB (the host controller's 256 units of 4 KiB). Returns 0,
   or -1 for bad arguments. */
int sagessd_cosmos_init(uint8_t *staging, uint32_t slot_bytes);

/* Whether the glue can take one more command now (a free slot entry and staging buffer). Fetch
   with get_nvme_cmd only when it is 1: a fetched command must be accepted. */
int sagessd_cosmos_ready(void);

/* Takes a command get_nvme_cmd fetched. Returns 1 if the glue owns it from now on (every I/O
   command, and admin Identify), 0 if it is an admin command for the stock handle_nvme_admin_cmd.
   Before the stock handler deletes an I/O submission queue, the glue finishes the commands of
   that queue it holds (the controller drops CQEs for a deleted queue and never frees their
   slots).
   Host→device data is moved before the library sees the command; the completion is posted by
   the glue (or by the host controller, see cosmos_host.c) exactly once. */
int sagessd_cosmos_accept(const NVME_COMMAND *cmd);

/* One main-loop turn: reports finished NAND requests to the library, runs it (at most
   SAGESSD_COSMOS_POLLS_PER_TURN polls), starts the device→host DMA of finished commands and posts
   their completions, and retries commands the library was too busy to take. Returns whether
   anything moved (then call it again on the next turn). */
int sagessd_cosmos_poll(void);

/* NVMe controller reset (the stock NVME_TASK_RESET branch): abandons every command the glue
   holds (no completion is ever posted for them) and the library's commands and jobs
   (sagessd_fw_reset), releases their controller slots (and those of commands fetched but not
   taken yet), then turns the queues off and clears CSTS as the stock branch does. NAND requests
   already issued finish later and are still reported to the library. */
void sagessd_cosmos_reset(void);

/* NVMe shutdown (the stock NVME_TASK_SHUTDOWN branch, CC.SHN set): reports shutdown processing
   (CSTS.SHST = 1), stops taking commands, finishes every command already taken and every NAND
   request until sagessd_fw_idle() is 1, writes GreedyFTL's grown-bad-block table
   (UpdateBadBlockTableForGrownBadBlock), turns the queues off and only then reports shutdown
   complete (CSTS.SHST = 2). Blocks until done. */
void sagessd_cosmos_shutdown(void);

/* Bytes of the NAND area: a spare buffer per operation slot, then the table of good blocks
   (2 bytes per die and library block). */
#define SAGESSD_COSMOS_NAND_AREA_BYTES                                                \
    ((uint32_t)SAGESSD_COSMOS_NAND_SLOTS * (uint32_t)BYTES_PER_SPARE_REGION_OF_PAGE + \
     2u * (uint32_t)USER_DIES * (uint32_t)SAGESSD_COSMOS_BLOCKS_PER_DIE)

/* Before sagessd_fw_init, after InitFTL (which finds the bad blocks): `area` is
   SAGESSD_COSMOS_NAND_AREA_BYTES of uncached DDR that nothing else uses, 16-byte aligned. The
   library's arena may be cached: the glue cleans and invalidates its page windows around the
   NSC's DMA.
   Returns 0, or -1 if `area` is unusable or a die has fewer than SAGESSD_COSMOS_BLOCKS_PER_DIE
   good blocks. */
int sagessd_cosmos_nand_init(uint8_t *area);

/* The geometry to give sagessd_fw_init: GreedyFTL's channels and ways (one die per way: the
   scheduler runs one request per way), SAGESSD_COSMOS_BLOCKS_PER_DIE blocks of
   USER_PAGES_PER_BLOCK pages of BYTES_PER_DATA_REGION_OF_PAGE bytes. */
void sagessd_cosmos_geometry(sagessd_geometry *geometry);

/* The library's flash HAL on GreedyFTL's NAND request scheduler (cosmos_nand.c): pass as
   sagessd_fw_init's `flash` argument. */
extern const sagessd_flash_ops sagessd_cosmos_flash_ops;

/* Called first by GreedyFTL's GenerateSpareDataBufAddr for a REQ_OPT_DATA_BUF_ADDR request (the
   one-line patch above): the device address of the spare buffer of the glue's request in
   `reqSlotTag`, or 0 for a request that is not the glue's (GreedyFTL's own rule, the spare after
   the data, then applies). The data goes straight into the library's page window, whose spare
   record is 64 bytes, not the NAND's 256, so the spare region must land elsewhere. */
unsigned int sagessd_cosmos_spare_addr(unsigned int reqSlotTag);

/* Called by GreedyFTL's GetFromNandReqQ for every NAND request it retires, with the request's
   slot and REQ_STATUS_*: records the result of the glue's own requests (others are ignored).
   It never calls the library (the scheduler also runs inside GreedyFTL's Sync* helpers); the
   next sagessd_cosmos_poll reports it. */
void sagessd_cosmos_nand_done(unsigned int reqSlotTag, unsigned int reqStatus);

/* Reports the NAND results recorded by sagessd_cosmos_nand_done to the library; part of
   sagessd_cosmos_poll. Returns how many it reported. */
unsigned int sagessd_cosmos_flash_poll(void);

#endif /* SAGESSD_COSMOS_H */
