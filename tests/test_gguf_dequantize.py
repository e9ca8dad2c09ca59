"""limits.models.gguf_file dequantizes block-quantised tensors in chunks of rows with each
type's own row decoder: the same float32 bits as ``gguf.quants.dequantize`` (16 rows per
call), for every chunking, and float types go through gguf.quants unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

from limits.models import gguf_file


def _quantised(qtype, rows, cols, seed=0):
  x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
  x[0, :5] = [0.0, 1e-30, -3e4, 7.5, -0.0]  # zero, tiny, large and signed zero
  return quants.quantize(x, qtype)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0])
@pytest.mark.parametrize("chunk", [1, 300, 1 << 22])
def test_same_bits_as_gguf_quants(qtype, chunk, monkeypatch):
  monkeypatch.setattr(gguf_file, "DEQUANT_CHUNK_BYTES", chunk)
  data = _quantised(qtype, 37, 256)
  ref = quants.dequantize(data, qtype)
  got = gguf_file._dequantize_blocks(data, qtype)
  assert got.dtype == np.float32 and got.shape == ref.shape == (37, 256)
  assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))


def test_a_wrong_decoder_would_show():
  """The comparison can fail: one flipped nibble changes the decoded row."""
  data = _quantised(Q.Q4_1, 4, 64).copy()
  ref = gguf_file._dequantize_blocks(data, Q.Q4_1)
  data[2, 10] ^= 0x01
  assert not np.array_equal(gguf_file._dequantize_blocks(data, Q.Q4_1), ref)


def test_float_types_fall_back_to_gguf():
  assert gguf_file._dequantize_blocks(np.zeros((2, 4), np.float32), Q.F32) is None
  assert gguf_file._dequantize_blocks(np.zeros((2, 4), np.float16), Q.F16) is None
