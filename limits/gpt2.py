"""``limits.gpt2``: the GPT-2 entry point that outside checks call (DESIGN.md, "Public API":
``load``, ``forward``, ``Output``). The family lives in :mod:`limits.models.gpt2`; this module
only gives those stable names their documented path, and nothing in the library imports it.
"""

from limits.models import Output, forward
from limits.models.gpt2 import load

__all__ = ["Output", "forward", "load"]
