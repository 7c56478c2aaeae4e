"""The recoverable elastic task: flytekit's `PytorchElasticFunctionTask`, minus the silent success.

Upstream (flytekitplugins-kfpytorch 1.16, `PytorchElasticFunctionTask._execute`) turns torch's
`SignalException` into `IgnoreOutputs`: a preempted pod uploads nothing and exits 0, the PyTorchJob
is Succeeded, and propeller finds no error file. This subclass composes with the upstream class
instead of copying it: it runs the upstream `_execute` and translates only what it must.

- An `IgnoreOutputs` whose context is a `SignalException` becomes a `FlyteRecoverableException`
  (USER/RECOVERABLE in the error document), chained from the `SignalException`, stamped with the
  time the agent *received* the signal (see `signal_clock`), not the time the exception reached us.
- An `IgnoreOutputs` without a signal behind it (a worker group whose global rank 0 is elsewhere
  succeeded) passes through unchanged.
- A `ChildFailedError`-derived exception follows upstream's rule (recoverable iff the first failure
  is), but "first" and its stamp are judged with sub-second precision: torch's whole-second stamps
  are refined with the worker error files' mtimes when they agree to the second
  (see `refine_first_failure_timestamp` and `first_failure_by_refined_stamps`).
- A signal during the first rendezvous, before torch installs its handlers, raises the same
  `SignalException` torch would have raised, so it ends the same way instead of killing the agent.

Correct under both of propeller's readers (aggregation off: every pod writes `error.pb` and the last
writer wins; on: the earliest stamp wins, from clocks that disagree):

- A *consequence* (this pod's own signal, or a worker failure caused by a peer pod's disappearance) is
  never reported over a sibling's report: if an error file holding an error document already sits under
  the output prefix, the pod raises `IgnoreOutputs` and leaves it standing. The order of real writes, not
  of clock stamps, decides; a genuine error is always reported.
- A *collateral* worker failure (gloo "Connection closed/reset by peer", NCCL remote errors, a c10d
  network error, a rendezvous closed or timed out while waiting for a lost peer) is reported RECOVERABLE,
  stamped when it is reported, but only after waiting `sibling_wait_seconds` (looking at the prefix every
  half second; a SIGTERM cuts the wait short) for a sibling's report. `Elastic(collateral_failures=
  "upstream")` restores upstream's classification.

What remains is the check-then-write window: a sibling's report that lands after a consequence's last look
and before its own `error.pb` lands is overwritten when aggregation is off. Each decision is logged with the
moment of that look (`DECISION_FORMAT`), and `aggsim calibrate` measures the window from it with real pods
(a few milliseconds on a local disk, plus a PUT's latency on an object store).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional

from flytekit.core.base_task import IgnoreOutputs
from flytekit.core.context_manager import FlyteContextManager
from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException
from flytekit.loggers import logger
from flytekitplugins.kfpytorch.error_handling import is_recoverable_worker_error
from flytekitplugins.kfpytorch.task import Elastic as UpstreamElastic
from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask

from plugin.signal_clock import SignalClock, rendezvous_window_handlers


def _signal_behind(exc: BaseException) -> Optional[BaseException]:
    """The torch `SignalException` an exception was raised while handling, if any."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    seen = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, SignalException):
            return current
        current = current.__cause__ or current.__context__
    return None


