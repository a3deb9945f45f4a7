//! NS_config: a neighbour-sampling request carried by a single `NS_SUBMIT`: one minibatch, or a
//! *hyperbatch* of several that share fanouts and are sampled together.
//!
//! Layout (little-endian): a 32-byte [`NsConfigHeader`], then (hyperbatch only) one 16-byte
//! [`MinibatchHeader`] per minibatch, then `target_count` `u64` target node ids (the
//! minibatches' targets one after another). Fanouts are in hop order from the targets:
//! `fanouts[0]` neighbours are sampled for each target, `fanouts[1]` for every node of the first
//! layer's sources, and so on (the message-flow-graph convention described in
//! [`crate::subgraph`]). Unused fanout slots are 0.
//!
//! A hyperbatch ([`NS_FLAG_HYPERBATCH`]) lets the device read each flash page once per hop for
//! all its minibatches (AGNES's hyperbatch, inside the SSD); each minibatch's subgraph is the
//! one a single NS_config with its seed and targets returns, collected on its own
//! (`NS_COLLECT` with the minibatch's index in bits 31:24 of the tag).

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
    /// Flags: [`NS_FLAG_FEATURES`], [`NS_FLAG_HYPERBATCH`], [`NS_FLAG_SAMPLED_IDS`]; every
    /// other bit must be 0.
    pub flags: u8,
    /// Seed of the sampling function (0 in a hyperbatch: each minibatch has its own).
    pub seed: U64,
    /// Fanout per layer, hop order; slots at and past `layer_count` are 0.
    pub fanouts: [U16; MAX_LAYERS],
    /// Number of target node ids that follow the header (a hyperbatch: all its minibatches').
    pub target_count: U32,
    /// Minibatches of a hyperbatch, 1..=[`NsLimits::max_minibatches`]; 0 without
    /// [`NS_FLAG_HYPERBATCH`].
    pub minibatch_count: U32,
}

const _: () = {
    assert!(size_of::<NsConfigHeader>() == 32);
    assert!(offset_of!(NsConfigHeader, layer_count) == 6);
    assert!(offset_of!(NsConfigHeader, seed) == 8);
    assert!(offset_of!(NsConfigHeader, fanouts) == 16);
    assert!(offset_of!(NsConfigHeader, target_count) == 24);
    assert!(offset_of!(NsConfigHeader, minibatch_count) == 28);
};

/// One minibatch of a hyperbatch NS_config (16 bytes), in the minibatches' order.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct MinibatchHeader {
    /// Seed of the sampling function for this minibatch.
    pub seed: U64,
    /// Its number of targets, at least 1.
    pub target_count: U32,
    /// Reserved, must be 0.
    pub reserved: U32,
}

const _: () = {
    assert!(size_of::<MinibatchHeader>() == 16);
    assert!(offset_of!(MinibatchHeader, target_count) == 8);
};

/// NS_config flag: return the features of the subgraph's nodes with it (the graph must have a
/// feature region).
pub const NS_FLAG_FEATURES: u8 = 1;

/// NS_config flag: a hyperbatch; `minibatch_count` [`MinibatchHeader`]s follow the header.
pub const NS_FLAG_HYPERBATCH: u8 = 2;

/// NS_config flag: return each layer's sampled neighbours as global ids
/// ([`crate::sampled_ids`]) for the host to build the subgraph from, instead of the subgraph
/// itself: the device skips the last layer's deduplication and the relabelling. Not with
/// [`NS_FLAG_FEATURES`] (the device would need the last layer's unique nodes to gather their
/// rows).
pub const NS_FLAG_SAMPLED_IDS: u8 = 4;

/// Sets [`NS_FLAG_SAMPLED_IDS`] in an encoded NS_config.
pub fn request_sampled_ids(config: &mut [u8]) {
    if let Some(flags) = config.get_mut(offset_of!(NsConfigHeader, flags)) {
        *flags |= NS_FLAG_SAMPLED_IDS;
    }
}

