//! The local OpenAI-compatible server (`api/server.ts`).

use tauri::State;

use crate::error::CommandResult;
use crate::state::App;
use crate::types::ServerStatus;

/// `get_server_status`.
pub async fn status(app: &App) -> CommandResult<ServerStatus> {
    Ok(crate::server::status(app).await)
}

/// `start_server`.
pub async fn start(app: &App, port: u32, token: Option<String>) -> CommandResult<ServerStatus> {
    crate::server::start(app, port, token).await
}

/// `stop_server`: a no-op when stopped.
pub async fn stop(app: &App) -> CommandResult<ServerStatus> {
    Ok(crate::server::stop(app, None).await)
}

#[tauri::command]
pub async fn get_server_status(app: State<'_, App>) -> CommandResult<ServerStatus> {
    status(&app).await
}

#[tauri::command]
pub async fn start_server(
    app: State<'_, App>,
    port: u32,
    token: Option<String>,
) -> CommandResult<ServerStatus> {
    start(&app, port, token).await
}

#[tauri::command]
pub async fn stop_server(app: State<'_, App>) -> CommandResult<ServerStatus> {
    stop(&app).await
}
