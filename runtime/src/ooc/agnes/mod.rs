//! AGNES's block layout and its samplers.
//!
//! The layout packs node objects, each a neighbour list of `u32` ids, into fixed-size blocks
//! (default 1 MiB) in node-id order. An object that does not fit the rest of a block starts the
//! next one; an object larger than a block starts at a block boundary and runs on across the
//! following blocks. An in-memory object index gives each node's byte offset in the block
//! stream and its degree, so neighbour `k` of node `v` is at `offset[v] + 4k`.
//!
//! ```plain
//!  DIR/agnes-<block KiB>/layout.toml   block size and count, node count, source dataset
//!  DIR/agnes-<block KiB>/blocks.bin    the blocks
//!  DIR/agnes-<block KiB>/index.npy     int64 [n, 2]: object offset, degree
//! ```
//!
//! [`AgnesSampler`] reads the blocks through a bounded LRU graph buffer. Per minibatch, every
//! hop looks up each block its sampled positions fall in; per hyperbatch of H minibatches, a
//! hop's sampled positions are bucketed by block (the block × minibatch bucket matrix) and each
//! block is looked up once for all the minibatches that need it.

mod buffer;
pub mod format;
pub mod synthetic;
#[cfg(test)]
mod tests;

use std::fs;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::dataset::{Dataset, DatasetError, field_error};
use crate::minibatch::Request;
use crate::npy::{self, Dtype, NpyWriter};
use crate::sampler::{
    EdgeRange, SampledSubgraph, Sampler, SamplerError, SamplerStats, SubgraphBuilder,
};

use self::buffer::GraphBuffer;
use self::format::{LayoutManifest, block_bytes_valid, layout_dir, object_start};
use self::synthetic::SyntheticLayout;
use super::IoStats;
use super::store::BlockDevice;

/// Fills block `k` of a layout into the buffer: read from its file or computed.
type BlockSource<'a> = Box<dyn FnMut(u64, &mut [u8]) -> Result<(), SamplerError> + 'a>;

/// An AGNES block layout: where it is and its in-memory object index.
#[derive(Debug)]
pub struct AgnesLayout {
    /// Its manifest.
    pub manifest: LayoutManifest,
    index: Index,
}

/// Where a layout's blocks and object index come from.
#[derive(Debug)]
enum Index {
    /// Written: `blocks.bin` in `dir`, and the index loaded from its `index.npy`.
    Written {
        dir: PathBuf,
        offsets: Vec<u64>,
        degrees: Vec<u64>,
    },
    /// Computed from a synthetic graph: no files, the blocks are where a device computes them.
    Computed(Arc<SyntheticLayout>),
}

