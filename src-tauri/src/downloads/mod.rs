//! Model downloads: running transfers with their pause/cancel switch, progress as
//! `download-progress` (every 300 ms and on each state change), and their state saved in
//! the store so that a download running at quit shows `paused` after a restart and resumes
//! from the partial files (`blobs/*.incomplete` in the hub cache).

mod running;

pub use running::Downloads;
use running::{lock, Running, Stop};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kivi_engine::hub::{
    CancellationToken, DownloadEvent, DownloadOptions, DownloadPlan, FileSelection, HubClient,
    HubError, ProgressSink, RepoId, SnapshotRequest,
};
use tokio::sync::watch;

use crate::error::{CommandError, CommandResult};
use crate::events::DOWNLOAD_INTERVAL;
use crate::runtime::off_runtime;
use crate::state::AppState;
use crate::store::{DownloadFile, DownloadProgress, DownloadRecord, DownloadState};

/// How often a running download's state is saved.
const SAVE_INTERVAL: Duration = Duration::from_secs(2);

/// The progress of a plan before any byte moved.
fn initial_progress(plan: &DownloadPlan) -> DownloadProgress {
    let files: Vec<DownloadFile> = plan
        .files
        .iter()
        .map(|f| DownloadFile {
            name: f.file.clone(),
            downloaded_bytes: if f.cached { f.size } else { 0 },
            total_bytes: Some(f.size),
            done: f.cached,
        })
        .collect();
    DownloadProgress {
        repo_id: plan.repo.to_string(),
        state: DownloadState::Downloading,
        downloaded_bytes: plan.cached_bytes + plan.partial_bytes,
        total_bytes: Some(plan.total_bytes),
        files,
        bytes_per_sec: 0.0,
        eta_seconds: None,
        error: None,
    }
}

/// Applies a hub event to the progress.
fn apply(progress: &mut DownloadProgress, event: &DownloadEvent) {
    let file = |p: &mut DownloadProgress, name: &str| p.files.iter().position(|f| f.name == name);
    match event {
        DownloadEvent::FileStarted {
            file: name,
            total_bytes,
            resumed_from,
        } => {
            if let Some(i) = file(progress, name) {
                progress.files[i].downloaded_bytes = *resumed_from;
                progress.files[i].total_bytes = Some(*total_bytes);
            }
        }
        DownloadEvent::Progress {
            file: name,
            file_progress,
            overall,
        } => {
            if let Some(i) = file(progress, name) {
                progress.files[i].downloaded_bytes = file_progress.done;
            }
            progress.downloaded_bytes = overall.done;
            progress.total_bytes = Some(overall.total);
            progress.bytes_per_sec = overall.bytes_per_sec;
            progress.eta_seconds = overall.eta_secs;
        }
        DownloadEvent::RangeIgnored { file: name, .. } => {
            if let Some(i) = file(progress, name) {
                progress.files[i].downloaded_bytes = 0;
            }
        }
        DownloadEvent::FileDone {
            file: name, bytes, ..
        } => {
            if let Some(i) = file(progress, name) {
                progress.files[i].downloaded_bytes = *bytes;
                progress.files[i].done = true;
            }
        }
        DownloadEvent::Planned { .. }
        | DownloadEvent::Retrying { .. }
        | DownloadEvent::Finished { .. } => {}
    }
    // Per-file counts are the truth once files report; the overall count lags by one report.
    let sum: u64 = progress.files.iter().map(|f| f.downloaded_bytes).sum();
    progress.downloaded_bytes = progress.downloaded_bytes.max(sum);
}

fn save(app: &AppState, progress: &DownloadProgress) {
    if let Err(e) = app.store.put_download(&DownloadRecord::from(progress)) {
        eprintln!("kivi-chat: cannot save the download state: {e}");
    }
}