/// Most minibatches a hyperbatch may carry on any device (the tag has 8 bits for the index).
pub const MAX_MINIBATCHES: u16 = 256;

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
    /// Most minibatches one hyperbatch NS_config may carry (1: the device takes plain
    /// NS_configs only), at most [`MAX_MINIBATCHES`].
    pub max_minibatches: u16,
}

/// A parsed, validated NS_config borrowing its minibatches and targets from the payload. A plain
/// NS_config is a hyperbatch of one minibatch, so the device samples both the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NsConfig<'a> {
    /// Whether the node features are asked for.
    pub features: bool,
    /// Whether it was sent as a hyperbatch ([`NS_FLAG_HYPERBATCH`]).
    pub hyperbatch: bool,
    /// Whether the result is the sampled ids ([`NS_FLAG_SAMPLED_IDS`]), not the subgraph.
    pub sampled_ids: bool,
    seed: u64,
    layer_count: u8,
    fanouts: [u16; MAX_LAYERS],
    minibatches: &'a [MinibatchHeader],
    targets: &'a [U64],
}

/// One minibatch of a parsed NS_config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Minibatch<'a> {
    /// Seed of the sampling function.
    pub seed: u64,
    /// Index of its first target among the NS_config's targets.
    pub first_target: u32,
    /// Its targets.
    pub targets: &'a [U64],
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
        if header.flags & !(NS_FLAG_FEATURES | NS_FLAG_HYPERBATCH | NS_FLAG_SAMPLED_IDS) != 0 {
            return Err(VendorStatus::ReservedField);
        }
        let features = header.flags & NS_FLAG_FEATURES != 0;
        let sampled_ids = header.flags & NS_FLAG_SAMPLED_IDS != 0;
        if features && sampled_ids {
            return Err(VendorStatus::ReservedField);
        }
        let hyperbatch = header.flags & NS_FLAG_HYPERBATCH != 0;
        let minibatch_count = header.minibatch_count.get();
        if !hyperbatch && minibatch_count != 0 {
            return Err(VendorStatus::ReservedField);
        }
        if hyperbatch && header.seed.get() != 0 {
            return Err(VendorStatus::ReservedField);
        }
        if hyperbatch
            && !(1..=u32::from(limits.max_minibatches.min(MAX_MINIBATCHES)))
                .contains(&minibatch_count)
        {
            return Err(VendorStatus::BadMinibatchCount);
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
        let (minibatches, rest) =
            <[MinibatchHeader]>::ref_from_prefix_with_elems(rest, minibatch_count as usize)
                .map_err(|_| VendorStatus::Truncated)?;
        let mut sum = 0u32;
        for m in minibatches {
            if m.reserved.get() != 0 {
                return Err(VendorStatus::ReservedField);
            }
            let n = m.target_count.get();
            sum = match sum.checked_add(n) {
                Some(s) if n > 0 && s <= target_count => s,
                _ => return Err(VendorStatus::BadTargetCount),
            };
        }
        if hyperbatch && sum != target_count {
            return Err(VendorStatus::BadTargetCount);
        }
        let (targets, _) = <[U64]>::ref_from_prefix_with_elems(rest, target_count as usize)
            .map_err(|_| VendorStatus::Truncated)?;
        if targets.iter().any(|t| t.get() >= node_count) {
            return Err(VendorStatus::NodeOutOfRange);
        }
        Ok(Self {
            features,
            hyperbatch,
            sampled_ids,
            seed: header.seed.get(),
            layer_count: header.layer_count,
            fanouts,
            minibatches,
            targets,
        })
    }

    /// Number of minibatches (1 for a plain NS_config).
    pub fn minibatch_count(&self) -> usize {
        self.minibatches.len().max(1)
    }

    /// Minibatch `i`, if `i < minibatch_count()`.
    pub fn minibatch(&self, i: usize) -> Option<Minibatch<'a>> {
        if !self.hyperbatch {
            return (i == 0).then_some(Minibatch {
                seed: self.seed,
                first_target: 0,
                targets: self.targets,
            });
        }
        let first: u32 = self.minibatches[..i.min(self.minibatches.len())]
            .iter()
            .map(|m| m.target_count.get())
            .sum();
        let m = self.minibatches.get(i)?;
        let targets = self
            .targets
            .get(first as usize..first as usize + m.target_count.get() as usize)?;
        Some(Minibatch {
            seed: m.seed.get(),
            first_target: first,
            targets,
        })
    }

    /// Byte offset of the first target id in the payload.
    pub fn targets_offset_bytes(&self) -> usize {
        size_of::<NsConfigHeader>() + core::mem::size_of_val(self.minibatches)
    }

    /// The fanouts of the used layers, hop order.
    pub fn fanouts(&self) -> &[u16] {
        &self.fanouts[..usize::from(self.layer_count)]
    }

    /// Number of target ids, all minibatches together.
    pub fn target_count(&self) -> usize {
        self.targets.len()
    }

    /// The target ids in payload order, all minibatches together.
    pub fn targets(&self) -> impl Iterator<Item = u64> + 'a {
        self.targets.iter().map(|t| t.get())
    }
}

