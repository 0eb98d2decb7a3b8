//! Hub download, the normal paths: listing, a full snapshot download with progress, the
//! hub cache layout on disk, reuse of cached files, offline mode, selections, the token.
//! Everything runs the real download code against a real HTTP server on 127.0.0.1.

#[path = "support/hub_harness.rs"]
mod hub_harness;
#[path = "support/hub_server.rs"]
mod hub_server;

use std::collections::HashMap;
use std::path::Path;

use hub_harness::{fast_options, files_ending, Recorder, Sandbox};
use hub_server::{gguf_repo, sha256_hex, sharded_model, tiny_model, FakeHub};
use kivi_engine::hub::{
    DownloadEvent, FileSelection, HubClient, HubConfig, HubError, RepoId, Revision, SnapshotRequest,
};

const TINY: &str = "kivi-test/tiny";
const RUNNABLE: [&str; 4] = [
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "model.safetensors",
];

fn runnable(repo: &str) -> SnapshotRequest {
    SnapshotRequest::parse(repo, FileSelection::Runnable).unwrap()
}

#[tokio::test]
async fn lists_files_with_sizes_and_lfs_hashes() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    let client = sandbox.client(&hub.endpoint());
    let repo = hub.repo(TINY);

    let listing = client
        .list_files(&RepoId::parse(TINY).unwrap(), &Revision::main())
        .await
        .unwrap();

    assert_eq!(listing.commit.as_str(), repo.commit);
    assert_eq!(listing.files.len(), repo.files.len());
    for file in &repo.files {
        let listed = listing.file(&file.path).unwrap();
        assert_eq!(listed.size, Some(file.data.len() as u64), "{}", file.path);
        if file.lfs {
            assert_eq!(listed.lfs_sha256.as_deref(), Some(file.sha256().as_str()));
        } else {
            assert_eq!(listed.lfs_sha256, None);
            assert_eq!(listed.blob_id.as_deref(), Some(file.git_sha1().as_str()));
        }
    }
    // The request hf-hub builds, with the flag that adds sizes and hashes.
    let api: Vec<_> = hub
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/api/"))
        .collect();
    assert_eq!(api.len(), 1);
    assert_eq!(api[0].path, "/api/models/kivi-test/tiny/revision/main");
    assert!(sandbox.strays().is_empty());
}

#[tokio::test]
async fn full_download_reports_progress_and_builds_the_hub_cache_layout() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    let client = sandbox.client(&hub.endpoint());
    let repo = hub.repo(TINY);
    let recorder = Recorder::default();

    let snapshot = client
        .download_snapshot(
            &runnable(TINY),
            &fast_options().with_progress(recorder.sink()),
        )
        .await
        .unwrap();

    // The runnable files, byte for byte, and nothing else.
    let names: Vec<&str> = snapshot.files.iter().map(|f| f.file.as_str()).collect();
    assert_eq!(names, RUNNABLE);
    for name in RUNNABLE {
        let on_disk = std::fs::read(snapshot.path(name).unwrap()).unwrap();
        assert_eq!(on_disk, repo.file(name).data, "{name}");
    }
    assert!(!snapshot.dir.join("README.md").exists());
    assert!(!snapshot.dir.join("extra").exists());

    // The standard layout: refs/main -> commit, snapshot links -> blobs named by ETag.
    let repo_dir = sandbox.cache().join("models--kivi-test--tiny");
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("refs").join("main")).unwrap(),
        repo.commit
    );
    assert_eq!(snapshot.dir, repo_dir.join("snapshots").join(&repo.commit));
    assert_eq!(snapshot.commit, repo.commit);
    for name in RUNNABLE {
        let file = repo.file(name);
        let link = snapshot.dir.join(name);
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("../../blobs").join(file.etag()),
            "{name}"
        );
        let blob = std::fs::read(repo_dir.join("blobs").join(file.etag())).unwrap();
        assert_eq!(sha256_hex(&blob), file.sha256());
    }
    assert!(files_ending(&sandbox.cache(), ".incomplete").is_empty());
    assert!(sandbox.strays().is_empty());

    // Progress: planned totals, monotone counts, complete at the end.
    let total: u64 = RUNNABLE
        .iter()
        .map(|n| repo.file(n).data.len() as u64)
        .sum();
    let events = recorder.events();
    match &events[0] {
        DownloadEvent::Planned {
            total_bytes,
            cached_bytes,
            files,
            commit,
            ..
        } => {
            assert_eq!(*total_bytes, total);
            assert_eq!(*cached_bytes, 0);
            assert_eq!(files.len(), 4);
            assert_eq!(commit, &repo.commit);
        }
        other => panic!("first event is {other:?}"),
    }
    let mut overall_done = 0;
    let mut per_file: HashMap<String, u64> = HashMap::new();
    for event in &events {
        if let DownloadEvent::Progress {
            file,
            file_progress,
            overall,
        } = event
        {
            assert!(overall.done >= overall_done, "overall went back");
            assert!(overall.done <= total);
            assert_eq!(overall.total, total);
            overall_done = overall.done;
            let last = per_file.entry(file.clone()).or_default();
            assert!(file_progress.done >= *last, "{file} went back");
            assert_eq!(file_progress.total, repo.file(file).data.len() as u64);
            assert!(file_progress.done <= file_progress.total);
            assert!(file_progress.bytes_per_sec.is_finite() && file_progress.bytes_per_sec >= 0.0);
            *last = file_progress.done;
            if file_progress.done == file_progress.total {
                assert_eq!(file_progress.eta_secs, Some(0.0));
            }
        }
    }
    assert_eq!(overall_done, total);
    for name in RUNNABLE {
        assert_eq!(per_file[name], repo.file(name).data.len() as u64, "{name}");
        assert!(events.iter().any(|e| matches!(e,
            DownloadEvent::FileDone { file, bytes, from_cache: false }
                if file == name && *bytes == repo.file(name).data.len() as u64)));
    }
    match events.last().unwrap() {
        DownloadEvent::Finished {
            total_bytes,
            downloaded_bytes,
            snapshot_dir,
            ..
        } => {
            assert_eq!(*total_bytes, total);
            assert_eq!(*downloaded_bytes, total);
            assert_eq!(snapshot_dir, &snapshot.dir);
        }
        other => panic!("last event is {other:?}"),
    }
}

