//! Every GGUF tensor type the engine loads, against the `gguf` Python package (llama.cpp's
//! own library) as the independent reference: the block decoders value for value, the
//! conversion to what the model runs (exact, or re-quantized within half a step), and
//! SmolLM2 in llama.cpp-style K-quant mixes against the same weights in float16.
//!
//! The files come from `scripts/reference/gguf_types.py`, run with the project's `.venv`.

mod offline;

use std::fs::File;
use std::path::{Path, PathBuf};

use kivi_engine::backend::{Backend, Device, Precision};
use kivi_engine::cache::{CacheConfig, KvCache};
use kivi_engine::gguf::{native, GgufHeader};
use kivi_engine::loader::{load_local, LoadedModel};
use kivi_kernels::ggml::{self, BlockType};
use mlx_rs::Array;

/// Runs the reference script's `mode` into a fresh folder.
fn reference_files(mode: &str, args: &[&Path]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = offline::workspace_root();
    let status = std::process::Command::new(root.join(".venv/bin/python"))
        .arg(root.join("scripts/reference/gguf_types.py"))
        .arg(mode)
        .args(args)
        .arg(dir.path())
        .status()
        .expect("the project's .venv Python runs (scripts/setup.sh venv)");
    assert!(
        status.success(),
        "scripts/reference/gguf_types.py {mode} failed"
    );
    dir
}

/// Every tensor of a file: its description and its bytes.
fn tensors(path: &Path) -> Vec<(kivi_engine::gguf::TensorInfo, Vec<u8>)> {
    let header = GgufHeader::read_file(path).unwrap();
    header.check_loadable().unwrap();
    let mut file = File::open(path).unwrap();
    header
        .tensors
        .iter()
        .map(|t| {
            let mut data = Vec::new();
            header.read_tensor(&mut file, t, &mut data).unwrap();
            (t.clone(), data)
        })
        .collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

#[test]
fn every_type_decodes_as_the_gguf_package_does() {
    let dir = reference_files("blocks", &[]);
    let got = tensors(&dir.path().join("blocks.gguf"));
    let want = tensors(&dir.path().join("expected.gguf"));
    let seen: Vec<_> = got.iter().map(|(t, _)| t.ggml_type.blocks()).collect();
    assert!(
        BlockType::ALL.iter().all(|ty| seen.contains(&Some(*ty))),
        "one tensor of every loadable type: {seen:?}"
    );
    for ((info, data), (expected_info, expected)) in got.iter().zip(&want) {
        assert_eq!(info.name, expected_info.name);
        assert_eq!(info.shape(), expected_info.shape());
        let ty = info.ggml_type;
        let expected = f32s(expected);
        let decoded = ggml::dequantize(ty.blocks().unwrap(), data);
        let largest = expected.iter().fold(0f32, |m, v| m.max(v.abs()));
        // gguf computes `(q - 8) * d` where the engine computes `q * d + (-8 * d)`: the
        // same value up to a rounding of the largest term.
        let worst = decoded
            .iter()
            .zip(&expected)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= largest * 1e-6,
            "{}: decoded values differ by {worst} (largest value {largest})",
            ty.name
        );

        // What the model runs: exact where the layout holds the type, else within half a
        // step of a 32-value group's range.
        let tensor = native::convert(info, data, 2).unwrap();
        let held = tensor.values();
        let (bits, exact) = native::held_as(ty).unwrap();
        for (g, (h, d)) in held.chunks(32).zip(decoded.chunks(32)).enumerate() {
            let err = h.iter().zip(d).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            let bound = if exact {
                largest * 1e-6
            } else {
                let lo = d.iter().copied().fold(f32::INFINITY, f32::min);
                let hi = d.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                (hi - lo) / ((1u32 << bits.unwrap()) - 1) as f32 * 0.5 * (1.0 + 1e-4)
            };
            assert!(
                err <= bound,
                "{} group {g}: held values differ by {err} (bound {bound})",
                ty.name
            );
        }
        println!(
            "{:>5}: decoded within {worst:.1e} of gguf's; held as {}",
            ty.name,
            native::describe(ty)
        );
    }
}

fn caches(n: usize, backend: Backend) -> Vec<Box<dyn KvCache>> {
    (0..n).map(|_| CacheConfig::Full.make(&backend)).collect()
}

