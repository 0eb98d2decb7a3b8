//! Settings (`api/settings.ts`): read, defaults, update (validated; a cache or context
//! change drops every chat's cache).

use kivi_engine::budget;
use kivi_engine::error::LoadError;
use tauri::State;

use crate::chat_cache::engine_cache;
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::state::App;
use crate::store::{CacheSettings, ContextFit, Settings, SettingsUpdate, MAX_CONTEXT_LENGTH};

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

/// `fit_context`: the longest context the active model allows and this machine's memory
/// holds beside it with the `cache` settings ("Fit this machine"). Nothing is saved.
pub async fn fit_context(app: &App, cache: CacheSettings) -> CommandResult<ContextFit> {
    let settings = Settings {
        cache,
        ..app.store.get_settings()?
    };
    settings.validate()?;
    let engine = app.model.engine()?;
    let path = engine.info().path.clone();
    let backend = engine.info().backend;
    let cache = engine_cache(&settings.cache);
    let model_context = u32::try_from(engine.context_length()).unwrap_or(u32::MAX);
    let fit = tauri::async_runtime::spawn_blocking(move || {
        // The loaded model's weights are in memory already: what it holds counts as
        // available to the model the estimate describes.
        let loaded = budget::estimate(&path, Some(0), &cache, &backend)?;
        let available = budget::available_memory() + loaded.weights + loaded.overhead;
        budget::longest_context(&path, &cache, &backend, Some(available))
            .map(|need| (need, available))
    })
    .await
    .map_err(|e| CommandError::internal(format!("The memory estimate failed: {e}.")))?;
    let (need, available) = fit.map_err(|e| match e {
        LoadError::InsufficientMemory { .. } => CommandError::new(
            ErrorCode::InsufficientMemory,
            format!("Not even the shortest context fits this machine's memory: {e}."),
        ),
        e => CommandError::internal(format!("The model's memory cannot be estimated: {e}.")),
    })?;
    Ok(ContextFit {
        context_length: u32::try_from(need.context)
            .unwrap_or(u32::MAX)
            .min(MAX_CONTEXT_LENGTH),
        model_context,
        kv_bytes: need.kv_cache,
        available_bytes: available,
    })
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
pub async fn fit_context_length(
    app: State<'_, App>,
    cache: CacheSettings,
) -> CommandResult<ContextFit> {
    fit_context(&app, cache).await
}

#[tauri::command]
pub async fn update_settings(
    app: State<'_, App>,
    settings: Settings,
) -> CommandResult<SettingsUpdate> {
    update(&app, settings).await
}
