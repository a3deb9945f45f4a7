//! `sagessd._native`: the Python package's native module, a thin layer over the `sagessd`
//! library. Datasets open, generate and import; a loader runs any sampler on any storage target
//! and hands back minibatches as NumPy arrays. The interpreter's lock is released while Rust
//! opens, samples or waits for the worker, so Python threads (and the training step that runs
//! while the worker samples ahead) are not held up. Errors are `sagessd.Error` with the Rust
//! message. The Python side (`python/sagessd/`) wraps this into its public classes.

use std::path::PathBuf;
use std::sync::Mutex;

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use sagessd::{Batch, CacheSettings, FeatureCache, LoaderSpec, SamplerKind, Storage};
use sagessd_runtime::dataset::{self, generate::GenerateParams};
use sagessd_runtime::npy::Dtype;

create_exception!(
    _native,
    Error,
    PyException,
    "An error of sagessd: a bad file, option or request, or a device that refused a command."
);

/// Turns any error of the library into `sagessd.Error`, its message the Rust one.
fn py_err(e: impl std::fmt::Display) -> PyErr {
    Error::new_err(e.to_string())
}

/// A dataset folder (`manifest.toml` and its `.npy` arrays).
#[pyclass(module = "sagessd._native", frozen)]
struct Dataset {
    inner: dataset::Dataset,
}

fn dtype_name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F16 => "float16",
        Dtype::F32 => "float32",
        Dtype::I64 => "int64",
        Dtype::I32 => "int32",
        Dtype::U32 => "uint32",
        Dtype::U64 => "uint64",
        _ => "unknown",
    }
}

#[pymethods]
impl Dataset {
    /// Opens the dataset in folder `path`.
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let inner = py
            .detach(|| dataset::Dataset::open(&path))
            .map_err(py_err)?;
        Ok(Self { inner })
    }

    /// Generates an R-MAT dataset (2^scale nodes, community labels, features that carry
    /// them) into `path`.
    #[staticmethod]
    #[pyo3(signature = (path, scale, edge_factor=16, seed=1, feature_dim=0, feature_dtype="float32", classes=8, name=None))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn generate(
        py: Python<'_>,
        path: PathBuf,
        scale: u32,
        edge_factor: u32,
        seed: u64,
        feature_dim: u32,
        feature_dtype: &str,
        classes: u32,
        name: Option<String>,
    ) -> PyResult<Self> {
        let feature_dtype = match feature_dtype {
            "float32" | "f32" => Dtype::F32,
            "float16" | "f16" => Dtype::F16,
            other => {
                return Err(PyValueError::new_err(format!(
                    "feature_dtype {other:?}: float32 or float16"
                )));
            }
        };
        if !(1..=30).contains(&scale) {
            return Err(PyValueError::new_err(format!(
                "scale {scale}: 1..=30 (2^scale nodes)"
            )));
        }
        let params = GenerateParams {
            name: name.unwrap_or_else(|| format!("rmat{scale}")),
            scale,
            edge_factor,
            seed,
            feature_dim,
            feature_dtype,
            classes,
        };
        let inner = py
            .detach(|| dataset::generate::generate(&path, &params))
            .map_err(py_err)?;
        Ok(Self { inner })
    }

    /// Imports Cora into `path` from the graphdatascience 2.2 wheel (`source`, or the one
    /// `scripts/setup.sh` downloaded, found from any folder and from `search_from`, the
    /// package's own folder) or a folder of its Parquet files.
    #[staticmethod]
    #[pyo3(signature = (path, source=None, search_from=None))]
    fn import_cora(
        py: Python<'_>,
        path: PathBuf,
        source: Option<PathBuf>,
        search_from: Option<PathBuf>,
    ) -> PyResult<Self> {
        let inner = py
            .detach(|| {
                let source = match source {
                    Some(s) => s,
                    None => dataset::cora::find_wheel(
                        &search_from.as_deref().into_iter().collect::<Vec<_>>(),
                    )?,
                };
                dataset::cora::import(&source, &path)
            })
            .map_err(py_err)?;
        Ok(Self { inner })
    }

    /// Imports a graph into `path` from `source` in `format`: `snap` (an edge list: text, `#`
    /// comments, optionally `.gz`) or `ogb` (arrays: a folder of `.npy` files or one `.npz`);
    /// `symmetric` adds each edge's reverse.
    #[staticmethod]
    #[pyo3(signature = (path, source, format, symmetric=true))]
    fn import_graph(
        py: Python<'_>,
        path: PathBuf,
        source: PathBuf,
        format: &str,
        symmetric: bool,
    ) -> PyResult<Self> {
        let import = match format {
            "snap" => dataset::snap::import,
            "ogb" => dataset::ogb::import,
            other => {
                return Err(PyValueError::new_err(format!(
                    "format {other:?}: snap or ogb"
                )));
            }
        };
        let inner = py
            .detach(|| import(&source, &path, symmetric))
            .map_err(py_err)?;
        Ok(Self { inner })
    }

    /// The folder.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.dir().to_owned()
    }

    /// The name in its manifest.
    #[getter]
    fn name(&self) -> String {
        self.inner.manifest.name.clone()
    }

    /// Nodes.
    #[getter]
    fn num_nodes(&self) -> u64 {
        self.inner.manifest.node_count
    }

    /// CSR entries (an undirected edge counts twice).
    #[getter]
    fn num_edges(&self) -> u64 {
        self.inner.manifest.edge_count
    }

    /// Label classes, if labelled.
    #[getter]
    fn num_classes(&self) -> Option<u32> {
        self.inner.manifest.class_count
    }

    /// Whether every edge has its reverse (then the CSR is also the CSC).
    #[getter]
    fn symmetric(&self) -> bool {
        self.inner.manifest.symmetric
    }

    /// Each array's file: `indptr`, `indices`, and where present `features`, `labels`,
    /// `train`, `valid`, `test`, `node_ids` (NumPy `.npy`, to `numpy.load(…, mmap_mode="r")`).
    fn arrays(&self) -> Vec<(&'static str, PathBuf)> {
        self.inner
            .arrays()
            .into_iter()
            .map(|(name, entry)| (name, self.inner.dir().join(&entry.file)))
            .collect()
    }

    fn __repr__(&self) -> String {
        let m = &self.inner.manifest;
        format!(
            "Dataset({:?}: {} nodes, {} CSR entries, {})",
            m.name,
            m.node_count,
            m.edge_count,
            self.inner.dir().display()
        )
    }
}

