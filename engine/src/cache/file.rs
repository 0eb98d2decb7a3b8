//! Saving a model's KV caches to a file and opening them again, so that a long document's
//! cache is reopened without a new prefill.
//!
//! The file is safetensors: one tensor per cache buffer, named `layers.<i>.<buffer>`, and a
//! header (safetensors metadata) with the format name and version, the model id, the cache
//! settings (JSON), the token and layer counts, each layer's sliding window where a model
//! has window layers, free-form `extra` entries, and a checksum over all of it. The loader ([`from_bytes`], a function of bytes alone so it can be
//! fuzzed) refuses, with a [`CacheFileError`] that says what to do, a file that is not a
//! cache file, is truncated or damaged, fails its checksum, was made for another model or
//! with other settings, or holds arrays that do not fit those settings. It never panics.
//!
//! The checksum (64-bit, FNV-style) catches damage and casual edits; it is not a defence
//! against someone who recomputes it, and loading never trusts the file beyond shapes
//! and sizes that it checks.

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
};

use mlx_rs::{Array, Dtype as MlxDtype};
use safetensors::{tensor::TensorView, Dtype, SafeTensorError, SafeTensors, View};

use super::{CacheConfig, CacheError, CacheState, KvCache};
use crate::backend::Backend;

/// The `format` entry of every cache file.
pub const FORMAT: &str = "kivi-chat-kv-cache";
/// The version of the layout this code writes. Version 2: a KIVI cache of a float32 model
/// holds its scales, zeros and residual window in float16. Version 3: KIVI+ settings (the
/// residual arrays begin with the attention sinks; keys and values may be stored in the
/// Hadamard basis), which version 2 readers cannot take. Version 4: `windows`, each layer's
/// sliding window (a window layer holds its newest positions whatever the settings), which
/// a version 3 reader would take for KIVI layers. Version 5: an adaptive basis's key
/// channel factors (`basis.key_scales`), unknown to a version 4 reader.
pub const VERSION: &str = "5";
/// Versions this code reads: a version 2 file holds plain KIVI or full precision, whose
/// layout version 3 keeps; neither has window layers; an adaptive basis of version 4 or
/// before scaled no channel (all ones).
const READABLE: [&str; 4] = ["2", "3", "4", VERSION];
/// More layers than any model has: a header claiming more is refused.
const MAX_LAYERS: usize = 4096;

/// Why a cache file could not be written or opened.
#[derive(Debug, thiserror::Error)]
pub enum CacheFileError {
    /// Reading or writing the file failed.
    #[error("cannot access the KV cache file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file ends early (or runs on past its last tensor).
    #[error("the KV cache file is truncated or has trailing bytes ({0}); delete it and prefill the document again")]
    Length(String),
    /// Not a cache file, or damaged beyond reading.
    #[error(
        "not a readable KIVI Chat KV cache file: {0}; delete it and prefill the document again"
    )]
    Corrupt(String),
    /// Written by another version of the format.
    #[error("KV cache file format version {found:?} is not supported (this build reads 2 to {VERSION}); prefill the document again")]
    Version {
        /// The version in the file.
        found: String,
    },
    /// The contents do not match the checksum in the header.
    #[error("the KV cache file fails its checksum: it was altered or damaged; delete it and prefill the document again")]
    Checksum,
    /// Made for another model.
    #[error("the KV cache file was made for model {found:?}, not {expected:?}; open it with that model or prefill again")]
    WrongModel {
        /// The model asked for.
        expected: String,
        /// The model in the file.
        found: String,
    },
    /// Made with other cache settings.
    #[error("the KV cache file was made with cache settings {found}, not {expected}; switch the cache settings to {found} or prefill again")]
    WrongSettings {
        /// The settings asked for.
        expected: CacheConfig,
        /// The settings in the file.
        found: CacheConfig,
    },
    /// The caches to save do not form one model's cache.
    #[error("cannot save the KV cache: {0}")]
    Save(String),
    /// A cache could not give or take its contents.
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// What a cache file says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheFileHeader {
    /// The model the cache belongs to (the caller's id, e.g. repo and revision).
    pub model_id: String,
    /// The cache settings.
    pub config: CacheConfig,
    /// Positions held by every layer.
    pub tokens: usize,
    /// Number of layers.
    pub layers: usize,
    /// Each layer's sliding window in positions, 0 for a global layer; empty when every
    /// layer is global.
    pub windows: Vec<usize>,
    /// The caller's own entries (e.g. a hash of the document's token ids).
    pub extra: BTreeMap<String, String>,
}

