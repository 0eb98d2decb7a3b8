//! Tensor descriptions: ggml types, shapes and where the data lies.

use kivi_kernels::ggml::BlockType;

/// A ggml tensor type: its name and block layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    /// The type code in the file.
    pub code: u32,
    /// ggml's name ("Q4_1").
    pub name: &'static str,
    /// Elements per block (1 for plain types).
    pub block_elements: u64,
    /// Bytes per block.
    pub block_bytes: u64,
    /// The decoder, where the engine reads this type.
    decoded: Option<BlockType>,
}

/// A type in the table: one the engine decodes (its name and sizes are the decoder's, one
/// definition for both), or one it only names (name, block elements, block bytes), so that
/// a file holding it still parses and the error names what it holds.
#[derive(Clone, Copy)]
enum Entry {
    Decoded(BlockType),
    Named(&'static str, u64, u64),
}

/// ggml's types as of 2025 (`ggml.h`, `ggml-common.h`) by code. Codes 4 and 5 (Q4_2, Q4_3)
/// were removed; 31-33 and 36-38 are not in files.
const TYPES: &[(u32, Entry)] = {
    use BlockType::*;
    use Entry::{Decoded, Named};
    &[
        (0, Decoded(F32)),
        (1, Decoded(F16)),
        (2, Decoded(Q4_0)),
        (3, Decoded(Q4_1)),
        (6, Decoded(Q5_0)),
        (7, Decoded(Q5_1)),
        (8, Decoded(Q8_0)),
        (9, Named("Q8_1", 32, 36)),
        (10, Decoded(Q2_K)),
        (11, Decoded(Q3_K)),
        (12, Decoded(Q4_K)),
        (13, Decoded(Q5_K)),
        (14, Decoded(Q6_K)),
        (15, Named("Q8_K", 256, 292)),
        (16, Named("IQ2_XXS", 256, 66)),
        (17, Named("IQ2_XS", 256, 74)),
        (18, Named("IQ3_XXS", 256, 98)),
        (19, Named("IQ1_S", 256, 50)),
        (20, Named("IQ4_NL", 32, 18)),
        (21, Named("IQ3_S", 256, 110)),
        (22, Named("IQ2_S", 256, 82)),
        (23, Named("IQ4_XS", 256, 136)),
        (24, Named("I8", 1, 1)),
        (25, Named("I16", 1, 2)),
        (26, Named("I32", 1, 4)),
        (27, Named("I64", 1, 8)),
        (28, Named("F64", 1, 8)),
        (29, Named("IQ1_M", 256, 56)),
        (30, Decoded(BF16)),
        (34, Named("TQ1_0", 256, 54)),
        (35, Named("TQ2_0", 256, 66)),
        (39, Named("MXFP4", 32, 17)),
    ]
};

impl GgmlType {
    /// The type for a code, if ggml has one.
    pub fn from_code(code: u32) -> Option<GgmlType> {
        let &(code, entry) = TYPES.iter().find(|t| t.0 == code)?;
        Some(match entry {
            Entry::Decoded(blocks) => GgmlType {
                code,
                name: blocks.name(),
                block_elements: blocks.block_elements() as u64,
                block_bytes: blocks.block_bytes() as u64,
                decoded: Some(blocks),
            },
            Entry::Named(name, block_elements, block_bytes) => GgmlType {
                code,
                name,
                block_elements,
                block_bytes,
                decoded: None,
            },
        })
    }

    /// The block type, where the engine decodes this type ([`kivi_kernels::ggml`]: F32,
    /// F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K).
    pub fn blocks(&self) -> Option<BlockType> {
        self.decoded
    }

    /// Whether the engine can load tensors of this type.
    pub fn loadable(&self) -> bool {
        self.decoded.is_some()
    }

    /// Whether tensors of this type load as quantized triplets (`weight`, `scales`,
    /// `biases`).
    pub fn quantized(&self) -> bool {
        self.block_elements > 1
    }
}

/// One tensor's description.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Its name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Dimensions in ggml's order: `dims[0]` varies fastest (the row length).
    pub dims: Vec<u64>,
    /// Its type.
    pub ggml_type: GgmlType,
    /// Offset of its data from the start of the data section.
    pub offset: u64,
    /// Bytes of data.
    pub size: u64,
}

impl TensorInfo {
    /// The shape in MLX's (row-major) order: ggml's dimensions reversed.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    /// Number of elements.
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}
