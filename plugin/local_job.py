"""A real PyTorchJob on this machine: pods as real processes, a kubelet, an operator, and propeller.

Each pod is the real `pyflyte-execute` running a real elastic task (`plugin.workloads`) with the
environment the Flyte backend plugin gives it (`_F_WN`, `_F_DES` when aggregation is on, `PET_NNODES`,
`PET_RDZV_ENDPOINT`; the rendezvous id is the attempt). All pods of an attempt upload into one local
directory standing for the blob store; an upload watcher records when each file appears. The runner
plays the kubelet (SIGTERM at the scenario's time, SIGKILL after the grace period), the training
operator (elastic: Succeeded when one pod exits 0; Failed on a non-zero exit; CleanPodPolicy), and
propeller: at `observation_delay` after the job turns terminal it snapshots the prefix and judges it
with the `aggregation` model; a RETRY starts the next attempt with `--prev-checkpoint` pointing at this
attempt's checkpoint (flytekit's checkpoint API does the rest).

Scenario time maps onto wall time after the workers' first barrier: events keep their spacing and the
first one keeps its fraction of a second (so "30.6 s" fires at a wall-clock .6, where torch's
whole-second truncation bites); long quiet stretches before it are compressed.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from aggregation.engine import LogEntry
from aggregation.explain import Explanation, explain_prefix
from aggregation.propeller import (
    Decision,
    JobCondition,
    NodeDecision,
    NodeState,
    TaskOutcome,
    node_decision,
    task_outcome,
)
from aggregation.record import add_attempt, new_record
from aggregation.scenario import ScenarioSpec
from aggregation.simulate import success_phase
from plugin.local_pod import LocalPod, PodSpec
from plugin.workloads import task_name

MAX_REAL_ATTEMPTS = 6
START_TIMEOUT = 120.0  # pods must reach their first barrier within this
ATTEMPT_TIMEOUT = 240.0  # an attempt longer than this is a failure (and is killed)
MAX_LOCAL_WORKERS = max(4, 2 * (os.cpu_count() or 1))  # gloo workers on CPU: beyond this, timings mean nothing
SHUTDOWN_WORTH_MODELLING = 0.5  # shorter scenario shutdowns are what real workers do anyway
LINGER_AFTER_VERDICT = 20.0  # real seconds pods may keep running after propeller's verdict (for the record)
QUIET_TRAINING = 3.0  # real seconds of training before the first scheduled event (a first checkpoint write takes ~1 s)


class LocalJobError(RuntimeError):
    """The real job could not be run as the scenario asks (with a one-line reason)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RealAttempt:
    attempt: int
    timeline: list[LogEntry] = field(default_factory=list)
    exits: dict[str, tuple[int, float]] = field(default_factory=dict)
    uploads: list[tuple[str, float]] = field(default_factory=list)  # (file name, scenario time seen)
    job_condition: str = ""
    terminal_at: float = 0.0
    observed_at: float = 0.0
    explanation: Optional[Explanation] = None
    outcome: Optional[TaskOutcome] = None
    decision: Optional[NodeDecision] = None
    resumed_step: Optional[int] = None
    wrote_checkpoint: bool = False
    preempted: bool = False
    completed: bool = False


@dataclass
class RealExecution:
    spec: ScenarioSpec
    attempts: list[RealAttempt]
    final_phase: str
    final_code: Optional[str] = None


class _UploadWatcher(threading.Thread):
    """Polls the blob-store directory and notes when each (name, mtime) first appears."""

    def __init__(self, prefix: Path) -> None:
        super().__init__(daemon=True)
        self.prefix = prefix
        self.seen: dict[tuple[str, int], float] = {}
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.poll()
            time.sleep(0.005)

    def poll(self) -> None:
        try:
            entries = list(self.prefix.glob("*.pb"))
        except OSError:
            return
        for path in entries:
            try:
                mtime = path.stat().st_mtime_ns
            except OSError:
                continue
            self.seen.setdefault((path.name, mtime), time.time())

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=2)
        self.poll()


