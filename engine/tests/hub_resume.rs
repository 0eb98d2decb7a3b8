//! Hub download reliability: dropped connections, pause and resume (also across a "process
//! restart", i.e. a new client on the same cache), servers that ignore Range, damaged
//! partial files, discarding partial downloads, two downloads of one model at once.

#[path = "support/hub_harness.rs"]
mod hub_harness;
#[path = "support/hub_server.rs"]
mod hub_server;

use std::path::PathBuf;
use std::time::Duration;

use hub_harness::{fast_options, files_ending, no_retry_options, Recorder, Sandbox};
use hub_server::{sha256_hex, tiny_model, FakeHub};
use kivi_engine::hub::{
    CancellationToken, DownloadEvent, FileSelection, HubError, ProgressSink, RepoId,
    SnapshotRequest,
};

const TINY: &str = "kivi-test/tiny";
const WEIGHTS: &str = "model.safetensors";

fn runnable() -> SnapshotRequest {
    SnapshotRequest::parse(TINY, FileSelection::Runnable).unwrap()
}

fn partial_path(sandbox: &Sandbox, hub: &FakeHub) -> PathBuf {
    sandbox
        .cache()
        .join("models--kivi-test--tiny/blobs")
        .join(format!(
            "{}.incomplete",
            hub.repo(TINY).file(WEIGHTS).sha256()
        ))
}

fn blob_path(sandbox: &Sandbox, hub: &FakeHub) -> PathBuf {
    sandbox
        .cache()
        .join("models--kivi-test--tiny/blobs")
        .join(hub.repo(TINY).file(WEIGHTS).sha256())
}

/// Range headers of the GETs of the weights' bytes, in order.
fn weight_ranges(hub: &FakeHub) -> Vec<Option<String>> {
    let cdn = format!("/cdn/{}", hub.repo(TINY).file(WEIGHTS).sha256());
    hub.requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path == cdn)
        .map(|r| r.range)
        .collect()
}

/// Leaves a partial download of the weights by dropping the connection after `bytes`.
async fn leave_partial(sandbox: &Sandbox, hub: &FakeHub, bytes: u64) -> u64 {
    hub.faults(|f| {
        f.drop_after.insert(WEIGHTS.into(), (bytes, 1));
    });
    let err = sandbox
        .client(&hub.endpoint())
        .download_snapshot(&runnable(), &no_retry_options())
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    hub.faults(|f| f.drop_after.clear());
    let len = std::fs::metadata(partial_path(sandbox, hub)).unwrap().len();
    assert!(len > 0 && len <= bytes, "partial has {len} bytes");
    len
}

#[tokio::test]
async fn a_dropped_connection_is_resumed_with_range_and_verified() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    hub.faults(|f| {
        f.drop_after.insert(WEIGHTS.into(), (1_500_000, 1));
    });
    let recorder = Recorder::default();
    let snapshot = sandbox
        .client(&hub.endpoint())
        .download_snapshot(&runnable(), &fast_options().with_progress(recorder.sink()))
        .await
        .unwrap();

    let ranges = weight_ranges(&hub);
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert_eq!(ranges[0], None);
    let resumed_at: u64 = ranges[1]
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("second request is not a resume: {ranges:?}"));
    assert!(resumed_at > 0 && resumed_at <= 1_500_000, "{resumed_at}");
    let events = recorder.events();
    assert!(events.iter().any(|e| matches!(e,
        DownloadEvent::Retrying { file, attempt: 1, .. } if file == WEIGHTS)));
    assert!(events.iter().any(|e| matches!(e,
        DownloadEvent::FileStarted { file, resumed_from, .. } if file == WEIGHTS && *resumed_from == resumed_at)));

    let data = std::fs::read(snapshot.path(WEIGHTS).unwrap()).unwrap();
    assert_eq!(sha256_hex(&data), hub.repo(TINY).file(WEIGHTS).sha256());
    assert!(files_ending(&sandbox.cache(), ".incomplete").is_empty());
}

