//! Reading a file the way the out-of-core samplers do: `O_DIRECT` (no page cache) when the file
//! system allows it, into an aligned buffer, counting every read.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::IoStats;

/// Alignment of `O_DIRECT` offsets, lengths and buffers.
pub const ALIGN_BYTES: usize = 4096;
/// Reads in flight at once on an io_uring.
pub const RING_DEPTH: u32 = 64;

/// `submit_and_wait(1)`, retried when a signal interrupts it.
pub(crate) fn submit_and_wait(ring: &mut io_uring::IoUring) -> std::io::Result<()> {
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => return Ok(()),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::Interrupted) => {}
            Err(e)
                if e.raw_os_error() == Some(libc::EBUSY)
                    || e.raw_os_error() == Some(libc::EAGAIN) => {}
            Err(e) => return Err(e),
        }
    }
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

    /// Reads the aligned extent covering bytes `[offset, offset + len)` (one I/O, counted with
    /// nothing used yet) and returns the buffer and where the wanted bytes start in it.
    pub fn read_covering(
        &self,
        offset: u64,
        len: usize,
        stats: &mut IoStats,
    ) -> std::io::Result<(AlignedBuf, usize)> {
        let a = ALIGN_BYTES as u64;
        let start = offset / a * a;
        let end = (offset + len as u64).div_ceil(a) * a;
        let mut buf = AlignedBuf::new((end - start) as usize);
        self.read_exact_at(buf.bytes_mut(), start)?;
        stats.record((end - start) as usize, 0);
        Ok((buf, (offset - start) as usize))
    }

    /// Reads `buf.len()` bytes at `offset` (aligned when direct); what lies past the end of the
    /// file (the alignment slack of a last extent) stays zero. Callers check beforehand that the
    /// bytes they want are inside the file.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let mut done = 0;
        while done < buf.len() && offset + (done as u64) < self.len {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if done < buf.len() && offset + (done as u64) < self.len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{}: short read at {offset}", self.path.display()),
            ));
        }
        Ok(())
    }

    /// Reads aligned `(offset, len)` extents: one after the other, or all through `ring`, up to
    /// [`RING_DEPTH`] in flight. Returns the buffers in order.
    pub fn read_extents(
        &self,
        extents: &[(u64, usize)],
        ring: Option<&mut io_uring::IoUring>,
        stats: &mut IoStats,
    ) -> std::io::Result<Vec<AlignedBuf>> {
        let mut buffers: Vec<AlignedBuf> = extents
            .iter()
            .map(|(_, len)| AlignedBuf::new(*len))
            .collect();
        let Some(ring) = ring else {
            for (buf, (offset, _)) in buffers.iter_mut().zip(extents) {
                self.read_exact_at(buf.bytes_mut(), *offset)?;
                stats.record(buf.len, 0);
            }
            return Ok(buffers);
        };
        use std::os::fd::AsRawFd;
        let fd = io_uring::types::Fd(self.file.as_raw_fd());
        let mut next = 0;
        let mut in_flight = 0usize;
        let mut failed: Option<std::io::Error> = None;
        // Every submitted read is reaped before returning, error or not: the kernel writes
        // into the buffers until then.
        while in_flight > 0 || (next < extents.len() && failed.is_none()) {
            while failed.is_none() && next < extents.len() && in_flight < RING_DEPTH as usize {
                let buf = &mut buffers[next];
                let len = buf.len as u32;
                let entry = io_uring::opcode::Read::new(fd, buf.bytes_mut().as_mut_ptr(), len)
                    .offset(extents[next].0)
                    .build()
                    .user_data(next as u64);
                // SAFETY: the buffer lives in `buffers`, which outlives every read (all are
                // reaped in this loop).
                if unsafe { ring.submission().push(&entry) }.is_err() {
                    break;
                }
                next += 1;
                in_flight += 1;
            }
            if let Err(e) = submit_and_wait(ring) {
                // The ring can no longer say when the reads in flight end: their buffers must
                // never be freed (the caller drops the ring).
                std::mem::forget(buffers);
                return Err(e);
            }
            let done: Vec<(usize, i32)> = ring
                .completion()
                .map(|c| (c.user_data() as usize, c.result()))
                .collect();
            for (i, result) in done {
                in_flight -= 1;
                if result < 0 {
                    failed.get_or_insert(std::io::Error::from_raw_os_error(-result));
                    continue;
                }
                // A read may stop short only at the end of the file (zeros after it).
                if (result as usize) < buffers[i].len && extents[i].0 + (result as u64) < self.len {
                    failed.get_or_insert(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("{}: short read at {}", self.path.display(), extents[i].0),
                    ));
                }
                stats.record(buffers[i].len, 0);
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(buffers)
    }

    /// Reads whole block `index` of `block_bytes` (a multiple of [`ALIGN_BYTES`]): one I/O.
    pub fn read_block(
        &self,
        index: u64,
        block_bytes: usize,
        stats: &mut IoStats,
    ) -> std::io::Result<AlignedBuf> {
        let mut buf = AlignedBuf::new(block_bytes);
        self.read_exact_at(buf.bytes_mut(), index * block_bytes as u64)?;
        stats.record(block_bytes, 0);
        Ok(buf)
    }
}
