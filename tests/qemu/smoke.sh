# Guest scenario of `tests/qemu/run.sh --smoke`, sourced by /init (busybox sh, set -e; helpers
# e2e, check, wait_for and port_listening come from tests/qemu/init).
#
# Exercises everything the real scenario (guest.sh) relies on, but against the kernel's own
# NVMe/TCP target (nvmet-tcp over null_blk, configured through configfs) instead of
# `sagessd emulator serve`: the sagessd binary runs in the guest, nvme-tcp connects over
# loopback, the namespace's block and generic (/dev/ng0n1) devices appear, nvme list,
# nvme id-ctrl and an io-passthru Read work, and the controller disconnects.

NQN=nqn.2026-11.io.sagessd:smoke

start_kernel_target() { # a 1 GiB null_blk namespace exported on 127.0.0.1:4420
    modprobe null_blk nr_devices=1 gb=1
    modprobe nvmet-tcp
    mount -t configfs none /sys/kernel/config
    subsys=/sys/kernel/config/nvmet/subsystems/$NQN
    mkdir "$subsys"
    echo 1 >"$subsys/attr_allow_any_host"
    mkdir "$subsys/namespaces/1"
    echo /dev/nullb0 >"$subsys/namespaces/1/device_path"
    echo 1 >"$subsys/namespaces/1/enable"
    port=/sys/kernel/config/nvmet/ports/1
    mkdir "$port"
    echo ipv4 >"$port/addr_adrfam"
    echo tcp >"$port/addr_trtype"
    echo 127.0.0.1 >"$port/addr_traddr"
    echo 4420 >"$port/addr_trsvcid"
    ln -s "$subsys" "$port/subsystems/$NQN"
}

passthru_read() { # a Read of LBA 0 (null_blk: 512 B) through the generic device, as guest.sh's
                  # vendor commands will go; the data length must match the blocks read exactly
    timeout 30 nvme io-passthru /dev/ng0n1 --opcode=0x02 --namespace-id=1 \
        --data-len=512 --read --cdw10=0 --cdw11=0 --cdw12=0 --raw-binary >/tmp/lba0
    [ "$(wc -c </tmp/lba0)" -eq 512 ]
}

check sagessd-runs sagessd --version
check target-up start_kernel_target
check listening wait_for 10 port_listening 4420
check modprobe modprobe nvme-tcp
check connect timeout 30 nvme connect -t tcp -a 127.0.0.1 -s 4420 -n "$NQN"
check namespace wait_for 20 namespace_present
check list list_shows_namespace
check id-ctrl id_ctrl
check passthru-read passthru_read
check disconnect timeout 30 nvme disconnect -n "$NQN"
