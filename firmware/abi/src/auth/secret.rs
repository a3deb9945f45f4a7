//! DH-HMAC-CHAP secrets in the specification's text form (NVMe Base Specification 2.0,
//! §8.13.5.8), the form nvme-cli's `gen-dhchap-key` prints and Linux reads:
//! `DHHC-1:XX:<base64 of key ‖ CRC-32 of key, little-endian>:`, where the key is 32, 48 or 64
//! bytes and `XX` names the hash that transforms it before use (`00`: used as is).
//!
//! The transformed secret is what keys the responses: `HMAC_XX(key, NQN ‖ "NVMe-over-Fabrics")`,
//! with the host NQN for a host secret and the subsystem NQN for a controller secret.

use std::fmt;
use std::string::String;
use std::vec::Vec;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::HashId;
use super::response::hmac;

/// A parsed secret. Its `Debug` form does not show the key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    transform: Option<HashId>,
    key: Vec<u8>,
}

/// Why a string is not a usable secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretError {
    /// It does not start with `DHHC-1:`.
    NotDhhc1,
    /// The transformation field is not `00`..`03`.
    Transform(String),
    /// The key is not valid base64.
    Base64,
    /// The decoded key and CRC are not 36, 52 or 68 bytes.
    Length(usize),
    /// The CRC does not match the key.
    Crc,
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotDhhc1 => write!(f, "a secret starts with DHHC-1: (DHHC-1:XX:BASE64:)"),
            Self::Transform(t) => write!(
                f,
                "transformation {t:?} is not 00 (none), 01 (SHA-256), 02 (SHA-384) or 03 (SHA-512)"
            ),
            Self::Base64 => write!(f, "the key is not base64"),
            Self::Length(n) => write!(
                f,
                "the key and its CRC are {n} bytes, not 36, 52 or 68 (a 32, 48 or 64-byte key)"
            ),
            Self::Crc => write!(f, "the key's CRC-32 does not match it (a mistyped secret?)"),
        }
    }
}

impl std::error::Error for SecretError {}

impl Secret {
    /// A secret with this key (32, 48 or 64 bytes), transformed with `transform` before use.
    /// Any length goes with any transformation (Linux 6.12 accepts them all; the transformed
    /// key has the transformation's digest length).
    pub fn new(transform: Option<HashId>, key: Vec<u8>) -> Result<Self, SecretError> {
        if ![32, 48, 64].contains(&key.len()) {
            return Err(SecretError::Length(key.len() + 4));
        }
        Ok(Self { transform, key })
    }

    /// Parses `DHHC-1:XX:BASE64:` (the last colon may be left out).
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let rest = text.strip_prefix("DHHC-1:").ok_or(SecretError::NotDhhc1)?;
        let (xx, rest) = rest.split_once(':').ok_or(SecretError::NotDhhc1)?;
        let transform = match xx {
            "00" => None,
            "01" | "02" | "03" => HashId::from_id(xx.as_bytes()[1] - b'0'),
            other => return Err(SecretError::Transform(other.into())),
        };
        let encoded = rest.strip_suffix(':').unwrap_or(rest);
        let decoded = STANDARD.decode(encoded).map_err(|_| SecretError::Base64)?;
        if ![36, 52, 68].contains(&decoded.len()) {
            return Err(SecretError::Length(decoded.len()));
        }
        let (key, crc) = decoded.split_at(decoded.len() - 4);
        if crc32fast::hash(key).to_le_bytes() != crc {
            return Err(SecretError::Crc);
        }
        Self::new(transform, key.to_vec())
    }

    /// The key as the responses use it, for the entity named `nqn` (the host NQN for a host
    /// secret, the subsystem NQN for a controller secret).
    pub fn transformed(&self, nqn: &str) -> Vec<u8> {
        match self.transform {
            None => self.key.clone(),
            Some(hash) => hmac(hash, &self.key, &[nqn.as_bytes(), b"NVMe-over-Fabrics"]),
        }
    }

    /// The transformation applied before use.
    pub fn transform(&self) -> Option<HashId> {
        self.transform
    }

    /// The key's length in bytes.
    pub fn key_len(&self) -> usize {
        self.key.len()
    }
}

impl fmt::Display for Secret {
    /// The `DHHC-1:XX:BASE64:` form [`Secret::parse`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bytes = self.key.clone();
        bytes.extend_from_slice(&crc32fast::hash(&self.key).to_le_bytes());
        let xx = self.transform.map_or(0, |h| h as u8);
        write!(f, "DHHC-1:{xx:02}:{}:", STANDARD.encode(bytes))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("transform", &self.transform)
            .field("key_len", &self.key.len())
            .finish_non_exhaustive()
    }
}

impl std::str::FromStr for Secret {
    type Err = SecretError;

    fn from_str(s: &str) -> Result<Self, SecretError> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;
    use std::string::ToString;

    /// Bytes 0x00..0x1f; nvme-cli 2.3's `gen-dhchap-key --secret=000102…1f -l 32 -m 0` prints
    /// this string (the CRC 0x91267e8a, little-endian).
    const KEY_00: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";

    fn key_00() -> Vec<u8> {
        (0u8..32).collect()
    }

    #[test]
    fn parses_what_nvme_cli_prints_and_prints_it_back() {
        let s = Secret::parse(KEY_00).unwrap();
        assert_eq!(s, Secret::new(None, key_00()).unwrap());
        assert_eq!(s.to_string(), KEY_00);
        // The trailing colon is optional, as in Linux.
        assert_eq!(Secret::parse(&KEY_00[..KEY_00.len() - 1]), Ok(s.clone()));
        // The key does not show in debug output.
        assert!(!format!("{s:?}").contains("AAEC"));
    }

    #[test]
    fn the_transformation_is_hmac_of_the_nqn_and_the_label() {
        // Known answer from libnvme (OpenSSL) and Python's hmac, not from this code.
        let s = Secret::new(Some(HashId::Sha256), key_00()).unwrap();
        let kt = s.transformed("nqn.2014-08.org.nvmexpress:uuid:test");
        let want = "5ae9657820641b8a02b348880b70a2b7d8010c22d6899f4f357ba1ab2b569012";
        assert_eq!(hex(&kt), want);
        assert_eq!(
            Secret::new(None, key_00()).unwrap().transformed("x"),
            key_00()
        );
    }

    #[test]
    fn bad_secrets_are_refused_with_the_reason() {
        assert_eq!(Secret::parse("DHHC-2:00:AAAA:"), Err(SecretError::NotDhhc1));
        assert_eq!(
            Secret::parse("DHHC-1:04:AAAA:"),
            Err(SecretError::Transform("04".into()))
        );
        assert_eq!(Secret::parse("DHHC-1:00:!!!!:"), Err(SecretError::Base64));
        assert_eq!(
            Secret::parse("DHHC-1:00:AAAA:"),
            Err(SecretError::Length(3))
        );
        // One character changed: the CRC catches it.
        let typo = KEY_00.replacen("AAEC", "AAED", 1);
        assert_eq!(Secret::parse(&typo), Err(SecretError::Crc));
        // A 32-byte key tagged for SHA-512: accepted, and transformed to 64 bytes.
        let tagged = Secret::parse(&KEY_00.replacen(":00:", ":03:", 1)).unwrap();
        assert_eq!(tagged.transformed("nqn.x").len(), 64);
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
