"""The experiments: one thin absl CLI per experiment, run as ``python -m experiments.NAME``
(or ``limits NAME``); the computations live in ``limits``.

Run as ``python -m experiments.NAME`` (Python sets ``sys.argv[0]`` to ``"-m"`` while it imports
this package), Ctrl-C and SIGTERM are deferred from here on (:func:`limits.runs.interrupts.install`),
before the CLI's heavy imports (JAX): a signal during start-up then stops the run at its first
safe point with exit code 130, instead of landing in an XLA callback that ignores it. Importing
the package any other way (tests, notebooks) changes nothing.
"""

import sys

if sys.argv[:1] == ["-m"]:
  from limits.runs import interrupts

  interrupts.install()
