//! Hub download failures: server errors, corrupt data, wrong sizes, a full disk, missing or
//! gated repos, and a hostile server (path-traversing names from the listing, an index
//! file or a header) or caller (invalid repo ids): each gives a clear error, leaves no
//! unverified file in place of a complete one, and writes nothing outside the cache.

#[path = "support/hub_harness.rs"]
mod hub_harness;
#[path = "support/hub_server.rs"]
mod hub_server;

use hub_harness::{all_entries, fast_options, files_ending, no_retry_options, Recorder, Sandbox};
use hub_server::{tiny_model, FakeFile, FakeHub, FakeRepo};
use kivi_engine::hub::{DownloadEvent, FileSelection, HubError, RepoId, Revision, SnapshotRequest};

const TINY: &str = "kivi-test/tiny";
const WEIGHTS: &str = "model.safetensors";

fn runnable(repo: &str) -> SnapshotRequest {
    SnapshotRequest::parse(repo, FileSelection::Runnable).unwrap()
}

fn repo_dir(sandbox: &Sandbox) -> std::path::PathBuf {
    sandbox.cache().join("models--kivi-test--tiny")
}

/// Neither a blob nor a snapshot link exists for `file`.
fn assert_not_present(sandbox: &Sandbox, hub: &FakeHub, file: &str) {
    let repo = hub.repo(TINY);
    let blob = repo_dir(sandbox).join("blobs").join(repo.file(file).etag());
    assert!(!blob.exists(), "{file} left as a complete blob");
    let link = repo_dir(sandbox)
        .join("snapshots")
        .join(&repo.commit)
        .join(file);
    assert!(
        std::fs::symlink_metadata(&link).is_err(),
        "{file} linked into the snapshot"
    );
}

#[tokio::test]
async fn a_server_error_is_reported_and_leaves_no_complete_file() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    hub.faults(|f| {
        f.status.insert(WEIGHTS.into(), 500);
    });
    let recorder = Recorder::default();
    let err = sandbox
        .client(&hub.endpoint())
        .download_snapshot(
            &runnable(TINY),
            &fast_options().with_progress(recorder.sink()),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, HubError::HttpStatus { status: 500, .. }),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("HTTP 500") && message.contains(WEIGHTS),
        "{message}"
    );
    // 5xx is transient: it was retried before giving up.
    let retries = recorder
        .events()
        .iter()
        .filter(|e| matches!(e, DownloadEvent::Retrying { .. }))
        .count();
    assert_eq!(retries, 3);
    assert_not_present(&sandbox, &hub, WEIGHTS);
    assert!(files_ending(&sandbox.cache(), ".incomplete")
        .iter()
        .all(|p| std::fs::metadata(p).unwrap().len() == 0));
    assert!(sandbox.strays().is_empty());
}

#[tokio::test]
async fn corrupt_lfs_data_fails_sha256_and_is_deleted() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    hub.faults(|f| {
        f.corrupt.insert(WEIGHTS.into());
    });
    let err = sandbox
        .client(&hub.endpoint())
        .download_snapshot(&runnable(TINY), &fast_options())
        .await
        .unwrap_err();
    match &err {
        HubError::HashMismatch {
            file,
            algorithm,
            expected,
            ..
        } => {
            assert_eq!(file, WEIGHTS);
            assert_eq!(*algorithm, "SHA-256");
            assert_eq!(expected, &hub.repo(TINY).file(WEIGHTS).sha256());
        }
        other => panic!("expected a hash mismatch, got {other}"),
    }
    assert!(err.to_string().contains("deleted"), "{err}");
    assert_not_present(&sandbox, &hub, WEIGHTS);
    assert!(files_ending(&sandbox.cache(), ".incomplete").is_empty());
}

#[tokio::test]
async fn corrupt_small_files_fail_the_git_blob_hash() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    hub.faults(|f| {
        f.corrupt.insert("tokenizer.json".into());
    });
    let err = sandbox
        .client(&hub.endpoint())
        .download_snapshot(&runnable(TINY), &fast_options())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, HubError::HashMismatch { file, algorithm: "git blob SHA-1", .. }
            if file == "tokenizer.json"),
        "{err}"
    );
    assert_not_present(&sandbox, &hub, "tokenizer.json");
    // The bad file's partial is gone; a parallel transfer stopped by the error keeps its
    // own partial file for the next attempt.
    let bad = format!(
        "{}.incomplete",
        hub.repo(TINY).file("tokenizer.json").etag()
    );
    assert!(files_ending(&sandbox.cache(), &bad).is_empty());
}

#[tokio::test]
async fn more_bytes_than_announced_is_a_size_error() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    hub.faults(|f| {
        f.announced_size.insert(WEIGHTS.into(), 1_000_000);
    });
    let err = sandbox
        .client(&hub.endpoint())
        .download_snapshot(&runnable(TINY), &fast_options())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, HubError::SizeMismatch { file, expected: 1_000_000, .. } if file == WEIGHTS),
        "{err}"
    );
    assert_not_present(&sandbox, &hub, WEIGHTS);
    assert!(files_ending(&sandbox.cache(), ".incomplete").is_empty());
}

#[tokio::test]
async fn too_little_disk_space_is_reported_before_downloading() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    // A petabyte model: no test machine has the room.
    let huge = 1u64 << 50;
    hub.faults(|f| {
        f.announced_size.insert(WEIGHTS.into(), huge);
    });
    let err = sandbox
        .client(&hub.endpoint())
        .download_snapshot(&runnable(TINY), &fast_options())
        .await
        .unwrap_err();
    match &err {
        HubError::InsufficientDiskSpace {
            needed, available, ..
        } => {
            assert!(*needed >= huge);
            assert!(available < needed);
        }
        other => panic!("expected a disk space error, got {other}"),
    }
    assert!(err.to_string().contains("free up space"), "{err}");
    let cdn = format!("/cdn/{}", hub.repo(TINY).file(WEIGHTS).sha256());
    assert!(hub
        .requests()
        .iter()
        .all(|r| !(r.method == "GET" && r.path == cdn)));
    assert!(files_ending(&sandbox.cache(), ".incomplete").is_empty());
}

