//! The training step and evaluation: a model, its parameters and an Adam optimizer on a device.
//!
//! ```text
//!   TrainConfig ─▶ Trainer::new: manual_seed(seed) → build(model) → Adam
//!   Mfg ─▶ train_step: forward(train) → cross-entropy → zero_grad / backward / step
//!   Mfg ─▶ evaluate:   no_grad forward → loss and accuracy of (a subset of) the targets
//! ```
//!
//! # Determinism
//!
//! On the CPU a run is bit-for-bit reproducible: [`Trainer::new`] seeds torch's global
//! generator with `seed` before building, so the initial weights are a function of the seed;
//! dropout masks are drawn from the same global generator, in the same order, on every run; and
//! every op the models use (gather, `index_add`, `index_reduce("amax")`, matmul, Adam) is
//! deterministic on the CPU. What the caller must hold fixed: the sequence of minibatches, the
//! libtorch build, and the intra-op thread count (`tch::set_num_threads`, the caller's choice,
//! since BLAS reductions are split by thread). The generator being process-global, two trainers
//! interleaving steps in one process draw each other's dropout masks: train one at a time.
//! On CUDA, `index_add` uses atomics, so results vary in the last bits from run to run.

use tch::{Device, Kind, Reduction, Tensor, nn, nn::OptimizerConfig};

use crate::error::TrainError;
use crate::mfg::Mfg;
use crate::model::{GnnModel, ModelKind, build};

/// Where to train, as a user asks for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The CPU, always available.
    Cpu,
    /// The first CUDA device; an error where libtorch sees none.
    Cuda,
    /// CUDA when libtorch sees a device, else the CPU.
    Auto,
}

/// The device for `choice`; asking for CUDA where there is none is
/// [`TrainError::CudaUnavailable`], not a silent fall-back.
pub fn select_device(choice: DeviceChoice) -> Result<Device, TrainError> {
    match choice {
        DeviceChoice::Cpu => Ok(Device::Cpu),
        DeviceChoice::Cuda if tch::Cuda::is_available() => Ok(Device::Cuda(0)),
        DeviceChoice::Cuda => Err(TrainError::CudaUnavailable),
        DeviceChoice::Auto => Ok(Device::cuda_if_available()),
    }
}

/// Everything a [`Trainer`] is built from.
#[derive(Clone, Copy, Debug)]
pub struct TrainConfig {
    /// Which GNN.
    pub model: ModelKind,
    /// Input feature values per node.
    pub in_dim: i64,
    /// Width of hidden representations.
    pub hidden: i64,
    /// Number of classes (logits per target).
    pub classes: i64,
    /// GNN layers, equal to the minibatches' block count.
    pub layers: usize,
    /// GAT attention heads (must divide `hidden`); ignored by SAGE and GCN.
    pub heads: i64,
    /// Dropout probability in training.
    pub dropout: f64,
    /// Adam learning rate.
    pub lr: f64,
    /// Adam L2 weight decay (0: none).
    pub weight_decay: f64,
    /// Seed of torch's global generator, set before the weights are drawn.
    pub seed: u64,
    /// Where parameters live; minibatches must be on the same device.
    pub device: Device,
}

/// The result of one step over a minibatch's targets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepOutcome {
    /// Mean cross-entropy over the scored targets.
    pub loss: f64,
    /// Targets whose highest logit is their label.
    pub correct: u64,
    /// Targets scored.
    pub count: u64,
}

impl StepOutcome {
    /// `correct / count` (NaN for no targets).
    pub fn accuracy(&self) -> f64 {
        self.correct as f64 / self.count as f64
    }
}

/// A model with its parameters and optimizer, stepping over minibatches.
#[derive(Debug)]
pub struct Trainer {
    vs: nn::VarStore,
    model: Box<dyn GnnModel>,
    optimizer: nn::Optimizer,
    device: Device,
    in_dim: i64,
    layers: usize,
}

impl Trainer {
    /// Seeds torch's generator with `config.seed`, builds the model on `config.device` and an
    /// Adam optimizer over its parameters.
    pub fn new(config: &TrainConfig) -> Result<Trainer, TrainError> {
        // The seed's bits, reinterpreted: torch takes a signed seed.
        tch::manual_seed(config.seed as i64);
        let vs = nn::VarStore::new(config.device);
        let model = build(
            config.model,
            &vs.root(),
            config.in_dim,
            config.hidden,
            config.classes,
            config.layers,
            config.heads,
            config.dropout,
        )?;
        let adam = nn::Adam {
            wd: config.weight_decay,
            ..Default::default()
        };
        let optimizer = adam.build(&vs, config.lr)?;
        Ok(Trainer {
            vs,
            model,
            optimizer,
            device: config.device,
            in_dim: config.in_dim,
            layers: config.layers,
        })
    }

