#!/usr/bin/env bash
# Builds what `sagessd firmware calibrate` runs, for one board (the argument; default armv7a):
#   armv7a   <target>/calibrate/calibrate.elf           the image for QEMU vexpress-a9
#                                                        (this crate + tests/board's start-up code)
#   aarch64  <target>/calibrate/calibrate-aarch64.elf   the image for QEMU virt (Cortex-A53)
#   and <target>/release/libsagessd_qemu_a9_profile.so  the profiling plugin
# and prints the image's and the plugin's paths, one per line. Needs cargo with the
# armv7a-none-eabi (or aarch64-unknown-none) target and gcc-arm-none-eabi (for armv7a; the
# AArch64 image links with the toolchain's own rust-lld): scripts/setup.sh installs them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
case "$target_dir" in /*) ;; *) target_dir="$root/$target_dir" ;; esac
board="$root/tests/board"
out="$target_dir/calibrate"
arch="${1:-armv7a}"
mkdir -p "$out"
need() {
    command -v "$1" >/dev/null 2>&1 || {
        echo "calibrate: $1 not found (run scripts/setup.sh)" >&2
        exit 1
    }
}
need cargo
# The release profile with line tables (the workspace's `calibrate` profile): the same code, and
# addresses `sagessd firmware profile` can map to source lines.
case "$arch" in
armv7a)
    need arm-none-eabi-gcc
    (cd "$root" && cargo build --quiet -p sagessd-calibrate-board --profile calibrate --target armv7a-none-eabi)
    # The same flags as the firmware self-test's image (tests/board/run.sh): ARM state, soft
    # float, no unaligned accesses, no libc.
    # The firmware and its harness live on the main stack (the Device is ~45 KiB and is moved at
    # boot): 512 KiB instead of the self-test's 128 KiB.
    ld_flags=(-T "$board/vexpress-a9.ld" -Wl,--gc-sections -Wl,--defsym=__main_stack_bytes=0x80000)
    if arm-none-eabi-ld --help 2>/dev/null | grep -q -- --no-warn-execstack; then
        ld_flags+=(-Wl,--no-warn-execstack)
    fi
    elf="$out/calibrate.elf"
    arm-none-eabi-gcc -mcpu=cortex-a9 -marm -mno-unaligned-access -mfloat-abi=soft \
        -ffreestanding -nostdlib -fno-tree-loop-distribute-patterns -O2 -g -I"$board" \
        "${ld_flags[@]}" -Wl,-Map="$out/calibrate.map" -o "$elf" \
        "$board/startup.S" "$board/platform_vexpress.c" \
        "$target_dir/armv7a-none-eabi/calibrate/libsagessd_calibrate_board.a" \
        2> >(grep -v '^bfd plugin:' >&2)
    ;;
aarch64)
    (cd "$root" && cargo build --quiet -p sagessd-calibrate-board --profile calibrate --target aarch64-unknown-none)
    sysroot="$(rustc --print sysroot)"
    lld="$(find "$sysroot/lib/rustlib" -name rust-lld -type f | head -n 1)"
    [ -x "$lld" ] || {
        echo "calibrate: rust-lld not found in $sysroot" >&2
        exit 1
    }
    elf="$out/calibrate-aarch64.elf"
    "$lld" -flavor gnu -T "$here/aarch64-virt.ld" --gc-sections -u _start \
        -Map="$out/calibrate-aarch64.map" -o "$elf" \
        "$target_dir/aarch64-unknown-none/calibrate/libsagessd_calibrate_board.a"
    ;;
*)
    echo "calibrate: unknown board $arch (armv7a or aarch64)" >&2
    exit 2
    ;;
esac
(cd "$root" && cargo build --quiet -p sagessd-qemu-a9-profile --release)
echo "$elf"
echo "$target_dir/release/libsagessd_qemu_a9_profile.so"
