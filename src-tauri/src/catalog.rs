//! The models the app offers: the built-in offline model, the fixed recommended list, models
//! looked up on the hub this session, and those with a download. Hub models live in the
//! standard Hugging Face cache (`HF_HOME`/`HF_HUB_CACHE`), shared with other hub tools.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kivi_engine::budget;
use kivi_engine::hub::{
    DownloadOptions, FileSelection, HubClient, HubConfig, MemoryEstimate, RepoId, Snapshot,
    SnapshotRequest,
};
use kivi_engine::model::{ModelConfig, SUPPORTED_FAMILIES};

use crate::active_model::ModelChoice;
use crate::chat_cache::engine_cache;
use crate::error::{sentence, CommandError, ErrorCode};
use crate::store::{DownloadProgress, DownloadState, Settings};
use crate::types::{ModelAvailability, ModelInfo, ModelSource};

/// The built-in model's id.
pub const BUILTIN_ID: &str = "builtin/smollm2-135m-instruct-q4_1";
/// Its display name.
pub const BUILTIN_NAME: &str = "SmolLM2 135M Instruct (Q4_1)";
/// Its context (from its GGUF metadata).
pub const BUILTIN_CONTEXT: u64 = 8192;
/// Its shape, for the memory estimate: layers, KV heads, head dim.
const BUILTIN_SHAPE: Shape = Shape::global(30, 3, 64);

/// The recommended hub models: id, display name, maximum context. Current 4-bit MLX models
/// of the supported families, in sizes for 8, 16 and 32 GB Macs (Qwen3's config gives
/// 40,960 positions), and a small Llama with a long context.
pub const RECOMMENDED: [(&str, &str, u64); 4] = [
    ("mlx-community/Qwen3-4B-4bit", "Qwen3 4B (4-bit)", 40_960),
    ("mlx-community/Qwen3-8B-4bit", "Qwen3 8B (4-bit)", 40_960),
    ("mlx-community/Qwen3-14B-4bit", "Qwen3 14B (4-bit)", 40_960),
    (
        "mlx-community/Llama-3.2-3B-Instruct-4bit",
        "Llama 3.2 3B Instruct (4-bit)",
        131_072,
    ),
];

/// What decides a KV cache's size: the engine's own description (window layers included).
pub use kivi_engine::budget::KvShape as Shape;

/// What is known of a hub model.
#[derive(Debug, Clone, PartialEq)]
pub struct HubFacts {
    /// Bytes of the files a download fetches.
    pub size_bytes: u64,
    /// Bytes of its weight files.
    pub weights_bytes: u64,
    /// Its shape.
    pub shape: Shape,
    /// Its maximum context.
    pub context_length: u64,
}

/// Models looked up this session.
#[derive(Default)]
pub struct Catalog {
    looked_up: Mutex<BTreeMap<String, HubFacts>>,
}

impl Catalog {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, HubFacts>> {
        self.looked_up.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers what a look-up found.
    pub fn remember(&self, repo: &str, facts: HubFacts) {
        self.map().insert(repo.to_string(), facts);
    }

    /// Facts of a looked-up model.
    pub fn facts(&self, repo: &str) -> Option<HubFacts> {
        self.map().get(repo).cloned()
    }

