//! The parameters of KIVI quantization and the residual flush rule, in one place.

use serde::{Deserialize, Serialize};

use crate::KernelError;

/// Group sizes KIVI (and MLX's quantized matmul) accept.
pub const GROUP_SIZES: [usize; 3] = [32, 64, 128];

/// Bit widths KIVI accepts.
pub const BIT_WIDTHS: [u32; 2] = [2, 4];

/// How one tensor is quantized: bits per value and values per group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantSpec {
    bits: u32,
    group_size: usize,
}

impl QuantSpec {
    /// A spec with `bits` in {2, 4} and `group_size` in {32, 64, 128}.
    pub fn new(bits: u32, group_size: usize) -> Result<Self, KernelError> {
        if !BIT_WIDTHS.contains(&bits) {
            return Err(KernelError::Bits(bits));
        }
        if !GROUP_SIZES.contains(&group_size) {
            return Err(KernelError::GroupSize(group_size));
        }
        Ok(Self { bits, group_size })
    }

    /// Bits per value.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Values per group (sharing one scale and one zero).
    pub fn group_size(&self) -> usize {
        self.group_size
    }

    /// The largest code, `2^b - 1`.
    pub fn max_code(&self) -> u32 {
        (1 << self.bits) - 1
    }

    /// Codes per packed `u32` word: 16 at 2 bits, 8 at 4 bits.
    pub fn per_word(&self) -> usize {
        32 / self.bits as usize
    }

    /// The same bit width with the group size clamped for an axis of length `dim`: the
    /// largest of `G, G/2, ...` (not below 32) that divides `dim`.
    ///
    /// Groups along channels (values, and keys per token) cannot be longer than a head:
    /// with head_dim 64 and G = 128, values are grouped by 64.
    pub fn for_axis(&self, dim: usize) -> Result<Self, KernelError> {
        let mut group = self.group_size;
        while group >= 32 {
            if dim.is_multiple_of(group) {
                return Ok(Self {
                    group_size: group,
                    ..*self
                });
            }
            group /= 2;
        }
        Err(KernelError::Shape(format!(
            "an axis of length {dim} cannot be split into quantization groups of 32, 64 or 128 \
             (head_dim must be a multiple of 32)"
        )))
    }
}

/// Which axis keys are grouped along.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyAxis {
    /// KIVI: a group is G consecutive tokens of one channel (keys stored as `[D, T]`),
    /// so that the few outlier channels of keys get scales of their own.
    #[default]
    PerChannel,
    /// Ablation: a group is G consecutive channels of one token, like values.
    PerToken,
}

/// KIVI+'s Hadamard basis ([`crate::rotation`]): which of keys and values enter the cache
/// rotated. `None` is plain KIVI.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rotation {
    /// Neither.
    #[default]
    None,
    /// Keys (after RoPE) only; queries are rotated alike.
    Keys,
    /// Values only; the attention output is rotated back.
    Values,
    /// Both.
    Both,
    /// Chosen per KV head, keys and values apart, from the first groups the cache
    /// quantizes: each enters rotated where that loses less to quantization (the engine's
    /// `cache::basis`). Neither [`Rotation::keys`] nor [`Rotation::values`]: no head is
    /// rotated before the choice.
    Adaptive,
}

impl Rotation {
    /// Whether keys (and so queries) are rotated in every head.
    pub fn keys(self) -> bool {
        matches!(self, Rotation::Keys | Rotation::Both)
    }

    /// Whether values (and so the attention output) are rotated in every head.
    pub fn values(self) -> bool {
        matches!(self, Rotation::Values | Rotation::Both)
    }

    /// Whether each head's basis is chosen from its data.
    pub fn adaptive(self) -> bool {
        self == Rotation::Adaptive
    }
}

/// The flush rule: how many of `tokens` positions are quantized, given that `held` of
/// them already are (a multiple of `group`) and the residual window is `residual` tokens.
///
/// The oldest whole groups leave the full-precision window while it holds at least
/// `residual + group` tokens, so the window ends up with `residual ..= residual + group - 1`
/// tokens once the cache is long enough. From an empty cache this is
/// `Q(T) = max(0, floor((T - R) / G) * G)`, a function of `T` alone, which is why every
/// chunking of the same stream yields the same cache.
pub fn quantized_after(held: usize, tokens: usize, residual: usize, group: usize) -> usize {
    let excess = tokens.saturating_sub(held).saturating_sub(residual);
    held + excess / group * group
}

/// `Q(T) = max(0, floor((T - R) / G) * G)`: quantized positions of a cache built from
/// empty by appends.
pub fn quantized_len(tokens: usize, residual: usize, group: usize) -> usize {
    quantized_after(0, tokens, residual, group)
}

/// Tokens of `tokens` held as attention sinks (KIVI+): the first `sinks` ones, kept in full
/// precision for good. The flush rule then runs on the tokens after them, so with sinks
/// `Q(T) = max(0, floor((T - S - R) / G) * G)` quantized tokens sit at positions `[S, S + Q)`:
/// still a function of `T` alone.
pub fn sink_len(tokens: usize, sinks: usize) -> usize {
    tokens.min(sinks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_kivi_bits_and_groups() {
        for bits in [2, 4] {
            for group in [32, 64, 128] {
                assert!(QuantSpec::new(bits, group).is_ok());
            }
        }
        for bits in [0, 1, 3, 8] {
            assert!(matches!(QuantSpec::new(bits, 32), Err(KernelError::Bits(b)) if b == bits));
        }
        for group in [0, 16, 48, 256] {
            let err = QuantSpec::new(2, group).unwrap_err();
            assert!(err.to_string().contains("32, 64 and 128"), "{err}");
        }
    }

    #[test]
    fn group_is_clamped_to_the_axis() {
        let spec = QuantSpec::new(2, 128).unwrap();
        assert_eq!(spec.for_axis(64).unwrap().group_size(), 64);
        assert_eq!(spec.for_axis(96).unwrap().group_size(), 32);
        assert_eq!(spec.for_axis(256).unwrap().group_size(), 128);
        assert!(spec.for_axis(80).is_err());
    }

    #[test]
    fn flush_rule_matches_the_formula() {
        for (r, g) in [(0, 32), (32, 32), (128, 32), (128, 64), (128, 128)] {
            for t in 0..600usize {
                let expect = if t < r { 0 } else { (t - r) / g * g };
                assert_eq!(quantized_len(t, r, g), expect, "T={t} R={r} G={g}");
                // Applying the rule step by step agrees with applying it once.
                let stepwise = (1..=t).fold(0, |held, n| quantized_after(held, n, r, g));
                assert_eq!(stepwise, expect);
            }
        }
    }
}
