//! The library's loader against the reference sampler (the in-memory CSR, independent of every
//! storage path): every sampler, on files and on the in-process emulated SSD, hands back the
//! reference's subgraph byte for byte, with the dataset's own feature rows and labels; bad
//! options, files and requests are errors that name what is wrong, and a failed minibatch does
//! not stop the ones after it.

use std::path::{Path, PathBuf};

use sagessd::{Batch, FeatureCache, Loader, LoaderSpec, Request, SamplerKind, Storage};
use sagessd_runtime::dataset::Dataset;
use sagessd_runtime::dataset::generate::{GenerateParams, generate};
use sagessd_runtime::npy::Dtype;
use sagessd_runtime::sampler::{ReferenceSampler, Sampler};

const FANOUTS: [u16; 2] = [5, 3];

/// A generated dataset with f32 features and labels (made once per test binary run).
fn dataset() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sagessd-api-loader-{}", std::process::id()));
    static MADE: std::sync::Once = std::sync::Once::new();
    MADE.call_once(|| {
        let _ = std::fs::remove_dir_all(&dir);
        generate(
            &dir,
            &GenerateParams {
                name: "loader-test".into(),
                scale: 11,
                edge_factor: 8,
                seed: 7,
                feature_dim: 12,
                feature_dtype: Dtype::F32,
                classes: 5,
            },
        )
        .expect("generating the dataset");
    });
    dir
}

fn requests(n: u64) -> Vec<Request> {
    (0..10)
        .map(|b| Request::new(100 + b, (0..32).map(|i| (b * 97 + i * 31) % n).collect()))
        .collect()
}

fn spec(kind: SamplerKind, storage: Storage) -> LoaderSpec {
    let mut spec = LoaderSpec::new(kind, &FANOUTS);
    spec.storage = storage;
    spec.features = FeatureCache::Agnes;
    spec.labels = true;
    // Small blocks and buffers: the AGNES samplers read and evict.
    spec.cache.block_bytes = 4096;
    spec.graph_buffer_bytes = 64 << 10;
    spec.cache.cache_bytes = 16 << 10;
    spec.hyperbatch = 4;
    spec.prefetch = 3;
    spec.max_batch_size = 32;
    spec
}

/// Checks each batch against the reference sampler and the dataset's arrays.
fn check(dir: &Path, batches: &[Batch], requests: &[Request]) {
    let dataset = Dataset::open(dir).unwrap();
    let graph = dataset.graph().unwrap();
    let rows = dataset.feature_rows().unwrap().unwrap();
    let labels = dataset.labels().unwrap().unwrap();
    let mut reference = ReferenceSampler::new(&graph);
    assert_eq!(batches.len(), requests.len());
    for (batch, Request { seed, targets }) in batches.iter().zip(requests) {
        let expected = reference.sample(*seed, &FANOUTS, targets).unwrap();
        assert_eq!(batch.seed, *seed);
        assert_eq!(batch.subgraph.as_bytes(), expected.as_bytes());
        let row_bytes = rows.row_bytes();
        let want: Vec<u8> = batch
            .nodes()
            .iter()
            .flat_map(|&v| &rows.bytes[v as usize * row_bytes..][..row_bytes])
            .copied()
            .collect();
        assert_eq!(batch.features.as_deref(), Some(&want[..]));
        let view = expected.view();
        let k = view.layer(0).counts.dst_count as usize;
        let want: Vec<i64> = batch.nodes()[..k]
            .iter()
            .map(|&v| labels[v as usize])
            .collect();
        assert_eq!(batch.labels.as_deref(), Some(&want[..]));
    }
}

fn run(kind: SamplerKind, storage: Storage) -> Vec<Batch> {
    let dir = dataset();
    let mut loader = Loader::open(&dir, spec(kind, storage)).unwrap();
    assert_eq!(loader.info().feature_dim, 12);
    let reqs = requests(loader.info().node_count);
    // Submitted in two parts; the worker samples ahead and hands back in order.
    loader.submit(reqs[..7].to_vec()).unwrap();
    loader.submit(reqs[7..].to_vec()).unwrap();
    let batches: Vec<Batch> = loader.by_ref().map(Result::unwrap).collect();
    assert_eq!(loader.pending(), 0);
    let stats = loader.stats();
    assert_eq!(stats.minibatches, reqs.len() as u64);
    assert!(stats.feature_bytes > 0);
    check(&dir, &batches, &reqs);
    batches
}

