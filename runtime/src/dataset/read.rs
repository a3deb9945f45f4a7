//! Reading a dataset's node arrays for training and for the samplers' minibatches: the splits,
//! the labels and the feature rows, each checked against the node and class counts, with the
//! file and the entry named on a bad value.

use super::{Dataset, DatasetError, field_error};
use crate::npy::{self, Dtype};

/// One of a dataset's node splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The training nodes.
    Train,
    /// The validation nodes.
    Valid,
    /// The test nodes.
    Test,
}

impl Split {
    /// The split's name (as in the manifest).
    pub fn name(self) -> &'static str {
        match self {
            Self::Train => "train",
            Self::Valid => "valid",
            Self::Test => "test",
        }
    }
}

/// A dataset's feature rows as stored: `node_count` rows of `dim` values of `dtype`, row after
/// row (the bytes the feature gatherers and the device hold).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureRows {
    /// The rows, little-endian.
    pub bytes: Vec<u8>,
    /// Values per row.
    pub dim: usize,
    /// `F32` or `F16`.
    pub dtype: Dtype,
}

impl FeatureRows {
    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.dim * self.dtype.size_bytes()
    }
}

impl Dataset {
    /// The node ids of `split`, checked to be below the node count; `None` if the dataset has
    /// no such split.
    pub fn split(&self, split: Split) -> Result<Option<Vec<u64>>, DatasetError> {
        let m = &self.manifest;
        let entry = match split {
            Split::Train => &m.train,
            Split::Valid => &m.valid,
            Split::Test => &m.test,
        };
        let Some(entry) = entry else {
            return Ok(None);
        };
        let path = self.dir.join(&entry.file);
        let ids = npy::read_i64(&path)?;
        let n = m.node_count;
        if let Some(i) = ids.iter().position(|v| !(0..n as i64).contains(v)) {
            return Err(field_error(
                &path,
                format!("entry {i}"),
                format!("{} is not a node id (node count {n})", ids[i]),
            ));
        }
        Ok(Some(ids.into_iter().map(|v| v as u64).collect()))
    }

    /// The nodes' labels (`-1`: unlabelled), checked against the class count; `None` if the
    /// dataset is unlabelled.
    pub fn labels(&self) -> Result<Option<Vec<i64>>, DatasetError> {
        let m = &self.manifest;
        let Some(entry) = &m.labels else {
            return Ok(None);
        };
        let path = self.dir.join(&entry.file);
        let classes = i64::from(m.class_count.ok_or_else(|| {
            field_error(
                &self.dir.join(super::MANIFEST),
                "class_count",
                "missing, but the dataset has labels",
            )
        })?);
        let labels = npy::read_i64(&path)?;
        if let Some(i) = labels.iter().position(|&l| !(-1..classes).contains(&l)) {
            return Err(field_error(
                &path,
                format!("entry {i}"),
                format!("label {} outside -1..{classes}", labels[i]),
            ));
        }
        Ok(Some(labels))
    }

    /// Values per feature row and their type, from the features file's header alone (the rows
    /// stay on storage); `None` if the dataset has no features.
    pub fn feature_shape(&self) -> Result<Option<(usize, Dtype)>, DatasetError> {
        Ok(self.feature_header()?.map(|(_, dim, dtype)| (dim, dtype)))
    }

    /// The feature rows as stored, read into memory; `None` if the dataset has no features.
    pub fn feature_rows(&self) -> Result<Option<FeatureRows>, DatasetError> {
        let Some((path, dim, dtype)) = self.feature_header()? else {
            return Ok(None);
        };
        let (_, bytes) = npy::read_raw(&path, dtype, 2)?;
        Ok(Some(FeatureRows { bytes, dim, dtype }))
    }

    /// The features file, its row length and element type, checked against the node count.
    fn feature_header(&self) -> Result<Option<(std::path::PathBuf, usize, Dtype)>, DatasetError> {
        let Some(entry) = &self.manifest.features else {
            return Ok(None);
        };
        let path = self.dir.join(&entry.file);
        let header = npy::read_header(&path)?;
        let shape = &header.shape;
        if shape.len() != 2 || shape[0] != self.manifest.node_count || shape[1] == 0 {
            return Err(field_error(
                &path,
                "shape",
                format!(
                    "{shape:?} for {} nodes (a row per node, at least one value)",
                    self.manifest.node_count
                ),
            ));
        }
        let dim = usize::try_from(shape[1])
            .ok()
            .filter(|d| {
                d.checked_mul(header.dtype.size_bytes())
                    .is_some_and(|b| b <= u32::MAX as usize)
            })
            .ok_or_else(|| field_error(&path, "shape", format!("rows of {} values", shape[1])))?;
        Ok(Some((path, dim, header.dtype)))
    }
}
