//! Cache settings: full precision or KIVI, validated when made or deserialized.

use std::{fmt, str::FromStr};

use kivi_kernels::{spec::GROUP_SIZES, KeyAxis, QuantSpec, Rotation};
use serde::{Deserialize, Serialize};

/// Settings that cannot make a KIVI cache.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Key or value bits other than 2 or 4.
    #[error("{which} bits must be 2 or 4, not {bits}")]
    Bits {
        /// "key" or "value".
        which: &'static str,
        /// What was asked for.
        bits: u32,
    },
    /// A group size other than 32, 64 or 128.
    #[error("group size must be 32, 64 or 128, not {0}")]
    GroupSize(usize),
    /// A residual window that is not a whole number of groups.
    #[error(
        "residual length must be a multiple of the group size {group} (0, {group}, {}, ...), \
         not {residual}",
        2 * group
    )]
    Residual {
        /// What was asked for.
        residual: usize,
        /// The group size it must be a multiple of.
        group: usize,
    },
    /// More attention sinks than the cache keeps.
    #[error("sink tokens must be at most {max}, not {sinks} (0, 4 and 16 are typical)")]
    Sinks {
        /// What was asked for.
        sinks: usize,
        /// The most allowed.
        max: usize,
    },
    /// A settings string that does not parse.
    #[error(
        "cannot read cache settings {0:?}: expected \"full\" or \"k<2|4>v<2|4>\" with optional \
         \"-g<32|64|128>\", \"-r<residual>\", \"-s<sinks>\", \"-rot\" (or \"-rotk\", \"-rotv\", \"-rota\") and \
         \"-per-token\", e.g. \"k2v2-g32-r128\" or \"k2v2-g32-r128-s4-rot\""
    )]
    Syntax(String),
}

/// Most attention sinks a cache keeps (KIVI+ uses 4 or 16).
pub const MAX_SINKS: usize = 128;

/// Settings of a KIVI cache (the KIVI paper's defaults: 2 bits, G = 32, R = 128), with
/// KIVI+'s two optional additions: attention sinks and a Hadamard basis (both off is plain
/// KIVI).
///
/// Values are grouped along channels, so their group size is clamped to the head: with
/// head_dim 64 and `group_size` 128, value groups (and per-token key groups) are 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawKiviConfig", into = "RawKiviConfig")]
pub struct KiviConfig {
    key_bits: u32,
    value_bits: u32,
    group_size: usize,
    residual_length: usize,
    key_axis: KeyAxis,
    sinks: usize,
    rotation: Rotation,
}

/// The serialized form, validated on the way in. Settings saved before KIVI+ have neither
/// `sinks` nor `rotation`: they read as plain KIVI, and plain KIVI is written without them.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKiviConfig {
    key_bits: u32,
    value_bits: u32,
    group_size: usize,
    residual_length: usize,
    #[serde(default)]
    key_axis: KeyAxis,
    #[serde(default, skip_serializing_if = "is_zero")]
    sinks: usize,
    #[serde(default, skip_serializing_if = "is_none")]
    rotation: Rotation,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_none(r: &Rotation) -> bool {
    *r == Rotation::None
}

impl TryFrom<RawKiviConfig> for KiviConfig {
    type Error = ConfigError;
    fn try_from(raw: RawKiviConfig) -> Result<Self, ConfigError> {
        Ok(KiviConfig::new(
            raw.key_bits,
            raw.value_bits,
            raw.group_size,
            raw.residual_length,
        )?
        .with_key_axis(raw.key_axis)
        .with_sinks(raw.sinks)?
        .with_rotation(raw.rotation))
    }
}

impl From<KiviConfig> for RawKiviConfig {
    fn from(c: KiviConfig) -> Self {
        Self {
            key_bits: c.key_bits,
            value_bits: c.value_bits,
            group_size: c.group_size,
            residual_length: c.residual_length,
            key_axis: c.key_axis,
            sinks: c.sinks,
            rotation: c.rotation,
        }
    }
}

impl Default for KiviConfig {
    fn default() -> Self {
        Self::new(2, 2, 32, 128).expect("the defaults are valid")
    }
}

