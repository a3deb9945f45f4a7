//! Cora, from the `graphdatascience==2.2` wheel (`pip download --no-deps
//! graphdatascience==2.2`; `scripts/setup.sh` fetches it into `target/downloads/`): two
//! gzip-compressed Parquet files under `graphdatascience/resources/cora/`.
//!
//! * `cora_nodes.parquet.gzip`: `nodeId` (int64), `subject` (int64 class, 0–6), `features`
//!   (list of 1,433 int64 0/1 values);
//! * `cora_rels.parquet.gzip`: `sourceNodeId`, `targetNodeId` (int64): 5,429 citations.
//!
//! Nodes are numbered in file order (original ids kept in `node_ids.npy`), features become
//! float32 rows normalised to sum 1 (as DGL's and PyG's Planetoid loaders give them; an
//! all-zero row stays zero), and citations are symmetrised (Planetoid's 5,278 undirected edges, 10,556 CSR
//! entries). The split is 20 nodes per class for training, then 500 for validation and 1,000 for
//! test, drawn with a fixed seed (the public Planetoid split cannot be rebuilt from this source).
//! Input may be the wheel or a folder holding the two files.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;

use crate::graph::CsrGraph;
use crate::npy::Dtype;
use crate::rng::SplitMix64;

use super::{Dataset, DatasetError, DatasetWriter, FORMAT_VERSION, Manifest, field_error};

/// The wheel's file name, as `pip download --no-deps graphdatascience==2.2` saves it.
pub const WHEEL: &str = "graphdatascience-2.2-py3-none-any.whl";

/// The places [`find_wheel`] looks for [`WHEEL`], in order: `target/downloads/` (where
/// `scripts/setup.sh` puts it) of the working folder, of every folder above each of `anchors`
/// (the running program: a build in `<repo>/target/release/` finds `<repo>/target/downloads/`;
/// the Python package's module in the repository or its venv), then of the folders above the
/// working folder. Without duplicates.
pub fn wheel_candidates(cwd: &Path, anchors: &[&Path]) -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = Vec::new();
    let roots = std::iter::once(cwd)
        .chain(anchors.iter().flat_map(|a| a.ancestors().skip(1)))
        .chain(cwd.ancestors().skip(1));
    for root in roots {
        let path = root.join("target/downloads").join(WHEEL);
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// Finds Cora's wheel when no input is named, from the working folder, the running program and
/// `also` (see [`wheel_candidates`]); the error lists where it looked and how to fetch the
/// wheel.
pub fn find_wheel(also: &[&Path]) -> Result<std::path::PathBuf, DatasetError> {
    let cwd = std::env::current_dir().map_err(|source| DatasetError::Io {
        path: ".".into(),
        source,
    })?;
    let exe = std::env::current_exe().ok();
    let anchors: Vec<&Path> = exe
        .as_deref()
        .into_iter()
        .chain(also.iter().copied())
        .collect();
    let candidates = wheel_candidates(&cwd, &anchors);
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    Err(DatasetError::Io {
        path: WHEEL.into(),
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "not found in {}; fetch it with `python3 -m pip download --no-deps --dest DIR \
                 graphdatascience==2.2` (scripts/setup.sh does, into target/downloads/) and \
                 name it",
                looked.join(", ")
            ),
        ),
    })
}

const NODES: &str = "graphdatascience/resources/cora/cora_nodes.parquet.gzip";
const RELS: &str = "graphdatascience/resources/cora/cora_rels.parquet.gzip";
/// Training nodes per class, then validation and test nodes.
const SPLIT: (usize, usize, usize) = (20, 500, 1000);

/// A Parquet file's rows as columns of fields, by name.
fn read_parquet(path: &Path, bytes: Vec<u8>) -> Result<Vec<HashMap<String, Field>>, DatasetError> {
    let bad = |e: parquet::errors::ParquetError| field_error(path, "parquet", e.to_string());
    let reader = SerializedFileReader::new(bytes::Bytes::from(bytes)).map_err(bad)?;
    let rows = reader.get_row_iter(None).map_err(bad)?;
    rows.map(|row| {
        let row = row.map_err(bad)?;
        Ok(row
            .get_column_iter()
            .map(|(name, field)| (name.clone(), field.clone()))
            .collect())
    })
    .collect()
}

