"""Helpers shared by the HF-parity tests (tests/test_*_hf.py): random token ids, a HF forward
with every layer's attention weights, and the largest absolute difference."""

import numpy as np
import torch  # requirements-dev.txt: the reference


def random_tokens(vocab, shape, seed=0):
  """(B, L) int32 ids uniform in [0, vocab) (NumPy PCG64, ``seed``)."""
  return np.random.default_rng(seed).integers(0, vocab, size=shape).astype(np.int32)


def hf_forward(model, tokens):
  """``model(tokens, output_attentions=True)`` without gradients (eager attention)."""
  with torch.no_grad():
    return model(torch.tensor(np.asarray(tokens), dtype=torch.long), output_attentions=True)


def max_diff(a, b):
  return float(np.abs(np.asarray(a) - np.asarray(b)).max())


def assert_logits_and_weights_match(out, ref, n_layer, tol):
  """``limits.models.forward``'s Output against HF's: logits within ``tol`` × max |logit|
  (absolute), and each of the ``n_layer`` layers' attention weights within ``tol`` absolute."""
  ref_logits = ref.logits.numpy()
  np.testing.assert_allclose(np.asarray(out.logits), ref_logits, rtol=0,
                             atol=tol * float(np.abs(ref_logits).max()), err_msg="logits")
  assert len(ref.attentions) == n_layer
  for n in range(n_layer):
    np.testing.assert_allclose(np.asarray(out.attn.weights[n]), ref.attentions[n].numpy(),
                               atol=tol, err_msg=f"layer {n} attention weights")
