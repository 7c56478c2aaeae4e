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
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Optional

from flytekit.core.base_task import IgnoreOutputs
from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException
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


def refine_first_failure_timestamp(first_failure: Any) -> Optional[float]:
    """A sub-second stamp for torch's first worker failure, when one can be trusted.

    torch stamps a worker failure with `int(time.time())` (the `@record` error file, or the agent's
    detection time): whole seconds, truncated. A survivor whose worker failed *because* a peer pod was
    signalled at t0 + 0.2 is then stamped t0, up to a second before the signal it was caused by, and wins
    the earliest-error aggregation against the true first failure. The worker's error file is written at
    the moment of failure, so its mtime carries the sub-second part. We use it only when it agrees with
    torch's stamp to the second (same whole second); otherwise (no error file, clock skew, a file
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
    if int(mtime) == int(stamp):
        return mtime
    return float(stamp)


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
                raise recoverable_error_for_signal(signal_exc, received_at) from signal_exc
            except (FlyteRecoverableException, FlyteUserRuntimeException) as failed:
                child_failure = _child_failure_behind(failed)
                if child_failure is None:
                    raise
                first_failure, stamp = first_failure_by_refined_stamps(child_failure)
                if stamp is None:
                    raise
                if is_recoverable_worker_error(first_failure) == isinstance(failed, FlyteRecoverableException):
                    failed._timestamp = stamp  # flytekit's FlyteException keeps it here
                    raise
                # torch's whole-second tie picked a collateral failure; the true first one decides the kind,
                # by upstream's own rule (recoverable iff the first failure is).
                if is_recoverable_worker_error(first_failure):
                    raise FlyteRecoverableException(child_failure.format_msg(), timestamp=stamp) from child_failure
                raise FlyteUserRuntimeException(child_failure, timestamp=stamp) from child_failure


class Elastic(UpstreamElastic):
    """Drop-in for `flytekitplugins.kfpytorch.Elastic`: tasks declared with it run as `RecoverableElasticTask`.

    Change `from flytekitplugins.kfpytorch import Elastic` to `from plugin import Elastic`; nothing else.
    """
