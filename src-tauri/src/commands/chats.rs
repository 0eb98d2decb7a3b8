//! Chats (`api/chats.ts`): list, create, open, rename, delete, system prompt, export.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tauri::State;

use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::state::App;
use crate::store::{Chat, ChatSummary, MessageStatus, Role};

/// `export_chat`'s formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ExportFormat {
    /// A Markdown transcript.
    Markdown,
    /// The chat as `get_chat` returns it.
    Json,
}

/// `list_chats`.
pub async fn list(app: &App, query: Option<String>) -> CommandResult<Vec<ChatSummary>> {
    Ok(app.store.list_chats(query.as_deref())?)
}

/// `create_chat`.
pub async fn create(
    app: &App,
    title: Option<String>,
    system_prompt: Option<String>,
) -> CommandResult<Chat> {
    let chat = app
        .store
        .create_chat(title.as_deref(), system_prompt.as_deref())?;
    Ok(app.chat_out(chat).await)
}

/// `get_chat`: the chat, with an answer being written as far as it has streamed; a cache
/// of it saved before a restart starts loading back in the background, so that its next
/// question starts at once.
pub async fn get(app: &App, chat_id: String) -> CommandResult<Chat> {
    let mut chat = app.store.get_chat(&chat_id)?;
    // The store saves a streaming answer once a second; the running job has all of it. Read
    // after the store, the job's text is never behind the saved one.
    if let Some((message_id, text)) = app.jobs.get(&chat_id).and_then(|job| job.answer()) {
        if let Some(message) = chat
            .messages
            .iter_mut()
            .find(|m| m.id == message_id && m.status == MessageStatus::Streaming)
        {
            message.content = text;
        }
    }
    if app.caches.get(&chat_id).is_none() {
        let app = app.clone();
        let id = chat_id.clone();
        tauri::async_runtime::spawn(async move {
            crate::disk_caches::restore(&app, &id).await;
        });
    }
    Ok(app.chat_out(chat).await)
}

/// `rename_chat`.
pub async fn rename(app: &App, chat_id: String, title: String) -> CommandResult<ChatSummary> {
    Ok(app.store.rename_chat(&chat_id, &title)?)
}

/// `delete_chat`: stops what runs in it, drops its cache, deletes it.
pub async fn delete(app: &App, chat_id: String) -> CommandResult<()> {
    app.store.chat_summary(&chat_id)?;
    if let Some(job) = app.jobs.get(&chat_id) {
        job.stop();
    }
    app.store.delete_chat(&chat_id)?;
    if let Some(engine) = app.model.loaded() {
        let _ = engine.drop_conversation(chat_id.clone());
    }
    app.caches.remove(&chat_id);
    crate::disk_caches::remove(app, &chat_id).await;
    app.live.forget_chat(&chat_id);
    app.emit_stats();
    Ok(())
}

/// `set_system_prompt`: the prompt's prefix changes, so the chat's cache goes.
pub async fn set_prompt(app: &App, chat_id: String, system_prompt: String) -> CommandResult<Chat> {
    app.store.chat_summary(&chat_id)?;
    app.jobs.ensure_idle(&chat_id, None)?;
    let chat = app.store.set_system_prompt(&chat_id, &system_prompt)?;
    app.drop_chat_cache(&chat_id);
    let chat = app.store.get_chat(&chat.id)?;
    Ok(app.chat_out(chat).await)
}

/// The Markdown transcript of a chat.
pub fn to_markdown(chat: &Chat) -> String {
    let mut out = format!("# {}\n\n", chat.title);
    if !chat.system_prompt.trim().is_empty() {
        for line in chat.system_prompt.lines() {
            out.push_str(&format!("> {line}\n"));
        }
        out.push('\n');
    }
    if !chat.documents.is_empty() {
        out.push_str("Documents:\n\n");
        for d in &chat.documents {
            out.push_str(&format!("- {} ({} tokens)\n", d.name, d.token_count));
        }
        out.push('\n');
    }
    for m in &chat.messages {
        out.push_str(match m.role {
            Role::User => "## You\n\n",
            Role::Assistant => "## Assistant\n\n",
        });
        out.push_str(m.content.trim_end());
        out.push('\n');
        let note = match m.status {
            MessageStatus::Stopped => Some("*(stopped)*".to_string()),
            MessageStatus::Interrupted => Some("*(interrupted)*".to_string()),
            MessageStatus::Error => Some(format!(
                "*(failed: {})*",
                m.error.as_deref().unwrap_or("unknown error")
            )),
            _ => None,
        };
        if let Some(note) = note {
            out.push_str(&format!("\n{note}\n"));
        }
        out.push('\n');
    }
    out
}

