"""Shared test set-up. Tests default to float32; those that verify a bound use
``with jax.enable_x64(True):`` (JAX 0.10's context manager) and say their tolerance."""

import os

# Keep XLA from grabbing both cores for its own thread pool per test process more than needed.
os.environ.setdefault("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
