//! The finite-field Diffie-Hellman groups of DH-HMAC-CHAP: RFC 7919's ffdhe2048 to ffdhe8192,
//! generator 2. Every value on the wire, and the shared secret, is big-endian and left-padded
//! with zeros to the prime's length (as Linux writes them), so the secret's hash does not
//! depend on how many leading zero bytes it happens to have.

use std::vec;
use std::vec::Vec;

use num_bigint::BigUint;

use super::{DhGroup, Explanation};

/// One side's key pair in a group: a private exponent and the public value `2^x mod p`.
#[derive(Clone)]
pub struct KeyPair {
    prime: BigUint,
    len: usize,
    private: BigUint,
    public: Vec<u8>,
}

impl KeyPair {
    /// The key pair whose private exponent is `private` (big-endian; [`private_len`] random
    /// bytes, of which the top bit is forced so the exponent is never small). `None` for the
    /// null group, which has no keys.
    pub fn new(group: DhGroup, private: &[u8]) -> Option<Self> {
        let prime = prime(group)?;
        let mut private = BigUint::from_bytes_be(private);
        private.set_bit(private_len(group) as u64 * 8 - 1, true);
        let public = BigUint::from(2u8).modpow(&private, &prime);
        let len = group.value_len();
        Some(Self {
            public: padded(&public, len),
            prime,
            len,
            private,
        })
    }

    /// The public value, as the Challenge or Reply carries it.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret Z with the peer whose public value is `peer`: refused unless it is
    /// exactly the prime's length and in 2..=p-2 (1 and p-1 would fix Z to a known value).
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Vec<u8>, Explanation> {
        if peer.len() != self.len {
            return Err(Explanation::IncorrectPayload);
        }
        let y = BigUint::from_bytes_be(peer);
        let two = BigUint::from(2u8);
        if y < two || y > &self.prime - &two {
            return Err(Explanation::IncorrectPayload);
        }
        Ok(padded(&y.modpow(&self.private, &self.prime), self.len))
    }
}

impl core::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeyPair")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// Bytes of private exponent a key pair in `group` takes: twice the group's security strength,
/// rounded up to a power of two bits (256 bits for ffdhe2048 and ffdhe3072, 512 beyond), as
/// Linux chooses.
pub fn private_len(group: DhGroup) -> usize {
    match group {
        DhGroup::Null => 0,
        DhGroup::Ffdhe2048 | DhGroup::Ffdhe3072 => 32,
        DhGroup::Ffdhe4096 | DhGroup::Ffdhe6144 | DhGroup::Ffdhe8192 => 64,
    }
}

fn padded(value: &BigUint, len: usize) -> Vec<u8> {
    let bytes = value.to_bytes_be();
    let mut out = vec![0; len.saturating_sub(bytes.len())];
    out.extend_from_slice(&bytes);
    out
}

fn prime(group: DhGroup) -> Option<BigUint> {
    let hex = match group {
        DhGroup::Null => return None,
        DhGroup::Ffdhe2048 => FFDHE2048,
        DhGroup::Ffdhe3072 => FFDHE3072,
        DhGroup::Ffdhe4096 => FFDHE4096,
        DhGroup::Ffdhe6144 => FFDHE6144,
        DhGroup::Ffdhe8192 => FFDHE8192,
    };
    BigUint::parse_bytes(hex.as_bytes(), 16)
}

/// The ffdhe2048 prime (RFC 7919, Appendix A), big-endian hex.
const FFDHE2048: &str = concat!(
    "ffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1d8b9c583ce2d3695",
    "a9e13641146433fbcc939dce249b3ef97d2fe363630c75d8f681b202aec4617a",
    "d3df1ed5d5fd65612433f51f5f066ed0856365553ded1af3b557135e7f57c935",
    "984f0c70e0e68b77e2a689daf3efe8721df158a136ade73530acca4f483a797a",
    "bc0ab182b324fb61d108a94bb2c8e3fbb96adab760d7f4681d4f42a3de394df4",
    "ae56ede76372bb190b07a7c8ee0a6d709e02fce1cdf7e2ecc03404cd28342f61",
    "9172fe9ce98583ff8e4f1232eef28183c3fe3b1b4c6fad733bb5fcbc2ec22005",
    "c58ef1837d1683b2c6f34a26c1b2effa886b423861285c97ffffffffffffffff",
);

