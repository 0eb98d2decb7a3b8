//! The OpenAI-compatible server end to end: a real HTTP client (reqwest) against a running
//! server on the offline SmolLM2. Answers whole and streamed, stop sequences, prefix reuse
//! across requests, the KIVI extension and statistics, the queue (order, 429), client
//! disconnects, malformed requests, authentication, CORS, and the server's life cycle.
//! Generations stay a few tokens long: debug builds decode at about 5 tokens per second.

mod server_support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kivi_engine::server::{self, ServerConfig, ServerError};
use serde_json::{json, Value};
use server_support::{chat_body, question, read, read_until_content, start, start_with};

/// Checks the usage object every response ends with.
fn check_usage(usage: &Value, config: &str) {
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    let completion = usage["completion_tokens"].as_u64().unwrap();
    assert!(prompt > 0, "{usage}");
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), prompt + completion);
    assert!(
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            < prompt
    );
    let kv = &usage["kv_cache"];
    assert_eq!(kv["config"], config, "{usage}");
    let (fp16, held) = (
        kv["fp16_bytes"].as_u64().unwrap(),
        kv["held_bytes"].as_u64().unwrap(),
    );
    assert!(fp16 > 0 && held > 0, "{usage}");
    let ratio = kv["ratio"].as_f64().unwrap();
    assert!((ratio - held as f64 / fp16 as f64).abs() < 1e-9, "{usage}");
    assert!(kv["tokens"].as_u64().unwrap() >= prompt, "{usage}");
    assert!(usage["timings"]["time_to_first_token_s"].as_f64().is_some());
}

