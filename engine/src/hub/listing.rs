//! Listing a repository's files with sizes and LFS hashes.
//!
//! `hf-hub` builds the request (`GET /api/models/{repo}/revision/{rev}` with the token);
//! we add `blobs=true`, which makes the hub include each file's size, git blob id and LFS
//! SHA-256 (`hf-hub` 0.4's own `RepoInfo` keeps only the names).

use serde::{Deserialize, Serialize};

use super::client::HubClient;
use super::error::{HubError, HubResult};
use super::repo_id::{CommitHash, RepoId, Revision};
use super::repo_path::RepoFilePath;

/// One file of a repository at a commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RepoFile {
    /// Path inside the repository, validated.
    pub path: RepoFilePath,
    /// Size in bytes, when the hub gave it.
    pub size: Option<u64>,
    /// SHA-256 of the contents for LFS files (the LFS oid).
    pub lfs_sha256: Option<String>,
    /// Git blob id; for small files this is also their `ETag`.
    pub blob_id: Option<String>,
}

/// The files of a repository at one commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoListing {
    /// The repository.
    pub repo: RepoId,
    /// The revision asked for.
    pub revision: Revision,
    /// The commit it resolved to; downloads use this so all files come from one commit.
    pub commit: CommitHash,
    /// The files, in the hub's order.
    pub files: Vec<RepoFile>,
}

impl RepoListing {
    /// The entry for `path`, if the repository has it.
    pub fn file(&self, path: &str) -> Option<&RepoFile> {
        self.files.iter().find(|f| f.path.as_str() == path)
    }

    /// Sum of the known sizes.
    pub fn total_size(&self) -> u64 {
        self.files.iter().filter_map(|f| f.size).sum()
    }
}

#[derive(Deserialize)]
struct InfoJson {
    sha: Option<String>,
    #[serde(default)]
    siblings: Vec<SiblingJson>,
}

#[derive(Deserialize)]
struct SiblingJson {
    rfilename: String,
    size: Option<u64>,
    #[serde(rename = "blobId")]
    blob_id: Option<String>,
    lfs: Option<LfsJson>,
}

#[derive(Deserialize)]
struct LfsJson {
    sha256: Option<String>,
    size: Option<u64>,
}

impl HubClient {
    /// Lists the files of `repo` at `revision` with sizes and LFS SHA-256s.
    ///
    /// Every file name is validated: one unsafe name (absolute, `..`, backslash, empty
    /// component) fails the whole listing, as such a server cannot be trusted for the rest.
    /// In offline mode this fails with [`HubError::NotCached`]; use
    /// [`HubClient::cached_snapshot`] instead.
    pub async fn list_files(&self, repo: &RepoId, revision: &Revision) -> HubResult<RepoListing> {
        let config = &self.inner.config;
        if config.offline {
            return Err(HubError::NotCached {
                what: format!("the file list of {repo}"),
                cache: config.cache_dir.clone(),
            });
        }
        let action = format!("list the files of {repo}");
        let hf_repo = hf_hub::Repo::with_revision(
            repo.to_string(),
            hf_hub::RepoType::Model,
            revision.to_string(),
        );
        let response = self
            .inner
            .api
            .repo(hf_repo)
            .info_request()
            .query(&[("blobs", "true")])
            .timeout(config.read_timeout)
            .send()
            .await
            .map_err(|e| self.network_error(action.clone(), e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(self.status_error(
                status,
                response.headers(),
                repo,
                revision,
                None,
                &action,
            ));
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| self.network_error(action.clone(), e))?;
        parse_listing(repo, revision, &body)
    }
}

/// Parses the hub's repo-info JSON (`?blobs=true`), validating the commit and every name.
pub(crate) fn parse_listing(
    repo: &RepoId,
    revision: &Revision,
    body: &[u8],
) -> HubResult<RepoListing> {
    let action = format!("listing the files of {repo}");
    let info: InfoJson = serde_json::from_slice(body).map_err(|e| HubError::BadResponse {
        action: action.clone(),
        detail: format!("invalid JSON: {e}"),
    })?;
    let sha = info.sha.ok_or_else(|| HubError::BadResponse {
        action: action.clone(),
        detail: "no commit hash (sha)".into(),
    })?;
    let commit = CommitHash::parse(&sha).map_err(|_| HubError::BadServerValue {
        what: "commit hash",
        value: sha.clone(),
        file: repo.to_string(),
    })?;
    let files = info
        .siblings
        .into_iter()
        .map(|s| {
            let path = RepoFilePath::parse(&s.rfilename)?;
            let lfs_sha256 = s
                .lfs
                .as_ref()
                .and_then(|l| l.sha256.clone())
                .map(|h| h.to_ascii_lowercase());
            if let Some(h) = &lfs_sha256 {
                if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(HubError::BadServerValue {
                        what: "LFS SHA-256",
                        value: h.clone(),
                        file: path.to_string(),
                    });
                }
            }
            Ok(RepoFile {
                size: s.size.or_else(|| s.lfs.as_ref().and_then(|l| l.size)),
                lfs_sha256,
                blob_id: s.blob_id,
                path,
            })
        })
        .collect::<HubResult<Vec<_>>>()?;
    Ok(RepoListing {
        repo: repo.clone(),
        revision: revision.clone(),
        commit,
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> RepoId {
        RepoId::parse("org/m").unwrap()
    }

    #[test]
    fn parses_hub_json() {
        let body = br#"{"id":"org/m","sha":"0123456789abcdef0123456789abcdef01234567",
          "siblings":[
            {"rfilename":"config.json","size":12,"blobId":"aaaa"},
            {"rfilename":"model.safetensors","size":99,"blobId":"bbbb",
             "lfs":{"sha256":"ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789","size":99,"pointerSize":134}}
          ]}"#;
        let l = parse_listing(&repo(), &Revision::main(), body).unwrap();
        assert_eq!(l.files.len(), 2);
        assert_eq!(l.total_size(), 111);
        let w = l.file("model.safetensors").unwrap();
        assert_eq!(
            w.lfs_sha256.as_deref(),
            Some("abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789")
        );
        assert_eq!(l.file("config.json").unwrap().lfs_sha256, None);
    }

    #[test]
    fn refuses_unsafe_names_and_commits() {
        let body = br#"{"sha":"0123456789abcdef0123456789abcdef01234567",
          "siblings":[{"rfilename":"../../evil"}]}"#;
        assert!(matches!(
            parse_listing(&repo(), &Revision::main(), body),
            Err(HubError::UnsafeFileName { .. })
        ));
        let body = br#"{"sha":"../x","siblings":[]}"#;
        assert!(matches!(
            parse_listing(&repo(), &Revision::main(), body),
            Err(HubError::BadServerValue { .. })
        ));
    }
}
