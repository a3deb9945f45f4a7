//! Fuzz body `tcp_connection`: an NVMe/TCP host's byte stream into a real target's connection
//! state machine (`sagessd_emulator::nvme_tcp_target`, serving the small test device on loopback), read
//! from the input field by field.
//!
//! Each input gets a fresh target, so a crash replays from its input alone. If the input's first
//! byte asks, the harness first sets up a controller itself on an admin connection (Connect,
//! CC.EN), so that the fuzzed connection can be one of its I/O queues. It does the ICReq
//! handshake with digests and alignment from the input, then sends PDUs it frames
//! itself (lengths, padding and digests right, so the connection gets past framing): Connects
//! for the admin or an I/O queue (the subsystem NQN right or wrong), capsules with raw
//! submission entries and in-capsule data, capsules of commands that move data by R2T/C2HData,
//! H2CData PDUs with any tag, offset and length, TermReqs, and raw bytes (framing errors).
//! A thread reads everything the target answers while the harness writes.
//!
//! Checked, besides "no panic" on any thread of the target: the target answers the handshake;
//! after the host half-closes, the target ends the connection within a bound (no hang); a new
//! connection is served afterwards; and the target stops within its bound.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::thread;

use sagessd_abi::fabrics::{CNTLID_DYNAMIC, ConnectData, DataPointer, FabricsCommand, property};
use sagessd_abi::nvme::SubmissionEntry;
use sagessd_abi::tcp::stream::{read_pdu, write_pdu};
use sagessd_abi::tcp::{CapsuleResp, DataHeader, Framing, TermReq, flags, pdu_type};
use sagessd_emulator::nvme_tcp_target::{Target, TargetOptions};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use super::input::Input;
use crate::raw_host::{HOST_NQN, READ_TIMEOUT, capsule, controller, handshake, in_capsule};

/// Most PDUs one input sends.
const MAX_PDUS: usize = 32;

/// One PDU (or raw bytes) read from `input`, appended to `out`; an I/O queue's Connect names
/// `cntlid` unless the input says otherwise.
fn pdu(input: &mut Input, framing: &Framing, nqn: &str, cntlid: u16, out: &mut Vec<u8>) {
    let sent = match input.u8() % 6 {
        0 => {
            let qid = match input.flag() {
                true => u16::from(input.u8() % 4),
                false => 0,
            };
            let sqsize = input.u16();
            let mut sqe = FabricsCommand::connect(input.u16(), qid, sqsize, input.u32());
            let cntlid = match qid {
                0 => CNTLID_DYNAMIC,
                _ if input.u8() == 0xFF => input.u16(),
                _ => cntlid,
            };
            let subnqn = if input.u8() == 0xFF { "nqn.wrong" } else { nqn };
            let data = ConnectData::new([7; 16], cntlid, subnqn, HOST_NQN);
            sqe = in_capsule(sqe, data.as_bytes().len());
            write_pdu(out, framing, &capsule(sqe), data.as_bytes())
        }
        1 => {
            let mut raw = [0u8; 64];
            let fields = input.bytes(64);
            raw[..fields.len()].copy_from_slice(fields);
            let sqe = SubmissionEntry::read_from_bytes(&raw).expect("64 bytes");
            let len = usize::from(input.u16()) % 9000;
            let data = input.bytes(len).to_vec();
            write_pdu(out, framing, &capsule(sqe), &data)
        }
        2 => {
            // A command whose data moves by the transport (R2T/H2CData or C2HData), or the
            // property writes that enable the controller.
            let mut sqe = match input.u8() % 3 {
                0 => FabricsCommand::property_set(0, property::CC, 0x46_0001, false),
                1 => SubmissionEntry::read_write(
                    input.flag(),
                    0,
                    1,
                    u64::from(input.u16()),
                    u32::from(input.u8() % 64) + 1,
                ),
                _ => {
                    let mut sqe = SubmissionEntry::new(input.u8(), 0, input.u32());
                    sqe.cdw10 = input.u32().into();
                    sqe
                }
            };
            sqe.cid = input.u16().into();
            DataPointer::Transport {
                len: u32::from(input.u16()) * 8,
            }
            .encode(&mut sqe);
            write_pdu(out, framing, &capsule(sqe), &[])
        }
        3 => {
            let mut h = DataHeader::new_zeroed();
            h.ch.pdu_type = pdu_type::H2C_DATA;
            h.ch.flags = if input.flag() { flags::DATA_LAST } else { 0 };
            h.cccid = input.u16().into();
            h.ttag = input.u16().into();
            h.datao = (u32::from(input.u16()) * 4).into();
            let len = usize::from(input.u16()) % 20_000;
            h.datal = match input.u8() {
                0xFF => input.u32(),
                _ => len as u32,
            }
            .into();
            let mut data = input.bytes(len).to_vec();
            data.resize(len, 0);
            write_pdu(out, framing, &h, &data)
        }
        4 => {
            let mut t = TermReq::new_zeroed();
            t.ch.pdu_type = pdu_type::H2C_TERM_REQ;
            t.fes = input.u16().into();
            write_pdu(out, framing, &t, &[])
        }
        _ => {
            let len = usize::from(input.u8());
            out.extend_from_slice(input.bytes(len));
            Ok(())
        }
    };
    sent.expect("a Vec takes every write");
}