/// The JSON chunks of a finished stream, checked to end with `data: [DONE]`.
fn json_chunks(events: &[String]) -> Vec<Value> {
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

#[tokio::test]
async fn chat_answers_whole_and_streamed() {
    let server = start(|_| {}).await;
    let body = chat_body(question("What is the capital of France?"), 8);
    let whole = server.post("/chat/completions", &body).await;
    assert_eq!(whole.status, 200, "{}", whole.body);
    assert_eq!(whole.content_type, "application/json");
    let whole = whole.json();
    println!("whole: {whole}");
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["model"], "smollm2");
    assert!(whole["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let choice = &whole["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    let text = choice["message"]["content"].as_str().unwrap().to_string();
    assert!(!text.is_empty());
    let finish = choice["finish_reason"].as_str().unwrap();
    assert!(finish == "stop" || finish == "length", "{finish}");
    check_usage(&whole["usage"], "full");
    let completion_tokens = whole["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((1..=8).contains(&completion_tokens));

    // The same request streamed: the same text, OpenAI's chunk sequence, usage last.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let reply = server.post("/chat/completions", &streamed).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.content_type.starts_with("text/event-stream"));
    let chunks = json_chunks(&reply.events());
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(chunks
        .iter()
        .all(|c| c["id"] == id && c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let (usage_chunk, rest) = chunks.split_last().unwrap();
    let (finish_chunk, content) = rest.split_last().unwrap();
    let joined: String = content
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(joined, text, "streamed and whole answers differ");
    assert!(content
        .iter()
        .all(|c| c["usage"].is_null() && c["choices"][0]["finish_reason"].is_null()));
    assert_eq!(finish_chunk["choices"][0]["finish_reason"], finish);
    assert_eq!(finish_chunk["choices"][0]["delta"], json!({}));
    assert_eq!(usage_chunk["choices"], json!([]));
    let usage = &usage_chunk["usage"];
    check_usage(usage, "full");
    assert_eq!(
        usage["completion_tokens"].as_u64().unwrap(),
        completion_tokens
    );
    // The second run of the same prompt reused the first one's cache.
    assert!(
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    // Without include_usage no chunk carries a usage field.
    streamed["stream_options"] = json!({"include_usage": false});
    streamed["max_tokens"] = json!(2);
    let reply = server.post("/chat/completions", &streamed).await;
    let chunks = json_chunks(&reply.events());
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "{chunks:?}"
    );
    assert!(chunks.last().unwrap()["choices"][0]["finish_reason"].is_string());
}

#[tokio::test]
async fn completions_and_stop_sequences_across_tokens() {
    let server = start(|_| {}).await;
    let prompt = "Once upon a time, there was a little";
    let body = json!({"prompt": prompt, "max_tokens": 10, "temperature": 0, "stream": true});
    let reply = server.post("/completions", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let chunks = json_chunks(&reply.events());
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
    let pieces: Vec<String> = chunks
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    let full: String = pieces.concat();
    println!("pieces: {pieces:?}");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "length"
    );

    let mut whole = body.clone();
    whole["stream"] = json!(false);
    let reply = server.post("/completions", &whole).await.json();
    assert_eq!(reply["object"], "text_completion");
    assert_eq!(reply["choices"][0]["text"], full.as_str());
    assert_eq!(reply["choices"][0]["finish_reason"], "length");
    assert_eq!(reply["usage"]["completion_tokens"], 10);
    check_usage(&reply["usage"], "full");

    // A stop sequence made of the end of one token and the start of the next.
    let i = (1..pieces.len() - 1)
        .find(|&i| pieces[i].chars().count() >= 2 && pieces[i + 1].chars().count() >= 2)
        .expect("two consecutive pieces of two characters or more");
    let tail: String = {
        let chars: Vec<char> = pieces[i].chars().collect();
        chars[chars.len() - 2..].iter().collect()
    };
    let head: String = pieces[i + 1].chars().take(2).collect();
    let stop = format!("{tail}{head}");
    let expected = &full[..full.find(&stop).unwrap()];
    println!("stop {stop:?} -> {expected:?}");
    for stream in [false, true] {
        let mut body = body.clone();
        body["stream"] = json!(stream);
        body["stop"] = json!(["never matches", stop]);
        let reply = server.post("/completions", &body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let (text, finish) = if stream {
            let chunks = json_chunks(&reply.events());
            let text: String = chunks
                .iter()
                .filter_map(|c| c["choices"][0]["text"].as_str())
                .collect();
            (
                text,
                chunks.last().unwrap()["choices"][0]["finish_reason"].clone(),
            )
        } else {
            let reply = reply.json();
            (
                reply["choices"][0]["text"].as_str().unwrap().to_string(),
                reply["choices"][0]["finish_reason"].clone(),
            )
        };
        assert_eq!(text, expected, "stream: {stream}");
        assert_eq!(finish, "stop");
    }
}

#[tokio::test]
async fn a_follow_up_reuses_the_conversation_cache_and_kivi_is_reported() {
    let server = start(|_| {}).await;
    let system = "You are a helpful assistant. You know the ship is called the Pequod, its \
                  captain is Ahab, who hunts a white whale named Moby Dick, and the narrator \
                  is Ishmael, a sailor from Manhattan who went to sea to cure his gloom.";
    let q1 = "What is the ship called?";
    let kivi = json!({"k_bits": 2, "v_bits": 2, "group_size": 32, "residual_length": 0});
    for (kv_cache, config) in [(json!("full"), "full"), (kivi, "k2v2-g32-r0")] {
        let mut body = chat_body(
            json!([{"role": "system", "content": system}, {"role": "user", "content": q1}]),
            6,
        );
        body["kv_cache"] = kv_cache.clone();
        let first = server.post("/chat/completions", &body).await.json();
        let answer = first["choices"][0]["message"]["content"].as_str().unwrap();
        let usage1 = &first["usage"];
        check_usage(usage1, config);
        assert_eq!(usage1["prompt_tokens_details"]["cached_tokens"], 0);
        let prompt1 = usage1["prompt_tokens"].as_u64().unwrap();

        body["messages"] = json!([
            {"role": "system", "content": system},
            {"role": "user", "content": q1},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "Who is its captain?"},
        ]);
        let second = server.post("/chat/completions", &body).await.json();
        let usage2 = &second["usage"];
        check_usage(usage2, config);
        let cached = usage2["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
        println!(
            "[{config}] turn 2 reused {cached} of {} prompt tokens (turn 1 had {prompt1}); \
             first token after {} s vs {} s; kv {}",
            usage2["prompt_tokens"],
            usage2["timings"]["time_to_first_token_s"],
            usage1["timings"]["time_to_first_token_s"],
            usage2["kv_cache"]
        );
        // The whole first prompt is shared (a KIVI cache may give back a partial group).
        let slack = if config == "full" { 0 } else { 32 };
        assert!(cached + slack >= prompt1, "reused {cached} of {prompt1}");
        if config != "full" {
            let kv = &usage2["kv_cache"];
            assert!(kv["quantized_tokens"].as_u64().unwrap() > 0, "{kv}");
            assert!(
                kv["held_bytes"].as_u64().unwrap() < kv["fp16_bytes"].as_u64().unwrap(),
                "a 2-bit cache holds less than float16: {kv}"
            );
        }
    }
}

#[tokio::test]
async fn requests_queue_in_order_and_a_full_queue_answers_429() {
    let server = start(|c| c.queue_capacity = 2).await;
    // A runs (streaming, so that we see it started; it runs until its client leaves) ...
    let a = server
        .post_raw(
            "/completions",
            json!({"prompt": "The history of the sea", "max_tokens": 2000, "temperature": 0,
                   "stream": true})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(a.status(), 200);
    let (_, a_stream) = read_until_content(a).await;
    assert_eq!(server.queue().await, (1, 0));
    // ... B and C wait behind it, in that order ...
    let mut waiting = Vec::new();
    for (i, name) in ["B", "C"].into_iter().enumerate() {
        let request = server.post_raw(
            "/completions",
            json!({"prompt": format!("Request {name}:"), "max_tokens": 2, "temperature": 0})
                .to_string(),
        );
        waiting.push(tokio::spawn(async move {
            let reply = read(request.send().await.unwrap()).await;
            (name, Instant::now(), reply)
        }));
        server.wait_for_waiting(i as u64 + 1).await;
    }
    // ... and D finds the queue full.
    let d = server
        .post(
            "/completions",
            &json!({"prompt": "Request D:", "max_tokens": 2}),
        )
        .await;
    assert_eq!(d.status, 429, "{}", d.body);
    let error = d.json();
    assert_eq!(error["error"]["type"], "rate_limit_error");
    assert_eq!(error["error"]["code"], "rate_limit_exceeded");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("queue"));

    // A's client leaves (A would run for minutes), and B and C run, in order.
    drop(a_stream);
    let a_done = Instant::now();
    let mut done = Vec::new();
    for task in waiting {
        let (name, at, reply) = task.await.unwrap();
        assert_eq!(reply.status, 200, "{name}: {}", reply.body);
        let queued = reply.json()["usage"]["timings"]["queue_s"]
            .as_f64()
            .unwrap();
        println!("{name} waited {queued:.2} s");
        done.push((at, name));
    }
    assert!(done.iter().all(|(at, _)| *at >= a_done));
    done.sort();
    assert_eq!(
        done.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
        vec!["B", "C"]
    );
    assert_eq!(server.queue().await, (0, 0));
}

#[tokio::test]
async fn a_client_that_disconnects_cancels_its_generation() {
    let server = start(|_| {}).await;
    // 2000 tokens would take minutes; each disconnect must free the engine at once.
    let long = |stream: bool| {
        json!({"prompt": "A long story about the sea:", "max_tokens": 2000, "temperature": 0,
               "stream": stream})
        .to_string()
    };
    let short = json!({"prompt": "Hello", "max_tokens": 2, "temperature": 0});
    let next_starts_promptly = |reply: server_support::Reply, since: Instant| {
        assert_eq!(reply.status, 200, "{}", reply.body);
        let elapsed = since.elapsed();
        let queued = reply.json()["usage"]["timings"]["queue_s"]
            .as_f64()
            .unwrap();
        println!("next request: {elapsed:?} in all, {queued:.2} s queued");
        assert!(
            elapsed < Duration::from_secs(60),
            "the next request took {elapsed:?}: the abandoned generation kept running"
        );
    };

    // Streaming: the client reads a token, then closes the connection.
    let response = server
        .post_raw("/completions", long(true))
        .send()
        .await
        .unwrap();
    let (events, stream) = read_until_content(response).await;
    assert!(!events.is_empty());
    drop(stream);
    let since = Instant::now();
    next_starts_promptly(server.post("/completions", &short).await, since);

    // Not streaming: the client gives up waiting (a timeout closes the connection).
    let gave_up = server
        .post_raw("/completions", long(false))
        .timeout(Duration::from_secs(4))
        .send()
        .await;
    assert!(gave_up.is_err(), "a 2000-token answer cannot arrive in 4 s");
    let since = Instant::now();
    next_starts_promptly(server.post("/completions", &short).await, since);

    // Waiting in the queue: a client that gives up leaves the queue.
    let response = server
        .post_raw("/completions", long(true))
        .send()
        .await
        .unwrap();
    let (_, stream) = read_until_content(response).await;
    let waiter = server
        .post_raw("/completions", short.to_string())
        .timeout(Duration::from_secs(1))
        .send()
        .await;
    assert!(waiter.is_err());
    server.wait_for_waiting(0).await;
    drop(stream);
    let since = Instant::now();
    next_starts_promptly(server.post("/completions", &short).await, since);
    assert_eq!(server.queue().await, (0, 0));
}

#[tokio::test]
async fn malformed_requests_get_openai_style_errors() {
    let server = start_with(|o| o.context_length = Some(64), |_| {}).await;
    let ok = json!([{"role": "user", "content": "Hi"}]);
    // (body, status, param, text in the message)
    let cases: Vec<(String, u16, Value, &str)> = vec![
        (
            "{\"messages\": [".into(),
            400,
            Value::Null,
            "parse the JSON",
        ),
        ("".into(), 400, Value::Null, "empty"),
        (
            json!({"messages": "hi"}).to_string(),
            400,
            json!("messages"),
            "invalid type",
        ),
        (
            json!({"messages": ok, "temperature": "hot"}).to_string(),
            400,
            json!("temperature"),
            "invalid type",
        ),
        (
            json!({"messages": ok, "max_tokens": 1.5}).to_string(),
            400,
            json!("max_tokens"),
            "invalid type",
        ),
        (
            json!({"messages": ok, "stop": [1]}).to_string(),
            400,
            json!("stop"),
            "expected strings",
        ),
        (
            json!({"messages": ok, "kv_cache": {"k_bits": 3, "v_bits": 2}}).to_string(),
            400,
            json!("kv_cache.k_bits"),
            "key bits must be 2 or 4, not 3",
        ),
        (
            json!({"messages": ok, "kv_cache": {"group_size": 32, "residual_length": 40}})
                .to_string(),
            400,
            json!("kv_cache.residual_length"),
            "multiple of the group size 32",
        ),
        (
            json!({"messages": [{"role": "user", "content": "word ".repeat(200)}]}).to_string(),
            400,
            json!("messages"),
            "context holds 64",
        ),
        (
            json!({"model": "gpt-4o", "messages": ok}).to_string(),
            404,
            json!("model"),
            "does not exist",
        ),
    ];
    for (body, status, param, text) in &cases {
        for stream in [false, true] {
            let body = match (stream, serde_json::from_str::<Value>(body)) {
                (true, Ok(Value::Object(mut map))) => {
                    map.insert("stream".into(), json!(true));
                    Value::Object(map).to_string()
                }
                (true, _) => continue,
                (false, _) => body.clone(),
            };
            let reply = read(
                server
                    .post_raw("/chat/completions", body.clone())
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            assert_eq!(reply.status, *status, "{body}: {}", reply.body);
            assert_eq!(reply.content_type, "application/json");
            let error = &reply.json()["error"];
            assert_eq!(error["type"], "invalid_request_error", "{body}");
            assert_eq!(error["param"], *param, "{body}: {error}");
            let message = error["message"].as_str().unwrap();
            assert!(message.contains(text), "{body}: {message}");
            assert!(error.get("code").is_some());
        }
    }
    let overflow = server
        .post(
            "/completions",
            &json!({"prompt": "word ".repeat(200), "max_tokens": 1}),
        )
        .await;
    assert_eq!(overflow.status, 400);
    assert_eq!(overflow.json()["error"]["code"], "context_length_exceeded");
    assert_eq!(overflow.json()["error"]["param"], "prompt");

    let unknown = server.get("/models/gpt-4o").await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["error"]["code"], "model_not_found");
    let listed = server.get("/models").await.json();
    assert_eq!(listed["object"], "list");
    assert_eq!(listed["data"][0]["id"], "smollm2");
    assert_eq!(server.get("/models/smollm2").await.json()["id"], "smollm2");
    let nowhere = server.post("/embeddings", &json!({})).await;
    assert_eq!(nowhere.status, 404);
    assert_eq!(nowhere.json()["error"]["type"], "invalid_request_error");
    let wrong_method = server.get("/chat/completions").await;
    assert_eq!(wrong_method.status, 405);
    assert!(wrong_method.json()["error"]["message"].is_string());

    // curl without `-H 'Content-Type: application/json'` still works.
    let untyped = server
        .client
        .post(format!("{}/completions", server.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(json!({"prompt": "Hi", "max_tokens": 1}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(untyped.status(), 200);

    // CORS is off by default: no header a browser would accept.
    let preflight = server
        .client
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/chat/completions", server.base),
        )
        .header("origin", "http://localhost:5173")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(preflight
        .headers()
        .get("access-control-allow-origin")
        .is_none());
}

#[tokio::test]
async fn a_bearer_token_is_required_when_set_and_cors_opens_to_browsers() {
    let server = start(|c| {
        c.token = Some("sekrit".into());
        c.cors = true;
    })
    .await;
    let url = |path: &str| format!("{}{path}", server.base);
    let bare = read(server.client.get(url("/models")).send().await.unwrap()).await;
    assert_eq!(bare.status, 401, "{}", bare.body);
    let error = bare.json();
    assert_eq!(error["error"]["code"], "invalid_api_key");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let wrong = read(
        server
            .client
            .post(url("/chat/completions"))
            .bearer_auth("guess")
            .body("{not even json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(wrong.status, 401, "the token is checked before the body");
    assert_eq!(server.get("/models").await.status, 200);
    let answer = server
        .post("/chat/completions", &chat_body(question("Hi"), 1))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // Health needs no token (the app and scripts poll it).
    let health = server
        .client
        .get(format!("http://{}/health", server.handle.local_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    // A browser's preflight, then the request itself, from another origin.
    let preflight = server
        .client
        .request(reqwest::Method::OPTIONS, url("/chat/completions"))
        .header("origin", "http://localhost:5173")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type",
        )
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let headers = preflight.headers();
    assert_eq!(headers["access-control-allow-origin"], "*");
    let allowed = headers["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(allowed.contains("authorization"), "{allowed}");
    let models = server
        .client
        .get(url("/models"))
        .bearer_auth("sekrit")
        .header("origin", "http://localhost:5173")
        .send()
        .await
        .unwrap();
    assert_eq!(models.headers()["access-control-allow-origin"], "*");
}

#[tokio::test]
async fn a_port_in_use_is_reported_and_stop_is_graceful() {
    let server = start(|_| {}).await;
    let addr = server.handle.local_addr();
    assert!(addr.ip().is_loopback());
    let engine = std::sync::Arc::new(server_support::offline::engine(|_| {}).await);
    let busy = ServerConfig {
        port: addr.port(),
        ..ServerConfig::default()
    };
    match server::start(engine.clone(), busy.clone()) {
        Err(ServerError::PortInUse(port)) => assert_eq!(port, addr.port()),
        other => panic!("expected PortInUse, got {other:?}"),
    }
    assert!(ServerError::PortInUse(8080)
        .to_string()
        .contains("port 8080 is already in use"));
    // Outside a Tokio runtime there is nothing to serve on.
    let outside = {
        let engine = engine.clone();
        std::thread::spawn(move || server::start(engine, ServerConfig::default()).err())
            .join()
            .unwrap()
    };
    assert!(
        matches!(outside, Some(ServerError::NoRuntime)),
        "{outside:?}"
    );

    // Stopping ends a running stream normally and frees the port.
    let response = server
        .post_raw(
            "/completions",
            json!({"prompt": "A long story:", "max_tokens": 2000, "stream": true}).to_string(),
        )
        .send()
        .await
        .unwrap();
    let (_, mut stream) = read_until_content(response).await;
    let started = Instant::now();
    let rest = tokio::spawn(async move {
        let mut body = String::new();
        while let Some(Ok(chunk)) = stream.next().await {
            body.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        body
    });
    server.handle.stop().await;
    let rest = rest.await.unwrap();
    println!("stopped in {:?}", started.elapsed());
    assert!(rest.contains("\"finish_reason\":\"stop\""), "{rest}");
    assert!(rest.trim_end().ends_with("data: [DONE]"), "{rest}");
    let again = server::start(engine, busy).expect("the port is free after stop");
    assert_eq!(again.local_addr(), addr);
    again.stop().await;
}
