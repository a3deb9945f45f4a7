//! The responses of DH-HMAC-CHAP (NVMe Base Specification 2.0, §8.13.5.4), computed the same
//! way by the peer that answers a challenge and by the peer that checks the answer:
//!
//! ```text
//! C' = C                       without a DH group
//! C' = HMAC_H(H(Z), C)         with one (Z: the shared secret, padded to the prime's length)
//! R  = HMAC_H(Kt, C' ‖ le32(S) ‖ le16(T_ID) ‖ SC_C ‖ label ‖ NQN1 ‖ 0x00 ‖ NQN2)
//! ```
//!
//! The host answers with label `HostHost`, its NQN first; the controller with `Controller`, the
//! subsystem NQN first. `Kt` is the answering entity's transformed secret
//! ([`super::secret::Secret::transformed`]), `H` the hash the controller chose.

use std::vec;
use std::vec::Vec;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use subtle::ConstantTimeEq;

use super::ffdhe::{KeyPair, private_len};
use super::{DhGroup, Explanation, HashId};

/// HMAC with `hash`, keyed with `key`, over `parts` one after another.
pub fn hmac(hash: HashId, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        // HMAC takes keys of any length.
        let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key).expect("any key length");
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().to_vec()
    }
    match hash {
        HashId::Sha256 => run::<Hmac<Sha256>>(key, parts),
        HashId::Sha384 => run::<Hmac<Sha384>>(key, parts),
        HashId::Sha512 => run::<Hmac<Sha512>>(key, parts),
    }
}

/// The digest of `data` with `hash`.
pub fn digest(hash: HashId, data: &[u8]) -> Vec<u8> {
    match hash {
        HashId::Sha256 => Sha256::digest(data).to_vec(),
        HashId::Sha384 => Sha384::digest(data).to_vec(),
        HashId::Sha512 => Sha512::digest(data).to_vec(),
    }
}

/// What one transaction's responses are computed over, beside a challenge and its sequence
/// number.
#[derive(Clone, Copy, Debug)]
pub struct Transaction<'a> {
    /// The hash the controller chose.
    pub hash: HashId,
    /// The transaction id of the host's Negotiate.
    pub t_id: u16,
    /// The host NQN of the association.
    pub host_nqn: &'a str,
    /// The subsystem NQN.
    pub subsys_nqn: &'a str,
    /// The DH shared secret Z, padded to its group's prime length; `None` without a group.
    pub shared_secret: Option<&'a [u8]>,
}

impl Transaction<'_> {
    /// R1: the host's answer to the controller's challenge C1 with sequence number S1, keyed
    /// with the host's transformed secret.
    pub fn host_response(&self, host_key: &[u8], challenge: &[u8], seqnum: u32) -> Vec<u8> {
        self.response(
            host_key,
            challenge,
            seqnum,
            b"HostHost",
            self.host_nqn,
            self.subsys_nqn,
        )
    }

    /// R2: the controller's answer to the host's challenge C2 with sequence number S2, keyed
    /// with the controller's transformed secret.
    pub fn controller_response(&self, ctrl_key: &[u8], challenge: &[u8], seqnum: u32) -> Vec<u8> {
        self.response(
            ctrl_key,
            challenge,
            seqnum,
            b"Controller",
            self.subsys_nqn,
            self.host_nqn,
        )
    }

    fn response(
        &self,
        key: &[u8],
        challenge: &[u8],
        seqnum: u32,
        label: &[u8],
        first: &str,
        second: &str,
    ) -> Vec<u8> {
        let augmented;
        let challenge = match self.shared_secret {
            None => challenge,
            Some(z) => {
                augmented = hmac(self.hash, &digest(self.hash, z), &[challenge]);
                &augmented
            }
        };
        // Secure channel concatenation (TLS) is not used: SC_C is 0.
        let sc_c = 0u8;
        hmac(
            self.hash,
            key,
            &[
                challenge,
                &seqnum.to_le_bytes(),
                &self.t_id.to_le_bytes(),
                &[sc_c],
                label,
                first.as_bytes(),
                &[0],
                second.as_bytes(),
            ],
        )
    }
}

/// What one side brings to a transaction, fresh each time: its challenge (C1, or C2), a
/// nonzero sequence number (S1, or S2) and, with a DH group, its key pair. All of it comes from
/// the operating system's random source: none of it may be guessable.
#[derive(Debug)]
pub struct Fresh {
    /// The challenge, as long as the hash's digest.
    pub challenge: Vec<u8>,
    /// The sequence number (never 0, which means "none").
    pub seqnum: u32,
    /// The key pair; `None` without a DH group.
    pub keys: Option<KeyPair>,
}

impl Fresh {
    /// Fresh values for a transaction with `hash` and `group`.
    pub fn new(hash: HashId, group: DhGroup) -> std::io::Result<Self> {
        use std::io::Read;
        let private_len = private_len(group);
        let mut random = vec![0; hash.digest_len() + 4 + private_len];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
        let private = random.split_off(hash.digest_len() + 4);
        let seqnum = random.split_off(hash.digest_len());
        let seqnum = u32::from_le_bytes([seqnum[0], seqnum[1], seqnum[2], seqnum[3]]).max(1);
        Ok(Self {
            challenge: random,
            seqnum,
            keys: KeyPair::new(group, &private),
        })
    }

