//! The Hugging Face hub token, kept in the OS keychain (macOS Keychain, Windows Credential
//! Manager, the Secret Service of GNOME Keyring/KWallet on Linux) with the `keyring` crate:
//! never in the database, the logs or an event. Without a keychain (a headless Linux machine)
//! every call fails with a message that says so, and the app works on without a token
//! (public models need none).

use keyring::{Entry, Error};

/// The keychain service the token is filed under.
const SERVICE: &str = "app.kivichat.desktop";
/// The keychain account name.
const ACCOUNT: &str = "huggingface-hub-token";

/// Why the keychain cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "The system keychain is not available ({0}). On Linux it needs a Secret Service (GNOME \
     Keyring or KWallet) in your session. The token was not saved; KIVI Chat works on without \
     one, and public models need none"
)]
pub struct KeychainError(String);

fn entry() -> Result<Entry, KeychainError> {
    Entry::new(SERVICE, ACCOUNT).map_err(unavailable)
}

fn unavailable(e: Error) -> KeychainError {
    // Platform messages can be long D-Bus traces; the first line says enough.
    let text = e.to_string();
    KeychainError(
        text.lines()
            .next()
            .unwrap_or("unknown error")
            .trim()
            .to_string(),
    )
}

/// The stored token, if any. Blocking (it may talk to a keychain daemon).
pub fn load() -> Result<Option<String>, KeychainError> {
    match entry()?.get_password() {
        Ok(token) => Ok(Some(token).filter(|t| !t.is_empty())),
        Err(Error::NoEntry) => Ok(None),
        Err(e) => Err(unavailable(e)),
    }
}

/// Stores `token`. Blocking.
pub fn store(token: &str) -> Result<(), KeychainError> {
    entry()?.set_password(token).map_err(unavailable)
}

/// Deletes the stored token (no error when there is none). Blocking.
pub fn delete() -> Result<(), KeychainError> {
    match entry()?.delete_credential() {
        Ok(()) | Err(Error::NoEntry) => Ok(()),
        Err(e) => Err(unavailable(e)),
    }
}

/// Checks a token before it is stored: hub tokens are short, printable and without spaces.
pub fn validate(token: &str) -> Result<&str, &'static str> {
    let token = token.trim();
    if token.is_empty() {
        return Err(
            "The token is empty. Paste a token from your Hugging Face settings, or clear it.",
        );
    }
    if token.len() > 512 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("That does not look like a hub token (tokens are one word, like hf_...). Copy it again from your Hugging Face settings.");
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked() {
        assert_eq!(validate("  hf_abc123 ").unwrap(), "hf_abc123");
        assert!(validate("").is_err());
        assert!(validate("hf abc").is_err());
        assert!(validate(&"x".repeat(600)).is_err());
    }

    #[test]
    fn a_missing_keychain_is_reported_clearly() {
        // On a desktop this reaches the real keychain (read only); on a headless machine it
        // must fail with the explanation rather than hang or panic.
        match load() {
            Ok(_) => {}
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("keychain is not available"), "{text}");
                assert!(!text.contains('\n'));
            }
        }
    }
}
