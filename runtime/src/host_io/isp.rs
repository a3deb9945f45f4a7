//! A worker's in-storage sampling, in virtual time: the device samples, the host submits and
//! collects ([`super::SamplerKind::Isp`]: one minibatch per `NS_SUBMIT`;
//! [`super::SamplerKind::IspIds`]: the same, returning sampled ids the host builds the subgraph
//! from; [`super::SamplerKind::IspHyperbatch`]: a hyperbatch per `NS_SUBMIT`), each command one
//! synchronous passthrough ioctl, and waits for a sampling slot when the device has none free.

use sagessd_abi::nvme::{SubmissionEntry, VendorStatus, io_opcode};
use sagessd_host_driver::{NAMESPACE_ID, Returns, ns};

use super::{
    DEFAULT_COLLECT_CAP_BYTES, Park, Request, SamplerKind, Shared, Worker, WorkerState,
    command_error,
};
use crate::sampler::{SampledSubgraph, SamplerError};

impl Worker {
    /// This worker's job was collected, so its sampling slot is free: it goes to the worker that
    /// has waited longest for one, runnable from now on.
    fn slot_freed(&self) {
        let mut s = self.sh.borrow_mut();
        let now = s.clocks[self.w];
        let Shared {
            states,
            clocks,
            slots,
            ..
        } = &mut *s;
        slots.held = slots.held.saturating_sub(1);
        slots.freed += 1;
        if let Some(w) = slots.waiting.pop_front() {
            slots.handed.insert(w);
            states[w] = WorkerState::Runnable;
            clocks[w] = clocks[w].max(now);
        }
    }

    /// Joins the queue for a sampling slot and sleeps until a collect hands this worker one.
    async fn wait_for_slot(&self) {
        {
            let mut s = self.sh.borrow_mut();
            s.stats.slot_waits += 1;
            s.slots.waiting.push_back(self.w);
            s.states[self.w] = WorkerState::WaitingSlot;
        }
        Park(false).await;
    }

    /// Submits a sampling job (`NS_SUBMIT` with its NS_config), waiting for a slot while the
    /// device has none free; returns its tag.
    async fn submit_job(
        &self,
        submit: SubmissionEntry,
        config: Vec<u8>,
    ) -> Result<u32, SamplerError> {
        loop {
            // While others wait for a slot or hold one handed to them, a worker not handed one
            // queues behind them.
            let queue_first = {
                let s = self.sh.borrow();
                !s.slots.handed.contains(&self.w)
                    && (!s.slots.waiting.is_empty() || !s.slots.handed.is_empty())
            };
            if queue_first {
                self.wait_for_slot().await;
                continue;
            }
            let freed_before = self.sh.borrow().slots.freed;
            let c = self.ioctl(submit, config.clone()).await?;
            self.sh.borrow_mut().slots.handed.remove(&self.w);
            if VendorStatus::from_status(c.cqe.status()) != Some(VendorStatus::NoFreeSlot) {
                let tag = ns::submitted_tag(c)?;
                self.sh.borrow_mut().slots.held += 1;
                return Ok(tag);
            }
            let (freed_since, held) = {
                let s = self.sh.borrow();
                (s.slots.freed != freed_before, s.slots.held)
            };
            if freed_since {
                // A collect freed a slot while this submission was refused: try again.
                continue;
            }
            if held == 0 {
                // No job of this run holds a slot, so none will free one: the device's slots
                // are held by someone else.
                return Err(command_error(io_opcode::NS_SUBMIT, &c));
            }
            self.wait_for_slot().await;
        }
    }

    /// Collects what `tag` names (one retry with the exact size if the device answers
    /// `BufferTooSmall`), of a minibatch with `seed` and `target_count` targets that returns
    /// `returns`; validated, not yet a subgraph.
    async fn collect_job(
        &self,
        tag: u32,
        seed: u64,
        fanouts: &[u16],
        target_count: usize,
        returns: Returns,
    ) -> Result<Vec<u8>, SamplerError> {
        let node_count = self.sh.borrow().graph.node_count;
        let mut len = ns::first_collect_len(
            fanouts,
            target_count as u64,
            Some(node_count),
            DEFAULT_COLLECT_CAP_BYTES,
        );
        let mut retried = false;
        loop {
            let (collect, buffer) = ns::ns_collect(tag, len);
            let c = self.ioctl(collect, buffer).await?;
            match ns::collected(c, len, retried, seed, fanouts.len(), returns)? {
                ns::Collected::Subgraph(data) => {
                    self.sh.borrow_mut().stats.bytes_used += data.len() as u64;
                    return Ok(data);
                }
                ns::Collected::Retry(needed) => {
                    len = needed;
                    retried = true;
                }
            }
        }
    }

