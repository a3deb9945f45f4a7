//! The sampled subgraph returned by `NS_COLLECT`: a multi-layer message-flow graph (MFG).
//!
//! Semantics (the DGL "block" convention): the unique nodes of the whole sample form one list in
//! first-seen order. Layer 0's destinations are the unique targets, in the order they first occur
//! in the NS_config. A layer's sources are its destinations followed by the neighbours sampled
//! for them that were not seen before, in the order they are met (destinations in order, each
//! destination's sampled neighbours in ascending position of its neighbour list). Layer `l + 1`'s
//! destinations are layer `l`'s sources. So every destination and source set is a *prefix* of the
//! one node list, and a layer is described by two prefix lengths and a local CSR whose column
//! indices point into the source prefix.
//!
//! Layout (little-endian, every array 4-byte aligned, the node list 8-byte aligned):
//!
//! | offset | what |
//! |---|---|
//! | 0 | [`SubgraphHeader`] (32 B) |
//! | 32 | `layer_count` × [`LayerEntry`] (16 B each), hop order |
//! | 32 + 16·L | `node_count` × `u64` node ids |
//! | then, per layer | `dst_count + 1` × `u32` local `indptr`, then `edge_count` × `u32` local source indices |

use core::mem::{offset_of, size_of};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::ns_config::MAX_LAYERS;

/// Magic number of a sampled subgraph: the bytes `SGRF`.
pub const SUBGRAPH_MAGIC: [u8; 4] = *b"SGRF";
/// The subgraph format version this crate writes and reads.
pub const SUBGRAPH_VERSION: u16 = 1;

/// The fixed 32-byte head of a sampled subgraph.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct SubgraphHeader {
    /// [`SUBGRAPH_MAGIC`].
    pub magic: [u8; 4],
    /// [`SUBGRAPH_VERSION`].
    pub version: U16,
    /// Number of layers.
    pub layer_count: U16,
    /// Number of unique nodes (the last layer's source count).
    pub node_count: U32,
    /// Number of sampled edges over all layers.
    pub edge_count: U32,
    /// Size of the whole subgraph in bytes, this header included.
    pub total_size_bytes: U32,
    /// Bytes of each node's feature row in the feature section (0: no features).
    pub feature_row_bytes: U32,
    /// The seed the subgraph was sampled with.
    pub seed: U64,
}

const _: () = {
    assert!(size_of::<SubgraphHeader>() == 32);
    assert!(offset_of!(SubgraphHeader, layer_count) == 6);
    assert!(offset_of!(SubgraphHeader, node_count) == 8);
    assert!(offset_of!(SubgraphHeader, total_size_bytes) == 16);
    assert!(offset_of!(SubgraphHeader, feature_row_bytes) == 20);
    assert!(offset_of!(SubgraphHeader, seed) == 24);
};

/// One layer's prefix lengths and edge count (16 B).
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct LayerEntry {
    /// Destination nodes: the first `dst_count` nodes of the node list.
    pub dst_count: U32,
    /// Source nodes: the first `src_count` nodes of the node list.
    pub src_count: U32,
    /// Sampled edges of this layer.
    pub edge_count: U32,
    /// Reserved, 0.
    pub reserved: U32,
}

const _: () = {
    assert!(size_of::<LayerEntry>() == 16);
    assert!(offset_of!(LayerEntry, src_count) == 4);
    assert!(offset_of!(LayerEntry, edge_count) == 8);
};

/// The counts of one layer, in host-friendly types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayerCounts {
    /// Destination prefix length.
    pub dst_count: u32,
    /// Source prefix length.
    pub src_count: u32,
    /// Sampled edges.
    pub edge_count: u32,
}

/// Where every section of a subgraph with given layer counts lives, and how big it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubgraphLayout {
    layer_count: usize,
    layers: [LayerCounts; MAX_LAYERS],
    indptr_offsets: [usize; MAX_LAYERS],
    /// Where the feature section starts (8-aligned), and each row's size.
    features_offset: usize,
    feature_row_bytes: u32,
    total_size_bytes: usize,
}