def _child_failure_behind(exc: BaseException):
    """The torch `ChildFailedError` an exception was raised while handling, if any."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    context = exc.__cause__ or exc.__context__
    return context if isinstance(context, ChildFailedError) else None


def signal_name(sigval: int) -> str:
    try:
        return signal.Signals(sigval).name
    except ValueError:
        return f"signal {sigval}"


def recoverable_error_for_signal(signal_exc: BaseException, received_at: Optional[float]) -> FlyteRecoverableException:
    """The exception this plugin raises when the elastic agent was signalled."""
    name = signal_name(getattr(signal_exc, "sigval", 0))
    message = (
        f"The elastic agent received {name}; the worker group was terminated before it finished "
        f"(preemption, eviction or node shutdown). Recoverable: a retry resumes from the last checkpoint."
    )
    return FlyteRecoverableException(message, timestamp=received_at if received_at is not None else time.time())


#: How far a file's mtime may trail the `time.time()` of its write: Linux takes file times from its coarse clock
#: (`current_time()`; since 6.13 only for a file nobody looked at since its last change), a tick behind at most,
#: 4 ms at HZ=250; 7 ms measured on a loaded 2-core VM, with room to spare.
FILE_TIME_GRAIN_SECONDS = 0.02


def refine_first_failure_timestamp(first_failure: Any) -> Optional[float]:
    """A sub-second stamp for torch's first worker failure, when one can be trusted.

    torch stamps a worker failure with `int(time.time())` (the `@record` error file, or the agent's
    detection time): whole seconds, truncated. A survivor whose worker failed *because* a peer pod was
    signalled at t0 + 0.2 is then stamped t0, up to a second before the signal it was caused by, and wins
    the earliest-error aggregation against the true first failure. The worker's error file is written at
    the moment of failure, so its mtime carries the sub-second part. We use it only when it agrees with
    torch's stamp to the second: in the same whole second, or up to `FILE_TIME_GRAIN_SECONDS` before it, since
    Linux may stamp a file from its coarse clock, which trails `time.time()` by up to a tick or two (a failure
    just after a whole second can have an mtime just before it). Otherwise (no error file, clock skew, a file
    rewritten later) torch's stamp stands.
    """
    stamp = getattr(first_failure, "timestamp", None)
    if stamp is None:
        return None
    error_file = getattr(first_failure, "error_file", None)
    if not error_file:
        return float(stamp)
    try:
        mtime = os.stat(error_file).st_mtime_ns / 1e9
    except OSError:
        return float(stamp)
    second = int(stamp)
    if second - FILE_TIME_GRAIN_SECONDS <= mtime < second + 1:
        return mtime
    return float(stamp)


def with_unreported_local_failures(child_failure: Any) -> Any:
    """`child_failure` plus the failures of this pod's other workers that torch's monitor did not report.

    The agent reports the workers that had exited when it looked, then terminates the rest. A worker that
    raised first but was still exiting (writing its error file, shutting the interpreter down) is missing,
    while the peer whose collective broke because of it (gloo "Connection closed by peer", often a quick
    SIGABRT) is there. Every local rank's `@record` error file sits in its own directory next to the reported
    ones (`<log dir>/attempt_<n>/<local rank>/error.json`); a rank with an error file and no reported failure
    is added, read by torch's own `ProcessFailure`. Returns a new `ChildFailedError` when anything was added.
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    failures = dict(child_failure.failures)
    reported_dirs = {
        os.path.dirname(os.path.dirname(f.error_file)) for f in failures.values() if os.path.isabs(f.error_file or "")
    }
    known_local_ranks = {f.local_rank for f in failures.values()}
    ranks_per_dir = {rank - f.local_rank for rank, f in failures.items()}  # global rank of local rank 0
    if len(reported_dirs) != 1 or len(ranks_per_dir) != 1:
        return child_failure  # not one worker group's layout: leave torch's report as it is
    attempt_dir, base_rank = reported_dirs.pop(), ranks_per_dir.pop()
    try:
        names = os.listdir(attempt_dir)
    except OSError:
        return child_failure
    added = False
    for name in sorted(names):
        error_file = os.path.join(attempt_dir, name, "error.json")
        if not name.isdigit() or int(name) in known_local_ranks or not os.path.isfile(error_file):
            continue
        local_rank = int(name)
        failure = ProcessFailure(local_rank=local_rank, pid=-1, exitcode=1, error_file=error_file)
        failures[base_rank + local_rank] = failure
        added = True
    return ChildFailedError(child_failure.name, failures) if added else child_failure


def first_failure_by_refined_stamps(child_failure: Any) -> tuple[Any, Optional[float]]:
    """The worker failure that happened first, and its stamp, judged with sub-second stamps.

    torch's `ChildFailedError.get_first_failure` takes the smallest whole-second stamp; failures in the
    same second tie and the lowest rank wins, often a collateral failure (a gloo "Connection reset" on
    rank 0 because rank 1 raised). When every failure's stamp can be refined, the earliest refined one is
    the first; otherwise torch's choice stands, with its stamp refined where possible.
    """
    _, torch_first = child_failure.get_first_failure()
    refined = [(refine_first_failure_timestamp(f), f) for f in child_failure.failures.values()]
    if refined and all(stamp is not None and stamp != int(stamp) for stamp, _ in refined):
        stamp, first = min(refined, key=lambda pair: pair[0])
        return first, stamp
    return torch_first, refine_first_failure_timestamp(torch_first)


