"""Sweeps: grids of cells sharded over every device, with a resumable result store.

- :mod:`limits.sweep.grid`: cells, grids, stable cell ids, ``--grid`` parsing.
- :mod:`limits.sweep.registry`: :class:`Experiment` (a batched cell function with its
  parameters and defaults), :class:`ConfigParameters` (a kind's parameters as fields of its
  experiment's config dataclass) and the registry ``name -> Experiment``.
- :mod:`limits.sweep.store`: the run directory (``sweep.json`` manifest, per-process lock and
  append-only ``records.<p>.jsonl`` shards), repair and resume, :func:`collect`.
- :mod:`limits.sweep.devices`: the device mesh and multi-host start-up.
- :mod:`limits.sweep.config`: :class:`SweepConfig`, the ``sweep`` command's settings (each
  field declares its flag).
- :mod:`limits.sweep.engine`: :func:`run_sweep`, which runs any registered experiment over a
  grid (sharded, resumable); it imports no theorem module.
- :mod:`limits.sweep.kinds`: one module per experiment (``toy``, ``gradient``,
  ``separability_sphere``, ``distance_model``), each registering itself on import and each
  calling the library implementation its CLI uses (``distance_model`` is a host kind,
  ``Experiment.host``: ``ModelEvaluator`` runs on the host, not under shard_map).

Everything callers use is importable from ``limits.sweep`` itself.
"""

from limits.sweep.grid import (Cell, Grid, canonical_json, cell_id, id_halves, load_grid_file,
                               parse_grid)
from limits.sweep.registry import (EXPERIMENTS, CellFn, ConfigParameters, Experiment, describe,
                                   get_experiment, register)
from limits.sweep.store import (FORMAT, MANIFEST, ShardReport, append_lines, collect, flat_rows,
                                grid_differences, load_done, make_manifest, manifest_differences,
                                open_run, parse_record_line, read_manifest, read_shard,
                                record_line, shard_path, shard_paths)
from limits.sweep.devices import (MESH_AXIS, make_mesh, maybe_initialize_distributed,
                                  select_devices)
from limits.sweep.engine import Summary, float_dtype, results_block, run_sweep
from limits.sweep import kinds  # registers every kind  # noqa: F401
from limits.sweep.config import SweepConfig  # after the kinds: its help names them
from limits.sweep.kinds.gradient import gradient_logits
from limits.sweep.kinds.separability_sphere import separability_alpha, separability_points_key

__all__ = [
    "EXPERIMENTS", "FORMAT", "MANIFEST", "MESH_AXIS", "Cell", "CellFn", "ConfigParameters",
    "Experiment", "Grid",
    "ShardReport", "Summary", "SweepConfig", "append_lines", "canonical_json", "cell_id",
    "collect", "describe",
    "flat_rows", "float_dtype", "get_experiment", "gradient_logits", "grid_differences",
    "id_halves", "load_done", "load_grid_file", "make_manifest", "make_mesh",
    "manifest_differences", "maybe_initialize_distributed", "open_run", "parse_grid",
    "parse_record_line", "read_manifest", "read_shard", "record_line", "register",
    "results_block", "run_sweep",
    "select_devices", "separability_alpha", "separability_points_key", "shard_path",
    "shard_paths",
]
