//! KIVI Chat, the desktop app: a thin Tauri adapter over the engine (`kivi_engine`) and the
//! chat store (`store`). Commands parse, call the engine or the store, and return or emit.

// Release builds on Windows get no console window.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod active_model;
mod catalog;
mod chat_cache;
mod commands;
mod desktop;
mod disk_caches;
mod document_part;
mod downloads;
mod error;
mod events;
mod generation;
mod jobs;
mod keychain;
mod runtime;
mod server;
mod startup;
mod state;
mod stats;
mod store;
mod types;

#[cfg(test)]
mod backend_tests;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use kivi_engine::hub::HubConfig;
use tauri::Manager;

use crate::commands::{
    chats, documents, generation as messages, models, server as serve, settings, system,
};
use crate::desktop::TauriDesktop;
use crate::events::TauriSink;
use crate::state::{App, AppConfig, AppState};
use crate::store::Store;

/// The built-in model's file name.
const BUILTIN_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where the app keeps its database: `KIVI_DATA_DIR`, else Tauri's app data folder.
fn data_dir(app: &tauri::App) -> anyhow::Result<PathBuf> {
    match std::env::var_os("KIVI_DATA_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => app
            .path()
            .app_data_dir()
            .context("cannot find the app data folder"),
    }
}

/// The built-in model: `KIVI_MODEL`, else the file shipped in the app's resources, else, for a
/// build run from this checkout's `target` folder, the one `scripts/setup.sh` fetched into the
/// checkout. An installed app never reaches into a source tree: without a shipped file its
/// built-in model is "not installed" and the user adds or downloads one.
fn builtin_model(app: &tauri::App) -> PathBuf {
    if let Some(path) = std::env::var_os("KIVI_MODEL").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let shipped = app
        .path()
        .resource_dir()
        .unwrap_or_default()
        .join("models")
        .join(BUILTIN_FILE);
    let checkout = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let from_checkout = std::env::current_exe()
        .ok()
        .zip(checkout.join("target").canonicalize().ok())
        .is_some_and(|(exe, target)| exe.starts_with(target));
    if shipped.is_file() || !from_checkout {
        shipped
    } else {
        checkout.join(".data/models").join(BUILTIN_FILE)
    }
}

fn main() -> anyhow::Result<()> {
    // SAFETY: the first statement of main: no other thread exists yet.
    unsafe { kivi_engine::backend::openblas::prepare() };
    let app = tauri::Builder::default()
        // Dialogs are driven from Rust only: the webview has no dialog permission.
        .plugin(tauri_plugin_dialog::init())
        .setup(|app| {
            let dir = data_dir(app)?;
            let store = Store::open(dir.join("kivi-chat.db"))
                .with_context(|| format!("cannot open the database in {}", dir.display()))?;
            let handle = app.handle().clone();
            let config = AppConfig {
                builtin_model: builtin_model(app),
                hub: HubConfig::from_env(),
            };
            let state = AppState::new(
                store,
                Arc::new(TauriSink(handle.clone())),
                Arc::new(TauriDesktop(handle)),
                config,
            );
            crate::startup::start(&state).context("cannot prepare the database")?;
            app.manage::<App>(state);
            Ok(())
        })
        .invoke_handler(tauri::generate_handler![
            chats::list_chats,
            chats::create_chat,
            chats::get_chat,
            chats::rename_chat,
            chats::delete_chat,
            chats::set_system_prompt,
            chats::export_chat,
            messages::send_message,
            messages::regenerate,
            messages::edit_message,
            messages::stop_generation,
            documents::pick_documents,
            documents::attach_document,
            documents::remove_document,
            documents::read_part_of_document,
            documents::prefill_chat,
            settings::get_settings,
            settings::get_default_settings,
            settings::fit_context_length,
            settings::update_settings,
            models::list_models,
            models::inspect_model,
            models::download_model,
            models::pause_download,
            models::resume_download,
            models::cancel_download,
            models::delete_model,
            models::set_active_model,
            models::get_model_status,
            models::add_local_model,
            models::get_hub_token_status,
            models::set_hub_token,
            commands::stats::get_stats,
            serve::get_server_status,
            serve::start_server,
            serve::stop_server,
            system::open_external,
        ])
        .build(tauri::generate_context!())
        .context("cannot start the app")?;
    app.run(|handle, event| {
        if let tauri::RunEvent::Exit = event {
            if let Some(state) = handle.try_state::<App>() {
                state.shutdown();
                // Each chat's cache goes to disk for the next start (after the stopped jobs).
                tauri::async_runtime::block_on(crate::disk_caches::save_all(&state));
                tauri::async_runtime::block_on(crate::server::stop(&state, None));
                // Free the model on its own thread before the process's static destructors
                // run (MLX must not be freeing arrays while they do).
                drop(state.model.unload());
            }
        }
    });
    Ok(())
}
