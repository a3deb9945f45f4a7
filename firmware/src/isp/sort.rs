//! The gathers' sort: a stable least-significant-digit radix sort of `u64` keys by their high
//! word (a node id; the low word names what the key stands for), in passes of
//! [`RADIX_BITS`], as many as the largest node id needs.

/// Bits of the node id each pass sorts on.
pub(crate) const RADIX_BITS: u32 = 11;

/// Buckets of a pass.
pub(crate) const BUCKETS: usize = 1 << RADIX_BITS;

/// Sorts `keys` by `key >> 32`, stably, with `scratch` (at least as long) as the second
/// buffer and `counts` as the histogram; `highest` is the largest `key >> 32`. Returns the
/// number of passes and whether the sorted keys ended in `scratch` (after an odd number of
/// passes: they are not copied back).
#[inline(never)]
pub(crate) fn sort_by_node(
    keys: &mut [u64],
    scratch: &mut [u64],
    counts: &mut [u32; BUCKETS],
    highest: u32,
) -> (u32, bool) {
    let n = keys.len();
    let bits = u32::BITS - highest.leading_zeros();
    if n < 2 || bits == 0 {
        return (0, false);
    }
    let passes = bits.div_ceil(RADIX_BITS);
    let scratch = &mut scratch[..n];
    for pass in 0..passes {
        let (src, dst): (&[u64], &mut [u64]) = if pass % 2 == 0 {
            (keys, scratch)
        } else {
            (scratch, keys)
        };
        let shift = 32 + pass * RADIX_BITS;
        let digit = |key: u64| ((key >> shift) as usize) & (BUCKETS - 1);
        counts.fill(0);
        for &key in src.iter() {
            counts[digit(key)] += 1;
        }
        let mut sum = 0;
        for c in counts.iter_mut() {
            let count = *c;
            *c = sum;
            sum += count;
        }
        for &key in src.iter() {
            let d = digit(key);
            dst[counts[d] as usize] = key;
            counts[d] += 1;
        }
    }
    (passes, passes % 2 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn sorts_stably_by_the_high_word_in_as_many_passes_as_it_needs() {
        let mut counts = [0u32; BUCKETS];
        for highest in [0u32, 1, 2047, 2048, 1 << 22, u32::MAX] {
            let mut keys: Vec<u64> = (0..500u64)
                .map(|i| {
                    let node = (sagessd_abi::sample::mix(i) as u32) % highest.saturating_add(1);
                    u64::from(node) << 32 | i
                })
                .collect();
            let mut scratch = std::vec![0; keys.len()];
            let mut want = keys.clone();
            want.sort_by_key(|k| k >> 32); // stable
            let (passes, in_scratch) = sort_by_node(&mut keys, &mut scratch, &mut counts, highest);
            assert_eq!(passes, (32 - highest.leading_zeros()).div_ceil(RADIX_BITS));
            let got = if in_scratch { &scratch } else { &keys };
            assert_eq!(*got, want, "highest {highest}");
        }
    }
}
