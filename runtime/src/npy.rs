//! NumPy `.npy` files (format versions 1.0–3.0): the array files of sagessd datasets, of OGB
//! dumps and of the sampler-comparison harness.
//!
//! A file is the magic `\x93NUMPY`, a version, a header length, a Python-dict header naming
//! `descr` (dtype), `fortran_order` and `shape`, padding, then the raw C-order data. Only
//! little-endian (or byte-sized) numeric dtypes are read and written; anything else is an error
//! naming the file and the field.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Element types sagessd reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// `<i8`: int64.
    I64,
    /// `<i4`: int32.
    I32,
    /// `<u4`: uint32.
    U32,
    /// `<u8`: uint64.
    U64,
    /// `<f4`: float32.
    F32,
    /// `<f2`: float16.
    F16,
    /// `|u1`: uint8.
    U8,
    /// `|b1`: bool (one byte).
    Bool,
}

impl Dtype {
    /// The numpy `descr` string.
    pub fn descr(self) -> &'static str {
        match self {
            Self::I64 => "<i8",
            Self::I32 => "<i4",
            Self::U32 => "<u4",
            Self::U64 => "<u8",
            Self::F32 => "<f4",
            Self::F16 => "<f2",
            Self::U8 => "|u1",
            Self::Bool => "|b1",
        }
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            Self::I64 | Self::U64 => 8,
            Self::I32 | Self::U32 | Self::F32 => 4,
            Self::F16 => 2,
            Self::U8 | Self::Bool => 1,
        }
    }

    fn from_descr(d: &str) -> Option<Self> {
        Some(match d {
            "<i8" => Self::I64,
            "<i4" => Self::I32,
            "<u4" => Self::U32,
            "<u8" => Self::U64,
            "<f4" => Self::F32,
            "<f2" => Self::F16,
            "|u1" | "<u1" => Self::U8,
            "|b1" => Self::Bool,
            _ => return None,
        })
    }
}

/// Why an `.npy` file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A header field is missing or unusable.
    #[error("{path}: .npy {field}: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// The field (`magic`, `descr`, `shape`, …).
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// The header of an `.npy` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    /// Element type.
    pub dtype: Dtype,
    /// Shape (C order).
    pub shape: Vec<u64>,
    /// Byte offset of the data in the file.
    pub data_offset: u64,
}

impl NpyHeader {
    /// Number of elements.
    pub fn len(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn format_error(path: &Path, field: &'static str, reason: impl Into<String>) -> NpyError {
    NpyError::Format {
        path: path.to_owned(),
        field,
        reason: reason.into(),
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> NpyError + '_ {
    move |source| NpyError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Reads and checks the header of `path`.
pub fn read_header(path: &Path) -> Result<NpyHeader, NpyError> {
    let mut r = BufReader::new(File::open(path).map_err(io_error(path))?);
    parse_header(path, &mut r)
}

fn parse_header<R: Read>(path: &Path, r: &mut R) -> Result<NpyHeader, NpyError> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)
        .map_err(|_| format_error(path, "magic", "file shorter than the .npy magic"))?;
    if &magic[..6] != b"\x93NUMPY" {
        return Err(format_error(path, "magic", "not a .npy file"));
    }
    let (len, prefix) = match magic[6] {
        1 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b)
                .map_err(|_| format_error(path, "header length", "file ends before it"))?;
            (u64::from(u16::from_le_bytes(b)), 10)
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            r.read_exact(&mut b)
                .map_err(|_| format_error(path, "header length", "file ends before it"))?;
            (u64::from(u32::from_le_bytes(b)), 12)
        }
        v => {
            return Err(format_error(
                path,
                "version",
                format!("{v} is not 1, 2 or 3"),
            ));
        }
    };
    if len > 1 << 20 {
        return Err(format_error(path, "header length", format!("{len} bytes")));
    }
    let mut text = vec![0u8; len as usize];
    r.read_exact(&mut text)
        .map_err(|_| format_error(path, "header", "file ends inside the header"))?;
    let text = String::from_utf8_lossy(&text);
    let descr = dict_value(&text, "descr").ok_or_else(|| format_error(path, "descr", "missing"))?;
    let descr = descr.trim().trim_matches(|c| c == '\'' || c == '"');
    let dtype = Dtype::from_descr(descr)
        .ok_or_else(|| format_error(path, "descr", format!("{descr:?} is not supported")))?;
    let fortran = dict_value(&text, "fortran_order")
        .ok_or_else(|| format_error(path, "fortran_order", "missing"))?;
    if fortran.trim() != "False" {
        return Err(format_error(
            path,
            "fortran_order",
            "only C order is supported",
        ));
    }
    let shape = dict_value(&text, "shape").ok_or_else(|| format_error(path, "shape", "missing"))?;
    let shape = shape
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<u64>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format_error(path, "shape", e.to_string()))?;
    // Element count and byte size must be representable before anyone trusts them.
    shape
        .iter()
        .try_fold(1u64, |a, d| a.checked_mul(*d))
        .and_then(|n| n.checked_mul(dtype.size_bytes() as u64))
        .and_then(|b| b.checked_add(prefix + len))
        .ok_or_else(|| format_error(path, "shape", format!("{shape:?} is too large")))?;
    Ok(NpyHeader {
        dtype,
        shape,
        data_offset: prefix + len,
    })
}