class _Clock:
    """Maps scenario seconds onto wall-clock time for one attempt."""

    def __init__(self, spec: ScenarioSpec, events, barrier_wall: float) -> None:
        rendezvous = max(t.rendezvous for t in spec.timings.values())
        later = [e.at for e in events if e.at >= rendezvous and e.kind != "checkpoint"]
        self.first = min(later) if later else None
        self.rendezvous = rendezvous
        self.barrier_wall = barrier_wall
        if self.first is None:
            self.anchor = barrier_wall + QUIET_TRAINING
        else:
            earliest = barrier_wall + QUIET_TRAINING
            fraction = self.first - math.floor(self.first)
            anchor = math.floor(earliest) + fraction
            self.anchor = anchor if anchor >= earliest else anchor + 1.0

    def wall(self, t: float) -> float:
        if self.first is None:
            return self.anchor + max(0.0, t - self.rendezvous) * 0.0  # nothing to wait for
        if t >= self.first:
            return self.anchor + (t - self.first)
        span = max(self.first - self.rendezvous, 1e-9)  # squeeze the quiet stretch before the first event
        return self.barrier_wall + (self.anchor - self.barrier_wall) * max(0.0, t - self.rendezvous) / span

    def scenario(self, wall: float) -> float:
        if self.first is None:
            return self.rendezvous + (wall - self.barrier_wall)
        if wall >= self.anchor:
            return self.first + (wall - self.anchor)
        return self.rendezvous + (wall - self.barrier_wall) * (self.first - self.rendezvous) / max(self.anchor - self.barrier_wall, 1e-9)


def run_local(spec: ScenarioSpec, work_dir: Path, start_method: Optional[str] = None) -> RealExecution:
    """Run every attempt of `spec` for real, until propeller's model says SUCCEED or FAIL."""
    if spec.plugin == "seed-pr":
        raise LocalJobError("the seed-pr variant exists only in the simulator; run upstream or recoverable")
    nproc = spec.nproc_per_node
    if len(spec.pods) * nproc > MAX_LOCAL_WORKERS:
        raise LocalJobError(f"{len(spec.pods)} pods x {nproc} workers is more than this machine can hold "
                            f"({MAX_LOCAL_WORKERS} worker processes at most on {os.cpu_count()} cores)")
    method = start_method or ("fork" if spec.fork else "spawn")
    name = task_name(spec.plugin, method, len(spec.pods), nproc)  # ValueError if no such workload
    work_dir = Path(work_dir)
    state = NodeState()
    config = spec.propeller_config()
    attempts: list[RealAttempt] = []
    for attempt in range(MAX_REAL_ATTEMPTS):
        result = _run_attempt(spec, attempt, name, work_dir, state, config)
        attempts.append(result)
        decision = result.decision
        if decision.decision is Decision.RETRY:
            state = decision.next_state
            continue
        if decision.decision is Decision.SUCCEED:
            return RealExecution(spec, attempts, success_phase(attempt, result.preempted, result.completed).value)
        return RealExecution(spec, attempts, "FAILED_PERMANENTLY", decision.code)
    raise LocalJobError(f"more than {MAX_REAL_ATTEMPTS} real attempts")


