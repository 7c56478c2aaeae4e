"""When did this process *receive* a signal?

torch's `SignalException` carries only the signal number. By the time it reaches the plugin, the
elastic agent has already shut its workers down, which can take the whole `shutdown_timeout`
(30 s by default). A timestamp taken there is late, and a late stamp lets a sibling pod's
consequential error win propeller's earliest-error aggregation.

`SignalClock` has the kernel stamp each arrival. CPython's public `signal.set_wakeup_fd` makes the
C-level signal trampoline write the signal number to a descriptor the moment the signal arrives
(even while the main thread is blocked in C code), whichever Python handler is installed, torch's
included. That descriptor is one end of a Unix datagram socket pair whose other end asks for
receive timestamps (`SO_TIMESTAMPNS`), so each signal's byte is stamped by the kernel as it is
written. Nothing runs until the plugin asks, and nothing in torch is patched. (A thread that stamped
the byte with `time.time()` needed the GIL first, so a main thread holding it in a long C call made
the stamp as late; measured, in a real agent under libfaketime it stamped ~175 ms after the signal.)

The kernel says how long ago the signal arrived; the answer is given on this process's clock,
`time.time()`, which flytekit stamps its errors with: a probe datagram sent when asked carries the
kernel's "now". On a node the two clocks are one; a process whose clock is shifted in user space
(libfaketime, as this project's real runs put a pod on a skewed node) still gets its own clock's time.

Limits, by construction of `set_wakeup_fd`: it only sees signals that have a Python-level handler
(torch installs them for the signals it handles; `rendezvous_window_handlers` covers the time
before that), and it must be set up from the main thread. Elsewhere, or where the kernel does not
stamp Unix datagrams (checked with a probe on entry; off Linux), the clock is inert and callers fall
back to the time they catch the exception. The socket's buffer holds a few hundred signals (measured:
278) until the plugin asks; later ones are lost, which cannot hide a first arrival.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Optional

#: The signals torch elastic converts into `SignalException` unless told otherwise.
DEFAULT_TORCHELASTIC_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"

#: Linux's `SO_TIMESTAMPNS` (`asm-generic/socket.h`; Python 3.11's socket module does not name it). Its
#: control message has the same number and carries a `struct timespec`; `SignalClock` checks both with a probe.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@ll")
#: what `SignalClock` sends itself to read the kernel's clock: no signal has the number 0
_PROBE = b"\0"
#: a probe whose sending took longer than this (the process was descheduled around it) is tried again, up to
#: `_PROBE_TRIES` times: the kernel's clock is read to within half the time the kept probe's sending took
_PROBE_GAP_NS = 50_000
_PROBE_TRIES = 5

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
    """Records the arrival time of every signal this process receives while active.

    Use as a context manager from the main thread::

        with SignalClock() as clock:
            ...
            clock.first_arrival(signal.SIGTERM)  # float seconds since the epoch, or None
    """

    def __init__(self) -> None:
        self._arrivals: list[tuple[int, int]] = []  # (signal number, the kernel's stamp in ns), in arrival order
        self._receiver: Optional[socket.socket] = None
        self._sender: Optional[socket.socket] = None
        self._previous_wakeup_fd: Optional[int] = None
        self.active = False

    def __enter__(self) -> "SignalClock":
        global _active_clock_pid
        if threading.current_thread() is not threading.main_thread():
            return self  # set_wakeup_fd is main-thread only: stay inert
        try:
            self._receiver, self._sender = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            for end in (self._receiver, self._sender):
                end.setblocking(False)  # set_wakeup_fd requires it: a signal handler must never block
            self._receiver.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            stamps = self._clocks_now()[0] is not None
        except (OSError, AttributeError):  # no descriptors left; no AF_UNIX (Windows)
            stamps = False
        if not stamps:
            self._close_sockets()
            return self
        self._previous_wakeup_fd = signal.set_wakeup_fd(self._sender.fileno(), warn_on_full_buffer=False)
        _active_clock_pid = os.getpid()
        self.active = True
        return self

    def _clocks_now(self) -> tuple[Optional[int], int]:
        """The kernel's clock and this process's (`time.time_ns()`) read together, from a probe's stamp and the
        times around its sending (None for the kernel's if it did not stamp); signals before it are recorded."""
        best: tuple[Optional[int], int] = (None, 0)
        narrowest = None
        for _ in range(_PROBE_TRIES):
            self._receive()  # room for the probe, whatever signals filled the buffer
            before = time.time_ns()
            try:
                self._sender.send(_PROBE)
            except BlockingIOError:  # a flood of signals refilled the buffer: no reading now
                break
            after = time.time_ns()
            stamp = self._receive(until_probe=True)
            if stamp is None:
                return None, before
            if narrowest is None or after - before < narrowest:
                best, narrowest = (stamp, (before + after) // 2), after - before
            if narrowest <= _PROBE_GAP_NS:
                break
        return best

    def _receive(self, until_probe: bool = False) -> Optional[int]:
        """Record the signals waiting in the socket; with `until_probe`, return the probe's stamp (None unstamped)."""
        while True:
            try:
                data, control, _, _ = self._receiver.recvmsg(64, socket.CMSG_SPACE(_TIMESPEC.size))
            except BlockingIOError:
                return None
            stamp = None
            for level, kind, payload in control:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(payload) >= _TIMESPEC.size:
                    seconds, nanoseconds = _TIMESPEC.unpack(payload[: _TIMESPEC.size])
                    stamp = seconds * 10**9 + nanoseconds
            if data == _PROBE:
                if until_probe:
                    return stamp
            elif stamp is not None:
                self._arrivals.extend((signum, stamp) for signum in data)

    def __exit__(self, *exc_info: object) -> None:
        global _active_clock_pid
        if not self.active:
            return
        signal.set_wakeup_fd(self._previous_wakeup_fd if self._previous_wakeup_fd is not None else -1)
        _active_clock_pid = None
        self._close_sockets()
        self.active = False

    def _close_sockets(self) -> None:
        for end in (self._receiver, self._sender):
            if end is not None:
                end.close()
        self._receiver = self._sender = None

    def first_arrival(self, signum: int) -> Optional[float]:
        """Seconds since the epoch, on this process's clock, when `signum` first arrived; None if it was not seen."""
        if not self.active:
            return None
        try:
            kernel_now, own_now = self._clocks_now()
        except OSError:  # whatever the socket says, the plugin falls back to the time it caught the signal
            return None
        if kernel_now is None:
            return None
        for seen, stamp in self._arrivals:
            if seen == int(signum):
                return (own_now - (kernel_now - stamp)) / 1e9
        return None


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
