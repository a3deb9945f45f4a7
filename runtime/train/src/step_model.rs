//! A training step in modelled time: the minibatch's GNN layers priced on the hardware
//! description's `[trainer]` accelerator ([`TrainerConfig::step_ns`]) instead of measured on
//! this machine, so that a modelled epoch is the same on every run and every machine, and
//! stands for the accelerator the description names (SmartSAGE Figs. 6, 7, 18 train on a GPU).

use sagessd_abi::subgraph::{LayerCounts, SubgraphView};
use sagessd_emulator::trainer_model::{LayerShape, TrainerConfig};

use crate::model::ModelKind;

/// What prices a step: the accelerator and the model's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepModel {
    /// The accelerator's rates.
    pub accelerator: TrainerConfig,
    /// The GNN.
    pub model: ModelKind,
    /// Input feature width.
    pub in_dim: u64,
    /// Hidden width.
    pub hidden: u64,
    /// Classes (the last layer's width).
    pub classes: u64,
    /// GAT's attention heads (ignored by the others).
    pub heads: u64,
    /// Bytes of one feature row as it crosses to the accelerator (f32: f16 rows are widened
    /// on the host first).
    pub feature_row_bytes: u64,
}

/// Bytes per edge of a minibatch's index tensors (`i64` destination and source indices).
const INDEX_BYTES_PER_EDGE: u64 = 16;
/// Bytes per target of its label tensor (`i64`).
const LABEL_BYTES: u64 = 8;
/// GAT's extra operations per edge and head (score add, LeakyReLU, exponent, normalisation,
/// weighting) \[estimate\].
const GAT_EDGE_FLOPS_PER_HEAD: u64 = 5;

impl StepModel {
    /// The layers of `view` in GNN order (the farthest hop first), with their widths.
    pub fn layers(&self, view: &SubgraphView<'_>) -> Vec<LayerShape> {
        self.layers_of(&counts(view))
    }

    /// The layers of a subgraph with layer counts `counts` (hop order) in GNN order (the
    /// farthest hop first), with their widths.
    pub fn layers_of(&self, counts: &[LayerCounts]) -> Vec<LayerShape> {
        let count = counts.len();
        (0..count)
            .rev()
            .enumerate()
            .map(|(k, hop)| {
                let c = counts[hop];
                let last = k + 1 == count;
                let in_dim = if k == 0 { self.in_dim } else { self.hidden };
                let (dst, src) = (u64::from(c.dst_count), u64::from(c.src_count));
                match self.model {
                    // Self and neighbour weights on the destination rows; aggregation of the
                    // sources' input rows.
                    ModelKind::Sage | ModelKind::Gcn => LayerShape {
                        dst_nodes: dst,
                        src_nodes: src,
                        edges: u64::from(c.edge_count),
                        in_dim,
                        out_dim: if last { self.classes } else { self.hidden },
                        matrices: if self.model == ModelKind::Sage { 2 } else { 1 },
                        product_rows: dst,
                        aggregate_dim: in_dim,
                        edge_extra_flops: 0,
                    },
                    // One projection of every source row (heads × per-head width: the hidden
                    // width, or heads × classes at the last layer, averaged after), attention
                    // on every edge, aggregation of the projected rows.
                    ModelKind::Gat => {
                        let heads = self.heads.max(1);
                        let out_dim = if last {
                            heads * self.classes
                        } else {
                            self.hidden
                        };
                        LayerShape {
                            dst_nodes: dst,
                            src_nodes: src,
                            edges: u64::from(c.edge_count),
                            in_dim,
                            out_dim,
                            matrices: 1,
                            product_rows: src,
                            aggregate_dim: out_dim,
                            edge_extra_flops: GAT_EDGE_FLOPS_PER_HEAD * heads,
                        }
                    }
                }
            })
            .collect()
    }

    /// Bytes of the step's input copied to the accelerator: the input layer's feature rows, the
    /// index tensors and the targets' labels.
    pub fn input_bytes(&self, view: &SubgraphView<'_>) -> u64 {
        self.input_bytes_of(&counts(view))
    }

