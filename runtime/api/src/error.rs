//! The library's one error type: each layer's error, kept whole, and a bad option named.

use sagessd_emulator::EmulatorError;
use sagessd_host_driver::DriverError;
use sagessd_runtime::dataset::DatasetError;
use sagessd_runtime::sampler::SamplerError;

/// Why opening or sampling failed. Its text is what a user sees (the Python package raises it
/// as an exception's message), so each names the file, field, option or command at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A dataset file is missing or malformed.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// The sampler refused a request or failed.
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    /// The NVMe device refused a command, or could not be reached.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The hardware description is unusable.
    #[error(transparent)]
    Hardware(#[from] EmulatorError),
    /// Sampling a group of minibatches (a hyperbatch, or jobs in flight together) failed; each
    /// of its minibatches is this error.
    #[error("{0}")]
    Sampling(String),
    /// An option is out of range or does not go with the others.
    #[error("{0}")]
    Invalid(String),
    /// The dataset could not be written to the device.
    #[error("placing the dataset on the device: {0}")]
    Placement(String),
    /// The loader's worker thread is gone (it panicked, or the loader was closed).
    #[error("the loader's worker stopped: {0}")]
    Worker(String),
    /// Training failed: the model, a minibatch's tensors, or the pipeline feeding it.
    #[cfg(feature = "train")]
    #[error(transparent)]
    Training(#[from] sagessd_train::FitError),
}

#[cfg(feature = "train")]
impl From<sagessd_pipeline::PipelineError> for Error {
    fn from(e: sagessd_pipeline::PipelineError) -> Self {
        Self::Training(e.into())
    }
}

impl Error {
    /// An [`Error::Invalid`] with this text.
    pub(crate) fn invalid(text: impl Into<String>) -> Self {
        Self::Invalid(text.into())
    }
}