    /// In-storage sampling of one minibatch: `NS_SUBMIT` with the whole NS_config, then
    /// `NS_COLLECT`; with [`SamplerKind::IspIds`], the host builds the subgraph from the sampled
    /// ids collected (charged as sampling compute).
    pub(super) async fn isp_sample(
        &self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        let (node_count, mode) = {
            let s = self.sh.borrow();
            (s.graph.node_count, s.mode)
        };
        crate::sampler::validate_request(fanouts, targets, node_count)?;
        let returns = if mode == SamplerKind::IspIds {
            Returns::SampledIds
        } else {
            Returns::Subgraph
        };
        let (submit, mut config) = ns::ns_submit(seed, fanouts, targets)?;
        returns.request(&mut config);
        let tag = self.submit_job(submit, config).await?;
        let bytes = self
            .collect_job(tag, seed, fanouts, targets.len(), returns)
            .await;
        self.slot_freed();
        if returns == Returns::Subgraph {
            return SampledSubgraph::from_bytes(bytes?);
        }
        let sub = {
            let mut s = self.sh.borrow_mut();
            s.builder
                .build(&bytes?, node_count, seed, fanouts, targets)?
        };
        let ns = self.sh.borrow().host.host_build_ns(sub.edge_count());
        self.charge_compute(ns);
        Ok(sub)
    }

    /// In-storage sampling of a hyperbatch of `requests`: one `NS_SUBMIT` carrying them all
    /// (the device reads each flash page once per hop for all of them), then each minibatch's
    /// `NS_COLLECT`; the slot is free after the last. A hyperbatch whose subgraphs together do
    /// not fit the device's result buffers is sampled again as two halves, as the driver does
    /// ([`sagessd_host_driver::Device::sample_hyperbatch`]).
    pub(super) async fn isp_hyperbatch(
        &self,
        fanouts: &[u16],
        requests: &[Request],
    ) -> Result<Vec<SampledSubgraph>, SamplerError> {
        let node_count = self.sh.borrow().graph.node_count;
        for r in requests {
            crate::sampler::validate_request(fanouts, &r.targets, node_count)?;
        }
        let mut out = Vec::with_capacity(requests.len());
        // Hyperbatches still to sample, the next one last.
        let mut todo = vec![requests];
        while let Some(group) = todo.pop() {
            let (submit, config) = ns::ns_submit_hyperbatch(fanouts, group)?;
            let tag = self.submit_job(submit, config).await?;
            let mut subs = Vec::with_capacity(group.len());
            let mut failed = None;
            for (m, r) in group.iter().enumerate() {
                let tag_m = ns::minibatch_tag(tag, m);
                match self
                    .collect_job(tag_m, r.seed, fanouts, r.targets.len(), Returns::Subgraph)
                    .await
                    .and_then(SampledSubgraph::from_bytes)
                {
                    Ok(s) => subs.push(s),
                    Err(e) => {
                        failed = Some(e);
                        // The device fails every minibatch of a hyperbatch alike: each
                        // collect releases one, and the slot is free after the last.
                        for rest in m + 1..group.len() {
                            let tag_rest = ns::minibatch_tag(tag, rest);
                            let discard = SubmissionEntry::ns_discard(0, NAMESPACE_ID, tag_rest);
                            self.ioctl(discard, Vec::new()).await?;
                        }
                        break;
                    }
                }
            }
            self.slot_freed();
            match failed {
                None => out.extend(subs),
                Some(SamplerError::Driver(e))
                    if group.len() > 1
                        && e.vendor_status() == Some(VendorStatus::ResultTooLarge) =>
                {
                    self.sh.borrow_mut().stats.hyperbatch_splits += 1;
                    let (first, second) = group.split_at(group.len() / 2);
                    todo.push(second);
                    todo.push(first);
                }
                Some(e) => return Err(e),
            }
        }
        Ok(out)
    }
}
