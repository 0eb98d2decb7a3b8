//! What the app knows of each chat's live KV cache (IPC "The KV cache of a chat").
//!
//! The caches themselves live on the engine's model thread, one per chat
//! (`Engine::generate_in` with the chat id as the conversation). This mirror is updated
//! from the engine's events as jobs run, and reconciled with `Engine::conversations` after
//! each job (the engine evicts the least recently used chat's cache when more chats are in
//! use than it keeps), so `get_chat` never waits for the model thread.

use std::collections::HashMap;
use std::sync::Mutex;

use kivi_engine::cache::{CacheConfig as EngineCache, KiviConfig};
use kivi_engine::stats::KvStats;

use crate::store::{CacheMode, CacheSettings, ChatCacheInfo};

/// One chat's cache as last seen: the engine's own figures, so the panel never recomputes
/// (and never disagrees with) the cache's window arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheRecord {
    /// The settings it was built with.
    pub config: CacheSettings,
    /// Tokens it holds.
    pub tokens: u64,
    /// Tokens stored quantized.
    pub quantized_tokens: u64,
    /// KIVI+ attention sinks held: the first tokens, in full precision for good.
    pub sink_tokens: u64,
    /// Tokens in the full-precision window (sinks not counted).
    pub residual_tokens: u64,
    /// Most tokens the window holds before its oldest group is quantized (KIVI: `R + G - 1`;
    /// 0 for fp16, which has no window).
    pub residual_capacity: u64,
    /// Tokens that can still enter the window before its oldest group is quantized (0 when
    /// it is full: the next token flushes; 0 for fp16).
    pub tokens_until_flush: u64,
    /// The same tokens in fp16.
    pub fp16_bytes: u64,
    /// What it really holds.
    pub held_bytes: u64,
    /// Layers over a sliding window (their caches hold the newest positions in full
    /// precision whatever the settings); 0 for most models.
    pub window_layers: u64,
    /// Positions each window layer holds.
    pub window_tokens: u64,
    /// The part of `held_bytes` the window layers hold.
    pub window_held_bytes: u64,
}

impl CacheRecord {
    /// A record from the engine's accounting.
    pub fn from_kv(config: CacheSettings, kv: &KvStats) -> Self {
        Self {
            config,
            tokens: kv.total.tokens as u64,
            quantized_tokens: kv.total.quantized_tokens as u64,
            sink_tokens: kv.total.sink_tokens as u64,
            residual_tokens: kv.total.residual_tokens as u64,
            residual_capacity: kv.total.residual_capacity as u64,
            tokens_until_flush: kv.tokens_until_flush as u64,
            fp16_bytes: kv.total.fp16_bytes,
            held_bytes: kv.total.held_bytes,
            window_layers: kv.window_layer_count as u64,
            window_tokens: kv.window_layers.tokens as u64,
            window_held_bytes: kv.window_layers.held_bytes,
        }
    }
}

/// Every chat's cache record.
#[derive(Default)]
pub struct ChatCaches {
    records: Mutex<HashMap<String, CacheRecord>>,
}

impl ChatCaches {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, CacheRecord>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The chat's cache as IPC `ChatCacheInfo`.
    pub fn info(&self, chat_id: &str) -> ChatCacheInfo {
        match self.map().get(chat_id) {
            Some(r) => ChatCacheInfo {
                config: Some(r.config),
                tokens: r.tokens,
            },
            None => ChatCacheInfo::default(),
        }
    }

    /// The chat's record.
    pub fn get(&self, chat_id: &str) -> Option<CacheRecord> {
        self.map().get(chat_id).copied()
    }

    /// The chats with a cache.
    pub fn chat_ids(&self) -> Vec<String> {
        self.map().keys().cloned().collect()
    }

    /// Records the chat's cache.
    pub fn set(&self, chat_id: &str, record: CacheRecord) {
        self.map().insert(chat_id.to_string(), record);
    }

    /// Forgets the chat's cache; returns whether there was one.
    pub fn remove(&self, chat_id: &str) -> bool {
        self.map().remove(chat_id).is_some()
    }

    /// Forgets every cache.
    pub fn clear(&self) {
        self.map().clear();
    }

    /// Keeps only the chats in `live`; returns the chats that were dropped.
    pub fn retain(&self, live: &[String]) -> Vec<String> {
        let mut map = self.map();
        let gone: Vec<String> = map.keys().filter(|k| !live.contains(k)).cloned().collect();
        for k in &gone {
            map.remove(k);
        }
        gone
    }
}

/// The engine's cache settings for the app's (the app offers rotation off, of values, or of
/// keys and values; the engine's keys-only rotation is for experiments).
pub fn engine_cache(settings: &CacheSettings) -> EngineCache {
    match settings.mode {
        CacheMode::Fp16 => EngineCache::Full,
        CacheMode::Kivi => KiviConfig::new(
            u32::from(settings.k_bits),
            u32::from(settings.v_bits),
            settings.group_size as usize,
            settings.residual_length as usize,
        )
        .and_then(|c| c.with_sinks(settings.sinks as usize))
        .map(|c| c.with_rotation(settings.rotation.engine()))
        // Settings are validated when saved (the same rules), so this holds; fall back to
        // the paper's defaults rather than fail a generation if it ever did not.
        .map_or_else(
            |_| EngineCache::Kivi(KiviConfig::default()),
            EngineCache::Kivi,
        ),
    }
}

