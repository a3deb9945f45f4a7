//! One minibatch as tensors: the blocks of a message-flow graph, input features and labels.
//!
//! ```text
//!  SubgraphView (hop order: layer 0 = targets)      Mfg (GNN order: blocks[0] = input layer)
//!    layer L-1  ── dst ⊂ src = all nodes  ──────▶    blocks[0]      x: [node_count, dim]
//!    ...                                             ...
//!    layer 0    ── dst = targets          ──────▶    blocks[L-1]    labels: [targets]
//! ```
//!
//! Every destination set is a prefix of its source set, so a node's own representation at a
//! layer is `h_src.narrow(0, 0, dst_count)`. Both constructors turn a CSR into edge lists through
//! one function, [`Block::from_csr`], which also validates it.

use sagessd_abi::subgraph::SubgraphView;
use tch::{Device, Tensor};

use crate::error::TrainError;
pub use crate::features::FeatureDtype;
use crate::features::features_tensor;

/// One GNN layer's bipartite graph: `src_count` source rows feed `dst_count` destination rows,
/// the destinations being the first `dst_count` sources.
#[derive(Debug)]
pub struct Block {
    /// Destination nodes (rows of this layer's output).
    pub dst_count: i64,
    /// Source nodes (rows of this layer's input).
    pub src_count: i64,
    /// `i64 [E]`: the destination of each edge, in CSR order.
    pub dst_index: Tensor,
    /// `i64 [E]`: the source of each edge, `< src_count`.
    pub src_index: Tensor,
    /// `f32 [dst_count]`: sampled in-degree of each destination, unclamped (0 for a node with
    /// no sampled neighbour; a mean clamps it to 1, GCN adds its self loop).
    pub in_degree: Tensor,
    /// `f32 [src_count]`: edges leaving each source within this block (GCN's source degree).
    pub out_degree: Tensor,
}

impl Block {
    /// Expands a local CSR (`dst_count + 1` row pointers, indices into `0..src_count`) into edge
    /// lists and degrees on `device`; the one CSR expansion both [`Mfg`] constructors use.
    /// Rejects a CSR that contradicts itself rather than panicking.
    pub fn from_csr(
        indptr: &[i64],
        indices: &[i64],
        src_count: i64,
        device: Device,
    ) -> Result<Block, TrainError> {
        let dst_count = indptr
            .len()
            .checked_sub(1)
            .ok_or(TrainError::Csr("empty indptr"))?;
        if indptr[0] != 0 || indptr[dst_count] != indices.len() as i64 {
            return Err(TrainError::Csr("indptr must run from 0 to the edge count"));
        }
        if indptr.windows(2).any(|row| row[1] < row[0]) {
            return Err(TrainError::Csr("indptr decreases"));
        }
        if dst_count as i64 > src_count {
            return Err(TrainError::Csr("more destinations than sources"));
        }
        // Monotone from 0 to the edge count: every degree is in 0..=E.
        let mut dst_index = Vec::with_capacity(indices.len());
        let mut in_degree = Vec::with_capacity(dst_count);
        for (dst, row) in indptr.windows(2).enumerate() {
            let degree = row[1] - row[0];
            dst_index.extend(std::iter::repeat_n(dst as i64, degree as usize));
            in_degree.push(degree as f32);
        }
        let mut out_degree = vec![0f32; src_count as usize];
        for &src in indices {
            let slot = usize::try_from(src)
                .ok()
                .and_then(|s| out_degree.get_mut(s))
                .ok_or(TrainError::Csr("index outside the source set"))?;
            *slot += 1.0;
        }
        Ok(Block {
            dst_count: dst_count as i64,
            src_count,
            dst_index: Tensor::f_from_slice(&dst_index)?.f_to_device(device)?,
            src_index: Tensor::f_from_slice(indices)?.f_to_device(device)?,
            in_degree: Tensor::f_from_slice(&in_degree)?.f_to_device(device)?,
            out_degree: Tensor::f_from_slice(&out_degree)?.f_to_device(device)?,
        })
    }

