//! Crash safety: a writer process is SIGKILLed while it streams an answer; the database must
//! reopen intact, with the answer's last saved text, marked `interrupted`.
//!
//! The writer is this same test binary, re-run with an environment variable that turns
//! [`crash_child`] from a no-op into the writer.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use super::types::{MessageStatus, Role};
use super::Store;

/// Set (to the database path) only in the child process.
const CHILD_ENV: &str = "KIVI_STORE_CRASH_CHILD_DB";

/// The streamed answer after `n` saves.
fn answer_after(n: usize) -> String {
    (0..n).map(|i| format!("token{i} ")).collect()
}

/// The writer, run only as a child of the test below (elsewhere it returns at once).
#[test]
fn crash_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = Arc::new(Store::open(&path).unwrap());
    let chat = store.create_chat(Some("crash"), None).unwrap();
    let (_, answer) = store.begin_send(&chat.id, "Tell me a long story.").unwrap();

    // A second writer commits multi-statement transactions (user message + answer) as fast
    // as it can, so the kill may also land in the middle of one of those.
    let busy = store.create_chat(Some("busy"), None).unwrap();
    let other = Arc::clone(&store);
    std::thread::spawn(move || {
        for i in 0.. {
            let (_, a) = other.begin_send(&busy.id, &format!("q{i}")).unwrap();
            other
                .finish_message(
                    &a.id,
                    MessageStatus::Complete,
                    &"x".repeat(i % 2000),
                    None,
                    None,
                )
                .unwrap();
            // The parent waits for at least one whole pair before it kills: under load
            // the streaming writer could otherwise take all 500 saves first.
            println!("BUSY {}", i + 1);
        }
    });

    println!("READY {} {}", chat.id, answer.id);
    let mut text = String::new();
    for i in 0.. {
        text.push_str(&format!("token{i} "));
        store.update_streaming_content(&answer.id, &text).unwrap();
        // Printed only after the save returned: the parent knows it is committed.
        println!("SAVED {}", i + 1);
    }
}

#[test]
fn a_killed_writer_leaves_history_intact_and_the_answer_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kivi.db");
    // Test names in the harness lack the crate's name.
    let module = module_path!().split_once("::").unwrap().1;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            &format!("{module}::crash_child"),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut ids = None;
    let mut saved = 0usize;
    let mut busy_pairs = 0usize;
    while saved < 500 || busy_pairs == 0 {
        assert!(saved < 100_000, "the busy writer never committed a pair");
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the writer stopped reporting");
        // The harness may print "test ... " on the same line before the child's output.
        if let Some((_, rest)) = line.split_once("READY ") {
            let (chat, answer) = rest.split_once(' ').unwrap();
            ids = Some((chat.to_string(), answer.to_string()));
        } else if let Some((_, n)) = line.split_once("SAVED ") {
            saved = n.parse().unwrap();
        } else if let Some((_, n)) = line.split_once("BUSY ") {
            busy_pairs = n.parse().unwrap();
        }
    }
    // SIGKILL on Unix (TerminateProcess on Windows): no destructor, no checkpoint runs.
    child.kill().unwrap();
    child.wait().unwrap();
    let (chat_id, answer_id) = ids.expect("the writer never said READY");

    let store = Store::open(&db).unwrap();
    let integrity: String = store
        .conn()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let dangling: i64 = store
        .conn()
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(dangling, 0);

    // The streamed answer, plus perhaps the busy chat's last one.
    let interrupted = store.mark_streaming_interrupted().unwrap();
    assert!((1..=2).contains(&interrupted), "{interrupted}");

    let answer = store.get_message(&answer_id).unwrap();
    assert_eq!(answer.status, MessageStatus::Interrupted);
    // Everything the writer had reported saved is there; it may have saved a little more
    // before the kill, but never a torn write.
    let tokens = answer.content.matches("token").count();
    assert!(tokens >= saved, "{tokens} < {saved}");
    assert_eq!(answer.content, answer_after(tokens));

    let chat = store.get_chat(&chat_id).unwrap();
    assert_eq!(chat.title, "crash");
    assert_eq!(chat.messages.len(), 2);
    assert_eq!(chat.messages[0].content, "Tell me a long story.");

    // The busy chat holds whole question/answer pairs only.
    let busy = store
        .list_chats(Some("busy"))
        .unwrap()
        .into_iter()
        .next()
        .unwrap();
    let messages = store.messages(&busy.id).unwrap();
    assert!(!messages.is_empty());
    assert_eq!(messages.len() % 2, 0, "a send was half stored");
    for pair in messages.chunks(2) {
        assert_eq!(pair[0].role, Role::User);
        assert_eq!(pair[1].role, Role::Assistant);
    }
    println!(
        "crash test: killed after {saved} reported saves; found {tokens} tokens, \
         {} busy messages, {interrupted} interrupted",
        messages.len()
    );
}
