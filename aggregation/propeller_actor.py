"""Propeller as an actor on the attempt's clock: its rounds observe the job and, once it is terminal, decide.

Propeller's rounds are periodic, so the first round after the job turns terminal comes some time later
(the scenario's `observation_delay_seconds`). That round reads the output prefix as it is at that
moment (`snapshot`), only if the job Succeeded (`plugin_manager.go` builds the error reader only then),
and decides the node's fate with the rules of `propeller.py`. A round runs after everything else that
happens at the same instant, so an upload at the very moment it looks is seen.

A round whose reader returns a Go error (a listing or read failure, a file it cannot decode or that is
too large) fails: `handler.go` `streak` records it (`RecordSystemError`: the workflow's FailedAttempts + 1)
and the workflow is requeued, so another round runs `round_retry_seconds` later and reads the prefix as it
is then. A round that starts with more failed rounds than `max-workflow-retries` aborts the workflow
instead (`TryMutateWorkflow` -> `HandleAbortedWorkflow`: SYSTEM "Workflow abort failed"). The count is the
workflow's, so it carries over from one attempt to the next.

While nothing else can happen (no callback waits, no outage starts or ends), every later round reads what the
failed one read and fails alike: more than a few such rounds are counted in one step, so a large
`max-workflow-retries` (-1 is uint32's 4,294,967,295) never runs its rounds one by one. At that largest limit
the count can never exceed it, so propeller retries the round for ever and the node never ends.

A round reads the job's conditions as flyteplugins `common_operator.go` `ExtractCurrentCondition` does: sorted
latest first by LastTransitionTime, which the API server keeps in whole seconds, with ties left in the list's order
(`sort.Slice` sorts so few by insertion), then the first true one. The Created condition, written as the job is
created and never made false, comes first in that list, so a terminal condition in the same whole second is not
read: the task stays Queued (`GetPhaseInfo`). A terminal condition a second or more after the job's start never
shares its second; one sooner may or may not, by where in its second the job was created, which no scenario fixes:
the model refuses that point (`CreatedInTheSameSecond`). For the same reason a round that looks while the TTL may
or may not have deleted the job (`operator.TtlDeletion`) is refused (`DeletedWithinItsSecond`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from aggregation.engine import LAST, Clock
from aggregation.explain import DynamicTaskPrefix, explain_store
from aggregation.kinds import JobCondition
from aggregation.nanoseconds import instant_text, on_the_clock
from aggregation.operator import TtlDeletion, TtlState
from aggregation.pods import Upload
from aggregation.propeller import (
    UINT32_MAX,
    NodeDecision,
    NodeState,
    PropellerConfig,
    TaskOutcome,
    TaskPhase,
    job_not_found,
    node_decision,
    task_outcome,
)
from aggregation.propeller_store import StoreNamingUnknown
from aggregation.readers import DEFAULT, EARLIEST, ReadResult
from aggregation.scenario import ModelRefusal, ScenarioSpec
from aggregation.storage import OutputPrefix
from aggregation.timeline import Event, What

#: Takes a snapshot of the attempt's output prefix: what propeller can read now, and the uploads it holds.
Snapshot = Callable[[], tuple[OutputPrefix, tuple[Upload, ...]]]


@dataclass(frozen=True)
class Observation:
    """The round that observed the terminal job, and what it concluded."""

    at: float
    condition: JobCondition
    seen: tuple[Upload, ...]
    read: Optional[ReadResult]
    outcome: TaskOutcome
    decision: NodeDecision


class StoreNotModelled(ModelRefusal):
    """The earliest reader listed an error file on a store whose naming of listings the model does not know
    (`propeller_store.StoreNamingUnknown`): the deployment's storage section says which."""

    kind = "the store's naming of listed error files is not modelled"


