//! Training through the library (feature `train`): the same seed gives the same loss curve
//! whether the minibatches come from the in-memory sampler on files or from in-storage
//! sampling on the emulated SSD (the two draw byte-identical subgraphs and rows, so any
//! difference is a fault in one path); the observer hears the plan, the set-up and every
//! epoch; a dataset that cannot train is an error naming what is missing.

use std::path::PathBuf;

use sagessd::training::{DeviceChoice, EpochRecord, TrainObserver, TrainSpec, train};
use sagessd::{HwConfig, SamplerKind, Storage};
use sagessd_runtime::dataset::generate::{GenerateParams, generate};
use sagessd_runtime::npy::Dtype;

/// A generated dataset (4 label classes) under the temporary folder.
fn dataset(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sagessd-api-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    generate(
        &dir,
        &GenerateParams {
            name: name.into(),
            scale: 9,
            edge_factor: 8,
            seed: 3,
            feature_dim: 8,
            feature_dtype: Dtype::F32,
            classes: 4,
        },
    )
    .expect("generating the dataset");
    dir
}

/// What the observer was told.
#[derive(Default)]
struct Heard {
    planned: Option<(u32, usize)>,
    notes: Vec<String>,
    steps: usize,
    epochs: Vec<EpochRecord>,
}

impl TrainObserver for Heard {
    fn planned(&mut self, epochs: u32, batch_size: usize) {
        self.planned = Some((epochs, batch_size));
    }
    fn note(&mut self, text: &str) {
        self.notes.push(text.to_string());
    }
    fn step(&mut self, _done: usize, _total: usize) {
        self.steps += 1;
    }
    fn epoch(&mut self, record: &EpochRecord) {
        self.epochs.push(record.clone());
    }
}

fn spec(dir: &PathBuf, sampler: SamplerKind, storage: Storage) -> TrainSpec {
    let mut spec = TrainSpec::new(dir);
    spec.sampler = sampler;
    spec.storage = storage;
    spec.fanouts = vec![5, 3];
    spec.batch_size = Some(64);
    spec.epochs = Some(3);
    spec.compute = DeviceChoice::Cpu;
    spec
}

#[test]
fn in_storage_sampling_trains_the_same_model_as_the_in_memory_sampler() {
    let dir = dataset("train");
    let mut runs = Vec::new();
    for (sampler, storage) in [
        (SamplerKind::Memory, Storage::Files),
        (SamplerKind::Isp, Storage::emulator(HwConfig::cosmos_plus())),
    ] {
        let mut heard = Heard::default();
        let run = train(&spec(&dir, sampler, storage), &mut heard).expect("training");
        assert_eq!(heard.planned, Some((3, 64)));
        assert_eq!((run.epochs, run.batch_size), (3, 64));
        assert_eq!(heard.epochs.len(), 3);
        assert!(heard.steps >= 3, "{} steps", heard.steps);
        assert!(
            heard.notes[0].starts_with("train: sage on train"),
            "{:?}",
            heard.notes
        );
        let accuracy = run.outcome.test_accuracy.expect("a test split");
        assert!((0.0..=1.0).contains(&accuracy));
        let modelled = heard.epochs.iter().all(|e| e.modelled.is_some());
        assert_eq!(
            modelled,
            sampler == SamplerKind::Isp,
            "modelled epochs on the emulator only"
        );
        runs.push(
            heard
                .epochs
                .iter()
                .map(|e| e.loss.to_bits())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(
        runs[0], runs[1],
        "loss per epoch: memory on files vs isp on the emulator"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dataset_without_labels_or_a_bad_option_is_an_error_naming_it() {
    let dir = dataset("unlabelled");
    // The manifest without its [labels] table.
    let manifest = dir.join("manifest.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let start = text.find("[labels]").expect("a labels table");
    let end = text[start..]
        .find("\n\n")
        .map_or(text.len(), |e| start + e + 2);
    std::fs::write(&manifest, format!("{}{}", &text[..start], &text[end..])).unwrap();
    let err = train(&spec(&dir, SamplerKind::Memory, Storage::Files), &mut ())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no labels") && err.contains("unlabelled"),
        "{err}"
    );
    let mut bad = spec(&dir, SamplerKind::Agnes, Storage::Files);
    bad.fanouts = vec![];
    assert!(train(&bad, &mut ()).is_err());
    let err = train(
        &spec(&dir.join("missing"), SamplerKind::Memory, Storage::Files),
        &mut (),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("missing"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
