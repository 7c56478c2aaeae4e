"""The attempt loop: attempt after attempt until propeller's decision ends the node.

The same loop runs simulated pods and real ones: `make_pods(attempt, resumed_from)` gives the pods of
each attempt. A RETRY starts the next attempt with the node's new counters; it resumes from the
previous attempt's checkpoint if that attempt wrote one (`ComputePreviousCheckpointPath`).
"""

from __future__ import annotations

from typing import Callable, Optional

from aggregation import defaults
from aggregation.propeller import Decision, NodeState, PropellerConfig
from aggregation.results import AttemptResult, Execution, FinalPhase, Source, success_phase
from aggregation.scenario import ModelRefusal, ScenarioSpec
from aggregation.world import Attempt, Pods

#: Propeller's budgets end most executions long before this; a scenario whose retries allow more, and whose
#: attempts keep failing, is refused here rather than simulated without end.
MAX_ATTEMPTS = defaults.MAX_ATTEMPTS


class TooManyAttempts(ModelRefusal):
    """The node would go on past `MAX_ATTEMPTS` attempts: the simulator refuses to play further."""

    def __init__(self, message: str, max_attempts: int) -> None:
        super().__init__(message)
        self.kind = f"the node still retries after {max_attempts} attempts"


def run_attempt(
    spec: ScenarioSpec,
    attempt: int,
    state: NodeState,
    resumed_from: Optional[int],
    pods: Pods,
    config: Optional[PropellerConfig] = None,
    failed_rounds: int = 0,
) -> AttemptResult:
    world = Attempt(spec, attempt, state, pods, config, failed_rounds)
    try:
        world.run()
    finally:
        pods.close()
    return world.result(resumed_from, pods.resumed_step())


def run_execution(
    spec: ScenarioSpec,
    make_pods: Callable[[int, Optional[int]], Pods],
    source: Source,
    max_attempts: int = MAX_ATTEMPTS,
    config: Optional[PropellerConfig] = None,
) -> Execution:
    """Every attempt of the node until it succeeds, fails for good, or its job never ends."""
    state = NodeState()
    attempts: list[AttemptResult] = []
    for attempt in range(max_attempts):
        resumed_from = attempt - 1 if attempts and attempts[-1].wrote_checkpoint else None
        failed_rounds = attempts[-1].failed_rounds if attempts else 0  # the workflow's count carries over
        result = run_attempt(
            spec, attempt, state, resumed_from, make_pods(attempt, resumed_from), config, failed_rounds
        )
        attempts.append(result)
        decision = result.decision
        if decision.decision is Decision.RETRY:
            state = decision.next_state
            continue
        if decision.decision is Decision.SUCCEED:
            return Execution(
                spec, tuple(attempts), success_phase(attempt, result.preempted, result.completed), source=source
            )
        if decision.decision is Decision.WAIT:
            return Execution(spec, tuple(attempts), FinalPhase.STILL_RUNNING, source=source)
        return Execution(spec, tuple(attempts), FinalPhase.FAILED_PERMANENTLY, decision.code, decision.kind, source)
    raise TooManyAttempts(
        f"{spec.name}: the node is still retrying after {max_attempts} attempts (task.retries {spec.retries}); "
        f"the simulator plays at most {max_attempts}",
        max_attempts,
    )
