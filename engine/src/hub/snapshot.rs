//! Model snapshots: plan what to fetch, download it into the hub cache, or resolve it from
//! the cache alone (offline).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use futures_util::{StreamExt, TryStreamExt};
use serde::Serialize;

use super::cache_layout::RepoCache;
use super::cache_layout::INCOMPLETE_SUFFIX;
use super::client::HubClient;
use super::disk::ensure_free_space;
use super::download::{is_complete, BlobJob, Fetched};
use super::error::{HubError, HubResult};
use super::listing::RepoListing;
use super::lock::try_lock_blob;
use super::metadata::expectations;
use super::options::DownloadOptions;
use super::progress::{DownloadEvent, PlannedFile, ProgressSink, Tracker};
use super::repo_id::{CommitHash, RepoId, Revision};
use super::repo_path::{BlobEtag, RepoFilePath};
use super::selection::{select, shards_from_index, FileSelection, Selected};
use crate::budget::MemoryEstimate;

/// Metadata requests in flight at once while planning.
const PLAN_CONCURRENCY: usize = 4;
/// Deepest folder nesting looked at in a cached snapshot.
const MAX_SNAPSHOT_DEPTH: usize = 16;

/// Which model to fetch: a repository, a revision and a selection of its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRequest {
    /// The repository.
    pub repo: RepoId,
    /// Branch, tag or commit (default `main`).
    pub revision: Revision,
    /// Which files.
    pub selection: FileSelection,
}

impl SnapshotRequest {
    /// `selection` of `repo` at `main`.
    pub fn new(repo: RepoId, selection: FileSelection) -> Self {
        SnapshotRequest {
            repo,
            revision: Revision::main(),
            selection,
        }
    }

    /// Validates `repo` (`owner/name`) and builds a request at `main`.
    pub fn parse(repo: &str, selection: FileSelection) -> HubResult<Self> {
        Ok(Self::new(RepoId::parse(repo)?, selection))
    }

    /// The same request at another revision.
    pub fn at_revision(mut self, revision: Revision) -> Self {
        self.revision = revision;
        self
    }
}

/// One file of a local snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SnapshotFile {
    /// Path inside the repository.
    pub file: RepoFilePath,
    /// Where it is on disk (`snapshots/<commit>/<file>`, a link into `blobs/`).
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
}

/// A model on disk: the snapshot folder of one commit and the selected files in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// `owner/name`.
    pub repo: String,
    /// The commit the files come from.
    pub commit: String,
    /// `<cache>/models--owner--name/snapshots/<commit>`: open the model from here.
    pub dir: PathBuf,
    /// The selected files.
    pub files: Vec<SnapshotFile>,
}

impl Snapshot {
    /// The local path of `file`, if it is part of the snapshot.
    pub fn path(&self, file: &str) -> Option<&Path> {
        self.files
            .iter()
            .find(|f| f.file.as_str() == file)
            .map(|f| f.path.as_path())
    }

    /// Memory needed to run the model, from its weight files.
    pub fn memory_estimate(&self) -> MemoryEstimate {
        MemoryEstimate::from_files(self.files.iter().map(|f| (f.file.as_str(), f.size)))
    }
}

/// What a download will fetch, known before any file contents move: the app shows it (size,
/// RAM needed) and then calls [`HubClient::download_planned`].
#[derive(Clone, Debug)]
pub struct DownloadPlan {
    /// The repository.
    pub repo: RepoId,
    /// The revision asked for.
    pub revision: Revision,
    /// The commit it resolved to.
    pub commit: CommitHash,
    /// The files, with sizes and whether they are already cached.
    pub files: Vec<PlannedFile>,
    /// Size of all files.
    pub total_bytes: u64,
    /// Bytes of files already complete in the cache.
    pub cached_bytes: u64,
    /// Bytes already in partial downloads that will be resumed.
    pub partial_bytes: u64,
    jobs: Vec<BlobJob>,
}

impl DownloadPlan {
    /// Bytes still to download.
    pub fn remaining_bytes(&self) -> u64 {
        self.total_bytes - self.cached_bytes - self.partial_bytes
    }

