"""Independent pieces of work on several cores, their results handed back in order (a long sweep's points, the
cells of an exact region map, the README's proofs).

`ordered_map(work, items, processes)` runs `work(item)` in worker processes and yields `(item, result)` in the
items' order, so whoever merges the results sees exactly what one process would have produced. At most a few items
per process are in flight: a million-point sweep never holds its plan or its results in memory.

The workers leave Ctrl-C and a closed terminal to the parent: SIGINT and SIGHUP reach the whole process group, and
each worker would print its own traceback (or, for multiprocessing's resource tracker, die and be relaunched with a
warning). So the stopping signals are blocked while a process is started (`_held`): the child starts with them
blocked, a worker then ignores SIGINT and SIGHUP (`_start_worker`), and the resource tracker ignores SIGINT and
SIGTERM and keeps SIGHUP blocked. A worker keeps SIGTERM's default, a quiet end: the executor stops the workers of a
broken pool with it (`terminate_broken`), and waits for ever for one that ignores it. The parent's handler (the
CLI's) stops the map: its exception reaches the wait for a result (`_result`, which also raises one the prover's
`interrupts.holding` kept), and the `with` block waits for the items handed out (at most `IN_FLIGHT_PER_PROCESS`
per worker; they are not cancelled, as Python 3.11's executor fails on a future cancelled while it marks a broken
pool's) and reaps every worker, so "every process it started is stopped" holds. (SIGTERM to the workers at once
was tried, 2026-12-07: one CI run hung in the executor's shutdown after a Ctrl-C.) A worker whose
parent dies without that (SIGKILL) is killed by the kernel (Linux's parent-death signal) instead of running on as
an orphan.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import signal
import sys
from concurrent import futures
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterable, Iterator, TypeVar

from aggregation.interrupts import safe_point

Item = TypeVar("Item")
Result = TypeVar("Result")

#: items each worker may have waiting for it: enough to keep it busy while the parent merges, few enough that a
#: stopped map waits for little
IN_FLIGHT_PER_PROCESS = 2
#: how often a parent waiting for a result looks for a signal kept for a safe point (`interrupts.holding`)
SAFE_POINT_SECONDS = 0.1
#: the signals that stop a command (the CLI's `INTERRUPTING_SIGNALS`): the parent's to handle, never a worker's
_STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Linux's prctl(PR_SET_PDEATHSIG): the signal the kernel sends this process when its parent exits
_PR_SET_PDEATHSIG = 1

_work: Callable | None = None


class WorkerDied(RuntimeError):
    """A worker process ended without finishing its work (killed from outside, e.g. by the OOM killer)."""


def ordered_map(work: Callable[[Item], Result], items: Iterable[Item], processes: int) -> Iterator[tuple[Item, Result]]:
    """`(item, work(item))` for each item, in order, computed by `processes` worker processes. `work` is pickled once
    per worker (a module-level function, or an object whose class is importable); an exception `work` raises is
    raised here, at its item's place in the order."""
    context = multiprocessing.get_context("spawn")  # a fork would copy the parent's threads' locks (rich's refresh)
    starting = {"initializer": _start_worker, "initargs": (work, os.getpid())}
    try:
        with _held():  # its queues start multiprocessing's resource tracker (a process) the first time
            pool = ProcessPoolExecutor(processes, mp_context=context, **starting)
    except OSError:  # no POSIX semaphores here (a sandbox without /dev/shm): this process does the work itself
        for item in items:
            yield item, work(item)
        return
    with pool:
        pending: collections.deque = collections.deque()
        try:
            for item in items:
                with _held():  # a submit may start a worker
                    pending.append((item, pool.submit(_run, item)))
                if len(pending) >= processes * IN_FLIGHT_PER_PROCESS:
                    item, future = pending.popleft()
                    yield item, _result(future)
            while pending:
                item, future = pending.popleft()
                yield item, _result(future)
        except BrokenProcessPool:
            raise WorkerDied("a worker process of the sweep died before finishing its work") from None


def _result(future):
    """The item's result. The wait is a safe point (`interrupts`): a command that runs z3 keeps a signal for the
    next one, and here z3 runs in the workers, so the signal is raised within `SAFE_POINT_SECONDS`."""
    while True:
        try:
            return future.result(timeout=SAFE_POINT_SECONDS)
        except futures.TimeoutError:  # the builtin one from Python 3.11, its own class on 3.10
            safe_point()


@contextlib.contextmanager
def _held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait while a process is started (a child inherits the mask; one that arrives
    meanwhile is handled here as soon as the block ends)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _start_worker(work: Callable, parent: int) -> None:
    global _work
    _work = work
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # the terminal's signals are the parent's; it stops and reaps us
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPPING)  # blocked since the start (`_held`)
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the prctl took effect: nobody is waiting for us
            os._exit(1)


def _run(item):
    return _work(item)
