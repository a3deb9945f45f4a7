//! The bounded LRU graph buffer of AGNES's sampler: whole blocks, read on a miss, with the
//! blocks a hop will want next read ahead.

use std::collections::{BTreeMap, HashMap};

use super::AgnesLayout;
use crate::ooc::IoStats;
use crate::ooc::file::{AlignedBuf, DataFile};
use crate::ooc::store::{BlockDevice, Span, Store};
use crate::sampler::SamplerError;

/// The bounded LRU graph buffer: whole blocks, read on a miss from the layout's file, or from
/// a device the layout was written to ([`AgnesLayout::write_to_device`]).
#[derive(Debug)]
pub(super) struct GraphBuffer<'d> {
    store: Store<'d>,
    block_bytes: usize,
    /// Blocks in the layout.
    block_count: u64,
    capacity_blocks: usize,
    /// The buffered blocks, each with the clock of its last use.
    pub(super) blocks: HashMap<u64, (Span, u64)>,
    /// The buffered blocks by the clock of their last use, oldest first: the eviction order
    /// (clocks are unique), in O(log n) a use rather than a scan of the buffer a miss.
    by_use: BTreeMap<u64, u64>,
    clock: u64,
    pub(super) io: IoStats,
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
pub(super) const PREFETCH_DEPTH: usize = 8;

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
            crate::ooc::file::submit_and_wait(&mut self.ring, io)?;
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
            if crate::ooc::file::submit_and_wait(&mut self.ring, &mut IoStats::default()).is_err() {
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
    pub(super) fn new(
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
                    file: crate::ooc::direct::open_data(&dir.join("blocks.bin"))?,
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
    pub(super) fn block(&mut self, index: u64) -> Result<&[u8], SamplerError> {
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
    pub(super) fn resolve(
        &mut self,
        positions: &[u64],
        out: &mut [u32],
    ) -> Result<(), SamplerError> {
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