impl AgnesLayout {
    /// Writes the topology of `dataset` as a block layout into `dir`, streaming `indices` from
    /// its file (only `indptr` and the object offsets are held in memory).
    fn write(dataset: &Dataset, dir: &Path, block_bytes: usize) -> Result<Self, DatasetError> {
        if !block_bytes_valid(block_bytes as u64) {
            return Err(field_error(
                dir,
                "block size",
                format!("{block_bytes} is not a multiple of 4 KiB"),
            ));
        }
        let csr_error = |e| match e {
            // Its messages name the file at fault.
            crate::sampler::SamplerError::GraphCorrupt(why) => {
                field_error(dataset.dir(), "CSR files", why)
            }
            other => field_error(dataset.dir(), "CSR files", other.to_string()),
        };
        let files = super::CsrFiles::open(dataset).map_err(csr_error)?;
        let indptr = files.load_indptr().map_err(csr_error)?;
        let csr = &files.indices;
        fs::create_dir_all(dir).map_err(|source| DatasetError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| DatasetError::Io { path, source }
        };
        let mut ids = {
            let mut file = fs::File::open(&csr.path).map_err(io(&csr.path))?;
            file.seek(SeekFrom::Start(csr.data_offset))
                .map_err(io(&csr.path))?;
            BufReader::with_capacity(1 << 20, file)
        };
        let blocks_path = dir.join("blocks.bin");
        let mut out = BufWriter::with_capacity(
            1 << 20,
            fs::File::create(&blocks_path).map_err(io(&blocks_path))?,
        );
        let b = block_bytes as u64;
        let n = dataset.manifest.node_count;
        let mut offsets = Vec::with_capacity(n as usize);
        let mut at = 0u64;
        let mut split_nodes = 0;
        let mut element = [0u8; 8];
        let width = csr.element_bytes as usize;
        for v in 0..n {
            let degree = indptr[v as usize + 1] - indptr[v as usize];
            let len = 4 * degree;
            let start = object_start(at, len, b);
            std::io::copy(&mut std::io::repeat(0).take(start - at), &mut out)
                .map_err(io(&blocks_path))?;
            at = start;
            if len > b {
                split_nodes += 1;
            }
            offsets.push(at);
            for k in 0..degree {
                ids.read_exact(&mut element[..width])
                    .map_err(io(&csr.path))?;
                let id = u64::from_le_bytes(element);
                if id >= n || id > u64::from(u32::MAX) {
                    // As the file's signed type reads it.
                    let shown = if width == 4 {
                        i64::from(id as u32 as i32)
                    } else {
                        id as i64
                    };
                    return Err(field_error(
                        &csr.path,
                        format!("entry {}", indptr[v as usize] + k),
                        format!("{shown} is not a node id (the layout holds 4-byte ids below {n})"),
                    ));
                }
                out.write_all(&(id as u32).to_le_bytes())
                    .map_err(io(&blocks_path))?;
            }
            at += len;
        }
        let block_count = at.div_ceil(b).max(1);
        std::io::copy(&mut std::io::repeat(0).take(block_count * b - at), &mut out)
            .map_err(io(&blocks_path))?;
        out.flush().map_err(io(&blocks_path))?;
        let mut index = NpyWriter::create(&dir.join("index.npy"), Dtype::I64, &[n, 2])?;
        let mut row = Vec::with_capacity(1 << 16);
        for v in 0..n {
            let degree = indptr[v as usize + 1] - indptr[v as usize];
            row.extend_from_slice(&offsets[v as usize].to_le_bytes());
            row.extend_from_slice(&degree.to_le_bytes());
            if row.len() >= 1 << 16 {
                index.write(&row)?;
                row.clear();
            }
        }
        index.write(&row)?;
        index.finish()?;
        let manifest = LayoutManifest {
            block_bytes: b,
            block_count,
            node_count: n,
            split_nodes,
            edge_count: dataset.manifest.edge_count,
            dataset: dataset.manifest.name.clone(),
            source_crc32c: dataset.manifest.indices.crc32c.clone(),
        };
        let path = dir.join("layout.toml");
        let text =
            toml::to_string(&manifest).map_err(|e| field_error(&path, "layout", e.to_string()))?;
        fs::write(&path, text).map_err(io(&path))?;
        Self::open(dir)
    }

    /// Opens the layout in `dir`, loading its object index.
    pub fn open(dir: &Path) -> Result<Self, DatasetError> {
        let path = dir.join("layout.toml");
        let text = fs::read_to_string(&path).map_err(|source| DatasetError::Io {
            path: path.clone(),
            source,
        })?;
        let manifest: LayoutManifest = toml::from_str(&text)
            .map_err(|e| field_error(&path, "layout", e.message().to_owned()))?;
        let (shape, raw) = npy::read_raw(&dir.join("index.npy"), Dtype::I64, 2)?;
        if shape != [manifest.node_count, 2] {
            return Err(field_error(
                &path,
                "node_count",
                format!("index.npy has shape {shape:?}"),
            ));
        }
        let b = manifest.block_bytes;
        if !block_bytes_valid(b) {
            return Err(field_error(
                &path,
                "block_bytes",
                format!("{b}: a multiple of 4 KiB up to 1 GiB"),
            ));
        }
        let end = manifest
            .block_count
            .checked_mul(b)
            .ok_or_else(|| field_error(&path, "block_count", "too large"))?;
        let blocks = dir.join("blocks.bin");
        let len = fs::metadata(&blocks)
            .map_err(|source| DatasetError::Io {
                path: blocks.clone(),
                source,
            })?
            .len();
        if len != end {
            return Err(field_error(
                &blocks,
                "length",
                format!("{len} bytes, the layout says {end}"),
            ));
        }
        let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        let (offsets, degrees): (Vec<u64>, Vec<u64>) = raw
            .chunks_exact(16)
            .map(|p| (word(&p[..8]), word(&p[8..])))
            .unzip();
        drop(raw);
        let inside = |(o, d): (&u64, &u64)| {
            o % 4 == 0
                && d.checked_mul(4)
                    .and_then(|bytes| o.checked_add(bytes))
                    .is_some_and(|e| e <= end)
        };
        let edges = degrees.iter().try_fold(0u64, |a, d| a.checked_add(*d));
        if !offsets.iter().zip(&degrees).all(inside) || edges != Some(manifest.edge_count) {
            return Err(field_error(
                &dir.join("index.npy"),
                "offsets",
                "an object lies outside the blocks, or the degrees do not add up to edge_count",
            ));
        }
        Ok(Self {
            manifest,
            index: Index::Written {
                dir: dir.to_owned(),
                offsets,
                degrees,
            },
        })
    }

