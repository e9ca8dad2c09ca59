"""The gradient run's checkpoints: after the first batch of temperatures, then at most every
``task.CHECKPOINT_SECONDS``, and always before an interrupt is honoured (the interrupt moments
themselves, with signals: tests/test_interrupts.py)."""

import jax

from limits.gradient import task as gradient
from limits.runs import interrupts


def _run(monkeypatch, seconds, stop_after=None):
  """(checkpoint sizes, results or None if interrupted) of a 6-temperature synthetic run in
  batches of one; ``stop_after``: an interrupt is pending from the safe point after that many
  batches."""
  monkeypatch.setattr(gradient, "CHECKPOINT_SECONDS", seconds)
  done, calls = [0], []
  orig = gradient.run_temperature

  def counted(*a, **k):
    done[0] += 1
    return orig(*a, **k)

  def check():
    if stop_after is not None and done[0] >= stop_after:
      raise interrupts.Interrupted()

  monkeypatch.setattr(gradient, "run_temperature", counted)
  monkeypatch.setattr(interrupts, "check", check)
  config = gradient.GradientConfig(source="synthetic", rows=8, length=12, t_batch=1,
                                   temperatures="0.1,0.2,0.5,1,2,5", check_rows=1)
  with jax.enable_x64(True):
    try:
      result = gradient.run(gradient.plan(config), log=lambda s: None,
                            checkpoint=lambda res: calls.append(len(res["per_temperature"])))
    except interrupts.Interrupted:
      return calls, None
  return calls, result.results


def test_checkpoints_every_batch_when_due_and_only_the_first_when_not(monkeypatch):
  calls, res = _run(monkeypatch, 0.0)
  assert calls == [1, 2, 3, 4, 5, 6]            # due after every batch: each one written
  assert len(res["per_temperature"]) == 6
  calls, res = _run(monkeypatch, 1e9)
  assert calls == [1]                            # never due again: the first batch only
  assert len(res["per_temperature"]) == 6


def test_an_interrupt_writes_the_batches_a_throttled_checkpoint_skipped(monkeypatch):
  calls, res = _run(monkeypatch, 1e9, stop_after=4)
  assert res is None
  assert calls == [1, 4]                         # the first batch, then all four at the stop
  calls, res = _run(monkeypatch, 1e9, stop_after=1)
  assert calls == [1]                            # nothing pending: no second write
