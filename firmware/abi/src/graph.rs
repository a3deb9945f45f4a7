//! The graph descriptor registered with `GRAPH_ATTACH`: where a CSR graph lives on the namespace.
//!
//! The graph is stored as two LBA ranges written with ordinary NVMe WRITEs: `indptr`
//! (`node_count + 1` little-endian `u64`, `indptr[v]..indptr[v+1]` are the positions of `v`'s
//! neighbours) and `indices` (`edge_count` little-endian ids of `id_width_bytes` each, 4 or 8).
//! Both ranges start at byte 0 of their first LBA.
//!
//! Optionally (flag [`GRAPH_FLAG_FEATURES`]), a 64-byte [`FeatureRegionWire`] follows the
//! descriptor: a third range holding each node's feature row (`row_bytes` of data at a stride
//! of `row_bytes` rounded up to a power of two, node after node), which in-storage sampling can
//! return with the subgraph.

use core::mem::{offset_of, size_of};
use zerocopy::little_endian::{U16, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::nvme::VendorStatus;

/// Magic number of a graph descriptor: the bytes `GRPH`.
pub const GRAPH_MAGIC: [u8; 4] = *b"GRPH";
/// The graph descriptor version this crate writes and reads.
pub const GRAPH_VERSION: u16 = 1;

/// Descriptor flag: a [`FeatureRegionWire`] follows.
pub const GRAPH_FLAG_FEATURES: u8 = 1;
/// Magic number of a feature region: the bytes `FEAT`.
pub const FEATURE_MAGIC: [u8; 4] = *b"FEAT";
/// Largest feature row (bytes).
pub const MAX_FEATURE_ROW_BYTES: u32 = 1 << 16;

/// The 64-byte feature-region extension of a graph descriptor.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureRegionWire {
    /// [`FEATURE_MAGIC`].
    pub magic: [u8; 4],
    /// Bytes of one node's features (a multiple of 4).
    pub row_bytes: zerocopy::little_endian::U32,
    /// First LBA of the rows.
    pub slba: U64,
    /// Number of LBAs.
    pub block_count: U64,
    /// Reserved, must be 0.
    pub reserved: [u8; 40],
}

const _: () = {
    assert!(size_of::<FeatureRegionWire>() == 64);
    assert!(offset_of!(FeatureRegionWire, slba) == 8);
};

/// Where a graph's node features live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureRegion {
    /// The rows' LBAs.
    pub range: LbaRange,
    /// Bytes of one row.
    pub row_bytes: u32,
}

impl FeatureRegion {
    /// Distance between consecutive rows: `row_bytes` rounded up to a power of two, so that
    /// rows never straddle a flash page once the region starts on a page boundary. Computed in
    /// `u64`, where it cannot overflow for any `row_bytes` a host sends.
    pub fn stride_bytes(&self) -> u64 {
        u64::from(self.row_bytes).next_power_of_two()
    }
}

/// The 64-byte graph descriptor, as carried by `GRAPH_ATTACH`.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub struct GraphDescriptorWire {
    /// [`GRAPH_MAGIC`].
    pub magic: [u8; 4],
    /// [`GRAPH_VERSION`].
    pub version: U16,
    /// Bytes per neighbour id in `indices`: 4 or 8.
    pub id_width_bytes: u8,
    /// Flags: [`GRAPH_FLAG_FEATURES`]; every other bit must be 0.
    pub flags: u8,
    /// Number of nodes.
    pub node_count: U64,
    /// Number of stored (directed) edges: the length of `indices`.
    pub edge_count: U64,
    /// First LBA of `indptr`.
    pub indptr_slba: U64,
    /// Number of LBAs of `indptr`.
    pub indptr_block_count: U64,
    /// First LBA of `indices`.
    pub indices_slba: U64,
    /// Number of LBAs of `indices`.
    pub indices_block_count: U64,
    /// Reserved, must be 0.
    pub reserved: U64,
}

const _: () = {
    assert!(size_of::<GraphDescriptorWire>() == 64);
    assert!(offset_of!(GraphDescriptorWire, node_count) == 8);
    assert!(offset_of!(GraphDescriptorWire, edge_count) == 16);
    assert!(offset_of!(GraphDescriptorWire, indptr_slba) == 24);
    assert!(offset_of!(GraphDescriptorWire, indices_slba) == 40);
    assert!(offset_of!(GraphDescriptorWire, reserved) == 56);
};

