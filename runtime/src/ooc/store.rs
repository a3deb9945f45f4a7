//! Where the out-of-core readers get their bytes: a file on this machine (read with `O_DIRECT`
//! where the file system allows), or a region of an NVMe device read with NVMe Reads through
//! any transport. The AGNES graph buffer reads its blocks from one, the feature gatherers their
//! rows.

use sagessd_host_driver::{Device, Transport};

use super::IoStats;
use super::file::{AlignedBuf, DataFile};
use crate::sampler::SamplerError;

/// A device the readers reach with NVMe Reads (any transport). `Send`, so that samplers and
/// gatherers over a device can run as pipeline workers.
pub trait BlockDevice: Send {
    /// Reads `block_count` LBAs from `slba`.
    fn read_lbas(&mut self, slba: u64, block_count: u64) -> Result<Vec<u8>, SamplerError>;
    /// Bytes per LBA.
    fn lba_bytes(&self) -> u64;
}

impl<T: Transport + Send> BlockDevice for Device<T> {
    fn read_lbas(&mut self, slba: u64, block_count: u64) -> Result<Vec<u8>, SamplerError> {
        Ok(self.read(slba, block_count)?)
    }

    fn lba_bytes(&self) -> u64 {
        u64::from(self.info().block_size_bytes)
    }
}

/// A device several readers share in turn (block samplers and feature gatherers, on one thread
/// or several): each read holds it for that read only.
pub struct SharedDevice<'a, D> {
    device: &'a std::sync::Mutex<D>,
    lba_bytes: u64,
}

impl<D> std::fmt::Debug for SharedDevice<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedDevice")
    }
}

impl<'a, D: BlockDevice> SharedDevice<'a, D> {
    /// A reader of `device` (its block size read now, once).
    pub fn new(device: &'a std::sync::Mutex<D>) -> Result<Self, SamplerError> {
        let mut shared = Self {
            device,
            lba_bytes: 0,
        };
        let lba_bytes = shared.lock()?.lba_bytes();
        shared.lba_bytes = lba_bytes;
        Ok(shared)
    }

    /// The device, held; an error if a reader panicked while holding it.
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, D>, SamplerError> {
        self.device.lock().map_err(|_| {
            SamplerError::GraphCorrupt("a reader of the shared device panicked".into())
        })
    }
}

impl<D: BlockDevice> BlockDevice for SharedDevice<'_, D> {
    fn read_lbas(&mut self, slba: u64, block_count: u64) -> Result<Vec<u8>, SamplerError> {
        self.lock()?.read_lbas(slba, block_count)
    }

    fn lba_bytes(&self) -> u64 {
        self.lba_bytes
    }
}

/// Byte `0` of a store is byte `offset` of a file, or byte 0 of LBA `slba` of a device.
pub(crate) enum Store<'d> {
    /// A file on this machine.
    File { file: DataFile, offset: u64 },
    /// A device region.
    Device {
        device: &'d mut dyn BlockDevice,
        slba: u64,
    },
}

impl std::fmt::Debug for Store<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File { file, offset } => f
                .debug_struct("File")
                .field("file", file)
                .field("offset", offset)
                .finish(),
            Self::Device { slba, .. } => f.debug_struct("Device").field("slba", slba).finish(),
        }
    }
}

/// Bytes one read brought: the requested range within the (aligned) buffer it filled.
#[derive(Debug)]
pub(crate) struct Span {
    buf: SpanBuf,
    at: usize,
    len: usize,
}

/// The buffer behind a [`Span`].
#[derive(Debug)]
enum SpanBuf {
    /// Filled by a file read (`O_DIRECT` needs alignment).
    Aligned(AlignedBuf),
    /// Returned by a device.
    Plain(Vec<u8>),
}

impl Span {
    /// A whole aligned buffer (a block read ahead through io_uring).
    pub(crate) fn aligned(buf: AlignedBuf) -> Self {
        let len = buf.bytes().len();
        Self {
            buf: SpanBuf::Aligned(buf),
            at: 0,
            len,
        }
    }

    /// The bytes that were asked for.
    pub(crate) fn bytes(&self) -> &[u8] {
        let all = match &self.buf {
            SpanBuf::Aligned(b) => b.bytes(),
            SpanBuf::Plain(v) => v.as_slice(),
        };
        &all[self.at..self.at + self.len]
    }
}

impl Store<'_> {
    /// Reads bytes `start..start + len` of the store in one I/O (the aligned file extent, or
    /// the LBAs, that cover them), counted in `io`.
    pub(crate) fn read(
        &mut self,
        start: u64,
        len: usize,
        io: &mut IoStats,
    ) -> Result<Span, SamplerError> {
        match self {
            Self::File { file, offset } => {
                let (buf, at) = file
                    .read_covering(*offset + start, len, io)
                    .map_err(|e| SamplerError::GraphCorrupt(e.to_string()))?;
                Ok(Span {
                    buf: SpanBuf::Aligned(buf),
                    at,
                    len,
                })
            }
            Self::Device { device, slba } => {
                let lba = device.lba_bytes().max(1);
                let (first, end) = (start / lba, (start + len as u64).div_ceil(lba));
                let bytes = io.timed(|| device.read_lbas(*slba + first, end - first))?;
                io.record(bytes.len(), 0);
                let at = (start - first * lba) as usize;
                if bytes.len() < at + len {
                    return Err(SamplerError::GraphCorrupt(format!(
                        "the device returned {} bytes for LBAs {}..{}",
                        bytes.len(),
                        *slba + first,
                        *slba + end
                    )));
                }
                Ok(Span {
                    buf: SpanBuf::Plain(bytes),
                    at,
                    len,
                })
            }
        }
    }
}
