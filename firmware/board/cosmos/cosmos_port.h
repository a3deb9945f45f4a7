/*
 * cosmos_port.h — what the Cosmos+ glue needs from GreedyFTL 3.0.0, in one place.
 *
 * On the board these are GreedyFTL's own headers (paths relative to its source folder). Built
 * with -DSAGESSD_COSMOS_MODEL (tests/board/run.sh), the same names come from
 * tests/board/cosmos_hw_model.h instead: a model of the NVMe host controller as its Verilog
 * behaves, and of the few GreedyFTL globals the glue touches, so that the unchanged glue runs on
 * the emulated Cortex-A9 and on the host under the model's checks.
 */
#ifndef SAGESSD_COSMOS_PORT_H
#define SAGESSD_COSMOS_PORT_H

#ifdef SAGESSD_COSMOS_MODEL
#include "cosmos_hw_model.h"
#else
#include "nvme/nvme.h"
#include "nvme/host_lld.h"
#include "nvme/nvme_main.h"
#include "memory_map.h"
#include "address_translation.h"
#include "request_allocation.h"
#include "request_schedule.h"
#include "request_transform.h"
#include "xil_cache.h"
extern volatile NVME_CONTEXT g_nvmeTask; /* nvme_main.c defines it volatile; no header declares it */
#endif

/* A board address as the host DMA engine takes it (devAddr): DDR addresses are 32-bit. */
#define SAGESSD_COSMOS_DEV_ADDR(p) ((unsigned int)(uintptr_t)(p))

/* An address as the standalone BSP's cache maintenance takes it (xil_cache.h:
   Xil_DCacheFlushRange(INTPTR adr, u32 len), Xil_DCacheInvalidateRange(INTPTR adr, u32 len)).
   A BSP older than INTPTR (xil_types.h) takes an unsigned int: change this line. */
#define SAGESSD_COSMOS_CACHE_ADDR(p) ((INTPTR)(uintptr_t)(p))

#endif /* SAGESSD_COSMOS_PORT_H */
