//! What to train and on what ([`TrainSpec`]): its options checked against each other before
//! anything opens, the defaults a small training split needs, and the `sagessd train` command
//! that reruns it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sagessd_host_driver::Endpoint;

use super::{DeviceChoice, Evaluation, ModelKind, Order, Workers};
use crate::{CacheSettings, Error, FeatureCache, SamplerKind, Storage};

/// How the validation and test splits are evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvalChoice {
    /// Full neighbourhoods for graphs of at most [`FULL_EVAL_MAX_NODES`] nodes, else sampled.
    Auto,
    /// Minibatches sampled with the training fanouts, through the same pipeline.
    Sampled,
    /// Every neighbour, the whole graph at once (it must fit in memory).
    Full,
}

/// The largest graph [`EvalChoice::Auto`] evaluates on full neighbourhoods.
pub const FULL_EVAL_MAX_NODES: u64 = 200_000;

impl EvalChoice {
    /// The evaluation for a graph of `node_count` nodes.
    pub fn resolve(self, node_count: u64) -> Evaluation {
        match self {
            Self::Sampled => Evaluation::Sampled,
            Self::Full => Evaluation::Full,
            Self::Auto if node_count <= FULL_EVAL_MAX_NODES => Evaluation::Full,
            Self::Auto => Evaluation::Sampled,
        }
    }
}

/// What to train, on what.
#[derive(Clone, Debug)]
pub struct TrainSpec {
    /// The dataset folder (features, labels and a train split needed).
    pub dataset: PathBuf,
    /// The GNN.
    pub model: ModelKind,
    /// Width of the hidden layers.
    pub hidden: i64,
    /// GAT's attention heads (dividing `hidden`).
    pub heads: i64,
    /// Neighbours per hop from the targets; their count is the number of GNN layers.
    pub fanouts: Vec<u16>,
    /// Targets per minibatch (`None`: [`default_batch_size`]).
    pub batch_size: Option<usize>,
    /// Epochs (`None`: [`default_epochs`]); the test split is scored on the epoch with the best
    /// validation accuracy.
    pub epochs: Option<u32>,
    /// Adam's learning rate.
    pub lr: f64,
    /// Adam's L2 weight decay.
    pub weight_decay: f64,
    /// Dropout probability.
    pub dropout: f64,
    /// The sampler. On a device: agnes, hyperbatch, isp or isp-hyperbatch; on the in-process
    /// emulator also memory, mmap, direct and uring, through its modelled host I/O stack.
    pub sampler: SamplerKind,
    /// Minibatches per hyperbatch (AGNES's and in-storage ones).
    pub hyperbatch: usize,
    /// Minibatch order of the training nodes.
    pub order: Order,
    /// Sampling and gather workers. On a device one producer drives it (its clock is one
    /// timeline); on the emulator's modelled host, `Fixed { sample: n, .. }` is n modelled
    /// host workers side by side in virtual time.
    pub workers: Workers,
    /// Groups (minibatches, or hyperbatches) alive in the pipeline at once.
    pub queue_depth: usize,
    /// Seed of the weights, the order and sampling.
    pub seed: u64,
    /// Where the model trains.
    pub compute: DeviceChoice,
    /// libtorch's CPU threads (fixed, so that CPU runs are deterministic).
    pub threads: i32,
    /// How the validation and test splits are evaluated.
    pub eval: EvalChoice,
    /// Price each step of a modelled epoch on the hardware description's `[trainer]`
    /// accelerator instead of its measured time here (the in-process emulator only).
    pub modelled_steps: bool,
    /// With in-storage sampling on the in-process emulator: the feature rows come from host
    /// memory (SmartSAGE's DRAM-resident feature table) and each NS_SUBMIT / NS_COLLECT is a
    /// synchronous ioctl of the modelled host; otherwise the device gathers them too.
    pub host_features: bool,
    /// Where the dataset is read.
    pub storage: Storage,
    /// The host samplers' feature path (training needs one: AGNES or BGL).
    pub features: FeatureCache,
    /// The feature cache's size and policy, and the AGNES block size.
    pub cache: CacheSettings,
    /// The AGNES samplers' graph buffer, bytes.
    pub graph_buffer_bytes: usize,
}