    /// The same block sharing its tensors' storage (blocks of a full graph are all alike).
    fn shallow_clone(&self) -> Block {
        Block {
            dst_count: self.dst_count,
            src_count: self.src_count,
            dst_index: self.dst_index.shallow_clone(),
            src_index: self.src_index.shallow_clone(),
            in_degree: self.in_degree.shallow_clone(),
            out_degree: self.out_degree.shallow_clone(),
        }
    }
}

/// The tensors of one minibatch on one device.
#[derive(Debug)]
pub struct Mfg {
    /// One block per GNN layer, input layer first; the last block's destinations are the targets.
    pub blocks: Vec<Block>,
    /// `f32 [node_count, dim]`: input features of every source of the first block.
    pub x: Tensor,
    /// `i64 [labelled nodes]`: class ids of the last block's destinations, in order.
    pub labels: Tensor,
}

impl Mfg {
    /// The minibatch of a sampled subgraph: its layers reversed into GNN order, `features` (one
    /// row of `dim` values per node, node-list order) and one label per target. Lengths are
    /// checked; a mismatch is an error, never a panic.
    pub fn from_subgraph(
        view: &SubgraphView<'_>,
        features: &[u8],
        dtype: FeatureDtype,
        dim: usize,
        labels: &[i64],
        device: Device,
    ) -> Result<Mfg, TrainError> {
        let layer_count = view.layer_count();
        let node_count = view.layer(layer_count - 1).counts.src_count as usize;
        let target_count = view.layer(0).counts.dst_count as usize;
        let x = features_tensor(features, dtype, node_count, dim, device)?;
        let labels = labels_tensor(labels, target_count, device)?;
        let blocks = (0..layer_count)
            .rev()
            .map(|l| {
                let layer = view.layer(l);
                let indptr: Vec<i64> = layer.indptr.iter().map(|p| i64::from(p.get())).collect();
                let indices: Vec<i64> = layer.indices.iter().map(|i| i64::from(i.get())).collect();
                Block::from_csr(&indptr, &indices, i64::from(layer.counts.src_count), device)
            })
            .collect::<Result<_, _>>()?;
        Ok(Mfg { blocks, x, labels })
    }

    /// [`Self::from_subgraph`] with the targets' labels looked up in `labels_of_nodes` (every
    /// node's label, `-1` for unlabelled): a target without a label is an error.
    pub fn from_labelled_subgraph(
        view: &SubgraphView<'_>,
        features: &[u8],
        dtype: FeatureDtype,
        dim: usize,
        labels_of_nodes: &[i64],
        device: Device,
    ) -> Result<Mfg, TrainError> {
        let targets = view.layer(0).counts.dst_count as usize;
        let labels: Vec<i64> = view.nodes()[..targets]
            .iter()
            .map(|v| {
                usize::try_from(v.get())
                    .ok()
                    .and_then(|i| labels_of_nodes.get(i).copied())
                    .filter(|&l| l >= 0)
                    .ok_or(TrainError::Spec("a minibatch target has no label"))
            })
            .collect::<Result<_, _>>()?;
        Self::from_subgraph(view, features, dtype, dim, &labels, device)
    }

