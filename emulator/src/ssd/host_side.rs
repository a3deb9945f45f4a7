//! The host side of the emulated controller as the firmware sees it: each command's host buffer,
//! and a log of what one firmware call did to the host (DMAs, completions), dated afterwards by
//! [`super::timeline`].

use rustc_hash::FxHashMap as FastMap;
use std::collections::VecDeque;

use sagessd_abi::nvme::{CompletionEntry, SubmissionEntry};
use sagessd_firmware::host::{CommandId, DmaError, HostInterface};
use sagessd_firmware::work::WorkCounters;

use crate::pcie::Direction;

/// A command's host-side state: its buffer and when it was submitted.
#[derive(Debug)]
pub(super) struct HostCommand {
    pub(super) data: Vec<u8>,
    pub(super) submitted_at_ns: u64,
}

/// A command on its way to, or waiting at, the firmware.
#[derive(Debug)]
pub(super) struct Incoming {
    pub(super) cmd: CommandId,
    pub(super) sqe: SubmissionEntry,
    pub(super) host: HostCommand,
}

/// Something a firmware call did to the host, to be timed when the call ends, with the work the
/// firmware had counted when it did it (`None`: not told; dated at the end of the call).
#[derive(Debug)]
pub(super) struct Effect {
    pub(super) at: Option<WorkCounters>,
    pub(super) kind: EffectKind,
}

#[derive(Debug)]
pub(super) enum EffectKind {
    Dma {
        direction: Direction,
        bytes: u64,
    },
    Complete {
        cqe: CompletionEntry,
        host: HostCommand,
    },
}

/// The host side of the controller as the firmware sees it: command buffers and a log of what
/// the current call did.
#[derive(Debug, Default)]
pub(super) struct HostSide {
    /// Commands the firmware accepted and has not completed. A queue per id only so that a
    /// firmware accepting a duplicate command id does not lose a buffer.
    pub(super) buffers: FastMap<CommandId, VecDeque<HostCommand>>,
    /// The command being handed to the firmware by the current submit call. It shadows an
    /// outstanding command with the same id, so a firmware that rejects the duplicate at once
    /// completes the right one.
    pub(super) incoming: Option<(CommandId, HostCommand)>,
    pub(super) effects: Vec<Effect>,
    /// The work last told by [`HostInterface::note_work`] in the current call: every effect
    /// posted after it (several DMAs of one result, say) is dated by it, until the next note.
    pub(super) noted: Option<WorkCounters>,
    pub(super) spurious_completions: u64,
}

impl HostSide {
    pub(super) fn buffer(&mut self, cmd: CommandId) -> Option<&mut HostCommand> {
        match &mut self.incoming {
            Some((id, host)) if *id == cmd => Some(host),
            _ => self.buffers.get_mut(&cmd).and_then(|q| q.front_mut()),
        }
    }

    pub(super) fn push(&mut self, kind: EffectKind) {
        let at = self.noted;
        self.effects.push(Effect { at, kind });
    }

    pub(super) fn take(&mut self, cmd: CommandId) -> Option<HostCommand> {
        if self.incoming.as_ref().is_some_and(|(id, _)| *id == cmd) {
            return self.incoming.take().map(|(_, host)| host);
        }
        let queue = self.buffers.get_mut(&cmd)?;
        let host = queue.pop_front();
        if queue.is_empty() {
            self.buffers.remove(&cmd);
        }
        host
    }
}

impl HostInterface for HostSide {
    fn dma_from_host(
        &mut self,
        cmd: CommandId,
        offset_bytes: usize,
        dst: &mut [u8],
    ) -> Result<(), DmaError> {
        let host = self.buffer(cmd).ok_or(DmaError)?;
        let end = offset_bytes.checked_add(dst.len()).ok_or(DmaError)?;
        dst.copy_from_slice(host.data.get(offset_bytes..end).ok_or(DmaError)?);
        self.push(EffectKind::Dma {
            direction: Direction::HostToDevice,
            bytes: dst.len() as u64,
        });
        Ok(())
    }

    fn dma_to_host(
        &mut self,
        cmd: CommandId,
        offset_bytes: usize,
        src: &[u8],
    ) -> Result<(), DmaError> {
        let host = self.buffer(cmd).ok_or(DmaError)?;
        let end = offset_bytes.checked_add(src.len()).ok_or(DmaError)?;
        host.data
            .get_mut(offset_bytes..end)
            .ok_or(DmaError)?
            .copy_from_slice(src);
        self.push(EffectKind::Dma {
            direction: Direction::DeviceToHost,
            bytes: src.len() as u64,
        });
        Ok(())
    }

    fn note_work(&mut self, work: &WorkCounters) {
        self.noted = Some(*work);
    }

    fn complete(&mut self, cmd: CommandId, cqe: CompletionEntry) {
        match self.take(cmd) {
            Some(host) => self.push(EffectKind::Complete { cqe, host }),
            None => {
                self.spurious_completions += 1;
                tracing::warn!(?cmd, "firmware completed a command the host does not have");
            }
        }
    }
}