impl KiviConfig {
    /// Validated settings: bits 2 or 4 (independently), group size 32, 64 or 128, residual
    /// length a multiple of the group size. Keys are grouped per channel.
    pub fn new(
        key_bits: u32,
        value_bits: u32,
        group_size: usize,
        residual_length: usize,
    ) -> Result<Self, ConfigError> {
        for (which, bits) in [("key", key_bits), ("value", value_bits)] {
            if bits != 2 && bits != 4 {
                return Err(ConfigError::Bits { which, bits });
            }
        }
        if !GROUP_SIZES.contains(&group_size) {
            return Err(ConfigError::GroupSize(group_size));
        }
        if !residual_length.is_multiple_of(group_size) {
            return Err(ConfigError::Residual {
                residual: residual_length,
                group: group_size,
            });
        }
        Ok(Self {
            key_bits,
            value_bits,
            group_size,
            residual_length,
            key_axis: KeyAxis::PerChannel,
            sinks: 0,
            rotation: Rotation::None,
        })
    }

    /// The same settings keeping the first `sinks` tokens in full precision for good
    /// (KIVI+; quantization groups align after them).
    pub fn with_sinks(self, sinks: usize) -> Result<Self, ConfigError> {
        if sinks > MAX_SINKS {
            return Err(ConfigError::Sinks {
                sinks,
                max: MAX_SINKS,
            });
        }
        Ok(Self { sinks, ..self })
    }

    /// The same settings storing keys, values or both in the Hadamard basis (KIVI+).
    pub fn with_rotation(self, rotation: Rotation) -> Self {
        Self { rotation, ..self }
    }

    /// Attention sinks: the first tokens kept in full precision for good.
    pub fn sinks(&self) -> usize {
        self.sinks
    }

    /// Which of keys and values are stored in the Hadamard basis.
    pub fn rotation(&self) -> Rotation {
        self.rotation
    }

    /// The spec the reference quantizer checks this cache against, with scales, zeros and
    /// the window stored as `storage`.
    pub fn reference_spec(
        &self,
        storage: kivi_kernels::reference::Storage,
    ) -> kivi_kernels::reference::CacheSpec {
        kivi_kernels::reference::CacheSpec {
            keys: self.key_spec(),
            values: self.value_spec(),
            residual: self.residual_length,
            key_axis: self.key_axis,
            storage,
            sinks: self.sinks,
            rotation: self.rotation,
        }
    }

    /// The same settings with keys grouped along `axis` ([`KeyAxis::PerToken`] is the
    /// ablation that shows why KIVI groups keys per channel).
    pub fn with_key_axis(self, axis: KeyAxis) -> Self {
        Self {
            key_axis: axis,
            ..self
        }
    }

    /// Bits per key.
    pub fn key_bits(&self) -> u32 {
        self.key_bits
    }

    /// Bits per value.
    pub fn value_bits(&self) -> u32 {
        self.value_bits
    }

    /// Tokens per key group (per channel), and the requested channels per value group.
    pub fn group_size(&self) -> usize {
        self.group_size
    }

    /// Newest tokens kept in full precision (`R`).
    pub fn residual_length(&self) -> usize {
        self.residual_length
    }

    /// How keys are grouped.
    pub fn key_axis(&self) -> KeyAxis {
        self.key_axis
    }

    /// Most tokens the residual window holds (`R + G - 1`): one more and its oldest group
    /// is quantized.
    pub fn residual_capacity(&self) -> usize {
        self.residual_length + self.group_size - 1
    }

    /// Tokens the residual buffers hold on the host kernels, which write the window in
    /// place: the sinks, the largest window and the decode step's token, which is read
    /// there before its flush (`S + R + G`).
    pub fn residual_room(&self) -> usize {
        self.sinks + self.residual_capacity() + 1
    }

    /// Key bits and group size, for the kernels.
    pub fn key_spec(&self) -> QuantSpec {
        QuantSpec::new(self.key_bits, self.group_size).expect("validated")
    }

    /// Value bits and group size (before clamping to the head), for the kernels.
    pub fn value_spec(&self) -> QuantSpec {
        QuantSpec::new(self.value_bits, self.group_size).expect("validated")
    }
}

