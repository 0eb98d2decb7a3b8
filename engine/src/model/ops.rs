//! The operations a Llama-family decoder is written in, so that the model is defined once
//! (`llama.rs`) and runs on either implementation:
//!
//! - [`crate::runtime::mlx::ops::MlxOps`]: MLX operations, any number of positions, on the device
//!   the backend names (a Mac's GPU, or the CPU);
//! - [`crate::runtime::host::ops::HostOps`]: plain loops and the host kernels over host memory, for
//!   the host backend's decode steps and prompt chunks, where MLX's per-operation thread
//!   hand-offs on the CPU cost more than the arithmetic (`tests/host_steps.rs` holds the
//!   two to the same logits).
//!
//! The runtime the backend runs on decides which one runs (`crate::runtime::Runtime`),
//! chosen once when the model loads.

use mlx_rs::Array;

use super::layers::{Embedding, Linear, Matrix, RmsNorm};
use super::rope::Rope;
use crate::cache::KvCache;
use crate::error::ModelError;

/// The token ids a step runs: read back on the host, or an array on the device that may
/// not be computed yet (a decode step built on the token the previous step is still
/// sampling).
#[derive(Clone, Copy)]
pub enum Tokens<'a> {
    /// Ids on the host.
    Host(&'a [u32]),
    /// A `[L]` uint32 array.
    Device(&'a Array),
}

impl Tokens<'_> {
    /// `L`, the positions the step runs.
    pub fn len(&self) -> usize {
        match self {
            Tokens::Host(ids) => ids.len(),
            Tokens::Device(ids) => ids.size(),
        }
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The operations of one forward step over the `L` newest positions of one sequence.
pub(crate) trait Ops {
    /// Activations `[L, width]`.
    type Rows;
    /// Per-head activations `[heads, L, D]`.
    type Heads;

    /// The embedding rows of `tokens`, `[L, hidden]`.
    fn embed(&self, table: &Embedding, tokens: Tokens<'_>) -> Result<Self::Rows, ModelError>;

    /// `x W^T + b`.
    fn linear(
        &self,
        weight: &Matrix,
        bias: Option<&Array>,
        x: &Self::Rows,
    ) -> Result<Self::Rows, ModelError>;

    /// `x W_k^T + b_k` for linear layers that read the same input (a block's query, key
    /// and value projections; its gate and up projections), in order. The default runs
    /// them one by one; an implementation may share work among them.
    fn linears<const N: usize>(
        &self,
        layers: [&Linear; N],
        x: &Self::Rows,
    ) -> Result<[Self::Rows; N], ModelError> {
        each_linear(self, layers, x)
    }

    /// RMS normalization of each row, times the gain.
    fn rms_norm(&self, norm: &RmsNorm, x: &Self::Rows) -> Result<Self::Rows, ModelError>;

    /// RMS normalization of each head's vector (`[heads, L, D]`, the gain `[D]`).
    fn head_norm(&self, norm: &RmsNorm, x: Self::Heads) -> Result<Self::Heads, ModelError>;

    /// `x * s`.
    fn scaled(&self, x: Self::Rows, s: f32) -> Result<Self::Rows, ModelError>;

    /// `gelu_tanh(gate) * up`, GELU's tanh approximation.
    fn gelu_times(&self, gate: Self::Rows, up: &Self::Rows) -> Result<Self::Rows, ModelError>;

    /// `silu(gate) * up`.
    fn silu_times(&self, gate: Self::Rows, up: &Self::Rows) -> Result<Self::Rows, ModelError>;

    /// `x + y`.
    fn add(&self, x: Self::Rows, y: &Self::Rows) -> Result<Self::Rows, ModelError>;

    /// `[L, heads * D]` as `[heads, L, D]`.
    fn split_heads(&self, x: Self::Rows, heads: usize) -> Result<Self::Heads, ModelError>;

    /// `[heads, L, D]` as `[L, heads * D]`.
    fn merge_heads(&self, x: Self::Heads) -> Result<Self::Rows, ModelError>;

    /// RoPE of each head, the first of the `L` positions being `offset`.
    fn rope(&self, rope: &Rope, x: Self::Heads, offset: usize) -> Result<Self::Heads, ModelError>;

    /// Appends the keys and values to `cache` and returns the queries' attention output
    /// `[heads, L, Dv]` over everything it holds (causal within the step).
    fn attend(
        &self,
        cache: &mut dyn KvCache,
        queries: Self::Heads,
        keys: Self::Heads,
        values: Self::Heads,
        scale: f32,
    ) -> Result<Self::Heads, ModelError>;

    /// Rows as an MLX array `[1, L, width]`, the model's output.
    fn array_of(&self, x: Self::Rows) -> Result<Array, ModelError>;

    /// An MLX array `[1, L, width]` (hidden states) as rows.
    fn rows_of(&self, x: &Array) -> Result<Self::Rows, ModelError>;

    /// Checks rows between blocks (named by `what`) against the GPU-stream rules.
    fn check(&self, x: &Self::Rows, what: &dyn Fn() -> String) -> Result<(), ModelError>;
}

/// [`Ops::linears`] one layer at a time.
pub(crate) fn each_linear<O: Ops + ?Sized, const N: usize>(
    o: &O,
    layers: [&Linear; N],
    x: &O::Rows,
) -> Result<[O::Rows; N], ModelError> {
    per_layer(layers.map(|layer| o.linear(&layer.weight, layer.bias.as_ref(), x)))
}

/// The outputs of [`Ops::linears`], one per layer in order, as an array (the first error
/// if any).
pub(crate) fn per_layer<R, const N: usize>(
    outs: impl IntoIterator<Item = Result<R, ModelError>>,
) -> Result<[R; N], ModelError> {
    let outs = outs.into_iter().collect::<Result<Vec<R>, _>>()?;
    Ok(outs
        .try_into()
        .unwrap_or_else(|_| unreachable!("one output per layer")))
}
