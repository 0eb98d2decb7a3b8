//! Load: 10,000 messages over 200 chats. Prints how long listing and searching take (no
//! timing asserts; CI machines vary) and compares the search strategies that were considered.
//!
//! Run: `cargo test -p kivi-chat store::load_tests -- --nocapture`.
//! The numbers chosen from, and why `LIKE`/scan won, are in `search.rs` and the report.

use std::time::{Duration, Instant};

use super::types::MessageStatus;
use super::Store;

const CHATS: usize = 200;
const PAIRS_PER_CHAT: usize = 25; // 50 messages per chat, 10,000 in all

const WORDS: &[&str] = &[
    "the",
    "whale",
    "ship",
    "captain",
    "sea",
    "of",
    "and",
    "a",
    "to",
    "in",
    "that",
    "his",
    "it",
    "with",
    "was",
    "as",
    "for",
    "but",
    "all",
    "this",
    "upon",
    "from",
    "by",
    "like",
    "one",
    "so",
    "harpoon",
    "voyage",
    "ocean",
    "deck",
    "sail",
    "wind",
    "storm",
    "crew",
    "boat",
    "oil",
    "line",
    "report",
    "budget",
    "congress",
    "nation",
    "people",
    "government",
    "war",
    "peace",
    "law",
    "cache",
    "token",
    "model",
    "quantize",
    "residual",
    "window",
    "group",
    "channel",
    "value",
    "key",
    "attention",
    "memory",
    "context",
    "prompt",
    "answer",
    "question",
    "summary",
    "chapter",
    "document",
    "section",
    "figure",
    "table",
    "result",
    "method",
    "data",
    "because",
    "therefore",
    "café",
    "naïve",
    "Über",
    "straße",
    "déjà",
    "vu",
    "résumé",
    "Ærø",
    "smörgåsbord",
];

/// A small deterministic generator (no `rand` dependency in the store).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn text(&mut self, words: usize) -> String {
        let mut s = String::new();
        for i in 0..words {
            if i > 0 {
                s.push(if self.next().is_multiple_of(12) {
                    '\n'
                } else {
                    ' '
                });
            }
            let w = WORDS[(self.next() % WORDS.len() as u64) as usize];
            if self.next().is_multiple_of(9) {
                let mut c = w.chars();
                s.extend(c.next().into_iter().flat_map(char::to_uppercase));
                s.push_str(c.as_str());
            } else {
                s.push_str(w);
            }
        }
        s
    }
}

/// Median of `runs` timings of `f`.
fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        last = Some(f());
        times.push(start.elapsed());
    }
    times.sort();
    (times[runs / 2], last.unwrap())
}

fn ms(d: Duration) -> String {
    format!("{:8.2} ms", d.as_secs_f64() * 1e3)
}

