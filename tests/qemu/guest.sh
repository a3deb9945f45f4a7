# Guest scenario of `tests/qemu/run.sh`, sourced by /init (busybox sh, set -e; helpers e2e,
# check, wait_for and port_listening come from tests/qemu/init).
#
# The whole product inside one VM: sagessd's emulator serves an NVMe/TCP target on loopback, the
# guest kernel's nvme-tcp host connects to it, nvme-cli identifies it and sends a hand-made
# NS_SUBMIT, `sagessd compare` samples through the kernel's generic device /dev/ng0n1, and
# `sagessd sample --on-device` runs AGNES's block samplers and ISP through it; fio writes and
# verifies (crc32c) 4 KiB random and 1 MiB sequential writes with transparent huge pages on (the
# case that made Debian 6.1's kernel BUG in the target's receive). Last, an ext4 file
# system on the namespace must survive a SIGKILL of the emulator while the kernel stays
# connected: the kernel reconnects to the restarted emulator, and e2fsck finds the file system
# clean with every synced file intact.

NQN=nqn.2026-11.io.sagessd:emulator

start_emulator() { # in the background; check runs it in a subshell, hence the PID file
    sagessd emulator serve --listen 127.0.0.1:4420 --nqn "$NQN" --image /tmp/flash.img \
        --feature-buffer 1024 \
        >>/tmp/emulator.log 2>&1 &
    echo $! >/tmp/emulator.pid
}

serving() { # the emulator listens on port 4420; gives up at once if it has exited
    pid=$(cat /tmp/emulator.pid)
    if [ ! -e "/proc/$pid" ] || grep -q '^State:.*zombie' "/proc/$pid/status"; then
        echo "the emulator exited"
        exit 1
    fi
    port_listening 4420
}

ns_submit() { # one NS_SUBMIT and its NS_COLLECT by hand, after compare attached the graph
    sagessd ns-config --seed 7 --fanouts 4,2 --targets 1,2,3 --output /tmp/ns.bin >/tmp/ns.txt
    len=$(sed -n 's/.*data-len=\([0-9]*\).*/\1/p' /tmp/ns.txt)
    ndt=$(sed -n 's/.*cdw10=\([0-9]*\).*/\1/p' /tmp/ns.txt)
    timeout 30 nvme io-passthru /dev/ng0n1 --opcode=0x85 --namespace-id=1 --write \
        --data-len="$len" --input-file=/tmp/ns.bin --cdw10="$ndt" >/tmp/submit 2>&1
    cat /tmp/submit
    tag=$(sed -n 's/.*is Success and result: \(0x[0-9a-f]*\).*/\1/p' /tmp/submit)
    [ -n "$tag" ]
    e2e ns-submit-tag "$tag"
    # NS_COLLECT (0x86): 64 KiB buffer (CDW10 = 16384 dwords), CDW13 = the tag.
    timeout 30 nvme io-passthru /dev/ng0n1 --opcode=0x86 --namespace-id=1 --read \
        --data-len=65536 --cdw10=16384 --cdw12=15 --cdw13="$(printf %d "$tag")" -b \
        >/tmp/subgraph 2>/tmp/collect
    cat /tmp/collect
    grep -q 'is Success' /tmp/collect
    [ "$(head -c 4 /tmp/subgraph)" = SGRF ]
    e2e ns-collect-bytes "$(sed -n 's/.*result: \(0x[0-9a-f]*\).*/\1/p' /tmp/collect)"
}

same_after_restart() { # the same NS_SUBMIT as before the restart returns the same subgraph
    cp /tmp/subgraph /tmp/subgraph.before
    ns_submit
    cmp /tmp/subgraph /tmp/subgraph.before
}

demo() { # sagessd compare (in-storage sampling) through the kernel (vendor commands on io_uring); reports its checksum
    RUST_LOG=sagessd_host_driver=info sagessd compare --device passthru:/dev/ng0n1 2>/tmp/demo.err |
        tee /tmp/demo
    cat /tmp/demo.err
    grep -q 'through io_uring' /tmp/demo.err
    e2e checksum "$(grep -o 'checksum 0x[0-9a-f]\{16\}' /tmp/demo | cut -d' ' -f2)"
    grep -q 'checksum 0x[0-9a-f]\{16\}' /tmp/demo
}

tunnel_demo() { # the same through the tunnel window (plain Writes and Reads): same checksum
    sagessd compare --device 'passthru:/dev/nvme0n1?tunnel=1' | tee /tmp/tunnel
    e2e tunnel-checksum "$(grep -o 'checksum 0x[0-9a-f]\{16\}' /tmp/tunnel | cut -d' ' -f2)"
    [ "$(grep -o 'checksum 0x[0-9a-f]*' /tmp/tunnel)" = "$(grep -o 'checksum 0x[0-9a-f]*' /tmp/demo)" ]
}

