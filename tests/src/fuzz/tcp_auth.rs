//! Fuzz body `tcp_auth`: DH-HMAC-CHAP against a real target (`sagessd_emulator::nvme_tcp_target`,
//! serving the small test device on loopback) whose host must authenticate, driven from the
//! input step by step on the admin queue of that host.
//!
//! Each step is one command and its answer: a Negotiate with any transaction id and id lists,
//! a Reply the harness computes from the last Challenge (with the right secret or a wrong one,
//! a byte flipped or not, asking the controller to prove itself or not), a Success2, raw bytes
//! in an AUTH_Send with protocol fields right or wrong, an AUTH_Receive of any length, and a
//! Property Get that only an authenticated queue may serve.
//!
//! Checked, besides "no panic" on any thread of the target: nothing passes the queue before the
//! host proved its secret (sent a Reply the harness made with the right one);
//! a Reply made with a wrong secret or a flipped byte never gets a Success1; every controller
//! message parses; and the target stops within its bound.

use std::collections::BTreeMap;
use std::net::TcpStream;

use sagessd_abi::auth::message::Message;
use sagessd_abi::auth::response::Transaction;
use sagessd_abi::auth::secret::Secret;
use sagessd_abi::auth::{AUTH_REQUIRED, CONNECT_ATR, DhGroup, HashId};
use sagessd_abi::fabrics::{CNTLID_DYNAMIC, ConnectData, DataPointer, FabricsCommand, property};
use sagessd_abi::nvme::{CompletionEntry, SubmissionEntry};
use sagessd_abi::tcp::stream::{read_pdu, write_pdu};
use sagessd_abi::tcp::{CapsuleResp, Framing, pdu_type};
use sagessd_emulator::nvme_tcp_target::auth::{AuthOptions, HostSecrets};
use sagessd_emulator::nvme_tcp_target::{Target, TargetOptions};
use zerocopy::IntoBytes;

use super::input::Input;
use crate::raw_host::{HOST_NQN, capsule, handshake, in_capsule};

/// Most steps one input takes.
const MAX_STEPS: usize = 24;

/// The host's secret on the target.
fn host_secret() -> Secret {
    Secret::new(Some(HashId::Sha256), (0u8..32).collect()).expect("a valid secret")
}

/// The controller's secret on the target.
fn ctrl_secret() -> Secret {
    Secret::new(None, (0x40u8..0x70).collect()).expect("a valid secret")
}

/// The last Challenge the controller sent.
struct Challenged {
    t_id: u16,
    hash: HashId,
    group: DhGroup,
    seqnum: u32,
    challenge: Vec<u8>,
    dh_value: Vec<u8>,
}

/// How far an input got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reached {
    /// Challenges received.
    pub challenges: u32,
    /// Success1 messages received for Replies made with the right secret.
    pub successes: u32,
    /// Failure1 messages received.
    pub failures: u32,
    /// Property Gets served (only after a success).
    pub served: u32,
}

/// The target's body (see the module documentation).
pub fn tcp_auth(data: &[u8]) {
    run(data);
}

