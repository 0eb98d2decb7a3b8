//! The live panel's numbers (`stats` events, `get_stats`): what the engine is doing, the
//! described chat's KV cache (from the engine's accounting of the real buffers), speeds and
//! memory. A ticker emits them 5 times a second while a model loads, prefills or decodes,
//! and once a second when idle; state changes emit at once.

use std::sync::Mutex;
use std::time::Duration;

use kivi_engine::backend::{Backend, Device as BackendDevice};
use kivi_engine::stats::{MemoryProbe, Stats};

use crate::chat_cache::CacheRecord;
use crate::store::{CacheMode, CacheSettings};
use crate::types::{Device, Phase, StatsSnapshot};

/// Gap between `stats` events while working (5 Hz).
pub const BUSY_INTERVAL: Duration = Duration::from_millis(200);
/// Gap between `stats` events when idle.
pub const IDLE_INTERVAL: Duration = Duration::from_millis(1000);

#[derive(Default)]
struct Live {
    phase: Option<Phase>,
    chat_id: Option<String>,
    cache: Option<CacheRecord>,
    decode_tokens_per_sec: Option<f64>,
    prefill_tokens_per_sec: Option<f64>,
    ttft_ms: Option<f64>,
    /// The loaded model's last reading speed over a prompt long enough to measure it.
    reading_speed: Option<f64>,
}

/// The fewest prompt tokens whose prefill speed stands for reading a document: shorter
/// prompts are dominated by a step's fixed costs.
const READING_SPEED_MIN_TOKENS: usize = 256;

/// The current statistics.
pub struct LiveStats {
    live: Mutex<Live>,
    memory: Mutex<MemoryProbe>,
}

impl Default for LiveStats {
    fn default() -> Self {
        Self {
            live: Mutex::new(Live::default()),
            memory: Mutex::new(MemoryProbe::new()),
        }
    }
}

impl LiveStats {
    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the engine does now.
    pub fn phase(&self) -> Phase {
        self.lock().phase.unwrap_or(Phase::Idle)
    }

    /// Sets what the engine does.
    pub fn set_phase(&self, phase: Phase) {
        self.lock().phase = Some(phase);
    }

    /// A job of `chat_id` starts: the panel describes its cache from now on.
    pub fn start_job(&self, chat_id: &str, cache: Option<CacheRecord>, phase: Phase) {
        self.show(chat_id, cache);
        self.lock().phase = Some(phase);
    }

    /// The panel describes `chat_id`'s cache from now on (a job starts, or its cache was
    /// read back from disk); the speeds shown are another chat's and go.
    pub fn show(&self, chat_id: &str, cache: Option<CacheRecord>) {
        let mut live = self.lock();
        if live.chat_id.as_deref() != Some(chat_id) {
            live.decode_tokens_per_sec = None;
            live.prefill_tokens_per_sec = None;
            live.ttft_ms = None;
        }
        live.chat_id = Some(chat_id.to_string());
        live.cache = cache;
    }

    /// The engine reported statistics for a job of `chat_id` with cache `config`.
    pub fn update(&self, chat_id: &str, config: CacheSettings, stats: &Stats, phase: Phase) {
        let mut live = self.lock();
        live.chat_id = Some(chat_id.to_string());
        live.cache = Some(CacheRecord::from_kv(config, &stats.kv));
        live.phase = Some(phase);
        if stats.prefilled_tokens > 0 {
            live.prefill_tokens_per_sec = Some(stats.prefill_tokens_per_s);
        }
        if stats.prefilled_tokens >= READING_SPEED_MIN_TOKENS && stats.prefill_tokens_per_s > 0.0 {
            live.reading_speed = Some(stats.prefill_tokens_per_s);
        }
        if stats.generated_tokens > 1 {
            live.decode_tokens_per_sec = Some(stats.decode_tokens_per_s);
        }
        if let Some(ttft) = stats.time_to_first_token_s {
            live.ttft_ms = Some(ttft * 1000.0);
        }
    }

    /// Describes `chat_id`'s cache (e.g. when it was dropped: `None`).
    pub fn describe(&self, chat_id: &str, cache: Option<CacheRecord>) {
        let mut live = self.lock();
        if live.chat_id.as_deref() == Some(chat_id) {
            live.cache = cache;
        }
    }

    /// Every cache was dropped.
    pub fn forget_caches(&self) {
        self.lock().cache = None;
    }

    /// The loaded model's last measured reading speed (prompt tokens per second over a
    /// prompt of at least [`READING_SPEED_MIN_TOKENS`]), for "about 4 min to read".
    pub fn reading_speed(&self) -> Option<f64> {
        self.lock().reading_speed
    }

    /// Another model (or backend) was loaded: the speed measured on the last one goes.
    pub fn forget_reading_speed(&self) {
        self.lock().reading_speed = None;
    }

