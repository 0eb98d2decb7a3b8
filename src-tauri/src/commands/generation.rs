//! Messages and generation (`api/messages.ts`): send, regenerate, edit, stop.
//!
//! A question may ask for its answer as JSON ("answer as JSON" in the composer): the answer
//! is then a JSON object by constrained decoding, and regenerating it asks again as JSON.
//!
//! Each command checks everything first (chat, content, busy, model, context) so that on an
//! error nothing is stored, then stores the messages, queues the request on the engine in
//! the chat's own cache, and returns before the first `chat-token`.

use kivi_engine::grammar::OutputFormat;
use tauri::State;

use crate::error::{CommandError, CommandResult};
use crate::generation::{self, GenerationJob};
use crate::jobs::JobKind;
use crate::state::App;
use crate::store::{Chat, GenerationStarted, Message, MessageStatus, Role};

/// Which answer to write.
enum Ask {
    /// A new question.
    Send(String),
    /// The last question again.
    Regenerate,
    /// A question rewritten.
    Edit { message_id: String, content: String },
}

/// The history the answer continues, before anything is stored.
fn history(chat: &Chat, ask: &Ask) -> CommandResult<Vec<Message>> {
    match ask {
        Ask::Send(content) => {
            let mut messages = chat.messages.clone();
            messages.push(Message {
                id: String::new(),
                chat_id: chat.id.clone(),
                role: Role::User,
                content: content.clone(),
                status: MessageStatus::Complete,
                error: None,
                created_at: 0,
                stats: None,
            });
            Ok(messages)
        }
        Ask::Regenerate => {
            let last_user = chat
                .messages
                .iter()
                .rposition(|m| m.role == Role::User)
                .ok_or_else(|| {
                    CommandError::invalid(
                        "chatId",
                        "This chat has no question to answer again. Send a message first.",
                    )
                })?;
            Ok(chat.messages[..=last_user].to_vec())
        }
        Ask::Edit {
            message_id,
            content,
        } => {
            let at = chat
                .messages
                .iter()
                .position(|m| &m.id == message_id && m.role == Role::User)
                .ok_or_else(|| {
                    CommandError::not_found(
                        "That message no longer exists (or is not one of your questions). \
                         Reload the chat.",
                    )
                })?;
            let mut messages = chat.messages[..=at].to_vec();
            messages[at].content = content.clone();
            Ok(messages)
        }
    }
}

fn check_content(content: &str) -> CommandResult<()> {
    if content.trim().is_empty() {
        return Err(CommandError::invalid(
            "content",
            "The message is empty. Type a question first.",
        ));
    }
    Ok(())
}

/// Whether the answer `regenerate` replaces was a JSON object (asked for as JSON): then
/// the new one is asked for as JSON too.
fn answered_as_json(chat: &Chat) -> bool {
    let last_user = chat.messages.iter().rposition(|m| m.role == Role::User);
    chat.messages[last_user.map_or(0, |u| u + 1)..]
        .iter()
        .find(|m| m.role == Role::Assistant)
        .is_some_and(|m| {
            serde_json::from_str::<serde_json::Value>(&m.content).is_ok_and(|v| v.is_object())
        })
}

async fn start(
    app: &App,
    chat_id: String,
    ask: Ask,
    format: Option<OutputFormat>,
) -> CommandResult<GenerationStarted> {
    app.store.chat_summary(&chat_id)?;
    // A cache saved before a restart: read it back first, so this job reuses it.
    crate::disk_caches::restore(app, &chat_id).await;
    let chat = app.store.get_chat(&chat_id)?;
    match &ask {
        Ask::Send(content) | Ask::Edit { content, .. } => check_content(content)?,
        Ask::Regenerate => {}
    }
    let messages = history(&chat, &ask)?;
    let format = match ask {
        Ask::Regenerate if answered_as_json(&chat) => Some(OutputFormat::JsonObject),
        _ => format,
    };
    let generation_id = app.new_id("g");
    let job = app
        .jobs
        .begin(&chat_id, generation_id.clone(), JobKind::Generation)?;
    let prepared = async {
        let engine = app.model.engine()?;
        let plan = generation::plan_generation(app, &engine, &chat, &messages, format).await?;
        let (user, answer) = match &ask {
            Ask::Send(content) => {
                let (user, answer) = app.store.begin_send(&chat_id, content)?;
                (Some(user), answer)
            }
            Ask::Regenerate => (None, app.store.begin_regenerate(&chat_id)?.1),
            Ask::Edit {
                message_id,
                content,
            } => {
                let (edited, answer) = app.store.begin_edit(&chat_id, message_id, content)?;
                (Some(edited), answer)
            }
        };
        Ok::<_, CommandError>((engine, plan, user, answer))
    }
    .await;
    let (engine, plan, user, answer) = match prepared {
        Ok(p) => p,
        Err(e) => {
            app.jobs.end(&chat_id, &generation_id);
            return Err(e);
        }
    };
    let running = engine.generate_in(chat_id.clone(), plan.request.clone());
    job.attach(running.cancel_handle());
    let model_id = app.model.model_id().unwrap_or_default();
    generation::spawn_generation(
        app,
        running,
        GenerationJob {
            chat_id,
            job,
            message_id: answer.id.clone(),
            model_id,
        },
        &plan,
    );
    Ok(GenerationStarted {
        generation_id,
        user_message: user,
        assistant_message: answer,
    })
}

/// `send_message`.
pub async fn send(app: &App, chat_id: String, content: String) -> CommandResult<GenerationStarted> {
    start(app, chat_id, Ask::Send(content), None).await
}

/// `send_message` with `asJson`: the answer is a JSON object.
pub async fn send_as_json(
    app: &App,
    chat_id: String,
    content: String,
) -> CommandResult<GenerationStarted> {
    start(
        app,
        chat_id,
        Ask::Send(content),
        Some(OutputFormat::JsonObject),
    )
    .await
}

/// `regenerate`.
pub async fn answer_again(app: &App, chat_id: String) -> CommandResult<GenerationStarted> {
    start(app, chat_id, Ask::Regenerate, None).await
}

/// `edit_message`.
pub async fn edit(
    app: &App,
    chat_id: String,
    message_id: String,
    content: String,
) -> CommandResult<GenerationStarted> {
    start(
        app,
        chat_id,
        Ask::Edit {
            message_id,
            content,
        },
        None,
    )
    .await
}

/// `stop_generation`: a no-op when nothing runs.
pub async fn stop(app: &App, chat_id: String) -> CommandResult<()> {
    if let Some(job) = app.jobs.get(&chat_id) {
        job.stop();
    }
    Ok(())
}

#[tauri::command]
pub async fn send_message(
    app: State<'_, App>,
    chat_id: String,
    content: String,
    as_json: Option<bool>,
) -> CommandResult<GenerationStarted> {
    if as_json == Some(true) {
        send_as_json(&app, chat_id, content).await
    } else {
        send(&app, chat_id, content).await
    }
}

#[tauri::command]
pub async fn regenerate(app: State<'_, App>, chat_id: String) -> CommandResult<GenerationStarted> {
    answer_again(&app, chat_id).await
}

#[tauri::command]
pub async fn edit_message(
    app: State<'_, App>,
    chat_id: String,
    message_id: String,
    content: String,
) -> CommandResult<GenerationStarted> {
    edit(&app, chat_id, message_id, content).await
}

#[tauri::command]
pub async fn stop_generation(app: State<'_, App>, chat_id: String) -> CommandResult<()> {
    stop(&app, chat_id).await
}