/// [`tcp_auth`], returning how far the input got (for tests that check a seed does).
pub fn run(data: &[u8]) -> Reached {
    let mut input = Input::new(data);
    let mode = input.u8();
    let mut hosts = BTreeMap::new();
    hosts.insert(
        HOST_NQN.to_owned(),
        HostSecrets {
            host: host_secret(),
            ctrl: (mode & 2 != 0).then(ctrl_secret),
        },
    );
    let options = TargetOptions {
        auth: AuthOptions {
            hosts,
            hashes: HashId::ALL.to_vec(),
            // ffdhe2048 only when asked: its exponentiations are most of an input's time.
            dh_groups: match mode & 1 {
                0 => vec![DhGroup::Null],
                _ => vec![DhGroup::Ffdhe2048, DhGroup::Null],
            },
        },
        ..TargetOptions::default()
    };
    let nqn = options.nqn.clone();
    let ssd = sagessd_emulator::Ssd::new(&crate::small_config()).expect("the small device");
    let target = Target::start(ssd, "127.0.0.1:0", options).expect("the target listens");
    let (mut s, framing) = handshake(&target, 0, 0);
    let data = ConnectData::new([7; 16], CNTLID_DYNAMIC, &nqn, HOST_NQN);
    let connect = FabricsCommand::connect(1, 0, 31, 0);
    let (_, cqe) = exchange(&mut s, &framing, connect, data.as_bytes()).expect("a Connect");
    assert!(cqe.status().is_success(), "{cqe:?}");
    assert_ne!(
        cqe.result.get() & CONNECT_ATR,
        0,
        "the host must authenticate"
    );

    let mut reached = Reached::default();
    let mut challenged: Option<Challenged> = None;
    // Whether the last Reply sent was made with the right secret, unchanged.
    let mut right_reply = false;
    let mut proven = false;
    for step in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        let cid = step as u16 + 2;
        let sent = match input.u8() % 6 {
            0 => {
                let t_id = input.u16();
                let sc_c = u8::from(input.u8() == 0xFF);
                let n = usize::from(input.u8() % 31);
                let hash_ids = input.bytes(n).to_vec();
                let n = usize::from(input.u8() % 31);
                let groups = input.bytes(n).to_vec();
                let negotiate = Message::Negotiate {
                    t_id,
                    sc_c,
                    hash_ids: &hash_ids,
                    dh_group_ids: &groups,
                };
                right_reply = false;
                auth_send(&mut s, &framing, cid, &negotiate.encode())
            }
            1 => {
                let Some(c) = &challenged else {
                    continue;
                };
                let right_secret = input.u8() != 0xFF;
                let flip = input.u8() == 0xFF;
                let ask_ctrl = input.flag();
                let (reply, right) = reply(c, &nqn, right_secret, flip, ask_ctrl, &mut input);
                right_reply = right;
                // The host has proven it knows the secret once the target has taken the right
                // R1 (it may serve the queue before the host reads Success1).
                proven |= right;
                auth_send(&mut s, &framing, cid, &reply)
            }
            2 => {
                let t_id = challenged.as_ref().map_or(0, |c| c.t_id);
                auth_send(&mut s, &framing, cid, &Message::Success2 { t_id }.encode())
            }
            3 => {
                let len = usize::from(input.u16() % 2048);
                let bytes = input.bytes(len).to_vec();
                let mut sqe = FabricsCommand::auth_send(cid, bytes.len() as u32);
                if input.u8() == 0xFF {
                    sqe.cdw10 = input.u32().into();
                    sqe.cdw11 = input.u32().into();
                }
                let answer = exchange(&mut s, &framing, sqe, &bytes);
                // Taken as a message: whatever the transaction had pending is gone.
                if answer
                    .as_ref()
                    .is_some_and(|(_, c)| c.status().is_success())
                {
                    right_reply = false;
                }
                answer
            }
            4 => {
                let len = match input.u8() {
                    0xFF => u32::from(input.u16()),
                    _ => 4096,
                };
                let mut sqe = FabricsCommand::auth_receive(cid, len);
                DataPointer::Transport { len }.encode(&mut sqe);
                let answer = exchange(&mut s, &framing, sqe, &[]);
                if let Some((message, cqe)) = &answer
                    && cqe.status().is_success()
                {
                    let parsed = Message::parse(message);
                    assert!(
                        parsed.is_ok(),
                        "the controller's message parses: {parsed:?}"
                    );
                    match parsed {
                        Ok(Message::Challenge {
                            t_id,
                            hash_id,
                            dh_group_id,
                            seqnum,
                            challenge,
                            dh_value,
                        }) => {
                            reached.challenges += 1;
                            challenged = Some(Challenged {
                                t_id,
                                hash: HashId::from_id(hash_id).expect("a hash it offered"),
                                group: DhGroup::from_id(dh_group_id).expect("a group it has"),
                                seqnum,
                                challenge: challenge.to_vec(),
                                dh_value: dh_value.to_vec(),
                            });
                        }
                        Ok(Message::Success1 { .. }) => {
                            assert!(right_reply, "Success1 without the right secret");
                            reached.successes += 1;
                        }
                        Ok(Message::Failure { .. }) => {
                            // The target ends the association after it.
                            reached.failures += 1;
                            break;
                        }
                        _ => {}
                    }
                }
                answer
            }
            _ => {
                let get = FabricsCommand::property_get(cid, property::CAP, true);
                let answer = exchange(&mut s, &framing, get, &[]);
                if let Some((_, cqe)) = &answer {
                    let status = cqe.status();
                    if status.is_success() {
                        assert!(proven, "a command passed before the host proved its secret");
                        reached.served += 1;
                    } else if !proven {
                        assert_eq!(status, AUTH_REQUIRED);
                    }
                }
                answer
            }
        };
        // The target ended the association (after a Failure1, or a Failure2 it was sent).
        if sent.is_none() {
            break;
        }
    }
    drop(s);
    target.stop();
    reached
}

