"""Measure, with real pods, the pod phases the pod model has timings for: a preempted pod's report, and the
worker group's end (a worker failing, or every worker finishing).

A report run is one real pod (`pyflyte-execute`, torch elastic agent, two gloo workers, this project's plugin,
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

A worker-group run is a pair of real 2-pod jobs (2 workers per pod, upstream plugin, the agents looking at their
workers every 0.1 s and logging each look with LOGLEVEL=INFO): in one, pod 0's worker raises; in the other,
training ends. Read from the workers' event files and the agents' and flytekit's own log stamps: worker raised ->
the look that finds it (`failed_worker_exit`, only for the pod whose worker raised: the peer's workers fail later,
from the death), that look -> flytekit catches `ChildFailedError` (`failure_detection`, both pods), and workers
returned -> the look that finds the group finished (`finished_worker_exit`). A look is known to the interval, so
each phase that ends at one is taken to the middle of the interval before it.
"""

from __future__ import annotations

import math
import os
import re
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
    runs: Optional[int] = None  # the real runs behind the values, when not one value per run (one per pod)

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
            runs=p.runs or len(p.values),
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


# --- the worker group's phases: a real 2-pod job, read from the agents' own log stamps --------------------------

#: the agents look at their workers this often in these runs: a failed or finished worker is seen at most one
#: interval after its process is gone, so a phase that ends at a look is known to within this
GROUP_MONITOR_INTERVAL = 0.1
GROUP_EVENT_AT = 6.0  # scenario seconds: pod 0's worker raises (failure runs), or training ends (finish runs)
RAISING_POD = "train-worker-0"

# the agent's lines (torch 2.13): `MultiprocessContext._poll` logs a failed worker as soon as its look finds the
# process gone ("failed (exitcode: ..."); `SimpleElasticAgent._invoke_run` logs a finished group after that look
# has joined and closed the workers' processes
FAILED_SEEN = "failed (exitcode"
FINISHED_SEEN = "worker group successfully finished"
# flytekit's JSON log line for the exception its entrypoint caught (the ChildFailedError)
CAUGHT = re.compile(r'"asctime": "\S+ (?P<clock>\d\d:\d\d:\d\d,\d+)", "name": "flytekit", "levelname": "ERROR"')

GROUP_SCENARIO = """
name: "calibrate-worker-group"
plugin: UPSTREAM
job {{ pods: "train-worker-0" pods: "train-worker-1" nproc_per_node: 2 start_method: {method}
      monitor_interval_seconds: {interval} }}
task {{ retries: 0 outputs_declared: true training_seconds: {training} }}
{events}
"""


def agent_line_time(log: str, needle: str) -> Optional[str]:
    """The time (HH:MM:SS.ffffff) of the agent's first glog line that says `needle`, if any."""
    from localjob.evidence import GLOG_LINE

    for line in log.splitlines():
        match = GLOG_LINE.match(line)
        if match and needle in match.group("text"):
            return match.group("time")
    return None


def wall_time(clock: str, near: float) -> float:
    """A log's local `HH:MM:SS.ffffff` as seconds since the epoch: of the instants with that local time the one
    closest to `near` (a moment of the same run), so a run across midnight reads right."""
    hours, minutes, seconds = clock.replace(",", ".").split(":")
    of_day = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    local = time.localtime(near)
    midnight = near - (local.tm_hour * 3600 + local.tm_min * 60 + local.tm_sec + (near % 1))
    return min((midnight + day * 86400 + of_day for day in (-1, 0, 1)), key=lambda t: abs(t - near))


@dataclass(frozen=True)
class GroupSample:
    """One pod's worker group ending (seconds since the epoch, this machine's clock)."""

    pod: str
    failing: bool  # a worker raised (pod 0's) or every worker returned
    ended: float  # the raise, or the pod's last worker's return: the workers' event files
    seen: float  # the agent's log line: the look that found the failed process gone, or that joined the finished ones
    caught: Optional[float] = None  # flytekit caught the ChildFailedError (failure runs)

    @property
    def worker_exit(self) -> Optional[float]:
        """ended -> the processes are gone: the look's line, less half an interval (the look is at most one interval
        after the processes are gone). Only for the pod whose own worker raised or returned at `ended` (a peer's
        worker fails later, from the death)."""
        if self.failing and self.pod != RAISING_POD:
            return None
        return max(0.0, self.seen - self.ended - GROUP_MONITOR_INTERVAL / 2)

    @property
    def detection(self) -> Optional[float]:
        return None if self.caught is None else self.caught - self.seen


