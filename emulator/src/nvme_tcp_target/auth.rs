//! DH-HMAC-CHAP on one queue, the controller's side: what the target asks of a host that has a
//! secret, and the transaction that proves it (NVMe Base Specification 2.0, §8.13.5).
//!
//! ```plain
//!   host                                   controller (this)
//!   AUTH_Send    Negotiate (hashes, groups) ─►  choose a hash and a group
//!   AUTH_Receive                            ◄─  Challenge (C1, S1, DH value)
//!   AUTH_Send    Reply (R1, [C2, S2], DH)   ─►  check R1 (Failure1 if wrong)
//!   AUTH_Receive                            ◄─  Success1 ([R2])
//!   AUTH_Send    Success2 (bidirectional)   ─►  authenticated
//! ```
//!
//! Until its transaction succeeds a queue serves nothing but AUTH_Send, AUTH_Receive and
//! Disconnect; every other command gets Authentication Required. A message out of turn or
//! malformed ends the transaction with a Failure1 naming why, as does a wrong response; the
//! host may then start a new transaction on the same queue.

use std::collections::BTreeMap;

use sagessd_abi::auth::message::{Message, REASON_FAILED};
use sagessd_abi::auth::response::{Fresh, Transaction, matches};
use sagessd_abi::auth::secret::Secret;
use sagessd_abi::auth::{DhGroup, Explanation, HashId};
use sagessd_abi::nvme::Status;

/// The secrets one host authenticates with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSecrets {
    /// The host's secret: the host proves it knows it.
    pub host: Secret,
    /// The controller's secret, for bidirectional authentication: the controller proves it
    /// knows it when the host asks (a host configured with it always asks).
    pub ctrl: Option<Secret>,
}

/// Which hosts must authenticate, and with what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthOptions {
    /// Per host NQN, its secrets; a host not named here connects without authenticating
    /// (whether it may connect at all is [`super::TargetOptions::hosts`]'s decision).
    pub hosts: BTreeMap<String, HostSecrets>,
    /// Hash functions the controller chooses from, best first: the first the host offers.
    pub hashes: Vec<HashId>,
    /// DH groups the controller chooses from, best first: the first the host offers.
    pub dh_groups: Vec<DhGroup>,
}

impl Default for AuthOptions {
    /// No host authenticates; when one is added, SHA-256 and ffdhe2048 first (what every Linux
    /// host offers), then the others.
    fn default() -> Self {
        Self {
            hosts: BTreeMap::new(),
            hashes: HashId::ALL.to_vec(),
            dh_groups: vec![
                DhGroup::Ffdhe2048,
                DhGroup::Ffdhe3072,
                DhGroup::Ffdhe4096,
                DhGroup::Ffdhe6144,
                DhGroup::Ffdhe8192,
                DhGroup::Null,
            ],
        }
    }
}

/// Where a queue's transaction stands.
enum Step {
    /// Waiting for a Negotiate.
    Idle,
    /// Negotiated: the next AUTH_Receive gets the Challenge.
    Challenge(Chosen),
    /// The Challenge went out: waiting for the Reply.
    Reply(Chosen, Fresh),
    /// The Reply was right: the next AUTH_Receive gets Success1 (with R2 if asked for).
    Success1(Chosen, Option<Vec<u8>>),
    /// Success1 with R2 went out: waiting for the host's Success2.
    Success2(Chosen),
    /// The next AUTH_Receive gets a Failure1 saying why.
    Failure1 { t_id: u16, why: Explanation },
}

/// What a transaction negotiated.
#[derive(Clone, Copy)]
struct Chosen {
    t_id: u16,
    hash: HashId,
    group: DhGroup,
}

/// What became of a message the host sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sent {
    /// The transaction goes on.
    Accepted,
    /// The transaction has succeeded: the queue is authenticated.
    Authenticated,
    /// The host's response was wrong, or its message unusable: a Failure1 is next.
    Refused(Explanation),
    /// The host gave up (Failure2) with this explanation.
    HostFailed(u8),
}

