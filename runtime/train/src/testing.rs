//! Test support: hand-built subgraph bytes, a synthetic separable graph, and the lock that
//! serialises tests using torch's global random generator.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use sagessd_abi::rng::SplitMix64;
use sagessd_abi::subgraph::{LayerCounts, SubgraphLayout, SubgraphView};
use tch::{Device, Tensor};

use crate::mfg::{FeatureDtype, Mfg};

/// Torch's generator is process-global: tests that seed it and draw from it (weight init,
/// dropout) hold this lock, or a concurrent test would interleave its draws.
pub(crate) fn torch_rng_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One hop layer of a hand-built subgraph; `dst_count` is `indptr.len() - 1`.
pub(crate) struct LayerSpec {
    pub src_count: u32,
    pub indptr: Vec<u32>,
    pub indices: Vec<u32>,
}

/// The bytes of a subgraph with node list `nodes` and `layers` in hop order (no features).
pub(crate) fn subgraph_bytes(nodes: &[u64], layers: &[LayerSpec]) -> Vec<u8> {
    let counts: Vec<LayerCounts> = layers
        .iter()
        .map(|l| LayerCounts {
            dst_count: l.indptr.len() as u32 - 1,
            src_count: l.src_count,
            edge_count: l.indices.len() as u32,
        })
        .collect();
    let layout = SubgraphLayout::new(&counts).unwrap();
    let mut out = vec![0u8; layout.total_size_bytes()];
    layout.write_head(7, &mut out).unwrap();
    let mut put = |offset: usize, bytes: Vec<u8>| {
        out[offset..offset + bytes.len()].copy_from_slice(&bytes);
    };
    put(
        layout.nodes_offset(),
        nodes.iter().flat_map(|n| n.to_le_bytes()).collect(),
    );
    for (l, layer) in layers.iter().enumerate() {
        let words = |w: &[u32]| w.iter().flat_map(|v| v.to_le_bytes()).collect();
        put(layout.indptr_offset(l), words(&layer.indptr));
        put(layout.indices_offset(l), words(&layer.indices));
    }
    out
}

/// Values as little-endian f32 bytes, the feature format of [`FeatureDtype::F32`].
pub(crate) fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Every value of an f32 tensor, row-major.
pub(crate) fn floats(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()
}

/// Two classes, features = one-hot class + uniform noise, a homophilous random graph
/// (each node has 4 in-neighbours, each of its own class with probability 0.8).
pub(crate) struct Synthetic {
    pub indptr: Vec<u64>,
    pub indices: Vec<u64>,
    pub features: Vec<f32>,
    pub labels: Vec<i64>,
    pub dim: usize,
}

impl Synthetic {
    pub fn new(node_count: usize, seed: u64) -> Synthetic {
        let dim = 6;
        let mut rng = SplitMix64::new(seed);
        let labels: Vec<i64> = (0..node_count).map(|_| rng.below(2) as i64).collect();
        let of_class: [Vec<u64>; 2] = [0, 1].map(|c| {
            (0..node_count as u64)
                .filter(|&v| labels[v as usize] == c)
                .collect()
        });
        let mut indptr = vec![0u64];
        let mut indices = Vec::new();
        for &label in &labels {
            for _ in 0..4 {
                let class = if rng.next_f64() < 0.8 {
                    label
                } else {
                    1 - label
                };
                let pool = &of_class[class as usize];
                indices.push(pool[rng.below(pool.len() as u64) as usize]);
            }
            indptr.push(indices.len() as u64);
        }
        let mut features = Vec::with_capacity(node_count * dim);
        for &label in &labels {
            for d in 0..dim {
                let hot = if d as i64 == label { 1.0 } else { 0.0 };
                features.push(hot + 0.6 * (rng.next_f64() as f32 - 0.5));
            }
        }
        Synthetic {
            indptr,
            indices,
            features,
            labels,
            dim,
        }
    }

    fn feature_bytes(&self, nodes: impl Iterator<Item = u64>) -> Vec<u8> {
        let rows: Vec<f32> = nodes
            .flat_map(|v| &self.features[v as usize * self.dim..(v as usize + 1) * self.dim])
            .copied()
            .collect();
        f32_bytes(&rows)
    }

    /// Every node a target, full neighbourhoods.
    pub fn full_mfg(&self, layers: usize) -> Mfg {
        let n = self.labels.len() as u64;
        let bytes = self.feature_bytes(0..n);
        Mfg::full_graph(
            &self.indptr,
            &self.indices,
            layers,
            &bytes,
            FeatureDtype::F32,
            self.dim,
            &self.labels,
            Device::Cpu,
        )
        .unwrap()
    }

    /// The `layers`-hop full-neighbourhood subgraph of `targets`, through subgraph bytes.
    pub fn minibatch(&self, targets: &[u64], layers: usize) -> Mfg {
        let mut nodes: Vec<u64> = targets.to_vec();
        let mut local: HashMap<u64, u32> = nodes
            .iter()
            .enumerate()
            .map(|(i, &v)| (v, i as u32))
            .collect();
        let mut hops = Vec::new();
        for _ in 0..layers {
            let dst_count = nodes.len();
            let (mut indptr, mut indices) = (vec![0u32], Vec::new());
            for d in 0..dst_count {
                let v = nodes[d] as usize;
                for &u in &self.indices[self.indptr[v] as usize..self.indptr[v + 1] as usize] {
                    let next = local.len() as u32;
                    let id = *local.entry(u).or_insert(next);
                    if id == next {
                        nodes.push(u);
                    }
                    indices.push(id);
                }
                indptr.push(indices.len() as u32);
            }
            hops.push(LayerSpec {
                src_count: nodes.len() as u32,
                indptr,
                indices,
            });
        }
        let bytes = subgraph_bytes(&nodes, &hops);
        let view = SubgraphView::parse(&bytes).unwrap();
        let labels: Vec<i64> = targets.iter().map(|&t| self.labels[t as usize]).collect();
        let features = self.feature_bytes(nodes.iter().copied());
        Mfg::from_subgraph(
            &view,
            &features,
            FeatureDtype::F32,
            self.dim,
            &labels,
            Device::Cpu,
        )
        .unwrap()
    }
}
