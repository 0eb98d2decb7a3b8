//! KIVI Chat, the desktop app.

// Release builds on Windows get no console window.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod store;

fn main() -> anyhow::Result<()> {
    tauri::Builder::default()
        .run(tauri::generate_context!())
        .map_err(anyhow::Error::from)
}
