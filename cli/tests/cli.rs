//! The `kivi` binary end to end on the offline SmolLM2.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

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

fn kivi(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kivi"))
        .args(args)
        .env_remove("KIVI_MODEL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kivi starts");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Fails the test with the exit status and stderr when `kivi` did not succeed.
fn assert_succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fails the test unless `kivi` failed saying `why` on stderr.
fn assert_refused(out: &Output, why: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{why:?} expected: {stderr}");
    assert!(stderr.contains(why), "{why:?} expected: {stderr}");
}

#[test]
fn generate_streams_text_and_json_lines() {
    let model = model();
    let model = model.to_str().unwrap();
    let out = kivi(
        &[
            "generate",
            "--model",
            model,
            "--max-tokens",
            "12",
            "--repetition-penalty",
            "1",
            "Once upon a time, there was a little",
        ],
        "",
    );
    assert_succeeded(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with(" girl named Emma"), "{text:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("decode 12 tok"), "{stderr}");

    let out = kivi(
        &[
            "generate",
            "--json",
            "--model",
            model,
            "--max-tokens",
            "3",
            "--cache",
            "k2v2-g32-r32",
            "The sea",
        ],
        "",
    );
    assert_succeeded(&out);
    let events: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    assert_eq!(events[0]["type"], "started");
    assert_eq!(events.iter().filter(|e| e["type"] == "token").count(), 3);
    let done = events.last().unwrap();
    assert_eq!(done["type"], "done");
    assert_eq!(done["reason"], "length");
    assert_eq!(done["stats"]["cache"], "k2v2-g32-r32");
    assert_eq!(done["stats"]["kv"]["layers"].as_array().unwrap().len(), 30);
}

#[test]
fn chat_answers_each_turn_and_reuses_the_prefix() {
    let model = model();
    // The full cache: with the default KIVI cache, SmolLM2's greedy first token here is a
    // knife-edge between "The capital" and "L'Étoile" that CPUs summing in another order
    // (AVX-512 against AVX2 loops, OpenBLAS's core kernels) decide differently; this test
    // is about turns and prefix reuse, which do not depend on the cache kind.
    let out = kivi(
        &[
            "chat",
            "--model",
            model.to_str().unwrap(),
            "--max-tokens",
            "16",
            "--cache",
            "full",
        ],
        "What is the capital of France?\nAnd of Italy?\n/exit\n",
    );
    assert_succeeded(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summaries: Vec<&str> = stderr.lines().filter(|l| l.contains("reused")).collect();
    assert_eq!(summaries.len(), 2, "{stderr}");
    assert!(summaries[0].contains("(reused 0)"), "{stderr}");
    assert!(
        !summaries[1].contains("(reused 0)"),
        "second turn reuses the first: {stderr}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("Paris"), "{stdout}");
}

/// The first `chars` characters of Moby-Dick (whole lines), as a document file in `dir`.
fn moby_dick_document(dir: &std::path::Path, chars: usize) -> PathBuf {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.data/texts/moby-dick.txt"),
    )
    .expect("the offline texts: run `scripts/setup.sh data`");
    let cut = text[..chars].rfind('\n').unwrap();
    let path = dir.join("loomings.txt");
    std::fs::write(&path, &text[..cut]).unwrap();
    path
}

#[test]
fn a_chat_session_goes_on_after_a_restart_without_reading_the_document_again() {
    let model = model();
    let dir = tempfile::tempdir().unwrap();
    let doc = moby_dick_document(dir.path(), 6000);
    let session = dir.path().join("loomings.kivi");
    let chat = |more: &[&str], stdin: &str| {
        let mut args = vec![
            "chat",
            "--model",
            model.to_str().unwrap(),
            "--max-tokens",
            "8",
            "--session",
            session.to_str().unwrap(),
        ];
        args.extend(more);
        kivi(&args, stdin)
    };
    let summary = |out: &Output| {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let line = stderr
            .lines()
            .rev()
            .find(|l| l.contains("reused"))
            .map(str::to_owned);
        (stderr, line.unwrap_or_default())
    };
    let number_after = |line: &str, key: &str| -> usize {
        let rest = &line[line.find(key).unwrap_or_else(|| panic!("{key} in {line}")) + key.len()..];
        rest.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap()
    };

    let first = chat(&["--file", doc.to_str().unwrap()], "Who is the narrator?\n");
    assert_succeeded(&first);
    let (stderr, line) = summary(&first);
    assert!(line.contains("(reused 0)"), "{stderr}");
    assert!(stderr.contains("[session saved: "), "{stderr}");
    let read = number_after(&line, "prompt ");
    assert!(read > 1000, "the document is read: {stderr}");

    // A new process, no --file: the session brings its document, turns and cache.
    let second = chat(&[], "Where does he want to go?\n");
    assert_succeeded(&second);
    let (stderr, line) = summary(&second);
    assert!(stderr.contains("1 document, 2 messages]"), "{stderr}");
    assert!(stderr.contains("[document loomings.txt: "), "{stderr}");
    let prompt = number_after(&line, "prompt ");
    let reused = number_after(&line, "(reused ");
    assert!(prompt > read, "{stderr}");
    assert!(
        reused >= read - 1,
        "the follow-up reads only its own question: {stderr}"
    );

    // Other documents than the session's are refused, and the file is left as it was.
    let before = std::fs::read(&session).unwrap();
    let other = dir.path().join("other.txt");
    std::fs::write(&other, "Another text.").unwrap();
    let third = chat(&["--file", other.to_str().unwrap()], "Hi\n");
    assert_refused(&third, "other documents (loomings.txt)");
    assert_eq!(std::fs::read(&session).unwrap(), before);

    // Another cache setting than the session's is refused: the file holds that cache.
    let other_cache = chat(&["--cache", "full"], "Hi\n");
    assert_refused(&other_cache, "cannot resume the session");
    assert_eq!(std::fs::read(&session).unwrap(), before);

    // A damaged file is refused with a message, not read.
    std::fs::write(&session, &before[..before.len() / 2]).unwrap();
    assert_refused(&chat(&[], "Hi\n"), "cannot resume the session");
}

#[test]
fn bad_settings_are_explained() {
    let model = model();
    let out = kivi(
        &[
            "generate",
            "--model",
            model.to_str().unwrap(),
            "--cache",
            "k2v2-g32-r100",
            "x",
        ],
        "",
    );
    assert_refused(&out, "multiple of the group size");

    let out = kivi(&["generate", "--context", "lots", "x"], "");
    assert_refused(&out, "neither a number of tokens nor `fit`");

    let out = kivi(&["generate", "--model", "/nonexistent/model.gguf", "x"], "");
    assert_refused(&out, "neither an existing file");
}

/// `--context fit` takes the longest context this machine's memory holds: the whole of
/// SmolLM2's 8192 tokens with its default cache here (the engine's own test holds the
/// choice when memory is short).
#[test]
fn context_fit_takes_the_longest_that_fits() {
    let model = model();
    let args = [
        "generate",
        "--model",
        model.to_str().unwrap(),
        "--context",
        "fit",
    ];
    let out = kivi(&[&args[..], &["--max-tokens", "2", "The sea"]].concat(), "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("context 8192"), "{stderr}");
}

#[test]
fn json_schema_answers_keep_to_the_schema_and_a_cut_one_fails() {
    let model = model();
    let model = model.to_str().unwrap();
    let dir = std::env::temp_dir().join(format!("kivi-cli-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("person.json");
    std::fs::write(
        &schema,
        r#"{"type": "object",
            "properties": {"name": {"type": "string", "maxLength": 20},
                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
            "required": ["name", "age"], "additionalProperties": false}"#,
    )
    .unwrap();
    let schema = schema.to_str().unwrap();
    let ask = |max_tokens: &str| {
        kivi(
            &[
                "generate",
                "--model",
                model,
                "--chat",
                "--temperature",
                "0",
                "--max-tokens",
                max_tokens,
                "--json-schema",
                schema,
                "Alice is 30 years old. Give her name and age as JSON.",
            ],
            "",
        )
    };
    let out = ask("100");
    assert_succeeded(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    let value: Value = serde_json::from_str(text.trim()).expect(&text);
    assert!(value["name"].is_string(), "{text}");
    assert!(value["age"].as_u64().is_some_and(|a| a <= 150), "{text}");
    assert_eq!(value.as_object().unwrap().len(), 2, "{text}");

    // Cut JSON is a failure, said on stderr.
    let out = ask("3");
    assert_refused(&out, "before its JSON was complete");

    // A schema file that is not JSON is named.
    std::fs::write(dir.join("bad.json"), "{not json").unwrap();
    let bad = dir.join("bad.json");
    let out = kivi(
        &[
            "generate",
            "--model",
            model,
            "--json-schema",
            bad.to_str().unwrap(),
            "x",
        ],
        "",
    );
    assert_refused(&out, "bad.json is not JSON");
    std::fs::remove_dir_all(&dir).ok();
}
