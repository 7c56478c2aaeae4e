"""Run a scenario: attempt after attempt, pods -> uploaded files -> propeller's reader -> retry decision.

Each attempt is a discrete-event simulation (`engine.Clock`) of the pods (`pods.Pod`) and the training
operator (`operator.TrainingOperator`). Propeller observes the job `observation_delay` after it turns
terminal and reads only what was uploaded by then, with the real readers and retry rules of
`aggregation.readers` / `aggregation.propeller`. A RETRY starts the next attempt, which resumes from the
previous attempt's checkpoint if it wrote one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from aggregation.documents import error_document_bytes
from aggregation.engine import Clock, LogEntry
from aggregation.operator import TrainingOperator
from aggregation.pods import Pod, PodHooks, Upload, error_file_name
from aggregation.propeller import (
    Decision,
    JobCondition,
    NodeDecision,
    NodeState,
    TaskOutcome,
    node_decision,
    runs_on_interruptible,
    task_outcome,
)
from aggregation.readers import ReadResult, reader_for
from aggregation.scenario import ScenarioSpec
from aggregation.storage import MemoryPrefix

MAX_ATTEMPTS = 100  # a safety net: propeller's budgets end every real execution long before this


class FinalPhase(str, enum.Enum):
    SUCCEEDED = "SUCCEEDED"
    SUCCEEDED_SILENTLY = "SUCCEEDED_SILENTLY"
    RETRIED_THEN_SUCCEEDED = "RETRIED_THEN_SUCCEEDED"
    FAILED_PERMANENTLY = "FAILED_PERMANENTLY"


@dataclass(frozen=True)
class AttemptResult:
    attempt: int
    log: tuple[LogEntry, ...]
    uploads: tuple[Upload, ...]
    exits: dict[str, tuple[int, float]]
    job_condition: str
    job_terminal_at: float
    observed_at: float
    seen: tuple[Upload, ...]  # uploaded before propeller's observing round
    read: Optional[ReadResult]
    outcome: TaskOutcome
    decision: NodeDecision
    resumed_from: Optional[int]  # the attempt whose checkpoint this one resumed from
    wrote_checkpoint: bool
    preempted: bool
    completed: bool
    genuine_error_masked: bool
    on_interruptible: bool


@dataclass(frozen=True)
class Execution:
    scenario: ScenarioSpec
    attempts: tuple[AttemptResult, ...]
    final_phase: FinalPhase
    final_code: Optional[str] = None
    final_kind: Optional[str] = None

    @property
    def masked_genuine_error(self) -> bool:
        return any(a.genuine_error_masked for a in self.attempts)


class _Attempt(PodHooks):
    """Wires pods, operator and blob store together for one attempt."""

    def __init__(self, spec: ScenarioSpec, attempt: int) -> None:
        self.spec = spec
        self.clock = Clock()
        self.uploads: list[Upload] = []
        self.outputs_declared = spec.outputs_declared
        self.pods = {
            name: Pod(
                name, rank0=(index == 0), timing=spec.timings[name], plugin=spec.plugin, fork=spec.fork,
                grace=spec.grace, error_file_name=error_file_name(spec.error_aggregation, spec.seed, attempt, name),
                worker_name=name if spec.error_aggregation else "", clock=self.clock, hooks=self,
            )
            for index, name in enumerate(spec.pods)
        }
        self.operator = TrainingOperator(spec.elastic, spec.pods[0], spec.clean_pod_policy, self.clock,
                                         lambda pod: self.pods[pod].signal("operator cleanup"))
        self.checkpoint_written = False
        self.collective_broken = False
        self.preempted = False
        self.completed = False

    # PodHooks
    def upload(self, upload: Upload) -> None:
        self.uploads.append(upload)

    def pod_exited(self, pod: Pod, code: int) -> None:
        self.operator.pod_exited(pod.name, code, lambda: [p.name for p in self.pods.values() if p.exit_code is None])

    def peer_died(self, pod: Pod, at: float) -> None:
        # One process group spans every pod: the first death breaks it for everyone; later deaths change nothing.
        if self.collective_broken:
            return
        self.collective_broken = True
        for other in self.pods.values():
            if other is not pod:
                self.clock.at(at, other.peer_death)

    def schedule(self, events) -> None:
        for event in events:
            if event.kind == "preemption":
                self.clock.at(event.at, lambda e=event: self._preempt(e))
            elif event.kind == "worker_error":
                self.clock.at(event.at, lambda e=event: self.pods[e.pod].worker_error(e.recoverable, e.message, genuine=True))
            elif event.kind == "checkpoint":
                self.clock.at(event.at, self._checkpoint)
        completion = next((e.at for e in events if e.kind == "completion"), self.spec.training_seconds)
        self.clock.at(completion, self._complete)

    def _preempt(self, event) -> None:
        if self.pods[event.pod].exit_code is None:
            self.preempted = True
        self.pods[event.pod].signal("kubelet: preemption", event.lands_during_fork)

    def _checkpoint(self) -> None:
        if self.pods[self.spec.pods[0]].checkpoint():
            self.checkpoint_written = True

    def _complete(self) -> None:
        pods = list(self.pods.values())
        if all(p.state == "training" for p in pods):
            self.completed = True
            for pod in pods:
                pod.complete()


def _judge(spec: ScenarioSpec, seen: list[Upload], condition: str, retries_state: NodeState) -> tuple[Optional[ReadResult], TaskOutcome, NodeDecision]:
    config = spec.propeller_config()
    if condition != "Succeeded":
        outcome = task_outcome(JobCondition.FAILED, condition_message="a pod failed")
        return None, outcome, node_decision(outcome, spec.retries, retries_state, config)
    objects: dict[str, bytes] = {}
    for upload in seen:  # in upload order: a later upload of the same key overwrites (last writer wins)
        if upload.error is None:
            objects[upload.name] = b""
        else:
            e = upload.error
            objects[upload.name] = error_document_bytes(
                code=e.code, message=e.message, recoverable=e.recoverable, origin="USER",
                timestamp_ns=round(e.timestamp * 1e9), worker=e.worker,
            )
    prefix = MemoryPrefix(list(objects.items()), location="attempt-prefix")
    read = reader_for("earliest" if spec.error_aggregation else "default").read(prefix)
    outcome = task_outcome(JobCondition.SUCCEEDED, read, spec.outputs_declared, "outputs.pb" in objects)
    return read, outcome, node_decision(outcome, spec.retries, retries_state, config)


def run_attempt(spec: ScenarioSpec, attempt: int, state: NodeState, resumed_from: Optional[int]) -> AttemptResult:
    world = _Attempt(spec, attempt)
    world.schedule(spec.events_for(attempt))
    world.clock.run()
    condition = world.operator.condition or "Failed"
    terminal_at = world.operator.terminal_at if world.operator.terminal_at is not None else world.clock.now
    observed_at = terminal_at + spec.observation_delay
    seen = [u for u in world.uploads if u.at <= observed_at]
    read, outcome, decision = _judge(spec, seen, condition, state)

    chosen = read.selected.path if read is not None and read.selected is not None else None
    # the upload whose bytes propeller read: for a key written twice (error.pb), the last one seen
    winner = next((u for u in reversed(seen) if u.name == chosen), None)
    genuine_happened = any(u.error is not None and u.error.genuine for u in world.uploads)
    masked = genuine_happened and not (winner is not None and winner.error is not None and winner.error.genuine)
    config = spec.propeller_config()
    return AttemptResult(
        attempt=attempt,
        log=tuple(world.clock.log),
        uploads=tuple(world.uploads),
        exits={name: (pod.exit_code, pod.exited_at) for name, pod in world.pods.items()},
        job_condition=condition,
        job_terminal_at=terminal_at,
        observed_at=observed_at,
        seen=tuple(seen),
        read=read,
        outcome=outcome,
        decision=decision,
        resumed_from=resumed_from,
        wrote_checkpoint=world.checkpoint_written,
        preempted=world.preempted,
        completed=world.completed,
        genuine_error_masked=masked,
        on_interruptible=runs_on_interruptible(state, spec.interruptible, spec.retries, config),
    )


def success_phase(attempt: int, preempted: bool, completed: bool) -> FinalPhase:
    """How a node that succeeded at `attempt` is reported (for simulated and real runs alike)."""
    if preempted and not completed:
        return FinalPhase.SUCCEEDED_SILENTLY  # green, though training never finished
    return FinalPhase.RETRIED_THEN_SUCCEEDED if attempt > 0 else FinalPhase.SUCCEEDED


def simulate(spec: ScenarioSpec) -> Execution:
    """Every attempt of the node until it succeeds or fails for good."""
    state = NodeState()
    attempts: list[AttemptResult] = []
    checkpoints: dict[int, bool] = {}
    for attempt in range(MAX_ATTEMPTS):
        resumed_from = attempt - 1 if attempt > 0 and checkpoints.get(attempt - 1) else None
        result = run_attempt(spec, attempt, state, resumed_from)
        attempts.append(result)
        checkpoints[attempt] = result.wrote_checkpoint
        decision = result.decision
        if decision.decision is Decision.RETRY:
            state = decision.next_state
            continue
        if decision.decision is Decision.SUCCEED:
            return Execution(spec, tuple(attempts), success_phase(attempt, result.preempted, result.completed))
        return Execution(spec, tuple(attempts), FinalPhase.FAILED_PERMANENTLY, decision.code, decision.kind)
    raise RuntimeError(f"{spec.name}: more than {MAX_ATTEMPTS} attempts")
