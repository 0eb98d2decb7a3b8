//! Live statistics of a generation: speed, time to first token, KV cache accounting and
//! memory, as one serializable snapshot the app, the CLI (`--json`) and the server share.

use serde::{Deserialize, Serialize};
use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use crate::backend::Backend;
use crate::cache::{KvCache, LayerKvStats};

/// KV cache accounting summed over layers, plus each layer's own numbers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvStats {
    /// All layers together: bytes are summed; token counts are those of one layer (every
    /// layer holds the same positions; the largest is reported).
    pub total: LayerKvStats,
    /// Tokens that can still enter the residual window before its oldest group is
    /// quantized (0 for a full-precision cache, which never flushes).
    pub tokens_until_flush: usize,
    /// `held_bytes / fp16_bytes` (1 for an empty cache).
    pub compression: f64,
    /// The sliding-window layers alone (Gemma 3's local layers, whose caches hold their
    /// newest positions in full precision whatever the setting): bytes summed, tokens the
    /// largest, `window` their window; all zero for a model without window layers. `total`
    /// counts them too.
    #[serde(default)]
    pub window_layers: LayerKvStats,
    /// How many layers are window layers.
    #[serde(default)]
    pub window_layer_count: usize,
    /// One entry per layer.
    pub layers: Vec<LayerKvStats>,
}

impl KvStats {
    /// Reads every layer's accounting.
    pub fn from_caches(caches: &[Box<dyn KvCache>]) -> Self {
        let layers: Vec<LayerKvStats> = caches.iter().map(|c| c.stats()).collect();
        // The window of the whole is no window: each kind's is in its own figures.
        let total = LayerKvStats {
            window: 0,
            ..sum(layers.iter())
        };
        let windowed = || layers.iter().filter(|l| l.window > 0);
        let window_layers = sum(windowed());
        let tokens_until_flush = layers
            .iter()
            .filter(|l| l.residual_capacity > 0)
            .map(|l| l.residual_capacity.saturating_sub(l.residual_tokens))
            .min()
            .unwrap_or(0);
        let compression = if total.fp16_bytes == 0 {
            1.0
        } else {
            total.held_bytes as f64 / total.fp16_bytes as f64
        };
        Self {
            total,
            tokens_until_flush,
            compression,
            window_layers,
            window_layer_count: windowed().count(),
            layers,
        }
    }
}

/// Layers together: bytes summed, token counts and the window the largest (every layer of
/// one kind holds the same positions).
fn sum<'a>(layers: impl Iterator<Item = &'a LayerKvStats>) -> LayerKvStats {
    let mut total = LayerKvStats::default();
    for l in layers {
        total.tokens = total.tokens.max(l.tokens);
        total.quantized_tokens = total.quantized_tokens.max(l.quantized_tokens);
        total.sink_tokens = total.sink_tokens.max(l.sink_tokens);
        total.residual_tokens = total.residual_tokens.max(l.residual_tokens);
        total.residual_capacity = total.residual_capacity.max(l.residual_capacity);
        total.window = total.window.max(l.window);
        total.fp16_bytes += l.fp16_bytes;
        total.held_bytes += l.held_bytes;
    }
    total
}

/// Memory as the operating system sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryStats {
    /// Resident memory of this process.
    pub process_resident_bytes: u64,
    /// Memory in use on the machine.
    pub system_used_bytes: u64,
    /// Total memory of the machine.
    pub system_total_bytes: u64,
}

/// Reads process and system memory; keep one and call [`MemoryProbe::read`] repeatedly.
pub struct MemoryProbe {
    system: System,
    pid: Option<Pid>,
}

impl Default for MemoryProbe {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryProbe {
    /// A probe for the current process.
    pub fn new() -> Self {
        Self {
            system: System::new(),
            pid: sysinfo::get_current_pid().ok(),
        }
    }

    /// Current memory figures.
    pub fn read(&mut self) -> MemoryStats {
        self.system.refresh_memory();
        let mut stats = MemoryStats {
            system_used_bytes: self.system.used_memory(),
            system_total_bytes: self.system.total_memory(),
            ..MemoryStats::default()
        };
        if let Some(pid) = self.pid {
            self.system.refresh_processes_specifics(
                ProcessesToUpdate::Some(&[pid]),
                true,
                ProcessRefreshKind::nothing().with_memory(),
            );
            if let Some(p) = self.system.process(pid) {
                stats.process_resident_bytes = p.memory();
            }
        }
        stats
    }
}

/// Which phase a generation is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Running the prompt through the model.
    Prefill,
    /// Producing tokens.
    Decode,
    /// Finished.
    Done,
}