    /// A chat was deleted: describe nothing.
    pub fn forget_chat(&self, chat_id: &str) {
        let mut live = self.lock();
        if live.chat_id.as_deref() == Some(chat_id) {
            *live = Live {
                phase: live.phase,
                ..Live::default()
            };
        }
    }

    /// The snapshot the panel shows, for a model on `backend`.
    pub fn snapshot(&self, context_length: u64, backend: Backend) -> StatsSnapshot {
        let memory = self.memory.lock().unwrap_or_else(|p| p.into_inner()).read();
        let live = self.lock();
        let record = live.cache;
        let config = record.map(|r| r.config);
        let tokens = record.map_or(0, |r| r.tokens);
        let window = match record {
            // The engine's own figures, as they are: recomputing them here once disagreed
            // with the engine by one (its window holds R + G - 1 tokens, not R + G).
            Some(r) if r.config.mode == CacheMode::Kivi => Window {
                quantized: r.quantized_tokens,
                sinks: r.sink_tokens,
                residual: r.residual_tokens,
                capacity: r.residual_capacity,
                until_flush: Some(r.tokens_until_flush),
            },
            // Full precision: every token is "in the window", which never flushes.
            _ => Window {
                quantized: 0,
                sinks: 0,
                residual: tokens,
                capacity: 0,
                until_flush: None,
            },
        };
        let (device, device_name) = device(&backend);
        StatsSnapshot {
            timestamp_ms: crate::runtime::now_ms(),
            phase: live.phase.unwrap_or(Phase::Idle),
            chat_id: live.chat_id.clone(),
            device,
            device_name,
            backend: backend.to_string(),
            backend_name: backend.description(),
            cache: config,
            context_length,
            tokens,
            quantized_tokens: window.quantized,
            sink_tokens: window.sinks,
            residual_tokens: window.residual,
            residual_capacity: window.capacity,
            tokens_until_flush: window.until_flush,
            kv_fp16_bytes: record.map_or(0, |r| r.fp16_bytes),
            kv_held_bytes: record.map_or(0, |r| r.held_bytes),
            window_layers: record.map_or(0, |r| r.window_layers),
            window_tokens: record.map_or(0, |r| r.window_tokens),
            kv_window_held_bytes: record.map_or(0, |r| r.window_held_bytes),
            decode_tokens_per_sec: live.decode_tokens_per_sec,
            prefill_tokens_per_sec: live.prefill_tokens_per_sec,
            ttft_ms: live.ttft_ms,
            process_memory_bytes: memory.process_resident_bytes,
            system_memory_used_bytes: memory.system_used_bytes,
            system_memory_total_bytes: memory.system_total_bytes,
            device_memory_bytes: None,
            disk_cache: None,
        }
    }
}

/// The snapshot's split of a cache's tokens.
struct Window {
    quantized: u64,
    sinks: u64,
    residual: u64,
    capacity: u64,
    until_flush: Option<u64>,
}

