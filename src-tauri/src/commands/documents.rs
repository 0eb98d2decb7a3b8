//! Documents (`api/documents.ts`): pick (native dialog), attach, remove, prefill.

use std::path::PathBuf;
use std::time::Duration;

use tauri::State;

use crate::error::{CommandError, CommandResult, ErrorCode};
use crate::generation;
use crate::jobs::JobKind;
use crate::state::App;
use crate::store::{DocumentInfo, DocumentKind, NewDocument};

/// How long `attach_document` waits for a model that is still loading (to count tokens).
const LOAD_WAIT: Duration = Duration::from_secs(120);

/// `pick_documents`: a native open dialog; `[]` when cancelled.
pub async fn pick(app: &App) -> CommandResult<Vec<String>> {
    let desktop = app.desktop.clone();
    let picked = tauri::async_runtime::spawn_blocking(move || desktop.pick_documents())
        .await
        .map_err(|e| CommandError::internal(format!("The file dialog failed: {e}.")))?
        .map_err(|e| CommandError::internal(format!("No file dialog is available: {e}.")))?;
    Ok(picked
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect())
}

fn kind(kind: kivi_engine::document::DocumentKind) -> DocumentKind {
    match kind {
        kivi_engine::document::DocumentKind::Txt => DocumentKind::Txt,
        kivi_engine::document::DocumentKind::Md => DocumentKind::Md,
        kivi_engine::document::DocumentKind::Pdf => DocumentKind::Pdf,
    }
}

/// `attach_document`: extracts the text (off the async runtime), counts its tokens with the
/// active model's tokenizer, stores it with the chat. Does not prefill.
pub async fn attach(app: &App, chat_id: String, path: String) -> CommandResult<DocumentInfo> {
    app.store.chat_summary(&chat_id)?;
    app.jobs.ensure_idle(&chat_id, Some(JobKind::Generation))?;
    let path = PathBuf::from(path);
    if !path.is_absolute() {
        return Err(CommandError::new(
            ErrorCode::Io,
            format!(
                "{} is not a full path. Attach the file from the file picker or by dropping it.",
                path.display()
            ),
        ));
    }
    let extracted =
        tauri::async_runtime::spawn_blocking(move || kivi_engine::document::extract(&path))
            .await
            .map_err(|e| CommandError::internal(format!("Reading the document failed: {e}.")))??;
    let engine = app.model.wait_ready(LOAD_WAIT).await?;
    let tokens = engine.count_tokens(extracted.text.clone()).await?;
    let doc = NewDocument {
        name: extracted.name,
        path: extracted.path.to_string_lossy().into_owned(),
        kind: kind(extracted.kind),
        size_bytes: extracted.size_bytes,
        token_count: tokens as u64,
        text: extracted.text,
    };
    let added = app.store.add_document(&chat_id, &doc)?;
    document_out(app, &chat_id, &added.id).await
}

/// A chat's document as commands return it, its fit to the context computed.
async fn document_out(app: &App, chat_id: &str, id: &str) -> CommandResult<DocumentInfo> {
    let chat = app.chat_out(app.store.get_chat(chat_id)?).await;
    chat.documents
        .into_iter()
        .find(|d| d.id == id)
        .ok_or_else(|| CommandError::internal("The document vanished while it was stored."))
}

/// `remove_document`: the prompt changes, so the chat's cache goes.
pub async fn remove(app: &App, chat_id: String, document_id: String) -> CommandResult<()> {
    app.store.chat_summary(&chat_id)?;
    app.jobs.ensure_idle(&chat_id, None)?;
    app.store.remove_document(&chat_id, &document_id)?;
    app.drop_chat_cache(&chat_id);
    Ok(())
}

