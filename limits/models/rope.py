"""RoPE settings of a HF ``config.json``, as transformers 5 writes them and as 4.x wrote them.

transformers ≥ 5 writes ``"rope_parameters": {"rope_theta": θ, "rope_type": "default"}``, or, for
models whose layer types differ (Gemma 3), one such dict per layer type
(``{"sliding_attention": {...}, "full_attention": {...}}``). transformers 4.x wrote a top-level
``rope_theta`` (Gemma 3 also ``rope_local_base_freq``) and an optional ``rope_scaling`` dict.
Only plain RoPE (``rope_type`` "default", no scaling factor) is implemented; any other type
(``linear``, ``dynamic``, ``yarn``, ``llama3``, ...) or an unknown key is refused with one line
naming it, never silently replaced by θ = 10⁴.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from limits.errors import LimitsError
from limits.models.checks import is_positive_number

SUPPORTED_ROPE_TYPES = ("default",)
# Keys of one rope_parameters dict that leave plain RoPE unchanged.
_PLAIN_KEYS = ("rope_theta", "rope_type", "type")


def _check_plain(params: Any, where: str, source: str) -> Optional[float]:
  """θ of one rope dict (None if it gives none), refusing anything but plain RoPE."""
  if not isinstance(params, Mapping):
    raise LimitsError(f"{source}: {where}={params!r} is not a JSON object")
  rope_type = params.get("rope_type", params.get("type", "default"))
  if rope_type not in SUPPORTED_ROPE_TYPES:
    raise LimitsError(f"{source}: {where} rope_type={rope_type!r} is not supported (changes "
                      f"attention); supported: {', '.join(SUPPORTED_ROPE_TYPES)} (plain RoPE)")
  extra = sorted(k for k in params if k not in _PLAIN_KEYS
                 and not (k == "partial_rotary_factor" and params[k] == 1.0))
  if extra:
    raise LimitsError(f"{source}: {where} has {extra[0]}={params[extra[0]]!r}, which is not "
                      "supported (plain RoPE takes only rope_theta and rope_type 'default')")
  theta = params.get("rope_theta")
  if theta is not None and not is_positive_number(theta):
    raise LimitsError(f"{source}: {where} rope_theta={theta!r} must be a positive number")
  return None if theta is None else float(theta)


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
  scaling = hf.get("rope_scaling")
  if scaling:  # 4.x; transformers 5 folds it into rope_parameters
    if layer_type is None or layer_type == "full_attention":
      _check_plain(scaling, "rope_scaling", source)
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
        theta = _check_plain(params[layer_type], f"rope_parameters[{layer_type!r}]", source)
    else:
      theta = _check_plain(params, "rope_parameters", source)
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
  return theta


__all__ = ["SUPPORTED_ROPE_TYPES", "rope_theta"]