/// Size in bytes of a plain NS_config with `target_count` targets.
pub fn ns_config_size_bytes(target_count: usize) -> usize {
    size_of::<NsConfigHeader>() + 8 * target_count
}

/// Size in bytes of the largest NS_config `limits` admit (a hyperbatch of the most
/// minibatches with the most targets).
pub fn ns_config_max_size_bytes(limits: &NsLimits) -> usize {
    let minibatches = usize::from(limits.max_minibatches.min(MAX_MINIBATCHES));
    ns_config_size_bytes(limits.max_targets as usize)
        + size_of::<MinibatchHeader>() * if minibatches > 1 { minibatches } else { 0 }
}

/// Size in bytes of a hyperbatch NS_config of `minibatch_count` minibatches with
/// `target_count` targets in all.
pub fn hyperbatch_size_bytes(minibatch_count: usize, target_count: usize) -> usize {
    ns_config_size_bytes(target_count) + size_of::<MinibatchHeader>() * minibatch_count
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
    let header = header(seed, fanouts, targets.len(), 0)?;
    let (head, body) = out.split_at_mut(size_of::<NsConfigHeader>());
    head.copy_from_slice(header.as_bytes());
    put_targets(body, targets);
    Some(size)
}

/// A minibatch as the hyperbatch encoder reads it: its sampling seed and its targets.
/// Implemented for `(seed, targets)` pairs and by the host runtime's request type, so that no
/// caller copies its targets into pairs to encode them.
pub trait MinibatchRequest {
    /// Seed of the sampling function.
    fn seed(&self) -> u64;
    /// Its targets.
    fn targets(&self) -> &[u64];
}

impl<T: AsRef<[u64]>> MinibatchRequest for (u64, T) {
    fn seed(&self) -> u64 {
        self.0
    }

    fn targets(&self) -> &[u64] {
        self.1.as_ref()
    }
}

/// Writes a hyperbatch NS_config of `minibatches` into `out` and returns the number of bytes
/// used, or `None` if `out` is too small or the arguments cannot be encoded (no minibatch or
/// more than [`MAX_MINIBATCHES`], more than [`MAX_LAYERS`] fanouts, more than `u32::MAX`
/// targets). As [`encode_ns_config`], the device judges the rest.
pub fn encode_hyperbatch<M: MinibatchRequest>(
    fanouts: &[u16],
    minibatches: &[M],
    out: &mut [u8],
) -> Option<usize> {
    if minibatches.is_empty() || minibatches.len() > usize::from(MAX_MINIBATCHES) {
        return None;
    }
    let target_count = minibatches
        .iter()
        .try_fold(0usize, |n, m| n.checked_add(m.targets().len()))?;
    let size = hyperbatch_size_bytes(minibatches.len(), target_count);
    let out = out.get_mut(..size)?;
    let mut header = header(0, fanouts, target_count, minibatches.len() as u32)?;
    header.flags = NS_FLAG_HYPERBATCH;
    let (head, mut body) = out.split_at_mut(size_of::<NsConfigHeader>());
    head.copy_from_slice(header.as_bytes());
    for m in minibatches {
        let record = MinibatchHeader {
            seed: m.seed().into(),
            target_count: u32::try_from(m.targets().len()).ok()?.into(),
            reserved: 0.into(),
        };
        let (chunk, rest) = body.split_at_mut(size_of::<MinibatchHeader>());
        chunk.copy_from_slice(record.as_bytes());
        body = rest;
    }
    for m in minibatches {
        let (chunk, rest) = body.split_at_mut(8 * m.targets().len());
        put_targets(chunk, m.targets());
        body = rest;
    }
    Some(size)
}

