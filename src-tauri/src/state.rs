//! The app's state, shared by every command (Tauri managed state `App`): the store, the
//! active model's engine, what runs in each chat, each chat's cache, downloads, live
//! statistics, the local server, the hub token, and where events and dialogs go.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kivi_engine::backend::Backend;
use kivi_engine::budget::{kv_cache_bytes, kv_fp16_bytes, KvShape};
use kivi_engine::hub::HubConfig;

use crate::active_model::{ActiveModel, ModelChoice};
use crate::catalog::{self, Catalog};
use crate::chat_cache::ChatCaches;
use crate::desktop::Desktop;
use crate::disk_caches::DiskCaches;
use crate::downloads::Downloads;
use crate::events::{EventSink, Events};
use crate::jobs::Jobs;
use crate::server::ServerSlot;
use crate::stats::LiveStats;
use crate::store::{apply_context_fit, Chat, DocumentInfo, Settings, Store};

/// The state every command gets.
pub type App = Arc<AppState>;

/// Where things live.
#[derive(Debug, Clone)]
pub struct AppConfig {
    /// The built-in model (`KIVI_MODEL`, else the file shipped with the app).
    pub builtin_model: PathBuf,
    /// The hub and its cache (`HF_HOME`, `HF_HUB_CACHE`, `HF_ENDPOINT`, `HF_HUB_OFFLINE`).
    pub hub: HubConfig,
}

/// Everything the commands share.
pub struct AppState {
    /// Chats, messages, documents, settings, downloads.
    pub store: Arc<Store>,
    /// Where events go.
    pub events: Events,
    /// Dialogs and the browser.
    pub desktop: Arc<dyn Desktop>,
    /// Paths and the hub.
    pub config: AppConfig,
    /// The active model.
    pub model: ActiveModel,
    /// What runs in each chat.
    pub jobs: Jobs,
    /// Each chat's live KV cache.
    pub caches: ChatCaches,
    /// Chats' KV caches kept on disk (next to the database).
    pub disk: DiskCaches,
    /// Running downloads.
    pub downloads: Downloads,
    /// Models looked up on the hub this session.
    pub catalog: Catalog,
    /// Live statistics.
    pub live: LiveStats,
    /// The local OpenAI-compatible server.
    pub server: ServerSlot,
    /// The hub token from the keychain (never logged or sent to the UI).
    hub_token: Mutex<Option<String>>,
    /// Token counts of short texts (system prompts), by text.
    token_counts: Mutex<HashMap<String, u64>>,
    next_id: AtomicU64,
    id_prefix: String,
}

impl AppState {
    /// The state over an opened store. Call [`AppState::start`] next.
    pub fn new(
        store: Store,
        sink: Arc<dyn EventSink>,
        desktop: Arc<dyn Desktop>,
        config: AppConfig,
    ) -> App {
        let disk_dir = store
            .path()
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("kv-caches");
        Arc::new(AppState {
            disk: DiskCaches::new(disk_dir),
            store: Arc::new(store),
            events: Events::new(sink),
            desktop,
            config,
            model: ActiveModel::default(),
            jobs: Jobs::default(),
            caches: ChatCaches::default(),
            downloads: Downloads::default(),
            catalog: Catalog::default(),
            live: LiveStats::default(),
            server: ServerSlot::default(),
            hub_token: Mutex::new(None),
            token_counts: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            id_prefix: format!("{:x}", crate::runtime::now_ms()),
        })
    }

    /// The model to load: the saved choice if it is still on disk, else the built-in one.
    pub fn active_choice(&self) -> ModelChoice {
        let saved = self.store.active_model_id().ok().flatten();
        if let Some(local) = saved.as_deref().and_then(catalog::local_choice) {
            if local.path.exists() {
                return local;
            }
            eprintln!(
                "kivi-chat: {} is no longer there; using the built-in model",
                local.path.display()
            );
        } else if let Some(id) = saved.filter(|id| id != catalog::BUILTIN_ID) {
            match catalog::cached_snapshot(&self.config.hub, &id) {
                Some(snapshot) => {
                    return ModelChoice {
                        name: catalog::display_name(&id),
                        id,
                        path: snapshot.dir,
                    }
                }
                None => {
                    eprintln!("kivi-chat: {id} is no longer downloaded; using the built-in model")
                }
            }
        }
        catalog::builtin_choice(&self.config.builtin_model)
    }

    /// A new id for a generation (`g`) or a prefill job (`p`), unique across restarts.
    pub fn new_id(&self, kind: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{kind}-{}-{n}", self.id_prefix)
    }

    /// The hub configuration with the user's token, if one is stored.
    pub fn hub_config(&self) -> HubConfig {
        self.config.hub.clone().with_token(self.hub_token())
    }

