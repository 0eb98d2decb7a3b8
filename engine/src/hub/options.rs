//! How a download behaves: progress sink, pause/cancel token, retries, parallelism.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::progress::ProgressSink;

/// Options for [`HubClient::download_snapshot`](super::HubClient::download_snapshot).
#[derive(Clone, Debug)]
pub struct DownloadOptions {
    /// Where progress events go.
    pub progress: ProgressSink,
    /// Cancelling this token pauses the download: transfers stop, partial files stay in the
    /// cache as `*.incomplete`, and the next download (even in a new process) resumes them.
    /// To also delete them, call
    /// [`HubClient::discard_partial_downloads`](super::HubClient::discard_partial_downloads).
    pub cancel: CancellationToken,
    /// How many times one file's transfer is retried after a dropped connection, a stall,
    /// HTTP 5xx or 429; each retry resumes from the bytes already on disk.
    pub max_retries: u32,
    /// The wait before the first retry; it doubles with each further retry (up to 30 s).
    pub retry_delay: Duration,
    /// Files transferred at once.
    pub parallel_files: usize,
    /// Check before downloading that the cache's disk has room for the rest of the model.
    pub check_disk_space: bool,
}

impl Default for DownloadOptions {
    fn default() -> Self {
        DownloadOptions {
            progress: ProgressSink::none(),
            cancel: CancellationToken::new(),
            max_retries: 5,
            retry_delay: Duration::from_secs(1),
            parallel_files: 2,
            check_disk_space: true,
        }
    }
}

impl DownloadOptions {
    /// Sends progress events to `progress`.
    pub fn with_progress(mut self, progress: ProgressSink) -> Self {
        self.progress = progress;
        self
    }

    /// Uses `cancel` to pause or cancel.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Sets the retry count and the first retry's delay.
    pub fn with_retries(mut self, max_retries: u32, retry_delay: Duration) -> Self {
        self.max_retries = max_retries;
        self.retry_delay = retry_delay;
        self
    }
}