    /// Repos looked up this session.
    pub fn looked_up(&self) -> Vec<String> {
        self.map().keys().cloned().collect()
    }
}

/// Bytes of a KV cache of `tokens` tokens with these settings, as the engine holds it on
/// the backend they choose.
pub fn kv_cache_bytes(shape: Shape, tokens: u64, settings: &Settings) -> u64 {
    budget::kv_cache_bytes(
        shape,
        tokens as usize,
        &engine_cache(&settings.cache),
        &settings.backend.resolve().unwrap_or_default(),
    )
}

/// Memory to run a model of `weights_bytes` with a cache of the whole context.
pub fn memory_estimate(weights_bytes: u64, shape: Shape, context: u64, settings: &Settings) -> u64 {
    MemoryEstimate::from_weights(weights_bytes).total_bytes
        + kv_cache_bytes(
            shape,
            context.min(u64::from(settings.context_length)),
            settings,
        )
}

/// Memory of the machine: (available now, total).
pub fn machine_memory() -> (u64, u64) {
    let check = MemoryEstimate::from_weights(0).check();
    (check.available_ram, check.total_ram)
}

/// Checks a repo id by IPC.md's rules (`owner/name`, each part `[A-Za-z0-9][A-Za-z0-9._-]*`
/// ending in a letter or digit, no `--` or `..`, at most 96 characters).
pub fn validate_repo_id(repo: &str) -> Result<RepoId, CommandError> {
    let bad = |why: &str| {
        CommandError::invalid(
            "repoId",
            format!("{why} Use the form owner/name, for example mlx-community/Llama-3.2-3B-Instruct-4bit."),
        )
    };
    if repo.is_empty() || repo.chars().count() > 96 {
        return Err(bad("The repo id must be 1 to 96 characters long."));
    }
    let Some((owner, name)) = repo.split_once('/') else {
        return Err(bad("The repo id has no '/' between owner and name."));
    };
    for part in [owner, name] {
        let ok_chars = part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        let first = part
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric());
        let last = part
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric());
        if !ok_chars || !first || !last || part.contains("--") || part.contains("..") {
            return Err(bad(&format!("\"{part}\" is not a valid owner or name.")));
        }
    }
    RepoId::parse(repo).map_err(|e| CommandError::invalid("repoId", sentence(e.to_string())))
}

/// The built-in model to load.
pub fn builtin_choice(path: &Path) -> ModelChoice {
    ModelChoice {
        id: BUILTIN_ID.into(),
        name: BUILTIN_NAME.into(),
        path: path.to_path_buf(),
    }
}

/// The id prefix of models added from local files or folders.
pub const LOCAL_PREFIX: &str = "local:";

/// A local model's id.
pub fn local_id(path: &Path) -> String {
    format!("{LOCAL_PREFIX}{}", path.display())
}

/// A local model to load, from its id (`None` when the id is not a local one).
pub fn local_choice(id: &str) -> Option<ModelChoice> {
    let path = PathBuf::from(id.strip_prefix(LOCAL_PREFIX)?);
    Some(ModelChoice {
        id: id.to_string(),
        name: local_name(&path),
        path,
    })
}

fn local_name(path: &Path) -> String {
    let name = path
        .file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy();
    name.strip_suffix(".gguf").unwrap_or(&name).to_string()
}

/// Checks that a picked path holds a model the engine loads: a `.gguf` file, or a folder with
/// `config.json` (and safetensors weights) or exactly one `.gguf` file.
pub fn check_local_model(path: &Path) -> Result<(), CommandError> {
    let not_a_model = |why: &str| {
        CommandError::invalid(
            "path",
            format!(
                "{} {why}. Pick a .gguf file, or a folder with config.json and .safetensors \
                 weights.",
                path.display()
            ),
        )
    };
    if path.is_file() {
        let mut magic = [0u8; 4];
        let read = std::fs::File::open(path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic));
        return match read {
            Ok(()) if &magic == b"GGUF" => Ok(()),
            Ok(()) => Err(not_a_model("is not a GGUF file")),
            Err(e) => Err(not_a_model(&format!("cannot be read ({e})"))),
        };
    }
    if !path.is_dir() {
        return Err(not_a_model("does not exist"));
    }
    let names: Vec<String> = std::fs::read_dir(path)
        .map_err(|e| not_a_model(&format!("cannot be read ({e})")))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let ggufs = names.iter().filter(|n| n.ends_with(".gguf")).count();
    let safetensors = names.iter().any(|n| n.ends_with(".safetensors"));
    if (names.iter().any(|n| n == "config.json") && safetensors) || ggufs == 1 {
        Ok(())
    } else {
        Err(not_a_model("holds no model the app can load"))
    }
}

