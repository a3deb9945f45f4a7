/*
 * sagessd_fw.h — the sagessd SSD firmware as a C library (libsagessd_fw.a).
 *
 * The same firmware the sagessd emulator runs (NVMe dispatch, FTL, DRAM page buffer, in-storage
 * GNN neighbour sampling), for a board's C firmware such as the Cosmos+ OpenSSD's. Built from the
 * Rust crate firmware/ffi:
 *
 *   cargo build -p sagessd-firmware-ffi --release --target armv7a-none-eabi   (Cortex-A9)
 *   → target/armv7a-none-eabi/release/libsagessd_fw.a
 *
 * How a board drives it (all calls from its one firmware thread, never from an interrupt handler):
 *
 *   sagessd_fw_dram_size(&cfg, &geo, &n);     reserve n bytes of DRAM, SAGESSD_DRAM_ALIGN-aligned
 *   sagessd_fw_init(&cfg, &geo, dram, n, &ops);
 *   main loop:
 *     fetched an NVMe command     → sagessd_fw_submit(...): COMPLETED → post its CQE now
 *                                                            PENDING   → keep its buffer alive
 *     a NAND operation finished   → sagessd_fw_flash_complete(tag, status)
 *     always                      → while (sagessd_fw_poll() > 0) {}
 *                                   while (sagessd_fw_next_completion(&c) == 1) post c
 *
 * Nothing in the library allocates, blocks or panics on input; every pointer is checked for NULL
 * and every length against the command. The library keeps one firmware instance in its .bss.
 *
 * C99 with <stdint.h> and <stddef.h> only; the layout checks use C11 _Static_assert when the
 * compiler has it. Keep in sync with firmware/ffi/src/types.rs (checked by the crate's tests).
 */
#ifndef SAGESSD_FW_H
#define SAGESSD_FW_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this interface; sagessd_fw_abi_version() must return the same number. */
#define SAGESSD_FW_ABI_VERSION 5u

/* ---- Return codes of every function: >= 0 success, < 0 error. ---------------------------- */
#define SAGESSD_OK              0
#define SAGESSD_COMPLETED       0   /* submit: the command completed now, *cqe_out is filled */
#define SAGESSD_PENDING         1   /* submit: accepted; its completion comes from sagessd_fw_next_completion */
#define SAGESSD_ERR_BUSY       -1   /* every command slot is in use: poll, take completions, then submit again */
#define SAGESSD_ERR_ARGUMENT   -2   /* a NULL pointer, a bad length, a misaligned or overlapping buffer, a reserved field != 0 */
#define SAGESSD_ERR_STATE      -3   /* not initialised / already initialised / called from inside a flash submit callback */
#define SAGESSD_ERR_QUEUE_FULL -4   /* sagessd_fw_flash_complete: completion queue full */
#define SAGESSD_ERR_CONFIG     -16  /* -16 - n: the firmware's ConfigError n, listed below */

/* Configuration errors, SAGESSD_ERR_CONFIG - n, in a stable order (new ones are appended). */
#define SAGESSD_ERR_CONFIG_GEOMETRY             -16 /* geometry empty, page size not a multiple of 512, or >= 2^32 pages */
#define SAGESSD_ERR_CONFIG_BLOCK_SIZE           -17 /* block_size_log2 below 9 or the block larger than a page */
#define SAGESSD_ERR_CONFIG_OVER_PROVISIONING    -18 /* over_provisioning_percent >= 50 */
#define SAGESSD_ERR_CONFIG_PAGE_BUFFER_PAGES    -19 /* page_buffer_pages not a multiple of 8 in 16..=32768 */
#define SAGESSD_ERR_CONFIG_ISP_SLOTS            -20 /* isp_slots 0 or above 8 */
#define SAGESSD_ERR_CONFIG_MAX_TARGETS          -21 /* max_targets 0 or above max_subgraph_nodes */
#define SAGESSD_ERR_CONFIG_MAX_FANOUT           -22 /* max_fanout 0 or above 1024 */
#define SAGESSD_ERR_CONFIG_MAX_SUBGRAPH_NODES   -23 /* max_subgraph_nodes 0 or above 2^28 */
#define SAGESSD_ERR_CONFIG_MAX_SUBGRAPH_EDGES   -24 /* max_subgraph_edges 0 or above 2^28 */
#define SAGESSD_ERR_CONFIG_MAX_TRANSFER         -25 /* max_transfer_bytes not a power of two >= 4096, or
                                                       max_transfer_bytes / page_size_bytes + 1 >= 64 */