/// DH-HMAC-CHAP state of one queue whose host has a secret.
pub(super) struct QueueAuth {
    /// The host's secret, transformed with its NQN: what R1 is keyed with.
    host_key: Vec<u8>,
    /// The controller's secret, transformed with the subsystem NQN: what R2 is keyed with.
    ctrl_key: Option<Vec<u8>>,
    hashes: Vec<HashId>,
    dh_groups: Vec<DhGroup>,
    host_nqn: String,
    subsys_nqn: String,
    step: Step,
    authenticated: bool,
}

impl QueueAuth {
    /// A queue of host `host_nqn` on subsystem `subsys_nqn` that must authenticate with
    /// `secrets`.
    pub(super) fn new(
        secrets: &HostSecrets,
        options: &AuthOptions,
        host_nqn: &str,
        subsys_nqn: &str,
    ) -> Self {
        Self {
            host_key: secrets.host.transformed(host_nqn),
            ctrl_key: secrets.ctrl.as_ref().map(|k| k.transformed(subsys_nqn)),
            hashes: options.hashes.clone(),
            dh_groups: options.dh_groups.clone(),
            host_nqn: host_nqn.to_owned(),
            subsys_nqn: subsys_nqn.to_owned(),
            step: Step::Idle,
            authenticated: false,
        }
    }

    /// The host NQN it authenticates.
    pub(super) fn host_nqn(&self) -> &str {
        &self.host_nqn
    }

    /// Whether the queue has authenticated (and may serve other commands).
    pub(super) fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// An AUTH_Send's message.
    pub(super) fn send(&mut self, bytes: &[u8]) -> Sent {
        let message = match Message::parse(bytes) {
            Ok(m) => m,
            Err(why) => return self.refuse(t_id_of(bytes), why),
        };
        let t_id = message.t_id();
        match (std::mem::replace(&mut self.step, Step::Idle), message) {
            // A Negotiate starts a transaction whatever the step (a host may re-authenticate,
            // or start over after a failure).
            (
                _,
                Message::Negotiate {
                    sc_c,
                    hash_ids,
                    dh_group_ids,
                    ..
                },
            ) => {
                if sc_c != 0 {
                    return self.refuse(t_id, Explanation::ConcatMismatch);
                }
                let Some(hash) = first_offered(&self.hashes, hash_ids, |h| *h as u8) else {
                    return self.refuse(t_id, Explanation::HashUnusable);
                };
                let Some(group) = first_offered(&self.dh_groups, dh_group_ids, |g| *g as u8) else {
                    return self.refuse(t_id, Explanation::DhGroupUnusable);
                };
                self.step = Step::Challenge(Chosen { t_id, hash, group });
                Sent::Accepted
            }
            (_, Message::Failure { explanation, .. }) => {
                self.authenticated = false;
                Sent::HostFailed(explanation)
            }
            (
                Step::Reply(chosen, challenged),
                Message::Reply {
                    response,
                    ctrl_challenge,
                    seqnum,
                    dh_value,
                    ..
                },
            ) if t_id == chosen.t_id => self.reply(
                chosen,
                challenged,
                response,
                ctrl_challenge.map(|c| (c, seqnum)),
                dh_value,
            ),
            (Step::Success2(chosen), Message::Success2 { .. }) if t_id == chosen.t_id => {
                self.authenticated = true;
                Sent::Authenticated
            }
            _ => self.refuse(t_id, Explanation::IncorrectMessage),
        }
    }