class DynamicTaskNotModelled(ModelRefusal):
    """The attempt's prefix holds `futures.pb` (`explain.DynamicTaskPrefix`): propeller would run a dynamic task's
    sub-workflow instead of reading errors. Simulated pods never write one; a real run's copy could."""

    kind = "a dynamic task's futures.pb is not modelled"


class CreatedInTheSameSecond(ModelRefusal):
    """The job turned terminal less than a second after its start: whether propeller reads that condition or the
    Created one (and the task stays Queued) depends on the sub-second moment of the job's creation (module
    docstring). Says which attempt, the condition and when it was set."""

    real_runs_meet = "the job turned terminal in its first second"

    def __init__(self, attempt: int, condition: JobCondition, at) -> None:
        super().__init__(
            f"attempt {attempt}'s job turned {condition.value} at {instant_text(at)} s, less than a second after its "
            "start: whether that condition shares a whole second with the job's Created condition (flyteplugins "
            "ExtractCurrentCondition then reads Created, and the task stays Queued) depends on where in its second the "
            "job was created, which the model does not fix"
        )
        self.attempt = attempt
        self.condition = condition
        self.at = at
        self.kind = f"the job turned terminal in its first second (attempt {attempt})"


class DeletedWithinItsSecond(ModelRefusal):
    """Propeller's round looks while the TTL's deletion may or may not have happened: when the operator deletes the
    job depends on where in its second the job was created (`operator.TtlDeletion`), which no scenario fixes, or on
    when the kubelet removes a deleted pod, which the model does not place. Says which attempt, the expiry's second and
    the round's instant."""

    real_runs_meet = "propeller looks while the TTL may have deleted the job"

    def __init__(self, attempt: int, ttl: TtlDeletion, at) -> None:
        super().__init__(
            f"attempt {attempt}'s job finished at {instant_text(ttl.completed_at)} s and its {ttl.ttl} s TTL expires "
            f"after {instant_text(ttl.first_expiry)} s and by {instant_text(ttl.last_expiry)} s, by where in its "
            "second the job was created (training-operator CleanupJob reads the CompletionTime back in whole seconds), "
            "which the model does not fix; the first reconcile after the expiry deletes it: propeller's round at "
            f"{instant_text(at)} s may or may not find the job"
        )
        self.attempt = attempt
        self.ttl = ttl
        self.at = at
        self.kind = f"propeller looks while the TTL may have deleted the job (attempt {attempt})"


class RetryBelowTheClock(ModelRefusal):
    """A round fails so late that adding `round_retry_seconds` to the moment leaves it unchanged: the model's clock
    is a float of seconds, which holds every nanosecond only below `FLOAT_HOLDS_NANOSECONDS` (about 48 days) and
    ever coarser steps after it, so the next round would fall at the same instant for ever."""

    kind = "a round's retry is finer than the clock holds at its moment"

    def __init__(self, at: float, retry: float) -> None:
        super().__init__(
            f"propeller's round at {at:.17g} s retries {retry:g} s later, which the model's clock (float seconds) "
            f"cannot hold that late: its step there is {math.ulp(at):g} s, so every later round would fall at the "
            "same instant; shorten the scenario's times or lengthen propeller.round_retry_seconds"
        )
        self.at = at
        self.retry = retry


def _later(moment, step):
    """`moment + step` for a round's retry, refused where the float clock cannot hold the step, which would repeat
    the round at one instant for ever (a symbolic moment is exact; an observation delay below the clock's step is
    played at the moment, as it would be rounded to the nanosecond anyway)."""
    later = moment + step
    if later.__class__ is float and later == moment and step:
        raise RetryBelowTheClock(moment, step)
    return later


#: at most this many rounds that fail alike run one by one, each on the timeline (max-workflow-retries' default,
#: 10, stays within it); more are counted in one step
ROUNDS_RUN_ONE_BY_ONE = 20


