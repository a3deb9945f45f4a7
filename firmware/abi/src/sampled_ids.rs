//! The sampled-ids result of `NS_COLLECT` ([`crate::ns_config::NS_FLAG_SAMPLED_IDS`]): each
//! layer's sampled neighbours as global node ids, from which the *host* builds the message-flow
//! graph of [`crate::subgraph`].
//!
//! Relabelling to local ids, the node list and the last layer's deduplication are work the
//! embedded core pays dearly for (hash probes that miss its caches) and a host core does
//! cheaply, so a device can leave them to the host. A layer's destinations are the ones the
//! subgraph format gives it (the unique targets in first-seen order, then every node reached so
//! far, in first-seen order), which the host rebuilds from the targets and the earlier layers;
//! each destination's sampled neighbours are in ascending position of its neighbour list, as the
//! sampling function returns them. The bytes carry no node list, so the host must hold the
//! NS_config's targets to read them.
//!
//! Layout (little-endian, every array 4-byte aligned):
//!
//! | offset | what |
//! |---|---|
//! | 0 | [`SampledIdsHeader`] (32 B) |
//! | 32 | `layer_count` × [`SampledLayerEntry`] (8 B each), hop order |
//! | then, per layer | `dst_count + 1` × `u32` `indptr` over the destinations, then `edge_count` × `u32` sampled node ids |
//!
//! Node ids are 32-bit: the device samples graphs of at most 2^32 nodes.

use core::mem::{offset_of, size_of};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::ns_config::MAX_LAYERS;
use crate::subgraph::{SubgraphError, check_indptr};

/// Magic number of a sampled-ids result: the bytes `SGID`.
pub const SAMPLED_IDS_MAGIC: [u8; 4] = *b"SGID";
/// The sampled-ids format version this crate writes and reads.
pub const SAMPLED_IDS_VERSION: u16 = 1;

/// The fixed 32-byte head of a sampled-ids result.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct SampledIdsHeader {
    /// [`SAMPLED_IDS_MAGIC`].
    pub magic: [u8; 4],
    /// [`SAMPLED_IDS_VERSION`].
    pub version: U16,
    /// Number of layers.
    pub layer_count: U16,
    /// Sampled edges over all layers.
    pub edge_count: U32,
    /// Size of the whole result in bytes, this header included.
    pub total_size_bytes: U32,
    /// Reserved, 0.
    pub reserved: U64,
    /// The seed the result was sampled with.
    pub seed: U64,
}

const _: () = {
    assert!(size_of::<SampledIdsHeader>() == 32);
    assert!(offset_of!(SampledIdsHeader, layer_count) == 6);
    assert!(offset_of!(SampledIdsHeader, edge_count) == 8);
    assert!(offset_of!(SampledIdsHeader, total_size_bytes) == 12);
    assert!(offset_of!(SampledIdsHeader, seed) == 24);
};

/// One layer's counts (8 B).
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct SampledLayerEntry {
    /// Destinations of the layer: the subgraph's first `dst_count` nodes.
    pub dst_count: U32,
    /// Sampled edges of the layer.
    pub edge_count: U32,
}

const _: () = assert!(size_of::<SampledLayerEntry>() == 8);

/// The counts of one layer, in host-friendly types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampledCounts {
    /// Destinations.
    pub dst_count: u32,
    /// Sampled edges.
    pub edge_count: u32,
}

/// Where every section of a sampled-ids result with given layer counts lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampledIdsLayout {
    layer_count: usize,
    layers: [SampledCounts; MAX_LAYERS],
    indptr_offsets: [usize; MAX_LAYERS],
    total_size_bytes: usize,
}

impl SampledIdsLayout {
    /// The layout for `layers` (hop order), or `None` if there are 0 or more than
    /// [`MAX_LAYERS`] layers or the total does not fit the format's `u32` size field (checked
    /// in `u32`, so that a 32-bit target's `usize` cannot wrap it). Counts are not checked for
    /// consistency here; [`SampledIdsView::parse`] does that.
    pub fn new(layers: &[SampledCounts]) -> Option<Self> {
        if layers.is_empty() || layers.len() > MAX_LAYERS {
            return None;
        }
        let mut offset = Self::head_size_for(layers.len()) as u32;
        let mut indptr_offsets = [0; MAX_LAYERS];
        let mut copy = [SampledCounts::default(); MAX_LAYERS];
        for (i, l) in layers.iter().enumerate() {
            indptr_offsets[i] = offset as usize;
            let words = l.dst_count.checked_add(1)?.checked_add(l.edge_count)?;
            offset = offset.checked_add(words.checked_mul(4)?)?;
            copy[i] = *l;
        }
        Some(Self {
            layer_count: layers.len(),
            layers: copy,
            indptr_offsets,
            total_size_bytes: offset as usize,
        })
    }