/// A contiguous range of logical blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LbaRange {
    /// First LBA.
    pub slba: u64,
    /// Number of LBAs.
    pub block_count: u64,
}

impl LbaRange {
    /// One past the last LBA, if it does not overflow.
    pub fn end(&self) -> Option<u64> {
        self.slba.checked_add(self.block_count)
    }

    fn overlaps(&self, other: &Self) -> bool {
        match (self.end(), other.end()) {
            (Some(a), Some(b)) => self.slba < b && other.slba < a,
            _ => true,
        }
    }
}

/// A validated graph descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphDescriptor {
    /// Number of nodes.
    pub node_count: u64,
    /// Number of stored edges.
    pub edge_count: u64,
    /// Bytes per id in `indices` (4 or 8).
    pub id_width_bytes: u8,
    /// Where `indptr` lives.
    pub indptr: LbaRange,
    /// Where `indices` lives.
    pub indices: LbaRange,
    /// Where the node features live, if registered.
    pub features: Option<FeatureRegion>,
}

impl GraphDescriptor {
    /// The standard on-device layout of a CSR graph from `start_lba` on a namespace of
    /// `block_size_bytes` blocks: `indptr` as `node_count + 1` little-endian `u64`, then
    /// `indices` as little-endian `u32` from the next block boundary, no features. `None` if the
    /// sizes overflow 64 bits.
    pub fn csr_layout(
        node_count: u64,
        edge_count: u64,
        start_lba: u64,
        block_size_bytes: u32,
    ) -> Option<Self> {
        let bs = u64::from(block_size_bytes);
        let indptr_blocks = node_count.checked_add(1)?.checked_mul(8)?.div_ceil(bs);
        let indices_blocks = edge_count.checked_mul(4)?.div_ceil(bs);
        Some(Self {
            node_count,
            edge_count,
            id_width_bytes: 4,
            indptr: LbaRange {
                slba: start_lba,
                block_count: indptr_blocks,
            },
            indices: LbaRange {
                slba: start_lba.checked_add(indptr_blocks)?,
                block_count: indices_blocks,
            },
            features: None,
        })
    }

    /// Bytes of this descriptor on the wire: 64, or 128 with a feature region.
    pub fn wire_len(&self) -> usize {
        if self.features.is_some() { 128 } else { 64 }
    }

    /// Encodes the descriptor and its feature region into `out[..self.wire_len()]`.
    pub fn encode(&self, out: &mut [u8; 128]) -> usize {
        out.fill(0);
        out[..64].copy_from_slice(self.to_wire().as_bytes());
        if let Some(f) = self.features {
            let wire = FeatureRegionWire {
                magic: FEATURE_MAGIC,
                row_bytes: f.row_bytes.into(),
                slba: f.range.slba.into(),
                block_count: f.range.block_count.into(),
                reserved: [0; 40],
            };
            out[64..].copy_from_slice(wire.as_bytes());
        }
        self.wire_len()
    }

    /// Encodes this descriptor for `GRAPH_ATTACH`.
    pub fn to_wire(&self) -> GraphDescriptorWire {
        GraphDescriptorWire {
            magic: GRAPH_MAGIC,
            version: GRAPH_VERSION.into(),
            id_width_bytes: self.id_width_bytes,
            flags: if self.features.is_some() {
                GRAPH_FLAG_FEATURES
            } else {
                0
            },
            node_count: self.node_count.into(),
            edge_count: self.edge_count.into(),
            indptr_slba: self.indptr.slba.into(),
            indptr_block_count: self.indptr.block_count.into(),
            indices_slba: self.indices.slba.into(),
            indices_block_count: self.indices.block_count.into(),
            reserved: 0.into(),
        }
    }

