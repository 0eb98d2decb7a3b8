//! ggml's tensor blocks (the data of GGUF files) in plain Rust: decoded to floats (the
//! reference for every GGUF tensor type the engine loads) and converted to MLX's affine
//! layout. The layouts are those of ggml's block structs (`ggml-common.h`);
//! `engine/tests/gguf_types.rs` checks every decoder against the `gguf` Python package's
//! independent one. Here rather than in the engine's GGUF reader because a model load runs
//! these loops over every weight: in this crate they are optimized in debug builds too.
//!
//! Seven quantized types are affine in runs of 32 values (`x = scale * code + bias`, codes
//! of 4, 5 or 8 bits): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q5_K. MLX's quantized layout
//! holds those exactly. Q2_K, Q3_K and Q6_K give every run of 16 values its own scale,
//! which no MLX kernel takes; they decode to floats.

use half::{bf16, f16};

use crate::{pack, reference};

/// The ggml block types this module decodes.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
}

impl BlockType {
    /// Every type, in ggml's code order.
    pub const ALL: [BlockType; 13] = [
        BlockType::F32,
        BlockType::F16,
        BlockType::Q4_0,
        BlockType::Q4_1,
        BlockType::Q5_0,
        BlockType::Q5_1,
        BlockType::Q8_0,
        BlockType::Q2_K,
        BlockType::Q3_K,
        BlockType::Q4_K,
        BlockType::Q5_K,
        BlockType::Q6_K,
        BlockType::BF16,
    ];

    /// ggml's name for the type ("Q4_1").
    pub fn name(self) -> &'static str {
        self.sizes().0
    }

    /// The type of a ggml name, if this module decodes it.
    pub fn from_name(name: &str) -> Option<BlockType> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Values per block (1 for the float types).
    pub fn block_elements(self) -> usize {
        self.sizes().1
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.sizes().2
    }

    fn sizes(self) -> (&'static str, usize, usize) {
        use BlockType::*;
        match self {
            F32 => ("F32", 1, 4),
            F16 => ("F16", 1, 2),
            BF16 => ("BF16", 1, 2),
            Q4_0 => ("Q4_0", 32, 18),
            Q4_1 => ("Q4_1", 32, 20),
            Q5_0 => ("Q5_0", 32, 22),
            Q5_1 => ("Q5_1", 32, 24),
            Q8_0 => ("Q8_0", 32, 34),
            Q2_K => ("Q2_K", 256, 84),
            Q3_K => ("Q3_K", 256, 110),
            Q4_K => ("Q4_K", 256, 144),
            Q5_K => ("Q5_K", 256, 176),
            Q6_K => ("Q6_K", 256, 210),
        }
    }

    /// How the type's blocks decode.
    pub fn layout(self) -> Layout {
        use BlockType::*;
        match self {
            F32 | F16 | BF16 => Layout::Float,
            Q4_0 | Q4_1 | Q4_K => Layout::Affine { code_bits: 4 },
            Q5_0 | Q5_1 | Q5_K => Layout::Affine { code_bits: 5 },
            Q8_0 => Layout::Affine { code_bits: 8 },
            Q2_K | Q3_K | Q6_K => Layout::Sixteens,
        }
    }
}

/// Values per affine group: ggml's 32-value blocks, and the sub-blocks of Q4_K and Q5_K.
pub const GROUP: usize = 32;

/// One run of [`GROUP`] values as `scale * code + bias`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AffineGroup {
    /// Step between codes.
    pub scale: f32,
    /// Value of code 0.
    pub bias: f32,
    /// One code per value.
    pub codes: [u8; GROUP],
}

impl AffineGroup {
    /// All zero: a starting value to fill.
    pub const EMPTY: AffineGroup = AffineGroup {
        scale: 0.0,
        bias: 0.0,
        codes: [0; GROUP],
    };
}

/// How a type's blocks decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One float per element (F32, F16, BF16).
    Float,
    /// Affine groups of 32 with codes of this many bits.
    Affine {
        /// Bits per code.
        code_bits: u32,
    },
    /// Groups of 16 with their own scales: decoded to floats.
    Sixteens,
}