    /// Memory needed to run the planned model.
    pub fn memory_estimate(&self) -> MemoryEstimate {
        MemoryEstimate::from_files(self.files.iter().map(|f| (f.file.as_str(), f.size)))
    }
}

impl HubClient {
    /// Downloads (or finds in the cache) the selected files of a model and returns its
    /// snapshot folder.
    ///
    /// Files already complete in the cache are reused; partial files are resumed; each file
    /// is verified (size, and SHA-256 or git SHA-1) before it becomes a blob. Cancelling
    /// `options.cancel` pauses ([`HubError::Cancelled`]). In offline mode this is
    /// [`HubClient::cached_snapshot`]; when the hub cannot be reached at all, a complete
    /// cached snapshot is returned instead of the network error.
    pub async fn download_snapshot(
        &self,
        request: &SnapshotRequest,
        options: &DownloadOptions,
    ) -> HubResult<Snapshot> {
        if self.inner.config.offline {
            return self.cached_snapshot(request);
        }
        let plan = match self.plan_download(request, options).await {
            Ok(plan) => plan,
            Err(network @ HubError::Network { .. }) => {
                return self.cached_snapshot(request).map_err(|_| network)
            }
            Err(e) => return Err(e),
        };
        self.download_planned(&plan, options).await
    }

    /// Lists the repository, applies the selection and reads each file's metadata. The only
    /// file contents fetched are a sharded checkpoint's index (it names the shards).
    pub async fn plan_download(
        &self,
        request: &SnapshotRequest,
        options: &DownloadOptions,
    ) -> HubResult<DownloadPlan> {
        let listing = self.list_files(&request.repo, &request.revision).await?;
        let cache = RepoCache::new(&self.inner.config.cache_dir, &request.repo);
        let available: Vec<RepoFilePath> = listing.files.iter().map(|f| f.path.clone()).collect();
        let mut files = match select(&request.selection, &request.repo, &available)? {
            Selected::Files(files) => files,
            Selected::WithIndex { mut files, index } => {
                let shards = self.fetch_index(&cache, &listing, &index, options).await?;
                for shard in &shards {
                    if !available.contains(shard) {
                        return Err(HubError::BadResponse {
                            action: format!("reading {index} of {}", request.repo),
                            detail: format!("it names {shard}, which the repo does not have"),
                        });
                    }
                }
                files.push(index);
                files.extend(shards);
                files
            }
        };
        let mut seen = HashSet::new();
        files.retain(|f| seen.insert(f.clone()));

        let jobs: Vec<BlobJob> = futures_util::stream::iter(files.iter())
            .map(|file| self.blob_job(&listing, file, options))
            .buffered(PLAN_CONCURRENCY)
            .try_collect()
            .await?;

        let mut planned = Vec::with_capacity(jobs.len());
        let (mut total, mut cached, mut partial) = (0u64, 0u64, 0u64);
        for job in &jobs {
            let is_cached = is_complete(&cache.blob_path(&job.etag), job.size);
            total += job.size;
            if is_cached {
                cached += job.size;
            } else {
                partial += std::fs::metadata(cache.incomplete_path(&job.etag))
                    .map(|m| m.len().min(job.size))
                    .unwrap_or(0);
            }
            planned.push(PlannedFile {
                file: job.file.to_string(),
                size: job.size,
                cached: is_cached,
            });
        }
        Ok(DownloadPlan {
            repo: request.repo.clone(),
            revision: request.revision.clone(),
            commit: listing.commit,
            files: planned,
            total_bytes: total,
            cached_bytes: cached,
            partial_bytes: partial,
            jobs,
        })
    }

