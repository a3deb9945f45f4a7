//! GAT (Veličković et al., 2018) on blocks, with multi-head attention.
//!
//! Per layer and head, with `Wh = W · dropout(h_src)` and a self edge `dst → dst` added so that
//! every destination (also one without sampled neighbours) attends to something:
//!
//! ```text
//!   e_(src,dst) = LeakyReLU_0.2( a_src · Wh_src + a_dst · Wh_dst )
//!   α_(src,dst) = softmax of e over the edges into dst          (segment_softmax)
//!   h_dst'      = Σ_src dropout(α_(src,dst)) · Wh_src  + b
//! ```
//!
//! Hidden layers split `hidden` into `heads` heads of `hidden / heads` values and concatenate
//! them; the last layer has `heads` heads of `classes` values and averages them. ELU between
//! layers; dropout (feature and attention) inside each layer, so none between.

use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use super::stack::{Activation, Layer, Stack};
use super::{LayerDims, Shape, index_sum};
use crate::mfg::Block;

/// Slope of the LeakyReLU on attention logits, as in the GAT paper.
const NEGATIVE_SLOPE: f64 = 0.2;

/// One multi-head attention layer.
#[derive(Debug)]
pub(super) struct GatLayer {
    /// `in → heads × per_head`, no bias (the bias is added after aggregation).
    lin: nn::Linear,
    /// `[heads, per_head]`: attention weights on the source's transformed row.
    attn_src: Tensor,
    /// `[heads, per_head]`: attention weights on the destination's transformed row.
    attn_dst: Tensor,
    /// `[out]`: added to the aggregated (concatenated or averaged) output.
    bias: Tensor,
    heads: i64,
    /// The classifier averages its heads; hidden layers concatenate them.
    average_heads: bool,
    /// Dropout probability on input rows and on attention coefficients.
    dropout: f64,
}

impl GatLayer {
    fn new(vs: &nn::Path<'_>, dims: LayerDims, heads: i64, dropout: f64) -> Self {
        let per_head = if dims.last {
            dims.out_dim
        } else {
            dims.out_dim / heads
        };
        let no_bias = nn::LinearConfig {
            bias: false,
            ..Default::default()
        };
        let attn = |name: &str| vs.var(name, &[heads, per_head], nn::init::DEFAULT_KAIMING_UNIFORM);
        GatLayer {
            lin: nn::linear(vs / "lin", dims.in_dim, heads * per_head, no_bias),
            attn_src: attn("attn_src"),
            attn_dst: attn("attn_dst"),
            bias: vs.zeros("bias", &[dims.out_dim]),
            heads,
            average_heads: dims.last,
            dropout,
        }
    }
}

impl Layer for GatLayer {
    fn forward(&self, block: &Block, h_src: &Tensor, train: bool) -> Tensor {
        let (src_count, dst_count) = (block.src_count, block.dst_count);
        let wh = self
            .lin
            .forward(&h_src.dropout(self.dropout, train))
            .view([src_count, self.heads, -1]);
        let score = |rows: &Tensor, a: &Tensor| (rows * a).sum_dim_intlist(-1, false, Kind::Float);
        let score_src = score(&wh, &self.attn_src);
        let score_dst = score(&wh.narrow(0, 0, dst_count), &self.attn_dst);
        let loops = Tensor::arange(dst_count, (Kind::Int64, h_src.device()));
        let src = Tensor::cat(&[&block.src_index, &loops], 0);
        let dst = Tensor::cat(&[&block.dst_index, &loops], 0);
        let e = score_src.index_select(0, &src) + score_dst.index_select(0, &dst);
        let e = e.maximum(&(&e * NEGATIVE_SLOPE));
        let alpha = segment_softmax(&e, &dst, dst_count).dropout(self.dropout, train);
        let messages = wh.index_select(0, &src) * alpha.unsqueeze(-1);
        let out = index_sum(&messages, &dst, dst_count);
        let out = if self.average_heads {
            out.mean_dim(1, false, Kind::Float)
        } else {
            out.flatten(1, -1)
        };
        out + &self.bias
    }
}

