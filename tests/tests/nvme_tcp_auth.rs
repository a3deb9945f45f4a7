//! DH-HMAC-CHAP on the emulator's NVMe/TCP target: a host with a secret authenticates each
//! queue before it serves anything (with every hash, DH groups from none to ffdhe8192, and
//! bidirectionally); a wrong, missing or unasked-for secret, and a controller that cannot prove
//! its own, end the association; and an unauthenticated queue passes no data either way. The
//! responses here are computed by the host driver's side of the protocol, whose formulas are
//! checked against independent known answers in `sagessd_abi::auth`; the kernel's own host is
//! tested against the target in the QEMU guest (`tests/qemu/run.sh --auth`).

use std::collections::BTreeMap;
use std::net::TcpStream;

use sagessd_abi::auth::message::{Message, id};
use sagessd_abi::auth::response::Transaction;
use sagessd_abi::auth::secret::Secret;
use sagessd_abi::auth::{AUTH_REQUIRED, CONNECT_ATR, DhGroup, Explanation, HashId};
use sagessd_abi::fabrics::{
    CNTLID_DYNAMIC, ConnectData, DataPointer, FabricsCommand, connect_status, property,
};
use sagessd_abi::identify::CNS_CONTROLLER;
use sagessd_abi::nvme::{Status, SubmissionEntry, admin_opcode};
use sagessd_abi::tcp::stream::read_pdu;
use sagessd_abi::tcp::{CapsuleResp, Framing, pdu_type};
use sagessd_emulator::nvme_tcp_target::auth::{AuthOptions, HostSecrets};
use sagessd_emulator::nvme_tcp_target::subsystem::AllowedHosts;
use sagessd_emulator::{Ssd, Target, TargetOptions};
use sagessd_host_driver::{Device, DhchapSecrets, TcpOptions, TcpTransport};
use sagessd_tests::raw_host::{HOST_NQN, handshake, send, write_capsule};
use sagessd_tests::small_config;
use zerocopy::IntoBytes;

const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:0000000a-0000-4000-8000-000000000001";
const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:0000000b-0000-4000-8000-000000000002";
const HOST_OPEN: &str = "nqn.2026-12.io.example:no-secret";

fn secret(transform: Option<HashId>, len: usize, fill: u8) -> Secret {
    Secret::new(transform, (0..len).map(|i| fill ^ i as u8).collect()).expect("a valid secret")
}

/// A target where HOST_A authenticates with a 32-byte untransformed secret, HOST_B with a
/// 48-byte SHA-384-transformed one and the controller with its own 64-byte secret, the raw
/// host with a secret too, and HOST_OPEN needs none; choosing `hash` and `group`.
fn start(hash: HashId, group: DhGroup) -> Target {
    let mut hosts = BTreeMap::new();
    hosts.insert(
        HOST_A.to_owned(),
        HostSecrets {
            host: secret(None, 32, 0x11),
            ctrl: None,
        },
    );
    hosts.insert(
        HOST_B.to_owned(),
        HostSecrets {
            host: secret(Some(HashId::Sha384), 48, 0x22),
            ctrl: Some(secret(Some(HashId::Sha512), 64, 0x33)),
        },
    );
    hosts.insert(HOST_NQN.to_owned(), raw_host_secrets());
    let options = TargetOptions {
        hosts: AllowedHosts::Only(vec![
            HOST_A.into(),
            HOST_B.into(),
            HOST_OPEN.into(),
            HOST_NQN.into(),
        ]),
        auth: AuthOptions {
            hosts,
            hashes: vec![hash],
            dh_groups: vec![group],
        },
        ..TargetOptions::default()
    };
    let ssd = Ssd::new(&small_config()).expect("emulator starts");
    Target::start(ssd, "127.0.0.1:0", options).expect("target listens")
}

/// The raw host's secrets on the target: a 32-byte untransformed secret (0x44 ^ i).
fn raw_host_secrets() -> HostSecrets {
    HostSecrets {
        host: secret(None, 32, 0x44),
        ctrl: None,
    }
}

