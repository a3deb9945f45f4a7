//! DH-HMAC-CHAP, the host's side: what [`crate::TcpTransport`] runs on a queue whose Connect
//! came back with "authentication required" (NVMe Base Specification 2.0, §8.13.5), as Linux's
//! host runs it: Negotiate (every hash and DH group), Challenge, Reply, Success1, and with a
//! controller secret the controller's answer checked and Success2.

use sagessd_abi::auth::message::{Message, REASON_FAILED};
use sagessd_abi::auth::response::{Fresh, Transaction, matches};
use sagessd_abi::auth::secret::Secret;
use sagessd_abi::auth::{DhGroup, Explanation, HashId};
use sagessd_abi::fabrics::FabricsCommand;

use crate::transport::{Transport, TransportError};

/// The allocation length of every AUTH_Receive (what Linux asks for; the longest message, a
/// Challenge with an ffdhe8192 value, takes 1,104 bytes).
const RECEIVE_BYTES: u32 = 4096;

/// The secrets a host authenticates with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DhchapSecrets {
    /// The host's secret.
    pub host: Secret,
    /// The controller's secret: with it the host makes the controller prove it knows it too.
    pub ctrl: Option<Secret>,
}

/// Who is authenticating to whom, on which queue.
pub(crate) struct Peer<'a> {
    /// The queue.
    pub qid: u16,
    /// The transaction id (one per queue of a controller: 0, 1, ...).
    pub t_id: u16,
    /// The host NQN presented in Connect.
    pub host_nqn: &'a str,
    /// The subsystem NQN.
    pub subsys_nqn: &'a str,
}

/// Runs one DH-HMAC-CHAP transaction on queue `peer.qid` of `transport`.
pub(crate) fn authenticate(
    transport: &mut impl Transport,
    peer: &Peer<'_>,
    secrets: &DhchapSecrets,
) -> Result<(), TransportError> {
    let t_id = peer.t_id;
    let every_hash: Vec<u8> = HashId::ALL.iter().map(|h| *h as u8).collect();
    let every_group: Vec<u8> = DhGroup::ALL.iter().map(|g| *g as u8).collect();
    let negotiate = Message::Negotiate {
        t_id,
        sc_c: 0,
        hash_ids: &every_hash,
        dh_group_ids: &every_group,
    };
    send(transport, peer.qid, &negotiate.encode())?;
    let challenge = receive(transport, peer.qid)?;
    let Message::Challenge {
        hash_id,
        dh_group_id,
        seqnum,
        challenge,
        dh_value,
        ..
    } = expect(&challenge, t_id)?
    else {
        return Err(failed("expected a Challenge"));
    };
    let hash = HashId::from_id(hash_id).filter(|h| h.digest_len() == challenge.len());
    let Some(hash) = hash else {
        return give_up(transport, peer, Explanation::HashUnusable);
    };
    let Some(group) = DhGroup::from_id(dh_group_id) else {
        return give_up(transport, peer, Explanation::DhGroupUnusable);
    };
    // C2 and S2 (sent only with a controller secret), and the host's DH key pair.
    let fresh = Fresh::new(hash, group).map_err(|e| failed(&format!("no random bytes: {e}")))?;
    let shared = match fresh.shared_secret(dh_value) {
        Ok(z) => z,
        Err(why) => return give_up(transport, peer, why),
    };
    let transaction = Transaction {
        hash,
        t_id,
        host_nqn: peer.host_nqn,
        subsys_nqn: peer.subsys_nqn,
        shared_secret: shared.as_deref(),
    };
    let host_key = secrets.host.transformed(peer.host_nqn);
    let r1 = transaction.host_response(&host_key, challenge, seqnum);
    let bidirectional = secrets.ctrl.is_some();
    let reply = Message::Reply {
        t_id,
        response: &r1,
        ctrl_challenge: bidirectional.then_some(&fresh.challenge[..]),
        seqnum: if bidirectional { fresh.seqnum } else { 0 },
        dh_value: fresh.dh_value(),
    };
    send(transport, peer.qid, &reply.encode())?;
    let success = receive(transport, peer.qid)?;
    let Message::Success1 { hl, response, .. } = expect(&success, t_id)? else {
        return Err(failed("expected Success1"));
    };
    if usize::from(hl) != hash.digest_len() {
        return give_up(transport, peer, Explanation::HashUnusable);
    }
    let authenticated = || {
        tracing::info!(
            "queue {}: authenticated with hash {} dhgroup {}{}",
            peer.qid,
            hash.name(),
            group.name(),
            if secrets.ctrl.is_some() {
                ", both ways"
            } else {
                ""
            }
        );
    };
    let Some(ctrl) = &secrets.ctrl else {
        authenticated();
        return Ok(());
    };
    let ctrl_key = ctrl.transformed(peer.subsys_nqn);
    let r2 = transaction.controller_response(&ctrl_key, &fresh.challenge, fresh.seqnum);
    if !response.is_some_and(|r| matches(&r2, r)) {
        // The Failure2 is a courtesy; the error that matters is the controller's.
        let _ = give_up(transport, peer, Explanation::Failed);
        return Err(failed(
            "the controller did not prove it knows the controller secret",
        ));
    }
    send(transport, peer.qid, &Message::Success2 { t_id }.encode())?;
    authenticated();
    Ok(())
}

/// Parses a controller message of this transaction: a Failure1 becomes the error.
fn expect(bytes: &[u8], t_id: u16) -> Result<Message<'_>, TransportError> {
    let message = Message::parse(bytes).map_err(|why| failed(&format!("{why:?} message")))?;
    if let Message::Failure {
        reason,
        explanation,
        ..
    } = message
    {
        return Err(failed(&format!(
            "the controller refused it (Failure1, reason {reason:#04x}, explanation \
             {explanation:#04x}{})",
            if explanation == Explanation::Failed as u8 {
                ": wrong secret"
            } else {
                ""
            }
        )));
    }
    if message.t_id() != t_id {
        return Err(failed("a message of another transaction"));
    }
    Ok(message)
}

/// Tells the controller the host gives up (Failure2), and fails.
fn give_up(
    transport: &mut impl Transport,
    peer: &Peer<'_>,
    why: Explanation,
) -> Result<(), TransportError> {
    let failure = Message::Failure {
        from_controller: false,
        t_id: peer.t_id,
        reason: REASON_FAILED,
        explanation: why as u8,
    };
    send(transport, peer.qid, &failure.encode())?;
    Err(failed(&format!("the host gave up: {why:?}")))
}

fn send(transport: &mut impl Transport, qid: u16, message: &[u8]) -> Result<(), TransportError> {
    let sqe = FabricsCommand::auth_send(0, message.len() as u32);
    let c = transport.execute(qid, sqe, message.to_vec())?;
    check(c.cqe.status(), "AUTH_Send")
}

fn receive(transport: &mut impl Transport, qid: u16) -> Result<Vec<u8>, TransportError> {
    let sqe = FabricsCommand::auth_receive(0, RECEIVE_BYTES);
    let c = transport.execute(qid, sqe, vec![0; RECEIVE_BYTES as usize])?;
    check(c.cqe.status(), "AUTH_Receive")?;
    Ok(c.data)
}

fn check(status: sagessd_abi::nvme::Status, what: &str) -> Result<(), TransportError> {
    if status.is_success() {
        return Ok(());
    }
    Err(failed(&format!(
        "{what} failed: sct {} sc {:#04x}",
        status.sct, status.sc
    )))
}

fn failed(why: &str) -> TransportError {
    TransportError::Device(format!("DH-HMAC-CHAP authentication failed: {why}").into())
}
