"""Numerics shared by the normalizers, the Jacobians, the bounds and the models: masks (the causal
and sliding-window attention mask), safe division and
one-line checks of user values (one home for each; ``limits.normalizers`` re-exports
``check_logits`` and ``visible_count``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from limits.errors import LimitsError

Array = jax.Array


def concrete_float(value) -> float | None:
  """The Python float of value if it is concrete (not traced), else None."""
  if isinstance(value, jax.core.Tracer):
    return None
  try:
    arr = np.asarray(value)
  except Exception:  # pragma: no cover - exotic inputs
    return None
  if arr.size != 1:
    return None
  return float(arr.reshape(()))


def check_positive(value, name: str) -> None:
  """One-line LimitsError for a concrete value <= 0 or non-finite (traced values pass)."""
  v = concrete_float(value)
  if v is not None and not (np.isfinite(v) and v > 0):
    raise LimitsError(f"{name}={v!r} is not allowed; it must be a finite number > 0")
  if v is None and not isinstance(value, jax.core.Tracer):
    arr = np.asarray(value)
    if arr.size and not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
      raise LimitsError(f"{name} has entries <= 0 or non-finite; all must be finite and > 0")


def mask_like(logits: Array, mask) -> Array:
  """The boolean mask broadcast to logits' shape (all visible when mask is None)."""
  if mask is None:
    return jnp.ones(jnp.shape(logits), dtype=bool)
  mask = jnp.asarray(mask)
  if mask.dtype != jnp.bool_:
    mask = mask != 0
  shape = tuple(jnp.shape(logits))
  try:
    ok = np.broadcast_shapes(tuple(mask.shape), shape) == shape
  except ValueError:
    ok = False
  if not ok:
    raise LimitsError(f"mask of shape {tuple(mask.shape)} does not broadcast to the logits' "
                      f"shape {shape}; give a boolean mask of shape {shape} (or broadcastable)")
  return jnp.broadcast_to(mask, shape)


def check_logits(logits) -> None:
  """One-line LimitsError unless logits has shape (..., L) with L >= 1 (shapes are static, so
  this also holds under jit)."""
  shape = tuple(jnp.shape(logits))
  if len(shape) == 0:
    raise LimitsError("logits is a scalar (shape ()); a logit row needs shape (..., L), L >= 1")
  if shape[-1] == 0:
    raise LimitsError(f"logits of shape {shape} has L = 0 keys; a logit row needs L >= 1")


def as_float(logits) -> Array:
  check_logits(logits)
  logits = jnp.asarray(logits)
  if not jnp.issubdtype(logits.dtype, jnp.floating):
    logits = logits.astype(jnp.result_type(float))
  return logits


def visible_count(mask: Array) -> Array:
  """Number of visible keys per row, (..., L) bool -> (...,) int32."""
  return jnp.sum(mask, axis=-1, dtype=jnp.int32)


def safe_div(num: Array, den: Array) -> Array:
  """num / den with den == 0 rows (fully masked) giving 0 and finite gradients; a NaN den
  (a NaN logit or temperature) gives NaN, never a silent 0."""
  ok = den != 0
  return jnp.where(ok, num / jnp.where(ok, den, 1), 0)


def attention_mask(length: int, window: int = 0) -> jax.Array:
  """(L, L) bool, True = visible: causal, and within the last ``window`` keys when window > 0
  (HF ``sliding_window_overlay``: key j visible from query i iff i - window < j <= i)."""
  i = jnp.arange(length)[:, None]
  j = jnp.arange(length)[None, :]
  mask = j <= i
  if window:
    mask = mask & (j > i - window)
  return mask
