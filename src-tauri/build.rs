include!("../scripts/build/mlx_link.rs");

/// The app's commands (ui/IPC.md, plus the hub token pair). With an app manifest, Tauri
/// generates `allow-<command>` permissions for them and the webview may call only those a
/// capability grants (`capabilities/default.json` grants exactly these): a command added to
/// the handler but not here cannot be called.
const COMMANDS: &[&str] = &[
    "list_chats",
    "create_chat",
    "get_chat",
    "rename_chat",
    "delete_chat",
    "set_system_prompt",
    "export_chat",
    "send_message",
    "regenerate",
    "edit_message",
    "stop_generation",
    "pick_documents",
    "attach_document",
    "remove_document",
    "read_part_of_document",
    "prefill_chat",
    "get_settings",
    "get_default_settings",
    "fit_context_length",
    "update_settings",
    "list_models",
    "inspect_model",
    "download_model",
    "pause_download",
    "resume_download",
    "cancel_download",
    "delete_model",
    "set_active_model",
    "get_model_status",
    "add_local_model",
    "get_hub_token_status",
    "set_hub_token",
    "get_stats",
    "get_server_status",
    "start_server",
    "stop_server",
    "open_external",
];

fn main() {
    link_mlx();
    tauri_build::try_build(
        tauri_build::Attributes::new()
            .app_manifest(tauri_build::AppManifest::new().commands(COMMANDS)),
    )
    .expect("tauri-build failed");
}
