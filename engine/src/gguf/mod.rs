//! A pure-Rust reader and validator of GGUF files (llama.cpp's model format), and the
//! decoders of their tensors.
//!
//! The engine reads GGUF files itself rather than through MLX's C reader (gguflib), which
//! trusts the file: in MLX 0.32.2 a tensor with more than 4 dimensions aborts the process,
//! the removed type codes 4 and 5 divide by zero, unknown codes and overflowing shapes load
//! as garbage, and of the quantized types only Q4_0, Q4_1 and Q8_0 stay quantized. Here
//! the header, every metadata key and value and every tensor description are read with
//! each count and length checked against the bytes that are left, each size computed
//! without overflow, each tensor's data checked to lie inside the file and not to overlap
//! another's; [`GgufHeader::check_loadable`] then checks types and shapes
//! ([`validate_file`]), and [`native`] converts each tensor's blocks
//! ([`kivi_kernels::ggml`]).
//!
//! - [`GgufHeader::parse`] reads a whole file's bytes (the fuzzing entry point);
//!   [`GgufHeader::read_file`] reads only as much of a file as its header spans.
//! - [`Metadata`] answers typed lookups (`string`, `strings`, `numbers`), which the GGUF
//!   tokenizer is built from.
//! - [`native`] turns a tensor into the floats or MLX-quantized triplets the model runs,
//!   with [`kivi_kernels::ggml`]'s block decoders (the reference).
//! - [`write::to_bytes`] writes small GGUF files, for tests and fuzzing seeds.

mod cursor;
mod error;
pub mod native;
mod tensor;
mod value;
pub mod write;

use std::collections::HashSet;
use std::io::Read;
use std::path::Path;

use cursor::Cursor;
pub use error::GgufError;
pub use tensor::{GgmlType, TensorInfo};
pub use value::{code, type_name, Array, Metadata, Value};

/// The tensor types [`GgufHeader::check_loadable`] accepts, for messages.
pub const SUPPORTED_TENSOR_TYPES_TEXT: &str =
    "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K";
/// Longest metadata key (the specification's limit).
pub const MAX_KEY_BYTES: u64 = 65_535;
/// Longest tensor name accepted.
pub const MAX_NAME_BYTES: u64 = 65_535;
/// Longest metadata string accepted (chat templates are kilobytes).
pub const MAX_STRING_BYTES: u64 = 64 << 20;
/// Most dimensions of a tensor (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Largest header region [`GgufHeader::read_file`] reads (a 128k-token vocabulary with
/// its merges is about 10 MB).
pub const MAX_HEADER_BYTES: u64 = 512 << 20;
/// The data alignment when the file does not set `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// What [`GgufHeader::read_file`] reads first.
const FIRST_READ: u64 = 8 << 20;

/// Smallest encoding of one metadata entry: key length, type, a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Smallest encoding of one tensor description: name length, dimension count, type,
/// offset.
const MIN_TENSOR_BYTES: u64 = 8 + 4 + 4 + 8;

/// A GGUF file's header: version, metadata and tensor descriptions, checked against the
/// file's length.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    /// Format version (2 or 3).
    pub version: u32,
    /// The metadata.
    pub metadata: Metadata,
    /// The tensors, in file order.
    pub tensors: Vec<TensorInfo>,
    /// Alignment of the data section and of every tensor's offset.
    pub alignment: u64,
    /// Where the data section starts.
    pub data_offset: u64,
    /// The file's length.
    pub file_len: u64,
}

