"""Explore the race: vary a scenario's timings and signal order, and count outcomes per plugin and flag.

A variation is `FIELD=RANGE` where FIELD is a path into the scenario proto (`timings.upload_seconds`,
`attempts[0].events[1].pod`, `propeller.observation_delay_seconds`, ...) and RANGE is `start:stop:step`
(inclusive) or a comma list (`0.03,1,30` or `train-worker-0,train-worker-1`). Small spaces are
enumerated exhaustively in lexicographic order; larger ones are sampled with a seeded RNG. For every
plugin variant x aggregation flag the outcome distribution is reported, with one minimal
counterexample (the first assignment, in enumeration order, that produced each outcome).
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from aggregation import defaults
from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from aggregation.scenario import PLUGIN_VARIANTS, ScenarioError, ScenarioSource
from aggregation.simulate import Execution, simulate

OUTCOMES = ("RETRIED", "FAILED_PERMANENTLY", "SUCCEEDED_SILENTLY", "SUCCEEDED", "STILL_RUNNING")
_STEP = re.compile(r"([A-Za-z_]\w*)(?:\[(\d+)\])?")


@dataclass(frozen=True)
class Variation:
    field: str
    values: tuple


@dataclass
class Cell:
    plugin: str
    aggregation: bool
    counts: Counter = field(default_factory=Counter)
    masked: int = 0
    total: int = 0
    counterexamples: dict = field(default_factory=dict)  # outcome -> (assignment, Execution)

    def share(self, outcome: str) -> float:
        return self.counts[outcome] / self.total if self.total else 0.0


@dataclass(frozen=True)
class SweepResult:
    variations: tuple[Variation, ...]
    assignments: int
    exhaustive: bool
    cells: tuple[Cell, ...]
    meaning: dict = field(default_factory=dict)  # outcome -> GOOD | BAD | NEUTRAL, for this scenario


GOOD, BAD, NEUTRAL = "good", "bad", "neutral"


def wanted_outcome(message: pb.Scenario) -> str:
    """What a correct plugin makes of the scenario's first attempt.

    A genuine (non-recoverable) worker error must be what the node reports: it fails for good. A preemption
    or a recoverable error must retry. Without either, the job should simply succeed.
    """
    events = message.attempts[0].events if message.attempts else ()
    kinds = [(e.WhichOneof("kind"), e.worker_error.recoverable) for e in events]
    if any(kind == "worker_error" and not recoverable for kind, recoverable in kinds):
        return "FAILED_PERMANENTLY"
    if any(kind == "preemption" or (kind == "worker_error" and recoverable) for kind, recoverable in kinds):
        return "RETRIED"
    return "SUCCEEDED"


def outcome_meanings(message: pb.Scenario) -> dict[str, str]:
    """Each outcome, good or bad for this scenario: the wanted one is good; a job that succeeds after its
    attempt's trouble was over (say, a preemption after training finished) is neither; the rest are bad."""
    wanted = wanted_outcome(message)
    return {o: GOOD if o == wanted else NEUTRAL if o == "SUCCEEDED" else BAD for o in OUTCOMES}


def shown_outcomes(result: "SweepResult") -> tuple[str, ...]:
    """The outcomes a table or plot shows: all of them, except a job that never ends when none did."""
    return tuple(o for o in OUTCOMES if o != "STILL_RUNNING" or any(c.counts[o] for c in result.cells))


def outcome_of(execution: Execution) -> str:
    """The headline category: did the preempted job retry, fail for good, or succeed silently?"""
    if execution.final_phase.value in ("FAILED_PERMANENTLY", "STILL_RUNNING"):
        return execution.final_phase.value
    if len(execution.attempts) > 1:
        return "RETRIED"
    return execution.final_phase.value if execution.final_phase.value == "SUCCEEDED_SILENTLY" else "SUCCEEDED"


def parse_variation(text: str) -> Variation:
    if "=" not in text:
        raise ScenarioError(f"--vary {text!r}: expected FIELD=RANGE")
    name, spec = text.split("=", 1)
    name, spec = name.strip(), spec.strip()
    if ":" in spec:
        try:
            start, stop, step = (float(x) for x in spec.split(":"))
        except ValueError:
            raise ScenarioError(f"--vary {text!r}: a range is start:stop:step with numbers") from None
        if step <= 0 or stop < start:
            raise ScenarioError(f"--vary {text!r}: need step > 0 and stop >= start")
        count = int(round((stop - start) / step)) + 1
        values = tuple(round(start + i * step, 9) for i in range(count))
    else:
        values = tuple(_number_or_text(v.strip()) for v in spec.split(",") if v.strip())
    if not values:
        raise ScenarioError(f"--vary {text!r}: no values")
    return Variation(name, values)


def _number_or_text(value: str):
    try:
        return float(value)
    except ValueError:
        return value


