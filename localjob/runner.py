"""A real PyTorchJob on this machine: the shared world and attempt loop, with real pods on the wall clock.

`run_local` is `aggregation.simulate.simulate` with `RealPods` instead of simulated ones: the kubelet,
the training operator, propeller's round and the attempt loop are the same code. A RETRY starts the next
attempt with `--prev-checkpoint` pointing at the previous attempt's checkpoint (flytekit's checkpoint API
does the rest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from aggregation.engine import DeadlineExceeded
from aggregation.execution import TooManyAttempts, run_execution
from aggregation.kinds import PluginVariant
from aggregation.results import Execution, Source
from aggregation.scenario import ScenarioSpec
from localjob.container import ContainerError, check_runnable
from localjob.pod import libfaketime_path
from localjob.realpods import ATTEMPT_TIMEOUT, LINGER_AFTER_VERDICT, START_TIMEOUT, LocalJobError, RealPods
from localjob.timebase import MOST_LEAD, barrier, first_action
from localjob.workloads import Workload

MAX_REAL_ATTEMPTS = 6
MAX_LOCAL_PODS = 8
# gloo workers on CPU: 8 pods x 4 processes fit in memory (about 0.3 GB each); what the load does to timings
# is for `aggsim calibrate` to measure, not for this limit to hide.
MAX_LOCAL_NPROC = 4
# what a real attempt has left for its scenario once its pods have started (at worst) and trained a little
WALL_PACED_SECONDS = ATTEMPT_TIMEOUT - START_TIMEOUT - MOST_LEAD


class Unplayable(LocalJobError):
    """The scenario cannot be played for real as the model plays it: refused before any pod starts (one line)."""


class OutlastsARealAttempt(Unplayable):
    """A simulated attempt runs longer after its first action than a real attempt has time for: known only once the
    model has played it (a survivor waiting out torch's exit barrier for a lost peer, say), so no scenario generator
    can keep to it by construction."""


def check_playable(spec: ScenarioSpec, start_method: Optional[str] = None) -> Workload:
    """The workload that plays `spec` for real; `Unplayable` (one line) if it cannot be played faithfully."""
    if spec.plugin is PluginVariant.SEED_PR:
        raise Unplayable("the seed-pr variant exists only in the simulator; run upstream or recoverable")
    nproc = spec.nproc_per_node
    if len(spec.pods) > MAX_LOCAL_PODS:
        raise Unplayable(f"job.pods: {len(spec.pods)} pods, more than the {MAX_LOCAL_PODS} a local job runs")
    if nproc > MAX_LOCAL_NPROC:
        raise Unplayable(
            f"job.nproc_per_node: {nproc} workers per pod, more than the {MAX_LOCAL_NPROC} a local pod runs"
        )
    lagging = sorted(pod for pod, timing in spec.timings.items() if timing.file_time_lag)
    if lagging:
        raise Unplayable(
            f"file_time_lag_seconds of {', '.join(lagging)}: a real file's mtime lags by what the kernel's "
            "coarse clock does, which a run cannot set"
        )
    skewed = sorted(pod for pod, timing in spec.timings.items() if timing.clock_offset)
    if skewed and libfaketime_path() is None:
        raise Unplayable(
            f"clock_offset_seconds of {', '.join(skewed)} needs libfaketime to give each pod its own "
            "clock: run .ci/system-packages (Debian package faketime)"
        )
    try:
        check_runnable(spec.entrypoint, list(spec.pods))
    except ContainerError as e:
        raise Unplayable(str(e)) from None
    from plugin.task import is_collateral_failure

    for index, events in enumerate(spec.attempts):
        for event in events:
            if event.kind == "worker_error" and is_collateral_failure(event.message):
                raise Unplayable(
                    f"attempts[{index}]: worker_error.message {event.message!r} reads like a peer's loss, which the "
                    "real plugin reports as a consequence while the simulator plays it as a genuine error"
                )
            if event.kind in ("storage_outage", "truncated_upload"):
                raise Unplayable(
                    f"attempts[{index}]: {event.kind} cannot be played for real "
                    "(the local blob store is a directory: it neither fails requests nor keeps partial writes)"
                )
            if event.lands_during_fork:
                raise Unplayable(
                    f"attempts[{index}]: preemption.lands_during_fork cannot be played for real "
                    "(a signal cannot be aimed at the inside of os.fork())"
                )
            if event.kind == "completion":
                _check_completion(spec, index, f"attempts[{index}]")
            else:
                _check_before_training(spec, index, event)
    _check_simulated(spec)
    method = start_method or ("fork" if spec.fork else "spawn")
    launch = spec.launch  # the task's: one LaunchConfig for every pod (kfpytorch `PytorchElasticFunctionTask._execute`)
    return Workload(
        spec.plugin.value,
        method,
        str(len(spec.pods)),
        nproc,
        max_restarts=launch.max_restarts,
        join_timeout=launch.join_timeout,
        monitor_interval=launch.monitor_interval,
    )


def _seconds(value: float) -> str:
    return f"{value:.10g} s"


def _check_before_training(spec: ScenarioSpec, index: int, event) -> None:
    """An event before the workers first train together, as the model's pods do too (`pods.py`
    `SimulatedPods.joined_first_round`). A pod that does not train ignores a worker error or a checkpoint
    (`Pod.worker_error`, `Pod.checkpoint`), where real workers would take it as they start; only a signal plays the
    same on both: the runner sends it while the real agents rendezvous (`timebase.lands_in_first_rendezvous`)."""
    start = barrier(spec)
    if event.at >= start or event.kind not in ("worker_error", "checkpoint"):
        return
    raise Unplayable(
        f"attempts[{index}]: the {event.kind} at {_seconds(event.at)} comes before every pod trains "
        f"({_seconds(start)}): the model's pod ignores it, real workers would take it as they start"
    )


def _check_completion(spec: ScenarioSpec, index: int, label: str) -> None:
    """A completion before every pod trains: the model's workers, like real ones, return as they start
    (`SimulatedPods.complete`), but the runner places only a signal before the workers' first barrier (the pods'
    start-up before it takes real time, not scenario time: `timebase.lands_in_first_rendezvous`)."""
    start, completion = barrier(spec), spec.completion_for(index)
    if completion >= start:
        return
    if any(e.kind == "completion" for e in spec.events_for(index)):
        where = f"{label}: the completion at {_seconds(completion)} comes before"
    else:
        where = f"task.training_seconds: {label} completes at {_seconds(completion)}, before"
    raise Unplayable(
        f"{where} every pod trains ({_seconds(start)}): a real run places only a signal before its workers first train"
    )


def _check_simulated(spec: ScenarioSpec) -> None:
    """What the simulation of `spec` says a real run could not play as simulated."""
    from aggregation.pods import WORKERS_RESTARTED
    from aggregation.simulate import simulate
    from aggregation.timeline import What
    from aggregation.world import watched_until

    simulated = simulate(spec).attempts
    restarted = any(
        event.what is What.RENDEZVOUS_DONE and event.reason == WORKERS_RESTARTED
        for attempt in simulated
        for event in attempt.timeline
    )
    if restarted:
        raise Unplayable(
            "job.max_restarts: a worker group restarted through a new rendezvous round is not played for real: "
            "in real runs here its new workers hung (2 of 4 runs, no new round in 240 s), cause not yet known"
        )
    for index, attempt in enumerate(simulated):
        label = f"attempts[{index}]" if index < len(spec.attempts) else f"attempt {index} (not listed: it trains clean)"
        _check_completion(spec, index, label)
        # from its first action on, an attempt runs at the wall's pace (`timebase`): while the run watches it, it
        # must fit in what is left of a real attempt's time once its pods have started (at worst)
        first = first_action(spec, index)
        watched = watched_until(attempt, LINGER_AFTER_VERDICT)
        span = watched - first.at
        if span > WALL_PACED_SECONDS:
            raise OutlastsARealAttempt(
                f"{label}: a real run would watch it for {span:.2f} s after its first action ({first.what} at "
                f"{_seconds(first.at)}), more than the {WALL_PACED_SECONDS:.0f} s it has for that "
                f"({ATTEMPT_TIMEOUT:.0f} s, less {START_TIMEOUT:.0f} s for its pods to start and up to "
                f"{MOST_LEAD:.0f} s of training first): "
                f"{longest_quiet_stretch(spec, attempt.timeline, first.at, watched)}"
            )


def longest_quiet_stretch(spec: ScenarioSpec, timeline, start: float, end: float) -> str:
    """Where the watched window [start, end] of a simulated attempt waits longest with nothing happening, named by
    the events on either side, and the scenario's delays at least half that long: the ones to shorten (the stretch
    may also be its events' spacing, or a pod timing)."""
    marks = [(start, "its first action")]
    marks += [(e.at, f"{e.pod} {e.what.value.replace('_', ' ')}") for e in timeline if start < e.at <= end]
    marks.append((end, "the run stops watching"))  # pods linger after propeller's verdict, or have all exited
    marks.sort(key=lambda mark: mark[0])
    (since, before), (until, after) = max(zip(marks, marks[1:]), key=lambda pair: pair[1][0] - pair[0][0])
    stretch = until - since
    delays = {
        "job.pod_status_seconds": spec.pod_status_delay,
        "job.reconcile_seconds": spec.reconcile_delay,
        "job.cleanup_seconds": spec.cleanup_delay,
        "propeller.observation_delay_seconds": spec.observation_delay,
    }
    long = [f"{field} is {_seconds(value)}" for field, value in delays.items() if value >= stretch / 2]
    return f"its longest quiet stretch is {stretch:.2f} s, from {before} at {_seconds(since)} to {after} at " + (
        f"{_seconds(until)} ({', '.join(long)})" if long else f"{_seconds(until)}"
    )


def run_local(spec: ScenarioSpec, work_dir: Path, start_method: Optional[str] = None) -> Execution:
    """Run every attempt of `spec` for real, until propeller's decision ends the node."""
    workload = check_playable(spec, start_method)
    work_dir = Path(work_dir)

    def make_pods(attempt: int, resumed_from: Optional[int]) -> RealPods:
        previous = work_dir / f"attempt-{resumed_from}" / "checkpoint" if resumed_from is not None else None
        return RealPods(spec, attempt, work_dir, workload, previous)

    try:
        return run_execution(spec, make_pods, Source.REAL, max_attempts=MAX_REAL_ATTEMPTS)
    except DeadlineExceeded:
        raise LocalJobError(f"an attempt did not finish within {ATTEMPT_TIMEOUT:.0f} s") from None
    except TooManyAttempts:
        raise LocalJobError(f"more than {MAX_REAL_ATTEMPTS} real attempts") from None
