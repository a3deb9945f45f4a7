//! Reading a file the way the out-of-core samplers do: `O_DIRECT` (no page cache) when the file
//! system allows it, into an aligned buffer, counting every read.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::IoStats;

/// Alignment of `O_DIRECT` offsets, lengths and buffers.
pub const ALIGN_BYTES: usize = 4096;

/// The [`ALIGN_BYTES`]-aligned extent `[start, end)` of a file that covers bytes
/// `[offset, offset + len)`: what one direct read of them reads, and counts.
pub(crate) fn covering_extent(offset: u64, len: usize) -> (u64, u64) {
    let a = ALIGN_BYTES as u64;
    (offset / a * a, (offset + len as u64).div_ceil(a) * a)
}
/// Reads in flight at once on an io_uring.
pub const RING_DEPTH: u32 = 64;
/// Bytes requested in flight at once on an io_uring (one larger read may go alone); the
/// buffers, rounded up to powers of two, may hold up to twice this.
pub const RING_BYTES: usize = 8 << 20;

/// `submit_and_wait(1)`, retried when a signal interrupts it; its wall time is I/O wait, and
/// each `io_uring_enter` a system call, in `stats`.
pub(crate) fn submit_and_wait(
    ring: &mut io_uring::IoUring,
    stats: &mut IoStats,
) -> std::io::Result<()> {
    let started = std::time::Instant::now();
    let result = loop {
        stats.syscalls += 1;
        match ring.submit_and_wait(1) {
            Ok(_) => break Ok(()),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::Interrupted) => {}
            Err(e)
                if e.raw_os_error() == Some(libc::EBUSY)
                    || e.raw_os_error() == Some(libc::EAGAIN) => {}
            Err(e) => break Err(e),
        }
    };
    stats.io_wait_ns += started.elapsed().as_nanos() as u64;
    result
}

/// A heap buffer aligned to [`ALIGN_BYTES`], as `O_DIRECT` needs.
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (a multiple of [`ALIGN_BYTES`]).
    pub fn new(len: usize) -> Self {
        let storage = vec![0u8; len + ALIGN_BYTES];
        let start = storage.as_ptr().align_offset(ALIGN_BYTES);
        Self {
            storage,
            start,
            len,
        }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }

    /// Bytes the buffer can hold without reallocating.
    fn capacity(&self) -> usize {
        self.storage.len() - self.start
    }

    /// Makes the buffer `len` bytes long, reusing its memory when it is large enough (the
    /// contents are then whatever was there).
    fn fit(&mut self, len: usize) {
        if len <= self.capacity() {
            self.len = len;
        } else {
            *self = Self::new(len);
        }
    }
}

/// A file opened for the samplers' reads.
#[derive(Debug)]
pub struct DataFile {
    file: File,
    path: PathBuf,
    /// Whether reads bypass the page cache.
    pub direct: bool,
    len: u64,
}

impl DataFile {
    /// Opens `path` read-only with `O_DIRECT` if the file system allows it (`direct`), else
    /// through the page cache.
    pub fn open(path: &Path, direct: bool) -> std::io::Result<Self> {
        let try_direct = direct
            .then(|| {
                OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(path)
            })
            .and_then(Result::ok);
        let (file, direct) = match try_direct {
            Some(f) => (f, true),
            None => (File::open(path)?, false),
        };
        let len = file.metadata()?.len();
        Ok(Self {
            file,
            path: path.to_owned(),
            direct,
            len,
        })
    }

    /// The raw descriptor, for io_uring submissions.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.file.as_raw_fd()
    }

    /// The file's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads the aligned extent covering bytes `[offset, offset + len)` (`covering_extent`; one
    /// I/O, counted with nothing used yet) and returns the buffer and where the wanted bytes start in it.
    pub fn read_covering(
        &self,
        offset: u64,
        len: usize,
        stats: &mut IoStats,
    ) -> std::io::Result<(AlignedBuf, usize)> {
        let (start, end) = covering_extent(offset, len);
        let mut buf = AlignedBuf::new((end - start) as usize);
        self.read_exact_at(buf.bytes_mut(), start, stats)?;
        stats.record((end - start) as usize, 0);
        Ok((buf, (offset - start) as usize))
    }

    /// Reads `buf.len()` bytes at `offset` (aligned when direct); what lies past the end of the
    /// file (the alignment slack of a last extent) is zeroed. Callers check beforehand that the
    /// bytes they want are inside the file. Its wall time is I/O wait, and each `pread` a
    /// system call, in `stats`.
    fn read_exact_at(
        &self,
        buf: &mut [u8],
        offset: u64,
        stats: &mut IoStats,
    ) -> std::io::Result<()> {
        let started = std::time::Instant::now();
        let mut done = 0;
        let mut failed = None;
        while done < buf.len() && offset + (done as u64) < self.len {
            stats.syscalls += 1;
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        stats.io_wait_ns += started.elapsed().as_nanos() as u64;
        if let Some(e) = failed {
            return Err(e);
        }
        if done < buf.len() && offset + (done as u64) < self.len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{}: short read at {offset}", self.path.display()),
            ));
        }
        buf[done..].fill(0);
        Ok(())
    }
}