/// A sampler on a storage target with a feature path: minibatches are sampled on a worker
/// thread, ahead of whoever takes them.
#[pyclass(module = "sagessd._native", frozen)]
struct Loader {
    inner: Mutex<sagessd::Loader>,
    description: String,
    feature_dim: usize,
    feature_dtype: Option<&'static str>,
    feature_row_bytes: usize,
}

fn parse_kind(name: &str) -> PyResult<SamplerKind> {
    SamplerKind::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!("sampler {name:?}: one of {}", SamplerKind::names()))
    })
}

fn parse_features(name: &str) -> PyResult<FeatureCache> {
    [FeatureCache::None, FeatureCache::Agnes, FeatureCache::Bgl]
        .into_iter()
        .find(|k| k.name() == name)
        .ok_or_else(|| PyValueError::new_err(format!("features {name:?}: none, agnes or bgl")))
}

/// Converts a request's targets (any integer array NumPy can cast) to node ids.
fn targets_of(targets: PyReadonlyArray1<'_, i64>) -> PyResult<Vec<u64>> {
    targets
        .as_array()
        .iter()
        .map(|&t| {
            u64::try_from(t).map_err(|_| PyValueError::new_err(format!("target {t} is negative")))
        })
        .collect()
}

impl Loader {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, sagessd::Loader>> {
        self.inner
            .lock()
            .map_err(|_| Error::new_err("a previous call on this loader panicked"))
    }
}

/// A minibatch as a dict of NumPy arrays (the features moved, not copied).
fn batch_dict<'py>(py: Python<'py>, batch: Batch) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("seed", batch.seed)?;
    let view = batch.subgraph.view();
    let nodes: Vec<i64> = view.nodes().iter().map(|v| v.get() as i64).collect();
    d.set_item("nodes", PyArray1::from_vec(py, nodes))?;
    let layers = PyList::empty(py);
    for l in 0..view.layer_count() {
        let layer = view.layer(l);
        let indptr: Vec<i64> = layer.indptr.iter().map(|v| i64::from(v.get())).collect();
        let indices: Vec<i64> = layer.indices.iter().map(|v| i64::from(v.get())).collect();
        layers.append((
            layer.counts.dst_count,
            layer.counts.src_count,
            PyArray1::from_vec(py, indptr),
            PyArray1::from_vec(py, indices),
        ))?;
    }
    d.set_item("layers", layers)?;
    d.set_item(
        "features",
        batch.features.map(|f| PyArray1::from_vec(py, f)),
    )?;
    d.set_item("labels", batch.labels.map(|l| PyArray1::from_vec(py, l)))?;
    Ok(d)
}

