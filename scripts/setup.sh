#!/usr/bin/env bash
# Installs everything sagessd needs on a fresh Debian 12 machine with rustup (the project's
# machine kind): apt packages, Rust targets, libtorch (from the PyPI torch wheel) and the Cora
# wheel. Idempotent: a second run installs nothing. Each step says what it installs and why.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# --- 1. Rust targets -------------------------------------------------------------------------
# Bare-metal targets the firmware must keep building for: the Cosmos+ OpenSSD's Cortex-A9, a
# Cortex-M as a second, stricter no_std target (no 64-bit atomics), and AArch64 (a Newport-class
# SSD's Cortex-A53 ISP cores, which `sagessd firmware calibrate` measures the firmware on).
rustup target add armv7a-none-eabi thumbv7em-none-eabihf aarch64-unknown-none

# --- 2. apt packages -------------------------------------------------------------------------
#   gcc-arm-none-eabi, libnewlib-arm-none-eabi, qemu-system-arm   the board self-test (tests/board),
#                                                                  the calibration (qemu-system-arm
#                                                                  also ships qemu-system-aarch64)
#   binutils-aarch64-linux-gnu                                     `firmware profile` of the
#                                                                  AArch64 image (its addr2line)
#   qemu-system-x86, busybox-static, nvme-cli, kmod, cpio,         the Linux guest (tests/qemu)
#   e2fsprogs                                                      (its ext4 survives a SIGKILL)
#   fio                                                            (its writes checked by crc32c)
#   fonts-dejavu-core                                              the experiments' plot labels
#   valgrind                                                       validate host-compute (callgrind)
#   qemu-utils                                                     see below
# A fresh machine of this kind ships qemu-utils 10.0.2 from bookworm-backports (not in its apt
# sources), which Breaks the 7.2 qemu-system-common the QEMU system packages need; apt keeps the
# installed, newer qemu-utils unless told to take the release's own and allowed to downgrade.
codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
packages=(gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm qemu-system-x86 fonts-dejavu-core
          busybox-static nvme-cli kmod cpio e2fsprogs fio valgrind xz-utils binutils-aarch64-linux-gnu)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# tests/qemu downloads (never installs) the Debian kernel package: apt must know it.
apt-cache show linux-image-amd64 >/dev/null 2>&1 || $sudo apt-get update
if [ ${#missing[@]} -gt 0 ]; then
    $sudo apt-get update
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends \
        --allow-downgrades "${packages[@]}" "qemu-utils/$codename"
fi

# --- 3. Python: libtorch for training (runtime/train), and the Python package's tests -------
# One venv inside the repository. tch 0.26.0 builds against exactly torch 2.13.0: PyPI's wheel
# (a CUDA build) with its dependencies (2.7 GB of CUDA libraries: `import torch` loads them even
# on a CPU, and CUDA training needs them); .venv-torch/libtorch points at the libtorch folder
# inside the wheel; .cargo/config.toml hands that path to torch-sys as LIBTORCH, and the crates
# that link libtorch embed an rpath to its lib/ (their build.rs). pip keeps no cache (nothing
# outside the repository, and the wheels are not stored twice on a disk shared with the build).
# For the Python package (runtime/python, built with maturin) and its tests: PyG (pure Python),
# NumPy, pytest.
venv=.venv-torch
python_packages=(torch==2.13.0 torch_geometric==2.8.1 numpy==2.4.6 pytest==9.2.0 maturin==1.16.0)
if [ ! -e "$venv/libtorch/lib/libtorch_cpu.so" ] ||
    ! "$venv/bin/python" -c 'import torch, torch_geometric, numpy, pytest' 2>/dev/null ||
    [ ! -x "$venv/bin/maturin" ]; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir "${python_packages[@]}"
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    ln -sfn "${site#"$PWD/$venv/"}/torch" "$venv/libtorch"
fi

# --- 4. Cora -----------------------------------------------------------------------------------
# Cora ships inside the graphdatascience 2.2 wheel (read by `sagessd dataset import cora`):
# fetched once, never installed.
wheel=target/downloads/graphdatascience-2.2-py3-none-any.whl
if [ ! -f "$wheel" ]; then
    mkdir -p target/downloads
    python3 -m pip download --quiet --no-cache-dir --no-deps --dest target/downloads graphdatascience==2.2
fi

# --- 5. Fuzzing --------------------------------------------------------------------------------
# cargo-fuzz (crates.io) into target/tools/, and the nightly toolchain it builds libFuzzer
# targets with (scripts/fuzz.sh; the suite runs each target a few seconds).
rustup toolchain list | grep -q '^nightly-' || rustup toolchain install nightly --profile minimal
if [ ! -x target/tools/bin/cargo-fuzz ]; then
    cargo install --quiet --locked --root target/tools cargo-fuzz --version 0.13.2
fi
