//! Hugging Face model folders: `config.json` plus one or more `.safetensors` files, dense
//! or MLX-quantized (`"quantization": {"group_size": 64, "bits": 4}` in `config.json`, with
//! `weight`, `scales` and `biases` per quantized module, as mlx-community publishes them).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mlx_rs::Array;
use serde_json::Value;

use super::{QuantScheme, Weights};
use crate::error::LoadError;
use crate::model::layers::Quantization;

/// Reads and parses a JSON file.
pub fn read_json(path: &Path) -> Result<Value, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| LoadError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// The quantization an MLX `config.json` declares.
pub fn quant_scheme(config: &Value) -> Result<QuantScheme, LoadError> {
    let Some(q) = config
        .get("quantization")
        .or_else(|| config.get("quantization_config"))
    else {
        return Ok(QuantScheme::None);
    };
    let parse = |v: &Value| -> Option<Quantization> {
        Some(Quantization {
            group_size: v.get("group_size")?.as_i64()? as i32,
            bits: v.get("bits")?.as_i64()? as i32,
        })
    };
    let Some(default) = parse(q) else {
        let method = q
            .get("quant_method")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        return Err(LoadError::UnsupportedQuantization(format!(
            "config.json quantization {method:?}: only MLX affine quantization \
             ({{\"group_size\", \"bits\"}}) is supported"
        )));
    };
    if q.get("mode").and_then(Value::as_str).unwrap_or("affine") != "affine" {
        return Err(LoadError::UnsupportedQuantization(format!(
            "MLX quantization mode {:?}: only \"affine\" is supported",
            q["mode"]
        )));
    }
    let overrides = q
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), parse(v)?)))
        .collect();
    Ok(QuantScheme::Uniform {
        group_size: default.group_size,
        bits: Some(default.bits),
        overrides,
    })
}

/// The safetensors files of a folder: those the index names, or all of them.
fn shard_paths(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let json = read_json(&index)?;
        let mut files: Vec<String> = json
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| LoadError::Weights(format!("{} has no weight_map", index.display())))?
            .values()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        files.sort();
        files.dedup();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let entries = std::fs::read_dir(dir).map_err(|source| LoadError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(LoadError::Missing {
            what: "*.safetensors weights".into(),
            path: dir.to_path_buf(),
            hint:
                "the folder must hold a Hugging Face checkpoint (config.json and model.safetensors)"
                    .into(),
        });
    }
    Ok(files)
}

/// Loads every tensor of the folder's checkpoint.
pub fn load_weights(dir: &Path, config: &Value) -> Result<Weights, LoadError> {
    let scheme = quant_scheme(config)?;
    let mut tensors: HashMap<String, Array> = HashMap::new();
    for path in shard_paths(dir)? {
        if !path.is_file() {
            return Err(LoadError::Missing {
                what: "weights shard".into(),
                path,
                hint: "the download is incomplete; fetch the model again".into(),
            });
        }
        let shard = Array::load_safetensors(&path)
            .map_err(|e| LoadError::Weights(format!("cannot read {}: {e}", path.display())))?;
        tensors.extend(
            shard
                .into_iter()
                // Precomputed RoPE tables some exports carry; the model computes its own.
                .filter(|(name, _)| !name.contains("rotary_emb.inv_freq")),
        );
    }
    Ok(Weights::new(tensors, scheme))
}