/// `read_part_of_document`: a document too long for the context is replaced by the longest
/// head of it that fits beside the system prompt, the chat's other documents and the answer,
/// with a note at its head telling the model which part it sees (`document_part.rs`). Its
/// file is untouched: attached again after the context grows, it is read whole.
pub async fn read_part(
    app: &App,
    chat_id: String,
    document_id: String,
) -> CommandResult<DocumentInfo> {
    app.store.chat_summary(&chat_id)?;
    app.jobs.ensure_idle(&chat_id, None)?;
    let chat = app.chat_out(app.store.get_chat(&chat_id)?).await;
    let doc = chat
        .documents
        .iter()
        .find(|d| d.id == document_id)
        .cloned()
        .ok_or_else(|| {
            CommandError::new(ErrorCode::NotFound, "That document is not in this chat.")
        })?;
    if doc.fits_in_context {
        return Err(CommandError::new(
            ErrorCode::InvalidArgument,
            format!("{} fits in the context: it is read whole.", doc.name),
        ));
    }
    // What the context holds besides this document: the system prompt and the answer's
    // room (the first document's need less its own tokens), and every other document.
    let fixed = chat
        .documents
        .first()
        .map_or(0, |d| d.context_needed.saturating_sub(d.token_count));
    let others: u64 = chat
        .documents
        .iter()
        .filter(|d| d.id != doc.id)
        .map(|d| d.token_count)
        .sum();
    let room = doc.context_length.saturating_sub(fixed + others);
    let engine = app.model.wait_ready(LOAD_WAIT).await?;
    let text = app.store.document_text(&doc.id)?;
    let count = |text: String| {
        let engine = engine.clone();
        async move { engine.count_tokens(text).await.map(|n| n as u64) }
    };
    let part = crate::document_part::first_part(&doc.name, &text, doc.token_count, room, count)
        .await?
        .ok_or_else(|| {
            CommandError::new(
                ErrorCode::ContextOverflow,
                format!(
                    "No part of {} fits: the system prompt, the other documents and the \
                     answer's room take the whole context of {} tokens.",
                    doc.name, doc.context_length
                ),
            )
        })?;
    let name = format!(
        "{} (first {} of {} tokens)",
        doc.name,
        crate::document_part::grouped(part.head_tokens),
        crate::document_part::grouped(doc.token_count)
    );
    let added = app.store.add_document(
        &chat_id,
        &NewDocument {
            name,
            path: doc.path.clone(),
            kind: doc.kind,
            size_bytes: part.text.len() as u64,
            token_count: part.tokens,
            text: part.text,
        },
    )?;
    app.store.remove_document(&chat_id, &doc.id)?;
    app.drop_chat_cache(&chat_id);
    document_out(app, &chat_id, &added.id).await
}

/// `prefill_chat`: reads the system prompt, the documents that fit and the history into the
/// chat's cache now; the job's id, or `None` when there is nothing to read.
pub async fn prefill(app: &App, chat_id: String) -> CommandResult<Option<String>> {
    app.store.chat_summary(&chat_id)?;
    crate::disk_caches::restore(app, &chat_id).await;
    let chat = app.store.get_chat(&chat_id)?;
    let job_id = app.new_id("p");
    let job = app.jobs.begin(&chat_id, job_id.clone(), JobKind::Prefill)?;
    let planned = async {
        let engine = app.model.engine()?;
        let plan = generation::plan_prefill(app, &engine, &chat).await?;
        Ok::<_, CommandError>((engine, plan))
    }
    .await;
    let (engine, plan) = match planned {
        Ok((engine, Some(plan))) => (engine, plan),
        Ok((_, None)) => {
            app.jobs.end(&chat_id, &job_id);
            return Ok(None);
        }
        Err(e) => {
            app.jobs.end(&chat_id, &job_id);
            return Err(e);
        }
    };
    let running = engine.generate_in(chat_id.clone(), plan.request.clone());
    job.attach(running.cancel_handle());
    generation::spawn_prefill(app, running, &chat_id, job, &plan);
    Ok(Some(job_id))
}

#[tauri::command]
pub async fn pick_documents(app: State<'_, App>) -> CommandResult<Vec<String>> {
    pick(&app).await
}

#[tauri::command]
pub async fn attach_document(
    app: State<'_, App>,
    chat_id: String,
    path: String,
) -> CommandResult<DocumentInfo> {
    attach(&app, chat_id, path).await
}

#[tauri::command]
pub async fn read_part_of_document(
    app: State<'_, App>,
    chat_id: String,
    document_id: String,
) -> CommandResult<DocumentInfo> {
    read_part(&app, chat_id, document_id).await
}

#[tauri::command]
pub async fn remove_document(
    app: State<'_, App>,
    chat_id: String,
    document_id: String,
) -> CommandResult<()> {
    remove(&app, chat_id, document_id).await
}

#[tauri::command]
pub async fn prefill_chat(app: State<'_, App>, chat_id: String) -> CommandResult<Option<String>> {
    prefill(&app, chat_id).await
}