/// Logits `[L][vocab]` of `tokens` in one pass.
fn logits(loaded: &LoadedModel, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut caches = caches(loaded.model.config().num_layers, *loaded.model.backend());
    let hidden = loaded.model.forward(tokens, &mut caches).unwrap();
    let out: Array = loaded.model.logits(&hidden).unwrap();
    out.eval().unwrap();
    let vocab = out.dim(2) as usize;
    out.as_slice::<f32>()
        .chunks(vocab)
        .map(<[f32]>::to_vec)
        .collect()
}

fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
            if v > best.1 {
                (i, v)
            } else {
                best
            }
        })
        .0
}

/// Root mean square of `a - b` over that of `b`, and the share of rows with the same
/// largest logit.
fn agreement(a: &[Vec<f32>], b: &[Vec<f32>]) -> (f64, f64) {
    let (mut diff, mut norm, mut same) = (0f64, 0f64, 0usize);
    for (ra, rb) in a.iter().zip(b) {
        for (&x, &y) in ra.iter().zip(rb) {
            diff += f64::from(x - y).powi(2);
            norm += f64::from(y).powi(2);
        }
        same += usize::from(argmax(ra) == argmax(rb));
    }
    ((diff / norm).sqrt(), same as f64 / a.len() as f64)
}

/// The mixes and what the model description says of each.
const MIXES: &[(&str, &str)] = &[
    ("Q8_0", "Q8_0"),
    ("Q4_K_M", "Q4_K_M (Q5_0 as 8-bit)"),
    ("Q5_K_M", "Q5_K_M (Q5_1 as 8-bit, Q5_K as 8-bit)"),
    ("Q6_K", "Q6_K (Q6_K re-quantized to 8-bit g32)"),
];

/// Each mix loaded gives the logits of its own values (as the `gguf` package decodes
/// them, stored in float16): float16 rounding moves logits by under 0.1% RMS (the offline
/// Q4_1 file against its F16 copy: 0.07%), and Q6_K's re-quantization to 8 bits adds
/// some (measured 1.7% RMS, every top prediction kept). The cost of each mix against the unquantized weights is printed (measured:
/// Q8_0 2.7% RMS, Q4_K_M 17.6%: SmolLM2-135M's logits move with every weight).
#[test]
fn smollm2_k_quant_mixes_give_the_logits_of_their_values() {
    let dir = reference_files("smollm2", &[&offline::smollm2_path()]);
    let file = |name: &str| -> PathBuf {
        dir.path()
            .join(format!("SmolLM2-135M-Instruct.{name}.gguf"))
    };
    let text = "The old lighthouse keeper climbed the stairs every evening, counting the \
                steps as his father had taught him, and at the top he lit the lamp that \
                guided the fishing boats home through the fog.";
    for backend in [Backend::HOST, Backend::mlx(Device::Cpu, Precision::F32)] {
        let run = |name: &str| {
            let loaded = load_local(&file(name), backend).unwrap();
            let tokens = loaded.tokenizer.encode(text, false).unwrap();
            (loaded.info.quantization.clone(), logits(&loaded, &tokens))
        };
        let (quantization, unquantized) = run("F16");
        assert_eq!(quantization, "F16");
        // MLX's operations take the same arrays: one mix (4-bit and 8-bit matrices) covers
        // its products, and each load of a mix costs seconds in a debug build.
        let mixes = if backend == Backend::HOST {
            MIXES
        } else {
            &MIXES[1..2]
        };
        for &(name, description) in mixes {
            let (quantization, got) = run(name);
            assert_eq!(quantization, description);
            let (_, want) = run(&format!("{name}-values.F16"));
            let (rms, top) = agreement(&got, &want);
            let (cost, kept) = agreement(&got, &unquantized);
            println!(
                "{backend:?} {name}: within {:.3}% RMS of its values' logits; against the \
                 unquantized weights {:.1}% RMS, {:.0}% of top predictions kept",
                rms * 100.0,
                cost * 100.0,
                kept * 100.0
            );
            let limit = if name == "Q6_K" { 0.03 } else { 2e-3 };
            assert!(rms <= limit && top == 1.0, "{name}: {rms} RMS, top-1 {top}");
        }
    }
}
