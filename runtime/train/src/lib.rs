//! sagessd training: GNN models over the message-flow graphs the samplers produce.
//!
//! ```text
//!   SubgraphView + feature bytes + labels ──▶ Mfg (tensors, one Block per GNN layer)
//!   Mfg ──▶ Trainer { GnnModel (SAGE | GCN | GAT), Adam } ──▶ StepOutcome { loss, accuracy }
//!   fit: epochs of pipeline minibatches ──▶ Trainer ──▶ EpochRecord (loss, accuracy, stage times)
//! ```
//!
//! The only sagessd crate that links libtorch (through `tch`). Deterministic on the CPU for a
//! fixed seed (see [`trainer`]), so every sampler that produces the same minibatches gives the
//! same loss curve.

pub mod error;
pub mod features;
pub mod fit;
pub mod mfg;
pub mod model;
pub mod step_model;
pub mod trainer;

#[cfg(test)]
mod testing;

pub use error::TrainError;
pub use features::FeatureDtype;
pub use fit::{
    EpochRecord, Evaluation, Feed, FitConfig, FitError, FitOutcome, NodeData, StageThroughput, fit,
};
pub use mfg::{Block, Mfg};
pub use model::{GnnModel, ModelKind, build};
pub use step_model::StepModel;
pub use trainer::{DeviceChoice, StepOutcome, TrainConfig, Trainer, select_device};
