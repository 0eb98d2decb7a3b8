//! The live panel's numbers (`stats` events, `get_stats`): what the engine is doing, the
//! described chat's KV cache (from the engine's accounting of the real buffers), speeds and
//! memory. A ticker emits them 5 times a second while a model loads, prefills or decodes,
//! and once a second when idle; state changes emit at once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kivi_engine::backend::{Backend, Device as BackendDevice};
use kivi_engine::stats::{MemoryProbe, Stats};

use crate::chat_cache::CacheRecord;
use crate::state::AppState;
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
}

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
        let mut live = self.lock();
        if live.chat_id.as_deref() != Some(chat_id) {
            live.decode_tokens_per_sec = None;
            live.prefill_tokens_per_sec = None;
            live.ttft_ms = None;
        }
        live.chat_id = Some(chat_id.to_string());
        live.cache = cache;
        live.phase = Some(phase);
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
        let (quantized, residual, capacity, until_flush) = match config {
            Some(c) if c.mode == CacheMode::Kivi => {
                let residual = record.map_or(0, |r| r.residual_tokens);
                let capacity = u64::from(c.residual_length) + u64::from(c.group_size);
                (
                    record.map_or(0, |r| r.quantized_tokens),
                    residual,
                    capacity,
                    Some(capacity.saturating_sub(residual)),
                )
            }
            _ => (0, tokens, 0, None),
        };
        let (device, device_name) = device(&backend);
        StatsSnapshot {
            timestamp_ms: now_ms(),
            phase: live.phase.unwrap_or(Phase::Idle),
            chat_id: live.chat_id.clone(),
            device,
            device_name,
            backend: backend.to_string(),
            backend_name: backend.description(),
            cache: config,
            context_length,
            tokens,
            quantized_tokens: quantized,
            residual_tokens: residual,
            residual_capacity: capacity,
            tokens_until_flush: until_flush,
            kv_fp16_bytes: record.map_or(0, |r| r.fp16_bytes),
            kv_held_bytes: record.map_or(0, |r| r.held_bytes),
            decode_tokens_per_sec: live.decode_tokens_per_sec,
            prefill_tokens_per_sec: live.prefill_tokens_per_sec,
            ttft_ms: live.ttft_ms,
            process_memory_bytes: memory.process_resident_bytes,
            system_memory_used_bytes: memory.system_used_bytes,
            system_memory_total_bytes: memory.system_total_bytes,
            device_memory_bytes: None,
        }
    }
}

/// Emits `stats` at 5 Hz while working and 1 Hz when idle, for the app's lifetime.
pub fn start_ticker(app: &Arc<AppState>) {
    let app = Arc::downgrade(app);
    tauri::async_runtime::spawn(async move {
        loop {
            let Some(state) = app.upgrade() else { return };
            let interval = if state.live.phase() == Phase::Idle {
                IDLE_INTERVAL
            } else {
                BUSY_INTERVAL
            };
            state.emit_stats();
            drop(state);
            tokio::time::sleep(interval).await;
        }
    });
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

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kivi_window_follows_the_ipc_definitions() {
        let live = LiveStats::default();
        let empty = live.snapshot(8192, Backend::HOST);
        assert_eq!(empty.phase, Phase::Idle);
        assert_eq!(empty.cache, None);
        assert_eq!(empty.tokens_until_flush, None);
        assert!(empty.system_memory_total_bytes > 0);

        let config = CacheSettings::default(); // R 128, G 32
        live.start_job(
            "7",
            Some(CacheRecord {
                config,
                tokens: 300,
                quantized_tokens: 160,
                residual_tokens: 140,
                fp16_bytes: 1000,
                held_bytes: 300,
            }),
            Phase::Prefill,
        );
        let s = live.snapshot(4096, Backend::HOST);
        assert_eq!(s.chat_id.as_deref(), Some("7"));
        assert_eq!(s.phase, Phase::Prefill);
        assert_eq!(s.tokens, 300);
        assert_eq!(s.quantized_tokens + s.residual_tokens, 300);
        assert_eq!(s.residual_capacity, 160);
        assert_eq!(s.tokens_until_flush, Some(20));
        assert_eq!(s.kv_held_bytes, 300);
        assert_eq!(s.context_length, 4096);

        let mut fp16 = config;
        fp16.mode = CacheMode::Fp16;
        live.describe(
            "7",
            Some(CacheRecord {
                config: fp16,
                tokens: 50,
                quantized_tokens: 0,
                residual_tokens: 50,
                fp16_bytes: 10,
                held_bytes: 20,
            }),
        );
        let s = live.snapshot(4096, Backend::HOST);
        assert_eq!((s.quantized_tokens, s.residual_tokens), (0, 50));
        assert_eq!((s.residual_capacity, s.tokens_until_flush), (0, None));
        live.forget_chat("7");
        assert_eq!(live.snapshot(1, Backend::HOST).chat_id, None);
    }
}