/// The cache the app and `kivi` use unless told otherwise: the fewest bits whose
/// perplexity cost stays within 1% of full precision on every real model in the offline
/// data (0.5% on SmolLM2), on two texts each, and whose needle answers match full
/// precision's (docs/benchmarks.md, "Caches across models"). 4-bit keys and 2-bit values,
/// four sinks, values in the Hadamard basis: SmolLM2 +0.1% / +0.4%, Qwen2.5-Coder 0.5B
/// +0.7% / +0.0%. Rotating the keys too does as well on SmolLM2 and costs Qwen2.5 +11.6%:
/// its keys' outlier channels are what per-channel groups already isolate.
/// `engine/tests/cache_quality.rs` holds this on every model.
pub const RECOMMENDED: &str = "k4v2-g32-r128-s4-rotv";

/// Which KV cache the engine runs with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CacheConfig {
    /// Keys and values as they arrive, in the compute dtype.
    #[default]
    Full,
    /// KIVI: quantized history plus a full-precision residual window.
    Kivi(KiviConfig),
}

/// Short names: `full`, `k2v2` (G = 32, R = 128), `k4v2-g64-r128`, `k2v2-g32-r128-per-token`.
impl fmt::Display for CacheConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheConfig::Full => f.write_str("full"),
            CacheConfig::Kivi(c) => write!(f, "{c}"),
        }
    }
}

impl fmt::Display for KiviConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "k{}v{}-g{}-r{}",
            self.key_bits, self.value_bits, self.group_size, self.residual_length
        )?;
        if self.sinks > 0 {
            write!(f, "-s{}", self.sinks)?;
        }
        match self.rotation {
            Rotation::None => {}
            Rotation::Both => f.write_str("-rot")?,
            Rotation::Keys => f.write_str("-rotk")?,
            Rotation::Values => f.write_str("-rotv")?,
            Rotation::Adaptive => f.write_str("-rota")?,
        }
        if self.key_axis == KeyAxis::PerToken {
            f.write_str("-per-token")?;
        }
        Ok(())
    }
}

impl CacheConfig {
    /// [`RECOMMENDED`].
    pub fn recommended() -> Self {
        RECOMMENDED
            .parse()
            .expect("the recommended cache's name parses")
    }
}

impl FromStr for CacheConfig {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let text = s.trim().to_ascii_lowercase();
        if text == "full" || text == "fp" {
            return Ok(CacheConfig::Full);
        }
        Ok(CacheConfig::Kivi(text.parse()?))
    }
}