impl SubgraphLayout {
    /// The layout for `layers` (hop order), or `None` if there are 0 or more than [`MAX_LAYERS`]
    /// layers or the total does not fit the format's `u32` size field. Counts are not checked for
    /// consistency here; [`SubgraphView::parse`] does that.
    pub fn new(layers: &[LayerCounts]) -> Option<Self> {
        if layers.is_empty() || layers.len() > MAX_LAYERS {
            return None;
        }
        let node_count = layers.last()?.src_count as usize;
        let mut offset =
            Self::nodes_offset_for(layers.len()).checked_add(node_count.checked_mul(8)?)?;
        let mut indptr_offsets = [0; MAX_LAYERS];
        let mut copy = [LayerCounts::default(); MAX_LAYERS];
        for (i, l) in layers.iter().enumerate() {
            indptr_offsets[i] = offset;
            let words = (l.dst_count as usize)
                .checked_add(1)?
                .checked_add(l.edge_count as usize)?;
            offset = offset.checked_add(words.checked_mul(4)?)?;
            copy[i] = *l;
        }
        u32::try_from(offset).ok()?;
        Some(Self {
            layer_count: layers.len(),
            layers: copy,
            indptr_offsets,
            features_offset: offset,
            feature_row_bytes: 0,
            total_size_bytes: offset,
        })
    }

    /// The same layout with a feature section of `row_bytes` per node after the last layer
    /// (`None` if the total overflows the format's size field).
    pub fn with_features(mut self, row_bytes: u32) -> Option<Self> {
        if row_bytes == 0 {
            return Some(self);
        }
        let nodes = self.layers[self.layer_count - 1].src_count as usize;
        let start = self.features_offset.checked_next_multiple_of(8)?;
        let end = start.checked_add(nodes.checked_mul(row_bytes as usize)?)?;
        u32::try_from(end).ok()?;
        self.features_offset = start;
        self.feature_row_bytes = row_bytes;
        self.total_size_bytes = end;
        Some(self)
    }

    /// Byte offset of the feature section (rows in node-list order).
    pub fn features_offset(&self) -> usize {
        self.features_offset
    }

    /// Bytes of each feature row (0: none).
    pub fn feature_row_bytes(&self) -> u32 {
        self.feature_row_bytes
    }

    fn nodes_offset_for(layer_count: usize) -> usize {
        size_of::<SubgraphHeader>() + layer_count * size_of::<LayerEntry>()
    }

    /// Total size in bytes.
    pub fn total_size_bytes(&self) -> usize {
        self.total_size_bytes
    }

    /// Size of the header plus layer table, which [`Self::write_head`] fills.
    pub fn head_size_bytes(&self) -> usize {
        Self::nodes_offset_for(self.layer_count)
    }

    /// Byte offset of the node list.
    pub fn nodes_offset(&self) -> usize {
        self.head_size_bytes()
    }

    /// Byte offset of layer `layer`'s local `indptr` (`dst_count + 1` words); its indices follow.
    pub fn indptr_offset(&self, layer: usize) -> usize {
        self.indptr_offsets[layer]
    }

    /// Byte offset of layer `layer`'s local source indices.
    pub fn indices_offset(&self, layer: usize) -> usize {
        self.indptr_offsets[layer] + 4 * (self.layers[layer].dst_count as usize + 1)
    }

    /// Writes the header and layer table into `out[..head_size_bytes()]`; `None` if too short.
    pub fn write_head(&self, seed: u64, out: &mut [u8]) -> Option<()> {
        let layers = &self.layers[..self.layer_count];
        let header = SubgraphHeader {
            magic: SUBGRAPH_MAGIC,
            version: SUBGRAPH_VERSION.into(),
            layer_count: (self.layer_count as u16).into(),
            node_count: layers.last()?.src_count.into(),
            edge_count: layers
                .iter()
                .map(|l| l.edge_count)
                .fold(0u32, u32::wrapping_add)
                .into(),
            total_size_bytes: (self.total_size_bytes as u32).into(),
            feature_row_bytes: self.feature_row_bytes.into(),
            seed: seed.into(),
        };
        let out = out.get_mut(..self.head_size_bytes())?;
        let (head, mut table) = out.split_at_mut(size_of::<SubgraphHeader>());
        head.copy_from_slice(header.as_bytes());
        for l in layers {
            let entry = LayerEntry {
                dst_count: l.dst_count.into(),
                src_count: l.src_count.into(),
                edge_count: l.edge_count.into(),
                reserved: 0.into(),
            };
            let (e, rest) = table.split_at_mut(size_of::<LayerEntry>());
            e.copy_from_slice(entry.as_bytes());
            table = rest;
        }
        Some(())
    }
}

