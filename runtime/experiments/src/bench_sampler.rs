//! The inputs of the in-memory sampler's benchmark (`sagessd bench sampler`), as the anchors'
//! harness (`../shared/anchors`) writes them: a graph folder of `indptr.npy` and `indices.npy`,
//! and a seeds file of one minibatch's targets a row.

use std::path::Path;

use anyhow::Context;
use sagessd_runtime::graph::CsrGraph;
use sagessd_runtime::npy::{self, Dtype};

/// A CSR graph from `indptr.npy` (int64) and `indices.npy` (int32 or int64) in `dir`.
pub fn load_graph(dir: &Path) -> anyhow::Result<CsrGraph> {
    let indptr: Vec<u64> = npy::read_i64(&dir.join("indptr.npy"))?
        .into_iter()
        .map(|v| v as u64)
        .collect();
    let file = dir.join("indices.npy");
    let indices: Vec<u32> = match npy::read_header(&file)?.dtype {
        Dtype::I32 => npy::read_raw(&file, Dtype::I32, 1)?
            .1
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
            .collect(),
        _ => npy::read_i64(&file)?
            .into_iter()
            .map(|v| u32::try_from(v).with_context(|| format!("{}: id {v}", file.display())))
            .collect::<anyhow::Result<_>>()?,
    };
    CsrGraph::new(indptr, indices)
        .with_context(|| format!("{}: not a valid CSR graph", dir.display()))
}

/// The minibatches' targets from an int64 `.npy` of one minibatch a row.
pub fn read_seeds(path: &Path) -> anyhow::Result<Vec<Vec<u64>>> {
    let (shape, raw) = npy::read_raw(path, Dtype::I64, 2)?;
    let width = shape[1] as usize;
    Ok(raw
        .chunks_exact(8 * width.max(1))
        .map(|row| {
            row.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect()
        })
        .collect())
}
