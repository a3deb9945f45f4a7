//! Generated datasets: an R-MAT graph whose labels follow its communities and whose features
//! follow its labels, so that a GNN has something to learn.
//!
//! R-MAT places edges by recursive quadrants, so nodes whose draw indices share leading bits
//! link to each other more often than to others (with the Graph500 parameters, the two
//! endpoints of an edge agree on each leading bit with probability `a + d` = 0.62). The label
//! of the node drawn as index `d` is its bucket among `classes` equal ranges of draw indices,
//! and its features are its class's centroid (a seeded standard-normal vector) plus
//! standard-normal noise. Features are written row by row, never held in memory; the graph is
//! built by [`crate::rmat::generate`] without a separate edge list.

use std::path::Path;

use crate::npy::Dtype;
use crate::rmat::{self, RmatParams};
use crate::rng::SplitMix64;

use super::{Dataset, DatasetError, DatasetWriter, FORMAT_VERSION, Manifest, field_error};

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateParams {
    /// Dataset name.
    pub name: String,
    /// R-MAT scale (2^scale nodes).
    pub scale: u32,
    /// Edges drawn per node.
    pub edge_factor: u32,
    /// Seed of graph, labels, features and splits.
    pub seed: u64,
    /// Feature dimension (0: no features).
    pub feature_dim: u32,
    /// Feature element type ([`Dtype::F32`] or [`Dtype::F16`]).
    pub feature_dtype: Dtype,
    /// Label classes (≥ 1).
    pub classes: u32,
}

/// Percent of nodes in the training and validation splits (the rest is test).
const SPLIT_PERCENT: (u64, u64) = (60, 20);

/// Generates the dataset of `p` into `dir`.
pub fn generate(dir: &Path, p: &GenerateParams) -> Result<Dataset, DatasetError> {
    if p.classes == 0 || !matches!(p.feature_dtype, Dtype::F32 | Dtype::F16) {
        return Err(field_error(
            dir,
            "parameters",
            "classes must be ≥ 1 and features f32 or f16",
        ));
    }
    let params = RmatParams::graph500(p.scale, p.edge_factor, p.seed);
    let graph = rmat::generate(&params).map_err(|e| field_error(dir, "rmat", e.to_string()))?;
    let n = graph.node_count();
    let mut labels = vec![0i64; n as usize];
    for (d, node) in rmat::permutation(&params).into_iter().enumerate() {
        labels[node as usize] = ((d as u128 * u128::from(p.classes)) >> p.scale) as i64;
    }
    let w = DatasetWriter::create(dir)?;
    let (indptr, indices) = w.graph(&graph)?;
    let features = (p.feature_dim > 0)
        .then(|| write_features(&w, p, &labels))
        .transpose()?;
    let label_entry = w.ids("labels.npy", &labels)?;
    let mut splits: [Vec<i64>; 3] = Default::default();
    for v in 0..n {
        let bucket = SplitMix64::stream(p.seed ^ v, 4).next_u64() % 100;
        let k = if bucket < SPLIT_PERCENT.0 {
            0
        } else if bucket < SPLIT_PERCENT.0 + SPLIT_PERCENT.1 {
            1
        } else {
            2
        };
        splits[k].push(v as i64);
    }
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        name: p.name.clone(),
        source: format!(
            "sagessd R-MAT scale {} edge factor {} seed {}, {} classes, {} features",
            p.scale, p.edge_factor, p.seed, p.classes, p.feature_dim
        ),
        node_count: n,
        edge_count: graph.edge_count(),
        symmetric: true,
        class_count: Some(p.classes),
        indptr,
        indices,
        features,
        labels: Some(label_entry),
        train: Some(w.ids("train.npy", &splits[0])?),
        valid: Some(w.ids("valid.npy", &splits[1])?),
        test: Some(w.ids("test.npy", &splits[2])?),
        node_ids: None,
    };
    w.finish(&manifest)
}

/// Writes `features.npy`: per node, its class centroid plus noise, row by row.
fn write_features(
    w: &DatasetWriter,
    p: &GenerateParams,
    labels: &[i64],
) -> Result<super::ArrayEntry, DatasetError> {
    let dim = p.feature_dim as usize;
    let mut centroids = SplitMix64::stream(p.seed, 2);
    let centroids: Vec<f32> = (0..p.classes as usize * dim)
        .map(|_| normal(&mut centroids))
        .collect();
    let mut out = w.array(
        "features.npy",
        p.feature_dtype,
        &[labels.len() as u64, u64::from(p.feature_dim)],
    )?;
    let mut row = Vec::with_capacity(dim * 4);
    for (v, label) in labels.iter().enumerate() {
        let mut rng = SplitMix64::stream(p.seed ^ v as u64, 3);
        let centroid = &centroids[*label as usize * dim..][..dim];
        row.clear();
        for c in centroid {
            let x = c + normal(&mut rng);
            match p.feature_dtype {
                Dtype::F16 => row.extend_from_slice(&f16_bits(x).to_le_bytes()),
                _ => row.extend_from_slice(&x.to_le_bytes()),
            }
        }
        out.write(&row)?;
    }
    out.finish()
}

/// A standard-normal draw (Box–Muller).
fn normal(rng: &mut SplitMix64) -> f32 {
    let u1 = rng.next_f64().max(f64::MIN_POSITIVE);
    let u2 = rng.next_f64();
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

/// IEEE 754 binary16 bits of `x`, rounded to nearest even (overflow to infinity, NaN kept).
pub fn f16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xFF) as i32;
    let mant = bits & 0x7F_FFFF;
    if exp == 0xFF {
        return sign | 0x7C00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1F {
        return sign | 0x7C00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        // Subnormal: shift the mantissa (with its implicit bit) into place, rounding.
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rounded = m + half - 1 + ((m >> shift) & 1);
        return sign | (rounded >> shift) as u16;
    }
    let rounded = mant + 0xFFF + ((mant >> 13) & 1);
    let (e, m) = if rounded & 0x80_0000 != 0 {
        (e + 1, 0)
    } else {
        (e, rounded >> 13)
    };
    if e >= 0x1F {
        return sign | 0x7C00;
    }
    sign | ((e as u16) << 10) | m as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_matches_known_values() {
        for (x, bits) in [
            (0.0f32, 0x0000u16),
            (1.0, 0x3C00),
            (-2.0, 0xC000),
            (0.5, 0x3800),
            (65504.0, 0x7BFF),
            (1e6, 0x7C00),
            (6.1035156e-5, 0x0400),
            (5.9604645e-8, 0x0001),
            (1.0009766, 0x3C01),
            (1.0004883, 0x3C00), // halfway: rounds to even
        ] {
            assert_eq!(f16_bits(x), bits, "{x}");
        }
        assert_eq!(f16_bits(f32::NAN) & 0x7C00, 0x7C00);
    }
}
