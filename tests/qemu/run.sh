#!/usr/bin/env bash
# End-to-end test of sagessd under a real Linux NVMe/TCP host stack: a Debian kernel boots in
# QEMU (TCG; KVM hangs on this machine kind) from a busybox initramfs holding nvme-cli, the NVMe
# modules and the sagessd binary, and runs a guest scenario over loopback (the guest has no other
# network).
#
#   tests/qemu/run.sh [--smoke] [SAGESSD_BINARY]
#
#   SAGESSD_BINARY  the host build of sagessd to test (default ${CARGO_TARGET_DIR:-target}/release/sagessd);
#                   this script does not build it
#   --smoke         test the scaffolding itself: the kernel's own NVMe/TCP target (nvmet-tcp over
#                   null_blk) instead of `sagessd emulator serve` (tests/qemu/smoke.sh instead of
#                   tests/qemu/guest.sh)
#
# Needs qemu-system-x86 busybox-static nvme-cli kmod cpio (apt), and apt lists for the kernel:
# the first run downloads linux-image-6.1.0-NN-amd64 (apt-get download, ~70 MB, never installed)
# into target/qemu/kernel/ and reuses it afterwards. Each run rebuilds target/qemu/initramfs.cpio.gz,
# keeps the serial console in target/qemu/console.log, and exits 0 only if the guest printed
# `SAGESSD-E2E: DONE rc=0` and every check the scenario must pass reported ok.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/qemu"
qemu_timeout=240 # seconds; --smoke boots and runs its scenario in 5-7 s

say() { printf 'qemu-e2e: %s\n' "$*"; }
die() { printf 'qemu-e2e: FAIL: %s\n' "$*" >&2; exit 1; }

# Arguments, and the checks each scenario must report ok (in /init's `<name> ok` lines).
scenario="$here/guest.sh"
expected=(emulator-start listening modprobe connect namespace list id-ctrl
          demo tunnel ns-submit disconnect emulator-stop restart relisten reconnect renamespace
          persisted sample-on-device redisconnect final-stop)
binary=""
for arg in "$@"; do
    case "$arg" in
    --smoke)
        scenario="$here/smoke.sh"
        expected=(sagessd-runs target-up listening modprobe connect namespace list id-ctrl
                  passthru-read disconnect)
        ;;
    -*) die "unknown option $arg (usage: tests/qemu/run.sh [--smoke] [SAGESSD_BINARY])" ;;
    *) binary="$arg" ;;
    esac
done
if [ -z "$binary" ]; then
    target_dir="${CARGO_TARGET_DIR:-$root/target}"
    case "$target_dir" in /*) ;; *) target_dir="$root/$target_dir" ;; esac
    binary="$target_dir/release/sagessd"
fi
[ -x "$binary" ] || die "$binary is not an executable (build it first: cargo build --release -p sagessd --no-default-features)"

export PATH="$PATH:/usr/sbin:/sbin" # nvme, modprobe and depmod for non-root users
for tool in qemu-system-x86_64 busybox nvme modprobe depmod cpio gzip ldd strip apt-cache apt-get dpkg timeout; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "$tool not found (apt-get install qemu-system-x86 busybox-static nvme-cli kmod cpio)"
done
mkdir -p "$out"
start=$(date +%s.%N)
elapsed() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }

# 1. The kernel: the package linux-image-amd64 currently depends on, extracted, never installed
#    (installing it would pull systemd, udev and initramfs-tools into the host).
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-6/ { print $2; exit }')
[ -n "$kpkg" ] || die "apt-cache knows no linux-image-amd64 (run apt-get update)"
kver="${kpkg#linux-image-}"
kroot="$out/kernel/$kver"
if [ ! -f "$kroot/.complete" ]; then
    say "fetching $kpkg into $kroot"
    rm -rf "$out/kernel" # an older kernel, or a half-finished fetch
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

copy_libs() { # executable: copies the shared libraries it loads to the same paths in the stage
    local deps lib
    if ! deps=$(ldd "$1" 2>&1); then
        case "$deps" in *"not a dynamic executable"*) return 0 ;; esac
        die "ldd $1: $deps"
    fi
    case "$deps" in *"not found"*) die "$1 needs libraries this machine lacks: $deps" ;; esac
    for lib in $(grep -o '/[^ ]*' <<<"$deps"); do # "statically linked" lists none
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
case "$(ldd "$binary" 2>&1)" in
    *libtorch*) die "$binary links libtorch (440 MB, too large for the guest's initramfs): build it with cargo build --release -p sagessd --no-default-features" ;;
esac
strip --strip-debug -o "$stage/bin/sagessd" "$binary" # the debug info is most of a release build
copy_libs "$stage/bin/sagessd"

# nvme-tcp for the scenarios, nvmet-tcp and null_blk for --smoke's kernel target.
for module in nvme-tcp nvmet-tcp null_blk; do
    modprobe -d "$kroot" -S "$kver" --show-depends "$module" | awk '$1 == "insmod" { print $2 }'
done | sort -u | while read -r ko; do
    rel="${ko#"$kroot"/lib/modules/"$kver"/}"
    mkdir -p "$stage/lib/modules/$kver/$(dirname "$rel")"
    cp "$ko" "$stage/lib/modules/$kver/$rel"
done
cp "$kroot/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$stage/lib/modules/$kver/"
depmod -b "$stage" "$kver"

# A fixed host identity, so that every run connects as the same NVMe host.
hostid=5a6e55d0-0000-4000-8000-000000000001
echo "nqn.2014-08.org.nvmexpress:uuid:$hostid" >"$stage/etc/nvme/hostnqn"
echo "$hostid" >"$stage/etc/nvme/hostid"

install -m 755 "$here/init" "$stage/init"
install -m 644 "$scenario" "$stage/scenario.sh"
initrd="$out/initramfs.cpio.gz"
(cd "$stage" && find . | cpio -o -H newc -R 0:0 --quiet | gzip -1) >"$initrd"
rm -rf "$stage"
say "initramfs $initrd ($(du -k "$initrd" | cut -f1) KiB, $(basename "$scenario"), $binary) ready after $(elapsed "$start") s"

# 3. Boot it. The serial console is the only output; QEMU's own messages go to qemu-stderr.
log="$out/console.log"
boot=$(date +%s.%N)
say "booting $vmlinuz (TCG, ${qemu_timeout} s timeout)"
set +e
timeout "$qemu_timeout" qemu-system-x86_64 -accel tcg -m 1024 -smp 2 \
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
    # The guest sampled through the kernel; the same demo in-process here must agree.
    guest_sum=$(sed -n 's/^checksum //p' <<<"$results")
    host_sum=$("$binary" demo --quiet 2>/dev/null | grep -o 'checksum 0x[0-9a-f]\{16\}' | cut -d' ' -f2)
    say "checksum: guest ${guest_sum:-none}, host in-process ${host_sum:-none}"
    [ -n "$host_sum" ] && [ "$guest_sum" = "$host_sum" ] ||
        failures+=("guest checksum ${guest_sum:-none} differs from the host's ${host_sum:-none}")
fi
if [ ${#failures[@]} -gt 0 ]; then
    say "last lines of $log:"
    tail -n 40 "$log" | awk '{ print "  | " $0 }' # awk ends a cut-off last line
    awk '{ print "  qemu: " $0 }' "$out/qemu-stderr"
    printf '  %s\n' "${failures[@]}" >&2
    die "$(basename "$scenario") failed (console in $log)"
fi
say "PASS: $(basename "$scenario"), ${#expected[@]} checks ok; boot + scenario $boot_s s, $(elapsed "$start") s in all"
