//! `kivi serve` end to end on the offline SmolLM2: it prints its URL, answers over HTTP
//! with its API key, refuses a port in use, warns when not on loopback, and stops
//! gracefully on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

fn model() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../.data/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.is_file(),
        "offline model missing at {}: run `scripts/setup.sh data` to fetch it",
        path.display()
    );
    path
}

fn serve(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kivi"));
    command
        .arg("serve")
        .arg("--model")
        .arg(model())
        .args(args)
        .env_remove("KIVI_MODEL")
        .env_remove("KIVI_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Starts `kivi serve` and waits for its "listening on http://HOST:PORT/v1" line.
fn start(args: &[&str]) -> (Child, String) {
    let mut child = serve(args).spawn().expect("kivi starts");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let address = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .and_then(|rest| rest.strip_suffix("/v1"))
        .map(str::to_string);
    let Some(address) = address else {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "no listening line: {line:?}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    };
    (child, address)
}

/// One HTTP/1.1 request; returns the status and the body.
fn http(address: &str, method: &str, path: &str, key: Option<&str>, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (status, body)
}

fn stop(child: Child, signal: &str) -> Output {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait_with_output().unwrap()
}

#[cfg(unix)]
#[test]
fn serve_answers_refuses_a_busy_port_and_stops_on_sigterm() {
    let (server, address) = start(&["--port", "0", "--model-id", "smol", "--api-key", "k3y"]);
    assert!(address.starts_with("127.0.0.1:"), "{address}");
    let (status, body) = http(&address, "GET", "/v1/models", None, "");
    assert_eq!(status, 401, "{body}");
    let (status, body) = http(&address, "GET", "/v1/models", Some("k3y"), "");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"id\":\"smol\""), "{body}");
    let (status, body) = http(
        &address,
        "POST",
        "/v1/chat/completions",
        Some("k3y"),
        r#"{"model": "smol", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"object\":\"chat.completion\""), "{body}");
    assert!(body.contains("\"kv_cache\""), "{body}");

    // A second server on the same port says why it cannot start.
    let port = address.rsplit(':').next().unwrap();
    let busy = serve(&["--port", port]).output().unwrap();
    assert!(!busy.status.success());
    let stderr = String::from_utf8_lossy(&busy.stderr);
    assert!(
        stderr.contains(&format!("port {port} is already in use")),
        "{stderr}"
    );

    let out = stop(server, "-TERM");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(stderr.contains("stopping"), "{stderr}");
}

#[cfg(unix)]
#[test]
fn serve_warns_when_listening_beyond_loopback() {
    let (server, address) = start(&["--host", "0.0.0.0", "--port", "0"]);
    assert!(address.starts_with("0.0.0.0:"), "{address}");
    let port = address.rsplit(':').next().unwrap();
    let (status, _) = http(&format!("127.0.0.1:{port}"), "GET", "/health", None, "");
    assert_eq!(status, 200);
    let out = stop(server, "-INT");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: listening on 0.0.0.0, not a loopback address"),
        "{stderr}"
    );
    assert!(stderr.contains("set --api-key"), "{stderr}");
}
