//! What runs in each chat: at most one generation or prefill job (others get `busy`), with
//! the switch that stops it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use kivi_engine::session::CancelHandle;

use crate::error::CommandError;

/// A generation (send, regenerate, edit) or a `prefill_chat` job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// An answer is being written.
    Generation,
    /// The chat's prompt is being read into its cache.
    Prefill,
}

/// A running job's handle.
#[derive(Clone)]
pub struct Job {
    /// The generation id or prefill job id.
    pub id: String,
    /// What it is.
    pub kind: JobKind,
    /// Set by `stop_generation` (or `delete_chat`), checked by the job's event pump.
    stop: Arc<AtomicBool>,
    /// The engine's switch, once the request was queued.
    cancel: Arc<Mutex<Option<CancelHandle>>>,
    /// A generation's answer so far (message id, text), its one copy while it streams: the
    /// event pump writes it and saves it to the store once a second, and `get_chat` reads
    /// it, so that a chat opened mid-answer shows all of it.
    answer: Arc<Mutex<Option<(String, String)>>>,
}

impl Job {
    /// Asks the job to stop: the engine stops before its next prefill chunk or token.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(cancel) = self
            .cancel
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            cancel.cancel();
        }
    }

    /// Whether a stop was asked for.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Connects the engine's cancel switch (a stop asked for before applies at once).
    pub fn attach(&self, cancel: CancelHandle) {
        if self.stop_requested() {
            cancel.cancel();
        }
        *self.cancel.lock().unwrap_or_else(|p| p.into_inner()) = Some(cancel);
    }

    /// Appends streamed text to the answer `message_id` is writing.
    pub fn stream(&self, message_id: &str, text: &str) {
        let mut answer = self.answer.lock().unwrap_or_else(|p| p.into_inner());
        match answer.as_mut() {
            Some((id, so_far)) if id == message_id => so_far.push_str(text),
            _ => *answer = Some((message_id.to_string(), text.to_string())),
        }
    }

    /// The answer so far (message id, text), once a token was streamed.
    pub fn answer(&self) -> Option<(String, String)> {
        self.answer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Every chat's running job.
#[derive(Default)]
pub struct Jobs {
    running: Mutex<HashMap<String, Job>>,
}

impl Jobs {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Job>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims the chat for a new job, or says what already runs there.
    pub fn begin(&self, chat_id: &str, id: String, kind: JobKind) -> Result<Job, CommandError> {
        let mut map = self.map();
        if let Some(running) = map.get(chat_id) {
            return Err(busy_error(running.kind));
        }
        let job = Job {
            id,
            kind,
            stop: Arc::new(AtomicBool::new(false)),
            cancel: Arc::new(Mutex::new(None)),
            answer: Arc::new(Mutex::new(None)),
        };
        map.insert(chat_id.to_string(), job.clone());
        Ok(job)
    }

    /// Releases the chat, if `job_id` is still what runs there.
    pub fn end(&self, chat_id: &str, job_id: &str) {
        let mut map = self.map();
        if map.get(chat_id).is_some_and(|j| j.id == job_id) {
            map.remove(chat_id);
        }
    }

    /// The chat's running job.
    pub fn get(&self, chat_id: &str) -> Option<Job> {
        self.map().get(chat_id).cloned()
    }

    /// Fails with `busy` while the chat runs a job of `kind` (any kind when `None`).
    pub fn ensure_idle(&self, chat_id: &str, kind: Option<JobKind>) -> Result<(), CommandError> {
        match self.map().get(chat_id) {
            Some(job) if kind.is_none_or(|k| k == job.kind) => Err(busy_error(job.kind)),
            _ => Ok(()),
        }
    }

    /// Whether any chat runs a generation.
    pub fn any_generation(&self) -> bool {
        self.map().values().any(|j| j.kind == JobKind::Generation)
    }

    /// Stops every job.
    pub fn stop_all(&self) {
        for job in self.map().values() {
            job.stop();
        }
    }
}

fn busy_error(kind: JobKind) -> CommandError {
    CommandError::busy(match kind {
        JobKind::Generation => {
            "An answer is still being written in this chat. Stop it (Esc) or wait for it to finish."
        }
        JobKind::Prefill => {
            "This chat is still reading its documents. Wait for it to finish, or stop it."
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn one_job_per_chat() {
        let jobs = Jobs::default();
        let a = jobs.begin("1", "g1".into(), JobKind::Generation).unwrap();
        assert_eq!(
            jobs.begin("1", "p1".into(), JobKind::Prefill)
                .err()
                .unwrap()
                .code,
            ErrorCode::Busy
        );
        jobs.begin("2", "p2".into(), JobKind::Prefill).unwrap();
        assert!(jobs.any_generation());
        assert!(jobs.ensure_idle("2", Some(JobKind::Generation)).is_ok());
        assert!(jobs.ensure_idle("2", None).is_err());
        // Only the job that holds the chat releases it.
        jobs.end("1", "other");
        assert!(jobs.get("1").is_some());
        a.stop();
        assert!(jobs.get("1").unwrap().stop_requested());
        jobs.end("1", "g1");
        assert!(jobs.get("1").is_none());
        assert!(!jobs.any_generation());
    }
}
