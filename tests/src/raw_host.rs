//! A raw NVMe/TCP host for the tests and the `tcp_connection` fuzz body: it frames PDUs itself
//! (`sagessd_abi::tcp::stream`) rather than going through the host driver, so that a test can
//! send what a driver never would and still set up the connections and controllers it needs.

use std::net::TcpStream;
use std::time::Duration;

use sagessd_abi::fabrics::{CNTLID_DYNAMIC, ConnectData, DataPointer, FabricsCommand, property};
use sagessd_abi::nvme::{CompletionEntry, SubmissionEntry};
use sagessd_abi::tcp::stream::{read_pdu, write_pdu};
use sagessd_abi::tcp::{CapsuleCmd, CapsuleResp, Framing, IcReq, IcResp, pdu_type};
use sagessd_emulator::nvme_tcp_target::{Target, TargetOptions};
use zerocopy::{FromZeros, IntoBytes};

/// The host NQN every raw connection gives.
pub const HOST_NQN: &str = "nqn.2026-12.io.sagessd:raw-host";

/// How long a raw connection waits for the target before a read fails: generous, so that only a
/// target that hangs exceeds it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest PDU data this host accepts from the target.
const MAX_DATA_BYTES: usize = 1 << 20;

/// Opens a connection and does the ICReq/ICResp handshake, asking for the digests in `digests`
/// (`sagessd_abi::tcp::digest` bits) and host data alignment `hpda`; returns the connection and
/// its framing: the digests the target granted, data aligned as it asked.
pub fn handshake(target: &Target, digests: u8, hpda: u8) -> (TcpStream, Framing) {
    let mut s = TcpStream::connect(target.local_addr()).expect("the target accepts");
    s.set_read_timeout(Some(READ_TIMEOUT)).expect("a timeout");
    let mut req = IcReq::new_zeroed();
    req.ch.pdu_type = pdu_type::IC_REQ;
    req.hpda = hpda;
    req.digest = digests;
    write_pdu(&mut s, &Framing::INITIAL, &req, &[]).expect("ICReq sent");
    let pdu = read_pdu(&mut s, &Framing::INITIAL, &[pdu_type::IC_RESP]).expect("an ICResp");
    let resp: IcResp = pdu.header_as().expect("an ICResp header");
    let framing = Framing {
        header_digest: resp.digest & sagessd_abi::tcp::digest::HEADER != 0,
        data_digest: resp.digest & sagessd_abi::tcp::digest::DATA != 0,
        max_data_bytes: MAX_DATA_BYTES,
        data_alignment_bytes: (usize::from(resp.cpda) + 1) * 4,
    };
    (s, framing)
}

/// A command capsule carrying `sqe` as it is (its data pointer untouched).
pub fn capsule(sqe: SubmissionEntry) -> CapsuleCmd {
    let mut c = CapsuleCmd::new_zeroed();
    c.ch.pdu_type = pdu_type::CAPSULE_CMD;
    c.sqe = sqe;
    c
}

/// `sqe` with its data pointer saying `data_len` bytes of in-capsule data (none: unchanged).
pub fn in_capsule(mut sqe: SubmissionEntry, data_len: usize) -> SubmissionEntry {
    if data_len > 0 {
        DataPointer::InCapsule {
            offset: 0,
            len: u32::try_from(data_len).expect("in-capsule data fits a u32"),
        }
        .encode(&mut sqe);
    }
    sqe
}

/// Sends `sqe` with `data` in its capsule.
pub fn write_capsule(s: &mut TcpStream, framing: &Framing, sqe: SubmissionEntry, data: &[u8]) {
    let cmd = capsule(in_capsule(sqe, data.len()));
    write_pdu(s, framing, &cmd, data).expect("a capsule sent");
}

/// Reads the next response capsule's completion.
pub fn response(s: &mut TcpStream, framing: &Framing) -> CompletionEntry {
    let pdu = read_pdu(s, framing, &[pdu_type::CAPSULE_RESP]).expect("a response");
    pdu.header_as::<CapsuleResp>()
        .expect("a response capsule")
        .cqe
}

/// Sends `sqe` with `data` in its capsule and reads its completion.
pub fn send(
    s: &mut TcpStream,
    framing: &Framing,
    sqe: SubmissionEntry,
    data: &[u8],
) -> CompletionEntry {
    write_capsule(s, framing, sqe, data);
    response(s, framing)
}

/// Sends `sqe` with `data` in its capsule; it must succeed. Returns its result dword.
fn setup(s: &mut TcpStream, framing: &Framing, sqe: SubmissionEntry, data: &[u8]) -> u32 {
    let cqe = send(s, framing, sqe, data);
    assert!(cqe.status().is_success(), "setup command failed: {cqe:?}");
    cqe.result.get()
}

/// A new controller of the target's default subsystem, enabled (CC.EN), with keep-alive
/// timeout `kato_ms`: its admin connection (digests as in [`handshake`]), that connection's
/// framing and the controller id.
pub fn controller(target: &Target, digests: u8, kato_ms: u32) -> (TcpStream, Framing, u16) {
    let (mut s, framing) = handshake(target, digests, 0);
    let nqn = TargetOptions::default().nqn;
    let data = ConnectData::new([7; 16], CNTLID_DYNAMIC, &nqn, HOST_NQN);
    let connect = FabricsCommand::connect(1, 0, 31, kato_ms);
    let cntlid = setup(&mut s, &framing, connect, data.as_bytes()) as u16;
    let enable = FabricsCommand::property_set(2, property::CC, 0x46_0001, false);
    setup(&mut s, &framing, enable, &[]);
    (s, framing, cntlid)
}

/// I/O queue `qid` (128 entries, no digests) of controller `cntlid`, connected.
pub fn io_queue(target: &Target, cntlid: u16, qid: u16) -> TcpStream {
    let (mut s, framing) = handshake(target, 0, 0);
    let nqn = TargetOptions::default().nqn;
    let data = ConnectData::new([7; 16], cntlid, &nqn, HOST_NQN);
    setup(
        &mut s,
        &framing,
        FabricsCommand::connect(1, qid, 127, 0),
        data.as_bytes(),
    );
    s
}