fn connect(
    target: &Target,
    host: &str,
    dhchap: Option<DhchapSecrets>,
) -> Result<TcpTransport, String> {
    let options = TcpOptions {
        host_nqn: host.into(),
        io_queues: 2,
        dhchap,
        ..TcpOptions::new(&TargetOptions::default().nqn)
    };
    TcpTransport::connect(target.local_addr(), &options).map_err(|e| e.to_string())
}

fn secrets(host: Secret, ctrl: Option<Secret>) -> Option<DhchapSecrets> {
    Some(DhchapSecrets { host, ctrl })
}

/// Writes a block through the transport and reads it back.
fn use_it(transport: TcpTransport, fill: u8) {
    let mut device = Device::open(transport).expect("identify over an authenticated queue");
    let block = device.info().block_size_bytes as usize;
    device.write(7, &vec![fill; block]).expect("write");
    assert_eq!(device.read(7, 1).expect("read"), vec![fill; block]);
}

#[test]
fn hosts_authenticate_with_every_hash_and_group_and_wrong_or_missing_secrets_are_refused() {
    let cases = [
        (HashId::Sha256, DhGroup::Null),
        (HashId::Sha384, DhGroup::Ffdhe2048),
        (HashId::Sha512, DhGroup::Ffdhe3072),
        (HashId::Sha256, DhGroup::Ffdhe4096),
        (HashId::Sha384, DhGroup::Ffdhe6144),
        (HashId::Sha512, DhGroup::Ffdhe8192),
    ];
    for (hash, group) in cases {
        let case = format!("{} {}", hash.name(), group.name());
        let target = start(hash, group);
        // The right secret: the admin queue and both I/O queues authenticate, then serve.
        let t = connect(&target, HOST_A, secrets(secret(None, 32, 0x11), None)).expect(&case);
        use_it(t, 0xA1);
        // Bidirectional: the controller proves it knows its secret too.
        let b = secrets(
            secret(Some(HashId::Sha384), 48, 0x22),
            Some(secret(Some(HashId::Sha512), 64, 0x33)),
        );
        use_it(connect(&target, HOST_B, b).expect(&case), 0xB2);
        // A host without a secret on the target connects without authenticating.
        use_it(connect(&target, HOST_OPEN, None).expect(&case), 0xC3);
        target.stop();
    }

    let target = start(HashId::Sha256, DhGroup::Ffdhe2048);
    // A wrong secret: the controller answers the Reply with Failure1 ("failed").
    let err = connect(&target, HOST_A, secrets(secret(None, 32, 0x12), None)).unwrap_err();
    assert!(
        err.contains("Failure1") && err.contains("wrong secret"),
        "{err}"
    );
    // The right secret under another host's NQN is wrong too (the NQNs are in the response).
    let err = connect(&target, HOST_B, secrets(secret(None, 32, 0x11), None)).unwrap_err();
    assert!(err.contains("wrong secret"), "{err}");
    // No secret: the host learns the target requires one.
    let err = connect(&target, HOST_A, None).unwrap_err();
    assert!(err.contains("no secret was given"), "{err}");
    // A controller that does not know the controller secret the host expects.
    let b = secrets(
        secret(Some(HashId::Sha384), 48, 0x22),
        Some(secret(Some(HashId::Sha512), 64, 0x34)),
    );
    let err = connect(&target, HOST_B, b).unwrap_err();
    assert!(err.contains("did not prove"), "{err}");
    // A host asking the controller to prove itself when the target has no controller secret.
    let a = secrets(secret(None, 32, 0x11), Some(secret(None, 32, 0x55)));
    let err = connect(&target, HOST_A, a).unwrap_err();
    assert!(err.contains("Failure1"), "{err}");
    // A host not allowed never gets as far as authenticating.
    let err = connect(&target, "nqn.2026-12.io.example:intruder", None).unwrap_err();
    assert!(err.contains("sc 0x84"), "{err}");
    // And after all that, the right host still gets in.
    use_it(
        connect(&target, HOST_A, secrets(secret(None, 32, 0x11), None)).unwrap(),
        0xD4,
    );
    target.stop();
}