impl TrainSpec {
    /// GraphSAGE on `dataset` with the in-memory sampler, as `sagessd train` defaults: fanouts
    /// 10,10, hidden 64, Adam lr 0.01 with weight decay 5e-4, dropout 0.5, seed 1, the AGNES
    /// feature cache (64 MiB, threshold 2, 1 MiB blocks), one libtorch thread.
    pub fn new(dataset: impl Into<PathBuf>) -> Self {
        Self {
            dataset: dataset.into(),
            model: ModelKind::Sage,
            hidden: 64,
            heads: 4,
            fanouts: vec![10, 10],
            batch_size: None,
            epochs: None,
            lr: 0.01,
            weight_decay: 5e-4,
            dropout: 0.5,
            sampler: SamplerKind::Memory,
            hyperbatch: 8,
            order: Order::Random,
            workers: Workers::Auto,
            queue_depth: 4,
            seed: 1,
            compute: DeviceChoice::Auto,
            threads: 1,
            eval: EvalChoice::Auto,
            modelled_steps: false,
            host_features: false,
            storage: Storage::Files,
            features: FeatureCache::Agnes,
            cache: CacheSettings {
                cache_bytes: 64 << 20,
                threshold: 2,
                block_bytes: 1 << 20,
            },
            graph_buffer_bytes: 64 << 20,
        }
    }

    /// The modelled host I/O stack the sampler runs on (memory, mmap, direct and uring on a
    /// device, and isp with host features): `None` where it samples on files or on the device.
    pub(super) fn modelled_host(&self) -> Option<SamplerKind> {
        if !self.storage.is_device() {
            return None;
        }
        (!self.sampler.on_device())
            .then_some(self.sampler)
            .or((self.sampler == SamplerKind::Isp && self.host_features)
                .then_some(SamplerKind::Isp))
    }

    /// The in-process emulated device, if that is the storage.
    pub(super) fn emulated(&self) -> bool {
        matches!(&self.storage, Storage::Device { uri, .. } if uri.endpoint == Endpoint::Local)
    }

    /// The `sagessd train` command that runs this spec (each option that differs from
    /// [`TrainSpec::new`]'s as its flag), `hardware` naming the file the device's description
    /// was read from (`--config`; without it the command gets the built-in Cosmos+): what an
    /// experiment's report quotes, so that a reader can rerun one point.
    pub fn command_line(&self, hardware: Option<&Path>) -> String {
        let d = Self::new(&self.dataset);
        let mut c = format!("sagessd train --dataset {}", quoted(&self.dataset));
        let mut flag = |differs: bool, name: &str, value: &dyn std::fmt::Display| {
            if differs {
                let _ = write!(c, " --{name} {value}");
            }
        };
        let on_device = |c: &mut String| {
            if let Storage::Device { uri, .. } = &self.storage {
                c.push_str(" --on-device");
                if uri.endpoint != Endpoint::Local || uri.tunnel {
                    let _ = write!(c, " --device {uri}");
                }
                if let Some(path) = hardware {
                    let _ = write!(c, " --config {}", quoted(path));
                }
            }
            if self.modelled_steps {
                c.push_str(" --modelled-steps");
            }
            if self.host_features {
                c.push_str(" --host-features");
            }
        };
        flag(self.model != d.model, "model", &self.model.name());
        flag(self.hidden != d.hidden, "hidden", &self.hidden);
        flag(self.heads != d.heads, "heads", &self.heads);
        let fanouts: Vec<String> = self.fanouts.iter().map(u16::to_string).collect();
        flag(self.fanouts != d.fanouts, "fanouts", &fanouts.join(","));
        if let Some(b) = self.batch_size {
            flag(true, "batch-size", &b);
        }
        if let Some(e) = self.epochs {
            flag(true, "epochs", &e);
        }
        flag(self.lr != d.lr, "lr", &self.lr);
        flag(
            self.weight_decay != d.weight_decay,
            "weight-decay",
            &self.weight_decay,
        );
        flag(self.dropout != d.dropout, "dropout", &self.dropout);
        flag(self.sampler != d.sampler, "sampler", &self.sampler);
        flag(
            self.hyperbatch != d.hyperbatch,
            "hyperbatch",
            &self.hyperbatch,
        );
        flag(self.order != d.order, "order", &self.order.name());
        if let Workers::Fixed { sample, .. } = self.workers {
            flag(true, "workers", &sample);
        }
        flag(
            self.queue_depth != d.queue_depth,
            "queue-depth",
            &self.queue_depth,
        );
        flag(self.seed != d.seed, "seed", &self.seed);
        let compute = match self.compute {
            DeviceChoice::Cpu => "cpu",
            DeviceChoice::Cuda => "cuda",
            DeviceChoice::Auto => "auto",
        };
        flag(self.compute != d.compute, "compute", &compute);
        flag(self.threads != d.threads, "threads", &self.threads);
        let eval = match self.eval {
            EvalChoice::Auto => "auto",
            EvalChoice::Sampled => "sampled",
            EvalChoice::Full => "full",
        };
        flag(self.eval != d.eval, "eval", &eval);
        let (cache, default) = (&self.cache, &d.cache);
        flag(self.features != d.features, "features", &self.features);
        flag(
            cache.cache_bytes != default.cache_bytes,
            "feature-cache",
            &(cache.cache_bytes >> 20),
        );
        flag(
            cache.threshold != default.threshold,
            "feature-threshold",
            &cache.threshold,
        );
        flag(
            cache.block_bytes != default.block_bytes,
            "block-size",
            &(cache.block_bytes >> 10),
        );
        let buffer_mib = self.graph_buffer_bytes >> 20;
        flag(
            self.graph_buffer_bytes != d.graph_buffer_bytes,
            "graph-buffer",
            &buffer_mib,
        );
        on_device(&mut c);
        c
    }

