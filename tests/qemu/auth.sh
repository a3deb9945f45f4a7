# Guest scenario of `tests/qemu/run.sh --auth`, sourced by /init (busybox sh, set -e; helpers
# e2e, check, wait_for and port_listening come from tests/qemu/init).
#
# DH-HMAC-CHAP with the kernel's own NVMe/TCP host: nvme-cli generates the secrets (its
# `gen-dhchap-key`, an implementation independent of sagessd's), `sagessd emulator serve`
# requires the guest's host NQN to authenticate with one of them and holds the controller
# secret. First, against one emulator, everything that must be refused: a wrong secret, no
# secret, a host not allowed, and a controller secret the target does not have (the host
# refuses the target). That emulator must end having served 0 device commands: nothing was
# read or written through a refused connection. Then, against a fresh one, the right secret
# connects and reads back what it wrote, unidirectionally and bidirectionally, and the target
# logged an authentication for every queue. Last, the other way round: sagessd's own initiator
# (`emulator load --connect URI`) authenticates to Linux's target (nvmet-tcp, which chooses
# SHA-512 and ffdhe3072 here, bidirectionally) and checks every byte it reads back, and a wrong
# secret is refused there too.

NQN=nqn.2026-11.io.sagessd:emulator
HOSTNQN=$(cat /etc/nvme/hostnqn)
DRIVER_HOST=nqn.2026-12.io.sagessd:guest-driver
KERNEL_NQN=nqn.2026-12.io.sagessd:kernel-target
OTHER_HOSTID=5a6e55d0-0000-4000-8000-0000000000ff
OTHER_HOST=nqn.2014-08.org.nvmexpress:uuid:$OTHER_HOSTID

make_secrets() { # host secret (SHA-256-transformed, 32 bytes), a wrong one, two controller ones
    nvme gen-dhchap-key --hmac=1 --nqn="$HOSTNQN" >/tmp/host.key
    nvme gen-dhchap-key --hmac=1 --nqn="$HOSTNQN" >/tmp/wrong.key
    nvme gen-dhchap-key --hmac=3 --key-length=64 --nqn="$NQN" >/tmp/ctrl.key
    nvme gen-dhchap-key --hmac=0 --key-length=48 >/tmp/wrong-ctrl.key
    nvme gen-dhchap-key --hmac=2 --key-length=48 --nqn="$DRIVER_HOST" >/tmp/driver.key
    nvme gen-dhchap-key --hmac=0 --key-length=64 >/tmp/driver-ctrl.key
    for key in host wrong ctrl wrong-ctrl driver driver-ctrl; do
        grep -q '^DHHC-1:0[0-3]:' "/tmp/$key.key"
        e2e "secret-$key" "$(cut -c1-10 "/tmp/$key.key")…"
    done
    ! cmp -s /tmp/host.key /tmp/wrong.key
}

start_emulator() { # in the background; check runs it in a subshell, hence the PID file
    : >/tmp/emulator.log
    RUST_LOG=sagessd_emulator::nvme_tcp_target=info sagessd emulator serve --listen 127.0.0.1:4420 --nqn "$NQN" \
        --host-secret "$HOSTNQN=@/tmp/host.key" --ctrl-secret "$HOSTNQN=@/tmp/ctrl.key" \
        >>/tmp/emulator.log 2>&1 &
    echo $! >/tmp/emulator.pid
}

serving() { # the emulator listens on port 4420; gives up at once if it has exited
    pid=$(cat /tmp/emulator.pid)
    if [ ! -e "/proc/$pid" ] || grep -q '^State:.*zombie' "/proc/$pid/status"; then
        cat /tmp/emulator.log
        echo "the emulator exited"
        exit 1
    fi
    port_listening 4420
}

stop_emulator() { # SIGTERM, and its last line: "stopped by signal 15: N commands completed, …"
    pid=$(cat /tmp/emulator.pid)
    kill "$pid"
    wait_for 30 sh -c "! [ -e /proc/$pid ] || grep -q '^State:.*zombie' /proc/$pid/status"
    cat /tmp/emulator.log
    grep -q '^stopped by signal' /tmp/emulator.log
}

