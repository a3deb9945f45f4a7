//! GCN (Kipf & Welling, 2017) on blocks, normalised as DGL's `GraphConv` with self loops.
//!
//! Per layer, with a self loop `dst → dst` added to every destination:
//!
//! ```text
//!   h_dst' = W · Σ_{src ∈ N(dst) ∪ {dst}}  h_src / ( sqrt(deg_dst + 1) · sqrt(deg_src + 1) )  + b
//! ```
//!
//! `deg_dst` is the destination's sampled in-degree in this block and `deg_src` the source's
//! out-degree in this block (edges leaving it), each `+ 1` for the self loop. For a
//! full-graph block of a symmetric graph this is exactly `D̃^-½ (A + I) D̃^-½`. The `+ 1` is
//! applied to every source, also to one that is not a destination and so has no self loop in
//! this block: the graph is treated as if self loops were added before sampling (DGL's
//! `add_self_loop` practice), which keeps the norm a function of the node alone.
//! ReLU and dropout between layers.

use tch::Tensor;
use tch::nn::{self, Module};

use super::stack::{Activation, Layer, Stack};
use super::{LayerDims, Shape, index_sum};
use crate::mfg::Block;

/// One GCN layer: normalised aggregation, then a linear transform with bias.
#[derive(Debug)]
pub(super) struct GcnLayer {
    lin: nn::Linear,
}

impl GcnLayer {
    fn new(vs: &nn::Path<'_>, dims: LayerDims) -> Self {
        GcnLayer {
            lin: nn::linear(vs, dims.in_dim, dims.out_dim, Default::default()),
        }
    }
}

impl Layer for GcnLayer {
    fn forward(&self, block: &Block, h_src: &Tensor, _train: bool) -> Tensor {
        self.lin.forward(&normalised_sum(block, h_src))
    }
}

/// `[dst_count, d]`: each destination's self-looped neighbourhood sum, symmetrically
/// normalised as the module documentation states.
fn normalised_sum(block: &Block, h_src: &Tensor) -> Tensor {
    let src_norm = (&block.out_degree + 1.0).rsqrt().unsqueeze(1);
    let dst_norm = (&block.in_degree + 1.0).rsqrt().unsqueeze(1);
    let h = h_src * src_norm;
    let neighbours = index_sum(
        &h.index_select(0, &block.src_index),
        &block.dst_index,
        block.dst_count,
    );
    (h.narrow(0, 0, block.dst_count) + neighbours) * dst_norm
}

/// The GCN stack for `shape`.
pub(super) fn build(vs: &nn::Path<'_>, shape: &Shape) -> Stack<GcnLayer> {
    Stack::new(vs, shape, Activation::Relu, shape.dropout, GcnLayer::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn normalisation_matches_hand_computation() {
        // dst 0 ← {1, 2}, dst 1 ← {}; sources 0, 1, 2 with out-degrees 0, 1, 1.
        let block = Block::from_csr(&[0, 2, 2], &[1, 2], 3, Device::Cpu).unwrap();
        let h = Tensor::from_slice(&[4f32, 2., 8.]).view([3, 1]);
        let got = Vec::<f32>::try_from(normalised_sum(&block, &h).view([-1])).unwrap();
        let s = |deg: f64| 1.0 / (deg + 1.0).sqrt();
        // dst 0: (4·s(0) + 2·s(1) + 8·s(1)) · s(2); dst 1: its own row only, 2·s(1) · s(0).
        let expected = [
            (4.0 * s(0.) + 2.0 * s(1.) + 8.0 * s(1.)) * s(2.),
            2.0 * s(1.) * s(0.),
        ];
        for (g, e) in got.iter().zip(expected) {
            assert!((f64::from(*g) - e).abs() < 1e-6, "{got:?} vs {expected:?}");
        }
    }
}
