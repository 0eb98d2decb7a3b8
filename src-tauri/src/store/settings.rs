//! Settings: their rules (IPC.md's validation table), their defaults, and where they are kept;
//! plus a small key-value table for other state that outlives a restart.

use rusqlite::{params, OptionalExtension};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::types::{
    BackendChoice, CacheMode, CacheSettings, RotationSetting, SamplingSettings, Settings,
    DEFAULT_DISK_CACHE_MIB,
};
use super::{Result, Store, StoreError};

/// The longest context the settings accept.
pub const MAX_CONTEXT_LENGTH: u32 = 131_072;

/// One broken rule: the field as a dotted path in the UI's terms, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// E.g. `cache.residualLength`.
    pub field: &'static str,
    /// The same sentence the UI's own check shows (`ui/src/lib/validate.ts`).
    pub message: String,
}

/// Every rule a settings value breaks (empty when valid).
pub type SettingsErrors = Vec<FieldError>;

/// `app_state` key of the active model id.
const ACTIVE_MODEL_KEY: &str = "activeModelId";
/// The `app_state` key of the models added from local files or folders (their paths).
const LOCAL_MODELS_KEY: &str = "localModels";

/// The attention sink counts the settings offer (KIVI+ papers use 4 or 16; 0 is plain KIVI).
pub const SINK_CHOICES: [u32; 3] = [0, 4, 16];
/// The most disk `diskCacheMib` may give the saved caches: 1 TiB.
pub const MAX_DISK_CACHE_MIB: u32 = 1 << 20;

impl Default for CacheSettings {
    /// The engine's recommended cache ([`kivi_engine::cache::RECOMMENDED`]: KIVI K4 V2,
    /// G 32, R 128 with KIVI+'s four sinks and values rotated), so that the app and `kivi`
    /// start from the same one.
    fn default() -> Self {
        let plain = CacheSettings {
            mode: CacheMode::Kivi,
            k_bits: 2,
            v_bits: 2,
            group_size: 32,
            residual_length: 128,
            sinks: 0,
            rotation: RotationSetting::None,
        };
        match kivi_engine::cache::CacheConfig::recommended() {
            kivi_engine::cache::CacheConfig::Kivi(k) => CacheSettings {
                mode: CacheMode::Kivi,
                k_bits: k.key_bits() as u8,
                v_bits: k.value_bits() as u8,
                group_size: k.group_size() as u32,
                residual_length: k.residual_length() as u32,
                sinks: k.sinks() as u32,
                rotation: RotationSetting::from_engine(k.rotation())
                    .expect("the app offers the recommended cache's rotation"),
            },
            kivi_engine::cache::CacheConfig::Full => CacheSettings {
                mode: CacheMode::Fp16,
                ..plain
            },
        }
    }
}

impl Default for SamplingSettings {
    /// temperature 0.7, top-p 0.9, top-k 40, repetition penalty 1.1, 1024 tokens, random seed.
    fn default() -> Self {
        SamplingSettings {
            temperature: 0.7,
            top_p: 0.9,
            top_k: 40,
            repetition_penalty: 1.1,
            max_tokens: 1024,
            seed: None,
        }
    }
}

impl Default for Settings {
    /// The suggested defaults with an 8192-token context.
    fn default() -> Self {
        Settings {
            cache: CacheSettings::default(),
            context_length: 8192,
            sampling: SamplingSettings::default(),
            backend: BackendChoice::Auto,
            disk_cache_mib: DEFAULT_DISK_CACHE_MIB,
        }
    }
}

impl Settings {
    /// `get_default_settings`: the defaults, with the context cut to the model's maximum when
    /// that is smaller (and the answer length and residual window cut to fit it).
    pub fn defaults_for_model(model_max_context: Option<u32>) -> Settings {
        let mut s = Settings::default();
        if let Some(max) = model_max_context {
            s.context_length = s.context_length.min(max).max(512);
            if s.sampling.max_tokens >= s.context_length {
                s.sampling.max_tokens = s.context_length / 2;
            }
            let g = s.cache.group_size;
            while s.cache.residual_length >= s.context_length && s.cache.residual_length >= g {
                s.cache.residual_length -= g;
            }
        }
        s
    }

