//! `kivi ppl`: perplexity of each cache configuration on fixed windows of a text.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use kivi_engine::backend::Backend;
use kivi_engine::eval::measured_window;
use serde::Serialize;

use crate::eval::configs::{parse_configs, DEFAULT_PPL_CONFIGS};
use crate::eval::plot::{bar_chart, color, Bar};
use crate::eval::ppl::{run_text, TextPpl, WindowPlan};
use crate::eval::setup::{plot_path, write_json, EvalModelArgs};
use crate::eval::{bench::display_name, corpus};

/// Arguments of `kivi ppl`.
#[derive(Debug, Args)]
pub struct PplArgs {
    #[command(flatten)]
    pub model: EvalModelArgs,
    /// Text file, or folder of .txt files joined in name order (repeatable). Default: the
    /// offline Moby-Dick (.data/texts/moby-dick.txt).
    #[arg(long)]
    pub text: Vec<PathBuf>,
    /// Cache configurations, comma-separated short names (`full`, `k2v2-g32-r128`,
    /// `k2v2-g32-r128-per-token`, ...).
    #[arg(long, default_value = DEFAULT_PPL_CONFIGS)]
    pub configs: String,
    /// Tokens per window; each window runs on fresh caches.
    #[arg(long, default_value_t = 2048)]
    pub window: usize,
    /// Tokens between window starts.
    #[arg(long, default_value_t = 1024)]
    pub stride: usize,
    /// Last tokens of each window that are scored.
    #[arg(long, default_value_t = 1024)]
    pub scored: usize,
    /// Tokens per forward step: a step reads its own tokens in full precision, and a KIVI
    /// cache quantizes what leaves its window after the step.
    #[arg(long, default_value_t = 128)]
    pub chunk: usize,
    /// Token offset of the first window.
    #[arg(long, default_value_t = 0)]
    pub offset: usize,
    /// Most windows per text (default: all that fit).
    #[arg(long)]
    pub windows: Option<usize>,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the bar chart here (default: beside --json, `<name>.png`).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Write every window's token ids as JSON here (for scripts/compare-mlx-lm.sh, which
    /// scores the same windows with mlx-lm).
    #[arg(long)]
    pub dump_tokens: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    model: String,
    backend: Backend,
    plan: WindowPlan,
    texts: Vec<TextPpl>,
}

#[derive(Serialize)]
struct TokenDump {
    plan: WindowPlan,
    texts: Vec<TextWindows>,
}

#[derive(Serialize)]
struct TextWindows {
    text: String,
    windows: Vec<Vec<u32>>,
}

/// Runs `kivi ppl`.
pub fn run(args: PplArgs) -> Result<()> {
    let plan = WindowPlan {
        window: args.window,
        stride: args.stride,
        scored: args.scored,
        chunk: args.chunk,
        offset: args.offset,
    };
    plan.validate()?;
    let configs = parse_configs(&args.configs)?;
    let paths = if args.text.is_empty() {
        vec![corpus::resolve(None)?]
    } else {
        args.text.clone()
    };
    let model_path = args.model.path()?;
    let loaded = args.model.load()?;
    eprintln!(
        "[ppl · {} · backend {} ({}) · windows of {} tokens, stride {}, last {} scored, \
         {}-token chunks]",
        loaded.info.name,
        loaded.info.backend,
        loaded.info.backend.description(),
        plan.window,
        plan.stride,
        plan.scored,
        plan.chunk
    );
    let mut texts = Vec::new();
    let mut dumps = Vec::new();
    for path in &paths {
        let text = corpus::read(path)?;
        let tokens = match args.windows {
            Some(n) => {
                corpus::leading_tokens(&loaded.tokenizer, &text.content, plan.tokens_for(n))?
            }
            None => loaded.tokenizer.encode(&text.content, false)?,
        };
        let result = run_text(
            &loaded,
            &text.name,
            &tokens,
            &plan,
            args.windows,
            &configs,
            |config, i, n, ppl| {
                eprintln!(
                    "  {} · {config} · window {}/{n}: {ppl:.3}",
                    text.name,
                    i + 1
                )
            },
        )?;
        print_table(&result);
        if args.dump_tokens.is_some() {
            dumps.push(TextWindows {
                text: text.name.clone(),
                windows: result
                    .window_starts
                    .iter()
                    .map(|&s| measured_window(&loaded.tokenizer, &tokens[s..s + plan.window]))
                    .collect(),
            });
        }
        texts.push(result);
    }
    if let Some(path) = &args.json {
        let report = Report {
            model: display_name(&model_path),
            backend: loaded.info.backend,
            plan,
            texts: texts.clone(),
        };
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.dump_tokens {
        write_json(path, &TokenDump { plan, texts: dumps })?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(base) = plot_path(args.plot.as_deref(), args.json.as_deref(), "") {
        for text in &texts {
            let path = if texts.len() == 1 {
                base.clone()
            } else {
                let stem = base.file_stem().unwrap_or_default().to_string_lossy();
                base.with_file_name(format!("{stem}-{}.png", text.text))
            };
            plot(&path, text, &plan)?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn print_table(text: &TextPpl) {
    println!(
        "\n{}: {} windows at tokens {:?}",
        text.text,
        text.window_starts.len(),
        text.window_starts
    );
    println!(
        "{:<26} {:>10} {:>9} {:>8}  per window",
        "cache", "perplexity", "vs full", "seconds"
    );
    for r in &text.results {
        let delta = r
            .delta_percent
            .map_or_else(|| "-".into(), |d| format!("{d:+.1}%"));
        let windows: Vec<String> = r
            .window_perplexity
            .iter()
            .map(|p| format!("{p:.2}"))
            .collect();
        println!(
            "{:<26} {:>10.3} {:>9} {:>8.1}  {}",
            r.config,
            r.perplexity,
            delta,
            r.seconds,
            windows.join(" ")
        );
    }
}

fn plot(path: &std::path::Path, text: &TextPpl, plan: &WindowPlan) -> Result<()> {
    let full = text
        .results
        .iter()
        .find(|r| r.config == "full")
        .map(|r| r.perplexity);
    let bars: Vec<Bar> = text
        .results
        .iter()
        .enumerate()
        .map(|(i, r)| Bar {
            label: r.config.clone(),
            value: r.perplexity,
            note: match r.delta_percent {
                Some(d) if r.config != "full" => format!("{:.2} ({d:+.1}%)", r.perplexity),
                _ => format!("{:.2}", r.perplexity),
            },
            color: color(i),
        })
        .collect();
    let title = format!(
        "Perplexity, {} ({} windows of {}, last {} scored, {}-token chunks)",
        text.text,
        text.window_starts.len(),
        plan.window,
        plan.scored,
        plan.chunk
    );
    bar_chart(path, &title, "perplexity (lower is better)", &bars, full)
}
