//! The messages of a DH-HMAC-CHAP transaction, as AUTH_Send and AUTH_Receive carry them (NVMe
//! Base Specification 2.0, §8.13.5): wire headers with layout asserts, a parser that never
//! panics (a bad message becomes the [`Explanation`] a Failure message names), and, with `std`,
//! the encoders both peers use.
//!
//! Every message starts with a [`Head`]: `auth_type` and `auth_id`, then reserved bytes and the
//! transaction id (`t_id`) the host chose in its Negotiate, which every later message echoes.

use core::mem::{offset_of, size_of};
use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::{Explanation, MAX_ID_LIST};

/// `auth_type` of the messages common to every protocol (Negotiate, Failure1, Failure2).
pub const TYPE_COMMON: u8 = 0x00;
/// `auth_type` of the DH-HMAC-CHAP messages.
pub const TYPE_DHCHAP: u8 = 0x01;

/// `auth_id` values.
pub mod id {
    /// AUTH_Negotiate (host to controller).
    pub const NEGOTIATE: u8 = 0x00;
    /// DH-HMAC-CHAP_Challenge (controller to host).
    pub const CHALLENGE: u8 = 0x01;
    /// DH-HMAC-CHAP_Reply (host to controller).
    pub const REPLY: u8 = 0x02;
    /// DH-HMAC-CHAP_Success1 (controller to host).
    pub const SUCCESS1: u8 = 0x03;
    /// DH-HMAC-CHAP_Success2 (host to controller).
    pub const SUCCESS2: u8 = 0x04;
    /// AUTH_Failure2 (host to controller).
    pub const FAILURE2: u8 = 0xF0;
    /// AUTH_Failure1 (controller to host).
    pub const FAILURE1: u8 = 0xF1;
}

/// Authentication protocol identifier of DH-HMAC-CHAP in a Negotiate's descriptor.
pub const PROTOCOL_DHCHAP: u8 = 0x01;
/// The reason code of every Failure message ("authentication failed"); the explanation says why.
pub const REASON_FAILED: u8 = 0x01;

/// The 6 bytes every message starts with.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
pub struct Head {
    /// [`TYPE_COMMON`] or [`TYPE_DHCHAP`].
    pub auth_type: u8,
    /// Which message ([`id`]).
    pub auth_id: u8,
    /// Reserved.
    pub reserved: [u8; 2],
    /// Transaction id.
    pub t_id: U16,
}

impl Head {
    /// The head of message `auth_id` of type `auth_type` in transaction `t_id`.
    pub fn new(auth_type: u8, auth_id: u8, t_id: u16) -> Self {
        Self {
            auth_type,
            auth_id,
            reserved: [0; 2],
            t_id: t_id.into(),
        }
    }
}

/// The 8-byte head of an AUTH_Negotiate; `napd` [`ProtocolDescriptor`]s follow.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
pub struct NegotiateHeader {
    /// `auth_type` [`TYPE_COMMON`], `auth_id` [`id::NEGOTIATE`]; the transaction id.
    pub head: Head,
    /// Secure channel concatenation (TLS); 0 on a plain connection.
    pub sc_c: u8,
    /// Number of protocol descriptors that follow.
    pub napd: u8,
}

/// One authentication protocol the host offers (64 bytes): for DH-HMAC-CHAP, its hash
/// functions and Diffie-Hellman groups, in the host's order of preference.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
pub struct ProtocolDescriptor {
    /// [`PROTOCOL_DHCHAP`].
    pub auth_id: u8,
    /// Reserved.
    pub reserved: u8,
    /// Number of hash ids, at most [`MAX_ID_LIST`].
    pub halen: u8,
    /// Number of DH group ids, at most [`MAX_ID_LIST`].
    pub dhlen: u8,
    /// Hash ids (first `halen` used).
    pub hash_ids: [u8; MAX_ID_LIST],
    /// DH group ids (first `dhlen` used).
    pub dh_group_ids: [u8; MAX_ID_LIST],
}

