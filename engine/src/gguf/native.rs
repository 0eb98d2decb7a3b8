//! GGUF tensors turned into the forms the engine runs: plain floats, or MLX's affine
//! layout (codes packed in `u32` words, one scale and one bias per 32 values), which both
//! backends multiply without dequantizing (MLX's `quantized_matmul`, the host's
//! `qmatmul` at 4 and 8 bits).
//!
//! | GGUF type | held as | exact |
//! |---|---|---|
//! | F32, F16, BF16 | float | yes |
//! | Q4_0, Q4_1, Q4_K | 4-bit, groups of 32 | yes |
//! | Q5_0, Q5_1, Q5_K, Q8_0 | 8-bit, groups of 32 (5-bit codes widened) | yes |
//! | Q2_K, Q3_K, Q6_K | 8-bit, groups of 32, re-quantized | no: within half a step of 255 |
//!
//! Widening 5-bit codes to 8 bits costs memory (8.5 against 5.5 bits a weight) but keeps
//! every value, where the host backend has no 5-bit kernel. The types with groups of 16
//! are re-quantized from their decoded values by the reference quantizer, at 8 bits: at 4
//! bits, the Q3_K ffn_down of llama-quantize's SmolLM2 Q2_K file cost 15% of perplexity
//! against llama.cpp on the same file (64.8 against 56.4); at 8 bits the two engines agree
//! (docs/benchmarks.md, "GGUF types").

use kivi_kernels::ggml::{self, BlockType, Layout, GROUP};
use kivi_kernels::{pack, reference};

use super::{GgmlType, GgufError, TensorInfo};

/// A tensor in a form the engine runs.
#[derive(Debug, Clone, PartialEq)]
pub enum NativeTensor {
    /// Floats, in MLX's (row-major) shape.
    Dense {
        /// The values.
        values: Vec<f32>,
        /// The shape, outermost first.
        shape: Vec<i32>,
    },
    /// MLX's affine layout, groups of 32 along the last axis.
    Quantized {
        /// Codes, `32 / bits` to a word: shape `[.., cols * bits / 32]`.
        packed: Vec<u32>,
        /// One per group: shape `[.., cols / 32]`.
        scales: Vec<f32>,
        /// One per group, the value of code 0.
        biases: Vec<f32>,
        /// The tensor's shape, outermost first (`cols` last).
        shape: Vec<i32>,
        /// Bits per code: 4 or 8.
        bits: u32,
    },
}

/// How a GGUF type is held: bits per code of the affine layout (`None`: floats) and
/// whether the values are kept exactly.
pub fn held_as(ty: GgmlType) -> Option<(Option<u32>, bool)> {
    Some(match ty.blocks()?.layout() {
        Layout::Float => (None, true),
        Layout::Affine { code_bits: 4 } => (Some(4), true),
        Layout::Affine { .. } => (Some(8), true),
        Layout::Sixteens => (Some(8), false),
    })
}

/// How a type is held, in words for the model's description: its name where it is held
/// as stored ("Q4_K"), else what it became ("Q5_0 as 8-bit").
pub fn describe(ty: GgmlType) -> String {
    let stored_bits = match ty.blocks().map(BlockType::layout) {
        Some(Layout::Affine { code_bits }) => Some(code_bits),
        _ => None,
    };
    match held_as(ty) {
        Some((Some(bits), true)) if stored_bits != Some(bits) => {
            format!("{} as {bits}-bit", ty.name)
        }
        Some((Some(bits), false)) => format!("{} re-quantized to {bits}-bit g32", ty.name),
        _ => ty.name.to_string(),
    }
}

/// Converts one tensor's data (`info.size` bytes) into its native form, on up to
/// `threads` threads.
pub fn convert(info: &TensorInfo, data: &[u8], threads: usize) -> Result<NativeTensor, GgufError> {
    let ty = info.ggml_type;
    let bad = |why: String| GgufError::BadTensor {
        tensor: info.name.clone(),
        why,
    };
    if data.len() as u64 != info.size {
        return Err(bad(format!(
            "{} bytes of data, expected {}",
            data.len(),
            info.size
        )));
    }
    let shape: Vec<i32> = info.shape().iter().map(|&d| d as i32).collect();
    let unsupported = || GgufError::UnsupportedTensorType {
        tensor: info.name.clone(),
        type_name: ty.name,
    };
    let blocks = ty.blocks().ok_or_else(unsupported)?;
    let (bits, _) = held_as(ty).ok_or_else(unsupported)?;
    let Some(bits) = bits else {
        let values = ggml::dequantize(blocks, data);
        return Ok(NativeTensor::Dense { values, shape });
    };
    let cols = info.dims[0] as usize;
    if !cols.is_multiple_of(ty.block_elements as usize) {
        return Err(bad(format!(
            "rows of {cols} values do not fill whole {} blocks",
            ty.name
        )));
    }
    let groups = info.elements() as usize / GROUP;
    let words_per_group = GROUP * bits as usize / 32;
    let mut packed = vec![0u32; groups * words_per_group];
    let mut scales = vec![0f32; groups];
    let mut biases = vec![0f32; groups];

    let block_bytes = ty.block_bytes as usize;
    let groups_per_block = ty.block_elements as usize / GROUP;
    let blocks_total = data.len() / block_bytes;
    let per_thread = blocks_total.div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        let chunks = data
            .chunks(per_thread * block_bytes)
            .zip(packed.chunks_mut(per_thread * groups_per_block * words_per_group))
            .zip(scales.chunks_mut(per_thread * groups_per_block))
            .zip(biases.chunks_mut(per_thread * groups_per_block));
        for (((data, packed), scales), biases) in chunks {
            scope.spawn(move || {
                ggml::to_affine(blocks, bits, data, packed, scales, biases);
            });
        }
    });

    Ok(NativeTensor::Quantized {
        packed,
        scales,
        biases,
        shape,
        bits,
    })
}

impl NativeTensor {
    /// The values, decoded (dense tensors as they are): for tests and checks.
    pub fn values(&self) -> Vec<f32> {
        match self {
            NativeTensor::Dense { values, .. } => values.clone(),
            NativeTensor::Quantized {
                packed,
                scales,
                biases,
                bits,
                ..
            } => pack::unpack(packed, *bits)
                .chunks_exact(GROUP)
                .zip(scales.iter().zip(biases))
                .flat_map(|(codes, (&s, &b))| {
                    codes
                        .iter()
                        .map(move |&c| reference::dequantize_code(c, s, b))
                })
                .collect(),
        }
    }
}

/// The shapes of a quantized tensor's packed words and of its scales (and biases): the
/// tensor's `shape` with its last axis in words of `bits`-bit codes, and in groups.
pub fn quantized_shapes(shape: &[i32], bits: u32) -> (Vec<i32>, Vec<i32>) {
    let (mut words, mut groups) = (shape.to_vec(), shape.to_vec());
    if let (Some(w), Some(g)) = (words.last_mut(), groups.last_mut()) {
        *w = *w * bits as i32 / 32;
        *g /= GROUP as i32;
    }
    (words, groups)
}
