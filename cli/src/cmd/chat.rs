//! `kivi chat`: an interactive conversation in the terminal. Each turn sends the whole
//! conversation; the engine reuses the KV cache of the part it has seen (documents
//! included) and only runs the new tokens.

use anyhow::{Context, Result};
use clap::Args;
use kivi_engine::session::{Engine, FinishReason, Prompt, Request};
use kivi_engine::tokenizer::{Message, Role};
use tokio::io::{AsyncBufReadExt, BufReader};

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
    /// Print every event as a JSON line (tokens, progress, statistics).
    #[arg(long)]
    pub json: bool,
}

/// Runs `kivi chat`.
pub async fn run(args: ChatArgs) -> Result<()> {
    let documents = args.documents.documents()?;
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
    for doc in &documents {
        let tokens = engine.count_tokens(doc.text.clone()).await?;
        eprintln!("[document {}: {tokens} tokens]", doc.name);
    }
    eprintln!(
        "[type a message; /reset starts over, /exit or Ctrl-D quits, Ctrl-C stops an answer]"
    );

    let mut messages: Vec<Message> = args
        .system
        .iter()
        .map(|s| Message::new(Role::System, s.clone()))
        .collect();
    let first_turn = messages.len();
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
                messages.truncate(first_turn);
                eprintln!("[conversation cleared]");
                continue;
            }
            _ => {}
        }
        messages.push(Message::new(Role::User, line));
        let request = Request {
            prompt: Prompt::Chat {
                messages: messages.clone(),
                documents: documents.clone(),
            },
            sampling: args.sampling.params(),
            max_tokens: args.sampling.max_tokens,
            cache: None,
            format: None,
        };
        match stream::drive(engine.generate(request), args.json).await {
            Ok(finished) => {
                println!();
                eprintln!("{}", stream::summary(&finished));
                if finished.reason == FinishReason::Cancelled && finished.text.is_empty() {
                    messages.pop();
                } else {
                    messages.push(Message::new(Role::Assistant, finished.text.trim()));
                }
            }
            Err(e) => {
                // Keep the conversation usable: drop the question that failed.
                messages.pop();
                eprintln!("error: {e:#}");
            }
        }
    }
    Ok(())
}