#[test]
fn ten_thousand_messages_list_and_search() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kivi.db");
    let store = Store::open(&path).unwrap();
    let mut rng = Lcg(42);

    let start = Instant::now();
    let mut chat_ids = Vec::new();
    let mut rare = 0;
    for c in 0..CHATS {
        let chat = store
            .create_chat(Some(&format!("Chat {c}: {}", rng.text(3))), None)
            .unwrap();
        for p in 0..PAIRS_PER_CHAT {
            let q_words = 8 + (rng.next() % 30) as usize;
            let mut question = rng.text(q_words);
            if (c * PAIRS_PER_CHAT + p).is_multiple_of(1700) {
                question.push_str(" zanzibar");
                rare += 1;
            }
            let (_, answer) = store.begin_send(&chat.id, &question).unwrap();
            let a_words = 40 + (rng.next() % 300) as usize;
            store
                .finish_message(
                    &answer.id,
                    MessageStatus::Complete,
                    &rng.text(a_words),
                    None,
                    None,
                )
                .unwrap();
        }
        chat_ids.push(chat.id);
    }
    let insert = start.elapsed();
    let (messages, text_bytes): (i64, i64) = store
        .conn()
        .query_row(
            "SELECT count(*), sum(length(CAST(content AS BLOB))) FROM messages",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(messages as usize, CHATS * PAIRS_PER_CHAT * 2);
    let db_bytes = std::fs::metadata(&path).unwrap().len()
        + std::fs::metadata(path.with_extension("db-wal"))
            .map(|m| m.len())
            .unwrap_or(0);

    let runs = 7;
    let (list, all) = time(runs, || store.list_chats(None).unwrap());
    assert_eq!(all.len(), CHATS);
    let (get, chat) = time(runs, || store.get_chat(&chat_ids[100]).unwrap());
    assert_eq!(chat.messages.len(), PAIRS_PER_CHAT * 2);
    let (common, hits_common) = time(runs, || store.list_chats(Some("Harpoon")).unwrap());
    let (rare_t, hits_rare) = time(runs, || store.list_chats(Some("zanzibar")).unwrap());
    assert_eq!(hits_rare.len(), rare);
    let (none, hits_none) = time(runs, || store.list_chats(Some("no such phrase")).unwrap());
    assert!(hits_none.is_empty());
    let (uni, hits_uni) = time(runs, || store.list_chats(Some("SMÖRGÅSBORD")).unwrap());
    let (uni_none, _) = time(runs, || store.list_chats(Some("ÿÿÿ")).unwrap());

    // The alternatives, on the same data.
    let conn = store.conn();
    let count_chats = |sql: &str, arg: &str| -> usize {
        conn.prepare_cached(sql)
            .unwrap()
            .query_map([arg], |r| r.get::<_, i64>(0))
            .unwrap()
            .count()
    };
    let like_sql = "SELECT DISTINCT chat_id FROM messages WHERE content LIKE ?1 ESCAPE '\\'";
    let (like_only, _) = time(runs, || count_chats(like_sql, "%no such phrase%"));
    let func_sql = "SELECT DISTINCT chat_id FROM messages WHERE kivi_icontains(content, ?1)";
    let (func_ascii, _) = time(runs, || count_chats(func_sql, "no such phrase"));
    let instr_sql = "SELECT DISTINCT chat_id FROM messages WHERE instr(lower(content), ?1) > 0";
    let (instr_lower, _) = time(runs, || count_chats(instr_sql, "no such phrase"));

    let before_fts = Instant::now();
    conn.execute_batch(
        "CREATE VIRTUAL TABLE messages_fts USING fts5(
             content, content='messages', content_rowid='id', tokenize='trigram');
         INSERT INTO messages_fts (messages_fts) VALUES ('rebuild');
         CREATE TRIGGER messages_fts_u AFTER UPDATE OF content ON messages BEGIN
             INSERT INTO messages_fts (messages_fts, rowid, content)
                 VALUES ('delete', old.id, old.content);
             INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
         END;
         PRAGMA wal_checkpoint(TRUNCATE);",
    )
    .unwrap();
    let fts_build = before_fts.elapsed();
    let fts_bytes: i64 = conn
        .query_row(
            "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'messages_fts%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let fts_sql = "SELECT DISTINCT m.chat_id FROM messages m WHERE m.id IN
                   (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?1)";
    let (fts_none, _) = time(runs, || count_chats(fts_sql, "\"no such phrase\""));
    let (fts_common, _) = time(runs, || count_chats(fts_sql, "\"harpoon\""));
    drop(conn);

    // The cost of one streaming save of a ~4 KB answer, without and with the FTS index.
    let (_, answer) = store.begin_send(&chat_ids[0], "stream").unwrap();
    let long = rng.text(700);
    let mut cut = 0usize;
    let mut next_chunk = || {
        cut = (cut + 97) % long.len();
        while !long.is_char_boundary(cut) {
            cut += 1;
        }
        long[..cut].to_string()
    };
    let (save_fts, _) = time(51, || {
        store
            .update_streaming_content(&answer.id, &next_chunk())
            .unwrap()
    });
    store
        .conn()
        .execute_batch("DROP TRIGGER messages_fts_u; DROP TABLE messages_fts;")
        .unwrap();
    let mut cut = 0usize;
    let mut next_chunk = || {
        cut = (cut + 97) % long.len();
        while !long.is_char_boundary(cut) {
            cut += 1;
        }
        long[..cut].to_string()
    };
    let (save_plain, _) = time(51, || {
        store
            .update_streaming_content(&answer.id, &next_chunk())
            .unwrap()
    });

    println!(
        "\n== store load: {CHATS} chats, {messages} messages, {:.1} MB of message text, \
         database {:.1} MB ==",
        text_bytes as f64 / 1e6,
        db_bytes as f64 / 1e6
    );
    println!("insert 5,000 send+finish pairs   {}", ms(insert));
    println!("list_chats (no query)            {}", ms(list));
    println!("get_chat (50 messages)           {}", ms(get));
    println!(
        "search \"Harpoon\" (common)        {}  ({} chats)",
        ms(common),
        hits_common.len()
    );
    println!(
        "search \"zanzibar\" (rare)         {}  ({} chats)",
        ms(rare_t),
        hits_rare.len()
    );
    println!("search, no match                 {}", ms(none));
    println!(
        "search \"SMÖRGÅSBORD\" (Unicode)   {}  ({} chats)",
        ms(uni),
        hits_uni.len()
    );
    println!("search Unicode, no match         {}", ms(uni_none));
    println!("-- alternatives, messages only, no match --");
    println!("LIKE '%q%' scan                  {}", ms(like_only));
    println!("kivi_icontains scan (Rust)       {}", ms(func_ascii));
    println!("instr(lower(content)) scan       {}", ms(instr_lower));
    println!(
        "FTS5 trigram: build {}, index {:.1} MB",
        ms(fts_build),
        fts_bytes as f64 / 1e6
    );
    println!("FTS5 trigram MATCH, no match     {}", ms(fts_none));
    println!("FTS5 trigram MATCH \"harpoon\"     {}", ms(fts_common));
    println!("streaming save, plain            {}", ms(save_plain));
    println!("streaming save, with FTS trigger {}", ms(save_fts));
}
