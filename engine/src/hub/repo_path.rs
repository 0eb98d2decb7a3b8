//! File names inside a repository, and blob names inside the cache: both come from the
//! server, both become paths on disk, so both are validated before anything is written.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use super::error::HubError;

/// Longest accepted file name, in bytes; the hub's own limit is far below any OS limit.
const MAX_PATH_LEN: usize = 1024;

/// A relative, `/`-separated file path inside a repository (`config.json`, `onnx/model.onnx`).
///
/// Construction rejects everything that could escape the snapshot folder or mean something
/// else on another OS: absolute paths, `..` and `.` components, empty components (`a//b`),
/// backslashes, drive letters and other `:`, NUL and control characters.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct RepoFilePath(String);

impl RepoFilePath {
    /// Validates a file name as the hub (or an index file) gave it.
    pub fn parse(name: &str) -> Result<Self, HubError> {
        let unsafe_name = |reason| HubError::UnsafeFileName {
            name: name.to_string(),
            reason,
        };
        if name.is_empty() {
            return Err(unsafe_name("it is empty"));
        }
        if name.len() > MAX_PATH_LEN {
            return Err(unsafe_name("it is longer than 1024 bytes"));
        }
        if name.starts_with('/') {
            return Err(unsafe_name("it is an absolute path"));
        }
        if name.contains('\\') {
            return Err(unsafe_name("it contains a backslash"));
        }
        if name.contains(':') {
            // A drive letter (`C:x`) or an NTFS stream (`a:b`) on Windows.
            return Err(unsafe_name("it contains ':'"));
        }
        if name.chars().any(char::is_control) {
            return Err(unsafe_name("it contains a control character"));
        }
        for component in name.split('/') {
            match component {
                "" => return Err(unsafe_name("it has an empty path component")),
                "." | ".." => return Err(unsafe_name("it has a '.' or '..' path component")),
                _ => {}
            }
        }
        // Belt and braces: the OS's own parser must see only plain names too.
        if !Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
        {
            return Err(unsafe_name("it is not a plain relative path"));
        }
        Ok(RepoFilePath(name.to_string()))
    }

    /// The name as the hub writes it (`/`-separated).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The `/`-separated components.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The last component (`model.safetensors` for `sub/model.safetensors`).
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// Whether the file sits at the top of the repository.
    pub fn is_top_level(&self) -> bool {
        !self.0.contains('/')
    }

    /// This path below `base`, built component by component so it cannot leave `base`.
    pub fn under(&self, base: &Path) -> PathBuf {
        let mut path = base.to_path_buf();
        for component in self.components() {
            path.push(component);
        }
        path
    }
}

impl fmt::Display for RepoFilePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The name of a blob in `blobs/`: the hub's ETag (a git SHA-1 for small files, the SHA-256
/// for LFS files), quotes and the weak prefix removed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlobEtag(String);

impl BlobEtag {
    /// Cleans an ETag header value (`W/"abc"` -> `abc`) and checks it is a safe file name:
    /// 1 to 128 of `A-Z a-z 0-9 - _`.
    pub fn from_header(value: &str, file: &RepoFilePath) -> Result<Self, HubError> {
        let cleaned = value.trim().trim_start_matches("W/").trim_matches('"');
        let ok = !cleaned.is_empty()
            && cleaned.len() <= 128
            && cleaned
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if ok {
            Ok(BlobEtag(cleaned.to_string()))
        } else {
            Err(HubError::BadServerValue {
                what: "ETag",
                value: value.to_string(),
                file: file.to_string(),
            })
        }
    }

    /// The blob's file name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this ETag is a SHA-256 (64 hex digits), as LFS files have.
    pub fn is_sha256(&self) -> bool {
        self.0.len() == 64 && self.0.bytes().all(|b| b.is_ascii_hexdigit())
    }

    /// Whether this ETag is a git blob SHA-1 (40 hex digits), as small files have.
    pub fn is_git_sha1(&self) -> bool {
        self.0.len() == 40 && self.0.bytes().all(|b| b.is_ascii_hexdigit())
    }
}

impl fmt::Display for BlobEtag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_hub_file_names() {
        for name in [
            "config.json",
            "model-00001-of-00002.safetensors",
            "onnx/model.onnx",
            "a b/c d.txt",
            ".gitattributes",
            "tokenizer.model",
        ] {
            assert_eq!(RepoFilePath::parse(name).unwrap().as_str(), name);
        }
    }

    #[test]
    fn rejects_traversal_and_odd_names() {
        for name in [
            "",
            "../evil",
            "a/../../evil",
            "..",
            ".",
            "./a",
            "/etc/passwd",
            "a//b",
            "a/",
            "a\\..\\b",
            "C:evil",
            "c:/x",
            "a\0b",
            "a\nb",
        ] {
            assert!(RepoFilePath::parse(name).is_err(), "{name:?} was accepted");
        }
    }

    #[test]
    fn under_stays_inside_base() {
        let base = Path::new("/cache/snap");
        let p = RepoFilePath::parse("sub/dir/file.bin").unwrap();
        let full = p.under(base);
        assert!(full.starts_with(base));
        assert_eq!(full, Path::new("/cache/snap/sub/dir/file.bin"));
        assert_eq!(p.file_name(), "file.bin");
        assert!(!p.is_top_level());
    }

    #[test]
    fn etags() {
        let f = RepoFilePath::parse("x").unwrap();
        let e =
            BlobEtag::from_header("W/\"0123456789abcdef0123456789abcdef01234567\"", &f).unwrap();
        assert!(e.is_git_sha1());
        assert!(BlobEtag::from_header("\"../../evil\"", &f).is_err());
        assert!(BlobEtag::from_header("\"\"", &f).is_err());
        assert!(BlobEtag::from_header("a/b", &f).is_err());
    }
}