    /// The full-neighbourhood minibatch of a whole small graph (CSR over node ids `0..n`, the
    /// neighbours of node `v` being `indices[indptr[v]..indptr[v + 1]]`): `layers` identical
    /// blocks with every node a destination and a source, features of all `n` nodes and labels
    /// of all `n` nodes, so that a caller scores a subset by row index.
    #[allow(clippy::too_many_arguments)] // the graph, its features and its labels, each named
    pub fn full_graph(
        indptr: &[u64],
        indices: &[u64],
        layers: usize,
        features: &[u8],
        dtype: FeatureDtype,
        dim: usize,
        labels_of_nodes: &[i64],
        device: Device,
    ) -> Result<Mfg, TrainError> {
        if layers == 0 {
            return Err(TrainError::Spec(
                "a full-graph minibatch needs at least one layer",
            ));
        }
        let node_count = indptr
            .len()
            .checked_sub(1)
            .ok_or(TrainError::Csr("empty indptr"))?;
        let x = features_tensor(features, dtype, node_count, dim, device)?;
        let labels = labels_tensor(labels_of_nodes, node_count, device)?;
        let block = Block::from_csr(
            &to_i64(indptr)?,
            &to_i64(indices)?,
            node_count as i64,
            device,
        )?;
        Ok(Mfg {
            blocks: (0..layers).map(|_| block.shallow_clone()).collect(),
            x,
            labels,
        })
    }
}

/// Node ids and offsets as torch's index type; a value above `i64::MAX` is an error.
fn to_i64(values: &[u64]) -> Result<Vec<i64>, TrainError> {
    values
        .iter()
        .map(|&v| i64::try_from(v).map_err(|_| TrainError::Csr("value above i64::MAX")))
        .collect()
}

