//! The host side of the controller as firmware sees it: DMA to and from a command's data buffer,
//! and posting completions.
//!
//! The emulator implements this over in-process buffers or NVMe/TCP; a board implements it over
//! its NVMe DMA engine and PRP lists. A command is named by its submission queue and command id.

use sagessd_abi::nvme::CompletionEntry;

/// A command in flight: the submission queue it came from and its command identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommandId {
    /// Submission queue id (0 = admin).
    pub sq_id: u16,
    /// Command identifier.
    pub cid: u16,
}

/// A DMA that could not be performed: the range lies outside the command's data buffer, or the
/// transfer failed. The firmware completes the command with Data Transfer Error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaError;

/// The controller's host interface.
pub trait HostInterface {
    /// Copies `dst.len()` bytes at `offset_bytes` of command `cmd`'s host buffer into `dst`.
    fn dma_from_host(
        &mut self,
        cmd: CommandId,
        offset_bytes: usize,
        dst: &mut [u8],
    ) -> Result<(), DmaError>;

    /// Copies `src` to `offset_bytes` of command `cmd`'s host buffer.
    fn dma_to_host(
        &mut self,
        cmd: CommandId,
        offset_bytes: usize,
        src: &[u8],
    ) -> Result<(), DmaError>;

    /// Posts the completion of `cmd`; the firmware forgets the command afterwards.
    fn complete(&mut self, cmd: CommandId, cqe: CompletionEntry);

    /// The work the firmware has counted since boot, told just before each DMA and completion
    /// (a DMA's own cost included). Hardware ignores it (the default); a timing model dates the
    /// DMA or completion by it, as [`crate::hal::Flash::note_work`] dates flash operations.
    fn note_work(&mut self, work: &crate::work::WorkCounters) {
        let _ = work;
    }
}