    /// Every rule of IPC.md's validation table that these settings break, in table order.
    pub fn errors(&self) -> SettingsErrors {
        let mut e = Vec::new();
        let mut push = |field: &'static str, message: String| e.push(FieldError { field, message });
        let c = &self.cache;
        if !matches!(c.k_bits, 2 | 4) {
            push("cache.kBits", "Key bits must be 2 or 4.".into());
        }
        if !matches!(c.v_bits, 2 | 4) {
            push("cache.vBits", "Value bits must be 2 or 4.".into());
        }
        let group_ok = matches!(c.group_size, 32 | 64 | 128);
        if !group_ok {
            push(
                "cache.groupSize",
                "Group size must be 32, 64 or 128.".into(),
            );
        }
        let r = c.residual_length;
        if r > 4096 {
            push(
                "cache.residualLength",
                "Residual length must be between 0 and 4096 tokens.".into(),
            );
        } else if group_ok && !r.is_multiple_of(c.group_size) {
            let lower = r / c.group_size * c.group_size;
            let upper = lower + c.group_size;
            let hint = if lower == 0 {
                upper.to_string()
            } else {
                format!("{lower} or {upper}")
            };
            push(
                "cache.residualLength",
                format!(
                    "Residual length must be a multiple of the group size ({}): try {hint}.",
                    c.group_size
                ),
            );
        } else if r >= self.context_length {
            push(
                "cache.residualLength",
                "Residual length must be smaller than the context length.".into(),
            );
        }
        if !SINK_CHOICES.contains(&c.sinks) {
            push("cache.sinks", "Sink tokens must be 0, 4 or 16.".into());
        }

        if !(512..=MAX_CONTEXT_LENGTH).contains(&self.context_length) {
            push(
                "contextLength",
                "Context length must be a whole number from 512 to 131,072.".into(),
            );
        }

        let s = &self.sampling;
        if !(0.0..=2.0).contains(&s.temperature) {
            push(
                "sampling.temperature",
                "Temperature must be from 0 to 2.".into(),
            );
        }
        if !(s.top_p > 0.0 && s.top_p <= 1.0) {
            push(
                "sampling.topP",
                "Top-p must be greater than 0 and at most 1.".into(),
            );
        }
        if s.top_k > 1000 {
            push(
                "sampling.topK",
                "Top-k must be a whole number from 0 to 1000.".into(),
            );
        }
        if !(1.0..=2.0).contains(&s.repetition_penalty) {
            push(
                "sampling.repetitionPenalty",
                "Repetition penalty must be from 1 to 2.".into(),
            );
        }
        if !(1..=32_768).contains(&s.max_tokens) {
            push(
                "sampling.maxTokens",
                "Max tokens must be a whole number from 1 to 32768.".into(),
            );
        } else if s.max_tokens >= self.context_length {
            push(
                "sampling.maxTokens",
                "Max tokens must be smaller than the context length.".into(),
            );
        }
        if self.disk_cache_mib > MAX_DISK_CACHE_MIB {
            push(
                "diskCacheMib",
                "Disk space for saved caches must be a whole number of MiB from 0 to 1048576 \
                 (0 keeps none)."
                    .into(),
            );
        }
        // `sampling.seed`: an `Option<u32>` holds only null or 0..=4294967295; anything else
        // already fails to deserialize.
        e
    }

    /// `Ok` when every rule holds, else the first broken one as `InvalidArgument`.
    pub fn validate(&self) -> Result<()> {
        match self.errors().into_iter().next() {
            None => Ok(()),
            Some(FieldError { field, message }) => Err(StoreError::invalid(field, message)),
        }
    }