/// A local model's entry.
pub fn local_info(id: &str) -> Option<ModelInfo> {
    let choice = local_choice(id)?;
    let size = if choice.path.is_file() {
        std::fs::metadata(&choice.path).ok().map(|m| m.len())
    } else {
        std::fs::read_dir(&choice.path).ok().map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
    };
    Some(ModelInfo {
        id: choice.id,
        name: choice.name,
        source: ModelSource::Local,
        recommended: false,
        availability: on_disk(size),
        size_bytes: size,
        memory_estimate_bytes: None,
        fits_in_memory: None,
        context_length: None,
        download: None,
    })
}

/// A display name for a hub repo.
pub fn display_name(repo: &str) -> String {
    RECOMMENDED
        .iter()
        .find(|(id, _, _)| *id == repo)
        .map(|(_, name, _)| name.to_string())
        .unwrap_or_else(|| repo.rsplit('/').next().unwrap_or(repo).to_string())
}

/// The snapshot of a downloaded hub model, from the cache alone.
pub fn cached_snapshot(hub: &HubConfig, repo: &str) -> Option<Snapshot> {
    let client = HubClient::new(hub.clone().with_offline(true)).ok()?;
    let request = SnapshotRequest::parse(repo, FileSelection::Runnable).ok()?;
    client.cached_snapshot(&request).ok()
}

/// Facts of a downloaded model, from its snapshot folder.
pub fn facts_from_snapshot(snapshot: &Snapshot) -> Option<HubFacts> {
    let config = read_config(&snapshot.dir.join("config.json")).ok()?;
    let weights = snapshot
        .files
        .iter()
        .filter(|f| f.file.as_str().ends_with(".safetensors"))
        .map(|f| f.size)
        .sum();
    Some(HubFacts {
        size_bytes: snapshot.files.iter().map(|f| f.size).sum(),
        weights_bytes: weights,
        shape: Shape::of(&config),
        context_length: config.context_length as u64,
    })
}

fn read_config(path: &Path) -> Result<ModelConfig, CommandError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        CommandError::new(
            ErrorCode::Io,
            format!("Cannot read {}: {e}.", path.display()),
        )
    })?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        CommandError::new(
            ErrorCode::UnsupportedFile,
            format!("The model's config.json is not valid JSON ({e})."),
        )
    })?;
    ModelConfig::from_hf_json(&json).map_err(|e| {
        CommandError::new(
            ErrorCode::UnsupportedFile,
            format!(
                "KIVI Chat cannot run this model: {e}. It runs MLX or safetensors checkpoints \
                 of {SUPPORTED_FAMILIES}."
            ),
        )
    })
}

/// Looks a repo up on the hub: its files and sizes, and its `config.json` (fetched into the
/// cache; no weights are downloaded) for the architecture and the memory estimate.
pub async fn look_up(hub: &HubConfig, repo: &RepoId) -> Result<HubFacts, CommandError> {
    let (hub, repo) = (hub.clone(), repo.clone());
    crate::runtime::off_runtime(move || async move { look_up_here(&hub, &repo).await })
        .await
        .map_err(CommandError::internal)?
}

