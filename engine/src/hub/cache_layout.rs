//! The standard hub cache layout, shared with every other hub tool:
//!
//! ```text
//! <cache>/models--owner--name/
//!     blobs/<etag>                 file contents, named by ETag (git SHA-1 or LFS SHA-256)
//!     blobs/<etag>.incomplete      a download in progress or paused; resumed from its length
//!     snapshots/<commit>/<file>    relative symlink to ../../blobs/<etag>
//!     refs/<revision>              the commit hash a branch or tag pointed at
//! <cache>/.locks/models--owner--name/<etag>.lock
//! ```
//!
//! Paths are only ever built from validated parts ([`RepoId`], [`CommitHash`],
//! [`BlobEtag`], [`RepoFilePath`]), so nothing here can point outside the cache.

use std::path::{Path, PathBuf};

use super::error::{HubError, HubResult};
use super::repo_id::{CommitHash, RepoId, Revision};
use super::repo_path::{BlobEtag, RepoFilePath};

/// Suffix of partial downloads, as the Python hub client names them.
pub const INCOMPLETE_SUFFIX: &str = ".incomplete";

/// One repository's folder in the hub cache.
#[derive(Clone, Debug)]
pub struct RepoCache {
    cache_dir: PathBuf,
    repo: RepoId,
    folder: String,
}

impl RepoCache {
    /// The folder of `repo` under the cache root `cache_dir`.
    pub fn new(cache_dir: &Path, repo: &RepoId) -> Self {
        RepoCache {
            cache_dir: cache_dir.to_path_buf(),
            repo: repo.clone(),
            folder: repo.cache_folder_name(),
        }
    }

    /// `<cache>/models--owner--name`.
    pub fn repo_dir(&self) -> PathBuf {
        self.cache_dir.join(&self.folder)
    }

    /// `<repo>/blobs`.
    pub fn blobs_dir(&self) -> PathBuf {
        self.repo_dir().join("blobs")
    }

    /// `<repo>/blobs/<etag>`: a complete, verified file.
    pub fn blob_path(&self, etag: &BlobEtag) -> PathBuf {
        self.blobs_dir().join(etag.as_str())
    }

    /// `<repo>/blobs/<etag>.incomplete`: the partial file a download appends to.
    pub fn incomplete_path(&self, etag: &BlobEtag) -> PathBuf {
        self.blobs_dir()
            .join(format!("{}{INCOMPLETE_SUFFIX}", etag.as_str()))
    }

    /// `<cache>/.locks/models--owner--name/<etag>.lock`, where `huggingface_hub` locks too.
    pub fn lock_path(&self, etag: &BlobEtag) -> PathBuf {
        self.cache_dir
            .join(".locks")
            .join(&self.folder)
            .join(format!("{}.lock", etag.as_str()))
    }

    /// `<repo>/snapshots/<commit>`.
    pub fn snapshot_dir(&self, commit: &CommitHash) -> PathBuf {
        self.repo_dir().join("snapshots").join(commit.as_str())
    }

    /// `<repo>/snapshots/<commit>/<file>`.
    pub fn snapshot_file(&self, commit: &CommitHash, file: &RepoFilePath) -> PathBuf {
        file.under(&self.snapshot_dir(commit))
    }

    /// `<repo>/refs/<revision>` (nested for `refs/pr/1`).
    pub fn ref_path(&self, revision: &Revision) -> PathBuf {
        let mut path = self.repo_dir().join("refs");
        for component in revision.as_str().split('/') {
            path.push(component);
        }
        path
    }

    /// The commit `revision` resolves to in the cache: itself if it is a commit hash, else
    /// what `refs/<revision>` says.
    pub fn resolve_revision(&self, revision: &Revision) -> Option<CommitHash> {
        if let Some(commit) = revision.as_commit() {
            return Some(commit);
        }
        let text = std::fs::read_to_string(self.ref_path(revision)).ok()?;
        CommitHash::parse(text.trim()).ok()
    }

    /// Records that `revision` points at `commit`, written by `hf-hub` as every hub tool does.
    pub fn write_ref(&self, revision: &Revision, commit: &CommitHash) -> HubResult<()> {
        if revision.as_commit().is_some() {
            return Ok(());
        }
        let repo = hf_hub::Repo::with_revision(
            self.repo.to_string(),
            hf_hub::RepoType::Model,
            revision.to_string(),
        );
        hf_hub::Cache::new(self.cache_dir.clone())
            .repo(repo)
            .create_ref(commit.as_str())
            .map_err(|e| HubError::io("write", self.ref_path(revision), e))
    }

