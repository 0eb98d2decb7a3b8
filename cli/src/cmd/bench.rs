//! `kivi bench`: prefill and decode speed, KV bytes and peak memory per cache
//! configuration and context length, each measurement in its own child process.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use kivi_engine::backend::openblas;
use kivi_engine::grammar::OutputFormat;

use crate::eval::bench::{display_name, measure, run_all, BenchReport, Entry, Spawner, WorkerPlan};
use crate::eval::configs::{parse_configs, parse_sizes, size_label, DEFAULT_CONFIGS};
use crate::eval::corpus;
use crate::eval::plot::{line_panels, Panel, Series};
use crate::eval::setup::{plot_path, write_json, EvalModelArgs};

const MIB: f64 = 1024.0 * 1024.0;

/// Arguments of `kivi bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: EvalModelArgs,
    /// Cache configurations, comma-separated short names.
    #[arg(long, default_value = DEFAULT_CONFIGS)]
    pub configs: String,
    /// Tokens held at the end of each measurement (k = 1024).
    #[arg(long, default_value = "512,1k,2k,4k,8k")]
    pub contexts: String,
    /// Rounds; every configuration runs once per round, in a rotated order.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Tokens decoded (timed) after the prefill.
    #[arg(long, default_value_t = 32)]
    pub decode_tokens: usize,
    /// Prompt tokens per prefill step (the engine's default).
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
    /// Text the contexts are cut from (default: the offline Moby-Dick).
    #[arg(long)]
    pub text: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the plot here (default: beside --json, `<name>.png`).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Also decode each measurement's tokens constrained to this JSON schema, and report
    /// the decode speed under it over the plain one (what structured output costs).
    #[arg(long, value_name = "FILE")]
    pub json_schema: Option<PathBuf>,
}

/// Arguments of the hidden `kivi bench-worker`: one measurement, one JSON line out.
#[derive(Debug, Args)]
pub struct BenchWorkerArgs {
    #[command(flatten)]
    pub model: EvalModelArgs,
    /// Text the context is cut from.
    #[arg(long)]
    pub text: PathBuf,
    /// The measurement, as JSON.
    #[arg(long)]
    pub plan: String,
}

/// Runs one measurement and prints its sample (the child side).
pub fn run_worker(args: BenchWorkerArgs) -> Result<()> {
    let plan: WorkerPlan = serde_json::from_str(&args.plan).context("invalid --plan")?;
    let loaded = args.model.load()?;
    let text = corpus::read(&args.text)?;
    let sample = measure(&loaded, &text.content, &plan)?;
    println!("{}", serde_json::to_string(&sample)?);
    Ok(())
}

