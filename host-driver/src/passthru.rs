//! [`PassthruTransport`]: Linux NVMe passthrough to `/dev/nvmeXnY` (block device) or
//! `/dev/ngXnY` (generic character device). The kernel's NVMe driver (PCIe or fabrics) carries
//! each command unchanged, vendor opcodes included, and hands back the completion's status and
//! result.
//!
//! Two paths:
//! * `NVME_IOCTL_ADMIN64_CMD` / `NVME_IOCTL_IO64_CMD`: each ioctl blocks until its command
//!   completes, one command at a time. Admin commands always go this way, as do I/O commands
//!   on a block device.
//! * io_uring `IORING_OP_URING_CMD` with `NVME_URING_CMD_IO`, on a generic character device: I/O
//!   commands are queued on a ring (128-byte SQEs, 32-byte CQEs), so many are in flight at once
//!   and complete in any order. Linux serves it on `/dev/ngXnY` only (6.1 and later).

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use sagessd_abi::nvme::{CompletionEntry, DataDirection, Status, SubmissionEntry};
use zerocopy::{Immutable, IntoBytes};

use crate::transport::{Completion, Transport, TransportError};

/// `struct nvme_passthru_cmd64` of `<linux/nvme_ioctl.h>`; its first 72 bytes are
/// `struct nvme_uring_cmd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, IntoBytes, Immutable)]
struct PassthruCmd64 {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    rsvd2: u32,
    result: u64,
}

const _: () = {
    assert!(std::mem::size_of::<PassthruCmd64>() == 80);
    assert!(std::mem::offset_of!(PassthruCmd64, timeout_ms) == 64);
    assert!(std::mem::offset_of!(PassthruCmd64, result) == URING_CMD_BYTES);
};

/// Bytes of `struct nvme_uring_cmd`.
const URING_CMD_BYTES: usize = 72;

/// `_IOWR('N', nr, size)`.
const fn iowr(nr: u32, size: usize) -> u32 {
    (3 << 30) | ((size as u32) << 16) | ((b'N' as u32) << 8) | nr
}

/// `NVME_IOCTL_ADMIN64_CMD`.
const NVME_IOCTL_ADMIN64_CMD: u32 = iowr(0x47, 80);
/// `NVME_IOCTL_IO64_CMD`.
const NVME_IOCTL_IO64_CMD: u32 = iowr(0x48, 80);
/// `NVME_URING_CMD_IO`.
const NVME_URING_CMD_IO: u32 = iowr(0x80, URING_CMD_BYTES);
/// Command timeout handed to the kernel (0 would mean its default, 30 s for I/O).
const TIMEOUT_MS: u32 = 60_000;
/// Entries of the io_uring submission queue: the most I/O commands in flight at once.
const RING_ENTRIES: u32 = 64;

/// A command on the ring: where its completion goes, and its buffer, which must stay put until
/// the kernel is done with it.
struct OnRing {
    sq_id: u16,
    cid: u16,
    data: Vec<u8>,
}

/// A namespace device node opened for passthrough.
pub struct PassthruTransport {
    file: File,
    path: PathBuf,
    ring: Option<IoUring<squeue::Entry128, cqueue::Entry32>>,
    on_ring: HashMap<u64, OnRing>,
    next_user_data: u64,
    done: VecDeque<Completion>,
}

impl std::fmt::Debug for PassthruTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassthruTransport")
            .field("path", &self.path)
            .field("io_uring", &self.ring.is_some())
            .field("on_ring", &self.on_ring.len())
            .finish_non_exhaustive()
    }
}

fn device_error(msg: String) -> TransportError {
    TransportError::Device(msg.into())
}