    /// Carries out a plan from [`HubClient::plan_download`].
    pub async fn download_planned(
        &self,
        plan: &DownloadPlan,
        options: &DownloadOptions,
    ) -> HubResult<Snapshot> {
        let started = Instant::now();
        let config = &self.inner.config;
        let cache = RepoCache::new(&config.cache_dir, &plan.repo);
        if options.cancel.is_cancelled() {
            return Err(HubError::Cancelled);
        }
        if options.check_disk_space && plan.remaining_bytes() > 0 {
            ensure_free_space(&config.cache_dir, plan.remaining_bytes())?;
        }
        // Written first, as the Python client does: a paused download is then found by its
        // branch name, and the cache lookup still checks that every file is there.
        cache.write_ref(&plan.revision, &plan.commit)?;

        let tracker = Tracker::new(
            options.progress.clone(),
            plan.total_bytes,
            plan.cached_bytes,
        );
        tracker.emit(DownloadEvent::Planned {
            repo: plan.repo.to_string(),
            commit: plan.commit.to_string(),
            files: plan.files.clone(),
            total_bytes: plan.total_bytes,
            cached_bytes: plan.cached_bytes,
        });
        let files: Vec<SnapshotFile> =
            futures_util::stream::iter(plan.jobs.iter().zip(&plan.files))
                .map(|(job, planned)| {
                    let (cache, tracker) = (&cache, &tracker);
                    async move {
                        let fetched = self.fetch_blob(cache, job, options, tracker).await?;
                        if fetched == Fetched::Cached && !planned.cached {
                            // Finished meanwhile by a parallel download of the same blob.
                            tracker.credit(job.size);
                        }
                        let path = cache.link_snapshot_file(&plan.commit, &job.file, &job.etag)?;
                        tracker.emit(DownloadEvent::FileDone {
                            file: job.file.to_string(),
                            bytes: job.size,
                            from_cache: fetched == Fetched::Cached,
                        });
                        Ok::<_, HubError>(SnapshotFile {
                            file: job.file.clone(),
                            path,
                            size: job.size,
                        })
                    }
                })
                .buffered(options.parallel_files.max(1))
                .try_collect()
                .await?;

        let dir = cache.snapshot_dir(&plan.commit);
        tracker.emit(DownloadEvent::Finished {
            repo: plan.repo.to_string(),
            commit: plan.commit.to_string(),
            snapshot_dir: dir.clone(),
            total_bytes: plan.total_bytes,
            downloaded_bytes: tracker.downloaded(),
            elapsed_ms: started.elapsed().as_millis() as u64,
        });
        Ok(Snapshot {
            repo: plan.repo.to_string(),
            commit: plan.commit.to_string(),
            dir,
            files,
        })
    }

    /// Resolves a snapshot from the cache alone, without any network access: the commit from
    /// `refs/<revision>` (or the revision itself if it is a commit), the files by the same
    /// selection rules as a download. Fails with [`HubError::NotCached`] naming what is
    /// missing.
    pub fn cached_snapshot(&self, request: &SnapshotRequest) -> HubResult<Snapshot> {
        let config = &self.inner.config;
        let repo = &request.repo;
        let not_cached = |what: String| HubError::NotCached {
            what,
            cache: config.cache_dir.clone(),
        };
        let cache = RepoCache::new(&config.cache_dir, repo);
        let commit = cache
            .resolve_revision(&request.revision)
            .ok_or_else(|| not_cached(format!("{repo} at revision {}", request.revision)))?;
        let dir = cache.snapshot_dir(&commit);
        if !dir.is_dir() {
            return Err(not_cached(format!("{repo} at commit {commit}")));
        }
        let available = snapshot_files(&dir);
        let selected = select(&request.selection, repo, &available).map_err(|e| match e {
            HubError::NothingToDownload { detail, .. } => not_cached(format!("{repo} ({detail})")),
            other => other,
        })?;
        let files = match selected {
            Selected::Files(files) => files,
            Selected::WithIndex { mut files, index } => {
                let path = index.under(&dir);
                let json = std::fs::read(&path).map_err(|e| HubError::io("read", &path, e))?;
                let shards = shards_from_index(&index, &json)?;
                if let Some(missing) = shards.iter().find(|s| !available.contains(s)) {
                    return Err(not_cached(format!("{missing} of {repo}")));
                }
                files.push(index);
                files.extend(shards);
                files
            }
        };
        let files = files
            .into_iter()
            .map(|file| {
                let path = file.under(&dir);
                let size = std::fs::metadata(&path)
                    .map_err(|e| HubError::io("read", &path, e))?
                    .len();
                Ok(SnapshotFile { file, path, size })
            })
            .collect::<HubResult<Vec<_>>>()?;
        Ok(Snapshot {
            repo: repo.to_string(),
            commit: commit.to_string(),
            dir,
            files,
        })
    }

