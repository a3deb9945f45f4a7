//! The in-storage sampling exchange, command by command: one `NS_SUBMIT` carrying the whole
//! minibatch (or a hyperbatch of several), then one `NS_COLLECT` per minibatch (retried once with
//! the size the device asks for if the first buffer was too small). [`crate::Device`]'s blocking
//! sampling (`exchange`: [`crate::Device::sample`] and the rest) and asynchronous callers that
//! interleave several exchanges in modelled time both build their commands and read their
//! completions here, so the protocol is written once.

use sagessd_abi::ns_config::{
    MAX_LAYERS, MinibatchRequest, encode_hyperbatch, encode_ns_config, hyperbatch_size_bytes,
    ns_config_size_bytes,
};
use sagessd_abi::nvme::{SubmissionEntry, VendorStatus, io_opcode};
use sagessd_abi::sampled_ids::SampledIdsView;
use sagessd_abi::subgraph::{LayerEntry, SubgraphHeader};
use sagessd_abi::subgraph::{SubgraphError, SubgraphView};

use crate::error::DriverError;
use crate::nvme::{IO_QUEUE, NAMESPACE_ID, check};
use crate::transport::Completion;

mod exchange;

/// An upper bound on the size in bytes of the subgraph sampled for `target_count` targets with
/// `fanouts` (hop order) on a graph of `node_count` nodes (unknown: `None`), following the
/// format of [`sagessd_abi::subgraph`]: every destination samples at most its fanout, and no
/// prefix grows beyond the node count. Saturates instead of overflowing.
pub fn subgraph_size_bound(fanouts: &[u16], target_count: u64, node_count: Option<u64>) -> u64 {
    let cap = |n: u64| node_count.map_or(n, |c| n.min(c));
    let mut size = (size_of::<SubgraphHeader>() + fanouts.len() * size_of::<LayerEntry>()) as u64;
    let mut dst = cap(target_count);
    for f in fanouts {
        let edges = dst.saturating_mul(u64::from(*f));
        size = size.saturating_add(
            dst.saturating_add(1)
                .saturating_add(edges)
                .saturating_mul(4),
        );
        dst = cap(dst.saturating_add(edges));
    }
    size.saturating_add(dst.saturating_mul(8))
}

/// What a sampling job returns, set by its NS_config's flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Returns {
    /// The subgraph ([`sagessd_abi::subgraph`]).
    #[default]
    Subgraph,
    /// The subgraph with its nodes' features ([`sagessd_abi::ns_config::NS_FLAG_FEATURES`]).
    WithFeatures,
    /// Each layer's sampled ids, for the host to build the subgraph from
    /// ([`sagessd_abi::ns_config::NS_FLAG_SAMPLED_IDS`], [`sagessd_abi::sampled_ids`]).
    SampledIds,
}

impl Returns {
    /// The subgraph, with its nodes' features or without.
    pub fn subgraph(features: bool) -> Self {
        if features {
            Self::WithFeatures
        } else {
            Self::Subgraph
        }
    }

    /// Sets the flags that ask for it in an encoded NS_config.
    pub fn request(self, config: &mut [u8]) {
        match self {
            Self::Subgraph => {}
            Self::WithFeatures => sagessd_abi::ns_config::request_features(config),
            Self::SampledIds => sagessd_abi::ns_config::request_sampled_ids(config),
        }
    }
}

/// The `NS_SUBMIT` of one minibatch and its NS_config payload. Refuses what cannot be encoded
/// (0 or more than [`MAX_LAYERS`] fanouts, more than `u32::MAX` targets); the device judges the
/// rest.
pub fn ns_submit(
    seed: u64,
    fanouts: &[u16],
    targets: &[u64],
) -> Result<(SubmissionEntry, Vec<u8>), DriverError> {
    check_fanouts(fanouts)?;
    let mut config = vec![0u8; ns_config_size_bytes(targets.len())];
    let len = encode_ns_config(seed, fanouts, targets, &mut config);
    submission(config, len, "too many targets")
}

