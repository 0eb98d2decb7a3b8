//! A fake hub for the hub tests: a real HTTP/1.1 server on 127.0.0.1 that answers the
//! requests the hub answers, with the headers the hub sends, and can misbehave on demand.
//!
//! - `GET /api/models/{owner}/{name}/revision/{rev}[?blobs=true]`: repo info with `siblings`
//!   (name, size, blobId, lfs.sha256), `sha` = the commit.
//! - `HEAD|GET /{owner}/{name}/resolve/{rev}/{file}`: small files answer 200 with
//!   `ETag` = git blob SHA-1; LFS files answer 302 to `/cdn/{sha256}` with `X-Linked-Etag`,
//!   `X-Linked-Size`, as the hub does. Both carry `X-Repo-Commit`.
//! - `HEAD|GET /cdn/{sha256}`: the LFS bytes, with `Range: bytes=N-` support.
//!
//! [`Faults`] make it drop connections after N bytes, answer 5xx, corrupt bytes, ignore
//! Range, send unsafe names, announce wrong sizes, or send slowly.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_RANGE, ETAG, LOCATION, RANGE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

type Body = BoxBody<Bytes, std::io::Error>;

const CHUNK: usize = 64 * 1024;

/// One file of a fake repository.
#[derive(Clone)]
pub struct FakeFile {
    pub path: String,
    pub data: Bytes,
    /// Served like an LFS file (302 to the CDN, X-Linked-* headers, lfs in the listing).
    pub lfs: bool,
    // Hashed once: debug builds hash slowly and the server needs them on every request.
    sha256: String,
    git_sha1: String,
}

impl FakeFile {
    pub fn new(path: &str, data: impl Into<Bytes>, lfs: bool) -> Self {
        let data = data.into();
        FakeFile {
            path: path.to_string(),
            sha256: sha256_hex(&data),
            git_sha1: git_sha1(&data),
            data,
            lfs,
        }
    }

    pub fn sha256(&self) -> String {
        self.sha256.clone()
    }

    /// What `git hash-object` prints for the contents.
    pub fn git_sha1(&self) -> String {
        self.git_sha1.clone()
    }

    /// The blob name a hub client uses: SHA-256 for LFS files, git SHA-1 otherwise.
    pub fn etag(&self) -> String {
        if self.lfs {
            self.sha256()
        } else {
            self.git_sha1()
        }
    }
}

/// A fake repository at one commit.
#[derive(Clone)]
pub struct FakeRepo {
    pub id: String,
    pub commit: String,
    pub files: Vec<FakeFile>,
}

impl FakeRepo {
    pub fn file(&self, path: &str) -> &FakeFile {
        self.files
            .iter()
            .find(|f| f.path == path)
            .unwrap_or_else(|| panic!("no fake file {path}"))
    }
}

/// Ways to misbehave. Keys are file paths inside the repo.
#[derive(Clone, Default)]
pub struct Faults {
    /// Close the connection after this many body bytes, for the next `n` GETs of the file.
    pub drop_after: HashMap<String, (u64, u32)>,
    /// Answer GETs of the file with this status.
    pub status: HashMap<String, u16>,
    /// Serve the file with one byte changed (headers keep the true hash and size).
    pub corrupt: HashSet<String>,
    /// Ignore `Range` and always send the whole file with 200.
    pub ignore_range: bool,
    /// Send bodies in 64 KiB chunks with this pause between chunks.
    pub throttle: Option<Duration>,
    /// Extra (unsafe) names in the listing.
    pub extra_listing_names: Vec<String>,
    /// Size announced in the listing and the headers instead of the real one.
    pub announced_size: HashMap<String, u64>,
    /// Raw ETag / X-Linked-Etag header value sent for the file.
    pub etag_header: HashMap<String, String>,
    /// Status for the listing API.
    pub api_status: Option<u16>,
    /// Host name in the CDN redirect, to make it another origin (`localhost` vs 127.0.0.1).
    pub cdn_host: Option<String>,
}

/// One request the server saw.
#[derive(Clone, Debug)]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

struct State {
    repos: Vec<FakeRepo>,
    faults: Mutex<Faults>,
    /// How often each drop fault fired (faults are cloned per request, so counts live here).
    drop_uses: Mutex<HashMap<String, u32>>,
    log: Mutex<Vec<Logged>>,
    base: String,
}