/// Starts (or resumes) downloading `repo`'s runnable files. Plans first, so an unknown repo or
/// an unreachable hub fails the command; the transfer then runs in the background.
pub async fn start(app: &Arc<AppState>, repo: &RepoId) -> CommandResult<DownloadProgress> {
    let id = repo.to_string();
    if let Some(progress) = app.downloads.progress(&id) {
        return Ok(progress);
    }
    let client = HubClient::new(app.hub_config())?;
    let request = SnapshotRequest::new(repo.clone(), FileSelection::Runnable);
    let planner = client.clone();
    let plan = off_runtime(move || async move {
        planner
            .plan_download(&request, &DownloadOptions::default())
            .await
    })
    .await
    .map_err(CommandError::internal)??;
    let progress = Arc::new(Mutex::new(initial_progress(&plan)));
    let cancel = CancellationToken::new();
    let stop = Arc::new(Mutex::new(None));
    let (finished_tx, finished) = watch::channel(false);
    {
        let mut map = app.downloads.map();
        if let Some(r) = map.get(&id) {
            // Started meanwhile by another call.
            return Ok(lock(&r.progress).clone());
        }
        map.insert(
            id.clone(),
            Running {
                cancel: cancel.clone(),
                stop: stop.clone(),
                progress: progress.clone(),
                finished,
            },
        );
    }
    let first = lock(&progress).clone();
    save(app, &first);
    app.events.download(&first);

    let app = app.clone();
    tauri::async_runtime::spawn(off_runtime(move || async move {
        let sink_progress = progress.clone();
        let sink = ProgressSink::new(move |event| apply(&mut lock(&sink_progress), &event));
        let options = DownloadOptions::default()
            .with_progress(sink)
            .with_cancel(cancel);
        let transfer = client.download_planned(&plan, &options);
        tokio::pin!(transfer);
        let mut tick = tokio::time::interval(DOWNLOAD_INTERVAL);
        tick.tick().await;
        let mut last_save = Instant::now();
        let result = loop {
            tokio::select! {
                result = &mut transfer => break result,
                _ = tick.tick() => {
                    let now = lock(&progress).clone();
                    app.events.download(&now);
                    if last_save.elapsed() >= SAVE_INTERVAL {
                        last_save = Instant::now();
                        save(&app, &now);
                    }
                }
            }
        };
        let stop = *lock(&stop);
        let mut last = lock(&progress).clone();
        last.bytes_per_sec = 0.0;
        last.eta_seconds = None;
        match result {
            Ok(_) => {
                last.state = DownloadState::Completed;
                last.eta_seconds = Some(0.0);
                last.downloaded_bytes = last.total_bytes.unwrap_or(last.downloaded_bytes);
                for f in &mut last.files {
                    f.done = true;
                    f.downloaded_bytes = f.total_bytes.unwrap_or(f.downloaded_bytes);
                }
                save(&app, &last);
            }
            Err(HubError::Cancelled) if stop == Some(Stop::Cancel) => {
                last.state = DownloadState::Cancelled;
                if let Err(e) = client.discard_partial_downloads(&plan.repo) {
                    eprintln!("kivi-chat: cannot delete the partial download: {e}");
                }
                let _ = app.store.delete_download(&id);
            }
            Err(HubError::Cancelled) => {
                last.state = DownloadState::Paused;
                save(&app, &last);
            }
            Err(e) => {
                last.state = DownloadState::Failed;
                last.error = Some(crate::error::sentence(e.to_string()));
                save(&app, &last);
            }
        }
        app.downloads.map().remove(&id);
        app.events.download(&last);
        let _ = finished_tx.send(true);
    }));
    Ok(first)
}

/// Stops a running download as `stop` and waits for it to wind down.
async fn stop_running(app: &AppState, repo: &str, how: Stop) -> bool {
    let finished = {
        let map = app.downloads.map();
        let Some(r) = map.get(repo) else {
            return false;
        };
        *lock(&r.stop) = Some(how);
        r.cancel.cancel();
        r.finished.clone()
    };
    let mut finished = finished;
    let _ = tokio::time::timeout(Duration::from_secs(30), finished.wait_for(|f| *f)).await;
    true
}

