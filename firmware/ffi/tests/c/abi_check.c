/* Keeps firmware/include/sagessd_fw.h in sync with the Rust library (firmware/ffi/src/types.rs).
 *
 * Compiled with the host C compiler by the crate's unit tests (src/tests.rs), which run it and
 * compare every "NAME VALUE" line it prints with the Rust constants and layouts. The header's
 * _Static_asserts check the struct layouts at compile time already; the ones here also pin the
 * function types to those of the Rust definitions, so that a changed prototype fails to compile.
 * Needs no library: nothing here calls the API. */
#include "sagessd_fw.h"

#include <stdio.h>

_Static_assert(__STDC_VERSION__ >= 201112L, "compile as C11");
_Static_assert(sizeof(((sagessd_completion *)0)->cqe) == SAGESSD_CQE_BYTES, "CQE size");
_Static_assert(sizeof(uint32_t) == 4 && sizeof(size_t) == sizeof(void *), "plain ABI");

/* The prototypes, as the Rust side implements them (src/lib.rs). _Generic does not evaluate its
   operand, so this needs no library to link against. */
#define HAS_TYPE(fn, type) _Static_assert(_Generic(&(fn), type: 1, default: 0), #fn " has type " #type)
HAS_TYPE(sagessd_fw_abi_version, uint32_t (*)(void));
HAS_TYPE(sagessd_fw_dram_size,
         int32_t (*)(const sagessd_config *, const sagessd_geometry *, size_t *));
HAS_TYPE(sagessd_fw_init, int32_t (*)(const sagessd_config *, const sagessd_geometry *, uint8_t *,
                                      size_t, const sagessd_flash_ops *));
HAS_TYPE(sagessd_fw_submit,
         int32_t (*)(uint16_t, const uint8_t *, uint8_t *, uint32_t, sagessd_completion *));
HAS_TYPE(sagessd_fw_poll, int32_t (*)(void));
HAS_TYPE(sagessd_fw_next_completion, int32_t (*)(sagessd_completion *));
HAS_TYPE(sagessd_fw_flash_complete, int32_t (*)(uint32_t, uint32_t));
HAS_TYPE(((sagessd_flash_ops *)0)->submit,
         int32_t (**)(void *, uint32_t, uint32_t, uint32_t, uint8_t *, uint32_t));

#define VALUE(name) printf("%s %lld\n", #name, (long long)(name))
#define SIZE(type) printf("sizeof(%s) %zu\n", #type, sizeof(type))
#define OFFSET(type, field) printf("offsetof(%s.%s) %zu\n", #type, #field, offsetof(type, field))

int main(void)
{
    VALUE(SAGESSD_FW_ABI_VERSION);
    VALUE(SAGESSD_FW_SPARE_BYTES);
    VALUE(SAGESSD_OK);
    VALUE(SAGESSD_COMPLETED);
    VALUE(SAGESSD_PENDING);
    VALUE(SAGESSD_ERR_BUSY);
    VALUE(SAGESSD_ERR_ARGUMENT);
    VALUE(SAGESSD_ERR_STATE);
    VALUE(SAGESSD_ERR_QUEUE_FULL);
    VALUE(SAGESSD_ERR_CONFIG);
    VALUE(SAGESSD_ERR_CONFIG_GEOMETRY);
    VALUE(SAGESSD_ERR_CONFIG_BLOCK_SIZE);
    VALUE(SAGESSD_ERR_CONFIG_OVER_PROVISIONING);
    VALUE(SAGESSD_ERR_CONFIG_PAGE_BUFFER_PAGES);
    VALUE(SAGESSD_ERR_CONFIG_ISP_SLOTS);
    VALUE(SAGESSD_ERR_CONFIG_MAX_TARGETS);
    VALUE(SAGESSD_ERR_CONFIG_MAX_FANOUT);
    VALUE(SAGESSD_ERR_CONFIG_MAX_SUBGRAPH_NODES);
    VALUE(SAGESSD_ERR_CONFIG_MAX_SUBGRAPH_EDGES);
    VALUE(SAGESSD_ERR_CONFIG_MAX_TRANSFER);
    VALUE(SAGESSD_ERR_CONFIG_TOO_LITTLE_FLASH);
    VALUE(SAGESSD_ERR_CONFIG_DRAM_TOO_SMALL);
    VALUE(SAGESSD_ERR_CONFIG_DRAM_LAYOUT_OVERFLOW);
    VALUE(SAGESSD_ERR_CONFIG_ISP_LANES);
    VALUE(SAGESSD_ERR_CONFIG_ISP_WINDOW);
    VALUE(SAGESSD_ERR_CONFIG_MAX_MINIBATCHES);
    VALUE(SAGESSD_MAX_COMMANDS);
    VALUE(SAGESSD_FLASH_QUEUE_DEPTH);
    VALUE(SAGESSD_SQE_BYTES);
    VALUE(SAGESSD_CQE_BYTES);
    VALUE(SAGESSD_DRAM_ALIGN);
    VALUE(SAGESSD_ADMIN_IDENTIFY);
    VALUE(SAGESSD_IO_FLUSH);
    VALUE(SAGESSD_IO_WRITE);
    VALUE(SAGESSD_IO_READ);
    VALUE(SAGESSD_IO_DSM);
    VALUE(SAGESSD_IO_GRAPH_ATTACH);
    VALUE(SAGESSD_IO_NS_SUBMIT);
    VALUE(SAGESSD_IO_NS_COLLECT);
    VALUE(SAGESSD_NSID);
    VALUE(SAGESSD_FLASH_READ);
    VALUE(SAGESSD_FLASH_PROGRAM);
    VALUE(SAGESSD_FLASH_ERASE);
    VALUE(SAGESSD_FLASH_SUBMIT_STARTED);
    VALUE(SAGESSD_FLASH_SUBMIT_BUSY);
    VALUE(SAGESSD_FLASH_OK);
    VALUE(SAGESSD_FLASH_MEDIA);

    SIZE(sagessd_geometry);
    OFFSET(sagessd_geometry, channels);
    OFFSET(sagessd_geometry, ways);
    OFFSET(sagessd_geometry, dies_per_way);
    OFFSET(sagessd_geometry, blocks_per_die);
    OFFSET(sagessd_geometry, pages_per_block);
    OFFSET(sagessd_geometry, page_size_bytes);
    SIZE(sagessd_config);
    OFFSET(sagessd_config, block_size_log2);
    OFFSET(sagessd_config, over_provisioning_percent);
    OFFSET(sagessd_config, isp_slots);
    OFFSET(sagessd_config, reserved0);
    OFFSET(sagessd_config, page_buffer_pages);
    OFFSET(sagessd_config, max_targets);
    OFFSET(sagessd_config, max_fanout);
    OFFSET(sagessd_config, reserved1);
    OFFSET(sagessd_config, max_subgraph_nodes);
    OFFSET(sagessd_config, max_subgraph_edges);
    OFFSET(sagessd_config, max_transfer_bytes);
    OFFSET(sagessd_config, max_feature_bytes);
    SIZE(sagessd_flash_ops);
    OFFSET(sagessd_flash_ops, submit);
    OFFSET(sagessd_flash_ops, ctx);
    SIZE(sagessd_completion);
    OFFSET(sagessd_completion, sq_id);
    OFFSET(sagessd_completion, cid);
    OFFSET(sagessd_completion, cqe);
    return 0;
}