/// A cache file's header and its layers' caches, ready to use.
pub struct LoadedCache {
    /// The header.
    pub header: CacheFileHeader,
    /// One cache per layer, made by `header.config` and filled from the file.
    pub caches: Vec<Box<dyn KvCache>>,
}

impl std::fmt::Debug for LoadedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedCache")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

/// Serializes the caches of all layers (in order) of a model running on `backend` to the
/// bytes of a cache file.
pub fn to_bytes<'a>(
    model_id: &str,
    config: &CacheConfig,
    backend: &Backend,
    caches: impl IntoIterator<Item = &'a dyn KvCache>,
    extra: &BTreeMap<String, String>,
) -> Result<Vec<u8>, CacheFileError> {
    let mut states = Vec::new();
    let mut windows = Vec::new();
    for (layer, cache) in caches.into_iter().enumerate() {
        let state = cache.state()?;
        let window = cache.stats().window;
        windows.push(window);
        if let Some(first) = states.first().map(|s: &CacheState| s.tokens) {
            if state.tokens != first {
                return Err(CacheFileError::Save(format!(
                    "layer {layer} holds {} tokens, layer 0 holds {first}",
                    state.tokens
                )));
            }
        }
        // The settings recorded must be the ones that made these caches.
        config
            .make_layer((window > 0).then_some(window), backend)
            .restore(state.clone())
            .map_err(|e| {
                CacheFileError::Save(format!(
                    "layer {layer} does not match settings {config}: {e}"
                ))
            })?;
        states.push(state);
    }
    if windows.iter().all(|&w| w == 0) {
        windows.clear();
    }
    encode(model_id, config, states, &windows, extra)
}

/// Writes states as they are, with a valid checksum (the loader's tests use it to forge
/// files that are well-formed but inconsistent).
fn encode(
    model_id: &str,
    config: &CacheConfig,
    states: Vec<CacheState>,
    windows: &[usize],
    extra: &BTreeMap<String, String>,
) -> Result<Vec<u8>, CacheFileError> {
    encode_as(VERSION, model_id, config, states, windows, extra)
}

/// [`encode`] under a given format version (the tests write older versions).
fn encode_as(
    version: &str,
    model_id: &str,
    config: &CacheConfig,
    states: Vec<CacheState>,
    windows: &[usize],
    extra: &BTreeMap<String, String>,
) -> Result<Vec<u8>, CacheFileError> {
    let tokens = states.first().map_or(0, |s| s.tokens);
    let layers = states.len();
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    for (layer, state) in states.into_iter().enumerate() {
        for (name, array) in state.arrays {
            tensors.push((
                format!("layers.{layer}.{name}"),
                Tensor::from_array(&array)?,
            ));
        }
    }
    let mut metadata = HashMap::from([
        ("format".to_string(), FORMAT.to_string()),
        ("version".to_string(), version.to_string()),
        ("model_id".to_string(), model_id.to_string()),
        ("cache_config".to_string(), json(config)?),
        ("tokens".to_string(), tokens.to_string()),
        ("layers".to_string(), layers.to_string()),
        ("extra".to_string(), json(extra)?),
    ]);
    if !windows.is_empty() {
        metadata.insert("windows".to_string(), json(&windows)?);
    }
    let views = tensors
        .iter()
        .map(|(name, t)| (name.as_str(), t.view()))
        .collect::<Vec<_>>();
    let checksum = checksum(
        &metadata,
        views
            .iter()
            .map(|(n, v)| (*n, v.dtype(), v.shape(), v.data_bytes())),
    );
    metadata.insert("checksum".to_string(), checksum);
    safetensors::serialize(views, Some(metadata))
        .map_err(|e| CacheFileError::Save(format!("safetensors: {e}")))
}

