#!/usr/bin/env bash
# Installs everything sagessd needs on a fresh Debian 12 machine with rustup (the project's
# machine kind). Idempotent: running it again changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Bare-metal targets the firmware must keep building for: the Cosmos+ OpenSSD's Cortex-A9, and a
# Cortex-M as a second, stricter no_std target (no 64-bit atomics).
rustup target add armv7a-none-eabi thumbv7em-none-eabihf
