"""What happened in an attempt, as typed records: what, who, when, and the fields that matter.

Actors write `Event`s; renderers, plots, JSON and tests read their fields. `describe()` is the one place
an event becomes a sentence for people.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from aggregation.kinds import JobCondition, NamedEnum, RunPolicyLimit
from aggregation.propeller import NEVER_ABORTS

#: the causes of a DELETES_POD that are RunPolicy limits, not a CleanPodPolicy
_RUN_POLICY_LIMITS = frozenset(limit.value for limit in RunPolicyLimit)
#: the cause of the garbage collector's DELETES_POD: the pod's owner, the PyTorchJob, is deleted
OWNER_DELETED = "owner deleted"


class What(NamedEnum):
    RENDEZVOUS_DONE = "rendezvous_done"  # workers started (torch installs its signal handlers now)
    RESUMED = "resumed"  # rank 0 read the previous attempt's checkpoint
    WAITS_IN_RENDEZVOUS = "waits_in_rendezvous"
    RENDEZVOUS_TIMEOUT = "rendezvous_timeout"
    RENDEZVOUS_LOST = "rendezvous_lost"  # the agent hosting the rendezvous store is gone
    RENDEZVOUS_CLOSED = "rendezvous_closed"  # an agent returned and closed the rendezvous
    RESTARTS_WORKERS = "restarts_workers"  # torch elastic max_restarts: the agent restarts its worker group
    MEMBERSHIP_CHANGE = "membership_change"  # a healthy agent's look finds nodes waiting: it restarts, uncounted
    CHECKPOINT = "checkpoint"
    TRAINING_COMPLETE = "training_complete"  # the workers returned (their agent notices at its next look)
    EXIT_BARRIER = "exit_barrier"  # the agent saw its workers finish and waits for the other agents
    EXIT_BARRIER_PASSED = "exit_barrier_passed"  # the agent returns success
    POD_DELETED = "pod_deleted"  # the API server marks the pod for deletion (the kubelet's SIGTERM follows)
    SIGTERM = "sigterm"
    SIGNAL_LOST = "signal_lost"  # inside os.fork(), fork start method
    SIGNAL_IGNORED = "signal_ignored"  # a PID 1 with no handler for it: the kernel drops it
    SIGNAL_HELD = "signal_held"  # at the exit barrier: torch's handler runs once the barrier's store wait returns
    HELD_SIGNAL_RAISED = "held_signal_raised"  # the exit barrier's wait returned: the held SignalException is raised
    SIGKILL = "sigkill"
    SIGNAL_CAUGHT = "signal_caught"  # the plugin saw torch's SignalException
    WORKER_FAILED = "worker_failed"
    WORKER_ERROR_NOT_RAISED = "worker_error_not_raised"  # a scenario's worker error finds no training worker to fail
    AGENT_RAISES = "agent_raises"  # ChildFailedError reaches the plugin
    AWAITS_SIBLING = "awaits_sibling"  # a collateral failure: the plugin waits for a sibling's report first
    YIELDS = "yields"  # a sibling's error file is there: the plugin leaves it standing (IgnoreOutputs)
    UPLOAD = "upload"
    EXIT = "exit"
    JOB_TERMINAL = "job_terminal"
    DELETES_POD = "deletes_pod"  # the operator's CleanPodPolicy, a RunPolicy limit, or the garbage collector
    DELETES_JOB = "deletes_job"  # the operator's TTLSecondsAfterFinished: the PyTorchJob object is gone
    OBSERVES = "observes"  # propeller's round that observes the terminal job
    ROUND_FAILED = "round_failed"  # the reader returned a Go error: the round fails, the next one retries
    ROUNDS_FAIL_ALIKE = "rounds_fail_alike"  # nothing can change what the next rounds read: they fail alike
    ROUNDS_FAIL_FOR_EVER = "rounds_fail_for_ever"  # ... and max-workflow-retries can never be exceeded
    ROUNDS_FAIL_UNTIL_A_CHANGE = "rounds_fail_until_a_change"  # rounds that never abort fail alike up to a change
    WORKFLOW_ABORTED = "workflow_aborted"  # more failed rounds than max-workflow-retries
    STORAGE_OUTAGE = "storage_outage"  # the blob store fails propeller's requests for a while
    UPLOAD_TRUNCATED = "upload_truncated"  # a pod's upload landed cut short
    STILL_RUNNING = "still_running"  # a real pod still running when the run stops watching: reaped


class Event(NamedTuple):
    """A typed, immutable record (a NamedTuple: a simulation makes tens of them per attempt)."""

    at: float
    actor: str  # a pod's name, "operator", "kubelet", "propeller", "api server", "garbage collector" or "job"
    what: What
    target: str = ""  # the pod an operator or kubelet action is aimed at
    reason: str = ""
    file: str = ""
    code: str = ""
    recoverable: Optional[bool] = None
    stamp: Optional[float] = None  # the timestamp written into an error document (scenario seconds)
    exit_code: Optional[int] = None
    condition: str = ""
    genuine: bool = False  # a worker failure the scenario injected, not a consequence of a peer's death
    count: Optional[int] = None  # files seen by propeller, a checkpoint step, a worker's rank

    @property
    def pod(self) -> str:
        """The pod the event happened to (the target of an operator or kubelet action)."""
        return self.target or self.actor

    def describe(self) -> str:
        w = What
        what = self.what
        if what is w.RENDEZVOUS_DONE:
            if self.reason:
                return f"rendezvous done, workers started ({self.reason})"
            return "rendezvous done, workers started (signal handlers installed)"
        if what is w.RESUMED:
            return f"resumed from checkpoint step {self.count}" if self.count is not None else "resumed from checkpoint"
        if what is w.WAITS_IN_RENDEZVOUS:
            return f"waits in rendezvous ({self.reason})"
        if what is w.RENDEZVOUS_TIMEOUT:
            return "RendezvousTimeoutError"
        if what is w.RENDEZVOUS_LOST:
            return f"RendezvousConnectionError: the store in {self.reason}'s agent is gone"
        if what is w.RENDEZVOUS_CLOSED:
            return f"RendezvousClosedError: {self.reason}'s agent closed the rendezvous as it returned"
        if what is w.RESTARTS_WORKERS:
            return f"agent restarts its workers ({self.count} restart(s) left) and re-enters the rendezvous"
        if what is w.MEMBERSHIP_CHANGE:
            return (
                f"agent's look finds {self.count} node(s) waiting: restarts its healthy workers into the next round"
                " (a membership change, no restart counted)"
            )
        if what is w.CHECKPOINT:
            return "writes a checkpoint"
        if what is w.TRAINING_COMPLETE:
            if self.reason:
                return f"training complete: the workers return ({self.reason})"
            return "training complete: the workers return"
        if what is w.EXIT_BARRIER:
            return "agent sees its workers finished; waits at the exit barrier for the other agents"
        if what is w.EXIT_BARRIER_PASSED:
            return f"agent passes the exit barrier ({self.reason}) and returns"
        if what is w.POD_DELETED:
            return f"pod deleted ({self.reason}): marked with a deletion timestamp before the kubelet's SIGTERM"
        if what is w.SIGTERM:
            return f"SIGTERM ({self.reason})"
        if what is w.SIGNAL_LOST:
            return "signal lost inside os.fork(): the agent runs on until SIGKILL"
        if what is w.SIGNAL_IGNORED:
            return f"SIGTERM dropped by the kernel: {self.reason}"
        if what is w.SIGNAL_HELD:
            return "SIGTERM held until the exit barrier's store wait returns (torch's handler runs after it)"
        if what is w.HELD_SIGNAL_RAISED:
            return f"the exit barrier's wait returns ({self.reason}): torch's handler raises the held SIGTERM"
        if what is w.SIGKILL:
            return "SIGKILL after the grace period"
        if what is w.SIGNAL_CAUGHT:
            stamp = f" stamped {self.stamp:.3f}" if self.stamp is not None else ""
            return f"SignalException -> {self.reason}{stamp}"
        if what is w.WORKER_FAILED:
            rank = f" (rank {self.count})" if self.count is not None else ""
            kind = "" if self.recoverable is None else ("recoverable" if self.recoverable else "non-recoverable")
            cause = "" if self.genuine or not self.reason else self.reason
            detail = ", ".join(x for x in (kind, cause) if x)
            return f"worker{rank} fails" + (f" ({detail})" if detail else "")
        if what is w.WORKER_ERROR_NOT_RAISED:
            return f"the scenario's worker error does not fire: {self.reason}"
        if what is w.AGENT_RAISES:
            return "agent raises ChildFailedError"
        if what is w.AWAITS_SIBLING:
            return f"failure caused by a peer's death: waits up to {self.reason} s for a sibling's report"
        if what is w.YIELDS:
            return f"{self.file} is a sibling's report: leaves it standing (IgnoreOutputs)"
        if what is w.UPLOAD:
            if self.code:
                kind = "recoverable" if self.recoverable else "non-recoverable"
                stamp = f", stamped {self.stamp:.3f}" if self.stamp is not None else ""
                return f"uploads {self.file} ({self.code}, {kind}{stamp})"
            return f"uploads {self.file}"
        if what is w.EXIT:
            return f"exits {self.exit_code}" + (f" ({self.reason})" if self.reason else "")
        if what is w.JOB_TERMINAL:
            return f"job {self.condition}: {self.reason}"
        if what is w.DELETES_POD:
            if self.reason in _RUN_POLICY_LIMITS:
                return f"past RunPolicy.{self.reason}: deletes {self.target}"
            if self.reason == OWNER_DELETED:
                return f"its owner, the PyTorchJob, is gone: deletes {self.target}"
            return f"CleanPodPolicy {self.reason}: deletes {self.target}"
        if what is w.DELETES_JOB:
            return f"deletes the PyTorchJob ({self.reason})"
        if what is w.OBSERVES:
            if self.condition == JobCondition.DELETED.value:
                return "finds no job (NotFound: ResourceDeletedExternally); reads no file"
            if self.condition == "Succeeded":
                files = f"{self.count} error file" + ("" if self.count == 1 else "s")
                return f"observes job {self.condition}; reads the {files} uploaded by then"
            return f"observes job {self.condition}; reads no file"
        if what is w.ROUND_FAILED:
            return f"round fails ({self.count} failed so far): {self.reason}"
        if what is w.ROUNDS_FAIL_FOR_EVER:
            return (
                "every later round fails alike, for ever: nothing is left to change what they read, and "
                f"{NEVER_ABORTS} ({self.reason})"
            )
        if what is w.ROUNDS_FAIL_ALIKE:
            return (
                f"rounds fail alike until {self.count} have failed: nothing happens before then that could change "
                f"what they read ({self.reason})"
            )
        if what is w.ROUNDS_FAIL_UNTIL_A_CHANGE:
            return (
                "rounds fail alike until something may change what they read, and "
                f"{NEVER_ABORTS}; it then reads {self.count} (a uint32: it wraps past 4,294,967,295) ({self.reason})"
            )
        if what is w.WORKFLOW_ABORTED:
            return f"aborts the workflow: {self.reason}"
        if what is w.STORAGE_OUTAGE:
            return f"fails every request for {self.reason} s"
        if what is w.UPLOAD_TRUNCATED:
            return f"{self.file} lands cut to {self.count} bytes"
        if what is w.STILL_RUNNING:
            return "still running after the verdict: reaped"
        return what.value  # pragma: no cover - every What is described above