connect() { # nvme connect with extra options
    timeout 60 nvme connect -t tcp -a 127.0.0.1 -s 4420 -n "$NQN" "$@"
}

connect_authenticated() { # connects, and reports what the kernel says it authenticated with
    dmesg -c >/dev/null
    connect "$@"
    dmesg >/tmp/dmesg
    e2e kernel-says "$(grep -m1 'qid 0: authenticated' /tmp/dmesg | sed 's/^\[[^]]*\] //')"
    grep -q 'qid 0: authenticated with hash' /tmp/dmesg
}

refused() { # name dmesg-pattern nvme-connect-options...: the connect fails, no namespace appears,
            # and the kernel says why
    name=$1
    pattern=$2
    shift 2
    dmesg -c >/dev/null
    if connect "$@" >/tmp/connect.out 2>&1; then
        cat /tmp/connect.out
        echo "$name: connected"
        return 1
    fi
    cat /tmp/connect.out
    dmesg | tee /tmp/dmesg | grep -i nvme || true
    e2e "$name-kernel-says" "$(grep -i -m1 "$pattern" /tmp/dmesg | sed 's/^\[[^]]*\] //')"
    grep -qi "$pattern" /tmp/dmesg
    sleep 1
    ! [ -e /dev/nvme0n1 ] && ! [ -e /dev/ng0n1 ]
}

no_device_commands() { # the emulator that refused every host served no device command
    stop_emulator
    grep -q '^stopped by signal 15: 0 commands completed, 0 flash pages read, 0 programmed' \
        /tmp/emulator.log
    grep -q 'not an allowed host' /tmp/emulator.log
    grep -q 'failed DH-HMAC-CHAP on queue 0: Failed' /tmp/emulator.log
    ! grep -q 'authenticated queue' /tmp/emulator.log
}

read_write() { # 1 MiB written through the block device, read back after dropping the cache
    dd if=/dev/urandom of=/tmp/data bs=64k count=16 2>/dev/null
    dd if=/tmp/data of=/dev/nvme0n1 bs=64k oflag=direct 2>/dev/null
    sync
    echo 3 >/proc/sys/vm/drop_caches
    dd if=/dev/nvme0n1 of=/tmp/back bs=64k count=16 iflag=direct 2>/dev/null
    cmp /tmp/data /tmp/back
}

disconnect() {
    timeout 30 nvme disconnect -n "$NQN"
    wait_for 20 sh -c '! [ -e /dev/nvme0n1 ]'
}

authenticated_each_queue() { # the target logged each queue's authentication: the admin queue
                             # and at least one I/O queue, for both connects
    stop_emulator
    admin=$(grep -c 'authenticated queue 0 ' /tmp/emulator.log)
    io=$(grep -c 'authenticated queue [1-9]' /tmp/emulator.log)
    e2e authenticated-queues "admin $admin, I/O $io"
    [ "$admin" -eq 2 ] && [ "$io" -ge 2 ]
}

check secrets make_secrets
kernel_target() { # nvmet-tcp on 127.0.0.1:4421, a 64 MiB file namespace; only DRIVER_HOST may
                  # connect, authenticating with SHA-512 and ffdhe3072 both ways
    modprobe nvmet-tcp
    mount -t configfs none /sys/kernel/config
    dd if=/dev/zero of=/tmp/kernel-ns.img bs=1M count=64 2>/dev/null
    host=/sys/kernel/config/nvmet/hosts/$DRIVER_HOST
    mkdir "$host"
    cat /tmp/driver.key >"$host/dhchap_key"
    cat /tmp/driver-ctrl.key >"$host/dhchap_ctrl_key"
    echo 'hmac(sha512)' >"$host/dhchap_hash"
    echo ffdhe3072 >"$host/dhchap_dhgroup"
    subsys=/sys/kernel/config/nvmet/subsystems/$KERNEL_NQN
    mkdir "$subsys"
    echo 0 >"$subsys/attr_allow_any_host"
    ln -s "$host" "$subsys/allowed_hosts/$DRIVER_HOST"
    mkdir "$subsys/namespaces/1"
    echo /tmp/kernel-ns.img >"$subsys/namespaces/1/device_path"
    echo 1 >"$subsys/namespaces/1/enable"
    port=/sys/kernel/config/nvmet/ports/2
    mkdir "$port"
    echo ipv4 >"$port/addr_adrfam"
    echo tcp >"$port/addr_trtype"
    echo 127.0.0.1 >"$port/addr_traddr"
    echo 4421 >"$port/addr_trsvcid"
    ln -s "$subsys" "$port/subsystems/$KERNEL_NQN"
}

