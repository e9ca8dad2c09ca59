"""RoPE settings of a HF ``config.json`` (as transformers 5 writes them and as 4.x wrote them)
and the rotary frequencies they define.

transformers ≥ 5 writes ``"rope_parameters": {"rope_theta": θ, "rope_type": "default"}``, or, for
models whose layer types differ (Gemma 3), one such dict per layer type
(``{"sliding_attention": {...}, "full_attention": {...}}``). transformers 4.x wrote a top-level
``rope_theta`` (Gemma 3 also ``rope_local_base_freq``) and an optional ``rope_scaling`` dict.

Plain RoPE (``rope_type`` "default") is read for every family (:func:`rope_theta`). The
Llama-family adapters (Llama, Mistral, Qwen2, Qwen3) also take the scaled types of
:data:`SCALED_ROPE_TYPES` (:func:`rope_settings`), computed as HF 5.24's ``modeling_rope_utils``:

- ``linear``: inv_freq / factor (positions divided by the factor);
- ``llama3``: ``_compute_llama3_parameters``' rewrite: with wavelength λ = 2π/inv_freq and
  L₀ = original_max_position_embeddings, frequencies with λ > L₀/low_freq_factor are divided by
  the factor, those with λ < L₀/high_freq_factor kept, and those between interpolated with
  s = (L₀/λ − low)/(high − low): (1 − s)·inv_freq/factor + s·inv_freq;
- ``dynamic`` (NTK): θ' = θ·(factor·n/P − (factor − 1))^(d/(d−2)) with n = max(L, P), P =
  max_position_embeddings. ``forward`` refuses L > P, so n = P and θ' is θ up to the rounding of
  that expression, which is reproduced as HF computes it (the NTK growth never applies).

Any other type (``yarn``, ``longrope``, ...) or an unknown key is refused with one line naming
it and the supported types, never silently replaced by plain RoPE at θ = 10⁴.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

from limits.errors import LimitsError
from limits.models.checks import is_positive_int, is_positive_number

SUPPORTED_ROPE_TYPES = ("default",)
# Scaled types the Llama-family adapters implement (see the module docstring).
SCALED_ROPE_TYPES = ("linear", "dynamic", "llama3")
# Keys of one rope_parameters dict that leave plain RoPE unchanged.
_PLAIN_KEYS = ("rope_theta", "rope_type", "type")
# The keys each scaled type takes besides _PLAIN_KEYS (all required, as HF's validation).
_SCALING_KEYS = {"linear": ("factor",), "dynamic": ("factor",),
                 "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                            "original_max_position_embeddings")}


@dataclasses.dataclass(frozen=True)
class Scaling:
  """A scaled RoPE (hashable: part of a static config). ``original_max_position_embeddings``
  is L₀ for "llama3" and P = max_position_embeddings for "dynamic"."""

  rope_type: str
  factor: float
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  original_max_position_embeddings: int = 0


def scaling_keys(rope_type: str) -> tuple[str, ...]:
  """The keys a scaled ``rope_type`` takes besides rope_theta and rope_type."""
  return _SCALING_KEYS[rope_type]


def _read(params: Any, where: str, source: str, types: tuple[str, ...],
          ) -> tuple[Optional[float], Optional[dict]]:
  """(θ or None, the scaling keys or None) of one rope dict, refusing a type not in ``types``
  and any key that type does not take."""
  if not isinstance(params, Mapping):
    raise LimitsError(f"{source}: {where}={params!r} is not a JSON object")
  rope_type = params.get("rope_type", params.get("type", "default"))
  if rope_type not in types:
    what = ("plain RoPE" if types == SUPPORTED_ROPE_TYPES
            else "plain RoPE and the Llama-family scalings")
    raise LimitsError(f"{source}: {where} rope_type={rope_type!r} is not supported (changes "
                      f"attention); supported: {', '.join(types)} ({what})")
  takes = _PLAIN_KEYS + _SCALING_KEYS.get(rope_type, ())
  extra = sorted(k for k in params if k not in takes
                 and not (k == "partial_rotary_factor" and params[k] == 1.0))
  if extra:
    raise LimitsError(f"{source}: {where} has {extra[0]}={params[extra[0]]!r}, which is not "
                      f"supported (rope_type {rope_type!r} takes only "
                      f"{', '.join(k for k in takes if k != 'type')})")
  theta = params.get("rope_theta")
  if theta is not None and not is_positive_number(theta):
    raise LimitsError(f"{source}: {where} rope_theta={theta!r} must be a positive number")
  if rope_type == "default":
    return (None if theta is None else float(theta)), None
  return (None if theta is None else float(theta)), dict(
      {k: params[k] for k in _SCALING_KEYS[rope_type] if k in params}, rope_type=rope_type)


def rope_theta(hf: Mapping[str, Any], source: str, *, default: float,
               layer_type: Optional[str] = None, legacy_key: str = "rope_theta") -> float:
  """θ for plain RoPE from a HF config dict, in either format.

  Args:
    hf: the config.json object.
    source: names the file in errors.
    default: θ when the config gives none (the family's HF default).
    layer_type: for per-layer-type configs (Gemma 3: "sliding_attention" or "full_attention"),
      which entry of a nested ``rope_parameters`` to read; None for one θ for every layer.
    legacy_key: the 4.x top-level key holding this θ (Gemma 3's local θ:
      ``rope_local_base_freq``).

  Returns:
    θ as a float. LimitsError for a rope_type other than "default", a scaling key, a per-layer
    ``rope_parameters`` where one θ is expected, or a bad value.
  """
  return _settings(hf, source, default, layer_type, legacy_key, SUPPORTED_ROPE_TYPES)[0]


def rope_settings(hf: Mapping[str, Any], source: str, *, default: float, n_positions: int,
                  ) -> tuple[float, Optional[Scaling]]:
  """``(θ, Scaling or None)`` of a Llama-family config (one RoPE for every layer): plain RoPE
  or one of :data:`SCALED_ROPE_TYPES`, from ``rope_parameters`` (5.x) or ``rope_scaling``
  (4.x). ``n_positions`` is max_position_embeddings (L₀'s default for "llama3", as HF; P for
  "dynamic"). LimitsError naming the key for anything else."""
  theta, found = _settings(hf, source, default, None, "rope_theta",
                           SUPPORTED_ROPE_TYPES + SCALED_ROPE_TYPES)
  if found is None:
    return theta, None
  kind = found["rope_type"]
  if kind == "llama3" and "original_max_position_embeddings" not in found:
    # HF standardize_rope_params: a top-level original_max_position_embeddings, else the
    # model's max_position_embeddings.
    found["original_max_position_embeddings"] = hf.get("original_max_position_embeddings",
                                                       n_positions)
  missing = [k for k in _SCALING_KEYS[kind] if k not in found]
  if missing:
    raise LimitsError(f"{source}: rope_type {kind!r} needs {missing[0]} (takes "
                      f"{', '.join(_SCALING_KEYS[kind])})")
  for key in _SCALING_KEYS[kind]:
    ok = is_positive_int if key == "original_max_position_embeddings" else is_positive_number
    if not ok(found[key]):
      raise LimitsError(f"{source}: rope {key}={found[key]!r} must be a positive "
                        f"{'integer' if ok is is_positive_int else 'number'}")
  if kind == "llama3" and not found["high_freq_factor"] > found["low_freq_factor"]:
    raise LimitsError(f"{source}: rope high_freq_factor={found['high_freq_factor']!r} must "
                      f"exceed low_freq_factor={found['low_freq_factor']!r}")
  if kind == "dynamic":
    found["original_max_position_embeddings"] = n_positions
  found = {k: (v if k in ("rope_type", "original_max_position_embeddings") else float(v))
           for k, v in found.items()}
  return theta, Scaling(**found)


def _settings(hf, source, default, layer_type, legacy_key, types):
  """(θ, the scaling dict of a scaled type or None): see rope_theta / rope_settings."""
  scaling = hf.get("rope_scaling")
  found = None
  if scaling:  # 4.x; transformers 5 folds it into rope_parameters
    if layer_type is None or layer_type == "full_attention":
      found = _read(scaling, "rope_scaling", source, types)[1]
  params = hf.get("rope_parameters")
  theta = None
  if params is not None:
    if not isinstance(params, Mapping):
      raise LimitsError(f"{source}: rope_parameters={params!r} is not a JSON object")
    nested = any(isinstance(v, Mapping) for v in params.values())
    if nested:
      if layer_type is None:
        raise LimitsError(f"{source}: rope_parameters per layer type "
                          f"({', '.join(sorted(params))}) is not supported for this model type")
      unknown = sorted(k for k in params if k not in ("sliding_attention", "full_attention"))
      if unknown:
        raise LimitsError(f"{source}: rope_parameters for layer type {unknown[0]!r} is not "
                          "supported (sliding_attention, full_attention)")
      if params.get(layer_type) is not None:
        theta = _read(params[layer_type], f"rope_parameters[{layer_type!r}]", source, types)[0]
    else:
      theta, from_params = _read(params, "rope_parameters", source, types)
      if from_params is not None and found is not None and from_params != found:
        raise LimitsError(f"{source}: rope_scaling={scaling!r} disagrees with rope_parameters; "
                          "give one of them")
      found = from_params if from_params is not None else found
  legacy = hf.get(legacy_key)
  if legacy is not None and not is_positive_number(legacy):
    raise LimitsError(f"{source}: {legacy_key}={legacy!r} must be a positive number")
  if theta is not None and legacy is not None and float(legacy) != theta:
    # Both formats in one file and they disagree: which one a reader takes differs between
    # transformers versions, so neither is taken silently.
    raise LimitsError(f"{source}: {legacy_key}={legacy!r} disagrees with rope_parameters' "
                      f"rope_theta={theta!r}; give one of them")
  if theta is None:
    theta = float(legacy) if legacy is not None else float(default)
  return theta, found


def inv_freq(d_head: int, theta: float, dtype, scaling: Optional[Scaling] = None):
  """(d_head/2,) rotary inverse frequencies θ^(−2j/d_head), rewritten by ``scaling`` as HF 5.24
  (module docstring), in ``dtype`` (float32 as HF; float64 under x64)."""
  import jax.numpy as jnp

  if scaling is not None and scaling.rope_type == "dynamic":
    # HF _compute_dynamic_ntk_parameters at seq_len = P (L ≤ P, see the module docstring).
    f, p = scaling.factor, scaling.original_max_position_embeddings
    theta = theta * ((f * p / p) - (f - 1)) ** (d_head / (d_head - 2))
  freq = 1.0 / (theta ** (jnp.arange(0, d_head, 2, dtype=dtype) / d_head))  # (dh/2,)
  if scaling is None or scaling.rope_type == "dynamic":
    return freq
  if scaling.rope_type == "linear":
    return freq / jnp.asarray(scaling.factor, dtype)
  # llama3 (HF _compute_llama3_parameters, same operations and order).
  f, lo, hi = scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor
  old = scaling.original_max_position_embeddings
  wavelen = 2 * math.pi / freq
  scaled = jnp.where(wavelen > old / lo, freq / f, freq)
  smooth = (old / wavelen - lo) / (hi - lo)
  smoothed = (1 - smooth) * scaled / f + smooth * scaled
  medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
  return jnp.where(medium, smoothed, scaled)


__all__ = ["SCALED_ROPE_TYPES", "SUPPORTED_ROPE_TYPES", "Scaling", "inv_freq", "rope_settings",
           "rope_theta", "scaling_keys"]
