//! The workload flags of the commands that measure "16 minibatches of 1,024 targets, fanouts
//! 25,10" (the issue's yardstick): `dataset footprint` and `validate host` take the same ones, so
//! they measure the same minibatches.

use clap::Args;
use sagessd_runtime::compare::minibatch_requests;
use sagessd_runtime::host_io::Request;

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
    /// The run's minibatches over a graph of `node_count` nodes (as `compare` draws them).
    pub(crate) fn requests(&self, node_count: u64) -> Vec<Request> {
        minibatch_requests(self.seed, self.batches, self.batch_size, node_count)
    }

    /// "16 minibatches of 1024 targets, fanouts [25, 10], seed 1".
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} minibatches of {} targets, fanouts {:?}, seed {}",
            self.batches, self.batch_size, self.fanouts, self.seed
        )
    }
}
