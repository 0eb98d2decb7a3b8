//! Statistics (`api/stats.ts`).

use tauri::State;

use crate::error::CommandResult;
use crate::state::App;
use crate::types::StatsSnapshot;

/// `get_stats`: the current snapshot.
pub async fn snapshot(app: &App) -> CommandResult<StatsSnapshot> {
    Ok(app.stats_snapshot())
}

#[tauri::command]
pub async fn get_stats(app: State<'_, App>) -> CommandResult<StatsSnapshot> {
    snapshot(&app).await
}
