//! Settings (`api/settings.ts`): read, defaults, update (validated; a cache or context
//! change drops every chat's cache).

use tauri::State;

use crate::error::{CommandError, CommandResult};
use crate::state::App;
use crate::store::{Settings, SettingsUpdate};

/// `get_settings`.
pub async fn get(app: &App) -> CommandResult<Settings> {
    Ok(app.store.get_settings()?)
}

/// `get_default_settings`: the suggested defaults, the context capped by the model's.
pub async fn defaults(app: &App) -> CommandResult<Settings> {
    let max = app
        .model
        .loaded()
        .map(|e| u32::try_from(e.context_length()).unwrap_or(u32::MAX));
    Ok(Settings::defaults_for_model(max))
}

/// `update_settings`.
pub async fn update(app: &App, settings: Settings) -> CommandResult<SettingsUpdate> {
    settings.validate()?;
    let old = app.store.get_settings()?;
    let backend_changed = old.backend != settings.backend;
    if backend_changed {
        let usable = settings.backend.resolve().and_then(|b| b.check_available());
        if let Err(e) = usable {
            return Err(CommandError::invalid(
                "backend",
                format!("This computer cannot run that backend: {e}."),
            ));
        }
    }
    let cache_reset = old.cache_reset_needed(&settings);
    if cache_reset && app.jobs.any_generation() {
        return Err(CommandError::busy(
            "An answer is being written. Stop it (Esc) or wait for it to finish, then save \
             the cache settings.",
        ));
    }
    app.store.put_settings(&settings)?;
    if cache_reset {
        // Prefill jobs build caches with the old settings: stop them.
        app.jobs.stop_all();
        app.drop_all_caches();
    } else {
        app.emit_stats();
    }
    if old.disk_cache_mib != settings.disk_cache_mib {
        crate::disk_caches::trim_to(app, settings.disk_cache_mib);
    }
    // The model's weights are converted for its backend when it loads: load it again.
    let model_reload = backend_changed && crate::active_model::reload(app);
    Ok(SettingsUpdate {
        settings,
        cache_reset,
        model_reload,
    })
}

#[tauri::command]
pub async fn get_settings(app: State<'_, App>) -> CommandResult<Settings> {
    get(&app).await
}

#[tauri::command]
pub async fn get_default_settings(app: State<'_, App>) -> CommandResult<Settings> {
    defaults(&app).await
}

#[tauri::command]
pub async fn update_settings(
    app: State<'_, App>,
    settings: Settings,
) -> CommandResult<SettingsUpdate> {
    update(&app, settings).await
}
