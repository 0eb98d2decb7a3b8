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
}

/// ggml's types as of 2025 (`ggml.h`, `ggml-common.h`): code, name, block elements, block
/// bytes. Codes 4 and 5 (Q4_2, Q4_3) were removed; 31-33 and 36-38 are not in files.
const TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

impl GgmlType {
    /// The type for a code, if ggml has one.
    pub fn from_code(code: u32) -> Option<GgmlType> {
        TYPES
            .iter()
            .find(|t| t.0 == code)
            .map(|&(code, name, block_elements, block_bytes)| GgmlType {
                code,
                name,
                block_elements,
                block_bytes,
            })
    }

    /// The block type, where the engine decodes this type ([`kivi_kernels::ggml`]: F32,
    /// F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K).
    pub fn blocks(&self) -> Option<BlockType> {
        BlockType::from_name(self.name)
    }

    /// Whether the engine can load tensors of this type.
    pub fn loadable(&self) -> bool {
        self.blocks().is_some()
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