/// The ffdhe3072 prime (RFC 7919, Appendix A), big-endian hex.
const FFDHE3072: &str = concat!(
    "ffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1d8b9c583ce2d3695",
    "a9e13641146433fbcc939dce249b3ef97d2fe363630c75d8f681b202aec4617a",
    "d3df1ed5d5fd65612433f51f5f066ed0856365553ded1af3b557135e7f57c935",
    "984f0c70e0e68b77e2a689daf3efe8721df158a136ade73530acca4f483a797a",
    "bc0ab182b324fb61d108a94bb2c8e3fbb96adab760d7f4681d4f42a3de394df4",
    "ae56ede76372bb190b07a7c8ee0a6d709e02fce1cdf7e2ecc03404cd28342f61",
    "9172fe9ce98583ff8e4f1232eef28183c3fe3b1b4c6fad733bb5fcbc2ec22005",
    "c58ef1837d1683b2c6f34a26c1b2effa886b4238611fcfdcde355b3b6519035b",
    "bc34f4def99c023861b46fc9d6e6c9077ad91d2691f7f7ee598cb0fac186d91c",
    "aefe130985139270b4130c93bc437944f4fd4452e2d74dd364f2e21e71f54bff",
    "5cae82ab9c9df69ee86d2bc522363a0dabc521979b0deada1dbf9a42d5c4484e",
    "0abcd06bfa53ddef3c1b20ee3fd59d7c25e41d2b66c62e37ffffffffffffffff",
);

/// The ffdhe4096 prime (RFC 7919, Appendix A), big-endian hex.
const FFDHE4096: &str = concat!(
    "ffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1d8b9c583ce2d3695",
    "a9e13641146433fbcc939dce249b3ef97d2fe363630c75d8f681b202aec4617a",
    "d3df1ed5d5fd65612433f51f5f066ed0856365553ded1af3b557135e7f57c935",
    "984f0c70e0e68b77e2a689daf3efe8721df158a136ade73530acca4f483a797a",
    "bc0ab182b324fb61d108a94bb2c8e3fbb96adab760d7f4681d4f42a3de394df4",
    "ae56ede76372bb190b07a7c8ee0a6d709e02fce1cdf7e2ecc03404cd28342f61",
    "9172fe9ce98583ff8e4f1232eef28183c3fe3b1b4c6fad733bb5fcbc2ec22005",
    "c58ef1837d1683b2c6f34a26c1b2effa886b4238611fcfdcde355b3b6519035b",
    "bc34f4def99c023861b46fc9d6e6c9077ad91d2691f7f7ee598cb0fac186d91c",
    "aefe130985139270b4130c93bc437944f4fd4452e2d74dd364f2e21e71f54bff",
    "5cae82ab9c9df69ee86d2bc522363a0dabc521979b0deada1dbf9a42d5c4484e",
    "0abcd06bfa53ddef3c1b20ee3fd59d7c25e41d2b669e1ef16e6f52c3164df4fb",
    "7930e9e4e58857b6ac7d5f42d69f6d187763cf1d5503400487f55ba57e31cc7a",
    "7135c886efb4318aed6a1e012d9e6832a907600a918130c46dc778f971ad0038",
    "092999a333cb8b7a1a1db93d7140003c2a4ecea9f98d0acc0a8291cdcec97dcf",
    "8ec9b55a7f88a46b4db5a851f44182e1c68a007e5e655f6affffffffffffffff",
);

/// The ffdhe6144 prime (RFC 7919, Appendix A), big-endian hex.
const FFDHE6144: &str = concat!(
    "ffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1d8b9c583ce2d3695",
    "a9e13641146433fbcc939dce249b3ef97d2fe363630c75d8f681b202aec4617a",
    "d3df1ed5d5fd65612433f51f5f066ed0856365553ded1af3b557135e7f57c935",
    "984f0c70e0e68b77e2a689daf3efe8721df158a136ade73530acca4f483a797a",
    "bc0ab182b324fb61d108a94bb2c8e3fbb96adab760d7f4681d4f42a3de394df4",
    "ae56ede76372bb190b07a7c8ee0a6d709e02fce1cdf7e2ecc03404cd28342f61",
    "9172fe9ce98583ff8e4f1232eef28183c3fe3b1b4c6fad733bb5fcbc2ec22005",
    "c58ef1837d1683b2c6f34a26c1b2effa886b4238611fcfdcde355b3b6519035b",
    "bc34f4def99c023861b46fc9d6e6c9077ad91d2691f7f7ee598cb0fac186d91c",
    "aefe130985139270b4130c93bc437944f4fd4452e2d74dd364f2e21e71f54bff",
    "5cae82ab9c9df69ee86d2bc522363a0dabc521979b0deada1dbf9a42d5c4484e",
    "0abcd06bfa53ddef3c1b20ee3fd59d7c25e41d2b669e1ef16e6f52c3164df4fb",
    "7930e9e4e58857b6ac7d5f42d69f6d187763cf1d5503400487f55ba57e31cc7a",
    "7135c886efb4318aed6a1e012d9e6832a907600a918130c46dc778f971ad0038",
    "092999a333cb8b7a1a1db93d7140003c2a4ecea9f98d0acc0a8291cdcec97dcf",
    "8ec9b55a7f88a46b4db5a851f44182e1c68a007e5e0dd9020bfd64b645036c7a",
    "4e677d2c38532a3a23ba4442caf53ea63bb454329b7624c8917bdd64b1c0fd4c",
    "b38e8c334c701c3acdad0657fccfec719b1f5c3e4e46041f388147fb4cfdb477",
    "a52471f7a9a96910b855322edb6340d8a00ef092350511e30abec1fff9e3a26e",
    "7fb29f8c183023c3587e38da0077d9b4763e4e4b94b2bbc194c6651e77caf992",
    "eeaac0232a281bf6b3a739c1226116820ae8db5847a67cbef9c9091b462d538c",
    "d72b03746ae77f5e62292c311562a846505dc82db854338ae49f5235c95b9117",
    "8ccf2dd5cacef403ec9d1810c6272b045b3b71f9dc6b80d63fdd4a8e9adb1e69",
    "62a69526d43161c1a41d570d7938dad4a40e329cd0e40e65ffffffffffffffff",
);

