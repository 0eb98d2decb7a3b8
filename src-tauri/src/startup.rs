//! The app's start: the store brought back to a consistent state after the last quit, the
//! active model loading in the background, the statistics ticker, the hub token.

use std::sync::Arc;

use crate::state::{App, AppState};
use crate::stats::{BUSY_INTERVAL, IDLE_INTERVAL};
use crate::store::StoreError;
use crate::types::Phase;

/// Start-up: answers cut off by the last quit become `interrupted`, downloads that were
/// running become `paused`, no document is in a cache any more; then the active model
/// loads in the background and statistics start ticking.
pub fn start(app: &App) -> Result<(), StoreError> {
    eprintln!(
        "kivi-chat: database {}, models in {}",
        app.store.path().display(),
        app.config.hub.cache_dir.display()
    );
    let interrupted = app.store.mark_streaming_interrupted()?;
    let paused = app.store.pause_unfinished_downloads()?;
    app.store.clear_prefilled(None)?;
    if interrupted + paused > 0 {
        eprintln!(
            "kivi-chat: {interrupted} answer(s) marked interrupted, {paused} download(s) paused"
        );
    }
    let choice = app.active_choice();
    crate::active_model::start_loading(app, choice);
    start_ticker(app);
    let app = app.clone();
    tauri::async_runtime::spawn_blocking(move || match crate::keychain::load() {
        Ok(token) => app.set_hub_token(token),
        Err(e) => eprintln!("kivi-chat: hub token: {e}"),
    });
    Ok(())
}

/// Emits `stats` at 5 Hz while working and 1 Hz when idle, for the app's lifetime.
fn start_ticker(app: &Arc<AppState>) {
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
