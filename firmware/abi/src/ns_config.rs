//! NS_config: one minibatch's neighbour-sampling request, carried by a single `NS_SUBMIT`.
//!
//! Layout (little-endian): a 32-byte [`NsConfigHeader`] followed by `target_count` `u64` target
//! node ids. Fanouts are in hop order from the targets: `fanouts[0]` neighbours are sampled for
//! each target, `fanouts[1]` for every node of the first layer's sources, and so on (the
//! message-flow-graph convention described in [`crate::subgraph`]). Unused fanout slots are 0.

use core::mem::{offset_of, size_of};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::nvme::VendorStatus;

/// Magic number of an NS_config: the bytes `NSCF`.
pub const NS_CONFIG_MAGIC: [u8; 4] = *b"NSCF";
/// The NS_config version this crate writes and reads.
pub const NS_CONFIG_VERSION: u16 = 1;
/// Most layers (hops) one NS_config may ask for.
pub const MAX_LAYERS: usize = 4;

/// The fixed 32-byte head of an NS_config.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct NsConfigHeader {
    /// [`NS_CONFIG_MAGIC`].
    pub magic: [u8; 4],
    /// [`NS_CONFIG_VERSION`].
    pub version: U16,
    /// Number of layers to sample, 1..=[`MAX_LAYERS`].
    pub layer_count: u8,
    /// Flags: [`NS_FLAG_FEATURES`]; every other bit must be 0.
    pub flags: u8,
    /// Seed of the sampling function.
    pub seed: U64,
    /// Fanout per layer, hop order; slots at and past `layer_count` are 0.
    pub fanouts: [U16; MAX_LAYERS],
    /// Number of target node ids that follow the header.
    pub target_count: U32,
    /// Reserved, must be 0.
    pub reserved: U32,
}

const _: () = {
    assert!(size_of::<NsConfigHeader>() == 32);
    assert!(offset_of!(NsConfigHeader, layer_count) == 6);
    assert!(offset_of!(NsConfigHeader, seed) == 8);
    assert!(offset_of!(NsConfigHeader, fanouts) == 16);
    assert!(offset_of!(NsConfigHeader, target_count) == 24);
    assert!(offset_of!(NsConfigHeader, reserved) == 28);
};

/// NS_config flag: return the features of the subgraph's nodes with it (the graph must have a
/// feature region).
pub const NS_FLAG_FEATURES: u8 = 1;

/// Sets [`NS_FLAG_FEATURES`] in an encoded NS_config.
pub fn request_features(config: &mut [u8]) {
    if let Some(flags) = config.get_mut(offset_of!(NsConfigHeader, flags)) {
        *flags |= NS_FLAG_FEATURES;
    }
}

/// The limits a device accepts, reported to hosts and checked on every NS_config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NsLimits {
    /// Most targets per NS_config.
    pub max_targets: u32,
    /// Largest fanout per layer.
    pub max_fanout: u16,
}

/// A parsed, validated NS_config borrowing its targets from the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NsConfig<'a> {
    /// Seed of the sampling function.
    pub seed: u64,
    /// Whether the node features are asked for.
    pub features: bool,
    layer_count: u8,
    fanouts: [u16; MAX_LAYERS],
    targets: &'a [U64],
}

impl<'a> NsConfig<'a> {
    /// Parses `bytes` and checks every field against `limits` and a graph of `node_count` nodes.
    /// Bytes after the targets are ignored (hosts may pad to a dword or block multiple).
    pub fn parse(
        bytes: &'a [u8],
        limits: &NsLimits,
        node_count: u64,
    ) -> Result<Self, VendorStatus> {
        let (header, rest) =
            NsConfigHeader::ref_from_prefix(bytes).map_err(|_| VendorStatus::Truncated)?;
        if header.magic != NS_CONFIG_MAGIC {
            return Err(VendorStatus::BadMagic);
        }
        if header.version.get() != NS_CONFIG_VERSION {
            return Err(VendorStatus::BadVersion);
        }
        if header.flags & !NS_FLAG_FEATURES != 0 || header.reserved.get() != 0 {
            return Err(VendorStatus::ReservedField);
        }
        let layer_count = usize::from(header.layer_count);
        if !(1..=MAX_LAYERS).contains(&layer_count) {
            return Err(VendorStatus::BadLayerCount);
        }
        let mut fanouts = [0u16; MAX_LAYERS];
        for (i, f) in header.fanouts.iter().enumerate() {
            let f = f.get();
            let used = i < layer_count;
            if (used && (f == 0 || f > limits.max_fanout)) || (!used && f != 0) {
                return Err(VendorStatus::BadFanout);
            }
            fanouts[i] = f;
        }
        let target_count = header.target_count.get();
        if target_count == 0 || target_count > limits.max_targets {
            return Err(VendorStatus::BadTargetCount);
        }
        let (targets, _) = <[U64]>::ref_from_prefix_with_elems(rest, target_count as usize)
            .map_err(|_| VendorStatus::Truncated)?;
        if targets.iter().any(|t| t.get() >= node_count) {
            return Err(VendorStatus::NodeOutOfRange);
        }
        Ok(Self {
            seed: header.seed.get(),
            features: header.flags & NS_FLAG_FEATURES != 0,
            layer_count: header.layer_count,
            fanouts,
            targets,
        })
    }

    /// The fanouts of the used layers, hop order.
    pub fn fanouts(&self) -> &[u16] {
        &self.fanouts[..usize::from(self.layer_count)]
    }

    /// Number of target ids.
    pub fn target_count(&self) -> usize {
        self.targets.len()
    }

