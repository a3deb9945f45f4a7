//! SNAP edge lists: one edge per line, two node ids separated by whitespace, `#` or `%`
//! comment lines, optionally gzip-compressed (`.gz`).
//!
//! Node ids may be any non-negative integers; they are renumbered 0..n in increasing order of
//! the original id (kept in `node_ids.npy`), which keeps the file's own locality. Self loops and
//! repeated edges are dropped; `symmetric` adds every reverse edge.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::graph::CsrGraph;

use super::{Dataset, DatasetError, DatasetWriter, Manifest, field_error};

/// Imports the edge list `input` (one file, plain or `.gz`) into dataset folder `dir`.
pub fn import(input: &Path, dir: &Path, symmetric: bool) -> Result<Dataset, DatasetError> {
    if input.is_dir() {
        return Err(field_error(
            input,
            "input",
            "is a folder; `import snap` reads one edge-list file (plain or .gz)",
        ));
    }
    let file = File::open(input).map_err(|source| DatasetError::Io {
        path: input.to_owned(),
        source,
    })?;
    let gz = input.extension().is_some_and(|e| e == "gz");
    let reader: Box<dyn Read> = if gz {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let edges = parse_edges(reader, input)?;
    if edges.is_empty() {
        return Err(field_error(input, "edges", "the file has no edge"));
    }
    let mut ids: Vec<u64> = edges.iter().flat_map(|(u, v)| [*u, *v]).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() as u64 > u64::from(u32::MAX) {
        return Err(field_error(
            input,
            "nodes",
            format!("{} nodes is too many", ids.len()),
        ));
    }
    let rank = |id: u64| ids.binary_search(&id).unwrap_or(0) as u32;
    let mut pairs: Vec<(u32, u32)> =
        Vec::with_capacity(edges.len() * if symmetric { 2 } else { 1 });
    for (u, v) in edges {
        let (u, v) = (rank(u), rank(v));
        pairs.push((u, v));
        if symmetric {
            pairs.push((v, u));
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    let graph =
        CsrGraph::from_edges(ids.len() as u64, &pairs).map_err(|source| DatasetError::Graph {
            path: input.to_owned(),
            source,
        })?;
    drop(pairs);
    let w = DatasetWriter::create(dir)?;
    let (indptr, indices) = w.graph(&graph)?;
    let node_ids: Vec<i64> = ids.iter().map(|id| *id as i64).collect();
    let name = input.file_name().map_or("snap".into(), |n| {
        n.to_string_lossy().trim_end_matches(".gz").to_owned()
    });
    let manifest = Manifest {
        node_ids: Some(w.ids("node_ids.npy", &node_ids)?),
        ..Manifest::graph_only(
            &name,
            format!(
                "SNAP edge list {}{}",
                input.display(),
                if symmetric { ", symmetrised" } else { "" }
            ),
            (
                graph.node_count(),
                graph.edge_count(),
                symmetric || graph.is_symmetric(),
            ),
            indptr,
            indices,
        )
    };
    w.finish(&manifest)
}

/// The edges of an edge list read from `reader` (`path` names it in errors), self loops
/// dropped: two node ids per line, each a non-negative integer below 2^63 (`node_ids.npy` holds
/// them as int64); a line with a third column is refused rather than read as an unweighted
/// edge.
pub fn parse_edges(reader: impl Read, path: &Path) -> Result<Vec<(u64, u64)>, DatasetError> {
    let mut edges: Vec<(u64, u64)> = Vec::new();
    for (number, line) in BufReader::with_capacity(64 << 10, reader)
        .lines()
        .enumerate()
    {
        let at = || format!("line {}", number + 1);
        let line = line.map_err(|e| field_error(path, at(), e.to_string()))?;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('%') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let mut id = |which: &str| -> Result<u64, DatasetError> {
            let text = fields
                .next()
                .ok_or_else(|| field_error(path, at(), format!("no {which} node id")))?;
            match text.parse::<u64>() {
                Ok(id) if id <= i64::MAX as u64 => Ok(id),
                Ok(_) => Err(field_error(
                    path,
                    at(),
                    format!("{which} node id {text} is 2^63 or more (node_ids.npy holds int64)"),
                )),
                Err(_) => Err(field_error(
                    path,
                    at(),
                    format!("{which} node id {text:?} is not a non-negative integer"),
                )),
            }
        };
        let (u, v) = (id("source")?, id("target")?);
        if let Some(extra) = fields.next() {
            return Err(field_error(
                path,
                at(),
                format!(
                    "a third column ({extra:?}): weighted or temporal edge lists are not supported"
                ),
            ));
        }
        if u != v {
            edges.push((u, v));
        }
    }
    Ok(edges)
}
