//! Content verification: SHA-256 for LFS files (the hub's `X-Linked-Etag` / LFS oid) and the
//! git blob SHA-1 for small files (their `ETag`), so every file the hub names by hash is
//! checked, not only the large ones.

use std::io::Read;
use std::path::Path;

use sha1::Sha1;
use sha2::{Digest, Sha256};

use super::error::{HubError, HubResult};

/// The hash a file must have once complete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExpectedHash {
    /// SHA-256 of the contents, lower-case hex (LFS files).
    Sha256(String),
    /// Git blob id: SHA-1 of `"blob <len>\0" + contents`, lower-case hex (small files).
    GitSha1(String),
    /// The hub gave nothing to check against; only the size is verified.
    None,
}

impl ExpectedHash {
    /// The algorithm's name, for messages.
    pub fn algorithm(&self) -> &'static str {
        match self {
            ExpectedHash::Sha256(_) => "SHA-256",
            ExpectedHash::GitSha1(_) => "git blob SHA-1",
            ExpectedHash::None => "no hash",
        }
    }
}

/// A running hash over a file written front to back.
pub(crate) enum ContentHasher {
    Sha256(Sha256),
    GitSha1(Sha1),
    None,
}

impl ContentHasher {
    /// A fresh hasher for a file of `size` bytes (the git header needs the size up front).
    pub(crate) fn new(expected: &ExpectedHash, size: u64) -> Self {
        match expected {
            ExpectedHash::Sha256(_) => ContentHasher::Sha256(Sha256::new()),
            ExpectedHash::GitSha1(_) => {
                let mut h = Sha1::new();
                h.update(format!("blob {size}\0").as_bytes());
                ContentHasher::GitSha1(h)
            }
            ExpectedHash::None => ContentHasher::None,
        }
    }

    pub(crate) fn update(&mut self, data: &[u8]) {
        match self {
            ContentHasher::Sha256(h) => h.update(data),
            ContentHasher::GitSha1(h) => h.update(data),
            ContentHasher::None => {}
        }
    }

    fn finish_hex(self) -> Option<String> {
        match self {
            ContentHasher::Sha256(h) => Some(hex(&h.finalize())),
            ContentHasher::GitSha1(h) => Some(hex(&h.finalize())),
            ContentHasher::None => None,
        }
    }

    /// Compares with `expected`; a mismatch names both hashes.
    pub(crate) fn check(self, expected: &ExpectedHash, file: &str) -> HubResult<()> {
        let want = match expected {
            ExpectedHash::Sha256(h) | ExpectedHash::GitSha1(h) => h,
            ExpectedHash::None => return Ok(()),
        };
        let got = self.finish_hex().unwrap_or_default();
        if got.eq_ignore_ascii_case(want) {
            Ok(())
        } else {
            Err(HubError::HashMismatch {
                file: file.to_string(),
                algorithm: expected.algorithm(),
                expected: want.clone(),
                actual: got,
            })
        }
    }
}

/// Feeds the first `len` bytes of `path` into a new hasher: a resumed download must hash the
/// bytes it already has. Blocking; run it off the async threads.
pub(crate) fn hash_prefix(
    path: &Path,
    len: u64,
    expected: &ExpectedHash,
    size: u64,
) -> std::io::Result<ContentHasher> {
    let mut hasher = ContentHasher::new(expected, size);
    if matches!(hasher, ContentHasher::None) || len == 0 {
        return Ok(hasher);
    }
    let mut file = std::fs::File::open(path)?.take(len);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_blob_sha1_matches_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        let expected = ExpectedHash::GitSha1("ce013625030ba8dba906f756967f9e9ca394464a".into());
        let mut h = ContentHasher::new(&expected, 6);
        h.update(b"hello\n");
        h.check(&expected, "f").unwrap();
    }

    #[test]
    fn sha256_mismatch_names_both() {
        let expected = ExpectedHash::Sha256("00".repeat(32));
        let mut h = ContentHasher::new(&expected, 3);
        h.update(b"abc");
        let err = h.check(&expected, "w.safetensors").unwrap_err().to_string();
        assert!(err.contains("ba7816bf"), "{err}");
        assert!(err.contains("w.safetensors"), "{err}");
    }
}
