//! Refusing a model that would not fit in memory, before any of it is loaded.
//!
//! Loading a model too large for the machine does not fail cleanly: the system swaps
//! until it stalls, or kills the app. So [`check_fits`] estimates what a model needs and
//! refuses it when that exceeds the memory available, with a
//! [`LoadError::InsufficientMemory`] that gives the numbers and what to change. The
//! estimate, from the files' headers alone:
//!
//! - weights as they will sit in memory: a GGUF file's tensor table (MLX keeps Q4_0,
//!   Q4_1 and Q8_0 packed, with scales and biases in the compute dtype; everything else
//!   becomes the compute dtype), a safetensors checkpoint's file size (twice that for a
//!   half-precision checkpoint on a float32 device);
//! - a KV cache holding the whole context in the chosen cache settings ([`kv_cache_bytes`],
//!   KIVI's packed data, scales, zeros and residual window included);
//! - the runtime and activations, as the download warning counts them
//!   ([`MemoryEstimate`], in `estimate.rs`).
//!
//! The same accounting plans models this machine does not run ([`plan`]: `kivi plan`).
//!
//! The available memory is the system's (`sysinfo`), or a figure the caller injects
//! ([`crate::session::EngineOptions::available_memory`]), which is how the tests drive it.

mod estimate;
pub mod plan;

pub use estimate::{MemoryCheck, MemoryEstimate, MemoryFit};

use std::path::Path;

use crate::backend::Backend;
use crate::cache::kivi_runtime::ResidualWindow;
use crate::cache::CacheConfig;
#[cfg(doc)]
use crate::cache::KiviConfig;
use crate::error::LoadError;
use crate::gguf::{GgufHeader, Metadata};
use crate::loader::{model_files, ModelFiles};
use crate::model::ModelConfig;
use crate::runtime::{chosen, ForRuntime, Runtime};
use crate::weights::safetensors::{read_json, shard_paths};

/// What a model needs in memory, in bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryNeed {
    /// The weights once loaded.
    pub weights: u64,
    /// A KV cache for the whole context.
    pub kv_cache: u64,
    /// Runtime and activations.
    pub overhead: u64,
    /// The context the KV cache was counted for.
    pub context: usize,
    /// The cache settings it was counted with.
    pub cache: CacheConfig,
}

impl MemoryNeed {
    /// Everything together.
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.overhead
    }

    /// A one-line breakdown for messages.
    pub fn describe(&self) -> String {
        format!(
            "weights {}, KV cache {} for {} tokens with the {} cache, runtime {}",
            gib(self.weights),
            gib(self.kv_cache),
            self.context,
            self.cache,
            gib(self.overhead)
        )
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// The shape of a model's KV cache: what [`kv_cache_bytes`] needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    /// Transformer blocks (one cache each).
    pub layers: usize,
    /// Key/value heads per layer.
    pub kv_heads: usize,
    /// Channels per head.
    pub head_dim: usize,
    /// Of `layers`, those attending over a sliding window (their caches hold at most
    /// [`WindowCache::capacity`](crate::cache::WindowCache::capacity) positions, in full
    /// precision, whatever the setting).
    pub window_layers: usize,
    /// Their window, in positions.
    pub window: usize,
}

impl KvShape {
    /// The shape of a model whose every layer attends to every position.
    pub const fn global(layers: usize, kv_heads: usize, head_dim: usize) -> Self {
        Self {
            layers,
            kv_heads,
            head_dim,
            window_layers: 0,
            window: 0,
        }
    }

    /// The shape of `config`'s caches.
    pub fn of(config: &ModelConfig) -> Self {
        let windows: Vec<usize> = (0..config.num_layers)
            .filter_map(|i| config.layer_window(i))
            .collect();
        Self {
            window_layers: windows.len(),
            window: windows.iter().copied().max().unwrap_or(0),
            ..Self::global(config.num_layers, config.num_kv_heads, config.head_dim)
        }
    }
}

/// How many tokens a KIVI window of so many allocates, on one runtime.
struct Allocated(fn(usize, usize) -> usize);

impl ForRuntime for Allocated {
    fn on<R: Runtime>() -> Self {
        Allocated(<R::Window as ResidualWindow>::allocated)
    }
}

