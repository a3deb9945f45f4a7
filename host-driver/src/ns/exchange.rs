//! [`Device`]'s in-storage sampling, blocking: one minibatch, many minibatches with several
//! jobs in flight, a hyperbatch (split to fit the device's limits), with features or sampled
//! ids, over the vendor opcodes or the tunnel window. The commands and completions are
//! [`super`]'s, which asynchronous callers share.

use std::collections::{BTreeMap, VecDeque};

use sagessd_abi::nvme::{SubmissionEntry, VendorStatus, io_opcode};
use sagessd_abi::subgraph::{SubgraphError, SubgraphView};
use sagessd_abi::tunnel::TunnelWindow;

use sagessd_abi::ns_config::MinibatchRequest;

use super::Returns;
use crate::device::Device;
use crate::error::DriverError;
use crate::ns;
use crate::nvme::{IO_QUEUE, NAMESPACE_ID, check};
use crate::transport::Transport;

impl<T: Transport> Device<T> {
    /// [`Self::sample`], with the device also gathering the features of the subgraph's nodes
    /// from the attached graph's feature region: the subgraph comes with its feature section
    /// ([`sagessd_abi::subgraph::SubgraphView::features`]), collected in windows of one
    /// transfer.
    pub fn sample_with_features(
        &mut self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<Vec<u8>, DriverError> {
        self.require_feature_region()?;
        let (submit, mut config) = ns::ns_submit(seed, fanouts, targets)?;
        Returns::WithFeatures.request(&mut config);
        let cid = self.submit(IO_QUEUE, submit, config)?;
        let tag = ns::submitted_tag(self.wait(IO_QUEUE, cid)?)?;
        let window = (self.info.max_transfer_bytes as usize / 4 * 4).max(4);
        self.collect_windows(tag, window, seed, fanouts.len(), Returns::WithFeatures)
    }

    /// Samples many minibatches inside the device with up to `depth` jobs in flight at once:
    /// each an `NS_SUBMIT`, then windowed `NS_COLLECT`s of at most one transfer each. Results
    /// come back in request order. A job the device has no free slot for is submitted again
    /// once another one finishes (and no more than the device holds are kept in flight after
    /// that). Through the tunnel window, requests go one at a time.
    pub fn sample_many<M: MinibatchRequest>(
        &mut self,
        fanouts: &[u16],
        requests: &[M],
        depth: usize,
    ) -> Result<Vec<Vec<u8>>, DriverError> {
        if self.use_tunnel || depth <= 1 {
            return requests
                .iter()
                .map(|r| self.sample(r.seed(), fanouts, r.targets()))
                .collect();
        }
        self.run_jobs_or_abandon(fanouts, requests, depth, Returns::Subgraph)
    }

    /// [`Self::sample_many`] with the device returning each minibatch's sampled ids
    /// ([`sagessd_abi::sampled_ids`]) instead of its subgraph, for the host to build the subgraph
    /// from (the device skips the last layer's deduplication and the relabelling); not through
    /// the tunnel. Each result is validated as sampled ids of its request.
    pub fn sample_many_sampled_ids<M: MinibatchRequest>(
        &mut self,
        fanouts: &[u16],
        requests: &[M],
        depth: usize,
    ) -> Result<Vec<Vec<u8>>, DriverError> {
        if self.use_tunnel {
            return Err(DriverError::InvalidArgument(
                "sampled ids go through vendor commands, not the tunnel".into(),
            ));
        }
        self.run_jobs_or_abandon(fanouts, requests, depth.max(1), Returns::SampledIds)
    }

    /// [`Self::sample_many`] with each job also gathering its nodes' features
    /// ([`Self::sample_with_features`]); not through the tunnel.
    pub fn sample_many_with_features<M: MinibatchRequest>(
        &mut self,
        fanouts: &[u16],
        requests: &[M],
        depth: usize,
    ) -> Result<Vec<Vec<u8>>, DriverError> {
        self.require_feature_region()?;
        if self.use_tunnel {
            return Err(DriverError::InvalidArgument(
                "feature gather goes through vendor commands, not the tunnel".into(),
            ));
        }
        self.run_jobs_or_abandon(fanouts, requests, depth.max(1), Returns::WithFeatures)
    }

    /// Samples `requests` as one in-storage hyperbatch: one `NS_SUBMIT` carrying every
    /// minibatch (the device reads each flash page once per hop for all of them), then each
    /// minibatch's subgraph collected on its own, in windowed `NS_COLLECT`s of at most one
    /// transfer. With `features`, each subgraph comes with its nodes' features (as
    /// [`Self::sample_with_features`]). Results come in request order, each the bytes a single
    /// [`Self::sample`] of it returns. Not through the tunnel window, whose Reads name no
    /// minibatch. More minibatches (or targets) than one NS_config may carry on this device
    /// (its Identify limits) go in several hyperbatches, in order; a hyperbatch whose subgraphs
    /// together do not fit the device's result buffers (`ResultTooLarge`) is sampled again as
    /// two halves (counted in [`crate::DriverStats::hyperbatch_splits`]).
    pub fn sample_hyperbatch<M: MinibatchRequest>(
        &mut self,
        fanouts: &[u16],
        requests: &[M],
        returns: Returns,
    ) -> Result<Vec<Vec<u8>>, DriverError> {
        if self.use_tunnel {
            return Err(DriverError::InvalidArgument(
                "hyperbatches go through vendor commands, not the tunnel".into(),
            ));
        }
        if returns == Returns::WithFeatures {
            self.require_feature_region()?;
        }
        // A device that reports no limits takes plain NS_configs only.
        let (most_minibatches, most_targets) = self
            .info
            .limits
            .map_or((1, u32::MAX), |l| (l.max_minibatches, l.max_targets));
        let mut out = Vec::with_capacity(requests.len());
        let mut rest = requests;
        while !rest.is_empty() {
            // As many minibatches as one NS_config takes (at least one: the device judges a
            // minibatch too large on its own).
            let mut targets = 0u64;
            let take = rest
                .iter()
                .take(usize::from(most_minibatches.max(1)))
                .take_while(|r| {
                    targets += r.targets().len() as u64;
                    targets <= u64::from(most_targets)
                })
                .count()
                .max(1);
            let (group, after) = rest.split_at(take);
            out.extend(self.sample_fitting_hyperbatch(fanouts, group, returns)?);
            rest = after;
        }
        Ok(out)
    }

    /// [`Self::sample_hyperbatch`] of minibatches one NS_config can carry.
    fn sample_fitting_hyperbatch<M: MinibatchRequest>(
        &mut self,
        fanouts: &[u16],
        requests: &[M],
        returns: Returns,
    ) -> Result<Vec<Vec<u8>>, DriverError> {
        match self.sample_hyperbatch_once(fanouts, requests, returns) {
            Err(e)
                if requests.len() > 1
                    && e.vendor_status() == Some(VendorStatus::ResultTooLarge) =>
            {
                tracing::debug!(
                    minibatches = requests.len(),
                    "hyperbatch too large for the device's buffers, sampling it as two halves"
                );
                self.stats.hyperbatch_splits += 1;
                let (first, second) = requests.split_at(requests.len() / 2);
                let mut out = self.sample_fitting_hyperbatch(fanouts, first, returns)?;
                out.extend(self.sample_fitting_hyperbatch(fanouts, second, returns)?);
                Ok(out)
            }
            other => other,
        }
    }

    /// One try of [`Self::sample_hyperbatch`].
    fn sample_hyperbatch_once<M: MinibatchRequest>(
        &mut self,
        fanouts: &[u16],
        requests: &[M],
        returns: Returns,
    ) -> Result<Vec<Vec<u8>>, DriverError> {
        let (submit, mut config) = ns::ns_submit_hyperbatch(fanouts, requests)?;
        returns.request(&mut config);
        let cid = self.submit(IO_QUEUE, submit, config)?;
        let tag = ns::submitted_tag(self.wait(IO_QUEUE, cid)?)?;
        let window = (self.info.max_transfer_bytes as usize / 4 * 4).max(4);
        let mut out = Vec::with_capacity(requests.len());
        for (m, request) in requests.iter().enumerate() {
            let tag_m = ns::minibatch_tag(tag, m);
            match self.collect_windows(tag_m, window, request.seed(), fanouts.len(), returns) {
                Ok(bytes) => out.push(bytes),
                Err(e) => {
                    // The minibatches not collected (this one too, if it failed part-way)
                    // still hold the device's slot.
                    for rest in m..requests.len() {
                        let sqe = SubmissionEntry::ns_discard(
                            0,
                            NAMESPACE_ID,
                            ns::minibatch_tag(tag, rest),
                        );
                        let _ = self.execute(IO_QUEUE, sqe, Vec::new());
                    }
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// An error unless the attached graph has a feature region (for in-storage feature gather).
    fn require_feature_region(&self) -> Result<(), DriverError> {
        match self.attached.and_then(|g| g.features) {
            Some(_) => Ok(()),
            None => Err(DriverError::InvalidArgument(
                "the attached graph has no feature region".into(),
            )),
        }
    }

    /// [`Self::run_jobs`], discarding the device's jobs if it fails.
    fn run_jobs_or_abandon<M: MinibatchRequest>(
        &mut self,
        fanouts: &[u16],
        requests: &[M],
        depth: usize,
        returns: Returns,
    ) -> Result<Vec<Vec<u8>>, DriverError> {
        let mut stages = BTreeMap::new();
        let result = self.run_jobs(fanouts, requests, depth, returns, &mut stages);
        if result.is_err() {
            self.abandon_jobs(stages);
        }
        result
    }

    /// [`Self::sample_many`]'s loop; `stages` holds each command in flight and its job.
    fn run_jobs<M: MinibatchRequest>(
        &mut self,
        fanouts: &[u16],
        requests: &[M],
        mut depth: usize,
        returns: Returns,
        stages: &mut BTreeMap<u16, (usize, JobStage)>,
    ) -> Result<Vec<Vec<u8>>, DriverError> {
        let window = (self.info.max_transfer_bytes as usize / 4 * 4).max(4);
        let node_count = self.attached.map(|g| g.node_count);
        let mut results: Vec<Option<Vec<u8>>> = vec![None; requests.len()];
        let mut waiting: VecDeque<usize> = (0..requests.len()).collect();
        let mut finished = 0;
        while finished < requests.len() {
            while stages.len() < depth
                && let Some(i) = waiting.pop_front()
            {
                let r = &requests[i];
                let (submit, mut config) = ns::ns_submit(r.seed(), fanouts, r.targets())?;
                returns.request(&mut config);
                let cid = self.submit(IO_QUEUE, submit, config)?;
                stages.insert(cid, (i, JobStage::Submitting));
            }
            let c = self
                .wait_next()?
                .ok_or(DriverError::Identify("a sampling job lost its command"))?;
            let Some((i, stage)) = (c.sq_id() == IO_QUEUE)
                .then(|| stages.remove(&c.cid()))
                .flatten()
            else {
                continue;
            };
            let (seed, targets) = (requests[i].seed(), requests[i].targets());
            let (tag, got) = match stage {
                JobStage::Submitting => {
                    let status = c.cqe.status();
                    if VendorStatus::from_status(status) == Some(VendorStatus::NoFreeSlot)
                        && !stages.is_empty()
                    {
                        // The device holds fewer jobs than asked: keep to what it holds.
                        depth = stages.len();
                        waiting.push_front(i);
                        continue;
                    }
                    (ns::submitted_tag(c)?, Vec::new())
                }
                JobStage::Collecting { tag, mut got } => {
                    let c = check(IO_QUEUE, io_opcode::NS_COLLECT, c)?;
                    let size = c.cqe.result.get() as usize;
                    let piece = c.data.len().min(size.saturating_sub(got.len()));
                    got.extend_from_slice(&c.data[..piece]);
                    if got.len() >= size || piece == 0 {
                        results[i] = Some(ns::validate(got, seed, fanouts.len(), returns)?);
                        finished += 1;
                        continue;
                    }
                    (tag, got)
                }
            };
            let len = if got.is_empty() {
                ns::first_collect_len(fanouts, targets.len() as u64, node_count, window)
            } else {
                window
            };
            let (collect, buffer) = ns::ns_collect_window(tag, got.len(), len);
            let cid = self.submit(IO_QUEUE, collect, buffer)?;
            stages.insert(cid, (i, JobStage::Collecting { tag, got }));
        }
        Ok(results.into_iter().flatten().collect())
    }

    /// After a failure: lets every command in flight finish and discards the jobs they leave
    /// on the device, so its sampling slots are free again (best effort: errors are ignored).
    fn abandon_jobs(&mut self, mut stages: BTreeMap<u16, (usize, JobStage)>) {
        let mut tags: Vec<u32> = Vec::new();
        while let Ok(Some(c)) = self.wait_next() {
            match stages.remove(&c.cid()) {
                Some((_, JobStage::Submitting)) if c.cqe.status().is_success() => {
                    tags.push(c.cqe.result.get())
                }
                Some((_, JobStage::Collecting { tag, .. })) => tags.push(tag),
                _ => {}
            }
        }
        for tag in tags {
            let sqe = SubmissionEntry::ns_discard(0, NAMESPACE_ID, tag);
            let _ = self.execute(IO_QUEUE, sqe, Vec::new());
        }
    }

    /// Samples one minibatch inside the device: exactly one `NS_SUBMIT` carrying the whole
    /// NS_config, then one `NS_COLLECT` (plus one retry with the exact size if the device
    /// answers `BufferTooSmall`). Returns the validated subgraph bytes in the format of
    /// [`sagessd_abi::subgraph`].
    pub fn sample(
        &mut self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<Vec<u8>, DriverError> {
        if let Some(window) = self.info.tunnel.filter(|_| self.use_tunnel) {
            return self.sample_through_tunnel(window, seed, fanouts, targets);
        }
        let (submit, config) = ns::ns_submit(seed, fanouts, targets)?;
        let cid = self.submit(IO_QUEUE, submit, config)?;
        let tag = ns::submitted_tag(self.wait(IO_QUEUE, cid)?)?;
        let node_count = self.attached.map(|g| g.node_count);
        let mut len = ns::first_collect_len(
            fanouts,
            targets.len() as u64,
            node_count,
            self.collect_cap_bytes,
        );
        let window = self.info.max_transfer_bytes as usize / 4 * 4;
        if len > window {
            return self.collect_windows(tag, window, seed, fanouts.len(), Returns::Subgraph);
        }
        let mut retried = false;
        loop {
            let (collect, buffer) = ns::ns_collect(tag, len);
            let cid = self.submit(IO_QUEUE, collect, buffer)?;
            match ns::collected(
                self.wait(IO_QUEUE, cid)?,
                len,
                retried,
                seed,
                fanouts.len(),
                Returns::Subgraph,
            )? {
                ns::Collected::Subgraph(data) => return Ok(data),
                ns::Collected::Retry(needed) => {
                    len = needed;
                    retried = true;
                }
            }
        }
    }
}

impl<T: Transport> Device<T> {
    /// [`Self::sample`] through the tunnel window: the NS_config written to the next slot's
    /// first LBA, then the subgraph read from the slot, its header first for its size.
    fn sample_through_tunnel(
        &mut self,
        window: TunnelWindow,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<Vec<u8>, DriverError> {
        let slot = self.next_tunnel_slot % usize::from(window.slots);
        self.next_tunnel_slot = slot + 1;
        let lba = window.slot_lba(slot);
        let bs = self.info.block_size_bytes as usize;
        let (_, mut config) = ns::ns_submit(seed, fanouts, targets)?;
        config.resize(config.len().next_multiple_of(bs), 0);
        self.write(lba, &config)?;
        let node_count = self.attached.map(|g| g.node_count);
        let bound = ns::first_collect_len(fanouts, targets.len() as u64, node_count, usize::MAX);
        let slot_bytes = window.slot_blocks as usize * bs;
        let first = bound
            .min(self.info.max_transfer_bytes as usize)
            .min(slot_bytes)
            .next_multiple_of(bs);
        let mut data = self.read(lba, (first / bs) as u64)?;
        let size = SubgraphView::total_size(&data)
            .filter(|s| *s <= slot_bytes)
            .ok_or(DriverError::BadSubgraph(SubgraphError::Truncated))?;
        // One read at a time: the job ends with the read that reaches its end, so that read
        // must be the last to arrive.
        let chunk_blocks = u64::from(self.info.max_transfer_blocks());
        while size > data.len() {
            let rest_blocks = (size - data.len()).div_ceil(bs) as u64;
            let more = self.read(
                lba + (data.len() / bs) as u64,
                rest_blocks.min(chunk_blocks),
            )?;
            data.extend_from_slice(&more);
        }
        data.truncate(size);
        ns::validate(data, seed, fanouts.len(), Returns::Subgraph)
    }

    /// Collects job `tag`'s subgraph in windows of at most `window` bytes (one transfer each),
    /// for subgraphs that may exceed the device's maximum transfer size (a kernel passthrough
    /// path refuses larger buffers).
    fn collect_windows(
        &mut self,
        tag: u32,
        window: usize,
        seed: u64,
        layer_count: usize,
        returns: Returns,
    ) -> Result<Vec<u8>, DriverError> {
        let mut out: Vec<u8> = Vec::new();
        loop {
            let (collect, buffer) = ns::ns_collect_window(tag, out.len(), window);
            let cid = self.submit(IO_QUEUE, collect, buffer)?;
            let mut c = check(IO_QUEUE, io_opcode::NS_COLLECT, self.wait(IO_QUEUE, cid)?)?;
            let size = c.cqe.result.get() as usize;
            let piece = c.data.len().min(size.saturating_sub(out.len()));
            out.extend_from_slice(&c.data[..piece]);
            if out.len() >= size || piece == 0 {
                c.data = out;
                let len = c.data.len();
                // `retried` is set, so a short buffer is an error, never a retry.
                return match ns::collected(c, len, true, seed, layer_count, returns)? {
                    ns::Collected::Subgraph(data) => Ok(data),
                    ns::Collected::Retry(_) => Err(DriverError::Identify(
                        "windowed NS_COLLECT returned less than the subgraph size",
                    )),
                };
            }
        }
    }
}

/// Where one job of [`Device::sample_many`] stands.
enum JobStage {
    /// Its NS_SUBMIT is in flight.
    Submitting,
    /// An NS_COLLECT window is in flight; `got` holds the bytes collected so far.
    Collecting { tag: u32, got: Vec<u8> },
}