    fn head_size_for(layer_count: usize) -> usize {
        size_of::<SampledIdsHeader>() + layer_count * size_of::<SampledLayerEntry>()
    }

    /// Total size in bytes.
    pub fn total_size_bytes(&self) -> usize {
        self.total_size_bytes
    }

    /// Size of the header plus layer table, which [`Self::write_head`] fills.
    pub fn head_size_bytes(&self) -> usize {
        Self::head_size_for(self.layer_count)
    }

    /// Byte offset of layer `layer`'s `indptr` (`dst_count + 1` words); its ids follow.
    pub fn indptr_offset(&self, layer: usize) -> usize {
        self.indptr_offsets[layer]
    }

    /// Byte offset of layer `layer`'s sampled ids.
    pub fn ids_offset(&self, layer: usize) -> usize {
        self.indptr_offsets[layer] + 4 * (self.layers[layer].dst_count as usize + 1)
    }

    /// Writes the header and layer table into `out[..head_size_bytes()]`; `None` if too short.
    pub fn write_head(&self, seed: u64, out: &mut [u8]) -> Option<()> {
        let layers = &self.layers[..self.layer_count];
        let header = SampledIdsHeader {
            magic: SAMPLED_IDS_MAGIC,
            version: SAMPLED_IDS_VERSION.into(),
            layer_count: (self.layer_count as u16).into(),
            edge_count: layers
                .iter()
                .map(|l| l.edge_count)
                .fold(0u32, u32::wrapping_add)
                .into(),
            total_size_bytes: (self.total_size_bytes as u32).into(),
            reserved: 0.into(),
            seed: seed.into(),
        };
        let out = out.get_mut(..self.head_size_bytes())?;
        let (head, table) = out.split_at_mut(size_of::<SampledIdsHeader>());
        head.copy_from_slice(header.as_bytes());
        for (e, l) in table
            .chunks_exact_mut(size_of::<SampledLayerEntry>())
            .zip(layers)
        {
            let entry = SampledLayerEntry {
                dst_count: l.dst_count.into(),
                edge_count: l.edge_count.into(),
            };
            e.copy_from_slice(entry.as_bytes());
        }
        Some(())
    }
}

/// A validated view of a sampled-ids result's bytes.
#[derive(Clone, Copy, Debug)]
pub struct SampledIdsView<'a> {
    header: &'a SampledIdsHeader,
    layout: SampledIdsLayout,
    bytes: &'a [u8],
}

/// One layer of a [`SampledIdsView`].
#[derive(Clone, Copy, Debug)]
pub struct SampledLayerView<'a> {
    /// Destination and edge counts.
    pub counts: SampledCounts,
    /// Row pointers over the destinations, `dst_count + 1` entries.
    pub indptr: &'a [U32],
    /// The sampled node ids, `edge_count` entries.
    pub ids: &'a [U32],
}

impl<'a> SampledIdsView<'a> {
    /// The size a result's header declares (`total_size_bytes`), read from its first bytes
    /// before the rest has arrived; `None` if they are not a sampled-ids header.
    pub fn total_size(head: &[u8]) -> Option<usize> {
        let (h, _) = SampledIdsHeader::read_from_prefix(head).ok()?;
        (h.magic == SAMPLED_IDS_MAGIC).then_some(h.total_size_bytes.get() as usize)
    }