#[tokio::test]
async fn a_second_download_reuses_the_cache_without_fetching_contents() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    let client = sandbox.client(&hub.endpoint());
    let first = client
        .download_snapshot(&runnable(TINY), &fast_options())
        .await
        .unwrap();
    hub.clear_log();

    let recorder = Recorder::default();
    let second = client
        .download_snapshot(
            &runnable(TINY),
            &fast_options().with_progress(recorder.sink()),
        )
        .await
        .unwrap();

    assert_eq!(first, second);
    assert!(
        hub.requests()
            .iter()
            .all(|r| r.method != "GET" || r.path.starts_with("/api/")),
        "file contents fetched again: {:?}",
        hub.requests()
    );
    let events = recorder.events();
    assert!(
        matches!(&events[0], DownloadEvent::Planned { total_bytes, cached_bytes, .. }
        if total_bytes == cached_bytes)
    );
    assert!(matches!(
        events.last().unwrap(),
        DownloadEvent::Finished {
            downloaded_bytes: 0,
            ..
        }
    ));
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(
                e,
                DownloadEvent::FileDone {
                    from_cache: true,
                    ..
                }
            ))
            .count(),
        4
    );
}

#[tokio::test]
async fn offline_mode_resolves_from_the_cache_only() {
    let hub = FakeHub::start(vec![tiny_model(TINY), gguf_repo("kivi-test/gguf")]).await;
    let sandbox = Sandbox::new();
    let online = sandbox.client(&hub.endpoint());
    let downloaded = online
        .download_snapshot(&runnable(TINY), &fast_options())
        .await
        .unwrap();
    hub.clear_log();

    let offline = sandbox.offline_client();
    let cached = offline
        .download_snapshot(&runnable(TINY), &fast_options())
        .await
        .unwrap();
    assert_eq!(cached.dir, downloaded.dir);
    let names: Vec<&str> = cached.files.iter().map(|f| f.file.as_str()).collect();
    assert_eq!(names, RUNNABLE);
    for f in &cached.files {
        assert_eq!(
            std::fs::read(&f.path).unwrap(),
            hub.repo(TINY).file(f.file.as_str()).data
        );
    }
    // Also by commit hash, which needs no ref.
    let by_commit = offline
        .cached_snapshot(&runnable(TINY).at_revision(Revision::parse(&downloaded.commit).unwrap()))
        .unwrap();
    assert_eq!(by_commit.dir, downloaded.dir);

    // Not in the cache: a clear error, and still no request.
    let missing = offline
        .download_snapshot(
            &SnapshotRequest::parse(
                "kivi-test/gguf",
                FileSelection::Gguf("tiny.Q4_0.gguf".into()),
            )
            .unwrap(),
            &fast_options(),
        )
        .await
        .unwrap_err();
    assert!(matches!(missing, HubError::NotCached { .. }), "{missing}");
    let message = missing.to_string();
    assert!(
        message.contains("HF_HUB_OFFLINE") && message.contains("kivi-test/gguf"),
        "{message}"
    );
    let listing = offline
        .list_files(&RepoId::parse(TINY).unwrap(), &Revision::main())
        .await
        .unwrap_err();
    assert!(matches!(listing, HubError::NotCached { .. }));
    // A file the selection needs is missing from the snapshot: not complete, not returned.
    std::fs::remove_file(downloaded.dir.join("model.safetensors")).unwrap();
    assert!(matches!(
        offline.cached_snapshot(&runnable(TINY)),
        Err(HubError::NotCached { .. })
    ));
    assert!(
        hub.requests().is_empty(),
        "offline made requests: {:?}",
        hub.requests()
    );
}