/// The ffdhe8192 prime (RFC 7919, Appendix A), big-endian hex.
const FFDHE8192: &str = concat!(
    "ffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1d8b9c583ce2d3695",
    "a9e13641146433fbcc939dce249b3ef97d2fe363630c75d8f681b202aec4617a",
    "d3df1ed5d5fd65612433f51f5f066ed0856365553ded1af3b557135e7f57c935",
    "984f0c70e0e68b77e2a689daf3efe8721df158a136ade73530acca4f483a797a",
    "bc0ab182b324fb61d108a94bb2c8e3fbb96adab760d7f4681d4f42a3de394df4",
    "ae56ede76372bb190b07a7c8ee0a6d709e02fce1cdf7e2ecc03404cd28342f61",
    "9172fe9ce98583ff8e4f1232eef28183c3fe3b1b4c6fad733bb5fcbc2ec22005",
    "c58ef1837d1683b2c6f34a26c1b2effa886b4238611fcfdcde355b3b6519035b",
    "bc34f4def99c023861b46fc9d6e6c9077ad91d2691f7f7ee598cb0fac186d91c",
    "aefe130985139270b4130c93bc437944f4fd4452e2d74dd364f2e21e71f54bff",
    "5cae82ab9c9df69ee86d2bc522363a0dabc521979b0deada1dbf9a42d5c4484e",
    "0abcd06bfa53ddef3c1b20ee3fd59d7c25e41d2b669e1ef16e6f52c3164df4fb",
    "7930e9e4e58857b6ac7d5f42d69f6d187763cf1d5503400487f55ba57e31cc7a",
    "7135c886efb4318aed6a1e012d9e6832a907600a918130c46dc778f971ad0038",
    "092999a333cb8b7a1a1db93d7140003c2a4ecea9f98d0acc0a8291cdcec97dcf",
    "8ec9b55a7f88a46b4db5a851f44182e1c68a007e5e0dd9020bfd64b645036c7a",
    "4e677d2c38532a3a23ba4442caf53ea63bb454329b7624c8917bdd64b1c0fd4c",
    "b38e8c334c701c3acdad0657fccfec719b1f5c3e4e46041f388147fb4cfdb477",
    "a52471f7a9a96910b855322edb6340d8a00ef092350511e30abec1fff9e3a26e",
    "7fb29f8c183023c3587e38da0077d9b4763e4e4b94b2bbc194c6651e77caf992",
    "eeaac0232a281bf6b3a739c1226116820ae8db5847a67cbef9c9091b462d538c",
    "d72b03746ae77f5e62292c311562a846505dc82db854338ae49f5235c95b9117",
    "8ccf2dd5cacef403ec9d1810c6272b045b3b71f9dc6b80d63fdd4a8e9adb1e69",
    "62a69526d43161c1a41d570d7938dad4a40e329ccff46aaa36ad004cf600c838",
    "1e425a31d951ae64fdb23fcec9509d43687feb69edd1cc5e0b8cc3bdf64b10ef",
    "86b63142a3ab8829555b2f747c932665cb2c0f1cc01bd70229388839d2af05e4",
    "54504ac78b7582822846c0ba35c35f5c59160cc046fd8251541fc68c9c86b022",
    "bb7099876a460e7451a8a93109703fee1c217e6c3826e52c51aa691e0e423cfc",
    "99e9e31650c1217b624816cdad9a95f9d5b8019488d9c0a0a1fe3075a577e231",
    "83f81d4a3f2fa4571efc8ce0ba8a4fe8b6855dfe72b0a66eded2fbabfbe58a30",
    "fafabe1c5d71a87e2f741ef8c1fe86fea6bbfde530677f0d97d11d49f7a8443d",
    "0822e506a9f4614e011e2a94838ff88cd68c8bb7c5c6424cffffffffffffffff",
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;
    use std::string::String;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn each_prime_has_its_groups_length_and_the_rfc_7919_form() {
        for group in DhGroup::ALL.into_iter().skip(1) {
            let p = prime(group).unwrap();
            assert_eq!(p.bits() as usize, group.value_len() * 8, "{group:?}");
            // The top and bottom 64 bits are ones (RFC 7919, §A).
            let bytes = p.to_bytes_be();
            assert!(
                bytes[..8]
                    .iter()
                    .chain(&bytes[bytes.len() - 8..])
                    .all(|&b| b == 0xFF)
            );
        }
    }

    /// Known answers from an independent Python computation (`pow(2, x, p)` over the kernel's
    /// copy of the prime), for fixed private exponents: x_ctrl = 0x1111 << 200 | 0x2222,
    /// x_host = 0x3333 << 190 | 0x4444.
    #[test]
    fn ffdhe2048_values_and_shared_secret_match_the_known_answers() {
        use super::super::HashId;
        use super::super::response::digest;
        let exponent = |x: BigUint| {
            let p = prime(DhGroup::Ffdhe2048).unwrap();
            let public = BigUint::from(2u8).modpow(&x, &p);
            KeyPair {
                public: padded(&public, 256),
                prime: p,
                len: 256,
                private: x,
            }
        };
        let big = |hi: u32, shift: u32, lo: u32| (BigUint::from(hi) << shift) | BigUint::from(lo);
        let ctrl = exponent(big(0x1111, 200, 0x2222));
        let host = exponent(big(0x3333, 190, 0x4444));
        assert!(hex(ctrl.public()).starts_with("0167be8d1473aa1e"));
        assert_eq!(
            hex(&digest(HashId::Sha256, ctrl.public())),
            "1849b0f40d87a9f568dd651937281dcaa8f63f93f1332e83c9fadc1bc8b6ce91"
        );
        assert_eq!(
            hex(&digest(HashId::Sha256, host.public())),
            "e364b440ed388f6024f5a2c49dc7dadf56605af95160289194fdb2413717bbaf"
        );
        let z = ctrl.shared_secret(host.public()).unwrap();
        assert_eq!(z, host.shared_secret(ctrl.public()).unwrap());
        assert_eq!(
            hex(&digest(HashId::Sha256, &z)),
            "4a5e23a9bdf1695c5ec4b2be743a1bac86b4cccb182dca4ff71ae05b0ad20c5b"
        );
        // The responses over that secret (the challenges augmented with H(Z)), with the
        // secrets and challenges of `response`'s known answers.
        let t = super::super::response::Transaction {
            hash: HashId::Sha256,
            t_id: 0,
            host_nqn: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001",
            subsys_nqn: "nqn.2024-01.io.example:sub1",
            shared_secret: Some(&z),
        };
        let host_key: Vec<u8> = (0..32).collect();
        let ctrl_key: Vec<u8> = (0x40..0x60).collect();
        let c1: Vec<u8> = (0xa0..0xc0).collect();
        let c2: Vec<u8> = (0xc0..0xe0).collect();
        assert_eq!(
            hex(&t.host_response(&host_key, &c1, 0x1234_5678)),
            "01eea42fcb6eb1f41e9eb0b9e4e15f7a3ca327b66192e7c424a8bd27aa7283c7"
        );
        assert_eq!(
            hex(&t.controller_response(&ctrl_key, &c2, 0xabcd)),
            "c0975e55f407f022e0bb57b90958a2fbc9511dfedbc80409db28e2a465035e1b"
        );
    }

    #[test]
    fn random_pairs_agree_and_bad_peer_values_are_refused() {
        for group in DhGroup::ALL.into_iter().skip(1) {
            let a = KeyPair::new(group, &[0x5A; 64][..private_len(group)]).unwrap();
            let b = KeyPair::new(group, &[0xC3; 64][..private_len(group)]).unwrap();
            assert_eq!(a.public().len(), group.value_len());
            assert_eq!(a.shared_secret(b.public()), b.shared_secret(a.public()));
            let mut one = vec![0; group.value_len()];
            *one.last_mut().unwrap() = 1;
            assert_eq!(a.shared_secret(&one), Err(Explanation::IncorrectPayload));
            let p_minus_1 = padded(&(prime(group).unwrap() - 1u8), group.value_len());
            assert_eq!(
                a.shared_secret(&p_minus_1),
                Err(Explanation::IncorrectPayload)
            );
            assert_eq!(
                a.shared_secret(&b.public()[1..]),
                Err(Explanation::IncorrectPayload)
            );
        }
        assert!(KeyPair::new(DhGroup::Null, &[]).is_none());
    }
}
