//! GraphSAGE with the mean aggregator (Hamilton et al., 2017), on blocks.
//!
//! Per layer: `h_dst' = W_self · h_dst + b + W_neigh · mean_{src ∈ N(dst)} h_src`, where `h_dst`
//! is the destination's own row (the first `dst_count` source rows) and a destination with no
//! sampled neighbour aggregates zero. ReLU and dropout between layers.

use tch::Tensor;
use tch::nn::{self, Module};

use super::stack::{Activation, Layer, Stack};
use super::{LayerDims, Shape, index_sum};
use crate::mfg::Block;

/// One GraphSAGE layer: a self transform (with the bias) and a neighbour transform.
#[derive(Debug)]
pub(super) struct SageLayer {
    self_lin: nn::Linear,
    neigh_lin: nn::Linear,
}

impl SageLayer {
    fn new(vs: &nn::Path<'_>, dims: LayerDims) -> Self {
        let no_bias = nn::LinearConfig {
            bias: false,
            ..Default::default()
        };
        SageLayer {
            self_lin: nn::linear(vs / "self", dims.in_dim, dims.out_dim, Default::default()),
            neigh_lin: nn::linear(vs / "neigh", dims.in_dim, dims.out_dim, no_bias),
        }
    }
}

impl Layer for SageLayer {
    fn forward(&self, block: &Block, h_src: &Tensor, _train: bool) -> Tensor {
        let h_dst = h_src.narrow(0, 0, block.dst_count);
        self.self_lin.forward(&h_dst) + self.neigh_lin.forward(&mean_neighbours(block, h_src))
    }
}

/// `[dst_count, d]`: the mean of each destination's neighbour rows of `h_src`; zero for a
/// destination without neighbours (its sum is zero and its degree is clamped to 1).
fn mean_neighbours(block: &Block, h_src: &Tensor) -> Tensor {
    let sum = index_sum(
        &h_src.index_select(0, &block.src_index),
        &block.dst_index,
        block.dst_count,
    );
    sum / block.in_degree.clamp_min(1.0).unsqueeze(1)
}

/// The GraphSAGE stack for `shape`.
pub(super) fn build(vs: &nn::Path<'_>, shape: &Shape) -> Stack<SageLayer> {
    Stack::new(vs, shape, Activation::Relu, shape.dropout, SageLayer::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// dst 0 ← {1, 3}, dst 1 ← {} (no neighbours), dst 2 ← {0, 1, 3}; 4 sources.
    fn block() -> Block {
        Block::from_csr(&[0, 2, 2, 5], &[1, 3, 0, 1, 3], 4, Device::Cpu).unwrap()
    }

    fn h_src() -> Tensor {
        Tensor::from_slice(&[1f32, 2., 3., 4., 5., 6., 8., 9.]).view([4, 2])
    }

    fn matrix(values: &[f32], rows: i64) -> Tensor {
        Tensor::from_slice(values).view([rows, -1])
    }

    #[test]
    fn mean_of_neighbours_matches_hand_computation() {
        let mean = mean_neighbours(&block(), &h_src());
        // dst 0: (h1 + h3) / 2; dst 1: none → 0; dst 2: (h0 + h1 + h3) / 3.
        let expected = matrix(&[5.5, 6.5, 0.0, 0.0, 4.0, 5.0], 3);
        assert_eq!(mean.kind(), Kind::Float);
        assert!(mean.allclose(&expected, 1e-6, 1e-6, false), "{mean}");
    }

    #[test]
    fn layer_with_known_weights_matches_hand_computation() {
        // Building the layer draws its initial weights from torch's global generator.
        let _rng = crate::testing::torch_rng_lock();
        let vs = nn::VarStore::new(Device::Cpu);
        let dims = LayerDims {
            in_dim: 2,
            out_dim: 2,
            last: true,
        };
        let mut layer = SageLayer::new(&vs.root(), dims);
        tch::no_grad(|| {
            layer.self_lin.ws.copy_(&matrix(&[1., 0., 0., 1.], 2));
            layer
                .self_lin
                .bs
                .as_mut()
                .unwrap()
                .copy_(&Tensor::from_slice(&[0.5f32, -0.5]));
            layer.neigh_lin.ws.copy_(&matrix(&[2., 0., 0., -1.], 2));
        });
        let out = layer.forward(&block(), &h_src(), false);
        // h_dst + b + W_neigh · mean: dst 0 [1.5, 1.5] + [11, -6.5]; dst 1 [3.5, 3.5] + 0;
        // dst 2 [5.5, 5.5] + [8, -5].
        let expected = matrix(&[12.5, -5.0, 3.5, 3.5, 13.5, 0.5], 3);
        assert!(out.allclose(&expected, 1e-6, 1e-6, false), "{out}");
    }
}
