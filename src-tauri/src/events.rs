//! Emitting IPC events (ui/IPC.md "Events") and keeping them at the rates the UI expects:
//! `chat-token` batched to at most ~30 per second, `prefill-progress` every 100-250 ms,
//! `download-progress` every 250-500 ms (`stats` has its own ticker in `stats.rs`).
//!
//! Events go through an [`EventSink`] so the back end runs without a window in tests: the app
//! emits to every webview with `AppHandle::emit`, tests record what would have been sent.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::store::DownloadProgress;
use crate::types::{
    GenerationDoneEvent, ModelStatus, PrefillProgressEvent, ServerStatus, StatsSnapshot, TokenEvent,
};

/// Event names, as the UI listens to them.
pub mod names {
    /// A streamed chunk of an answer.
    pub const CHAT_TOKEN: &str = "chat-token";
    /// A generation ended.
    pub const CHAT_DONE: &str = "chat-done";
    /// Prefill progress.
    pub const PREFILL_PROGRESS: &str = "prefill-progress";
    /// Live statistics.
    pub const STATS: &str = "stats";
    /// Download progress.
    pub const DOWNLOAD_PROGRESS: &str = "download-progress";
    /// Model load state.
    pub const MODEL_STATUS: &str = "model-status";
    /// Server state.
    pub const SERVER_STATUS: &str = "server-status";
}

/// Shortest gap between two `chat-token` events of one generation (≤ 30 per second).
pub const TOKEN_INTERVAL: Duration = Duration::from_millis(34);
/// Gap between `prefill-progress` events while running.
pub const PREFILL_INTERVAL: Duration = Duration::from_millis(150);
/// Gap between `download-progress` events of a running download.
pub const DOWNLOAD_INTERVAL: Duration = Duration::from_millis(300);

/// Where events go.
pub trait EventSink: Send + Sync + 'static {
    /// Sends `payload` as event `name` to every window.
    fn emit_json(&self, name: &'static str, payload: serde_json::Value);
}

/// Emits to the app's webviews.
pub struct TauriSink(pub tauri::AppHandle);

impl EventSink for TauriSink {
    fn emit_json(&self, name: &'static str, payload: serde_json::Value) {
        use tauri::Emitter;
        if let Err(e) = self.0.emit(name, payload) {
            eprintln!("kivi-chat: cannot emit {name}: {e}");
        }
    }
}

/// Keeps every event, for tests.
#[derive(Default)]
pub struct RecordingSink {
    events: Mutex<Vec<(&'static str, serde_json::Value)>>,
}

impl RecordingSink {
    /// Everything emitted so far, in order.
    pub fn events(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The payloads of one event, in order.
    #[allow(dead_code)]
    pub fn payloads(&self, name: &str) -> Vec<serde_json::Value> {
        self.events()
            .into_iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, p)| p)
            .collect()
    }
}

impl EventSink for RecordingSink {
    fn emit_json(&self, name: &'static str, payload: serde_json::Value) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name, payload));
    }
}

/// Typed emitters over a sink. Cheap to clone.
#[derive(Clone)]
pub struct Events(Arc<dyn EventSink>);

impl Events {
    /// Emitters over `sink`.
    pub fn new(sink: Arc<dyn EventSink>) -> Self {
        Self(sink)
    }

    fn emit(&self, name: &'static str, payload: &impl Serialize) {
        match serde_json::to_value(payload) {
            Ok(value) => self.0.emit_json(name, value),
            Err(e) => eprintln!("kivi-chat: cannot serialize {name}: {e}"),
        }
    }

    /// `chat-token`.
    pub fn token(&self, event: &TokenEvent) {
        self.emit(names::CHAT_TOKEN, event);
    }

    /// `chat-done`.
    pub fn done(&self, event: &GenerationDoneEvent) {
        self.emit(names::CHAT_DONE, event);
    }

    /// `prefill-progress`.
    pub fn prefill(&self, event: &PrefillProgressEvent) {
        self.emit(names::PREFILL_PROGRESS, event);
    }