/// The text after `'key':` up to the next top-level comma or closing brace.
fn dict_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let at = text
        .find(&format!("'{key}'"))
        .or_else(|| text.find(&format!("\"{key}\"")))?;
    let rest = &text[at + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?;
    let mut depth = 0i32;
    for (i, ch) in rest.char_indices() {
        match ch {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' | '}' if depth == 0 => return Some(&rest[..i]),
            _ => {}
        }
    }
    None
}

/// Parses an `.npy` held in memory (`path` names it in errors, e.g. an `.npz` member): its
/// header and its data bytes, checked against the shape.
pub fn parse_bytes<'a>(path: &Path, bytes: &'a [u8]) -> Result<(NpyHeader, &'a [u8]), NpyError> {
    let mut cursor = bytes;
    let h = parse_header(path, &mut cursor)?;
    let len = h
        .len()
        .checked_mul(h.dtype.size_bytes() as u64)
        .ok_or_else(|| format_error(path, "shape", "too large"))?;
    let data = bytes
        .get(h.data_offset as usize..)
        .and_then(|d| d.get(..len as usize))
        .ok_or_else(|| {
            format_error(path, "data", format!("{len} bytes expected, fewer present"))
        })?;
    Ok((h, data))
}

/// Reads a whole array of `dtype` with the number of dimensions `ndim`, returning its shape
/// and its elements as little-endian bytes.
pub fn read_raw(path: &Path, dtype: Dtype, ndim: usize) -> Result<(Vec<u64>, Vec<u8>), NpyError> {
    let mut r = BufReader::new(File::open(path).map_err(io_error(path))?);
    let h = parse_header(path, &mut r)?;
    if h.dtype != dtype {
        return Err(format_error(
            path,
            "descr",
            format!("{} where {} is needed", h.dtype.descr(), dtype.descr()),
        ));
    }
    if h.shape.len() != ndim {
        return Err(format_error(
            path,
            "shape",
            format!("{:?} where {ndim} dimension(s) are needed", h.shape),
        ));
    }
    let bytes = h
        .len()
        .checked_mul(dtype.size_bytes() as u64)
        .ok_or_else(|| format_error(path, "shape", "too large"))?;
    let file_len = std::fs::metadata(path).map_err(io_error(path))?.len();
    if file_len < h.data_offset.saturating_add(bytes) {
        return Err(format_error(
            path,
            "data",
            format!("{} bytes expected, the file is shorter", bytes),
        ));
    }
    let mut data = vec![0u8; bytes as usize];
    r.read_exact(&mut data).map_err(io_error(path))?;
    Ok((h.shape, data))
}

/// Reads a one-dimensional int64 array.
pub fn read_i64(path: &Path) -> Result<Vec<i64>, NpyError> {
    let (_, raw) = read_raw(path, Dtype::I64, 1)?;
    Ok(raw
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect())
}

/// The header dictionary [`NpyWriter`] writes for an array of `dtype` and `shape`, padded so
/// that the data starts on a 64-byte boundary (after the 10-byte prefix), ending in a newline.
fn header_text(dtype: Dtype, shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape_text}, }}",
        dtype.descr()
    );
    let total = (10 + header.len() + 1).next_multiple_of(64);
    header.push_str(&" ".repeat(total - 10 - header.len() - 1));
    header.push('\n');
    header
}

/// Where the data of an array of `dtype` and `shape` starts in the file [`NpyWriter`] writes.
pub fn data_offset(dtype: Dtype, shape: &[u64]) -> u64 {
    10 + header_text(dtype, shape).len() as u64
}

/// Streams an array to a file: the header first, then elements in C order.
#[derive(Debug)]
pub struct NpyWriter {
    w: BufWriter<File>,
    path: PathBuf,
    remaining_bytes: u64,
}

