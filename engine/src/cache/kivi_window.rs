//! The KIVI cache's residual window: its sinks and newest tokens in full precision.
//!
//! With the MLX kernels (the Mac's path) the window is two MLX arrays of exactly its size,
//! rebuilt as MLX operations at each append. With the host kernels it is a pair of float16
//! host buffers written in place ([`HostKv`]): a decode step writes one row per head,
//! and a flush moves the window's newest rows down over the group that left it. Rebuilding
//! the window as new arrays copied it twice per layer and token (about 7 µs per layer,
//! 0.2 ms of a SmolLM2 decode step), and a flush's copies more.
//!
//! Both hold the same bits (new tokens rounded to float16 as MLX rounds them), so one
//! prefill, any chunking and token-by-token decode still give the same cache on either
//! (`kivi_tests.rs` compares them).

use half::f16;
use kivi_kernels::Residual;
use mlx_rs::{ops, Array, Dtype};

use crate::cache::CacheError;
use crate::runtime::host::kv::HostKv;

/// The residual tokens (the sinks, then the window).
#[derive(Debug, Clone)]
pub(super) enum Window {
    /// `[B, H, Tr, D]` arrays in the storage dtype.
    Mlx { keys: Array, values: Array },
    /// Float16 host buffers with room for the most tokens the window holds.
    Host(HostKv),
}

/// The tokens an append flushed out of the window, `[B, H, F, D]`, to be quantized.
pub(super) type Flushed = Option<(Array, Array)>;

impl Window {
    /// Tokens held.
    pub(super) fn len(&self) -> usize {
        match self {
            Window::Mlx { keys, .. } => keys.dim(2) as usize,
            Window::Host(host) => host.len,
        }
    }

    /// The window as the attention kernels read it.
    pub(super) fn view(&self) -> Residual<'_> {
        match self {
            Window::Mlx { keys, values } => Residual::Arrays { keys, values },
            Window::Host(host) => Residual::Host(host.window()),
        }
    }

    /// Keys and values as `[B, H, Tr, D]` arrays (the host buffers copied).
    pub(super) fn arrays(&self) -> (Array, Array) {
        match self {
            Window::Mlx { keys, values } => (keys.clone(), values.clone()),
            Window::Host(host) => host.window().arrays(),
        }
    }

    /// Bytes allocated (a host window's room for its largest size included).
    pub(super) fn bytes(&self) -> u64 {
        match self {
            Window::Mlx { keys, values } => (keys.nbytes() + values.nbytes()) as u64,
            Window::Host(host) => host.bytes(),
        }
    }

    /// Restored from saved arrays (already checked), for the kernels named.
    pub(super) fn from_arrays(
        keys: Array,
        values: Array,
        host: bool,
        room: usize,
    ) -> Result<Self, CacheError> {
        if !host {
            return Ok(Window::Mlx { keys, values });
        }
        Ok(Window::Host(HostKv::from_arrays(&keys, &values, room)?))
    }

    /// The first `keep` tokens (`None` when that is none).
    pub(super) fn truncated(self, keep: usize) -> Result<Option<Self>, CacheError> {
        if keep == 0 {
            return Ok(None);
        }
        Ok(Some(match self {
            Window::Mlx { keys, values } => {
                let first = |a: &Array| -> Result<Array, CacheError> {
                    // A slice keeps its parent buffer alive: copy, so that the held bytes are
                    // exact.
                    Ok(split_tokens(a, keep as i32)?.0.contiguous()?)
                };
                Window::Mlx {
                    keys: first(&keys)?,
                    values: first(&values)?,
                }
            }
            Window::Host(mut host) => {
                // The buffers keep their room: new tokens usually follow at once.
                host.len = keep.min(host.len);
                Window::Host(host)
            }
        }))
    }
}

/// New float32 tokens for a host window: `keys` and `values` `[B, H, L, D]` (`shape` is
/// `[B, H, L, Dk, Dv]`), with `flush` tokens after the first `sinks` leaving the window
/// once the call's queries have read them; `room`: the most tokens the window holds while
/// they do (its buffers' size between calls).
pub(super) struct HostAppend<'a> {
    pub(super) keys: &'a [f32],
    pub(super) values: &'a [f32],
    pub(super) shape: [usize; 5],
    pub(super) sinks: usize,
    pub(super) flush: usize,
    pub(super) room: usize,
}

/// An append to the window, worked out before anything changes, so that an error (in the
/// quantizer, after this) leaves the cache as it was.
pub(super) enum Roll<'a> {
    /// The window with the new tokens, and the window after the flush (MLX operations).
    Mlx {
        joined: Window,
        kept: Option<Window>,
    },
    /// The tokens to write into the host buffers.
    Host(HostAppend<'a>),
}

/// How the window drops the tokens a call flushed, once its queries have read them.
pub(super) enum Cut {
    /// Nothing leaves.
    Keep,
    /// The window after the flush, built aside.
    Mlx(Option<Window>),
    /// `flush` tokens after the first `sinks` leave the host buffers, which go back to
    /// `room` tokens.
    Host {
        sinks: usize,
        flush: usize,
        room: usize,
    },
}

