#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The firmware is real firmware: it must build for bare-metal targets, not only for the host.
cargo build -p sagessd-firmware --target armv7a-none-eabi
cargo build -p sagessd-firmware --target thumbv7em-none-eabihf
cargo test --workspace