/// Sends AUTH_Send with `message` in its capsule; returns its status.
fn auth_send(s: &mut TcpStream, framing: &Framing, cid: u16, message: &[u8]) -> Status {
    let sqe = FabricsCommand::auth_send(cid, message.len() as u32);
    send(s, framing, sqe, message).status()
}

/// Sends AUTH_Receive for 4,096 bytes; returns the data (empty if none came) and the status.
fn auth_receive(s: &mut TcpStream, framing: &Framing, cid: u16) -> (Vec<u8>, Status) {
    let mut sqe = FabricsCommand::auth_receive(cid, 4096);
    DataPointer::Transport { len: 4096 }.encode(&mut sqe);
    write_capsule(s, framing, sqe, &[]);
    let allowed = [pdu_type::C2H_DATA, pdu_type::CAPSULE_RESP];
    let mut data = Vec::new();
    loop {
        let pdu = read_pdu(s, framing, &allowed).expect("a PDU");
        if pdu.pdu_type() == pdu_type::C2H_DATA {
            data.extend_from_slice(&pdu.data);
            continue;
        }
        let cqe = pdu.header_as::<CapsuleResp>().expect("a response").cqe;
        return (data, cqe.status());
    }
}

/// A raw admin connection of HOST_NQN (which has a secret): its Connect's result dword.
fn raw_admin(target: &Target) -> (TcpStream, Framing, u32) {
    let (mut s, framing) = handshake(target, 0, 0);
    let data = ConnectData::new(
        [7; 16],
        CNTLID_DYNAMIC,
        &TargetOptions::default().nqn,
        HOST_NQN,
    );
    let cqe = send(
        &mut s,
        &framing,
        FabricsCommand::connect(1, 0, 31, 0),
        data.as_bytes(),
    );
    assert!(cqe.status().is_success(), "{cqe:?}");
    (s, framing, cqe.result.get())
}

/// Every command but authentication's is refused with Authentication Required, and returns no
/// data nor takes any.
fn assert_nothing_passes(s: &mut TcpStream, framing: &Framing, admin: bool) {
    let mut identify = SubmissionEntry::new(admin_opcode::IDENTIFY, 10, 0);
    identify.cdw10 = u32::from(CNS_CONTROLLER).into();
    DataPointer::Transport { len: 4096 }.encode(&mut identify);
    let mut read = SubmissionEntry::read_write(false, 11, 1, 0, 1);
    DataPointer::Transport { len: 4096 }.encode(&mut read);
    let write = SubmissionEntry::read_write(true, 12, 1, 0, 1);
    let enable = FabricsCommand::property_set(13, property::CC, 0x46_0001, false);
    let get = FabricsCommand::property_get(14, property::CAP, true);
    let commands: Vec<(SubmissionEntry, Vec<u8>)> = if admin {
        vec![(identify, vec![]), (enable, vec![]), (get, vec![])]
    } else {
        vec![(read, vec![]), (write, vec![0xEE; 4096])]
    };
    for (sqe, data) in commands {
        // `send` reads a response capsule and fails on any data PDU.
        let cqe = send(s, framing, sqe, &data);
        assert_eq!(cqe.status(), AUTH_REQUIRED, "opcode {:#04x}", sqe.opcode);
    }
}