/// Runs `kivi bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    let configs = parse_configs(&args.configs)?;
    let contexts = parse_sizes(&args.contexts)?;
    let repeats = args.repeats.max(1);
    let spawner = Spawner {
        exe: std::env::current_exe().context("cannot find the kivi executable")?,
        model: args.model.path()?,
        text: corpus::resolve(args.text.as_deref())?,
        backend: args.model.backend()?,
        format: args
            .json_schema
            .as_deref()
            .map(crate::cmd::generate::read_schema)
            .transpose()?
            .map(|schema| OutputFormat::JsonSchema { schema }),
    };
    let total = configs.len() * contexts.len() * repeats;
    eprintln!(
        "[bench · {} · backend {} ({}) · {} configurations × {} contexts × {repeats} rounds = \
         {total} runs, {} decoded tokens each · BLAS kernels: {}]",
        display_name(&spawner.model),
        spawner.backend,
        spawner.backend.description(),
        configs.len(),
        contexts.len(),
        args.decode_tokens,
        openblas::core().unwrap_or_else(|| "not OpenBLAS".into())
    );
    let mut done = 0;
    let entries = run_all(
        &spawner,
        &configs,
        &contexts,
        repeats,
        args.decode_tokens,
        args.prefill_chunk,
        |round, s| {
            done += 1;
            eprintln!(
                "  [{done}/{total}] round {} · {} · {}: prefill {:.1} tok/s, decode {:.2} tok/s, \
                 peak {:.0} MiB",
                round + 1,
                size_label(s.context),
                s.config,
                s.prefill_tokens_per_s,
                s.decode_tokens_per_s,
                s.peak_rss_bytes as f64 / MIB
            );
        },
    )?;
    let report = BenchReport {
        model: display_name(&spawner.model),
        backend: spawner.backend,
        text: display_name(&spawner.text),
        contexts: contexts.clone(),
        repeats,
        decode_tokens: args.decode_tokens,
        prefill_chunk: args.prefill_chunk,
        entries,
    };
    print_table(&report);
    if let Some(path) = &args.json {
        write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = plot_path(args.plot.as_deref(), args.json.as_deref(), "") {
        plot(
            &path,
            &report,
            &configs.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
        )?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn ratio(r: Option<crate::eval::summary::Spread>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{:.2}x", r.median))
}

fn print_table(report: &BenchReport) {
    println!(
        "\n{:>5} {:<16} {:>14} {:>6} {:>14} {:>6} {:>9} {:>9} {:>7} {:>9} {:>8}",
        "ctx",
        "cache",
        "prefill tok/s",
        "xfull",
        "decode tok/s",
        "xfull",
        "fp16 MiB",
        "held MiB",
        "smaller",
        "peak MiB",
        "peak/KV"
    );
    for e in &report.entries {
        println!(
            "{:>5} {:<16} {:>8.1} ±{:>3.0}% {:>6} {:>8.2} ±{:>3.0}% {:>6} {:>9.2} {:>9.2} {:>6.2}x {:>9.0} {:>8}",
            size_label(e.context),
            e.config,
            e.prefill_tokens_per_s.median,
            e.prefill_tokens_per_s.spread_percent(),
            ratio(e.prefill_vs_full),
            e.decode_tokens_per_s.median,
            e.decode_tokens_per_s.spread_percent(),
            ratio(e.decode_vs_full),
            e.kv.fp16_bytes as f64 / MIB,
            e.kv.held_bytes as f64 / MIB,
            e.compression_vs_fp16,
            e.peak_rss_bytes.median / MIB,
            e.peak_saving_over_kv_saving
                .map_or_else(|| "-".into(), |f| format!("{:.0}%", f * 100.0)),
        );
    }
    println!(
        "(backend {}; medians over {} rounds, ± half the range; x full: median of per-round \
         ratios; smaller: fp16 bytes / held bytes; peak/KV: peak RSS saved vs full / KV bytes \
         saved)",
        report.backend, report.repeats
    );
    if report
        .entries
        .iter()
        .any(|e| e.constrained_vs_plain.is_some())
    {
        println!(
            "\n{:>5} {:<16} {:>14} {:>18} {:>9}",
            "ctx", "cache", "decode tok/s", "with schema tok/s", "x plain"
        );
        for e in &report.entries {
            let constrained: Vec<f64> = e
                .samples
                .iter()
                .filter_map(|s| s.constrained_decode_tokens_per_s)
                .collect();
            println!(
                "{:>5} {:<16} {:>14.2} {:>18.2} {:>9}",
                size_label(e.context),
                e.config,
                e.decode_tokens_per_s.median,
                crate::eval::summary::Spread::of(&constrained).median,
                ratio(e.constrained_vs_plain),
            );
        }
        println!(
            "(x plain: median over rounds of each child's constrained decode speed over its \
             plain one, the same steps after the same prefill)"
        );
    }
}

fn plot(path: &std::path::Path, report: &BenchReport, names: &[String]) -> Result<()> {
    let x_labels: Vec<String> = report.contexts.iter().map(|&c| size_label(c)).collect();
    let series = |f: &dyn Fn(&Entry) -> f64| -> Vec<Series> {
        names
            .iter()
            .map(|name| Series {
                name: name.clone(),
                values: report
                    .contexts
                    .iter()
                    .map(|&c| {
                        report
                            .entries
                            .iter()
                            .find(|e| &e.config == name && e.context == c)
                            .map(f)
                    })
                    .collect(),
            })
            .collect()
    };
    let panels = [
        Panel {
            title: "decode".into(),
            y_label: "tokens/s".into(),
            series: series(&|e| e.decode_tokens_per_s.median),
        },
        Panel {
            title: "prefill".into(),
            y_label: "tokens/s".into(),
            series: series(&|e| e.prefill_tokens_per_s.median),
        },
        Panel {
            title: "KV cache held".into(),
            y_label: "MiB".into(),
            series: series(&|e| e.kv.held_bytes as f64 / MIB),
        },
        Panel {
            title: "peak resident memory".into(),
            y_label: "MiB".into(),
            series: series(&|e| e.peak_rss_bytes.median / MIB),
        },
    ];
    let title = format!(
        "kivi bench · {} · {} · medians of {} rounds, {} decoded tokens",
        report.model, report.backend, report.repeats, report.decode_tokens
    );
    line_panels(path, &title, &x_labels, &panels)
}
