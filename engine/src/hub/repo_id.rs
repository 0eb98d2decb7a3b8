//! Validated names that end up in URLs and cache paths: repo ids, revisions, commit hashes.
//!
//! Every one of them becomes a path component under the cache, so each is checked once at
//! the edge and carried as its own type afterwards.

use std::fmt;
use std::str::FromStr;

use super::error::HubError;

/// The hub's limit for the owner and the name part of a repo id.
const MAX_PART_LEN: usize = 96;

/// A model repository on the hub, `owner/name`, e.g. `mlx-community/Llama-3.2-3B-Instruct-4bit`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoId {
    owner: String,
    name: String,
}

impl RepoId {
    /// Parses and validates `owner/name` with the hub's rules.
    ///
    /// Both parts: 1 to 96 of `A-Z a-z 0-9 - _ .`, not starting or ending with `-` or `.`,
    /// no `--` (it would make the cache folder `models--owner--name` ambiguous) and no `..`.
    pub fn parse(id: &str) -> Result<Self, HubError> {
        let invalid = |reason| HubError::InvalidRepoId {
            id: id.to_string(),
            reason,
        };
        let (owner, name) = id
            .split_once('/')
            .ok_or_else(|| invalid("it has no '/' between owner and name"))?;
        if name.contains('/') {
            return Err(invalid("it has more than one '/'"));
        }
        check_part(owner).map_err(invalid)?;
        check_part(name).map_err(invalid)?;
        if name.ends_with(".git") {
            return Err(invalid("the name cannot end with .git"));
        }
        Ok(RepoId {
            owner: owner.to_string(),
            name: name.to_string(),
        })
    }

    /// The user or organisation part.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The repository name part.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The hub cache folder, `models--owner--name`, named by `hf-hub` as every hub tool does.
    pub fn cache_folder_name(&self) -> String {
        hf_hub::Repo::model(self.to_string()).folder_name()
    }
}

fn check_part(part: &str) -> Result<(), &'static str> {
    if part.is_empty() {
        return Err("the owner or the name is empty");
    }
    if part.len() > MAX_PART_LEN {
        return Err("the owner or the name is longer than 96 characters");
    }
    if !part
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err("only letters, digits, '-', '_' and '.' are allowed");
    }
    if part.contains("--") || part.contains("..") {
        return Err("'--' and '..' are not allowed");
    }
    if part.starts_with(['-', '.']) || part.ends_with(['-', '.']) {
        return Err("a part cannot start or end with '-' or '.'");
    }
    Ok(())
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

impl FromStr for RepoId {
    type Err = HubError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RepoId::parse(s)
    }
}

/// A branch, tag or commit hash. Branches may contain `/` (`refs/pr/1`), which becomes a
/// nested file under `refs/` exactly as the Python hub client writes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Revision(String);

impl Revision {
    /// The default branch.
    pub fn main() -> Self {
        Revision("main".to_string())
    }

    /// Parses and validates a revision: `A-Z a-z 0-9 - _ . /`, no empty, `.` or `..`
    /// component, at most 255 bytes.
    pub fn parse(revision: &str) -> Result<Self, HubError> {
        let invalid = |reason| HubError::InvalidRevision {
            revision: revision.to_string(),
            reason,
        };
        if revision.is_empty() {
            return Err(invalid("it is empty"));
        }
        if revision.len() > 255 {
            return Err(invalid("it is longer than 255 characters"));
        }
        if !revision
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
        {
            return Err(invalid(
                "only letters, digits, '-', '_', '.' and '/' are allowed",
            ));
        }
        if revision
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(invalid("it has an empty, '.' or '..' path component"));
        }
        Ok(Revision(revision.to_string()))
    }

    /// The revision as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The commit this revision names, when it already is a full commit hash.
    pub fn as_commit(&self) -> Option<CommitHash> {
        CommitHash::parse(&self.0).ok()
    }
}

impl Default for Revision {
    fn default() -> Self {
        Revision::main()
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Revision {
    type Err = HubError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Revision::parse(s)
    }
}

/// A full commit hash (40 hex digits; up to 64 for SHA-256 repositories). It names the
/// snapshot folder, so nothing else is accepted.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CommitHash(String);

impl CommitHash {
    /// Accepts 40 to 64 hex digits, stored in lower case.
    pub fn parse(hash: &str) -> Result<Self, HubError> {
        if (40..=64).contains(&hash.len()) && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(CommitHash(hash.to_ascii_lowercase()))
        } else {
            Err(HubError::InvalidRevision {
                revision: hash.to_string(),
                reason: "a commit hash is 40 hex digits",
            })
        }
    }

    /// The hash in lower-case hex.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CommitHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_real_repo_ids() {
        for id in [
            "mlx-community/Llama-3.2-3B-Instruct-4bit",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "a/b",
            "user_1/model.v2",
        ] {
            let repo = RepoId::parse(id).unwrap();
            assert_eq!(repo.to_string(), id);
        }
    }

    #[test]
    fn cache_folder_name_is_the_hub_layout() {
        let repo = RepoId::parse("mlx-community/Llama-3.2-3B-Instruct-4bit").unwrap();
        assert_eq!(
            repo.cache_folder_name(),
            "models--mlx-community--Llama-3.2-3B-Instruct-4bit"
        );
    }

    #[test]
    fn rejects_unsafe_or_malformed_repo_ids() {
        for id in [
            "",
            "gpt2",
            "/name",
            "owner/",
            "a/b/c",
            "../etc",
            "owner/..",
            "owner/../../x",
            "/etc/passwd",
            "owner/na..me",
            "own--er/name",
            "owner/name\\x",
            "owner/na me",
            "owner/.hidden",
            "owner/name-",
            "owner/name.git",
            "C:/name",
            "owner/nämé",
            "owner/name\0",
        ] {
            assert!(RepoId::parse(id).is_err(), "{id:?} was accepted");
        }
        let long = format!("owner/{}", "x".repeat(97));
        assert!(RepoId::parse(&long).is_err());
    }

    #[test]
    fn revisions() {
        assert!(Revision::parse("main").is_ok());
        assert!(Revision::parse("refs/pr/1").is_ok());
        assert!(Revision::parse("v1.0").is_ok());
        for bad in [
            "", "../x", "a//b", "/abs", "a/", "a\\b", "a/../b", "a b", ".",
        ] {
            assert!(Revision::parse(bad).is_err(), "{bad:?} was accepted");
        }
        let commit = "0123456789abcdef0123456789ABCDEF01234567";
        let rev = Revision::parse(commit).unwrap();
        assert_eq!(rev.as_commit().unwrap().as_str(), commit.to_lowercase());
        assert!(Revision::main().as_commit().is_none());
    }
}
