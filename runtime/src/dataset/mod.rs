//! Datasets: one folder per graph, holding its CSR topology, optional node features, labels and
//! train/valid/test splits as NumPy `.npy` arrays, described by `manifest.toml`.
//!
//! ```plain
//!  DIR/manifest.toml   name, source, node/edge counts, class count, and per array: file,
//!                      dtype, shape, CRC32C of its data
//!  DIR/indptr.npy      int64 [n + 1]        DIR/indices.npy   int32 or int64 [m]
//!  DIR/features.npy    float32|float16 [n, d]   (optional)
//!  DIR/labels.npy      int64 [n]                (optional; -1: unlabelled)
//!  DIR/train.npy, valid.npy, test.npy   int64 node ids   (optional)
//!  DIR/node_ids.npy    int64 [n]: an imported node's original id  (optional)
//! ```
//!
//! The arrays are plain `.npy`, so numpy reads a dataset directly (the sampler comparison
//! harness takes `indptr.npy`/`indices.npy` as they are). [`Dataset::open`] checks every array's
//! header against the manifest; [`Dataset::verify`] also checks the data against its CRC32C.
//! Writers: [`generate`] (R-MAT with community-correlated features and labels) and
//! [`snap`] (SNAP edge lists), [`cora`] (Cora from the graphdatascience wheel), [`ogb`] (OGB-style `.npy`/`.npz` arrays), [`reorder`] (a dataset renumbered for locality). [`profile`] measures the degree and
//! neighbour-gap profile a synthetic graph copies.

pub mod cora;
pub mod generate;
pub mod ogb;
pub mod profile;
mod read;
pub mod reorder;
pub mod snap;

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::graph::{CsrGraph, GraphError};
use crate::npy::{self, Dtype, NpyError, NpyWriter};

pub use read::{FeatureRows, Split};

/// Name of the manifest file in a dataset folder.
pub const MANIFEST: &str = "manifest.toml";
/// Version of the dataset format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// One array of a dataset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrayEntry {
    /// File name inside the dataset folder.
    pub file: String,
    /// numpy dtype (`<i8`, `<i4`, `<f4`, `<f2`).
    pub dtype: String,
    /// Shape.
    pub shape: Vec<u64>,
    /// CRC32C of the data bytes (after the header), hex.
    pub crc32c: String,
}

/// `manifest.toml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// Dataset name.
    pub name: String,
    /// Where it came from (generator parameters, or the imported file).
    pub source: String,
    /// Nodes.
    pub node_count: u64,
    /// CSR entries (directed edges; an undirected edge counts twice).
    pub edge_count: u64,
    /// Whether every edge has its reverse.
    pub symmetric: bool,
    /// Label classes, if labelled.
    pub class_count: Option<u32>,
    /// CSR row pointers.
    pub indptr: ArrayEntry,
    /// CSR neighbour ids.
    pub indices: ArrayEntry,
    /// Node features.
    pub features: Option<ArrayEntry>,
    /// Node labels.
    pub labels: Option<ArrayEntry>,
    /// Training node ids.
    pub train: Option<ArrayEntry>,
    /// Validation node ids.
    pub valid: Option<ArrayEntry>,
    /// Test node ids.
    pub test: Option<ArrayEntry>,
    /// For imported graphs: the original id of each node (int64, `[n]`).
    pub node_ids: Option<ArrayEntry>,
}

impl Manifest {
    /// The manifest of a dataset that holds only its graph (no labels, features, splits or
    /// original ids; set those on the result where a writer has them).
    pub fn graph_only(
        name: &str,
        source: String,
        (node_count, edge_count, symmetric): (u64, u64, bool),
        indptr: ArrayEntry,
        indices: ArrayEntry,
    ) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            name: name.to_owned(),
            source,
            node_count,
            edge_count,
            symmetric,
            class_count: None,
            indptr,
            indices,
            features: None,
            labels: None,
            train: None,
            valid: None,
            test: None,
            node_ids: None,
        }
    }
}

