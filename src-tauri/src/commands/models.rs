//! Models and downloads (`api/models.ts`), and the hub token kept in the OS keychain.

use std::collections::BTreeSet;
use std::path::Path;

use tauri::State;

use crate::active_model::{self, ModelChoice};
use crate::catalog::{self, BUILTIN_ID, RECOMMENDED};
use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::state::App;
use crate::store::DownloadProgress;
use crate::types::{HubTokenStatus, ModelAvailability, ModelInfo, ModelStatus, ModelsOverview};
use crate::{downloads, keychain, server};

/// One hub model's entry as things stand.
fn hub_entry(app: &App, repo: &str, available: u64) -> ModelInfo {
    let settings = app.settings();
    let snapshot = catalog::cached_snapshot(&app.config.hub, repo);
    let facts = app
        .catalog
        .facts(repo)
        .or_else(|| snapshot.as_ref().and_then(catalog::facts_from_snapshot));
    let download: Option<DownloadProgress> = app.downloads.progress(repo).or_else(|| {
        app.store
            .get_download(repo)
            .ok()
            .flatten()
            .map(|r| r.to_progress())
    });
    catalog::hub_info(
        repo,
        facts.as_ref(),
        snapshot.is_some(),
        download.as_ref(),
        &settings,
        available,
    )
}

/// `list_models`: built-in first, then downloaded, then recommended, then others looked up.
pub async fn list(app: &App) -> CommandResult<ModelsOverview> {
    let app2 = app.clone();
    tauri::async_runtime::spawn_blocking(move || overview(&app2))
        .await
        .map_err(|e| CommandError::internal(e.to_string()))?
}

fn overview(app: &App) -> CommandResult<ModelsOverview> {
    let (available, total) = catalog::machine_memory();
    let settings = app.settings();
    let context = app
        .model
        .loaded()
        .filter(|_| app.model.model_id().as_deref() == Some(BUILTIN_ID));
    let builtin = catalog::builtin_info(
        &app.config.builtin_model,
        context.map(|e| e.context_length() as u64),
        &settings,
    );
    let mut repos: BTreeSet<String> = RECOMMENDED
        .iter()
        .map(|(id, _, _)| id.to_string())
        .collect();
    for record in app.store.list_downloads()? {
        repos.insert(record.repo_id);
    }
    repos.extend(app.catalog.looked_up());
    if let Some(active) = app.model.model_id().filter(|id| id != BUILTIN_ID) {
        repos.insert(active);
    }
    let entries: Vec<ModelInfo> = repos.iter().map(|r| hub_entry(app, r, available)).collect();
    let rank = |m: &ModelInfo| match (m.availability, m.recommended) {
        (ModelAvailability::Ready, _) => 0,
        (_, true) => 1,
        _ => 2,
    };
    let mut hub = entries;
    hub.sort_by_key(|m| {
        let pos = RECOMMENDED
            .iter()
            .position(|(id, _, _)| *id == m.id)
            .unwrap_or(usize::MAX);
        (rank(m), pos, m.id.clone())
    });
    let mut models = vec![builtin];
    models.extend(
        app.store
            .local_models()?
            .iter()
            .filter_map(|path| catalog::local_info(&catalog::local_id(Path::new(path)))),
    );
    models.extend(hub);
    Ok(ModelsOverview {
        models,
        active_model_id: app.model.model_id(),
        available_memory_bytes: available,
        total_memory_bytes: total,
    })
}

/// `inspect_model`: looks the repo up on the hub (files, sizes, config.json) without
/// downloading weights; it is then listed until the app quits.
pub async fn inspect(app: &App, repo_id: String) -> CommandResult<ModelInfo> {
    let repo = catalog::validate_repo_id(repo_id.trim())?;
    let facts = catalog::look_up(&app.hub_config(), &repo).await?;
    app.catalog.remember(&repo.to_string(), facts);
    let (available, _) = catalog::machine_memory();
    Ok(hub_entry(app, &repo.to_string(), available))
}

/// `download_model`.
pub async fn download(app: &App, repo_id: String) -> CommandResult<DownloadProgress> {
    let repo = catalog::validate_repo_id(repo_id.trim())?;
    downloads::start(app, &repo).await
}

/// `pause_download`.
pub async fn pause(app: &App, repo_id: String) -> CommandResult<DownloadProgress> {
    downloads::pause(app, &repo_id).await
}

/// `resume_download`.
pub async fn resume(app: &App, repo_id: String) -> CommandResult<DownloadProgress> {
    downloads::resume(app, &repo_id).await
}

/// `cancel_download`.
pub async fn cancel(app: &App, repo_id: String) -> CommandResult<()> {
    downloads::cancel(app, &repo_id).await
}

