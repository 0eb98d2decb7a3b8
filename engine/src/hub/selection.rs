//! Which files of a repository a download needs.
//!
//! The same rules pick files from a hub listing (online) and from a cached snapshot folder
//! (offline), so both modes agree on what "the model" is.

use std::collections::BTreeSet;

use serde::Deserialize;

use super::error::{HubError, HubResult};
use super::repo_id::RepoId;
use super::repo_path::RepoFilePath;

/// Files a safetensors checkpoint needs besides its weights, when the repo has them.
const RUNTIME_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.json",
    "chat_template.jinja",
];

/// The sharded-checkpoint index that names the weight files.
pub const SAFETENSORS_INDEX: &str = "model.safetensors.index.json";

/// What to download from a repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileSelection {
    /// What the engine needs to run a safetensors checkpoint (including MLX 4-bit ones):
    /// `config.json`, the tokenizer and template files present, and the weights (the shards
    /// named by `model.safetensors.index.json`, else `model.safetensors`, else every
    /// top-level `*.safetensors`).
    Runnable,
    /// One `.gguf` file, which carries its own tokenizer and chat template.
    Gguf(String),
    /// Exactly these files.
    Files(Vec<String>),
    /// Every file of the repository.
    All,
}

/// The outcome of applying a selection to a list of names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Selected {
    /// These files, in this order.
    Files(Vec<RepoFilePath>),
    /// These files plus the shards named by `index`, which must be read first.
    WithIndex {
        files: Vec<RepoFilePath>,
        index: RepoFilePath,
    },
}

pub(crate) fn select(
    selection: &FileSelection,
    repo: &RepoId,
    available: &[RepoFilePath],
) -> HubResult<Selected> {
    let has = |name: &str| available.iter().any(|p| p.as_str() == name);
    let find = |name: &str| -> HubResult<RepoFilePath> {
        let path = RepoFilePath::parse(name)?;
        if available.contains(&path) {
            Ok(path)
        } else {
            Err(HubError::NothingToDownload {
                repo: repo.to_string(),
                detail: format!("it has no file {name}"),
            })
        }
    };
    match selection {
        FileSelection::All => Ok(Selected::Files(available.to_vec())),
        FileSelection::Files(names) => Ok(Selected::Files(
            names.iter().map(|n| find(n)).collect::<HubResult<_>>()?,
        )),
        FileSelection::Gguf(name) => {
            if !name.ends_with(".gguf") {
                return Err(HubError::NothingToDownload {
                    repo: repo.to_string(),
                    detail: format!("{name} is not a .gguf file"),
                });
            }
            Ok(Selected::Files(vec![find(name)?]))
        }
        FileSelection::Runnable => {
            let ggufs: Vec<&str> = available
                .iter()
                .map(|p| p.as_str())
                .filter(|n| n.ends_with(".gguf"))
                .collect();
            let gguf_hint = || match ggufs.first() {
                Some(first) => format!("; it has GGUF files, choose one (for example {first})"),
                None => String::new(),
            };
            if !has("config.json") {
                return Err(HubError::NothingToDownload {
                    repo: repo.to_string(),
                    detail: format!("it has no config.json{}", gguf_hint()),
                });
            }
            let mut files: Vec<RepoFilePath> = RUNTIME_FILES
                .iter()
                .filter(|n| has(n))
                .map(|n| find(n))
                .collect::<HubResult<_>>()?;
            if has(SAFETENSORS_INDEX) {
                return Ok(Selected::WithIndex {
                    files,
                    index: find(SAFETENSORS_INDEX)?,
                });
            }
            if has("model.safetensors") {
                files.push(find("model.safetensors")?);
                return Ok(Selected::Files(files));
            }
            let weights: Vec<RepoFilePath> = available
                .iter()
                .filter(|p| p.is_top_level() && p.as_str().ends_with(".safetensors"))
                .cloned()
                .collect();
            if weights.is_empty() {
                return Err(HubError::NothingToDownload {
                    repo: repo.to_string(),
                    detail: format!("it has no .safetensors weights{}", gguf_hint()),
                });
            }
            files.extend(weights);
            Ok(Selected::Files(files))
        }
    }
}

