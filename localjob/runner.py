"""A real PyTorchJob on this machine: the shared world and attempt loop, with real pods on the wall clock.

`run_local` is `aggregation.simulate.simulate` with `RealPods` instead of simulated ones: the kubelet,
the training operator, propeller's round and the attempt loop are the same code. A RETRY starts the next
attempt with `--prev-checkpoint` pointing at the previous attempt's checkpoint (flytekit's checkpoint API
does the rest).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from aggregation.engine import DeadlineExceeded
from aggregation.execution import TooManyAttempts, run_execution
from aggregation.kinds import PluginVariant
from aggregation.results import Execution, Source
from aggregation.scenario import ScenarioSpec
from localjob.pod import libfaketime_path
from localjob.realpods import ATTEMPT_TIMEOUT, LocalJobError, RealPods
from localjob.workloads import task_name

MAX_REAL_ATTEMPTS = 6
MAX_LOCAL_WORKERS = max(4, 2 * (os.cpu_count() or 1))  # gloo workers on CPU: beyond this, timings mean nothing


def check_playable(spec: ScenarioSpec, start_method: Optional[str] = None) -> str:
    """The workload task that plays `spec` for real; LocalJobError (one line) if it cannot be played faithfully."""
    if spec.plugin is PluginVariant.SEED_PR:
        raise LocalJobError("the seed-pr variant exists only in the simulator; run upstream or recoverable")
    nproc = spec.nproc_per_node
    if len(spec.pods) * nproc > MAX_LOCAL_WORKERS:
        raise LocalJobError(
            f"{len(spec.pods)} pods x {nproc} workers is more than this machine can hold "
            f"({MAX_LOCAL_WORKERS} worker processes at most on {os.cpu_count()} cores)"
        )
    skewed = sorted(pod for pod, timing in spec.timings.items() if timing.clock_offset)
    if skewed and libfaketime_path() is None:
        raise LocalJobError(
            f"timings.clock_offset_seconds of {', '.join(skewed)} needs libfaketime to give each pod its own "
            "clock: run .ci/system-packages (Debian package faketime)"
        )
    from plugin.task import is_collateral_failure

    for index, events in enumerate(spec.attempts):
        for event in events:
            if event.kind == "worker_error" and is_collateral_failure(event.message):
                raise LocalJobError(
                    f"attempts[{index}]: worker_error.message {event.message!r} reads like a peer's loss, which the "
                    "real plugin reports as a consequence while the simulator plays it as a genuine error"
                )
            if event.kind in ("storage_outage", "truncated_upload"):
                raise LocalJobError(
                    f"attempts[{index}]: {event.kind} cannot be played for real "
                    "(the local blob store is a directory: it neither fails requests nor keeps partial writes)"
                )
            if event.lands_during_fork:
                raise LocalJobError(
                    f"attempts[{index}]: preemption.lands_during_fork cannot be played for real "
                    "(a signal cannot be aimed at the inside of os.fork())"
                )
    method = start_method or ("fork" if spec.fork else "spawn")
    try:
        return task_name(spec.plugin.value, method, len(spec.pods), nproc)
    except ValueError as e:
        raise LocalJobError(str(e)) from None


def run_local(spec: ScenarioSpec, work_dir: Path, start_method: Optional[str] = None) -> Execution:
    """Run every attempt of `spec` for real, until propeller's decision ends the node."""
    task = check_playable(spec, start_method)
    work_dir = Path(work_dir)

    def make_pods(attempt: int, resumed_from: Optional[int]) -> RealPods:
        previous = work_dir / f"attempt-{resumed_from}" / "checkpoint" if resumed_from is not None else None
        return RealPods(spec, attempt, work_dir, task, previous)

    try:
        return run_execution(spec, make_pods, Source.REAL, max_attempts=MAX_REAL_ATTEMPTS)
    except DeadlineExceeded:
        raise LocalJobError(f"an attempt did not finish within {ATTEMPT_TIMEOUT:.0f} s") from None
    except TooManyAttempts:
        raise LocalJobError(f"more than {MAX_REAL_ATTEMPTS} real attempts") from None
