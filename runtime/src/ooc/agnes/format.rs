//! AGNES's block layout as files: the layout's folder, its manifest, the block sizes allowed,
//! and the one packing rule every layout follows, written ([`super::AgnesLayout`]) or computed
//! ([`super::synthetic`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::dataset::Dataset;

/// Default block size: 1 MiB, as in AGNES.
pub const DEFAULT_BLOCK_BYTES: usize = 1 << 20;
/// Smallest block size (and the unit of every block size): one `O_DIRECT` alignment unit.
const MIN_BLOCK_BYTES: u64 = 4096;
/// Largest block size.
const MAX_BLOCK_BYTES: u64 = 1 << 30;

/// `layout.toml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutManifest {
    /// Bytes per block.
    pub block_bytes: u64,
    /// Blocks in `blocks.bin`.
    pub block_count: u64,
    /// Nodes.
    pub node_count: u64,
    /// Nodes whose object spans more than one block.
    pub split_nodes: u64,
    /// Edges (the sum of the object sizes, in ids).
    pub edge_count: u64,
    /// The dataset it was built from.
    pub dataset: String,
    /// CRC32C of the dataset's `indices` array when the layout was written: a layout of an
    /// earlier dataset in the same folder is never taken for this one's.
    pub source_crc32c: String,
}

/// Whether `block_bytes` is a block size: a multiple of 4 KiB (the `O_DIRECT` unit) up to
/// 1 GiB.
pub fn block_bytes_valid(block_bytes: u64) -> bool {
    (MIN_BLOCK_BYTES..=MAX_BLOCK_BYTES).contains(&block_bytes)
        && block_bytes.is_multiple_of(MIN_BLOCK_BYTES)
}

/// Where the object of `len_bytes` goes when the block stream is `at_bytes` long: there, or at
/// the next block boundary if it does not fit the rest of a block it would not start (the one
/// packing rule of every layout, written or computed).
pub fn object_start(at_bytes: u64, len_bytes: u64, block_bytes: u64) -> u64 {
    let room = block_bytes - at_bytes % block_bytes;
    if len_bytes > room && !at_bytes.is_multiple_of(block_bytes) {
        at_bytes + room
    } else {
        at_bytes
    }
}

/// The folder of `dataset`'s layout with `block_bytes` blocks.
pub fn layout_dir(dataset: &Dataset, block_bytes: usize) -> PathBuf {
    dataset.dir().join(format!("agnes-{}k", block_bytes / 1024))
}
