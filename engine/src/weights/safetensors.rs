//! Hugging Face model folders: `config.json` plus one or more `.safetensors` files, dense
//! or MLX-quantized (`"quantization": {"group_size": 64, "bits": 4}` in `config.json`, with
//! `weight`, `scales` and `biases` per quantized module, as mlx-community publishes them).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mlx_rs::Array;
use serde_json::Value;

use super::{QuantScheme, Weights};
use crate::backend::Backend;
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
pub(crate) fn shard_paths(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
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
    let files = super::files_with_extension(dir, "safetensors")?;
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

/// Largest safetensors header (the `safetensors` crate's limit).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Checks a safetensors file's header against the file before MLX reads it: the header
/// length, the JSON, every tensor's dtype, shape and offsets (in range, contiguous, not
/// overlapping, sized as dtype times shape), and that the tensors fill the file.
pub fn check_header(path: &Path) -> Result<(), LoadError> {
    use std::io::Read;
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut prefix = [0u8; 8];
    let header_len = if len < 8 {
        None
    } else {
        file.read_exact(&mut prefix).map_err(io)?;
        Some(u64::from_le_bytes(prefix))
    };
    let header = match header_len {
        Some(n) if n <= MAX_HEADER_BYTES && n <= len - 8 => {
            let mut header = vec![0u8; n as usize];
            file.read_exact(&mut header).map_err(io)?;
            Some(header)
        }
        _ => None,
    };
    let checked = match header {
        Some(header) => check_header_bytes(&header, len - 8 - header.len() as u64),
        None => Err(format!(
            "its header length ({}) does not fit the file's {len} bytes",
            header_len.map_or("missing".to_string(), |n| n.to_string())
        )),
    };
    checked.map_err(|why| {
        LoadError::Weights(format!(
            "{} is not a valid safetensors file: {why}; download the model again",
            path.display()
        ))
    })
}

/// Checks a safetensors header (the JSON after the length) for a data section of
/// `data_len` bytes; says what is wrong.
pub fn check_header_bytes(header: &[u8], data_len: u64) -> Result<(), String> {
    let metadata: safetensors::tensor::Metadata =
        serde_json::from_slice(header).map_err(|e| format!("its header is not valid: {e}"))?;
    let mut end = 0u64;
    for (name, info) in metadata.tensors() {
        if info.shape.iter().any(|&d| d > i32::MAX as usize) {
            return Err(format!("tensor {name:?} has a dimension over 2^31"));
        }
        end = end.max(info.data_offsets.1 as u64);
    }
    if end != data_len {
        return Err(format!(
            "its tensors take {end} bytes but the file holds {data_len} after the header \
             (truncated or padded)"
        ));
    }
    Ok(())
}

/// Loads every tensor of the folder's checkpoint.
pub fn load_weights(dir: &Path, config: &Value, backend: Backend) -> Result<Weights, LoadError> {
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
        check_header(&path)?;
        let shard = Array::load_safetensors(&path)
            .map_err(|e| LoadError::Weights(format!("cannot read {}: {e}", path.display())))?;
        tensors.extend(
            shard
                .into_iter()
                // Precomputed RoPE tables some exports carry; the model computes its own.
                .filter(|(name, _)| !name.contains("rotary_emb.inv_freq")),
        );
    }
    Ok(Weights::new(tensors, scheme, backend))
}