/// The 16-byte head of a DH-HMAC-CHAP_Challenge; the challenge (`hl` bytes) and the
/// controller's DH value (`dhvlen` bytes) follow.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
pub struct ChallengeHeader {
    /// `auth_type` [`TYPE_DHCHAP`], `auth_id` [`id::CHALLENGE`]; the transaction id.
    pub head: Head,
    /// Hash length: the digest length of `hash_id`.
    pub hl: u8,
    /// Reserved.
    pub reserved2: u8,
    /// The hash function chosen.
    pub hash_id: u8,
    /// The DH group chosen (0: none).
    pub dh_group_id: u8,
    /// Length of the DH value (0 without a group).
    pub dhvlen: U16,
    /// Sequence number S1.
    pub seqnum: U32,
}

/// The 16-byte head of a DH-HMAC-CHAP_Reply; the response R1, the controller challenge C2 (both
/// `hl` bytes; C2 zero unless `cvalid`) and the host's DH value follow.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
pub struct ReplyHeader {
    /// `auth_type` [`TYPE_DHCHAP`], `auth_id` [`id::REPLY`]; the transaction id.
    pub head: Head,
    /// Hash length.
    pub hl: u8,
    /// Reserved.
    pub reserved2: u8,
    /// 1: C2 is a challenge the controller must answer (bidirectional authentication).
    pub cvalid: u8,
    /// Reserved.
    pub reserved3: u8,
    /// Length of the host's DH value.
    pub dhvlen: U16,
    /// Sequence number S2 (0 without a controller challenge).
    pub seqnum: U32,
}

/// The 16-byte head of a DH-HMAC-CHAP_Success1; the controller's response R2 (`hl` bytes)
/// follows when `rvalid`.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
pub struct Success1Header {
    /// `auth_type` [`TYPE_DHCHAP`], `auth_id` [`id::SUCCESS1`]; the transaction id.
    pub head: Head,
    /// Hash length (set even without R2: Linux hosts check it).
    pub hl: u8,
    /// Reserved.
    pub reserved2: u8,
    /// 1: R2 follows.
    pub rvalid: u8,
    /// Reserved.
    pub reserved3: [u8; 7],
}

/// A DH-HMAC-CHAP_Success2 (16 bytes): the host accepted the controller's response.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
pub struct Success2 {
    /// `auth_type` [`TYPE_DHCHAP`], `auth_id` [`id::SUCCESS2`]; the transaction id.
    pub head: Head,
    /// Reserved.
    pub reserved2: [u8; 10],
}

/// An AUTH_Failure1 or AUTH_Failure2 (8 bytes).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
pub struct Failure {
    /// `auth_type` [`TYPE_COMMON`], `auth_id` [`id::FAILURE1`] or [`id::FAILURE2`]; the
    /// transaction id.
    pub head: Head,
    /// [`REASON_FAILED`].
    pub reason: u8,
    /// Why ([`Explanation`]).
    pub explanation: u8,
}

const _: () = {
    assert!(size_of::<Head>() == 6);
    assert!(offset_of!(Head, t_id) == 4);
    assert!(size_of::<NegotiateHeader>() == 8);
    assert!(offset_of!(NegotiateHeader, sc_c) == 6);
    assert!(offset_of!(NegotiateHeader, napd) == 7);
    assert!(size_of::<ProtocolDescriptor>() == 64);
    assert!(offset_of!(ProtocolDescriptor, hash_ids) == 4);
    assert!(offset_of!(ProtocolDescriptor, dh_group_ids) == 34);
    assert!(size_of::<ChallengeHeader>() == 16);
    assert!(offset_of!(ChallengeHeader, hl) == 6);
    assert!(offset_of!(ChallengeHeader, hash_id) == 8);
    assert!(offset_of!(ChallengeHeader, dhvlen) == 10);
    assert!(offset_of!(ChallengeHeader, seqnum) == 12);
    assert!(size_of::<ReplyHeader>() == 16);
    assert!(offset_of!(ReplyHeader, cvalid) == 8);
    assert!(offset_of!(ReplyHeader, dhvlen) == 10);
    assert!(offset_of!(ReplyHeader, seqnum) == 12);
    assert!(size_of::<Success1Header>() == 16);
    assert!(offset_of!(Success1Header, rvalid) == 8);
    assert!(size_of::<Success2>() == 16);
    assert!(size_of::<Failure>() == 8);
    assert!(offset_of!(Failure, reason) == 6);
};

