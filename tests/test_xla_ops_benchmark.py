"""benchmarks.xla_ops.profile: a jitted call's device time by compiled op, named by the source
operation the compiled HLO records. On a call of two known ops (a (128, 256)·(256, 64) product
and a separate exp-sum reduction): the table lists the product with its shape and the einsum it
came from, counts one call each, and the percentages of the listed ops add up to at most 100.
A parser that lost the op names (a changed HLO or trace format) fails here, not silently in a
profile someone reads."""

import re

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.xla_ops import profile


def test_profile_names_the_product_and_its_source():
  a = jnp.asarray(np.random.default_rng(0).normal(size=(128, 256)), jnp.float32)
  b = jnp.asarray(np.random.default_rng(1).normal(size=(256, 64)), jnp.float32)
  f = jax.jit(lambda a, b: (jnp.einsum("ik,kj->ij", a, b), jnp.sum(jnp.exp(a), axis=-1)))
  text = f.lower(a, b).compile().as_text()
  fn = lambda: jax.block_until_ready(f(a, b))
  fn()
  table = profile(fn, text)
  rows = [ln for ln in table.splitlines()[2:] if not ln.startswith("by kind")]
  product = [ln for ln in rows if "f32[128,64]" in ln]
  assert product, table
  assert "ik,kj->ij" in product[0] and "dot_general" in product[0], table
  assert re.match(r"\s*[\d.]+\s+[\d.]+\s+1\s", product[0]), table  # one call
  pct = sum(float(ln.split()[1]) for ln in rows)
  assert 0 < pct <= 100.5, table
  assert table.splitlines()[-1].startswith("by kind: ")