    /// Target `i`, if `i < target_count()`.
    pub fn target(&self, i: usize) -> Option<u64> {
        self.targets.get(i).map(|t| t.get())
    }

    /// The target ids in payload order.
    pub fn targets(&self) -> impl Iterator<Item = u64> + 'a {
        self.targets.iter().map(|t| t.get())
    }
}

/// Size in bytes of an NS_config with `target_count` targets.
pub fn ns_config_size_bytes(target_count: usize) -> usize {
    size_of::<NsConfigHeader>() + 8 * target_count
}

/// Writes an NS_config into `out` and returns the number of bytes used, or `None` if `out` is too
/// small or the arguments cannot be encoded (more than [`MAX_LAYERS`] fanouts, or more than
/// `u32::MAX` targets). No range checks beyond that: a device is the judge of its limits.
pub fn encode_ns_config(
    seed: u64,
    fanouts: &[u16],
    targets: &[u64],
    out: &mut [u8],
) -> Option<usize> {
    if fanouts.len() > MAX_LAYERS {
        return None;
    }
    let size = ns_config_size_bytes(targets.len());
    let out = out.get_mut(..size)?;
    let mut header = NsConfigHeader {
        magic: NS_CONFIG_MAGIC,
        version: NS_CONFIG_VERSION.into(),
        layer_count: fanouts.len() as u8,
        seed: seed.into(),
        target_count: u32::try_from(targets.len()).ok()?.into(),
        ..NsConfigHeader::default()
    };
    for (slot, f) in header.fanouts.iter_mut().zip(fanouts) {
        *slot = (*f).into();
    }
    let (head, body) = out.split_at_mut(size_of::<NsConfigHeader>());
    head.copy_from_slice(header.as_bytes());
    for (chunk, t) in body.chunks_exact_mut(8).zip(targets) {
        chunk.copy_from_slice(&t.to_le_bytes());
    }
    Some(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    const LIMITS: NsLimits = NsLimits {
        max_targets: 4,
        max_fanout: 25,
    };

    fn encode(seed: u64, fanouts: &[u16], targets: &[u64]) -> Vec<u8> {
        let mut out = vec![0u8; ns_config_size_bytes(targets.len())];
        assert_eq!(
            encode_ns_config(seed, fanouts, targets, &mut out),
            Some(out.len())
        );
        out
    }

    #[test]
    fn golden_bytes() {
        let bytes = encode(0x0102_0304_0506_0708, &[10, 5], &[7, 0x1_0000_0000]);
        let golden: [u8; 48] = [
            b'N', b'S', b'C', b'F', 1, 0, 2, 0, //
            8, 7, 6, 5, 4, 3, 2, 1, //
            10, 0, 5, 0, 0, 0, 0, 0, //
            2, 0, 0, 0, 0, 0, 0, 0, //
            7, 0, 0, 0, 0, 0, 0, 0, //
            0, 0, 0, 0, 1, 0, 0, 0,
        ];
        assert_eq!(bytes, golden);
        let cfg = NsConfig::parse(&golden, &LIMITS, 1 << 33).unwrap();
        assert_eq!(cfg.seed, 0x0102_0304_0506_0708);
        assert_eq!(cfg.fanouts(), &[10, 5]);
        assert_eq!(cfg.targets().collect::<Vec<_>>(), vec![7, 0x1_0000_0000]);
    }

    #[test]
    fn every_invalid_field_maps_to_its_status() {
        let good = encode(1, &[3, 3], &[1, 2]);
        let parse = |b: &[u8]| NsConfig::parse(b, &LIMITS, 10).map(|_| ());
        let patched = |offset: usize, value: &[u8]| {
            let mut b = good.clone();
            b[offset..offset + value.len()].copy_from_slice(value);
            b
        };
        assert_eq!(parse(&good), Ok(()));
        assert_eq!(parse(&patched(0, b"NSCX")), Err(VendorStatus::BadMagic));
        assert_eq!(parse(&patched(4, &[2, 0])), Err(VendorStatus::BadVersion));
        assert_eq!(parse(&patched(6, &[0])), Err(VendorStatus::BadLayerCount));
        assert_eq!(parse(&patched(6, &[5])), Err(VendorStatus::BadLayerCount));
        assert_eq!(parse(&patched(7, &[2])), Err(VendorStatus::ReservedField));
        let mut with = good.clone();
        request_features(&mut with);
        assert_eq!(
            NsConfig::parse(&with, &LIMITS, 10).map(|c| c.features),
            Ok(true)
        );
        assert_eq!(parse(&patched(28, &[1])), Err(VendorStatus::ReservedField));
        assert_eq!(parse(&patched(16, &[0, 0])), Err(VendorStatus::BadFanout));
        assert_eq!(parse(&patched(18, &[26, 0])), Err(VendorStatus::BadFanout));
        assert_eq!(parse(&patched(20, &[1, 0])), Err(VendorStatus::BadFanout));
        assert_eq!(
            parse(&patched(24, &[0, 0, 0, 0])),
            Err(VendorStatus::BadTargetCount)
        );
        assert_eq!(
            parse(&patched(24, &[5, 0, 0, 0])),
            Err(VendorStatus::BadTargetCount)
        );
        assert_eq!(
            parse(&patched(24, &[3, 0, 0, 0])),
            Err(VendorStatus::Truncated)
        );
        assert_eq!(
            parse(&patched(40, &[10])),
            Err(VendorStatus::NodeOutOfRange)
        );
        for len in 0..good.len() {
            assert!(parse(&good[..len]).is_err(), "truncated to {len} bytes");
        }
        assert_eq!(parse(&good[..20]), Err(VendorStatus::Truncated));
    }
}