driver_uri() { # the kernel target's URI for sagessd's initiator, with host secret $1
    echo "tcp://127.0.0.1:4421/$KERNEL_NQN?hostnqn=$DRIVER_HOST&dhchap_secret=$1&dhchap_ctrl_secret=$(cat /tmp/driver-ctrl.key)"
}

driver_load() { # 4,000 checked reads and writes on 2 authenticated I/O queues
    RUST_LOG=sagessd_host_driver=info timeout 120 sagessd emulator load \
        --connect "$(driver_uri "$(cat /tmp/driver.key)")" \
        --queues 2 --depth 8 --commands 4000 --span-mib 16 >/tmp/load 2>/tmp/load.err
    cat /tmp/load /tmp/load.err
    grep -q '^0 lost, 0 duplicated, 0 misrouted completions; every read equal to the model' /tmp/load
    # Each queue with what Linux's target chose: the identifying connection's admin and I/O
    # queue, then the load's admin queue and both I/O queues.
    e2e driver-says "$(grep -m1 -o 'queue 0: authenticated.*' /tmp/load.err)"
    [ "$(grep -c 'authenticated with hash sha512 dhgroup ffdhe3072, both ways' /tmp/load.err)" -eq 5 ]
}

driver_refused() { # a wrong host secret: Linux's target answers Failure1
    if timeout 60 sagessd emulator load --connect "$(driver_uri "$(cat /tmp/wrong.key)")" \
        --queues 1 --depth 1 --commands 10 >/tmp/load 2>&1; then
        cat /tmp/load
        return 1
    fi
    cat /tmp/load
    e2e driver-refused-says "$(grep -m1 'Failure1' /tmp/load)"
    grep -q 'Failure1, reason 0x01, explanation 0x01' /tmp/load
}

check emulator-start start_emulator
check listening wait_for 30 serving
check modprobe modprobe nvme-tcp
check refused-wrong-secret refused wrong "authentication failed" \
    --dhchap-secret="$(cat /tmp/wrong.key)"
check refused-no-secret refused none "no key"
check refused-not-allowed refused not-allowed "is not allowed" \
    --hostnqn="$OTHER_HOST" --hostid="$OTHER_HOSTID" --dhchap-secret="$(cat /tmp/host.key)"
check refused-wrong-ctrl-secret refused wrong-ctrl "controller authentication failed" \
    --dhchap-secret="$(cat /tmp/host.key)" --dhchap-ctrl-secret="$(cat /tmp/wrong-ctrl.key)"
check nothing-reached-the-device no_device_commands
check emulator-restart start_emulator
check relistening wait_for 30 serving
check connect connect_authenticated --dhchap-secret="$(cat /tmp/host.key)"
check namespace wait_for 20 namespace_present
check read-write read_write
check disconnect disconnect
check connect-bidirectional connect_authenticated --dhchap-secret="$(cat /tmp/host.key)" \
    --dhchap-ctrl-secret="$(cat /tmp/ctrl.key)"
check namespace-again wait_for 20 namespace_present
check read-write-again read_write
check disconnect-again disconnect
check authenticated-each-queue authenticated_each_queue
check kernel-target kernel_target
check kernel-target-listening wait_for 10 port_listening 4421
check driver-authenticates driver_load
check driver-refused driver_refused
check final-stop true
