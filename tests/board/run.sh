#!/usr/bin/env bash
# The firmware's bare-metal self-test: the same C program (selftest.c) drives the firmware's C ABI
# on the host and on an emulated Cortex-A9 (QEMU vexpress-a9), and both must print PASS and the
# same checksum of the sampled subgraphs — in fact the same transcript, line for line.
#
#   tests/board/run.sh            (from any directory; needs cargo, gcc, gcc-arm-none-eabi,
#                                  libnewlib-arm-none-eabi and qemu-system-arm)
#
# Builds: libsagessd_fw.a for armv7a-none-eabi and for the host (cargo, release), then
#   <target>/board/selftest-host         (host gcc)
#   <target>/board/selftest.elf          (arm-none-eabi-gcc, ARM state, soft float, no libc)
#   <target>/board/selftest-hardfp.elf   (the same, C side hard-float as a Xilinx SDK build)
# Runs all three (QEMU under a 120 s timeout each), keeps their output in <target>/board/*.log,
# compares. Exit status 0 only if all passed with equal checksums and equal transcripts.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
case "$target_dir" in /*) ;; *) target_dir="$root/$target_dir" ;; esac
out="$target_dir/board"
mkdir -p "$out"
rm -f "$out"/*.log "$out"/*.raw "$out"/*.diff "$out"/*qemu-stderr "$out"/*.platform # no stale results

say() { printf 'board: %s\n' "$*"; }
die() { printf 'board: FAIL: %s\n' "$*" >&2; exit 1; }

for tool in cargo gcc arm-none-eabi-gcc qemu-system-arm timeout; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "$tool not found (apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm qemu-utils)"
done

start=$(date +%s.%N)
elapsed() { awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }

# 1. The static library, for the board and for the host.
say "cargo build -p sagessd-firmware-ffi --release --target armv7a-none-eabi"
(cd "$root" && cargo build --quiet -p sagessd-firmware-ffi --release --target armv7a-none-eabi)
say "cargo build -p sagessd-firmware-ffi --release"
(cd "$root" && cargo build --quiet -p sagessd-firmware-ffi --release)
lib_arm="$target_dir/armv7a-none-eabi/release/libsagessd_fw.a"
lib_host="$target_dir/release/libsagessd_fw.a"
[ -f "$lib_arm" ] || die "$lib_arm was not built"
[ -f "$lib_host" ] || die "$lib_host was not built"

# 2. The self-test, three times.
include=(-I"$here" -I"$root/firmware/include")
warn=(-std=c11 -Wall -Wextra -Wpedantic -Werror)
say "gcc → $out/selftest-host"
gcc "${warn[@]}" -O2 -g "${include[@]}" -o "$out/selftest-host" \
    "$here/selftest.c" "$here/platform_host.c" "$lib_host" -lpthread -ldl -lm

# ARM state, Cortex-A9, no unaligned accesses (the image runs with the MMU off and alignment
# checking on), no libc and no libgcc: the library must be self-contained. The memcpy/memset
# calls GCC may emit come from the library's compiler_builtins or platform_vexpress.c (weak).
arm_flags=(-mcpu=cortex-a9 -marm -mno-unaligned-access
           -ffreestanding -nostdlib -fno-tree-loop-distribute-patterns -O2 -g)
ld_flags=(-T "$here/vexpress-a9.ld" -Wl,--gc-sections)
if arm-none-eabi-ld --help 2>/dev/null | grep -q -- --no-warn-execstack; then
    ld_flags+=(-Wl,--no-warn-execstack) # compiler-rt's assembly objects lack .note.GNU-stack
fi
build_elf() { # name, extra flags...
    local name="$1"
    shift
    say "arm-none-eabi-gcc $* → $out/$name"
    arm-none-eabi-gcc "${warn[@]}" "${arm_flags[@]}" "$@" "${include[@]}" "${ld_flags[@]}" \
        -Wl,-Map="$out/${name%.elf}.map" -o "$out/$name" \
        "$here/startup.S" "$here/platform_vexpress.c" "$here/selftest.c" \
        "$lib_arm" 2> >(grep -v '^bfd plugin:' >&2)
}
build_elf selftest.elf -mfloat-abi=soft
# The same program built as a Xilinx-SDK-style hard-float application (-mfpu=vfpv3
# -mfloat-abi=hard) against the same soft-float library: GNU ld refuses to mix the two ABIs
# ("uses VFP register arguments"), but no float crosses sagessd_fw.h, so the calls are identical
# and --no-warn-mismatch is sound (docs/openssd.md, "Building with the board toolchain").
build_elf selftest-hardfp.elf -mfloat-abi=hard -mfpu=vfpv3 -Wl,--no-warn-mismatch
say "built in $(elapsed) s"

# 3. Run them.
run_start=$(date +%s.%N)
say "running $out/selftest-host"
set +e
"$out/selftest-host" >"$out/host.log" 2>&1
host_rc=$?
run_qemu() { # elf, log name
    say "running qemu-system-arm -M vexpress-a9 -cpu cortex-a9 -m 256M -kernel $out/$1"
    timeout 120 qemu-system-arm -M vexpress-a9 -cpu cortex-a9 -m 256M \
        -nographic -monitor none -serial stdio -nic none \
        -audiodev none,id=snd -global pl041.audiodev=snd \
        -semihosting-config enable=on,target=native \
        -kernel "$out/$1" </dev/null >"$out/$2.raw" 2>"$out/$2.qemu-stderr"
    local rc=$?
    # "platform" lines (the board's stack high-water mark) are reported, not compared.
    tr -d '\r' <"$out/$2.raw" | grep -v '^sagessd-selftest platform ' >"$out/$2.log"
    tr -d '\r' <"$out/$2.raw" | sed -n 's/^sagessd-selftest platform //p' >"$out/$2.platform"
    return $rc
}
run_qemu selftest.elf board
board_rc=$?
run_qemu selftest-hardfp.elf board-hardfp
hardfp_rc=$?
set -e
run_s=$(awk -v s="$run_start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')

# 4. Compare.
checksum() { sed -n 's/^sagessd-selftest checksum \(0x[0-9a-f]\{16\}\) batches \([0-9]*\)$/\1 (\2 batches)/p' "$1"; }
passed() { grep -qx 'sagessd-selftest PASS' "$1"; }
host_sum="$(checksum "$out/host.log")"
board_sum="$(checksum "$out/board.log")"
hardfp_sum="$(checksum "$out/board-hardfp.log")"
say "host   (x86_64, $lib_host): exit $host_rc, checksum ${host_sum:-none}"
say "board  (Cortex-A9 in QEMU, soft-float C, $lib_arm): exit $board_rc, checksum ${board_sum:-none}"
say "board  (Cortex-A9 in QEMU, hard-float C, same library): exit $hardfp_rc, checksum ${hardfp_sum:-none}"

ok=1
check_run() { # label, rc, log, stderr file
    if [ "$2" -ne 0 ] || ! passed "$3"; then
        ok=0
        [ "$2" -eq 124 ] && say "$1: QEMU timed out after 120 s"
        say "$1: the run failed (exit $2):"
        sed "s/^/  $1: /" "$3" | tail -n 20
        [ -n "${4:-}" ] && sed "s/^/  qemu: /" "$4" | tail -n 10
    fi
    return 0
}
check_run host "$host_rc" "$out/host.log"
check_run board "$board_rc" "$out/board.log" "$out/board.qemu-stderr"
check_run board-hardfp "$hardfp_rc" "$out/board-hardfp.log" "$out/board-hardfp.qemu-stderr"
if [ "$ok" -eq 1 ]; then
    if [ -z "$host_sum" ] || [ "$host_sum" != "$board_sum" ] || [ "$host_sum" != "$hardfp_sum" ]; then
        ok=0
        say "the checksums differ"
    fi
    for run in board board-hardfp; do
        if ! diff -u --label host "$out/host.log" --label "$run" "$out/$run.log" >"$out/$run.diff"; then
            ok=0
            say "the transcripts of host and $run differ:"
            sed 's/^/  /' "$out/$run.diff"
        fi
    done
fi
if [ "$ok" -ne 1 ]; then
    die "logs in $out (host.log, board.log, board-hardfp.log, *.qemu-stderr)"
fi
say "$(grep -c '^sagessd-selftest batch ' "$out/board.log") minibatches, transcripts identical ($(wc -l <"$out/board.log") lines each); $(grep '^sagessd-selftest flash ' "$out/board.log" | sed 's/^sagessd-selftest //')"
say "$(cat "$out/board.platform")"
say "PASS: host and Cortex-A9 agree on checksum $board_sum (runs took $run_s s, $(elapsed) s in all)"
