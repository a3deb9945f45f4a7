//! The stages of the registry's samplers and feature caches: on this machine's files (a
//! sampler and a gatherer per worker, each with its own file handles and cache), or on an NVMe
//! device (one producer that samples and gathers, so that an emulated device's clock is one
//! deterministic timeline).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sagessd_emulator::host_stack::HostStackConfig;
use sagessd_host_driver::{Device, Returns, Transport};
use sagessd_runtime::host_io::HostIoSampler;
use sagessd_runtime::minibatch::Request;
use sagessd_runtime::ooc::AgnesSampler;
use sagessd_runtime::ooc::features::FeatureFile;
use sagessd_runtime::registry::{
    CacheSettings, FeatureCache, FeatureGatherer, FileSource, SamplerKind,
};
use sagessd_runtime::sampler::{SampledSubgraph, Sampler, SamplerError};

use crate::error::PipelineError;
use crate::stage::{GatherStage, HostSampling, SampleStage, Sampled, SampledGroup};

/// Makes the stages of a run on files: `kind` over `source`, features with `cache`.
#[derive(Clone, Copy, Debug)]
pub struct FileStages<'a> {
    /// What the samplers read.
    pub source: FileSource<'a>,
    /// The sampler.
    pub kind: SamplerKind,
    /// The feature cache (`None`: no gather stage).
    pub cache: FeatureCache,
    /// Its settings.
    pub settings: CacheSettings,
}

impl<'a> FileStages<'a> {
    /// A sampling stage for one worker.
    pub fn sampler(&self, fanouts: &[u16]) -> Result<Box<dyn SampleStage + 'a>, PipelineError> {
        let s = self.source.open(self.kind).map_err(setup("sample"))?;
        Ok(Box::new(HostSampling::new(s, fanouts)))
    }

    /// A gather stage for one worker (its own file handle and cache); `None` without features.
    pub fn gatherer(&self) -> Result<Option<Box<dyn GatherStage + 'a>>, PipelineError> {
        if self.cache == FeatureCache::None {
            return Ok(None);
        }
        let rows = FeatureFile::open(self.source.dataset).map_err(setup("gather"))?;
        Ok(FeatureGatherer::new(self.cache, rows, self.settings)
            .map(|g| Box::new(g) as Box<dyn GatherStage + 'a>))
    }
}

fn setup(stage: &'static str) -> impl Fn(SamplerError) -> PipelineError {
    move |source| PipelineError::Setup { stage, source }
}

/// The device every on-device stage shares.
pub type SharedNvme = Mutex<Device<Box<dyn Transport + Send>>>;

/// How an on-device producer samples.
#[derive(Debug)]
pub enum DeviceSampler<'a> {
    /// AGNES blocks (per minibatch, or hyperbatches) read from the device, features gathered
    /// from its feature region through a host cache.
    Blocks {
        /// The sampler over the layout on the device.
        sampler: Box<AgnesSampler<'a>>,
        /// The gatherer over the device's feature region, when the run has features.
        gatherer: Option<Box<FeatureGatherer<'a>>>,
    },
    /// In-storage sampling, with in-storage feature gather when `features` is set.
    Isp {
        /// Ask for the subgraphs' feature rows too.
        features: bool,
        /// Sample each group as one in-storage hyperbatch (one NS_config), not as one job per
        /// minibatch.
        hyperbatch: bool,
    },
}

/// The one producer of an on-device run: samples (and gathers) on the device, and keeps the
/// modelled clock: the device's virtual time plus the host's modelled costs (a synchronous I/O
/// per NVMe command, the sampling compute of each subgraph the host builds; the costs
/// `sagessd sample --on-device` charges).
pub struct DeviceStage<'a> {
    /// The device.
    pub device: &'a SharedNvme,
    /// How it samples.
    pub sampler: DeviceSampler<'a>,
    /// The run's fanouts.
    pub fanouts: Vec<u16>,
    /// The host's costs (`None`: the device does not model time).
    pub host: Option<HostStackConfig>,
    /// Jobs in flight for in-storage sampling.
    pub isp_depth: usize,
    /// The host's modelled time so far, ns (shared with whoever reads the modelled clock:
    /// [`modelled_clock_ns`]).
    pub host_ns: &'a AtomicU64,
}

/// The modelled clock of an on-device run: the device's virtual time plus the host's modelled
/// costs so far; `None` if the device does not model time.
pub fn modelled_clock_ns(device: &SharedNvme, host_ns: &AtomicU64) -> Option<u64> {
    let now = device.lock().ok()?.now_ns()?;
    Some(now + host_ns.load(Ordering::SeqCst))
}

impl std::fmt::Debug for DeviceStage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceStage")
            .field("sampler", &self.sampler)
            .field("host_ns", &self.host_ns.load(Ordering::SeqCst))
            .finish()
    }
}

impl DeviceStage<'_> {
    fn device(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, Device<Box<dyn Transport + Send>>>, SamplerError> {
        self.device
            .lock()
            .map_err(|_| SamplerError::GraphCorrupt("a user of the device panicked".into()))
    }

    /// The modelled clock (see [`modelled_clock_ns`]), if the run models the host's costs.
    pub fn modelled_now_ns(&self) -> Option<u64> {
        self.host
            .as_ref()
            .and_then(|_| modelled_clock_ns(self.device, self.host_ns))
    }
}

