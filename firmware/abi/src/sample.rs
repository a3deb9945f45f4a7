//! The one neighbour-sampling function, shared by the firmware and every host sampler.
//!
//! # Specification
//!
//! Uniform sampling of `k = min(fanout, degree)` distinct positions out of a neighbour list of
//! length `degree`, as a pure function of `(seed, layer, node, degree, fanout)`; the sampled
//! neighbours are the list's entries at those positions, in ascending position order.
//!
//! * If `degree <= fanout`, every position `0..degree` is taken, in order.
//! * Otherwise, with `mix(z)` the SplitMix64 finaliser
//!   (`z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31`,
//!   all arithmetic wrapping modulo 2^64) and `G = 0x9E3779B97F4A7C15`:
//!   * `key = mix(mix(seed ^ (G * (layer + 1))) ^ node)`;
//!   * the `i`-th random word (`i = 0, 1, …`) is `r(i) = mix(key + G * (i + 1))`;
//!   * a draw in `0..=j` is `(r(i) * (j + 1)) >> 64` computed in 128 bits (bias below
//!     `degree / 2^64`, accepted for determinism);
//!   * Robert Floyd's algorithm: for `j` from `degree - k` to `degree - 1`, with `i` counting the
//!     draws from 0, draw `t` in `0..=j`; if `t` is already in the set insert `j`, else insert `t`;
//!   * the set, sorted ascending, is the result.
//!
//! `layer` is the hop index (0 for the targets' neighbours). The function reads nothing else, so
//! the device can compute which positions it needs before it reads any edge-list page.

/// Largest fanout the sampling function accepts (the size of its scratch set).
pub const MAX_FANOUT: u16 = 1024;

/// The SplitMix64 increment, 2^64 / φ (the `G` of the specification).
pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The SplitMix64 finaliser (the `mix` of the specification): a bijective 64-bit mix, shared
/// with the host's seeded generators so the project has one definition of it.
pub fn mix(mut z: u64) -> u64 {
    z ^= z >> 30;
    z = z.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^= z >> 27;
    z = z.wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Number of neighbours sampled for a node of `degree` with `fanout`.
pub fn sample_count(degree: u64, fanout: u16) -> usize {
    degree.min(u64::from(fanout)) as usize
}

/// Lists up to this long keep the drawn set as a bitmap on the stack (256 bytes): a draw's
/// membership test and insertion are a bit each, and the set comes out sorted by scanning the
/// bitmap. Longer lists keep it as a list, tested by scanning and sorted at the end.
const BITMAP_BITS: usize = 2048;
/// Lists up to this long (most) use a bitmap of this many bits (32 bytes), which costs a
/// few stores to clear where the large one costs a call to clear 256 bytes.
const SMALL_BITMAP_BITS: usize = 256;

/// `(r × m) >> 64` (the specification's draw in `0..m`) for `m < 2^32`, in 32-bit pieces: two
/// 32 × 32-bit multiplies, where the 128-bit product costs a 32-bit core a call into its
/// runtime library.
#[inline(always)]
fn scale(r: u64, m: u32) -> u32 {
    let lo = u64::from(r as u32) * u64::from(m);
    let hi = (r >> 32) * u64::from(m) + (lo >> 32);
    (hi >> 32) as u32
}

/// Robert Floyd's algorithm with the set as a bitmap of `W` words (`W` a power of two,
/// `degree ≤ 32 W`): draws
/// `out.len()` positions of `0..degree`, from the counter before the first draw's, and writes
/// them ascending.
#[inline(always)]
fn floyd_bitmap<const W: usize>(mut counter: u64, degree: u32, out: &mut [u64]) {
    let mut set = [0u32; W];
    for j in degree - out.len() as u32..degree {
        counter = counter.wrapping_add(GOLDEN);
        let t = scale(mix(counter), j + 1);
        // j is not in the set yet: every earlier pick is at most an earlier j. Both are below
        // 32 W (W a power of two), so the mask only spares the bounds checks.
        let pick = if set[(t / 32) as usize & (W - 1)] & (1 << (t % 32)) != 0 {
            j
        } else {
            t
        };
        set[(pick / 32) as usize & (W - 1)] |= 1 << (pick % 32);
    }
    let mut n = 0;
    for (w, &word) in set[..(degree as usize).div_ceil(32)].iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            out[n] = u64::from(32 * w as u32 + bits.trailing_zeros());
            n += 1;
            bits &= bits - 1;
        }
    }
}

