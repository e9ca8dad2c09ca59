"""Devices of a sweep: the 1-D mesh over which cells are sharded, and multi-host start-up.

Multi-host (GPU clusters, TPU pods): :func:`maybe_initialize_distributed` calls
``jax.distributed.initialize()`` when ``LIMITS_DISTRIBUTED=1`` or ``JAX_COORDINATOR_ADDRESS`` is
set (optionally with ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``; on Cloud TPU, Slurm and Open
MPI ``LIMITS_DISTRIBUTED=1`` alone auto-detects them). Every process runs the same program over
the global mesh; each writes only the records of cells computed on its own devices to
``records.<process_index>.jsonl`` (:mod:`limits.sweep.store`). Finished-cell sets are merged
across processes with ``process_allgather`` (:mod:`limits.sweep.engine`).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from limits.errors import LimitsError, check

MESH_AXIS = "cells"

_DISTRIBUTED_DONE = False


def maybe_initialize_distributed(environ: Mapping[str, str] | None = None) -> bool:
  """Calls ``jax.distributed.initialize()`` when the environment asks for it.

  Triggers: ``LIMITS_DISTRIBUTED=1`` (auto-detection on Cloud TPU, Slurm, Open MPI) or
  ``JAX_COORDINATOR_ADDRESS=host:port`` (then also ``JAX_NUM_PROCESSES`` and
  ``JAX_PROCESS_ID``). Must run before any JAX computation. Returns whether it initialized.
  """
  global _DISTRIBUTED_DONE
  env = os.environ if environ is None else environ
  flag = env.get("LIMITS_DISTRIBUTED", "").strip().lower()
  if _DISTRIBUTED_DONE or not (flag in ("1", "true", "yes") or env.get("JAX_COORDINATOR_ADDRESS")):
    return False
  import jax

  kwargs: dict[str, Any] = {}
  if env.get("JAX_COORDINATOR_ADDRESS"):
    kwargs["coordinator_address"] = env["JAX_COORDINATOR_ADDRESS"]
  for var, arg in (("JAX_NUM_PROCESSES", "num_processes"), ("JAX_PROCESS_ID", "process_id")):
    if env.get(var):
      try:
        kwargs[arg] = int(env[var])
      except ValueError:
        raise LimitsError(f"{var}={env[var]!r} is not an integer") from None
  try:
    jax.distributed.initialize(**kwargs)
  except (ValueError, RuntimeError) as e:
    raise LimitsError(f"jax.distributed.initialize failed: {str(e).splitlines()[0]}") from None
  _DISTRIBUTED_DONE = True
  return True


def select_devices(devices: "int | Sequence[Any] | None" = None) -> list:
  """All devices (None), the first k (int) or an explicit list; one-line errors."""
  import jax

  avail = jax.devices()
  if devices is None or (isinstance(devices, int) and devices == 0):
    return list(avail)
  if isinstance(devices, int):
    check(devices >= 1, f"--devices={devices} must be >= 1 (or 0 for all)")
    check(devices <= len(avail), f"--devices={devices} but only {len(avail)} "
          f"{jax.default_backend()} device(s) are available")
    check(jax.process_count() == 1 or devices == len(avail),
          f"--devices={devices}: a multi-host run must use all {len(avail)} devices")
    return list(avail[:devices])
  devs = list(devices)
  check(len(devs) >= 1, "no devices selected")
  return devs


def make_mesh(devices: Sequence[Any]):
  """A 1-D mesh with axis ``"cells"`` over the given devices."""
  import jax

  return jax.make_mesh((len(devices),), (MESH_AXIS,), devices=list(devices))
