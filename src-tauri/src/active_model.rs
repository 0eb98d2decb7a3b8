//! The active model: which one, its engine once loaded, and its load state (`model-status`).
//!
//! Loading runs in the background (`Engine::load` reads the weights on the engine's own
//! model thread); commands that need the model get `modelNotLoaded` until it is ready.
//! Switching models drops the old engine off the async runtime (dropping joins its thread).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kivi_engine::backend::Backend;
use kivi_engine::session::{Engine, EngineOptions, ModelSource};
use tokio::sync::watch;

use crate::error::{CommandError, ErrorCode};
use crate::state::AppState;
use crate::types::{ModelLoadState, ModelStatus, Phase};

/// Chats whose KV caches the engine keeps at once (the least recently used is evicted).
pub const CACHED_CHATS: usize = 4;
/// How often the engine reports statistics while it prefills.
const ENGINE_STATS_INTERVAL: Duration = Duration::from_millis(150);

/// A model to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelChoice {
    /// `builtin/...` or a hub repo id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// A `.gguf` file or a model folder.
    pub path: PathBuf,
}

struct Inner {
    status: ModelStatus,
    /// The model last asked for, loaded or not.
    choice: Option<ModelChoice>,
    engine: Option<Arc<Engine>>,
    /// Incremented by every load, so a slow load that was superseded is discarded.
    epoch: u64,
}

/// The active model and its engine.
pub struct ActiveModel {
    inner: Mutex<Inner>,
    changes: watch::Sender<ModelStatus>,
}

impl Default for ActiveModel {
    fn default() -> Self {
        let status = ModelStatus {
            model_id: None,
            name: None,
            state: ModelLoadState::Unloaded,
            progress: None,
            error: None,
        };
        Self {
            inner: Mutex::new(Inner {
                status: status.clone(),
                choice: None,
                engine: None,
                epoch: 0,
            }),
            changes: watch::channel(status).0,
        }
    }
}

impl ActiveModel {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The load state.
    pub fn status(&self) -> ModelStatus {
        self.lock().status.clone()
    }

    /// The active model's id.
    pub fn model_id(&self) -> Option<String> {
        self.lock().status.model_id.clone()
    }

    /// The engine, or `modelNotLoaded` saying why there is none.
    pub fn engine(&self) -> Result<Arc<Engine>, CommandError> {
        let inner = self.lock();
        if let Some(engine) = &inner.engine {
            return Ok(engine.clone());
        }
        let name = inner
            .status
            .name
            .clone()
            .unwrap_or_else(|| "The model".into());
        Err(match inner.status.state {
            ModelLoadState::Loading => CommandError::model_not_loaded(&format!(
                "{name} is still loading. Wait a moment and try again."
            )),
            ModelLoadState::Failed => CommandError::model_not_loaded(&format!(
                "{name} failed to load: {} Choose another model in Models.",
                inner.status.error.as_deref().unwrap_or("unknown error.")
            )),
            _ => CommandError::model_not_loaded(
                "No model is loaded. Choose one in Models (the built-in model works offline).",
            ),
        })
    }

    /// Takes the engine out (at quit): dropping the last handle joins its model thread.
    pub fn unload(&self) -> Option<Arc<Engine>> {
        self.lock().engine.take()
    }

    /// The engine if one is loaded.
    pub fn loaded(&self) -> Option<Arc<Engine>> {
        self.lock().engine.clone()
    }

    /// Waits (up to `timeout`) while the model loads, then returns the engine or why there
    /// is none.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<Arc<Engine>, CommandError> {
        let mut changes = self.changes.subscribe();
        let wait = changes.wait_for(|s| s.state != ModelLoadState::Loading);
        let _ = tokio::time::timeout(timeout, wait).await;
        self.engine()
    }

    fn set_status(&self, app: &AppState, status: ModelStatus) {
        self.lock().status = status.clone();
        app.events.model_status(&status);
        self.changes.send_replace(status);
    }
}

