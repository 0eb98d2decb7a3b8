//! System (`api/system.ts`): links open in the user's browser, never in the webview.

use tauri::State;

use crate::error::{CommandError, CommandResult};
use crate::state::App;

/// Checks that `url` is an absolute http(s) or mailto URL.
pub fn checked_url(url: &str) -> CommandResult<String> {
    let bad = || {
        CommandError::invalid(
            "url",
            "Only web (http, https) and e-mail (mailto) links can be opened.",
        )
    };
    let parsed = tauri::Url::parse(url.trim()).map_err(|_| bad())?;
    match parsed.scheme() {
        "http" | "https" if parsed.host_str().is_some_and(|h| !h.is_empty()) => {
            Ok(parsed.to_string())
        }
        "mailto" => Ok(parsed.to_string()),
        _ => Err(bad()),
    }
}

/// `open_external`.
pub async fn open(app: &App, url: String) -> CommandResult<()> {
    let url = checked_url(&url)?;
    let desktop = app.desktop.clone();
    tauri::async_runtime::spawn_blocking(move || desktop.open_url(&url))
        .await
        .map_err(|e| CommandError::internal(e.to_string()))?
        .map_err(|e| {
            CommandError::internal(format!(
                "The link could not be opened: {e}. Copy it instead."
            ))
        })
}

#[tauri::command]
pub async fn open_external(app: State<'_, App>, url: String) -> CommandResult<()> {
    open(&app, url).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_web_and_mail_links_open() {
        for ok in [
            "https://example.org/a?b=c",
            "http://localhost:8080/v1",
            "mailto:me@example.org",
        ] {
            assert!(checked_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "tauri://localhost",
            "ftp://example.org",
            "data:text/html,hi",
            "/relative",
            "https://",
            "",
        ] {
            let e = checked_url(bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("url"), "{bad}");
        }
    }
}