/// The JSON export: the chat as `get_chat` returns it, plus when and by what.
pub fn to_json(chat: &Chat, exported_at: u64) -> CommandResult<String> {
    let mut value = serde_json::to_value(chat)
        .map_err(|e| CommandError::internal(format!("Cannot export the chat: {e}.")))?;
    if let Some(map) = value.as_object_mut() {
        map.insert("exportedAt".into(), exported_at.into());
        map.insert(
            "app".into(),
            format!("KIVI Chat {}", env!("CARGO_PKG_VERSION")).into(),
        );
    }
    serde_json::to_string_pretty(&value)
        .map_err(|e| CommandError::internal(format!("Cannot export the chat: {e}.")))
}

/// A file name for the export: the title without characters file systems refuse.
pub fn file_name(title: &str, extension: &str) -> String {
    let cleaned: String = title
        .chars()
        .map(|c| {
            if c.is_control() || matches!(c, '/' | '\\' | ':' | '*' | '?' | '"' | '<' | '>' | '|') {
                '-'
            } else {
                c
            }
        })
        .collect();
    let cleaned = cleaned.trim().trim_matches('.');
    let stem = if cleaned.is_empty() { "chat" } else { cleaned };
    format!("{stem}.{extension}")
}

/// `export_chat`: asks where to save (native dialog), writes the file, returns its path.
pub async fn export(
    app: &App,
    chat_id: String,
    format: ExportFormat,
) -> CommandResult<Option<String>> {
    let chat = get(app, chat_id).await?;
    let (text, extension, filter) = match format {
        ExportFormat::Markdown => (to_markdown(&chat), "md", "Markdown"),
        ExportFormat::Json => (to_json(&chat, crate::runtime::now_ms())?, "json", "JSON"),
    };
    let desktop = app.desktop.clone();
    let name = file_name(&chat.title, extension);
    let path: Option<PathBuf> =
        tauri::async_runtime::spawn_blocking(move || desktop.save_file(&name, filter, extension))
            .await
            .map_err(|e| CommandError::internal(format!("The save dialog failed: {e}.")))?
            .map_err(|e| CommandError::internal(format!("No save dialog is available: {e}.")))?;
    let Some(path) = path else {
        return Ok(None);
    };
    let target = path.clone();
    tauri::async_runtime::spawn_blocking(move || std::fs::write(&target, text))
        .await
        .map_err(|e| CommandError::internal(e.to_string()))?
        .map_err(|e| {
            CommandError::new(
                ErrorCode::Io,
                format!(
                    "Cannot write {}: {e}. Choose another folder.",
                    path.display()
                ),
            )
        })?;
    Ok(Some(path.to_string_lossy().into_owned()))
}

#[tauri::command]
pub async fn list_chats(
    app: State<'_, App>,
    query: Option<String>,
) -> CommandResult<Vec<ChatSummary>> {
    list(&app, query).await
}

#[tauri::command]
pub async fn create_chat(
    app: State<'_, App>,
    title: Option<String>,
    system_prompt: Option<String>,
) -> CommandResult<Chat> {
    create(&app, title, system_prompt).await
}

#[tauri::command]
pub async fn get_chat(app: State<'_, App>, chat_id: String) -> CommandResult<Chat> {
    get(&app, chat_id).await
}

#[tauri::command]
pub async fn rename_chat(
    app: State<'_, App>,
    chat_id: String,
    title: String,
) -> CommandResult<ChatSummary> {
    rename(&app, chat_id, title).await
}

#[tauri::command]
pub async fn delete_chat(app: State<'_, App>, chat_id: String) -> CommandResult<()> {
    delete(&app, chat_id).await
}

#[tauri::command]
pub async fn set_system_prompt(
    app: State<'_, App>,
    chat_id: String,
    system_prompt: String,
) -> CommandResult<Chat> {
    set_prompt(&app, chat_id, system_prompt).await
}

#[tauri::command]
pub async fn export_chat(
    app: State<'_, App>,
    chat_id: String,
    format: ExportFormat,
) -> CommandResult<Option<String>> {
    export(&app, chat_id, format).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_file_names_are_safe() {
        assert_eq!(
            file_name("Moby-Dick: ch. 1/2", "md"),
            "Moby-Dick- ch. 1-2.md"
        );
        assert_eq!(file_name("  ..  ", "json"), "chat.json");
    }
}
