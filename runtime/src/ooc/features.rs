//! Feature gathering from storage: the features of a minibatch's nodes, read from the dataset's
//! `features.npy` (or a device's feature region, or a table computed as it is read: a
//! papers100M-sized one has 57 GB of rows) into one contiguous buffer in the subgraph's node
//! order.
//!
//! Two caches, two systems:
//! * [`ThresholdCache`] (AGNES): a node's feature row is kept once the node has been accessed
//!   `threshold` times, while the cache has room; hot nodes of a power-law graph fill it and
//!   stay. Misses are read by feature block: rows are grouped in blocks of the layout's block
//!   size, and each block a gather needs is read once — for a whole hyperbatch at a time with
//!   [`ThresholdCache::gather_many`].
//! * [`FifoCache`] (BGL): every row read is kept, the oldest evicted first. It pays off with
//!   BGL's proximity-aware minibatch order ([`bgl_order`](crate::minibatch::bgl_order)), where
//!   consecutive minibatches share neighbourhoods. Misses are read row by row (adjacent rows in
//!   one read).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use sagessd_emulator::nand::synthetic::LogicalContent;
use sagessd_emulator::synthetic_features::{FeatureBytes, SyntheticFeatures};

use crate::dataset::Dataset;

use crate::npy::{self, Dtype};
use crate::sampler::SamplerError;

use super::IoStats;
use super::file::{ALIGN_BYTES, covering_extent};
use super::store::{BlockDevice, Span, Store};

/// Most feature values per node accepted (a row of 1 MiB as float32), as for a computed table.
const MAX_FEATURE_DIM: u64 = sagessd_emulator::synthetic_features::MAX_FEATURE_DIM as u64;

/// Where the rows are: `features.npy` on storage (rows back to back after its header), a
/// feature region on an NVMe device (rows at a power-of-two stride, the layout the firmware
/// gathers from: [`crate::load::load_graph_with_features`]), or a table computed where it is
/// read ([`FeatureFile::computed`]).
#[derive(Debug)]
pub struct FeatureFile<'d> {
    store: RowSource<'d>,
    /// Bytes of one node's row.
    pub row_bytes: usize,
    /// Node count.
    pub rows: u64,
    /// Bytes from one row's start to the next's in the store.
    stride_bytes: usize,
}

/// Where a table's rows are: stored (a file or a device region), or computed when read,
/// counted as the reads of a file whose rows began at byte `offset` would be (the
/// `ALIGN_BYTES` extents covering them; no system call, no I/O wait).
#[derive(Debug)]
enum RowSource<'d> {
    Stored(Store<'d>),
    Computed {
        content: Arc<dyn LogicalContent>,
        offset: u64,
    },
}

/// Counts in `io` one read of bytes `start..start + len` of a computed table whose rows begin
/// at file offset `offset`: the extent a file read of them covers ([`covering_extent`]).
fn count_computed_read(offset: u64, start: u64, len: usize, io: &mut IoStats) {
    let (first, end) = covering_extent(offset + start, len);
    io.record((end - first) as usize, 0);
}

/// Rows read in one I/O: from the first one read, `stride` bytes apart.
struct Rows {
    bytes: RowBytes,
    stride: usize,
    row_bytes: usize,
}

/// Where a read's rows are.
enum RowBytes {
    /// In the buffer a file or device read filled.
    Read(Span),
    /// In a computed table, from byte `start`: a row is computed when it is taken, so a
    /// 64 KiB block read for one row computes that row only (the read is counted whole).
    Computed {
        content: Arc<dyn LogicalContent>,
        start: u64,
    },
}

impl Rows {
    /// Copies row `k` of the read into `out` (a row long).
    fn copy_row(&self, k: usize, out: &mut [u8]) {
        match &self.bytes {
            RowBytes::Read(span) => {
                out.copy_from_slice(&span.bytes()[k * self.stride..][..self.row_bytes]);
            }
            RowBytes::Computed { content, start } => {
                content.fill(start + (k * self.stride) as u64, out);
            }
        }
    }
}

