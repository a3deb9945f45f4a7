#!/usr/bin/env bash
# The firmware's bare-metal self-test: the same C program (selftest.c) drives the firmware's C ABI
# on the host and on an emulated Cortex-A9 (QEMU vexpress-a9), and both must print PASS and the
# same checksum of the sampled subgraphs — in fact the same transcript, line for line. Built with
# -DSELFTEST_COSMOS, the same program runs through the Cosmos+ board glue
# (firmware/board/cosmos/) over a model of the board's NVMe host controller and NAND scheduler
# (cosmos_hw_model.c), on the host and on the A9: it must pass with the same checksum, and five
# deliberately broken variants of the glue must each be caught by the model's check for them.
#
#   tests/board/run.sh            (from any directory; needs cargo, gcc, gcc-arm-none-eabi,
#                                  libnewlib-arm-none-eabi and qemu-system-arm)
#
# Builds: libsagessd_fw.a for armv7a-none-eabi and for the host (cargo, release), then
#   <target>/board/selftest-host         (host gcc)
#   <target>/board/selftest.elf          (arm-none-eabi-gcc, ARM state, soft float, no libc)
#   <target>/board/selftest-hardfp.elf   (the same, C side hard-float as a Xilinx SDK build)
#   <target>/board/selftest-cosmos-host, selftest-cosmos.elf   (through the glue and the model)
#   <target>/board/selftest-cosmos-fault-{early,double,overrun,stale,unclean}  (broken glue variants)
# Runs them (QEMU under a 120 s timeout each), keeps their output in <target>/board/*.log,
# compares. Exit status 0 only if all passed with equal checksums and equal transcripts (within
# the direct builds and within the glue builds) and every broken variant failed as it must.
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

# 2. The self-test, three times directly on the library, then through the Cosmos+ glue.
include=(-I"$here" -I"$root/firmware/include")
warn=(-std=c11 -Wall -Wextra -Wpedantic -Werror)
say "gcc → $out/selftest-host"
gcc "${warn[@]}" -O2 -g "${include[@]}" -o "$out/selftest-host" \
    "$here/selftest.c" "$here/platform_host.c" "$lib_host" -lpthread -ldl -lm
# The glue, unchanged, over the model: its GreedyFTL names come from cosmos_hw_model.h, and the
# library's results reach the model through ld --wrap, independently of the glue. Board sizes of
# the self-test's device: 8 commands in the glue with 256 KiB staging each (the largest
# NS_COLLECT buffer), 12 NAND operations in flight, the library's 16 blocks per die on the model's 18
# virtual blocks (2 bad). Board addresses are 32-bit, so the host build is not position
# independent.
cosmos_src=("$here/cosmos_hw_model.c" "$root/firmware/board/cosmos/cosmos_host.c"
            "$root/firmware/board/cosmos/cosmos_nand.c")
cosmos_flags=(-DSELFTEST_COSMOS -DSAGESSD_COSMOS_MODEL -DSAGESSD_COSMOS_SLOTS=8u
              -DSAGESSD_COSMOS_NAND_SLOTS=12u -DSAGESSD_COSMOS_BLOCKS_PER_DIE=16u
              -DCOSMOS_STAGING_BYTES=262144u -I"$root/firmware/board/cosmos"
              -Wl,--wrap=sagessd_fw_submit -Wl,--wrap=sagessd_fw_next_completion
              -Wl,--wrap=sagessd_fw_reset -Wl,--wrap=sagessd_fw_poll
              -Wl,--wrap=sagessd_fw_flash_complete)
build_cosmos_host() { # name, extra flags...
    local name="$1"
    shift
    say "gcc -DSELFTEST_COSMOS $* → $out/$name"
    gcc "${warn[@]}" -O2 -g -fno-pie -no-pie "${include[@]}" "${cosmos_flags[@]}" "$@" \
        -o "$out/$name" "$here/selftest.c" "$here/platform_host.c" "${cosmos_src[@]}" \
        "$lib_host" -lpthread -ldl -lm
}
build_cosmos_host selftest-cosmos-host
build_cosmos_host selftest-cosmos-fault-early -DSAGESSD_COSMOS_FAULT=1
build_cosmos_host selftest-cosmos-fault-double -DSAGESSD_COSMOS_FAULT=2
build_cosmos_host selftest-cosmos-fault-overrun -DSAGESSD_COSMOS_FAULT=3
build_cosmos_host selftest-cosmos-fault-stale -DSAGESSD_COSMOS_FAULT=4
build_cosmos_host selftest-cosmos-fault-unclean -DSAGESSD_COSMOS_FAULT=5

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
        "${extra_src[@]}" "$lib_arm" 2> >(grep -v '^bfd plugin:' >&2)
}
extra_src=()
build_elf selftest.elf -mfloat-abi=soft
# The same program built as a Xilinx-SDK-style hard-float application (-mfpu=vfpv3
# -mfloat-abi=hard) against the same soft-float library: GNU ld refuses to mix the two ABIs
# ("uses VFP register arguments"), but no float crosses sagessd_fw.h, so the calls are identical
# and --no-warn-mismatch is sound (docs/openssd.md, "Building with the board toolchain").
build_elf selftest-hardfp.elf -mfloat-abi=hard -mfpu=vfpv3 -Wl,--no-warn-mismatch
extra_src=("${cosmos_src[@]}")
build_elf selftest-cosmos.elf -mfloat-abi=soft "${cosmos_flags[@]}"
extra_src=()
# The 1 MiB image region must be a hard limit, as it must be on the board: an image that outgrows
# it has to fail to link, not spill into what lies after it (on Cosmos+ the NVMe management
# buffers at 0x0020_0000).
printf 'static volatile char big[1u << 20];\nint main(void) { return big[0]; }\n' >"$out/image-probe.c"
if arm-none-eabi-gcc "${arm_flags[@]}" "${include[@]}" "${ld_flags[@]}" -o "$out/image-probe.elf" \
    "$here/startup.S" "$here/platform_vexpress.c" "$out/image-probe.c" \
    >"$out/image-probe.log" 2>&1; then
    die "an image with 1 MiB of .bss linked: the 1 MiB image region is not enforced"