    /// One optimisation step on `mfg`'s targets: forward with dropout, cross-entropy,
    /// `zero_grad`, `backward`, `step`. Returns the loss and accuracy before the update.
    pub fn train_step(&mut self, mfg: &Mfg) -> Result<StepOutcome, TrainError> {
        self.check(mfg)?;
        let logits = self.model.forward(mfg, true);
        let (loss, outcome) = score(&logits, &mfg.labels)?;
        self.optimizer.zero_grad();
        loss.f_backward()?;
        self.optimizer.step();
        Ok(outcome)
    }

    /// Loss and accuracy without dropout or gradients, over all targets, or over the target
    /// rows `rows` (`i64`; for a full-graph minibatch, the node ids to score).
    pub fn evaluate(&self, mfg: &Mfg, rows: Option<&Tensor>) -> Result<StepOutcome, TrainError> {
        self.check(mfg)?;
        tch::no_grad(|| {
            let logits = self.model.forward(mfg, false);
            let (_, outcome) = match rows {
                Some(rows) => score(
                    &logits.f_index_select(0, rows)?,
                    &mfg.labels.f_index_select(0, rows)?,
                )?,
                None => score(&logits, &mfg.labels)?,
            };
            Ok(outcome)
        })
    }

    /// Where the parameters live, and so where minibatches must be built.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The parameters, for checkpoints (`save`/`load`) and inspection.
    pub fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    /// Rejects a minibatch the model cannot run on, before any op could panic.
    fn check(&self, mfg: &Mfg) -> Result<(), TrainError> {
        if mfg.blocks.len() != self.layers {
            return Err(TrainError::LayerMismatch {
                expected: self.layers,
                actual: mfg.blocks.len(),
            });
        }
        let width = mfg.x.size().get(1).copied().unwrap_or(0);
        if width != self.in_dim {
            return Err(TrainError::FeatureDim {
                expected: self.in_dim,
                actual: width,
            });
        }
        if mfg.x.device() != self.device {
            return Err(TrainError::DeviceMismatch {
                expected: self.device,
                actual: mfg.x.device(),
            });
        }
        Ok(())
    }
}

