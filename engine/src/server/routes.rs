//! The endpoints, the bearer-token check, and the router.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, Method, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower_http::cors::{AllowHeaders, Any, CorsLayer};

use super::api::{
    AssistantMessage, ChatChoice, ChatCompletion, ModelCard, ModelList, TextChoice, TextCompletion,
};
use super::error::ApiError;
use super::meta::Meta;
use super::params::{self, Endpoint};
use super::queue::Queue;
use super::run::{Job, Step};
use super::sse;
use crate::session::Engine;

/// Largest request body: long documents fit; a runaway upload does not.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// What every handler shares.
pub struct Shared {
    /// The model.
    pub engine: Arc<Engine>,
    /// The name clients use for it.
    pub model_id: String,
    /// Bearer token, if required.
    pub token: Option<String>,
    /// The request queue.
    pub queue: Queue,
    /// Cancelled when the server stops.
    pub shutdown: CancellationToken,
    /// Start time, Unix seconds.
    pub created: u64,
}

type AppState = Arc<Shared>;

/// The whole application.
pub fn router(state: AppState, cors: bool) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{*id}", get(model))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize))
        .route("/health", get(health))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state);
    if cors {
        // Any origin, any requested header (Authorization included, which a `*` would
        // not cover), no cookies.
        api.layer(
            CorsLayer::new()
                .allow_origin(Any)
                .allow_methods(Any)
                .allow_headers(AllowHeaders::mirror_request())
                .max_age(Duration::from_secs(3600)),
        )
    } else {
        api
    }
}

async fn authorize(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(token) = &state.token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::trim);
        let error = match given.and_then(|v| strip_bearer(v)) {
            None => Some(ApiError::unauthorized(
                "You didn't provide an API key. This server requires one: send \
                 `Authorization: Bearer <key>` (in the openai client, `api_key=<key>`)",
            )),
            Some(key) if !same(key.as_bytes(), token.as_bytes()) => {
                Some(ApiError::unauthorized("Incorrect API key provided"))
            }
            Some(_) => None,
        };
        if let Some(error) = error {
            return error.into_response();
        }
    }
    next.run(request).await
}

fn strip_bearer(value: &str) -> Option<&str> {
    let (scheme, key) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
}

/// Compares without stopping at the first difference, so timing says nothing about how
/// much of a guess was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn chat_completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    complete(state, body, Endpoint::Chat)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    complete(state, body, Endpoint::Completions)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn complete(
    state: AppState,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Result<Response, ApiError> {
    let bytes = body.map_err(|e| {
        let mut error = ApiError::invalid(e.body_text(), None);
        error.status = e.status();
        error
    })?;
    let body = params::parse_body(&bytes)?;
    let plan = params::plan(
        body,
        endpoint,
        &state.model_id,
        state.engine.context_length(),
    )?;
    let ticket = state
        .queue
        .admit()
        .ok_or_else(|| ApiError::queue_full(state.queue.capacity()))?;
    // If the client goes away while waiting, this future is dropped and the ticket
    // leaves the queue.
    let turn = tokio::select! {
        turn = ticket.turn() => turn,
        _ = state.shutdown.cancelled() => return Err(ApiError::shutting_down()),
    };
    let job = Job::start(
        &state.engine,
        plan.request,
        plan.stops,
        turn,
        state.shutdown.clone(),
        endpoint.prompt_param(),
    )
    .await?;
    let meta = Meta::new(endpoint, &state.model_id);
    if plan.stream {
        return Ok(sse::response(job, endpoint, meta, plan.include_usage));
    }
    collect(job, endpoint, meta).await
}

/// Runs a job to the end and answers with one JSON object.
async fn collect(mut job: Job, endpoint: Endpoint, meta: Meta) -> Result<Response, ApiError> {
    let mut text = String::new();
    let outcome = loop {
        match job.next().await {
            Some(Step::Text(piece)) => text.push_str(&piece),
            Some(Step::Finished(outcome)) => break outcome,
            Some(Step::Failed(error)) => return Err(error),
            None => return Err(ApiError::server("the generation ended without a result")),
        }
    };
    drop(job);
    let response = match endpoint {
        Endpoint::Chat => Json(ChatCompletion {
            id: meta.id,
            object: "chat.completion",
            created: meta.created,
            model: meta.model,
            system_fingerprint: None,
            choices: vec![ChatChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant",
                    content: text,
                    refusal: None,
                },
                logprobs: None,
                finish_reason: outcome.finish_reason,
            }],
            usage: outcome.usage,
        })
        .into_response(),
        Endpoint::Completions => Json(TextCompletion {
            id: meta.id,
            object: "text_completion",
            created: meta.created,
            model: meta.model,
            system_fingerprint: None,
            choices: vec![TextChoice {
                text,
                index: 0,
                logprobs: None,
                finish_reason: Some(outcome.finish_reason),
            }],
            usage: Some(Some(outcome.usage)),
        })
        .into_response(),
    };
    Ok(response)
}

fn card(state: &Shared) -> ModelCard {
    ModelCard {
        id: state.model_id.clone(),
        object: "model",
        created: state.created,
        owned_by: "kivi",
        context_length: state.engine.context_length(),
    }
}

async fn models(State(state): State<AppState>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![card(&state)],
    })
}

async fn model(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    if id == state.model_id {
        Json(card(&state)).into_response()
    } else {
        ApiError::model_not_found(&id, &state.model_id).into_response()
    }
}

/// Liveness and queue depth, without a token (for the app and for scripts waiting for
/// the server to come up).
async fn health(State(state): State<AppState>) -> Response {
    Json(json!({
        "status": "ok",
        "model": state.model_id,
        "queue": state.queue.status(),
    }))
    .into_response()
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::no_route(method.as_str(), uri.path())
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), uri.path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_compare_whole() {
        assert_eq!(strip_bearer("Bearer abc"), Some("abc"));
        assert_eq!(strip_bearer("bearer  abc "), Some("abc"));
        assert_eq!(strip_bearer("Basic abc"), None);
        assert_eq!(strip_bearer("abc"), None);
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
    }
}