/// Writes a cache file through a temporary file in the same folder that is synced before it
/// is renamed over `path` (and the folder synced after), so a crash or a full disk at any
/// moment leaves the previous file or none under `path`, never a partial one.
pub fn save<'a>(
    path: &Path,
    model_id: &str,
    config: &CacheConfig,
    backend: &Backend,
    caches: impl IntoIterator<Item = &'a dyn KvCache>,
    extra: &BTreeMap<String, String>,
) -> Result<(), CacheFileError> {
    let bytes = to_bytes(model_id, config, backend, caches, extra)?;
    write_atomically(path, &bytes).map_err(|source| CacheFileError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.partial", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return written;
    }
    // The rename is durable once the folder's entry is (not possible on every platform).
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(dir) = std::fs::File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}

/// Opens a cache file made for `model_id` with `config`, for a model running on `backend`.
pub fn load(
    path: &Path,
    model_id: &str,
    config: &CacheConfig,
    backend: &Backend,
) -> Result<LoadedCache, CacheFileError> {
    let bytes = std::fs::read(path).map_err(|source| CacheFileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    from_bytes(&bytes, model_id, config, backend)
}

/// Reads and checks a cache file's header (format, version, checksum) without building
/// the caches, e.g. to list saved documents.
pub fn read_header(bytes: &[u8]) -> Result<CacheFileHeader, CacheFileError> {
    let tensors = SafeTensors::deserialize(bytes).map_err(file_error)?;
    let (_, metadata) = SafeTensors::read_metadata(bytes).map_err(file_error)?;
    let meta = metadata.metadata().clone().unwrap_or_default();
    let entry = |key: &str| {
        meta.get(key)
            .ok_or_else(|| CacheFileError::Corrupt(format!("the header has no {key:?}")))
    };
    if entry("format")? != FORMAT {
        return Err(CacheFileError::Corrupt(format!(
            "format {:?} is not {FORMAT:?}",
            entry("format")?
        )));
    }
    if !READABLE.contains(&entry("version")?.as_str()) {
        return Err(CacheFileError::Version {
            found: entry("version")?.clone(),
        });
    }
    let mut names: Vec<(String, TensorView<'_>)> = tensors.tensors();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let mut unsigned = meta.clone();
    let stored = unsigned.remove("checksum");
    let actual = checksum(
        &unsigned,
        names
            .iter()
            .map(|(n, v)| (n.as_str(), v.dtype(), v.shape(), v.data())),
    );
    if stored.as_deref() != Some(actual.as_str()) {
        return Err(CacheFileError::Checksum);
    }
    let number = |key: &str| {
        entry(key)?
            .parse::<usize>()
            .map_err(|_| CacheFileError::Corrupt(format!("{key:?} is not a count")))
    };
    Ok(CacheFileHeader {
        model_id: entry("model_id")?.clone(),
        config: serde_json::from_str(entry("cache_config")?)
            .map_err(|e| CacheFileError::Corrupt(format!("cache settings: {e}")))?,
        tokens: number("tokens")?,
        layers: number("layers")?,
        windows: match meta.get("windows") {
            Some(w) => serde_json::from_str(w)
                .map_err(|e| CacheFileError::Corrupt(format!("layer windows: {e}")))?,
            None => Vec::new(),
        },
        extra: serde_json::from_str(entry("extra")?)
            .map_err(|e| CacheFileError::Corrupt(format!("extra entries: {e}")))?,
    })
}

/// The same bytes with the header's checksum recomputed over them, or `None` when they
/// are not a safetensors file. For the fuzzer (fuzz/fuzz_targets/cache_file.rs): a mutated
/// file re-signed gets past the checksum to the checks behind it.
#[doc(hidden)]
pub fn resign(bytes: &[u8]) -> Option<Vec<u8>> {
    let tensors = SafeTensors::deserialize(bytes).ok()?;
    let (n, metadata) = SafeTensors::read_metadata(bytes).ok()?;
    let mut unsigned = metadata.metadata().clone().unwrap_or_default();
    unsigned.remove("checksum");
    let views = tensors.tensors();
    let sum = checksum(
        &unsigned,
        views
            .iter()
            .map(|(name, v)| (name.as_str(), v.dtype(), v.shape(), v.data())),
    );
    let mut header: serde_json::Value = serde_json::from_slice(bytes.get(8..8 + n)?).ok()?;
    let entries = header
        .as_object_mut()?
        .entry("__metadata__")
        .or_insert_with(|| serde_json::json!({}));
    entries
        .as_object_mut()?
        .insert("checksum".into(), sum.into());
    let header = serde_json::to_vec(&header).ok()?;
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    out.extend(&bytes[8 + n..]);
    Some(out)
}

/// Opens the bytes of a cache file made for `model_id` with `config`, for a model running
/// on `backend`.
pub fn from_bytes(
    bytes: &[u8],
    model_id: &str,
    config: &CacheConfig,
    backend: &Backend,
) -> Result<LoadedCache, CacheFileError> {
    let header = read_header(bytes)?;
    if header.model_id != model_id {
        return Err(CacheFileError::WrongModel {
            expected: model_id.to_string(),
            found: header.model_id,
        });
    }
    if header.config != *config {
        return Err(CacheFileError::WrongSettings {
            expected: *config,
            found: header.config,
        });
    }
    let tensors = SafeTensors::deserialize(bytes).map_err(file_error)?;
    // A cache that holds tokens has at least two tensors per layer; an empty one has none.
    // Bounding the count keeps a forged header from making us allocate without limit.
    if header.layers > MAX_LAYERS || (header.tokens > 0 && header.layers > tensors.len()) {
        return Err(CacheFileError::Corrupt(format!(
            "{} layers of {} tokens in a file of {} tensors",
            header.layers,
            header.tokens,
            tensors.len()
        )));
    }
    if !header.windows.is_empty() && header.windows.len() != header.layers {
        return Err(CacheFileError::Corrupt(format!(
            "{} layer windows for {} layers",
            header.windows.len(),
            header.layers
        )));
    }
    let mut states: Vec<CacheState> = (0..header.layers)
        .map(|_| CacheState {
            tokens: header.tokens,
            arrays: Vec::new(),
        })
        .collect();
    for (name, view) in tensors.tensors() {
        let bad = || CacheFileError::Corrupt(format!("unexpected tensor {name:?}"));
        let rest = name.strip_prefix("layers.").ok_or_else(bad)?;
        let (layer, buffer) = rest.split_once('.').ok_or_else(bad)?;
        let layer: usize = layer.parse().map_err(|_| bad())?;
        let state = states.get_mut(layer).ok_or_else(bad)?;
        state
            .arrays
            .push((buffer.to_string(), to_array(&name, &view)?));
    }
    let mut caches = Vec::with_capacity(states.len());
    for (layer, mut state) in states.into_iter().enumerate() {
        // Restore in a fixed order, whatever order the file listed the tensors in.
        state.arrays.sort_by(|a, b| a.0.cmp(&b.0));
        let window = header.windows.get(layer).copied().filter(|&w| w > 0);
        let mut cache = config.make_layer(window, backend);
        cache.restore(state).map_err(|e| match e {
            CacheError::State(why) => CacheFileError::Corrupt(format!("layer {layer}: {why}")),
            other => CacheFileError::Cache(other),
        })?;
        caches.push(cache);
    }
    Ok(LoadedCache { header, caches })
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, CacheFileError> {
    serde_json::to_string(value).map_err(|e| CacheFileError::Save(e.to_string()))
}

fn file_error(e: SafeTensorError) -> CacheFileError {
    match e {
        SafeTensorError::HeaderTooSmall
        | SafeTensorError::InvalidHeaderLength
        | SafeTensorError::MetadataIncompleteBuffer => CacheFileError::Length(e.to_string()),
        other => CacheFileError::Corrupt(other.to_string()),
    }
}

/// A 64-bit FNV-1a-style hash over the header entries (sorted) and the tensors (sorted by
/// name): names, dtypes, shapes and data, each length-prefixed so that no two different
/// contents hash the same stream.
fn checksum<'a>(
    metadata: &HashMap<String, String>,
    tensors: impl Iterator<Item = (&'a str, Dtype, &'a [usize], &'a [u8])>,
) -> String {
    let mut hash = Hasher::new();
    let mut entries: Vec<_> = metadata.iter().collect();
    entries.sort();
    for (key, value) in entries {
        hash.bytes(key.as_bytes());
        hash.bytes(value.as_bytes());
    }
    let mut tensors: Vec<_> = tensors.collect();
    tensors.sort_by(|a, b| a.0.cmp(b.0));
    for (name, dtype, shape, data) in tensors {
        hash.bytes(name.as_bytes());
        hash.bytes(format!("{dtype:?}{shape:?}").as_bytes());
        hash.bytes(data);
    }
    format!("{:016x}", hash.0)
}

struct Hasher(u64);

impl Hasher {
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    /// Length, then 8 bytes at a time (a byte at a time is slow in debug builds).
    fn bytes(&mut self, data: &[u8]) {
        self.word(data.len() as u64);
        let mut chunks = data.chunks_exact(8);
        for chunk in &mut chunks {
            self.word(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.word(u64::from_le_bytes(tail));
    }

    fn word(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(Self::PRIME).rotate_left(29);
    }
}

/// An array's bytes and shape, owned, for safetensors.
struct Tensor {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

struct TensorRef<'a>(&'a Tensor);

impl Tensor {
    fn from_array(array: &Array) -> Result<Self, CacheFileError> {
        let array = array.contiguous().map_err(CacheError::from)?;
        let data: Vec<u8> = match array.dtype() {
            MlxDtype::Uint32 => le_bytes(array.try_as_slice::<u32>(), u32::to_le_bytes)?,
            MlxDtype::Float32 => le_bytes(array.try_as_slice::<f32>(), f32::to_le_bytes)?,
            MlxDtype::Float16 | MlxDtype::Bfloat16 => {
                let bits = array.view::<u16>().map_err(CacheError::from)?;
                le_bytes(bits.try_as_slice::<u16>(), u16::to_le_bytes)?
            }
            other => {
                return Err(CacheFileError::Save(format!(
                    "cannot store {other:?} arrays"
                )))
            }
        };
        Ok(Self {
            dtype: match array.dtype() {
                MlxDtype::Uint32 => Dtype::U32,
                MlxDtype::Float32 => Dtype::F32,
                MlxDtype::Float16 => Dtype::F16,
                _ => Dtype::BF16,
            },
            shape: array.shape().iter().map(|&d| d as usize).collect(),
            data,
        })
    }

    fn view(&self) -> TensorRef<'_> {
        TensorRef(self)
    }
}

impl TensorRef<'_> {
    fn data_bytes(&self) -> &[u8] {
        &self.0.data
    }
}

impl View for TensorRef<'_> {
    fn dtype(&self) -> Dtype {
        self.0.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.0.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.0.data)
    }
    fn data_len(&self) -> usize {
        self.0.data.len()
    }
}

fn le_bytes<T: Copy, const N: usize>(
    values: Result<&[T], mlx_rs::error::AsSliceError>,
    to_bytes: fn(T) -> [u8; N],
) -> Result<Vec<u8>, CacheFileError> {
    let values = values.map_err(|e| CacheFileError::Save(format!("cannot read an array: {e}")))?;
    Ok(values.iter().flat_map(|&v| to_bytes(v)).collect())
}

/// Builds an MLX array from a tensor of the file, checking dtype and sizes first.
fn to_array(name: &str, view: &TensorView<'_>) -> Result<Array, CacheFileError> {
    let bad = |why: &str| CacheFileError::Corrupt(format!("tensor {name:?}: {why}"));
    let shape: Vec<i32> = view
        .shape()
        .iter()
        .map(|&d| i32::try_from(d).ok().filter(|&d| d > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("empty or oversized dimension"))?;
    let elements = view
        .shape()
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| bad("too large"))?;
    let data = view.data();
    let width = match view.dtype() {
        Dtype::U32 | Dtype::F32 => 4,
        Dtype::F16 | Dtype::BF16 => 2,
        other => return Err(bad(&format!("unsupported dtype {other:?}"))),
    };
    if elements.checked_mul(width) != Some(data.len()) || shape.is_empty() {
        return Err(bad("size does not match its shape"));
    }
    let words4 = || data.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
    let words2 = || {
        data.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect::<Vec<u16>>()
    };
    let array = match view.dtype() {
        Dtype::U32 => Array::from_slice(
            &words4().map(u32::from_le_bytes).collect::<Vec<_>>(),
            &shape,
        ),
        Dtype::F32 => Array::from_slice(
            &words4().map(f32::from_le_bytes).collect::<Vec<_>>(),
            &shape,
        ),
        Dtype::F16 => Array::from_slice(&words2(), &shape)
            .view_dtype(MlxDtype::Float16)
            .map_err(CacheError::from)?,
        _ => Array::from_slice(&words2(), &shape)
            .view_dtype(MlxDtype::Bfloat16)
            .map_err(CacheError::from)?,
    };
    Ok(array)
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