/// `[E, H]`: softmax of `scores` (`[E, H]`) over each segment's entries, per column, where
/// `segment` (`i64 [E]`, values `< count`) names the segment of each entry. Each segment's
/// maximum (`index_reduce` with `amax`, the dim-0 form of `scatter_reduce`, which tch 0.26 only
/// binds for add/multiply; detached, being a constant) is subtracted before `exp` for
/// stability; the exponents are summed per segment with [`index_sum`] and divided out. Every op
/// is deterministic on the CPU (`amax` is order-independent).
fn segment_softmax(scores: &Tensor, segment: &Tensor, count: i64) -> Tensor {
    let heads = scores.size()[1];
    let max = Tensor::full(
        [count, heads],
        f64::NEG_INFINITY,
        (scores.kind(), scores.device()),
    )
    .index_reduce(0, segment, &scores.detach(), "amax", true);
    let exp = (scores - max.index_select(0, segment)).exp();
    let sum = index_sum(&exp, segment, count);
    exp / sum.index_select(0, segment)
}

/// The GAT stack for `shape`.
pub(super) fn build(vs: &nn::Path<'_>, shape: &Shape) -> Stack<GatLayer> {
    let (heads, dropout) = (shape.heads, shape.dropout);
    Stack::new(vs, shape, Activation::Elu, 0.0, |path, dims| {
        GatLayer::new(path, dims, heads, dropout)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn segment_softmax_sums_to_one_per_segment() {
        // 7 entries, 2 columns, segments 0..4: segment 3 is empty, segment 2 has one entry,
        // segment 1 has scores far beyond exp's f32 range (stability).
        let segment = [0i64, 1, 0, 2, 1, 0, 1];
        let scores: [[f32; 2]; 7] = [
            [0.5, -1.0],
            [1000.0, 3.0],
            [2.0, 0.0],
            [-7.0, 7.0],
            [999.0, 3.0],
            [-1.5, 0.25],
            [1001.0, -3.0],
        ];
        let flat: Vec<f32> = scores.iter().flatten().copied().collect();
        let alpha = segment_softmax(
            &Tensor::from_slice(&flat).view([7, 2]),
            &Tensor::from_slice(&segment),
            4,
        );
        let alpha: Vec<f32> = Vec::try_from(alpha.view([-1])).unwrap();
        for col in 0..2 {
            for seg in 0..4 {
                let members: Vec<usize> = (0..7).filter(|&e| segment[e] == seg).collect();
                // Oracle: softmax in f64 over the segment's entries.
                let max = members
                    .iter()
                    .map(|&e| f64::from(scores[e][col]))
                    .fold(f64::NEG_INFINITY, f64::max);
                let denom: f64 = members
                    .iter()
                    .map(|&e| (f64::from(scores[e][col]) - max).exp())
                    .sum();
                let mut total = 0.0;
                for &e in &members {
                    let got = f64::from(alpha[2 * e + col]);
                    let want = (f64::from(scores[e][col]) - max).exp() / denom;
                    assert!(
                        (got - want).abs() < 1e-6,
                        "entry {e} col {col}: {got} vs {want}"
                    );
                    total += got;
                }
                if !members.is_empty() {
                    assert!(
                        (total - 1.0).abs() < 1e-6,
                        "segment {seg} col {col}: {total}"
                    );
                }
            }
        }
    }

    #[test]
    fn destination_without_neighbours_attends_to_itself() {
        let _rng = crate::testing::torch_rng_lock();
        tch::manual_seed(3);
        let vs = nn::VarStore::new(Device::Cpu);
        let dims = LayerDims {
            in_dim: 3,
            out_dim: 4,
            last: false,
        };
        let layer = GatLayer::new(&vs.root(), dims, 2, 0.0);
        // dst 0 ← {1, 2}; dst 1 has no sampled neighbour.
        let block = Block::from_csr(&[0, 2, 2], &[1, 2], 3, Device::Cpu).unwrap();
        let h = Tensor::from_slice(&[1f32, 0., 2., -1., 3., 0.5, 0., 1., 1.]).view([3, 3]);
        let out = layer.forward(&block, &h, false);
        assert_eq!(out.size(), vec![2, 4]);
        // Its only edge is the self edge (α = 1): output = W·h_1 + b, b = 0 at init.
        let alone = layer.lin.forward(&h.narrow(0, 1, 1));
        assert!(
            out.narrow(0, 1, 1).allclose(&alone, 1e-6, 1e-6, false),
            "{out}"
        );
    }
}