    /// Checks the options against each other before anything is opened.
    pub fn validate(&self) -> Result<(), Error> {
        sagessd_runtime::sampler::validate_request(&self.fanouts, &[0], 1)?;
        let fail = |text: String| Err(Error::Invalid(text));
        if self.batch_size == Some(0) || self.epochs == Some(0) {
            return fail("the batch size and the epochs must be ≥ 1".into());
        }
        if let Workers::Fixed { sample: 0, .. } = self.workers {
            return fail("workers: at least one".into());
        }
        if self.features == FeatureCache::None {
            return fail("training needs features: the agnes or bgl feature cache".into());
        }
        let kind = self.sampler;
        let device = self.storage.is_device();
        let modelled_host = self.modelled_host();
        if device
            && modelled_host.is_none()
            && !matches!(
                self.workers,
                Workers::Auto | Workers::Fixed { sample: 1, .. }
            )
        {
            return fail(
                "several workers on a device: one producer drives it (its clock is one timeline)"
                    .into(),
            );
        }
        if kind == SamplerKind::IspIds {
            return fail("sampler isp-ids: training samples in storage with isp or isp-hyperbatch (isp-ids, the host building each subgraph, runs in `sagessd sample` and `sagessd compare`)".into());
        }
        if self.host_features && !(kind == SamplerKind::Isp && device) {
            return fail("host features are for in-storage sampling (sampler isp) on a device (the samplers on the host always take their features from host memory)".into());
        }
        if self.modelled_steps && !self.emulated() {
            return fail("modelled steps price the steps of a modelled epoch: train on the in-process emulator (storage local: / emulator), the only device that models time".into());
        }
        if self.host_features && !self.emulated() {
            return fail("host features: in-storage sampling from the in-process emulator's modelled host (local:); on a real device ISP gathers the features in storage".into());
        }
        if device {
            if !kind.on_device() && modelled_host.is_none() {
                return fail(format!(
                    "sampler {kind} does not run on a device (agnes, hyperbatch, isp, isp-ids, isp-hyperbatch do; memory, mmap, direct and uring on the in-process emulator's modelled host)"
                ));
            }
            if modelled_host.is_some() && !self.emulated() {
                return fail(format!(
                    "sampler {kind} on a device is the modelled host I/O stack of the in-process emulator (local:); a real device's host path is the sampler on files"
                ));
            }
        } else if !kind.on_files() {
            return fail(format!("sampler {kind} needs a device"));
        }
        if let (Some(SamplerKind::Isp), Storage::Device { hardware: hw, .. }) =
            (modelled_host, &self.storage)
        {
            if !hw.firmware.isp {
                return fail(format!(
                    "sampler isp: {} has no in-storage processing (firmware.isp = false)",
                    hw.device.name
                ));
            }
            let workers = match self.workers {
                Workers::Fixed { sample, .. } => sample,
                Workers::Auto => 1,
            };
            if workers > usize::from(hw.firmware.isp_slots) {
                return fail(format!(
                    "{workers} workers with in-storage sampling: {} has {} sampling slots (one job in flight per worker)",
                    hw.device.name, hw.firmware.isp_slots
                ));
            }
        }
        Ok(())
    }
}