impl FeatureFile<'static> {
    /// Opens `dataset`'s features (O_DIRECT when allowed).
    pub fn open(dataset: &Dataset) -> Result<Self, SamplerError> {
        let entry =
            dataset.manifest.features.as_ref().ok_or_else(|| {
                SamplerError::InvalidRequest("the dataset has no features".into())
            })?;
        let path = dataset.dir().join(&entry.file);
        let bad = |why: String| SamplerError::GraphCorrupt(format!("{}: {why}", path.display()));
        let h = npy::read_header(&path).map_err(|e| SamplerError::GraphCorrupt(e.to_string()))?;
        let element = match h.dtype {
            Dtype::F32 => 4,
            Dtype::F16 => 2,
            other => return Err(bad(format!("features dtype {}", other.descr()))),
        };
        let [rows, dim] = h.shape[..] else {
            return Err(bad(format!("shape {:?} is not [nodes, dim]", h.shape)));
        };
        if rows != dataset.manifest.node_count || dim == 0 || dim > MAX_FEATURE_DIM {
            return Err(bad(format!(
                "shape {:?}: {} rows of 1..={MAX_FEATURE_DIM} values expected",
                h.shape, dataset.manifest.node_count
            )));
        }
        let row_bytes = dim as usize * element;
        let file_len = std::fs::metadata(&path)
            .map_err(|e| bad(e.to_string()))?
            .len();
        if file_len < h.data_offset + rows * row_bytes as u64 {
            return Err(bad("shorter than its header says".into()));
        }
        Ok(Self {
            store: RowSource::Stored(Store::File {
                file: super::direct::open_data(&path)?,
                offset: h.data_offset,
            }),
            row_bytes,
            rows,
            stride_bytes: row_bytes,
        })
    }

    /// A computed table ([`SyntheticFeatures`]), its rows back to back as in a `features.npy`
    /// whose rows begin at byte `data_offset`: reads are counted as that file's would be, and
    /// the caches over it keep only which rows they hold (a hit recomputes the row, the same
    /// bytes), so a 57 GB table and a cache of half of it cost no memory for rows.
    pub fn computed(
        features: Arc<SyntheticFeatures>,
        data_offset: u64,
    ) -> Result<Self, SamplerError> {
        let rows = features.rows();
        let row_bytes = features.row_bytes();
        // Its rows must be countable here (a cache counts accesses per row) and its bytes,
        // after the offset, addressable in 64 bits.
        let fits = usize::try_from(rows).is_ok()
            && features
                .table_bytes(row_bytes)
                .ok()
                .and_then(|t| t.checked_add(data_offset))
                .is_some();
        if !fits {
            return Err(SamplerError::InvalidRequest(format!(
                "a computed table of {rows} rows at offset {data_offset} is too large here"
            )));
        }
        let bytes = FeatureBytes::new(features, row_bytes)
            .map_err(|e| SamplerError::InvalidRequest(e.to_string()))?;
        let row_bytes = usize::try_from(row_bytes)
            .map_err(|_| SamplerError::InvalidRequest("feature row too large".into()))?;
        Ok(Self {
            store: RowSource::Computed {
                content: Arc::new(bytes),
                offset: data_offset,
            },
            row_bytes,
            rows,
            stride_bytes: row_bytes,
        })
    }
}

impl<'d> FeatureFile<'d> {
    /// The feature region `region` (`rows` rows) of a graph on `device`, as
    /// [`crate::load::load_graph_with_features`] wrote it.
    pub fn on_device(
        device: &'d mut dyn BlockDevice,
        region: &sagessd_abi::graph::FeatureRegion,
        rows: u64,
    ) -> Result<Self, SamplerError> {
        let stride = region.stride_bytes();
        let need = rows
            .checked_mul(stride)
            .ok_or_else(|| SamplerError::InvalidRequest("feature region too large".into()))?;
        if region.range.block_count.saturating_mul(device.lba_bytes()) < need {
            return Err(SamplerError::InvalidRequest(format!(
                "a feature region of {} LBAs holds no {rows} rows of stride {stride}",
                region.range.block_count
            )));
        }
        let stride_bytes = usize::try_from(stride)
            .map_err(|_| SamplerError::InvalidRequest("feature stride too large".into()))?;
        Ok(Self {
            store: RowSource::Stored(Store::Device {
                device,
                slba: region.range.slba,
            }),
            row_bytes: region.row_bytes as usize,
            rows,
            stride_bytes,
        })
    }