/// The running server; stops when dropped.
pub struct FakeHub {
    pub addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeHub {
    pub async fn start(repos: Vec<FakeRepo>) -> FakeHub {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            repos,
            faults: Mutex::new(Faults::default()),
            drop_uses: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
            base: format!("http://{addr}"),
        });
        let accept_state = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = accept_state.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(&state, req).await) }
                    });
                    // Errors here are the dropped connections the tests ask for.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FakeHub { addr, state, task }
    }

    pub fn endpoint(&self) -> String {
        self.state.base.clone()
    }

    pub fn repo(&self, id: &str) -> &FakeRepo {
        self.state.repos.iter().find(|r| r.id == id).unwrap()
    }

    /// Changes the faults.
    pub fn faults(&self, change: impl FnOnce(&mut Faults)) {
        change(&mut self.state.faults.lock().unwrap());
        self.state.drop_uses.lock().unwrap().clear();
    }

    pub fn requests(&self) -> Vec<Logged> {
        self.state.log.lock().unwrap().clone()
    }

    pub fn clear_log(&self) {
        self.state.log.lock().unwrap().clear();
    }
}

async fn handle(state: &State, req: Request<Incoming>) -> Response<Body> {
    let header = |name| {
        req.headers()
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .map(str::to_string)
    };
    state.log.lock().unwrap().push(Logged {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
        range: header(RANGE),
        authorization: header(hyper::header::AUTHORIZATION),
    });
    let faults = state.faults.lock().unwrap().clone();
    let segments: Vec<String> = req
        .uri()
        .path()
        .trim_start_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let head = req.method() == Method::HEAD;
    let range = header(RANGE);

    match segments
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["api", "models", owner, name, "revision", rev] => {
            api_info(state, &faults, &format!("{owner}/{name}"), rev)
        }
        ["cdn", sha] => {
            let found = state
                .repos
                .iter()
                .flat_map(|r| r.files.iter())
                .find(|f| f.lfs && f.sha256() == *sha);
            match found {
                Some(file) => serve_bytes(state, file, &faults, head, range.as_deref()),
                None => error(StatusCode::NOT_FOUND, "EntryNotFound"),
            }
        }
        [owner, name, "resolve", rev, rest @ ..] if !rest.is_empty() => {
            let id = format!("{owner}/{name}");
            let Some(repo) = state.repos.iter().find(|r| r.id == id) else {
                return error(StatusCode::UNAUTHORIZED, "RepoNotFound");
            };
            if *rev != "main" && *rev != repo.commit {
                return error(StatusCode::NOT_FOUND, "RevisionNotFound");
            }
            let path = rest.join("/");
            let Some(file) = repo.files.iter().find(|f| f.path == path) else {
                return error(StatusCode::NOT_FOUND, "EntryNotFound");
            };
            resolve(state, &faults, repo, file, head, range.as_deref())
        }
        _ => error(StatusCode::NOT_FOUND, "EntryNotFound"),
    }
}