impl SampleStage for DeviceStage<'_> {
    fn sample(&mut self, group: &[Request]) -> Result<SampledGroup, SamplerError> {
        let commands0 = self.device()?.stats().commands;
        let fanouts = self.fanouts.clone();
        let mut host_built_ns = 0u64;
        let mut gather_ns = 0u64;
        let minibatches = match &mut self.sampler {
            DeviceSampler::Blocks { sampler, gatherer } => {
                let subs = sampler.sample_many(&fanouts, group)?;
                let t = std::time::Instant::now();
                let rows = match gatherer {
                    Some(g) => g.gather(&subs)?.into_iter().map(Some).collect(),
                    None => vec![None; subs.len()],
                };
                gather_ns = t.elapsed().as_nanos() as u64;
                if let Some(h) = &self.host {
                    host_built_ns = subs.iter().map(|s| s.host_sampling_ns(h)).sum();
                }
                subs.into_iter()
                    .zip(rows)
                    .map(|(subgraph, features)| Sampled {
                        subgraph,
                        features,
                        ready_ns: None,
                    })
                    .collect()
            }
            DeviceSampler::Isp {
                features,
                hyperbatch,
            } => {
                let (features, hyperbatch) = (*features, *hyperbatch);
                let depth = self.isp_depth.max(1);
                let out = {
                    let mut d = self.device()?;
                    if hyperbatch {
                        d.sample_hyperbatch(&fanouts, group, Returns::subgraph(features))?
                    } else if features {
                        d.sample_many_with_features(&fanouts, group, depth)?
                    } else {
                        d.sample_many(&fanouts, group, depth)?
                    }
                };
                out.into_iter()
                    .map(|bytes| {
                        Ok(if features {
                            let (subgraph, rows) = SampledSubgraph::split_features(bytes)?;
                            Sampled {
                                subgraph,
                                features: Some(rows),
                                ready_ns: None,
                            }
                        } else {
                            Sampled {
                                subgraph: SampledSubgraph::from_bytes(bytes)?,
                                features: None,
                                ready_ns: None,
                            }
                        })
                    })
                    .collect::<Result<Vec<_>, SamplerError>>()?
            }
        };
        if let Some(h) = &self.host {
            let commands = self.device()?.stats().commands - commands0;
            self.host_ns
                .fetch_add(host_built_ns + commands * h.sync_io_ns(), Ordering::SeqCst);
        }
        Ok(SampledGroup {
            minibatches,
            modelled_ready_ns: self.modelled_now_ns(),
            gather_ns,
        })
    }
}

/// A host sampler over the modelled host I/O stack of an emulated device (the graph in DRAM,
/// mmap with its page cache and faults, direct I/O, io_uring, in-storage sampling by ioctls:
/// [`sagessd_runtime::host_io`]) as the producer of an on-device run, with `workers` modelled
/// host workers sampling each group side by side in virtual time (they start a group together;
/// each minibatch is ready when its worker finishes it); its minibatches' feature rows are
/// copied from host memory (a DRAM-resident feature table: that copy is not modelled).
#[derive(Debug)]
pub struct ModelledHostStage<'a> {
    /// The sampler, owning its emulated device.
    pub sampler: HostIoSampler,
    /// The run's fanouts.
    pub fanouts: Vec<u16>,
    /// Every node's feature row, row after row.
    pub rows: &'a [u8],
    /// Bytes of one row.
    pub row_bytes: usize,
    /// The modelled clock: the sampler's modelled time so far, ns (shared with the feed).
    pub clock_ns: &'a AtomicU64,
    /// Modelled host workers (≥ 1).
    pub workers: usize,
}

impl SampleStage for ModelledHostStage<'_> {
    fn sample(&mut self, group: &[Request]) -> Result<SampledGroup, SamplerError> {
        let start_ns = self.sampler.host_stats().modelled_time_ns;
        let run = self
            .sampler
            .run_workers(self.workers.max(1), &self.fanouts, group)?;
        let t = std::time::Instant::now();
        let minibatches = run
            .subgraphs
            .into_iter()
            .zip(run.done_ns)
            .map(|(subgraph, done_ns)| {
                let mut features = Vec::with_capacity(subgraph.node_count() * self.row_bytes);
                for v in subgraph.view().nodes() {
                    let at = usize::try_from(v.get())
                        .ok()
                        .and_then(|i| i.checked_mul(self.row_bytes))
                        .and_then(|at| self.rows.get(at..at + self.row_bytes))
                        .ok_or_else(|| {
                            SamplerError::InvalidRequest(format!(
                                "node {} has no feature row",
                                v.get()
                            ))
                        })?;
                    features.extend_from_slice(at);
                }
                Ok(Sampled {
                    subgraph,
                    features: Some(features),
                    ready_ns: Some(start_ns + done_ns),
                })
            })
            .collect::<Result<Vec<_>, SamplerError>>()?;
        let gather_ns = t.elapsed().as_nanos() as u64;
        let now = self.sampler.host_stats().modelled_time_ns;
        self.clock_ns.store(now, Ordering::SeqCst);
        Ok(SampledGroup {
            minibatches,
            modelled_ready_ns: Some(now),
            gather_ns,
        })
    }
}