    /// Bytes from one row's start to the next's in the store.
    fn stride_bytes(&self) -> usize {
        self.stride_bytes
    }

    /// Whether its rows are computed, so that a cache need not keep them.
    fn is_computed(&self) -> bool {
        matches!(self.store, RowSource::Computed { .. })
    }

    /// Recomputes row `v` into `out` (a row long) without I/O: only a computed store can;
    /// `false` for the others.
    fn recompute_row(&self, v: u64, out: &mut [u8]) -> bool {
        match &self.store {
            RowSource::Computed { content, .. } => {
                content.fill(v * self.stride_bytes as u64, out);
                true
            }
            RowSource::Stored(_) => false,
        }
    }

    /// Reads rows `first..first + count` (one I/O).
    fn read_rows(
        &mut self,
        first: u64,
        count: u64,
        io: &mut IoStats,
    ) -> Result<Rows, SamplerError> {
        let stride = self.stride_bytes();
        let len = (count.max(1) as usize - 1) * stride + self.row_bytes;
        let start = first * stride as u64;
        let bytes = match &mut self.store {
            RowSource::Computed { content, offset } => {
                count_computed_read(*offset, start, len, io);
                RowBytes::Computed {
                    content: Arc::clone(content),
                    start,
                }
            }
            RowSource::Stored(store) => RowBytes::Read(store.read(start, len, io)?),
        };
        Ok(Rows {
            bytes,
            stride,
            row_bytes: self.row_bytes,
        })
    }
}

/// Cached feature rows: their bytes packed in one buffer that grows to at most `capacity`
/// rows, and an index from node to slot, so the cache's memory is its rows plus the index; or,
/// over a computed table, the index alone (a hit recomputes the row: the same bytes, no I/O).
#[derive(Debug)]
struct RowSlab {
    row_bytes: usize,
    capacity: usize,
    data: Vec<u8>,
    slot_of: HashMap<u64, u32>,
    free: Vec<u32>,
    /// Keeps which rows it holds, not their bytes.
    keys_only: bool,
}

impl RowSlab {
    fn new(row_bytes: usize, capacity: usize, keys_only: bool) -> Self {
        Self {
            row_bytes,
            capacity,
            data: Vec::new(),
            slot_of: HashMap::new(),
            free: Vec::new(),
            keys_only,
        }
    }

    fn contains(&self, v: u64) -> bool {
        self.slot_of.contains_key(&v)
    }

    /// Copies `v`'s row into `out` if the cache holds it: from the slab, or recomputed by
    /// `features` when only keys are kept.
    fn serve(&self, v: u64, features: &FeatureFile<'_>, out: &mut [u8]) -> bool {
        let Some(&slot) = self.slot_of.get(&v) else {
            return false;
        };
        if self.keys_only {
            let recomputed = features.recompute_row(v, out);
            debug_assert!(recomputed, "a keys-only cache over a stored table");
            recomputed
        } else {
            out.copy_from_slice(&self.data[slot as usize * self.row_bytes..][..self.row_bytes]);
            true
        }
    }

    fn len(&self) -> usize {
        self.slot_of.len()
    }

    /// Keeps `row` for `v` if there is room; `false` if full (or already there).
    fn insert(&mut self, v: u64, row: &[u8]) -> bool {
        if self.slot_of.contains_key(&v) || self.len() >= self.capacity {
            return false;
        }
        if self.keys_only {
            self.slot_of.insert(v, 0);
            return true;
        }
        let slot = match self.free.pop() {
            Some(s) => s as usize,
            None => {
                self.data.extend_from_slice(row);
                self.data.len() / self.row_bytes - 1
            }
        };
        self.data[slot * self.row_bytes..][..self.row_bytes].copy_from_slice(row);
        self.slot_of.insert(v, slot as u32);
        true
    }

    fn remove(&mut self, v: u64) {
        if let Some(slot) = self.slot_of.remove(&v)
            && !self.keys_only
        {
            self.free.push(slot);
        }
    }
}

/// What a gatherer did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatherStats {
    /// Rows gathered.
    pub rows: u64,
    /// Rows found in the cache.
    pub cache_hits: u64,
    /// Storage I/O (`bytes_used`: the rows' bytes taken from what was read).
    pub io: IoStats,
}