/// The header of an NS_config; `None` if the fanouts or targets cannot be encoded.
fn header(
    seed: u64,
    fanouts: &[u16],
    target_count: usize,
    minibatch_count: u32,
) -> Option<NsConfigHeader> {
    if fanouts.len() > MAX_LAYERS {
        return None;
    }
    let mut header = NsConfigHeader {
        magic: NS_CONFIG_MAGIC,
        version: NS_CONFIG_VERSION.into(),
        layer_count: fanouts.len() as u8,
        seed: seed.into(),
        target_count: u32::try_from(target_count).ok()?.into(),
        minibatch_count: minibatch_count.into(),
        ..NsConfigHeader::default()
    };
    for (slot, f) in header.fanouts.iter_mut().zip(fanouts) {
        *slot = (*f).into();
    }
    Some(header)
}

fn put_targets(out: &mut [u8], targets: &[u64]) {
    for (chunk, t) in out.chunks_exact_mut(8).zip(targets) {
        chunk.copy_from_slice(&t.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    const LIMITS: NsLimits = NsLimits {
        max_targets: 4,
        max_fanout: 25,
        max_minibatches: 3,
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
        assert_eq!(cfg.fanouts(), &[10, 5]);
        assert_eq!(cfg.targets().collect::<Vec<_>>(), vec![7, 0x1_0000_0000]);
        assert!(!cfg.hyperbatch);
        assert_eq!(cfg.minibatch_count(), 1);
        let only = cfg.minibatch(0).unwrap();
        assert_eq!(
            (only.seed, only.first_target, only.targets.len()),
            (0x0102_0304_0506_0708, 0, 2)
        );
        assert_eq!(cfg.minibatch(1), None);
        assert_eq!(cfg.targets_offset_bytes(), 32);
    }

    fn encode_hb(fanouts: &[u16], minibatches: &[(u64, Vec<u64>)]) -> Vec<u8> {
        let n = minibatches.iter().map(|(_, t)| t.len()).sum();
        let mut out = vec![0u8; hyperbatch_size_bytes(minibatches.len(), n)];
        assert_eq!(
            encode_hyperbatch(fanouts, minibatches, &mut out),
            Some(out.len())
        );
        out
    }

    #[test]
    fn hyperbatch_golden_bytes() {
        let bytes = encode_hb(&[3], &[(0x11, vec![5]), (0x2233, vec![6, 1])]);
        let golden: [u8; 88] = [
            b'N', b'S', b'C', b'F', 1, 0, 1, 2, //
            0, 0, 0, 0, 0, 0, 0, 0, //
            3, 0, 0, 0, 0, 0, 0, 0, //
            3, 0, 0, 0, 2, 0, 0, 0, //
            0x11, 0, 0, 0, 0, 0, 0, 0, //
            1, 0, 0, 0, 0, 0, 0, 0, //
            0x33, 0x22, 0, 0, 0, 0, 0, 0, //
            2, 0, 0, 0, 0, 0, 0, 0, //
            5, 0, 0, 0, 0, 0, 0, 0, //
            6, 0, 0, 0, 0, 0, 0, 0, //
            1, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(bytes, golden);
        let cfg = NsConfig::parse(&golden, &LIMITS, 10).unwrap();
        assert!(cfg.hyperbatch);
        assert_eq!(cfg.minibatch_count(), 2);
        assert_eq!(cfg.targets_offset_bytes(), 64);
        let second = cfg.minibatch(1).unwrap();
        assert_eq!((second.seed, second.first_target), (0x2233, 1));
        let ids: Vec<u64> = second.targets.iter().map(|t| t.get()).collect();
        assert_eq!(ids, vec![6, 1]);
        assert_eq!(cfg.minibatch(2), None);
    }

    #[test]
    fn every_invalid_hyperbatch_field_maps_to_its_status() {
        let good = encode_hb(&[3], &[(1, vec![5]), (2, vec![6, 1])]);
        let parse = |b: &[u8]| NsConfig::parse(b, &LIMITS, 10).map(|_| ());
        let patched = |offset: usize, value: &[u8]| {
            let mut b = good.clone();
            b[offset..offset + value.len()].copy_from_slice(value);
            b
        };
        assert_eq!(parse(&good), Ok(()));
        // A seed in the header, a count without the flag, none or too many minibatches.
        assert_eq!(parse(&patched(8, &[1])), Err(VendorStatus::ReservedField));
        assert_eq!(parse(&patched(7, &[0])), Err(VendorStatus::ReservedField));
        assert_eq!(
            parse(&patched(28, &[0])),
            Err(VendorStatus::BadMinibatchCount)
        );
        assert_eq!(
            parse(&patched(28, &[4])),
            Err(VendorStatus::BadMinibatchCount)
        );
        // A minibatch's reserved word, an empty minibatch, counts that do not add up.
        assert_eq!(parse(&patched(44, &[1])), Err(VendorStatus::ReservedField));
        assert_eq!(parse(&patched(40, &[0])), Err(VendorStatus::BadTargetCount));
        assert_eq!(parse(&patched(56, &[1])), Err(VendorStatus::BadTargetCount));
        assert_eq!(parse(&patched(56, &[3])), Err(VendorStatus::BadTargetCount));
        assert_eq!(
            parse(&patched(40, &[0xFF, 0xFF, 0xFF, 0xFF])),
            Err(VendorStatus::BadTargetCount)
        );
        assert_eq!(
            parse(&patched(80, &[10])),
            Err(VendorStatus::NodeOutOfRange)
        );
        for len in 0..good.len() {
            assert!(parse(&good[..len]).is_err(), "truncated to {len} bytes");
        }
        // A device taking plain NS_configs only refuses every hyperbatch, even of one.
        let plain_only = NsLimits {
            max_minibatches: 1,
            ..LIMITS
        };
        let one = encode_hb(&[3], &[(1, vec![5])]);
        assert!(NsConfig::parse(&one, &plain_only, 10).is_ok());
        assert_eq!(
            NsConfig::parse(&good, &plain_only, 10).map(|_| ()),
            Err(VendorStatus::BadMinibatchCount)
        );
        let mut none = vec![0u8; 64];
        assert_eq!(
            encode_hyperbatch::<(u64, Vec<u64>)>(&[3], &[], &mut none),
            None
        );
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
            NsConfig::parse(&with, &LIMITS, 10).map(|c| (c.features, c.sampled_ids)),
            Ok((true, false))
        );
        let mut ids = good.clone();
        request_sampled_ids(&mut ids);
        assert_eq!(ids[7], NS_FLAG_SAMPLED_IDS);
        assert_eq!(
            NsConfig::parse(&ids, &LIMITS, 10).map(|c| (c.features, c.sampled_ids)),
            Ok((false, true))
        );
        // Features need the unique nodes the sampled ids leave to the host.
        request_features(&mut ids);
        assert_eq!(parse(&ids), Err(VendorStatus::ReservedField));
        assert_eq!(parse(&patched(7, &[8])), Err(VendorStatus::ReservedField));
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
