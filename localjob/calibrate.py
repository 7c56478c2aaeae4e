"""Measure, with real pods, the phases of a preempted pod's report that the pod model has timings for.

One run is one real pod (`pyflyte-execute`, torch elastic agent, two gloo workers, this project's plugin,
aggregation off so the pod writes `error.pb`) whose rank 0 sends SIGTERM to its own agent after the first
barrier, as a kubelet preempting the pod would. Four moments per run, all on this machine's wall clock:

- the signal is sent (the worker's `signal.0` event file),
- the plugin looks under the output prefix for a sibling's report (its decision line in the pod's log,
  `plugin.task.DECISION_PATTERN`),
- the pod's `error.pb` lands (the file's mtime: the end of the entrypoint's upload),
- the agent exits (polled every few milliseconds).

The gaps between them are the phases: signal -> look (the model's `shutdown`), look -> landed (the plugin's
check-then-write window, the model's `upload`: a sibling's report landing inside it is overwritten when
aggregation is off) and landed -> exit (the model's `exit`: flytekit's and torch's teardown).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from aggregation import defaults
from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from localjob.pod import LocalPod, PodSpec
from localjob.realpods import LocalJobError
from localjob.workloads import Workload

#: a run whose pod has not exited by then is a failure (the pod is killed and the run's files kept)
RUN_TIMEOUT_SECONDS = 120.0
EXIT_POLL_SECONDS = 0.002


@dataclass(frozen=True)
class ReportSample:
    """The moments of one real preempted pod's report (seconds since the epoch, this machine's clock)."""

    signal_sent: float
    looked: float
    landed: float
    exited: float

    @property
    def signal_to_look(self) -> float:
        return self.looked - self.signal_sent

    @property
    def check_then_write(self) -> float:
        return self.landed - self.looked

    @property
    def landed_to_exit(self) -> float:
        return self.exited - self.landed


@dataclass(frozen=True)
class Phase:
    """One measured phase: its name, the pod model's timing for it, and the measured values."""

    name: str
    model_timing: str  # the `aggsim.v1.PodTimings` field the model plays this phase with
    model_seconds: float
    values: tuple[float, ...]

    def quantile(self, q: float) -> float:
        """The nearest-rank quantile (q in [0, 1]): a value that was measured, never an interpolation."""
        ordered = sorted(self.values)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def phases(samples: list[ReportSample]) -> list[Phase]:
    return [
        Phase(
            "signal -> look",
            "agent_shutdown_seconds",
            defaults.SHUTDOWN_SECONDS,
            tuple(s.signal_to_look for s in samples),
        ),
        Phase("look -> landed", "upload_seconds", defaults.UPLOAD_SECONDS, tuple(s.check_then_write for s in samples)),
        Phase("landed -> exit", "exit_seconds", defaults.EXIT_SECONDS, tuple(s.landed_to_exit for s in samples)),
    ]


def measured_phases(measured: list[Phase], start_method: str) -> list[pb.MeasuredPhase]:
    """The phases as a timings profile's entries (`aggsim calibrate --profile FILE`)."""
    method = pb.FORK if start_method == "fork" else pb.SPAWN
    return [
        pb.MeasuredPhase(
            field=p.model_timing,
            start_method=method,
            min_seconds=round(p.quantile(0), 6),  # microseconds: finer than any of these clocks can tell
            median_seconds=round(p.quantile(0.5), 6),
            max_seconds=round(p.quantile(1), 6),
            runs=len(p.values),
        )
        for p in measured
    ]


def _decision_time(log: str) -> Optional[float]:
    from plugin.task import DECISION_PATTERN

    found = [m for m in DECISION_PATTERN.finditer(log)]
    return float(found[-1].group("at")) if found else None


def measure_one(run_dir: Path, start_method: str = "spawn") -> ReportSample:
    """One real preempted pod; raises LocalJobError (naming the run's log) when it does not report."""
    events = run_dir / "events"
    events.mkdir(parents=True)
    prefix = run_dir / "outputs"
    spec = PodSpec(
        name="train-worker-0",
        task_args=tuple(Workload("recoverable", start_method, "1", 2).loader_args()),
        output_prefix=prefix,
        error_aggregation=False,
        extra_env={"AGGSIM_EVENTS_DIR": str(events), "AGGSIM_SIGNAL_AGENT": "SIGTERM"},
    )
    with LocalPod(spec, run_dir / "pod") as pod:
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
        while pod.returncode is None:
            if time.monotonic() > deadline:
                raise LocalJobError(f"the pod did not exit within {RUN_TIMEOUT_SECONDS:.0f} s: see {pod.log_path}")
            time.sleep(EXIT_POLL_SECONDS)
        exited = time.time()
        code = pod.returncode
    error_file = prefix / "error.pb"
    looked = _decision_time(pod.log())
    signal_file = events / "signal.0"
    if code != 0 or looked is None or not error_file.exists() or not signal_file.exists():
        raise LocalJobError(
            f"the pod did not report a preemption (exit {code}, decision line {'found' if looked else 'missing'}, "
            f"error.pb {'present' if error_file.exists() else 'missing'}): see {pod.log_path}"
        )
    return ReportSample(
        signal_sent=float(signal_file.read_text()),
        looked=looked,
        landed=error_file.stat().st_mtime_ns / 1e9,
        exited=exited,
    )


def measure(
    runs: int,
    work_dir: Path,
    start_method: str = "spawn",
    progress: Optional[Callable[[int, ReportSample], None]] = None,
) -> list[ReportSample]:
    """`runs` real preempted pods, one after another (each in `work_dir/run-<n>`)."""
    samples = []
    for n in range(runs):
        sample = measure_one(Path(work_dir) / f"run-{n}", start_method)
        samples.append(sample)
        if progress is not None:
            progress(n, sample)
    return samples