/// Bytes of one model's KV caches holding `tokens` positions on `backend`: a full cache
/// holds keys and values in [`Backend::full_cache_dtype`]; a KIVI cache holds its scales,
/// zeros and residual window in [`Backend::storage_dtype`] (on the host kernels, window
/// buffers with room for [`KiviConfig::residual_room`] tokens).
pub fn kv_cache_bytes(
    shape: KvShape,
    tokens: usize,
    cache: &CacheConfig,
    backend: &Backend,
) -> u64 {
    // The cache dtypes are float32, float16 and bfloat16.
    let bytes = |dtype: mlx_rs::Dtype| {
        if dtype == mlx_rs::Dtype::Float32 {
            4
        } else {
            2
        }
    };
    let (t, d) = (tokens as u64, shape.head_dim as u64);
    let per_head = match cache {
        CacheConfig::Full => 2 * t * d * bytes(backend.full_cache_dtype()),
        CacheConfig::Kivi(k) => {
            let dtype_bytes = bytes(backend.storage_dtype());
            let g = k.group_size() as u64;
            // The flush rule (sinks stay in full precision; the window ages out in whole
            // groups after them).
            let sinks = kivi_kernels::sink_len(tokens, k.sinks());
            let quantized =
                kivi_kernels::quantized_len(tokens - sinks, k.residual_length(), k.group_size())
                    as u64;
            // As the runtime's window allocates it (host buffers keep room for the largest).
            let Allocated(allocated) = chosen(backend);
            let residual = allocated((t - quantized) as usize, k.residual_room()) as u64;
            let value_group = g.min(d).max(1);
            let keys =
                quantized * d * u64::from(k.key_bits()) / 8 + quantized / g * d * 2 * dtype_bytes;
            let values = quantized * d * u64::from(k.value_bits()) / 8
                + quantized * d.div_ceil(value_group) * 2 * dtype_bytes;
            keys + values + 2 * residual * d * dtype_bytes
        }
    };
    let global = shape.layers.saturating_sub(shape.window_layers);
    let window_bytes = if shape.window_layers > 0 {
        let held = tokens.min(shape.window.max(1) - 1 + crate::cache::TRUNCATE_SLACK) as u64;
        2 * held
            * d
            * bytes(backend.full_cache_dtype())
            * (shape.window_layers * shape.kv_heads) as u64
    } else {
        0
    };
    per_head * (global * shape.kv_heads) as u64 + window_bytes
}

/// Bytes the same positions' keys and values take in float16 (a full cache on the Mac's
/// float16 backend): what a KIVI cache's bytes are compared with.
pub fn kv_fp16_bytes(shape: KvShape, tokens: usize) -> u64 {
    kv_cache_bytes(
        shape,
        tokens,
        &CacheConfig::Full,
        &Backend::mlx(crate::backend::Device::Gpu, crate::backend::Precision::F16),
    )
}

/// What a model's memory needs depend on, read once from its files' headers.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ModelMemory {
    /// The weights once loaded.
    weights: u64,
    /// Its caches' shape, where the engine can read it.
    shape: Option<KvShape>,
    /// Its trained context.
    max_context: usize,
}

impl ModelMemory {
    /// Reads the model at `path` as `backend` would load it.
    fn read(path: &Path, backend: &Backend) -> Result<Self, LoadError> {
        let dtype = backend.precision().bytes();
        Ok(match model_files(path)? {
            ModelFiles::Gguf(file) => {
                let header = crate::gguf::validate_file(&file)?;
                // The model's own configuration where the engine reads it (window layers
                // included); otherwise the plain shape, and the loader says what is wrong.
                let (shape, max_context) =
                    match crate::weights::gguf::Gguf::open(&file).and_then(|g| g.config()) {
                        Ok(config) => (Some(KvShape::of(&config)), config.context_length),
                        Err(_) => gguf_shape(&header.metadata),
                    };
                Self {
                    weights: gguf_weight_bytes(&header, dtype),
                    shape,
                    max_context,
                }
            }
            ModelFiles::Folder(dir) => {
                let json = read_json(&dir.join("config.json"))?;
                let config = ModelConfig::from_hf_json(&json)?;
                let stored: u64 = shard_paths(&dir)?
                    .iter()
                    .filter_map(|p| std::fs::metadata(p).ok())
                    .map(|m| m.len())
                    .sum();
                let half = matches!(
                    json.get("torch_dtype").and_then(|v| v.as_str()),
                    Some("float16" | "bfloat16")
                );
                let dense = json.get("quantization").is_none();
                Self {
                    weights: if half && dense && dtype == 4 {
                        stored * 2
                    } else {
                        stored
                    },
                    shape: Some(KvShape::of(&config)),
                    max_context: config.context_length,
                }
            }
        })
    }