#[tokio::test]
async fn path_traversing_names_from_the_listing_are_refused() {
    for evil in [
        "../../evil.txt",
        "../../../../tmp/evil.txt",
        "/etc/evil.txt",
        "sub/../../evil.txt",
        "sub\\..\\..\\evil.txt",
        "a//evil.txt",
        "C:evil.txt",
        "",
    ] {
        let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
        let sandbox = Sandbox::new();
        hub.faults(|f| f.extra_listing_names = vec![evil.to_string()]);
        let client = sandbox.client(&hub.endpoint());
        let err = client
            .list_files(&RepoId::parse(TINY).unwrap(), &Revision::main())
            .await
            .unwrap_err();
        assert!(
            matches!(err, HubError::UnsafeFileName { .. }),
            "{evil:?}: {err}"
        );
        let err = client
            .download_snapshot(
                &SnapshotRequest::parse(TINY, FileSelection::All).unwrap(),
                &fast_options(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, HubError::UnsafeFileName { .. }),
            "{evil:?}: {err}"
        );
        assert!(err.to_string().contains("refusing"), "{err}");
        assert!(
            sandbox.strays().is_empty(),
            "{evil:?}: {:?}",
            sandbox.strays()
        );
        assert!(
            all_entries(sandbox.root.path())
                .iter()
                .all(|p| !p.to_string_lossy().contains("evil")),
            "{evil:?}"
        );
    }
}

#[tokio::test]
async fn path_traversing_shards_in_an_index_are_refused() {
    let id = "kivi-test/evil-index";
    let repo = FakeRepo {
        id: id.into(),
        commit: hub_server::git_sha1(b"evil"),
        files: vec![
            FakeFile::new("config.json", "{}", false),
            FakeFile::new(
                "model.safetensors.index.json",
                r#"{"weight_map":{"a":"../../../evil.safetensors"}}"#,
                false,
            ),
        ],
    };
    let hub = FakeHub::start(vec![repo]).await;
    let sandbox = Sandbox::new();
    let err = sandbox
        .client(&hub.endpoint())
        .download_snapshot(&runnable(id), &fast_options())
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::UnsafeFileName { .. }), "{err}");
    assert!(sandbox.strays().is_empty());
    assert!(all_entries(sandbox.root.path())
        .iter()
        .all(|p| !p.to_string_lossy().contains("evil.safetensors")));
}

#[tokio::test]
async fn path_traversing_etags_are_refused() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    hub.faults(|f| {
        f.etag_header
            .insert("config.json".into(), "\"../../../../evil\"".into());
    });
    let err = sandbox
        .client(&hub.endpoint())
        .download_snapshot(&runnable(TINY), &fast_options())
        .await
        .unwrap_err();
    assert!(
        matches!(err, HubError::BadServerValue { what: "ETag", .. }),
        "{err}"
    );
    assert!(sandbox.strays().is_empty());
    assert!(all_entries(sandbox.root.path())
        .iter()
        .all(|p| !p.to_string_lossy().contains("evil")));
}

#[tokio::test]
async fn invalid_repo_ids_and_revisions_are_refused_before_any_request() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    for id in [
        "../kivi-test/tiny",
        "kivi-test/../../etc",
        "/etc/passwd",
        "kivi-test\\tiny",
        "kivi-test/tiny/extra",
        "tiny",
        "kivi-test/",
        "kivi--test/tiny",
        "kivi-test/ti ny",
    ] {
        let err = SnapshotRequest::parse(id, FileSelection::Runnable).unwrap_err();
        assert!(
            matches!(err, HubError::InvalidRepoId { .. }),
            "{id:?}: {err}"
        );
        assert!(err.to_string().contains("owner/name"), "{err}");
    }
    for revision in ["../main", "main/../../x", "/abs", "a\\b", ""] {
        assert!(
            matches!(
                Revision::parse(revision),
                Err(HubError::InvalidRevision { .. })
            ),
            "{revision:?}"
        );
    }
    assert!(hub.requests().is_empty());
}

#[tokio::test]
async fn missing_and_gated_repos_say_what_to_do() {
    let hub = FakeHub::start(vec![tiny_model(TINY)]).await;
    let sandbox = Sandbox::new();
    let client = sandbox.client(&hub.endpoint());

    let err = client
        .download_snapshot(&runnable("kivi-test/nope"), &fast_options())
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::RepoNotFound { .. }), "{err}");
    assert!(err.to_string().contains("kivi-test/nope"), "{err}");

    let err = client
        .download_snapshot(
            &runnable(TINY).at_revision(Revision::parse("no-such-branch").unwrap()),
            &fast_options(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::RevisionNotFound { .. }), "{err}");

    let err = client
        .download_snapshot(
            &SnapshotRequest::parse(TINY, FileSelection::Files(vec!["nope.bin".into()])).unwrap(),
            &fast_options(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::NothingToDownload { .. }), "{err}");

    hub.faults(|f| f.api_status = Some(403));
    let err = client
        .download_snapshot(&runnable(TINY), &no_retry_options())
        .await
        .unwrap_err();
    assert!(
        matches!(err, HubError::AccessDenied { status: 403, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("token"), "{err}");
    assert!(sandbox.strays().is_empty());
}
