//! The GNN models — GraphSAGE, GCN, GAT — behind one trait, built by one function.
//!
//! ```text
//!   build(kind, ...) ──▶ Stack<SageLayer | GcnLayer | GatLayer>  (impl GnnModel)
//!   forward(mfg):  x ─▶ layer 0 on blocks[0] ─▶ act, dropout ─▶ ... ─▶ layer L-1 ─▶ logits
//! ```
//!
//! A model has as many layers as the minibatch has blocks; layer `i` runs on `blocks[i]`, so the
//! last layer's output rows are the targets. Every message passing is a gather of source rows
//! along the block's edges and an `index_sum` onto destinations — deterministic on the CPU.

mod gat;
mod gcn;
mod sage;
mod stack;

use std::fmt;
use std::str::FromStr;

use tch::{Tensor, nn};

use crate::error::TrainError;
use crate::mfg::Mfg;

/// Which GNN to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelKind {
    /// GraphSAGE with the mean aggregator.
    Sage,
    /// GCN with symmetric normalisation and self loops.
    Gcn,
    /// GAT with multi-head attention.
    Gat,
}

impl ModelKind {
    /// Every kind, in a fixed order (for sweeps and help texts).
    pub const ALL: [ModelKind; 3] = [ModelKind::Sage, ModelKind::Gcn, ModelKind::Gat];

    /// The lower-case name used on command lines and in result files: `sage`, `gcn`, `gat`.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Sage => "sage",
            ModelKind::Gcn => "gcn",
            ModelKind::Gat => "gat",
        }
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ModelKind {
    type Err = TrainError;

    /// Parses a [`ModelKind::name`], ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ModelKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| TrainError::UnknownModel(s.to_owned()))
    }
}

/// A GNN over message-flow graphs.
pub trait GnnModel: fmt::Debug + Send {
    /// Logits `[dst_count of the last block, classes]` of the minibatch's targets. `train`
    /// enables dropout (drawn from torch's global generator). The minibatch must have as many
    /// blocks as the model has layers and `x` the model's input width; `Trainer` checks both.
    fn forward(&self, mfg: &Mfg, train: bool) -> Tensor;
}

/// Builds a `kind` model with its parameters under `vs`: `layers` layers mapping `in_dim`
/// input values through `hidden`-wide representations to `classes` logits, dropout
/// probability `dropout` in training. `heads` is GAT's head count (the hidden width is split
/// across heads, so it must divide `hidden`); SAGE and GCN ignore it. Weights take tch's
/// default initialisation from torch's global generator, so `tch::manual_seed` fixes them.
#[allow(clippy::too_many_arguments)] // the model's shape, each dimension named at the call site
pub fn build(
    kind: ModelKind,
    vs: &nn::Path<'_>,
    in_dim: i64,
    hidden: i64,
    classes: i64,
    layers: usize,
    heads: i64,
    dropout: f64,
) -> Result<Box<dyn GnnModel>, TrainError> {
    let shape = Shape {
        in_dim,
        hidden,
        classes,
        layers,
        heads,
        dropout,
    };
    shape.validate(kind)?;
    Ok(match kind {
        ModelKind::Sage => Box::new(sage::build(vs, &shape)),
        ModelKind::Gcn => Box::new(gcn::build(vs, &shape)),
        ModelKind::Gat => Box::new(gat::build(vs, &shape)),
    })
}

/// The dimensions [`build`] was given, validated once.
#[derive(Clone, Copy, Debug)]
struct Shape {
    in_dim: i64,
    hidden: i64,
    classes: i64,
    layers: usize,
    heads: i64,
    dropout: f64,
}

/// The input and output width of one layer, and whether it is the last (the classifier).
#[derive(Clone, Copy, Debug)]
struct LayerDims {
    in_dim: i64,
    out_dim: i64,
    last: bool,
}

impl Shape {
    fn validate(&self, kind: ModelKind) -> Result<(), TrainError> {
        let reason = if self.layers == 0 {
            "at least one layer"
        } else if self.in_dim < 1 || self.hidden < 1 || self.classes < 1 {
            "in_dim, hidden and classes must be positive"
        } else if !(0.0..1.0).contains(&self.dropout) {
            "dropout must be in [0, 1)"
        } else if kind == ModelKind::Gat && (self.heads < 1 || self.hidden % self.heads != 0) {
            "GAT needs heads ≥ 1 dividing hidden"
        } else {
            return Ok(());
        };
        Err(TrainError::Spec(reason))
    }

    /// The widths of every layer, input layer first.
    fn layer_dims(&self) -> impl Iterator<Item = LayerDims> + '_ {
        (0..self.layers).map(|i| LayerDims {
            in_dim: if i == 0 { self.in_dim } else { self.hidden },
            out_dim: if i + 1 == self.layers {
                self.classes
            } else {
                self.hidden
            },
            last: i + 1 == self.layers,
        })
    }
}

/// Sums per-edge `values` (`[E, ...]`) into `count` rows by `index` (`i64 [E]`): row `i` of
/// the result is the sum of the values whose index is `i`, zero where there are none.
fn index_sum(values: &Tensor, index: &Tensor, count: i64) -> Tensor {
    let mut size = values.size();
    size[0] = count;
    Tensor::zeros(size, (values.kind(), values.device())).index_add(0, index, values)
}
