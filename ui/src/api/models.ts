/** Models and downloads from the Hugging Face hub. */
import { call } from "./ipc";
import type { DownloadProgress, HubTokenStatus, ModelInfo, ModelsOverview, ModelStatus } from "./types";

export const listModels = () => call<ModelsOverview>("list_models");

/** Looks a repo up on the hub (size, memory estimate) without downloading it. */
export const inspectModel = (repoId: string) => call<ModelInfo>("inspect_model", { repoId });

export const downloadModel = (repoId: string) => call<DownloadProgress>("download_model", { repoId });
export const pauseDownload = (repoId: string) => call<DownloadProgress>("pause_download", { repoId });
export const resumeDownload = (repoId: string) => call<DownloadProgress>("resume_download", { repoId });
/** Stops the download and deletes its partial files. */
export const cancelDownload = (repoId: string) => call<null>("cancel_download", { repoId });

/** A native dialog picks a `.gguf` file or (`folder`) a model folder; the model joins the list
 * (the file stays where it is) but is not activated. `null` when the dialog was cancelled. */
export const addLocalModel = (folder: boolean) => call<ModelInfo | null>("add_local_model", { folder });

/** Deletes a downloaded model's files; a local model (`local:` id) only leaves the list. */
export const deleteModel = (modelId: string) => call<null>("delete_model", { modelId });

/** Persists the choice and starts loading it; progress comes as `model-status`. */
export const setActiveModel = (modelId: string) => call<ModelStatus>("set_active_model", { modelId });

export const getModelStatus = () => call<ModelStatus>("get_model_status");

/** Whether a hub token is stored in the OS keychain. */
export const getHubTokenStatus = () => call<HubTokenStatus>("get_hub_token_status");

/** Stores a hub token in the OS keychain (`null` deletes it). */
export const setHubToken = (token: string | null) => call<HubTokenStatus>("set_hub_token", { token });
