//! `kivi needle`: needle-in-a-haystack retrieval per cache configuration, with a heat map
//! of accuracy over haystack length and needle depth for each.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use kivi_engine::backend::Backend;
use serde::Serialize;

use crate::eval::bench::display_name;
use crate::eval::configs::{
    parse_configs, parse_fractions, parse_sizes, size_label, DEFAULT_CONFIGS,
};
use crate::eval::corpus;
use crate::eval::needle::{ask, draw_trials, grid, paired, ConfigResult, CORPUS_TOKENS};
use crate::eval::plot::heat_map;
use crate::eval::setup::{write_json, EvalModelArgs};

/// Arguments of `kivi needle`.
#[derive(Debug, Args)]
pub struct NeedleArgs {
    #[command(flatten)]
    pub model: EvalModelArgs,
    /// Cache configurations, comma-separated short names.
    #[arg(long, default_value = DEFAULT_CONFIGS)]
    pub configs: String,
    /// Haystack lengths in tokens (k = 1024).
    #[arg(long, default_value = "1k,2k,4k,7k")]
    pub lengths: String,
    /// Needle depths, fractions of the haystack (0 = start, 1 = end).
    #[arg(long, default_value = "0,0.25,0.5,0.75,1")]
    pub depths: String,
    /// Questions per (length, depth) cell, each with its own fact and passage.
    #[arg(long, default_value_t = 1)]
    pub trials: usize,
    /// Seed of the facts and passages.
    #[arg(long, default_value_t = 8)]
    pub seed: u64,
    /// Prompt tokens per prefill step.
    #[arg(long, default_value_t = 256)]
    pub chunk: usize,
    /// Longest answer in tokens (digits are single tokens, and the model often answers
    /// with a whole sentence: "The secret code for falcon is 4821.").
    #[arg(long, default_value_t = 24)]
    pub max_tokens: usize,
    /// Text the haystacks are cut from (default: the offline Moby-Dick).
    #[arg(long)]
    pub text: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Folder for the heat maps, `needle-<config>.png` (default: beside --json).
    #[arg(long)]
    pub plot_dir: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report<'a> {
    model: String,
    backend: Backend,
    text: String,
    seed: u64,
    trials_per_cell: usize,
    lengths: &'a [usize],
    depths: &'a [f64],
    results: &'a [ConfigResult],
}

/// Runs `kivi needle`.
pub fn run(args: NeedleArgs) -> Result<()> {
    let configs = parse_configs(&args.configs)?;
    let lengths = parse_sizes(&args.lengths)?;
    let depths = parse_fractions(&args.depths)?;
    let text_path = corpus::resolve(args.text.as_deref())?;
    let model_path = args.model.path()?;
    let loaded = args.model.load()?;
    let text = corpus::read(&text_path)?;
    // Passages come from a fixed prefix of the text, whatever the grid (see CORPUS_TOKENS).
    let corpus = corpus::prefix_tokens(&loaded.tokenizer, &text.content, CORPUS_TOKENS)?;
    let trials = draw_trials(
        &lengths,
        &depths,
        args.trials.max(1),
        corpus.len(),
        args.seed,
    )?;
    eprintln!(
        "[needle · {} · backend {} ({}) · {} questions × {} configurations, seed {}]",
        loaded.info.name,
        loaded.info.backend,
        loaded.info.backend.description(),
        trials.len(),
        configs.len(),
        args.seed
    );
    let mut results = Vec::new();
    for config in &configs {
        let began = Instant::now();
        let mut outcomes = Vec::new();
        for trial in &trials {
            let o = ask(&loaded, &corpus, trial, config, args.chunk, args.max_tokens)?;
            eprintln!(
                "  {config} · {} at {:.0}%: {} ({:?}, wanted {}, p {:.3})",
                size_label(trial.length),
                trial.depth * 100.0,
                if o.correct { "ok" } else { "miss" },
                o.answer,
                trial.value,
                o.value_logprob.exp()
            );
            outcomes.push(o);
        }
        let correct = outcomes.iter().filter(|o| o.correct).count();
        let asked = outcomes.len().max(1) as f64;
        results.push(ConfigResult {
            config: config.to_string(),
            cache: *config,
            accuracy: correct as f64 / asked,
            mean_value_prob: outcomes.iter().map(|o| o.value_logprob.exp()).sum::<f64>() / asked,
            grid: grid(&outcomes, &lengths, &depths),
            outcomes,
            seconds: began.elapsed().as_secs_f64(),
        });
    }
    print_table(&results, &lengths, &depths);
    if let Some(path) = &args.json {
        let report = Report {
            model: display_name(&model_path),
            backend: loaded.info.backend,
            text: display_name(&text_path),
            seed: args.seed,
            trials_per_cell: args.trials.max(1),
            lengths: &lengths,
            depths: &depths,
            results: &results,
        };
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    let dir = args.plot_dir.clone().or_else(|| {
        args.json
            .as_deref()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
    });
    if let Some(dir) = dir {
        for r in &results {
            let path = dir.join(format!("needle-{}.png", r.config));
            let title = format!(
                "needle · {} · accuracy {:.0}% (seed {}, {} per cell)",
                r.config,
                r.accuracy * 100.0,
                args.seed,
                args.trials.max(1)
            );
            let x: Vec<String> = lengths.iter().map(|&l| size_label(l)).collect();
            let y: Vec<String> = depths
                .iter()
                .map(|d| format!("{:.0}%", d * 100.0))
                .collect();
            let cells: Vec<Vec<Option<f64>>> = r
                .grid
                .iter()
                .map(|row| row.iter().map(|&v| Some(v)).collect())
                .collect();
            heat_map(&path, &title, &x, &y, &cells)?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn print_table(results: &[ConfigResult], lengths: &[usize], depths: &[f64]) {
    for r in results {
        println!(
            "\n{}: accuracy {:.0}%, mean probability of the code {:.3} ({:.0} s)",
            r.config,
            r.accuracy * 100.0,
            r.mean_value_prob,
            r.seconds
        );
        let header: Vec<String> = lengths
            .iter()
            .map(|&l| format!("{:>6}", size_label(l)))
            .collect();
        println!("{:>6} {}", "depth", header.join(""));
        for (d, row) in depths.iter().zip(&r.grid) {
            let cells: Vec<String> = row.iter().map(|v| format!("{v:>6.2}")).collect();
            println!("{:>5.0}% {}", d * 100.0, cells.join(""));
        }
        // Twenty exact-match answers cannot tell two caches apart; the same questions side
        // by side, and the code's probability, can.
        if let Some(first) = results.first().filter(|f| f.config != r.config) {
            let p = paired(&first.outcomes, &r.outcomes);
            println!(
                "versus {}: both right {}, lost {}, gained {}, word for word {} of {}; log-probability \
                 of the code {:+.3} ± {:.3}",
                first.config,
                p.both_right,
                p.lost,
                p.gained,
                p.identical,
                r.outcomes.len(),
                p.mean_logprob_change,
                p.standard_error
            );
        }
    }
}