def _run_attempt(spec, attempt, task, work_dir, state, config) -> RealAttempt:
    base = work_dir / f"attempt-{attempt}"
    events_dir, prefix, work = base / "events", base / "outputs", base / "work"
    for d in (events_dir, prefix, work):
        d.mkdir(parents=True, exist_ok=True)
    control = base / "control.json"
    checkpoint = base / "checkpoint"
    previous = work_dir / f"attempt-{attempt - 1}" / "checkpoint" if attempt else None
    port = free_port()
    events = spec.events_for(attempt)
    result = RealAttempt(attempt)
    specs = [
        PodSpec(
            name=pod, task_name=task, output_prefix=prefix, error_aggregation=spec.error_aggregation,
            nnodes=len(spec.pods), rendezvous_endpoint=f"localhost:{port}", execution_id=f"{spec.name}-{attempt}",
            checkpoint_path=checkpoint, prev_checkpoint=previous,
            extra_env={"AGGSIM_EVENTS_DIR": str(events_dir), "AGGSIM_CONTROL": str(control), "AGGSIM_TRAIN_SECONDS": "600",
                       # the scenario's shutdown time is how long this pod's workers take to exit on SIGTERM
                       "AGGSIM_WORKER_SHUTDOWN_SECONDS": str(spec.timings[pod].shutdown)
                       if spec.timings[pod].shutdown > SHUTDOWN_WORTH_MODELLING else "0"},
        )
        for pod in spec.pods
    ]
    watcher = _UploadWatcher(prefix)
    watcher.start()
    with ExitStack() as stack:
        stack.callback(watcher.stop)
        pods = {}
        for pod_spec in specs:
            pods[pod_spec.name] = stack.enter_context(LocalPod(pod_spec, work))
        started = time.time()
        early = [e for e in events if e.kind == "preemption" and e.at < spec.timings[e.pod].rendezvous]
        if early:
            _wait_for_port(port, pods, started)
            time.sleep(0.5)
            for event in early:
                _preempt(pods[event.pod], result, event.at)
        world = len(spec.pods) * spec.nproc_per_node
        barrier = _wait_for_barrier(events_dir, world, pods, started) if not early else None
        clock = _Clock(spec, events, barrier or time.time())
        to_scenario = clock.scenario
        if barrier is not None:
            result.timeline.append(LogEntry(clock.rendezvous, "job", "all workers past their first barrier"))
        resumed = sorted(events_dir.glob("resumed-*.0"))
        if resumed:
            result.resumed_step = int(resumed[0].name.split("-")[1].split(".")[0])
            result.timeline.append(LogEntry(clock.rendezvous, spec.pods[0], f"resumed from checkpoint step {result.resumed_step}"))
        plan = {"raise": [], "checkpoint_at": []}
        completion = next((e.at for e in events if e.kind == "completion"), None)
        if completion is None and not any(e.kind in ("preemption", "worker_error") for e in events):
            completion = spec.training_seconds
        if completion is not None:
            plan["finish_at"] = clock.wall(completion) if any(e.kind != "checkpoint" for e in events) else clock.anchor
        for event in events:
            if event.kind == "worker_error":
                index = spec.pods.index(event.pod)
                plan["raise"].append({"rank": index * spec.nproc_per_node, "at": clock.wall(event.at), "message": event.message})
            elif event.kind == "checkpoint":
                plan["checkpoint_at"].append(clock.wall(event.at))
        control.write_text(json.dumps(plan))
        pending = sorted(((clock.wall(e.at), e) for e in events if e.kind == "preemption" and e not in early), key=lambda x: x[0])
        kills: dict[str, float] = {}
        if early:
            kills.update({e.pod: time.time() + spec.grace for e in early})
        operator_deleted: set[str] = set()
        observe_at: Optional[float] = None
        deadline = started + ATTEMPT_TIMEOUT
        while True:
            now = time.time()
            if now > deadline:
                raise LocalJobError(f"attempt {attempt} did not finish within {ATTEMPT_TIMEOUT:.0f} s")
            while pending and pending[0][0] <= now:
                _, event = pending.pop(0)
                _preempt(pods[event.pod], result, to_scenario(time.time()))
                kills.setdefault(event.pod, time.time() + spec.grace)
            for pod_name, when in list(kills.items()):
                if now >= when and pods[pod_name].returncode is None:
                    pods[pod_name].send_signal(signal.SIGKILL)
                    result.timeline.append(LogEntry(to_scenario(now), pod_name, "SIGKILL after the grace period"))
                    del kills[pod_name]
            for pod_name, pod in pods.items():
                code = pod.returncode
                if code is not None and pod_name not in result.exits:
                    exit_code = 128 - code if code < 0 else code  # what a container runtime reports
                    result.exits[pod_name] = (exit_code, to_scenario(now))
                    result.timeline.append(LogEntry(to_scenario(now), pod_name, f"exits {exit_code}"))
                    if not result.job_condition:
                        _operator(spec, pod_name, exit_code, now, result, pods, kills, operator_deleted, to_scenario)
                        if result.job_condition:
                            observe_at = now + spec.observation_delay
            if observe_at is not None and result.explanation is None and result.outcome is None and now >= observe_at:
                _observe(spec, prefix, base / "observed", result, state, config, to_scenario(now))
            if observe_at is not None and (result.explanation is not None or result.outcome is not None):
                if all(p.returncode is not None for p in pods.values()):
                    break
                if now > observe_at + LINGER_AFTER_VERDICT:
                    # Propeller has moved on; a pod still running (e.g. a worker hung in a gloo collective,
                    # whose timeout is 30 min) changes nothing. Record it and let the reaper end it.
                    for pod_name, pod in pods.items():
                        if pod.returncode is None:
                            result.timeline.append(LogEntry(to_scenario(now), pod_name, "still running after the verdict: reaped"))
                    break
            time.sleep(0.01)
    for (file_name, _), seen_at in sorted(watcher.seen.items(), key=lambda item: item[1]):
        result.uploads.append((file_name, to_scenario(seen_at)))
        result.timeline.append(LogEntry(to_scenario(seen_at), "blob store", f"{file_name} uploaded"))
    result.wrote_checkpoint = any(events_dir.glob("checkpoint-*.0"))
    result.completed = any(events_dir.glob("done.*"))
    for raised in events_dir.glob("raise.*"):
        rank = int(raised.name.split(".")[1])
        pod = spec.pods[rank // spec.nproc_per_node]
        result.timeline.append(LogEntry(to_scenario(float(raised.read_text())), pod, f"worker (rank {rank}) raises"))
    result.timeline.sort(key=lambda entry: entry.at)
    return result


def _wait_for_port(port, pods, started) -> None:
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            _check_alive(pods, started, "the rendezvous store never came up")
            time.sleep(0.05)


def _wait_for_barrier(events_dir: Path, world: int, pods, started) -> float:
    while True:
        stamps = [events_dir / f"barrier.{rank}" for rank in range(world)]
        if all(path.exists() for path in stamps):
            return max(float(path.read_text()) for path in stamps)
        _check_alive(pods, started, "the workers never trained together")
        time.sleep(0.02)


def _check_alive(pods, started, what) -> None:
    dead = [name for name, pod in pods.items() if pod.returncode is not None]
    if dead:
        log = pods[dead[0]].log().strip().splitlines()[-1:] or ["(no output)"]
        raise LocalJobError(f"pod {dead[0]} exited {pods[dead[0]].returncode} before training: {log[0][:200]}")
    if time.time() - started > START_TIMEOUT:
        raise LocalJobError(f"{what} within {START_TIMEOUT:.0f} s")


def _preempt(pod: LocalPod, result: RealAttempt, at_scenario: float) -> None:
    if pod.returncode is not None:
        return
    pod.send_signal(signal.SIGTERM)
    result.preempted = True
    result.timeline.append(LogEntry(at_scenario, pod.spec.name, "SIGTERM (kubelet: preemption)"))


def _operator(spec, pod_name, exit_code, now, result, pods, kills, deleted, to_scenario) -> None:
    if exit_code != 0:
        result.job_condition = "Failed"
    elif spec.elastic or pod_name == spec.pods[0]:
        result.job_condition = "Succeeded"
    else:
        return
    result.terminal_at = to_scenario(now)
    result.timeline.append(LogEntry(result.terminal_at, "operator", f"job {result.job_condition}"))
    if spec.clean_pod_policy in ("Running", "All"):
        for other, pod in pods.items():
            if pod.returncode is None and other not in deleted:
                deleted.add(other)
                pod.send_signal(signal.SIGTERM)
                kills.setdefault(other, time.time() + spec.grace)
                result.timeline.append(LogEntry(to_scenario(time.time()), other, "SIGTERM (operator cleanup)"))


def _observe(spec, prefix: Path, snapshot: Path, result: RealAttempt, state, config, at: float) -> None:
    """Propeller's observing round: read exactly what is in the blob store now."""
    shutil.copytree(prefix, snapshot, dirs_exist_ok=True)
    result.observed_at = at
    result.timeline.append(LogEntry(at, "propeller", f"observes job {result.job_condition}"))
    if result.job_condition != "Succeeded":
        result.outcome = task_outcome(JobCondition.FAILED, condition_message="a pod failed")
        result.decision = node_decision(result.outcome, spec.retries, state, config)
        return
    strategy = "earliest" if spec.error_aggregation else "default"
    result.explanation = explain_prefix(str(snapshot), strategy, spec.outputs_declared, spec.retries, state, config)
    result.outcome, result.decision = result.explanation.outcome, result.explanation.decision


def real_to_proto(execution: RealExecution):
    """The real run as an `aggsim.v1.Execution` (source "real"), diffable against a simulated one."""
    record = new_record(execution.spec, execution.final_phase, execution.final_code, None, "real")
    for attempt in execution.attempts:
        item = add_attempt(
            record, attempt=attempt.attempt, job_condition=attempt.job_condition, job_terminal_at=attempt.terminal_at,
            observed_at=attempt.observed_at, outcome=attempt.outcome, decision=attempt.decision,
            read=attempt.explanation.read if attempt.explanation is not None else None,
            resumed_from=f"attempt {attempt.attempt - 1} (step {attempt.resumed_step})" if attempt.resumed_step else "",
            wrote_checkpoint=attempt.wrote_checkpoint, preempted=attempt.preempted, timeline=attempt.timeline,
            exits=attempt.exits,
        )
        for name, at in attempt.uploads:
            item.files.add(name=name, uploaded_at=at, seen_by_propeller=at <= attempt.observed_at)
    return record
