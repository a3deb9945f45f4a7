//! OGB-style node-property datasets: a folder of `.npy` files, or one `.npz` archive, holding
//!
//! * `edge_index` (int64 `[2, E]`: sources, then targets), or `indptr` + `indices` (CSR);
//! * optionally `num_nodes` (int64, one value; otherwise the largest id + 1), `node_feat`
//!   (float32 or float16 `[n, d]`), `node_label` (int64 or int32, `[n]` or `[n, 1]`), and the
//!   split `train_idx`, `valid_idx`, `test_idx` (int64; `train`, `valid`, `test` also accepted).
//!
//! Edges are deduplicated, self loops dropped, and reversed too on request. An `.npz` member is
//! decompressed in memory. Every array is checked: a wrong dtype, shape or id names its file and
//! field.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::graph::CsrGraph;
use crate::npy::{self, Dtype, NpyHeader};

use super::{Dataset, DatasetError, DatasetWriter, FORMAT_VERSION, Manifest, field_error};

/// Where the arrays come from.
enum Source {
    Folder(PathBuf),
    Npz(PathBuf, zip::ZipArchive<File>),
}

/// An array read whole: its header, data, and the path to name in errors.
struct Array {
    header: NpyHeader,
    data: Vec<u8>,
    path: PathBuf,
}

impl Source {
    fn open(input: &Path) -> Result<Self, DatasetError> {
        if input.is_dir() {
            return Ok(Self::Folder(input.to_owned()));
        }
        let file = File::open(input).map_err(|source| DatasetError::Io {
            path: input.to_owned(),
            source,
        })?;
        let zip = zip::ZipArchive::new(file)
            .map_err(|e| field_error(input, "npz", format!("not a zip archive: {e}")))?;
        Ok(Self::Npz(input.to_owned(), zip))
    }

    /// The first of `names` present.
    fn array(&mut self, names: &[&str]) -> Result<Option<Array>, DatasetError> {
        for name in names {
            let file = format!("{name}.npy");
            match self {
                Self::Folder(dir) => {
                    let path = dir.join(&file);
                    if !path.exists() {
                        continue;
                    }
                    let header = npy::read_header(&path)?;
                    let (_, data) = npy::read_raw(&path, header.dtype, header.shape.len())?;
                    return Ok(Some(Array { header, data, path }));
                }
                Self::Npz(archive, zip) => {
                    let mut entry = match zip.by_name(&file) {
                        Ok(e) => e,
                        Err(zip::result::ZipError::FileNotFound) => continue,
                        Err(e) => return Err(field_error(archive, *name, e.to_string())),
                    };
                    let path = archive.join(&file);
                    let mut bytes = Vec::new();
                    entry
                        .read_to_end(&mut bytes)
                        .map_err(|e| field_error(&path, "npz member", e.to_string()))?;
                    let (header, data) = npy::parse_bytes(&path, &bytes)?;
                    let data = data.to_vec();
                    return Ok(Some(Array { header, data, path }));
                }
            }
        }
        Ok(None)
    }
}

impl Array {
    /// The elements as i64, from int64 or int32 (any shape, flattened).
    fn ids(&self, field: &str) -> Result<Vec<i64>, DatasetError> {
        let values: Vec<i64> = match self.header.dtype {
            Dtype::I64 => self
                .data
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            Dtype::I32 => self
                .data
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap_or([0; 4]))))
                .collect(),
            other => {
                return Err(field_error(
                    &self.path,
                    format!("{field}.dtype"),
                    format!("{} is not an integer type", other.descr()),
                ));
            }
        };
        Ok(values)
    }
}

