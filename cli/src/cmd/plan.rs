//! `kivi plan`: what long contexts cost on a Mac, on paper. For each planned model and cache
//! setting, at each context: the KV cache's bytes, the total with 4-bit weights and the
//! runtime, and the smallest Mac whose GPU share holds it, from the engine's own memory accounting
//! (the one that refuses a model that does not fit).

use anyhow::Result;
use clap::Args;
use kivi_engine::backend::{Backend, Device, Precision};
use kivi_engine::budget::plan::{need, smallest_mac, MAC_MODELS};
use kivi_engine::cache::CacheConfig;

use crate::eval::configs::{parse_configs, parse_sizes, size_label};

/// The settings compared by default: float16, K4V4, the recommended K4V2 with KIVI+'s
/// sinks, and K2V2 with sinks and the adaptive rotation.
const PLAN_CONFIGS: &str = "full,k4v4-g32-r128,k4v2-g32-r128-s4-rotv,k2v2-g32-r128-s4-rota";

/// Arguments of `kivi plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Contexts in tokens (k = 1024).
    #[arg(long, default_value = "32k,64k,128k")]
    pub contexts: String,
    /// Cache configurations, comma-separated short names.
    #[arg(long, default_value = PLAN_CONFIGS)]
    pub configs: String,
    /// Mac memory sizes in GB, ascending.
    #[arg(long, default_value = "8,16,24,32")]
    pub macs: String,
}

const GIB: u64 = 1 << 30;

/// Prints the plan as a Markdown table.
pub fn run(args: PlanArgs) -> Result<()> {
    let contexts = parse_sizes(&args.contexts)?;
    let configs = parse_configs(&args.configs)?;
    let mut macs = parse_sizes(&args.macs)?;
    macs.sort_unstable();
    let rams: Vec<u64> = macs.iter().map(|&gb| gb as u64 * GIB).collect();
    // A Mac's GPU in float16: full caches and KIVI's scales, zeros and window in float16.
    let backend = Backend::mlx(Device::Gpu, Precision::F16);
    println!(
        "Each cell: KV cache / total with 4-bit weights (4.5 bits a parameter) and the runtime \
         (0.5 GiB + a tenth of the weights), in GiB, and the smallest Mac whose GPU share \
         (two thirds of its memory) holds it."
    );
    println!();
    let header: Vec<String> = contexts.iter().map(|&c| size_label(c)).collect();
    println!("| model | cache | {} |", header.join(" | "));
    println!("|---|---|{}", "---:|".repeat(contexts.len()));
    for model in &MAC_MODELS {
        for config in &configs {
            let cells: Vec<String> = contexts
                .iter()
                .map(|&context| {
                    if context > model.context {
                        return "past its context".into();
                    }
                    let need = need(model, context, config, &backend);
                    let mac = match smallest_mac(&need, &rams) {
                        Some(ram) => format!("{} GB", ram / GIB),
                        None => format!("over {} GB", macs.last().copied().unwrap_or(0)),
                    };
                    format!(
                        "{:.1} / {:.1} · {mac}",
                        need.kv_cache as f64 / GIB as f64,
                        need.total() as f64 / GIB as f64,
                    )
                })
                .collect();
            println!(
                "| {} | {} | {} |",
                model.name,
                label(config),
                cells.join(" | ")
            );
        }
    }
    Ok(())
}

fn label(config: &CacheConfig) -> String {
    match config {
        CacheConfig::Full => "float16".into(),
        CacheConfig::Kivi(_) => config.to_string(),
    }
}
