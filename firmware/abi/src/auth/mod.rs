//! NVMe in-band authentication with DH-HMAC-CHAP (NVMe Base Specification 2.0, §8.13.5; TP
//! 8006), the one both peers of an NVMe/TCP association run after Connect when the controller
//! asks for it (Connect's completion dword 0, [`CONNECT_ATR`]).
//!
//! The host proves it knows its secret by answering the controller's challenge with an HMAC
//! over the challenge, the sequence number, the transaction id and both NQNs; with a controller
//! secret the controller proves the same to the host. A Diffie-Hellman exchange (an FFDHE
//! group) mixes a fresh shared secret into the challenges, so a recorded transaction does not
//! let anyone test guesses of the secret offline.
//!
//! * [`message`]: the AUTH_Send / AUTH_Receive payloads (no_std);
//! * `secret` (feature `auth`): the `DHHC-1:` secret representation and its transformation;
//! * `response` (feature `auth`): the HMAC responses, each peer's side, and the fresh values
//!   (challenge, sequence number, DH key pair) each side brings to a transaction;
//! * `ffdhe` (feature `auth`): the RFC 7919 groups.
//!
//! The primitives come from RustCrypto's `hmac` and `sha2` and from `num-bigint`; only the
//! protocol is written here.

pub mod message;

#[cfg(feature = "auth")]
pub mod ffdhe;
#[cfg(feature = "auth")]
pub mod response;
#[cfg(feature = "auth")]
pub mod secret;

use crate::nvme::{Status, sct};

/// Security protocol of NVMe in-band authentication (AUTH_Send / AUTH_Receive `secp`).
pub const SECP_AUTH: u8 = 0xE9;
/// SP Specific 0 and 1 of DH-HMAC-CHAP (`spsp0`, `spsp1`).
pub const SPSP_DHCHAP: u8 = 0x01;
/// Connect completion dword 0: authentication required (the host must authenticate the queue
/// before any other command).
pub const CONNECT_ATR: u32 = 1 << 17;
/// Most ids one list of a Negotiate's descriptor holds.
pub const MAX_ID_LIST: usize = 30;

/// The status of a command that needs the queue authenticated first (Authentication
/// Required); a Linux host re-authenticates on it.
pub const AUTH_REQUIRED: Status = Status {
    sct: sct::COMMAND_SPECIFIC,
    sc: 0x91,
    dnr: true,
};

/// A hash function of DH-HMAC-CHAP, by its identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum HashId {
    /// SHA-256: 32-byte responses.
    Sha256 = 1,
    /// SHA-384: 48-byte responses.
    Sha384 = 2,
    /// SHA-512: 64-byte responses.
    Sha512 = 3,
}

impl HashId {
    /// Every hash, in identifier order.
    pub const ALL: [Self; 3] = [Self::Sha256, Self::Sha384, Self::Sha512];

    /// The hash with identifier `id`.
    pub fn from_id(id: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|h| *h as u8 == id)
    }

    /// Its digest length in bytes: the length of challenges and responses with it.
    pub fn digest_len(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha384 => 48,
            Self::Sha512 => 64,
        }
    }

    /// Its name as nvme-cli and Linux's target spell it (`sha256`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "sha256",
            Self::Sha384 => "sha384",
            Self::Sha512 => "sha512",
        }
    }

    /// The hash named `name` (`sha256`, `hmac(sha256)` or `SHA-256`).
    pub fn from_name(name: &str) -> Option<Self> {
        let name = name.trim_start_matches("hmac(").trim_end_matches(')');
        Self::ALL.into_iter().find(|h| same_name(name, h.name()))
    }
}

/// A Diffie-Hellman group of DH-HMAC-CHAP, by its identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DhGroup {
    /// No Diffie-Hellman exchange: the challenge is used as sent.
    Null = 0,
    /// RFC 7919 ffdhe2048.
    Ffdhe2048 = 1,
    /// RFC 7919 ffdhe3072.
    Ffdhe3072 = 2,
    /// RFC 7919 ffdhe4096.
    Ffdhe4096 = 3,
    /// RFC 7919 ffdhe6144.
    Ffdhe6144 = 4,
    /// RFC 7919 ffdhe8192.
    Ffdhe8192 = 5,
}

impl DhGroup {
    /// Every group, in identifier order.
    pub const ALL: [Self; 6] = [
        Self::Null,
        Self::Ffdhe2048,
        Self::Ffdhe3072,
        Self::Ffdhe4096,
        Self::Ffdhe6144,
        Self::Ffdhe8192,
    ];

    /// The group with identifier `id`.
    pub fn from_id(id: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|g| *g as u8 == id)
    }

    /// Bytes of its prime: the length of every DH value and of the shared secret (0: none).
    pub fn value_len(self) -> usize {
        match self {
            Self::Null => 0,
            Self::Ffdhe2048 => 256,
            Self::Ffdhe3072 => 384,
            Self::Ffdhe4096 => 512,
            Self::Ffdhe6144 => 768,
            Self::Ffdhe8192 => 1024,
        }
    }

    /// Its name as nvme-cli and Linux's target spell it (`null`, `ffdhe2048`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Ffdhe2048 => "ffdhe2048",
            Self::Ffdhe3072 => "ffdhe3072",
            Self::Ffdhe4096 => "ffdhe4096",
            Self::Ffdhe6144 => "ffdhe6144",
            Self::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// The group named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|g| same_name(name, g.name()))
    }
}

/// Whether `given` is `name`, ignoring ASCII case and dashes (`SHA-256` is `sha256`).
fn same_name(given: &str, name: &str) -> bool {
    given
        .bytes()
        .filter(|&c| c != b'-')
        .map(|c| c.to_ascii_lowercase())
        .eq(name.bytes())
}

/// Why a transaction failed: the reason code explanation of a Failure message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Explanation {
    /// Authentication failed (a wrong response).
    Failed = 0x01,
    /// No usable authentication protocol.
    NotUsable = 0x02,
    /// Secure channel concatenation asked for and not supported.
    ConcatMismatch = 0x03,
    /// No usable hash function.
    HashUnusable = 0x04,
    /// No usable DH group.
    DhGroupUnusable = 0x05,
    /// A message whose fields are wrong.
    IncorrectPayload = 0x06,
    /// A message not expected now.
    IncorrectMessage = 0x07,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_agree_with_the_specification() {
        assert_eq!(HashId::from_id(1), Some(HashId::Sha256));
        assert_eq!(HashId::from_id(3).map(HashId::digest_len), Some(64));
        assert_eq!(HashId::from_id(0), None);
        assert_eq!(HashId::from_name("hmac(sha384)"), Some(HashId::Sha384));
        assert_eq!(HashId::from_name("SHA-512"), Some(HashId::Sha512));
        assert_eq!(DhGroup::from_id(5), Some(DhGroup::Ffdhe8192));
        assert_eq!(DhGroup::from_id(6), None);
        assert_eq!(
            DhGroup::from_name("ffdhe3072").map(DhGroup::value_len),
            Some(384)
        );
        assert_eq!(AUTH_REQUIRED.sc, 0x91);
    }
}
