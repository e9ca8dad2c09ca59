"""Lemma 2, Corollary 3 and Algorithm 5 (Figure 4): the gradient sensitivity of the normalizer.

- :mod:`limits.gradient.task`: the experiment (config, plan, run over synthetic or model rows);
- :mod:`limits.gradient.rows`: the measurements at one temperature (Lemma 2 on every row, the
  tied-top-two counter-example, row norms), shared with the ``gradient`` sweep kind;
- :mod:`limits.gradient.blocks`: the run's logit rows one block of rows at a time (a model's
  rows per (window, layer), re-read per pass: memory does not grow with the rows);
- :mod:`limits.gradient.screen`: the one-pass bracket of the exact softmax Jacobian norm that
  decides Corollary 3 for most (row, T) pairs, Newton only on the rest
  (:mod:`limits.gradient.newton_pairs`);
- :mod:`limits.gradient.sensitivity`: the exact norm (Newton on the secular equation) and the
  paper's g(T, eps);
- :mod:`limits.gradient.report`: the run's table and figure.

The claims are judged in :mod:`limits.claims` (``judges_gradient``), never here.
"""