#[tokio::test]
async fn hf_hub_offline_in_the_environment_turns_on_offline_mode() {
    let sandbox = Sandbox::new();
    let cache = sandbox.cache();
    let config = HubConfig::from_vars(|name| match name {
        "HF_HUB_CACHE" => Some(cache.to_string_lossy().into_owned()),
        "HF_HUB_OFFLINE" => Some("1".into()),
        "HF_ENDPOINT" => Some("http://127.0.0.1:9".into()),
        _ => None,
    });
    assert!(config.offline);
    assert_eq!(config.cache_dir, cache);
    let client = HubClient::new(config).unwrap();
    let err = client
        .download_snapshot(&runnable(TINY), &fast_options())
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::NotCached { .. }), "{err}");
}

#[tokio::test]
async fn an_unreachable_hub_falls_back_to_a_complete_cached_snapshot() {
    let sandbox = Sandbox::new();
    let endpoint;
    let downloaded = {
        let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
        endpoint = hub.endpoint();
        sandbox
            .client(&endpoint)
            .download_snapshot(&runnable(TINY), &fast_options())
            .await
            .unwrap()
    };
    // The server is gone; the same endpoint now refuses connections.
    let client = sandbox.client(&endpoint);
    let snapshot = client
        .download_snapshot(&runnable(TINY), &fast_options())
        .await
        .unwrap();
    assert_eq!(snapshot, downloaded);
    // Something never downloaded still reports the network problem.
    let err = client
        .download_snapshot(&runnable("kivi-test/other"), &fast_options())
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::Network { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("HF_HUB_OFFLINE"), "{message}");
    // The cause is spelled out, not just "error sending request".
    assert!(message.to_lowercase().contains("refused"), "{message}");
}

#[tokio::test]
async fn a_sharded_checkpoint_downloads_the_index_and_its_shards() {
    let id = "kivi-test/sharded";
    let hub = FakeHub::start(vec![sharded_model(id)]).await;
    let sandbox = Sandbox::new();
    let client = sandbox.client(&hub.endpoint());
    let recorder = Recorder::default();
    let snapshot = client
        .download_snapshot(
            &runnable(id),
            &fast_options().with_progress(recorder.sink()),
        )
        .await
        .unwrap();
    let names: Vec<&str> = snapshot.files.iter().map(|f| f.file.as_str()).collect();
    assert_eq!(
        names,
        [
            "config.json",
            "tokenizer.json",
            "model.safetensors.index.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        ]
    );
    assert!(!snapshot.dir.join("consolidated.safetensors").exists());
    for f in &snapshot.files {
        assert_eq!(
            std::fs::read(&f.path).unwrap(),
            hub.repo(id).file(f.file.as_str()).data
        );
    }
    let shards: u64 = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    .iter()
    .map(|n| hub.repo(id).file(n).data.len() as u64)
    .sum();
    assert_eq!(snapshot.memory_estimate().weights_bytes, shards);
    // The index was fetched while planning, so it is reported as cached.
    assert!(recorder.events().iter().any(|e| matches!(e,
        DownloadEvent::FileDone { file, from_cache: true, .. } if file == "model.safetensors.index.json")));
}

#[tokio::test]
async fn a_gguf_selection_downloads_only_that_file() {
    let id = "kivi-test/gguf";
    let hub = FakeHub::start(vec![gguf_repo(id)]).await;
    let sandbox = Sandbox::new();
    let client = sandbox.client(&hub.endpoint());

    let err = client
        .download_snapshot(&runnable(id), &fast_options())
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::NothingToDownload { .. }), "{err}");
    assert!(err.to_string().contains("tiny.Q4_0.gguf"), "{err}");

    let request = SnapshotRequest::parse(id, FileSelection::Gguf("tiny.Q8_0.gguf".into())).unwrap();
    let snapshot = client
        .download_snapshot(&request, &fast_options())
        .await
        .unwrap();
    assert_eq!(snapshot.files.len(), 1);
    assert_eq!(
        std::fs::read(snapshot.path("tiny.Q8_0.gguf").unwrap()).unwrap(),
        hub.repo(id).file("tiny.Q8_0.gguf").data
    );
    assert!(!snapshot.dir.join("tiny.Q4_0.gguf").exists());
}