#define SAGESSD_ERR_CONFIG_TOO_LITTLE_FLASH     -26 /* no namespace left after reserves and over-provisioning */
#define SAGESSD_ERR_CONFIG_DRAM_TOO_SMALL       -27 /* dram_len < sagessd_fw_dram_size */
#define SAGESSD_ERR_CONFIG_DRAM_LAYOUT_OVERFLOW -28 /* the arena would not fit the address space */
#define SAGESSD_ERR_CONFIG_ISP_LANES            -29 /* concurrent sampling lanes (always 1 on a board) */
#define SAGESSD_ERR_CONFIG_ISP_WINDOW           -30 /* sampling window (a quarter of page_buffer_pages, at most 256, on a board) */
#define SAGESSD_ERR_CONFIG_MAX_MINIBATCHES      -31 /* minibatches per hyperbatch NS_config (always 1 on a board) */

/* ---- Limits. ---------------------------------------------------------------------------- */
#define SAGESSD_MAX_COMMANDS      64   /* commands in flight, counting completions not yet taken */
#define SAGESSD_FLASH_QUEUE_DEPTH 1024 /* flash operations started and not yet collected by poll;
                                          the library never has more outstanding */
#define SAGESSD_SQE_BYTES         64   /* an NVMe submission queue entry */
#define SAGESSD_CQE_BYTES         16   /* an NVMe completion queue entry */
#define SAGESSD_DRAM_ALIGN        64   /* alignment of the DRAM arena: page windows on whole cache lines */

/* ---- NVMe commands the firmware serves (opcodes; vendor opcodes keep the direction bits). -- */
#define SAGESSD_ADMIN_IDENTIFY    0x06 /* CDW10 CNS: 0x00 namespace, 0x01 controller, 0x02 active namespaces,
                                        0x03 namespace descriptors, 0x06 I/O command set; 4096 B out,
                                        Invalid Field for other CNS values */
#define SAGESSD_IO_FLUSH          0x00
#define SAGESSD_IO_WRITE          0x01 /* CDW10/11 SLBA, CDW12 blocks - 1 */
#define SAGESSD_IO_READ           0x02
#define SAGESSD_IO_DSM            0x09 /* Dataset Management (deallocate) */
#define SAGESSD_IO_GRAPH_ATTACH   0x81 /* host→device: 64-byte graph descriptor; CDW10 = bytes / 4 */
#define SAGESSD_IO_NS_SUBMIT      0x85 /* host→device: NS_config; CDW10 = bytes / 4; CQE dword 0 = tag */
#define SAGESSD_IO_NS_COLLECT     0x86 /* device→host: subgraph; CDW10 = bytes / 4, CDW13 = tag */
#define SAGESSD_NSID              1    /* the one namespace */

/* ---- Structures. -------------------------------------------------------------------------- */

/* The NAND array's shape (= sagessd_firmware::hal::Geometry). */
typedef struct sagessd_geometry {
    uint32_t channels;        /* independent channels */
    uint32_t ways;            /* chips per channel */
    uint32_t dies_per_way;    /* dies (LUNs scheduled independently) per chip */
    uint32_t blocks_per_die;  /* erase blocks per die */
    uint32_t pages_per_block; /* pages per erase block */
    uint32_t page_size_bytes; /* user bytes per page, a multiple of 512 */
} sagessd_geometry;           /* 24 bytes */

