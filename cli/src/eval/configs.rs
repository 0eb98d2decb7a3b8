//! Lists of cache configurations and context sizes as the commands take them.

use anyhow::{bail, Context, Result};
use kivi_engine::cache::CacheConfig;

/// What `kivi bench` and `kivi needle` compare by default: full precision and the KIVI
/// settings of the issue (G = 32; K2V2 with both residual windows).
pub const DEFAULT_CONFIGS: &str = "full,k4v4-g32-r128,k2v4-g32-r128,k2v2-g32-r128,k2v2-g32-r32";

/// What `kivi ppl` compares by default: the above, the reference's other settings (K4V2,
/// G = 128), and the two ablations KIVI's design rests on: keys grouped per token instead
/// of per channel, and no residual window.
pub const DEFAULT_PPL_CONFIGS: &str = "full,k4v4-g32-r128,k4v2-g32-r128,k2v4-g32-r128,\
     k2v2-g32-r128,k2v2-g32-r32,k2v2-g128-r128,k2v2-g32-r128-per-token,k2v2-g32-r0";

/// Parses `full,k4v4-g32-r128,...` (see `CacheConfig`'s short names), keeping the order
/// and dropping repeats.
pub fn parse_configs(list: &str) -> Result<Vec<CacheConfig>> {
    let mut configs = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let config: CacheConfig = name
            .parse()
            .with_context(|| format!("in the configuration list {list:?}"))?;
        if !configs.contains(&config) {
            configs.push(config);
        }
    }
    if configs.is_empty() {
        bail!("no cache configuration given (e.g. --configs full,k2v2-g32-r128)");
    }
    Ok(configs)
}

/// Parses token counts like `512,1k,2k,7k` (k = 1024).
pub fn parse_sizes(list: &str) -> Result<Vec<usize>> {
    let mut sizes = Vec::new();
    for item in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let lower = item.to_ascii_lowercase();
        let (digits, scale) = match lower.strip_suffix('k') {
            Some(d) => (d, 1024),
            None => (lower.as_str(), 1),
        };
        let n: usize = digits
            .parse()
            .with_context(|| format!("{item:?} is not a token count like 512 or 4k"))?;
        if n == 0 {
            bail!("token counts must be positive, not {item:?}");
        }
        sizes.push(n * scale);
    }
    if sizes.is_empty() {
        bail!("no token count given");
    }
    Ok(sizes)
}

/// Parses fractions like `0,0.25,0.5,0.75,1`.
pub fn parse_fractions(list: &str) -> Result<Vec<f64>> {
    let mut values = Vec::new();
    for item in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let v: f64 = item
            .parse()
            .with_context(|| format!("{item:?} is not a number between 0 and 1"))?;
        if !(0.0..=1.0).contains(&v) {
            bail!("depths are fractions of the document between 0 and 1, not {v}");
        }
        values.push(v);
    }
    if values.is_empty() {
        bail!("no depth given");
    }
    Ok(values)
}

/// A token count as written in lists and tables: 2048 -> "2k", 3000 -> "3000".
pub fn size_label(n: usize) -> String {
    if n >= 1024 && n.is_multiple_of(1024) {
        format!("{}k", n / 1024)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse() {
        let c = parse_configs(DEFAULT_PPL_CONFIGS).unwrap();
        assert_eq!(c.len(), 9);
        assert_eq!(c[0], CacheConfig::Full);
        assert_eq!(c[7].to_string(), "k2v2-g32-r128-per-token");
        assert!(parse_configs("full,k3v2").is_err());
        assert_eq!(parse_configs("full, full").unwrap().len(), 1);
        assert_eq!(parse_sizes("512,1k, 7K").unwrap(), vec![512, 1024, 7168]);
        assert!(parse_sizes("1m").is_err());
        assert_eq!(parse_fractions("0,0.5,1").unwrap(), vec![0.0, 0.5, 1.0]);
        assert!(parse_fractions("1.5").is_err());
        assert_eq!(size_label(2048), "2k");
        assert_eq!(size_label(300), "300");
    }
}
