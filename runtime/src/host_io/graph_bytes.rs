//! Where the modelled host's copies of the graph's bytes come from: the mmap mode's page cache
//! and the memory mode's resident copy hold the bytes the device returned (a stored graph), or,
//! for a graph the device's flash computes, the host works each load's bytes out from the same
//! content ([`sagessd_emulator::synthetic_image::csr_content`]) and keeps only which pages are
//! cached. At papers100M scale the page cache of r = 1 and the resident copy are each 7.8 GiB;
//! computed, they cost a few bytes a page.
//!
//! Only memory and wall time change: every load returns the same bytes, and every modelled time
//! and count is the same (the page cache's state is the kernel's either way; the memory mode's
//! read of the graph before the run is untimed and uncounted, so it is skipped). A page read
//! into the cache is still checked against the content, its first and last 8 bytes, so a device
//! that returned another page is an error, not a silently right sample.

use std::sync::Arc;

use sagessd_emulator::nand::synthetic::LogicalContent;

use crate::sampler::SamplerError;

/// How the host holds the graph's bytes (see the module documentation).
#[derive(Clone, Debug, Default)]
pub enum GraphBytes {
    /// The bytes the device returned, kept in the page cache and the resident copy.
    #[default]
    Kept,
    /// Worked out from the namespace's content (its bytes by namespace byte address).
    Computed(Arc<dyn LogicalContent>),
}

/// Bytes of a page checked at each end.
const CHECK_BYTES: usize = 8;

impl GraphBytes {
    /// Whether the page cache and the resident copy keep the bytes themselves.
    pub(super) fn kept(&self) -> bool {
        matches!(self, Self::Kept)
    }

    /// `out.len()` bytes from namespace byte `addr`, if computed.
    pub(super) fn fill(&self, addr: u64, out: &mut [u8]) -> bool {
        match self {
            Self::Kept => false,
            Self::Computed(content) => {
                content.fill(addr, out);
                true
            }
        }
    }

    /// Checks `data`, read from namespace byte `addr`, against the content at its two ends
    /// (nothing to check when kept: the bytes are the device's).
    pub(super) fn check(&self, addr: u64, data: &[u8]) -> Result<(), SamplerError> {
        let Self::Computed(content) = self else {
            return Ok(());
        };
        let n = CHECK_BYTES.min(data.len());
        let mut want = [0u8; CHECK_BYTES];
        for at in [0, data.len() - n] {
            content.fill(addr + at as u64, &mut want[..n]);
            if data[at..at + n] != want[..n] {
                return Err(SamplerError::GraphCorrupt(format!(
                    "the device returned bytes at namespace byte {} that are not the graph's",
                    addr + at as u64
                )));
            }
        }
        Ok(())
    }
}