impl GatherStats {
    /// Share of rows served by the cache.
    pub fn hit_ratio(&self) -> f64 {
        if self.rows == 0 {
            0.0
        } else {
            self.cache_hits as f64 / self.rows as f64
        }
    }
}

/// AGNES's access-count-threshold cache and block-wise reads.
#[derive(Debug)]
pub struct ThresholdCache<'d> {
    features: FeatureFile<'d>,
    threshold: u32,
    block_rows: u64,
    counts: Vec<u32>,
    cached: RowSlab,
    /// What it did.
    pub stats: GatherStats,
}

impl<'d> ThresholdCache<'d> {
    /// A gatherer over `features` with a cache of `cache_bytes`, caching a node after
    /// `threshold` accesses, reading misses in blocks of `block_bytes`.
    pub fn new(
        features: FeatureFile<'d>,
        cache_bytes: usize,
        threshold: u32,
        block_bytes: usize,
    ) -> Self {
        let row = features.row_bytes.max(1);
        Self {
            block_rows: (block_bytes / features.stride_bytes().max(1)).max(1) as u64,
            counts: vec![0; features.rows as usize],
            threshold: threshold.max(1),
            cached: RowSlab::new(row, cache_bytes / row, features.is_computed()),
            stats: GatherStats::default(),
            features,
        }
    }

    /// The rows of `nodes`, in order, in one buffer.
    pub fn gather(&mut self, nodes: &[u64]) -> Result<Vec<u8>, SamplerError> {
        let mut out = self.gather_many(&[nodes])?;
        Ok(out.pop().unwrap_or_default())
    }

    /// The rows of several minibatches' nodes (a hyperbatch), one buffer each: the misses of
    /// all of them are read together, each feature block once.
    pub fn gather_many(&mut self, lists: &[&[u64]]) -> Result<Vec<Vec<u8>>, SamplerError> {
        let row = self.features.row_bytes;
        let mut outs: Vec<Vec<u8>> = lists.iter().map(|l| vec![0u8; l.len() * row]).collect();
        let mut missing: Vec<(u64, usize, usize)> = Vec::new();
        for (b, nodes) in lists.iter().enumerate() {
            for (i, &v) in nodes.iter().enumerate() {
                let count = self.counts.get_mut(v as usize).ok_or_else(|| {
                    SamplerError::InvalidRequest(format!("node {v} has no feature row"))
                })?;
                *count = count.saturating_add(1);
                self.stats.rows += 1;
                if self
                    .cached
                    .serve(v, &self.features, &mut outs[b][i * row..(i + 1) * row])
                {
                    self.stats.cache_hits += 1;
                } else {
                    missing.push((v, b, i));
                }
            }
        }
        // One read per feature block the misses fall in.
        missing.sort_unstable();
        let mut k = 0;
        while k < missing.len() {
            let block = missing[k].0 / self.block_rows;
            let first = block * self.block_rows;
            let count = self.block_rows.min(self.features.rows - first);
            let rows = self.features.read_rows(first, count, &mut self.stats.io)?;
            while k < missing.len() && missing[k].0 / self.block_rows == block {
                let (v, b, i) = missing[k];
                let r = &mut outs[b][i * row..(i + 1) * row];
                rows.copy_row((v - first) as usize, r);
                self.stats.io.bytes_used += row as u64;
                if self.counts[v as usize] >= self.threshold {
                    self.cached.insert(v, r);
                }
                k += 1;
            }
        }
        Ok(outs)
    }
}

/// BGL's FIFO feature cache and row reads.
#[derive(Debug)]
pub struct FifoCache<'d> {
    features: FeatureFile<'d>,
    cached: RowSlab,
    order: VecDeque<u64>,
    /// What it did.
    pub stats: GatherStats,
}

impl<'d> FifoCache<'d> {
    /// A gatherer over `features` with a FIFO cache of `cache_bytes`.
    pub fn new(features: FeatureFile<'d>, cache_bytes: usize) -> Self {
        let row = features.row_bytes.max(1);
        Self {
            cached: RowSlab::new(row, cache_bytes / row, features.is_computed()),
            order: VecDeque::new(),
            stats: GatherStats::default(),
            features,
        }
    }