/// The `NS_SUBMIT` of a hyperbatch of `requests` (minibatches with the same fanouts) and its
/// NS_config payload. Refuses what cannot be encoded (as [`ns_submit`], and no minibatch or
/// more than the format's 256); the device judges the rest.
pub fn ns_submit_hyperbatch<M: MinibatchRequest>(
    fanouts: &[u16],
    requests: &[M],
) -> Result<(SubmissionEntry, Vec<u8>), DriverError> {
    check_fanouts(fanouts)?;
    let targets = requests.iter().map(|r| r.targets().len()).sum();
    let mut config = vec![0u8; hyperbatch_size_bytes(requests.len(), targets)];
    let len = encode_hyperbatch(fanouts, requests, &mut config);
    submission(
        config,
        len,
        "no minibatch, more than 256, or too many targets",
    )
}

fn check_fanouts(fanouts: &[u16]) -> Result<(), DriverError> {
    if fanouts.is_empty() || fanouts.len() > MAX_LAYERS {
        return Err(DriverError::InvalidArgument(format!(
            "{} fanouts (1..={MAX_LAYERS} allowed)",
            fanouts.len()
        )));
    }
    Ok(())
}

/// The `NS_SUBMIT` of an encoded NS_config of `len` bytes (`None`: not encodable, `why`).
fn submission(
    config: Vec<u8>,
    len: Option<usize>,
    why: &str,
) -> Result<(SubmissionEntry, Vec<u8>), DriverError> {
    let len = len
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| DriverError::InvalidArgument(why.into()))?;
    Ok((
        SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 0, NAMESPACE_ID, len, 0),
        config,
    ))
}

/// The tag that names minibatch `m` of the job `tag` names (a hyperbatch's minibatches are
/// collected one by one).
pub fn minibatch_tag(tag: u32, m: usize) -> u32 {
    (tag & 0x00FF_FFFF) | ((m as u32 & 0xFF) << 24)
}

/// The tag an `NS_SUBMIT` completion returned, or its error.
pub fn submitted_tag(c: Completion) -> Result<u32, DriverError> {
    Ok(check(IO_QUEUE, io_opcode::NS_SUBMIT, c)?.cqe.result.get())
}

/// Size of the first `NS_COLLECT` buffer: the format's bound for the request (see
/// [`subgraph_size_bound`]), at most `cap_bytes`, a multiple of 4.
pub fn first_collect_len(
    fanouts: &[u16],
    target_count: u64,
    node_count: Option<u64>,
    cap_bytes: usize,
) -> usize {
    subgraph_size_bound(fanouts, target_count, node_count)
        .min(cap_bytes as u64)
        .min(u64::from(u32::MAX) & !3)
        .next_multiple_of(4) as usize
}

/// The unit a device→host vendor buffer is allocated in: a controller whose DMA engine moves
/// whole 4 KiB units of a command (the Cosmos+ OpenSSD's auto DMA, docs/openssd.md §4) writes
/// the last unit whole, so the buffer, CDW10 and CDW12 all cover whole units.
pub const COLLECT_UNIT_BYTES: usize = 4096;

/// The `NS_COLLECT` of job `tag` into a buffer of at least `len` bytes (rounded up to whole
/// [`COLLECT_UNIT_BYTES`] units, largest `u32::MAX` rounded down to one), and that buffer.
pub fn ns_collect(tag: u32, len: usize) -> (SubmissionEntry, Vec<u8>) {
    let most = u32::MAX as usize / COLLECT_UNIT_BYTES * COLLECT_UNIT_BYTES;
    let len = len.max(1).next_multiple_of(COLLECT_UNIT_BYTES).min(most);
    (
        SubmissionEntry::vendor(io_opcode::NS_COLLECT, 0, NAMESPACE_ID, len as u32, tag),
        vec![0u8; len],
    )
}

/// A windowed `NS_COLLECT` of job `tag`: `len` bytes of its subgraph from byte `offset` (a
/// multiple of 4), for subgraphs larger than one transfer; result dword 0 is the whole size.
pub fn ns_collect_window(tag: u32, offset: usize, len: usize) -> (SubmissionEntry, Vec<u8>) {
    let (mut sqe, buffer) = ns_collect(tag, len);
    sqe.cdw14 = (offset as u32).into();
    sqe.cdw15 = 1.into();
    (sqe, buffer)
}