impl NpyWriter {
    /// Creates `path` for an array of `dtype` and `shape`.
    pub fn create(path: &Path, dtype: Dtype, shape: &[u64]) -> Result<Self, NpyError> {
        let header = header_text(dtype, shape);
        let mut w = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io_error(path))?);
        w.write_all(b"\x93NUMPY\x01\x00").map_err(io_error(path))?;
        w.write_all(&(header.len() as u16).to_le_bytes())
            .map_err(io_error(path))?;
        w.write_all(header.as_bytes()).map_err(io_error(path))?;
        Ok(Self {
            w,
            path: path.to_owned(),
            remaining_bytes: shape.iter().product::<u64>() * dtype.size_bytes() as u64,
        })
    }

    /// Appends raw little-endian element bytes.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), NpyError> {
        if bytes.len() as u64 > self.remaining_bytes {
            return Err(format_error(
                &self.path,
                "data",
                "more elements than the shape holds",
            ));
        }
        self.remaining_bytes -= bytes.len() as u64;
        self.w.write_all(bytes).map_err(io_error(&self.path))
    }

    /// Finishes the file; every element must have been written.
    pub fn finish(mut self) -> Result<(), NpyError> {
        if self.remaining_bytes != 0 {
            return Err(format_error(
                &self.path,
                "data",
                "fewer elements than the shape holds",
            ));
        }
        self.w.flush().map_err(io_error(&self.path))
    }
}

/// Writes a one-dimensional array of `T` (given as little-endian bytes per element).
pub fn write_1d<T: Copy>(
    path: &Path,
    dtype: Dtype,
    values: &[T],
    to_le: impl Fn(T) -> [u8; 8],
) -> Result<(), NpyError> {
    let mut w = NpyWriter::create(path, dtype, &[values.len() as u64])?;
    let size = dtype.size_bytes();
    let mut buf = Vec::with_capacity(1 << 16);
    for v in values {
        buf.extend_from_slice(&to_le(*v)[..size]);
        if buf.len() >= 1 << 16 {
            w.write(&buf)?;
            buf.clear();
        }
    }
    w.write(&buf)?;
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("sagessd-npy-{}-{name}.npy", std::process::id()))
    }

    #[test]
    fn arrays_round_trip_and_bad_headers_name_the_field() {
        let path = scratch("roundtrip");
        let values: Vec<i64> = vec![0, 3, -7, 1 << 40];
        write_1d(&path, Dtype::I64, &values, |v| v.to_le_bytes()).unwrap();
        assert_eq!(read_i64(&path).unwrap(), values);
        let h = read_header(&path).unwrap();
        assert_eq!(
            (h.dtype, h.shape.clone(), h.data_offset % 64),
            (Dtype::I64, vec![4], 0)
        );

        let mut w = NpyWriter::create(&path, Dtype::F32, &[2, 3]).unwrap();
        w.write(&[0u8; 24]).unwrap();
        w.finish().unwrap();
        assert_eq!(read_header(&path).unwrap().shape, vec![2, 3]);
        // data_offset says where the data starts, as the header read back does.
        assert_eq!(
            data_offset(Dtype::F32, &[2, 3]),
            read_header(&path).unwrap().data_offset
        );
        assert_eq!(data_offset(Dtype::F32, &[111_059_956, 128]), 128);
        let err = read_i64(&path).unwrap_err().to_string();
        assert!(err.contains("descr") && err.contains(".npy"), "{err}");

        // numpy's own header text (version 1.0, as numpy.save writes it).
        let header = "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }";
        let mut file = b"\x93NUMPY\x01\x00".to_vec();
        let padded = format!("{header:<117}\n");
        file.extend_from_slice(&(padded.len() as u16).to_le_bytes());
        file.extend_from_slice(padded.as_bytes());
        file.extend_from_slice(&5i64.to_le_bytes());
        std::fs::write(&path, &file).unwrap();
        let short = read_i64(&path).unwrap_err().to_string();
        assert!(short.contains("data"), "{short}");
        file.extend_from_slice(&6i64.to_le_bytes());
        std::fs::write(&path, &file).unwrap();
        assert_eq!(read_i64(&path).unwrap(), vec![5, 6]);

        std::fs::write(&path, b"not numpy").unwrap();
        assert!(
            read_header(&path)
                .unwrap_err()
                .to_string()
                .contains("magic")
        );
        let _ = std::fs::remove_file(&path);
    }
}