#[tokio::test]
async fn an_interrupted_download_resumes_after_a_restart() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    let kept = leave_partial(&sandbox, &hub, 2_000_000).await;
    // Nothing unverified is visible as complete.
    assert!(!blob_path(&sandbox, &hub).exists());
    let commit = &hub.repo(TINY).commit;
    let link = sandbox
        .cache()
        .join("models--kivi-test--tiny/snapshots")
        .join(commit)
        .join(WEIGHTS);
    assert!(std::fs::symlink_metadata(&link).is_err());
    hub.clear_log();

    // A new client on the same cache: what a restarted app does.
    let recorder = Recorder::default();
    let client = sandbox.client(&hub.endpoint());
    let plan = client
        .plan_download(&runnable(), &fast_options())
        .await
        .unwrap();
    assert_eq!(plan.partial_bytes, kept);
    let snapshot = client
        .download_planned(&plan, &fast_options().with_progress(recorder.sink()))
        .await
        .unwrap();

    assert_eq!(weight_ranges(&hub), vec![Some(format!("bytes={kept}-"))]);
    assert!(recorder.events().iter().any(|e| matches!(e,
        DownloadEvent::FileStarted { file, resumed_from, .. } if file == WEIGHTS && *resumed_from == kept)));
    let weights = hub.repo(TINY).file(WEIGHTS).data.len() as u64;
    assert!(
        recorder.events().iter().any(|e| matches!(e,
        DownloadEvent::Finished { downloaded_bytes, .. } if *downloaded_bytes < weights + 100_000))
    );
    let data = std::fs::read(snapshot.path(WEIGHTS).unwrap()).unwrap();
    assert_eq!(sha256_hex(&data), hub.repo(TINY).file(WEIGHTS).sha256());
    assert!(files_ending(&sandbox.cache(), ".incomplete").is_empty());
}

#[tokio::test]
async fn cancelling_pauses_and_a_later_download_resumes() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    // Slow enough that the cancel lands mid-file.
    hub.faults(|f| f.throttle = Some(Duration::from_millis(15)));
    let cancel = CancellationToken::new();
    let sink = {
        let cancel = cancel.clone();
        ProgressSink::new(move |e| {
            if let DownloadEvent::Progress {
                file,
                file_progress,
                ..
            } = e
            {
                if file == WEIGHTS && file_progress.done >= 1_000_000 {
                    cancel.cancel();
                }
            }
        })
    };
    let client = sandbox.client(&hub.endpoint());
    let err = client
        .download_snapshot(
            &runnable(),
            &fast_options().with_cancel(cancel).with_progress(sink),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::Cancelled), "{err}");
    assert!(err.to_string().contains("resumes"), "{err}");
    let kept = std::fs::metadata(partial_path(&sandbox, &hub))
        .unwrap()
        .len();
    let size = hub.repo(TINY).file(WEIGHTS).data.len() as u64;
    assert!(kept >= 1_000_000 && kept < size, "kept {kept} of {size}");
    assert!(!blob_path(&sandbox, &hub).exists());

    hub.faults(|f| f.throttle = None);
    hub.clear_log();
    let snapshot = client
        .download_snapshot(&runnable(), &fast_options())
        .await
        .unwrap();
    assert_eq!(weight_ranges(&hub), vec![Some(format!("bytes={kept}-"))]);
    let data = std::fs::read(snapshot.path(WEIGHTS).unwrap()).unwrap();
    assert_eq!(sha256_hex(&data), hub.repo(TINY).file(WEIGHTS).sha256());
}

#[tokio::test]
async fn an_already_cancelled_token_downloads_nothing() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let err = sandbox
        .client(&hub.endpoint())
        .download_snapshot(&runnable(), &fast_options().with_cancel(cancel))
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::Cancelled), "{err}");
    assert!(weight_ranges(&hub).is_empty());
}