/// A parsed message, borrowing its variable parts from the payload. Ids are kept as sent: which
/// of them are supported is the receiver's decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// AUTH_Negotiate: the host's DH-HMAC-CHAP hash and DH group ids.
    Negotiate {
        /// Transaction id.
        t_id: u16,
        /// Secure channel concatenation asked for.
        sc_c: u8,
        /// Hash ids offered.
        hash_ids: &'a [u8],
        /// DH group ids offered.
        dh_group_ids: &'a [u8],
    },
    /// DH-HMAC-CHAP_Challenge.
    Challenge {
        /// Transaction id.
        t_id: u16,
        /// The hash function chosen.
        hash_id: u8,
        /// The DH group chosen.
        dh_group_id: u8,
        /// S1.
        seqnum: u32,
        /// C1.
        challenge: &'a [u8],
        /// The controller's DH value (empty without a group).
        dh_value: &'a [u8],
    },
    /// DH-HMAC-CHAP_Reply.
    Reply {
        /// Transaction id.
        t_id: u16,
        /// R1.
        response: &'a [u8],
        /// C2, when the host asks the controller to authenticate itself.
        ctrl_challenge: Option<&'a [u8]>,
        /// S2.
        seqnum: u32,
        /// The host's DH value (empty without a group).
        dh_value: &'a [u8],
    },
    /// DH-HMAC-CHAP_Success1.
    Success1 {
        /// Transaction id.
        t_id: u16,
        /// Its hash length.
        hl: u8,
        /// R2, when the host asked for it.
        response: Option<&'a [u8]>,
    },
    /// DH-HMAC-CHAP_Success2.
    Success2 {
        /// Transaction id.
        t_id: u16,
    },
    /// AUTH_Failure1 (from the controller) or AUTH_Failure2 (from the host).
    Failure {
        /// Sent by the controller (Failure1), otherwise by the host (Failure2).
        from_controller: bool,
        /// Transaction id.
        t_id: u16,
        /// Reason code.
        reason: u8,
        /// Reason code explanation.
        explanation: u8,
    },
}