fn half_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// The affine groups of one block of an affine type (1 for the 32-value types, 8 for
/// Q4_K and Q5_K) into `out`.
///
/// # Panics
/// If `block` is not one block of `ty`, `out` is shorter than its groups, or `ty` is not
/// affine.
pub fn affine_groups(ty: BlockType, block: &[u8], out: &mut [AffineGroup]) {
    use BlockType::*;
    assert_eq!(block.len(), ty.block_bytes(), "one {} block", ty.name());
    let mut g = AffineGroup::EMPTY;
    match ty {
        Q4_0 | Q4_1 | Q5_0 | Q5_1 => {
            // d, [m], [32 high bits], 16 bytes of nibbles: values j and j + 16 share byte j.
            let with_min = matches!(ty, Q4_1 | Q5_1);
            let five = matches!(ty, Q5_0 | Q5_1);
            let d = half_at(block, 0);
            let mut at = if with_min { 4 } else { 2 };
            let high = if five {
                at += 4;
                u32::from_le_bytes(block[at - 4..at].try_into().unwrap())
            } else {
                0
            };
            let hi_bit = |k: usize| (((high >> k) & 1) << 4) as u8;
            for (j, &byte) in block[at..at + 16].iter().enumerate() {
                g.codes[j] = (byte & 0x0f) | hi_bit(j);
                g.codes[j + 16] = (byte >> 4) | hi_bit(j + 16);
            }
            g.scale = d;
            g.bias = if with_min {
                half_at(block, 2)
            } else if five {
                -16.0 * d
            } else {
                -8.0 * d
            };
            out[0] = g;
        }
        Q8_0 => {
            let d = half_at(block, 0);
            for (c, &q) in g.codes.iter_mut().zip(&block[2..34]) {
                *c = (q as i8 as i16 + 128) as u8;
            }
            g.scale = d;
            g.bias = -128.0 * d;
            out[0] = g;
        }
        Q4_K | Q5_K => {
            // d, dmin, 12 bytes of 6-bit scales and mins, [32 bytes of high bits], 128
            // bytes of nibbles: each 32 bytes hold two groups (low nibbles, then high).
            let five = ty == Q5_K;
            let (d, dmin) = (half_at(block, 0), half_at(block, 2));
            let packed_scales = &block[4..16];
            let (qh, qs) = if five {
                (&block[16..48], &block[48..176])
            } else {
                (&[][..], &block[16..144])
            };
            for (i, group) in out[..8].iter_mut().enumerate() {
                let (sc, m) = scale_min_k4(i, packed_scales);
                let bytes = &qs[(i / 2) * 32..(i / 2) * 32 + 32];
                for (l, c) in g.codes.iter_mut().enumerate() {
                    let low = if i % 2 == 0 {
                        bytes[l] & 0x0f
                    } else {
                        bytes[l] >> 4
                    };
                    let high = if five { ((qh[l] >> i) & 1) << 4 } else { 0 };
                    *c = low | high;
                }
                g.scale = d * f32::from(sc);
                g.bias = -(dmin * f32::from(m));
                *group = g;
            }
        }
        other => panic!("{} is not an affine type", other.name()),
    }
}

/// Q4_K's and Q5_K's packing of eight 6-bit scales and eight 6-bit mins in 12 bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// One block of Q2_K, Q3_K or Q6_K (256 values) as floats into `out`.
///
/// # Panics
/// If `block` is not one block of `ty`, `out` is not 256 long, or `ty` is none of those.
pub fn sixteens(ty: BlockType, block: &[u8], out: &mut [f32]) {
    use BlockType::*;
    assert_eq!(block.len(), ty.block_bytes(), "one {} block", ty.name());
    assert_eq!(out.len(), 256);
    match ty {
        Q2_K => {
            // 16 scale bytes (low nibble scale, high nibble min), 64 bytes of 2-bit codes,
            // d, dmin. Each 32 bytes hold 128 values: four 2-bit planes of 32.
            let (scales, qs) = (&block[..16], &block[16..80]);
            let (d, dmin) = (half_at(block, 80), half_at(block, 82));
            for (i, y) in out.chunks_exact_mut(16).enumerate() {
                let (half, plane, second) = (i / 8, (i % 8) / 2, i % 2);
                let sc = scales[i];
                let (dl, ml) = (d * f32::from(sc & 0x0f), dmin * f32::from(sc >> 4));
                let q = &qs[half * 32 + second * 16..][..16];
                for (v, &b) in y.iter_mut().zip(q) {
                    *v = dl * f32::from((b >> (2 * plane)) & 3) - ml;
                }
            }
        }
        Q3_K => {
            // 32 bytes of high bits (one bit plane per group of 32 bytes' planes), 64
            // bytes of 2-bit codes, 12 bytes of 6-bit scales, d.
            let (hmask, qs) = (&block[..32], &block[32..96]);
            let scales = q3k_scales(&block[96..108]);
            let d = half_at(block, 108);
            for (i, y) in out.chunks_exact_mut(16).enumerate() {
                let (half, plane, second) = (i / 8, (i % 8) / 2, i % 2);
                let dl = d * f32::from(scales[i] - 32);
                let q = &qs[half * 32 + second * 16..][..16];
                let h = &hmask[second * 16..][..16];
                let bit = 1u8 << (half * 4 + plane);
                for ((v, &b), &hb) in y.iter_mut().zip(q).zip(h) {
                    let low = ((b >> (2 * plane)) & 3) as i8;
                    let code = low - if hb & bit != 0 { 0 } else { 4 };
                    *v = dl * f32::from(code);
                }
            }
        }
        Q6_K => {
            // 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 signed scales, d.
            let (ql, qh) = (&block[..128], &block[128..192]);
            let scales = &block[192..208];
            let d = half_at(block, 208);
            for (half, y) in out.chunks_exact_mut(128).enumerate() {
                let (ql, qh) = (&ql[half * 64..][..64], &qh[half * 32..][..32]);
                let sc = &scales[half * 8..][..8];
                for l in 0..32 {
                    let is = l / 16;
                    let code = |low: u8, shift: u32| {
                        f32::from(((low | (((qh[l] >> shift) & 3) << 4)) as i8) - 32)
                    };
                    let s = |k: usize| d * f32::from(sc[is + k] as i8);
                    y[l] = s(0) * code(ql[l] & 0x0f, 0);
                    y[l + 32] = s(2) * code(ql[l + 32] & 0x0f, 2);
                    y[l + 64] = s(4) * code(ql[l] >> 4, 4);
                    y[l + 96] = s(6) * code(ql[l + 32] >> 4, 6);
                }
            }
        }
        other => panic!("{} does not scale groups of 16", other.name()),
    }
}

