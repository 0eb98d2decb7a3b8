//! The official `openai` Python client against the server: runs
//! `scripts/openai_client_check.py` in the project's virtual environment (`.venv`, where
//! `scripts/requirements.txt` installs `openai`) against a server on the offline SmolLM2
//! with the default cache, and `scripts/structured_output_check.py` (answers under JSON
//! schemas, validated by the `jsonschema` package) on SmolLM2 and Qwen2.5-Coder 0.5B.

mod server_support;

use std::path::PathBuf;

use kivi_engine::cache::CacheConfig;
use kivi_engine::session::ModelSource;
use server_support::{offline, offline::workspace_root, start_with, TestServer};

fn python() -> PathBuf {
    let root = workspace_root();
    let python = root.join(if cfg!(windows) {
        ".venv/Scripts/python.exe"
    } else {
        ".venv/bin/python"
    });
    assert!(
        python.is_file(),
        "no virtual environment at {}: run scripts/setup.sh",
        root.join(".venv").display()
    );
    let has_packages = std::process::Command::new(&python)
        .args(["-c", "import openai, jsonschema"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_packages,
        "the openai or jsonschema package is missing from .venv: run \
         `.venv/bin/pip install -r scripts/requirements.txt` (or scripts/setup.sh)"
    );
    python
}

/// Runs `script` against `server` serving `model`; asserts that it ends with `passed`.
async fn run_script(server: &TestServer, script: &str, model: &str, passed: &str) {
    let python = python();
    let script = workspace_root().join(script);
    let base = server.base.clone();
    let model = model.to_string();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .args([base.as_str(), model.as_str(), "test-key"])
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env_remove("OPENAI_BASE_URL")
            .output()
            .expect("python runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        output.status.success(),
        "client checks failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains(passed));
}

#[tokio::test]
async fn the_openai_python_client_works_against_the_server_and_schema_answers_validate() {
    // The cache `kivi serve` runs by default.
    let server = start_with(
        |e| e.cache = CacheConfig::recommended(),
        |c| c.token = Some("test-key".into()),
    )
    .await;
    for (script, passed) in [
        (
            "scripts/openai_client_check.py",
            "all openai client checks passed",
        ),
        (
            "scripts/structured_output_check.py",
            "all structured output checks passed",
        ),
    ] {
        run_script(&server, script, "smollm2", passed).await;
    }
    server.handle.stop().await;
}

#[tokio::test]
async fn schema_answers_validate_on_qwen25() {
    let server = start_with(
        |e| {
            e.source = ModelSource::Path(offline::qwen25_path());
            e.cache = CacheConfig::recommended();
            e.context_length = Some(2048);
        },
        |c| {
            c.token = Some("test-key".into());
            c.model_id = "qwen2.5-coder".into();
        },
    )
    .await;
    run_script(
        &server,
        "scripts/structured_output_check.py",
        "qwen2.5-coder",
        "all structured output checks passed",
    )
    .await;
    server.handle.stop().await;
}