impl<'a> Message<'a> {
    /// Parses one message. Bytes after it are ignored (AUTH_Receive pads to the length the host
    /// asked for). Never panics.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Explanation> {
        let (&auth_type, rest) = bytes.split_first().ok_or(Explanation::IncorrectPayload)?;
        let &auth_id = rest.first().ok_or(Explanation::IncorrectPayload)?;
        // Each message is read with its own header, whose first bytes are the Head.
        match (auth_type, auth_id) {
            (TYPE_COMMON, id::NEGOTIATE) => Self::negotiate(bytes),
            (TYPE_COMMON, id::FAILURE1 | id::FAILURE2) => {
                let (f, _) = Failure::read_from_prefix(bytes).map_err(|_| short())?;
                Ok(Self::Failure {
                    from_controller: auth_id == id::FAILURE1,
                    t_id: f.head.t_id.get(),
                    reason: f.reason,
                    explanation: f.explanation,
                })
            }
            (TYPE_DHCHAP, id::CHALLENGE) => {
                let (h, tail) = ChallengeHeader::read_from_prefix(bytes).map_err(|_| short())?;
                let (challenge, tail) = take(tail, usize::from(h.hl))?;
                let (dh_value, _) = take(tail, usize::from(h.dhvlen.get()))?;
                Ok(Self::Challenge {
                    t_id: h.head.t_id.get(),
                    hash_id: h.hash_id,
                    dh_group_id: h.dh_group_id,
                    seqnum: h.seqnum.get(),
                    challenge,
                    dh_value,
                })
            }
            (TYPE_DHCHAP, id::REPLY) => {
                let (h, tail) = ReplyHeader::read_from_prefix(bytes).map_err(|_| short())?;
                let (response, tail) = take(tail, usize::from(h.hl))?;
                let (ctrl_challenge, tail) = take(tail, usize::from(h.hl))?;
                let (dh_value, _) = take(tail, usize::from(h.dhvlen.get()))?;
                Ok(Self::Reply {
                    t_id: h.head.t_id.get(),
                    response,
                    ctrl_challenge: (h.cvalid != 0).then_some(ctrl_challenge),
                    seqnum: h.seqnum.get(),
                    dh_value,
                })
            }
            (TYPE_DHCHAP, id::SUCCESS1) => {
                let (h, tail) = Success1Header::read_from_prefix(bytes).map_err(|_| short())?;
                let response = match h.rvalid {
                    0 => None,
                    _ => Some(take(tail, usize::from(h.hl))?.0),
                };
                Ok(Self::Success1 {
                    t_id: h.head.t_id.get(),
                    hl: h.hl,
                    response,
                })
            }
            (TYPE_DHCHAP, id::SUCCESS2) => {
                let (h, _) = Success2::read_from_prefix(bytes).map_err(|_| short())?;
                Ok(Self::Success2 {
                    t_id: h.head.t_id.get(),
                })
            }
            _ => Err(Explanation::IncorrectMessage),
        }
    }

    fn negotiate(bytes: &'a [u8]) -> Result<Self, Explanation> {
        let (h, tail) = NegotiateHeader::read_from_prefix(bytes).map_err(|_| short())?;
        // One descriptor, DH-HMAC-CHAP's: the only protocol there is.
        if h.napd != 1 {
            return Err(Explanation::NotUsable);
        }
        let (d, _) = ProtocolDescriptor::ref_from_prefix(tail).map_err(|_| short())?;
        if d.auth_id != PROTOCOL_DHCHAP {
            return Err(Explanation::NotUsable);
        }
        let hash_ids = d.hash_ids.get(..usize::from(d.halen));
        let dh_group_ids = d.dh_group_ids.get(..usize::from(d.dhlen));
        let (Some(hash_ids), Some(dh_group_ids)) = (hash_ids, dh_group_ids) else {
            return Err(Explanation::IncorrectPayload);
        };
        Ok(Self::Negotiate {
            t_id: h.head.t_id.get(),
            sc_c: h.sc_c,
            hash_ids,
            dh_group_ids,
        })
    }

    /// The transaction id the message carries.
    pub fn t_id(&self) -> u16 {
        match *self {
            Self::Negotiate { t_id, .. }
            | Self::Challenge { t_id, .. }
            | Self::Reply { t_id, .. }
            | Self::Success1 { t_id, .. }
            | Self::Success2 { t_id }
            | Self::Failure { t_id, .. } => t_id,
        }
    }
}

fn short() -> Explanation {
    Explanation::IncorrectPayload
}

/// Splits `n` bytes off the front of `bytes`, or fails as a message too short for its lengths.
fn take(bytes: &[u8], n: usize) -> Result<(&[u8], &[u8]), Explanation> {
    bytes
        .split_at_checked(n)
        .ok_or(Explanation::IncorrectPayload)
}

#[cfg(any(test, feature = "std"))]
mod encode {
    use std::vec::Vec;

    use zerocopy::IntoBytes;

    use super::*;

