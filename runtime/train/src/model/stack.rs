//! A stack of message-passing layers, one per block, with an activation and dropout between
//! layers: the forward pass every model shares.
//!
//! ```text
//!   h = x;  for i: { if i > 0 { h = dropout(act(h)) };  h = layer_i(block_i, h) }
//! ```

use std::fmt;

use tch::{Tensor, nn};

use super::{GnnModel, LayerDims, Shape};
use crate::mfg::{Block, Mfg};

/// One message-passing layer: source rows of a block in, destination rows out.
pub(super) trait Layer: fmt::Debug + Send {
    /// `[dst_count, out]` from `h_src` (`[src_count, in]`); `train` enables the layer's own
    /// dropout, if it has any.
    fn forward(&self, block: &Block, h_src: &Tensor, train: bool) -> Tensor;
}

/// The nonlinearity applied between layers (never after the last).
#[derive(Clone, Copy, Debug)]
pub(super) enum Activation {
    /// `max(0, x)` (SAGE, GCN).
    Relu,
    /// `x` for `x > 0`, `exp(x) - 1` otherwise (GAT).
    Elu,
}

impl Activation {
    fn apply(self, h: &Tensor) -> Tensor {
        match self {
            Activation::Relu => h.relu(),
            Activation::Elu => h.elu(),
        }
    }
}

/// Layers applied in block order.
#[derive(Debug)]
pub(super) struct Stack<L> {
    layers: Vec<L>,
    activation: Activation,
    /// Dropout probability on each hidden representation between layers (0: none).
    dropout: f64,
}

impl<L: Layer> Stack<L> {
    /// One layer per [`Shape::layer_dims`] entry, its parameters under `vs / "layer{i}"`.
    pub(super) fn new(
        vs: &nn::Path<'_>,
        shape: &Shape,
        activation: Activation,
        dropout: f64,
        make: impl Fn(&nn::Path<'_>, LayerDims) -> L,
    ) -> Self {
        let layers = shape
            .layer_dims()
            .enumerate()
            .map(|(i, dims)| make(&(vs / format!("layer{i}")), dims))
            .collect();
        Stack {
            layers,
            activation,
            dropout,
        }
    }
}

impl<L: Layer> GnnModel for Stack<L> {
    fn forward(&self, mfg: &Mfg, train: bool) -> Tensor {
        assert_eq!(
            self.layers.len(),
            mfg.blocks.len(),
            "one block per layer (checked by the trainer)"
        );
        let mut h = mfg.x.shallow_clone();
        for (i, (layer, block)) in self.layers.iter().zip(&mfg.blocks).enumerate() {
            if i > 0 {
                h = self.activation.apply(&h).dropout(self.dropout, train);
            }
            assert_eq!(h.size()[0], block.src_count, "one input row per source");
            h = layer.forward(block, &h, train);
        }
        h
    }
}
