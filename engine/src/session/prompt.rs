//! Turning a [`Prompt`] into token ids.

use super::error::EngineError;
use super::request::{Document, Prompt};
use crate::tokenizer::{Message, Role, Tokenizer};

/// Renders and tokenizes a prompt.
pub fn encode(tokenizer: &Tokenizer, prompt: &Prompt) -> Result<Vec<u32>, EngineError> {
    let ids = match prompt {
        Prompt::Text(text) => tokenizer.encode(text, true)?,
        Prompt::Chat {
            messages,
            documents,
        } => {
            let messages = with_documents(messages, documents);
            let text = tokenizer.apply_chat_template(&messages, true)?;
            // The template writes the special tokens (BOS included) itself.
            tokenizer.encode(&text, false)?
        }
    };
    if ids.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    Ok(ids)
}

/// The system prompt of a conversation about documents that brings none of its own.
/// Small models answer from the document far more often when told to (SmolLM2-135M
/// otherwise tends to answer from what it learned in training).
pub const DOCUMENT_SYSTEM_PROMPT: &str =
    "You are a helpful assistant. Answer questions using the document the user provides.";

/// Puts the documents at the start of the first user message. Keeping them there (not
/// next to the latest question) makes every turn about the same documents start with the
/// same tokens, so the KV cache of the documents is computed once.
fn with_documents(messages: &[Message], documents: &[Document]) -> Vec<Message> {
    let mut messages = messages.to_vec();
    if documents.is_empty() {
        return messages;
    }
    if !messages.iter().any(|m| m.role == Role::System) {
        messages.insert(0, Message::new(Role::System, DOCUMENT_SYSTEM_PROMPT));
    }
    let mut block = String::new();
    for doc in documents {
        block.push_str(&format!(
            "Document: {}\n\n{}\n\n",
            doc.name,
            doc.text.trim()
        ));
    }
    match messages.iter_mut().find(|m| m.role == Role::User) {
        Some(first) => first.content = format!("{block}{}", first.content),
        None => messages.push(Message::new(Role::User, block.trim_end())),
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_lead_the_first_user_message_on_every_turn() {
        let doc = Document {
            name: "Loomings".into(),
            text: "Call me Ishmael.\n".into(),
        };
        let turn1 = vec![Message::new(Role::User, "Who speaks?")];
        let mut turn2 = turn1.clone();
        turn2.push(Message::new(Role::Assistant, "Ishmael."));
        turn2.push(Message::new(Role::User, "Where?"));
        let (a, b) = (
            with_documents(&turn1, std::slice::from_ref(&doc)),
            with_documents(&turn2, std::slice::from_ref(&doc)),
        );
        assert_eq!(a[0], Message::new(Role::System, DOCUMENT_SYSTEM_PROMPT));
        assert_eq!(
            a[1].content,
            "Document: Loomings\n\nCall me Ishmael.\n\nWho speaks?"
        );
        assert_eq!(a[..2], b[..2]);
        assert_eq!(b[3].content, "Where?");
        // A conversation's own system prompt is kept.
        let own = vec![
            Message::new(Role::System, "Be terse."),
            Message::new(Role::User, "Hi"),
        ];
        let c = with_documents(&own, std::slice::from_ref(&doc));
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].content, "Be terse.");
    }
}
