//! A running OpenAI-compatible server on the offline SmolLM2, and a small HTTP client for
//! it (reqwest), shared by the server tests.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use kivi_engine::server::{self, ServerConfig, ServerHandle};
use kivi_engine::session::EngineOptions;
use serde_json::Value;

#[path = "../offline/mod.rs"]
pub mod offline;

/// A server on an engine of its own, on a free port.
pub struct TestServer {
    pub handle: ServerHandle,
    pub base: String,
    pub client: reqwest::Client,
    pub token: Option<String>,
}

/// Starts a server; `tweak` adjusts its configuration (port 0 is kept unless changed).
pub async fn start(tweak: impl FnOnce(&mut ServerConfig)) -> TestServer {
    start_with(|_| {}, tweak).await
}

/// Starts a server with engine options of its own.
pub async fn start_with(
    engine_tweak: impl FnOnce(&mut EngineOptions),
    tweak: impl FnOnce(&mut ServerConfig),
) -> TestServer {
    let engine = Arc::new(offline::engine(engine_tweak).await);
    let mut config = ServerConfig {
        port: 0,
        model_id: "smollm2".into(),
        ..ServerConfig::default()
    };
    tweak(&mut config);
    let token = config.token.clone();
    let handle = server::start(engine, config).expect("the server starts");
    let base = handle.base_url();
    TestServer {
        handle,
        base,
        client: reqwest::Client::new(),
        token,
    }
}

/// A response: status, headers' content type, and the body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    /// The `data:` payloads of a server-sent event stream.
    pub fn events(&self) -> Vec<String> {
        sse_data(&self.body)
    }
}

/// The `data:` payloads of a server-sent event stream.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

impl TestServer {
    /// `POST {base}{path}` with a raw body (and the token, if the server has one).
    pub fn post_raw(&self, path: &str, body: impl Into<String>) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.into());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        request
    }

    /// `POST` a JSON body and read the whole reply.
    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        read(self.post_raw(path, body.to_string()).send().await.unwrap()).await
    }

    /// `GET` and read the whole reply.
    pub async fn get(&self, path: &str) -> Reply {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        read(request.send().await.unwrap()).await
    }

    /// The queue as `GET /health` reports it: (running, waiting).
    pub async fn queue(&self) -> (u64, u64) {
        let health = self
            .client
            .get(format!("http://{}/health", self.handle.local_addr()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let health: Value = serde_json::from_str(&health).unwrap();
        (
            health["queue"]["running"].as_u64().unwrap(),
            health["queue"]["waiting"].as_u64().unwrap(),
        )
    }

    /// Waits until `waiting` requests wait in the queue.
    pub async fn wait_for_waiting(&self, waiting: u64) {
        for _ in 0..600 {
            if self.queue().await.1 == waiting {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the queue never held {waiting} waiting requests");
    }
}

/// Reads a whole response.
pub async fn read(response: reqwest::Response) -> Reply {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = response.text().await.unwrap();
    Reply {
        status,
        content_type,
        body,
    }
}

/// Reads a streaming response until its first event with content, and returns the
/// events so far with the still-open response stream.
pub async fn read_until_content(
    response: reqwest::Response,
) -> (
    Vec<Value>,
    impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>>,
) {
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    loop {
        let chunk = stream
            .next()
            .await
            .expect("the stream stays open until content arrives")
            .unwrap();
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        let complete = match buffer.rfind("\n\n") {
            Some(end) => &buffer[..end],
            None => continue,
        };
        let events: Vec<Value> = sse_data(complete)
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let has_content = events.iter().any(|e| {
            e["choices"][0]["delta"]["content"]
                .as_str()
                .or(e["choices"][0]["text"].as_str())
                .is_some_and(|t| !t.is_empty())
        });
        if has_content {
            return (events, stream);
        }
    }
}

/// A chat request body (greedy, no repetition penalty, few tokens).
pub fn chat_body(messages: Value, max_tokens: u64) -> Value {
    serde_json::json!({
        "model": "smollm2",
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
    })
}

/// A one-question conversation.
pub fn question(text: &str) -> Value {
    serde_json::json!([{"role": "user", "content": text}])
}
