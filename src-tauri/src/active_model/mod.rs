//! The active model: which one, its engine once loaded, and its load state (`model-status`).
//!
//! Loading runs in the background (`Engine::load` reads the weights on the engine's own
//! model thread); commands that need the model get `modelNotLoaded` until it is ready.
//! Switching models drops the old engine off the async runtime (dropping joins its thread).

mod holder;

use std::sync::Arc;
use std::time::Duration;

use kivi_engine::backend::Backend;
use kivi_engine::session::{Engine, EngineOptions, ModelSource};

use crate::error::{CommandError, ErrorCode};
use crate::state::AppState;
use crate::types::{ModelLoadState, ModelStatus, Phase};

pub use holder::{ActiveModel, ModelChoice};

/// Chats whose KV caches the engine keeps at once (the least recently used is evicted).
pub const CACHED_CHATS: usize = 4;
/// How often the engine reports statistics while it prefills.
const ENGINE_STATS_INTERVAL: Duration = Duration::from_millis(150);

/// Starts loading `choice` in the background (emitting `model-status` as it goes) on the
/// backend the settings choose, and returns the `loading` status. The previous engine is
/// dropped first.
pub fn start_loading(app: &Arc<AppState>, choice: ModelChoice) -> ModelStatus {
    let (epoch, old) = app.model.begin_load(choice.clone());
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
    app.model.set_status(&app.events, status.clone());
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
        if !app.model.is_current(epoch) {
            if let Ok(engine) = result {
                tauri::async_runtime::spawn_blocking(move || drop(engine));
            }
            return;
        }
        let status = match result {
            Ok(engine) => {
                app.model.set_engine(engine);
                app.live.forget_reading_speed();
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
        app.model.set_status(&app.events, status);
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
    match app.model.last_choice() {
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
                "The model file is missing: {} does not exist. Add a model file or folder in \
                 Models, or download one there (or set KIVI_MODEL to a .gguf file).",
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
    let loaded = crate::runtime::off_runtime(move || Engine::load(options))
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
