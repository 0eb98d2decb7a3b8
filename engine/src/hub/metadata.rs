//! A file's metadata from `HEAD /{repo}/resolve/{rev}/{file}`: the commit, the blob name
//! (ETag), the size, and the hash to verify against.
//!
//! For LFS files the hub answers with a redirect to its CDN and puts the real metadata on
//! that redirect (`X-Linked-Etag` = SHA-256, `X-Linked-Size`), so absolute redirects are not
//! followed; relative ones (a renamed repo) are.

use reqwest::header::{HeaderMap, ACCEPT_ENCODING, CONTENT_LENGTH, ETAG, LOCATION};
use reqwest::Url;
use tokio_util::sync::CancellationToken;

use super::client::{cancellable, HubClient};
use super::error::{HubError, HubResult};
use super::listing::RepoFile;
use super::repo_id::{CommitHash, RepoId, Revision};
use super::repo_path::{BlobEtag, RepoFilePath};
use super::verify::ExpectedHash;

const MAX_RELATIVE_REDIRECTS: usize = 5;

/// What the hub says about one file at one revision.
#[derive(Clone, Debug)]
pub(crate) struct FileMetadata {
    /// `X-Repo-Commit`.
    pub(crate) commit: Option<CommitHash>,
    /// The blob name.
    pub(crate) etag: BlobEtag,
    /// `X-Linked-Size`, else `Content-Length` of a non-redirect answer.
    pub(crate) size: Option<u64>,
    /// Whether the hub sent `X-Linked-Etag` (an LFS or Xet-backed file).
    pub(crate) linked: bool,
}

impl HubClient {
    /// `HEAD`s `file` at `revision`, following only relative redirects.
    pub(crate) async fn file_metadata(
        &self,
        repo: &RepoId,
        revision: &Revision,
        file: &RepoFilePath,
        cancel: &CancellationToken,
    ) -> HubResult<FileMetadata> {
        let action = format!("read the metadata of {file}");
        let mut url = self.resolve_url(repo, revision.as_str(), file);
        for _ in 0..=MAX_RELATIVE_REDIRECTS {
            // `identity`: a compressed answer would report the compressed length.
            let request = self
                .inner
                .http_no_redirect
                .head(url.clone())
                .header(ACCEPT_ENCODING, "identity");
            let response = cancellable(cancel, self.authorized(request, &url).send())
                .await?
                .map_err(|e| self.network_error(action.clone(), e))?;
            let status = response.status();
            let headers = response.headers();
            if status.is_redirection() {
                if let Some(next) = relative_location(&url, headers) {
                    url = next;
                    continue;
                }
                if headers.get(LOCATION).is_none() {
                    return Err(HubError::BadResponse {
                        action,
                        detail: format!("HTTP {status} without a Location"),
                    });
                }
            } else if !status.is_success() {
                return Err(self.status_error(
                    status,
                    headers,
                    repo,
                    revision,
                    Some(file),
                    &action,
                ));
            }
            return parse_metadata(headers, status.is_success(), file);
        }
        Err(HubError::BadResponse {
            action,
            detail: "too many redirects".into(),
        })
    }
}

/// The next URL when `Location` is relative to the hub (a path), else `None`.
fn relative_location(current: &Url, headers: &HeaderMap) -> Option<Url> {
    let location = headers.get(LOCATION)?.to_str().ok()?;
    if location.starts_with('/') && !location.starts_with("//") {
        current.join(location).ok()
    } else {
        None
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn parse_metadata(
    headers: &HeaderMap,
    final_answer: bool,
    file: &RepoFilePath,
) -> HubResult<FileMetadata> {
    let bad = |what: &'static str, value: &str| HubError::BadServerValue {
        what,
        value: value.to_string(),
        file: file.to_string(),
    };
    let commit = match header(headers, "x-repo-commit") {
        Some(c) => Some(CommitHash::parse(c.trim()).map_err(|_| bad("commit hash", c))?),
        None => None,
    };
    let linked_etag = header(headers, "x-linked-etag");
    let etag_value = linked_etag
        .or_else(|| header(headers, ETAG.as_str()))
        .ok_or_else(|| HubError::BadResponse {
            action: format!("reading the metadata of {file}"),
            detail: "no ETag header".into(),
        })?;
    let etag = BlobEtag::from_header(etag_value, file)?;
    let size_header = header(headers, "x-linked-size").or(if final_answer {
        header(headers, CONTENT_LENGTH.as_str())
    } else {
        None
    });
    let size = match size_header {
        Some(s) => Some(s.trim().parse::<u64>().map_err(|_| bad("size", s))?),
        None => None,
    };
    Ok(FileMetadata {
        commit,
        etag,
        size,
        linked: linked_etag.is_some(),
    })
}

/// The size to expect and the hash to verify, reconciling the file headers with the
/// listing. Disagreement between the two means a confused server, reported as such.
pub(crate) fn expectations(
    file: &RepoFilePath,
    meta: &FileMetadata,
    listed: Option<&RepoFile>,
) -> HubResult<(u64, ExpectedHash)> {
    let inconsistent = |detail: String| HubError::BadResponse {
        action: format!("reading the metadata of {file}"),
        detail,
    };
    let size = match (meta.size, listed.and_then(|l| l.size)) {
        (Some(a), Some(b)) if a != b => {
            return Err(inconsistent(format!(
                "the file headers say {a} bytes, the file list says {b}"
            )))
        }
        (Some(a), _) => a,
        (None, Some(b)) => b,
        (None, None) => {
            return Err(inconsistent(
                "no size (X-Linked-Size or Content-Length)".into(),
            ))
        }
    };
    let lfs = listed.and_then(|l| l.lfs_sha256.as_deref());
    let expected = if let Some(lfs) = lfs {
        if meta.etag.is_sha256() && !meta.etag.as_str().eq_ignore_ascii_case(lfs) {
            return Err(inconsistent(format!(
                "X-Linked-Etag {} differs from the LFS SHA-256 {lfs} in the file list",
                meta.etag
            )));
        }
        ExpectedHash::Sha256(lfs.to_string())
    } else if meta.linked && meta.etag.is_sha256() {
        ExpectedHash::Sha256(meta.etag.as_str().to_ascii_lowercase())
    } else if !meta.linked
        && meta.etag.is_git_sha1()
        && listed.and_then(|l| l.blob_id.as_deref()) == Some(meta.etag.as_str())
    {
        // Only when the ETag and the listed git blob id agree is it surely the git hash of
        // the content; otherwise a valid file could be rejected.
        ExpectedHash::GitSha1(meta.etag.as_str().to_ascii_lowercase())
    } else {
        ExpectedHash::None
    };
    Ok((size, expected))
}