/// Whether two settings build the same cache (fp16 ignores the KIVI fields).
pub fn same_cache(a: &CacheSettings, b: &CacheSettings) -> bool {
    match (a.mode, b.mode) {
        (CacheMode::Fp16, CacheMode::Fp16) => true,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RotationSetting;

    #[test]
    fn settings_map_to_engine_caches() {
        let plain_k2v2 = CacheSettings {
            k_bits: 2,
            v_bits: 2,
            group_size: 32,
            residual_length: 128,
            sinks: 0,
            rotation: RotationSetting::None,
            ..CacheSettings::default()
        };
        let mut s = plain_k2v2;
        assert_eq!(engine_cache(&s).to_string(), "k2v2-g32-r128");
        s.k_bits = 4;
        s.group_size = 64;
        s.residual_length = 256;
        assert_eq!(engine_cache(&s).to_string(), "k4v2-g64-r256");
        // KIVI+: sinks and rotation reach the engine, in its short names.
        s.sinks = 4;
        assert_eq!(engine_cache(&s).to_string(), "k4v2-g64-r256-s4");
        s.rotation = RotationSetting::Values;
        assert_eq!(engine_cache(&s).to_string(), "k4v2-g64-r256-s4-rotv");
        s.rotation = RotationSetting::Both;
        assert_eq!(engine_cache(&s).to_string(), "k4v2-g64-r256-s4-rot");
        let k2v2_plus = CacheSettings {
            sinks: 4,
            rotation: RotationSetting::Both,
            ..plain_k2v2
        };
        let engine = engine_cache(&k2v2_plus);
        assert_eq!(engine.to_string(), "k2v2-g32-r128-s4-rot");
        assert_eq!(
            engine,
            "k2v2-g32-r128-s4-rot".parse::<EngineCache>().unwrap()
        );
        let EngineCache::Kivi(kivi) = engine else {
            panic!("a KIVI cache: {engine}")
        };
        assert_eq!(
            (kivi.sinks(), kivi.rotation()),
            (4, kivi_engine::cache::Rotation::Both)
        );
        let rotated_only = CacheSettings {
            rotation: RotationSetting::Both,
            sinks: 16,
            ..plain_k2v2
        };
        assert_eq!(
            engine_cache(&rotated_only).to_string(),
            "k2v2-g32-r128-s16-rot"
        );
        assert_eq!(
            engine_cache(&CacheSettings {
                sinks: 16,
                rotation: RotationSetting::None,
                ..plain_k2v2
            })
            .to_string(),
            "k2v2-g32-r128-s16"
        );

        // fp16 ignores every KIVI field, sinks and rotation included.
        s.mode = CacheMode::Fp16;
        assert_eq!(engine_cache(&s), EngineCache::Full);
        let mut t = s;
        t.k_bits = 2;
        t.sinks = 0;
        t.rotation = RotationSetting::None;
        assert!(same_cache(&s, &t));
        t.mode = CacheMode::Kivi;
        assert!(!same_cache(&s, &t));
        let mut u = t;
        u.sinks = 16;
        assert!(!same_cache(&t, &u));
        u.sinks = t.sinks;
        u.rotation = RotationSetting::Values;
        assert!(!same_cache(&t, &u));
    }

    #[test]
    fn records_carry_the_engines_window_figures() {
        use kivi_engine::cache::LayerKvStats;
        // As the engine reports a K2V2 G32 R128 cache with 4 sinks after 300 tokens: 4
        // sinks, 160 quantized (two groups), 136 in the window of at most 159.
        let layer = LayerKvStats {
            tokens: 300,
            quantized_tokens: 160,
            sink_tokens: 4,
            residual_tokens: 136,
            residual_capacity: 159,
            fp16_bytes: 1000,
            held_bytes: 300,
            window: 0,
        };
        let kv = KvStats {
            total: layer,
            tokens_until_flush: 23,
            compression: 0.3,
            layers: vec![layer],
            ..KvStats::default()
        };
        let config = CacheSettings {
            sinks: 4,
            ..CacheSettings::default()
        };
        let r = CacheRecord::from_kv(config, &kv);
        assert_eq!(
            (
                r.tokens,
                r.quantized_tokens,
                r.sink_tokens,
                r.residual_tokens
            ),
            (300, 160, 4, 136)
        );
        assert_eq!((r.residual_capacity, r.tokens_until_flush), (159, 23));
        assert_eq!((r.fp16_bytes, r.held_bytes), (1000, 300));
    }

    #[test]
    fn records_follow_the_engine() {
        let caches = ChatCaches::default();
        assert_eq!(caches.info("1"), ChatCacheInfo::default());
        let r = CacheRecord {
            config: CacheSettings::default(),
            tokens: 10,
            quantized_tokens: 0,
            sink_tokens: 0,
            residual_tokens: 10,
            residual_capacity: 159,
            tokens_until_flush: 149,
            fp16_bytes: 100,
            held_bytes: 200,
            window_layers: 0,
            window_tokens: 0,
            window_held_bytes: 0,
        };
        caches.set("1", r);
        caches.set("2", r);
        assert_eq!(caches.info("1").tokens, 10);
        assert_eq!(caches.retain(&["2".to_string()]), vec!["1".to_string()]);
        assert!(caches.get("1").is_none());
        assert!(caches.remove("2"));
        assert!(!caches.remove("2"));
    }
}
