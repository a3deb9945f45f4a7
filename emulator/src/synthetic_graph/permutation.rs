//! A keyed pseudo-random permutation of `0..n` with a cheap inverse, for any `n`.
//!
//! A four-round Feistel network over `Z_a × Z_a` (`a = ⌈√n⌉`, so the domain `a²` exceeds `n` by
//! less than `2a + 1`): a point `x = l·a + r` becomes `(r, (l + F_i(r)) mod a)` in round `i`,
//! with `F_i(r)` the SplitMix64 finaliser of the round key and `r`, reduced to `0..a` by
//! multiply-shift. Addition modulo `a` keeps each round a bijection of the square; points that
//! land at `n` or beyond are walked on (cycle walking) until they land inside, which keeps the
//! restriction to `0..n` a bijection. The walk is rare: the square holds at most `2a` points more
//! than `n`.
//!
//! The synthetic graph uses it to give each node a degree rank ([`Permutation::apply`]) and to
//! find the node of a given rank ([`Permutation::invert`]).

use sagessd_abi::sample::{GOLDEN, mix};

/// Rounds of the Feistel network.
const ROUNDS: usize = 4;

/// A bijection of `0..n` chosen by a seed.
#[derive(Clone, Debug)]
pub struct Permutation {
    n: u64,
    /// `⌈√n⌉ ≤ 2^16`, so every half and sum fits 32 bits.
    side: u32,
    keys: [u64; ROUNDS],
}

impl Permutation {
    /// The permutation of `0..n` (`1 ≤ n ≤ 2^32`) for `seed`.
    pub fn new(n: u64, seed: u64) -> Self {
        debug_assert!((1..=1 << 32).contains(&n));
        let mut side = (n as f64).sqrt() as u64;
        while side * side < n {
            side += 1;
        }
        while side > 1 && (side - 1) * (side - 1) >= n {
            side -= 1;
        }
        let mut keys = [0; ROUNDS];
        for (i, k) in keys.iter_mut().enumerate() {
            *k = mix(seed ^ GOLDEN.wrapping_mul(i as u64 + 1));
        }
        Self {
            n,
            side: side as u32,
            keys,
        }
    }

    /// The round function: `0..side`.
    #[inline]
    fn round(&self, i: usize, half: u32) -> u32 {
        (((mix(self.keys[i] ^ u64::from(half)) >> 32) * u64::from(self.side)) >> 32) as u32
    }

    /// Splits `x < side²` into its two halves.
    #[inline]
    fn split(&self, x: u64) -> (u32, u32) {
        // x < side² ≤ 2^32: one 32-bit division.
        let x = x as u32;
        (x / self.side, x % self.side)
    }

    /// The image of `x` (`x < n`).
    #[inline]
    pub fn apply(&self, x: u64) -> u64 {
        let side = self.side;
        let mut x = x;
        loop {
            let (mut l, mut r) = self.split(x);
            for i in 0..ROUNDS {
                let sum = l + self.round(i, r);
                l = r;
                r = if sum >= side { sum - side } else { sum };
            }
            x = u64::from(l) * u64::from(side) + u64::from(r);
            if x < self.n {
                return x;
            }
        }
    }

    /// The `x` whose image is `y` (`y < n`).
    #[inline]
    pub fn invert(&self, y: u64) -> u64 {
        let side = self.side;
        let mut y = y;
        loop {
            let (mut l, mut r) = self.split(y);
            for i in (0..ROUNDS).rev() {
                let f = self.round(i, l);
                let prev = if r >= f { r - f } else { r + side - f };
                r = l;
                l = prev;
            }
            y = u64::from(l) * u64::from(side) + u64::from(r);
            if y < self.n {
                return y;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_a_bijection_with_its_inverse() {
        for n in [1u64, 2, 3, 7, 10, 99, 1000, 4097] {
            let p = Permutation::new(n, 42);
            let mut seen = vec![false; n as usize];
            for x in 0..n {
                let y = p.apply(x);
                assert!(y < n, "n {n}: {x} -> {y}");
                assert!(!seen[y as usize], "n {n}: {y} hit twice");
                seen[y as usize] = true;
                assert_eq!(p.invert(y), x);
            }
        }
    }

    #[test]
    fn depends_on_the_seed_and_mixes() {
        let n = 1 << 20;
        let (a, b) = (Permutation::new(n, 1), Permutation::new(n, 2));
        let same = (0..1000).filter(|&x| a.apply(x) == b.apply(x)).count();
        assert!(same < 5, "{same} fixed agreements");
        // Consecutive inputs land far apart: the mean distance is near n / 3.
        let mean = (0..10_000u64)
            .map(|x| a.apply(x).abs_diff(a.apply(x + 1)) as f64)
            .sum::<f64>()
            / 10_000.0;
        assert!(
            (mean / n as f64 - 1.0 / 3.0).abs() < 0.02,
            "mean gap {mean}"
        );
    }

    #[test]
    fn large_domains_round_trip() {
        let n = 111_059_956;
        let p = Permutation::new(n, 7);
        for x in (0..n).step_by(9_999_991).chain([n - 1]) {
            assert_eq!(p.invert(p.apply(x)), x);
        }
    }
}