#: What a worker's failure message says when a peer pod vanished under it (gloo, NCCL, c10d, rendezvous).
PEER_LOSS_SIGNS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "typically caused by a remote worker crashing",
    "NCCL communicator was aborted",
    "ncclRemoteError",
    "remote process exited or there was a network error",
    "DistNetworkError",
    "RendezvousClosedError",
    "RendezvousConnectionError",
    "RendezvousTimeoutError",
)

COLLATERAL_MESSAGE = (
    "A worker failed because a peer pod's workers are gone (most likely the peer was preempted or failed): {cause}. "
    "Recoverable: a retry resumes from the last checkpoint."
)


def is_collateral_failure(failure: Any) -> bool:
    """Whether torch's first worker failure reads like a consequence of a peer pod's disappearance."""
    message = getattr(failure, "message", failure)
    text = message if isinstance(message, str) else repr(message)
    return any(sign in text for sign in PEER_LOSS_SIGNS)


@dataclass(frozen=True)
class Look:
    """One look under the output prefix for a sibling's report: what was found, and when the look began."""

    prefix: Optional[str]
    sibling: Optional[str]
    at: float  # time.time() before the listing: a file landing after this moment may be missed

    def log_decision(self, reporting: str) -> None:
        """One line in the pod's log saying what the pod does and when it last looked (see DECISION_PATTERN)."""
        if self.sibling is not None:
            decision = f"leaves {self.sibling} standing"
        else:
            decision = f"reports {reporting}: no sibling's report"
        logger.warning(DECISION_FORMAT.format(decision=decision, prefix=self.prefix, at=self.at))


#: The pod's log line for a report-or-yield decision. Between `at` and this pod's own error file landing, a
#: sibling's report can still arrive and, with aggregation off, be overwritten: the check-then-write window
#: (`aggsim calibrate` measures it from this line and the file's mtime).
DECISION_FORMAT = "aggsim plugin: {decision} (looked under {prefix} at {at:.6f})"
DECISION_PATTERN = re.compile(r"aggsim plugin: (?P<decision>.+?) \(looked under .* at (?P<at>[0-9]+\.[0-9]{6})\)")


def look_for_sibling_report(prefix: Optional[str]) -> Look:
    at = time.time()
    return Look(prefix, sibling_report(prefix), at)


def sibling_report(prefix: Optional[str]) -> Optional[str]:
    """The name of an error file under `prefix` that holds an error document (a sibling's report), if any.

    This pod has written nothing yet (flytekit's entrypoint writes after `_execute` returns), and each
    attempt has its own prefix, so any such file is another pod's. A file that does not decode is no report.
    """
    from flyteidl.core.errors_pb2 import ErrorDocument

    if not prefix:
        return None
    base = prefix.rstrip("/")
    try:
        fs = FlyteContextManager.current_context().file_access.get_filesystem_for_path(base)
        names = fs.ls(base, detail=False)
    except (FileNotFoundError, OSError):
        return None
    for name in sorted(str(n) for n in names):
        key = name.rstrip("/").rsplit("/", 1)[-1]
        if not (key.startswith("error") and key.endswith(".pb")):
            continue
        try:
            document = ErrorDocument()
            document.ParseFromString(fs.cat_file(name))
        except Exception:  # unreadable or not a document: no report to leave standing
            continue
        if document.HasField("error"):
            return key
    return None


def wait_for_sibling_report(prefix: Optional[str], wait: float, poll: float = 0.5) -> Look:
    """Look for a sibling's report every `poll` s for up to `wait` s; a SIGTERM or SIGINT ends the wait early.

    Returns the last look: the one that found a report, or the one after which the pod reports its own."""
    interrupted = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: interrupted.set())
    try:
        deadline = time.monotonic() + wait
        while True:
            look = look_for_sibling_report(prefix)
            if look.sibling is not None or interrupted.is_set():
                return look
            left = deadline - time.monotonic()
            if left <= 0:
                return look
            interrupted.wait(min(poll, left))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _output_prefix() -> Optional[str]:
    """Where this attempt's pods upload their error files (flytekit's `--output-prefix`)."""
    import flytekit

    return flytekit.current_context().output_metadata_prefix


