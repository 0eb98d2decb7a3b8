//! The desktop around the app: native open/save dialogs and the user's browser.
//!
//! The webview has no file-system or dialog permission: files are reached only through these
//! dialogs (driven from Rust with `tauri-plugin-dialog`) and the app's own commands. Behind a
//! trait so the commands run without a window in tests.

use std::path::PathBuf;

/// Dialogs and links. Methods block until the user answers: call them off the async runtime
/// (`spawn_blocking`).
pub trait Desktop: Send + Sync + 'static {
    /// A native open dialog for documents (several may be chosen); `None` when cancelled.
    fn pick_documents(&self) -> Result<Option<Vec<PathBuf>>, String>;

    /// A native open dialog for a model: a `.gguf` file, or (`folder`) a folder with
    /// `config.json` and safetensors weights; `None` when cancelled.
    fn pick_model(&self, folder: bool) -> Result<Option<PathBuf>, String>;

    /// A native save dialog suggesting `file_name`, filtered to `extension`; `None` when
    /// cancelled.
    fn save_file(
        &self,
        file_name: &str,
        filter_name: &str,
        extension: &str,
    ) -> Result<Option<PathBuf>, String>;

    /// Opens an http(s) or mailto URL (already checked) in the user's browser or mail app.
    fn open_url(&self, url: &str) -> Result<(), String>;
}

/// Pre-answers the open dialog with these paths (separated like `PATH`): the end-to-end
/// tests drive the real app (a debug build) through WebDriver, which cannot reach a native
/// dialog. Release builds ignore it and the save-dialog one, so the files a release build
/// reads or writes are always the ones the user picked.
pub const PICK_FILES_ENV: &str = "KIVI_TEST_PICK_FILES";
/// Pre-answers the model dialog with this path (end-to-end tests).
pub const PICK_MODEL_ENV: &str = "KIVI_TEST_PICK_MODEL";
/// Pre-answers the save dialog with this path (end-to-end tests).
pub const SAVE_FILE_ENV: &str = "KIVI_TEST_SAVE_FILE";

/// A dialog's pre-set answer from the environment, in debug builds only.
fn test_answer(name: &str) -> Option<std::ffi::OsString> {
    cfg!(debug_assertions)
        .then(|| std::env::var_os(name))
        .flatten()
        .filter(|v| !v.is_empty())
}

/// The real desktop.
pub struct TauriDesktop(pub tauri::AppHandle);

impl Desktop for TauriDesktop {
    fn pick_documents(&self) -> Result<Option<Vec<PathBuf>>, String> {
        use tauri_plugin_dialog::DialogExt;
        if let Some(paths) = test_answer(PICK_FILES_ENV) {
            return Ok(Some(std::env::split_paths(&paths).collect()));
        }
        let picked = self
            .0
            .dialog()
            .file()
            .set_title("Attach documents")
            .add_filter("Documents", &["txt", "md", "markdown", "pdf"])
            .blocking_pick_files();
        Ok(picked.map(|files| {
            files
                .into_iter()
                .filter_map(|f| f.into_path().ok())
                .collect()
        }))
    }

    fn pick_model(&self, folder: bool) -> Result<Option<PathBuf>, String> {
        use tauri_plugin_dialog::DialogExt;
        if let Some(path) = test_answer(PICK_MODEL_ENV) {
            return Ok(Some(PathBuf::from(path)));
        }
        let dialog = self.0.dialog().file().set_title("Add a model");
        let picked = if folder {
            dialog.blocking_pick_folder()
        } else {
            dialog
                .add_filter("GGUF models", &["gguf"])
                .blocking_pick_file()
        };
        Ok(picked.and_then(|f| f.into_path().ok()))
    }

    fn save_file(
        &self,
        file_name: &str,
        filter_name: &str,
        extension: &str,
    ) -> Result<Option<PathBuf>, String> {
        use tauri_plugin_dialog::DialogExt;
        if let Some(path) = test_answer(SAVE_FILE_ENV) {
            return Ok(Some(PathBuf::from(path)));
        }
        let picked = self
            .0
            .dialog()
            .file()
            .set_title("Export chat")
            .set_file_name(file_name)
            .add_filter(filter_name, &[extension])
            .blocking_save_file();
        Ok(picked.and_then(|f| f.into_path().ok()))
    }

    fn open_url(&self, url: &str) -> Result<(), String> {
        open::that_detached(url).map_err(|e| e.to_string())
    }
}

/// A desktop with preset answers, for tests.
#[cfg(test)]
#[derive(Default)]
pub struct FakeDesktop {
    /// What the open dialog returns.
    pub picked: std::sync::Mutex<Option<Vec<PathBuf>>>,
    /// What the model dialog returns.
    pub model: std::sync::Mutex<Option<PathBuf>>,
    /// What the save dialog returns.
    pub save_to: std::sync::Mutex<Option<PathBuf>>,
    /// URLs opened.
    pub opened: std::sync::Mutex<Vec<String>>,
}

#[cfg(test)]
impl Desktop for FakeDesktop {
    fn pick_documents(&self) -> Result<Option<Vec<PathBuf>>, String> {
        Ok(self.picked.lock().unwrap().clone())
    }

    fn pick_model(&self, _folder: bool) -> Result<Option<PathBuf>, String> {
        Ok(self.model.lock().unwrap().clone())
    }

    fn save_file(&self, _: &str, _: &str, _: &str) -> Result<Option<PathBuf>, String> {
        Ok(self.save_to.lock().unwrap().clone())
    }

    fn open_url(&self, url: &str) -> Result<(), String> {
        self.opened.lock().unwrap().push(url.to_string());
        Ok(())
    }
}
