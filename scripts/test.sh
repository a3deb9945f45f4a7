#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The firmware is real firmware: it must build for bare-metal targets, not only for the host,
# and its C ABI must link into a C program for the Cortex-A9 (and a Cortex-M4F).
cargo build -p sagessd-firmware --target armv7a-none-eabi
cargo build -p sagessd-firmware --target thumbv7em-none-eabihf
cargo clippy -p sagessd-firmware-ffi --target armv7a-none-eabi -- -D warnings
firmware/ffi/tests/arm_link.sh
# The same library on an emulated Cortex-A9 (QEMU vexpress-a9) samples exactly as on the host.
tests/board/run.sh
# A stock Linux kernel in QEMU drives the emulator over NVMe/TCP and samples through passthrough.
# The guest's binary is built without libtorch (feature `train` off): the build a board or a
# guest without libtorch gets, and an initramfs of megabytes rather than of libtorch's 440 MB.
cargo build --release -p sagessd --no-default-features
tests/qemu/run.sh target/release/sagessd
cargo test --workspace
