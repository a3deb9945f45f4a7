//! Feature rows: raw little-endian bytes (f32 or f16) → an `f32 [nodes, dim]` tensor.
//!
//! Samplers and feature stores deliver rows in node-list order, `dim` values each, as bytes.
//! Half precision halves the bytes moved from storage; it is widened here, once, exactly.

use tch::{Device, Kind, Tensor};

use crate::error::TrainError;

/// How feature values are encoded in the raw feature bytes (little-endian IEEE 754).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeatureDtype {
    /// 4-byte single precision.
    F32,
    /// 2-byte half precision, widened to `f32` on load.
    F16,
}

impl FeatureDtype {
    /// Bytes per value.
    pub fn value_bytes(self) -> usize {
        match self {
            FeatureDtype::F32 => 4,
            FeatureDtype::F16 => 2,
        }
    }
}

/// Decodes `node_count × dim` little-endian values into an `f32 [node_count, dim]` tensor.
/// Half values are widened by libtorch, which is exact (every f16 is an f32).
pub(crate) fn features_tensor(
    bytes: &[u8],
    dtype: FeatureDtype,
    node_count: usize,
    dim: usize,
    device: Device,
) -> Result<Tensor, TrainError> {
    let value_bytes = dtype.value_bytes();
    let expected_bytes = node_count as u128 * dim as u128 * value_bytes as u128;
    if bytes.len() as u128 != expected_bytes {
        return Err(TrainError::FeatureLength {
            node_count,
            dim,
            value_bytes,
            expected_bytes,
            actual_bytes: bytes.len(),
        });
    }
    let flat = match dtype {
        FeatureDtype::F32 => {
            let values: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Tensor::f_from_slice(&values)?
        }
        FeatureDtype::F16 => {
            let bits: Vec<i16> = bytes
                .chunks_exact(2)
                .map(|b| i16::from_le_bytes([b[0], b[1]]))
                .collect();
            Tensor::f_from_slice(&bits)?
                .f_view_dtype(Kind::Half)?
                .f_to_kind(Kind::Float)?
        }
    };
    Ok(flat
        .f_view([node_count as i64, dim as i64])?
        .f_to_device(device)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{f32_bytes, floats};

    #[test]
    fn f16_features_widen_to_their_f32_values() {
        // (value, its IEEE half bits), each exact in f16: normals, a subnormal, the extremes.
        let table: [(f32, u16); 8] = [
            (0.0, 0x0000),
            (1.0, 0x3C00),
            (-2.0, 0xC000),
            (0.5, 0x3800),
            (1.5, 0x3E00),
            (65504.0, 0x7BFF),
            (6.103_515_6e-5, 0x0400),
            (5.960_464_5e-8, 0x0001),
        ];
        let half: Vec<u8> = table.iter().flat_map(|(_, b)| b.to_le_bytes()).collect();
        let single: Vec<f32> = table.iter().map(|(v, _)| *v).collect();
        let from_half = features_tensor(&half, FeatureDtype::F16, 4, 2, Device::Cpu).unwrap();
        let from_single =
            features_tensor(&f32_bytes(&single), FeatureDtype::F32, 4, 2, Device::Cpu).unwrap();
        assert_eq!(from_half.kind(), Kind::Float);
        let bits = |t: &Tensor| floats(t).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&from_half), bits(&from_single));
        assert_eq!(floats(&from_half), single);
    }
}
