//! One file's resumable transfer into `blobs/<etag>`.
//!
//! Bytes are appended to `blobs/<etag>.incomplete`. A later attempt (a retry, or a new
//! process after a pause or crash) asks for `Range: bytes=<partial length>-`; a server that
//! answers 200 instead gets the partial file discarded and the file restarted. The running
//! hash covers the reused prefix too, and only a file with the announced size and hash is
//! renamed to its blob name, so `blobs/<etag>` is always complete and verified.

use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{HeaderMap, ACCEPT_ENCODING, CONTENT_RANGE, RANGE};
use reqwest::{StatusCode, Url};
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio_util::sync::CancellationToken;

use super::cache_layout::RepoCache;
use super::client::{cancellable, HubClient};
use super::error::{HubError, HubResult};
use super::lock::lock_blob;
use super::options::DownloadOptions;
use super::progress::{DownloadEvent, Tracker};
use super::repo_id::{RepoId, Revision};
use super::repo_path::{BlobEtag, RepoFilePath};
use super::verify::{hash_prefix, ContentHasher, ExpectedHash};

const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);
const WRITE_BUFFER: usize = 1 << 20;

/// Everything needed to fetch and verify one blob.
#[derive(Clone, Debug)]
pub(crate) struct BlobJob {
    pub(crate) repo: RepoId,
    pub(crate) revision: Revision,
    pub(crate) file: RepoFilePath,
    pub(crate) url: Url,
    pub(crate) etag: BlobEtag,
    pub(crate) size: u64,
    pub(crate) expected: ExpectedHash,
}

/// Whether a blob had to be downloaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fetched {
    Cached,
    Downloaded,
}

pub(crate) fn is_complete(blob: &Path, size: u64) -> bool {
    std::fs::metadata(blob).is_ok_and(|m| m.is_file() && m.len() == size)
}

impl HubClient {
    /// Makes `blobs/<etag>` exist, complete and verified, downloading what is missing.
    pub(crate) async fn fetch_blob(
        &self,
        cache: &RepoCache,
        job: &BlobJob,
        options: &DownloadOptions,
        tracker: &Tracker,
    ) -> HubResult<Fetched> {
        let blob = cache.blob_path(&job.etag);
        if is_complete(&blob, job.size) {
            return Ok(Fetched::Cached);
        }
        let blobs = cache.blobs_dir();
        std::fs::create_dir_all(&blobs).map_err(|e| HubError::io("create", &blobs, e))?;
        let _lock = lock_blob(cache.lock_path(&job.etag), &options.cancel).await?;
        // Another download may have finished it while we waited for the lock.
        if is_complete(&blob, job.size) {
            return Ok(Fetched::Cached);
        }
        let partial = cache.incomplete_path(&job.etag);
        let mut attempt = 0u32;
        let hasher = loop {
            match self
                .transfer_once(job, &partial, tracker, &options.cancel)
                .await
            {
                Ok(hasher) => break hasher,
                Err(e) if attempt < options.max_retries && retryable(&e) => {
                    attempt += 1;
                    let delay = options
                        .retry_delay
                        .saturating_mul(1 << (attempt - 1).min(10))
                        .min(MAX_RETRY_DELAY);
                    tracker.emit(DownloadEvent::Retrying {
                        file: job.file.to_string(),
                        attempt,
                        error: e.to_string(),
                        delay_ms: delay.as_millis() as u64,
                    });
                    cancellable(&options.cancel, tokio::time::sleep(delay)).await?;
                }
                Err(e) => return Err(e),
            }
        };

        let actual = std::fs::metadata(&partial)
            .map_err(|e| HubError::io("read", &partial, e))?
            .len();
        if actual != job.size {
            remove_quietly(&partial);
            return Err(HubError::SizeMismatch {
                file: job.file.to_string(),
                expected: job.size,
                actual,
            });
        }
        if let Err(e) = hasher.check(&job.expected, job.file.as_str()) {
            remove_quietly(&partial);
            return Err(e);
        }
        tokio::fs::rename(&partial, &blob)
            .await
            .map_err(|e| HubError::io("move the finished download to", &blob, e))?;
        Ok(Fetched::Downloaded)
    }