impl PassthruTransport {
    /// Opens `path` read-write. On a generic character device (`/dev/ngXnY`) I/O commands go
    /// through io_uring unless `uring` is false (or the ring cannot be set up); otherwise, and
    /// for admin commands, through blocking ioctls.
    pub fn open(path: &Path, uring: bool) -> Result<Self, TransportError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| device_error(format!("cannot open {}: {e}", path.display())))?;
        let char_device = file
            .metadata()
            .map(|m| m.file_type().is_char_device())
            .unwrap_or(false);
        let ring = if uring && char_device {
            match IoUring::<squeue::Entry128, cqueue::Entry32>::builder().build(RING_ENTRIES) {
                Ok(r) => {
                    tracing::info!(
                        "{}: I/O commands through io_uring (URING_CMD), up to {RING_ENTRIES} in flight",
                        path.display()
                    );
                    Some(r)
                }
                Err(e) => {
                    tracing::info!("io_uring unavailable ({e}); using blocking ioctls");
                    None
                }
            }
        } else {
            None
        };
        Ok(Self {
            file,
            path: path.to_owned(),
            ring,
            on_ring: HashMap::new(),
            next_user_data: 0,
            done: VecDeque::new(),
        })
    }

    /// Whether I/O commands go through io_uring.
    pub fn uses_io_uring(&self) -> bool {
        self.ring.is_some()
    }

    /// Queues an I/O command on the ring.
    fn submit_on_ring(
        &mut self,
        sq_id: u16,
        cid: u16,
        cmd: &PassthruCmd64,
        data: Vec<u8>,
    ) -> Result<(), TransportError> {
        let Some(ring) = self.ring.as_mut() else {
            return Err(device_error("no ring".into()));
        };
        let mut bytes = [0u8; 80];
        bytes[..URING_CMD_BYTES].copy_from_slice(&cmd.as_bytes()[..URING_CMD_BYTES]);
        let user_data = self.next_user_data;
        self.next_user_data += 1;
        let entry = opcode::UringCmd80::new(types::Fd(self.file.as_raw_fd()), NVME_URING_CMD_IO)
            .cmd(bytes)
            .build()
            .user_data(user_data);
        if ring.submission().is_full() {
            ring.submit()
                .map_err(|e| device_error(format!("io_uring submit: {e}")))?;
            if ring.submission().is_full() {
                return Err(device_error(format!(
                    "{} commands already in flight on {}",
                    self.on_ring.len(),
                    self.path.display()
                )));
            }
        }
        // SAFETY: the entry's NVMe command points at `data`'s heap buffer, which lives in
        // `on_ring` (moving the Vec does not move its buffer) until the completion is reaped.
        unsafe { ring.submission().push(&entry) }
            .map_err(|_| device_error("io_uring submission queue full".into()))?;
        self.on_ring.insert(user_data, OnRing { sq_id, cid, data });
        ring.submit()
            .map_err(|e| device_error(format!("io_uring submit: {e}")))?;
        Ok(())
    }

    /// Waits for at least one ring completion and moves every available one to `done`. A
    /// command the kernel refused (negative result) fails the call, after the others are moved.
    fn reap_ring(&mut self) -> Result<(), TransportError> {
        let Some(ring) = self.ring.as_mut() else {
            return Ok(());
        };
        ring.submit_and_wait(1)
            .map_err(|e| device_error(format!("io_uring wait: {e}")))?;
        let mut refused = None;
        for cqe in ring.completion() {
            let Some(c) = self.on_ring.remove(&cqe.user_data()) else {
                continue;
            };
            let rc = cqe.result();
            if rc < 0 {
                let e = std::io::Error::from_raw_os_error(-rc);
                refused.get_or_insert(device_error(format!(
                    "io_uring passthrough on {} failed: {e}",
                    self.path.display()
                )));
                continue;
            }
            self.done
                .push_back(completion(c.sq_id, c.cid, rc, cqe.big_cqe()[0], c.data));
        }
        refused.map_or(Ok(()), Err)
    }
}

impl Drop for PassthruTransport {
    /// Waits for the commands still on the ring: the kernel may write into their buffers until
    /// they complete. If waiting fails, the buffers are leaked rather than freed under it.
    fn drop(&mut self) {
        while !self.on_ring.is_empty() {
            let Some(ring) = self.ring.as_mut() else {
                break;
            };
            if ring.submit_and_wait(1).is_err() {
                for (_, c) in self.on_ring.drain() {
                    std::mem::forget(c.data);
                }
                break;
            }
            for cqe in ring.completion() {
                self.on_ring.remove(&cqe.user_data());
            }
        }
    }
}

/// A completion from a kernel status (≥ 0) and 64-bit result.
fn completion(sq_id: u16, cid: u16, status: i32, result: u64, data: Vec<u8>) -> Completion {
    let mut cqe =
        CompletionEntry::new(sq_id, cid, Status::from_field(status as u16), result as u32);
    cqe.result_hi = ((result >> 32) as u32).into();
    Completion {
        cqe,
        data,
        submitted_at_ns: None,
        completed_at_ns: None,
    }
}

impl Transport for PassthruTransport {
    fn submit(
        &mut self,
        sq_id: u16,
        sqe: SubmissionEntry,
        mut data: Vec<u8>,
    ) -> Result<(), TransportError> {
        if DataDirection::of(sqe.opcode) == DataDirection::Bidirectional {
            return Err(device_error(
                "Linux passthrough moves data one way only".into(),
            ));
        }
        let mut cmd = PassthruCmd64 {
            opcode: sqe.opcode,
            flags: sqe.flags,
            nsid: sqe.nsid.get(),
            cdw2: sqe.cdw2.get(),
            cdw3: sqe.cdw3.get(),
            addr: if data.is_empty() {
                0
            } else {
                data.as_mut_ptr() as u64
            },
            data_len: data.len() as u32,
            cdw10: sqe.cdw10.get(),
            cdw11: sqe.cdw11.get(),
            cdw12: sqe.cdw12.get(),
            cdw13: sqe.cdw13.get(),
            cdw14: sqe.cdw14.get(),
            cdw15: sqe.cdw15.get(),
            timeout_ms: TIMEOUT_MS,
            ..PassthruCmd64::default()
        };
        if sq_id != 0 && self.ring.is_some() {
            return self.submit_on_ring(sq_id, sqe.cid.get(), &cmd, data);
        }
        let request = if sq_id == 0 {
            NVME_IOCTL_ADMIN64_CMD
        } else {
            NVME_IOCTL_IO64_CMD
        };
        // SAFETY: `cmd` is a valid `nvme_passthru_cmd64` for the duration of the call, and
        // `addr`/`data_len` describe `data`, which outlives the (blocking) ioctl.
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), request as _, &mut cmd) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            return Err(device_error(format!(
                "passthrough ioctl on {} failed: {e}",
                self.path.display()
            )));
        }
        self.done
            .push_back(completion(sq_id, sqe.cid.get(), rc, cmd.result, data));
        Ok(())
    }

    fn reap(&mut self) -> Result<Option<Completion>, TransportError> {
        if self.done.is_empty() && !self.on_ring.is_empty() {
            self.reap_ring()?;
        }
        Ok(self.done.pop_front())
    }
}