/// Imports the OGB-style dataset `input` (folder or `.npz`) into dataset folder `dir`.
pub fn import(input: &Path, dir: &Path, symmetric: bool) -> Result<Dataset, DatasetError> {
    let mut src = Source::open(input)?;
    let num_nodes = src
        .array(&["num_nodes"])?
        .map(|a| a.ids("num_nodes"))
        .transpose()?;
    let mut pairs: Vec<(u32, u32)> = Vec::new();
    let (node_count, edge_source) = if let Some(e) = src.array(&["edge_index"])? {
        if e.header.shape.len() != 2 || e.header.shape[0] != 2 {
            return Err(field_error(
                &e.path,
                "edge_index.shape",
                format!("{:?}, expected [2, E]", e.header.shape),
            ));
        }
        let ids = e.ids("edge_index")?;
        let m = ids.len() / 2;
        let max = ids.iter().copied().max().unwrap_or(-1);
        let n = num_nodes
            .as_ref()
            .and_then(|v| v.first().copied())
            .unwrap_or(max + 1);
        if ids.iter().any(|v| *v < 0 || *v >= n) || n > i64::from(u32::MAX) {
            return Err(field_error(
                &e.path,
                "edge_index",
                format!("an id is outside 0..{n}"),
            ));
        }
        for k in 0..m {
            let (u, v) = (ids[k] as u32, ids[m + k] as u32);
            if u != v {
                pairs.push((u, v));
                if symmetric {
                    pairs.push((v, u));
                }
            }
        }
        (n as u64, e.path)
    } else if let (Some(p), Some(i)) = (src.array(&["indptr"])?, src.array(&["indices"])?) {
        let indptr = p.ids("indptr")?;
        let indices = i.ids("indices")?;
        let n = indptr.len().saturating_sub(1);
        let ok = indptr.first() == Some(&0)
            && indptr.windows(2).all(|w| w[0] <= w[1])
            && indptr.last().copied() == Some(indices.len() as i64);
        if !ok {
            return Err(field_error(
                &p.path,
                "indptr",
                "not a non-decreasing offsets array from 0 to the indices' length",
            ));
        }
        if indices.iter().any(|v| *v < 0 || *v as u64 >= n as u64) {
            return Err(field_error(
                &i.path,
                "indices",
                format!("an id is outside 0..{n}"),
            ));
        }
        for u in 0..n {
            for k in indptr[u]..indptr[u + 1] {
                let v = indices[k as usize] as u32;
                if v != u as u32 {
                    pairs.push((u as u32, v));
                    if symmetric {
                        pairs.push((v, u as u32));
                    }
                }
            }
        }
        (n as u64, i.path)
    } else {
        return Err(field_error(
            input,
            "edge_index",
            "neither edge_index nor indptr + indices is present",
        ));
    };
    pairs.sort_unstable();
    pairs.dedup();
    let graph = CsrGraph::from_edges(node_count, &pairs).map_err(|source| DatasetError::Graph {
        path: edge_source,
        source,
    })?;
    drop(pairs);
    let w = DatasetWriter::create(dir)?;
    let (indptr, indices) = w.graph(&graph)?;
    let features = match src.array(&["node_feat"])? {
        None => None,
        Some(f) => {
            let shape = &f.header.shape;
            if shape.len() != 2
                || shape[0] != node_count
                || !matches!(f.header.dtype, Dtype::F32 | Dtype::F16)
            {
                return Err(field_error(
                    &f.path,
                    "node_feat",
                    format!(
                        "{} {:?}, expected float32/float16 [{node_count}, d]",
                        f.header.dtype.descr(),
                        shape
                    ),
                ));
            }
            let mut out = w.array("features.npy", f.header.dtype, shape)?;
            out.write(&f.data)?;
            Some(out.finish()?)
        }
    };
    let (labels, class_count) = match src.array(&["node_label"])? {
        None => (None, None),
        Some(l) => {
            let values = l.ids("node_label")?;
            if values.len() as u64 != node_count {
                return Err(field_error(
                    &l.path,
                    "node_label.shape",
                    format!("{:?}, expected [{node_count}]", l.header.shape),
                ));
            }
            let max = values.iter().copied().max().unwrap_or(-1);
            if max >= node_count as i64 || values.iter().any(|v| *v < -1) {
                return Err(field_error(
                    &l.path,
                    "node_label",
                    format!("labels must be -1 (none) or 0..{node_count}"),
                ));
            }
            let classes = Some((max + 1).max(0) as u32);
            (Some(w.ids("labels.npy", &values)?), classes)
        }
    };
    let mut split = |names: &[&str], file: &str| -> Result<_, DatasetError> {
        src.array(names)?
            .map(|a| {
                let ids = a.ids(names[0])?;
                if ids.iter().any(|v| *v < 0 || *v as u64 >= node_count) {
                    return Err(field_error(
                        &a.path,
                        names[0],
                        format!("a node id is outside 0..{node_count}"),
                    ));
                }
                w.ids(file, &ids)
            })
            .transpose()
    };
    let train = split(&["train_idx", "train"], "train.npy")?;
    let valid = split(&["valid_idx", "valid"], "valid.npy")?;
    let test = split(&["test_idx", "test"], "test.npy")?;
    let name = input
        .file_stem()
        .map_or("ogb".into(), |n| n.to_string_lossy().into_owned());
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        name,
        source: format!(
            "OGB-style arrays {}{}",
            input.display(),
            if symmetric { ", symmetrised" } else { "" }
        ),
        node_count,
        edge_count: graph.edge_count(),
        symmetric: symmetric || graph.is_symmetric(),
        class_count,
        indptr,
        indices,
        features,
        labels,
        train,
        valid,
        test,
        node_ids: None,
    };
    w.finish(&manifest)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::npy::write_1d;

    fn write_2d(path: &Path, dtype: Dtype, shape: &[u64], bytes: &[u8]) {
        let mut w = npy::NpyWriter::create(path, dtype, shape).unwrap();
        w.write(bytes).unwrap();
        w.finish().unwrap();
    }

    #[test]
    fn folders_and_npz_archives_import_and_bad_arrays_are_named() {
        let base = std::env::temp_dir().join(format!("sagessd-ogb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let src = base.join("src");
        std::fs::create_dir_all(&src).unwrap();
        // 4 nodes, edges 0-1, 1-2, 2-3 (one direction), 2 features, labels, a split.
        let edges: Vec<i64> = vec![0, 1, 2, 1, 2, 3];
        let bytes: Vec<u8> = edges.iter().flat_map(|v| v.to_le_bytes()).collect();
        write_2d(&src.join("edge_index.npy"), Dtype::I64, &[2, 3], &bytes);
        let feats: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
        write_2d(&src.join("node_feat.npy"), Dtype::F32, &[4, 2], &feats);
        write_1d(
            &src.join("node_label.npy"),
            Dtype::I64,
            &[0i64, 1, 1, 2],
            |v| v.to_le_bytes(),
        )
        .unwrap();
        write_1d(&src.join("train_idx.npy"), Dtype::I64, &[0i64, 2], |v| {
            v.to_le_bytes()
        })
        .unwrap();
        let d = import(&src, &base.join("out"), true).unwrap();
        d.verify().unwrap();
        let g = d.graph().unwrap();
        assert_eq!((g.node_count(), g.edge_count()), (4, 6));
        assert_eq!(d.manifest.class_count, Some(3));
        assert_eq!(d.manifest.train.as_ref().unwrap().shape, vec![2]);

        // The same arrays in an .npz, deflated as numpy.savez_compressed writes them.
        let npz = base.join("g.npz");
        let mut zip = zip::ZipWriter::new(File::create(&npz).unwrap());
        for name in ["edge_index", "node_feat", "node_label", "train_idx"] {
            let options = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated);
            zip.start_file(format!("{name}.npy"), options).unwrap();
            zip.write_all(&std::fs::read(src.join(format!("{name}.npy"))).unwrap())
                .unwrap();
        }
        zip.finish().unwrap();
        let z = import(&npz, &base.join("out2"), true).unwrap();
        assert_eq!(z.graph().unwrap(), g);

        // An id past the node count, and a label array of the wrong length.
        write_1d(&src.join("num_nodes.npy"), Dtype::I64, &[3i64], |v| {
            v.to_le_bytes()
        })
        .unwrap();
        let err = import(&src, &base.join("out3"), true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("edge_index.npy") && err.contains("outside 0..3"),
            "{err}"
        );
        std::fs::remove_file(src.join("num_nodes.npy")).unwrap();
        write_1d(&src.join("node_label.npy"), Dtype::I64, &[0i64], |v| {
            v.to_le_bytes()
        })
        .unwrap();
        let err = import(&src, &base.join("out3"), true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("node_label.npy") && err.contains("node_label.shape"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&base);
    }
}