fn api_info(state: &State, faults: &Faults, id: &str, rev: &str) -> Response<Body> {
    if let Some(status) = faults.api_status {
        return error(StatusCode::from_u16(status).unwrap(), "");
    }
    let Some(repo) = state.repos.iter().find(|r| r.id == id) else {
        return error(StatusCode::UNAUTHORIZED, "RepoNotFound");
    };
    if rev != "main" && rev != repo.commit {
        return error(StatusCode::NOT_FOUND, "RevisionNotFound");
    }
    let mut siblings: Vec<serde_json::Value> = repo
        .files
        .iter()
        .map(|f| {
            let size = announced_size(faults, f);
            let mut s = serde_json::json!({
                "rfilename": f.path,
                "size": size,
                "blobId": if f.lfs { git_sha1(b"lfs pointer") } else { f.git_sha1() },
            });
            if f.lfs {
                s["lfs"] =
                    serde_json::json!({"sha256": f.sha256(), "size": size, "pointerSize": 134});
            }
            s
        })
        .collect();
    for name in &faults.extra_listing_names {
        siblings.push(serde_json::json!({"rfilename": name, "size": 4, "blobId": git_sha1(b"x")}));
    }
    let body = serde_json::json!({
        "_id": "0000",
        "id": repo.id,
        "modelId": repo.id,
        "sha": repo.commit,
        "private": false,
        "siblings": siblings,
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(full(body.to_string()))
        .unwrap()
}

fn resolve(
    state: &State,
    faults: &Faults,
    repo: &FakeRepo,
    file: &FakeFile,
    head: bool,
    range: Option<&str>,
) -> Response<Body> {
    if file.lfs {
        let etag = faults
            .etag_header
            .get(&file.path)
            .cloned()
            .unwrap_or_else(|| format!("\"{}\"", file.sha256()));
        return Response::builder()
            .status(StatusCode::FOUND)
            .header(LOCATION, cdn_url(state, faults, file))
            .header("x-repo-commit", &repo.commit)
            .header("x-linked-etag", etag)
            .header("x-linked-size", announced_size(faults, file).to_string())
            .header(ETAG, format!("\"{}\"", git_sha1(b"lfs pointer")))
            .body(empty())
            .unwrap();
    }
    let mut response = serve_bytes(state, file, faults, head, range);
    let headers = response.headers_mut();
    headers.insert("x-repo-commit", repo.commit.parse().unwrap());
    let etag = faults
        .etag_header
        .get(&file.path)
        .cloned()
        .unwrap_or_else(|| format!("\"{}\"", file.git_sha1()));
    headers.insert(ETAG, etag.parse().unwrap());
    response
}

/// The bytes of a file (or their headers, for HEAD), honouring the faults.
fn serve_bytes(
    state: &State,
    file: &FakeFile,
    faults: &Faults,
    head: bool,
    range: Option<&str>,
) -> Response<Body> {
    if !head {
        if let Some(status) = faults.status.get(&file.path) {
            return error(StatusCode::from_u16(*status).unwrap(), "");
        }
    }
    let mut data = file.data.to_vec();
    if faults.corrupt.contains(&file.path) {
        let mid = data.len() / 2;
        data[mid] ^= 0xff;
    }
    let len = data.len() as u64;
    let start = match range {
        Some(r) if !faults.ignore_range => r
            .strip_prefix("bytes=")
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|n| n.parse::<u64>().ok()),
        _ => None,
    };
    let mut builder = Response::builder().header("accept-ranges", "bytes");
    let body_bytes = match start {
        Some(start) if start >= len => {
            return Response::builder()
                .status(StatusCode::RANGE_NOT_SATISFIABLE)
                .header(CONTENT_RANGE, format!("bytes */{len}"))
                .body(empty())
                .unwrap();
        }
        Some(start) => {
            builder = builder
                .status(StatusCode::PARTIAL_CONTENT)
                .header(CONTENT_RANGE, format!("bytes {start}-{}/{len}", len - 1));
            Bytes::from(data).slice(start as usize..)
        }
        None => {
            builder = builder.status(StatusCode::OK);
            Bytes::from(data)
        }
    };
    let announced = if start.is_none() && !file.lfs {
        announced_size(faults, file)
    } else {
        body_bytes.len() as u64
    };
    builder = builder.header(CONTENT_LENGTH, announced.to_string());
    if head {
        return builder.body(empty()).unwrap();
    }
    // Consumes one use of a drop fault per GET.
    let drop_after = {
        let mut uses = state.drop_uses.lock().unwrap();
        match faults.drop_after.get(&file.path) {
            Some(&(bytes, times)) => {
                let used = uses.entry(file.path.clone()).or_insert(0);
                if *used < times {
                    *used += 1;
                    Some(bytes)
                } else {
                    None
                }
            }
            None => None,
        }
    };
    builder
        .body(chunked_body(body_bytes, drop_after, faults.throttle))
        .unwrap()
}

fn chunked_body(data: Bytes, drop_after: Option<u64>, throttle: Option<Duration>) -> Body {
    let limit = drop_after.map(|n| n.min(data.len() as u64) as usize);
    let stream = futures_util::stream::unfold(0usize, move |sent| {
        let data = data.clone();
        async move {
            if let Some(limit) = limit {
                if sent >= limit {
                    if sent == usize::MAX {
                        return None;
                    }
                    // An error mid-body makes hyper close the socket: a dropped connection.
                    let err =
                        std::io::Error::new(std::io::ErrorKind::ConnectionReset, "dropped by test");
                    return Some((Err(err), usize::MAX));
                }
            }
            if sent >= data.len() || sent == usize::MAX {
                return None;
            }
            if let Some(pause) = throttle {
                tokio::time::sleep(pause).await;
            }
            let end = (sent + CHUNK)
                .min(data.len())
                .min(limit.unwrap_or(usize::MAX));
            Some((Ok(Frame::data(data.slice(sent..end))), end))
        }
    });
    BodyExt::boxed(StreamBody::new(stream))
}

fn cdn_url(state: &State, faults: &Faults, file: &FakeFile) -> String {
    let base = match &faults.cdn_host {
        Some(host) => state.base.replace("127.0.0.1", host),
        None => state.base.clone(),
    };
    format!("{base}/cdn/{}", file.sha256())
}

fn announced_size(faults: &Faults, file: &FakeFile) -> u64 {
    faults
        .announced_size
        .get(&file.path)
        .copied()
        .unwrap_or(file.data.len() as u64)
}

fn error(status: StatusCode, code: &str) -> Response<Body> {
    let mut b = Response::builder().status(status);
    if !code.is_empty() {
        b = b.header("x-error-code", code);
    }
    b.body(full(format!("{{\"error\":\"{status}\"}}"))).unwrap()
}

fn full(s: impl Into<Bytes>) -> Body {
    Full::new(s.into()).map_err(|never| match never {}).boxed()
}

fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn git_sha1(data: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", data.len()).as_bytes());
    h.update(data);
    hex(&h.finalize())
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// Deterministic pseudo-random bytes (xorshift64*), so blobs are incompressible and every
/// test run serves the same model.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A valid safetensors file with one float32 tensor of `floats` values.
pub fn safetensors_blob(name: &str, floats: usize, seed: u64) -> Vec<u8> {
    let header = format!(
        "{{\"{name}\":{{\"dtype\":\"F32\",\"shape\":[{floats}],\"data_offsets\":[0,{}]}}}}",
        floats * 4
    );
    let mut header = header.into_bytes();
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    out.extend_from_slice(&noise(floats * 4, seed));
    out
}

fn commit_for(id: &str) -> String {
    git_sha1(format!("commit of {id}").as_bytes())
}

const CONFIG: &str = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"model_type":"llama"}"#;

/// A small single-file checkpoint: config, tokenizer files, a 6 MiB `model.safetensors`
/// (LFS), plus files a runnable download must skip.
pub fn tiny_model(id: &str) -> FakeRepo {
    FakeRepo {
        id: id.to_string(),
        commit: commit_for(id),
        files: vec![
            FakeFile::new(
                ".gitattributes",
                "*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
                false,
            ),
            FakeFile::new("README.md", "# tiny test model\n", false),
            FakeFile::new("config.json", CONFIG, false),
            FakeFile::new("tokenizer.json", noise(40_000, 7), false),
            FakeFile::new(
                "tokenizer_config.json",
                r#"{"chat_template":"{{ messages }}"}"#,
                false,
            ),
            FakeFile::new(
                "model.safetensors",
                safetensors_blob("w", 6 * 1024 * 1024 / 4, 42),
                true,
            ),
            FakeFile::new("extra/notes.txt", "not needed to run\n", false),
        ],
    }
}

/// A sharded checkpoint: config, `model.safetensors.index.json` and two LFS shards.
pub fn sharded_model(id: &str) -> FakeRepo {
    let index = r#"{"metadata":{"total_size":0},"weight_map":{
        "a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}"#;
    FakeRepo {
        id: id.to_string(),
        commit: commit_for(id),
        files: vec![
            FakeFile::new("config.json", CONFIG, false),
            FakeFile::new("tokenizer.json", noise(10_000, 3), false),
            FakeFile::new("model.safetensors.index.json", index, false),
            FakeFile::new(
                "model-00001-of-00002.safetensors",
                safetensors_blob("a", 300_000, 1),
                true,
            ),
            FakeFile::new(
                "model-00002-of-00002.safetensors",
                safetensors_blob("b", 300_000, 2),
                true,
            ),
            FakeFile::new(
                "consolidated.safetensors",
                safetensors_blob("c", 10_000, 3),
                true,
            ),
        ],
    }
}

/// A GGUF-only repository with two quantizations.
pub fn gguf_repo(id: &str) -> FakeRepo {
    let gguf = |seed| {
        let mut v = b"GGUF".to_vec();
        v.extend(noise(1024 * 1024, seed));
        v
    };
    FakeRepo {
        id: id.to_string(),
        commit: commit_for(id),
        files: vec![
            FakeFile::new("README.md", "# gguf\n", false),
            FakeFile::new("tiny.Q4_0.gguf", gguf(11), true),
            FakeFile::new("tiny.Q8_0.gguf", gguf(12), true),
        ],
    }
}
