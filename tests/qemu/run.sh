#!/usr/bin/env bash
# End-to-end test of sagessd under a real Linux NVMe/TCP host stack: a Debian kernel boots in
# QEMU (TCG; KVM hangs on this machine kind) from a busybox initramfs holding nvme-cli, the NVMe
# modules and the sagessd binary, and runs a guest scenario over loopback (the guest has no other
# network).
#
#   tests/qemu/run.sh [--smoke | --auth] [--train TRAIN_BINARY] [SAGESSD_BINARY]
#
#   SAGESSD_BINARY  the host build of sagessd to test, without libtorch (default
#                   target/no-train/release/sagessd); this script does not build it
#   --train B       a build of sagessd with `train` (linking libtorch): the guest also trains a
#                   GNN fed by in-storage sampling through /dev/ng0n1, and its loss curve must
#                   match B's in-process run here (bit for bit but for the float rounding of a
#                   few steps, which the guest's emulated CPU changes). libtorch (440 MB) is not copied into the
#                   initramfs: its folder is shared read-only over virtio-9p and mounted in the
#                   guest at the path the binary's rpath names
#   --smoke         test the scaffolding itself: the kernel's own NVMe/TCP target (nvmet-tcp over
#                   null_blk) instead of `sagessd emulator serve` (tests/qemu/smoke.sh instead of
#                   tests/qemu/guest.sh)
#   --auth          DH-HMAC-CHAP: the kernel's nvme-tcp host authenticates to `sagessd emulator
#                   serve --host-secret` with secrets nvme-cli generates, and a wrong secret, no
#                   secret, a host not allowed and a wrong controller secret are all refused
#                   with nothing read or written; sagessd's initiator authenticates to the
#                   kernel's own target (nvmet-tcp) (tests/qemu/auth.sh). Debian 12's own 6.1
#                   kernel is built without host authentication (CONFIG_NVME_AUTH unset), so
#                   this boots Debian 12's 6.12 kernel (bookworm-security), whose host has it
#
# Needs qemu-system-x86 busybox-static nvme-cli kmod cpio e2fsprogs fio xz-utils (apt), and apt lists for the kernel:
# the first run downloads linux-image-6.1.0-NN-amd64 (apt-get download, ~70 MB, never installed;
# --auth: linux-image-6.12.N+deb12-amd64-unsigned, ~110 MB) into target/qemu/kernel/ and reuses
# it afterwards. Each run rebuilds target/qemu/initramfs.cpio.gz,
# keeps the serial console in target/qemu/console.log, and exits 0 only if the guest printed
# `SAGESSD-E2E: DONE rc=0` and every check the scenario must pass reported ok.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/qemu"
qemu_timeout=240 # seconds; --smoke boots and runs its scenario in 5-7 s (600 with --train)

say() { printf 'qemu-e2e: %s\n' "$*"; }
# The training run's flags, the same in the guest (tests/qemu/guest.sh) and here.
train_flags() { echo --epochs 2 --batch-size 64 --fanouts 5,5 --hidden 16 --compute cpu --quiet; }
# The guest's emulated CPU has other vector units than this one, and libtorch picks its kernels
# by them, which changes float rounding: both runs take ATen's portable kernels and MKL's
# reproducible code path, so that the same minibatches give the same losses bit for bit.
train_env() { ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE MKL_ENABLE_INSTRUCTIONS=SSE4_2 DNNL_MAX_CPU_ISA=SSE41 "$@"; }
losses_of() { sed -n 's/.*"losses":\[\([^]]*\)\].*/\1/p' "$1" | tr '\n' ';'; }
die() { printf 'qemu-e2e: FAIL: %s\n' "$*" >&2; exit 1; }

# Arguments, and the checks each scenario must report ok (in /init's `<name> ok` lines).
scenario="$here/guest.sh"
expected=(emulator-start listening modprobe connect namespace list id-ctrl
          demo tunnel ns-submit disconnect emulator-stop restart relisten reconnect renamespace
          persisted sample-on-device huge-pages fio-rand-4k fio-seq-1m
          fio-seq-1m-buffered write-zeroes ext4-write emulator-kill restart-after-kill
          relisten-after-kill reconnected ext4-fsck ext4-intact redisconnect final-stop)