    /// The rows of `nodes`, in order, in one buffer.
    pub fn gather(&mut self, nodes: &[u64]) -> Result<Vec<u8>, SamplerError> {
        let row = self.features.row_bytes;
        let mut out = vec![0u8; nodes.len() * row];
        let mut missing: Vec<(u64, usize)> = Vec::new();
        for (i, &v) in nodes.iter().enumerate() {
            if v >= self.features.rows {
                return Err(SamplerError::InvalidRequest(format!(
                    "node {v} has no feature row"
                )));
            }
            self.stats.rows += 1;
            if self
                .cached
                .serve(v, &self.features, &mut out[i * row..(i + 1) * row])
            {
                self.stats.cache_hits += 1;
            } else {
                missing.push((v, i));
            }
        }
        missing.sort_unstable();
        // Rows in the same or adjacent sectors are one read.
        let sector_rows = (ALIGN_BYTES / self.features.stride_bytes().max(1)).max(1) as u64;
        let mut k = 0;
        while k < missing.len() {
            let first = missing[k].0;
            let mut last = first;
            let mut j = k;
            while j < missing.len() && missing[j].0 <= last + sector_rows {
                last = missing[j].0;
                j += 1;
            }
            let rows = self
                .features
                .read_rows(first, last - first + 1, &mut self.stats.io)?;
            for &(v, i) in &missing[k..j] {
                let r = &mut out[i * row..(i + 1) * row];
                rows.copy_row((v - first) as usize, r);
                self.stats.io.bytes_used += row as u64;
                self.insert(v, r);
            }
            k = j;
        }
        Ok(out)
    }

