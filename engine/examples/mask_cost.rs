//! What structured output costs per token, apart from the model: the time to build a
//! model's token table, to compile a schema, and, for each token of a JSON answer, to
//! compute the mask, add it to a vocabulary's logits and pick the best token (the work a
//! constrained decode step adds to a plain one).
//!
//! ```sh
//! cargo run --release -p kivi-engine --example mask_cost -- \
//!     .data/models/SmolLM2-135M-Instruct.Q4_1.gguf scripts/bench/contract.schema.json \
//!     '{"parties": [{"name": "Ada Lovelace", "role": "seller"}], "date": {"year": 2024, "month": 3, "day": 31}, "price": 1200, "signed": true}'
//! ```

use std::path::Path;
use std::time::Instant;

use kivi_engine::grammar::{Constraint, OutputFormat, TokenTable};
use kivi_engine::tokenizer::Tokenizer;
use kivi_engine::weights::gguf::Gguf;
use mlx_rs::{ops, Array};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, schema, answer] = args.as_slice() else {
        return Err("usage: mask_cost MODEL.gguf SCHEMA.json 'JSON ANSWER'".into());
    };
    let tokenizer = Tokenizer::from_gguf(&Gguf::open(Path::new(model))?)?;
    let began = Instant::now();
    let table = TokenTable::new(&tokenizer)?;
    println!("token table: {:.0} ms", began.elapsed().as_secs_f64() * 1e3);
    let format = OutputFormat::JsonSchema {
        schema: serde_json::from_str(&std::fs::read_to_string(schema)?)?,
    };
    let began = Instant::now();
    let mut constraint = Constraint::new(&table, &format)?;
    println!("schema: {:.1} ms", began.elapsed().as_secs_f64() * 1e3);

    let vocab = tokenizer.vocab_size();
    let logits = Array::from_slice(&vec![0.5f32; vocab], &[vocab as i32]);
    logits.eval()?;
    let ids = tokenizer.encode(answer, false)?;
    let (mut total, mut worst) = (0.0f64, 0.0f64);
    for &id in &ids {
        let began = Instant::now();
        let mask = constraint.mask(vocab)?;
        let best = ops::indexing::argmax(ops::add(&logits, &mask)?, None)?;
        best.eval()?;
        let us = began.elapsed().as_secs_f64() * 1e6;
        total += us;
        worst = worst.max(us);
        constraint.commit(id)?;
    }
    println!(
        "{} tokens, {vocab}-token vocabulary: mask + add + argmax {:.0} µs per token on average, {:.0} µs at most",
        ids.len(),
        total / ids.len() as f64,
        worst
    );
    Ok(())
}