    /// Parses and validates a result: header, layer table, total size, destinations that never
    /// shrink from one layer to the next, and each `indptr` monotone from 0 to its edge count.
    /// The ids themselves are checked by whoever builds the subgraph from them (against the
    /// graph's node count, which the bytes do not carry).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, SubgraphError> {
        let (header, rest) =
            SampledIdsHeader::ref_from_prefix(bytes).map_err(|_| SubgraphError::Truncated)?;
        if header.magic != SAMPLED_IDS_MAGIC {
            return Err(SubgraphError::BadMagic);
        }
        if header.version.get() != SAMPLED_IDS_VERSION {
            return Err(SubgraphError::BadVersion);
        }
        let layer_count = usize::from(header.layer_count.get());
        if !(1..=MAX_LAYERS).contains(&layer_count) {
            return Err(SubgraphError::BadLayerCount);
        }
        let (entries, _) = <[SampledLayerEntry]>::ref_from_prefix_with_elems(rest, layer_count)
            .map_err(|_| SubgraphError::Truncated)?;
        let mut counts = [SampledCounts::default(); MAX_LAYERS];
        for (c, e) in counts.iter_mut().zip(entries) {
            *c = SampledCounts {
                dst_count: e.dst_count.get(),
                edge_count: e.edge_count.get(),
            };
        }
        let counts = &counts[..layer_count];
        let layout =
            SampledIdsLayout::new(counts).ok_or(SubgraphError::Inconsistent("total_size_bytes"))?;
        if header.total_size_bytes.get() as usize != layout.total_size_bytes() {
            return Err(SubgraphError::Inconsistent("total_size_bytes"));
        }
        if bytes.len() < layout.total_size_bytes() {
            return Err(SubgraphError::Truncated);
        }
        if header.reserved.get() != 0 {
            return Err(SubgraphError::Inconsistent("reserved"));
        }
        if counts[0].dst_count == 0 || counts.windows(2).any(|w| w[1].dst_count < w[0].dst_count) {
            return Err(SubgraphError::Inconsistent("dst_count"));
        }
        let edges = counts
            .iter()
            .try_fold(0u32, |a, c| a.checked_add(c.edge_count));
        if edges != Some(header.edge_count.get()) {
            return Err(SubgraphError::Inconsistent("edge_count"));
        }
        let view = Self {
            header,
            layout,
            bytes,
        };
        for l in 0..layer_count {
            let layer = view.layer(l);
            check_indptr(layer.indptr, layer.counts.edge_count)?;
        }
        Ok(view)
    }

    /// Number of layers.
    pub fn layer_count(&self) -> usize {
        usize::from(self.header.layer_count.get())
    }

    /// The seed the result was sampled with.
    pub fn seed(&self) -> u64 {
        self.header.seed.get()
    }

    /// Layer `l` (hop order); `l` must be below [`Self::layer_count`].
    pub fn layer(&self, l: usize) -> SampledLayerView<'a> {
        let words = |offset: usize, n: usize| -> &'a [U32] {
            <[U32]>::ref_from_bytes(&self.bytes[offset..offset + 4 * n]).unwrap_or(&[])
        };
        let counts = self.layout.layers[l];
        SampledLayerView {
            counts,
            indptr: words(self.layout.indptr_offset(l), counts.dst_count as usize + 1),
            ids: words(self.layout.ids_offset(l), counts.edge_count as usize),
        }
    }

    /// The whole result's bytes (exactly `total_size_bytes`).
    pub fn as_bytes(&self) -> &'a [u8] {
        &self.bytes[..self.layout.total_size_bytes()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    /// Targets [5, 9], two layers. Layer 0: 5's neighbours sampled 9, 7; 9's: 5. Layer 1 (the
    /// destinations 5, 9, 7): 5's 7; 9's none; 7's 9, 2.
    fn tiny() -> Vec<u8> {
        let layout = SampledIdsLayout::new(&[
            SampledCounts {
                dst_count: 2,
                edge_count: 3,
            },
            SampledCounts {
                dst_count: 3,
                edge_count: 3,
            },
        ])
        .unwrap();
        let mut out = vec![0u8; layout.total_size_bytes()];
        layout.write_head(42, &mut out).unwrap();
        let mut put = |offset: usize, words: &[u32]| {
            for (i, w) in words.iter().enumerate() {
                out[offset + 4 * i..offset + 4 * i + 4].copy_from_slice(&w.to_le_bytes());
            }
        };
        put(layout.indptr_offset(0), &[0, 2, 3]);
        put(layout.ids_offset(0), &[9, 7, 5]);
        put(layout.indptr_offset(1), &[0, 1, 1, 3]);
        put(layout.ids_offset(1), &[7, 9, 2]);
        out
    }

    #[test]
    fn golden_bytes() {
        let bytes = tiny();
        #[rustfmt::skip]
        let golden: Vec<u8> = [
            &b"SGID"[..], &[1, 0, 2, 0], &[6, 0, 0, 0], &[100, 0, 0, 0], &[0; 8], &[42, 0, 0, 0, 0, 0, 0, 0],
            &[2, 0, 0, 0, 3, 0, 0, 0], &[3, 0, 0, 0, 3, 0, 0, 0],
            &[0, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0],
            &[9, 0, 0, 0, 7, 0, 0, 0, 5, 0, 0, 0],
            &[0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0],
            &[7, 0, 0, 0, 9, 0, 0, 0, 2, 0, 0, 0],
        ].concat();
        assert_eq!(bytes, golden);
        let view = SampledIdsView::parse(&golden).unwrap();
        assert_eq!((view.seed(), view.layer_count()), (42, 2));
        assert_eq!(SampledIdsView::total_size(&golden[..32]), Some(100));
        let l = view.layer(1);
        assert_eq!(l.counts.dst_count, 3);
        assert_eq!(
            l.ids.iter().map(|n| n.get()).collect::<Vec<_>>(),
            vec![7, 9, 2]
        );
        assert_eq!(view.as_bytes(), &golden[..]);
    }

    #[test]
    fn inconsistent_results_are_rejected() {
        let good = tiny();
        let patched = |offset: usize, value: &[u8]| {
            let mut b = good.clone();
            b[offset..offset + value.len()].copy_from_slice(value);
            SampledIdsView::parse(&b).map(|_| ()).unwrap_err()
        };
        assert_eq!(patched(0, b"SGRF"), SubgraphError::BadMagic);
        assert_eq!(patched(4, &[2]), SubgraphError::BadVersion);
        assert_eq!(patched(6, &[0]), SubgraphError::BadLayerCount);
        assert_eq!(patched(6, &[5]), SubgraphError::BadLayerCount);
        assert_eq!(patched(8, &[7]), SubgraphError::Inconsistent("edge_count"));
        assert_eq!(
            patched(12, &[99]),
            SubgraphError::Inconsistent("total_size_bytes")
        );
        assert_eq!(patched(16, &[1]), SubgraphError::Inconsistent("reserved"));
        // Layer 1 with fewer destinations than layer 0 (and the size kept right).
        let mut shrunk = good.clone();
        shrunk[40] = 1;
        shrunk[12] = 92;
        assert_eq!(
            SampledIdsView::parse(&shrunk).unwrap_err(),
            SubgraphError::Inconsistent("dst_count")
        );
        // No destinations at all in layer 0.
        let mut none = good.clone();
        none[32] = 0;
        none[12] = 92;
        assert_eq!(
            SampledIdsView::parse(&none).unwrap_err(),
            SubgraphError::Inconsistent("dst_count")
        );
        // Layer 0's indptr decreasing, then not starting at 0; layer 1's not ending at its
        // edge count.
        assert_eq!(patched(48 + 4, &[4]), SubgraphError::Inconsistent("indptr"));
        assert_eq!(patched(48, &[1]), SubgraphError::Inconsistent("indptr"));
        assert_eq!(
            patched(72 + 12, &[2]),
            SubgraphError::Inconsistent("indptr")
        );
        for len in 0..good.len() {
            assert!(SampledIdsView::parse(&good[..len]).is_err(), "{len} bytes");
        }
    }

    #[test]
    fn a_size_past_u32_has_no_layout_on_any_target() {
        // 2^30 destinations and edges: 2^33 bytes, which a 32-bit `usize` would wrap.
        let huge = SampledCounts {
            dst_count: 1 << 30,
            edge_count: 1 << 30,
        };
        assert_eq!(SampledIdsLayout::new(&[huge]), None);
        assert_eq!(SampledIdsLayout::new(&[]), None);
        let one = SampledCounts {
            dst_count: 1,
            edge_count: 0,
        };
        assert_eq!(SampledIdsLayout::new(&[one; MAX_LAYERS + 1]), None);
        assert_eq!(
            SampledIdsLayout::new(&[one]).map(|l| l.total_size_bytes()),
            Some(32 + 8 + 8)
        );
    }
}