/// Aligned buffers kept between reads, so a sampler's many small reads do not allocate (and
/// the allocator does not hold freed ones): at most [`RING_BYTES`] of them are kept idle.
#[derive(Debug, Default)]
struct BufPool {
    idle: Vec<AlignedBuf>,
    idle_bytes: usize,
}

impl BufPool {
    /// A buffer of `len` bytes: the smallest idle one large enough, or a new one with room
    /// for the next power of two (so that buffers fit many lengths).
    fn take(&mut self, len: usize) -> AlignedBuf {
        let best = (self.idle.iter().enumerate())
            .filter(|(_, b)| b.capacity() >= len)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let mut buf = self.idle.swap_remove(i);
                self.idle_bytes -= buf.capacity();
                buf.fit(len);
                buf
            }
            None => {
                let mut buf = AlignedBuf::new(len.next_power_of_two());
                buf.fit(len);
                buf
            }
        }
    }

    /// Keeps `buf` for reuse, unless that would hold more than [`RING_BYTES`] idle.
    fn give(&mut self, buf: AlignedBuf) {
        if self.idle_bytes + buf.capacity() <= RING_BYTES {
            self.idle_bytes += buf.capacity();
            self.idle.push(buf);
        }
    }
}

/// Reads lists of extents from a [`DataFile`]: synchronously, or through an io_uring, with
/// buffers reused from read to read.
pub struct ExtentReader {
    ring: Option<io_uring::IoUring>,
    pool: BufPool,
}

impl std::fmt::Debug for ExtentReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtentReader")
            .field("io_uring", &self.ring.is_some())
            .finish_non_exhaustive()
    }
}

impl ExtentReader {
    /// A reader issuing one read at a time (`uring` false) or up to [`RING_DEPTH`] at once.
    pub fn new(uring: bool) -> std::io::Result<Self> {
        Ok(Self {
            ring: uring
                .then(|| io_uring::IoUring::new(RING_DEPTH))
                .transpose()?,
            pool: BufPool::default(),
        })
    }

    /// Whether reads go through io_uring.
    pub fn uses_uring(&self) -> bool {
        self.ring.is_some()
    }

    /// Reads aligned `(offset, len)` extents of `file` and hands each one's bytes to
    /// `each(i, bytes)` as it arrives: one after the other, or through the ring with up to
    /// [`RING_DEPTH`] reads and [`RING_BYTES`] in flight (in completion order). Memory stays at
    /// what is in flight however many extents there are. After an error, `each` is not called
    /// again; a ring that failed is not used again (it may hold reads it will never report).
    pub fn read(
        &mut self,
        file: &DataFile,
        extents: &[(u64, usize)],
        stats: &mut IoStats,
        mut each: impl FnMut(usize, &[u8]),
    ) -> std::io::Result<()> {
        // Out of the reader while reads are in flight: if `each` panics, the ring goes with the
        // unwinding (its reads are never matched to a later call's).
        let Some(mut ring) = self.ring.take() else {
            for (i, &(offset, len)) in extents.iter().enumerate() {
                let mut buf = self.pool.take(len);
                let read = file.read_exact_at(buf.bytes_mut(), offset, stats);
                if read.is_ok() {
                    stats.record(len, 0);
                    each(i, buf.bytes());
                }
                self.pool.give(buf);
                read?;
            }
            return Ok(());
        };
        let (result, ring_ok) =
            read_on_ring(&mut ring, &mut self.pool, file, extents, stats, &mut each);
        if ring_ok {
            self.ring = Some(ring);
        }
        result
    }
}

/// Buffers of reads in flight: whatever is left in it when it goes (an error that lost track of
/// the reads, or a panic in a caller's closure) is leaked, never freed, as the kernel may still
/// write into it.
struct InFlight(HashMap<usize, AlignedBuf>);

impl Drop for InFlight {
    fn drop(&mut self) {
        for (_, buf) in self.0.drain() {
            std::mem::forget(buf);
        }
    }
}

