//! Loading a model from disk: a GGUF file, or a Hugging Face folder (safetensors, dense or
//! MLX-quantized), into a ready [`Llama`] and its [`Tokenizer`].

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::error::LoadError;
use crate::model::{Llama, ModelConfig};
use crate::tokenizer::Tokenizer;
use crate::weights::{files_with_extension, gguf::Gguf, safetensors};

/// The file format a model was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightFormat {
    /// A llama.cpp GGUF file.
    Gguf,
    /// A Hugging Face folder with safetensors.
    Safetensors,
}

/// What was loaded, for display and statistics.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelInfo {
    /// A human-readable name (file or folder name).
    pub name: String,
    /// Where the weights came from.
    pub path: PathBuf,
    /// File format.
    pub format: WeightFormat,
    /// How the weights are stored ("Q4_1", "mlx 4-bit g64", "float32", ...).
    pub quantization: String,
    /// Hyper-parameters.
    pub config: ModelConfig,
    /// Where and how the model runs.
    pub backend: Backend,
}

/// A model ready to run, with its tokenizer.
pub struct LoadedModel {
    /// The network.
    pub model: Llama,
    /// Its tokenizer and chat template.
    pub tokenizer: Tokenizer,
    /// Description.
    pub info: ModelInfo,
}

/// Loads a `.gguf` file, a folder with `config.json` + safetensors, or a folder holding
/// exactly one `.gguf` file, to run on `backend` (which becomes MLX's default device).
pub fn load_local(path: &Path, backend: Backend) -> Result<LoadedModel, LoadError> {
    backend.activate()?;
    match model_files(path)? {
        ModelFiles::Gguf(file) => load_gguf(&file, backend),
        ModelFiles::Folder(dir) => load_folder(&dir, backend),
    }
}

/// Where a model's files are: what [`load_local`] loads, and what the memory check before
/// it reads (`crate::budget`).
pub(crate) enum ModelFiles {
    /// One `.gguf` file.
    Gguf(PathBuf),
    /// A Hugging Face model folder (`config.json` and safetensors).
    Folder(PathBuf),
}

/// A `.gguf` file, a folder with `config.json`, or a folder holding exactly one `.gguf`.
pub(crate) fn model_files(path: &Path) -> Result<ModelFiles, LoadError> {
    if path.is_file() {
        return Ok(ModelFiles::Gguf(path.to_path_buf()));
    }
    if !path.is_dir() {
        return Err(LoadError::Missing {
            what: "model".into(),
            path: path.to_path_buf(),
            hint: "pass a .gguf file or a Hugging Face model folder".into(),
        });
    }
    if path.join("config.json").is_file() {
        return Ok(ModelFiles::Folder(path.to_path_buf()));
    }
    let mut ggufs = files_with_extension(path, "gguf")?;
    match ggufs.len() {
        1 => Ok(ModelFiles::Gguf(ggufs.remove(0))),
        0 => Err(LoadError::Missing {
            what: "config.json or a .gguf file".into(),
            path: path.to_path_buf(),
            hint: "the folder holds no model".into(),
        }),
        _ => Err(LoadError::Config(format!(
            "{} holds several .gguf files; pass one of them",
            path.display()
        ))),
    }
}