impl GgufHeader {
    /// Parses the whole file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<GgufHeader, GgufError> {
        Self::parse_prefix(bytes, bytes.len() as u64)
    }

    /// Parses the first bytes of a file of `file_len` bytes. Returns
    /// [`GgufError::NeedMore`] when the header goes on past `bytes`.
    pub fn parse_prefix(bytes: &[u8], file_len: u64) -> Result<GgufHeader, GgufError> {
        let mut cur = Cursor::new(bytes, file_len);
        let header = || "the GGUF header".to_string();
        let magic: [u8; 4] = cur.array(&header)?;
        if &magic != b"GGUF" {
            return Err(GgufError::NotGguf {
                found: magic.escape_ascii().to_string(),
            });
        }
        let version = cur.u32(&header)?;
        if version != 2 && version != 3 {
            return Err(if matches!(version.swap_bytes(), 1..=3) {
                GgufError::BigEndian
            } else {
                GgufError::Version(version)
            });
        }
        let tensor_count = cur.u64(&header)?;
        let kv_count = cur.u64(&header)?;
        implausible(
            "the metadata entry count",
            kv_count,
            cur.remaining() / MIN_KV_BYTES,
        )?;
        implausible(
            "the tensor count",
            tensor_count,
            cur.remaining() / MIN_TENSOR_BYTES,
        )?;

        let mut metadata = Metadata::default();
        for i in 0..kv_count {
            let key = cur.string(MAX_KEY_BYTES, &|| format!("metadata key #{i}"))?;
            let code = cur.u32(&|| format!("the type of metadata {key:?}"))?;
            let value = Value::read(&mut cur, code, &key)?;
            metadata.insert(key, value)?;
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
            Some(other) => {
                return Err(GgufError::Unsupported(format!(
                    "general.alignment is {other:?}; it must be a power of two stored as uint32: \
                     the file is damaged"
                )))
            }
        };

        implausible(
            "the tensor count",
            tensor_count,
            cur.remaining() / MIN_TENSOR_BYTES,
        )?;
        let mut tensors = Vec::new();
        let mut names = HashSet::new();
        for i in 0..tensor_count {
            let tensor = read_tensor(&mut cur, i, alignment)?;
            if !names.insert(tensor.name.clone()) {
                return Err(GgufError::DuplicateTensor(tensor.name));
            }
            tensors.push(tensor);
        }
        let end = cur.pos();
        let data_offset = end
            .checked_add((alignment - end % alignment) % alignment)
            .ok_or_else(|| GgufError::Overflow("the data section's offset".into()))?;
        let header = GgufHeader {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
            file_len: cur.file_len(),
        };
        header.check_data()?;
        Ok(header)
    }

    /// Reads and parses the header of the file at `path`, reading only as much of the
    /// file as the header spans.
    pub fn read_file(path: &Path) -> Result<GgufHeader, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let mut file_len = file.metadata().map_err(io)?.len();
        let mut bytes = Vec::new();
        let mut want = file_len.min(FIRST_READ);
        loop {
            let have = bytes.len() as u64;
            if want > have {
                (&mut file)
                    .take(want - have)
                    .read_to_end(&mut bytes)
                    .map_err(io)?;
                if (bytes.len() as u64) < want {
                    // The file shrank while being read: what was read is all there is.
                    file_len = bytes.len() as u64;
                }
            }
            match GgufHeader::parse_prefix(&bytes, file_len) {
                Err(GgufError::NeedMore(end)) if end <= MAX_HEADER_BYTES => {
                    want = end.max(want.saturating_mul(4)).min(file_len);
                }
                Err(GgufError::NeedMore(_)) => {
                    return Err(GgufError::HeaderTooLarge {
                        limit: MAX_HEADER_BYTES,
                    })
                }
                other => return other,
            }
        }
    }

    /// Every tensor's data lies inside the file, and no two overlap.
    fn check_data(&self) -> Result<(), GgufError> {
        let mut spans = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            let start = self.data_offset.checked_add(t.offset);
            let end = start.and_then(|s| s.checked_add(t.size));
            match (start, end) {
                (Some(start), Some(end)) if end <= self.file_len => spans.push((start, end, t)),
                _ => {
                    return Err(bad(
                        t,
                        format!(
                            "its {} bytes of data at offset {} run past the end of the file \
                             ({} bytes): the file is truncated; download it again",
                            t.size, t.offset, self.file_len
                        ),
                    ))
                }
            }
        }
        spans.sort_by_key(|s| (s.0, s.1));
        for pair in spans.windows(2) {
            let ((_, end, a), (start, _, b)) = (pair[0], pair[1]);
            if start < end {
                return Err(bad(
                    b,
                    format!(
                        "its data overlaps that of {:?}: the file is damaged",
                        a.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks what the engine's loader needs beyond a well-formed file: tensors of the
    /// types it decodes ([`GgmlType::blocks`]), with 1 to 4 non-empty dimensions that fit MLX's `int`
    /// shapes, quantized ones named `*.weight` (their scales and biases are added beside).
    pub fn check_loadable(&self) -> Result<(), GgufError> {
        let names: HashSet<&str> = self.tensors.iter().map(|t| t.name.as_str()).collect();
        for t in &self.tensors {
            if !t.ggml_type.loadable() {
                return Err(GgufError::UnsupportedTensorType {
                    tensor: t.name.clone(),
                    type_name: t.ggml_type.name,
                });
            }
            if t.dims.is_empty() {
                return Err(bad(t, "it has no dimensions: the file is damaged".into()));
            }
            if let Some(d) = t.dims.iter().find(|&&d| d == 0 || d > i32::MAX as u64) {
                return Err(bad(
                    t,
                    format!("dimension {d} is empty or too large: the file is damaged"),
                ));
            }
            if t.ggml_type.quantized() {
                let Some(prefix) = t.name.strip_suffix(".weight") else {
                    return Err(bad(
                        t,
                        "a quantized tensor must be named *.weight: the file is damaged".into(),
                    ));
                };
                for part in ["scales", "biases"] {
                    let derived = format!("{prefix}.{part}");
                    if names.contains(derived.as_str()) {
                        return Err(GgufError::DuplicateTensor(derived));
                    }
                }
            }
        }
        Ok(())
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Reads the data of `tensor` (one of this header's) from `file` into `buf`.
    pub fn read_tensor(
        &self,
        file: &mut std::fs::File,
        tensor: &TensorInfo,
        buf: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom};
        buf.resize(tensor.size as usize, 0);
        file.seek(SeekFrom::Start(self.data_offset + tensor.offset))?;
        file.read_exact(buf)
    }
}

/// Reads the header of the GGUF file at `path` and checks that the loader can take the
/// file: the gate in front of reading any tensor.
pub fn validate_file(path: &Path) -> Result<GgufHeader, crate::error::LoadError> {
    GgufHeader::read_file(path)
        .and_then(|header| header.check_loadable().map(|()| header))
        .map_err(|e| load_error(path, e))
}

/// The loader's error for a GGUF file refused here: a tensor type the engine cannot run
/// is an unsupported quantization, anything else an invalid file.
pub fn load_error(path: &Path, source: GgufError) -> crate::error::LoadError {
    use crate::error::LoadError;
    match source {
        GgufError::UnsupportedTensorType { .. } => {
            LoadError::UnsupportedQuantization(format!("{}: {source}", path.display()))
        }
        source => LoadError::InvalidGguf {
            path: path.to_path_buf(),
            source,
        },
    }
}

fn bad(t: &TensorInfo, why: String) -> GgufError {
    GgufError::BadTensor {
        tensor: t.name.clone(),
        why,
    }
}

fn implausible(what: &str, value: u64, limit: u64) -> Result<(), GgufError> {
    if value > limit {
        return Err(GgufError::Implausible {
            what: what.to_string(),
            value,
            limit,
        });
    }
    Ok(())
}

fn read_tensor(cur: &mut Cursor<'_>, index: u64, alignment: u64) -> Result<TensorInfo, GgufError> {
    let name = cur.string(MAX_NAME_BYTES, &|| format!("the name of tensor #{index}"))?;
    let what = || format!("the description of tensor {name:?}");
    let ndim = cur.u32(&what)?;
    let err = |why: String| GgufError::BadTensor {
        tensor: name.clone(),
        why,
    };
    if ndim > MAX_DIMS {
        return Err(err(format!(
            "it has {ndim} dimensions, more than GGUF's {MAX_DIMS}: the file is damaged"
        )));
    }
    let mut dims = Vec::with_capacity(ndim as usize);
    for _ in 0..ndim {
        dims.push(cur.u64(&what)?);
    }
    let code = cur.u32(&what)?;
    let offset = cur.u64(&what)?;
    let ggml_type = GgmlType::from_code(code).ok_or_else(|| GgufError::UnknownTensorType {
        tensor: name.clone(),
        code,
    })?;
    let elements = dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            GgufError::Overflow(format!("the element count of tensor {name:?} {dims:?}"))
        })?;
    let row = dims.first().copied().unwrap_or(1);
    if row % ggml_type.block_elements != 0 {
        return Err(err(format!(
            "its rows of {row} elements are not whole {} blocks of {}: the file is damaged",
            ggml_type.name, ggml_type.block_elements
        )));
    }
    let size = (elements / ggml_type.block_elements)
        .checked_mul(ggml_type.block_bytes)
        .ok_or_else(|| GgufError::Overflow(format!("the data size of tensor {name:?} {dims:?}")))?;
    if offset % alignment != 0 {
        return Err(err(format!(
            "its data offset {offset} is not a multiple of the alignment {alignment}: the file \
             is damaged"
        )));
    }
    Ok(TensorInfo {
        name,
        dims,
        ggml_type,
        offset,
        size,
    })
}

#[cfg(test)]
mod tests;