binary=""
train_binary=""
next_is_train=""
for arg in "$@"; do
    if [ -n "$next_is_train" ]; then
        train_binary="$arg"
        next_is_train=""
        continue
    fi
    case "$arg" in
    --train) next_is_train=1 ;;
    --smoke)
        scenario="$here/smoke.sh"
        expected=(sagessd-runs target-up listening modprobe connect namespace list id-ctrl
                  passthru-read disconnect)
        ;;
    --auth)
        scenario="$here/auth.sh"
        expected=(emulator-start listening modprobe secrets refused-wrong-secret
                  refused-no-secret refused-not-allowed refused-wrong-ctrl-secret
                  nothing-reached-the-device emulator-restart relistening connect namespace
                  read-write disconnect connect-bidirectional namespace-again read-write-again
                  disconnect-again authenticated-each-queue kernel-target
                  kernel-target-listening driver-authenticates driver-refused final-stop)
        ;;
    -*) die "unknown option $arg (usage: tests/qemu/run.sh [--smoke | --auth] [--train TRAIN_BINARY] [SAGESSD_BINARY])" ;;
    *) binary="$arg" ;;
    esac
done
if [ -z "$binary" ]; then
    binary="$root/target/no-train/release/sagessd"
fi
[ -x "$binary" ] || die "$binary is not an executable (build it first: cargo build --release -p sagessd-cli --no-default-features --target-dir target/no-train)"
[ -z "$next_is_train" ] || die "--train needs a binary"
if [ -n "$train_binary" ]; then
    [ -x "$train_binary" ] || die "$train_binary is not an executable"
    [ "$scenario" = "$here/guest.sh" ] || die "--train goes with the guest scenario, not --smoke"
    expected+=(train-on-device)
    qemu_timeout=600
fi

export PATH="$PATH:/usr/sbin:/sbin" # nvme, modprobe and depmod for non-root users
for tool in qemu-system-x86_64 busybox nvme modprobe depmod cpio gzip xz ldd strip apt-cache apt-get dpkg timeout mke2fs e2fsck fio; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "$tool not found (apt-get install qemu-system-x86 busybox-static nvme-cli kmod cpio e2fsprogs fio xz-utils)"
done
mkdir -p "$out"
start=$(date +%s.%N)
elapsed() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }

# 1. The kernel: the package linux-image-amd64 currently depends on (--auth: the newest 6.12
#    of bookworm-security), extracted, never installed (installing it would pull systemd, udev
#    and initramfs-tools into the host).
if [ "$scenario" = "$here/auth.sh" ]; then
    kpkg=$(apt-cache search --names-only '^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$' 2>/dev/null |
        awk '{ print $1 }' | sort -V | tail -n 1)
    [ -n "$kpkg" ] || die "apt-cache knows no linux-image-6.12.*+deb12-amd64-unsigned (bookworm-security in the apt sources, then apt-get update)"
    kver="${kpkg#linux-image-}"
    kver="${kver%-unsigned}"
else
    kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-6/ { print $2; exit }')
    [ -n "$kpkg" ] || die "apt-cache knows no linux-image-amd64 (run apt-get update)"
    kver="${kpkg#linux-image-}"