impl Roll<'_> {
    /// The window holding every token, the new ones included, given the one before the
    /// call; and the cut that [`Cut::apply`] makes after attention.
    pub(super) fn enter(self, held: Option<Window>) -> (Window, Cut) {
        let add = match self {
            Roll::Mlx { joined, kept } => return (joined, Cut::Mlx(kept)),
            Roll::Host(add) => add,
        };
        let [batch, heads, len, key_dim, value_dim] = add.shape;
        let mut store = match held {
            Some(Window::Host(store)) => store,
            _ => HostKv::new(batch, heads, key_dim, value_dim),
        };
        // A decode step stays within the room; a prompt chunk grows the buffers.
        store.reserve(add.room.max(store.len + len));
        store.append(add.keys, add.values, len);
        let cut = Cut::Host {
            sinks: add.sinks,
            flush: add.flush,
            room: add.room,
        };
        (Window::Host(store), cut)
    }
}

impl Cut {
    /// The window after the flush, given the one [`Roll::enter`] made.
    pub(super) fn apply(self, window: Option<Window>) -> Option<Window> {
        let (sinks, flush, room) = match self {
            Cut::Keep => return window,
            Cut::Mlx(kept) => return kept,
            Cut::Host { sinks, flush, room } => (sinks, flush, room),
        };
        let Some(Window::Host(mut store)) = window else {
            return window;
        };
        store.remove(sinks, flush);
        // A prompt chunk grew the buffers; the window is back within its room.
        store.resize(room);
        (store.len > 0).then_some(Window::Host(store))
    }
}

/// The tokens `add` flushes out of the host window `held` (rounded to float16 as they
/// enter), and the change, checked.
pub(super) fn roll_host<'a>(
    held: Option<&Window>,
    add: HostAppend<'a>,
) -> Result<(Flushed, Roll<'a>), CacheError> {
    let [batch, heads, len, key_dim, value_dim] = add.shape;
    let (sinks, flush) = (add.sinks, add.flush);
    let empty;
    let store = match held {
        Some(Window::Host(store)) => store,
        Some(Window::Mlx { .. }) => {
            return Err(CacheError::Shape(
                "an MLX window cannot take host tokens".into(),
            ))
        }
        None => {
            empty = HostKv::new(batch, heads, key_dim, value_dim);
            &empty
        }
    };
    if !store.fits(batch, heads, key_dim, value_dim)
        || add.keys.len() != batch * heads * len * key_dim
        || add.values.len() != batch * heads * len * value_dim
    {
        return Err(CacheError::Shape(format!(
            "new tokens {batch} x {heads} x {len} of {key_dim} and {value_dim} do not fit the \
             window"
        )));
    }
    if sinks + flush > store.len + len {
        return Err(CacheError::Shape(format!(
            "cannot quantize {flush} of {} window tokens after {sinks} sinks",
            store.len + len
        )));
    }
    let flushed = (flush > 0).then(|| {
        let (k, v) = store.rows_with(add.keys, add.values, len, sinks, flush);
        let array = |data: &[f16], dim: usize| {
            Array::from_slice(data, &[batch, heads, flush, dim].map(|d| d as i32))
        };
        (array(&k, key_dim), array(&v, value_dim))
    });
    Ok((flushed, Roll::Host(add)))
}

/// The same append as MLX operations, for keys or values: `held` followed by `new`
/// (rounded to `dtype`); the `flush` tokens after its first `sinks`; and what is kept after
/// they leave. Either of the last two is `None` when empty.
pub(super) struct MlxRoll {
    pub(super) joined: Array,
    pub(super) flushed: Option<Array>,
    pub(super) kept: Option<Array>,
}

/// [`MlxRoll`] of `held` and `new`.
pub(super) fn roll_mlx(
    held: Option<&Array>,
    new: &Array,
    sinks: usize,
    flush: usize,
    dtype: Dtype,
) -> Result<MlxRoll, CacheError> {
    let new = new.as_dtype(dtype)?;
    let joined = match held {
        Some(old) => ops::concatenate(&[old, &new], 2)?,
        None => new,
    };
    if flush == 0 {
        // Kept as it is: a copy if it is a view of the model's arrays.
        let joined = joined.contiguous()?;
        return Ok(MlxRoll {
            joined: joined.clone(),
            flushed: None,
            kept: Some(joined),
        });
    }
    let (before, rest) = match sinks {
        0 => (None, joined.clone()),
        s => {
            let (sunk, rest) = split_tokens(&joined, s as i32)?;
            (
                Some(sunk),
                rest.expect("a flush leaves tokens after the sinks"),
            )
        }
    };
    let (old, after) = split_tokens(&rest, flush as i32)?;
    let kept = match (before, after) {
        (Some(a), Some(b)) => Some(ops::concatenate(&[a, b], 2)?),
        (a, b) => a.or(b),
    };
    Ok(MlxRoll {
        joined,
        flushed: Some(old),
        // A slice keeps its parent buffer alive: copy, so that the held bytes are exact.
        kept: kept.map(|a| a.contiguous()).transpose()?,
    })
}

/// The first `n` tokens and the rest (`None` when empty).
pub(super) fn split_tokens(window: &Array, n: i32) -> Result<(Array, Option<Array>), CacheError> {
    if n == window.dim(2) {
        return Ok((window.clone(), None));
    }
    let mut parts = window.split_at_indices(&[n], Some(2))?.into_iter();
    let head = parts.next().expect("two parts");
    Ok((head, parts.next()))
}