/// Starts loading `choice` in the background (emitting `model-status` as it goes) on the
/// backend the settings choose, and returns the `loading` status. The previous engine is
/// dropped first.
pub fn start_loading(app: &Arc<AppState>, choice: ModelChoice) -> ModelStatus {
    let (epoch, old) = {
        let mut inner = app.model.lock();
        inner.epoch += 1;
        inner.choice = Some(choice.clone());
        (inner.epoch, inner.engine.take())
    };
    if let Some(old) = old {
        // Dropping an engine joins its model thread: not on the async runtime.
        tauri::async_runtime::spawn_blocking(move || drop(old));
    }
    app.caches.clear();
    let status = ModelStatus {
        model_id: Some(choice.id.clone()),
        name: Some(choice.name.clone()),
        state: ModelLoadState::Loading,
        progress: None,
        error: None,
    };
    app.model.set_status(app, status.clone());
    app.live.set_phase(Phase::Loading);
    app.emit_stats();

    let backend = app.store.get_settings().map(|s| s.backend.resolve());
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        let result = match backend {
            Ok(Ok(backend)) => load(&choice, backend).await,
            Ok(Err(e)) => Err(CommandError::new(
                ErrorCode::ModelLoadFailed,
                format!("The backend setting cannot be used: {e}. Choose another in Settings."),
            )),
            Err(e) => Err(e.into()),
        };
        let superseded = app.model.lock().epoch != epoch;
        if superseded {
            if let Ok(engine) = result {
                tauri::async_runtime::spawn_blocking(move || drop(engine));
            }
            return;
        }
        let status = match result {
            Ok(engine) => {
                app.model.lock().engine = Some(Arc::new(engine));
                ModelStatus {
                    state: ModelLoadState::Ready,
                    ..status_of(&choice)
                }
            }
            Err(e) => {
                eprintln!("kivi-chat: loading {} failed: {}", choice.id, e.message);
                ModelStatus {
                    state: ModelLoadState::Failed,
                    error: Some(e.message),
                    ..status_of(&choice)
                }
            }
        };
        app.model.set_status(&app, status);
        app.live.set_phase(Phase::Idle);
        app.emit_stats();
    });
    status
}

fn status_of(choice: &ModelChoice) -> ModelStatus {
    ModelStatus {
        model_id: Some(choice.id.clone()),
        name: Some(choice.name.clone()),
        state: ModelLoadState::Loading,
        progress: None,
        error: None,
    }
}

/// Loads the model asked for last again (after the backend changed); false when none was.
pub fn reload(app: &Arc<AppState>) -> bool {
    let choice = app.model.lock().choice.clone();
    match choice {
        Some(choice) => {
            start_loading(app, choice);
            true
        }
        None => false,
    }
}

async fn load(choice: &ModelChoice, backend: Backend) -> Result<Engine, CommandError> {
    if !choice.path.exists() {
        return Err(CommandError::new(
            ErrorCode::ModelLoadFailed,
            format!(
                "The model file is missing: {} does not exist. Reinstall KIVI Chat (or set \
                 KIVI_MODEL to a .gguf file), or download another model in Models.",
                choice.path.display()
            ),
        ));
    }
    let mut options = EngineOptions::new(ModelSource::Path(choice.path.clone()));
    options.backend = Some(backend);
    options.max_cached_conversations = CACHED_CHATS;
    options.stats_interval = ENGINE_STATS_INTERVAL;
    // The model is local: no hub token is needed (or sent anywhere).
    options.hub_token = None;
    let loaded = crate::state::off_runtime(move || Engine::load(options))
        .await
        .map_err(|e| CommandError::new(ErrorCode::ModelLoadFailed, e))?;
    loaded.map_err(|e| {
        CommandError::new(
            ErrorCode::ModelLoadFailed,
            format!(
                "{} could not be loaded: {e}. Check that the files are complete (download it \
                 again), or choose another model.",
                choice.name
            ),
        )
    })
}