/// Runs a DH-HMAC-CHAP transaction (SHA-256, ffdhe2048) on a raw connection of HOST_NQN,
/// answering with the secret filled with `fill` (0x44 is the right one); returns the
/// controller's last message (Success1 or Failure1).
fn transaction(s: &mut TcpStream, framing: &Framing, t_id: u16, fill: u8) -> Vec<u8> {
    let nqn = TargetOptions::default().nqn;
    let offer = Message::Negotiate {
        t_id,
        sc_c: 0,
        hash_ids: &[1, 2, 3],
        dh_group_ids: &[0, 1],
    };
    assert!(auth_send(s, framing, 50, &offer.encode()).is_success());
    let (challenge, status) = auth_receive(s, framing, 51);
    assert!(status.is_success());
    assert_eq!(challenge.len(), 4096, "padded to the allocation length");
    let message = Message::parse(&challenge);
    let Ok(Message::Challenge {
        hash_id: 1,
        dh_group_id: 1,
        seqnum,
        challenge: c1,
        dh_value,
        ..
    }) = message
    else {
        panic!("not the expected challenge: {message:?}");
    };
    assert_eq!(
        (message.unwrap().t_id(), c1.len(), dh_value.len()),
        (t_id, 32, 256)
    );
    let keys = sagessd_abi::auth::ffdhe::KeyPair::new(DhGroup::Ffdhe2048, &[0x77; 32]).unwrap();
    let z = keys.shared_secret(dh_value).expect("a valid DH value");
    let transaction = Transaction {
        hash: HashId::Sha256,
        t_id,
        host_nqn: HOST_NQN,
        subsys_nqn: &nqn,
        shared_secret: Some(&z),
    };
    let key = secret(None, 32, fill).transformed(HOST_NQN);
    let r1 = transaction.host_response(&key, c1, seqnum);
    let reply = Message::Reply {
        t_id,
        response: &r1,
        ctrl_challenge: None,
        seqnum: 0,
        dh_value: keys.public(),
    };
    assert!(auth_send(s, framing, 52, &reply.encode()).is_success());
    let (last, status) = auth_receive(s, framing, 53);
    assert!(status.is_success());
    last
}

/// The target closes `s` within 5 s (a read ends; it does not time out).
fn assert_closed(s: &mut TcpStream, what: &str) {
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("a timeout");
    let mut rest = [0u8; 1];
    match std::io::Read::read(s, &mut rest) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("{what} is still open: {other:?}"),
    }
}

#[test]
fn an_unauthenticated_queue_passes_nothing_and_a_failed_transaction_ends_it() {
    let target = start(HashId::Sha256, DhGroup::Ffdhe2048);
    let nqn = TargetOptions::default().nqn;

    // Connect asks for authentication; until then the admin queue serves nothing.
    let (mut admin, framing, dw0) = raw_admin(&target);
    assert_ne!(dw0 & CONNECT_ATR, 0, "Connect asks for authentication");
    let cntlid = (dw0 & 0xFFFF) as u16;
    assert_nothing_passes(&mut admin, &framing, true);

    // Malformed AUTH commands get statuses.
    let mut bad = FabricsCommand::auth_send(20, 16);
    bad.cdw10 = 0x0001_0100.into(); // SECP 0
    let success2 = Message::Success2 { t_id: 0 }.encode();
    let status = send(&mut admin, &framing, bad, &success2).status();
    assert_eq!(status, Status::INVALID_FIELD);
    let status = auth_receive(&mut admin, &framing, 21).1;
    assert_eq!(
        status,
        Status::COMMAND_SEQUENCE_ERROR,
        "nothing to receive yet"
    );

    // The right transaction on the admin queue: Success1 without R2; the controller can then
    // be enabled.
    let success = transaction(&mut admin, &framing, 0, 0x44);
    let want = Message::Success1 {
        t_id: 0,
        hl: 32,
        response: None,
    };
    assert_eq!(Message::parse(&success), Ok(want));
    let enable = FabricsCommand::property_set(60, property::CC, 0x46_0001, false);
    assert!(
        send(&mut admin, &framing, enable, &[])
            .status()
            .is_success()
    );

    // An I/O queue authenticates on its own: until it has, it passes nothing.
    let (mut io, io_framing) = handshake(&target, 0, 0);
    let data = ConnectData::new([7; 16], cntlid, &nqn, HOST_NQN);
    let connect = FabricsCommand::connect(1, 1, 31, 0);
    let cqe = send(&mut io, &io_framing, connect, data.as_bytes());
    assert!(cqe.status().is_success(), "{cqe:?}");
    assert_ne!(
        cqe.result.get() & CONNECT_ATR,
        0,
        "each I/O queue authenticates"
    );
    assert_nothing_passes(&mut io, &io_framing, false);
    let success = transaction(&mut io, &io_framing, 1, 0x44);
    assert!(matches!(
        Message::parse(&success),
        Ok(Message::Success1 { .. })
    ));
    let mut read = SubmissionEntry::read_write(false, 61, 1, 0, 1);
    DataPointer::Transport { len: 512 }.encode(&mut read);
    write_capsule(&mut io, &io_framing, read, &[]);
    let pdu = read_pdu(&mut io, &io_framing, &[pdu_type::C2H_DATA]).expect("the read's data");
    assert_eq!(pdu.data.len(), 512);
    let _ = sagessd_tests::raw_host::response(&mut io, &io_framing);

    // Re-authenticating the I/O queue with a wrong secret: Failure1 "failed", and the queue's
    // connection ends.
    let failure = transaction(&mut io, &io_framing, 2, 0x45);
    assert_eq!(&failure[..2], &[0x00, id::FAILURE1]);
    assert_eq!(failure[7], Explanation::Failed as u8);
    assert_closed(&mut io, "the I/O queue's connection");

    // A wrong secret on a new controller's admin queue: its connection ends too.
    let (mut s, framing, _) = raw_admin(&target);
    let failure = transaction(&mut s, &framing, 0, 0x45);
    assert_eq!(failure[7], Explanation::Failed as u8);
    assert_closed(&mut s, "the admin queue's connection");

    // Out of turn: a Success2 with no transaction is answered with Failure1 "incorrect
    // message".
    let (mut s, framing, _) = raw_admin(&target);
    assert!(auth_send(&mut s, &framing, 40, &success2).is_success());
    let (failure, _) = auth_receive(&mut s, &framing, 41);
    assert_eq!(failure[7], Explanation::IncorrectMessage as u8);

    // A Negotiate with nothing the target chooses from: Failure1 "hash unusable".
    let (mut s, framing, _) = raw_admin(&target);
    let sha512_only = Message::Negotiate {
        t_id: 0,
        sc_c: 0,
        hash_ids: &[3],
        dh_group_ids: &[0, 1],
    };
    assert!(auth_send(&mut s, &framing, 42, &sha512_only.encode()).is_success());
    let (failure, _) = auth_receive(&mut s, &framing, 43);
    assert_eq!(failure[7], Explanation::HashUnusable as u8);

    // A host not allowed is refused at Connect, before any of this.
    let (mut s, framing) = handshake(&target, 0, 0);
    let data = ConnectData::new([7; 16], CNTLID_DYNAMIC, &nqn, "nqn.2026-12.io.example:x");
    let cqe = send(
        &mut s,
        &framing,
        FabricsCommand::connect(1, 0, 31, 0),
        data.as_bytes(),
    );
    assert_eq!(cqe.status(), connect_status::INVALID_HOST);
    target.stop();
}