    /// Checks the host's Reply against the challenge.
    fn reply(
        &mut self,
        chosen: Chosen,
        challenged: Fresh,
        response: &[u8],
        ctrl_challenge: Option<(&[u8], u32)>,
        dh_value: &[u8],
    ) -> Sent {
        let shared = match challenged.shared_secret(dh_value) {
            Ok(z) => z,
            Err(why) => return self.refuse(chosen.t_id, why),
        };
        let transaction = Transaction {
            hash: chosen.hash,
            t_id: chosen.t_id,
            host_nqn: &self.host_nqn,
            subsys_nqn: &self.subsys_nqn,
            shared_secret: shared.as_deref(),
        };
        let expected =
            transaction.host_response(&self.host_key, &challenged.challenge, challenged.seqnum);
        if !matches(&expected, response) {
            return self.refuse(chosen.t_id, Explanation::Failed);
        }
        let Some((c2, s2)) = ctrl_challenge else {
            self.step = Step::Success1(chosen, None);
            self.authenticated = true;
            return Sent::Authenticated;
        };
        // Asked to prove itself without a controller secret: the host cannot be answered.
        let Some(ctrl_key) = &self.ctrl_key else {
            return self.refuse(chosen.t_id, Explanation::NotUsable);
        };
        if c2.len() != chosen.hash.digest_len() {
            return self.refuse(chosen.t_id, Explanation::IncorrectPayload);
        }
        let r2 = transaction.controller_response(ctrl_key, c2, s2);
        self.step = Step::Success1(chosen, Some(r2));
        Sent::Accepted
    }

    /// An AUTH_Receive of up to `len` bytes: the controller's next message, zero-padded to
    /// `len` (as Linux's target sends it), and whether it is a Failure1; or a status if no
    /// message is due or it does not fit.
    pub(super) fn receive(&mut self, len: usize) -> Result<(Vec<u8>, bool), Status> {
        let failure = matches!(self.step, Step::Failure1 { .. });
        let (message, next) = match &self.step {
            Step::Challenge(chosen) => {
                let fresh = match Fresh::new(chosen.hash, chosen.group) {
                    Ok(fresh) => fresh,
                    Err(e) => {
                        tracing::error!("no random bytes for a DH-HMAC-CHAP challenge: {e}");
                        return Err(Status::INTERNAL_ERROR);
                    }
                };
                let message = Message::Challenge {
                    t_id: chosen.t_id,
                    hash_id: chosen.hash as u8,
                    dh_group_id: chosen.group as u8,
                    seqnum: fresh.seqnum,
                    challenge: &fresh.challenge,
                    dh_value: fresh.dh_value(),
                }
                .encode();
                (message, Step::Reply(*chosen, fresh))
            }
            Step::Success1(chosen, r2) => {
                let message = Message::Success1 {
                    t_id: chosen.t_id,
                    hl: chosen.hash.digest_len() as u8,
                    response: r2.as_deref(),
                }
                .encode();
                let next = match r2 {
                    Some(_) => Step::Success2(*chosen),
                    None => Step::Idle,
                };
                (message, next)
            }
            Step::Failure1 { t_id, why } => {
                let message = Message::Failure {
                    from_controller: true,
                    t_id: *t_id,
                    reason: REASON_FAILED,
                    explanation: *why as u8,
                }
                .encode();
                (message, Step::Idle)
            }
            _ => return Err(Status::COMMAND_SEQUENCE_ERROR),
        };
        if message.len() > len {
            // Not taken: the host may ask again with room for it.
            return Err(Status::INVALID_FIELD);
        }
        self.step = next;
        let mut padded = message;
        padded.resize(len, 0);
        Ok((padded, failure))
    }

    /// Ends the transaction: the next AUTH_Receive gets a Failure1 saying `why`, and the queue
    /// is no longer authenticated.
    fn refuse(&mut self, t_id: u16, why: Explanation) -> Sent {
        self.authenticated = false;
        self.step = Step::Failure1 { t_id, why };
        Sent::Refused(why)
    }
}

/// The first of `preferred` (the controller's order) whose id is in `offered`.
fn first_offered<T: Copy>(preferred: &[T], offered: &[u8], id: impl Fn(&T) -> u8) -> Option<T> {
    preferred.iter().copied().find(|p| offered.contains(&id(p)))
}

/// The transaction id of a message that did not parse, if it is long enough to have one.
fn t_id_of(bytes: &[u8]) -> u16 {
    bytes
        .get(4..6)
        .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]))
}
