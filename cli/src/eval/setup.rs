//! The model and output files of the measurement commands.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use kivi_engine::backend::Backend;
use kivi_engine::cache::CacheConfig;
use kivi_engine::loader::{load_local, LoadedModel};
use kivi_engine::session::ModelSource;

use crate::args::{chosen, ModelArgs};

/// The model to measure. Only local models: a measurement must not start with a download.
#[derive(Debug, Clone, Args)]
pub struct EvalModelArgs {
    /// A .gguf file or a Hugging Face model folder. Default: the offline SmolLM2 under
    /// .data/models of this repository.
    #[arg(long, short, env = "KIVI_MODEL")]
    pub model: Option<String>,
    /// Where and how the model runs (see `kivi generate --help`). Default: KIVI_BACKEND,
    /// else the platform's.
    #[arg(long)]
    pub backend: Option<Backend>,
}

impl EvalModelArgs {
    /// The model file or folder, resolved as `kivi generate` resolves it.
    pub fn path(&self) -> Result<PathBuf> {
        // Reuse the shared resolution (the --model flag, KIVI_MODEL, the offline default);
        // the cache flags play no part in it.
        let resolver = ModelArgs {
            model: self.model.clone(),
            backend: self.backend,
            context: None,
            cache: CacheConfig::Full,
            prefill_chunk: 256,
        };
        match resolver.engine_options()?.source {
            ModelSource::Path(path) => Ok(path),
            ModelSource::Hub { repo_id, .. } => bail!(
                "{repo_id} is not on disk: measurements run local models only; download it \
                 first (e.g. with `kivi generate --model {repo_id} hi`) and pass its folder"
            ),
        }
    }

    /// The backend the flag (or `KIVI_BACKEND`, or the platform) chooses.
    pub fn backend(&self) -> Result<Backend> {
        chosen(self.backend)
    }

    /// Loads the model on this thread (MLX arrays stay on the thread that made them).
    pub fn load(&self) -> Result<LoadedModel> {
        let path = self.path()?;
        load_local(&path, self.backend()?)
            .with_context(|| format!("cannot load the model {}", path.display()))
    }
}

/// Writes `value` as pretty JSON, creating the parent folder.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    create_parent(path)?;
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// Creates the folder `path` goes into.
pub fn create_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the folder {}", dir.display()))?;
    }
    Ok(())
}

/// The PNG beside a JSON file when no --plot path is given (`x.json` -> `x.png`).
pub fn plot_path(plot: Option<&Path>, json: Option<&Path>, suffix: &str) -> Option<PathBuf> {
    plot.map(Path::to_path_buf).or_else(|| {
        json.map(|j| {
            let stem = j.file_stem().unwrap_or_default().to_string_lossy();
            j.with_file_name(format!("{stem}{suffix}.png"))
        })
    })
}
