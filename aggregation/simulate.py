"""Simulate a scenario: the shared world and attempt loop, with simulated pods on the simulated clock."""

from __future__ import annotations

from aggregation.execution import MAX_ATTEMPTS, run_execution
from aggregation.kinds import ReplicaMapOrder
from aggregation.operator import UndecidedVerdict
from aggregation.pods import SimulatedPods
from aggregation.results import AttemptResult, Execution, FinalPhase, Source, success_phase
from aggregation.scenario import ScenarioSpec


def simulate(spec: ScenarioSpec) -> Execution:
    """Every attempt of the node until it succeeds or fails for good."""
    return run_execution(
        spec, lambda attempt, resumed_from: SimulatedPods(spec, attempt, resumed_from), Source.SIMULATED
    )


#: the map-order fields one execution pinned, with the order each took: ((field, order name), ...)
Pins = tuple[tuple[str, str], ...]


def simulate_each_map_order(spec: ScenarioSpec) -> tuple[tuple[Pins, Execution], ...]:
    """Every execution the operator's random map order allows: one when no moment is left to it, else one per order
    at each such moment (an attempt has at most one: its job is then terminal), each with the orders it took. A
    moment in an attempt the scenario does not list stays refused: it has no field to pin."""
    executions, pending = [], [(spec, ())]
    while pending:
        pinned, pins = pending.pop(0)
        try:
            executions.append((pins, simulate(pinned)))
        except UndecidedVerdict as undecided:
            if not undecided.pins:
                raise
            for pin in undecided.pins:
                pending.append((pinned.with_map_order(undecided.attempt, ReplicaMapOrder(pin[1])), pins + (pin,)))
    return tuple(executions)


__all__ = [
    "AttemptResult",
    "Execution",
    "FinalPhase",
    "MAX_ATTEMPTS",
    "simulate",
    "simulate_each_map_order",
    "success_phase",
]