#[tokio::test]
async fn a_server_that_ignores_range_restarts_the_file() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    let kept = leave_partial(&sandbox, &hub, 1_000_000).await;
    hub.faults(|f| f.ignore_range = true);
    hub.clear_log();

    let recorder = Recorder::default();
    let snapshot = sandbox
        .client(&hub.endpoint())
        .download_snapshot(&runnable(), &fast_options().with_progress(recorder.sink()))
        .await
        .unwrap();

    // It asked to resume; the server sent everything; the partial was discarded.
    assert_eq!(weight_ranges(&hub), vec![Some(format!("bytes={kept}-"))]);
    let events = recorder.events();
    let ignored = events
        .iter()
        .position(|e| {
            matches!(e, DownloadEvent::RangeIgnored { file, discarded_bytes }
            if file == WEIGHTS && *discarded_bytes == kept)
        })
        .expect("no RangeIgnored event");
    assert!(events[ignored..].iter().any(|e| matches!(e,
        DownloadEvent::FileStarted { file, resumed_from: 0, .. } if file == WEIGHTS)));
    let data = std::fs::read(snapshot.path(WEIGHTS).unwrap()).unwrap();
    assert_eq!(data, hub.repo(TINY).file(WEIGHTS).data);
}

#[tokio::test]
async fn a_damaged_partial_file_fails_verification_and_is_removed() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    let kept = leave_partial(&sandbox, &hub, 1_000_000).await;
    // Same length, wrong bytes: only the hash can tell.
    std::fs::write(partial_path(&sandbox, &hub), vec![0u8; kept as usize]).unwrap();

    let err = sandbox
        .client(&hub.endpoint())
        .download_snapshot(&runnable(), &no_retry_options())
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::HashMismatch { .. }), "{err}");
    assert!(err.to_string().contains("deleted"), "{err}");
    assert!(!partial_path(&sandbox, &hub).exists());
    assert!(!blob_path(&sandbox, &hub).exists());

    // The next download starts clean and succeeds.
    let snapshot = sandbox
        .client(&hub.endpoint())
        .download_snapshot(&runnable(), &fast_options())
        .await
        .unwrap();
    let data = std::fs::read(snapshot.path(WEIGHTS).unwrap()).unwrap();
    assert_eq!(sha256_hex(&data), hub.repo(TINY).file(WEIGHTS).sha256());
}

#[tokio::test]
async fn discarding_partial_downloads_frees_their_space() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    let kept = leave_partial(&sandbox, &hub, 800_000).await;
    let client = sandbox.client(&hub.endpoint());
    let freed = client
        .discard_partial_downloads(&RepoId::parse(TINY).unwrap())
        .unwrap();
    assert_eq!(freed, kept);
    assert!(files_ending(&sandbox.cache(), ".incomplete").is_empty());
    // Nothing left to resume: the next download fetches the file whole.
    hub.clear_log();
    client
        .download_snapshot(&runnable(), &fast_options())
        .await
        .unwrap();
    assert_eq!(weight_ranges(&hub), vec![None]);
}

#[tokio::test]
async fn two_downloads_of_one_model_at_once_share_the_work() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    hub.faults(|f| f.throttle = Some(Duration::from_millis(2)));
    let (a, b) = (
        sandbox.client(&hub.endpoint()),
        sandbox.client(&hub.endpoint()),
    );
    let (request, options) = (runnable(), fast_options());
    let (ra, rb) = tokio::join!(
        a.download_snapshot(&request, &options),
        b.download_snapshot(&request, &options),
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra, rb);
    let data = std::fs::read(ra.path(WEIGHTS).unwrap()).unwrap();
    assert_eq!(sha256_hex(&data), hub.repo(TINY).file(WEIGHTS).sha256());
    // The lock made the second wait for the first instead of writing the same file.
    assert_eq!(weight_ranges(&hub).len(), 1, "{:?}", weight_ranges(&hub));
    assert!(files_ending(&sandbox.cache(), ".incomplete").is_empty());
}