async fn look_up_here(hub: &HubConfig, repo: &RepoId) -> Result<HubFacts, CommandError> {
    let client = HubClient::new(hub.clone())?;
    let id = repo.to_string();
    let listing = client
        .list_files(repo, &kivi_engine::hub::Revision::main())
        .await?;
    let names: Vec<&str> = listing.files.iter().map(|f| f.path.as_str()).collect();
    let has_weights = names.iter().any(|n| n.ends_with(".safetensors"));
    if !has_weights || !names.contains(&"config.json") {
        let gguf = names.iter().any(|n| n.ends_with(".gguf"));
        return Err(CommandError::new(
            ErrorCode::UnsupportedFile,
            if gguf {
                format!(
                    "{id} holds GGUF files; KIVI Chat downloads MLX or safetensors checkpoints \
                     (look for the model under mlx-community/...). Architectures that work: \
                     {SUPPORTED_FAMILIES}."
                )
            } else {
                format!(
                    "{id} has no safetensors weights with a config.json, so it is not a model \
                     KIVI Chat can run. Architectures that work: {SUPPORTED_FAMILIES}, as MLX \
                     or safetensors checkpoints."
                )
            },
        ));
    }
    let config_request = SnapshotRequest::new(
        repo.clone(),
        FileSelection::Files(vec!["config.json".into()]),
    );
    let options = DownloadOptions::default();
    let snapshot = client.download_snapshot(&config_request, &options).await?;
    let config_path = snapshot
        .path("config.json")
        .map(Path::to_path_buf)
        .unwrap_or_else(|| snapshot.dir.join("config.json"));
    let config = read_config(&config_path)?;
    let plan = client
        .plan_download(
            &SnapshotRequest::new(repo.clone(), FileSelection::Runnable),
            &options,
        )
        .await?;
    let weights = plan
        .files
        .iter()
        .filter(|f| f.file.ends_with(".safetensors"))
        .map(|f| f.size)
        .sum();
    Ok(HubFacts {
        size_bytes: plan.total_bytes,
        weights_bytes: weights,
        shape: Shape::of(&config),
        context_length: config.context_length as u64,
    })
}

/// A model file or folder is ready when its size could be read, else it is not installed.
fn on_disk(size: Option<u64>) -> ModelAvailability {
    if size.is_some() {
        ModelAvailability::Ready
    } else {
        ModelAvailability::NotDownloaded
    }
}

/// The built-in model's entry.
pub fn builtin_info(path: &Path, context: Option<u64>, settings: &Settings) -> ModelInfo {
    let size = std::fs::metadata(path).ok().map(|m| m.len());
    let context = context.unwrap_or(BUILTIN_CONTEXT);
    let estimate = size.map(|s| memory_estimate(s, BUILTIN_SHAPE, context, settings));
    let (available, _) = machine_memory();
    ModelInfo {
        id: BUILTIN_ID.into(),
        name: BUILTIN_NAME.into(),
        source: ModelSource::Builtin,
        recommended: false,
        availability: on_disk(size),
        size_bytes: size,
        memory_estimate_bytes: estimate,
        fits_in_memory: estimate.map(|e| e <= available),
        context_length: Some(context),
        download: None,
    }
}

/// A hub model's entry: availability from the cache and its download, size and estimate from
/// what is known.
pub fn hub_info(
    repo: &str,
    facts: Option<&HubFacts>,
    ready: bool,
    download: Option<&DownloadProgress>,
    settings: &Settings,
    available_memory: u64,
) -> ModelInfo {
    let recommended = RECOMMENDED.iter().find(|(id, _, _)| *id == repo);
    let download = download
        .filter(|d| !matches!(d.state, DownloadState::Completed | DownloadState::Cancelled))
        .cloned();
    let availability = match download.as_ref().map(|d| d.state) {
        Some(DownloadState::Queued | DownloadState::Downloading) => ModelAvailability::Downloading,
        Some(DownloadState::Paused) => ModelAvailability::Paused,
        Some(DownloadState::Failed) => ModelAvailability::Failed,
        _ if ready => ModelAvailability::Ready,
        _ => ModelAvailability::NotDownloaded,
    };
    let context = facts
        .map(|f| f.context_length)
        .or(recommended.map(|(_, _, c)| *c));
    let size = facts
        .map(|f| f.size_bytes)
        .or_else(|| download.as_ref().and_then(|d| d.total_bytes));
    let estimate =
        facts.map(|f| memory_estimate(f.weights_bytes, f.shape, f.context_length, settings));
    ModelInfo {
        id: repo.to_string(),
        name: display_name(repo),
        source: ModelSource::Hub,
        recommended: recommended.is_some(),
        availability,
        size_bytes: size,
        memory_estimate_bytes: estimate,
        fits_in_memory: estimate.map(|e| e <= available_memory),
        context_length: context,
        download,
    }
}