    fn insert(&mut self, v: u64, r: &[u8]) {
        if self.cached.capacity == 0 || self.cached.contains(v) {
            return;
        }
        if self.cached.len() >= self.cached.capacity
            && let Some(oldest) = self.order.pop_front()
        {
            self.cached.remove(oldest);
        }
        if self.cached.insert(v, r) {
            self.order.push_back(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::generate::{GenerateParams, generate};

    fn dataset(name: &str) -> (std::path::PathBuf, Dataset) {
        let dir = std::env::temp_dir().join(format!("sagessd-feat-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let p = GenerateParams {
            name: "f".into(),
            scale: 10,
            edge_factor: 4,
            seed: 4,
            feature_dim: 8,
            feature_dtype: Dtype::F32,
            classes: 3,
        };
        let d = generate(&dir, &p).unwrap();
        (dir, d)
    }

    fn all_rows(d: &Dataset) -> Vec<u8> {
        npy::read_raw(&d.dir().join("features.npy"), Dtype::F32, 2)
            .unwrap()
            .1
    }

    #[test]
    fn gathers_equal_the_rows_and_the_caches_behave() {
        let (dir, d) = dataset("caches");
        let rows = all_rows(&d);
        let row = 32;
        let expect = |nodes: &[u64]| -> Vec<u8> {
            nodes
                .iter()
                .flat_map(|v| rows[*v as usize * row..][..row].to_vec())
                .collect()
        };
        let nodes = [5u64, 900, 5, 17, 18, 1023];
        // Threshold 2: node 5 (seen twice in the first gather) is cached, the others are not.
        let mut t = ThresholdCache::new(FeatureFile::open(&d).unwrap(), 1 << 20, 2, 4096);
        assert_eq!(t.gather(&nodes).unwrap(), expect(&nodes));
        assert_eq!(t.stats.cache_hits, 0);
        assert_eq!(t.gather(&[5]).unwrap(), expect(&[5]));
        assert_eq!(t.stats.cache_hits, 1);
        let reads = t.stats.io.reads;
        assert_eq!(t.gather(&[900]).unwrap(), expect(&[900]));
        assert_eq!(t.stats.io.reads, reads + 1, "900 was seen once: not cached");
        // A hyperbatch's gathers read each block once: two lists in the same 4 KiB block.
        let mut h = ThresholdCache::new(FeatureFile::open(&d).unwrap(), 0, 1, 4096);
        let out = h.gather_many(&[&[3, 4], &[4, 100]]).unwrap();
        assert_eq!(out, vec![expect(&[3, 4]), expect(&[4, 100])]);
        assert_eq!(h.stats.io.reads, 1);
        // A cache with room for nothing caches nothing.
        let mut none = ThresholdCache::new(FeatureFile::open(&d).unwrap(), 0, 1, 4096);
        none.gather(&[1, 1]).unwrap();
        none.gather(&[1]).unwrap();
        assert_eq!(none.stats.cache_hits, 0);

        // FIFO of two rows: 1, 2 cached; 3 evicts 1.
        let mut f = FifoCache::new(FeatureFile::open(&d).unwrap(), 2 * row);
        assert_eq!(f.gather(&[1, 600]).unwrap(), expect(&[1, 600]));
        assert_eq!(f.gather(&[1, 600]).unwrap(), expect(&[1, 600]));
        assert_eq!(f.stats.cache_hits, 2);
        f.gather(&[300]).unwrap();
        f.gather(&[600, 1]).unwrap();
        assert_eq!(f.stats.cache_hits, 3, "600 stayed, 1 was evicted first");
        assert!(f.gather(&[5000]).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A computed table gathers what the same table written as `features.npy` gathers, through
    /// both caches (which keep only keys over it), and its reads are counted as the file's.
    #[test]
    fn a_computed_table_gathers_and_counts_as_the_same_table_on_file() {
        let (dir, d) = dataset("computed");
        let path = d.dir().join("features.npy");
        let header = npy::read_header(&path).unwrap();
        let table = Arc::new(SyntheticFeatures::new(1024, 8, 77).unwrap());
        // The file's rows replaced by the computed table's, computed value by value.
        let rows: Vec<u8> = (0..1024u64)
            .flat_map(|v| (0..8).map(move |c| (v, c)))
            .flat_map(|(v, c)| table.value(v, c).to_le_bytes())
            .collect();
        let mut bytes = std::fs::read(&path).unwrap();
        let at = header.data_offset as usize;
        bytes[at..at + rows.len()].copy_from_slice(&rows);
        std::fs::write(&path, bytes).unwrap();
        let computed = || FeatureFile::computed(Arc::clone(&table), header.data_offset).unwrap();
        let counted = |g: &GatherStats| {
            (
                g.rows,
                g.cache_hits,
                g.io.reads,
                g.io.bytes_read,
                g.io.bytes_used,
                g.io.size_histogram,
            )
        };
        let mut rng = crate::rng::SplitMix64::new(5);
        let batches: Vec<Vec<u64>> = (0..24)
            .map(|_| (0..40).map(|_| rng.next_u64() % 1024).collect())
            .collect();
        let expect = |nodes: &[u64]| -> Vec<u8> {
            nodes
                .iter()
                .flat_map(|v| rows[*v as usize * 32..][..32].to_vec())
                .collect()
        };
        for cache_rows in [0usize, 16, 300] {
            let mut file = FifoCache::new(FeatureFile::open(&d).unwrap(), cache_rows * 32);
            let mut comp = FifoCache::new(computed(), cache_rows * 32);
            assert!(comp.cached.keys_only && !file.cached.keys_only);
            for b in &batches {
                assert_eq!(comp.gather(b).unwrap(), expect(b));
                assert_eq!(file.gather(b).unwrap(), expect(b));
            }
            assert_eq!(
                counted(&comp.stats),
                counted(&file.stats),
                "FIFO of {cache_rows}"
            );
            assert!(cache_rows == 0 || comp.stats.cache_hits > 0);

            let mut file =
                ThresholdCache::new(FeatureFile::open(&d).unwrap(), cache_rows * 32, 2, 4096);
            let mut comp = ThresholdCache::new(computed(), cache_rows * 32, 2, 4096);
            for pair in batches.chunks(2) {
                let lists: Vec<&[u64]> = pair.iter().map(Vec::as_slice).collect();
                let want: Vec<Vec<u8>> = pair.iter().map(|b| expect(b)).collect();
                assert_eq!(comp.gather_many(&lists).unwrap(), want);
                assert_eq!(file.gather_many(&lists).unwrap(), want);
            }
            assert_eq!(
                counted(&comp.stats),
                counted(&file.stats),
                "threshold, {cache_rows}"
            );
        }
        // Another seed's table is told apart.
        let other = Arc::new(SyntheticFeatures::new(1024, 8, 78).unwrap());
        let mut f = FifoCache::new(FeatureFile::computed(other, header.data_offset).unwrap(), 0);
        assert_ne!(f.gather(&batches[0]).unwrap(), expect(&batches[0]));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