    /// Parses and validates a descriptor against a namespace of `namespace_blocks` LBAs of
    /// `block_size_bytes` each. Checks magic, version, reserved fields, id width, that both
    /// ranges fit in the namespace without overlapping, and that they are large enough for the
    /// counts they claim to hold.
    pub fn parse(
        bytes: &[u8],
        block_size_bytes: u32,
        namespace_blocks: u64,
    ) -> Result<Self, VendorStatus> {
        let (wire, _) =
            GraphDescriptorWire::read_from_prefix(bytes).map_err(|_| VendorStatus::Truncated)?;
        if wire.magic != GRAPH_MAGIC {
            return Err(VendorStatus::BadMagic);
        }
        if wire.version.get() != GRAPH_VERSION {
            return Err(VendorStatus::BadVersion);
        }
        if wire.flags & !GRAPH_FLAG_FEATURES != 0 || wire.reserved.get() != 0 {
            return Err(VendorStatus::ReservedField);
        }
        let features = if wire.flags & GRAPH_FLAG_FEATURES != 0 {
            let ext = bytes.get(64..).ok_or(VendorStatus::Truncated)?;
            let (f, _) =
                FeatureRegionWire::read_from_prefix(ext).map_err(|_| VendorStatus::Truncated)?;
            if f.magic != FEATURE_MAGIC {
                return Err(VendorStatus::BadMagic);
            }
            if f.reserved != [0; 40] {
                return Err(VendorStatus::ReservedField);
            }
            Some(FeatureRegion {
                range: LbaRange {
                    slba: f.slba.get(),
                    block_count: f.block_count.get(),
                },
                row_bytes: f.row_bytes.get(),
            })
        } else {
            None
        };
        let d = Self {
            node_count: wire.node_count.get(),
            edge_count: wire.edge_count.get(),
            id_width_bytes: wire.id_width_bytes,
            indptr: LbaRange {
                slba: wire.indptr_slba.get(),
                block_count: wire.indptr_block_count.get(),
            },
            indices: LbaRange {
                slba: wire.indices_slba.get(),
                block_count: wire.indices_block_count.get(),
            },
            features,
        };
        let fits = |r: &LbaRange, need_bytes: Option<u64>| -> bool {
            let have = r.block_count.checked_mul(u64::from(block_size_bytes));
            matches!((r.end(), have, need_bytes), (Some(end), Some(have), Some(need)) if end <= namespace_blocks && have >= need)
        };
        let indptr_bytes = d.node_count.checked_add(1).and_then(|n| n.checked_mul(8));
        let indices_bytes = d.edge_count.checked_mul(u64::from(d.id_width_bytes));
        let valid = matches!(d.id_width_bytes, 4 | 8)
            && d.node_count > 0
            && (d.id_width_bytes == 8 || d.node_count <= u64::from(u32::MAX) + 1)
            && fits(&d.indptr, indptr_bytes)
            && fits(&d.indices, indices_bytes)
            && (d.indices.block_count == 0 || !d.indptr.overlaps(&d.indices))
            && d.features.is_none_or(|f| {
                f.row_bytes > 0
                    && f.row_bytes % 4 == 0
                    && f.row_bytes <= MAX_FEATURE_ROW_BYTES
                    && fits(&f.range, d.node_count.checked_mul(f.stride_bytes()))
                    && !f.range.overlaps(&d.indptr)
                    && (d.indices.block_count == 0 || !f.range.overlaps(&d.indices))
            });
        if valid {
            Ok(d)
        } else {
            Err(VendorStatus::BadDescriptor)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> GraphDescriptor {
        GraphDescriptor {
            node_count: 3,
            edge_count: 4,
            id_width_bytes: 4,
            indptr: LbaRange {
                slba: 0,
                block_count: 1,
            },
            indices: LbaRange {
                slba: 1,
                block_count: 1,
            },
            features: None,
        }
    }

    #[test]
    fn golden_bytes() {
        let wire = sample().to_wire();
        let mut golden = [0u8; 64];
        golden[0..4].copy_from_slice(b"GRPH");
        golden[4] = 1;
        golden[6] = 4;
        golden[8] = 3;
        golden[16] = 4;
        golden[32] = 1; // indptr block count
        golden[40] = 1; // indices slba
        golden[48] = 1; // indices block count
        assert_eq!(wire.as_bytes(), &golden);
        assert_eq!(GraphDescriptor::parse(&golden, 4096, 16), Ok(sample()));
    }

    #[test]
    fn a_feature_region_round_trips_and_its_fields_are_checked() {
        let with = GraphDescriptor {
            features: Some(FeatureRegion {
                range: LbaRange {
                    slba: 4,
                    block_count: 1,
                },
                row_bytes: 12,
            }),
            ..sample()
        };
        let mut out = [0u8; 128];
        assert_eq!(with.encode(&mut out), 128);
        assert_eq!(out[7], GRAPH_FLAG_FEATURES);
        assert_eq!(&out[64..68], b"FEAT");
        assert_eq!(GraphDescriptor::parse(&out, 4096, 16), Ok(with));
        assert_eq!(with.features.unwrap().stride_bytes(), 16);
        let patched = |at: usize, bytes: &[u8]| {
            let mut b = out;
            b[at..at + bytes.len()].copy_from_slice(bytes);
            GraphDescriptor::parse(&b, 4096, 16)
        };
        assert_eq!(patched(64, b"FEAX"), Err(VendorStatus::BadMagic));
        assert_eq!(patched(68, &[6, 0, 0, 0]), Err(VendorStatus::BadDescriptor)); // not 4-aligned
        assert_eq!(patched(72, &[1]), Err(VendorStatus::BadDescriptor)); // overlaps indices
        assert_eq!(patched(72, &[16]), Err(VendorStatus::BadDescriptor)); // past the namespace
        assert_eq!(patched(100, &[1]), Err(VendorStatus::ReservedField));
        // Rows past the largest size, up to ones whose power-of-two stride does not fit in a
        // u32: refused, never an overflow (a panic with overflow checks).
        for row_bytes in [MAX_FEATURE_ROW_BYTES + 4, (1 << 31) + 4, u32::MAX - 3] {
            assert_eq!(
                patched(68, &row_bytes.to_le_bytes()),
                Err(VendorStatus::BadDescriptor),
                "row_bytes {row_bytes}"
            );
        }
        let huge = FeatureRegion {
            row_bytes: u32::MAX,
            ..with.features.unwrap()
        };
        assert_eq!(huge.stride_bytes(), 1 << 32);
        assert_eq!(
            GraphDescriptor::parse(&out[..100], 4096, 16),
            Err(VendorStatus::Truncated)
        );
    }

    #[test]
    fn every_invalid_field_is_rejected() {
        let good = sample().to_wire();
        let check = |w: GraphDescriptorWire, want: VendorStatus| {
            assert_eq!(
                GraphDescriptor::parse(w.as_bytes(), 4096, 16),
                Err(want),
                "{w:?}"
            );
        };
        check(
            GraphDescriptorWire {
                magic: *b"GRPX",
                ..good
            },
            VendorStatus::BadMagic,
        );
        check(
            GraphDescriptorWire {
                version: 2.into(),
                ..good
            },
            VendorStatus::BadVersion,
        );
        check(
            GraphDescriptorWire { flags: 2, ..good },
            VendorStatus::ReservedField,
        );
        // The feature flag without its 64-byte extension.
        check(
            GraphDescriptorWire { flags: 1, ..good },
            VendorStatus::Truncated,
        );
        check(
            GraphDescriptorWire {
                reserved: 1.into(),
                ..good
            },
            VendorStatus::ReservedField,
        );
        check(
            GraphDescriptorWire {
                id_width_bytes: 2,
                ..good
            },
            VendorStatus::BadDescriptor,
        );
        check(
            GraphDescriptorWire {
                node_count: 0.into(),
                ..good
            },
            VendorStatus::BadDescriptor,
        );
        check(
            GraphDescriptorWire {
                indices_slba: 0.into(),
                ..good
            },
            VendorStatus::BadDescriptor,
        );
        check(
            GraphDescriptorWire {
                indices_slba: 16.into(),
                ..good
            },
            VendorStatus::BadDescriptor,
        );
        check(
            GraphDescriptorWire {
                indices_slba: u64::MAX.into(),
                ..good
            },
            VendorStatus::BadDescriptor,
        );
        check(
            GraphDescriptorWire {
                edge_count: 1025.into(),
                ..good
            },
            VendorStatus::BadDescriptor,
        );
        check(
            GraphDescriptorWire {
                node_count: 1000.into(),
                ..good
            },
            VendorStatus::BadDescriptor,
        );
        assert_eq!(
            GraphDescriptor::parse(&good.as_bytes()[..63], 4096, 16),
            Err(VendorStatus::Truncated)
        );
    }
}
