#!/usr/bin/env bash
# Footprint of the board firmware (issue 3):
#   1. the static memory of the Cortex-A9 build: .text/.rodata/.data/.bss of what a board links;
#   2. the stack each C entry point needs at worst;
#   3. the DRAM arena the firmware needs for a hardware description, region by region, with what
#      each region scales with (`sagessd firmware footprint`).
#
# Usage: scripts/footprint.sh [--config hw-configs/X.toml]   (default: the built-in Cosmos+)
# Needs gcc-arm-none-eabi and the armv7a-none-eabi rustup target (scripts/setup.sh).
#
# Which numbers: the section sizes are measured on target/ffi-arm-link/arm_link_a9.elf, a
# bare-metal program that calls every sagessd_fw_* function, linked with --gc-sections against
# the release libsagessd_fw.a (firmware/ffi/tests/arm_link.sh). That is what a board's image
# grows by. The archive total (`arm-none-eabi-size --totals` on libsagessd_fw.a) is printed for
# reference only: it counts every object in the archive, including all of `core` and
# compiler_builtins that the linker drops, so it overstates the footprint several times over.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! log="$(firmware/ffi/tests/arm_link.sh 2>&1)"; then
    echo "$log" >&2
    echo "footprint.sh: FAILED: the arm link check (firmware/ffi/tests/arm_link.sh) failed" >&2
    exit 1
fi
elf=target/ffi-arm-link/arm_link_a9.elf
lib=target/armv7a-none-eabi/release/libsagessd_fw.a

echo "== Static memory of the Cortex-A9 build (armv7a-none-eabi, release, --gc-sections)"
echo "   measured on $elf: every sagessd_fw_* function linked into a bare-metal program"
arm-none-eabi-size -A "$elf" | awk '
    $1 ~ /^\.(text|rodata|data|bss|ARM\.exidx|ARM\.extab)$/ {
        printf "   %-12s %9d bytes (%6.1f KiB)\n", $1, $2, $2 / 1024
        if ($1 == ".bss" || $1 == ".data") ram += $2
        if ($1 != ".bss") image += $2
    }
    END {
        printf "   boot image (all but .bss): %d bytes (%.1f KiB); static RAM (.data + .bss): %d bytes (%.1f KiB)\n",
            image, image / 1024, ram, ram / 1024
    }'
echo "   (the link-check program itself adds link_check_data/_sqe, 4160 bytes of .bss, and ~300 bytes of .text)"
echo "   largest .bss objects:"
arm-none-eabi-nm -S --size-sort -C "$elf" | awk '$3 ~ /^[bB]$/ { print $2, $4 }' | tail -4 |
    while read -r size name; do printf "     %8d bytes  %s\n" "$((16#$size))" "$name"; done
echo "   (archive, for reference only: $(arm-none-eabi-size --totals "$lib" | tail -1 |
    awk '{ printf "text %d, data %d, bss %d bytes over every object in it", $1, $2, $3 }'))"
echo

echo "== Worst-case stack per entry point (Cortex-A9 build; C callbacks not included)"
arm-none-eabi-objdump -d --no-show-raw-insn "$elf" | awk -f scripts/stack_usage.awk |
    arm-none-eabi-c++filt | sed -E 's/::h[0-9a-f]{16}//g; s/^/   /' | cut -c1-220
echo "   sagessd_fw_init builds the firmware instance (see .bss) on the stack once, at boot, and"
echo "   moves it into .bss: give the thread that calls it that much stack."
echo

echo "== DRAM arena (sagessd firmware footprint $*)"
cargo run --quiet -p sagessd-cli -- firmware footprint "$@"