/// The mean cross-entropy of `logits` against `labels` (a label outside `0..classes` is a
/// libtorch error), and the step's outcome.
fn score(logits: &Tensor, labels: &Tensor) -> Result<(Tensor, StepOutcome), TrainError> {
    let loss = logits.f_log_softmax(-1, Kind::Float)?.f_nll_loss(
        labels,
        None::<Tensor>,
        Reduction::Mean,
        -100,
    )?;
    let correct = logits
        .f_argmax(-1, false)?
        .f_eq_tensor(labels)?
        .f_sum(Kind::Int64)?
        .f_int64_value(&[])?;
    let outcome = StepOutcome {
        loss: loss.f_double_value(&[])?,
        correct: correct as u64,
        count: labels.size()[0] as u64,
    };
    Ok((loss, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mfg::FeatureDtype;
    use crate::testing::{Synthetic, torch_rng_lock};

    fn config(model: ModelKind, seed: u64) -> TrainConfig {
        TrainConfig {
            model,
            in_dim: 6,
            hidden: 16,
            classes: 2,
            layers: 2,
            heads: 4,
            dropout: 0.2,
            lr: 0.02,
            weight_decay: 5e-4,
            seed,
            device: Device::Cpu,
        }
    }

    /// Trains on the whole synthetic graph; the loss must fall and accuracy reach 0.9.
    fn learns_separable_problem(model: ModelKind) {
        let _rng = torch_rng_lock();
        let data = Synthetic::new(120, 11);
        let mfg = data.full_mfg(2);
        let mut trainer = Trainer::new(&config(model, 1)).unwrap();
        let first = trainer.train_step(&mfg).unwrap();
        let mut last = first;
        for _ in 0..150 {
            last = trainer.train_step(&mfg).unwrap();
        }
        assert!(
            last.loss < 0.5 * first.loss,
            "{model}: {first:?} → {last:?}"
        );
        let all = trainer.evaluate(&mfg, None).unwrap();
        assert_eq!(all.count, 120);
        assert!(all.accuracy() >= 0.9, "{model}: {all:?}");
        let even = Tensor::arange_start_step(0, 120, 2, (Kind::Int64, Device::Cpu));
        let half = trainer.evaluate(&mfg, Some(&even)).unwrap();
        assert_eq!(half.count, 60);
        assert!(half.accuracy() >= 0.9, "{model}: {half:?}");
    }

    #[test]
    fn sage_learns_separable_problem() {
        learns_separable_problem(ModelKind::Sage);
    }

    #[test]
    fn gcn_learns_separable_problem() {
        learns_separable_problem(ModelKind::Gcn);
    }

    #[test]
    fn gat_learns_separable_problem() {
        learns_separable_problem(ModelKind::Gat);
    }

    /// The loss bits of 12 steps cycling over sampled minibatches.
    fn loss_bits(model: ModelKind, seed: u64, batches: &[Mfg]) -> Vec<u64> {
        let mut trainer = Trainer::new(&config(model, seed)).unwrap();
        (0..12)
            .map(|i| {
                trainer
                    .train_step(&batches[i % batches.len()])
                    .unwrap()
                    .loss
                    .to_bits()
            })
            .collect()
    }

    #[test]
    fn same_seed_same_losses_bit_for_bit() {
        let _rng = torch_rng_lock();
        let data = Synthetic::new(80, 5);
        let targets: Vec<u64> = (0..80).collect();
        let batches: Vec<Mfg> = targets.chunks(20).map(|t| data.minibatch(t, 2)).collect();
        for model in ModelKind::ALL {
            let a = loss_bits(model, 42, &batches);
            let b = loss_bits(model, 42, &batches);
            assert_eq!(a, b, "{model}: same seed, different losses");
            let c = loss_bits(model, 43, &batches);
            assert_ne!(a, c, "{model}: different seeds, same losses");
        }
    }

    #[test]
    fn unfit_minibatches_are_errors() {
        let _rng = torch_rng_lock();
        let data = Synthetic::new(20, 2);
        let mut trainer = Trainer::new(&config(ModelKind::Sage, 1)).unwrap();
        assert!(matches!(
            trainer.train_step(&data.full_mfg(3)),
            Err(TrainError::LayerMismatch {
                expected: 2,
                actual: 3
            })
        ));
        let narrow = Mfg::full_graph(
            &data.indptr,
            &data.indices,
            2,
            &vec![0u8; 20 * 4 * 4],
            FeatureDtype::F32,
            4,
            &data.labels,
            Device::Cpu,
        )
        .unwrap();
        assert!(matches!(
            trainer.train_step(&narrow),
            Err(TrainError::FeatureDim {
                expected: 6,
                actual: 4
            })
        ));
        let mut bad_labels = data.full_mfg(2);
        bad_labels.labels = Tensor::full([20], 7, (Kind::Int64, Device::Cpu));
        assert!(matches!(
            trainer.train_step(&bad_labels),
            Err(TrainError::Torch(_))
        ));
        let outside = Tensor::from_slice(&[0i64, 25]);
        let mfg = data.full_mfg(2);
        assert!(matches!(
            trainer.evaluate(&mfg, Some(&outside)),
            Err(TrainError::Torch(_))
        ));
    }

    #[test]
    fn bad_specs_are_errors() {
        let _rng = torch_rng_lock();
        let spec = |f: fn(&mut TrainConfig)| {
            let mut c = config(ModelKind::Gat, 1);
            f(&mut c);
            Trainer::new(&c).map(|_| ())
        };
        assert!(spec(|_| ()).is_ok());
        assert!(matches!(spec(|c| c.heads = 3), Err(TrainError::Spec(_))));
        assert!(matches!(spec(|c| c.layers = 0), Err(TrainError::Spec(_))));
        assert!(matches!(
            spec(|c| c.dropout = 1.0),
            Err(TrainError::Spec(_))
        ));
        assert!(matches!(spec(|c| c.classes = 0), Err(TrainError::Spec(_))));
    }

    #[test]
    fn device_selection_follows_availability() {
        assert_eq!(select_device(DeviceChoice::Cpu).unwrap(), Device::Cpu);
        if tch::Cuda::is_available() {
            assert_eq!(select_device(DeviceChoice::Cuda).unwrap(), Device::Cuda(0));
            assert_eq!(select_device(DeviceChoice::Auto).unwrap(), Device::Cuda(0));
        } else {
            let err = select_device(DeviceChoice::Cuda).unwrap_err();
            assert!(matches!(err, TrainError::CudaUnavailable));
            assert!(err.to_string().contains("no CUDA device"), "{err}");
            assert_eq!(select_device(DeviceChoice::Auto).unwrap(), Device::Cpu);
        }
    }

    #[test]
    fn model_names_round_trip() {
        for kind in ModelKind::ALL {
            assert_eq!(kind.name().parse::<ModelKind>().unwrap(), kind);
        }
        assert_eq!("GAT".parse::<ModelKind>().unwrap(), ModelKind::Gat);
        assert!(matches!(
            "gin".parse::<ModelKind>(),
            Err(TrainError::UnknownModel(_))
        ));
    }
}