    /// The stored hub token.
    pub fn hub_token(&self) -> Option<String> {
        self.hub_token
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the in-memory copy of the hub token.
    pub fn set_hub_token(&self, token: Option<String>) {
        *self.hub_token.lock().unwrap_or_else(|p| p.into_inner()) = token;
    }

    /// The saved settings.
    pub fn settings(&self) -> Settings {
        self.store.get_settings().unwrap_or_default()
    }

    /// The backend the model runs on: the loaded engine's, else the one the settings choose.
    pub fn backend(&self, settings: &Settings) -> Backend {
        match self.model.loaded() {
            Some(engine) => engine.info().backend,
            None => settings.backend.resolve().unwrap_or_default(),
        }
    }

    /// The context in force: the settings' length, capped by the loaded model's maximum.
    pub fn context_length(&self, settings: &Settings) -> u64 {
        let wanted = u64::from(settings.context_length);
        match self.model.loaded() {
            Some(engine) => wanted.min(engine.context_length() as u64),
            None => wanted,
        }
    }

    /// Tokens of a short text (a system prompt) with the active model's tokenizer; remembered
    /// per text. While the model thread is busy with a long job the count would wait for it,
    /// so after a moment it is estimated (and not remembered).
    pub async fn count_short_text(&self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        if let Some(n) = self
            .token_counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(text)
        {
            return *n;
        }
        if let Some(engine) = self.model.loaded() {
            let count = tokio::time::timeout(
                Duration::from_millis(300),
                engine.count_tokens(text.to_string()),
            )
            .await;
            if let Ok(Ok(n)) = count {
                let n = n as u64;
                let mut memo = self.token_counts.lock().unwrap_or_else(|p| p.into_inner());
                if memo.len() > 256 {
                    memo.clear();
                }
                memo.insert(text.to_string(), n);
                return n;
            }
        }
        estimate_tokens(text)
    }

    /// Forgets remembered token counts (the tokenizer changed).
    pub fn forget_token_counts(&self) {
        self.token_counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Sets `fitsInContext` of a chat's documents for the current settings, and what reading
    /// each costs: the KV bytes of the chat's prompt up to it (and in float16), and the time
    /// at the last measured reading speed.
    pub async fn apply_fit(&self, system_prompt: &str, documents: &mut [DocumentInfo]) {
        let settings = self.settings();
        let system = self.count_short_text(system_prompt).await;
        let fixed = system + u64::from(settings.sampling.max_tokens);
        apply_context_fit(documents, fixed, self.context_length(&settings));
        let Some(engine) = self.model.loaded() else {
            return;
        };
        let shape = KvShape::of(&engine.info().config);
        let cache = crate::chat_cache::engine_cache(&settings.cache);
        let speed = self.live.reading_speed();
        let mut tokens = system;
        for doc in documents {
            tokens += doc.token_count;
            let held = usize::try_from(tokens).unwrap_or(usize::MAX);
            doc.kv_bytes = Some(kv_cache_bytes(shape, held, &cache, &engine.info().backend));
            doc.kv_fp16_bytes = Some(kv_fp16_bytes(shape, held));
            doc.read_seconds = speed.map(|tokens_per_s| doc.token_count as f64 / tokens_per_s);
        }
    }

    /// A chat as the UI gets it: fits recomputed, the live cache filled in.
    pub async fn chat_out(&self, mut chat: Chat) -> Chat {
        self.apply_fit(&chat.system_prompt, &mut chat.documents)
            .await;
        chat.cache = self.caches.info(&chat.id);
        chat
    }

    /// The live panel's numbers now.
    pub fn stats_snapshot(&self) -> crate::types::StatsSnapshot {
        let settings = self.settings();
        let mut snapshot = self
            .live
            .snapshot(self.context_length(&settings), self.backend(&settings));
        snapshot.disk_cache = snapshot
            .chat_id
            .as_deref()
            .and_then(|chat| self.disk.event(chat));
        snapshot
    }

    /// Emits the current statistics now.
    pub fn emit_stats(&self) {
        self.events.stats(&self.stats_snapshot());
    }

    /// Drops one chat's cache (its prompt prefix changed): in the engine, in the mirror and in
    /// the documents' `prefilled` flags.
    pub fn drop_chat_cache(&self, chat_id: &str) {
        if let Some(engine) = self.model.loaded() {
            let _ = engine.drop_conversation(chat_id);
        }
        self.caches.remove(chat_id);
        self.disk.forget(chat_id);
        if let Err(e) = self.store.clear_prefilled(Some(chat_id)) {
            eprintln!("kivi-chat: {e}");
        }
        self.live.describe(chat_id, None);
        self.emit_stats();
    }

    /// Drops every chat's cache (settings or model changed).
    pub fn drop_all_caches(&self) {
        if let Some(engine) = self.model.loaded() {
            let _ = engine.clear_cache();
        }
        self.caches.clear();
        if let Err(e) = self.store.clear_prefilled(None) {
            eprintln!("kivi-chat: {e}");
        }
        self.live.forget_caches();
        self.emit_stats();
    }

    /// After a job: the engine may have evicted other chats' caches to make room; forget
    /// those (and their documents' `prefilled` flags).
    pub fn reconcile_caches(self: &Arc<Self>) {
        let Some(engine) = self.model.loaded() else {
            return;
        };
        let app = self.clone();
        tauri::async_runtime::spawn(async move {
            let Ok(live) = engine.conversations().await else {
                return;
            };
            let ids: Vec<String> = live.iter().map(|c| c.conversation.clone()).collect();
            for gone in app.caches.retain(&ids) {
                let _ = app.store.clear_prefilled(Some(&gone));
                app.live.describe(&gone, None);
            }
        });
    }

    /// At quit: stop generations and downloads (downloads stay resumable).
    pub fn shutdown(&self) {
        self.jobs.stop_all();
        self.downloads.pause_all();
    }
}

/// A rough token count for when the tokenizer is busy: ~3.5 characters per token in English.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64 * 2).div_ceil(7)
}
