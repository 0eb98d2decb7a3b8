//! The KIVI cache on the MLX runtime (the Mac's path): the residual window as two MLX
//! arrays of exactly its size, rebuilt as MLX operations at each append; rotation,
//! quantization and attention as MLX operations too, lazy until the caller evaluates.

use kivi_kernels::{
    mlx_quant::{self, QuantizedArray},
    rotation, Kernels, QuantSpec, Residual,
};
use mlx_rs::{ops, Array, Dtype};

use super::Mlx;
use crate::cache::kivi_runtime::{Flushed, KiviRuntime, ResidualWindow, Step};
use crate::cache::CacheError;

impl KiviRuntime for Mlx {
    type Window = MlxWindow;
    const KERNELS: Kernels = Kernels::Mlx;

    fn rotate(x: &Array, on: Option<&[bool]>, scales: Option<&[f32]>) -> Result<Array, CacheError> {
        let all = match scales {
            Some(s) => {
                let s = Array::from_slice(s, &[x.dim(0), x.dim(1), 1, x.dim(3)]);
                rotation::rotate(&ops::multiply(x, &s)?)?
            }
            None => rotation::rotate(x)?,
        };
        let Some(on) = on else { return Ok(all) };
        let flags: Vec<u32> = on.iter().map(|&on| u32::from(on)).collect();
        let shape = [x.dim(0), x.dim(1), 1, 1];
        let on = Array::from_slice(&flags, &shape).as_dtype(Dtype::Bool)?;
        Ok(ops::select(&on, &all, x)?)
    }

    fn quantize(
        x: &Array,
        spec: QuantSpec,
        transposed: bool,
    ) -> Result<QuantizedArray, CacheError> {
        let x = if transposed {
            x.swap_axes(-1, -2)?
        } else {
            x.clone()
        };
        Ok(mlx_quant::quantize(&x, spec)?)
    }

    fn concatenate(
        held: &QuantizedArray,
        new: &QuantizedArray,
        axis: i32,
    ) -> Result<QuantizedArray, CacheError> {
        Ok(QuantizedArray::concatenate(&[held, new], axis)?)
    }
}

/// `[B, H, Tr, D]` keys and values in the storage dtype.
#[derive(Debug, Clone)]
pub(crate) struct MlxWindow {
    keys: Array,
    values: Array,
}

/// An append as MLX operations: the window with the new tokens, and the window after the
/// flush (`None` when empty), built aside.
pub(crate) struct MlxEntry {
    joined: MlxWindow,
    kept: Option<MlxWindow>,
}

impl ResidualWindow for MlxWindow {
    type Entry = MlxEntry;
    type Cut = Option<MlxWindow>;

    fn from_arrays(keys: Array, values: Array, _room: usize) -> Result<Self, CacheError> {
        Ok(Self { keys, values })
    }

    fn len(&self) -> usize {
        self.keys.dim(2) as usize
    }

    fn view(&self) -> Residual<'_> {
        Residual::Arrays {
            keys: &self.keys,
            values: &self.values,
        }
    }

    fn arrays(&self) -> (Array, Array) {
        (self.keys.clone(), self.values.clone())
    }

    fn bytes(&self) -> u64 {
        (self.keys.nbytes() + self.values.nbytes()) as u64
    }

    fn allocated(tokens: usize, _room: usize) -> usize {
        tokens
    }

    fn pending(&self) -> Vec<&Array> {
        vec![&self.keys, &self.values]
    }

    fn truncated(self, keep: usize) -> Result<Self, CacheError> {
        let first = |a: &Array| -> Result<Array, CacheError> {
            // A slice keeps its parent buffer alive: copy, so that the held bytes are exact.
            Ok(split_tokens(a, keep as i32)?.0.contiguous()?)
        };
        Ok(Self {
            keys: first(&self.keys)?,
            values: first(&self.values)?,
        })
    }

    fn plan(
        held: Option<&Self>,
        keys: &Array,
        values: &Array,
        step: Step,
    ) -> Result<(Flushed, MlxEntry), CacheError> {
        let k = roll(held.map(|w| &w.keys), keys, step)?;
        let v = roll(held.map(|w| &w.values), values, step)?;
        let entry = MlxEntry {
            joined: MlxWindow {
                keys: k.joined,
                values: v.joined,
            },
            kept: k
                .kept
                .zip(v.kept)
                .map(|(keys, values)| MlxWindow { keys, values }),
        };
        Ok((k.flushed.zip(v.flushed), entry))
    }

    fn enter(entry: MlxEntry, _held: Option<Self>) -> (Self, Option<MlxWindow>) {
        (entry.joined, entry.kept)
    }

    fn cut(kept: Option<MlxWindow>, _window: Self) -> Option<Self> {
        kept
    }
}

/// One append, for keys or values: `held` followed by `new` (rounded to the storage
/// dtype); the `flush` tokens after its first `sinks`; and what is kept after they leave.
/// Either of the last two is `None` when empty.
struct Roll {
    joined: Array,
    flushed: Option<Array>,
    kept: Option<Array>,
}

fn roll(held: Option<&Array>, new: &Array, step: Step) -> Result<Roll, CacheError> {
    let new = new.as_dtype(step.dtype)?;
    let joined = match held {
        Some(old) => ops::concatenate(&[old, &new], 2)?,
        None => new,
    };
    if step.flush == 0 {
        // Kept as it is: a copy if it is a view of the model's arrays.
        let joined = joined.contiguous()?;
        return Ok(Roll {
            joined: joined.clone(),
            flushed: None,
            kept: Some(joined),
        });
    }
    let (before, rest) = match step.sinks {
        0 => (None, joined.clone()),
        s => {
            let (sunk, rest) = split_tokens(&joined, s as i32)?;
            (
                Some(sunk),
                rest.expect("a flush leaves tokens after the sinks"),
            )
        }
    };
    let (old, after) = split_tokens(&rest, step.flush as i32)?;
    let kept = match (before, after) {
        (Some(a), Some(b)) => Some(ops::concatenate(&[a, b], 2)?),
        (a, b) => a.or(b),
    };
    Ok(Roll {
        joined,
        flushed: Some(old),
        // A slice keeps its parent buffer alive: copy, so that the held bytes are exact.
        kept: kept.map(|a| a.contiguous()).transpose()?,
    })
}

/// The first `n` tokens of a `[B, H, T, D]` array and the rest (`None` when empty).
fn split_tokens(window: &Array, n: i32) -> Result<(Array, Option<Array>), CacheError> {
    if n == window.dim(2) {
        return Ok((window.clone(), None));
    }
    let mut parts = window.split_at_indices(&[n], Some(2))?.into_iter();
    let head = parts.next().expect("two parts");
    Ok((head, parts.next()))
}
