"""Simulate a scenario: the shared world and attempt loop, with simulated pods on the simulated clock."""

from __future__ import annotations

from aggregation.execution import MAX_ATTEMPTS, run_execution
from aggregation.pods import SimulatedPods
from aggregation.results import AttemptResult, Execution, FinalPhase, Source, success_phase
from aggregation.scenario import ScenarioSpec


def simulate(spec: ScenarioSpec) -> Execution:
    """Every attempt of the node until it succeeds or fails for good."""
    return run_execution(
        spec, lambda attempt, resumed_from: SimulatedPods(spec, attempt, resumed_from), Source.SIMULATED
    )


__all__ = ["AttemptResult", "Execution", "FinalPhase", "MAX_ATTEMPTS", "simulate", "success_phase"]