/* The firmware's sizes (= sagessd_firmware::FirmwareConfig). */
typedef struct sagessd_config {
    uint8_t  block_size_log2;           /* logical block size: 9 (512 B) .. log2(page size) */
    uint8_t  over_provisioning_percent; /* flash kept back for garbage collection, < 50 */
    uint8_t  isp_slots;                 /* sampling jobs submitted and not yet collected, 1..8 */
    uint8_t  reserved0;                 /* must be 0 */
    uint32_t page_buffer_pages;         /* DRAM page buffer, in flash pages: a multiple of 8 in 16..32768 */
    uint32_t max_targets;               /* most targets per NS_config */
    uint16_t max_fanout;                /* largest fanout per layer, <= 1024 */
    uint16_t reserved1;                 /* must be 0 */
    uint32_t max_subgraph_nodes;        /* unique nodes per sampled subgraph, <= 2^28 */
    uint32_t max_subgraph_edges;        /* sampled edges per subgraph (all layers), <= 2^28 */
    uint32_t max_transfer_bytes;        /* largest Read/Write (MDTS), a power of two >= 4096 */
    uint32_t max_feature_bytes;         /* node features one sampling job may return (a DRAM
                                           buffer per slot); 0: no in-storage feature gather */
} sagessd_config;                       /* 32 bytes */

/* Bytes of a page's spare (out-of-band) area the firmware uses. A page's DRAM window is
   page_size_bytes of data followed by these: a PROGRAM stores both, a READ returns both. The
   firmware keeps each page's owner and sequence numbers there and rebuilds its mapping from
   them after a power cut, so the board must keep them with the page and must report a page
   whose program was interrupted, when read, as erased (all 0xFF) or as SAGESSD_FLASH_MEDIA. */
#define SAGESSD_FW_SPARE_BYTES 64u

/* Flash operations the firmware asks the board to start (`kind` of submit). */
#define SAGESSD_FLASH_READ    0u   /* read page `address` into dram_page (data, then spare) */
#define SAGESSD_FLASH_PROGRAM 1u   /* program page `address` from dram_page (data, then spare) */
#define SAGESSD_FLASH_ERASE   2u   /* erase block `address` (dram_page is NULL) */

/* Return values of the board's submit. */
#define SAGESSD_FLASH_SUBMIT_STARTED 0 /* started; report it later with sagessd_fw_flash_complete */
#define SAGESSD_FLASH_SUBMIT_BUSY    1 /* cannot take it now; the firmware offers it again later */
/* anything else (< 0): refused (out of range); the firmware sees a failed operation */

/* Flash HAL, implemented by the board. `submit` starts an operation and returns at once:
   0 = started, 1 = busy (try again later; the firmware keeps it queued), < 0 = refused (out of
   range). The board reports each started operation exactly once, later, by calling
   sagessd_fw_flash_complete(tag, status) — from its main loop, never from inside submit —
   after a READ's data is in dram_page. Operations on one die must complete in submission order.
   Physical page `address` = (die * blocks_per_die + block) * pages_per_block + page, block
   `address` = die * blocks_per_die + block, dies numbered channel-first (die d is on channel
   d % channels, way (d / channels) % ways). dram_page lies inside the arena given to
   sagessd_fw_init: a PROGRAM's page must be read (cache cleaned) before it completes, a READ's
   page written (cache invalidated) before it is reported. The firmware leaves the page alone
   until then. `sectors` says which part of a READ's data the firmware needs: bit i for bytes
   i * page_size_bytes / 16 up to (i + 1) * page_size_bytes / 16 of the page (0: the spare
   alone); a board may bring in the whole page, but the firmware relies on these bytes and the
   spare only, so a board whose flash DMA does not snoop the core's caches need invalidate no
   more than them. 0 for PROGRAM and ERASE (a PROGRAM stores the whole window). */
typedef struct sagessd_flash_ops {
    int32_t (*submit)(void *ctx, uint32_t tag, uint32_t kind, uint32_t address, uint8_t *dram_page,
                      uint32_t sectors);
    void *ctx;                 /* passed back to submit unchanged */
} sagessd_flash_ops;           /* 2 pointers */

/* `status` of sagessd_fw_flash_complete. */
#define SAGESSD_FLASH_OK     0
#define SAGESSD_FLASH_MEDIA  1     /* the media failed the operation */

