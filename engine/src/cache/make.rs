//! Making the caches a configuration names, for the backend a model runs on and for the
//! attention of each of its layers.

use mlx_rs::Dtype;

use super::config::CacheConfig;
use super::kivi::KiviCache;
use super::window::WindowCache;
use super::KvCache;
use crate::backend::Backend;
use crate::model::ModelConfig;
use crate::runtime::{chosen, ForRuntime, Runtime};

/// [`CacheConfig::make_on`] for one runtime.
struct Maker(fn(&CacheConfig, Dtype) -> Box<dyn KvCache>);

impl ForRuntime for Maker {
    fn on<R: Runtime>() -> Self {
        Maker(CacheConfig::make_on::<R>)
    }
}

impl CacheConfig {
    /// A new, empty cache for a layer that attends to every position, of a model running on
    /// `backend`.
    pub fn make(&self, backend: &Backend) -> Box<dyn KvCache> {
        let Maker(make) = chosen(backend);
        make(self, backend.storage_dtype())
    }

    /// The cache this configuration names, on the runtime `R`, keeping what it stores in
    /// reduced precision in `storage`.
    fn make_on<R: Runtime>(&self, storage: Dtype) -> Box<dyn KvCache> {
        match self {
            CacheConfig::Full => Box::<R::FullCache>::default(),
            CacheConfig::Kivi(config) => Box::new(KiviCache::<R>::new(*config, storage)),
        }
    }

    /// A new, empty cache for a layer with the given sliding window (`None`: global, the
    /// cache this configuration names; `Some(W)`: the newest positions in full precision).
    pub fn make_layer(&self, window: Option<usize>, backend: &Backend) -> Box<dyn KvCache> {
        match window {
            Some(w) => Box::new(WindowCache::new(w, backend)),
            None => self.make(backend),
        }
    }

    /// One empty cache per layer of `model`, each the kind its attention needs.
    pub fn make_layers(&self, model: &ModelConfig, backend: &Backend) -> Vec<Box<dyn KvCache>> {
        (0..model.num_layers)
            .map(|i| self.make_layer(model.layer_window(i), backend))
            .collect()
    }
}