    /// Deletes the partial downloads (`blobs/*.incomplete`) of `repo`, skipping any that a
    /// running download holds, and returns the bytes freed. This is "cancel" as opposed to
    /// "pause".
    pub fn discard_partial_downloads(&self, repo: &RepoId) -> HubResult<u64> {
        let cache = RepoCache::new(&self.inner.config.cache_dir, repo);
        let mut freed = 0;
        for path in cache.incomplete_files() {
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let stem = name.trim_end_matches(INCOMPLETE_SUFFIX);
            let Ok(file) = RepoFilePath::parse(name) else {
                continue;
            };
            let Ok(etag) = BlobEtag::from_header(stem, &file) else {
                continue;
            };
            let Some(_lock) = try_lock_blob(&cache.lock_path(&etag))? else {
                continue;
            };
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            std::fs::remove_file(&path).map_err(|e| HubError::io("delete", &path, e))?;
            freed += size;
        }
        Ok(freed)
    }

    /// Metadata of one listed file at the listing's commit, turned into a transfer job.
    async fn blob_job(
        &self,
        listing: &RepoListing,
        file: &RepoFilePath,
        options: &DownloadOptions,
    ) -> HubResult<BlobJob> {
        // Every file is fetched at the listed commit, so a branch moving mid-download
        // cannot mix files of two commits.
        let at_commit = Revision::parse(listing.commit.as_str())?;
        let meta = self
            .file_metadata(&listing.repo, &at_commit, file, &options.cancel)
            .await?;
        if let Some(commit) = &meta.commit {
            if commit != &listing.commit {
                return Err(HubError::BadResponse {
                    action: format!("reading the metadata of {file}"),
                    detail: format!(
                        "it is from commit {commit}, the file list from {}",
                        listing.commit
                    ),
                });
            }
        }
        let (size, expected) = expectations(file, &meta, listing.file(file.as_str()))?;
        Ok(BlobJob {
            repo: listing.repo.clone(),
            url: self.resolve_url(&listing.repo, at_commit.as_str(), file),
            revision: at_commit,
            file: file.clone(),
            etag: meta.etag,
            size,
            expected,
        })
    }

    /// Downloads a sharded checkpoint's index (verified, into the cache like any file) and
    /// returns the shards it names.
    async fn fetch_index(
        &self,
        cache: &RepoCache,
        listing: &RepoListing,
        index: &RepoFilePath,
        options: &DownloadOptions,
    ) -> HubResult<Vec<RepoFilePath>> {
        let job = self.blob_job(listing, index, options).await?;
        let quiet = Tracker::new(ProgressSink::none(), job.size, 0);
        self.fetch_blob(cache, &job, options, &quiet).await?;
        let blob = cache.blob_path(&job.etag);
        let json = std::fs::read(&blob).map_err(|e| HubError::io("read", &blob, e))?;
        shards_from_index(index, &json)
    }
}

/// The files of a snapshot folder whose blobs exist, as repository paths.
fn snapshot_files(dir: &Path) -> Vec<RepoFilePath> {
    fn walk(dir: &Path, prefix: &str, depth: usize, out: &mut Vec<RepoFilePath>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let rel = format!("{prefix}{name}");
            let path = entry.path();
            // `metadata` follows the link: a pointer whose blob is gone does not count.
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() && depth < MAX_SNAPSHOT_DEPTH => {
                    walk(&path, &format!("{rel}/"), depth + 1, out)
                }
                Ok(m) if m.is_file() => {
                    if let Ok(p) = RepoFilePath::parse(&rel) {
                        out.push(p);
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, "", 0, &mut out);
    out.sort();
    out
}
