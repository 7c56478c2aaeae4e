"""When did this process *receive* a signal?

torch's `SignalException` carries only the signal number. By the time it reaches the plugin, the
elastic agent has already shut its workers down, which can take the whole `shutdown_timeout`
(30 s by default). A timestamp taken there is late, and a late stamp lets a sibling pod's
consequential error win propeller's earliest-error aggregation.

`SignalClock` records arrival times with CPython's public `signal.set_wakeup_fd`: the C-level
signal trampoline writes the signal number into a pipe the moment the signal arrives (even while the
main thread is blocked in C code), whichever Python handler is installed, torch's included. A
daemon thread reads the pipe and stamps each byte with `time.time()`. Nothing in torch is patched.

Limits, by construction of `set_wakeup_fd`: it only sees signals that have a Python-level handler
(torch installs them for the signals it handles; `rendezvous_window_handlers` covers the time
before that), and it must be set up from the main thread; elsewhere the clock is inert and callers
fall back to the time they catch the exception.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Optional

#: The signals torch elastic converts into `SignalException` unless told otherwise.
DEFAULT_TORCHELASTIC_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"

_active_clock_pid: Optional[int] = None


def _forget_clock_in_child() -> None:
    # A forked worker (start_method="fork") inherits the wakeup fd: its own SIGTERM from the agent's
    # shutdown would otherwise be recorded as if the agent had received it.
    global _active_clock_pid
    if _active_clock_pid is not None and _active_clock_pid != os.getpid():
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:  # not the main thread of the child: nothing we can do, nothing recorded
            pass
        _active_clock_pid = None


os.register_at_fork(after_in_child=_forget_clock_in_child)


class SignalClock:
    """Records the wall-clock arrival time of every signal this process receives while active.

    Use as a context manager from the main thread::

        with SignalClock() as clock:
            ...
        clock.first_arrival(signal.SIGTERM)  # float seconds since the epoch, or None
    """

    def __init__(self) -> None:
        self._arrivals: list[tuple[int, float]] = []
        self._lock = threading.Lock()
        self._read_fd = -1
        self._write_fd = -1
        self._previous_wakeup_fd: Optional[int] = None
        self._thread: Optional[threading.Thread] = None
        self.active = False

    def __enter__(self) -> "SignalClock":
        global _active_clock_pid
        if threading.current_thread() is not threading.main_thread():
            return self  # set_wakeup_fd is main-thread only: stay inert
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        self._previous_wakeup_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        _active_clock_pid = os.getpid()
        self._thread = threading.Thread(target=self._read_arrivals, name="aggsim-signal-clock", daemon=True)
        self._thread.start()
        self.active = True
        return self

    def _read_arrivals(self) -> None:
        while True:
            try:
                data = os.read(self._read_fd, 64)
            except OSError:
                return
            if not data:  # write end closed: the clock was stopped
                return
            now = time.time()
            with self._lock:
                self._arrivals.extend((signum, now) for signum in data)

    def __exit__(self, *exc_info: object) -> None:
        global _active_clock_pid
        if not self.active:
            return
        signal.set_wakeup_fd(self._previous_wakeup_fd if self._previous_wakeup_fd is not None else -1)
        _active_clock_pid = None
        os.close(self._write_fd)
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        os.close(self._read_fd)
        self.active = False

    def first_arrival(self, signum: int) -> Optional[float]:
        """Seconds since the epoch when `signum` first arrived, or None if it was not seen."""
        # The reader thread may lag the main thread by a scheduling quantum: give it a moment.
        deadline = time.monotonic() + 0.2
        while True:
            with self._lock:
                for seen, when in self._arrivals:
                    if seen == int(signum):
                        return when
            if not self.active or time.monotonic() >= deadline:
                return None
            time.sleep(0.005)


def torchelastic_signals() -> list[signal.Signals]:
    """The signals torch elastic's `PContext.start` turns into `SignalException` (same env variable)."""
    names = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE", DEFAULT_TORCHELASTIC_SIGNALS)
    found = []
    for name in names.split(","):
        sig = getattr(signal, name.strip(), None)
        if isinstance(sig, signal.Signals):
            found.append(sig)
    return found


@contextmanager
def rendezvous_window_handlers(
    make_exception: Callable[[signal.Signals], BaseException],
) -> Iterator[None]:
    """Handle torch's signals until torch installs its own handlers, then restore the originals.

    torch installs its handlers in `PContext.start()`, i.e. after the first rendezvous. Before that,
    SIGTERM has its default disposition and kills the agent outright (exit 143, no error file).
    Installing a handler that raises torch's own `SignalException` makes that window behave like
    the rest of the run. torch replaces these handlers when it starts the workers; on exit we restore
    whatever was installed before, so the process is left as we found it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Optional[FrameType]) -> None:
        raise make_exception(signal.Signals(signum))

    previous = {}
    for sig in torchelastic_signals():
        try:
            previous[sig] = signal.signal(sig, handler)
        except (OSError, ValueError):
            continue
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
