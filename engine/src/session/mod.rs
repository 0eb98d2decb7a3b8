//! Generation sessions: the async API the app, the CLI and the server drive.
//!
//! [`Engine::load`] starts a dedicated model thread (MLX arrays are not shared across
//! threads) that owns the model, its tokenizer and the KV caches of recent conversations.
//! [`Engine::generate`] queues a [`Request`] and returns a [`Generation`]: a stream of
//! [`Event`]s (prefill progress, tokens, statistics, done) and a cancel switch checked
//! before every prefill chunk and every decoded token.
//!
//! For an app with several chats, [`Engine::generate_in`] runs a request in a named
//! conversation's own cache (kept until evicted or dropped with
//! [`Engine::drop_conversation`]; [`Engine::conversations`] describes them), and a request
//! with `max_tokens: 0` only prefills its prompt into that cache, so that the next question
//! starts at once.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kivi_engine::session::EngineError> {
//! use kivi_engine::session::{Engine, EngineOptions, Event, ModelSource, Request};
//! use kivi_engine::tokenizer::{Message, Role};
//!
//! let engine = Engine::load(EngineOptions::new(ModelSource::Path("model.gguf".into()))).await?;
//! let mut generation = engine.generate(Request::chat(vec![Message::new(Role::User, "Hi!")]));
//! while let Some(event) = generation.next().await {
//!     if let Event::Token { text, .. } = event {
//!         print!("{text}");
//!     }
//! }
//! # Ok(()) }
//! ```

mod conversation;
mod error;
mod options;
pub mod prefix;
pub mod prompt;
pub mod request;
mod saved;
mod worker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

pub use crate::cache::CacheConfig;
pub use conversation::ConversationCache;
pub use error::EngineError;
pub use options::{EngineOptions, DEFAULT_STATS_INTERVAL};
pub use request::{Document, Event, FinishReason, ModelSource, Prompt, Request};
pub use saved::SavedConversation;

use crate::backend::Backend;
use crate::error::LoadError;
use crate::loader::{load_local, ModelInfo};
use worker::{Command, Worker};

/// A loaded model behind its thread. Cheap to share behind an `Arc`; requests run one at
/// a time in the order they were made.
///
/// Dropping the engine stops the model thread (a running generation ends as cancelled)
/// and waits for it to free the model.
pub struct Engine {
    /// `None` only while dropping, to close the channel before joining.
    commands: Option<mpsc::UnboundedSender<Command>>,
    shutdown: Arc<AtomicBool>,
    worker: Option<std::thread::JoinHandle<()>>,
    info: ModelInfo,
    context_length: usize,
}

impl Engine {
    /// Loads the model on a new thread and waits until it is ready.
    pub async fn load(options: EngineOptions) -> Result<Engine, EngineError> {
        let path = match &options.source {
            ModelSource::Path(path) => path.clone(),
            ModelSource::Hub {
                repo_id,
                revision,
                file,
            } => resolve_hub(repo_id, revision.as_deref(), file.as_deref(), &options).await?,
        };
        let (ready_tx, ready_rx) = oneshot::channel();
        let (commands, command_rx) = mpsc::unbounded_channel();
        let shutdown = Arc::new(AtomicBool::new(false));
        let worker_shutdown = shutdown.clone();
        let worker = std::thread::Builder::new()
            .name("kivi-model".into())
            .spawn(move || {
                let backend = options
                    .backend
                    .map_or_else(Backend::chosen, Ok)
                    .map_err(LoadError::from);
                let loaded = backend.and_then(|backend| {
                    let (cache, available) = (&options.cache, options.available_memory);
                    let fitted = if options.fit_context {
                        let need =
                            crate::budget::longest_context(&path, cache, &backend, available)?;
                        Some(need.context)
                    } else {
                        let context = options.context_length;
                        crate::budget::check_fits(&path, context, cache, &backend, available)?;
                        None
                    };
                    Ok((load_local(&path, backend)?, fitted))
                });
                let (loaded, fitted) = match loaded {
                    Ok(loaded) => loaded,
                    Err(e) => {
                        let _ = ready_tx.send(Err(EngineError::Load(e)));
                        return;
                    }
                };
                let max = loaded.info.config.context_length;
                let context_length = fitted.or(options.context_length).unwrap_or(max);
                if context_length > max {
                    let _ = ready_tx.send(Err(EngineError::ContextTooLong {
                        requested: context_length,
                        max,
                    }));
                    return;
                }
                let _ = ready_tx.send(Ok((loaded.info.clone(), context_length)));
                Worker::new(loaded, options, context_length, worker_shutdown).run(command_rx);
            })
            .map_err(EngineError::Spawn)?;
        let (info, context_length) = ready_rx.await.map_err(|_| EngineError::WorkerGone)??;
        Ok(Engine {
            commands: Some(commands),
            shutdown,
            worker: Some(worker),
            info,
            context_length,
        })
    }

