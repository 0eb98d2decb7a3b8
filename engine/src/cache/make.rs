//! Making the caches a configuration names, for the backend a model runs on.

use super::config::CacheConfig;
use super::full::FullCache;
use super::kivi::KiviCache;
use super::KvCache;
use crate::backend::Backend;

impl CacheConfig {
    /// A new, empty cache for one layer of a model running on `backend`.
    pub fn make(&self, backend: &Backend) -> Box<dyn KvCache> {
        match self {
            CacheConfig::Full => Box::new(FullCache::new(*backend)),
            CacheConfig::Kivi(config) => Box::new(KiviCache::new(*config, *backend)),
        }
    }

    /// One empty cache per layer.
    pub fn make_layers(&self, layers: usize, backend: &Backend) -> Vec<Box<dyn KvCache>> {
        (0..layers).map(|_| self.make(backend)).collect()
    }
}