/// [`ExtentReader::read`] through `ring`; also says whether the ring is still usable (every
/// read it was given has been reaped).
fn read_on_ring(
    ring: &mut io_uring::IoUring,
    pool: &mut BufPool,
    file: &DataFile,
    extents: &[(u64, usize)],
    stats: &mut IoStats,
    each: &mut impl FnMut(usize, &[u8]),
) -> (std::io::Result<()>, bool) {
    use std::os::fd::AsRawFd;
    let fd = io_uring::types::Fd(file.file.as_raw_fd());
    let mut in_flight = InFlight(HashMap::new());
    let mut in_flight_bytes = 0usize;
    let mut done: Vec<(usize, i32)> = Vec::with_capacity(RING_DEPTH as usize);
    let mut next = 0;
    let mut failed: Option<std::io::Error> = None;
    // Every submitted read is reaped before returning, error or not: the kernel writes into
    // the buffers until then.
    while !in_flight.0.is_empty() || (next < extents.len() && failed.is_none()) {
        while failed.is_none()
            && next < extents.len()
            && in_flight.0.len() < RING_DEPTH as usize
            && (in_flight.0.is_empty() || in_flight_bytes + extents[next].1 <= RING_BYTES)
        {
            let (offset, len) = extents[next];
            let mut buf = pool.take(len);
            let entry = io_uring::opcode::Read::new(fd, buf.bytes_mut().as_mut_ptr(), len as u32)
                .offset(offset)
                .build()
                .user_data(next as u64);
            // SAFETY: the buffer's heap memory stays in `in_flight` until its read is reaped
            // (all are reaped in this loop).
            if unsafe { ring.submission().push(&entry) }.is_err() {
                pool.give(buf);
                break;
            }
            in_flight.0.insert(next, buf);
            in_flight_bytes += len;
            next += 1;
        }
        if let Err(e) = submit_and_wait(ring, stats) {
            // The ring can no longer say when the reads in flight end: their buffers are
            // leaked with `in_flight`, and the ring is not used again.
            return (Err(e), false);
        }
        done.clear();
        done.extend(
            ring.completion()
                .map(|c| (c.user_data() as usize, c.result())),
        );
        for &(i, result) in &done {
            let Some(mut buf) = in_flight.0.remove(&i) else {
                continue;
            };
            let (offset, len) = extents[i];
            in_flight_bytes -= len;
            // A read may stop short only at the end of the file (zeros after it).
            let got = result.max(0) as usize;
            if result < 0 {
                failed.get_or_insert(std::io::Error::from_raw_os_error(-result));
            } else if got < len && offset + (got as u64) < file.len {
                failed.get_or_insert(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("{}: short read at {offset}", file.path.display()),
                ));
            } else {
                buf.bytes_mut()[got..].fill(0);
                stats.record(len, 0);
                if failed.is_none() {
                    each(i, buf.bytes());
                }
            }
            pool.give(buf);
        }
    }
    match failed {
        Some(e) => (Err(e), true),
        None => (Ok(()), true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both readers hand over every extent's bytes, reuse their buffers without leaking one
    /// read's bytes into the next, and zero what lies past the end of the file.
    #[test]
    fn extents_arrive_whole_and_the_slack_past_the_end_is_zero() {
        let path = std::env::temp_dir().join(format!("sagessd-extents-{}", std::process::id()));
        let len = 5 * ALIGN_BYTES + 100;
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
        std::fs::write(&path, &data).unwrap();
        let file = DataFile::open(&path, true).unwrap();
        let a = ALIGN_BYTES;
        // A large read first, so the last (short) one may reuse its buffer.
        let extents = [
            (0, 4 * a),
            (a as u64, a),
            (5 * a as u64, a),
            (2 * a as u64, 2 * a),
        ];
        for uring in [false, true] {
            let mut reader = ExtentReader::new(uring).unwrap();
            let mut stats = IoStats::default();
            for _ in 0..2 {
                let mut seen = vec![false; extents.len()];
                reader
                    .read(&file, &extents, &mut stats, |i, bytes| {
                        let (offset, n) = extents[i];
                        let start = offset as usize;
                        let inside = n.min(len - start);
                        assert_eq!(bytes.len(), n, "extent {i}");
                        assert_eq!(&bytes[..inside], &data[start..start + inside]);
                        assert!(bytes[inside..].iter().all(|&b| b == 0), "slack of {i}");
                        seen[i] = true;
                    })
                    .unwrap();
                assert!(seen.iter().all(|&s| s), "uring {uring}: {seen:?}");
            }
            assert_eq!(stats.reads, 2 * extents.len() as u64);
            assert_eq!(stats.bytes_read, 2 * 8 * a as u64);
        }
        let _ = std::fs::remove_file(&path);
    }

    /// A panic in the caller's closure with reads in flight loses the ring (its buffers are
    /// leaked, not freed), and the reader goes on reading correctly without it.
    #[test]
    fn a_panic_in_the_closure_leaves_a_working_reader() {
        let path = std::env::temp_dir().join(format!("sagessd-panic-{}", std::process::id()));
        let data: Vec<u8> = (0..64 * ALIGN_BYTES).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = DataFile::open(&path, true).unwrap();
        let extents: Vec<(u64, usize)> = (0..64)
            .map(|i| ((i * ALIGN_BYTES) as u64, ALIGN_BYTES))
            .collect();
        let mut reader = ExtentReader::new(true).unwrap();
        let mut stats = IoStats::default();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            reader.read(&file, &extents, &mut stats, |_, _| {
                panic!("the caller's bug")
            })
        }));
        assert!(panicked.is_err());
        assert!(!reader.uses_uring(), "the ring went with the panic");
        let mut seen = 0;
        reader
            .read(&file, &extents, &mut stats, |i, bytes| {
                assert_eq!(bytes, &data[i * ALIGN_BYTES..(i + 1) * ALIGN_BYTES]);
                seen += 1;
            })
            .unwrap();
        assert_eq!(seen, extents.len());
        let _ = std::fs::remove_file(&path);
    }
}
