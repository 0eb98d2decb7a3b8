//! Why a GGUF file was refused.

use std::path::PathBuf;

/// What is wrong with a GGUF file. Every message says what was found and what to do.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// Reading the file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file does not start with `GGUF`.
    #[error("not a GGUF file (it starts with {found:?}, not \"GGUF\"): choose a .gguf model file")]
    NotGguf {
        /// The first bytes of the file.
        found: String,
    },
    /// A GGUF written with big-endian numbers.
    #[error("big-endian GGUF files are not supported: use the standard (little-endian) file")]
    BigEndian,
    /// A format version this reader does not know.
    #[error("GGUF version {0} is not supported (versions 2 and 3 are): download a GGUF made by a recent llama.cpp")]
    Version(u32),
    /// The file ends before the structure it describes.
    #[error("the file ends (at {file_len} bytes) inside {what} at byte {offset}: it is truncated; download it again")]
    Truncated {
        /// What was being read.
        what: String,
        /// Where it starts.
        offset: u64,
        /// The file's length.
        file_len: u64,
    },
    /// A count or size larger than the file could hold.
    #[error(
        "{what} is {value}, more than the file can hold ({limit} at most): the file is damaged"
    )]
    Implausible {
        /// What was counted.
        what: String,
        /// The value in the file.
        value: u64,
        /// The largest value that could be true.
        limit: u64,
    },
    /// Sizes that overflow 64-bit arithmetic.
    #[error("{0} overflows: the file is damaged")]
    Overflow(String),
    /// Text that is not UTF-8.
    #[error("{0} is not valid UTF-8: the file is damaged")]
    Utf8(String),
    /// A metadata value type outside the specification.
    #[error("metadata {key:?} has unknown value type {code}: the file is damaged or from a newer GGUF version")]
    UnknownValueType {
        /// The key.
        key: String,
        /// The type code found.
        code: u32,
    },
    /// The same metadata key twice.
    #[error("metadata key {0:?} appears twice: the file is damaged")]
    DuplicateKey(String),
    /// The same tensor name twice.
    #[error("tensor {0:?} appears twice: the file is damaged")]
    DuplicateTensor(String),
    /// A tensor type code outside ggml's table.
    #[error(
        "tensor {tensor:?} has unknown type {code}: the file is damaged or newer than this app"
    )]
    UnknownTensorType {
        /// The tensor.
        tensor: String,
        /// The type code found.
        code: u32,
    },
    /// A tensor type the engine cannot load.
    #[error(
        "tensor {tensor:?} is stored as {type_name}, which this app cannot load (supported: {}); \
         choose a GGUF file of one of those types (Q4_K_M and Q8_0 are common)",
        super::SUPPORTED_TENSOR_TYPES_TEXT
    )]
    UnsupportedTensorType {
        /// The tensor.
        tensor: String,
        /// The ggml type name.
        type_name: &'static str,
    },
    /// A tensor whose shape, offset or size is impossible.
    #[error("tensor {tensor:?}: {why}")]
    BadTensor {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        why: String,
    },
    /// Something valid in GGUF that the engine's loader cannot take.
    #[error("{0}")]
    Unsupported(String),
    /// A metadata value of another type than the key requires.
    #[error("metadata {key:?} is {found}, expected {expected}: the file is damaged or not a supported model")]
    WrongType {
        /// The key.
        key: String,
        /// What the reader needed.
        expected: &'static str,
        /// What the file holds.
        found: &'static str,
    },
    /// A header region larger than any real model's.
    #[error("the GGUF header is larger than {limit} bytes: the file is damaged or not a model")]
    HeaderTooLarge {
        /// The limit.
        limit: u64,
    },
    /// The bytes given end before the file does: read up to `0` and parse again (only
    /// [`GgufHeader::parse_prefix`](super::GgufHeader::parse_prefix) returns it).
    #[error("more of the file is needed (up to byte {0})")]
    NeedMore(u64),
}
