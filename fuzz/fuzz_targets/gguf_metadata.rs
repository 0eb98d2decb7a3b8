//! The pure-Rust GGUF reader and the GGUF tokenizer built from its metadata: any bytes
//! are either refused with an error or give a header whose tensors lie inside the file;
//! a tokenizer built from them encodes, decodes and renders its chat template without
//! panicking. MLX's own GGUF reader is not run here: the point of the reader is that MLX
//! only ever sees files it has accepted.

#![no_main]

use kivi_engine::gguf::{GgufError, GgufHeader};
use kivi_engine::tokenizer::{Message, Role, Tokenizer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    let header = match GgufHeader::parse(data) {
        Ok(header) => header,
        Err(e) => {
            assert!(!matches!(e, GgufError::NeedMore(_)), "whole file: {e}");
            return;
        }
    };
    for t in &header.tensors {
        assert!(
            header.data_offset + t.offset + t.size <= len,
            "{t:?} past the end"
        );
    }
    // Any prefix either asks for more or parses to the same header.
    let half = &data[..data.len() / 2];
    match GgufHeader::parse_prefix(half, len) {
        // Compared through Debug: a NaN metadata value is not `==` to itself
        // (engine/tests/fuzz_regressions.rs).
        Ok(h) => assert_eq!(format!("{h:?}"), format!("{header:?}")),
        Err(GgufError::NeedMore(end)) => assert!(end > half.len() as u64 && end <= len),
        Err(e) => panic!("a prefix of a valid file was refused: {e}"),
    }
    let _ = header.check_loadable();
    if let Ok(tokenizer) = Tokenizer::from_gguf_metadata(&header.metadata) {
        if let Ok(ids) = tokenizer.encode("Call me Ishmael. 1851!", true) {
            let _ = tokenizer.decode(&ids, false);
        }
        let _ = tokenizer.apply_chat_template(&[Message::new(Role::User, "Hi")], true);
    }
});