/// Q3_K's sixteen 6-bit scales (stored + 32) from their 12 packed bytes: the low nibbles
/// in bytes 0-7, the top two bits in bytes 8-11.
fn q3k_scales(packed: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, s) in out.iter_mut().enumerate() {
        let low = if i < 8 {
            packed[i] & 0x0f
        } else {
            packed[i - 8] >> 4
        };
        let high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        *s = (low | (high << 4)) as i8;
    }
    out
}

/// Every element of a tensor's data as `f32`: the reference decode.
///
/// # Panics
/// If `data` is not a whole number of blocks.
pub fn dequantize(ty: BlockType, data: &[u8]) -> Vec<f32> {
    let bytes = ty.block_bytes();
    assert_eq!(data.len() % bytes, 0, "whole {} blocks", ty.name());
    let blocks = data.chunks_exact(bytes);
    match ty.layout() {
        Layout::Float => match ty {
            BlockType::F32 => blocks
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect(),
            BlockType::F16 => blocks.map(|b| half_at(b, 0)).collect(),
            _ => blocks
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
        },
        Layout::Affine { .. } => {
            let mut groups = vec![AffineGroup::EMPTY; ty.block_elements() / GROUP];
            let mut out = Vec::with_capacity(data.len() / bytes * ty.block_elements());
            for block in blocks {
                affine_groups(ty, block, &mut groups);
                for g in &groups {
                    out.extend(
                        g.codes
                            .iter()
                            .map(|&c| reference::dequantize_code(c, g.scale, g.bias)),
                    );
                }
            }
            out
        }
        Layout::Sixteens => {
            let mut out = vec![0f32; data.len() / bytes * 256];
            for (block, y) in blocks.zip(out.chunks_exact_mut(256)) {
                sixteens(ty, block, y);
            }
            out
        }
    }
}

/// Whole blocks of a quantized type in MLX's affine layout with `bits`-bit codes: per
/// group of [`GROUP`] values, `GROUP * bits / 32` packed words, a scale and a bias. Affine
/// types keep their codes (5-bit codes need `bits` 8); the types with groups of 16 are
/// re-quantized from their decoded values by the reference quantizer.
///
/// # Panics
/// If `data` is not whole blocks, the outputs are not sized for its groups, `ty` is a
/// float type, or an affine type's codes do not fit `bits`.
pub fn to_affine(
    ty: BlockType,
    bits: u32,
    data: &[u8],
    packed: &mut [u32],
    scales: &mut [f32],
    biases: &mut [f32],
) {
    assert_eq!(
        data.len() % ty.block_bytes(),
        0,
        "whole {} blocks",
        ty.name()
    );
    let affine = match ty.layout() {
        Layout::Affine { code_bits } => {
            assert!(code_bits <= bits, "{} codes in {bits} bits", ty.name());
            true
        }
        Layout::Sixteens => false,
        Layout::Float => panic!("{} is not quantized", ty.name()),
    };
    let mut groups = vec![AffineGroup::EMPTY; ty.block_elements() / GROUP];
    let mut floats = vec![0f32; ty.block_elements()];
    let words = GROUP * bits as usize / 32;
    let mut next = 0;
    for block in data.chunks_exact(ty.block_bytes()) {
        if affine {
            affine_groups(ty, block, &mut groups);
        } else {
            sixteens(ty, block, &mut floats);
            for (g, values) in groups.iter_mut().zip(floats.chunks_exact(GROUP)) {
                (g.scale, g.bias) = reference::quantize_group(values, bits, &mut g.codes);
            }
        }
        for g in &groups {
            pack::pack_into(
                &g.codes,
                bits,
                &mut packed[next * words..(next + 1) * words],
            );
            scales[next] = g.scale;
            biases[next] = g.bias;
            next += 1;
        }
    }
    assert_eq!(next, scales.len(), "outputs sized for {next} groups");
}