    /// The need with a cache of `context` tokens (at most the model's own).
    fn need(&self, context: usize, cache: &CacheConfig, backend: &Backend) -> MemoryNeed {
        let context = context.min(self.max_context);
        MemoryNeed {
            weights: self.weights,
            kv_cache: self
                .shape
                .map_or(0, |s| kv_cache_bytes(s, context, cache, backend)),
            overhead: MemoryEstimate::from_weights(self.weights).overhead_bytes,
            context,
            cache: *cache,
        }
    }
}

/// Estimates the memory the model at `path` needs on `backend` with a KV cache for
/// `context` tokens (`None`: the model's own context length; longer requests are clamped
/// to it, the loader refuses them on its own).
pub fn estimate(
    path: &Path,
    context: Option<usize>,
    cache: &CacheConfig,
    backend: &Backend,
) -> Result<MemoryNeed, LoadError> {
    let model = ModelMemory::read(path, backend)?;
    Ok(model.need(context.unwrap_or(model.max_context), cache, backend))
}

/// Refuses the model when its estimate exceeds `available` bytes (`None`: what the
/// system has available now).
pub fn check_fits(
    path: &Path,
    context: Option<usize>,
    cache: &CacheConfig,
    backend: &Backend,
    available: Option<u64>,
) -> Result<MemoryNeed, LoadError> {
    let need = estimate(path, context, cache, backend)?;
    refuse_beyond(need, available.unwrap_or_else(available_memory))
}

/// The shortest context [`longest_context`] offers.
pub const MIN_FIT_CONTEXT: usize = 512;

/// The longest context, up to the model's own and in steps of 256 tokens, whose estimate
/// with `cache` fits in `available` bytes (`None`: what the system has available now): a
/// context setting of "fit this machine". Refuses the model when not even
/// [`MIN_FIT_CONTEXT`] tokens fit.
pub fn longest_context(
    path: &Path,
    cache: &CacheConfig,
    backend: &Backend,
    available: Option<u64>,
) -> Result<MemoryNeed, LoadError> {
    let model = ModelMemory::read(path, backend)?;
    let available = available.unwrap_or_else(available_memory);
    let fits = |context| model.need(context, cache, backend).total() <= available;
    let top = model.max_context;
    let context = if fits(top) {
        top
    } else {
        // The need grows with the context: the largest step that fits, by bisection.
        let (mut lo, mut hi) = (0, top / 256);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if fits(mid * 256) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        (lo * 256).max(MIN_FIT_CONTEXT.min(top))
    };
    refuse_beyond(model.need(context, cache, backend), available)
}

fn refuse_beyond(need: MemoryNeed, available: u64) -> Result<MemoryNeed, LoadError> {
    if need.total() > available {
        return Err(LoadError::InsufficientMemory {
            needed: need.total(),
            available,
            detail: need.describe(),
        });
    }
    Ok(need)
}

/// Memory available for new allocations now, as the system reports it.
pub fn available_memory() -> u64 {
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    system.available_memory()
}

/// The KV shape and context from GGUF metadata (`None` when keys are missing: the loader
/// then refuses the file with the precise reason).
fn gguf_shape(m: &Metadata) -> (Option<KvShape>, usize) {
    let arch = m
        .string("general.architecture")
        .ok()
        .flatten()
        .unwrap_or("");
    let num = |key: &str| {
        m.number(&format!("{arch}.{key}"))
            .ok()
            .flatten()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| v as usize)
    };
    let context = num("context_length").unwrap_or(4096);
    let shape = (|| {
        let heads = num("attention.head_count")?;
        let head_dim = num("attention.key_length")
            .or_else(|| Some(num("embedding_length")? / heads.max(1)))?;
        Some(KvShape::global(
            num("block_count")?,
            num("attention.head_count_kv").unwrap_or(heads),
            head_dim,
        ))
    })();
    (shape, context)
}

