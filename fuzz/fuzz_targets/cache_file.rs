//! KV cache files (`cache::file`): any bytes are refused with an error or open as caches
//! that match their header. The input is tried twice: as it is (which exercises the
//! safetensors and header parsing, the format checks and the checksum), and re-signed with
//! a valid checksum (so that mutated tensors reach the shape and settings checks and the
//! building of MLX arrays, which a checksum failure would otherwise stop first).

#![no_main]

use kivi_engine::backend::Backend;
use kivi_engine::cache::file::{from_bytes, read_header, resign};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = from_bytes(data, "fuzz", &Default::default(), &Backend::HOST);
    if let Ok(header) = read_header(data) {
        check(data, &header);
    }
    if let Some(signed) = resign(data) {
        if let Ok(header) = read_header(&signed) {
            check(&signed, &header);
        }
    }
});

fn check(bytes: &[u8], header: &kivi_engine::cache::file::CacheFileHeader) {
    if let Ok(loaded) = from_bytes(bytes, &header.model_id, &header.config, &Backend::HOST) {
        assert_eq!(loaded.caches.len(), header.layers);
        for cache in &loaded.caches {
            assert_eq!(cache.len(), header.tokens);
            let _ = cache.stats();
        }
    }
}
