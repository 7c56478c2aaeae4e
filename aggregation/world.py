"""One attempt's world: pods, kubelet, training operator and propeller on one clock.

The pods are either simulated (`pods.SimulatedPods`, on the simulated clock) or real processes (the
`localjob` package's `RealPods`, on the wall clock); everything else here is the same for both. Data
flows one way: the scenario's events reach the pods (through the kubelet for signals), the pods upload
files and exit, the operator turns exits into the job's condition, and propeller's round reads the files
and decides.
"""

from __future__ import annotations

from dataclasses import replace
from operator import attrgetter
from typing import Callable, Optional, Protocol

from aggregation.engine import Clock
from aggregation.kinds import CleanPodPolicy, JobCondition, RunPolicyLimit
from aggregation.nanoseconds import on_the_clock
from aggregation.operator import TrainingOperator
from aggregation.pods import Upload
from aggregation.propeller import (
    NEVER_ABORTS,
    Decision,
    NodeDecision,
    NodeState,
    PropellerConfig,
    TaskOutcome,
    TaskPhase,
    runs_on_interruptible,
)
from aggregation.propeller_actor import PropellerActor
from aggregation.results import AttemptResult, winning_upload
from aggregation.scenario import ScenarioSpec
from aggregation.storage import OutputPrefix, UnavailablePrefix
from aggregation.symbolic import cut_short
from aggregation.timeline import OWNER_DELETED, Event, What

_EVENT_TIME = attrgetter("at")


class Pods(Protocol):
    """What the world asks of an attempt's pods, simulated or real."""

    def start(self, world: "Attempt") -> Clock:
        """Start the pods; return the clock they run on (the world's clock from then on)."""

    def sigterm(self, pod: str, lands_during_fork: bool) -> None: ...

    def sigkill(self, pod: str) -> None: ...

    def worker_error(self, pod: str, recoverable: bool, message: str) -> None: ...

    def checkpoint(self) -> None: ...

    def complete(self) -> None: ...

    def wrote_checkpoint(self) -> bool: ...

    def completed(self) -> bool: ...

    def resumed(self) -> bool:
        """Whether rank 0 started from the previous attempt's checkpoint."""

    def resumed_step(self) -> Optional[int]:
        """The step it read back, where the pods can tell (real ones can)."""

    def snapshot(self, uploads: tuple[Upload, ...]) -> tuple[OutputPrefix, tuple[Upload, ...]]:
        """The output prefix as propeller can read it now, and which of `uploads` it holds."""

    def close(self) -> None:
        """Reap whatever is left (real pods); called even when the attempt failed."""


class Kubelet:
    """Delivers SIGTERM (preemption, or the operator's deletion) and SIGKILL after the grace period."""

    def __init__(self, world: "Attempt") -> None:
        self.world = world
        self.kill_scheduled: set[str] = set()

    def terminate(self, pod: str, why: str, lands_during_fork: bool = False) -> bool:
        """SIGTERM `pod` if it still runs and is not already being stopped. True if delivered.

        The kubelet stops a pod's containers once (kubelet `pod_workers.go`: a kill request for a pod already
        terminating only keeps, or shortens, its grace period; the grace period here is the job's, so it keeps it):
        a second preemption or the operator's deletion of a terminating pod sends no second SIGTERM."""
        world = self.world
        if pod in world.exits or pod in self.kill_scheduled:
            return False
        world.log(Event(world.clock.now, "kubelet", What.SIGTERM, target=pod, reason=why))
        self.kill_scheduled.add(pod)
        world.clock.at(world.clock.now + world.spec.grace, lambda: self.kill(pod))
        world.pods.sigterm(pod, lands_during_fork)
        return True

    def kill(self, pod: str) -> None:
        world = self.world
        if pod not in world.exits:
            world.log(Event(world.clock.now, "kubelet", What.SIGKILL, target=pod))
            world.pods.sigkill(pod)


#: why a node whose job ended is never decided: `TryMutateWorkflow` never aborts at that limit
ROUNDS_FAIL_FOR_EVER = f"every round fails, and {NEVER_ABORTS}: propeller retries the round for ever"


