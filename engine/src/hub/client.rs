//! [`HubClient`]: the HTTP side shared by listing, metadata and transfers.

use std::future::Future;
use std::sync::Arc;

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use reqwest::{RequestBuilder, StatusCode, Url};
use tokio_util::sync::CancellationToken;

use super::config::HubConfig;
use super::error::{HubError, HubResult};
use super::repo_id::{RepoId, Revision};
use super::repo_path::RepoFilePath;

const USER_AGENT: &str = concat!("kivi-engine/", env!("CARGO_PKG_VERSION"));

/// Talks to one hub endpoint and keeps files in one cache. Cheap to clone; clones share
/// connections.
#[derive(Clone)]
pub struct HubClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: HubConfig,
    pub(crate) endpoint: Url,
    /// `hf-hub`'s client: builds the repo-info request (URL, revision encoding, auth).
    pub(crate) api: hf_hub::api::tokio::Api,
    /// Transfers: follows redirects to the CDN (reqwest drops the token on a cross-host hop).
    pub(crate) http: reqwest::Client,
    /// Metadata: stops at redirects, because the hub puts the file's size and hash on the
    /// redirect response itself, and the CDN must not see the token.
    pub(crate) http_no_redirect: reqwest::Client,
    auth: Option<HeaderValue>,
}

impl std::fmt::Debug for HubClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubClient")
            .field("config", &self.inner.config)
            .finish()
    }
}

