"""Thin helpers shared by every ``experiments/*`` absl script.

- :func:`guard` wraps ``main`` so a :class:`~limits.errors.LimitsError` (or an ``OSError`` such
  as a full disk) becomes one line ``error: ...`` on stderr with exit code 2, and Ctrl-C or
  SIGTERM exits 130 saying where partial results are: the signal is deferred to the run's next
  safe point (:mod:`limits.runs.interrupts`), never raised inside a JAX computation.
- Flag errors exit the same way: :func:`guard` (through :func:`install`) makes ``absl.app.run``
  parse flags with :func:`parse_flags` (one line ``error: ...``, exit code 2, instead of absl's two lines and
  exit code 1). It also applies the rules common to every CLI: ``--seed`` must be an integer in
  [0, 2**32) (:data:`SEED_RANGE`), and ``--overwrite`` (defined here) lets a run replace another
  run's results in its ``--out_dir`` (see :func:`limits.runs.results.prepare_out_dir`).
- :func:`setup_precision` turns on float64 (``--x64``) before any array is made.
- :func:`require` registers a validator whose failure is one line ``--NAME must ...`` (the
  checks of config fields, :mod:`limits.cli.shared_flags`).

Exit codes: 0 success; 2 bad input, a bad flag, a missing or corrupt file, or a failed write
(one line on stderr); 130 interrupted (Ctrl-C / SIGINT, SIGTERM).
"""

from __future__ import annotations

import errno
import functools
import sys
from typing import Any, Callable, Sequence

from absl import app, flags

from limits.runs import interrupts
from limits.errors import LimitsError

EXIT_USAGE = 2
EXIT_INTERRUPTED = interrupts.EXIT_INTERRUPTED
SEED_RANGE = (0, 2**32)



def install() -> None:
  """Applies the rules common to every CLI to this process (idempotent; called by :func:`guard`,
  so only when a CLI runs, never when a module is imported): defines ``--overwrite`` and makes
  ``absl.app.run`` parse flags with :func:`parse_flags`."""
  if "overwrite" not in flags.FLAGS:
    flags.DEFINE_boolean("overwrite", False, "Let this run replace the results of a different "
                         "run in --out_dir (default: refuse; the same command continues its own "
                         "run).")
  defaults = list(app.run.__defaults__ or ())
  if len(defaults) == 2 and defaults[1] is not parse_flags:
    app.run.__defaults__ = (defaults[0], parse_flags)


def guard(main: Callable[[Sequence[str]], object]) -> Callable[[Sequence[str]], object]:
  """Returns main wrapped so user errors exit non-zero with one line and no traceback (and
  :func:`install` s the common CLI rules: call it before ``app.run``)."""

  install()
  interrupts.install()

  @functools.wraps(main)
  def wrapped(argv: Sequence[str]):
    _quiet_library_logs()
    from limits.records import compilation

    compilation.enable()  # persistent XLA cache (a CLI entry, never at import)
    if len(argv) > 1:
      print(f"error: unexpected positional arguments {list(argv[1:])}; use --flag=value",
            file=sys.stderr)
      sys.exit(EXIT_USAGE)
    try:
      interrupts.check()  # a signal while the flags were parsed
      out = main(argv)
      interrupts.check()  # a signal after the last safe point: the run has written it all
      interrupts.ignore()  # finished: a signal from here on (teardown) changes nothing
      return out
    except LimitsError as e:
      _fail(str(e))
    except OSError as e:  # a write or read the library did not anticipate (disk full, ...)
      from limits.runs.results import oserror_line

      _fail(oserror_line(e, "write" if e.errno in _WRITE_ERRNOS else "access"))
    except KeyboardInterrupt:
      interrupts.settle()  # never exit under XLA's threads (issue 30's segfault)
      print("interrupted: results written so far are kept in the run directory",
            file=sys.stderr)
      sys.exit(EXIT_INTERRUPTED)

  return wrapped


def _fail(message: str) -> None:
  print(f"error: {' '.join(message.split())}", file=sys.stderr)  # always exactly one line
  sys.exit(EXIT_USAGE)


_WRITE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG}


# ---------------------------------------------------------------------------------- flags


def _seed_ok(value) -> bool:
  return value is None or (isinstance(value, int) and SEED_RANGE[0] <= value < SEED_RANGE[1])


def parse_flags(argv: Sequence[str]) -> list[str]:
  """absl's flag parsing with the rules common to every CLI and one-line errors (exit 2).

  Registers, once, the seed rule on a ``--seed`` flag and makes ``--overwrite`` a key flag of
  the main module (so ``--help`` lists it), then parses.
  """
  fv = flags.FLAGS
  if "seed" in fv and not getattr(parse_flags, "_seed_rule", False):
    flags.register_validator("seed", _seed_ok, message=f"--seed must be an integer in "
                             f"[0, 2**32) = [0, {SEED_RANGE[1]})", flag_values=fv)
    parse_flags._seed_rule = True  # type: ignore[attr-defined]
  if argv:
    try:
      fv.register_key_flag_for_module(argv[0], fv["overwrite"])
    except Exception:  # pragma: no cover - help listing only
      pass
  try:
    return fv(list(argv))
  except flags.Error as e:
    _fail(str(e))
    raise  # unreachable
  except SystemExit as e:
    # absl's --help/--helpshort/--helpfull/--helpxml print the help, then sys.exit(1): asking
    # for help is not an error (exit 0, as argparse and every common tool do).
    if e.code == 1 and _asks_help(argv):
      sys.stdout.flush()
      sys.exit(0)
    raise


HELP_FLAGS = ("help", "helpshort", "helpfull", "helpxml", "?")


def _asks_help(argv: Sequence[str]) -> bool:
  """Whether the command line asks for absl's help (``--help``, ``-?``, ``--helpfull``, ...),
  before a ``--`` that ends the flags."""
  for arg in list(argv)[1:]:
    if arg == "--":
      return False
    name = arg.lstrip("-").split("=", 1)[0]
    if arg.startswith("-") and name in HELP_FLAGS:
      return True
  return False




def _quiet_library_logs() -> None:
  """absl shows INFO logs by default (e.g. JAX's "Unable to initialize backend 'tpu'"); keep
  warnings and errors only, unless the user asked for a level with --verbosity/-v."""
  from absl import logging

  try:
    asked = flags.FLAGS["verbosity"].present
  except KeyError:
    asked = False
  if not asked:
    logging.set_verbosity(logging.WARNING)


def setup_precision(x64: bool) -> None:
  """Enables float64 globally when asked. Call first thing in main, before any jnp array."""
  import jax

  jax.config.update("jax_enable_x64", bool(x64))


def require(names: str | Sequence[str], ok: Callable[[Any], bool], must: str,
            flag_values: flags.FlagValues | None = None) -> None:
  """Registers ``ok`` as the validator of each flag in ``names``; a value it rejects is the
  one-line usage error ``--NAME must MUST`` (e.g. ``must="be >= 0"``)."""
  for name in [names] if isinstance(names, str) else names:
    flags.register_validator(name, ok, message=f"--{name} must {must}",
                             flag_values=flags.FLAGS if flag_values is None else flag_values)