class Attempt:
    """The world of one attempt. Pods report to it: `log` (an `Event`), `upload`, `pod_exited`."""

    def __init__(
        self,
        spec: ScenarioSpec,
        attempt: int,
        state: NodeState,
        pods: Pods,
        config: Optional[PropellerConfig] = None,
        failed_rounds: int = 0,
    ) -> None:
        self.spec = spec
        self.attempt = attempt
        self.state = state
        self.pods = pods
        self.config = config or spec.propeller_config()
        self.failed_rounds_before = failed_rounds  # the workflow's failed rounds in earlier attempts
        self.outages: list[tuple[float, float]] = []  # the blob store fails propeller's requests in [start, end)
        self.truncated: dict[str, int] = {}  # pod -> bytes its uploads keep from now on
        self.clock: Clock = Clock()  # the pods' start() replaces it with theirs
        self.timeline: list[Event] = []
        #: what pods report: an event of the attempt (the timeline's own append: a simulation logs tens per attempt)
        self.log: Callable[[Event], None] = self.timeline.append
        self.uploads: list[Upload] = []
        self.exits: dict[str, tuple[int, float]] = {}
        self.preempted = False
        self.terminal_at: Optional[float] = None
        self.kubelet = Kubelet(self)
        self.marked_deleted: set[str] = set()  # pods with a deletion mark (a preemption's, or the operator's)
        self.operator: Optional[TrainingOperator] = None
        self.propeller: Optional[PropellerActor] = None

    # --- what pods report ----------------------------------------------------------------------
    def upload(self, upload: Upload) -> None:
        keep = self.truncated.get(upload.pod)
        if keep is not None:  # a partial write: the object holds only the first `keep` bytes
            stamped = upload.error.timestamp if upload.error is not None else None
            upload = replace(upload, content=cut_short(upload.data(), keep, stamped))
            self.log(Event(self.clock.now, upload.pod, What.UPLOAD_TRUNCATED, file=upload.name, count=keep))
        self.uploads.append(upload)

    def pod_exited(self, pod: str, code: int) -> None:
        if pod in self.exits:
            return
        self.exits[pod] = (code, self.clock.now)
        self.operator.pod_exited(pod, code)

    # --- the run -------------------------------------------------------------------------------
    def run(self) -> None:
        spec = self.spec
        self.clock = self.pods.start(self)
        self.operator = TrainingOperator(
            spec.elastic,
            spec.pods,
            spec.clean_pod_policy,
            self._delete_pod,
            self._job_terminal,
            self.clock,
            spec.pod_status_delay,
            spec.cleanup_delay,
            spec.job_name,
            spec.active_deadline,
            spec.ttl_after_finished,
            self._delete_job,
            spec.map_order_for(self.attempt),
            self.attempt,
            self.attempt < len(spec.attempts),
            spec.reconcile_delay,
            lambda ttl: self.propeller.job_ttl(ttl),
        )
        self.propeller = PropellerActor(
            self.clock,
            spec,
            self.state,
            self.config,
            self._snapshot,
            self.log,
            self.failed_rounds_before,
            self._unchanged_until,
            self.attempt,
        )
        self._schedule_scenario()
        self.clock.run(self._done)
        observation = self.propeller.observation
        if observation is not None:
            for pod in self.running_pods():  # only a wall clock stops before every pod has exited
                self.log(Event(self.clock.now, pod, What.STILL_RUNNING))

    def _snapshot(self) -> tuple[OutputPrefix, tuple[Upload, ...]]:
        """The prefix as propeller's round can read it now: through the scenario's storage outage, if any."""
        prefix, seen = self.pods.snapshot(tuple(self.uploads))
        now = self.clock.now
        if any(start <= now < end for start, end in self.outages):
            return UnavailablePrefix(prefix.location, "the blob store is unavailable (scenario storage outage)"), seen
        return prefix, seen

    def _unchanged_until(self) -> float:
        """Until when the prefix, as propeller's rounds read it, stays as it is now: the next callback (a pod, the
        operator, a scenario event) or the next start or end of a storage outage, whichever comes first."""
        now = self.clock.now
        until = self.clock.next_callback()
        for moment in (m for window in self.outages for m in window):
            if now < moment < until:
                until = moment
        return until

    def running_pods(self) -> list[str]:
        return [pod for pod in self.spec.pods if pod not in self.exits]

    def _schedule_scenario(self) -> None:
        clock, pods = self.clock, self.pods
        events = self.spec.events_for(self.attempt)
        for event in events:
            if event.kind == "preemption":
                clock.at(event.at, lambda e=event: self._preempt(e.pod, e.lands_during_fork, e.pod_deleted))
            elif event.kind == "worker_error":
                clock.at(event.at, lambda e=event: pods.worker_error(e.pod, e.recoverable, e.message))
            elif event.kind == "checkpoint":
                clock.at(event.at, pods.checkpoint)
            elif event.kind == "storage_outage":
                self.outages.append((event.at, on_the_clock(event.at + event.duration)))
                clock.at(
                    event.at,
                    lambda e=event: self.log(Event(e.at, "blob store", What.STORAGE_OUTAGE, reason=f"{e.duration:g}")),
                )
            elif event.kind == "truncated_upload":
                clock.at(event.at, lambda e=event: self.truncated.__setitem__(e.pod, e.keep_bytes))
        clock.at(self.spec.completion_for(self.attempt), pods.complete)

    def _preempt(self, pod: str, lands_during_fork: bool, pod_deleted: bool) -> None:
        # a Running pod being deleted counts failed (one that exited unreported is still Running to the API server,
        # `job.pod_status_seconds`); one whose exit it holds is removed, and re-created while the job runs, which the
        # operator refuses (`operator.PodRecreation`); after the job's end the removal may wake the TTL's cleanup
        if pod_deleted:
            # the API server marks the pod before the kubelet signals it, and the mark wakes the operator
            self.marked_deleted.add(pod)
            self.log(Event(self.clock.now, "api server", What.POD_DELETED, target=pod, reason="preemption"))
            self.operator.pod_deleted(pod)
        if self.kubelet.terminate(pod, "kubelet: preemption", lands_during_fork):
            self.preempted = True

    def _delete_pod(self, pod: str, cause: CleanPodPolicy | RunPolicyLimit) -> None:
        """The operator deletes `pod`: the CleanPodPolicy's cleanup, or the RunPolicy limit the job went past."""
        self.log(Event(self.clock.now, "operator", What.DELETES_POD, target=pod, reason=cause.value))
        self.marked_deleted.add(pod)
        limit = isinstance(cause, RunPolicyLimit)
        self.kubelet.terminate(pod, f"operator: past RunPolicy.{cause.value}" if limit else "operator cleanup")

    def _delete_job(self, why: str) -> None:
        """The operator deletes the PyTorchJob: propeller's rounds find no job from now on, and the garbage collector
        deletes the pods it owns (background propagation, at once here), which stops the ones still running."""
        now = self.clock.now
        self.log(Event(now, "operator", What.DELETES_JOB, reason=why))
        self.propeller.job_deleted()
        for pod in self.running_pods():
            if pod in self.marked_deleted:  # `attemptToDeleteItem` leaves an object already being deleted alone
                continue
            self.log(Event(now, "garbage collector", What.DELETES_POD, target=pod, reason=OWNER_DELETED))
            self.kubelet.terminate(pod, "garbage collector: its PyTorchJob is gone")

    def _job_terminal(self, condition: JobCondition, why: str, message: str) -> None:
        self.terminal_at = self.clock.now
        self.log(Event(self.clock.now, "operator", What.JOB_TERMINAL, condition=condition.value, reason=why))
        self.propeller.job_terminal(condition, message)

    def _done(self) -> bool:
        """Every pod has exited, or they have lingered long enough after propeller's verdict (`watched_until`)."""
        observation = self.propeller.observation
        if observation is None:
            return False
        all_exited = len(self.exits) == len(self.spec.pods)  # O(1): asked after every callback
        return all_exited or self.clock.now >= observation.at + self.clock.linger_after_verdict

    # --- the record ------------------------------------------------------------------------------
    def result(self, resumed_from: Optional[int], resumed_step: Optional[int] = None) -> AttemptResult:
        spec, observation = self.spec, self.propeller.observation
        endless = self.propeller.retries_for_ever
        if observation is None and endless is not None:
            outcome = TaskOutcome(
                TaskPhase.RUNNING, reason=ROUNDS_FAIL_FOR_EVER, round_error=self.propeller.last_round_error
            )
            decision = NodeDecision(Decision.WAIT, next_state=self.state)
            condition, observed_at, seen, read = endless.value, None, (), None
        elif observation is None:
            # the clock ran dry and the job never turned terminal: propeller keeps waiting, nothing is decided
            outcome = TaskOutcome(TaskPhase.RUNNING, reason="the job never reached a terminal condition")
            decision = NodeDecision(Decision.WAIT, next_state=self.state)
            condition, observed_at, seen, read = JobCondition.RUNNING.value, None, (), None
        else:
            outcome, decision, read = observation.outcome, observation.decision, observation.read
            condition, observed_at, seen = observation.condition.value, observation.at, observation.seen
        genuine = any(u.error is not None and u.error.genuine for u in self.uploads)
        winner = winning_upload(read, seen)
        masked = genuine and not (winner is not None and winner.error is not None and winner.error.genuine)
        return AttemptResult(
            attempt=self.attempt,
            timeline=tuple(sorted(self.timeline, key=_EVENT_TIME)),  # real evidence arrives late
            uploads=tuple(self.uploads),
            exits=dict(self.exits),
            job_condition=condition,
            job_terminal_at=self.terminal_at,
            observed_at=observed_at,
            seen=seen,
            read=read,
            outcome=outcome,
            decision=decision,
            resumed_from=resumed_from if self.pods.resumed() else None,
            resumed_step=resumed_step,
            wrote_checkpoint=self.pods.wrote_checkpoint(),
            preempted=self.preempted,
            completed=self.pods.completed(),
            genuine_error_masked=masked,
            on_interruptible=runs_on_interruptible(self.state, spec.interruptible, spec.retries, self.config),
            failed_rounds=self.propeller.failed_rounds,
        )


def watched_until(result: AttemptResult, linger: float) -> float:
    """When a run that lets pods linger `linger` s after propeller's verdict stops watching a simulated attempt
    (`Attempt._done`): at its last event (every pod has exited and propeller has decided), or `linger` s after the
    verdict if that comes first."""
    end = max((event.at for event in result.timeline), default=0.0)
    return end if result.observed_at is None else min(end, result.observed_at + linger)
