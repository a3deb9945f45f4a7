#!/usr/bin/env bash
# Builds what `sagessd firmware calibrate` runs:
#   <target>/calibrate/calibrate.elf                 the calibration image for QEMU vexpress-a9
#                                                     (this crate + tests/board's start-up code)
#   <target>/release/libsagessd_qemu_a9_profile.so   the profiling plugin
# and prints their paths, one per line. Needs cargo with the armv7a-none-eabi target and
# gcc-arm-none-eabi (scripts/setup.sh installs both).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
case "$target_dir" in /*) ;; *) target_dir="$root/$target_dir" ;; esac
board="$root/tests/board"
out="$target_dir/calibrate"
mkdir -p "$out"
for tool in cargo arm-none-eabi-gcc; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "calibrate: $tool not found (run scripts/setup.sh)" >&2
        exit 1
    }
done
# The release profile with line tables (the workspace's `calibrate` profile): the same code, and
# addresses `sagessd firmware profile` can map to source lines.
(cd "$root" && cargo build --quiet -p sagessd-calibrate-board --profile calibrate --target armv7a-none-eabi)
(cd "$root" && cargo build --quiet -p sagessd-qemu-a9-profile --release)
# The same flags as the firmware self-test's image (tests/board/run.sh): ARM state, soft
# float, no unaligned accesses, no libc.
# The firmware and its harness live on the main stack (the Device is ~45 KiB and is moved at
# boot): 512 KiB instead of the self-test's 128 KiB.
ld_flags=(-T "$board/vexpress-a9.ld" -Wl,--gc-sections -Wl,--defsym=__main_stack_bytes=0x80000)
if arm-none-eabi-ld --help 2>/dev/null | grep -q -- --no-warn-execstack; then
    ld_flags+=(-Wl,--no-warn-execstack)
fi
arm-none-eabi-gcc -mcpu=cortex-a9 -marm -mno-unaligned-access -mfloat-abi=soft \
    -ffreestanding -nostdlib -fno-tree-loop-distribute-patterns -O2 -g -I"$board" \
    "${ld_flags[@]}" -Wl,-Map="$out/calibrate.map" -o "$out/calibrate.elf" \
    "$board/startup.S" "$board/platform_vexpress.c" \
    "$target_dir/armv7a-none-eabi/calibrate/libsagessd_calibrate_board.a" \
    2> >(grep -v '^bfd plugin:' >&2)
echo "$out/calibrate.elf"
echo "$target_dir/release/libsagessd_qemu_a9_profile.so"
