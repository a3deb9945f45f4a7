#!/usr/bin/env bash
# Installs everything sagessd needs on a fresh Debian 12 machine with rustup (the project's
# machine kind). Idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Bare-metal targets the firmware must keep building for: the Cosmos+ OpenSSD's Cortex-A9, and a
# Cortex-M as a second, stricter no_std target (no 64-bit atomics).
rustup target add armv7a-none-eabi thumbv7em-none-eabihf

# The board toolchain and the emulated Cortex-A9 of the firmware's bare-metal self-test.
# qemu-utils is named too: installing qemu-system-arm would otherwise remove a newer qemu-utils.
# Board toolchain and its QEMU (tests/board); x86 QEMU, busybox, nvme-cli, kmod and cpio for the
# Linux guest (tests/qemu). qemu-utils is named with the QEMU system packages so that installing
# them never removes it.
packages=(gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm qemu-system-x86 qemu-utils
          busybox-static nvme-cli kmod cpio)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
# tests/qemu downloads (never installs) the Debian kernel package: apt must know it.
apt-cache show linux-image-amd64 >/dev/null 2>&1 || $sudo apt-get update
if [ ${#missing[@]} -gt 0 ]; then
    $sudo apt-get update
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${packages[@]}"
fi

# Cora ships inside the graphdatascience 2.2 wheel (read by `sagessd dataset import cora`):
# fetched once, never installed.
wheel=target/downloads/graphdatascience-2.2-py3-none-any.whl
if [ ! -f "$wheel" ]; then
    mkdir -p target/downloads
    python3 -m pip download --quiet --no-deps --dest target/downloads graphdatascience==2.2
fi
