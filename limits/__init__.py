"""limits: a JAX verification suite for "Limitations of Normalization in Attention Mechanism".

Mudarisov, Burtsev, Petrova, State; arXiv 2508.17821 (NeurIPS 2025). Submodules are imported
explicitly (``from limits import normalizers``); importing the package itself is cheap.
"""

from limits.errors import LimitsError

__all__ = ["LimitsError"]
__version__ = "0.1.0"
