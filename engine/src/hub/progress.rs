//! Progress events for the app, the CLI and the server: what is planned, bytes done per file
//! and in total, rate and ETA.
//!
//! Events are built under a lock and handed to the caller's sink outside it, so a sink may
//! do anything (emit to the UI, print, send on a channel) without stalling other transfers.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

/// How often a transfer reports bytes; the last report of each file is always sent.
const REPORT_INTERVAL: Duration = Duration::from_millis(100);
/// The window the rate is measured over: long enough to smooth bursts, short enough to
/// follow a changing connection.
const RATE_WINDOW: Duration = Duration::from_secs(5);
/// Spacing of the rate samples.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(50);

/// Bytes done out of a total, with the current rate and the time left at that rate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ByteProgress {
    /// Bytes present so far (cached, resumed and downloaded).
    pub done: u64,
    /// Bytes when complete.
    pub total: u64,
    /// Download rate over the last few seconds, in bytes per second.
    pub bytes_per_sec: f64,
    /// Seconds left at the current rate; `None` until a rate is known.
    pub eta_secs: Option<f64>,
}

/// One file of a planned download.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlannedFile {
    /// Path inside the repository.
    pub file: String,
    /// Size in bytes.
    pub size: u64,
    /// Already complete in the cache: nothing to download.
    pub cached: bool,
}

/// What a download reports while it runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DownloadEvent {
    /// The files to fetch are known; sent once before any transfer.
    Planned {
        repo: String,
        commit: String,
        files: Vec<PlannedFile>,
        /// Size of all planned files.
        total_bytes: u64,
        /// Part of `total_bytes` already complete in the cache.
        cached_bytes: u64,
    },
    /// A file's transfer starts; `resumed_from` bytes of a partial file are reused.
    FileStarted {
        file: String,
        total_bytes: u64,
        resumed_from: u64,
    },
    /// Bytes arrived. Both counts only grow, except right after `RangeIgnored`.
    Progress {
        file: String,
        file_progress: ByteProgress,
        overall: ByteProgress,
    },
    /// The server ignored the resume request and sends the whole file: the partial file was
    /// discarded and the file restarts from zero.
    RangeIgnored { file: String, discarded_bytes: u64 },
    /// An attempt failed with a transient error; the transfer resumes after `delay_ms`.
    Retrying {
        file: String,
        attempt: u32,
        error: String,
        delay_ms: u64,
    },
    /// A file is complete, verified and linked into the snapshot.
    FileDone {
        file: String,
        bytes: u64,
        /// Nothing was downloaded: the verified blob was already in the cache.
        from_cache: bool,
    },
    /// Every planned file is in place.
    Finished {
        repo: String,
        commit: String,
        snapshot_dir: PathBuf,
        total_bytes: u64,
        /// Bytes that came over the network in this run.
        downloaded_bytes: u64,
        elapsed_ms: u64,
    },
}

/// Where download events go. Cheap to clone.
#[derive(Clone, Default)]
pub struct ProgressSink(Option<Arc<dyn Fn(DownloadEvent) + Send + Sync>>);

impl ProgressSink {
    /// Drops every event.
    pub fn none() -> Self {
        ProgressSink(None)
    }

    /// Calls `f` with each event, from the downloading task; `f` should return quickly.
    pub fn new(f: impl Fn(DownloadEvent) + Send + Sync + 'static) -> Self {
        ProgressSink(Some(Arc::new(f)))
    }

    /// Sends each event on a channel (events are dropped once the receiver is gone).
    pub fn channel(tx: tokio::sync::mpsc::UnboundedSender<DownloadEvent>) -> Self {
        Self::new(move |event| {
            let _ = tx.send(event);
        })
    }

    pub(crate) fn emit(&self, event: DownloadEvent) {
        if let Some(f) = &self.0 {
            f(event);
        }
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "ProgressSink(..)"
        } else {
            "ProgressSink(none)"
        })
    }
}

/// Bytes per second over a sliding window of (time, bytes transferred) samples.
#[derive(Debug)]
pub(crate) struct RateMeter {
    samples: VecDeque<(Instant, u64)>,
    transferred: u64,
}

impl RateMeter {
    pub(crate) fn new(now: Instant) -> Self {
        let mut samples = VecDeque::new();
        samples.push_back((now, 0));
        RateMeter {
            samples,
            transferred: 0,
        }
    }

    pub(crate) fn add(&mut self, bytes: u64, now: Instant) {
        self.transferred += bytes;
        // One sample per interval is enough for the rate and keeps the window small at
        // hundreds of chunks per second.
        let due = self
            .samples
            .back()
            .is_none_or(|(t, _)| now.duration_since(*t) >= SAMPLE_INTERVAL);
        if !due {
            return;
        }
        self.samples.push_back((now, self.transferred));
        // Keep one sample older than the window so the rate spans the whole window.
        while self.samples.len() > 2 && now.duration_since(self.samples[1].0) > RATE_WINDOW {
            self.samples.pop_front();
        }
    }

    pub(crate) fn rate(&self, now: Instant) -> f64 {
        let (t0, b0) = self.samples.front().copied().unwrap_or((now, 0));
        let secs = now.duration_since(t0).as_secs_f64();
        if secs < 0.05 {
            return 0.0;
        }
        (self.transferred - b0) as f64 / secs
    }
}

