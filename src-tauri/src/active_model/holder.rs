//! The active model's state: which one, its engine once loaded, and its load state.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kivi_engine::session::Engine;
use tokio::sync::watch;

use crate::error::CommandError;
use crate::events::Events;
use crate::types::{ModelLoadState, ModelStatus};

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

    /// Sets the load state and tells the UI (`model-status`) and anyone waiting.
    pub fn set_status(&self, events: &Events, status: ModelStatus) {
        self.lock().status = status.clone();
        events.model_status(&status);
        self.changes.send_replace(status);
    }

    /// A load of `choice` begins and supersedes any running one: its number, and the
    /// previous engine, which the caller drops off the async runtime.
    pub fn begin_load(&self, choice: ModelChoice) -> (u64, Option<Arc<Engine>>) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.choice = Some(choice);
        (inner.epoch, inner.engine.take())
    }

    /// Whether load `epoch` is still the latest.
    pub fn is_current(&self, epoch: u64) -> bool {
        self.lock().epoch == epoch
    }

    /// The engine of a finished load becomes the active one.
    pub fn set_engine(&self, engine: Engine) {
        self.lock().engine = Some(Arc::new(engine));
    }

    /// The model asked for last, loaded or not.
    pub fn last_choice(&self) -> Option<ModelChoice> {
        self.lock().choice.clone()
    }
}
