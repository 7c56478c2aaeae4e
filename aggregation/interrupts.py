"""Signals that arrive while z3 works wait for a safe point.

z3's Python API calls into C through ctypes and frees its objects in `__del__`: an exception raised from a signal
handler in the middle of that (an argument's conversion, a reference count's release) turns into a ctypes
`ArgumentError`, an "Exception ignored" traceback, or a context z3 can no longer use. So while the prover or a region
map runs (`holding`), the CLI's handler hands its exception here instead of raising it, and the next safe point
(`safe_point`: before and after each z3 check, between paths) raises it. z3's own Ctrl-C handling is switched off
(the solver's `ctrl_c` parameter, `prove.Solver`): it would swallow the first SIGINT as a cancelled check, which
would read as UNKNOWN.

A Python-level handler runs only between bytecodes, so one long check (up to its timeout, a minute) would keep a
Ctrl-C waiting. While `holding`, CPython's C-level handler also writes each signal to a pipe (`signal.set_wakeup_fd`)
that a watcher thread reads at once: it cancels the check running (`cancellable`: z3's `Context.interrupt`, which
z3 allows from another thread), the check returns unknown, and the safe point right after it raises the signal's
exception before anything reads that unknown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Callable, Iterable, Iterator, Optional

_held = 0
_pending: Optional[BaseException] = None
#: what stops the z3 check now running (its context's `interrupt`), set by `cancellable`
_cancel: Optional[Callable[[], None]] = None
#: set when the main thread has taken a signal (`arrived`): the watcher then stops cancelling
_taken = threading.Event()
#: how often the watcher repeats a cancel until the signal is taken: a cancel that lands between two checks, or
#: before z3 has begun the next, is lost, and the next check would run to its timeout
RECANCEL_SECONDS = 0.05


class _SignalWatcher:
    """A thread that hears each of `watched` signals as it arrives and cancels the z3 check under way until the main
    thread has taken the signal (or the holding ends)."""

    def __init__(self, watched: frozenset[int]) -> None:
        self._watched = watched
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # set_wakeup_fd requires it: a signal handler must never block
        self._previous = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aggsim-signal-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while arrived_signals := os.read(self._read, 512):  # b"": the write end is closed, the holding is over
            if self._watched.isdisjoint(arrived_signals):  # another handler's signal: no check is to stop for it
                continue
            while not (_taken.is_set() or self._stopped.is_set()):
                cancel = _cancel
                if cancel is not None:
                    cancel()
                _taken.wait(RECANCEL_SECONDS)

    def stop(self) -> None:
        signal.set_wakeup_fd(self._previous)  # first: no handler may write to a closed descriptor
        self._stopped.set()
        os.close(self._write)
        self._thread.join()
        os.close(self._read)


_watcher: Optional[_SignalWatcher] = None


@contextlib.contextmanager
def cancellable(cancel: Callable[[], None]) -> Iterator[None]:
    """A z3 check runs inside: a signal that arrives meanwhile calls `cancel` from the watcher thread."""
    global _cancel
    _cancel = cancel
    try:
        yield
    finally:
        _cancel = None


@contextlib.contextmanager
def holding(watched: Iterable[int]) -> Iterator[None]:
    """While inside, `arrived` keeps a signal's exception for the next safe point. On the way out a kept one is
    raised whatever ended the body (an error the body raised is its context): a signal is never lost, nor left for
    a later `holding`. One that comes after `_held` is back to 0 is raised by the handler where it lands."""
    global _held, _pending, _watcher
    _held += 1
    if _held == 1 and threading.current_thread() is threading.main_thread():  # set_wakeup_fd: main thread only
        _taken.clear()
        _watcher = _SignalWatcher(frozenset(watched))
    try:
        yield
    finally:
        _held -= 1
        if not _held and _watcher is not None:
            _watcher.stop()
            _watcher = None
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
    _taken.set()
    return True


def safe_point() -> None:
    """Raise the exception a signal left while z3 was at work, if any."""
    global _pending
    if _pending is not None:
        error, _pending = _pending, None
        raise error