    /// The DH value to send (empty without a group).
    pub fn dh_value(&self) -> &[u8] {
        self.keys.as_ref().map_or(&[], KeyPair::public)
    }

    /// The shared secret Z with the peer whose DH value is `peer`; `None` without a group. A
    /// value missing, or sent where no group was chosen, is refused.
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Option<Vec<u8>>, Explanation> {
        match &self.keys {
            None if peer.is_empty() => Ok(None),
            None => Err(Explanation::IncorrectPayload),
            Some(keys) => keys.shared_secret(peer).map(Some),
        }
    }
}

/// Whether a received response equals the expected one, in time independent of where they
/// differ.
pub fn matches(expected: &[u8], received: &[u8]) -> bool {
    expected.len() == received.len() && bool::from(expected.ct_eq(received))
}

#[cfg(test)]
mod tests {
    //! Known answers from an independent Python implementation of the specification's formulas
    //! (hashlib and hmac, written from the specification) — not from this code.
    use super::super::secret::Secret;
    use super::*;
    use std::format;
    use std::string::String;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
    const SUB: &str = "nqn.2024-01.io.example:sub1";
    const HOST_KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    const CTRL_KEY: &str = "DHHC-1:00:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9YjiZe:";

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn seq(from: u8, n: u8) -> Vec<u8> {
        (from..from + n).collect()
    }

    fn transaction(hash: HashId, t_id: u16) -> Transaction<'static> {
        Transaction {
            hash,
            t_id,
            host_nqn: HOST,
            subsys_nqn: SUB,
            shared_secret: None,
        }
    }

    #[test]
    fn responses_without_dh_match_the_known_answers() {
        let host = Secret::parse(HOST_KEY).unwrap().transformed(HOST);
        let ctrl = Secret::parse(CTRL_KEY).unwrap().transformed(SUB);
        let t = transaction(HashId::Sha256, 0);
        assert_eq!(
            hex(&t.host_response(&host, &seq(0xa0, 32), 0x1234_5678)),
            "2b0abd79a4e17c93a7b966670a61dbe2a7d2a92f06353ca26968a1404112f11d"
        );
        assert_eq!(
            hex(&t.controller_response(&ctrl, &seq(0xc0, 32), 0xabcd)),
            "3becd6d3bad587754803bb0535fe519cc673705bdfa55124b9d91c5d7b71630b"
        );
        // A transformed (01) host secret.
        let host01 = Secret::parse(&HOST_KEY.replacen(":00:", ":01:", 1))
            .unwrap()
            .transformed(HOST);
        assert_eq!(
            hex(&host01),
            "6c7b81cb2a746f74454b1d7140f3153b51ca99459fcef7a86a17f27695b87cd8"
        );
        assert_eq!(
            hex(&t.host_response(&host01, &seq(0xa0, 32), 0x1234_5678)),
            "943d86f502722dd8326553fa510ba7c3faeb1b81364c369a2cd44d2a92b4bfea"
        );
        // SHA-512, transaction 1.
        let t = transaction(HashId::Sha512, 1);
        assert_eq!(
            hex(&t.host_response(&host, &seq(0, 64), 0x1234_5678)),
            "f32133d47f127ce0479568b7a5d2aed2e077e7cc05893febf167518024d2adc1\
             fb9972e4418c3e66090cba5c9aae5f76dc09695e9bd88dd06bfef0d3d4c132cd"
        );
    }

    #[test]
    fn fresh_values_differ_each_time_and_agree_on_a_secret_only_within_their_group() {
        let a = Fresh::new(HashId::Sha384, DhGroup::Ffdhe2048).unwrap();
        let b = Fresh::new(HashId::Sha384, DhGroup::Ffdhe2048).unwrap();
        assert_eq!((a.challenge.len(), a.dh_value().len()), (48, 256));
        assert_ne!(a.challenge, b.challenge);
        assert!(a.seqnum != 0 && b.seqnum != 0);
        let z = a.shared_secret(b.dh_value()).unwrap();
        assert!(z.is_some());
        assert_eq!(z, b.shared_secret(a.dh_value()).unwrap());
        // Without a group: no value is sent, and one received is refused; with one, a missing
        // value is.
        let null = Fresh::new(HashId::Sha256, DhGroup::Null).unwrap();
        assert_eq!(null.dh_value(), &[] as &[u8]);
        assert_eq!(null.shared_secret(&[]), Ok(None));
        assert_eq!(
            null.shared_secret(a.dh_value()),
            Err(Explanation::IncorrectPayload)
        );
        assert_eq!(a.shared_secret(&[]), Err(Explanation::IncorrectPayload));
    }

    #[test]
    fn a_changed_input_changes_the_response_and_is_not_matched() {
        let host = Secret::parse(HOST_KEY).unwrap().transformed(HOST);
        let t = transaction(HashId::Sha256, 0);
        let r = t.host_response(&host, &seq(0xa0, 32), 1);
        assert!(matches(&r, &r));
        let other_seq = t.host_response(&host, &seq(0xa0, 32), 2);
        let other_tid = transaction(HashId::Sha256, 1).host_response(&host, &seq(0xa0, 32), 1);
        let swapped = t.controller_response(&host, &seq(0xa0, 32), 1);
        for wrong in [other_seq, other_tid, swapped, r[..31].to_vec()] {
            assert!(!matches(&r, &wrong));
        }
    }
}