#[test]
fn every_sampler_on_files_hands_back_the_reference() {
    // Every sampler the registry runs on files.
    for kind in SamplerKind::ALL.into_iter().filter(|k| k.on_files()) {
        run(kind, Storage::Files);
    }
}

#[test]
fn every_sampler_on_the_emulated_ssd_hands_back_the_reference() {
    // Every sampler the registry runs on a device.
    for kind in SamplerKind::ALL.into_iter().filter(|k| k.on_device()) {
        let dir = dataset();
        let mut loader =
            Loader::open(&dir, spec(kind, Storage::parse("emulator").unwrap())).unwrap();
        let reqs = requests(loader.info().node_count);
        loader.submit(reqs.clone()).unwrap();
        let batches: Vec<Batch> = loader.by_ref().map(Result::unwrap).collect();
        check(&dir, &batches, &reqs);
        let stats = loader.stats();
        // The emulated device models its time and counts its flash pages.
        assert!(stats.device_ns.unwrap() > 0, "{kind}: {stats:?}");
        assert!(stats.nand_pages_read.unwrap() > 0, "{kind}: {stats:?}");
        assert!(stats.reads > 0, "{kind}: {stats:?}");
    }
}

#[test]
fn bad_options_and_files_are_named() {
    let dir = dataset();
    let err = |spec: LoaderSpec, path: &Path| Loader::open(path, spec).unwrap_err().to_string();
    let e = err(LoaderSpec::new(SamplerKind::Isp, &FANOUTS), &dir);
    assert!(e.contains("needs a device"), "{e}");
    let mut s = LoaderSpec::new(SamplerKind::Mmap, &FANOUTS);
    s.storage = Storage::parse("emulator").unwrap();
    let e = err(s, &dir);
    assert!(e.contains("not a device"), "{e}");
    let e = err(LoaderSpec::new(SamplerKind::Mmap, &[0, 3]), &dir);
    assert!(e.contains("fanout"), "{e}");
    let e = err(LoaderSpec::new(SamplerKind::Mmap, &[2, 2, 2, 2, 2]), &dir);
    assert!(e.contains("layer"), "{e}");
    let e = err(
        LoaderSpec::new(SamplerKind::Mmap, &FANOUTS),
        Path::new("/no/such/dataset"),
    );
    assert!(e.contains("/no/such/dataset"), "{e}");
    let mut s = LoaderSpec::new(SamplerKind::Agnes, &FANOUTS);
    s.cache.block_bytes = 1000;
    assert!(err(s, &dir).contains("multiple of 4 KiB"));
}

#[test]
fn a_bad_minibatch_is_its_error_and_the_next_still_comes() {
    let dir = dataset();
    for storage in [Storage::Files, Storage::parse("emulator").unwrap()] {
        let kind = if storage.is_device() {
            SamplerKind::Isp
        } else {
            SamplerKind::Direct
        };
        let mut loader = Loader::open(&dir, spec(kind, storage)).unwrap();
        let n = loader.info().node_count;
        let e = loader.sample(1, vec![0, n + 5]).unwrap_err().to_string();
        assert!(e.contains(&(n + 5).to_string()), "{kind}: {e}");
        let good = loader.sample(2, vec![1, 2, 3]).unwrap();
        assert_eq!(&good.nodes()[..3], &[1, 2, 3]);
        // Taking a minibatch while others are pending is refused, not mixed up.
        loader.submit(requests(n)).unwrap();
        assert!(loader.sample(3, vec![1]).is_err());
        assert_eq!(loader.by_ref().count(), 10);
    }
}

#[test]
fn loaders_on_one_placed_device_take_turns() {
    let dir = dataset();
    let ds = Dataset::open(&dir).unwrap();
    let storage = Storage::parse("emulator").unwrap();
    let placed = sagessd::PlacedDevice::place(&ds, &storage, None, 4096).unwrap();
    let spec = || LoaderSpec::new(SamplerKind::Isp, &FANOUTS);
    let mut first = Loader::on_device(&dir, &placed, spec()).unwrap();
    let e = Loader::on_device(&dir, &placed, spec())
        .unwrap_err()
        .to_string();
    assert!(e.contains("another loader is open"), "{e}");
    let a = first.sample(1, vec![1, 2, 3]).unwrap();
    drop(first);
    // Its turn is given back with it; the next loader samples the same on the same device.
    let mut second = Loader::on_device(&dir, &placed, spec()).unwrap();
    let b = second.sample(1, vec![1, 2, 3]).unwrap();
    assert_eq!(a.subgraph, b.subgraph);
}