/// The weights' bytes once MLX has loaded them and the engine converted floats.
fn gguf_weight_bytes(header: &GgufHeader, dtype: u64) -> u64 {
    header
        .tensors
        .iter()
        .map(|t| {
            let elements = t.elements();
            match t.ggml_type.name {
                // Packed to 4 or 8 bits, one scale and one bias per 32 elements.
                "Q4_0" | "Q4_1" => elements / 2 + elements / 32 * 2 * dtype,
                "Q8_0" => elements + elements / 32 * 2 * dtype,
                _ => elements * dtype,
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::KiviConfig;

    const SHAPE: KvShape = KvShape::global(30, 3, 64);

    #[test]
    fn window_layers_hold_their_window_and_slack_only() {
        // Gemma 3 270M: 18 layers of one KV head of 256, 15 of them over 512 positions.
        let gemma = KvShape {
            window_layers: 15,
            window: 512,
            ..KvShape::global(18, 1, 256)
        };
        let per_position = 2 * 256 * 2; // keys and values, float16 on the host
        let full = kv_cache_bytes(gemma, 32_768, &CacheConfig::Full, &Backend::HOST);
        assert_eq!(full, 3 * 32_768 * per_position + 15 * 767 * per_position);
        // Within the first window every layer holds every position.
        let short = kv_cache_bytes(gemma, 100, &CacheConfig::Full, &Backend::HOST);
        assert_eq!(short, 18 * 100 * per_position);
    }

    #[test]
    fn full_cache_bytes() {
        use crate::backend::{Device, Precision};
        // SmolLM2 at 8k tokens: 30 layers x 3 heads x 64 x 2 (K and V) x 2 bytes on the
        // host (float16), x 4 with MLX's operations in float32.
        let full = |backend: Backend| kv_cache_bytes(SHAPE, 8192, &CacheConfig::Full, &backend);
        assert_eq!(full(Backend::HOST), 8192 * 30 * 3 * 64 * 2 * 2);
        let mlx = Backend::mlx(Device::Cpu, Precision::F32);
        assert_eq!(full(mlx), 8192 * 30 * 3 * 64 * 2 * 4);
        assert_eq!(
            full(Backend::mlx(Device::Gpu, Precision::F16)),
            full(Backend::HOST)
        );
        assert_eq!(kv_cache_bytes(SHAPE, 0, &CacheConfig::Full, &mlx), 0);
    }

    #[test]
    fn kivi_cache_bytes_follow_the_flush_rule() {
        use crate::backend::{Device, Precision};
        let k2 = CacheConfig::Kivi(KiviConfig::new(2, 2, 32, 128).unwrap());
        // A Mac's backend: float16 throughout, every buffer the size of its content.
        let mac = Backend::mlx(Device::Gpu, Precision::F16);
        // Within the window (R + G - 1 tokens) everything is full precision.
        let one = |t| kv_cache_bytes(SHAPE, t, &k2, &mac) / 90;
        assert_eq!(one(159), 2 * 159 * 64 * 2);
        // One token more and a group of 32 is quantized: 2 bits per element plus a scale
        // and a zero per key channel and per value group.
        let quantized = 32 * 64 * 2 / 8 * 2 + (64 + 32 * 2) * 2 * 2;
        assert_eq!(one(160), quantized + 2 * 128 * 64 * 2);
        // The host backend computes in float32 and stores the window, scales and zeros in
        // float16; its window buffers keep room for S + R + G tokens.
        let host = |t| kv_cache_bytes(SHAPE, t, &k2, &Backend::HOST) / 90;
        assert_eq!(host(159), 2 * 160 * 64 * 2);
        assert_eq!(host(160), quantized + 2 * 160 * 64 * 2);
        assert_eq!(host(10), 2 * 160 * 64 * 2);
        assert_eq!(host(0), 0);
        let full = kv_cache_bytes(SHAPE, 8192, &CacheConfig::Full, &Backend::HOST);
        let kivi = kv_cache_bytes(SHAPE, 8192, &k2, &Backend::HOST);
        assert!(kivi * 5 / 2 < full, "{kivi} vs {full}");
        // Four sinks: the first group is quantized four tokens later, and the sinks count
        // as full precision.
        let s4: CacheConfig = "k2v2-g32-r128-s4".parse().unwrap();
        let one = |t| kv_cache_bytes(SHAPE, t, &s4, &mac) / 90;
        assert_eq!(one(163), 2 * 163 * 64 * 2);
        assert_eq!(one(164), quantized + 2 * (4 + 128) * 64 * 2);
    }
}
