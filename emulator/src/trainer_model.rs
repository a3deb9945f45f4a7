//! `[trainer]`: the accelerator a GNN trains on, as the modelled epoch times one training step
//! (SmartSAGE Figs. 6, 7 and 18 put a GPU behind the producers). A step is priced by a roofline:
//! each layer's forward pass takes the longer of its arithmetic at the peak rate and its memory
//! traffic at the memory bandwidth, the backward pass twice that, plus the minibatch's copy to
//! the accelerator and a fixed cost per step and per layer (the host's work launching the
//! kernels and reading the loss back, which a step of a sampled minibatch waits on on a fast GPU).
//!
//! Peak rates make the roofline an optimistic price for a step's work (small GNN kernels reach a
//! fraction of peak; the first layer's backward pass, which needs no input gradient, is charged
//! in full). The rates are a datasheet's and the fixed costs were measured on a GPU
//! (`sagessd bench step --measured`, `docs/model.md`); none is fitted to a paper's result.

use serde::{Deserialize, Serialize};

use crate::error::EmulatorError;

/// Longest fixed cost accepted (10 s): larger values are unit mistakes.
const MAX_OVERHEAD_NS: u64 = 10_000_000_000;
/// The backward pass's cost relative to the forward pass (gradients of both a layer's input and
/// its weights: two products of the forward's size).
const BACKWARD_OVER_FORWARD: u64 = 2;
/// Bytes of one activation or weight element (f32).
const ELEMENT_BYTES: u64 = 4;

/// Fixed cost of a step besides its layers', ns \[measured: a PyTorch eager GraphSAGE step
/// driven from Python on an NVIDIA H200 host, fitted with [`LAYER_OVERHEAD_NS`] to the five
/// steps in `docs/experiments/gpu/`: `sagessd bench step --accelerator h200 --measured …`\].
const STEP_OVERHEAD_NS: u64 = 100_000;
/// Fixed cost of each GNN layer of a step, ns: launching its forward and backward kernels and
/// its parameters' Adam updates from the host \[measured as [`STEP_OVERHEAD_NS`]: a three-layer
/// step of 7 edges takes 3.97 ms, a two-layer step of 68 k edges 2.74 ms\].
const LAYER_OVERHEAD_NS: u64 = 1_300_000;

/// `[trainer]`: the accelerator's rates. Optional in TOML, as is each field: without it, the
/// default, an NVIDIA V100 PCIe (16 GB) in a PCIe 3.0 x16 slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainerConfig {
    /// Peak single-precision arithmetic, GFLOP/s. Default 14,000 (NVIDIA V100 PCIe datasheet:
    /// 14 TFLOPS FP32).
    pub peak_gflop_per_s: u64,
    /// Memory bandwidth, GB/s. Default 900 (V100 datasheet: HBM2, 900 GB/s).
    pub memory_gb_per_s: u64,
    /// Host-to-accelerator copy bandwidth, MB/s. Default 12,000 \[estimate: PCIe 3.0 x16 carries
    /// 15.75 GB/s raw per direction; pinned copies reach about 12 GB/s\].
    pub host_copy_mb_per_s: u64,
    /// Fixed cost of one step besides its layers', ns (zeroing gradients, the loss and its
    /// read-back). Default 100,000 \[measured: see `docs/model.md`, "Checked on a GPU"\].
    pub step_overhead_ns: u64,
    /// Fixed cost of each GNN layer of a step, ns: the host's work launching the layer's
    /// forward and backward kernels and its parameters' optimizer updates, which the step waits
    /// on whenever the GPU's work is shorter. Default 1,300,000 \[measured as
    /// `step_overhead_ns`, in PyTorch driven from Python; a host CPU's property, so the same
    /// for every GPU that keeps up\].
    pub layer_overhead_ns: u64,
}

impl Default for TrainerConfig {
    fn default() -> Self {
        Self {
            peak_gflop_per_s: 14_000,
            memory_gb_per_s: 900,
            host_copy_mb_per_s: 12_000,
            step_overhead_ns: STEP_OVERHEAD_NS,
            layer_overhead_ns: LAYER_OVERHEAD_NS,
        }
    }
}

/// One GNN layer of a step, as the roofline prices it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerShape {
    /// Destination nodes (the rows the layer outputs).
    pub dst_nodes: u64,
    /// Source nodes (the rows it reads).
    pub src_nodes: u64,
    /// Edges it aggregates over.
    pub edges: u64,
    /// Input width.
    pub in_dim: u64,
    /// Output width.
    pub out_dim: u64,
    /// Weight matrices applied to each of `product_rows` (GraphSAGE: a row's own and its
    /// aggregate's, 2; GCN and GAT: 1).
    pub matrices: u64,
    /// Rows the weight products run over: the destination rows (GraphSAGE, GCN) or every source
    /// row (GAT projects before it attends).
    pub product_rows: u64,
    /// Width of the rows aggregated over the edges (the input width, or GAT's projected width).
    pub aggregate_dim: u64,
    /// Extra operations per edge beyond aggregating `aggregate_dim` values (GAT's attention:
    /// a few per head; 0 for the others).
    pub edge_extra_flops: u64,
}

