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
    for (i, j) in (degree - k as u64..degree).enumerate() {
        let r = mix(key.wrapping_add(GOLDEN.wrapping_mul(i as u64 + 1)));
        let t = ((u128::from(r) * (u128::from(j) + 1)) >> 64) as u64;
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
