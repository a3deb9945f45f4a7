//! The workload flags of the commands that measure "16 minibatches of 1,024 targets, fanouts
//! 25,10" (the issue's yardstick): `dataset footprint` and `validate host` take the same ones, so
//! they measure the same minibatches.

use clap::Args;
use sagessd_experiments::validate_host::Workload;

/// Minibatches, their size, fanouts and seed.
#[derive(Clone, Debug, Args)]
pub(crate) struct WorkloadArgs {
    /// Minibatches.
    #[arg(long, default_value_t = 16)]
    pub batches: u32,
    /// Targets per minibatch.
    #[arg(long, default_value_t = 1024)]
    pub batch_size: u32,
    /// Fanout per layer, hop order, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "25,10")]
    pub fanouts: Vec<u16>,
    /// Seed of target selection and of the sampling function.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl WorkloadArgs {
    /// The workload these flags describe.
    pub(crate) fn workload(&self) -> Workload {
        Workload {
            batches: self.batches,
            batch_size: self.batch_size,
            fanouts: self.fanouts.clone(),
            seed: self.seed,
        }
    }
}
