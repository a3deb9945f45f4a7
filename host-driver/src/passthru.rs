//! [`PassthruTransport`]: Linux NVMe passthrough through `NVME_IOCTL_ADMIN64_CMD` and
//! `NVME_IOCTL_IO64_CMD` on `/dev/nvmeXnY` (block device) or `/dev/ngXnY` (generic character
//! device): the kernel's NVMe driver (PCIe or fabrics) carries the command unchanged, vendor
//! opcodes included, and hands back the completion's status and result dword.
//!
//! Each ioctl blocks until its command completes, so this transport has one command in flight;
//! completions are handed back in submission order.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use sagessd_abi::nvme::{CompletionEntry, DataDirection, Status, SubmissionEntry};

use crate::transport::{Completion, Transport, TransportError};

/// `struct nvme_passthru_cmd64` of `<linux/nvme_ioctl.h>`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
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

const _: () = assert!(std::mem::size_of::<PassthruCmd64>() == 80);

/// `_IOWR('N', nr, struct nvme_passthru_cmd64)`.
const fn iowr(nr: u32) -> u32 {
    (3 << 30) | ((std::mem::size_of::<PassthruCmd64>() as u32) << 16) | ((b'N' as u32) << 8) | nr
}

/// `NVME_IOCTL_ADMIN64_CMD`.
const NVME_IOCTL_ADMIN64_CMD: u32 = iowr(0x47);
/// `NVME_IOCTL_IO64_CMD`.
const NVME_IOCTL_IO64_CMD: u32 = iowr(0x48);
/// Command timeout handed to the kernel (0 would mean its default, 30 s for I/O).
const TIMEOUT_MS: u32 = 60_000;

/// A namespace device node opened for passthrough.
#[derive(Debug)]
pub struct PassthruTransport {
    file: File,
    path: PathBuf,
    done: VecDeque<Completion>,
}

impl PassthruTransport {
    /// Opens `path` (`/dev/nvme0n1` or `/dev/ng0n1`) read-write.
    pub fn open(path: &Path) -> Result<Self, TransportError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| {
                TransportError::Device(format!("cannot open {}: {e}", path.display()).into())
            })?;
        Ok(Self {
            file,
            path: path.to_owned(),
            done: VecDeque::new(),
        })
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
            return Err(TransportError::Device(
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
            return Err(TransportError::Device(
                format!("passthrough ioctl on {} failed: {e}", self.path.display()).into(),
            ));
        }
        // A positive return is the NVMe status field (without the phase bit).
        let status = Status::from_field(rc as u16);
        let mut cqe = CompletionEntry::new(sq_id, sqe.cid.get(), status, cmd.result as u32);
        cqe.result_hi = ((cmd.result >> 32) as u32).into();
        self.done.push_back(Completion {
            cqe,
            data,
            submitted_at_ns: None,
            completed_at_ns: None,
        });
        Ok(())
    }

    fn reap(&mut self) -> Result<Option<Completion>, TransportError> {
        Ok(self.done.pop_front())
    }
}