impl FromStr for KiviConfig {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let syntax = || ConfigError::Syntax(s.to_string());
        let text = s.trim().to_ascii_lowercase();
        let text = text.strip_prefix("kivi-").unwrap_or(&text);
        let (text, axis) = match text.strip_suffix("-per-token") {
            Some(rest) => (rest, KeyAxis::PerToken),
            None => (text, KeyAxis::PerChannel),
        };
        let mut parts = text.split('-');
        let bits = parts.next().ok_or_else(syntax)?;
        let (k, v) = bits
            .strip_prefix('k')
            .and_then(|b| b.split_once('v'))
            .ok_or_else(syntax)?;
        let number = |t: &str| t.parse::<usize>().map_err(|_| syntax());
        let (key_bits, value_bits) = (number(k)? as u32, number(v)? as u32);
        let (mut group, mut residual, mut sinks, mut rotation) = (32, 128, 0, Rotation::None);
        for part in parts {
            match part {
                "rot" => rotation = Rotation::Both,
                "rotk" => rotation = Rotation::Keys,
                "rotv" => rotation = Rotation::Values,
                "rota" => rotation = Rotation::Adaptive,
                _ => {
                    if let Some(g) = part.strip_prefix('g') {
                        group = number(g)?;
                    } else if let Some(r) = part.strip_prefix('r') {
                        residual = number(r)?;
                    } else if let Some(n) = part.strip_prefix('s') {
                        sinks = number(n)?;
                    } else {
                        return Err(syntax());
                    }
                }
            }
        }
        Ok(KiviConfig::new(key_bits, value_bits, group, residual)?
            .with_key_axis(axis)
            .with_sinks(sinks)?
            .with_rotation(rotation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_says_what_is_allowed() {
        assert!(KiviConfig::new(4, 2, 64, 128).is_ok());
        assert!(KiviConfig::new(2, 4, 128, 0).is_ok());
        let err = KiviConfig::new(3, 2, 32, 32).unwrap_err();
        assert_eq!(err.to_string(), "key bits must be 2 or 4, not 3");
        let err = KiviConfig::new(2, 8, 32, 32).unwrap_err();
        assert_eq!(err.to_string(), "value bits must be 2 or 4, not 8");
        let err = KiviConfig::new(2, 2, 48, 96).unwrap_err();
        assert_eq!(err.to_string(), "group size must be 32, 64 or 128, not 48");
        let err = KiviConfig::new(2, 2, 64, 100).unwrap_err();
        assert_eq!(
            err.to_string(),
            "residual length must be a multiple of the group size 64 (0, 64, 128, ...), not 100"
        );
    }

    #[test]
    fn serde_round_trips_and_rejects_invalid_settings() {
        let config = CacheConfig::Kivi(KiviConfig::new(4, 2, 64, 128).unwrap());
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"kivi","key_bits":4,"value_bits":2,"group_size":64,"residual_length":128,"key_axis":"per_channel"}"#
        );
        assert_eq!(serde_json::from_str::<CacheConfig>(&json).unwrap(), config);
        assert_eq!(
            serde_json::from_str::<CacheConfig>(r#"{"kind":"full"}"#).unwrap(),
            CacheConfig::Full
        );
        // key_axis may be left out.
        let short =
            r#"{"kind":"kivi","key_bits":2,"value_bits":2,"group_size":32,"residual_length":32}"#;
        assert!(serde_json::from_str::<CacheConfig>(short).is_ok());
        let bad =
            r#"{"kind":"kivi","key_bits":2,"value_bits":2,"group_size":32,"residual_length":40}"#;
        let err = serde_json::from_str::<CacheConfig>(bad).unwrap_err();
        assert!(
            err.to_string().contains("multiple of the group size"),
            "{err}"
        );
    }

    #[test]
    fn short_names_parse_and_print() {
        for name in [
            "full",
            "k2v2-g32-r128",
            "k4v2-g64-r0",
            "k2v4-g128-r256-per-token",
            "k2v2-g32-r128-s4-rot",
            "k2v2-g32-r128-s16",
            "k4v4-g32-r128-rotk",
            "k2v2-g32-r32-s4-rotv-per-token",
        ] {
            let config: CacheConfig = name.parse().unwrap();
            assert_eq!(config.to_string(), name);
        }
        assert_eq!(
            "K4V4".parse::<CacheConfig>().unwrap().to_string(),
            "k4v4-g32-r128"
        );
        assert!(matches!(
            "k3v2".parse::<CacheConfig>(),
            Err(ConfigError::Bits { .. })
        ));
        assert!(matches!(
            "k2v2-x1".parse::<CacheConfig>(),
            Err(ConfigError::Syntax(_))
        ));
        assert!(matches!(
            "k2v2-g32-r40".parse::<CacheConfig>(),
            Err(ConfigError::Residual { .. })
        ));
        let err = "k2v2-s500".parse::<CacheConfig>().unwrap_err();
        assert!(matches!(err, ConfigError::Sinks { .. }), "{err}");
        let plus: CacheConfig = "k2v2-s4-rot".parse().unwrap();
        let CacheConfig::Kivi(k) = plus else {
            unreachable!()
        };
        assert_eq!((k.sinks(), k.rotation()), (4, Rotation::Both));
    }

    #[test]
    fn settings_saved_before_kivi_plus_read_as_plain_kivi() {
        let old =
            r#"{"kind":"kivi","key_bits":2,"value_bits":2,"group_size":32,"residual_length":128}"#;
        let CacheConfig::Kivi(k) = serde_json::from_str::<CacheConfig>(old).unwrap() else {
            unreachable!()
        };
        assert_eq!((k.sinks(), k.rotation()), (0, Rotation::None));
        let plus = CacheConfig::Kivi(k.with_sinks(16).unwrap().with_rotation(Rotation::Values));
        let json = serde_json::to_string(&plus).unwrap();
        assert!(
            json.contains(r#""sinks":16"#) && json.contains(r#""rotation":"values""#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<CacheConfig>(&json).unwrap(), plus);
    }
}