    /// [`Self::input_bytes`] of a subgraph with layer counts `counts` (hop order).
    pub fn input_bytes_of(&self, counts: &[LayerCounts]) -> u64 {
        let (Some(first), Some(last)) = (counts.first(), counts.last()) else {
            return 0;
        };
        let nodes = u64::from(last.src_count);
        let edges: u64 = counts.iter().map(|c| u64::from(c.edge_count)).sum();
        let targets = u64::from(first.dst_count);
        nodes
            .saturating_mul(self.feature_row_bytes)
            .saturating_add(edges.saturating_mul(INDEX_BYTES_PER_EDGE))
            .saturating_add(targets.saturating_mul(LABEL_BYTES))
    }

    /// The modelled step over `view`, ns.
    pub fn step_ns(&self, view: &SubgraphView<'_>) -> u64 {
        self.step_ns_of(&counts(view))
    }

    /// The modelled step over a subgraph with layer counts `counts` (hop order), ns.
    pub fn step_ns_of(&self, counts: &[LayerCounts]) -> u64 {
        self.accelerator
            .step_ns(&self.layers_of(counts), self.input_bytes_of(counts))
    }
}

/// The layer counts of `view`, hop order.
fn counts(view: &SubgraphView<'_>) -> Vec<LayerCounts> {
    (0..view.layer_count())
        .map(|l| view.layer(l).counts)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagessd_runtime::sampler::{ReferenceSampler, Sampler};

    #[test]
    fn layers_run_from_the_farthest_hop_with_the_models_widths() {
        let g =
            sagessd_runtime::rmat::generate(&sagessd_runtime::rmat::RmatParams::graph500(8, 8, 3))
                .unwrap();
        let sub = ReferenceSampler::new(&g)
            .sample(7, &[5, 3], &[1, 2, 3])
            .unwrap();
        let view = sub.view();
        let m = StepModel {
            accelerator: TrainerConfig::default(),
            model: ModelKind::Sage,
            in_dim: 16,
            hidden: 32,
            classes: 4,
            heads: 1,
            feature_row_bytes: 64,
        };
        let layers = m.layers(&view);
        assert_eq!(layers.len(), 2);
        // GNN layer 0 reads the second hop's sources, in width 16, out 32; layer 1 outputs the
        // three targets' four classes.
        let (hop1, hop0) = (view.layer(1).counts, view.layer(0).counts);
        assert_eq!(layers[0].src_nodes, u64::from(hop1.src_count));
        assert_eq!((layers[0].in_dim, layers[0].out_dim), (16, 32));
        assert_eq!(layers[1].dst_nodes, 3);
        assert_eq!(u64::from(hop0.dst_count), 3);
        assert_eq!(
            (layers[1].in_dim, layers[1].out_dim, layers[1].matrices),
            (32, 4, 2)
        );
        // Input: the rows of every node, 16 bytes per edge, 8 per target.
        let edges = u64::from(hop0.edge_count + hop1.edge_count);
        assert_eq!(
            m.input_bytes(&view),
            u64::from(hop1.src_count) * 64 + 16 * edges + 24
        );
        assert!(m.step_ns(&view) >= TrainerConfig::default().fixed_ns(2));
        // GCN: one matrix; GAT: attention work on every edge.
        let gcn = StepModel {
            model: ModelKind::Gcn,
            ..m
        };
        assert_eq!(gcn.layers(&view)[0].matrices, 1);
        // GAT projects every source row, to heads × classes at the last layer, and aggregates
        // the projected rows.
        let gat = StepModel {
            model: ModelKind::Gat,
            heads: 4,
            ..m
        };
        let g = gat.layers(&view);
        assert_eq!(g[1].edge_extra_flops, 20);
        assert_eq!(g[0].product_rows, u64::from(hop1.src_count));
        assert_eq!((g[1].out_dim, g[1].aggregate_dim), (16, 16));
        assert_eq!(
            (layers[0].product_rows, layers[0].aggregate_dim),
            (layers[0].dst_nodes, 16)
        );
    }
}