/// `delete_model`: deletes a downloaded model's files from the hub cache.
pub async fn delete(app: &App, model_id: String) -> CommandResult<()> {
    if model_id == BUILTIN_ID || model_id.starts_with("builtin/") {
        return Err(CommandError::invalid(
            "modelId",
            "The built-in model ships with KIVI Chat and cannot be deleted.",
        ));
    }
    if let Some(path) = model_id.strip_prefix(catalog::LOCAL_PREFIX) {
        // A local model leaves the list; its file or folder stays where the user keeps it.
        if app.model.model_id().as_deref() == Some(model_id.as_str()) {
            return Err(CommandError::busy(
                "This model is in use. Switch to another model first, then remove it.",
            ));
        }
        let mut paths = app.store.local_models()?;
        let before = paths.len();
        paths.retain(|p| p != path);
        if paths.len() == before {
            return Err(CommandError::not_found(format!(
                "{path} is not in the list of models."
            )));
        }
        app.store.set_local_models(&paths)?;
        return Ok(());
    }
    let repo = catalog::validate_repo_id(&model_id)
        .map_err(|_| CommandError::not_found(format!("{model_id} is not a downloaded model.")))?;
    if app.model.model_id().as_deref() == Some(model_id.as_str()) {
        return Err(CommandError::busy(
            "This model is in use. Switch to another model first, then delete it.",
        ));
    }
    if app.downloads.progress(&model_id).is_some() {
        downloads::cancel(app, &model_id).await?;
    }
    let hub = app.config.hub.clone();
    let deleted =
        tauri::async_runtime::spawn_blocking(move || catalog::delete_from_cache(&hub, &repo))
            .await
            .map_err(|e| CommandError::internal(e.to_string()))??;
    let had_record = app.store.delete_download(&model_id)?;
    if !deleted && !had_record {
        return Err(CommandError::not_found(format!(
            "{model_id} is not downloaded, so there is nothing to delete."
        )));
    }
    Ok(())
}

/// `set_active_model`: persists the choice, drops every cache and loads in the background.
pub async fn activate(app: &App, model_id: String) -> CommandResult<ModelStatus> {
    let choice = if model_id == BUILTIN_ID {
        catalog::builtin_choice(&app.config.builtin_model)
    } else if let Some(choice) = catalog::local_choice(&model_id) {
        if !choice.path.exists() {
            return Err(CommandError::not_found(format!(
                "{} is no longer there. Add the model again from its new place.",
                choice.path.display()
            )));
        }
        choice
    } else {
        let hub = app.config.hub.clone();
        let id = model_id.clone();
        let snapshot =
            tauri::async_runtime::spawn_blocking(move || catalog::cached_snapshot(&hub, &id))
                .await
                .map_err(|e| CommandError::internal(e.to_string()))?;
        let Some(snapshot) = snapshot else {
            return Err(CommandError::not_found(format!(
                "{model_id} is not downloaded yet. Download it in Models first."
            )));
        };
        ModelChoice {
            name: catalog::display_name(&model_id),
            id: model_id.clone(),
            path: snapshot.dir,
        }
    };
    if app.jobs.any_generation() {
        return Err(CommandError::busy(
            "An answer is being written. Stop it (Esc) or wait for it to finish, then switch models.",
        ));
    }
    app.store.set_active_model_id(&model_id)?;
    let changed = app.model.model_id().as_deref() != Some(model_id.as_str());
    if !changed && app.model.loaded().is_some() {
        return Ok(app.model.status());
    }
    app.jobs.stop_all();
    app.drop_all_caches();
    app.forget_token_counts();
    server::model_changed(app, &model_id).await;
    let status = active_model::start_loading(app, choice);
    if changed {
        recount_documents_when_ready(app);
    }
    Ok(status)
}

/// Documents were counted with the previous model's tokenizer: count them again once the
/// new model is ready.
fn recount_documents_when_ready(app: &App) {
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        let Ok(engine) = app
            .model
            .wait_ready(std::time::Duration::from_secs(600))
            .await
        else {
            return;
        };
        let Ok(chats) = app.store.list_chats(None) else {
            return;
        };
        for chat in chats {
            let Ok(documents) = app.store.list_documents(&chat.id) else {
                continue;
            };
            for d in documents {
                let Ok(text) = app.store.document_text(&d.id) else {
                    continue;
                };
                if let Ok(n) = engine.count_tokens(text).await {
                    let _ = app.store.set_document_token_count(&d.id, n as u64);
                }
            }
        }
    });
}