#[pymethods]
impl Loader {
    /// Opens `sampler` (memory, mmap, direct, uring, agnes, hyperbatch, isp, isp-hyperbatch)
    /// on `dataset` read from `storage` (files; emulator or emulator:HW.toml, the in-process
    /// emulated SSD; tcp://HOST:PORT/NQN; passthru:/dev/ngXnY), with `features` gathered
    /// through none, agnes or bgl (in storage for isp and isp-hyperbatch).
    #[new]
    #[pyo3(signature = (dataset, sampler, fanouts, storage="files", features="none", hyperbatch=8, prefetch=8, cache_mb=64, graph_buffer_mb=64, block_kb=1024, feature_threshold=2, max_batch_size=1024, labels=false))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn new(
        py: Python<'_>,
        dataset: &Dataset,
        sampler: &str,
        fanouts: Vec<i64>,
        storage: &str,
        features: &str,
        hyperbatch: usize,
        prefetch: usize,
        cache_mb: u32,
        graph_buffer_mb: u32,
        block_kb: u32,
        feature_threshold: u32,
        max_batch_size: u64,
        labels: bool,
    ) -> PyResult<Self> {
        let fanouts: Vec<u16> = fanouts
            .iter()
            .map(|&f| {
                u16::try_from(f)
                    .ok()
                    .filter(|&f| f > 0)
                    .ok_or_else(|| PyValueError::new_err(format!("fanout {f}: 1..=65535")))
            })
            .collect::<PyResult<_>>()?;
        let mut spec = LoaderSpec::new(parse_kind(sampler)?, &fanouts);
        spec.storage = Storage::parse(storage).map_err(py_err)?;
        spec.features = parse_features(features)?;
        // Every size below 4 GiB, so that it fits a 32-bit `usize` too.
        for (value, most, what) in [
            (cache_mb, 4095, "cache_mb"),
            (graph_buffer_mb, 4095, "graph_buffer_mb"),
            (block_kb, 65536, "block_kb"),
        ] {
            if value > most {
                return Err(PyValueError::new_err(format!(
                    "{what} {value}: at most {most}"
                )));
            }
        }
        spec.cache = CacheSettings {
            cache_bytes: (cache_mb as usize) << 20,
            threshold: feature_threshold,
            block_bytes: (block_kb as usize) << 10,
        };
        spec.graph_buffer_bytes = (graph_buffer_mb as usize) << 20;
        spec.hyperbatch = hyperbatch;
        spec.prefetch = prefetch;
        spec.max_batch_size = max_batch_size;
        spec.labels = labels;
        let dir = dataset.inner.dir().to_owned();
        let inner = py
            .detach(|| sagessd::Loader::open(&dir, spec))
            .map_err(py_err)?;
        let info = inner.info().clone();
        Ok(Self {
            description: info.description,
            feature_dim: info.feature_dim,
            feature_dtype: info.feature_dtype.map(dtype_name),
            feature_row_bytes: info.feature_dtype.map_or(0, |d| d.size_bytes()) * info.feature_dim,
            inner: Mutex::new(inner),
        })
    }

    /// One line: the dataset, storage, sampler, fanouts and feature path.
    #[getter]
    fn description(&self) -> &str {
        &self.description
    }

    /// Values per feature row (0 without features).
    #[getter]
    fn feature_dim(&self) -> usize {
        self.feature_dim
    }

    /// The feature rows' NumPy dtype name, with features.
    #[getter]
    fn feature_dtype(&self) -> Option<&'static str> {
        self.feature_dtype
    }

    /// Minibatches submitted and not yet taken.
    #[getter]
    fn pending(&self, py: Python<'_>) -> PyResult<usize> {
        // Another thread may hold the loader waiting for a minibatch: wait without the GIL.
        py.detach(|| Ok(self.lock()?.pending()))
    }

    /// Queues minibatches, each `(seed, targets)`; the worker samples them in order, ahead.
    fn submit(
        &self,
        py: Python<'_>,
        requests: Vec<(u64, PyReadonlyArray1<'_, i64>)>,
    ) -> PyResult<()> {
        let requests = requests
            .into_iter()
            .map(|(seed, targets)| Ok(sagessd::Request::new(seed, targets_of(targets)?)))
            .collect::<PyResult<Vec<_>>>()?;
        py.detach(|| self.lock()?.submit(requests).map_err(py_err))
    }

    /// The next submitted minibatch as a dict (`seed`, `nodes`, `layers` of `(dst_count,
    /// src_count, indptr, indices)`, `features` as raw bytes, `labels`), or `None` when none is
    /// pending. A minibatch that failed raises its error.
    fn next_batch<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let next = py.detach(|| self.lock().map(|mut l| l.next_batch()))?;
        match next {
            None => Ok(None),
            Some(result) => batch_dict(py, result.map_err(py_err)?).map(Some),
        }
    }

    /// Samples one minibatch now (nothing else may be pending), as [`Self::next_batch`].
    fn sample<'py>(
        &self,
        py: Python<'py>,
        seed: u64,
        targets: PyReadonlyArray1<'_, i64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let targets = targets_of(targets)?;
        let batch = py
            .detach(|| self.lock().map(|mut l| l.sample(seed, targets)))?
            .map_err(py_err)?;
        batch_dict(py, batch)
    }

    /// Samples one minibatch now and returns PyG's view of it (`sagessd::pyg::to_pyg`): the
    /// arrays `node`, `row`, `col`, `num_sampled_nodes`, `num_sampled_edges`, and `features`
    /// (the gathered rows of `node`, raw bytes, when gathered).
    fn sample_pyg<'py>(
        &self,
        py: Python<'py>,
        seed: u64,
        targets: PyReadonlyArray1<'_, i64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let targets = targets_of(targets)?;
        let row_bytes = self.feature_row_bytes;
        let (out, rows) = py.detach(|| {
            let batch = self.lock()?.sample(seed, targets).map_err(py_err)?;
            let out = sagessd::pyg::to_pyg(&batch.subgraph);
            // The kept nodes' rows, in the PyG view's order.
            let rows = match batch.features {
                Some(all) if all.len() != batch.subgraph.node_count() * row_bytes => {
                    return Err(Error::new_err(format!(
                        "{} feature bytes for {} nodes of {row_bytes} bytes",
                        all.len(),
                        batch.subgraph.node_count()
                    )));
                }
                Some(all) => {
                    let mut rows = Vec::with_capacity(out.kept.len() * row_bytes);
                    for &k in &out.kept {
                        rows.extend_from_slice(&all[k as usize * row_bytes..][..row_bytes]);
                    }
                    Some(rows)
                }
                None => None,
            };
            Ok::<_, PyErr>((out, rows))
        })?;
        let d = PyDict::new(py);
        d.set_item("node", PyArray1::from_vec(py, out.node))?;
        d.set_item("row", PyArray1::from_vec(py, out.row))?;
        d.set_item("col", PyArray1::from_vec(py, out.col))?;
        d.set_item("num_sampled_nodes", out.num_sampled_nodes)?;
        d.set_item("num_sampled_edges", out.num_sampled_edges)?;
        d.set_item("features", rows.map(|r| PyArray1::from_vec(py, r)))?;
        Ok(d)
    }

    /// What the storage did so far: `minibatches`, `reads`, `bytes_read`, `nand_pages_read`,
    /// `feature_bytes`, `feature_reads`, `device_ns` and `host_ns` (modelled, on the in-process
    /// emulator), `wall_ns`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = py.detach(|| self.lock().map(|l| l.stats()))?;
        let d = PyDict::new(py);
        d.set_item("minibatches", s.minibatches)?;
        d.set_item("reads", s.reads)?;
        d.set_item("bytes_read", s.bytes_read)?;
        d.set_item("nand_pages_read", s.nand_pages_read)?;
        d.set_item("feature_bytes", s.feature_bytes)?;
        d.set_item("feature_reads", s.feature_reads)?;
        d.set_item("device_ns", s.device_ns)?;
        d.set_item("host_ns", s.host_ns)?;
        d.set_item("wall_ns", s.wall_ns)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("Loader({})", self.description)
    }
}

/// Every sampler's name, in the registry's order (`SamplerKind::ALL`): what a `Loader` takes,
/// the CLI's `--sampler` and every record spell the same names.
#[pyfunction]
fn samplers() -> Vec<&'static str> {
    SamplerKind::ALL.map(SamplerKind::name).to_vec()
}

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add_class::<Dataset>()?;
    m.add_class::<Loader>()?;
    m.add_function(wrap_pyfunction!(samplers, m)?)?;
    Ok(())
}
