//! The IPC commands (ui/IPC.md "Commands"), one module per area of `ui/src/api/`. Each
//! `#[tauri::command]` is a thin wrapper over a plain async function taking the app state,
//! which the tests call directly.

pub mod chats;
pub mod documents;
pub mod generation;
pub mod models;
pub mod server;
pub mod settings;
pub mod stats;
pub mod system;
