#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step prints when it starts (seconds since the suite began), so a slow step shows in CI's
# output.
step() { printf 'suite: %4d s: %s\n' "$SECONDS" "$*"; }
trap 'step "done (exit $?)"' EXIT

step setup
./scripts/setup.sh

step fmt and clippy
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The firmware is real firmware: it must build for bare-metal targets, not only for the host,
# and its C ABI must link into a C program for the Cortex-A9 (and a Cortex-M4F).
step bare-metal firmware builds
cargo build -p sagessd-firmware --target armv7a-none-eabi
cargo build -p sagessd-firmware --target thumbv7em-none-eabihf
cargo build -p sagessd-firmware --target aarch64-unknown-none
cargo clippy -p sagessd-firmware-ffi --target armv7a-none-eabi -- -D warnings
firmware/ffi/tests/arm_link.sh
# The same library on an emulated Cortex-A9 (QEMU vexpress-a9) samples exactly as on the host.
step Cortex-A9 board in QEMU
tests/board/run.sh
step cargo test --workspace
cargo test --workspace
# The Python package: built into the repository's venv (maturin, release), then its tests: every
# sampler, the errors, the PyG loader against PyG's sampling semantics, and the PyG example's
# accuracy (printed beside PyG's own NeighborLoader's where PyG has a sampling backend; -rs
# prints each test skipped and why). It builds in target/no-train, beside the release build
# without libtorch below, so that the two share their dependencies.
step Python package
VIRTUAL_ENV="$PWD/.venv-torch" .venv-torch/bin/maturin develop --quiet --release \
    --target-dir target/no-train -m runtime/python/Cargo.toml
.venv-torch/bin/python -m pytest -rs runtime/python/tests
# Each libFuzzer target for a few seconds, coverage-guided from its corpus (which cargo test
# has just replayed); a crash fails the suite.
step fuzz smoke
scripts/fuzz.sh --smoke 5
# A stock Linux kernel in QEMU drives the emulator over NVMe/TCP, samples through passthrough
# and trains on ISP-fed minibatches. The guest's sagessd is built without libtorch (feature
# `train` off: the build a board or a guest without libtorch gets, and an initramfs of megabytes);
# the training build is the one `cargo test` just made, its libtorch shared with the guest. The
# build without libtorch has its own target folder, so target/release/sagessd still trains.
step guest build and Linux guest in QEMU
cargo build --release -p sagessd-cli --no-default-features --target-dir target/no-train
tests/qemu/run.sh --train target/debug/sagessd target/no-train/release/sagessd
# The kernel's own host authenticates to the emulator with DH-HMAC-CHAP (Debian 12's 6.12
# kernel: its 6.1 has no host authentication), and every wrong secret is refused.
step Linux guest authenticating in QEMU
tests/qemu/run.sh --auth target/no-train/release/sagessd
