//! A node-feature table of any size, computed instead of stored: value `c` of node `v`'s row is
//! a pure function of `(seed, v, c)`, so ogbn-papers100M's table (111 M rows of 128 `f32`,
//! 57 GB) needs no disk and no memory, and every reader — a feature cache on the host, the
//! emulated flash ([`FeatureBytes`]), a check that recomputes a row — sees the same bytes.
//!
//! The values are uniform in `[-1, 1)` (each from one 64-bit hash of its position) and carry
//! no signal: they exist to be read, cached and moved, which is all the feature-cache
//! experiments measure. Training needs a labelled graph's real features.
//!
//! The table is `f32`, little-endian, row-major. [`FeatureBytes`] lays it out at a row stride:
//! `row_bytes` (a `features.npy`'s rows back to back) or the next power of two (the feature
//! region the firmware gathers from), the padding and whatever lies past the last row reading
//! as zeros.

use std::sync::Arc;

use sagessd_abi::sample::{GOLDEN, mix};

use crate::nand::synthetic::LogicalContent;

/// Most values per row (a row of 1 MiB), as for a stored table.
pub const MAX_FEATURE_DIM: u32 = 1 << 18;

/// Why a computed feature table cannot be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SyntheticFeaturesError {
    /// No rows.
    #[error("a feature table needs at least one row")]
    NoRows,
    /// The width is 0 or above [`MAX_FEATURE_DIM`].
    #[error("feature width {0} is outside 1..={MAX_FEATURE_DIM}")]
    Dim(u32),
    /// The table does not fit in 64-bit byte offsets at its stride.
    #[error("{rows} rows of stride {stride_bytes} bytes overflow 64-bit offsets")]
    TooLarge {
        /// Rows asked for.
        rows: u64,
        /// The stride asked for.
        stride_bytes: u64,
    },
    /// A stride shorter than a row.
    #[error("stride {stride_bytes} is shorter than a row of {row_bytes} bytes")]
    Stride {
        /// The stride asked for.
        stride_bytes: u64,
        /// A row's bytes.
        row_bytes: u64,
    },
}

/// A computed `f32` feature table (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntheticFeatures {
    rows: u64,
    dim: u32,
    seed: u64,
}

impl SyntheticFeatures {
    /// `rows` rows of `dim` values from `seed`.
    pub fn new(rows: u64, dim: u32, seed: u64) -> Result<Self, SyntheticFeaturesError> {
        if rows == 0 {
            return Err(SyntheticFeaturesError::NoRows);
        }
        if dim == 0 || dim > MAX_FEATURE_DIM {
            return Err(SyntheticFeaturesError::Dim(dim));
        }
        let features = Self { rows, dim, seed };
        features.table_bytes(features.row_bytes())?;
        Ok(features)
    }

    /// Rows (nodes).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Values per row.
    pub fn dim(&self) -> u32 {
        self.dim
    }

    /// Bytes of one row (`dim` × 4).
    pub fn row_bytes(&self) -> u64 {
        u64::from(self.dim) * 4
    }

    /// Bytes of the table laid out at `stride_bytes` a row.
    pub fn table_bytes(&self, stride_bytes: u64) -> Result<u64, SyntheticFeaturesError> {
        if stride_bytes < self.row_bytes() {
            return Err(SyntheticFeaturesError::Stride {
                stride_bytes,
                row_bytes: self.row_bytes(),
            });
        }
        self.rows
            .checked_mul(stride_bytes)
            .ok_or(SyntheticFeaturesError::TooLarge {
                rows: self.rows,
                stride_bytes,
            })
    }

    /// Value `c` of row `v`: the top 24 bits of a hash of `(seed, v, c)`, scaled to
    /// `[-1, 1)` (exact in `f32`).
    pub fn value(&self, v: u64, c: u32) -> f32 {
        value_keyed(self.row_key(v), c)
    }

    /// The hash key of row `v` (one mix per row, then one per value).
    fn row_key(&self, v: u64) -> u64 {
        mix(self.seed.wrapping_add(GOLDEN) ^ mix(v.wrapping_add(1).wrapping_mul(GOLDEN)))
    }

    /// Row `v`'s bytes from byte `from` of the row on, into `out` (at most the rest of the
    /// row; a partial value is cut as its little-endian bytes are).
    fn fill_row(&self, v: u64, from: u64, out: &mut [u8]) {
        let key = self.row_key(v);
        let mut c = (from / 4) as u32;
        let skip = (from % 4) as usize;
        let mut out = out;
        if skip != 0 && !out.is_empty() {
            let bytes = value_keyed(key, c).to_le_bytes();
            let take = (4 - skip).min(out.len());
            out[..take].copy_from_slice(&bytes[skip..skip + take]);
            out = &mut out[take..];
            c += 1;
        }
        let mut whole = out.chunks_exact_mut(4);
        for value in &mut whole {
            value.copy_from_slice(&value_keyed(key, c).to_le_bytes());
            c += 1;
        }
        let rest = whole.into_remainder();
        if !rest.is_empty() {
            let bytes = value_keyed(key, c).to_le_bytes();
            rest.copy_from_slice(&bytes[..rest.len()]);
        }
    }

