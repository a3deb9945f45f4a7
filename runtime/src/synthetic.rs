//! An emulator's synthetic graph ([`sagessd_emulator::synthetic_graph`]) written out as a dataset
//! folder on real storage, for the real-file samplers. The graph as a sampler reads it in memory
//! is [`crate::sampler::SyntheticSource`].

use std::path::Path;

use sagessd_emulator::synthetic_graph::SyntheticGraph;

use crate::dataset::{Dataset, DatasetError, DatasetWriter, Manifest};
use crate::npy::Dtype;

/// Bytes computed and written per step when a synthetic graph is written out.
const WRITE_CHUNK_BYTES: u64 = 4 << 20;

/// Writes `graph` as a dataset folder `dir` (`indptr.npy` int64, `indices.npy` int32, no
/// features or labels), computing it a chunk at a time: the same bytes the emulated flash
/// serves, on real storage for the real-file samplers. `description` is the manifest's source.
pub fn write_dataset(
    graph: &SyntheticGraph,
    dir: &Path,
    name: &str,
    description: &str,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Dataset, DatasetError> {
    let w = DatasetWriter::create(dir)?;
    let total = graph.indptr_bytes() + graph.indices_bytes();
    let mut done = 0;
    let mut write = |file: &str,
                     dtype: Dtype,
                     len: u64,
                     bytes: u64,
                     fill: &dyn Fn(u64, &mut [u8])|
     -> Result<_, DatasetError> {
        let mut out = w.array(file, dtype, &[len])?;
        let mut buf = vec![0u8; WRITE_CHUNK_BYTES as usize];
        let mut at = 0;
        while at < bytes {
            let n = WRITE_CHUNK_BYTES.min(bytes - at) as usize;
            fill(at, &mut buf[..n]);
            out.write(&buf[..n])?;
            at += n as u64;
            done += n as u64;
            progress(done, total);
        }
        out.finish()
    };
    let indptr = write(
        "indptr.npy",
        Dtype::I64,
        graph.node_count() + 1,
        graph.indptr_bytes(),
        &|o, b| graph.fill_indptr(o, b),
    )?;
    let indices = write(
        "indices.npy",
        Dtype::I32,
        graph.edge_count(),
        graph.indices_bytes(),
        &|o, b| graph.fill_indices(o, b),
    )?;
    w.finish(&Manifest::graph_only(
        name,
        description.to_owned(),
        (graph.node_count(), graph.edge_count(), false),
        indptr,
        indices,
    ))
}