/// Why a byte string is not a valid subgraph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubgraphError {
    /// Shorter than its header or layer table says.
    Truncated,
    /// Wrong magic number.
    BadMagic,
    /// Unsupported version.
    BadVersion,
    /// Layer count 0 or above [`MAX_LAYERS`].
    BadLayerCount,
    /// Counts or local indices contradict each other; the field is named.
    Inconsistent(&'static str),
}

/// Checks that a layer's row pointers start at 0, never decrease and end at its `edge_count`
/// (the subgraph's local CSR and the sampled ids' rows alike).
pub(crate) fn check_indptr(indptr: &[U32], edge_count: u32) -> Result<(), SubgraphError> {
    let mut prev = 0;
    for p in indptr.iter().map(|p| p.get()) {
        if p < prev {
            return Err(SubgraphError::Inconsistent("indptr"));
        }
        prev = p;
    }
    if indptr.first().map(|p| p.get()) != Some(0) || prev != edge_count {
        return Err(SubgraphError::Inconsistent("indptr"));
    }
    Ok(())
}

/// A validated view of a subgraph's bytes.
#[derive(Clone, Copy, Debug)]
pub struct SubgraphView<'a> {
    header: &'a SubgraphHeader,
    layout: SubgraphLayout,
    bytes: &'a [u8],
}

/// One layer of a [`SubgraphView`].
#[derive(Clone, Copy, Debug)]
pub struct LayerView<'a> {
    /// Prefix lengths and edge count.
    pub counts: LayerCounts,
    /// Local CSR row pointers, `dst_count + 1` entries.
    pub indptr: &'a [U32],
    /// Local source indices, `edge_count` entries, each `< src_count`.
    pub indices: &'a [U32],
}

impl<'a> SubgraphView<'a> {
    /// The size a subgraph's header declares (`total_size_bytes`), read from its first bytes
    /// before the rest has arrived; `None` if they are not a subgraph header.
    pub fn total_size(head: &[u8]) -> Option<usize> {
        let (h, _) = SubgraphHeader::read_from_prefix(head).ok()?;
        (h.magic == SUBGRAPH_MAGIC).then_some(h.total_size_bytes.get() as usize)
    }