/// A snapshot of a generation's statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Current phase.
    pub phase: Phase,
    /// Prompt tokens in this request.
    pub prompt_tokens: usize,
    /// Prompt tokens served from the cache of a previous turn (not recomputed).
    pub reused_tokens: usize,
    /// Prompt tokens run through the model so far.
    pub prefilled_tokens: usize,
    /// Prompt tokens to run through the model in all.
    pub prefill_total: usize,
    /// Prefill speed, tokens per second.
    pub prefill_tokens_per_s: f64,
    /// Tokens generated.
    pub generated_tokens: usize,
    /// Decode speed after the first token, tokens per second.
    pub decode_tokens_per_s: f64,
    /// Seconds from the request to the first generated token.
    pub time_to_first_token_s: Option<f64>,
    /// Seconds since the request.
    pub elapsed_s: f64,
    /// KV cache accounting.
    pub kv: KvStats,
    /// Memory.
    pub memory: MemoryStats,
    /// Where and how the model runs.
    pub backend: Backend,
    /// The cache kind in use ("full" or "kivi k2v2 g32 r128").
    pub cache: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheConfig;
    use mlx_rs::Array;

    #[test]
    fn window_layers_are_summed_apart_and_counted_in_the_total() {
        let mut caches: Vec<Box<dyn KvCache>> = vec![
            Box::new(crate::cache::WindowCache::new(2, &Backend::HOST)),
            CacheConfig::Full.make(&Backend::HOST),
            Box::new(crate::cache::WindowCache::new(2, &Backend::HOST)),
        ];
        let q = Array::zeros::<f32>(&[1, 2, 300, 4]).unwrap();
        let kv = Array::zeros::<f32>(&[1, 1, 300, 4]).unwrap();
        for c in caches.iter_mut() {
            c.attend(&q, &kv, &kv, 0.5).unwrap().eval().unwrap();
        }
        let stats = KvStats::from_caches(&caches);
        let layers: Vec<LayerKvStats> = caches.iter().map(|c| c.stats()).collect();
        assert_eq!(stats.window_layer_count, 2);
        // A window of 2 holds its last position and the slack.
        assert_eq!(stats.window_layers.tokens, 1 + crate::cache::TRUNCATE_SLACK);
        assert_eq!(stats.window_layers.window, 2);
        assert_eq!(
            stats.window_layers.held_bytes,
            layers[0].held_bytes + layers[2].held_bytes
        );
        assert_eq!(
            stats.total.held_bytes,
            layers.iter().map(|l| l.held_bytes).sum::<u64>()
        );
        assert_eq!((stats.total.tokens, stats.total.window), (300, 0));
    }

    #[test]
    fn kv_stats_sum_real_cache_buffers() {
        let mut caches: Vec<Box<dyn KvCache>> = vec![
            CacheConfig::Full.make(&Backend::HOST),
            CacheConfig::Full.make(&Backend::HOST),
        ];
        let q = Array::zeros::<f32>(&[1, 2, 3, 4]).unwrap();
        let kv = Array::zeros::<f32>(&[1, 1, 3, 4]).unwrap();
        for c in caches.iter_mut() {
            c.attend(&q, &kv, &kv, 0.5).unwrap().eval().unwrap();
        }
        let stats = KvStats::from_caches(&caches);
        assert_eq!(stats.layers.len(), 2);
        assert_eq!(stats.total.tokens, 3);
        // Per layer: keys and values, 3 tokens x 4 channels, held in float16 on the host.
        assert_eq!(stats.total.held_bytes, 2 * 2 * 12 * 2);
        assert_eq!(stats.total.fp16_bytes, 2 * 2 * 12 * 2);
        assert_eq!(stats.compression, 1.0);
        assert_eq!(stats.tokens_until_flush, 0);
    }

    #[test]
    fn memory_probe_sees_this_process() {
        let m = MemoryProbe::new().read();
        assert!(m.process_resident_bytes > 0);
        assert!(m.system_total_bytes >= m.system_used_bytes && m.system_used_bytes > 0);
    }
}
