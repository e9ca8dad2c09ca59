"""The registered sweep kinds; importing this package registers every one of them.

Each module defines a batched cell function, its parameter defaults and default grid, and
calls :func:`limits.sweep.registry.register` on import. To add a kind, add a module here and
import it below.
"""

# Registration order (the order of ``limits.sweep.EXPERIMENTS``).
from limits.sweep.kinds import toy  # noqa: F401  isort: skip
from limits.sweep.kinds import gradient  # noqa: F401  isort: skip
from limits.sweep.kinds import separability_sphere  # noqa: F401  isort: skip
from limits.sweep.kinds import distance_model  # noqa: F401  isort: skip