    fn send(&self, command: Command) -> Result<(), EngineError> {
        self.commands
            .as_ref()
            .ok_or(EngineError::WorkerGone)?
            .send(command)
            .map_err(|_| EngineError::WorkerGone)
    }

    /// What was loaded.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The context window in tokens.
    pub fn context_length(&self) -> usize {
        self.context_length
    }

    /// Starts a generation; its events arrive on the returned handle.
    pub fn generate(&self, request: Request) -> Generation {
        self.start(request, None)
    }

    /// Starts a generation in `conversation`'s own KV cache: it reuses what that cache holds
    /// of its prompt, and only that conversation's requests (or eviction, when more than
    /// `max_cached_conversations` are in use) touch the cache. A cache built with other
    /// settings than `request.cache` is rebuilt. `max_tokens: 0` prefills the prompt only.
    pub fn generate_in(&self, conversation: impl Into<String>, request: Request) -> Generation {
        self.start(request, Some(conversation.into()))
    }

    fn start(&self, request: Request, conversation: Option<String>) -> Generation {
        let (events_tx, events) = mpsc::unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let sent = self.send(Command::Generate {
            request: Box::new(request),
            conversation,
            events: events_tx.clone(),
            cancel: cancel.clone(),
        });
        if sent.is_err() {
            let _ = events_tx.send(Event::Error {
                message: EngineError::WorkerGone.to_string(),
            });
        }
        Generation { events, cancel }
    }

    /// Number of tokens `text` encodes to (no special tokens added).
    pub async fn count_tokens(&self, text: impl Into<String>) -> Result<usize, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::CountTokens {
            text: text.into(),
            reply,
        })?;
        answer.await.map_err(|_| EngineError::WorkerGone)?
    }

    /// Number of tokens `prompt` renders to (chat template and documents included), as a
    /// request with it would count them.
    pub async fn count_prompt(&self, prompt: &Prompt) -> Result<usize, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::CountPrompt {
            prompt: Box::new(prompt.clone()),
            reply,
        })?;
        answer.await.map_err(|_| EngineError::WorkerGone)?
    }

    /// Drops every cached conversation (frees the KV memory).
    pub fn clear_cache(&self) -> Result<(), EngineError> {
        self.send(Command::ClearCache)
    }

    /// Drops one conversation's cache (a no-op when it has none). Requests already queued
    /// run first.
    pub fn drop_conversation(&self, conversation: impl Into<String>) -> Result<(), EngineError> {
        self.send(Command::DropConversation {
            conversation: conversation.into(),
        })
    }

    /// Writes `conversation`'s cache and the tokens it holds to the cache file `path`
    /// (through a synced temporary file and a rename), after the requests queued before this
    /// call; `extra` entries are stored with it and given back by
    /// [`Engine::restore_conversation`]. `Ok(None)` when no cache holds the conversation.
    pub fn save_conversation(
        &self,
        conversation: impl Into<String>,
        path: impl Into<std::path::PathBuf>,
        extra: std::collections::BTreeMap<String, String>,
    ) -> impl std::future::Future<Output = Result<Option<SavedConversation>, EngineError>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.send(Command::SaveConversation {
            conversation: conversation.into(),
            path: path.into(),
            extra,
            reply,
        });
        async move {
            sent?;
            answer.await.map_err(|_| EngineError::WorkerGone)?
        }
    }

    /// Reads a file written by [`Engine::save_conversation`] into `conversation`'s cache, so
    /// that its next request reuses what the file holds of its prompt. The file must have
    /// been made for this model (same weights, same backend) with cache settings `cache`;
    /// anything else, or a damaged file, is refused with [`EngineError::CacheFile`].
    /// `Ok(None)` when a live cache holds the conversation already (it is newer). The
    /// command is queued at once, so a request started after this call finds the cache.
    pub fn restore_conversation(
        &self,
        conversation: impl Into<String>,
        path: impl Into<std::path::PathBuf>,
        cache: CacheConfig,
    ) -> impl std::future::Future<Output = Result<Option<SavedConversation>, EngineError>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.send(Command::RestoreConversation {
            conversation: conversation.into(),
            path: path.into(),
            cache,
            reply,
        });
        async move {
            sent?;
            answer.await.map_err(|_| EngineError::WorkerGone)?
        }
    }

    /// The caches of the named conversations (see [`Engine::generate_in`]), answered after
    /// the requests queued before this call.
    pub async fn conversations(&self) -> Result<Vec<ConversationCache>, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Conversations { reply })?;
        answer.await.map_err(|_| EngineError::WorkerGone)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Joining matters at process exit: MLX must not be freeing the model's arrays on
        // the model thread while the main thread runs MLX's static destructors.
        self.shutdown.store(true, Ordering::Relaxed);
        self.commands.take();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// A running generation: its events and its cancel switch.