/// The labels as an `i64` tensor, after checking there is one per labelled node.
fn labels_tensor(labels: &[i64], expected: usize, device: Device) -> Result<Tensor, TrainError> {
    if labels.len() != expected {
        return Err(TrainError::LabelCount {
            expected,
            actual: labels.len(),
        });
    }
    Ok(Tensor::f_from_slice(labels)?.f_to_device(device)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{LayerSpec, f32_bytes, floats, subgraph_bytes};

    fn ints(t: &Tensor) -> Vec<i64> {
        Vec::<i64>::try_from(t).unwrap()
    }

    /// Targets [10, 11]. Hop layer 0: 10 ← {11, 12}, 11 ← {} (degree 0); sources [10, 11, 12].
    /// Hop layer 1: 10 ← {13}, 11 ← {10, 12}, 12 ← {13, 11}; sources [10, 11, 12, 13].
    fn two_layer() -> Vec<u8> {
        subgraph_bytes(
            &[10, 11, 12, 13],
            &[
                LayerSpec {
                    src_count: 3,
                    indptr: vec![0, 2, 2],
                    indices: vec![1, 2],
                },
                LayerSpec {
                    src_count: 4,
                    indptr: vec![0, 1, 3, 5],
                    indices: vec![3, 0, 2, 3, 1],
                },
            ],
        )
    }

    #[test]
    fn subgraph_blocks_match_hand_expansion() {
        let bytes = two_layer();
        let view = SubgraphView::parse(&bytes).unwrap();
        let features: Vec<f32> = (0..8).map(|v| v as f32).collect();
        let mfg = Mfg::from_subgraph(
            &view,
            &f32_bytes(&features),
            FeatureDtype::F32,
            2,
            &[1, 0],
            Device::Cpu,
        )
        .unwrap();
        assert_eq!(mfg.blocks.len(), 2);
        // GNN input layer = hop layer 1.
        let input = &mfg.blocks[0];
        assert_eq!((input.dst_count, input.src_count), (3, 4));
        assert_eq!(ints(&input.dst_index), vec![0, 1, 1, 2, 2]);
        assert_eq!(ints(&input.src_index), vec![3, 0, 2, 3, 1]);
        assert_eq!(floats(&input.in_degree), vec![1.0, 2.0, 2.0]);
        assert_eq!(floats(&input.out_degree), vec![1.0, 1.0, 1.0, 2.0]);
        // GNN output layer = hop layer 0, destinations = targets.
        let output = &mfg.blocks[1];
        assert_eq!((output.dst_count, output.src_count), (2, 3));
        assert_eq!(ints(&output.dst_index), vec![0, 0]);
        assert_eq!(ints(&output.src_index), vec![1, 2]);
        assert_eq!(floats(&output.in_degree), vec![2.0, 0.0]);
        assert_eq!(floats(&output.out_degree), vec![0.0, 1.0, 1.0]);
        assert_eq!(mfg.x.size(), vec![4, 2]);
        assert_eq!(floats(&mfg.x), features);
        assert_eq!(ints(&mfg.labels), vec![1, 0]);
    }

    #[test]
    fn malformed_input_is_an_error() {
        let bytes = two_layer();
        let view = SubgraphView::parse(&bytes).unwrap();
        let good = f32_bytes(&[0.0; 8]);
        let build = |features: &[u8], dtype, labels: &[i64]| {
            Mfg::from_subgraph(&view, features, dtype, 2, labels, Device::Cpu)
        };
        assert!(build(&good, FeatureDtype::F32, &[0, 1]).is_ok());
        assert!(matches!(
            build(&good[..31], FeatureDtype::F32, &[0, 1]),
            Err(TrainError::FeatureLength {
                expected_bytes: 32,
                actual_bytes: 31,
                ..
            })
        ));
        assert!(matches!(
            build(&good, FeatureDtype::F16, &[0, 1]),
            Err(TrainError::FeatureLength {
                expected_bytes: 16,
                ..
            })
        ));
        assert!(matches!(
            build(&good, FeatureDtype::F32, &[0, 1, 1]),
            Err(TrainError::LabelCount {
                expected: 2,
                actual: 3
            })
        ));
        let full = |indptr: &[u64], indices: &[u64], labels: &[i64]| {
            Mfg::full_graph(
                indptr,
                indices,
                2,
                &good[..24],
                FeatureDtype::F32,
                2,
                labels,
                Device::Cpu,
            )
        };
        assert!(full(&[0, 1, 2, 2], &[1, 0], &[0, 1, 0]).is_ok());
        assert!(matches!(
            full(&[0, 1, 2, 2], &[1, 0], &[0, 1]),
            Err(TrainError::LabelCount { .. })
        ));
        assert!(matches!(
            full(&[0, 1, 2, 2], &[1, 3], &[0, 1, 0]),
            Err(TrainError::Csr(_))
        ));
        assert!(matches!(
            full(&[0, 2, 1, 2], &[1, 0], &[0, 1, 0]),
            Err(TrainError::Csr(_))
        ));
        assert!(matches!(
            full(&[0, 1, 2, 3], &[1, 0], &[0, 1, 0]),
            Err(TrainError::Csr(_))
        ));
        assert!(matches!(full(&[], &[], &[]), Err(TrainError::Csr(_))));
        assert!(matches!(
            full(&[0, 1, 2, 2], &[1, u64::MAX], &[0, 1, 0]),
            Err(TrainError::Csr(_))
        ));
    }

    #[test]
    fn full_graph_blocks_cover_every_node() {
        // 0 ← {1, 2}, 1 ← {0}, 2 ← {}.
        let features = f32_bytes(&[1.0, 2.0, 3.0]);
        let mfg = Mfg::full_graph(
            &[0, 2, 3, 3],
            &[1, 2, 0],
            3,
            &features,
            FeatureDtype::F32,
            1,
            &[0, 1, 1],
            Device::Cpu,
        )
        .unwrap();
        assert_eq!(mfg.blocks.len(), 3);
        for block in &mfg.blocks {
            assert_eq!((block.dst_count, block.src_count), (3, 3));
            assert_eq!(ints(&block.dst_index), vec![0, 0, 1]);
            assert_eq!(ints(&block.src_index), vec![1, 2, 0]);
            assert_eq!(floats(&block.in_degree), vec![2.0, 1.0, 0.0]);
            assert_eq!(floats(&block.out_degree), vec![1.0, 1.0, 1.0]);
        }
        assert_eq!(ints(&mfg.labels), vec![0, 1, 1]);
    }
}