class RecoverableElasticTask(PytorchElasticFunctionTask):
    """`PytorchElasticFunctionTask` whose preempted pods report a recoverable, timestamped error."""

    def _execute(self, **kwargs) -> Any:
        from torch.distributed.elastic.multiprocessing.api import SignalException

        def torch_signal_exception(sig: signal.Signals) -> BaseException:
            return SignalException(f"Process {os.getpid()} got signal: {sig}", sigval=sig)

        with SignalClock() as clock, rendezvous_window_handlers(torch_signal_exception):
            try:
                return super()._execute(**kwargs)
            except IgnoreOutputs as ignored:
                signal_exc = _signal_behind(ignored)
                if signal_exc is None:
                    raise  # rank 0 lives in another worker group: upstream behaviour, unchanged
                received_at = clock.first_arrival(signal_exc.sigval)
                look = look_for_sibling_report(self._prefix())
                look.log_decision("its preemption")
                if look.sibling is not None:  # a consequence: the sibling's report stands
                    raise IgnoreOutputs(f"{look.sibling} already reports this attempt's failure") from signal_exc
                raise recoverable_error_for_signal(signal_exc, received_at) from signal_exc
            except (FlyteRecoverableException, FlyteUserRuntimeException) as failed:
                reported = _child_failure_behind(failed)
                if reported is None:
                    raise
                child_failure = with_unreported_local_failures(reported)
                first_failure, stamp = first_failure_by_refined_stamps(child_failure)
                if self._collateral_recoverable() and is_collateral_failure(first_failure):
                    self._report_collateral(getattr(first_failure, "message", ""), child_failure)
                if stamp is None:
                    raise
                same_kind = is_recoverable_worker_error(first_failure) == isinstance(failed, FlyteRecoverableException)
                if child_failure is reported and same_kind:
                    failed._timestamp = stamp  # flytekit's FlyteException keeps it here
                    raise
                # torch's whole-second tie, or its monitor, picked a collateral failure; the true first one
                # decides the kind, by upstream's own rule (recoverable iff the first failure is).
                if is_recoverable_worker_error(first_failure):
                    raise FlyteRecoverableException(child_failure.format_msg(), timestamp=stamp) from child_failure
                raise FlyteUserRuntimeException(child_failure, timestamp=stamp) from child_failure
            except Exception as other:
                from torch.distributed.elastic.rendezvous.api import RendezvousError

                # the agent gave up on a rendezvous whose peer is gone: a consequence, too
                if self._collateral_recoverable() and isinstance(other, RendezvousError):
                    self._report_collateral(f"{type(other).__name__}: {other}", other)
                raise

    def _prefix(self) -> Optional[str]:
        try:
            return _output_prefix()
        except AttributeError:  # no execution context (a local call): no siblings
            return None

    def _collateral_recoverable(self) -> bool:
        return getattr(self.task_config, "collateral_failures", "recoverable") == "recoverable"

    def _report_collateral(self, cause: Any, failure: BaseException) -> None:
        """Wait for a sibling's report; leave it standing if one comes, else report this failure recoverable."""
        wait = float(getattr(self.task_config, "sibling_wait_seconds", DEFAULT_SIBLING_WAIT_SECONDS))
        look = wait_for_sibling_report(self._prefix(), wait)
        look.log_decision("a collateral failure")
        if look.sibling is not None:
            raise IgnoreOutputs(f"{look.sibling} already reports this attempt's failure") from failure
        text = cause if isinstance(cause, str) else repr(cause)
        raise FlyteRecoverableException(COLLATERAL_MESSAGE.format(cause=text), timestamp=time.time()) from failure


#: A collateral failure's wait for a sibling's report: a sibling's agent notices its own first failure within
#: flytekit's Elastic monitor_interval (5 s) and then uploads; 10 s covers both.
DEFAULT_SIBLING_WAIT_SECONDS = 10.0


@dataclass
class Elastic(UpstreamElastic):
    """Drop-in for `flytekitplugins.kfpytorch.Elastic`: tasks declared with it run as `RecoverableElasticTask`.

    Change `from flytekitplugins.kfpytorch import Elastic` to `from plugin import Elastic`; nothing else.

    `collateral_failures`: "recoverable" (default) reports a worker failure caused by a peer pod's
    disappearance as recoverable, after waiting `sibling_wait_seconds` for a sibling's report; "upstream"
    keeps upstream's classification (recoverable only if the worker raised FlyteRecoverableException).
    """

    collateral_failures: str = "recoverable"
    sibling_wait_seconds: float = DEFAULT_SIBLING_WAIT_SECONDS

    def __post_init__(self):
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        if self.collateral_failures not in ("recoverable", "upstream"):
            raise ValueError(
                f"collateral_failures must be 'recoverable' or 'upstream', got {self.collateral_failures!r}"
            )
        if not 0 <= self.sibling_wait_seconds < 3600:
            raise ValueError(f"sibling_wait_seconds must be within [0, 3600), got {self.sibling_wait_seconds}")
