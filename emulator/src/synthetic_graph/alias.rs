//! Walker's alias method with integer weights: one 64-bit random word picks an outcome in O(1),
//! exactly as often as its weight says (to within 2^-32), identically on every platform.
//!
//! Vose's construction ("A linear algorithm for generating random numbers with a given
//! distribution", IEEE TSE 1991), in integer arithmetic: column `i` keeps its own outcome with
//! probability `threshold[i] / 2^32` and gives the rest to `alias[i]`. A draw takes the column
//! from the word's high 32 bits and compares its low 32 bits with the threshold.

/// An alias table over outcomes `0..len`.
#[derive(Clone, Debug)]
pub struct AliasTable {
    threshold: Vec<u64>,
    alias: Vec<u32>,
}

/// The threshold of a column that always keeps its outcome.
const FULL: u64 = 1 << 32;

impl AliasTable {
    /// A table drawing outcome `i` with probability `weights[i] / Σ weights`. `None` if there
    /// is no outcome, more than `u32::MAX` of them, or every weight is 0.
    pub fn new(weights: &[u128]) -> Option<Self> {
        let k = u32::try_from(weights.len()).ok().filter(|&k| k > 0)?;
        let total = weights.iter().try_fold(0u128, |a, &w| a.checked_add(w))?;
        if total == 0 {
            return None;
        }
        // Column i holds scaled[i] / total of one column's worth; `total` is a full column.
        let scaled: Vec<u128> = weights
            .iter()
            .map(|&w| w.checked_mul(u128::from(k)))
            .collect::<Option<_>>()?;
        let mut scaled = scaled;
        let mut threshold = vec![FULL; k as usize];
        let mut alias: Vec<u32> = (0..k).collect();
        let (mut small, mut large): (Vec<u32>, Vec<u32>) =
            (0..k).partition(|&i| scaled[i as usize] < total);
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            let si = s as usize;
            threshold[si] = ((scaled[si] << 32) / total) as u64;
            alias[si] = l;
            let li = l as usize;
            scaled[li] = scaled[li] + scaled[si] - total;
            if scaled[li] < total {
                large.pop();
                small.push(l);
            }
        }
        // What is left keeps its column whole (rounding leaves at most tiny remainders).
        Some(Self { threshold, alias })
    }

    /// Number of outcomes.
    pub fn len(&self) -> usize {
        self.threshold.len()
    }

    /// Whether the table has no outcome (never: [`Self::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.threshold.is_empty()
    }

    /// The outcome a random word picks.
    #[inline]
    pub fn draw(&self, word: u64) -> usize {
        let column = (((word >> 32) * self.threshold.len() as u64) >> 32) as usize;
        // Both loads, then a select: the comparison is a coin toss for the branch predictor.
        let other = self.alias[column] as usize;
        let keep = (word & 0xFFFF_FFFF) < self.threshold[column];
        if keep { column } else { other }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagessd_abi::rng::SplitMix64;

    #[test]
    fn draws_follow_the_weights() {
        let weights = [5u128, 0, 1, 10, 3, 0, 1];
        let t = AliasTable::new(&weights).unwrap();
        let mut counts = [0u64; 7];
        let mut rng = SplitMix64::new(3);
        let draws = 2_000_000;
        for _ in 0..draws {
            counts[t.draw(rng.next_u64())] += 1;
        }
        let total: u128 = weights.iter().sum();
        for (i, (&c, &w)) in counts.iter().zip(&weights).enumerate() {
            let expected = draws as f64 * w as f64 / total as f64;
            assert!(
                (c as f64 - expected).abs() <= 5.0 * expected.sqrt() + 1.0,
                "outcome {i}: {c} draws, expected {expected}"
            );
            if w == 0 {
                assert_eq!(c, 0, "outcome {i} has weight 0");
            }
        }
    }

    #[test]
    fn exact_columns_for_a_uniform_table() {
        let t = AliasTable::new(&[7, 7, 7, 7]).unwrap();
        assert_eq!(t.draw(0), 0);
        assert_eq!(t.draw(u64::MAX), 3);
        assert_eq!(t.draw(1 << 63), 2);
    }

    #[test]
    fn refuses_empty_and_zero_tables() {
        assert!(AliasTable::new(&[]).is_none());
        assert!(AliasTable::new(&[0, 0]).is_none());
        assert!(AliasTable::new(&[u128::MAX, 1]).is_none());
    }
}