sample_on_device() { # AGNES blocks and feature rows read through the kernel, and ISP gathering
    # the same rows in storage, on one device: same subgraphs, same features
    sagessd dataset generate --out /tmp/ds --scale 10 --features 16 >/dev/null
    timeout 120 sagessd sample --dataset /tmp/ds --on-device --device passthru:/dev/ng0n1 \
        --sampler hyperbatch,agnes,isp --batches 4 --batch-size 64 --graph-buffer 1 \
        --block-size 16 | tee /tmp/sample
    grep -q '^samples identical: yes' /tmp/sample
    grep -q '^feature bytes:' /tmp/sample
}

train_on_device() { # a GNN trained on ISP-fed minibatches (in-storage sampling and feature
    # gather) through /dev/ng0n1, with libtorch from the host over 9p; reports its losses
    modprobe virtio_pci
    modprobe 9pnet_virtio
    modprobe 9p
    { read -r site; read -r link; read -r real; } </etc/torch-site
    mkdir -p "$site" "$(dirname "$link")"
    mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose torchsite "$site"
    ln -s "$real" "$link" # where the binary's rpath looks: the host's link into the wheel
    . /etc/train-flags.sh
    # shellcheck disable=SC2046 # the flags are words
    train_env timeout 300 sagessd-train train --dataset /tmp/ds --on-device --device passthru:/dev/ng0n1 \
        --sampler isp $(train_flags) --metrics-out /tmp/train.jsonl | tee /tmp/train
    grep -q '^test accuracy ' /tmp/train
    e2e train-losses "$(losses_of /tmp/train.jsonl)"
}

stop_emulator() { # SIGTERM: a clean stop saves the image; fails if the emulator is gone already
    pid=$(cat /tmp/emulator.pid)
    kill "$pid"
    while [ -e "/proc/$pid" ] && ! grep -q '^State:.*zombie' "/proc/$pid/status"; do sleep 0.1; done
    cat /tmp/emulator.log
    grep -q '^checkpointed and synced the device in /tmp/flash.img' /tmp/emulator.log
}

kill_emulator() { # SIGKILL: no clean stop, no checkpoint; only what the flash file holds
    pid=$(cat /tmp/emulator.pid)
    kill -9 "$pid"
    while [ -e "/proc/$pid" ] && ! grep -q '^State:.*zombie' "/proc/$pid/status"; do sleep 0.1; done
}

huge_pages_on() { # transparent huge pages for every anonymous mapping, fio's buffers included
    echo always >/sys/kernel/mm/transparent_hugepage/enabled
    e2e transparent-hugepage "$(cat /sys/kernel/mm/transparent_hugepage/enabled)"
    grep -q '\[always\]' /sys/kernel/mm/transparent_hugepage/enabled
}

fio_verify() { # name rw bs offset size [fio options]: writes through the kernel (direct, by
    # libaio, unless the options say otherwise), read back and checked against their crc32c;
    # the buffers (iodepth x bs) are large enough for huge pages, and the huge pages in use
    # while it runs are reported
    name=$1 rw=$2 bs=$3 offset=$4 size=$5
    shift 5
    dmesg -c >/dev/null
    timeout 120 fio --name="$name" --filename=/dev/nvme0n1 --direct=1 --ioengine=libaio \
        --iodepth=4 --rw="$rw" --bs="$bs" --offset="$offset" --size="$size" \
        --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=1 --eta=never \
        --output=/tmp/fio-"$name" "$@" &
    fio=$!
    sleep 2
    e2e fio-"$name"-huge-pages "$(grep AnonHugePages /proc/meminfo)"
    wait $fio
    cat /tmp/fio-"$name"
    grep -q 'err= 0' /tmp/fio-"$name"
    e2e fio-"$name" "$(grep -o 'WRITE: bw=[^ ]*' /tmp/fio-"$name")"
    # The kernel reported nothing wrong meanwhile: no usercopy BUG in the target's receive, no
    # I/O error.
    ! dmesg | grep -E 'usercopy: |kernel BUG|I/O error|blk_update_request'
}

write_zeroes() { # the kernel sees Write Zeroes; one with Deallocate zeroes exactly its range
    max=$(cat /sys/block/nvme0n1/queue/write_zeroes_max_bytes)
    e2e write-zeroes-max-bytes "$max"
    [ "$max" -gt 0 ]
    lbs=$(cat /sys/block/nvme0n1/queue/logical_block_size)
    at=$((448 * 1024 * 1024)) # bytes: past fio's region
    dd if=/dev/urandom of=/tmp/pattern bs=4096 count=16 2>/dev/null
    dd if=/tmp/pattern of=/dev/nvme0n1 bs=4096 seek=$((at / 4096)) count=16 oflag=direct 2>/dev/null
    # Bytes 4 KiB .. 36 KiB of the pattern (the block count is 0-based).
    nvme write-zeroes /dev/nvme0n1 --namespace-id=1 --start-block=$(((at + 4096) / lbs)) \
        --block-count=$((32768 / lbs - 1)) --deac
    dd if=/dev/nvme0n1 of=/tmp/back bs=4096 skip=$((at / 4096)) count=16 iflag=direct 2>/dev/null
    { head -c 4096 /tmp/pattern; head -c 32768 /dev/zero; tail -c 28672 /tmp/pattern; } >/tmp/expect
    cmp /tmp/back /tmp/expect
}