fn name_of(path: &Path) -> String {
    path.file_stem().or_else(|| path.file_name()).map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

fn info(
    path: &Path,
    format: WeightFormat,
    quantization: String,
    config: ModelConfig,
    backend: Backend,
) -> ModelInfo {
    ModelInfo {
        name: name_of(path),
        path: path.to_path_buf(),
        format,
        quantization,
        config,
        backend,
    }
}

fn load_gguf(path: &Path, backend: Backend) -> Result<LoadedModel, LoadError> {
    let gguf = Gguf::open(path)?;
    let mut config = gguf.config()?;
    let tokenizer = Tokenizer::from_gguf(&gguf)?;
    let mut weights = gguf.weights(&mut config, backend)?;
    check_consistency(&config, &weights, &tokenizer)?;
    let model = Llama::load(config.clone(), &mut weights)?;
    let quantization = gguf.quantization_name()?;
    Ok(LoadedModel {
        model,
        tokenizer,
        info: info(path, WeightFormat::Gguf, quantization, config, backend),
    })
}

fn load_folder(dir: &Path, backend: Backend) -> Result<LoadedModel, LoadError> {
    let json = safetensors::read_json(&dir.join("config.json"))?;
    let config = ModelConfig::from_hf_json(&json)?;
    let tokenizer = Tokenizer::from_folder(dir)?;
    let mut weights = safetensors::load_weights(dir, &json, backend)?;
    check_consistency(&config, &weights, &tokenizer)?;
    let model = Llama::load(config.clone(), &mut weights)?;
    let quantization = match json.get("quantization") {
        Some(q) => format!(
            "mlx {}-bit g{}",
            q.get("bits").and_then(|v| v.as_u64()).unwrap_or(0),
            q.get("group_size").and_then(|v| v.as_u64()).unwrap_or(0)
        ),
        None => json
            .get("torch_dtype")
            .and_then(|v| v.as_str())
            .unwrap_or("dense")
            .to_string(),
    };
    Ok(LoadedModel {
        model,
        tokenizer,
        info: info(
            dir,
            WeightFormat::Safetensors,
            quantization,
            config,
            backend,
        ),
    })
}

/// The files must agree with each other: every matrix and norm of the checkpoint has the
/// rows the configuration implies (a config.json from another model fails here, not in
/// the first request), and no token id of the tokenizer lies beyond the embedding table.
/// MLX's embedding lookup does not check its indices, so a mismatched tokenizer would
/// read past the table instead of failing.
fn check_consistency(
    config: &ModelConfig,
    weights: &crate::weights::Weights,
    tokenizer: &Tokenizer,
) -> Result<(), LoadError> {
    let c = config;
    let mut rows = vec![
        ("model.embed_tokens.weight".to_string(), c.vocab_size),
        ("lm_head.weight".to_string(), c.vocab_size),
        ("model.norm.weight".to_string(), c.hidden_size),
    ];
    for i in 0..c.num_layers {
        let p = format!("model.layers.{i}");
        rows.extend([
            (format!("{p}.input_layernorm.weight"), c.hidden_size),
            (
                format!("{p}.post_attention_layernorm.weight"),
                c.hidden_size,
            ),
            (
                format!("{p}.self_attn.q_proj.weight"),
                c.num_heads * c.head_dim,
            ),
            (
                format!("{p}.self_attn.k_proj.weight"),
                c.num_kv_heads * c.head_dim,
            ),
            (
                format!("{p}.self_attn.v_proj.weight"),
                c.num_kv_heads * c.head_dim,
            ),
            (format!("{p}.self_attn.o_proj.weight"), c.hidden_size),
            (format!("{p}.mlp.gate_proj.weight"), c.intermediate_size),
            (format!("{p}.mlp.up_proj.weight"), c.intermediate_size),
            (format!("{p}.mlp.down_proj.weight"), c.hidden_size),
        ]);
    }
    for (name, want) in rows {
        let got = weights.shape(&name).and_then(|s| s.first().copied());
        if let Some(got) = got.filter(|&g| g as usize != want) {
            return Err(LoadError::Config(format!(
                "{name} has {got} rows but the configuration implies {want}: the configuration \
                 does not belong to these weights"
            )));
        }
    }
    if let Some(max) = tokenizer
        .max_token_id()
        .filter(|&id| id as usize >= config.vocab_size)
    {
        return Err(LoadError::Tokenizer(format!(
            "the tokenizer has token ids up to {max} but the model's embedding has {} rows: \
             the tokenizer does not belong to this model",
            config.vocab_size
        )));
    }
    Ok(())
}