pub(crate) fn byte_progress(done: u64, total: u64, rate: f64) -> ByteProgress {
    let remaining = total.saturating_sub(done);
    let eta_secs = if remaining == 0 {
        Some(0.0)
    } else if rate > 0.0 {
        Some(remaining as f64 / rate)
    } else {
        None
    };
    ByteProgress {
        done,
        total,
        bytes_per_sec: rate,
        eta_secs,
    }
}

/// Per-file and overall byte counts of one snapshot download, shared by its transfers.
pub(crate) struct Tracker {
    sink: ProgressSink,
    state: Mutex<TrackerState>,
}

struct TrackerState {
    overall_total: u64,
    overall_done: u64,
    downloaded: u64,
    overall_rate: RateMeter,
    files: HashMap<String, FileState>,
}

struct FileState {
    done: u64,
    total: u64,
    rate: RateMeter,
    last_report: Option<Instant>,
}

impl Tracker {
    pub(crate) fn new(sink: ProgressSink, overall_total: u64, cached: u64) -> Self {
        Tracker {
            sink,
            state: Mutex::new(TrackerState {
                overall_total,
                overall_done: cached,
                downloaded: 0,
                overall_rate: RateMeter::new(Instant::now()),
                files: HashMap::new(),
            }),
        }
    }

    pub(crate) fn emit(&self, event: DownloadEvent) {
        self.sink.emit(event);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TrackerState> {
        // A panicking sink cannot leave the counts half-updated, so a poisoned lock is safe.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A file starts (or restarts) at `start` bytes out of `total`.
    pub(crate) fn file_started(&self, file: &str, total: u64, start: u64) {
        {
            let mut s = self.lock();
            let previous = s
                .files
                .insert(
                    file.to_string(),
                    FileState {
                        done: start,
                        total,
                        rate: RateMeter::new(Instant::now()),
                        last_report: None,
                    },
                )
                .map(|f| f.done)
                .unwrap_or(0);
            s.overall_done = (s.overall_done + start).saturating_sub(previous);
        }
        self.emit(DownloadEvent::FileStarted {
            file: file.to_string(),
            total_bytes: total,
            resumed_from: start,
        });
    }

    /// `bytes` more of `file` were written.
    pub(crate) fn advance(&self, file: &str, bytes: u64) {
        let now = Instant::now();
        let event = {
            let mut s = self.lock();
            s.overall_done += bytes;
            s.downloaded += bytes;
            s.overall_rate.add(bytes, now);
            let overall_rate = s.overall_rate.rate(now);
            let (overall_done, overall_total) = (s.overall_done, s.overall_total);
            let Some(f) = s.files.get_mut(file) else {
                return;
            };
            f.done += bytes;
            f.rate.add(bytes, now);
            let finished = f.done >= f.total;
            let due = f
                .last_report
                .is_none_or(|t| now.duration_since(t) >= REPORT_INTERVAL);
            if !(finished || due) {
                return;
            }
            f.last_report = Some(now);
            DownloadEvent::Progress {
                file: file.to_string(),
                file_progress: byte_progress(f.done, f.total, f.rate.rate(now)),
                overall: byte_progress(overall_done, overall_total, overall_rate),
            }
        };
        self.emit(event);
    }

    /// Counts `bytes` as done without a transfer (a blob another download just finished).
    pub(crate) fn credit(&self, bytes: u64) {
        self.lock().overall_done += bytes;
    }

    /// Bytes that came over the network so far.
    pub(crate) fn downloaded(&self) -> u64 {
        self.lock().downloaded
    }
}

/// `1536` -> `1.5 KiB`; for messages.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_bytes() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }

    #[test]
    fn rate_and_eta() {
        let t0 = Instant::now();
        let mut m = RateMeter::new(t0);
        m.add(1000, t0 + Duration::from_secs(1));
        m.add(1000, t0 + Duration::from_secs(2));
        let r = m.rate(t0 + Duration::from_secs(2));
        assert!((r - 1000.0).abs() < 1e-6, "{r}");
        let p = byte_progress(2000, 12000, r);
        assert_eq!(p.eta_secs, Some(10.0));
        assert_eq!(byte_progress(5, 5, 0.0).eta_secs, Some(0.0));
        assert_eq!(byte_progress(0, 5, 0.0).eta_secs, None);
    }

    #[test]
    fn rate_window_forgets_old_samples() {
        let t0 = Instant::now();
        let mut m = RateMeter::new(t0);
        m.add(1_000_000, t0 + Duration::from_secs(1));
        for s in 2..=20 {
            m.add(10, t0 + Duration::from_secs(s));
        }
        let r = m.rate(t0 + Duration::from_secs(20));
        assert!(r < 20.0, "old burst still counted: {r}");
    }

    #[test]
    fn tracker_counts_are_monotone_and_complete() {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = {
            let events = events.clone();
            ProgressSink::new(move |e| events.lock().unwrap().push(e))
        };
        let t = Tracker::new(sink, 300, 100);
        t.file_started("a", 200, 50);
        for _ in 0..15 {
            t.advance("a", 10);
        }
        let events = events.lock().unwrap();
        let mut last = 0;
        for e in events.iter() {
            if let DownloadEvent::Progress { overall, .. } = e {
                assert!(overall.done >= last);
                last = overall.done;
            }
        }
        assert_eq!(last, 300);
        assert_eq!(t.downloaded(), 150);
    }
}