    /// Whether changing from `self` to `new` invalidates KV caches (`cacheReset`): the
    /// context length, the cache (bits, group, window, sinks, rotation) or the backend
    /// changed, where fp16 ↔ fp16 ignores the unused KIVI fields.
    pub fn cache_reset_needed(&self, new: &Settings) -> bool {
        if self.context_length != new.context_length || self.backend != new.backend {
            return true;
        }
        match (self.cache.mode, new.cache.mode) {
            (CacheMode::Fp16, CacheMode::Fp16) => false,
            _ => self.cache != new.cache,
        }
    }
}

impl Store {
    /// The saved settings; the defaults when none were saved or the saved ones no longer
    /// read or validate (so an old or damaged row never keeps the app from starting).
    pub fn get_settings(&self) -> Result<Settings> {
        let json: Option<String> = self
            .conn()
            .query_row("SELECT value FROM settings WHERE id = 1", [], |r| r.get(0))
            .optional()?;
        Ok(json
            .and_then(|j| serde_json::from_str::<Settings>(&j).ok())
            .filter(|s| s.validate().is_ok())
            .unwrap_or_default())
    }

    /// Validates and saves the settings.
    pub fn put_settings(&self, settings: &Settings) -> Result<()> {
        settings.validate()?;
        let json = serde_json::to_string(settings)?;
        self.conn().execute(
            "INSERT INTO settings (id, value) VALUES (1, ?1)
             ON CONFLICT (id) DO UPDATE SET value = excluded.value",
            [json],
        )?;
        Ok(())
    }

    /// A value saved with [`Store::put_state`], if any.
    pub fn get_state<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        let json: Option<String> = self
            .conn()
            .query_row("SELECT value FROM app_state WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .optional()?;
        Ok(json.map(|j| serde_json::from_str(&j)).transpose()?)
    }

    /// Saves a small value (as JSON) under `key`.
    pub fn put_state<T: Serialize + ?Sized>(&self, key: &str, value: &T) -> Result<()> {
        let json = serde_json::to_string(value)?;
        self.conn().execute(
            "INSERT INTO app_state (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![key, json],
        )?;
        Ok(())
    }

    /// Forgets `key`; returns whether it was there.
    #[cfg_attr(not(test), allow(dead_code))] // tests and future commands use it
    pub fn delete_state(&self, key: &str) -> Result<bool> {
        Ok(self
            .conn()
            .execute("DELETE FROM app_state WHERE key = ?1", [key])?
            == 1)
    }

    /// The model chosen with `set_active_model`, if any.
    pub fn active_model_id(&self) -> Result<Option<String>> {
        self.get_state(ACTIVE_MODEL_KEY)
    }

    /// Remembers the active model.
    pub fn set_active_model_id(&self, model_id: &str) -> Result<()> {
        self.put_state(ACTIVE_MODEL_KEY, model_id)
    }

    /// The paths of the models added from local files or folders, in the order added.
    pub fn local_models(&self) -> Result<Vec<String>> {
        Ok(self.get_state(LOCAL_MODELS_KEY)?.unwrap_or_default())
    }