fi
grep -q "region \`IMAGE' overflowed" "$out/image-probe.log" ||
    die "the oversized image failed to link for another reason: $(grep -v '^bfd plugin' "$out/image-probe.log" | head -n 3)"
image_bytes() { # elf
    local end
    end=$(arm-none-eabi-readelf -sW "$1" 2>/dev/null | awk '$NF == "__image_end" { print $2 }')
    echo $((0x$end - 0x60000000))
}
say "built in $(elapsed) s; program images $(image_bytes "$out/selftest.elf") and $(image_bytes "$out/selftest-cosmos.elf") bytes of the 1 MiB region (an oversized one fails to link)"

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
say "running $out/selftest-cosmos-host"
"$out/selftest-cosmos-host" >"$out/cosmos-host.log" 2>&1
cosmos_host_rc=$?
run_qemu selftest-cosmos.elf cosmos-board
cosmos_board_rc=$?
for fault in early double overrun stale unclean; do
    say "running $out/selftest-cosmos-fault-$fault (must fail)"
    "$out/selftest-cosmos-fault-$fault" >"$out/cosmos-fault-$fault.log" 2>&1
done
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
check_run cosmos-host "$cosmos_host_rc" "$out/cosmos-host.log"
check_run cosmos-board "$cosmos_board_rc" "$out/cosmos-board.log" "$out/cosmos-board.qemu-stderr"
cosmos_host_sum="$(checksum "$out/cosmos-host.log")"
cosmos_board_sum="$(checksum "$out/cosmos-board.log")"
say "glue   (x86_64, Cosmos+ glue over the controller model): exit $cosmos_host_rc, checksum ${cosmos_host_sum:-none}"
say "glue   (Cortex-A9 in QEMU, Cosmos+ glue over the controller model): exit $cosmos_board_rc, checksum ${cosmos_board_sum:-none}"
if [ "$ok" -eq 1 ]; then
    if [ -z "$host_sum" ] || [ "$host_sum" != "$board_sum" ] || [ "$host_sum" != "$hardfp_sum" ] ||
        [ "$host_sum" != "$cosmos_host_sum" ] || [ "$host_sum" != "$cosmos_board_sum" ]; then
        ok=0
        say "the checksums differ"
    fi
    compare_logs() { # reference log name, other log name
        if ! diff -u --label "$1" "$out/$1.log" --label "$2" "$out/$2.log" >"$out/$2.diff"; then
            ok=0
            say "the transcripts of $1 and $2 differ:"
            sed 's/^/  /' "$out/$2.diff"
        fi
    }
    compare_logs host board
    compare_logs host board-hardfp
    compare_logs cosmos-host cosmos-board
fi
# Each broken glue must be stopped by the model's check for its defect, not by anything else.
for pair in "early:early completion" "double:double completion" "overrun:overrun" \
    "stale:stale read" "unclean:unclean program"; do
    fault="${pair%%:*}" check="${pair#*:}"
    log="$out/cosmos-fault-$fault.log"
    if grep -q "^sagessd-selftest FAIL cosmos model: $check: " "$log"; then
        say "broken glue ($fault): caught — $(grep '^sagessd-selftest FAIL' "$log" | sed 's/^sagessd-selftest FAIL cosmos model: //')"
    else
        ok=0
        say "broken glue ($fault): the model's $check check did not stop it:"
        sed "s/^/  $fault: /" "$log" | tail -n 5
    fi
done
if [ "$ok" -ne 1 ]; then
    die "logs in $out (host.log, board.log, board-hardfp.log, cosmos-*.log, *.qemu-stderr)"
fi
say "glue: $(grep '^sagessd-selftest cosmos ' "$out/cosmos-board.log" | sed 's/^sagessd-selftest cosmos //' | paste -sd ';' | sed 's/;/; /g')"
say "$(grep -c '^sagessd-selftest batch ' "$out/board.log") minibatches, transcripts identical ($(wc -l <"$out/board.log") lines each); $(grep '^sagessd-selftest flash ' "$out/board.log" | sed 's/^sagessd-selftest //')"
say "$(cat "$out/board.platform")"
say "PASS: host and Cortex-A9 agree on checksum $board_sum (runs took $run_s s, $(elapsed) s in all)"