/// What an `NS_COLLECT` completion means.
#[derive(Debug)]
pub enum Collected {
    /// The subgraph, validated and cut to its size.
    Subgraph(Vec<u8>),
    /// The buffer was too small: collect again into a buffer of this many bytes.
    Retry(usize),
}

/// Reads the completion of an `NS_COLLECT` of `len` bytes for a request with `seed` and
/// `layer_count` layers that returns `returns`. A too-small buffer is worth one retry (`retried` says whether it was
/// spent); any other error status is a [`DriverError::Command`], and a subgraph that is not the
/// request's is [`DriverError::BadSubgraph`].
pub fn collected(
    c: Completion,
    len: usize,
    retried: bool,
    seed: u64,
    layer_count: usize,
    returns: Returns,
) -> Result<Collected, DriverError> {
    let status = c.cqe.status();
    let size = c.cqe.result.get() as usize;
    if !retried
        && size > len
        && VendorStatus::from_status(status) == Some(VendorStatus::BufferTooSmall)
    {
        tracing::debug!(
            first = len,
            needed = size,
            "NS_COLLECT buffer too small, retrying"
        );
        return Ok(Collected::Retry(size.next_multiple_of(4)));
    }
    let mut data = check(IO_QUEUE, io_opcode::NS_COLLECT, c)?.data;
    if size > data.len() {
        return Err(DriverError::BadSubgraph(SubgraphError::Truncated));
    }
    data.truncate(size);
    validate(data, seed, layer_count, returns).map(Collected::Subgraph)
}

/// Checks that `data` is a well-formed result of the request with `seed` and `layer_count`
/// layers that returns `returns` (a subgraph, or its sampled ids), and hands it back.
pub fn validate(
    data: Vec<u8>,
    seed: u64,
    layer_count: usize,
    returns: Returns,
) -> Result<Vec<u8>, DriverError> {
    let (got_seed, got_layers) = match returns {
        Returns::SampledIds => {
            let view = SampledIdsView::parse(&data).map_err(DriverError::BadSubgraph)?;
            (view.seed(), view.layer_count())
        }
        Returns::Subgraph | Returns::WithFeatures => {
            let view = SubgraphView::parse(&data).map_err(DriverError::BadSubgraph)?;
            (view.seed(), view.layer_count())
        }
    };
    if got_seed != seed || got_layers != layer_count {
        return Err(DriverError::BadSubgraph(SubgraphError::Inconsistent(
            "seed/layers",
        )));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_bound_follows_the_format() {
        // One layer, 2 targets, fanout 3, unknown node count: 32 + 16 + 4·(2 + 1 + 6) + 8·8.
        assert_eq!(subgraph_size_bound(&[3], 2, None), 32 + 16 + 36 + 64);
        // Capped by the node count.
        assert_eq!(subgraph_size_bound(&[3], 2, Some(4)), 32 + 16 + 36 + 32);
        assert_eq!(
            subgraph_size_bound(&[u16::MAX; 4], u64::MAX, None),
            u64::MAX
        );
    }

    #[test]
    fn collect_buffers_are_whole_4k_units_and_cdw10_cdw12_agree() {
        for want in [1usize, 64, 4095, 4096, 4097, 9580, 1 << 20, (1 << 20) + 4] {
            for (sqe, buffer) in [ns_collect(7, want), ns_collect_window(7, 8192, want)] {
                let units = sqe.cdw12.get() as usize + 1;
                assert!(buffer.len() >= want, "{want}: buffer {}", buffer.len());
                assert_eq!(buffer.len() % COLLECT_UNIT_BYTES, 0, "{want}");
                assert_eq!(sqe.cdw10.get() as usize * 4, buffer.len(), "{want}");
                assert_eq!(units * COLLECT_UNIT_BYTES, buffer.len(), "{want}");
                assert_eq!(sqe.cdw13.get(), 7);
            }
        }
    }
}