pub struct Generation {
    events: mpsc::UnboundedReceiver<Event>,
    cancel: Arc<AtomicBool>,
}

/// Stops a generation from anywhere (another task, a signal handler, a UI button).
#[derive(Clone)]
pub struct CancelHandle(Arc<AtomicBool>);

impl CancelHandle {
    /// Asks the generation to stop before its next prefill chunk or token.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Generation {
    /// The next event; `None` after `Done` or `Error`.
    pub async fn next(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// The next event, for callers outside an async runtime.
    pub fn blocking_next(&mut self) -> Option<Event> {
        self.events.blocking_recv()
    }

    /// Stops the generation; a `Done` event with [`FinishReason::Cancelled`] follows.
    pub fn cancel(&self) {
        self.cancel_handle().cancel();
    }

    /// A handle that cancels this generation.
    pub fn cancel_handle(&self) -> CancelHandle {
        CancelHandle(self.cancel.clone())
    }
}

/// Downloads a hub repository (the files a safetensors checkpoint needs, or one GGUF
/// file) into the Hugging Face cache and returns the local path to load.
#[cfg(feature = "hub")]
async fn resolve_hub(
    repo_id: &str,
    revision: Option<&str>,
    file: Option<&str>,
    options: &EngineOptions,
) -> Result<std::path::PathBuf, EngineError> {
    use crate::hub::{DownloadOptions, FileSelection, HubClient, Revision, SnapshotRequest};
    let hub = |e: crate::hub::HubError| EngineError::Hub(e.to_string());
    let client = HubClient::from_env(options.hub_token.clone()).map_err(hub)?;
    let selection = match file {
        Some(f) => FileSelection::Gguf(f.to_string()),
        None => FileSelection::Runnable,
    };
    let mut request = SnapshotRequest::parse(repo_id, selection).map_err(hub)?;
    if let Some(rev) = revision {
        request = request.at_revision(Revision::parse(rev).map_err(hub)?);
    }
    let download = DownloadOptions::default().with_progress(options.download_progress.clone());
    let snapshot = client
        .download_snapshot(&request, &download)
        .await
        .map_err(hub)?;
    Ok(match file {
        Some(f) => snapshot.dir.join(f),
        None => snapshot.dir,
    })
}

/// A build without the `hub` feature (the fuzz targets) loads local files only.
#[cfg(not(feature = "hub"))]
async fn resolve_hub(
    repo_id: &str,
    _revision: Option<&str>,
    _file: Option<&str>,
    _options: &EngineOptions,
) -> Result<std::path::PathBuf, EngineError> {
    Err(EngineError::Hub(format!(
        "{repo_id}: this build of the engine cannot download (built without its `hub` feature)"
    )))
}
