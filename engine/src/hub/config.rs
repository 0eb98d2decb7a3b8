//! Where the hub is, where the cache is, whether we may use the network, and the token.
//!
//! The variables and their precedence follow the Python `huggingface_hub` client, so a model
//! downloaded by any hub tool is found here and the other way round. `hf-hub` 0.4 reads only
//! `HF_HOME` and `HF_ENDPOINT`, so the rest is resolved here.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// The public hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// How the engine talks to the hub and where it keeps files.
///
/// `Debug` never prints the token.
#[derive(Clone)]
pub struct HubConfig {
    /// Base URL of the hub, without a trailing slash (`HF_ENDPOINT`).
    pub endpoint: String,
    /// The hub cache root that holds `models--owner--name` folders (`HF_HUB_CACHE`).
    pub cache_dir: PathBuf,
    /// `HF_HOME`: where hub tools keep their state (the stored login token lives here).
    pub hf_home: PathBuf,
    /// Resolve from the cache only, never touch the network (`HF_HUB_OFFLINE`).
    pub offline: bool,
    /// Time allowed to open a connection.
    pub connect_timeout: Duration,
    /// Longest silence allowed while reading a response before the attempt counts as dropped.
    pub read_timeout: Duration,
    token: Option<String>,
}

impl HubConfig {
    /// Reads `HF_HOME`, `HF_HUB_CACHE`, `HF_ENDPOINT` and `HF_HUB_OFFLINE` from the process
    /// environment. The token is not read: pass it with [`HubConfig::with_token`] (see
    /// [`HubConfig::token_from_environment`] for an explicit opt-in).
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// Like [`HubConfig::from_env`], with variables looked up by `var` (tests pass a map, as
    /// changing the real environment races with other threads).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let non_empty = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let hf_home = non_empty("HF_HOME")
            .map(PathBuf::from)
            .or_else(|| non_empty("XDG_CACHE_HOME").map(|x| PathBuf::from(x).join("huggingface")))
            .unwrap_or_else(|| default_home().join(".cache").join("huggingface"));
        let cache_dir = non_empty("HF_HUB_CACHE")
            .or_else(|| non_empty("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let endpoint = non_empty("HF_ENDPOINT")
            .map(|e| e.trim().trim_end_matches('/').to_string())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let offline = non_empty("HF_HUB_OFFLINE").is_some_and(|v| is_truthy(&v));
        HubConfig {
            endpoint,
            cache_dir,
            hf_home,
            offline,
            connect_timeout: Duration::from_secs(20),
            read_timeout: Duration::from_secs(60),
            token: None,
        }
    }

    /// A configuration with an explicit cache folder and endpoint (tests, the app's settings).
    pub fn new(cache_dir: impl Into<PathBuf>, endpoint: impl Into<String>) -> Self {
        let cache_dir = cache_dir.into();
        let hf_home = cache_dir
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| cache_dir.clone());
        HubConfig {
            endpoint: endpoint.into().trim_end_matches('/').to_string(),
            cache_dir,
            hf_home,
            offline: false,
            connect_timeout: Duration::from_secs(20),
            read_timeout: Duration::from_secs(60),
            token: None,
        }
    }

    /// Sets the access token sent to the hub (for private or gated repos).
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.trim().is_empty());
        self
    }

    /// Sets offline mode.
    pub fn with_offline(mut self, offline: bool) -> Self {
        self.offline = offline;
        self
    }

    /// Whether a token is set (the token itself is not exposed).
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    pub(crate) fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The token the user configured for hub tools: `HF_TOKEN`, else the file named by
    /// `HF_TOKEN_PATH`, else the file that `huggingface-cli login` writes under `HF_HOME`
    /// (read by `hf-hub`). The engine never calls this on its own; a caller that wants the
    /// user's login passes the result to [`HubConfig::with_token`].
    pub fn token_from_environment(&self) -> Option<String> {
        let non_empty = |t: String| Some(t.trim().to_string()).filter(|t| !t.is_empty());
        std::env::var("HF_TOKEN")
            .ok()
            .and_then(non_empty)
            .or_else(|| {
                let path = std::env::var("HF_TOKEN_PATH").ok()?;
                std::fs::read_to_string(path).ok().and_then(non_empty)
            })
            .or_else(|| hf_hub::Cache::new(self.hf_home.join("hub")).token())
    }
}

impl fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubConfig")
            .field("endpoint", &self.endpoint)
            .field("cache_dir", &self.cache_dir)
            .field("hf_home", &self.hf_home)
            .field("offline", &self.offline)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// `huggingface_hub`'s notion of a true environment flag.
fn is_truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_uppercase().as_str(),
        "1" | "ON" | "YES" | "TRUE"
    )
}

fn default_home() -> PathBuf {
    // Without a home directory (a service account), a relative `.cache` in the working
    // directory is what the Python client ends up with too.
    dirs::home_dir().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::Path;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn hf_home_gives_hub_cache() {
        let c = HubConfig::from_vars(vars(&[("HF_HOME", "/data/hf")]));
        assert_eq!(c.cache_dir, Path::new("/data/hf/hub"));
        assert_eq!(c.endpoint, DEFAULT_ENDPOINT);
        assert!(!c.offline);
    }

    #[test]
    fn hf_hub_cache_wins_over_hf_home() {
        let c = HubConfig::from_vars(vars(&[
            ("HF_HOME", "/data/hf"),
            ("HF_HUB_CACHE", "/fast/models"),
        ]));
        assert_eq!(c.cache_dir, Path::new("/fast/models"));
        assert_eq!(c.hf_home, Path::new("/data/hf"));
    }

    #[test]
    fn xdg_cache_home_is_the_fallback() {
        let c = HubConfig::from_vars(vars(&[("XDG_CACHE_HOME", "/x")]));
        assert_eq!(c.cache_dir, Path::new("/x/huggingface/hub"));
    }

    #[test]
    fn endpoint_and_offline() {
        let c = HubConfig::from_vars(vars(&[
            ("HF_ENDPOINT", "http://mirror.local:8080/"),
            ("HF_HUB_OFFLINE", "yes"),
        ]));
        assert_eq!(c.endpoint, "http://mirror.local:8080");
        assert!(c.offline);
        for (v, expect) in [("1", true), ("TRUE", true), ("0", false), ("no", false)] {
            let c = HubConfig::from_vars(vars(&[("HF_HUB_OFFLINE", v)]));
            assert_eq!(c.offline, expect, "{v}");
        }
    }

    #[test]
    fn debug_never_shows_the_token() {
        let c = HubConfig::new("/c", "http://x").with_token(Some("hf_secret_value".into()));
        let shown = format!("{c:?}");
        assert!(!shown.contains("hf_secret_value"));
        assert!(shown.contains("redacted"));
        assert!(c.has_token());
        assert!(!HubConfig::new("/c", "http://x")
            .with_token(Some("  ".into()))
            .has_token());
    }
}