impl LayerShape {
    /// Floating-point operations of its forward pass: aggregating each edge's row (one add per
    /// element of `aggregate_dim`, plus `edge_extra_flops`), then `matrices` products of
    /// `product_rows` rows with `in_dim × out_dim` weights (a multiply and an add per weight
    /// per row).
    pub fn forward_flops(&self) -> u128 {
        let aggregate = product(&[
            self.edges,
            self.aggregate_dim.saturating_add(self.edge_extra_flops),
        ]);
        let products = product(&[
            2,
            self.product_rows,
            self.matrices,
            self.in_dim,
            self.out_dim,
        ]);
        aggregate.saturating_add(products)
    }

    /// Bytes its forward pass moves through memory: each edge's gathered row, the source rows
    /// read once, the output rows and the weights.
    pub fn forward_bytes(&self) -> u128 {
        let (i, o) = (self.in_dim, self.out_dim);
        [
            product(&[self.edges, self.aggregate_dim]),
            product(&[self.src_nodes, i]),
            product(&[self.dst_nodes, o]),
            product(&[self.matrices, i, o]),
        ]
        .into_iter()
        .fold(0u128, u128::saturating_add)
        .saturating_mul(u128::from(ELEMENT_BYTES))
    }
}

/// The saturating product of `factors`.
fn product(factors: &[u64]) -> u128 {
    factors
        .iter()
        .fold(1u128, |p, &f| p.saturating_mul(u128::from(f)))
}

impl TrainerConfig {
    /// An NVIDIA H200 SXM (141 GB HBM3e) in a PCIe 5.0 x16 host: 67 TFLOPS FP32 without tensor
    /// cores and 4.8 TB/s of memory bandwidth (NVIDIA's H100/H200 datasheets; the H200 keeps
    /// the H100 SXM's GH100 and its arithmetic), pinned copies at 50 GB/s \[estimate: PCIe 5.0
    /// x16 carries 63 GB/s raw per direction\], and the fixed costs measured on it (the
    /// default's). `sagessd bench step --accelerator h200` prices steps on it, to be set beside
    /// steps measured on such a GPU.
    pub fn nvidia_h200_sxm() -> Self {
        Self {
            peak_gflop_per_s: 67_000,
            memory_gb_per_s: 4_800,
            host_copy_mb_per_s: 50_000,
            step_overhead_ns: STEP_OVERHEAD_NS,
            layer_overhead_ns: LAYER_OVERHEAD_NS,
        }
    }

    /// Modelled time of one training step over `layers` whose input (features, indices and
    /// labels) is `input_bytes` on the host: per layer the forward roofline
    /// `max(flops / peak, bytes / bandwidth)`, times one plus `BACKWARD_OVER_FORWARD`, plus the
    /// copy and the fixed costs ([`TrainerConfig::fixed_ns`]), ns (saturating).
    pub fn step_ns(&self, layers: &[LayerShape], input_bytes: u64) -> u64 {
        // GFLOP/s is FLOP per ns, GB/s bytes per ns; MB/s a thousandth of a byte per ns.
        let forward_ns = layers
            .iter()
            .map(|l| {
                let compute = l
                    .forward_flops()
                    .div_ceil(u128::from(self.peak_gflop_per_s.max(1)));
                let memory = l
                    .forward_bytes()
                    .div_ceil(u128::from(self.memory_gb_per_s.max(1)));
                compute.max(memory)
            })
            .fold(0u128, u128::saturating_add);
        let copy_ns =
            (u128::from(input_bytes) * 1000).div_ceil(u128::from(self.host_copy_mb_per_s.max(1)));
        let total = forward_ns
            .saturating_mul(u128::from(1 + BACKWARD_OVER_FORWARD))
            .saturating_add(copy_ns)
            .saturating_add(u128::from(self.fixed_ns(layers.len())));
        u64::try_from(total).unwrap_or(u64::MAX)
    }

    /// The fixed cost of a step of `layers` GNN layers, ns (saturating): what a step of no work
    /// takes.
    pub fn fixed_ns(&self, layers: usize) -> u64 {
        let layers = u64::try_from(layers).unwrap_or(u64::MAX);
        self.layer_overhead_ns
            .saturating_mul(layers)
            .saturating_add(self.step_overhead_ns)
    }

    /// Its rates and fixed costs in words, for reports.
    pub fn describe(&self) -> String {
        format!(
            "{} GFLOP/s, {} GB/s, host copies at {} MB/s, a fixed {} µs a step and {} µs a layer",
            self.peak_gflop_per_s,
            self.memory_gb_per_s,
            self.host_copy_mb_per_s,
            self.step_overhead_ns / 1000,
            self.layer_overhead_ns / 1000
        )
    }