def _assign(message: pb.Scenario, path: str, value) -> None:
    target = message
    steps = path.split(".")
    for i, step in enumerate(steps):
        match = _STEP.fullmatch(step)
        if not match:
            raise ScenarioError(f"--vary {path}: bad field step {step!r}")
        name, index = match.group(1), match.group(2)
        descriptor = target.DESCRIPTOR.fields_by_name.get(name)
        if descriptor is None:
            raise ScenarioError(f"--vary {path}: {target.DESCRIPTOR.full_name} has no field {name!r}")
        last = i == len(steps) - 1
        if index is not None:
            repeated = getattr(target, name)
            if int(index) >= len(repeated):
                raise ScenarioError(f"--vary {path}: {name} has only {len(repeated)} entries")
            if last:
                raise ScenarioError(f"--vary {path}: cannot set a whole repeated entry")
            target = repeated[int(index)]
        elif last:
            try:
                if descriptor.type == descriptor.TYPE_ENUM and isinstance(value, str):
                    value = descriptor.enum_type.values_by_name[value].number
                elif descriptor.type in (descriptor.TYPE_UINT32, descriptor.TYPE_INT32, descriptor.TYPE_UINT64):
                    value = int(value)
                elif descriptor.type == descriptor.TYPE_BOOL:
                    value = value in (1.0, "true", "True")
                elif descriptor.type == descriptor.TYPE_STRING:
                    value = str(value)
                setattr(target, name, value)
            except (TypeError, ValueError, KeyError) as e:
                raise ScenarioError(f"--vary {path}: cannot set {value!r}: {e}") from None
        else:
            target = getattr(target, name)


def default_variations(source: ScenarioSource) -> list[Variation]:
    """The race's usual suspects, for a scenario with a preemption in its first attempt."""
    message = source.message
    variations = [
        Variation("timings.agent_shutdown_seconds", (0.03, 1.0, 5.0, 30.0)),
        Variation("timings.upload_seconds", (0.05, 1.0, 3.0)),
        Variation("timings.failure_detection_seconds", (1.0, 3.0, 7.0)),
        Variation("propeller.observation_delay_seconds", (0.0, 1.0, 3.0, 10.0)),
    ]
    for index, override in enumerate(message.pod_timings):
        if override.timings.HasField("clock_offset_seconds"):  # the scenario says this node's clock may be skewed
            bound = defaults.CLOCK_OFFSET_BOUND_SECONDS
            variations.append(Variation(f"pod_timings[{index}].timings.clock_offset_seconds", (-bound, 0.0, bound)))
    if message.attempts:
        for index, event in enumerate(message.attempts[0].events):
            if event.WhichOneof("kind") == "worker_error":
                base = float(int(event.at_seconds))
                variations.insert(
                    0,
                    Variation(
                        f"attempts[0].events[{index}].at_seconds", tuple(round(base + f, 3) for f in (0.0, 0.5, 0.95))
                    ),
                )
                break
        for index, event in enumerate(message.attempts[0].events):
            if event.WhichOneof("kind") == "preemption":
                base = float(int(event.at_seconds))
                variations.insert(
                    0,
                    Variation(
                        f"attempts[0].events[{index}].at_seconds",
                        tuple(round(base + f, 3) for f in (0.0, 0.2, 0.4, 0.6, 0.8, 0.95)),
                    ),
                )
                variations.insert(0, Variation(f"attempts[0].events[{index}].pod", tuple(message.job.pods)))
                break
    return variations


def assignments(variations: Sequence[Variation], samples: int, seed: int) -> tuple[list[tuple], bool]:
    sizes = [len(v.values) for v in variations]
    total = 1
    for size in sizes:
        total *= size
    if total <= samples:
        return list(itertools.product(*(v.values for v in variations))), True
    rng = random.Random(seed)
    chosen = sorted({tuple(rng.randrange(n) for n in sizes) for _ in range(samples)})
    return [tuple(v.values[i] for v, i in zip(variations, picks)) for picks in chosen], False


def sweep(
    source: ScenarioSource,
    variations: Sequence[Variation],
    samples: int = 2000,
    seed: int = 0,
    plugins: Sequence[str] = tuple(PLUGIN_VARIANTS),
    flags: Sequence[bool] = (True, False),
    on_case: Optional[Callable[[tuple, Cell, Execution, str], None]] = None,
    progress: Optional[Callable[[int, int], None]] = None,
    deployment=None,
) -> SweepResult:
    """Simulate every planned assignment under every plugin x flag cell.

    `on_case(assignment, cell, execution, outcome)` sees each simulation as it finishes (for `--out`);
    `progress(done, total)` is told after each assignment. `deployment` (see `deployment.py`) replaces
    the scenario's propeller settings in every case.
    """
    source.spec(plugin_override=plugins[0])  # the scenario as written must be valid, whatever we vary
    plan, exhaustive = assignments(variations, samples, seed)
    cells = [Cell(plugin, flag) for plugin in plugins for flag in flags]
    for done, values in enumerate(plan, 1):
        message = pb.Scenario()
        message.CopyFrom(source.message)
        for variation, value in zip(variations, values):
            _assign(message, variation.field, value)
        base = source.spec(plugin_override=plugins[0], message=message)
        if deployment is not None:  # the deployment's propeller settings (the cells still set the flag)
            base = base.with_deployment(deployment)
        assignment = tuple(zip((v.field for v in variations), values))
        for cell in cells:
            execution = simulate(base.with_plugin(cell.plugin).with_aggregation(cell.aggregation))
            outcome = outcome_of(execution)
            cell.counts[outcome] += 1
            cell.total += 1
            cell.masked += execution.masked_genuine_error
            cell.counterexamples.setdefault(outcome, (assignment, execution))
            if on_case is not None:
                on_case(assignment, cell, execution, outcome)
        if progress is not None:
            progress(done, len(plan))
    return SweepResult(tuple(variations), len(plan), exhaustive, tuple(cells), outcome_meanings(source.message))
