//! The one error of a pipeline run.

use sagessd_runtime::sampler::SamplerError;

/// Why a pipeline run stopped before its last minibatch.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A sampling or gather worker failed (a device error, a corrupt file, …).
    #[error("{stage} worker failed on minibatches {first}..{end}: {source}")]
    Producer {
        /// `sample` or `gather`.
        stage: &'static str,
        /// The first minibatch of the group it was preparing.
        first: usize,
        /// One past its last.
        end: usize,
        /// Why.
        source: SamplerError,
    },
    /// A worker panicked.
    #[error("{stage} worker panicked on minibatches {first}..{end}: {message}")]
    Panicked {
        /// `sample` or `gather`.
        stage: &'static str,
        /// The first minibatch of its group.
        first: usize,
        /// One past its last.
        end: usize,
        /// The panic's message.
        message: String,
    },
    /// A stage returned a different number of minibatches than it was given.
    #[error("{stage} stage returned {got} minibatches for {want}")]
    Count {
        /// `sample` or `gather`.
        stage: &'static str,
        /// What it returned.
        got: usize,
        /// What it was given.
        want: usize,
    },
    /// The consumer (the trainer) failed.
    #[error("consumer failed on minibatch {index}: {message}")]
    Consumer {
        /// The minibatch.
        index: usize,
        /// Why.
        message: String,
    },
    /// The configuration cannot run.
    #[error("invalid pipeline configuration: {0}")]
    Config(String),
    /// A stage could not be set up.
    #[error("setting up a {stage} worker: {source}")]
    Setup {
        /// `sample` or `gather`.
        stage: &'static str,
        /// Why.
        source: SamplerError,
    },
}