/// Writes the sampled positions (ascending) into `out[..k]` and returns `k`, the
/// [`sample_count`]. Returns `None` if `out` is shorter than `k` or `fanout > MAX_FANOUT`.
pub fn sample_positions(
    seed: u64,
    layer: u8,
    node: u64,
    degree: u64,
    fanout: u16,
    out: &mut [u64],
) -> Option<usize> {
    let k = sample_count(degree, fanout);
    if fanout > MAX_FANOUT || out.len() < k {
        return None;
    }
    let out = &mut out[..k];
    if degree <= u64::from(fanout) {
        for (i, p) in out.iter_mut().enumerate() {
            *p = i as u64;
        }
        return Some(k);
    }
    let key = mix(mix(seed ^ GOLDEN.wrapping_mul(u64::from(layer) + 1)) ^ node);
    // r(i) = mix(key + G × (i + 1)): the counter steps by G.
    let mut counter = key;
    if degree <= SMALL_BITMAP_BITS as u64 {
        floyd_bitmap::<{ SMALL_BITMAP_BITS / 32 }>(counter, degree as u32, out);
        return Some(k);
    }
    if degree <= BITMAP_BITS as u64 {
        floyd_bitmap::<{ BITMAP_BITS / 32 }>(counter, degree as u32, out);
        return Some(k);
    }
    for (i, j) in (degree - k as u64..degree).enumerate() {
        counter = counter.wrapping_add(GOLDEN);
        let r = mix(counter);
        let t = match u32::try_from(j + 1) {
            Ok(m) => u64::from(scale(r, m)),
            Err(_) => ((u128::from(r) * (u128::from(j) + 1)) >> 64) as u64,
        };
        // `out[..i]` holds the set drawn so far.
        out[i] = if out[..i].contains(&t) { j } else { t };
    }
    out.sort_unstable();
    Some(k)
}