/// The bytes of member `name`: from the wheel (a zip), or from `input/<file name>`.
fn member(input: &Path, name: &str) -> Result<(std::path::PathBuf, Vec<u8>), DatasetError> {
    if input.is_dir() {
        let path = input.join(name.rsplit('/').next().unwrap_or(name));
        let bytes = std::fs::read(&path).map_err(|source| DatasetError::Io {
            path: path.clone(),
            source,
        })?;
        return Ok((path, bytes));
    }
    let file = std::fs::File::open(input).map_err(|source| DatasetError::Io {
        path: input.to_owned(),
        source,
    })?;
    let mut zip = zip::ZipArchive::new(file)
        .map_err(|e| field_error(input, "wheel", format!("not a zip archive: {e}")))?;
    let mut entry = zip
        .by_name(name)
        .map_err(|_| field_error(input, name, "missing from the wheel"))?;
    let mut bytes = Vec::new();
    entry
        .read_to_end(&mut bytes)
        .map_err(|e| field_error(input, name, e.to_string()))?;
    Ok((input.join(name), bytes))
}

fn long(
    path: &Path,
    row: &HashMap<String, Field>,
    column: &str,
    line: usize,
) -> Result<i64, DatasetError> {
    match row.get(column) {
        Some(Field::Long(v)) => Ok(*v),
        Some(Field::Int(v)) => Ok(i64::from(*v)),
        _ => Err(field_error(
            path,
            format!("row {line} column {column}"),
            "missing or not an integer",
        )),
    }
}