/// Why a dataset cannot be written or used.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// An array file is unusable.
    #[error(transparent)]
    Npy(#[from] NpyError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The manifest or an input file has a bad field.
    #[error("{path}: {field}: {reason}")]
    Field {
        /// The file.
        path: PathBuf,
        /// The field (or line).
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The topology is not a valid CSR graph.
    #[error("{path}: {source}")]
    Graph {
        /// The dataset folder.
        path: PathBuf,
        /// Why.
        source: GraphError,
    },
}

pub(crate) fn field_error(
    path: &Path,
    field: impl Into<String>,
    reason: impl Into<String>,
) -> DatasetError {
    DatasetError::Field {
        path: path.to_owned(),
        field: field.into(),
        reason: reason.into(),
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> DatasetError + '_ {
    move |source| DatasetError::Io {
        path: path.to_owned(),
        source,
    }
}

/// An opened dataset folder.
#[derive(Clone, Debug)]
pub struct Dataset {
    dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
}

impl Dataset {
    /// Opens `dir`: parses the manifest and checks that every array it names exists with the
    /// dtype and shape it says, and that the shapes agree with each other.
    pub fn open(dir: &Path) -> Result<Self, DatasetError> {
        let path = dir.join(MANIFEST);
        let text = fs::read_to_string(&path).map_err(io_error(&path))?;
        let manifest: Manifest = toml::from_str(&text).map_err(|e| {
            let field = e
                .span()
                .map_or("manifest".to_owned(), |s| format!("byte {}", s.start));
            field_error(&path, field, e.message().to_owned())
        })?;
        if manifest.format_version != FORMAT_VERSION {
            return Err(field_error(
                &path,
                "format_version",
                format!(
                    "{}, this build reads {FORMAT_VERSION}",
                    manifest.format_version
                ),
            ));
        }
        let d = Self {
            dir: dir.to_owned(),
            manifest,
        };
        let m = &d.manifest;
        let n = m.node_count;
        // `shape`: each dimension as the manifest field that gives it (its name and value, and
        // the rows that value means), or free.
        let expect = |name: &str,
                      entry: &ArrayEntry,
                      dtypes: &[Dtype],
                      shape: &[Option<(&str, u64, u64)>]| {
            let crc = &entry.crc32c;
            if crc.len() != 8 || !crc.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(field_error(
                    &path,
                    format!("{name}.crc32c"),
                    format!("{crc:?} is not a CRC32C (8 hexadecimal digits)"),
                ));
            }
            let file = d.dir.join(&entry.file);
            let h = npy::read_header(&file)?;
            if !dtypes.contains(&h.dtype) || entry.dtype != h.dtype.descr() {
                return Err(field_error(
                    &path,
                    format!("{name}.dtype"),
                    format!(
                        "{} in the manifest, {} in {}",
                        entry.dtype,
                        h.dtype.descr(),
                        entry.file
                    ),
                ));
            }
            // The array agrees with its own entry but not with the count another field gives:
            // that field is the one to name.
            if h.shape == entry.shape && h.shape.len() == shape.len() {
                for (got, want) in h.shape.iter().zip(shape) {
                    if let Some((field, value, rows)) = want
                        && got != rows
                    {
                        return Err(field_error(
                            &path,
                            *field,
                            format!(
                                "{value} means {rows} rows of {name}, but {} has {got}",
                                entry.file
                            ),
                        ));
                    }
                }
            }
            let fits = h.shape == entry.shape
                && h.shape.len() == shape.len()
                && h.shape
                    .iter()
                    .zip(shape)
                    .all(|(a, b)| b.is_none_or(|(_, _, rows)| *a == rows));
            if !fits {
                return Err(field_error(
                    &path,
                    format!("{name}.shape"),
                    format!(
                        "{:?} in the manifest, {:?} in {}",
                        entry.shape, h.shape, entry.file
                    ),
                ));
            }
            Ok(())
        };
        let ids = [Dtype::I64, Dtype::I32];
        let nodes = Some(("node_count", n, n));
        let indptr_rows = Some(("node_count", n, n.saturating_add(1)));
        expect("indptr", &m.indptr, &[Dtype::I64], &[indptr_rows])?;
        expect(
            "indices",
            &m.indices,
            &ids,
            &[Some(("edge_count", m.edge_count, m.edge_count))],
        )?;
        if let Some(f) = &m.features {
            expect("features", f, &[Dtype::F32, Dtype::F16], &[nodes, None])?;
        }
        if let Some(l) = &m.labels {
            expect("labels", l, &[Dtype::I64], &[nodes])?;
        }
        for (name, split) in [("train", &m.train), ("valid", &m.valid), ("test", &m.test)] {
            if let Some(s) = split {
                expect(name, s, &[Dtype::I64], &[None])?;
            }
        }
        if let Some(ids) = &m.node_ids {
            expect("node_ids", ids, &[Dtype::I64], &[nodes])?;
        }
        Ok(d)
    }

    /// The dataset folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every array of the manifest, by name.
    pub fn arrays(&self) -> Vec<(&'static str, &ArrayEntry)> {
        let m = &self.manifest;
        let mut all = vec![("indptr", &m.indptr), ("indices", &m.indices)];
        for (name, entry) in [
            ("features", &m.features),
            ("labels", &m.labels),
            ("train", &m.train),
            ("valid", &m.valid),
            ("test", &m.test),
            ("node_ids", &m.node_ids),
        ] {
            if let Some(e) = entry {
                all.push((name, e));
            }
        }
        all
    }

    /// Checks every array's data against the CRC32C in the manifest (reads everything).
    pub fn verify(&self) -> Result<(), DatasetError> {
        for (name, entry) in self.arrays() {
            let file = self.dir.join(&entry.file);
            let crc = crc_of_data(&file)?;
            if format!("{crc:08x}") != entry.crc32c {
                return Err(field_error(
                    &self.dir.join(MANIFEST),
                    format!("{name}.crc32c"),
                    format!(
                        "{} in the manifest, {crc:08x} in {}",
                        entry.crc32c, entry.file
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Loads the topology into memory.
    pub fn graph(&self) -> Result<CsrGraph, DatasetError> {
        let m = &self.manifest;
        let (_, raw) = npy::read_raw(&self.dir.join(&m.indptr.file), Dtype::I64, 1)?;
        let indptr: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let file = self.dir.join(&m.indices.file);
        let indices: Vec<u32> = if m.indices.dtype == Dtype::I32.descr() {
            let (_, raw) = npy::read_raw(&file, Dtype::I32, 1)?;
            raw.chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
                .collect()
        } else {
            let (_, raw) = npy::read_raw(&file, Dtype::I64, 1)?;
            raw.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .map(|v| {
                    u32::try_from(v).map_err(|_| {
                        field_error(&file, "indices", format!("id {v} does not fit 32 bits"))
                    })
                })
                .collect::<Result<_, _>>()?
        };
        CsrGraph::new(indptr, indices).map_err(|source| DatasetError::Graph {
            path: self.dir.clone(),
            source,
        })
    }
}

/// CRC32C of an `.npy` file's data (everything after its header).
fn crc_of_data(file: &Path) -> Result<u32, DatasetError> {
    use std::io::{Read, Seek, SeekFrom};
    let h = npy::read_header(file)?;
    let mut f = fs::File::open(file).map_err(io_error(file))?;
    f.seek(SeekFrom::Start(h.data_offset))
        .map_err(io_error(file))?;
    let mut state = !0u32;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io_error(file))?;
        if n == 0 {
            return Ok(!state);
        }
        state = sagessd_abi::crc32c::crc32c_update(state, &buf[..n]);
    }
}

/// Writes the arrays of a new dataset and, last, its manifest.
#[derive(Debug)]
pub struct DatasetWriter {
    dir: PathBuf,
}

impl DatasetWriter {
    /// Creates (or reuses) folder `dir`; an existing manifest is removed first, so a half
    /// written dataset is never taken for a whole one.
    pub fn create(dir: &Path) -> Result<Self, DatasetError> {
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        let manifest = dir.join(MANIFEST);
        if manifest.exists() {
            fs::remove_file(&manifest).map_err(io_error(&manifest))?;
        }
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// Starts array `file` of `dtype` and `shape`.
    pub fn array(
        &self,
        file: &str,
        dtype: Dtype,
        shape: &[u64],
    ) -> Result<ArrayWriter, DatasetError> {
        Ok(ArrayWriter {
            w: NpyWriter::create(&self.dir.join(file), dtype, shape)?,
            crc: !0,
            entry: ArrayEntry {
                file: file.to_owned(),
                dtype: dtype.descr().to_owned(),
                shape: shape.to_vec(),
                crc32c: String::new(),
            },
        })
    }

    /// Writes the topology: `indptr.npy` (int64) and `indices.npy` (int32).
    pub fn graph(&self, g: &CsrGraph) -> Result<(ArrayEntry, ArrayEntry), DatasetError> {
        let mut p = self.array("indptr.npy", Dtype::I64, &[g.node_count() + 1])?;
        for chunk in g.indptr().chunks(1 << 16) {
            let bytes: Vec<u8> = chunk.iter().flat_map(|v| v.to_le_bytes()).collect();
            p.write(&bytes)?;
        }
        let mut i = self.array("indices.npy", Dtype::I32, &[g.edge_count()])?;
        for chunk in g.indices().chunks(1 << 16) {
            let bytes: Vec<u8> = chunk.iter().flat_map(|v| v.to_le_bytes()).collect();
            i.write(&bytes)?;
        }
        Ok((p.finish()?, i.finish()?))
    }

    /// Writes a one-dimensional int64 array.
    pub fn ids(&self, file: &str, values: &[i64]) -> Result<ArrayEntry, DatasetError> {
        let mut w = self.array(file, Dtype::I64, &[values.len() as u64])?;
        for chunk in values.chunks(1 << 16) {
            let bytes: Vec<u8> = chunk.iter().flat_map(|v| v.to_le_bytes()).collect();
            w.write(&bytes)?;
        }
        w.finish()
    }

    /// Writes the manifest: the dataset is complete.
    pub fn finish(self, manifest: &Manifest) -> Result<Dataset, DatasetError> {
        let path = self.dir.join(MANIFEST);
        let text =
            toml::to_string(manifest).map_err(|e| field_error(&path, "manifest", e.to_string()))?;
        fs::write(&path, text).map_err(io_error(&path))?;
        Dataset::open(&self.dir)
    }
}

/// One array being written; [`ArrayWriter::finish`] gives its manifest entry.
#[derive(Debug)]
pub struct ArrayWriter {
    w: NpyWriter,
    crc: u32,
    entry: ArrayEntry,
}

impl ArrayWriter {
    /// Appends little-endian element bytes.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), DatasetError> {
        self.crc = sagessd_abi::crc32c::crc32c_update(self.crc, bytes);
        Ok(self.w.write(bytes)?)
    }

    /// Finishes the file.
    pub fn finish(self) -> Result<ArrayEntry, DatasetError> {
        self.w.finish()?;
        Ok(ArrayEntry {
            crc32c: format!("{:08x}", !self.crc),
            ..self.entry
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::rmat::{RmatParams, generate as rmat};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sagessd-ds-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_generated_dataset_opens_verifies_and_holds_the_rmat_graph() {
        let dir = scratch("gen");
        let p = generate::GenerateParams {
            name: "tiny".into(),
            scale: 8,
            edge_factor: 4,
            seed: 3,
            feature_dim: 16,
            feature_dtype: Dtype::F16,
            classes: 4,
        };
        let d = generate::generate(&dir, &p).expect("generates");
        d.verify().expect("checksums hold");
        let g = d.graph().expect("loads");
        assert_eq!(g, rmat(&RmatParams::graph500(8, 4, 3)).expect("rmat"));
        let m = &d.manifest;
        assert_eq!(
            m.features.as_ref().map(|f| f.shape.clone()),
            Some(vec![256, 16])
        );
        let splits: u64 = [&m.train, &m.valid, &m.test]
            .iter()
            .map(|s| s.as_ref().map_or(0, |s| s.shape[0]))
            .sum();
        assert_eq!(splits, 256);
        // Neighbours share labels more often than chance (1/4): the communities are real.
        let (_, raw) = npy::read_raw(&dir.join("labels.npy"), Dtype::I64, 1).expect("labels");
        let labels: Vec<i64> = raw
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let same = (0..g.node_count())
            .flat_map(|v| g.neighbours(v).iter().map(move |u| (v, *u)))
            .filter(|(v, u)| labels[*v as usize] == labels[*u as usize])
            .count();
        assert!(
            same as f64 > 0.3 * g.edge_count() as f64,
            "{same} of {}",
            g.edge_count()
        );

        // Damage: a flipped data byte fails verification, a bad manifest field is named.
        let mut bytes = fs::read(dir.join("indices.npy")).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(dir.join("indices.npy"), &bytes).unwrap();
        let err = Dataset::open(&dir)
            .unwrap()
            .verify()
            .unwrap_err()
            .to_string();
        assert!(err.contains("indices.crc32c"), "{err}");
        let manifest = fs::read_to_string(dir.join(MANIFEST)).unwrap();
        fs::write(
            dir.join(MANIFEST),
            manifest.replace("node_count = 256", "node_count = 255"),
        )
        .unwrap();
        let err = Dataset::open(&dir).unwrap_err().to_string();
        assert!(
            err.contains("node_count: 255 means 256 rows of indptr"),
            "{err}"
        );
        fs::write(dir.join(MANIFEST), manifest.replace("node_count", "nodes")).unwrap();
        let err = Dataset::open(&dir).unwrap_err().to_string();
        assert!(err.contains("manifest.toml"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn snap_edge_lists_import_plain_and_gzipped_and_bad_lines_are_named() {
        let dir = scratch("snap");
        fs::create_dir_all(&dir).unwrap();
        let text = "# a comment\n% another\n10 20\n20\t30\n30 10\n10 10\n10 20\n\n";
        let plain = dir.join("g.txt");
        fs::write(&plain, text).unwrap();
        let d = snap::import(&plain, &dir.join("out"), true).expect("imports");
        let g = d.graph().unwrap();
        assert_eq!((g.node_count(), g.edge_count()), (3, 6));
        assert_eq!(g.neighbours(0), &[1, 2]);
        d.verify().unwrap();

        let gz = dir.join("g.txt.gz");
        let mut enc = flate2::write::GzEncoder::new(
            fs::File::create(&gz).unwrap(),
            flate2::Compression::fast(),
        );
        enc.write_all(text.as_bytes()).unwrap();
        enc.finish().unwrap();
        let d2 = snap::import(&gz, &dir.join("out2"), false).expect("imports gz");
        let g2 = d2.graph().unwrap();
        assert_eq!((g2.node_count(), g2.edge_count()), (3, 3));
        assert!(!d2.manifest.symmetric);

        fs::write(&plain, "1 2\n3 x\n").unwrap();
        let err = snap::import(&plain, &dir.join("out3"), true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("g.txt") && err.contains("line 2") && err.contains("\"x\""),
            "{err}"
        );
        fs::write(&plain, "1\n").unwrap();
        let err = snap::import(&plain, &dir.join("out3"), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 1") && err.contains("target"), "{err}");
        // Ids past int64, a third column, a folder: each refused, naming the line or the input.
        fs::write(&plain, "1 2\n18446744073709551615 3\n").unwrap();
        let err = snap::import(&plain, &dir.join("out3"), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2") && err.contains("2^63"), "{err}");
        fs::write(&plain, "1 2\n3 4 0.5\n").unwrap();
        let err = snap::import(&plain, &dir.join("out3"), true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 2") && err.contains("third column"),
            "{err}"
        );
        let err = snap::import(&dir, &dir.join("out3"), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is a folder"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_count_the_arrays_disagree_with_and_a_malformed_crc_are_named() {
        let dir = scratch("counts");
        let _ = fs::remove_dir_all(&dir);
        let p = generate::GenerateParams {
            name: "counts".into(),
            scale: 6,
            edge_factor: 4,
            seed: 1,
            feature_dim: 0,
            feature_dtype: Dtype::F32,
            classes: 2,
        };
        let d = generate::generate(&dir, &p).expect("generates");
        let manifest = fs::read_to_string(dir.join(MANIFEST)).unwrap();
        let edges = d.manifest.edge_count;
        fs::write(
            dir.join(MANIFEST),
            manifest.replace(
                &format!("edge_count = {edges}"),
                &format!("edge_count = {}", edges + 1),
            ),
        )
        .unwrap();
        let err = Dataset::open(&dir).unwrap_err().to_string();
        assert!(
            err.contains("edge_count") && !err.contains("indices.shape"),
            "{err}"
        );
        let crc = &d.manifest.indices.crc32c;
        fs::write(dir.join(MANIFEST), manifest.replace(crc.as_str(), "xyz")).unwrap();
        let err = Dataset::open(&dir).unwrap_err().to_string();
        assert!(
            err.contains("indices.crc32c") && err.contains("xyz"),
            "{err}"
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
