"""Signals that arrive while z3 works wait for a safe point.

z3's Python API calls into C through ctypes and frees its objects in `__del__`: an exception raised from a signal
handler in the middle of that (an argument's conversion, a reference count's release) turns into a ctypes
`ArgumentError`, an "Exception ignored" traceback, or a context z3 can no longer use. So while the prover or a region
map runs (`holding`), the CLI's handler hands its exception here instead of raising it, and the next safe point
(`safe_point`: before and after each z3 check, between paths) raises it. z3's own Ctrl-C handling is switched off
(the solver's `ctrl_c` parameter, `prove.Solver`): it would swallow the first SIGINT as a cancelled check, which
would read as UNKNOWN.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

_held = 0
_pending: Optional[BaseException] = None


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """While inside, `arrived` keeps a signal's exception for the next safe point. On the way out a kept one is
    raised whatever ended the body (an error the body raised is its context): a signal is never lost, nor left for
    a later `holding`. One that comes after `_held` is back to 0 is raised by the handler where it lands."""
    global _held, _pending
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending is not None:
            error, _pending = _pending, None
            raise error


def arrived(error: BaseException) -> bool:
    """A signal handler's exception: kept for the next safe point (True) when z3 may be at work, else False (the
    handler raises it where it is)."""
    global _pending
    if not _held:
        return False
    if _pending is None:
        _pending = error
    return True


def safe_point() -> None:
    """Raise the exception a signal left while z3 was at work, if any."""
    global _pending
    if _pending is not None:
        error, _pending = _pending, None
        raise error