    /// The table's bytes at `stride_bytes` a row (≥ a row; checked by [`FeatureBytes::new`]),
    /// from byte `offset_bytes` on, into `out`; padding and bytes past the last row read 0.
    fn fill(&self, stride_bytes: u64, offset_bytes: u64, out: &mut [u8]) {
        let row_bytes = self.row_bytes();
        let mut at = 0usize;
        let mut pos = offset_bytes;
        while at < out.len() {
            let (v, within) = (pos / stride_bytes, pos % stride_bytes);
            let in_stride = (stride_bytes - within).min((out.len() - at) as u64) as usize;
            let chunk = &mut out[at..at + in_stride];
            if v >= self.rows {
                out[at..].fill(0);
                return;
            }
            let data = row_bytes.saturating_sub(within).min(in_stride as u64) as usize;
            self.fill_row(v, within, &mut chunk[..data]);
            chunk[data..].fill(0);
            at += in_stride;
            pos += in_stride as u64;
        }
    }
}

/// Value `c` of the row whose key is `key`: the top 24 bits of one hash, scaled to `[-1, 1)`.
fn value_keyed(key: u64, c: u32) -> f32 {
    let h = mix(key ^ u64::from(c).wrapping_mul(GOLDEN));
    (h >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// A computed feature table's bytes at a row stride, as a [`LogicalContent`]: what the host's
/// feature reader computes its rows from, and the content a device region of computed pages
/// would take (no device holds one yet).
#[derive(Clone, Debug)]
pub struct FeatureBytes {
    features: Arc<SyntheticFeatures>,
    stride_bytes: u64,
}

impl FeatureBytes {
    /// `features` laid out at `stride_bytes` a row.
    pub fn new(
        features: Arc<SyntheticFeatures>,
        stride_bytes: u64,
    ) -> Result<Self, SyntheticFeaturesError> {
        features.table_bytes(stride_bytes)?;
        Ok(Self {
            features,
            stride_bytes,
        })
    }
}

impl LogicalContent for FeatureBytes {
    fn fill(&self, offset_bytes: u64, out: &mut [u8]) {
        self.features.fill(self.stride_bytes, offset_bytes, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row `v` built from [`SyntheticFeatures::value`], one value at a time: the oracle the
    /// byte-level fills are checked against.
    fn row_from_values(f: &SyntheticFeatures, v: u64) -> Vec<u8> {
        (0..f.dim())
            .flat_map(|c| f.value(v, c).to_le_bytes())
            .collect()
    }

    #[test]
    fn every_window_at_every_stride_equals_the_rows_value_by_value() {
        let f = Arc::new(SyntheticFeatures::new(37, 5, 11).unwrap());
        for stride in [20u64, 32, 33] {
            let bytes = FeatureBytes::new(Arc::clone(&f), stride).unwrap();
            // The whole table and a tail past its end, built row by row.
            let mut expect = Vec::new();
            for v in 0..f.rows() {
                expect.extend(row_from_values(&f, v));
                expect.resize(((v + 1) * stride) as usize, 0);
            }
            expect.resize(expect.len() + 50, 0);
            let mut whole = vec![0xAAu8; expect.len()];
            bytes.fill(0, &mut whole);
            assert_eq!(whole, expect, "stride {stride}");
            // Windows starting anywhere (inside values, padding, past the end).
            for start in (0..expect.len()).step_by(7) {
                for len in [1usize, 3, 19, 64, 200] {
                    let end = (start + len).min(expect.len());
                    let mut w = vec![0x55u8; end - start];
                    bytes.fill(start as u64, &mut w);
                    assert_eq!(w, expect[start..end], "stride {stride} at {start}+{len}");
                }
            }
        }
    }

    #[test]
    fn values_are_in_range_deterministic_and_keyed_by_seed() {
        let f = SyntheticFeatures::new(1000, 16, 1).unwrap();
        let mut sum = 0.0f64;
        for v in 0..1000 {
            for c in 0..16 {
                let x = f.value(v, c);
                assert!((-1.0..1.0).contains(&x), "{x}");
                assert_eq!(x, f.value(v, c));
                sum += f64::from(x);
            }
        }
        assert!((sum / 16_000.0).abs() < 0.05, "mean {}", sum / 16_000.0);
        let other = SyntheticFeatures::new(1000, 16, 2).unwrap();
        assert_ne!(row_from_values(&f, 7), row_from_values(&other, 7));
        assert_ne!(row_from_values(&f, 7), row_from_values(&f, 8));
    }

    #[test]
    fn bad_shapes_are_errors() {
        use SyntheticFeaturesError as E;
        assert_eq!(SyntheticFeatures::new(0, 4, 1), Err(E::NoRows));
        assert_eq!(SyntheticFeatures::new(4, 0, 1), Err(E::Dim(0)));
        assert_eq!(
            SyntheticFeatures::new(4, MAX_FEATURE_DIM + 1, 1),
            Err(E::Dim(MAX_FEATURE_DIM + 1))
        );
        assert!(matches!(
            SyntheticFeatures::new(u64::MAX / 8, 4, 1),
            Err(E::TooLarge { .. })
        ));
        let f = Arc::new(SyntheticFeatures::new(4, 4, 1).unwrap());
        assert!(matches!(
            FeatureBytes::new(Arc::clone(&f), 15),
            Err(E::Stride { .. })
        ));
        // papers100M's table at 128 values: 57 GB, past 32 bits, fits 64.
        let p = SyntheticFeatures::new(111_059_956, 128, 1).unwrap();
        assert_eq!(p.table_bytes(512).unwrap(), 56_862_697_472);
    }
}
