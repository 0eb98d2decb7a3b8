//! Driving one generation in the terminal: tokens to stdout, a prefill progress bar and
//! a summary on stderr, or every event as a JSON line with `--json`. Ctrl-C stops the
//! generation (not the program).

use std::io::Write;

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kivi_engine::session::{Event, FinishReason, Generation};
use kivi_engine::stats::Stats;

/// How a generation ended, for the caller.
pub struct Finished {
    /// Generated text.
    pub text: String,
    /// Why it stopped.
    pub reason: FinishReason,
    /// Final statistics.
    pub stats: Stats,
}

/// Streams a generation to the terminal until it ends.
pub async fn drive(mut generation: Generation, json: bool) -> Result<Finished> {
    let mut bar: Option<ProgressBar> = None;
    let mut stdout = std::io::stdout();
    loop {
        let event = tokio::select! {
            event = generation.next() => event,
            _ = tokio::signal::ctrl_c() => {
                generation.cancel();
                continue;
            }
        };
        let Some(event) = event else {
            bail!("the engine stopped without finishing the generation");
        };
        if json {
            println!("{}", serde_json::to_string(&event)?);
        }
        match event {
            Event::Started { .. } | Event::Stats(_) => {}
            Event::Prefill {
                done,
                total,
                tokens_per_s,
            } if !json => {
                let bar = bar.get_or_insert_with(|| prefill_bar(total as u64));
                bar.set_position(done as u64);
                bar.set_message(format!("{tokens_per_s:.0} tok/s"));
                if done == total {
                    bar.finish_and_clear();
                }
            }
            Event::Prefill { .. } => {}
            Event::Token { text, .. } => {
                if !json {
                    print!("{text}");
                    stdout.flush()?;
                }
            }
            Event::Done {
                reason,
                text,
                stats,
            } => {
                if let Some(bar) = bar.take() {
                    bar.finish_and_clear();
                }
                return Ok(Finished {
                    text,
                    reason,
                    stats: *stats,
                });
            }
            Event::Error { message } => {
                if let Some(bar) = bar.take() {
                    bar.finish_and_clear();
                }
                bail!(message);
            }
        }
    }
}

fn prefill_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("prefill {bar:30} {pos}/{len} tokens {msg} ({eta})")
            .expect("valid template"),
    );
    bar
}

/// One line about speed and the KV cache, for stderr.
pub fn summary(f: &Finished) -> String {
    let s = &f.stats;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    format!(
        "[{reason:?} · prompt {prompt} tok (reused {reused}) · prefill {pf:.1} tok/s · \
         first token {ttft:.2} s · decode {gen} tok at {dec:.1} tok/s · KV {cache}: \
         {held:.2} MiB held vs {fp16:.2} MiB fp16 · RSS {rss:.0} MiB]",
        reason = f.reason,
        prompt = s.prompt_tokens,
        reused = s.reused_tokens,
        pf = s.prefill_tokens_per_s,
        ttft = s.time_to_first_token_s.unwrap_or(0.0),
        gen = s.generated_tokens,
        dec = s.decode_tokens_per_s,
        cache = s.cache,
        held = mib(s.kv.total.held_bytes),
        fp16 = mib(s.kv.total.fp16_bytes),
        rss = mib(s.memory.process_resident_bytes),
    )
}
