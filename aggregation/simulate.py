"""Simulate a scenario: the shared world and attempt loop, with simulated pods on the simulated clock."""

from __future__ import annotations

from aggregation.execution import MAX_ATTEMPTS, run_execution
from aggregation.kinds import ReplicaMapOrder
from aggregation.operator import UndecidedVerdict
from aggregation.pods import SimulatedPods
from aggregation.results import AttemptResult, Execution, FinalPhase, Source, success_phase
from aggregation.scenario import ModelRefusal, ScenarioSpec


def simulate(spec: ScenarioSpec) -> Execution:
    """Every attempt of the node until it succeeds or fails for good."""
    return run_execution(
        spec, lambda attempt, resumed_from: SimulatedPods(spec, attempt, resumed_from), Source.SIMULATED
    )


#: the map-order fields one execution pinned, with the order each took: ((field, order name), ...)
Pins = tuple[tuple[str, str], ...]


def each_map_order(spec: ScenarioSpec) -> tuple[tuple[Pins, "Execution | ModelRefusal"], ...]:
    """Every execution the operator's random map order allows: one when no moment is left to it, else one per order
    at each such moment (an attempt has at most one: its job is then terminal), each with the orders it took. Where
    the model refuses to play on (`ModelRefusal`), that entry is the refusal. This includes a moment in an attempt
    the scenario does not list: there is no field to pin it."""
    executions: list[tuple[Pins, Execution | ModelRefusal]] = []
    pending: list[tuple[ScenarioSpec, Pins]] = [(spec, ())]
    while pending:
        pinned, pins = pending.pop(0)
        try:
            executions.append((pins, simulate(pinned)))
        except UndecidedVerdict as undecided:
            if not undecided.pins:
                executions.append((pins, undecided))
            for pin in undecided.pins:
                pending.append((pinned.with_map_order(undecided.attempt, ReplicaMapOrder(pin[1])), pins + (pin,)))
        except ModelRefusal as refusal:
            executions.append((pins, refusal))
    return tuple(executions)


def simulate_each_map_order(spec: ScenarioSpec) -> tuple[tuple[Pins, Execution], ...]:
    """`each_map_order`, where a refusal anywhere refuses the whole point (raised: one line)."""
    executions = each_map_order(spec)
    for _, execution in executions:
        if isinstance(execution, ModelRefusal):
            raise execution
    return executions  # type: ignore[return-value]  # no refusal among them


__all__ = [
    "AttemptResult",
    "Execution",
    "FinalPhase",
    "MAX_ATTEMPTS",
    "each_map_order",
    "simulate",
    "simulate_each_map_order",
    "success_phase",
]