/* One command's completion. */
typedef struct sagessd_completion {
    uint16_t sq_id;            /* the submission queue the command came from */
    uint16_t cid;              /* its command identifier */
    uint8_t  cqe[16];          /* the NVMe completion queue entry, little-endian, as posted;
                                  SQ head (bytes 8-9) and the phase tag (bit 0 of byte 14) are 0:
                                  the board's queue logic sets them. Status field = cqe[14..15] >> 1. */
} sagessd_completion;          /* 20 bytes */

/* ---- Functions. --------------------------------------------------------------------------- */

/* The library's SAGESSD_FW_ABI_VERSION. Check it against the header's at start-up. */
uint32_t sagessd_fw_abi_version(void);

/* Bytes of DRAM arena the firmware needs for this config and geometry, written to *bytes_out.
   Returns SAGESSD_OK, SAGESSD_ERR_ARGUMENT (a NULL pointer, a reserved field != 0) or
   SAGESSD_ERR_CONFIG_*. */
int32_t sagessd_fw_dram_size(const sagessd_config *config, const sagessd_geometry *geometry,
                             size_t *bytes_out);

/* Boots the firmware on freshly erased flash (a fresh format) over the arena dram[0..dram_len]
   (SAGESSD_DRAM_ALIGN-aligned, at least sagessd_fw_dram_size bytes) and the flash HAL `flash`
   (copied; submit must not be NULL). The library zeroes the first sagessd_fw_dram_size bytes of
   the arena (the board need not) and owns them from then on: nothing else may touch them but the
   flash DMA the library asks for. Returns SAGESSD_OK, SAGESSD_ERR_ARGUMENT, SAGESSD_ERR_STATE
   (initialised already) or SAGESSD_ERR_CONFIG_* (nothing is kept: init may be called again).
   Stack: init builds the firmware instance (~35 KiB, then kept in the library's .bss) on the
   stack once, so it needs about 58 KiB of stack on a Cortex-A9; call it early, from a thread
   with that much. Later calls need far less: submit ~5 KiB, poll ~2 KiB plus the board's flash
   callback, the others < 1 KiB (scripts/footprint.sh measures all of them). */
int32_t sagessd_fw_init(const sagessd_config *config, const sagessd_geometry *geometry,
                        uint8_t *dram, size_t dram_len, const sagessd_flash_ops *flash);

/* Hands in one NVMe command. sq_id 0 = admin. `sqe` is the 64-byte submission queue entry as
   fetched; its PRP fields are ignored. `data` is the command's data buffer in board memory (the
   board's DMA engine has already fetched host→device payloads into it, and copies it to the
   host's PRPs after a device→host command completes); it must stay valid until the command
   completes and must not overlap the arena. data_len is its size in bytes (data may be NULL when
   data_len is 0); the firmware never reads or writes outside it (a command whose transfer does
   not fit completes with Data Transfer Error). Returns SAGESSD_COMPLETED (*cqe_out filled),
   SAGESSD_PENDING, SAGESSD_ERR_BUSY, SAGESSD_ERR_ARGUMENT or SAGESSD_ERR_STATE. */
int32_t sagessd_fw_submit(uint16_t sq_id, const uint8_t sqe[64], uint8_t *data, uint32_t data_len,
                          sagessd_completion *cqe_out);

/* Runs the firmware once: collects flash completions, advances commands, GC and sampling, and
   starts queued flash operations (calling flash->submit). Returns 1 if it did anything (call
   again), 0 if idle until a flash completion, SAGESSD_ERR_STATE if not initialised. */
int32_t sagessd_fw_poll(void);

/* Takes the oldest completion of a PENDING command: 1 = *out filled, 0 = none,
   SAGESSD_ERR_ARGUMENT (out is NULL), SAGESSD_ERR_STATE (not initialised). A command's slot is
   free again only once its completion has been taken. */
int32_t sagessd_fw_next_completion(sagessd_completion *out);

/* The board's report that the flash operation submitted with `tag` finished with `status`
   (SAGESSD_FLASH_OK or SAGESSD_FLASH_MEDIA): exactly once per operation its submit started, with
   the tag submit was given. Call it from the main loop, never from inside flash->submit. Returns SAGESSD_OK, SAGESSD_ERR_ARGUMENT (unknown status), SAGESSD_ERR_STATE
   (no operation is waiting for a report) or SAGESSD_ERR_QUEUE_FULL. */
