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

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::dataset::{Dataset, DatasetError, field_error};
use crate::npy::{self, Dtype, NpyWriter};
use crate::sampler::{
    EdgeRange, SampledSubgraph, Sampler, SamplerError, SamplerStats, SubgraphBuilder,
};

use super::IoStats;
use super::agnes_synthetic::SyntheticLayout;
use super::file::{AlignedBuf, DataFile};
use super::store::{BlockDevice, Span, Store};

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

/// The folder of `dataset`'s layout with `block_bytes` blocks.
pub fn layout_dir(dataset: &Dataset, block_bytes: usize) -> PathBuf {
    dataset.dir().join(format!("agnes-{}k", block_bytes / 1024))
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

/// The bounded LRU graph buffer: whole blocks, read on a miss from the layout's file, or from
/// a device the layout was written to ([`AgnesLayout::write_to_device`]).
#[derive(Debug)]
struct GraphBuffer<'d> {
    store: Store<'d>,
    block_bytes: usize,
    /// Blocks in the layout.
    block_count: u64,
    capacity_blocks: usize,
    /// The buffered blocks, each with the clock of its last use.
    blocks: HashMap<u64, (Span, u64)>,
    /// The buffered blocks by the clock of their last use, oldest first: the eviction order
    /// (clocks are unique), in O(log n) a use rather than a scan of the buffer a miss.
    by_use: BTreeMap<u64, u64>,
    clock: u64,
    io: IoStats,
    /// Reads ahead through io_uring, when the sampler knows its blocks in advance.
    prefetch: Option<Prefetch>,
    /// Blocks read ahead at most (part of the buffer's budget).
    depth: usize,
}

/// Blocks read ahead of their use: a hop's missing blocks are all known before the first one
/// is needed, so up to [`PREFETCH_DEPTH`] are in flight while earlier ones are sampled.
struct Prefetch {
    ring: io_uring::IoUring,
    in_flight: HashMap<u64, AlignedBuf>,
    arrived: HashMap<u64, AlignedBuf>,
    /// The ring failed with reads in flight (their buffers were leaked): it must not be used
    /// again, or a stale completion could be taken for a new read of the same block.
    ring_lost: bool,
}