    /// Parses and fully validates a subgraph: header, prefix chaining between layers, total size,
    /// monotone `indptr` ending at the edge count, and every local index below its source count.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, SubgraphError> {
        let view = Self::parse_layout(bytes)?;
        for l in 0..view.layer_count() {
            let layer = view.layer(l);
            check_indptr(layer.indptr, layer.counts.edge_count)?;
            if layer
                .indices
                .iter()
                .any(|i| i.get() >= layer.counts.src_count)
            {
                return Err(SubgraphError::Inconsistent("indices"));
            }
        }
        Ok(view)
    }

    /// Parses a subgraph's header and layer table and checks that they agree and that the bytes
    /// hold every section, without reading the sections' elements: for bytes [`Self::parse`] has
    /// already validated (a host keeps a subgraph it checked and views it again in O(layers)).
    /// Every access of the view stays in bounds either way; only the local indices' ranges and
    /// `indptr`'s order go unchecked.
    pub fn parse_layout(bytes: &'a [u8]) -> Result<Self, SubgraphError> {
        let (header, rest) =
            SubgraphHeader::ref_from_prefix(bytes).map_err(|_| SubgraphError::Truncated)?;
        if header.magic != SUBGRAPH_MAGIC {
            return Err(SubgraphError::BadMagic);
        }
        if header.version.get() != SUBGRAPH_VERSION {
            return Err(SubgraphError::BadVersion);
        }
        let layer_count = usize::from(header.layer_count.get());
        if !(1..=MAX_LAYERS).contains(&layer_count) {
            return Err(SubgraphError::BadLayerCount);
        }
        let (entries, _) = <[LayerEntry]>::ref_from_prefix_with_elems(rest, layer_count)
            .map_err(|_| SubgraphError::Truncated)?;
        let mut counts = [LayerCounts::default(); MAX_LAYERS];
        for (c, e) in counts.iter_mut().zip(entries) {
            *c = LayerCounts {
                dst_count: e.dst_count.get(),
                src_count: e.src_count.get(),
                edge_count: e.edge_count.get(),
            };
        }
        let counts = &counts[..layer_count];
        let row_bytes = header.feature_row_bytes.get();
        if row_bytes % 4 != 0 {
            return Err(SubgraphError::Inconsistent("feature_row_bytes"));
        }
        let layout = SubgraphLayout::new(counts)
            .and_then(|l| l.with_features(row_bytes))
            .ok_or(SubgraphError::Inconsistent("total_size_bytes"))?;
        if header.total_size_bytes.get() as usize != layout.total_size_bytes() {
            return Err(SubgraphError::Inconsistent("total_size_bytes"));
        }
        if bytes.len() < layout.total_size_bytes() {
            return Err(SubgraphError::Truncated);
        }
        if counts[0].dst_count == 0 {
            return Err(SubgraphError::Inconsistent("dst_count"));
        }
        if counts.windows(2).any(|w| w[1].dst_count != w[0].src_count)
            || counts.iter().any(|c| c.src_count < c.dst_count)
        {
            return Err(SubgraphError::Inconsistent("src_count"));
        }
        if header.node_count.get() != counts[layer_count - 1].src_count {
            return Err(SubgraphError::Inconsistent("node_count"));
        }
        let edges = counts
            .iter()
            .try_fold(0u32, |a, c| a.checked_add(c.edge_count));
        if edges != Some(header.edge_count.get()) {
            return Err(SubgraphError::Inconsistent("edge_count"));
        }
        Ok(Self {
            header,
            layout,
            bytes,
        })
    }

    /// The feature section: each node's row, in node-list order (empty without features).
    pub fn features(&self) -> &'a [u8] {
        let start = self.layout.features_offset();
        &self.bytes[start..self.layout.total_size_bytes()]
    }

    /// Bytes of each feature row (0: no features).
    pub fn feature_row_bytes(&self) -> usize {
        self.layout.feature_row_bytes() as usize
    }

    /// Number of layers.
    pub fn layer_count(&self) -> usize {
        usize::from(self.header.layer_count.get())
    }

    /// The seed the subgraph was sampled with.
    pub fn seed(&self) -> u64 {
        self.header.seed.get()
    }

    /// The unique node ids, first-seen order.
    pub fn nodes(&self) -> &'a [U64] {
        let start = self.layout.nodes_offset();
        let n = self.header.node_count.get() as usize;
        // Validated by `parse`: the range is in bounds and 8-byte multiples.
        <[U64]>::ref_from_bytes(&self.bytes[start..start + 8 * n]).unwrap_or(&[])
    }

    /// Layer `l` (hop order); `l` must be below [`Self::layer_count`].
    pub fn layer(&self, l: usize) -> LayerView<'a> {
        let words = |offset: usize, n: usize| -> &'a [U32] {
            <[U32]>::ref_from_bytes(&self.bytes[offset..offset + 4 * n]).unwrap_or(&[])
        };
        let counts = self.layout.layers[l];
        LayerView {
            counts,
            indptr: words(self.layout.indptr_offset(l), counts.dst_count as usize + 1),
            indices: words(self.layout.indices_offset(l), counts.edge_count as usize),
        }
    }

    /// The whole subgraph's bytes (exactly `total_size_bytes`).
    pub fn as_bytes(&self) -> &'a [u8] {
        &self.bytes[..self.layout.total_size_bytes()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    /// Targets [5, 9]; 5's neighbours sampled: 9, 7; 9's: 5. One layer.
    fn tiny() -> Vec<u8> {
        let layout = SubgraphLayout::new(&[LayerCounts {
            dst_count: 2,
            src_count: 3,
            edge_count: 3,
        }])
        .unwrap();
        let mut out = vec![0u8; layout.total_size_bytes()];
        layout.write_head(42, &mut out).unwrap();
        let mut put = |offset: usize, words: &[u32]| {
            for (i, w) in words.iter().enumerate() {
                out[offset + 4 * i..offset + 4 * i + 4].copy_from_slice(&w.to_le_bytes());
            }
        };
        put(layout.indptr_offset(0), &[0, 2, 3]);
        put(layout.indices_offset(0), &[1, 2, 0]);
        for (i, n) in [5u64, 9, 7].iter().enumerate() {
            let o = layout.nodes_offset() + 8 * i;
            out[o..o + 8].copy_from_slice(&n.to_le_bytes());
        }
        out
    }

    #[test]
    fn golden_bytes() {
        let bytes = tiny();
        #[rustfmt::skip]
        let golden: Vec<u8> = [
            &b"SGRF"[..], &[1, 0, 1, 0], &[3, 0, 0, 0], &[3, 0, 0, 0], &[96, 0, 0, 0], &[0; 4], &[42, 0, 0, 0, 0, 0, 0, 0],
            &[2, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0],
            &[5, 0, 0, 0, 0, 0, 0, 0], &[9, 0, 0, 0, 0, 0, 0, 0], &[7, 0, 0, 0, 0, 0, 0, 0],
            &[0, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0],
            &[1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0],
        ].concat();
        assert_eq!(bytes, golden);
        let view = SubgraphView::parse(&golden).unwrap();
        assert_eq!(view.seed(), 42);
        assert_eq!(
            view.nodes().iter().map(|n| n.get()).collect::<Vec<_>>(),
            vec![5, 9, 7]
        );
        let l = view.layer(0);
        assert_eq!(
            l.indices.iter().map(|n| n.get()).collect::<Vec<_>>(),
            vec![1, 2, 0]
        );
    }

    #[test]
    fn inconsistent_subgraphs_are_rejected() {
        let good = tiny();
        let patched = |offset: usize, value: &[u8]| {
            let mut b = good.clone();
            b[offset..offset + value.len()].copy_from_slice(value);
            SubgraphView::parse(&b).map(|_| ()).unwrap_err()
        };
        assert_eq!(patched(0, b"XGRF"), SubgraphError::BadMagic);
        assert_eq!(patched(4, &[9]), SubgraphError::BadVersion);
        assert_eq!(patched(6, &[0]), SubgraphError::BadLayerCount);
        assert_eq!(patched(8, &[4]), SubgraphError::Inconsistent("node_count"));
        assert_eq!(patched(12, &[4]), SubgraphError::Inconsistent("edge_count"));
        assert_eq!(
            patched(16, &[99]),
            SubgraphError::Inconsistent("total_size_bytes")
        );
        assert_eq!(
            patched(48 + 24 + 4, &[4]),
            SubgraphError::Inconsistent("indptr")
        );
        assert_eq!(
            patched(48 + 24 + 12, &[3]),
            SubgraphError::Inconsistent("indices")
        );
        for len in 0..good.len() {
            assert!(SubgraphView::parse(&good[..len]).is_err());
        }
    }

    #[test]
    fn a_layout_parse_checks_the_sections_but_not_their_elements() {
        let good = tiny();
        let patched = |offset: usize, value: &[u8]| {
            let mut b = good.clone();
            b[offset..offset + value.len()].copy_from_slice(value);
            b
        };
        // An index out of range and a decreasing indptr: only the full parse sees them.
        for bad in [patched(48 + 24 + 12, &[3]), patched(48 + 24 + 4, &[4])] {
            assert!(SubgraphView::parse(&bad).is_err());
            assert!(SubgraphView::parse_layout(&bad).is_ok());
        }
        // The header, the layer table and the size: both do.
        for bad in [patched(0, b"XGRF"), patched(8, &[4]), patched(16, &[99])] {
            assert!(SubgraphView::parse_layout(&bad).is_err());
        }
        for len in 0..good.len() {
            assert!(SubgraphView::parse_layout(&good[..len]).is_err());
        }
        let view = SubgraphView::parse_layout(&good).unwrap();
        assert_eq!(
            view.as_bytes(),
            SubgraphView::parse(&good).unwrap().as_bytes()
        );
    }
}
