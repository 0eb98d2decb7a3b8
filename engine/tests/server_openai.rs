//! The official `openai` Python client against the server: runs
//! `scripts/openai_client_check.py` in the project's virtual environment (`.venv`, where
//! `scripts/requirements.txt` installs `openai`) against a server on the offline SmolLM2
//! with the default cache.

mod server_support;

use std::path::PathBuf;

use kivi_engine::cache::CacheConfig;
use server_support::{offline::workspace_root, start_with};

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
    let has_openai = std::process::Command::new(&python)
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_openai,
        "the openai package is missing from .venv: run \
         `.venv/bin/pip install -r scripts/requirements.txt` (or scripts/setup.sh)"
    );
    python
}

#[tokio::test]
async fn the_openai_python_client_works_against_the_server() {
    let python = python();
    // The cache `kivi serve` runs by default.
    let server = start_with(
        |e| e.cache = CacheConfig::recommended(),
        |c| c.token = Some("test-key".into()),
    )
    .await;
    let script = workspace_root().join("scripts/openai_client_check.py");
    let base = server.base.clone();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .args([base.as_str(), "smollm2", "test-key"])
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
        "openai client checks failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains("all openai client checks passed"));
    server.handle.stop().await;
}