/// Deletes a hub model's folder from the cache.
pub fn delete_from_cache(hub: &HubConfig, repo: &RepoId) -> Result<bool, CommandError> {
    let dir: PathBuf = hub.cache_dir.join(repo.cache_folder_name());
    if !dir.exists() {
        return Ok(false);
    }
    std::fs::remove_dir_all(&dir).map_err(|e| {
        CommandError::new(
            ErrorCode::Io,
            format!(
                "Cannot delete {}: {e}. Close other programs using it and try again.",
                dir.display()
            ),
        )
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::CacheMode;

    #[test]
    fn repo_ids_follow_the_ipc_rules() {
        for ok in [
            "mlx-community/Llama-3.2-3B-Instruct-4bit",
            "a/b",
            "A1/b.c_d-e9",
        ] {
            assert!(validate_repo_id(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "noslash",
            "a/b/c",
            "-a/b",
            "a/b-",
            "a--b/c",
            "a/b..c",
            "a/.b",
            "a b/c",
            &format!("a/{}", "x".repeat(96)),
        ] {
            let e = validate_repo_id(bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("repoId"), "{bad}");
        }
    }

    #[test]
    fn kivi_caches_are_smaller_than_fp16() {
        let mut s = Settings::default();
        let shape = BUILTIN_SHAPE;
        let k2 = kv_cache_bytes(shape, 8192, &s);
        s.cache.k_bits = 4;
        s.cache.v_bits = 4;
        let k4 = kv_cache_bytes(shape, 8192, &s);
        s.cache.mode = CacheMode::Fp16;
        let fp16 = kv_cache_bytes(shape, 8192, &s);
        assert!(k2 < k4 && k4 < fp16, "{k2} {k4} {fp16}");
        // The default backend (host) keeps a full cache in float16.
        assert_eq!(fp16, 30 * 3 * 64 * 8192 * 2 * 2);
    }

    #[test]
    fn hub_entries_show_their_download() {
        let s = Settings::default();
        let info = hub_info(RECOMMENDED[0].0, None, false, None, &s, 1 << 34);
        assert!(info.recommended);
        assert_eq!(info.availability, ModelAvailability::NotDownloaded);
        assert_eq!(info.context_length, Some(40_960));
        assert_eq!(info.name, "Qwen3 4B (4-bit)");
        assert_eq!(info.memory_estimate_bytes, None);
        let progress = DownloadProgress {
            repo_id: "a/b".into(),
            state: DownloadState::Paused,
            files: vec![],
            downloaded_bytes: 5,
            total_bytes: Some(10),
            bytes_per_sec: 0.0,
            eta_seconds: None,
            error: None,
        };
        let facts = HubFacts {
            size_bytes: 10,
            weights_bytes: 8,
            shape: BUILTIN_SHAPE,
            context_length: 2048,
        };
        let info = hub_info("a/b", Some(&facts), false, Some(&progress), &s, 1 << 34);
        assert_eq!(info.availability, ModelAvailability::Paused);
        assert_eq!(info.download.unwrap().downloaded_bytes, 5);
        assert_eq!(info.fits_in_memory, Some(true));
        assert_eq!(info.name, "b");
        let done = DownloadProgress {
            state: DownloadState::Completed,
            ..progress
        };
        let info = hub_info("a/b", None, true, Some(&done), &s, 0);
        assert_eq!(info.availability, ModelAvailability::Ready);
        assert!(info.download.is_none());
    }
}