/// The target's body (see the module documentation).
pub fn tcp_connection(data: &[u8]) {
    run(data);
}

/// [`tcp_connection`], returning how many of the fuzzed connection's commands completed with
/// success (for tests that check a seed gets where it should).
pub fn run(data: &[u8]) -> u32 {
    let mut input = Input::new(data);
    let ssd = sagessd_emulator::Ssd::new(&crate::small_config()).expect("the small device");
    let options = TargetOptions::default();
    let nqn = options.nqn.clone();
    let target = Target::start(ssd, "127.0.0.1:0", options).expect("the target listens");
    let mode = input.u8();
    let admin = (mode & 0x80 != 0).then(|| controller(&target, 0, 0));
    let cntlid = admin.as_ref().map_or(0, |(_, _, c)| *c);
    let (mut socket, framing) = handshake(&target, mode & 3, (mode >> 2) % 32);
    let mut stream = Vec::new();
    for _ in 0..MAX_PDUS {
        if input.is_empty() {
            break;
        }
        pdu(&mut input, &framing, &nqn, cntlid, &mut stream);
    }
    // Everything the target answers is read meanwhile, so it never waits on this host: PDU by
    // PDU while they parse (counting successful completions), then raw bytes to the end.
    let mut answers = socket.try_clone().expect("a second handle");
    let reading = Framing {
        max_data_bytes: 1 << 24,
        ..framing
    };
    let reader = thread::spawn(move || {
        let all: Vec<u8> = (0..=0xFF).collect();
        let mut succeeded = 0;
        while let Ok(pdu) = read_pdu(&mut answers, &reading, &all) {
            if let Some(resp) = pdu.header_as::<CapsuleResp>()
                && pdu.pdu_type() == pdu_type::CAPSULE_RESP
                && resp.cqe.status().is_success()
            {
                succeeded += 1;
            }
        }
        let mut sink = [0u8; 64 * 1024];
        loop {
            match answers.read(&mut sink) {
                Ok(0) => return Ok(succeeded),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(succeeded),
                Err(e) => return Err(e),
            }
        }
    });
    // The target may close first (a fatal error): the rest of the stream is then refused.
    let _ = socket.write_all(&stream);
    let _ = socket.shutdown(Shutdown::Write);
    let succeeded = reader
        .join()
        .expect("the reader does not panic")
        .unwrap_or_else(|e| {
            panic!("the target neither answered nor closed within {READ_TIMEOUT:?}: {e}")
        });
    drop(socket);
    drop(admin);
    // Still serving: a new connection gets its handshake answered.
    drop(handshake(&target, 0, 0));
    target.stop();
    succeeded
}
