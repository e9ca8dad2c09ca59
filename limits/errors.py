"""The one exception type for a user's mistake.

Library code raises :class:`LimitsError` (a ``ValueError``) with a one-line message that names
the bad value and what is allowed. ``limits.cli.guard`` turns it into ``error: <message>`` on
stderr and exit code 2, so a CLI user never sees a traceback for their own mistake.
"""


class LimitsError(ValueError):
  """A bad input, missing file or refused checkpoint; the message is one readable line."""


def first_line(e: BaseException) -> str:
  """The first line of an exception's message, or its type name (for one-line errors)."""
  return str(e).splitlines()[0] if str(e) else type(e).__name__


def check(condition: bool, message: str) -> None:
  """Raises LimitsError(message) unless condition holds."""
  if not condition:
    raise LimitsError(message)