#[derive(Deserialize)]
struct IndexJson {
    weight_map: std::collections::HashMap<String, String>,
}

/// The shard files a `model.safetensors.index.json` names, relative to the repository root,
/// validated (the index comes from the server like any other name).
pub(crate) fn shards_from_index(index: &RepoFilePath, json: &[u8]) -> HubResult<Vec<RepoFilePath>> {
    let parsed: IndexJson = serde_json::from_slice(json).map_err(|e| HubError::BadResponse {
        action: format!("reading {index}"),
        detail: format!("not a safetensors index: {e}"),
    })?;
    let dir = index
        .as_str()
        .rsplit_once('/')
        .map(|(d, _)| format!("{d}/"))
        .unwrap_or_default();
    let names: BTreeSet<&String> = parsed.weight_map.values().collect();
    if names.is_empty() {
        return Err(HubError::BadResponse {
            action: format!("reading {index}"),
            detail: "its weight_map is empty".into(),
        });
    }
    names
        .into_iter()
        .map(|n| {
            // Validate the shard name on its own first: `../x` must not cancel out `dir/`.
            RepoFilePath::parse(n)?;
            RepoFilePath::parse(&format!("{dir}{n}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<RepoFilePath> {
        list.iter()
            .map(|n| RepoFilePath::parse(n).unwrap())
            .collect()
    }

    fn repo() -> RepoId {
        RepoId::parse("o/m").unwrap()
    }

    #[test]
    fn runnable_picks_config_tokenizer_and_weights() {
        let avail = names(&[
            ".gitattributes",
            "README.md",
            "config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "model.safetensors",
            "onnx/model.onnx",
        ]);
        let s = select(&FileSelection::Runnable, &repo(), &avail).unwrap();
        assert_eq!(
            s,
            Selected::Files(names(&[
                "config.json",
                "tokenizer.json",
                "tokenizer_config.json",
                "model.safetensors"
            ]))
        );
    }

    #[test]
    fn runnable_with_index_defers_to_the_index() {
        let avail = names(&[
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "consolidated.safetensors",
            SAFETENSORS_INDEX,
        ]);
        let s = select(&FileSelection::Runnable, &repo(), &avail).unwrap();
        assert!(matches!(s, Selected::WithIndex { .. }));
        let index = RepoFilePath::parse(SAFETENSORS_INDEX).unwrap();
        let json = br#"{"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors",
            "b":"model-00002-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}}"#;
        assert_eq!(
            shards_from_index(&index, json).unwrap(),
            names(&[
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"
            ])
        );
        let evil = br#"{"weight_map":{"a":"../../../etc/passwd"}}"#;
        assert!(matches!(
            shards_from_index(&index, evil),
            Err(HubError::UnsafeFileName { .. })
        ));
    }

    #[test]
    fn gguf_only_repo_suggests_a_file() {
        let avail = names(&["README.md", "m.Q4_0.gguf", "m.Q8_0.gguf"]);
        let err = select(&FileSelection::Runnable, &repo(), &avail).unwrap_err();
        assert!(err.to_string().contains("m.Q4_0.gguf"), "{err}");
        let s = select(&FileSelection::Gguf("m.Q8_0.gguf".into()), &repo(), &avail).unwrap();
        assert_eq!(s, Selected::Files(names(&["m.Q8_0.gguf"])));
        assert!(select(&FileSelection::Gguf("README.md".into()), &repo(), &avail).is_err());
        assert!(select(&FileSelection::Gguf("x.gguf".into()), &repo(), &avail).is_err());
    }

    #[test]
    fn explicit_files_are_validated() {
        let avail = names(&["a.txt"]);
        assert!(select(
            &FileSelection::Files(vec!["../a.txt".into()]),
            &repo(),
            &avail
        )
        .is_err());
        assert!(select(&FileSelection::Files(vec!["a.txt".into()]), &repo(), &avail).is_ok());
    }
}