/// A host that connects and never authenticates keeps its connection only for the set-up
/// timeout, busy or silent: its keep-alive timeout starts to count only once it has.
#[test]
fn a_host_that_never_authenticates_is_closed_after_the_set_up_timeout() {
    let mut hosts = BTreeMap::new();
    hosts.insert(HOST_NQN.to_owned(), raw_host_secrets());
    let options = TargetOptions {
        setup_timeout: std::time::Duration::from_secs(1),
        auth: AuthOptions {
            hosts,
            ..AuthOptions::default()
        },
        ..TargetOptions::default()
    };
    let ssd = Ssd::new(&small_config()).expect("emulator starts");
    let target = Target::start(ssd, "127.0.0.1:0", options).expect("target listens");
    let started = std::time::Instant::now();
    let (mut busy, framing, _) = raw_admin(&target);
    let (mut silent, _, _) = raw_admin(&target);
    let get = |cid| FabricsCommand::property_get(cid, property::CAP, true);
    let mut refused = 0;
    for cid in 100.. {
        write_capsule(&mut busy, &framing, get(cid), &[]);
        match read_pdu(&mut busy, &framing, &[pdu_type::CAPSULE_RESP]) {
            Ok(pdu) => {
                let cqe = pdu.header_as::<CapsuleResp>().expect("a response").cqe;
                assert_eq!(cqe.status(), AUTH_REQUIRED);
                refused += 1;
            }
            Err(_) => break,
        }
        assert!(started.elapsed().as_secs() < 10, "still open after 10 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(refused >= 5, "{refused} commands refused before the close");
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));
    assert_closed(&mut silent, "the silent host's connection");
    target.stop();
}