    /// Checks every field; the error names the first bad one (e.g. `trainer.memory_gb_per_s`).
    pub fn validate(&self) -> Result<(), EmulatorError> {
        for (value, field) in [
            (self.peak_gflop_per_s, "trainer.peak_gflop_per_s"),
            (self.memory_gb_per_s, "trainer.memory_gb_per_s"),
            (self.host_copy_mb_per_s, "trainer.host_copy_mb_per_s"),
        ] {
            if value == 0 {
                return Err(EmulatorError::InvalidConfig {
                    field,
                    reason: "must be at least 1".into(),
                });
            }
        }
        for (value, field) in [
            (self.step_overhead_ns, "trainer.step_overhead_ns"),
            (self.layer_overhead_ns, "trainer.layer_overhead_ns"),
        ] {
            if value > MAX_OVERHEAD_NS {
                return Err(EmulatorError::InvalidConfig {
                    field,
                    reason: format!("must be at most {MAX_OVERHEAD_NS} ns (got {value})"),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_the_roofline_of_its_layers_plus_copy_and_overhead() {
        let t = TrainerConfig {
            peak_gflop_per_s: 1_000,
            memory_gb_per_s: 100,
            host_copy_mb_per_s: 1_000,
            step_overhead_ns: 50,
            layer_overhead_ns: 7,
        };
        // 10 edges × 8 + 2 × 4 rows × 2 matrices × 8 × 16 = 80 + 2,048 = 2,128 FLOP → 3 ns at
        // 1 FLOP/ps; bytes 4 × (80 + 6 × 8 + 4 × 16 + 2 × 128) = 1,792 → 18 ns at 100 B/ns:
        // memory-bound, 18 ns forward, 54 with backward.
        let l = LayerShape {
            dst_nodes: 4,
            src_nodes: 6,
            edges: 10,
            in_dim: 8,
            out_dim: 16,
            matrices: 2,
            product_rows: 4,
            aggregate_dim: 8,
            edge_extra_flops: 0,
        };
        assert_eq!(l.forward_flops(), 2_128);
        assert_eq!(l.forward_bytes(), 1_792);
        // 2,000 input bytes at 1 byte/ns: 2,000 ns.
        assert_eq!(t.step_ns(&[l], 2_000), 54 + 2_000 + 50 + 7);
        // Two such layers: twice the work and the per-layer cost, the step's cost once.
        assert_eq!(t.step_ns(&[l, l], 0), 2 * 54 + 50 + 2 * 7);
        // A wide layer: 2 × 1 × 1 × 1,000 × 1,000 FLOP = 2 M → 2,000 ns, but its weights are
        // 4 × (1,000 + 1,000 + 10^6) = 4,008,000 bytes → 40,080 ns: memory-bound.
        let wide = LayerShape {
            dst_nodes: 1,
            src_nodes: 1,
            edges: 0,
            in_dim: 1_000,
            out_dim: 1_000,
            matrices: 1,
            product_rows: 1,
            aggregate_dim: 1_000,
            edge_extra_flops: 0,
        };
        assert_eq!(t.step_ns(&[wide], 0), 3 * 40_080 + 57);
        // Faster memory: now the arithmetic bounds it.
        let fast = TrainerConfig {
            memory_gb_per_s: 1_000_000,
            ..t
        };
        assert_eq!(fast.step_ns(&[wide], 0), 3 * 2_000 + 57);
    }

    #[test]
    fn the_default_validates_and_zero_rates_are_refused() {
        assert!(TrainerConfig::default().validate().is_ok());
        let bad = TrainerConfig {
            memory_gb_per_s: 0,
            ..TrainerConfig::default()
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("trainer.memory_gb_per_s"), "{e}");
        let bad = TrainerConfig {
            step_overhead_ns: u64::MAX,
            ..TrainerConfig::default()
        };
        assert!(bad.validate().is_err());
        let bad = TrainerConfig {
            layer_overhead_ns: MAX_OVERHEAD_NS + 1,
            ..TrainerConfig::default()
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("trainer.layer_overhead_ns"), "{e}");
        // A table that names some fields takes the others from the default.
        let partial: TrainerConfig = toml::from_str("peak_gflop_per_s = 1000").unwrap();
        assert_eq!(
            partial,
            TrainerConfig {
                peak_gflop_per_s: 1000,
                ..TrainerConfig::default()
            }
        );
        // Huge shapes saturate instead of overflowing.
        let huge = LayerShape {
            dst_nodes: u64::MAX,
            src_nodes: u64::MAX,
            edges: u64::MAX,
            in_dim: u64::MAX,
            out_dim: u64::MAX,
            matrices: 2,
            product_rows: u64::MAX,
            aggregate_dim: u64::MAX,
            edge_extra_flops: 0,
        };
        assert_eq!(
            TrainerConfig::default().step_ns(&[huge], u64::MAX),
            u64::MAX
        );
    }
}