    impl Message<'_> {
        /// The message's bytes, as the peer's [`Message::parse`] reads them. Lengths past their
        /// fields' widths (a challenge over 255 bytes, a DH value over 65,535) are the caller's
        /// error and are truncated to the field.
        pub fn encode(&self) -> Vec<u8> {
            let mut out = Vec::new();
            match *self {
                Self::Negotiate {
                    t_id,
                    sc_c,
                    hash_ids,
                    dh_group_ids,
                } => {
                    let header = NegotiateHeader {
                        head: Head::new(TYPE_COMMON, id::NEGOTIATE, t_id),
                        sc_c,
                        napd: 1,
                    };
                    let mut d = ProtocolDescriptor {
                        auth_id: PROTOCOL_DHCHAP,
                        reserved: 0,
                        halen: hash_ids.len().min(MAX_ID_LIST) as u8,
                        dhlen: dh_group_ids.len().min(MAX_ID_LIST) as u8,
                        hash_ids: [0; MAX_ID_LIST],
                        dh_group_ids: [0; MAX_ID_LIST],
                    };
                    d.hash_ids[..usize::from(d.halen)]
                        .copy_from_slice(&hash_ids[..usize::from(d.halen)]);
                    d.dh_group_ids[..usize::from(d.dhlen)]
                        .copy_from_slice(&dh_group_ids[..usize::from(d.dhlen)]);
                    out.extend_from_slice(header.as_bytes());
                    out.extend_from_slice(d.as_bytes());
                }
                Self::Challenge {
                    t_id,
                    hash_id,
                    dh_group_id,
                    seqnum,
                    challenge,
                    dh_value,
                } => {
                    let header = ChallengeHeader {
                        head: Head::new(TYPE_DHCHAP, id::CHALLENGE, t_id),
                        hl: challenge.len() as u8,
                        hash_id,
                        dh_group_id,
                        dhvlen: (dh_value.len() as u16).into(),
                        seqnum: seqnum.into(),
                        ..Default::default()
                    };
                    out.extend_from_slice(header.as_bytes());
                    out.extend_from_slice(challenge);
                    out.extend_from_slice(dh_value);
                }
                Self::Reply {
                    t_id,
                    response,
                    ctrl_challenge,
                    seqnum,
                    dh_value,
                } => {
                    let header = ReplyHeader {
                        head: Head::new(TYPE_DHCHAP, id::REPLY, t_id),
                        hl: response.len() as u8,
                        cvalid: u8::from(ctrl_challenge.is_some()),
                        dhvlen: (dh_value.len() as u16).into(),
                        seqnum: seqnum.into(),
                        ..Default::default()
                    };
                    out.extend_from_slice(header.as_bytes());
                    out.extend_from_slice(response);
                    // The C2 slot is there (zero) even without a controller challenge.
                    match ctrl_challenge {
                        Some(c) => out.extend_from_slice(c),
                        None => out.resize(out.len() + response.len(), 0),
                    }
                    out.extend_from_slice(dh_value);
                }
                Self::Success1 { t_id, hl, response } => {
                    let header = Success1Header {
                        head: Head::new(TYPE_DHCHAP, id::SUCCESS1, t_id),
                        hl,
                        rvalid: u8::from(response.is_some()),
                        ..Default::default()
                    };
                    out.extend_from_slice(header.as_bytes());
                    out.extend_from_slice(response.unwrap_or_default());
                }
                Self::Success2 { t_id } => {
                    let message = Success2 {
                        head: Head::new(TYPE_DHCHAP, id::SUCCESS2, t_id),
                        ..Default::default()
                    };
                    out.extend_from_slice(message.as_bytes());
                }
                Self::Failure {
                    from_controller,
                    t_id,
                    reason,
                    explanation,
                } => {
                    let failure_id = match from_controller {
                        true => id::FAILURE1,
                        false => id::FAILURE2,
                    };
                    let message = Failure {
                        head: Head::new(TYPE_COMMON, failure_id, t_id),
                        reason,
                        explanation,
                    };
                    out.extend_from_slice(message.as_bytes());
                }
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    /// The Negotiate a Linux host sends (drivers/nvme/host/auth.c): SHA-256/384/512 and every
    /// DH group, in one descriptor; written out byte by byte, not by the encoder.
    fn linux_negotiate(t_id: u16) -> Vec<u8> {
        let mut m = vec![0u8; 72];
        m[..8].copy_from_slice(&[0x00, 0x00, 0, 0, t_id as u8, (t_id >> 8) as u8, 0, 1]);
        m[8] = 0x01; // DH-HMAC-CHAP
        m[10] = 3; // halen
        m[11] = 6; // dhlen
        m[12..15].copy_from_slice(&[1, 2, 3]);
        m[42..48].copy_from_slice(&[0, 1, 2, 3, 4, 5]);
        m
    }

    #[test]
    fn a_linux_negotiate_parses_to_its_id_lists() {
        let m = linux_negotiate(0x0102);
        assert_eq!(
            Message::parse(&m),
            Ok(Message::Negotiate {
                t_id: 0x0102,
                sc_c: 0,
                hash_ids: &[1, 2, 3],
                dh_group_ids: &[0, 1, 2, 3, 4, 5],
            })
        );
        // And the encoder writes those same 72 bytes.
        assert_eq!(Message::parse(&m).unwrap().encode(), m);
    }

    #[test]
    fn a_challenge_is_laid_out_as_the_specification_says() {
        let c1: Vec<u8> = (0..32).collect();
        let dh = [0xAB; 8];
        let m = Message::Challenge {
            t_id: 7,
            hash_id: 1,
            dh_group_id: 1,
            seqnum: 0x1234_5678,
            challenge: &c1,
            dh_value: &dh,
        }
        .encode();
        assert_eq!(m.len(), 16 + 32 + 8);
        assert_eq!(
            &m[..16],
            &[1, 1, 0, 0, 7, 0, 32, 0, 1, 1, 8, 0, 0x78, 0x56, 0x34, 0x12]
        );
        assert_eq!(&m[16..48], &c1[..]);
        // Padded (as AUTH_Receive pads it), it still parses to the same message.
        let mut padded = m.clone();
        padded.resize(4096, 0);
        assert_eq!(Message::parse(&padded), Message::parse(&m));
    }

    #[test]
    fn a_reply_without_a_controller_challenge_keeps_the_c2_slot() {
        let r1 = [0x11; 48];
        let m = Message::Reply {
            t_id: 3,
            response: &r1,
            ctrl_challenge: None,
            seqnum: 0,
            dh_value: &[],
        }
        .encode();
        assert_eq!(m.len(), 16 + 2 * 48);
        assert!(m[64..].iter().all(|&b| b == 0));
        match Message::parse(&m).unwrap() {
            Message::Reply {
                response,
                ctrl_challenge,
                ..
            } => {
                assert_eq!(response, &r1[..]);
                assert_eq!(ctrl_challenge, None);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_message_round_trips() {
        let x = [9u8; 64];
        let messages = [
            Message::Success1 {
                t_id: 1,
                hl: 64,
                response: Some(&x),
            },
            Message::Success1 {
                t_id: 1,
                hl: 32,
                response: None,
            },
            Message::Success2 { t_id: 2 },
            Message::Failure {
                from_controller: true,
                t_id: 4,
                reason: REASON_FAILED,
                explanation: Explanation::Failed as u8,
            },
            Message::Failure {
                from_controller: false,
                t_id: 4,
                reason: REASON_FAILED,
                explanation: Explanation::HashUnusable as u8,
            },
            Message::Reply {
                t_id: 5,
                response: &x[..32],
                ctrl_challenge: Some(&x[32..]),
                seqnum: 77,
                dh_value: &x[..16],
            },
        ];
        for m in messages {
            assert_eq!(Message::parse(&m.encode()), Ok(m), "{m:?}");
        }
    }

    #[test]
    fn short_or_unknown_messages_become_explanations() {
        assert_eq!(Message::parse(&[]), Err(Explanation::IncorrectPayload));
        assert_eq!(Message::parse(&[1]), Err(Explanation::IncorrectPayload));
        assert_eq!(
            Message::parse(&[1, 9, 0, 0]),
            Err(Explanation::IncorrectMessage)
        );
        assert_eq!(Message::parse(&[2, 0]), Err(Explanation::IncorrectMessage));
        // A Negotiate cut inside its descriptor, or with two descriptors, or a list past 30.
        let m = linux_negotiate(0);
        assert_eq!(Message::parse(&m[..40]), Err(Explanation::IncorrectPayload));
        let mut two = m.clone();
        two[7] = 2;
        assert_eq!(Message::parse(&two), Err(Explanation::NotUsable));
        let mut long = m.clone();
        long[10] = 31;
        assert_eq!(Message::parse(&long), Err(Explanation::IncorrectPayload));
        // A challenge whose lengths run past the payload.
        let mut c = Message::Challenge {
            t_id: 0,
            hash_id: 1,
            dh_group_id: 0,
            seqnum: 1,
            challenge: &[0; 32],
            dh_value: &[],
        }
        .encode();
        c[10] = 1; // dhvlen 1, with nothing after C1
        assert_eq!(Message::parse(&c), Err(Explanation::IncorrectPayload));
    }
}
