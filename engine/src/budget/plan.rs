//! Memory on paper for models larger than this machine runs: what a Mac needs to hold a
//! model's 4-bit weights and a KV cache of 32k-128k tokens with each cache setting, counted
//! by the same code that refuses a model that does not fit ([`kv_cache_bytes`],
//! [`MemoryEstimate`]), so that a plan and a refusal can never disagree.

use super::{kv_cache_bytes, KvShape, MemoryEstimate, MemoryNeed};
use crate::backend::Backend;
use crate::cache::CacheConfig;

/// A model known by its published configuration (`config.json`), for planning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedModel {
    /// The model's name.
    pub name: &'static str,
    /// Parameters, for the weights' bytes.
    pub parameters: u64,
    /// Its caches' shape.
    pub shape: KvShape,
    /// The longest context it is trained or extended to.
    pub context: usize,
}

/// The models Mac users pick for long documents, from their `config.json` files:
/// `num_hidden_layers`, `num_key_value_heads`, `head_dim` and, for Gemma 3, the sliding
/// window (1024) on five layers of six.
pub const MAC_MODELS: [PlannedModel; 3] = [
    PlannedModel {
        name: "Llama 3.1 8B",
        parameters: 8_030_000_000,
        shape: KvShape::global(32, 8, 128),
        context: 131_072,
    },
    PlannedModel {
        name: "Qwen3 8B",
        parameters: 8_190_000_000,
        shape: KvShape::global(36, 8, 128),
        // 32,768 native; 131,072 with the YaRN scaling its card gives.
        context: 131_072,
    },
    PlannedModel {
        name: "Gemma 3 12B",
        // The language model without the vision encoder.
        parameters: 11_770_000_000,
        shape: KvShape {
            window_layers: 40,
            window: 1024,
            ..KvShape::global(48, 8, 256)
        },
        context: 131_072,
    },
];

/// Bytes of `parameters` weights in MLX's 4-bit format: 4 bits each, plus a 16-bit scale
/// and a 16-bit bias per group of 64 (4.5 bits a weight).
pub const fn four_bit_bytes(parameters: u64) -> u64 {
    parameters * (4 * 64 + 2 * 16) / (8 * 64)
}

/// What `model` needs with 4-bit weights and a KV cache of `context` tokens on `backend`.
pub fn need(
    model: &PlannedModel,
    context: usize,
    cache: &CacheConfig,
    backend: &Backend,
) -> MemoryNeed {
    let weights = four_bit_bytes(model.parameters);
    MemoryNeed {
        weights,
        kv_cache: kv_cache_bytes(model.shape, context, cache, backend),
        overhead: MemoryEstimate::from_weights(weights).overhead_bytes,
        context,
        cache: *cache,
    }
}

/// What the GPU of a Mac with `ram` bytes may use by default: about two thirds of its
/// memory on Macs of up to 32 GB (Metal's recommended working set; `sysctl
/// iogpu.wired_limit_mb` raises it).
pub const fn mac_gpu_bytes(ram: u64) -> u64 {
    ram / 3 * 2
}

/// The smallest of `rams` (bytes, ascending) whose GPU share holds `need`, if any.
pub fn smallest_mac(need: &MemoryNeed, rams: &[u64]) -> Option<u64> {
    rams.iter()
        .copied()
        .find(|&ram| need.total() <= mac_gpu_bytes(ram))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Device, Precision};

    const GIB: u64 = 1 << 30;

    fn mac() -> Backend {
        Backend::mlx(Device::Gpu, Precision::F16)
    }

    /// Float16 keys and values are `2 * layers * kv_heads * head_dim * 2` bytes a token:
    /// Llama 3.1 8B's 128 KiB, so 16 GiB at 128k, as its model card's figure says.
    #[test]
    fn a_float16_cache_is_the_textbook_figure() {
        let llama = &MAC_MODELS[0];
        let need = need(llama, 131_072, &CacheConfig::Full, &mac());
        assert_eq!(need.kv_cache, 2 * 32 * 8 * 128 * 2 * 131_072);
        assert_eq!(need.kv_cache, 16 * GIB);
        assert_eq!(four_bit_bytes(8_000_000_000), 4_500_000_000);
    }

    /// Gemma 3's window layers hold at most their window whatever the context, so its
    /// cache grows with its eight global layers only.
    #[test]
    fn window_layers_do_not_grow_with_the_context() {
        let gemma = &MAC_MODELS[2];
        let at = |tokens| need(gemma, tokens, &CacheConfig::Full, &mac()).kv_cache;
        let per_token = 2 * 8 * 8 * 256 * 2;
        assert_eq!(at(131_072) - at(65_536), per_token * 65_536);
    }

    /// The recommended cache holds a 128k context in about a quarter of float16's bytes (4
    /// bits a key and 2 a value, with their scales and zeros: 1 byte a channel against 4),
    /// and so fits where float16 does not.
    #[test]
    fn kivi_makes_128k_fit_on_a_smaller_mac() {
        let qwen = &MAC_MODELS[1];
        let macs = [8 * GIB, 16 * GIB, 24 * GIB, 32 * GIB];
        let full = need(qwen, 131_072, &CacheConfig::Full, &mac());
        let kivi = need(qwen, 131_072, &CacheConfig::recommended(), &mac());
        let ratio = full.kv_cache as f64 / kivi.kv_cache as f64;
        assert!((3.8..4.0).contains(&ratio), "{ratio}");
        assert_eq!(smallest_mac(&full, &macs), None);
        assert_eq!(smallest_mac(&kivi, &macs), Some(16 * GIB));
    }
}