fn not_found(repo: &str) -> CommandError {
    CommandError::not_found(format!(
        "There is no download of {repo}. Start it from the Models view."
    ))
}

/// Pauses a download (the partial files stay and resume later).
pub async fn pause(app: &Arc<AppState>, repo: &str) -> CommandResult<DownloadProgress> {
    stop_running(app, repo, Stop::Pause).await;
    match app.store.get_download(repo)? {
        Some(record) if record.state != DownloadState::Completed => Ok(record.to_progress()),
        _ => Err(not_found(repo)),
    }
}

/// Resumes a paused or failed download.
pub async fn resume(app: &Arc<AppState>, repo: &str) -> CommandResult<DownloadProgress> {
    if let Some(progress) = app.downloads.progress(repo) {
        return Ok(progress);
    }
    if app.store.get_download(repo)?.is_none() {
        return Err(not_found(repo));
    }
    let id = RepoId::parse(repo).map_err(|_| not_found(repo))?;
    start(app, &id).await
}

/// Cancels a download: stops it, deletes its partial files, forgets it.
pub async fn cancel(app: &Arc<AppState>, repo: &str) -> CommandResult<()> {
    if stop_running(app, repo, Stop::Cancel).await {
        return Ok(());
    }
    let Some(record) = app.store.get_download(repo)? else {
        return Err(not_found(repo));
    };
    if let Ok(id) = RepoId::parse(repo) {
        if let Ok(client) = HubClient::new(app.hub_config()) {
            if let Err(e) = client.discard_partial_downloads(&id) {
                eprintln!("kivi-chat: cannot delete the partial download: {e}");
            }
        }
    }
    app.store.delete_download(repo)?;
    let mut last = record.to_progress();
    last.state = DownloadState::Cancelled;
    app.events.download(&last);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kivi_engine::hub::ByteProgress;

    #[test]
    fn hub_events_update_the_progress() {
        let mut p = DownloadProgress {
            repo_id: "a/b".into(),
            state: DownloadState::Downloading,
            files: vec![
                DownloadFile {
                    name: "config.json".into(),
                    downloaded_bytes: 10,
                    total_bytes: Some(10),
                    done: true,
                },
                DownloadFile {
                    name: "model.safetensors".into(),
                    downloaded_bytes: 0,
                    total_bytes: Some(1000),
                    done: false,
                },
            ],
            downloaded_bytes: 10,
            total_bytes: Some(1010),
            bytes_per_sec: 0.0,
            eta_seconds: None,
            error: None,
        };
        apply(
            &mut p,
            &DownloadEvent::FileStarted {
                file: "model.safetensors".into(),
                total_bytes: 1000,
                resumed_from: 400,
            },
        );
        assert_eq!(p.files[1].downloaded_bytes, 400);
        assert_eq!(p.downloaded_bytes, 410);
        apply(
            &mut p,
            &DownloadEvent::Progress {
                file: "model.safetensors".into(),
                file_progress: ByteProgress {
                    done: 600,
                    total: 1000,
                    bytes_per_sec: 100.0,
                    eta_secs: Some(4.0),
                },
                overall: ByteProgress {
                    done: 610,
                    total: 1010,
                    bytes_per_sec: 100.0,
                    eta_secs: Some(4.0),
                },
            },
        );
        assert_eq!(p.downloaded_bytes, 610);
        assert_eq!(p.bytes_per_sec, 100.0);
        assert_eq!(p.eta_seconds, Some(4.0));
        apply(
            &mut p,
            &DownloadEvent::FileDone {
                file: "model.safetensors".into(),
                bytes: 1000,
                from_cache: false,
            },
        );
        assert!(p.files.iter().all(|f| f.done));
        assert_eq!(p.downloaded_bytes, 1010);
    }
}