fi
kroot="$out/kernel/$kver"
if [ ! -f "$kroot/.complete" ]; then
    say "fetching $kpkg into $kroot"
    # A half-finished fetch, or an older kernel of the same series (6.1.0-NN, 6.12.N).
    series=$(echo "$kver" | cut -d. -f1,2)
    for old in "$out"/kernel/*; do
        [ "$(basename "$old" | cut -d. -f1,2)" != "$series" ] || rm -rf "$old"
    done
    rm -rf "$out/kernel/deb"
    mkdir -p "$out/kernel/deb"
    # As root apt would download as user _apt, who cannot write here, and warn about it.
    (cd "$out/kernel/deb" && apt-get download -q -o APT::Sandbox::User=root "$kpkg")
    dpkg -x "$out/kernel/deb/${kpkg}"_*.deb "$kroot"
    rm -rf "$out/kernel/deb"
    depmod -b "$kroot" "$kver" # modules.dep is normally written by the package's postinst
    touch "$kroot/.complete"
fi
vmlinuz="$kroot/boot/vmlinuz-$kver"
[ -f "$vmlinuz" ] || die "$vmlinuz missing: remove $out/kernel and rerun"

# 2. The initramfs.
stage="$out/initramfs"
rm -rf "$stage"
mkdir -p "$stage"/{bin,sbin,etc/nvme,proc,sys,dev,tmp,lib/modules/"$kver"}

copy_libs() { # executable [skip-prefix]: copies the shared libraries it loads to the same paths
    # in the stage, except those under skip-prefix (shared over 9p instead)
    local deps lib
    if ! deps=$(ldd "$1" 2>&1); then
        case "$deps" in *"not a dynamic executable"*) return 0 ;; esac
        die "ldd $1: $deps"
    fi
    case "$deps" in *"not found"*) die "$1 needs libraries this machine lacks: $deps" ;; esac
    for lib in $(grep -o '/[^ ]*' <<<"$deps"); do # "statically linked" lists none
        case "$lib" in "${2:-/nonexistent/}"*) continue ;; esac
        mkdir -p "$stage$(dirname "$lib")"
        cp -L "$lib" "$stage$lib"
    done
}

cp "$(command -v busybox)" "$stage/bin/busybox"
copy_libs "$stage/bin/busybox"
for applet in $("$stage/bin/busybox" --list); do
    [ -e "$stage/bin/$applet" ] || ln -s busybox "$stage/bin/$applet"
done
cp "$(command -v nvme)" "$stage/sbin/nvme"
copy_libs "$stage/sbin/nvme"
# e2fsprogs, for the file system that must survive the emulator's SIGKILL.
for tool in mke2fs e2fsck; do
    cp "$(command -v "$tool")" "$stage/sbin/$tool"
    copy_libs "$stage/sbin/$tool"
done
ln -s mke2fs "$stage/sbin/mkfs.ext4"
# fio, which checks what it wrote (--verify=crc32c); its libraries (Ceph's, GlusterFS's: the
# engines Debian builds in) are most of the initramfs.
cp "$(command -v fio)" "$stage/bin/fio"
copy_libs "$stage/bin/fio"
case "$(ldd "$binary" 2>&1)" in
    *libtorch*) die "$binary links libtorch (440 MB, too large for the guest's initramfs): build it with cargo build --release -p sagessd-cli --no-default-features --target-dir target/no-train" ;;
esac
strip --strip-debug -o "$stage/bin/sagessd" "$binary" # the debug info is most of a release build
copy_libs "$stage/bin/sagessd"

# The training build: libtorch's folder (where the rpath points, a link into the torch wheel)
# and the wheel's site-packages behind it (torch/ and the CUDA runtime it loads, nvidia/) stay
# on the host; the guest mounts site-packages over 9p at its real path and gets the link.
virtfs=()
modules=(nvme-tcp nvmet-tcp null_blk ext4 crc32c_generic)
if [ -n "$train_binary" ]; then
    torch_lib=$(ldd "$train_binary" | awk '$1 == "libtorch_cpu.so" { print $3 }')
    [ -n "$torch_lib" ] || die "$train_binary does not link libtorch_cpu.so"
    torch_link=$(dirname "$(dirname "$torch_lib")")     # e.g. .venv-torch/libtorch
    torch_real=$(readlink -f "$torch_link")              # .../site-packages/torch
    site=$(dirname "$torch_real")
    [ -d "$site/nvidia" ] || die "$site has no nvidia/ (the CUDA runtime libtorch loads)"
    strip --strip-debug -o "$stage/bin/sagessd-train" "$train_binary"
    copy_libs "$stage/bin/sagessd-train" "$torch_link/"
    # The guest makes the mount point and the link itself: they may lie under a folder its
    # init mounts over (/tmp).
    printf '%s\n' "$site" "$torch_link" "$torch_real" >"$stage/etc/torch-site"
    virtfs=(-virtfs "local,path=$site,mount_tag=torchsite,security_model=none,readonly=on")
    modules+=(9p 9pnet_virtio virtio_pci)
fi

# nvme-tcp for the scenarios, nvmet-tcp and null_blk for --smoke's kernel target.
for module in "${modules[@]}"; do
    modprobe -d "$kroot" -S "$kver" --show-depends "$module" | awk '$1 == "insmod" { print $2 }'
done | sort -u | while read -r ko; do
    rel="${ko#"$kroot"/lib/modules/"$kver"/}"
    mkdir -p "$stage/lib/modules/$kver/$(dirname "$rel")"
    case "$rel" in
        # 6.12's modules are xz-compressed; busybox's insmod loads plain ones.
        *.xz) xz -dc "$ko" >"$stage/lib/modules/$kver/${rel%.xz}" ;;
        *) cp "$ko" "$stage/lib/modules/$kver/$rel" ;;
    esac
done
cp "$kroot/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$stage/lib/modules/$kver/"
depmod -b "$stage" "$kver"

# A fixed host identity, so that every run connects as the same NVMe host.
hostid=5a6e55d0-0000-4000-8000-000000000001
echo "nqn.2014-08.org.nvmexpress:uuid:$hostid" >"$stage/etc/nvme/hostnqn"
echo "$hostid" >"$stage/etc/nvme/hostid"

install -m 755 "$here/init" "$stage/init"
install -m 644 "$scenario" "$stage/scenario.sh"
declare -f train_flags train_env losses_of >"$stage/etc/train-flags.sh"
initrd="$out/initramfs.cpio.gz"
(cd "$stage" && find . | cpio -o -H newc -R 0:0 --quiet | gzip -1) >"$initrd"
rm -rf "$stage"
say "initramfs $initrd ($(du -k "$initrd" | cut -f1) KiB, $(basename "$scenario"), $binary) ready after $(elapsed "$start") s"

# 3. Boot it. The serial console is the only output; QEMU's own messages go to qemu-stderr.
log="$out/console.log"
boot=$(date +%s.%N)
say "booting $vmlinuz (TCG, ${qemu_timeout} s timeout)"
set +e
timeout "$qemu_timeout" qemu-system-x86_64 -accel tcg -cpu max -m 2048 -smp 2 "${virtfs[@]}" \
    -nographic -monitor none -serial stdio -nic none -no-reboot \
    -kernel "$vmlinuz" -initrd "$initrd" -append "console=ttyS0 panic=-1 quiet" \
    </dev/null 2>"$out/qemu-stderr" | tr -d '\r' >"$log"
qemu_rc=${PIPESTATUS[0]}
set -e
boot_s=$(elapsed "$boot")

# 4. Verdict.
results=$(sed -n 's/.*SAGESSD-E2E: //p' "$log")
[ -z "$results" ] || sed 's/^/  /' <<<"$results"
failures=()
[ "$qemu_rc" -eq 0 ] || failures+=("QEMU exited with status $qemu_rc$([ "$qemu_rc" -eq 124 ] && echo " (timed out after $qemu_timeout s)")")
grep -qx 'DONE rc=0' <<<"$results" || failures+=("no 'DONE rc=0' from the guest")
missing=()
for name in "${expected[@]}"; do
    grep -qx "$name ok" <<<"$results" || missing+=("$name")
done
[ ${#missing[@]} -eq 0 ] || failures+=("checks not reported ok: ${missing[*]}")
if [ "$scenario" = "$here/guest.sh" ]; then
    # The guest sampled through the kernel; the same comparison in-process here must agree.
    guest_sum=$(sed -n 's/^checksum //p' <<<"$results")
    host_sum=$("$binary" compare --workers 1 --quiet 2>/dev/null | grep -o 'checksum 0x[0-9a-f]\{16\}' | cut -d' ' -f2)
    say "checksum: guest ${guest_sum:-none}, host in-process ${host_sum:-none}"
    [ -n "$host_sum" ] && [ "$guest_sum" = "$host_sum" ] ||
        failures+=("guest checksum ${guest_sum:-none} differs from the host's ${host_sum:-none}")
fi
if [ -n "$train_binary" ]; then
    # The guest trained on ISP-fed minibatches through the kernel; the same run in-process here
    # (same generated dataset, same flags, an in-process emulated device) must give the same
    # losses, step by step, within float rounding.
    guest_losses=$(sed -n 's/^train-losses //p' <<<"$results")
    rm -rf "$out/train-ds"
    "$binary" dataset generate --out "$out/train-ds" --scale 10 --features 16 >/dev/null 2>&1
    train_env "$train_binary" train --dataset "$out/train-ds" --on-device --sampler isp $(train_flags) \
        --metrics-out "$out/train.jsonl" >/dev/null
    host_losses=$(losses_of "$out/train.jsonl")
    # Bit for bit they agree but for the last bit of a few steps: the emulated CPU makes
    # libtorch (its kernels are picked by the CPU's vector units; train_env narrows that) round
    # a few sums differently. Different minibatches would differ in the first digits.
    verdict=$(awk -v g="$guest_losses" -v h="$host_losses" 'BEGIN {
        n = split(g, a, /[,;]/); m = split(h, b, /[,;]/); same = 0; worst = 0; steps = 0
        if (n != m) { print "different step counts " n " and " m; exit }
        for (i = 1; i <= n; i++) {
            if (a[i] == "") continue
            steps++
            if (a[i] == b[i]) { same++; continue }
            d = (a[i] - b[i]) / b[i]; if (d < 0) d = -d; if (d > worst) worst = d
        }
        printf "%d of %d steps bit-identical, largest relative difference %.1e", same, steps, worst
        if (steps == 0 || worst > 1e-5) print " (too large)"; else print ""
    }')
    say "train losses, guest vs host in-process: $verdict"
    case "$verdict" in
        *"too large"*|different*) failures+=("the guest's loss curve differs from the host's: $verdict") ;;
    esac
fi
if [ ${#failures[@]} -gt 0 ]; then
    say "last lines of $log:"
    tail -n 40 "$log" | awk '{ print "  | " $0 }' # awk ends a cut-off last line
    awk '{ print "  qemu: " $0 }' "$out/qemu-stderr"
    printf '  %s\n' "${failures[@]}" >&2
    die "$(basename "$scenario") failed (console in $log)"
fi
say "PASS: $(basename "$scenario"), ${#expected[@]} checks ok; boot + scenario $boot_s s, $(elapsed "$start") s in all"
