//! The two producer stages a pipeline runs on its workers: sampling (a group of minibatches'
//! subgraphs, and their features when the device gathers them in storage) and feature gather
//! (the rows of the subgraphs' nodes, from a file or a device through a cache).

use sagessd_runtime::minibatch::Request;
use sagessd_runtime::registry::FeatureGatherer;
use sagessd_runtime::sampler::{SampledSubgraph, Sampler, SamplerError};

/// One sampled minibatch, before its features are gathered.
#[derive(Debug)]
pub struct Sampled {
    /// Its message-flow graph.
    pub subgraph: SampledSubgraph,
    /// Its nodes' feature rows, when the sampler brought them (in-storage gather).
    pub features: Option<Vec<u8>>,
    /// The modelled time this minibatch was ready, where the stage's modelled workers finish
    /// a group's minibatches one by one (`None`: the group's [`SampledGroup::modelled_ready_ns`]).
    pub ready_ns: Option<u64>,
}

/// What a sampling stage made of a group of minibatches.
#[derive(Debug)]
pub struct SampledGroup {
    /// One per request, in order.
    pub minibatches: Vec<Sampled>,
    /// The modelled (virtual) time at which the group was ready, on the device model's clock
    /// plus the host's modelled costs; `None` where nothing models time.
    pub modelled_ready_ns: Option<u64>,
    /// Wall time of the sampling call spent gathering features, for a stage that gathers as it
    /// samples (on a device); counted as gather time, not sampling time.
    pub gather_ns: u64,
}

/// A sampling stage: one per sampling worker.
pub trait SampleStage: Send {
    /// Samples a group of minibatches (one, or a hyperbatch) with the run's fanouts.
    fn sample(&mut self, group: &[Request]) -> Result<SampledGroup, SamplerError>;
}

/// A feature-gather stage: one per gather worker.
pub trait GatherStage: Send {
    /// The feature rows of each subgraph's nodes, in node-list order.
    fn gather(&mut self, subgraphs: &[&SampledSubgraph]) -> Result<Vec<Vec<u8>>, SamplerError>;
}

/// A host sampler as a sampling stage (no modelled time).
#[derive(Debug)]
pub struct HostSampling<S> {
    sampler: S,
    fanouts: Vec<u16>,
}

impl<S: Sampler> HostSampling<S> {
    /// `sampler` sampling `fanouts` for every group.
    pub fn new(sampler: S, fanouts: &[u16]) -> Self {
        Self {
            sampler,
            fanouts: fanouts.to_vec(),
        }
    }

    /// The sampler.
    pub fn sampler(&self) -> &S {
        &self.sampler
    }
}

impl<S: Sampler> SampleStage for HostSampling<S> {
    fn sample(&mut self, group: &[Request]) -> Result<SampledGroup, SamplerError> {
        let subs = self.sampler.sample_many(&self.fanouts, group)?;
        Ok(SampledGroup {
            minibatches: subs
                .into_iter()
                .map(|subgraph| Sampled {
                    subgraph,
                    features: None,
                    ready_ns: None,
                })
                .collect(),
            modelled_ready_ns: None,
            gather_ns: 0,
        })
    }
}

impl GatherStage for FeatureGatherer<'_> {
    fn gather(&mut self, subgraphs: &[&SampledSubgraph]) -> Result<Vec<Vec<u8>>, SamplerError> {
        FeatureGatherer::gather(self, subgraphs)
    }
}