    /// The layout of a synthetic graph, computed ([`SyntheticLayout`]): its blocks are read from
    /// a device whose flash computes them (or that [`AgnesLayout::write_to_device`] wrote).
    pub fn computed(layout: Arc<SyntheticLayout>) -> Self {
        let graph = layout.graph();
        let spec = graph.spec();
        Self {
            manifest: LayoutManifest {
                block_bytes: layout.block_bytes(),
                block_count: layout.block_count(),
                node_count: graph.node_count(),
                split_nodes: layout.split_nodes(),
                edge_count: graph.edge_count(),
                dataset: format!("synthetic:{},seed={}", spec.node_count, spec.seed),
                source_crc32c: "computed".into(),
            },
            index: Index::Computed(layout),
        }
    }

    /// Opens `dataset`'s layout with `block_bytes` blocks, writing it first if there is none.
    /// Returns whether it was written now.
    pub fn for_dataset(
        dataset: &Dataset,
        block_bytes: usize,
    ) -> Result<(Self, bool), DatasetError> {
        let dir = layout_dir(dataset, block_bytes);
        let source = &dataset.manifest.indices.crc32c;
        if dir.join("layout.toml").exists() {
            // A layout of another dataset (or another block size) is rewritten, not used.
            match Self::open(&dir) {
                Ok(l)
                    if &l.manifest.source_crc32c == source
                        && l.manifest.block_bytes == block_bytes as u64 =>
                {
                    return Ok((l, false));
                }
                _ => {}
            }
        }
        Ok((Self::write(dataset, &dir, block_bytes)?, true))
    }

    /// Writes the blocks to `device` from LBA `slba` (NVMe Writes), so the samplers can read
    /// them there ([`AgnesSampler::on_device`]). Returns the
    /// first LBA after them.
    pub fn write_to_device<T: sagessd_host_driver::Transport>(
        &self,
        device: &mut sagessd_host_driver::Device<T>,
        slba: u64,
    ) -> Result<u64, SamplerError> {
        use std::io::Read;
        let lba = u64::from(device.info().block_size_bytes);
        let b = self.manifest.block_bytes;
        if !b.is_multiple_of(lba) {
            return Err(SamplerError::InvalidRequest(
                "blocks are not whole LBAs".into(),
            ));
        }
        let end = slba + self.manifest.block_count * (b / lba);
        if end > device.info().block_count {
            return Err(SamplerError::InvalidRequest(format!(
                "the layout needs LBAs {slba}..{end}, the namespace has {}",
                device.info().block_count
            )));
        }
        let mut buf = vec![0u8; b as usize];
        let mut next_block: BlockSource<'_> = match &self.index {
            Index::Written { dir, .. } => {
                let path = dir.join("blocks.bin");
                let opened = fs::File::open(&path);
                let corrupt =
                    move |e| SamplerError::GraphCorrupt(format!("{}: {e}", path.display()));
                let mut file = opened.map_err(&corrupt)?;
                Box::new(move |_, buf| file.read_exact(buf).map_err(&corrupt))
            }
            Index::Computed(layout) => Box::new(move |k, buf| {
                sagessd_emulator::nand::synthetic::LogicalContent::fill(&**layout, k * b, buf);
                Ok(())
            }),
        };
        for k in 0..self.manifest.block_count {
            next_block(k, &mut buf)?;
            device.write(slba + k * (b / lba), &buf)?;
        }
        Ok(end)
    }

    /// Node count.
    pub fn node_count(&self) -> u64 {
        self.manifest.node_count
    }

    /// The layout folder (`None` for a computed layout).
    pub fn dir(&self) -> Option<&Path> {
        match &self.index {
            Index::Written { dir, .. } => Some(dir),
            Index::Computed(_) => None,
        }
    }

    /// Edge range of `v` in units of 4 bytes of the block stream.
    pub(crate) fn range(&self, v: u64) -> EdgeRange {
        match &self.index {
            Index::Written {
                offsets, degrees, ..
            } => EdgeRange {
                start: offsets[v as usize] / 4,
                degree: degrees[v as usize],
            },
            Index::Computed(layout) => EdgeRange {
                start: layout.offset(v) / 4,
                degree: layout.graph().degree(v),
            },
        }
    }
}