#[tokio::test]
async fn plan_shows_sizes_and_memory_before_fetching_contents() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    let client = sandbox.client(&hub.endpoint());
    let repo = hub.repo(TINY);

    let plan = client
        .plan_download(&runnable(TINY), &fast_options())
        .await
        .unwrap();
    let total: u64 = RUNNABLE
        .iter()
        .map(|n| repo.file(n).data.len() as u64)
        .sum();
    assert_eq!(plan.total_bytes, total);
    assert_eq!(plan.remaining_bytes(), total);
    assert_eq!(plan.commit.as_str(), repo.commit);
    let weights = repo.file("model.safetensors").data.len() as u64;
    let memory = plan.memory_estimate();
    assert_eq!(memory.weights_bytes, weights);
    assert!(memory.total_bytes > weights);
    let check = memory.check();
    assert!(check.total_ram > 0);
    assert!(hub
        .requests()
        .iter()
        .all(|r| r.method != "GET" || r.path.starts_with("/api/")));
    assert!(!sandbox
        .cache()
        .join("models--kivi-test--tiny")
        .join("blobs")
        .exists());

    let snapshot = client
        .download_planned(&plan, &fast_options())
        .await
        .unwrap();
    assert_eq!(snapshot.files.len(), 4);
}

#[tokio::test]
async fn a_pinned_commit_downloads_without_writing_a_branch_ref() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    let client = sandbox.client(&hub.endpoint());
    let commit = hub.repo(TINY).commit.clone();
    let request = runnable(TINY).at_revision(Revision::parse(&commit).unwrap());
    let snapshot = client
        .download_snapshot(&request, &fast_options())
        .await
        .unwrap();
    assert_eq!(snapshot.commit, commit);
    assert!(!sandbox
        .cache()
        .join("models--kivi-test--tiny/refs")
        .exists());
}

#[tokio::test]
async fn the_token_goes_to_the_hub_and_nowhere_else() {
    let secret = "hf_kivi_test_secret_token";
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    // The CDN on another origin, as on the real hub.
    hub.faults(|f| f.cdn_host = Some("localhost".into()));
    let sandbox = Sandbox::new();
    let config = HubConfig::new(sandbox.cache(), hub.endpoint()).with_token(Some(secret.into()));
    assert!(!format!("{config:?}").contains(secret));
    let client = HubClient::new(config).unwrap();
    client
        .download_snapshot(&runnable(TINY), &fast_options())
        .await
        .unwrap();
    let bearer = format!("Bearer {secret}");
    let requests = hub.requests();
    assert!(requests.iter().any(|r| r.path.starts_with("/cdn/")));
    for r in requests {
        if r.path.starts_with("/cdn/") {
            assert_eq!(r.authorization, None, "the CDN saw the token: {r:?}");
        } else {
            assert_eq!(r.authorization.as_deref(), Some(bearer.as_str()), "{r:?}");
        }
    }
    assert!(!format!("{client:?}").contains(secret));

    let err = client
        .download_snapshot(&runnable("kivi-test/missing"), &fast_options())
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::RepoNotFound { .. }), "{err}");
    assert!(!err.to_string().contains(secret));
    assert!(!format!("{err:?}").contains(secret));
}

#[tokio::test]
async fn empty_files_and_explicit_selections_download() {
    let mut repo = tiny_model(TINY);
    repo.files
        .push(hub_server::FakeFile::new("empty.txt", "", false));
    let hub = FakeHub::start(vec![repo]).await;
    let sandbox = Sandbox::new();
    let client = sandbox.client(&hub.endpoint());
    let request = SnapshotRequest::parse(
        TINY,
        FileSelection::Files(vec!["empty.txt".into(), "extra/notes.txt".into()]),
    )
    .unwrap();
    let snapshot = client
        .download_snapshot(&request, &fast_options())
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(snapshot.path("empty.txt").unwrap()).unwrap(),
        b""
    );
    assert_eq!(
        std::fs::read(snapshot.dir.join("extra").join("notes.txt")).unwrap(),
        hub.repo(TINY).file("extra/notes.txt").data
    );
    // A nested file links two folders further up.
    assert_eq!(
        std::fs::read_link(snapshot.dir.join("extra/notes.txt")).unwrap(),
        Path::new("../../../blobs").join(hub.repo(TINY).file("extra/notes.txt").etag())
    );
}
