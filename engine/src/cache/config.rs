//! Cache settings: full precision or KIVI, validated when made or deserialized.

use std::{fmt, str::FromStr};

use kivi_kernels::{spec::GROUP_SIZES, KeyAxis, QuantSpec};
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
    /// A settings string that does not parse.
    #[error(
        "cannot read cache settings {0:?}: expected \"full\" or \"k<2|4>v<2|4>\" with optional \
         \"-g<32|64|128>\", \"-r<residual>\" and \"-per-token\", e.g. \"k2v2-g32-r128\""
    )]
    Syntax(String),
}

/// Settings of a KIVI cache (the KIVI paper's defaults: 2 bits, G = 32, R = 128).
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
}

/// The serialized form, validated on the way in.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKiviConfig {
    key_bits: u32,
    value_bits: u32,
    group_size: usize,
    residual_length: usize,
    #[serde(default)]
    key_axis: KeyAxis,
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
        .with_key_axis(raw.key_axis))
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
        })
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

    /// Key bits and group size, for the kernels.
    pub fn key_spec(&self) -> QuantSpec {
        QuantSpec::new(self.key_bits, self.group_size).expect("validated")
    }

    /// Value bits and group size (before clamping to the head), for the kernels.
    pub fn value_spec(&self) -> QuantSpec {
        QuantSpec::new(self.value_bits, self.group_size).expect("validated")
    }
}

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
        if self.key_axis == KeyAxis::PerToken {
            f.write_str("-per-token")?;
        }
        Ok(())
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
        let (mut group, mut residual) = (32, 128);
        for part in parts {
            if let Some(g) = part.strip_prefix('g') {
                group = number(g)?;
            } else if let Some(r) = part.strip_prefix('r') {
                residual = number(r)?;
            } else {
                return Err(syntax());
            }
        }
        Ok(KiviConfig::new(key_bits, value_bits, group, residual)?.with_key_axis(axis))
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
    }
}