/// Samples `neighbours` of `node`: writes the chosen neighbours (ascending position order) into
/// `out[..k]` and returns `k`; `None` under the same conditions as [`sample_positions`].
/// `scratch` must hold at least `k` positions.
pub fn sample_neighbors<T: Copy>(
    seed: u64,
    layer: u8,
    node: u64,
    neighbours: &[T],
    fanout: u16,
    scratch: &mut [u64],
    out: &mut [T],
) -> Option<usize> {
    let k = sample_positions(seed, layer, node, neighbours.len() as u64, fanout, scratch)?;
    let out = out.get_mut(..k)?;
    for (o, p) in out.iter_mut().zip(&scratch[..k]) {
        *o = neighbours[*p as usize];
    }
    Some(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    fn positions(seed: u64, layer: u8, node: u64, degree: u64, fanout: u16) -> Vec<u64> {
        let mut out = vec![0; usize::from(fanout)];
        let k = sample_positions(seed, layer, node, degree, fanout, &mut out).unwrap();
        out.truncate(k);
        out
    }

    #[test]
    fn golden_values_pin_the_specification() {
        // Any change to these values breaks every stored sample: bump the ABI version instead.
        assert_eq!(mix(0), 0);
        assert_eq!(mix(1), 0x5692_161D_100B_05E5);
        assert_eq!(positions(7, 0, 3, 5, 10), vec![0, 1, 2, 3, 4]);
        // Computed by an independent Python implementation of the specification above.
        assert_eq!(positions(1, 0, 0, 100, 5), vec![4, 10, 16, 28, 39]);
        assert_eq!(
            positions(3, 2, 77, 1 << 40, 4),
            vec![77903375392, 122378620022, 126424448013, 1040838884852]
        );
    }

    /// The specification, written as it reads (128-bit products, a list scanned for
    /// membership, sorted at the end): the oracle of the implementation's shortcuts.
    fn specification(seed: u64, layer: u8, node: u64, degree: u64, fanout: u16) -> Vec<u64> {
        let k = degree.min(u64::from(fanout));
        if degree <= u64::from(fanout) {
            return (0..degree).collect();
        }
        let key = mix(mix(seed ^ GOLDEN.wrapping_mul(u64::from(layer) + 1)) ^ node);
        let mut set: Vec<u64> = Vec::new();
        for (i, j) in (degree - k..degree).enumerate() {
            let r = mix(key.wrapping_add(GOLDEN.wrapping_mul(i as u64 + 1)));
            let t = ((u128::from(r) * (u128::from(j) + 1)) >> 64) as u64;
            set.push(if set.contains(&t) { j } else { t });
        }
        set.sort_unstable();
        set
    }

    #[test]
    fn the_fast_paths_draw_what_the_specification_says() {
        let degrees = [
            11u64,
            26,
            31,
            255,
            256,
            257,
            32,
            33,
            100,
            2047,
            2048,
            2049,
            5000,
            u32::MAX as u64 - 1,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
            1 << 40,
            u64::MAX,
        ];
        for seed in 0..40u64 {
            for &degree in &degrees {
                for fanout in [1u16, 10, 25, 64, 1024] {
                    let node = sagessd_abi_mix_node(seed, degree);
                    let want = specification(seed, (seed % 3) as u8, node, degree, fanout);
                    let got = positions(seed, (seed % 3) as u8, node, degree, fanout);
                    assert_eq!(got, want, "seed {seed} degree {degree} fanout {fanout}");
                }
            }
        }
        // The 32-bit draw is the 128-bit one.
        for i in 0..10_000u64 {
            let r = mix(i);
            for m in [1u32, 2, 3, 1000, u32::MAX] {
                let want = ((u128::from(r) * u128::from(m)) >> 64) as u32;
                assert_eq!(scale(r, m), want);
            }
        }
    }

    fn sagessd_abi_mix_node(seed: u64, degree: u64) -> u64 {
        mix(seed ^ degree.rotate_left(17))
    }

    #[test]
    fn positions_are_distinct_sorted_in_range_and_deterministic() {
        for seed in 0..50u64 {
            for degree in [1u64, 9, 10, 11, 64, 1000, 1 << 40] {
                for fanout in [1u16, 3, 10, 25] {
                    let p = positions(seed, (seed % 4) as u8, seed * 31 + degree, degree, fanout);
                    assert_eq!(p.len(), sample_count(degree, fanout));
                    assert!(p.windows(2).all(|w| w[0] < w[1]));
                    assert!(p.iter().all(|x| *x < degree));
                    assert_eq!(
                        p,
                        positions(seed, (seed % 4) as u8, seed * 31 + degree, degree, fanout)
                    );
                }
            }
        }
    }

    #[test]
    fn sampling_is_uniform() {
        // 20 000 draws of 3 out of 10: each position is expected 6 000 times.
        let mut hits = [0u32; 10];
        for node in 0..20_000u64 {
            for p in positions(99, 1, node, 10, 3) {
                hits[p as usize] += 1;
            }
        }
        for h in hits {
            assert!((5_700..6_300).contains(&h), "{hits:?}");
        }
    }

    #[test]
    fn layer_seed_and_node_all_change_the_sample() {
        let base = positions(1, 0, 5, 1000, 10);
        assert_ne!(base, positions(2, 0, 5, 1000, 10));
        assert_ne!(base, positions(1, 1, 5, 1000, 10));
        assert_ne!(base, positions(1, 0, 6, 1000, 10));
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert_eq!(sample_positions(0, 0, 0, 10, 5, &mut [0; 4]), None);
        assert_eq!(
            sample_positions(0, 0, 0, 5000, MAX_FANOUT + 1, &mut [0; 2048]),
            None
        );
        let mut out = [0u32; 2];
        let mut scratch = [0u64; 2];
        assert_eq!(
            sample_neighbors(0, 0, 0, &[4u32, 5], 3, &mut scratch, &mut out),
            Some(2)
        );
        assert_eq!(out, [4, 5]);
    }
}
