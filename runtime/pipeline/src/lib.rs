//! sagessd's producer/consumer pipeline: sampling and feature-gather workers prepare
//! minibatches, bounded queues carry them, one consumer (the trainer) takes them in minibatch
//! order. No libtorch: the trainer is the consumer the caller passes in.
//!
//! * [`stage`]: what a worker runs (a sampler, a feature gatherer);
//! * [`engine`]: the workers, queues, ordering, memory bound and error handling;
//! * [`profile`]: stage clocks and the worker allocation `--workers auto` chooses;
//! * [`sources`]: the stages of the registry's samplers, on files or on a device;
//! * [`timeline`]: the modelled epoch (device-model producers, measured trainer steps).

pub mod engine;
mod error;
pub mod profile;
pub mod sources;
pub mod stage;
pub mod timeline;

pub use engine::{Minibatch, Pipeline, PipelineConfig, RunReport, StageFactory, Workers, run};
pub use error::PipelineError;
pub use profile::{Profile, StageClock};
pub use sources::{
    DeviceSampler, DeviceStage, FileStages, ModelledHostStage, SharedNvme, modelled_clock_ns,
};
pub use stage::{GatherStage, HostSampling, SampleStage, Sampled, SampledGroup};
pub use timeline::Timeline;
