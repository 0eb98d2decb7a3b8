//! `kivi chat`: an interactive conversation in the terminal. Each turn sends the whole
//! conversation; the engine reuses the KV cache of the part it has seen (documents
//! included) and only runs the new tokens. With `--session FILE` the conversation and its
//! cache are kept on disk after each answer and taken up again at the next start.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use kivi_engine::session::{Engine, FinishReason, Prompt, Request};
use kivi_engine::tokenizer::{Message, Role};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::chat_session::{documents_for, Session, Transcript, CONVERSATION};
use crate::args::{DocumentArgs, ModelArgs, SamplingArgs};
use crate::stream;

/// Arguments of `kivi chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub documents: DocumentArgs,
    /// A system prompt (default: the chat template's own, if any).
    #[arg(long)]
    pub system: Option<String>,
    /// Keep the conversation and its KV cache in this file: saved after each answer, and
    /// taken up again (documents, turns and cache) when the file exists at start, so a long
    /// document is not read again after a restart.
    #[arg(long)]
    pub session: Option<PathBuf>,
    /// Print every event as a JSON line (tokens, progress, statistics).
    #[arg(long)]
    pub json: bool,
}

/// Runs `kivi chat`.
pub async fn run(args: ChatArgs) -> Result<()> {
    let given = args.documents.documents()?;
    let engine = Engine::load(args.model.engine_options()?)
        .await
        .context("cannot load the model")?;
    eprintln!(
        "[{} · {} · backend {} · context {} · KV {}]",
        engine.info().name,
        engine.info().quantization,
        engine.info().backend,
        engine.context_length(),
        args.model.cache
    );
    let session = args.session.as_deref().map(Session::new);
    let resumed = match &session {
        Some(session) => session.resume(&engine, args.model.cache).await?,
        None => None,
    };
    let mut transcript = match resumed {
        Some(saved) => Transcript {
            documents: documents_for(&saved.documents, given)?,
            messages: saved.messages,
        },
        None => Transcript {
            documents: given,
            messages: args
                .system
                .iter()
                .map(|s| Message::new(Role::System, s.clone()))
                .collect(),
        },
    };
    for doc in &transcript.documents {
        let tokens = engine.count_tokens(doc.text.clone()).await?;
        eprintln!("[document {}: {tokens} tokens]", doc.name);
    }
    eprintln!(
        "[type a message; /reset starts over, /exit or Ctrl-D quits, Ctrl-C stops an answer]"
    );

    let first_turn = transcript
        .messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        eprint!("> ");
        let Some(line) = lines.next_line().await? else {
            break;
        };
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                transcript.messages.truncate(first_turn);
                eprintln!("[conversation cleared]");
                continue;
            }
            _ => {}
        }
        transcript.messages.push(Message::new(Role::User, line));
        let request = Request {
            prompt: Prompt::Chat {
                messages: transcript.messages.clone(),
                documents: transcript.documents.clone(),
            },
            sampling: args.sampling.params(),
            max_tokens: args.sampling.max_tokens,
            cache: None,
            format: None,
        };
        match stream::drive(engine.generate_in(CONVERSATION, request), args.json).await {
            Ok(finished) => {
                println!();
                eprintln!("{}", stream::summary(&finished));
                if finished.reason == FinishReason::Cancelled && finished.text.is_empty() {
                    transcript.messages.pop();
                } else {
                    transcript
                        .messages
                        .push(Message::new(Role::Assistant, finished.text.trim()));
                }
            }
            Err(e) => {
                // Keep the conversation usable: drop the question that failed.
                transcript.messages.pop();
                eprintln!("error: {e:#}");
                continue;
            }
        }
        if let Some(session) = &session {
            session.save(&engine, &transcript).await?;
        }
    }
    Ok(())
}
