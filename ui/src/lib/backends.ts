/** The backends the settings pane offers (the engine's names; the back end checks each). */

export interface BackendChoice {
  /** The name the engine takes (`auto`: the platform's choice). */
  value: string;
  label: string;
  /** One line on what it is for. */
  hint: string;
}

export const BACKEND_CHOICES: readonly BackendChoice[] = [
  { value: "auto", label: "Automatic", hint: "MLX on the GPU in float16 on a Mac; the CPU kernels elsewhere." },
  { value: "host", label: "CPU kernels", hint: "Plain-Rust kernels on the CPU, int8 inputs to the 4-bit products: the fastest choice without a GPU." },
  { value: "host-f32", label: "CPU kernels (float32)", hint: "The CPU kernels in float32 throughout: mlx-lm's logits to 1e-2, decode steps about 10% slower." },
  { value: "mlx-cpu-f32", label: "MLX on the CPU (float32)", hint: "MLX's operations on the CPU: the Mac's code path, slower here." },
  { value: "mlx-cpu-f16", label: "MLX on the CPU (float16)", hint: "The Mac's configuration on the CPU, for checking its numerics; slow." },
  { value: "mlx-gpu-f16", label: "MLX on the GPU (float16)", hint: "Metal on a Mac (CUDA where MLX has it): the Mac's default." },
  { value: "mlx-gpu-bf16", label: "MLX on the GPU (bfloat16)", hint: "Like float16 with a wider range and fewer digits." },
];

/** The label of a backend name, or the name itself when it is not one of the choices. */
export function backendLabel(value: string): string {
  return BACKEND_CHOICES.find((b) => b.value === value)?.label ?? value;
}

/** The panel's short name for a backend: "MLX · GPU · f16", "CPU kernels". */
export function backendShort(name: string): string {
  if (name === "host") return "CPU kernels";
  if (name === "host-f32") return "CPU kernels · f32";
  const m = /^mlx-(cpu|gpu)-(f32|f16|bf16)$/.exec(name);
  return m ? `MLX · ${m[1]!.toUpperCase()} · ${m[2]}` : name;
}