/// Neighbour ids as the message-flow-graph builder takes them.
fn widen(ids: &[u32]) -> Vec<u64> {
    ids.iter().map(|&v| u64::from(v)).collect()
}

/// AGNES's sampler over the block layout: a hyperbatch of H minibatches shares, per hop, one
/// pass over the blocks its sampled positions fall in ([`Self::sample_hyperbatch`]); one
/// minibatch alone ([`Sampler::sample`]) is AGNES's per-minibatch block sampling.
#[derive(Debug)]
pub struct AgnesSampler<'l> {
    layout: &'l AgnesLayout,
    buffer: GraphBuffer<'l>,
    stats: SamplerStats,
}

impl<'l> AgnesSampler<'l> {
    /// A sampler over `layout` with a graph buffer of `buffer_bytes`; `prefetch`: read each
    /// hop's blocks ahead through io_uring, overlapping the reads with sampling.
    pub fn new(
        layout: &'l AgnesLayout,
        buffer_bytes: usize,
        prefetch: bool,
    ) -> Result<Self, SamplerError> {
        Ok(Self {
            layout,
            buffer: GraphBuffer::new(layout, buffer_bytes, prefetch, None)?,
            stats: SamplerStats::default(),
        })
    }

    /// A sampler reading the layout from `device`, where [`AgnesLayout::write_to_device`]
    /// put it at `slba` (blocks read one at a time, no read-ahead).
    pub fn on_device(
        layout: &'l AgnesLayout,
        buffer_bytes: usize,
        device: &'l mut dyn BlockDevice,
        slba: u64,
    ) -> Result<Self, SamplerError> {
        Ok(Self {
            layout,
            buffer: GraphBuffer::new(layout, buffer_bytes, false, Some((device, slba)))?,
            stats: SamplerStats::default(),
        })
    }

    /// The storage I/O so far.
    pub fn io_stats(&self) -> &IoStats {
        &self.buffer.io
    }

    /// Samples a hyperbatch: `requests` are (seed, targets) minibatches with the same fanouts.
    /// Per hop, the sampled positions of all of them are bucketed by block and each block is
    /// looked up once.
    pub fn sample_hyperbatch(
        &mut self,
        fanouts: &[u16],
        requests: &[Request],
    ) -> Result<Vec<SampledSubgraph>, SamplerError> {
        let n = self.layout.node_count();
        let mut builders = requests
            .iter()
            .map(|Request { seed, targets }| SubgraphBuilder::new(n, *seed, fanouts, targets))
            .collect::<Result<Vec<_>, _>>()?;
        for hop in 0..fanouts.len() {
            let before = self.buffer.io.clone();
            // The bucket matrix, flattened: every minibatch's positions of the hop, one after
            // the other (`spans` says whose are where), bucketed by block in `resolve`.
            let mut positions: Vec<u64> = Vec::new();
            let mut spans = Vec::with_capacity(builders.len());
            for b in &mut builders {
                let dst = b.destinations().unwrap_or(&[]);
                let ranges: Vec<EdgeRange> = dst.iter().map(|&v| self.layout.range(v)).collect();
                let base = positions.len();
                positions.extend(b.set_ranges(&ranges)?);
                spans.push(base..positions.len());
            }
            let mut neighbours = vec![0u32; positions.len()];
            self.buffer.resolve(&positions, &mut neighbours)?;
            self.buffer.io.charge_hop(hop, &before);
            drop(positions);
            for (b, span) in builders.iter_mut().zip(spans) {
                b.set_neighbours(&widen(&neighbours[span]))?;
            }
        }
        let out = builders
            .into_iter()
            .map(SubgraphBuilder::finish)
            .collect::<Result<Vec<_>, _>>()?;
        for s in &out {
            self.stats.add_subgraph(s);
        }
        Ok(out)
    }
}

impl Sampler for AgnesSampler<'_> {
    fn name(&self) -> &'static str {
        "AGNES blocks"
    }

    fn sample(
        &mut self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        let mut one = self.sample_hyperbatch(fanouts, &[Request::new(seed, targets.to_vec())])?;
        one.pop()
            .ok_or_else(|| SamplerError::InvalidRequest("empty hyperbatch".into()))
    }

    fn sample_many(
        &mut self,
        fanouts: &[u16],
        requests: &[Request],
    ) -> Result<Vec<SampledSubgraph>, SamplerError> {
        self.sample_hyperbatch(fanouts, requests)
    }

    fn stats(&self) -> SamplerStats {
        self.stats
    }
}
