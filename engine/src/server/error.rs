//! Errors a client sees, in OpenAI's shape:
//! `{"error": {"message", "type", "param", "code"}}` with a matching HTTP status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::grammar::GrammarError;
use crate::session::EngineError;

/// An error response.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What was wrong and what to do.
    pub message: String,
    /// OpenAI's error class: `invalid_request_error`, `rate_limit_error`, `server_error`.
    pub kind: &'static str,
    /// The request field at fault (`temperature`, `kv_cache.k_bits`), if any.
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `invalid_api_key`, ...), if any.
    pub code: Option<&'static str>,
}

/// The JSON body.
#[derive(Serialize)]
pub struct ErrorBody<'a> {
    /// The error.
    pub error: ErrorDetail<'a>,
}

/// The `error` object.
#[derive(Serialize)]
pub struct ErrorDetail<'a> {
    /// What was wrong.
    pub message: &'a str,
    /// Error class.
    #[serde(rename = "type")]
    pub kind: &'a str,
    /// Offending field.
    pub param: Option<&'a str>,
    /// Machine-readable code.
    pub code: Option<&'a str>,
}

impl ApiError {
    /// 400: the request is malformed or a field is invalid.
    pub fn invalid(message: impl Into<String>, param: Option<&str>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_string),
            code: None,
        }
    }

    /// 400 for a value the server does not support (`n` > 1, `logprobs`, tools).
    pub fn unsupported(message: impl Into<String>, param: &str) -> Self {
        Self::invalid(message, Some(param)).with_code("unsupported_parameter")
    }

    /// 401: the bearer token is missing or wrong.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// 404 for an unknown model.
    pub fn model_not_found(asked: &str, served: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "The model `{asked}` does not exist: this server runs `{served}` \
                 (see GET /v1/models); use that name or leave `model` out"
            ),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: Some("model_not_found"),
        }
    }

    /// 404 for an unknown path.
    pub fn no_route(method: &str, path: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "Unknown request URL: {method} {path}. This server offers POST \
                 /v1/chat/completions, POST /v1/completions and GET /v1/models"
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("unknown_url"),
        }
    }

    /// 405 for a known path with the wrong method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: format!("{method} is not allowed on {path}"),
            kind: "invalid_request_error",
            param: None,
            code: Some("method_not_allowed"),
        }
    }

    /// 429: the queue is full.
    pub fn queue_full(capacity: usize) -> Self {
        Self {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "The server is busy: one request is running and {capacity} are waiting, \
                 which is all its queue holds. Retry shortly."
            ),
            kind: "rate_limit_error",
            param: None,
            code: Some("rate_limit_exceeded"),
        }
    }

    /// 503: the server is stopping.
    pub fn shutting_down() -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "The server is shutting down".into(),
            kind: "server_error",
            param: None,
            code: Some("server_shutting_down"),
        }
    }

    /// 500: the engine failed.
    pub fn server(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    /// The same error with a code.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// An engine error reported before the first token, classified: a prompt that does
    /// not fit the context or renders to nothing, or a schema the grammar engine refuses,
    /// is the client's to fix (400), anything else is the server's (500). `prompt_param` names the field that holds the prompt.
    pub fn from_engine_message(message: &str, prompt_param: &str) -> Self {
        if is_context_overflow(message) {
            Self::invalid(message, Some(prompt_param)).with_code("context_length_exceeded")
        } else if message == EngineError::EmptyPrompt.to_string() {
            Self::invalid(message, Some(prompt_param))
        } else if message.starts_with(GrammarError::PREFIX) {
            Self::invalid(message, Some("response_format"))
        } else {
            Self::server(message)
        }
    }

    /// The JSON body.
    pub fn body(&self) -> ErrorBody<'_> {
        ErrorBody {
            error: ErrorDetail {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code,
            },
        }
    }
}

/// Whether an engine message is [`EngineError::ContextOverflow`]'s (events carry only the
/// message; the prefix and middle are read off the error's own wording).
fn is_context_overflow(message: &str) -> bool {
    let sample = EngineError::ContextOverflow {
        prompt_tokens: 7,
        context_length: 3,
    }
    .to_string();
    let Some((head, rest)) = sample.split_once('7') else {
        return false;
    };
    let middle = rest.split('3').next().unwrap_or(rest);
    message.starts_with(head) && message.contains(middle)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_string(&self.body()).expect("error bodies serialize");
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_messages_are_classified() {
        let overflow = EngineError::ContextOverflow {
            prompt_tokens: 9000,
            context_length: 8192,
        }
        .to_string();
        let e = ApiError::from_engine_message(&overflow, "messages");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.code, Some("context_length_exceeded"));
        assert_eq!(e.param.as_deref(), Some("messages"));
        let e = ApiError::from_engine_message(&EngineError::EmptyPrompt.to_string(), "prompt");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        let e = ApiError::from_engine_message(&EngineError::WorkerGone.to_string(), "prompt");
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(e.kind, "server_error");
    }

    #[test]
    fn the_body_has_openais_shape() {
        let e = ApiError::invalid("bad", Some("temperature"));
        let json = serde_json::to_value(e.body()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"error": {"message": "bad", "type": "invalid_request_error",
                "param": "temperature", "code": null}})
        );
    }
}