/// `add_local_model`: a native dialog picks a `.gguf` file or (`folder`) a model folder; the
/// model joins the list (kept across restarts; the file stays where it is). `None` when the
/// dialog was cancelled.
pub async fn add_local(app: &App, folder: bool) -> CommandResult<Option<ModelInfo>> {
    let desktop = app.desktop.clone();
    let picked = tauri::async_runtime::spawn_blocking(move || desktop.pick_model(folder))
        .await
        .map_err(|e| CommandError::internal(e.to_string()))?
        .map_err(CommandError::internal)?;
    let Some(path) = picked else {
        return Ok(None);
    };
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    catalog::check_local_model(&path)?;
    let mut paths = app.store.local_models()?;
    let text = path.display().to_string();
    if !paths.contains(&text) {
        paths.push(text);
        app.store.set_local_models(&paths)?;
    }
    Ok(catalog::local_info(&catalog::local_id(&path)))
}

/// `get_model_status`.
pub async fn status(app: &App) -> CommandResult<ModelStatus> {
    Ok(app.model.status())
}

/// `get_hub_token_status`: whether a token is stored (the token never comes back).
pub async fn token_status(app: &App) -> CommandResult<HubTokenStatus> {
    let loaded = tauri::async_runtime::spawn_blocking(keychain::load)
        .await
        .map_err(|e| CommandError::internal(e.to_string()))?;
    Ok(match loaded {
        Ok(token) => {
            let stored = token.is_some();
            app.set_hub_token(token);
            HubTokenStatus {
                stored,
                keychain_available: true,
                error: None,
            }
        }
        Err(e) => HubTokenStatus {
            stored: app.hub_token().is_some(),
            keychain_available: false,
            error: Some(e.to_string()),
        },
    })
}

/// `set_hub_token`: stores the token in the OS keychain (`null` deletes it).
pub async fn set_token(app: &App, token: Option<String>) -> CommandResult<HubTokenStatus> {
    let token = match token {
        Some(t) => Some(
            keychain::validate(&t)
                .map_err(|m| CommandError::invalid("token", m))?
                .to_string(),
        ),
        None => None,
    };
    let to_store = token.clone();
    let saved = tauri::async_runtime::spawn_blocking(move || match &to_store {
        Some(t) => keychain::store(t),
        None => keychain::delete(),
    })
    .await
    .map_err(|e| CommandError::internal(e.to_string()))?;
    if let Err(e) = saved {
        return Err(CommandError::new(ErrorCode::Io, format!("{e}.")));
    }
    let stored = token.is_some();
    app.set_hub_token(token);
    Ok(HubTokenStatus {
        stored,
        keychain_available: true,
        error: None,
    })
}

#[tauri::command]
pub async fn list_models(app: State<'_, App>) -> CommandResult<ModelsOverview> {
    list(&app).await
}

#[tauri::command]
pub async fn inspect_model(app: State<'_, App>, repo_id: String) -> CommandResult<ModelInfo> {
    inspect(&app, repo_id).await
}

#[tauri::command]
pub async fn download_model(
    app: State<'_, App>,
    repo_id: String,
) -> CommandResult<DownloadProgress> {
    download(&app, repo_id).await
}

#[tauri::command]
pub async fn pause_download(
    app: State<'_, App>,
    repo_id: String,
) -> CommandResult<DownloadProgress> {
    pause(&app, repo_id).await
}

#[tauri::command]
pub async fn resume_download(
    app: State<'_, App>,
    repo_id: String,
) -> CommandResult<DownloadProgress> {
    resume(&app, repo_id).await
}

#[tauri::command]
pub async fn cancel_download(app: State<'_, App>, repo_id: String) -> CommandResult<()> {
    cancel(&app, repo_id).await
}

#[tauri::command]
pub async fn delete_model(app: State<'_, App>, model_id: String) -> CommandResult<()> {
    delete(&app, model_id).await
}

#[tauri::command]
pub async fn set_active_model(app: State<'_, App>, model_id: String) -> CommandResult<ModelStatus> {
    activate(&app, model_id).await
}

#[tauri::command]
pub async fn add_local_model(
    app: State<'_, App>,
    folder: bool,
) -> CommandResult<Option<ModelInfo>> {
    add_local(&app, folder).await
}

#[tauri::command]
pub async fn get_model_status(app: State<'_, App>) -> CommandResult<ModelStatus> {
    status(&app).await
}

#[tauri::command]
pub async fn get_hub_token_status(app: State<'_, App>) -> CommandResult<HubTokenStatus> {
    token_status(&app).await
}

#[tauri::command]
pub async fn set_hub_token(
    app: State<'_, App>,
    token: Option<String>,
) -> CommandResult<HubTokenStatus> {
    set_token(&app, token).await
}
