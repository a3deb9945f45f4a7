#!/usr/bin/env bash
# Link check of the board build: compiles firmware/ffi/tests/c/arm_link.c, which includes
# firmware/include/sagessd_fw.h and calls every function, with Debian's arm-none-eabi-gcc for a
# bare-metal Cortex-A9 (ARM state, soft-float EABI, as the armv7a-none-eabi target), and links it
# with --gc-sections against target/armv7a-none-eabi/release/libsagessd_fw.a. Then the same for a
# Cortex-M4F against the thumbv7em-none-eabihf build. Fails loudly on any missing tool, compile
# error, undefined symbol or ABI mismatch.
#
# Output: target/ffi-arm-link/arm_link_a9.elf (measured by scripts/footprint.sh) and _m4.elf.
# Usage: firmware/ffi/tests/arm_link.sh   (from anywhere; needs gcc-arm-none-eabi and the rustup
# targets armv7a-none-eabi and thumbv7em-none-eabihf, both installed by scripts/setup.sh)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"

fail() {
    echo "arm_link.sh: FAILED: $*" >&2
    exit 1
}

for tool in arm-none-eabi-gcc arm-none-eabi-nm arm-none-eabi-size cargo; do
    command -v "$tool" >/dev/null || fail "$tool not found (scripts/setup.sh installs gcc-arm-none-eabi)"
done

out=target/ffi-arm-link
mkdir -p "$out"
src=firmware/ffi/tests/c
# Every function the header declares (its return type at a line's start, then sagessd_fw_<name>().
mapfile -t symbols < <(sed -nE 's/^u?int32_t (sagessd_fw_[a-z_]+)\(.*/\1/p' firmware/include/sagessd_fw.h)
[ "${#symbols[@]}" -ge 9 ] || fail "found only ${#symbols[@]} functions in sagessd_fw.h: ${symbols[*]}"

# link <rust target> <elf name> <gcc cpu flags...>
link() {
    local target="$1" elf="$out/$2"
    shift 2
    cargo build -p sagessd-firmware-ffi --release --target "$target" ||
        fail "cargo build --target $target"
    local lib="target/$target/release/libsagessd_fw.a"
    [ -f "$lib" ] || fail "$lib was not built"
    arm-none-eabi-gcc -std=c11 -Wall -Wextra -Werror -pedantic -O2 "$@" \
        -ffreestanding -nostdlib -ffunction-sections -fdata-sections \
        -I firmware/include -T "$src/arm_link.ld" -Wl,--gc-sections \
        -Wl,-z,noexecstack -o "$elf" "$src/arm_link.c" "$lib" -lgcc ||
        fail "compiling/linking $elf against $lib"
    local nm_out
    nm_out="$(arm-none-eabi-nm "$elf")"
    for s in "${symbols[@]}"; do
        grep -Eq " T $s\$" <<<"$nm_out" || fail "$s is not defined in $elf"
    done
    if grep -Eq ' U ' <<<"$nm_out"; then
        fail "undefined symbols left in $elf: $(grep -E ' U ' <<<"$nm_out" | tr '\n' ' ')"
    fi
    echo "linked $elf ($target):"
    arm-none-eabi-size "$elf"
}

link armv7a-none-eabi arm_link_a9.elf -mcpu=cortex-a9 -marm -mfloat-abi=soft
link thumbv7em-none-eabihf arm_link_m4.elf -mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16
echo "arm_link.sh: OK (every sagessd_fw_* symbol resolves for Cortex-A9 and Cortex-M4F)"