    /// One HTTP attempt: resume from the partial file's length, append until the end.
    /// Returns the hash state over the whole file; the caller checks size and hash.
    async fn transfer_once(
        &self,
        job: &BlobJob,
        partial: &Path,
        tracker: &Tracker,
        cancel: &CancellationToken,
    ) -> HubResult<ContentHasher> {
        let name = job.file.to_string();
        let mut start = tokio::fs::metadata(partial)
            .await
            .map(|m| m.len())
            .unwrap_or(0);
        if start > job.size {
            // Longer than the file can be: not a prefix of it.
            remove_quietly(partial);
            start = 0;
        }
        let mut hasher = hash_prefix_off_thread(partial, start, job).await?;
        tracker.file_started(&name, job.size, start);
        if start == job.size {
            if start == 0 {
                // An empty file needs no request, but it must exist to become a blob.
                tokio::fs::File::create(partial)
                    .await
                    .map_err(|e| HubError::io("create", partial, e))?;
            }
            return Ok(hasher);
        }

        let action = format!("download {name}");
        let mut request = self
            .inner
            .http
            .get(job.url.clone())
            .header(ACCEPT_ENCODING, "identity");
        if start > 0 {
            request = request.header(RANGE, format!("bytes={start}-"));
        }
        let response = cancellable(cancel, self.authorized(request, &job.url).send())
            .await?
            .map_err(|e| self.network_error(action.clone(), e))?;
        let status = response.status();
        let append = match status {
            StatusCode::PARTIAL_CONTENT => {
                if content_range_start(response.headers()) != Some(start) {
                    return Err(HubError::BadResponse {
                        action,
                        detail: format!("asked for bytes from {start}, got another range"),
                    });
                }
                true
            }
            StatusCode::OK => {
                if start > 0 {
                    // The server ignores Range and sends the whole file.
                    tracker.emit(DownloadEvent::RangeIgnored {
                        file: name.clone(),
                        discarded_bytes: start,
                    });
                    hasher = ContentHasher::new(&job.expected, job.size);
                    start = 0;
                    tracker.file_started(&name, job.size, 0);
                }
                start > 0
            }
            StatusCode::RANGE_NOT_SATISFIABLE => {
                // The server disagrees that our partial file is a prefix: start over.
                remove_quietly(partial);
                return Err(HubError::HttpStatus {
                    status: status.as_u16(),
                    action,
                });
            }
            _ => {
                return Err(self.status_error(
                    status,
                    response.headers(),
                    &job.repo,
                    &job.revision,
                    Some(&job.file),
                    &action,
                ))
            }
        };

        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(partial)
            .await
            .map_err(|e| HubError::io("open", partial, e))?;
        let mut writer = BufWriter::with_capacity(WRITE_BUFFER, file);
        let mut received = start;
        let mut body = response.bytes_stream();
        loop {
            let next = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    finish(&mut writer, partial).await?;
                    return Err(HubError::Cancelled);
                }
                next = body.next() => next,
            };
            let chunk = match next {
                None => break,
                Some(Ok(chunk)) => chunk,
                Some(Err(e)) => {
                    // Keep what arrived: it is a valid prefix the next attempt resumes from.
                    finish(&mut writer, partial).await?;
                    return Err(self.network_error(action, e));
                }
            };
            let len = chunk.len() as u64;
            if received + len > job.size {
                drop(writer);
                remove_quietly(partial);
                return Err(HubError::SizeMismatch {
                    file: name,
                    expected: job.size,
                    actual: received + len,
                });
            }
            writer
                .write_all(&chunk)
                .await
                .map_err(|e| HubError::io("write", partial, e))?;
            hasher.update(&chunk);
            received += len;
            tracker.advance(&name, len);
        }
        finish(&mut writer, partial).await?;
        if received < job.size {
            return Err(HubError::TransferInterrupted {
                file: name,
                received,
                expected: job.size,
            });
        }
        Ok(hasher)
    }
}

/// Transient failures, plus 416 (the partial file was just removed, so a retry starts over).
fn retryable(e: &HubError) -> bool {
    e.is_transient() || matches!(e, HubError::HttpStatus { status: 416, .. })
}

/// Flushes buffered bytes and syncs them, so a pause or crash keeps everything received.
async fn finish(writer: &mut BufWriter<tokio::fs::File>, path: &Path) -> HubResult<()> {
    writer
        .flush()
        .await
        .map_err(|e| HubError::io("write", path, e))?;
    writer
        .get_mut()
        .sync_data()
        .await
        .map_err(|e| HubError::io("write", path, e))
}

async fn hash_prefix_off_thread(path: &Path, len: u64, job: &BlobJob) -> HubResult<ContentHasher> {
    if len == 0 {
        return Ok(ContentHasher::new(&job.expected, job.size));
    }
    let (owned, expected, size) = (path.to_path_buf(), job.expected.clone(), job.size);
    tokio::task::spawn_blocking(move || hash_prefix(&owned, len, &expected, size))
        .await
        .map_err(|e| HubError::io("read", path, std::io::Error::other(e)))?
        .map_err(|e| HubError::io("read", path, e))
}

/// `Content-Range: bytes <start>-<end>/<total>` -> start.
fn content_range_start(headers: &HeaderMap) -> Option<u64> {
    let value = headers.get(CONTENT_RANGE)?.to_str().ok()?;
    let range = value.trim().strip_prefix("bytes")?.trim_start();
    range.split('-').next()?.trim().parse().ok()
}

fn remove_quietly(path: &Path) {
    // Already gone is fine; anything else leaves a file the next attempt truncates anyway.
    let _ = std::fs::remove_file(path);
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn parses_content_range() {
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_RANGE,
            HeaderValue::from_static("bytes 100-999/1000"),
        );
        assert_eq!(content_range_start(&h), Some(100));
        h.insert(CONTENT_RANGE, HeaderValue::from_static("bytes */1000"));
        assert_eq!(content_range_start(&h), None);
    }
}