ext4_write() { # a 64 MiB ext4 on the namespace, files written and synced, their sums kept
    modprobe ext4
    modprobe crc32c_generic # ext4 asks the crypto API for crc32c, not the module loader
    mkfs.ext4 -q -F -b 4096 /dev/nvme0n1 16384
    mkdir -p /mnt/fs
    mount -t ext4 /dev/nvme0n1 /mnt/fs
    for i in 1 2 3 4 5 6; do
        dd if=/dev/urandom of=/mnt/fs/file$i bs=65536 count=16 2>/dev/null
    done
    mkdir /mnt/fs/dir
    echo "written before the kill" >/mnt/fs/dir/note
    sync
    (cd /mnt/fs && md5sum file1 file2 file3 file4 file5 file6 dir/note) >/tmp/sums
    cat /tmp/sums
}

fstrim_fs() { # a deleted file's blocks discarded: a trim record per discard, not a checkpoint
    dd if=/dev/urandom of=/mnt/fs/scratch bs=1048576 count=24 2>/dev/null
    sync
    rm /mnt/fs/scratch
    sync
    read -r start _ </proc/uptime
    timeout 120 fstrim -v /mnt/fs >/tmp/fstrim
    read -r end _ </proc/uptime
    e2e fstrim "$(cat /tmp/fstrim)" "in $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }') s"
}

io_works() { # one direct read of the namespace completes (the kernel has reconnected)
    timeout 5 dd if=/dev/nvme0n1 of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null
}

ext4_fsck() { # unmounted (what the kernel still held is written now), the file system is clean
    umount /mnt/fs
    e2fsck -fn /dev/nvme0n1
}

ext4_intact() { # every file synced before the kill reads back as it was
    mount -t ext4 /dev/nvme0n1 /mnt/fs
    (cd /mnt/fs && md5sum -c /tmp/sums)
    umount /mnt/fs
}

check emulator-start start_emulator
check listening wait_for 30 serving
check modprobe modprobe nvme-tcp
check connect timeout 30 nvme connect -t tcp -a 127.0.0.1 -s 4420 -n "$NQN"
check namespace wait_for 20 namespace_present
check list list_shows_namespace
check id-ctrl id_ctrl
check demo demo
check tunnel tunnel_demo
check ns-submit ns_submit
check disconnect timeout 30 nvme disconnect -n "$NQN"
check emulator-stop stop_emulator
# Restart from the image: the graph written and attached before is still there.
check restart start_emulator
check relisten wait_for 30 serving
# A short reconnect delay: the kill below makes the kernel reconnect on its own.
check reconnect timeout 30 nvme connect -t tcp -a 127.0.0.1 -s 4420 -n "$NQN" \
    --reconnect-delay=1 --ctrl-loss-tmo=120
check renamespace wait_for 20 namespace_present
check persisted same_after_restart
check sample-on-device sample_on_device
if [ -x /bin/sagessd-train ]; then
    check train-on-device train_on_device
fi
# fio on the namespace past the ext4 file system's 64 MiB (the graph written before may be
# overwritten: nothing later reads it).
check huge-pages huge_pages_on
check fio-rand-4k fio_verify rand-4k randwrite 4k 128M 16M
# 16 MiB of buffers in flight: the case whose data crossed a huge page's end in one socket
# buffer fragment and made Debian 6.1's kernel BUG in the target's receive (once in two runs)
# while the target read through a buffer rather than a page at a time.
check fio-seq-1m fio_verify seq-1m write 1M 192M 128M --iodepth=16
check fio-seq-1m-buffered fio_verify seq-1m-buffered write 1M 320M 64M --direct=0 \
    --ioengine=psync --end_fsync=1
check write-zeroes write_zeroes
# SIGKILL with the kernel connected and a file system mounted, then a restart from the flash.
check ext4-write ext4_write
check fstrim fstrim_fs
check emulator-kill kill_emulator
check restart-after-kill start_emulator
check relisten-after-kill wait_for 30 serving
check reconnected wait_for 60 io_works
check ext4-fsck ext4_fsck
check ext4-intact ext4_intact
check redisconnect timeout 30 nvme disconnect -n "$NQN"
check final-stop stop_emulator