def _uint32_sum(count, more):
    """FailedAttempts + more as Go's uint32 adds (wrapping past 4,294,967,295, as often as it passes it: rounds
    that never abort may be counted billions at a time); `more` may be a symbolic count."""
    total = count + more
    return total % (1 << 32) if total > UINT32_MAX else total


class PropellerActor:
    def __init__(
        self,
        clock: Clock,
        spec: ScenarioSpec,
        state: NodeState,
        config: PropellerConfig,
        snapshot: Snapshot,
        log: Callable[[Event], None],
        failed_rounds: int = 0,
        unchanged_until: Optional[Callable[[], float]] = None,
        attempt: int = 0,
    ) -> None:
        self.clock = clock
        self.spec = spec
        self.state = state
        self.config = config
        self.snapshot = snapshot
        self.log = log
        self.failed_rounds = failed_rounds  # the workflow's Status.FailedAttempts
        #: until when the prefix reads as it does now (without a world to ask: it may change at any moment)
        self.unchanged_until = unchanged_until or (lambda: self.clock.now)
        self.last_round_error: Optional[str] = None
        self.condition_message = ""  # the terminal condition's `Reason - Message`
        self.job_found = True  # False once the operator deleted the PyTorchJob (TTLSecondsAfterFinished)
        self.ttl: Optional[TtlDeletion] = None  # when the TTL may delete the job (the operator's)
        self.attempt = attempt  # which attempt's job this is (0 the first), for a refusal to name
        self.terminal_at: Optional[float] = None  # when the operator set the terminal condition (the job's start: 0)
        self.observation: Optional[Observation] = None
        #: the terminal condition whose rounds fail for ever (the count can never exceed max-workflow-retries)
        self.retries_for_ever: Optional[JobCondition] = None

    def job_terminal(self, condition: JobCondition, message: str = "") -> None:
        """The operator set a terminal condition now, with this `Reason - Message`: the next round observes it."""
        self.condition_message = message
        self.terminal_at = self.clock.now
        self._next_round(condition, self.spec.observation_delay)

    def job_ttl(self, ttl: TtlDeletion) -> None:
        """The finished job has a TTL: a round that may or may not find the job deleted is refused."""
        self.ttl = ttl

    def job_deleted(self) -> None:
        """The PyTorchJob is gone: every round from now on gets NotFound from its Get."""
        self.job_found = False

    def _next_round(self, condition: JobCondition, after: float) -> None:
        self.clock.at(self.clock.now + after, lambda: self.round(condition), late=LAST)

    def round(self, condition: JobCondition) -> None:
        spec = self.spec
        if self.failed_rounds > self.config.workflow_retry_limit:
            self._abort(condition)
            return
        ttl = self.ttl
        if ttl is not None and ttl.state_at(self.clock.now) is TtlState.UNSETTLED:
            raise DeletedWithinItsSecond(self.attempt, ttl, self.clock.now)
        if not self.job_found:
            # checkResourcePhase: the Get comes before anything else in the round, so no condition and no file counts
            outcome = job_not_found(spec.namespace, spec.job_name)
            decision = node_decision(outcome, spec.retries, self.state, self.config)
            self._decided(JobCondition.DELETED, (), None, outcome, decision)
            return
        if self.terminal_at is not None and self.terminal_at < 1:  # the job's start, 0, is when Created was written
            raise CreatedInTheSameSecond(self.attempt, condition, self.terminal_at)
        if condition is not JobCondition.SUCCEEDED:
            # GetPhaseInfo maps Failed to a retryable DownstreamSystemError; no file is read
            outcome = task_outcome(JobCondition.FAILED, condition_message=self.condition_message)
            self._decided(condition, (), None, outcome, node_decision(outcome, spec.retries, self.state, self.config))
            return
        prefix, seen = self.snapshot()
        try:
            explanation = explain_store(
                prefix,
                EARLIEST if spec.error_aggregation else DEFAULT,
                spec.outputs_declared,
                spec.retries,
                self.state,
                self.config,
            )
        except StoreNamingUnknown as e:
            raise StoreNotModelled(str(e)) from None
        except DynamicTaskPrefix as e:
            raise DynamicTaskNotModelled(str(e)) from None
        if explanation.outcome.phase is TaskPhase.ROUND_FAILED:
            self.failed_rounds = _uint32_sum(self.failed_rounds, 1)
            self.last_round_error = explanation.outcome.round_error
            self.log(
                Event(
                    self.clock.now,
                    "propeller",
                    What.ROUND_FAILED,
                    reason=self.last_round_error or "",
                    count=self.failed_rounds,
                )
            )
            self._after_failed_round(condition)
            return
        self._decided(condition, seen, explanation.read, explanation.outcome, explanation.decision)

    def _after_failed_round(self, condition: JobCondition) -> None:
        """The next round, `round_retry` later; the rounds before the prefix can change fail alike, in one step."""
        retry, now, limit = self.spec.round_retry, self.clock.now, self.config.workflow_retry_limit
        until = self.unchanged_until()
        kept_until = self.ttl.kept_until() if self.ttl is not None and self.job_found else None
        if kept_until is not None and kept_until < until:
            until = kept_until if kept_until > now else now  # a round that may not find the job runs on its own
        if until == math.inf and self.config.rounds_never_abort:
            self.retries_for_ever = condition  # no callback is left: the clock runs dry, nothing is decided
            self.log(Event(now, "propeller", What.ROUNDS_FAIL_FOR_EVER, reason=self.last_round_error or ""))
            return
        if self.config.rounds_never_abort:
            # no round aborts: every round before the change fails alike, however many (`until` is finite here),
            # and FailedAttempts wraps as often as they pass uint32's largest
            alike = math.ceil((until - now) / retry)
        else:
            alike = limit + 1 - self.failed_rounds  # the rounds still to fail before the one that aborts
            if until != math.inf:
                alike = min(alike, math.ceil((until - now) / retry))
        if until != math.inf:
            # strictly before: a change at a round is seen
            while alike > 0 and not on_the_clock(now + alike * retry) < until:
                alike -= 1
        if alike <= ROUNDS_RUN_ONE_BY_ONE:
            self.clock.at(_later(now, retry), lambda: self.round(condition), late=LAST)
            return
        last = now + alike * retry

        def fail_alike() -> None:
            self.failed_rounds = _uint32_sum(self.failed_rounds, alike)
            why = self.last_round_error or ""
            what = What.ROUNDS_FAIL_UNTIL_A_CHANGE if self.config.rounds_never_abort else What.ROUNDS_FAIL_ALIKE
            self.log(Event(self.clock.now, "propeller", what, reason=why, count=self.failed_rounds))
            self.clock.at(_later(last, retry), lambda: self.round(condition), late=LAST)

        self.clock.at(_later(now, retry), fail_alike, late=LAST)

    def _abort(self, condition: JobCondition) -> None:
        """`HandleAbortedWorkflow`: the workflow fails with SYSTEM "Workflow abort failed"."""
        outcome = TaskOutcome(
            TaskPhase.ROUND_FAILED,
            reason=f"{self.failed_rounds} failed rounds, more than max-workflow-retries",
            round_error=self.last_round_error,
        )
        decision = node_decision(outcome, self.spec.retries, self.state, self.config)
        self.log(Event(self.clock.now, "propeller", What.WORKFLOW_ABORTED, reason=decision.message))
        self.observation = Observation(self.clock.now, condition, (), None, outcome, decision)

    def _decided(self, condition, seen, read, outcome, decision) -> None:
        self.observation = Observation(self.clock.now, condition, seen, read, outcome, decision)
        self.log(
            Event(
                self.clock.now,
                "propeller",
                What.OBSERVES,
                condition=condition.value,
                count=len({u.name for u in seen if u.name != "outputs.pb"}),  # a rewritten error.pb is one file
            )
        )