    /// Replaces the list of local models.
    pub fn set_local_models(&self, paths: &[String]) -> Result<()> {
        self.put_state(LOCAL_MODELS_KEY, paths)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(s: &Settings) -> Vec<&'static str> {
        s.errors().into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn defaults_are_the_suggested_ones_and_valid() {
        let s = Settings::default();
        // f32 fields print as the UI typed them (`to_string`, as Tauri sends them).
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"cache":{"mode":"kivi","kBits":4,"vBits":2,"groupSize":32,"residualLength":128,"sinks":4,"rotation":"values"},"contextLength":8192,"sampling":{"temperature":0.7,"topP":0.9,"topK":40,"repetitionPenalty":1.1,"maxTokens":1024,"seed":null},"backend":"auto","diskCacheMib":2048}"#
        );
        assert!(s.validate().is_ok());
        assert_eq!(Settings::defaults_for_model(None), s);
        assert_eq!(Settings::defaults_for_model(Some(32768)), s);
        let small = Settings::defaults_for_model(Some(2048));
        assert_eq!(small.context_length, 2048);
        assert!(small.validate().is_ok());
        for max in [0, 100, 512, 600, 1024, 1025] {
            let s = Settings::defaults_for_model(Some(max));
            assert!(s.validate().is_ok(), "{max}: {:?}", s.errors());
        }
    }

    #[test]
    fn settings_round_trip_the_ui_json() {
        let ui = json!({
            "cache": {"mode": "fp16", "kBits": 4, "vBits": 2, "groupSize": 64, "residualLength": 256},
            "contextLength": 4096,
            "sampling": {"temperature": 0, "topP": 1, "topK": 0, "repetitionPenalty": 1,
                         "maxTokens": 512, "seed": 4294967295u64}
        });
        let s: Settings = serde_json::from_value(ui.clone()).unwrap();
        assert_eq!(s.cache.mode, CacheMode::Fp16);
        assert_eq!(s.sampling.seed, Some(u32::MAX));
        assert!(s.validate().is_ok());
        let back: Settings = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let mut too_big = ui.clone();
        too_big["sampling"]["seed"] = json!(4294967296u64);
        assert!(serde_json::from_value::<Settings>(too_big).is_err());
        // The backend: absent reads as auto; a name round-trips; an unknown one is refused
        // with the names that work.
        assert_eq!(s.backend, BackendChoice::Auto);
        let mut named = ui.clone();
        named["backend"] = json!("mlx-cpu-f16");
        let s: Settings = serde_json::from_value(named.clone()).unwrap();
        assert_eq!(serde_json::to_value(s).unwrap()["backend"], "mlx-cpu-f16");
        named["backend"] = json!("metal");
        let err = serde_json::from_value::<Settings>(named)
            .unwrap_err()
            .to_string();
        assert!(err.contains("mlx-gpu-f16"), "{err}");
    }

    #[test]
    fn each_rule_names_its_field() {
        let ok = Settings::default();
        let check = |f: &dyn Fn(&mut Settings), field: &str| {
            let mut s = ok;
            f(&mut s);
            let errs = fields(&s);
            assert!(errs.contains(&field), "{field}: {errs:?}");
            let err = s.validate().unwrap_err();
            assert_eq!(err.ipc_code(), "invalidArgument");
            assert!(err.field().is_some());
        };
        check(&|s| s.cache.k_bits = 3, "cache.kBits");
        check(&|s| s.cache.v_bits = 8, "cache.vBits");
        check(&|s| s.cache.group_size = 16, "cache.groupSize");
        check(
            &|s| s.cache.residual_length = 4097 + 31,
            "cache.residualLength",
        );
        check(&|s| s.cache.residual_length = 100, "cache.residualLength");
        check(
            &|s| {
                s.context_length = 1024;
                s.sampling.max_tokens = 100;
                s.cache.residual_length = 1024;
            },
            "cache.residualLength",
        );
        check(&|s| s.cache.sinks = 8, "cache.sinks");
        check(&|s| s.cache.sinks = 1, "cache.sinks");
        check(&|s| s.cache.sinks = 128, "cache.sinks");
        check(&|s| s.context_length = 511, "contextLength");
        check(&|s| s.context_length = 131_073, "contextLength");
        check(&|s| s.sampling.temperature = 2.01, "sampling.temperature");
        check(&|s| s.sampling.temperature = -0.1, "sampling.temperature");
        check(
            &|s| s.sampling.temperature = f32::NAN,
            "sampling.temperature",
        );
        check(&|s| s.sampling.top_p = 0.0, "sampling.topP");
        check(&|s| s.sampling.top_p = 1.01, "sampling.topP");
        check(&|s| s.sampling.top_k = 1001, "sampling.topK");
        check(
            &|s| s.sampling.repetition_penalty = 0.99,
            "sampling.repetitionPenalty",
        );
        check(
            &|s| s.sampling.repetition_penalty = 2.5,
            "sampling.repetitionPenalty",
        );
        check(&|s| s.sampling.max_tokens = 0, "sampling.maxTokens");
        check(&|s| s.sampling.max_tokens = 32_769, "sampling.maxTokens");
        check(&|s| s.sampling.max_tokens = 8192, "sampling.maxTokens");

        // The boundaries themselves are fine.
        let mut edge = ok;
        edge.cache.group_size = 128;
        edge.cache.residual_length = 4096;
        edge.context_length = 131_072;
        edge.sampling.temperature = 2.0;
        edge.sampling.top_p = 1.0;
        edge.sampling.top_k = 1000;
        edge.sampling.repetition_penalty = 2.0;
        edge.sampling.max_tokens = 32_768;
        edge.cache.sinks = 16;
        edge.cache.rotation = RotationSetting::Both;
        assert_eq!(fields(&edge), Vec::<&str>::new());
        for sinks in SINK_CHOICES {
            let mut s = ok;
            s.cache.sinks = sinks;
            assert!(s.validate().is_ok(), "{sinks}");
            // fp16 keeps and checks them too, as it does the bits.
            s.cache.mode = CacheMode::Fp16;
            assert!(s.validate().is_ok(), "{sinks}");
        }
        let mut fp16 = ok;
        fp16.cache.mode = CacheMode::Fp16;
        fp16.cache.sinks = 5;
        assert_eq!(fields(&fp16), vec!["cache.sinks"]);
        let mut zero = ok;
        zero.cache.residual_length = 0;
        zero.context_length = 512;
        zero.sampling.max_tokens = 511;
        zero.sampling.temperature = 0.0;
        zero.sampling.top_k = 0;
        zero.sampling.repetition_penalty = 1.0;
        assert!(zero.validate().is_ok());
    }

    #[test]
    fn messages_match_the_ui() {
        let mut s = Settings::default();
        s.cache.residual_length = 100;
        assert_eq!(
            s.errors()[0].message,
            "Residual length must be a multiple of the group size (32): try 96 or 128."
        );
        s.cache.residual_length = 10;
        assert_eq!(
            s.errors()[0].message,
            "Residual length must be a multiple of the group size (32): try 32."
        );
        s.cache.residual_length = 128;
        s.cache.sinks = 3;
        assert_eq!(s.errors()[0].message, "Sink tokens must be 0, 4 or 16.");
        s.cache.sinks = 0;
        s.sampling.max_tokens = 9000;
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "Max tokens must be smaller than the context length."
        );
    }

    /// Plain KIVI settings (the defaults without KIVI+).
    fn plain() -> Settings {
        let mut s = Settings::default();
        s.cache.sinks = 0;
        s.cache.rotation = RotationSetting::None;
        s
    }

    #[test]
    fn cache_reset_follows_the_rules() {
        let kivi = plain();
        let mut other = kivi;
        other.sampling.temperature = 0.1;
        assert!(!kivi.cache_reset_needed(&other));
        other.cache.residual_length = 256;
        assert!(kivi.cache_reset_needed(&other));
        let mut fp16 = kivi;
        fp16.cache.mode = CacheMode::Fp16;
        assert!(kivi.cache_reset_needed(&fp16));
        let mut fp16b = fp16;
        fp16b.cache.k_bits = 4;
        assert!(!fp16.cache_reset_needed(&fp16b));
        fp16b.context_length = 4096;
        assert!(fp16.cache_reset_needed(&fp16b));

        // KIVI+: sinks and rotation build a different cache, like the bits ...
        let mut sinks = kivi;
        sinks.cache.sinks = 4;
        assert!(kivi.cache_reset_needed(&sinks));
        assert!(sinks.cache_reset_needed(&kivi));
        let mut rotated = kivi;
        rotated.cache.rotation = RotationSetting::Values;
        assert!(kivi.cache_reset_needed(&rotated));
        assert!(rotated.cache_reset_needed(&kivi));
        let mut both = sinks;
        both.cache.rotation = RotationSetting::Values;
        assert!(sinks.cache_reset_needed(&both));
        let mut keys_too = both;
        keys_too.cache.rotation = RotationSetting::Both;
        assert!(both.cache_reset_needed(&keys_too));
        assert!(!both.cache_reset_needed(&both));
        // ... and an fp16 cache ignores them, like the bits.
        let mut fp16c = fp16;
        fp16c.cache.sinks = 16;
        fp16c.cache.rotation = RotationSetting::Both;
        assert!(!fp16.cache_reset_needed(&fp16c));
        let mut back = fp16c;
        back.cache.mode = CacheMode::Kivi;
        assert!(fp16c.cache_reset_needed(&back));
    }

    #[test]
    fn kivi_plus_fields_default_to_the_recommended_cache_and_read_as_off_when_absent() {
        // New settings start from the engine's recommended cache.
        let c = CacheSettings::default();
        assert_eq!((c.sinks, c.rotation), (4, RotationSetting::Values));
        assert_eq!(
            crate::chat_cache::engine_cache(&c).to_string(),
            kivi_engine::cache::RECOMMENDED
        );
        // Settings saved by builds before KIVI+ have neither field.
        let old = json!({
            "cache": {"mode": "kivi", "kBits": 4, "vBits": 2, "groupSize": 64, "residualLength": 128},
            "contextLength": 4096,
            "sampling": {"temperature": 0.5, "topP": 0.9, "topK": 40, "repetitionPenalty": 1.1,
                         "maxTokens": 512, "seed": null},
            "backend": "auto"
        });
        let s: Settings = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(
            (s.cache.sinks, s.cache.rotation),
            (0, RotationSetting::None)
        );
        assert_eq!(s.cache.k_bits, 4);
        assert!(s.validate().is_ok());
        // They are always written, and read back.
        let mut on = s;
        on.cache.sinks = 16;
        on.cache.rotation = RotationSetting::Both;
        let v = serde_json::to_value(on).unwrap();
        assert_eq!(v["cache"]["sinks"], json!(16));
        assert_eq!(v["cache"]["rotation"], json!("both"));
        assert_eq!(serde_json::from_value::<Settings>(v).unwrap(), on);
        // A row saved by an older build, straight from the database, reads as plain KIVI.
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("kivi.db")).unwrap();
        store
            .conn()
            .execute(
                "INSERT INTO settings (id, value) VALUES (1, ?1)",
                [old.to_string()],
            )
            .unwrap();
        assert_eq!(store.get_settings().unwrap(), s);
        store.put_settings(&on).unwrap();
        assert_eq!(store.get_settings().unwrap(), on);
    }

    #[test]
    fn settings_and_state_persist() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kivi.db");
        let mut s = Settings::default();
        {
            let store = Store::open(&path).unwrap();
            assert_eq!(store.get_settings().unwrap(), Settings::default());
            s.cache.k_bits = 4;
            s.sampling.seed = Some(7);
            store.put_settings(&s).unwrap();
            let mut bad = s;
            bad.context_length = 1;
            assert_eq!(
                store.put_settings(&bad).unwrap_err().field(),
                Some("cache.residualLength")
            );
            assert_eq!(store.active_model_id().unwrap(), None);
            store.set_active_model_id("builtin/smollm2").unwrap();
            store.put_state("serverPort", &8081u16).unwrap();
            assert!(store.delete_state("serverPort").unwrap());
            assert!(!store.delete_state("serverPort").unwrap());
            store.put_state("serverPort", &9000u16).unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.get_settings().unwrap(), s);
        assert_eq!(
            store.active_model_id().unwrap().as_deref(),
            Some("builtin/smollm2")
        );
        assert_eq!(store.get_state::<u16>("serverPort").unwrap(), Some(9000));
        // A damaged row falls back to the defaults instead of failing.
        store
            .conn()
            .execute("UPDATE settings SET value = '{\"cache\": 1}'", [])
            .unwrap();
        assert_eq!(store.get_settings().unwrap(), Settings::default());
    }
}