    /// Points `snapshots/<commit>/<file>` at `blobs/<etag>` with a relative symlink (so the
    /// cache folder can be moved), replacing whatever was there. Where symlinks are not
    /// allowed (Windows without developer mode) the blob is copied, as `huggingface_hub` does.
    pub fn link_snapshot_file(
        &self,
        commit: &CommitHash,
        file: &RepoFilePath,
        etag: &BlobEtag,
    ) -> HubResult<PathBuf> {
        let pointer = self.snapshot_file(commit, file);
        let parent = pointer
            .parent()
            .expect("a snapshot file always has a parent folder");
        std::fs::create_dir_all(parent).map_err(|e| HubError::io("create", parent, e))?;
        // From snapshots/<commit>/<a>/<b>/file: one `..` per folder below the snapshot,
        // two more for `<commit>` and `snapshots`.
        let depth = file.components().count() + 1;
        let mut target = PathBuf::new();
        for _ in 0..depth {
            target.push("..");
        }
        target.push("blobs");
        target.push(etag.as_str());

        if let Ok(existing) = std::fs::read_link(&pointer) {
            if existing == target {
                return Ok(pointer);
            }
        }
        if std::fs::symlink_metadata(&pointer).is_ok() {
            std::fs::remove_file(&pointer).map_err(|e| HubError::io("replace", &pointer, e))?;
        }
        make_pointer(&target, &self.blob_path(etag), &pointer)?;
        Ok(pointer)
    }

    /// All partial downloads of this repository.
    pub fn incomplete_files(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(self.blobs_dir()) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(INCOMPLETE_SUFFIX))
            })
            .collect()
    }
}

#[cfg(unix)]
fn make_pointer(relative_target: &Path, _blob: &Path, pointer: &Path) -> HubResult<()> {
    std::os::unix::fs::symlink(relative_target, pointer)
        .map_err(|e| HubError::io("create the snapshot link", pointer, e))
}

#[cfg(windows)]
fn make_pointer(relative_target: &Path, blob: &Path, pointer: &Path) -> HubResult<()> {
    if std::os::windows::fs::symlink_file(relative_target, pointer).is_ok() {
        return Ok(());
    }
    std::fs::copy(blob, pointer)
        .map(|_| ())
        .map_err(|e| HubError::io("copy into the snapshot", pointer, e))
}

#[cfg(not(any(unix, windows)))]
fn make_pointer(_relative_target: &Path, blob: &Path, pointer: &Path) -> HubResult<()> {
    std::fs::copy(blob, pointer)
        .map(|_| ())
        .map_err(|e| HubError::io("copy into the snapshot", pointer, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> RepoCache {
        RepoCache::new(
            Path::new("/cache"),
            &RepoId::parse("mlx-community/Tiny").unwrap(),
        )
    }

    #[test]
    fn paths_follow_the_hub_layout() {
        let r = repo();
        let etag = BlobEtag::from_header("\"abc123\"", &RepoFilePath::parse("f").unwrap()).unwrap();
        let commit = CommitHash::parse(&"a".repeat(40)).unwrap();
        assert_eq!(
            r.repo_dir(),
            Path::new("/cache/models--mlx-community--Tiny")
        );
        assert_eq!(
            r.blob_path(&etag),
            Path::new("/cache/models--mlx-community--Tiny/blobs/abc123")
        );
        assert_eq!(
            r.incomplete_path(&etag),
            Path::new("/cache/models--mlx-community--Tiny/blobs/abc123.incomplete")
        );
        assert_eq!(
            r.lock_path(&etag),
            Path::new("/cache/.locks/models--mlx-community--Tiny/abc123.lock")
        );
        assert_eq!(
            r.snapshot_file(&commit, &RepoFilePath::parse("a/b.json").unwrap()),
            Path::new("/cache/models--mlx-community--Tiny/snapshots")
                .join("a".repeat(40))
                .join("a/b.json")
        );
        assert_eq!(
            r.ref_path(&Revision::parse("refs/pr/1").unwrap()),
            Path::new("/cache/models--mlx-community--Tiny/refs/refs/pr/1")
        );
    }
}
