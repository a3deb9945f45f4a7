//! The one error type of `sagessd-train`.
//!
//! Operating errors — malformed minibatch input, a model specification that cannot be built, a
//! device that is not there, a libtorch failure — are values of [`TrainError`]. Broken invariants
//! inside the crate stay `assert!`s.

/// Why a minibatch could not be built, a model not constructed, or a step not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// The feature bytes are not `node_count × dim` values of the stated dtype.
    #[error(
        "feature bytes: expected {expected_bytes} ({node_count} nodes × {dim} values × \
         {value_bytes} B), got {actual_bytes}"
    )]
    FeatureLength {
        /// Nodes whose rows were expected.
        node_count: usize,
        /// Values per row.
        dim: usize,
        /// Bytes per value of the stated dtype.
        value_bytes: usize,
        /// `node_count × dim × value_bytes`, computed without overflow.
        expected_bytes: u128,
        /// Bytes actually given.
        actual_bytes: usize,
    },
    /// The label count is not one per labelled node (targets, or every node of a full graph).
    #[error("labels: expected {expected} (one per labelled node), got {actual}")]
    LabelCount {
        /// Labelled nodes.
        expected: usize,
        /// Labels given.
        actual: usize,
    },
    /// A CSR given to build a block contradicts itself; the field is named.
    #[error("CSR: {0}")]
    Csr(&'static str),
    /// A model specification that cannot be built; the reason is named.
    #[error("model spec: {0}")]
    Spec(&'static str),
    /// A model name that is none of `sage`, `gcn`, `gat`.
    #[error("unknown model {0:?} (expected sage, gcn or gat)")]
    UnknownModel(String),
    /// A minibatch whose block count differs from the model's layer count.
    #[error("minibatch has {actual} blocks, the model has {expected} layers")]
    LayerMismatch {
        /// The model's layers.
        expected: usize,
        /// The minibatch's blocks.
        actual: usize,
    },
    /// A minibatch whose input feature width differs from the model's input width.
    #[error("minibatch features have {actual} values per node, the model expects {expected}")]
    FeatureDim {
        /// The model's input width.
        expected: i64,
        /// The minibatch's feature width.
        actual: i64,
    },
    /// A minibatch built on another device than the model's parameters.
    #[error("minibatch is on {actual:?}, the model on {expected:?}")]
    DeviceMismatch {
        /// The model's device.
        expected: tch::Device,
        /// The minibatch's device.
        actual: tch::Device,
    },
    /// CUDA was asked for, but libtorch sees no CUDA device.
    #[error(
        "CUDA requested but libtorch reports no CUDA device (a CPU-only libtorch, or no GPU); \
         choose the CPU or Auto"
    )]
    CudaUnavailable,
    /// libtorch refused an operation (for example a label outside `0..classes`).
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}
