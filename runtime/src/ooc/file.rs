//! Reading a file the way the out-of-core samplers do: `O_DIRECT` (no page cache) when the file
//! system allows it, into an aligned buffer, counting every read.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::IoStats;

/// Alignment of `O_DIRECT` offsets, lengths and buffers.
pub const ALIGN_BYTES: usize = 4096;

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

    fn bytes_mut(&mut self) -> &mut [u8] {
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

    /// Reads `buf.len()` bytes at `offset` (aligned when direct), zero past the end of file.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.file.read_at(&mut buf[done..], offset + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        if done < buf.len() && offset + (done as u64) < self.len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{}: short read at {offset}", self.path.display()),
            ));
        }
        Ok(())
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