/// Imports Cora from `input` (the wheel, or a folder with the two Parquet files) into `dir`.
pub fn import(input: &Path, dir: &Path) -> Result<Dataset, DatasetError> {
    let (nodes_path, bytes) = member(input, NODES)?;
    let nodes = read_parquet(&nodes_path, bytes)?;
    let mut index: HashMap<i64, u32> = HashMap::with_capacity(nodes.len());
    let mut ids = Vec::with_capacity(nodes.len());
    let mut labels = Vec::with_capacity(nodes.len());
    let mut features: Vec<f32> = Vec::new();
    let mut dim = None;
    for (i, row) in nodes.iter().enumerate() {
        let id = long(&nodes_path, row, "nodeId", i)?;
        if index.insert(id, i as u32).is_some() {
            return Err(field_error(
                &nodes_path,
                format!("row {i} column nodeId"),
                format!("id {id} repeated"),
            ));
        }
        ids.push(id);
        labels.push(long(&nodes_path, row, "subject", i)?);
        let Some(Field::ListInternal(list)) = row.get("features") else {
            return Err(field_error(
                &nodes_path,
                format!("row {i} column features"),
                "missing or not a list",
            ));
        };
        let values: Vec<f32> = list
            .elements()
            .iter()
            .map(|f| match f {
                Field::Long(v) => Ok(*v as f32),
                Field::Int(v) => Ok(*v as f32),
                _ => Err(field_error(
                    &nodes_path,
                    format!("row {i} column features"),
                    "a non-integer value",
                )),
            })
            .collect::<Result<_, _>>()?;
        if *dim.get_or_insert(values.len()) != values.len() {
            return Err(field_error(
                &nodes_path,
                format!("row {i} column features"),
                "a different length",
            ));
        }
        let sum: f32 = values.iter().sum();
        features.extend(values.iter().map(|v| if sum > 0.0 { v / sum } else { 0.0 }));
    }
    let n = ids.len() as u64;
    let (rels_path, bytes) = member(input, RELS)?;
    let mut pairs = Vec::new();
    for (i, row) in read_parquet(&rels_path, bytes)?.iter().enumerate() {
        let node = |column: &str| -> Result<u32, DatasetError> {
            let id = long(&rels_path, row, column, i)?;
            index.get(&id).copied().ok_or_else(|| {
                field_error(
                    &rels_path,
                    format!("row {i} column {column}"),
                    format!("id {id} is not a node"),
                )
            })
        };
        let (u, v) = (node("sourceNodeId")?, node("targetNodeId")?);
        if u != v {
            pairs.push((u, v));
            pairs.push((v, u));
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    let graph = CsrGraph::from_edges(n, &pairs).map_err(|source| DatasetError::Graph {
        path: rels_path,
        source,
    })?;
    let max_label = labels.iter().copied().max().unwrap_or(0);
    if max_label >= n as i64 || labels.iter().any(|l| *l < 0) {
        return Err(field_error(
            &nodes_path,
            "subject",
            format!("classes must lie in 0..{n}"),
        ));
    }
    let class_count = (max_label + 1) as u32;
    let (train, valid, test) = split(&labels, class_count);
    let w = DatasetWriter::create(dir)?;
    let (indptr, indices) = w.graph(&graph)?;
    let dim = dim.unwrap_or(0) as u64;
    let mut f = w.array("features.npy", Dtype::F32, &[n, dim])?;
    let bytes: Vec<u8> = features.iter().flat_map(|x| x.to_le_bytes()).collect();
    f.write(&bytes)?;
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        name: "cora".into(),
        source: format!(
            "Cora from {} (graphdatascience 2.2), citations symmetrised",
            input.display()
        ),
        node_count: n,
        edge_count: graph.edge_count(),
        symmetric: true,
        class_count: Some(class_count),
        indptr,
        indices,
        features: Some(f.finish()?),
        labels: Some(w.ids("labels.npy", &labels)?),
        train: Some(w.ids("train.npy", &train)?),
        valid: Some(w.ids("valid.npy", &valid)?),
        test: Some(w.ids("test.npy", &test)?),
        node_ids: Some(w.ids("node_ids.npy", &ids)?),
    };
    w.finish(&manifest)
}

/// 20 nodes per class for training, then 500 and 1,000 of the rest, in one seeded shuffle.
fn split(labels: &[i64], classes: u32) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let mut order: Vec<i64> = (0..labels.len() as i64).collect();
    SplitMix64::new(0).shuffle(&mut order);
    let mut per_class = vec![0usize; classes as usize];
    let (mut train, mut rest) = (Vec::new(), Vec::new());
    for v in order {
        let c = labels[v as usize] as usize;
        if per_class.get(c).is_some_and(|k| *k < SPLIT.0) {
            per_class[c] += 1;
            train.push(v);
        } else {
            rest.push(v);
        }
    }
    let valid: Vec<i64> = rest.iter().take(SPLIT.1).copied().collect();
    let test: Vec<i64> = rest.iter().skip(SPLIT.1).take(SPLIT.2).copied().collect();
    train.sort_unstable();
    (train, valid, test)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where `scripts/setup.sh` puts the wheel.
    fn wheel() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/downloads/graphdatascience-2.2-py3-none-any.whl")
    }

    #[test]
    fn the_wheel_is_found_from_any_folder_below_or_beside_the_build() {
        let exe = Path::new("/repo/target/release/sagessd");
        let found = wheel_candidates(Path::new("/elsewhere/work"), &[exe]);
        let at = |p: &str| found.iter().position(|c| c == Path::new(p));
        let cwd = at("/elsewhere/work/target/downloads/graphdatascience-2.2-py3-none-any.whl");
        let build = at("/repo/target/downloads/graphdatascience-2.2-py3-none-any.whl");
        assert_eq!(cwd, Some(0), "{found:?}");
        assert!(build.is_some(), "{found:?}");
        // A subfolder of the repository finds the repository's downloads too.
        let below = wheel_candidates(Path::new("/repo/docs/x"), &[]);
        assert!(
            below.contains(&"/repo/target/downloads/graphdatascience-2.2-py3-none-any.whl".into()),
            "{below:?}"
        );
        // No folder is named twice.
        let mut unique = found.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), found.len());
    }

    #[test]
    fn cora_imports_with_its_published_shape() {
        let wheel = wheel();
        assert!(
            wheel.exists(),
            "{} is missing: run scripts/setup.sh",
            wheel.display()
        );
        let dir = std::env::temp_dir().join(format!("sagessd-cora-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = import(&wheel, &dir).expect("imports");
        d.verify().unwrap();
        let m = &d.manifest;
        assert_eq!((m.node_count, m.edge_count), (2708, 10_556));
        assert_eq!(m.class_count, Some(7));
        assert_eq!(m.features.as_ref().unwrap().shape, vec![2708, 1433]);
        assert_eq!(m.train.as_ref().unwrap().shape, vec![140]);
        assert_eq!(m.valid.as_ref().unwrap().shape, vec![500]);
        assert_eq!(m.test.as_ref().unwrap().shape, vec![1000]);
        // Not Parquet: the file is named.
        let bogus = dir.join("bogus");
        std::fs::create_dir_all(&bogus).unwrap();
        std::fs::write(bogus.join("cora_nodes.parquet.gzip"), b"not parquet").unwrap();
        let err = import(&bogus, &dir.join("out")).unwrap_err().to_string();
        assert!(
            err.contains("cora_nodes.parquet.gzip") && err.contains("parquet"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