/// A Reply to challenge `c` from the host of `nqn`'s subsystem, and whether it is right.
fn reply(
    c: &Challenged,
    nqn: &str,
    right_secret: bool,
    flip: bool,
    ask_ctrl: bool,
    input: &mut Input<'_>,
) -> (Vec<u8>, bool) {
    let keys = sagessd_abi::auth::ffdhe::KeyPair::new(c.group, &[0x33; 32]);
    let shared = keys
        .as_ref()
        .and_then(|k| k.shared_secret(&c.dh_value).ok());
    let transaction = Transaction {
        hash: c.hash,
        t_id: c.t_id,
        host_nqn: HOST_NQN,
        subsys_nqn: nqn,
        shared_secret: shared.as_deref(),
    };
    let secret = match right_secret {
        true => host_secret(),
        false => ctrl_secret(),
    };
    let mut response =
        transaction.host_response(&secret.transformed(HOST_NQN), &c.challenge, c.seqnum);
    if flip {
        let at = usize::from(input.u8()) % response.len();
        response[at] ^= 1 << (input.u8() % 8);
    }
    let c2 = vec![0xC2; c.hash.digest_len()];
    let message = Message::Reply {
        t_id: c.t_id,
        response: &response,
        ctrl_challenge: ask_ctrl.then_some(&c2[..]),
        seqnum: input.u32(),
        dh_value: keys.as_ref().map_or(&[][..], |k| k.public()),
    };
    (message.encode(), right_secret && !flip)
}

fn auth_send(
    s: &mut TcpStream,
    framing: &Framing,
    cid: u16,
    message: &[u8],
) -> Option<(Vec<u8>, CompletionEntry)> {
    let sqe = FabricsCommand::auth_send(cid, message.len() as u32);
    exchange(s, framing, sqe, message)
}

/// Sends `sqe` (with `data` in its capsule) and reads its data and completion; `None` if the
/// target closed the connection.
fn exchange(
    s: &mut TcpStream,
    framing: &Framing,
    sqe: SubmissionEntry,
    data: &[u8],
) -> Option<(Vec<u8>, CompletionEntry)> {
    // The target may have closed the connection; a failed write is that, not a harness error.
    write_pdu(s, framing, &capsule(in_capsule(sqe, data.len())), data).ok()?;
    let mut returned = Vec::new();
    loop {
        let pdu = read_pdu(s, framing, &[pdu_type::C2H_DATA, pdu_type::CAPSULE_RESP]).ok()?;
        if pdu.pdu_type() == pdu_type::C2H_DATA {
            returned.extend_from_slice(&pdu.data);
            continue;
        }
        let cqe = pdu.header_as::<CapsuleResp>()?.cqe;
        return Some((returned, cqe));
    }
}