/// The device the backend computes on, and a line about it.
fn device(backend: &Backend) -> (Device, String) {
    match backend.device() {
        BackendDevice::Gpu if std::env::consts::OS == "macos" => {
            (Device::Gpu, "Apple silicon GPU (Metal)".into())
        }
        BackendDevice::Gpu => (Device::Gpu, "GPU (MLX, CUDA)".into()),
        BackendDevice::Cpu => {
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            (
                Device::Cpu,
                format!("CPU · {} · {threads} threads", std::env::consts::ARCH),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kivi_window_is_the_engines() {
        let live = LiveStats::default();
        let empty = live.snapshot(8192, Backend::HOST);
        assert_eq!(empty.phase, Phase::Idle);
        assert_eq!(empty.cache, None);
        assert_eq!(empty.tokens_until_flush, None);
        assert_eq!(empty.sink_tokens, 0);
        assert!(empty.system_memory_total_bytes > 0);

        // As the engine reports K2V2 G32 R128 after 300 tokens: its window holds at most
        // R + G - 1 = 159 tokens, and 19 more can enter before it flushes.
        let config = CacheSettings::default();
        live.start_job(
            "7",
            Some(CacheRecord {
                config,
                tokens: 300,
                quantized_tokens: 160,
                sink_tokens: 0,
                residual_tokens: 140,
                residual_capacity: 159,
                tokens_until_flush: 19,
                fp16_bytes: 1000,
                held_bytes: 300,
                window_layers: 0,
                window_tokens: 0,
                window_held_bytes: 0,
            }),
            Phase::Prefill,
        );
        let s = live.snapshot(4096, Backend::HOST);
        assert_eq!(s.chat_id.as_deref(), Some("7"));
        assert_eq!(s.phase, Phase::Prefill);
        assert_eq!(s.tokens, 300);
        assert_eq!(s.quantized_tokens + s.sink_tokens + s.residual_tokens, 300);
        assert_eq!(s.residual_capacity, 159);
        assert_eq!(s.tokens_until_flush, Some(19));
        assert_eq!(s.kv_held_bytes, 300);
        assert_eq!(s.context_length, 4096);

        // With 4 sinks they are their own segment: the window does not count them.
        let sinks = CacheSettings {
            sinks: 4,
            rotation: crate::store::RotationSetting::Both,
            ..config
        };
        live.describe(
            "7",
            Some(CacheRecord {
                config: sinks,
                tokens: 300,
                quantized_tokens: 160,
                sink_tokens: 4,
                residual_tokens: 136,
                residual_capacity: 159,
                tokens_until_flush: 23,
                fp16_bytes: 1000,
                held_bytes: 310,
                window_layers: 0,
                window_tokens: 0,
                window_held_bytes: 0,
            }),
        );
        let s = live.snapshot(4096, Backend::HOST);
        assert_eq!(s.cache, Some(sinks));
        assert_eq!(
            (
                s.quantized_tokens,
                s.sink_tokens,
                s.residual_tokens,
                s.residual_capacity,
                s.tokens_until_flush
            ),
            (160, 4, 136, 159, Some(23))
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["sinkTokens"], 4);
        assert_eq!(json["cache"]["sinks"], 4);
        assert_eq!(json["cache"]["rotation"], "both");

        // A full window: the next token flushes.
        live.describe(
            "7",
            Some(CacheRecord {
                config,
                tokens: 159,
                quantized_tokens: 0,
                sink_tokens: 0,
                residual_tokens: 159,
                residual_capacity: 159,
                tokens_until_flush: 0,
                fp16_bytes: 10,
                held_bytes: 20,
                window_layers: 0,
                window_tokens: 0,
                window_held_bytes: 0,
            }),
        );
        assert_eq!(
            live.snapshot(4096, Backend::HOST).tokens_until_flush,
            Some(0)
        );

        let mut fp16 = config;
        fp16.mode = CacheMode::Fp16;
        live.describe(
            "7",
            Some(CacheRecord {
                config: fp16,
                tokens: 50,
                quantized_tokens: 0,
                sink_tokens: 0,
                residual_tokens: 50,
                residual_capacity: 0,
                tokens_until_flush: 0,
                fp16_bytes: 10,
                held_bytes: 20,
                window_layers: 0,
                window_tokens: 0,
                window_held_bytes: 0,
            }),
        );
        let s = live.snapshot(4096, Backend::HOST);
        assert_eq!((s.quantized_tokens, s.residual_tokens), (0, 50));
        assert_eq!((s.residual_capacity, s.tokens_until_flush), (0, None));
        assert_eq!(s.sink_tokens, 0);
        live.forget_chat("7");
        assert_eq!(live.snapshot(1, Backend::HOST).chat_id, None);
    }

    #[test]
    fn engine_statistics_reach_the_snapshot_as_they_are() {
        use kivi_engine::cache::LayerKvStats;
        use kivi_engine::stats::{KvStats, MemoryStats, Phase as EnginePhase};
        // The engine's figures for K2V2 G32 R32 with 4 sinks after 100 tokens.
        let layer = LayerKvStats {
            tokens: 100,
            quantized_tokens: 64,
            sink_tokens: 4,
            residual_tokens: 32,
            residual_capacity: 63,
            fp16_bytes: 4000,
            held_bytes: 1500,
            window: 0,
        };
        let stats = Stats {
            phase: EnginePhase::Decode,
            prompt_tokens: 90,
            reused_tokens: 0,
            prefilled_tokens: 90,
            prefill_total: 90,
            prefill_tokens_per_s: 500.0,
            generated_tokens: 10,
            decode_tokens_per_s: 20.0,
            time_to_first_token_s: Some(0.25),
            elapsed_s: 1.0,
            kv: KvStats {
                total: layer,
                tokens_until_flush: 31,
                compression: 0.375,
                layers: vec![layer],
                ..KvStats::default()
            },
            memory: MemoryStats::default(),
            backend: Backend::HOST,
            cache: "kivi k2v2 g32 r32 s4".into(),
        };
        let config = CacheSettings {
            residual_length: 32,
            sinks: 4,
            ..CacheSettings::default()
        };
        let live = LiveStats::default();
        live.update("3", config, &stats, Phase::Decode);
        let s = live.snapshot(8192, Backend::HOST);
        assert_eq!(s.tokens, 100);
        assert_eq!(
            (s.quantized_tokens, s.sink_tokens, s.residual_tokens),
            (64, 4, 32)
        );
        assert_eq!((s.residual_capacity, s.tokens_until_flush), (63, Some(31)));
        assert_eq!((s.kv_fp16_bytes, s.kv_held_bytes), (4000, 1500));
        assert_eq!(s.decode_tokens_per_sec, Some(20.0));
        assert_eq!(s.ttft_ms, Some(250.0));
    }
}