impl HubClient {
    /// A client for `config`. Fails on an endpoint that is not an http(s) URL or a token a
    /// header cannot carry; makes no request.
    pub fn new(config: HubConfig) -> HubResult<Self> {
        let endpoint = parse_endpoint(&config.endpoint)?;
        let auth = match config.token() {
            Some(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", token.trim()))
                    .map_err(|_| HubError::InvalidToken)?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let api = hf_hub::api::tokio::ApiBuilder::from_cache(hf_hub::Cache::new(
            config.cache_dir.clone(),
        ))
        .with_endpoint(config.endpoint.clone())
        .with_token(config.token().map(|t| t.trim().to_string()))
        .with_progress(false)
        .with_user_agent("kivi-engine", env!("CARGO_PKG_VERSION"))
        .build()
        .map_err(|e| match e {
            hf_hub::api::tokio::ApiError::InvalidHeaderValue(_) => HubError::InvalidToken,
            _ => HubError::InvalidEndpoint {
                endpoint: config.endpoint.clone(),
                reason: "the HTTP client could not be set up for it",
            },
        })?;
        let build = |policy| {
            reqwest::Client::builder()
                .user_agent(USER_AGENT)
                .connect_timeout(config.connect_timeout)
                .read_timeout(config.read_timeout)
                .redirect(policy)
                .build()
                .map_err(|_| HubError::InvalidEndpoint {
                    endpoint: config.endpoint.clone(),
                    reason: "the HTTP client could not be set up for it",
                })
        };
        let http = build(reqwest::redirect::Policy::limited(10))?;
        let http_no_redirect = build(reqwest::redirect::Policy::none())?;
        Ok(HubClient {
            inner: Arc::new(Inner {
                config,
                endpoint,
                api,
                http,
                http_no_redirect,
                auth,
            }),
        })
    }

    /// A client configured from the environment (`HF_HOME`, `HF_HUB_CACHE`, `HF_ENDPOINT`,
    /// `HF_HUB_OFFLINE`) with the caller's token.
    pub fn from_env(token: Option<String>) -> HubResult<Self> {
        Self::new(HubConfig::from_env().with_token(token))
    }

    /// The configuration in use.
    pub fn config(&self) -> &HubConfig {
        &self.inner.config
    }

    /// `{endpoint}/{owner}/{name}/resolve/{revision}/{file}`, each part percent-encoded
    /// (a `/` in a revision becomes `%2F`, as the hub expects).
    pub(crate) fn resolve_url(&self, repo: &RepoId, revision: &str, file: &RepoFilePath) -> Url {
        let mut url = self.inner.endpoint.clone();
        {
            let mut segments = url
                .path_segments_mut()
                .expect("an http(s) endpoint always has a path");
            segments
                .pop_if_empty()
                .push(repo.owner())
                .push(repo.name())
                .push("resolve")
                .push(revision);
            for component in file.components() {
                segments.push(component);
            }
        }
        url
    }

    /// Adds the token, but only for the hub's own origin: a redirect target (the CDN) or
    /// any other host never sees it.
    pub(crate) fn authorized(&self, request: RequestBuilder, url: &Url) -> RequestBuilder {
        match &self.inner.auth {
            Some(value) if same_origin(url, &self.inner.endpoint) => {
                request.header(AUTHORIZATION, value.clone())
            }
            _ => request,
        }
    }

    /// A [`HubError::Network`] for a failed request, without the URL (CDN URLs carry
    /// signatures and make messages unreadable).
    pub(crate) fn network_error(
        &self,
        action: impl Into<String>,
        source: reqwest::Error,
    ) -> HubError {
        let source = source.without_url();
        let mut detail = source.to_string();
        let mut cause = std::error::Error::source(&source);
        while let Some(c) = cause {
            let text = c.to_string();
            // hyper and reqwest often repeat the inner message in the outer one.
            if !detail.contains(&text) {
                detail.push_str(": ");
                detail.push_str(&text);
            }
            cause = c.source();
        }
        HubError::Network {
            action: action.into(),
            endpoint: self.inner.config.endpoint.clone(),
            detail,
            source,
        }
    }

    /// Turns a non-success status into the error a user can act on. The hub names the
    /// missing thing in `X-Error-Code`.
    pub(crate) fn status_error(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        repo: &RepoId,
        revision: &Revision,
        file: Option<&RepoFilePath>,
        action: &str,
    ) -> HubError {
        let code = headers
            .get("x-error-code")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let repo_s = repo.to_string();
        match (status.as_u16(), code) {
            (401 | 404, "RepoNotFound") => HubError::RepoNotFound {
                repo: repo_s,
                endpoint: self.inner.config.endpoint.clone(),
            },
            (404, "RevisionNotFound") => HubError::RevisionNotFound {
                repo: repo_s,
                revision: revision.to_string(),
            },
            (401 | 403, _) => HubError::AccessDenied {
                repo: repo_s,
                status: status.as_u16(),
            },
            (404, _) => match file {
                Some(file) => HubError::FileNotFound {
                    repo: repo_s,
                    revision: revision.to_string(),
                    file: file.to_string(),
                },
                None => HubError::RepoNotFound {
                    repo: repo_s,
                    endpoint: self.inner.config.endpoint.clone(),
                },
            },
            (status, _) => HubError::HttpStatus {
                status,
                action: action.to_string(),
            },
        }
    }
}

fn parse_endpoint(endpoint: &str) -> HubResult<Url> {
    let invalid = |reason| HubError::InvalidEndpoint {
        endpoint: endpoint.to_string(),
        reason,
    };
    let url = Url::parse(endpoint).map_err(|_| invalid("it is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("only http and https are supported"));
    }
    if url.cannot_be_a_base() || url.host().is_none() {
        return Err(invalid("it has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("it must not have a query or fragment"));
    }
    Ok(url)
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// Runs `fut` unless `cancel` fires first.
pub(crate) async fn cancellable<F: Future>(
    cancel: &CancellationToken,
    fut: F,
) -> HubResult<F::Output> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(HubError::Cancelled),
        out = fut => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(endpoint: &str) -> HubClient {
        HubClient::new(HubConfig::new("/tmp/kivi-hub-test-cache", endpoint)).unwrap()
    }

    #[test]
    fn resolve_urls_are_encoded() {
        let c = client("https://hub.example/mirror/");
        let repo = RepoId::parse("org/model").unwrap();
        let url = c.resolve_url(
            &repo,
            "refs/pr/1",
            &RepoFilePath::parse("sub dir/a#b.json").unwrap(),
        );
        assert_eq!(
            url.as_str(),
            "https://hub.example/mirror/org/model/resolve/refs%2Fpr%2F1/sub%20dir/a%23b.json"
        );
    }

    #[test]
    fn endpoints_are_checked() {
        assert!(HubClient::new(HubConfig::new("/c", "ftp://x")).is_err());
        assert!(HubClient::new(HubConfig::new("/c", "not a url")).is_err());
        assert!(HubClient::new(HubConfig::new("/c", "http://x/?q=1")).is_err());
        assert!(HubClient::new(HubConfig::new("/c", "http://127.0.0.1:9")).is_ok());
    }

    #[test]
    fn token_goes_only_to_the_hub_origin() {
        let c = HubClient::new(
            HubConfig::new("/c", "https://hub.example").with_token(Some("hf_abc".into())),
        )
        .unwrap();
        let hub = Url::parse("https://hub.example/a").unwrap();
        let cdn = Url::parse("https://cdn.example/a").unwrap();
        let r = c
            .authorized(c.inner.http.get(hub.clone()), &hub)
            .build()
            .unwrap();
        assert!(r.headers().contains_key(AUTHORIZATION));
        let r = c
            .authorized(c.inner.http.get(cdn.clone()), &cdn)
            .build()
            .unwrap();
        assert!(!r.headers().contains_key(AUTHORIZATION));
        assert!(!format!("{c:?}").contains("hf_abc"));
    }
}