impl std::fmt::Debug for Prefetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetch")
            .field("in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

/// Block reads a hyperbatch keeps in flight.
const PREFETCH_DEPTH: usize = 8;

impl Prefetch {
    fn submit(
        &mut self,
        file: &DataFile,
        block: u64,
        block_bytes: usize,
        io: &mut IoStats,
    ) -> std::io::Result<()> {
        if self.in_flight.contains_key(&block) || self.arrived.contains_key(&block) {
            return Ok(());
        }
        let mut buf = AlignedBuf::new(block_bytes);
        let entry = io_uring::opcode::Read::new(
            io_uring::types::Fd(file.raw_fd()),
            buf.bytes_mut().as_mut_ptr(),
            block_bytes as u32,
        )
        .offset(block * block_bytes as u64)
        .build()
        .user_data(block);
        // SAFETY: the buffer's heap memory stays in `in_flight` until its completion is reaped
        // (`wait_for` and `drain` reap every submitted read).
        unsafe { self.ring.submission().push(&entry) }
            .map_err(|_| std::io::Error::other("io_uring submission queue full"))?;
        // In flight from here on, whether or not the submit below succeeds.
        self.in_flight.insert(block, buf);
        io.syscalls += 1;
        match self.ring.submit() {
            Ok(_) => {}
            // Still queued: the next io_uring_enter submits it.
            Err(e)
                if e.kind() == std::io::ErrorKind::Interrupted
                    || e.raw_os_error() == Some(libc::EBUSY)
                    || e.raw_os_error() == Some(libc::EAGAIN) => {}
            Err(e) => return Err(e),
        }
        io.record(block_bytes, 0);
        Ok(())
    }

    /// Reaps completions until `block` has arrived, and hands it over.
    fn wait_for(
        &mut self,
        block: u64,
        block_bytes: usize,
        io: &mut IoStats,
    ) -> std::io::Result<AlignedBuf> {
        loop {
            if let Some(buf) = self.arrived.remove(&block) {
                return Ok(buf);
            }
            super::file::submit_and_wait(&mut self.ring, io)?;
            let done: Vec<(u64, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            let mut failed = None;
            for (b, result) in done {
                if let Some(buf) = self.in_flight.remove(&b) {
                    if result < 0 {
                        failed.get_or_insert(std::io::Error::from_raw_os_error(-result));
                    } else if result as usize != block_bytes {
                        failed.get_or_insert(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            format!("block {b}: {result} of {block_bytes} bytes read"),
                        ));
                    } else {
                        self.arrived.insert(b, buf);
                    }
                }
            }
            if let Some(e) = failed {
                self.drain();
                return Err(e);
            }
        }
    }

    /// Waits for every read still in flight (their buffers must outlive them); after a failed
    /// pass, or when the sampler goes, so its waits are not counted.
    fn drain(&mut self) {
        while !self.in_flight.is_empty() {
            if super::file::submit_and_wait(&mut self.ring, &mut IoStats::default()).is_err() {
                // Leak rather than free memory the kernel may still write.
                for (_, buf) in self.in_flight.drain() {
                    std::mem::forget(buf);
                }
                self.ring_lost = true;
                return;
            }
            let done: Vec<u64> = self.ring.completion().map(|c| c.user_data()).collect();
            for b in done {
                self.in_flight.remove(&b);
            }
        }
        self.arrived.clear();
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.drain();
    }
}

impl<'d> GraphBuffer<'d> {
    fn new(
        layout: &AgnesLayout,
        buffer_bytes: usize,
        prefetch: bool,
        device: Option<(&'d mut dyn BlockDevice, u64)>,
    ) -> Result<Self, SamplerError> {
        let block_bytes = layout.manifest.block_bytes as usize;
        if buffer_bytes < block_bytes {
            return Err(SamplerError::InvalidRequest(format!(
                "a graph buffer of {buffer_bytes} bytes holds no {block_bytes}-byte block"
            )));
        }
        // Blocks read ahead count against the buffer: the LRU keeps the rest.
        let capacity = buffer_bytes / block_bytes;
        let depth = if prefetch {
            PREFETCH_DEPTH.min(capacity / 2)
        } else {
            0
        };
        let prefetch = prefetch && depth > 0 && device.is_none();
        let prefetch = prefetch
            .then(|| io_uring::IoUring::new(PREFETCH_DEPTH as u32 * 2))
            .transpose()
            .map_err(|e| SamplerError::GraphCorrupt(format!("io_uring: {e}")))?
            .map(|ring| Prefetch {
                ring,
                in_flight: HashMap::new(),
                arrived: HashMap::new(),
                ring_lost: false,
            });
        let store = match device {
            Some((device, slba)) => {
                if !(block_bytes as u64).is_multiple_of(device.lba_bytes()) {
                    return Err(SamplerError::InvalidRequest(
                        "blocks are not whole LBAs".into(),
                    ));
                }
                Store::Device { device, slba }
            }
            None => match layout.dir() {
                Some(dir) => Store::File {
                    file: super::direct::open_data(&dir.join("blocks.bin"))?,
                    offset: 0,
                },
                None => {
                    return Err(SamplerError::InvalidRequest(
                        "a computed layout has no file: read it from a device".into(),
                    ));
                }
            },
        };
        Ok(Self {
            prefetch,
            store,
            block_bytes,
            block_count: layout.manifest.block_count,
            capacity_blocks: (capacity - depth).max(1),
            depth,
            blocks: HashMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
            io: IoStats::default(),
        })
    }

    /// The block, from the buffer, from the prefetcher, or read now; a block that was not in
    /// the buffer enters it (evicting the least recently used one).
    fn block(&mut self, index: u64) -> Result<&[u8], SamplerError> {
        self.clock += 1;
        if self.blocks.contains_key(&index) {
            self.io.buffer_hits += 1;
        } else {
            self.io.buffer_misses += 1;
            if self.blocks.len() >= self.capacity_blocks
                && let Some((_, oldest)) = self.by_use.pop_first()
            {
                self.blocks.remove(&oldest);
            }
            let prefetched = self
                .prefetch
                .as_mut()
                .filter(|p| p.in_flight.contains_key(&index) || p.arrived.contains_key(&index));
            let buf = match prefetched {
                Some(p) => p
                    .wait_for(index, self.block_bytes, &mut self.io)
                    .map(Span::aligned)
                    .map_err(|e| SamplerError::GraphCorrupt(e.to_string())),
                None => self.store.read(
                    index * self.block_bytes as u64,
                    self.block_bytes,
                    &mut self.io,
                ),
            }?;
            self.blocks.insert(index, (buf, 0));
        }
        let clock = self.clock;
        let entry = self
            .blocks
            .get_mut(&index)
            .ok_or_else(|| SamplerError::GraphCorrupt("graph buffer lost a block".into()))?;
        // A block just read has clock 0, which no use has (the clock starts at 1).
        let previous = std::mem::replace(&mut entry.1, clock);
        self.by_use.remove(&previous);
        self.by_use.insert(clock, index);
        Ok(entry.0.bytes())
    }

    /// Reads the neighbour ids at `positions` (4-byte units of the block stream) into `out`,
    /// block by block: each block the positions fall in is looked up once, in ascending order.
    fn resolve(&mut self, positions: &[u64], out: &mut [u32]) -> Result<(), SamplerError> {
        let result = self.resolve_blocks(positions, out);
        if result.is_err()
            && let Some(p) = self.prefetch.as_mut()
        {
            // Nothing read ahead may outlive a failed pass; a lost ring reads no more.
            p.drain();
            if p.ring_lost {
                self.prefetch = None;
            }
        }
        result
    }

    fn resolve_blocks(&mut self, positions: &[u64], out: &mut [u32]) -> Result<(), SamplerError> {
        let per_block = (self.block_bytes / 4) as u64;
        let corrupt = || SamplerError::GraphCorrupt("a position past the layout's blocks".into());
        if u32::try_from(positions.len()).is_err() {
            return Err(SamplerError::InvalidRequest(format!(
                "{} positions in one hop (at most 2^32)",
                positions.len()
            )));
        }
        // A counting sort of the positions' slots by block (4 bytes a position): `first[b]`
        // is where block b's slots start in `order`, `end[b]` where they end.
        let mut first = vec![0u32; self.block_count as usize + 1];
        for &p in positions {
            *first
                .get_mut((p / per_block) as usize)
                .ok_or_else(corrupt)? += 1;
        }
        let mut start = 0;
        for c in &mut first {
            (*c, start) = (start, start + *c);
        }
        let mut end = first.clone();
        let mut order = vec![0u32; positions.len()];
        for (slot, &p) in positions.iter().enumerate() {
            let e = &mut end[(p / per_block) as usize];
            order[*e as usize] = slot as u32;
            *e += 1;
        }
        // The blocks this call will look up: those in the buffer now first, then the others in
        // ascending order. AGNES pins the blocks already buffered until the pass has used them
        // (§3.4 (1)); serving them before any read is the same, since only a read evicts: no
        // read of this pass evicts a block the pass still needs from the buffer, which an LRU
        // swept in block order would do whenever the pass needs more blocks than it holds.
        let groups = (0..first.len())
            .filter(|&b| end[b] > first[b])
            .map(|b| (b as u64, first[b] as usize, end[b] as usize));
        let (resident, misses): (Vec<_>, Vec<_>) =
            groups.partition(|g| self.blocks.contains_key(&g.0));
        drop((first, end));
        let miss_blocks: Vec<u64> = misses.iter().map(|g| g.0).collect();
        let mut next_miss = 0;
        for (block, i, j) in resident.into_iter().chain(misses) {
            if let (Some(p), Store::File { file, .. }) = (self.prefetch.as_mut(), &self.store) {
                while next_miss < miss_blocks.len()
                    && p.in_flight.len() + p.arrived.len() < self.depth
                {
                    p.submit(file, miss_blocks[next_miss], self.block_bytes, &mut self.io)
                        .map_err(|e| SamplerError::GraphCorrupt(e.to_string()))?;
                    next_miss += 1;
                }
            }
            let bytes = self.block(block)?;
            for &slot in &order[i..j] {
                let at = (positions[slot as usize] % per_block) as usize * 4;
                out[slot as usize] =
                    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
            }
            self.io.bytes_used += 4 * (j - i) as u64;
        }
        Ok(())
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
        requests: &[(u64, Vec<u64>)],
    ) -> Result<Vec<SampledSubgraph>, SamplerError> {
        let n = self.layout.node_count();
        let mut builders = requests
            .iter()
            .map(|(seed, targets)| SubgraphBuilder::new(n, *seed, fanouts, targets))
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
        let mut one = self.sample_hyperbatch(fanouts, &[(seed, targets.to_vec())])?;
        one.pop()
            .ok_or_else(|| SamplerError::InvalidRequest("empty hyperbatch".into()))
    }

    fn sample_many(
        &mut self,
        fanouts: &[u16],
        requests: &[(u64, Vec<u64>)],
    ) -> Result<Vec<SampledSubgraph>, SamplerError> {
        self.sample_hyperbatch(fanouts, requests)
    }

    fn stats(&self) -> SamplerStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::generate::{GenerateParams, generate};
    use crate::ooc::DirectSampler;
    use crate::sampler::{ReferenceSampler, Sampler};

    /// A generated dataset (R-MAT `scale`, edge factor `edge_factor`, `feature_dim` f32
    /// features) in a fresh temporary directory named after `tag`; the directory and dataset.
    fn generated(
        tag: &str,
        scale: u32,
        edge_factor: u32,
        seed: u64,
        feature_dim: u32,
    ) -> (std::path::PathBuf, crate::dataset::Dataset) {
        let dir = std::env::temp_dir().join(format!("sagessd-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let params = GenerateParams {
            name: tag.into(),
            scale,
            edge_factor,
            seed,
            feature_dim,
            feature_dtype: Dtype::F32,
            classes: 2,
        };
        let dataset = generate(&dir, &params).unwrap();
        (dir, dataset)
    }

    #[test]
    fn damaged_files_are_errors_not_panics() {
        let (dir, dataset) = generated("damaged", 8, 4, 1, 4);
        let (layout, _) = AgnesLayout::for_dataset(&dataset, 4096).unwrap();
        let layout_dir = layout.dir().unwrap().to_owned();
        drop(layout);

        // A broken indptr entry (the 10th from the end, node n - 10's end): the file samplers
        // read indptr as they sample, and refuse that node's range, naming the file.
        let indptr = dir.join("indptr.npy");
        let good = fs::read(&indptr).unwrap();
        let mut bad = good.clone();
        let at = bad.len() - 8 * 10;
        bad[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        fs::write(&indptr, &bad).unwrap();
        let node = dataset.manifest.node_count - 10;
        let samplers: [Box<dyn Sampler>; 3] = [
            Box::new(DirectSampler::open(&dataset, false).unwrap()),
            Box::new(DirectSampler::open(&dataset, true).unwrap()),
            Box::new(crate::ooc::MmapSampler::open(&dataset).unwrap()),
        ];
        for mut s in samplers {
            let err = s.sample(1, &[2], &[node]).unwrap_err().to_string();
            assert!(
                err.contains("indptr.npy") && err.contains(&format!("node {node}")),
                "{err}"
            );
        }
        fs::write(&indptr, &good).unwrap();

        // A truncated blocks file and an index pointing past the blocks.
        let blocks = layout_dir.join("blocks.bin");
        let full = fs::read(&blocks).unwrap();
        fs::write(&blocks, &full[..full.len() - 4096]).unwrap();
        assert!(
            AgnesLayout::open(&layout_dir)
                .unwrap_err()
                .to_string()
                .contains("blocks.bin")
        );
        fs::write(&blocks, &full).unwrap();
        let index = layout_dir.join("index.npy");
        let good_index = fs::read(&index).unwrap();
        let mut bad_index = good_index.clone();
        let at = bad_index.len() - 8;
        bad_index[at..].copy_from_slice(&(1u64 << 62).to_le_bytes()); // a degree of 2^62
        fs::write(&index, &bad_index).unwrap();
        assert!(
            AgnesLayout::open(&layout_dir)
                .unwrap_err()
                .to_string()
                .contains("index.npy")
        );
        fs::write(&index, &good_index).unwrap();
        // A graph buffer smaller than one block.
        let layout = AgnesLayout::open(&layout_dir).unwrap();
        assert!(AgnesSampler::new(&layout, 100, false).is_err());

        // A neighbour id past the node count: writing the layout names the file and the entry.
        let indices = dir.join("indices.npy");
        let good_indices = fs::read(&indices).unwrap();
        let mut bad_indices = good_indices.clone();
        let at = bad_indices.len() - 4;
        bad_indices[at..].copy_from_slice(&1000u32.to_le_bytes());
        fs::write(&indices, &bad_indices).unwrap();
        let err = AgnesLayout::write(&dataset, &dir.join("rewritten"), 4096)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("indices.npy") && err.contains("entry"),
            "{err}"
        );
        fs::write(&indices, &good_indices).unwrap();

        // An .npy whose shape does not fit 64 bits.
        let huge = dir.join("huge.npy");
        let header =
            "{'descr': '<i8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }";
        let mut file = b"\x93NUMPY\x01\x00".to_vec();
        let padded = format!("{header:<117}\n");
        file.extend_from_slice(&(padded.len() as u16).to_le_bytes());
        file.extend_from_slice(padded.as_bytes());
        fs::write(&huge, &file).unwrap();
        let err = npy::read_header(&huge).unwrap_err().to_string();
        assert!(err.contains("shape") && err.contains("too large"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    /// A pass serves the blocks already in the buffer before it reads (AGNES pins them): with
    /// a buffer of half the blocks, a second pass over every block reads only the half that is
    /// not buffered, where an LRU swept in block order would evict each buffered block before
    /// reaching it and read them all again.
    #[test]
    fn a_pass_uses_the_buffered_blocks_before_it_reads() {
        let (dir, dataset) = generated("agnes-pin", 10, 8, 3, 0);
        let (layout, _) = AgnesLayout::for_dataset(&dataset, 4096).unwrap();
        let blocks = layout.manifest.block_count;
        assert!(blocks >= 8, "{blocks} blocks");
        let held = blocks / 2;
        let mut buffer = GraphBuffer::new(&layout, held as usize * 4096, false, None).unwrap();
        // One position in each block (its first entry).
        let positions: Vec<u64> = (0..blocks).map(|b| b * 1024).collect();
        let mut first = vec![0u32; positions.len()];
        buffer.resolve(&positions, &mut first).unwrap();
        assert_eq!(buffer.io.reads, blocks);
        let mut second = vec![0u32; positions.len()];
        buffer.resolve(&positions, &mut second).unwrap();
        assert_eq!(second, first);
        assert_eq!(buffer.io.reads - blocks, blocks - held);
        assert_eq!(buffer.io.buffer_hits, held);
        let _ = fs::remove_dir_all(&dir);
    }

    /// The buffer evicts the least recently used block: checked against a list kept in use
    /// order (most recent last) over a seeded stream of block lookups.
    #[test]
    fn the_buffer_evicts_the_least_recently_used_block() {
        let (dir, dataset) = generated("agnes-lru", 10, 8, 5, 0);
        let (layout, _) = AgnesLayout::for_dataset(&dataset, 4096).unwrap();
        let blocks = layout.manifest.block_count;
        let held = 5usize;
        let mut buffer = GraphBuffer::new(&layout, held * 4096, false, None).unwrap();
        let mut order: Vec<u64> = Vec::new();
        let (mut reads, mut hits) = (0u64, 0u64);
        let mut rng = crate::rng::SplitMix64::new(11);
        for _ in 0..2_000 {
            // Mostly a few hot blocks, sometimes any block.
            let b = if rng.next_u64().is_multiple_of(4) {
                rng.next_u64() % blocks
            } else {
                rng.next_u64() % 7
            };
            if let Some(k) = order.iter().position(|&x| x == b) {
                order.remove(k);
                hits += 1;
            } else {
                reads += 1;
                if order.len() == held {
                    order.remove(0);
                }
            }
            order.push(b);
            buffer.block(b).unwrap();
            assert_eq!(buffer.io.reads, reads, "block {b}");
            assert_eq!(buffer.io.buffer_hits, hits, "block {b}");
        }
        let mut buffered: Vec<u64> = buffer.blocks.keys().copied().collect();
        buffered.sort_unstable();
        order.sort_unstable();
        assert_eq!(buffered, order);
        assert!(hits > 500 && reads > 200, "{hits} hits, {reads} reads");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_sampler_matches_the_reference_and_hyperbatches_read_less() {
        let (dir, dataset) = generated("agnes", 14, 8, 2, 0);
        let graph = dataset.graph().unwrap();
        let block = 4096;
        let (layout, written) = AgnesLayout::for_dataset(&dataset, block).unwrap();
        assert!(written);
        // Every edge is found exactly once through the object index; hubs span blocks.
        let blocks = fs::read(layout.dir().unwrap().join("blocks.bin")).unwrap();
        for v in 0..graph.node_count() {
            let r = layout.range(v);
            let got: Vec<u32> = (0..r.degree)
                .map(|k| {
                    let at = 4 * (r.start + k) as usize;
                    u32::from_le_bytes(blocks[at..at + 4].try_into().unwrap())
                })
                .collect();
            assert_eq!(got, graph.neighbours(v), "node {v}");
        }
        assert!(layout.manifest.split_nodes > 0, "a hub larger than a block");
        let graph_bytes = layout.manifest.block_count * layout.manifest.block_bytes;
        let buffer = (graph_bytes / 8) as usize;

        let requests: Vec<(u64, Vec<u64>)> = (0..8u64)
            .map(|b| {
                (
                    b,
                    (0..64)
                        .map(|i| (i * 97 + b * 13) % graph.node_count())
                        .collect(),
                )
            })
            .collect();
        let fanouts = [10, 5];
        let mut reference = ReferenceSampler::new(&graph);
        let expected: Vec<SampledSubgraph> = requests
            .iter()
            .map(|(s, t)| reference.sample(*s, &fanouts, t).unwrap())
            .collect();
        let mut direct = DirectSampler::open(&dataset, false).unwrap();
        let mut uring = DirectSampler::open(&dataset, true).unwrap();
        let mut mapped = crate::ooc::MmapSampler::open(&dataset).unwrap();
        let mut blocks = AgnesSampler::new(&layout, buffer, false).unwrap();
        for ((s, t), e) in requests.iter().zip(&expected) {
            assert_eq!(&direct.sample(*s, &fanouts, t).unwrap(), e);
            assert_eq!(&uring.sample(*s, &fanouts, t).unwrap(), e);
            assert_eq!(&mapped.sample(*s, &fanouts, t).unwrap(), e);
            assert_eq!(&blocks.sample(*s, &fanouts, t).unwrap(), e);
        }
        let mut hyper = AgnesSampler::new(&layout, buffer, false).unwrap();
        assert_eq!(
            hyper.sample_hyperbatch(&fanouts, &requests).unwrap(),
            expected
        );
        let mut ahead = AgnesSampler::new(&layout, buffer, true).unwrap();
        assert_eq!(
            ahead.sample_hyperbatch(&fanouts, &requests).unwrap(),
            expected
        );
        // Blocks read ahead count against the buffer: the prefetching sampler's LRU holds
        // PREFETCH_DEPTH blocks fewer, and reads what a sampler with that smaller buffer reads.
        let depth = PREFETCH_DEPTH.min(buffer / block / 2);
        let mut smaller = AgnesSampler::new(&layout, buffer - depth * block, false).unwrap();
        assert_eq!(
            smaller.sample_hyperbatch(&fanouts, &requests).unwrap(),
            expected
        );
        // What was read, apart from how (system calls) and how long it took.
        let counts = |io: &IoStats| IoStats {
            io_wait_ns: 0,
            syscalls: 0,
            hops: io.hops.map(|h| crate::ooc::HopIo { io_wait_ns: 0, ..h }),
            ..io.clone()
        };
        assert_eq!(
            counts(ahead.io_stats()),
            counts(smaller.io_stats()),
            "the same reads, issued ahead"
        );

        // The same layout written to an emulated SSD and read there, in modelled time.
        let transport = sagessd_host_driver::LocalTransport::from_config(
            &sagessd_emulator::HwConfig::cosmos_plus(),
        )
        .unwrap();
        let mut device = sagessd_host_driver::Device::open(transport).unwrap();
        layout.write_to_device(&mut device, 4096).unwrap();
        let before = device.now_ns().unwrap();
        {
            let mut on_device =
                AgnesSampler::on_device(&layout, buffer, &mut device, 4096).unwrap();
            assert_eq!(
                on_device.sample_hyperbatch(&fanouts, &requests).unwrap(),
                expected
            );
            assert_eq!(on_device.io_stats().reads, hyper.io_stats().reads);
        }
        {
            let mut per_batch =
                AgnesSampler::on_device(&layout, buffer, &mut device, 4096).unwrap();
            for ((s, t), e) in requests.iter().zip(&expected) {
                assert_eq!(&per_batch.sample(*s, &fanouts, t).unwrap(), e);
            }
        }
        assert!(
            device.now_ns().unwrap() > before,
            "the reads took modelled time"
        );
        assert_eq!(
            counts(uring.io_stats()),
            counts(direct.io_stats()),
            "the same reads, in flight together"
        );
        // Every read is some hop's.
        for io in [
            direct.io_stats(),
            uring.io_stats(),
            hyper.io_stats(),
            blocks.io_stats(),
        ] {
            let per_hop = io.hops.iter().map(|h| (h.reads, h.bytes_read));
            let (reads, bytes) = per_hop.fold((0, 0), |(r, b), (hr, hb)| (r + hr, b + hb));
            assert_eq!((reads, bytes), (io.reads, io.bytes_read), "{io:?}");
            assert!(io.hops[0].reads > 0 && io.hops[2..].iter().all(|h| h.reads == 0));
        }
        assert!(
            hyper.io_stats().reads <= blocks.io_stats().reads,
            "hyperbatch {} reads, per minibatch {}",
            hyper.io_stats().reads,
            blocks.io_stats().reads
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