    /// `stats`.
    pub fn stats(&self, snapshot: &StatsSnapshot) {
        self.emit(names::STATS, snapshot);
    }

    /// `download-progress`.
    pub fn download(&self, progress: &DownloadProgress) {
        self.emit(names::DOWNLOAD_PROGRESS, progress);
    }

    /// `model-status`.
    pub fn model_status(&self, status: &ModelStatus) {
        self.emit(names::MODEL_STATUS, status);
    }

    /// `server-status`.
    pub fn server_status(&self, status: &ServerStatus) {
        self.emit(names::SERVER_STATUS, status);
    }
}

/// Joins decoded text into `chat-token` deltas at most every [`TOKEN_INTERVAL`].
pub struct TokenBatcher {
    pending: String,
    last_emit: Option<Instant>,
    interval: Duration,
}

impl TokenBatcher {
    /// A batcher with the default interval.
    pub fn new() -> Self {
        Self::with_interval(TOKEN_INTERVAL)
    }

    /// A batcher emitting at most every `interval`.
    pub fn with_interval(interval: Duration) -> Self {
        Self {
            pending: String::new(),
            last_emit: None,
            interval,
        }
    }

    /// Adds text; returns the delta to emit now, if it is time.
    pub fn push(&mut self, text: &str, now: Instant) -> Option<String> {
        self.pending.push_str(text);
        if self.pending.is_empty() {
            return None;
        }
        match self.last_emit {
            Some(t) if now.duration_since(t) < self.interval => None,
            _ => self.take(now),
        }
    }

    /// When the pending text must go out at the latest (`None`: nothing pending).
    pub fn deadline(&self) -> Option<Instant> {
        if self.pending.is_empty() {
            None
        } else {
            Some(
                self.last_emit
                    .map_or_else(Instant::now, |t| t + self.interval),
            )
        }
    }

    /// Whatever is pending, now.
    pub fn take(&mut self, now: Instant) -> Option<String> {
        if self.pending.is_empty() {
            return None;
        }
        self.last_emit = Some(now);
        Some(std::mem::take(&mut self.pending))
    }
}

impl Default for TokenBatcher {
    fn default() -> Self {
        Self::new()
    }
}

/// Lets an event through at most every `interval` (the first one always).
pub struct Throttle {
    last: Option<Instant>,
    interval: Duration,
}

impl Throttle {
    /// A throttle with this interval.
    pub fn new(interval: Duration) -> Self {
        Self {
            last: None,
            interval,
        }
    }

    /// Whether to emit now (and if so, counts it as emitted).
    pub fn ready(&mut self, now: Instant) -> bool {
        match self.last {
            Some(t) if now.duration_since(t) < self.interval => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_batched_to_the_interval() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut b = TokenBatcher::with_interval(Duration::from_millis(34));
        assert_eq!(b.push("The", ms(0)).as_deref(), Some("The"));
        assert_eq!(b.push(" whale", ms(10)), None);
        assert_eq!(b.push(" is", ms(20)), None);
        assert_eq!(b.deadline(), Some(ms(34)));
        assert_eq!(b.push(" white", ms(40)).as_deref(), Some(" whale is white"));
        assert_eq!(b.deadline(), None);
        assert_eq!(b.push("", ms(100)), None, "nothing to send");
        assert_eq!(b.push(".", ms(101)).as_deref(), Some("."));
        b.push("!", ms(102));
        assert_eq!(b.take(ms(103)).as_deref(), Some("!"));
        assert_eq!(b.take(ms(104)), None);

        // 1000 tokens/s for one second become at most ~30 events.
        let mut b = TokenBatcher::new();
        let events = (0..1000).filter(|i| b.push("x", ms(*i)).is_some()).count();
        assert!(events <= 30, "{events}");
    }

    #[test]
    fn throttle_spaces_events() {
        let t0 = Instant::now();
        let mut t = Throttle::new(Duration::from_millis(100));
        assert!(t.ready(t0));
        assert!(!t.ready(t0 + Duration::from_millis(50)));
        assert!(t.ready(t0 + Duration::from_millis(100)));
    }
}
