"""Propeller as an actor on the attempt's clock: the round that observes the terminal job decides.

Propeller's rounds are periodic, so the first round after the job turns terminal comes some time later
(the scenario's `observation_delay_seconds`). That round reads the output prefix as it is at that
moment (`snapshot`), only if the job Succeeded (`plugin_manager.go` builds the error reader only then),
and decides the node's fate with the rules of `propeller.py`. The round runs after everything else that
happens at the same instant, so an upload at the very moment it looks is seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from aggregation.engine import Clock
from aggregation.explain import explain_prefix
from aggregation.kinds import JobCondition
from aggregation.pods import Upload
from aggregation.propeller import NodeDecision, NodeState, PropellerConfig, TaskOutcome, node_decision, task_outcome
from aggregation.readers import DEFAULT, EARLIEST, ReadResult
from aggregation.scenario import ScenarioSpec
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


class PropellerActor:
    def __init__(
        self,
        clock: Clock,
        spec: ScenarioSpec,
        state: NodeState,
        config: PropellerConfig,
        snapshot: Snapshot,
        log: Callable[[Event], None],
    ) -> None:
        self.clock = clock
        self.spec = spec
        self.state = state
        self.config = config
        self.snapshot = snapshot
        self.log = log
        self.observation: Optional[Observation] = None

    def job_terminal(self, condition: JobCondition) -> None:
        """The operator set a terminal condition now: the next round observes it."""
        self.clock.at(self.clock.now + self.spec.observation_delay, lambda: self.observe(condition), late=True)

    def observe(self, condition: JobCondition) -> None:
        spec = self.spec
        if condition is not JobCondition.SUCCEEDED:
            # GetPhaseInfo maps Failed to a retryable DownstreamSystemError; no file is read
            outcome = task_outcome(JobCondition.FAILED, condition_message="a pod failed")
            self._decided(condition, (), None, outcome, node_decision(outcome, spec.retries, self.state, self.config))
            return
        prefix, seen = self.snapshot()
        explanation = explain_prefix(
            prefix,
            EARLIEST if spec.error_aggregation else DEFAULT,
            spec.outputs_declared,
            spec.retries,
            self.state,
            self.config,
        )
        self._decided(condition, seen, explanation.read, explanation.outcome, explanation.decision)

    def _decided(self, condition, seen, read, outcome, decision) -> None:
        self.observation = Observation(self.clock.now, condition, seen, read, outcome, decision)
        self.log(
            Event(
                self.clock.now,
                "propeller",
                What.OBSERVES,
                condition=condition.value,
                count=sum(1 for u in seen if u.name != "outputs.pb"),
            )
        )