int32_t sagessd_fw_flash_complete(uint32_t tag, uint32_t status);

/* NVMe controller reset (CC.EN cleared) or queue teardown: abandons every command in flight and
   every sampling job. After the call no abandoned command reads or writes its data buffer or
   produces a completion (completions not yet taken are dropped), so the board may reuse the
   buffers and command ids at once, and no tag handed out before names a job. Flash operations
   already started must still be reported with sagessd_fw_flash_complete (NAND cannot be
   stopped); the library finishes them so that every logical page holds its old or its new data.
   Until then the abandoned commands keep their slots (submit may answer SAGESSD_ERR_BUSY). The
   attached graph stays attached. Returns SAGESSD_OK or SAGESSD_ERR_STATE. */
int32_t sagessd_fw_reset(void);

/* 1 when the library has nothing to do (no command in flight, no completion waiting to be taken,
   no sampling job queued or running, no flash operation outstanding, no garbage collection), 0
   otherwise, SAGESSD_ERR_STATE if not initialised. On shutdown (CC.SHN) the board stops taking
   commands and polls until this is 1 before it reports the shutdown complete. */
int32_t sagessd_fw_idle(void);

/* ---- Layout checks. ----------------------------------------------------------------------- */
#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define SAGESSD_STATIC_ASSERT(e, m) _Static_assert(e, m)
#elif defined(__cplusplus) && __cplusplus >= 201103L
#define SAGESSD_STATIC_ASSERT(e, m) static_assert(e, m)
#else /* C99 / C++98: an array type of negative size if the condition is false */
#define SAGESSD_CAT_(a, b) a##b
#define SAGESSD_CAT(a, b) SAGESSD_CAT_(a, b)
#define SAGESSD_STATIC_ASSERT(e, m) \
    typedef char SAGESSD_CAT(sagessd_static_assert_line_, __LINE__)[(e) ? 1 : -1]
#endif
SAGESSD_STATIC_ASSERT(sizeof(sagessd_geometry) == 24, "sagessd_geometry is 24 bytes");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_geometry, ways) == 4, "sagessd_geometry.ways");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_geometry, dies_per_way) == 8, "sagessd_geometry.dies_per_way");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_geometry, blocks_per_die) == 12, "sagessd_geometry.blocks_per_die");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_geometry, pages_per_block) == 16, "sagessd_geometry.pages_per_block");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_geometry, page_size_bytes) == 20, "sagessd_geometry.page_size_bytes");
SAGESSD_STATIC_ASSERT(sizeof(sagessd_config) == 32, "sagessd_config is 32 bytes");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_config, over_provisioning_percent) == 1, "sagessd_config.over_provisioning_percent");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_config, isp_slots) == 2, "sagessd_config.isp_slots");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_config, reserved0) == 3, "sagessd_config.reserved0");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_config, page_buffer_pages) == 4, "sagessd_config.page_buffer_pages");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_config, max_targets) == 8, "sagessd_config.max_targets");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_config, max_fanout) == 12, "sagessd_config.max_fanout");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_config, reserved1) == 14, "sagessd_config.reserved1");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_config, max_subgraph_nodes) == 16, "sagessd_config.max_subgraph_nodes");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_config, max_subgraph_edges) == 20, "sagessd_config.max_subgraph_edges");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_config, max_transfer_bytes) == 24, "sagessd_config.max_transfer_bytes");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_config, max_feature_bytes) == 28, "sagessd_config.max_feature_bytes");
SAGESSD_STATIC_ASSERT(sizeof(sagessd_flash_ops) == 2 * sizeof(void *), "sagessd_flash_ops is 2 pointers");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_flash_ops, ctx) == sizeof(void *), "sagessd_flash_ops.ctx");
SAGESSD_STATIC_ASSERT(sizeof(sagessd_completion) == 20, "sagessd_completion is 20 bytes");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_completion, cid) == 2, "sagessd_completion.cid");
SAGESSD_STATIC_ASSERT(offsetof(sagessd_completion, cqe) == 4, "sagessd_completion.cqe");

#ifdef __cplusplus
}
#endif

#endif /* SAGESSD_FW_H */