/// `path` as a shell word: quoted where it holds a character the shell would split or expand.
fn quoted(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:=@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// Targets per minibatch without a batch size (SmartSAGE's and AGNES's minibatches).
const DEFAULT_BATCH_SIZE: usize = 1024;
/// Minibatches an epoch has at least without a batch size.
const DEFAULT_MIN_MINIBATCHES: usize = 4;
/// Training steps the default number of epochs gives at least.
const DEFAULT_MIN_STEPS: usize = 200;
/// Epochs the default gives at least.
const DEFAULT_MIN_EPOCHS: u32 = 5;

/// The minibatch size without one: `DEFAULT_BATCH_SIZE` targets, or fewer for a training
/// split too small for `DEFAULT_MIN_MINIBATCHES` of them (Cora's 140 nodes: 35), so that
/// each epoch draws its minibatches anew, as PyG's and DGL's examples do with their small
/// batches on small graphs.
pub fn default_batch_size(train_nodes: usize) -> usize {
    train_nodes
        .div_ceil(DEFAULT_MIN_MINIBATCHES)
        .clamp(1, DEFAULT_BATCH_SIZE)
}

/// The epochs without a count: enough for `DEFAULT_MIN_STEPS` steps of minibatches of
/// `batch_size` over `train_nodes`, and at least `DEFAULT_MIN_EPOCHS`. Without it a small
/// training split trained a handful of steps (Cora's 140 nodes: 5 steps in 5 epochs) and
/// stopped far from its accuracy.
pub fn default_epochs(train_nodes: usize, batch_size: usize) -> u32 {
    let per_epoch = train_nodes.div_ceil(batch_size.max(1)).max(1);
    let epochs = DEFAULT_MIN_STEPS.div_ceil(per_epoch);
    u32::try_from(epochs)
        .unwrap_or(u32::MAX)
        .max(DEFAULT_MIN_EPOCHS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_give_two_hundred_steps_at_least_five_epochs_of_four_minibatches() {
        // Cora's 140 training nodes: four minibatches of 35 an epoch, 50 epochs.
        assert_eq!(default_batch_size(140), 35);
        assert_eq!(default_epochs(140, 35), 50);
        assert_eq!(default_epochs(140, 1024), 200);
        assert_eq!(default_batch_size(10_000), 1024);
        assert_eq!(default_epochs(10_000, 1024), 20);
        assert_eq!(default_batch_size(600_000), 1024);
        assert_eq!(default_epochs(600_000, 1024), 5);
        assert_eq!(default_batch_size(0), 1);
    }

    #[test]
    fn options_that_do_not_go_together_are_refused_before_anything_opens() {
        let refused = |edit: &dyn Fn(&mut TrainSpec), want: &str| {
            let mut spec = TrainSpec::new("/nonexistent");
            edit(&mut spec);
            let err = spec.validate().unwrap_err().to_string();
            assert!(err.contains(want), "{want:?} not in {err:?}");
        };
        refused(
            &|s| s.sampler = SamplerKind::Isp,
            "sampler isp needs a device",
        );
        refused(
            &|s| s.features = FeatureCache::None,
            "training needs features",
        );
        refused(&|s| s.fanouts = vec![0], "fanout 0");
        refused(&|s| s.epochs = Some(0), "must be ≥ 1");
        refused(&|s| s.modelled_steps = true, "in-process emulator");
        refused(
            &|s| {
                s.sampler = SamplerKind::Agnes;
                s.storage = Storage::emulator(crate::HwConfig::cosmos_plus());
                s.host_features = true;
            },
            "host features are for in-storage sampling",
        );
        refused(
            &|s| {
                s.sampler = SamplerKind::Mmap;
                s.storage = Storage::parse("tcp://127.0.0.1:1/nqn.x").unwrap();
            },
            "modelled host I/O stack of the in-process emulator",
        );
        refused(
            &|s| {
                s.sampler = SamplerKind::Agnes;
                s.storage = Storage::emulator(crate::HwConfig::cosmos_plus());
                s.workers = Workers::Fixed {
                    sample: 2,
                    gather: 2,
                };
            },
            "one producer drives it",
        );
        refused(
            &|s| {
                s.sampler = SamplerKind::Isp;
                s.host_features = true;
                s.storage = Storage::emulator(crate::HwConfig::cosmos_plus());
                s.workers = Workers::Fixed {
                    sample: 9,
                    gather: 9,
                };
            },
            "sampling slots",
        );
        let mut good = TrainSpec::new("/nonexistent");
        good.validate().unwrap();
        good.sampler = SamplerKind::Isp;
        good.storage = Storage::emulator(crate::HwConfig::cosmos_plus());
        good.validate().unwrap();
    }
}