def measure_group_one(run_dir: Path, start_method: str, failing: bool) -> list[GroupSample]:
    """One real 2-pod job whose worker group fails (pod 0's worker raises) or finishes; a sample per pod whose
    agent logged its look. LOGLEVEL=INFO makes torch's agent stamp its looks."""
    from aggregation.scenario import parse_scenario_source
    from localjob.runner import run_local

    events = f'attempts {{ events {{ at_seconds: {GROUP_EVENT_AT} pod: "{RAISING_POD}" worker_error {{ }} }} }}'
    text = GROUP_SCENARIO.format(
        method="FORK" if start_method == "fork" else "SPAWN",
        interval=GROUP_MONITOR_INTERVAL,
        training=30 if failing else GROUP_EVENT_AT,
        events=events if failing else "",
    )
    spec = parse_scenario_source(text, "calibrate-worker-group.textproto").spec()
    previous = os.environ.get("LOGLEVEL")
    os.environ["LOGLEVEL"] = "INFO"  # the pods inherit it: torch's elastic logger then stamps every look
    try:
        run_local(spec, run_dir)
    finally:
        if previous is None:
            os.environ.pop("LOGLEVEL", None)
        else:
            os.environ["LOGLEVEL"] = previous
    attempt = run_dir / "attempt-0"

    def stamps(kind: str, pod_index: int) -> list[float]:
        ranks = range(pod_index * spec.nproc_per_node, (pod_index + 1) * spec.nproc_per_node)  # as realpods maps them
        return [float(p.read_text()) for p in (attempt / "events" / f"{kind}.{r}" for r in ranks) if p.exists()]

    raised = stamps("raise", spec.pods.index(RAISING_POD)) if failing else []
    if failing and not raised:
        raise LocalJobError(f"{RAISING_POD}'s worker did not raise: see {attempt}")
    samples = []
    for index, pod in enumerate(spec.pods):
        log_path = attempt / "work" / f"{pod}.log"
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        seen = agent_line_time(log, FAILED_SEEN if failing else FINISHED_SEEN)
        returned = [] if failing else stamps("done", index)
        if seen is None or (not failing and len(returned) < spec.nproc_per_node):
            what = "a failed worker" if failing else "its workers finished"
            raise LocalJobError(f"{pod}'s agent did not log {what} (LOGLEVEL=INFO): see {log_path}")
        ended = min(raised) if failing else max(returned)  # the pod's own last return, when finishing
        caught = CAUGHT.search(log) if failing else None
        if failing and caught is None:
            raise LocalJobError(f"{pod}'s entrypoint did not log the failure it caught: see {log_path}")
        samples.append(
            GroupSample(
                pod=pod,
                failing=failing,
                ended=ended,
                seen=wall_time(seen, ended),
                caught=wall_time(caught.group("clock"), ended) if caught else None,
            )
        )
    return samples


def measure_groups(
    runs: int,
    work_dir: Path,
    start_method: str = "spawn",
    progress: Optional[Callable[[int], None]] = None,
) -> list[GroupSample]:
    """`runs` pairs of real 2-pod jobs, one failing and one finishing, one after another."""
    samples = []
    done = 0
    for n in range(runs):
        for failing in (True, False):
            run_dir = Path(work_dir) / f"run-{n}-{'failing' if failing else 'finishing'}"
            samples += measure_group_one(run_dir, start_method, failing)
            done += 1
            if progress is not None:
                progress(done)
    return samples


def group_phases(samples: list[GroupSample], start_method: str, runs: int) -> list[Phase]:
    """The worker group's phases that the samples measured (a phase no run saw is left out)."""
    failed = [s for s in samples if s.failing]
    finished = [s for s in samples if not s.failing]
    measured = [
        Phase(
            "worker raised -> gone",
            "failed_worker_exit_seconds",
            defaults.FAILED_WORKER_EXIT_SECONDS[start_method],
            tuple(s.worker_exit for s in failed if s.worker_exit is not None),
            runs,
        ),
        Phase(
            "look -> caught",
            "failure_detection_seconds",
            defaults.DETECTION_SECONDS,
            tuple(s.detection for s in failed if s.detection is not None),
            runs,
        ),
        Phase(
            "returned -> gone",
            "finished_worker_exit_seconds",
            defaults.FINISHED_WORKER_EXIT_SECONDS[start_method],
            tuple(s.worker_exit for s in finished),
            runs,
        ),
    ]
    return [p for p in measured if p.values]
