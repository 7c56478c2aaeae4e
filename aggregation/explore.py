"""Explore the race: vary a scenario's timings and signal order, and count outcomes per plugin and flag.

A variation is `FIELD=RANGE` where FIELD is a path into the scenario proto (`timings.upload_seconds`,
`attempts[0].events[1].pod`, `propeller.observation_delay_seconds`, ...) and RANGE is `start:stop:step`
(inclusive) or a comma list (`0.03,1,30` or `train-worker-0,train-worker-1`). Small spaces are
enumerated exhaustively in lexicographic order; larger ones are sampled with a seeded RNG. For every
plugin variant x aggregation flag the outcome distribution is reported, with one minimal
counterexample (the first assignment, in enumeration order, that produced each outcome).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Optional, Sequence

from google.protobuf.descriptor import FieldDescriptor

from aggregation import defaults
from aggregation.caselog import CaseRow
from aggregation.parallel import ordered_map
from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from aggregation.scenario import (
    PLUGIN_VARIANTS,
    ModelRefusal,
    ScenarioError,
    ScenarioSource,
    monitor_interval_of,
)
from aggregation.simulate import Execution, each_map_order

#: a point the model refuses to play (`scenario.ModelRefusal`): an outcome of a sweep's point, a region of a map
REFUSED = "REFUSED"
OUTCOMES = ("RETRIED", "FAILED_PERMANENTLY", "SUCCEEDED_SILENTLY", "SUCCEEDED", "STILL_RUNNING", REFUSED)
_STEP = re.compile(r"([A-Za-z_]\w*)(?:\[(\d+)\])?")
MAX_VALUES_PER_FIELD = defaults.MAX_VALUES_PER_VARIATION


@dataclass(frozen=True)
class Variation:
    field: str
    values: Sequence  # a tuple, or a lazy NumberRange


@dataclass
class Cell:
    plugin: str
    aggregation: bool
    counts: Counter = field(default_factory=Counter)
    masked: int = 0
    total: int = 0
    #: outcome -> (assignment, Execution); where Go's map order decided, the assignment ends with the order it took
    counterexamples: dict = field(default_factory=dict)
    #: points whose outcome Go's map order decides (their orders' outcomes differ; each counted under the worst)
    map_order_decided: int = 0
    #: the first such point: (assignment, ((pins, outcome) per order, ...))
    map_order_example: Optional[tuple] = None
    #: the first point the model refuses: (assignment with the orders it took, the refusal's line)
    refusal_example: Optional[tuple] = None

    def share(self, outcome: str) -> float:
        return self.counts[outcome] / self.total if self.total else 0.0


@dataclass(frozen=True)
class SweepResult:
    variations: tuple[Variation, ...]
    assignments: int
    exhaustive: bool
    cells: tuple[Cell, ...]
    meaning: dict = field(default_factory=dict)  # outcome -> GOOD | BAD | NEUTRAL, for this scenario

    @property
    def assignments_text(self) -> str:
        """`1 assignment`, `2,000 assignments`: how reports and plots count the points."""
        return f"{self.assignments:,} assignment" + ("" if self.assignments == 1 else "s")


#: what an outcome means for the scenario; REFUSAL, the meaning of the REFUSED outcome, is neither good nor bad
GOOD, BAD, NEUTRAL, REFUSAL = "good", "bad", "neutral", "refused"
_WORST_FIRST = (BAD, REFUSAL, NEUTRAL, GOOD)


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
    return {
        o: GOOD if o == wanted else REFUSAL if o == REFUSED else NEUTRAL if o == "SUCCEEDED" else BAD for o in OUTCOMES
    }


def shown_outcomes(result: "SweepResult") -> tuple[str, ...]:
    """The outcomes a table or plot shows: all of them, except a job that never ends and a point the model refuses
    when there were none."""
    rare = ("STILL_RUNNING", REFUSED)
    return tuple(o for o in OUTCOMES if o not in rare or any(c.counts[o] for c in result.cells))


def outcome_label(outcome: str) -> str:
    """How tables, plots and maps name an outcome: `succeeded silently`, `refused by the model`."""
    return "refused by the model" if outcome == REFUSED else outcome.replace("_", " ").lower()


#: how a report labels the points whose outcome Go's map order decides (`Cell.map_order_decided`)
MAP_ORDER_LABEL = "decided by Go's map order"


def map_order_decides(result: "SweepResult") -> bool:
    """Whether Go's map order decided any point of the sweep (a report then shows how many, per cell)."""
    return any(cell.map_order_decided for cell in result.cells)


def headline(final_phase: str, attempts: int) -> str:
    """The headline category of a final phase after `attempts`: retried, failed for good, succeeded silently. How
    the node ended decides first: a silent success after a retry is still a silent success (the attempt that ended
    it was preempted and never retried), not a retry."""
    if final_phase in ("FAILED_PERMANENTLY", "STILL_RUNNING", "SUCCEEDED_SILENTLY"):
        return final_phase
    return "RETRIED" if attempts > 1 else "SUCCEEDED"


def outcome_of(execution: "Execution | ModelRefusal") -> str:
    """The headline category: did the preempted job retry, fail for good, or succeed silently? (Or did the model
    refuse to play it?)"""
    if isinstance(execution, ModelRefusal):
        return REFUSED
    return headline(execution.final_phase.value, len(execution.attempts))


class NumberRange(Sequence):
    """`start:stop:step`, inclusive, without materialising it: a sweep may sample a few points of a huge range."""

    def __init__(self, start: float, step: float, count: int, integral: bool) -> None:
        self.start, self.step, self.count, self.integral = start, step, count, integral

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.count))]
        if not -self.count <= index < self.count:
            raise IndexError(index)
        index %= self.count
        value = self.start + index * self.step
        return int(round(value)) if self.integral else round(value, 9)

    def __repr__(self) -> str:
        return f"NumberRange({self.start!r}, {self.step!r}, {self.count})"


#: integer field types and the range protobuf (and Flyte, for retries: uint32) gives them
INTEGER_RANGES = {
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
}
_BOOLEANS = {"true": True, "false": False, "1": True, "0": False}


def field_descriptor(message: pb.Scenario, path: str) -> FieldDescriptor:
    """The scalar field at `path` in `message` (repeated entries must exist); ScenarioError otherwise."""
    target_type = message.DESCRIPTOR
    target = message
    steps = path.split(".")
    for i, step in enumerate(steps):
        match = _STEP.fullmatch(step)
        if not step:
            raise ScenarioError(f"--vary {path!r}: no field name" if not path else f"--vary {path}: an empty step")
        if not match:
            raise ScenarioError(f"--vary {path}: bad field step {step!r}")
        name, index = match.group(1), match.group(2)
        descriptor = target_type.fields_by_name.get(name)
        if descriptor is None:
            raise ScenarioError(f"--vary {path}: {target_type.full_name} has no field {name!r}")
        last = i == len(steps) - 1
        repeated = descriptor.is_repeated
        chosen = _oneof_choice(target, descriptor)
        if chosen is not None and chosen != name:  # it would silently turn the message into another kind
            where = ".".join(steps[:i]) or "the scenario"
            raise ScenarioError(f"--vary {path}: {where} is a {chosen}, not a {name}")
        if repeated and descriptor.type != descriptor.TYPE_MESSAGE:  # with or without an index: no entry to vary
            raise ScenarioError(f"--vary {path}: {name} is a list of scalars; only scalar fields can be varied")
        if repeated and index is None:
            raise ScenarioError(f"--vary {path}: {name} is a list; vary one entry's field, e.g. {name}[0]...")
        if not repeated and index is not None:
            raise ScenarioError(f"--vary {path}: {name} is not a list")
        if descriptor.type == descriptor.TYPE_MESSAGE:
            if last:
                raise ScenarioError(f"--vary {path}: {name} is a message; only scalar fields can be varied")
            if repeated:
                entries = getattr(target, name) if target is not None else ()
                if int(index) >= len(entries):
                    held = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
                    raise ScenarioError(f"--vary {path}: {name} has only {held}")
                target = entries[int(index)]
            else:
                target = getattr(target, name) if target is not None else None
            target_type = descriptor.message_type
            continue
        if not last:
            raise ScenarioError(f"--vary {path}: {name} is a scalar; nothing below it")
        return descriptor
    raise ScenarioError(f"--vary {path}: empty field path")  # pragma: no cover - split never yields nothing


def _real_oneof(descriptor: FieldDescriptor):
    """The oneof the field is a member of, None when none is (proto3's synthetic oneof of an `optional` field is
    no choice between members)."""
    oneof = descriptor.containing_oneof
    if oneof is None or (len(oneof.fields) == 1 and oneof.name == f"_{descriptor.name}"):
        return None
    return oneof


def _oneof_choice(target, descriptor: FieldDescriptor) -> Optional[str]:
    """The member set in the oneof `descriptor` belongs to (its own name when it is in none; None when none is set,
    which setting the field chooses: an unset reaction to a peer's death is its default, and an event without a
    kind is refused by the scenario's own check)."""
    oneof = _real_oneof(descriptor)
    return descriptor.name if oneof is None else target.WhichOneof(oneof.name)


def canonical_path(path: str) -> str:
    """A field path as one spelling (`attempts[00]` is `attempts[0]`), so one field is one name."""
    steps = []
    for step in path.split("."):
        name, index = _STEP.fullmatch(step).groups()
        steps.append(name if index is None else f"{name}[{int(index)}]")
    return ".".join(steps)


#: what a sweep's cells set in every case, whatever --vary says: `fixed` for `check_varied_fields`
SWEEP_CELLS = {
    "plugin": "each of a sweep's cells plays one plugin (--plugin picks them)",
    "propeller.error_aggregation": "a sweep plays aggregation on and off, each in cells of its own",
}


def _oneof_members(message: pb.Scenario, path: str) -> list[tuple[str, str, str]]:
    """(where, oneof, member) for each real oneof member on a valid field path."""
    members, descriptor_type, where = [], message.DESCRIPTOR, []
    for step in path.split("."):
        name = _STEP.fullmatch(step).group(1)
        descriptor = descriptor_type.fields_by_name[name]
        oneof = _real_oneof(descriptor)
        if oneof is not None:
            members.append((".".join(where) or "the scenario", oneof.name, name))
        where.append(step)
        if descriptor.type == descriptor.TYPE_MESSAGE:
            descriptor_type = descriptor.message_type
    return members


def check_varied_fields(
    names: Sequence[str], fixed: Optional[dict] = None, deployment=None, message: Optional[pb.Scenario] = None
) -> None:
    """One field varied once, and never one something else sets in every case: the propeller settings a
    `--propeller-config` deployment makes (`ScenarioSpec.with_deployment`), and `fixed` (field -> who sets it).
    With the scenario's `message`, nor two members of one oneof (setting one clears the other)."""
    fixed = SWEEP_CELLS if fixed is None else fixed
    seen = set()
    chosen: dict[tuple[str, str], tuple[str, str]] = {}
    for name in names:
        if name in seen:
            raise ScenarioError(f"--vary {name}: given twice")
        seen.add(name)
        for where, oneof, member in _oneof_members(message, name) if message is not None else ():
            other = chosen.setdefault((where, oneof), (member, name))
            if other[0] != member:
                raise ScenarioError(
                    f"--vary {name}: {where} has one {oneof} at a time, and --vary {other[1]} sets another "
                    f"({other[0]}); setting one clears the other"
                )
        step = name.removeprefix("propeller.")
        if deployment is not None and name.startswith("propeller.") and deployment.sets(step):
            how = "sets it" if step in deployment.values else "leaves it unset (Flyte's default, off)"
            raise ScenarioError(
                f"--vary {name}: --propeller-config {how} in every case, so varying it would change nothing"
            )
        if name in fixed:
            raise ScenarioError(f"--vary {name}: {fixed[name]}, so varying it would change nothing")


def typed_value(path: str, descriptor: FieldDescriptor, text: str):
    """One value of a `--vary` list, read by the field's type."""
    kind = descriptor.type
    if kind == descriptor.TYPE_STRING:
        return text
    if kind == descriptor.TYPE_BOOL:
        if text.lower() not in _BOOLEANS:
            raise ScenarioError(f"--vary {path}: {text!r} is not a boolean (true or false)")
        return _BOOLEANS[text.lower()]
    if kind == descriptor.TYPE_ENUM:
        enum = descriptor.enum_type
        if text in enum.values_by_name:
            return text  # protobuf sets an enum field by its name, and the name is what a report should print
        names = ", ".join(v.name for v in enum.values)
        raise ScenarioError(f"--vary {path}: {text!r} is not a {enum.name} (expected one of {names})")
    if "_" in text:  # Python reads 1_0 as 10; a scenario file would not
        raise ScenarioError(f"--vary {path}: {text!r} is not a number")
    if kind in INTEGER_RANGES:
        low, high = INTEGER_RANGES[kind]
        try:
            value = int(text)
        except ValueError:
            raise ScenarioError(f"--vary {path}: {text!r} is not an integer") from None
        if not low <= value <= high:
            raise ScenarioError(f"--vary {path}: {value} is outside the field's range [{low}, {high}]")
        return value
    try:
        value = float(text)
    except ValueError:
        raise ScenarioError(f"--vary {path}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ScenarioError(f"--vary {path}: {text!r} is not a finite number")
    return value


def parse_variation(text: str, message: pb.Scenario) -> Variation:
    """`FIELD=start:stop:step` or `FIELD=a,b,c`, typed by the field of `message` it names."""
    if "=" not in text:
        raise ScenarioError(f"--vary {text!r}: expected FIELD=RANGE")
    name, spec = (part.strip() for part in text.split("=", 1))
    descriptor = field_descriptor(message, name)
    name = canonical_path(name)
    numeric = descriptor.type in INTEGER_RANGES or descriptor.type in (descriptor.TYPE_DOUBLE, descriptor.TYPE_FLOAT)
    if ":" in spec and numeric:
        parts = spec.split(":")
        if len(parts) != 3:
            raise ScenarioError(f"--vary {text!r}: a range is start:stop:step")
        start, stop, step = (typed_value(name, descriptor, part.strip()) for part in parts)
        if step <= 0 or stop < start:
            raise ScenarioError(f"--vary {text!r}: need step > 0 and stop >= start")
        spans = (stop - start) / step
        if not math.isfinite(spans):  # a step so small that the count overflows a float
            raise ScenarioError(
                f"--vary {text!r}: more values than a float counts, over the {MAX_VALUES_PER_FIELD:,} a field may "
                "take; widen the step"
            )
        count = int(spans + 1e-9) + 1
        if count > MAX_VALUES_PER_FIELD:
            raise ScenarioError(
                f"--vary {text!r}: {count:,} values, over the {MAX_VALUES_PER_FIELD:,} a field may take; widen the step"
            )
        return Variation(name, NumberRange(start, step, count, descriptor.type in INTEGER_RANGES))
    return Variation(name, listed_values(text, name, descriptor, spec))


def listed_values(text: str, name: str, descriptor: FieldDescriptor, spec: str) -> tuple:
    """The values of `FIELD=a,b,c`, each read by the field's type; an empty one is a mistake, not a skip, and so is
    one listed twice (a sweep would count its grid point twice; `prove` and `sweep` refuse it alike)."""
    parts = [part.strip() for part in spec.split(",")]
    if not any(parts):
        raise ScenarioError(f"--vary {text!r}: no values")
    if not all(parts):
        raise ScenarioError(f"--vary {text!r}: an empty value between commas")
    values = tuple(typed_value(name, descriptor, part) for part in parts)
    repeated = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if repeated is not None:
        raise ScenarioError(f"--vary {text!r}: {repeated} is listed twice")
    return values


def assign_field(message: pb.Scenario, path: str, value) -> None:
    """Set the scalar at `path` (checked by `field_descriptor` when the variation was parsed) to `value`."""
    *parents, last = path.split(".")
    target = message
    for step in parents:
        name, index = _STEP.fullmatch(step).groups()
        target = getattr(target, name)[int(index)] if index is not None else getattr(target, name)
    try:
        setattr(target, _STEP.fullmatch(last).group(1), value)
    except (TypeError, ValueError) as e:
        raise ScenarioError(f"--vary {path}: cannot set {value!r}: {e}") from None


def default_variations(source: ScenarioSource, profile: Optional[pb.TimingsProfile] = None) -> list[Variation]:
    """The race's usual suspects, for a scenario with a preemption in its first attempt. With a timings profile,
    every pod phase it measured (and the scenario does not set) is varied over the measured (min, median, max)."""
    from aggregation.profile import measured_values

    message = source.message
    interval = monitor_interval_of(message.job)

    def timing(field: str, values: tuple[float, ...]) -> Variation:
        measured = None if profile is None else measured_values(message, profile, field)
        return Variation(f"timings.{field}", measured or values)

    variations = [
        # from a worker group that obeys SIGTERM at once (measured 24-43 ms) to one that outlives the grace period
        timing("agent_shutdown_seconds", (0.03, 1.0, 5.0, 30.0)),
        # from a local disk's few milliseconds to an object store under strain
        timing("upload_seconds", (0.05, 1.0, 3.0)),
        # the least and the most measured in real pods (README "Timings")
        timing("failure_detection_seconds", (1.2, 2.1)),
        # where the agents' monitor polls fall within their interval: nothing places them
        Variation("timings.first_monitor_poll_seconds", tuple(round(interval * f, 3) for f in (0.1, 0.5, 0.9))),
        Variation("propeller.observation_delay_seconds", (0.0, 1.0, 3.0, 10.0)),
    ]
    if profile is not None:
        # every other phase the profile measured, over its measured values too (no built-in range: the model's
        # default is one measurement)
        varied = {variation.field for variation in variations}
        for descriptor in pb.PodTimings.DESCRIPTOR.fields:
            measured = measured_values(message, profile, descriptor.name)
            if measured and f"timings.{descriptor.name}" not in varied:
                variations.append(Variation(f"timings.{descriptor.name}", measured))
    for index, override in enumerate(message.pod_timings):
        if override.timings.HasField("clock_offset_seconds"):  # the scenario says this node's clock may be skewed
            bound = defaults.CLOCK_OFFSET_BOUND_SECONDS
            variations.append(Variation(f"pod_timings[{index}].timings.clock_offset_seconds", (-bound, 0.0, bound)))
    if message.attempts:
        for index, event in enumerate(message.attempts[0].events):
            if event.WhichOneof("kind") == "worker_error":
                base = float(int(event.at_seconds))
                values = tuple(round(base + f, 3) for f in (0.0, 0.5, 0.95))
                variations.insert(0, Variation(f"attempts[0].events[{index}].at_seconds", values))
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


def assignments(variations: Sequence[Variation], samples: int, seed: int) -> tuple[Iterator[tuple], int, bool]:
    """The assignments to simulate, lazily: every combination when there are at most `samples`, else `samples`
    distinct ones drawn with a seeded RNG, in enumeration order. Returns (assignments, how many, exhaustive)."""
    sizes = [len(v.values) for v in variations]
    total = math.prod(sizes)
    if total <= samples:
        indices: Iterable[int] = range(total)
        count, exhaustive = total, True
    else:
        indices = sorted(random.Random(seed).sample(range(total), samples))
        count, exhaustive = samples, False

    def decode(index: int) -> tuple:
        picks = []
        for size in reversed(sizes):
            index, pick = divmod(index, size)
            picks.append(pick)
        return tuple(v.values[i] for v, i in zip(variations, reversed(picks)))

    return (decode(i) for i in indices), count, exhaustive


def _pinned(assignment: tuple, pins: tuple) -> tuple:
    """The assignment with the map orders an execution took: what `simulate` is given to replay it (a pin replaces a
    varied value of the same field, e.g. a sweep over `replica_map_order` that includes leaving it unset)."""
    return tuple({**dict(assignment), **dict(pins)}.items())


def _assignment_text(assignment) -> str:
    return " ".join(f"{name}={value!r}" for name, value in assignment)


def sweep(
    source: ScenarioSource,
    variations: Sequence[Variation],
    samples: int = 2000,
    seed: int = 0,
    plugins: Sequence[str] = tuple(PLUGIN_VARIANTS),
    flags: Sequence[bool] = (True, False),
    on_case: Optional[Callable[[tuple, Cell, CaseRow, tuple], None]] = None,
    progress: Optional[Callable[[int, int], None]] = None,
    deployment=None,
    processes: int = 1,
) -> SweepResult:
    """Simulate every planned assignment under every plugin x flag cell.

    A point whose job the operator's random map order decides is run under each order (`simulate.each_map_order`)
    and counts once, under the worst outcome its orders give (bad, then refused, then neutral, then good: what a
    design must survive, whichever order Go takes); where those outcomes differ, `Cell.map_order_decided` counts it
    too. A point (or order) the model refuses to play (`scenario.ModelRefusal`) is REFUSED, and the sweep goes on;
    `Cell.refusal_example` keeps the first one's line.

    `on_case(assignment, cell, case, pins)` sees each simulation's row (`caselog.CaseRow`) in plan order (for
    `--out`): at such a point one per order, `pins` the orders it took; `progress(done, total)` is told as points are
    counted. `deployment` (see `deployment.py`) replaces the scenario's propeller settings in every case.
    `processes` > 1 plays the points in that many worker processes (`parallel.ordered_map`) when there are enough
    of them to pay for starting those; the result is the same as one process gives, to the counterexample.
    """
    source.spec(plugin_override=plugins[0])  # the scenario as written must be valid, whatever we vary
    check_varied_fields([v.field for v in variations], deployment=deployment, message=source.message)
    plan, planned, exhaustive = assignments(variations, samples, seed)
    cells = [Cell(plugin, flag) for plugin in plugins for flag in flags]
    meaning = outcome_meanings(source.message)
    player = _PointPlayer(
        source,
        tuple(v.field for v in variations),
        tuple((cell.plugin, cell.aggregation) for cell in cells),
        deployment,
        meaning,
        log_cases=on_case is not None,
    )
    with contextlib.closing(_played(player, plan, planned, processes)) as played:
        for done, (assignment, plays) in enumerate(played, 1):
            for cell, play in zip(cells, plays):
                cell.counts[play.outcome] += 1
                cell.total += 1
                cell.masked += play.masked
                if play.refusal is not None:
                    if cell.refusal_example is None:
                        cell.refusal_example = (_pinned(assignment, play.pins), play.refusal)
                elif play.outcome not in cell.counterexamples:  # the first point with it: its chunk sent its execution
                    cell.counterexamples[play.outcome] = (_pinned(assignment, play.pins), play.execution)
                if play.orders is not None:  # the orders' played outcomes differ: the map order decides the point
                    cell.map_order_decided += 1
                    if cell.map_order_example is None:
                        cell.map_order_example = (assignment, play.orders)
                if on_case is not None:
                    for case, pins in play.cases:
                        on_case(assignment, cell, case, pins)
            if progress is not None:
                progress(done, planned)
    return SweepResult(tuple(variations), planned, exhaustive, tuple(cells), meaning)


#: simulations a worker process plays per chunk of points (about a fifth of a second on one core): few enough that a
#: stopped sweep waits little for the chunks under way, enough that sending them costs little
CHUNK_SIMULATIONS = 400
#: fewer simulations than this (a second or two on one core) stay in one process: starting a worker (it imports the
#: model) would cost more than it saves
PARALLEL_FROM_SIMULATIONS = 4000


@dataclass(frozen=True)
class _Play:
    """What one point did under one cell, as the sweep counts it (small: it crosses from a worker process)."""

    outcome: str  # the worst of its orders' outcomes
    pins: tuple  # the orders the worst one took
    masked: bool  # a played order masked a genuine error
    refusal: Optional[str]  # the model's line, when the worst is a point it refuses to play
    orders: Optional[tuple]  # ((pins, outcome) per order) when the orders' played outcomes differ
    execution: Optional[Execution]  # the worst one's execution, sent for its chunk's first point with this outcome
    cases: tuple  # (CaseRow, pins) per order, when the sweep logs its cases


@dataclass(frozen=True)
class _PointPlayer:
    """Plays a chunk of a sweep's points under every cell: the same work in the sweep's process or in a worker."""

    source: ScenarioSource
    fields: tuple[str, ...]
    cells: tuple[tuple[str, bool], ...]  # (plugin, aggregation)
    deployment: object
    meaning: dict
    log_cases: bool

    def __call__(self, chunk: Sequence[tuple]) -> list[tuple[_Play, ...]]:
        sent: set[tuple[int, str]] = set()  # (cell, outcome) whose execution this chunk has sent
        return [self._point(values, sent) for values in chunk]

    def _point(self, values: tuple, sent: set) -> tuple[_Play, ...]:
        message = pb.Scenario()
        message.CopyFrom(self.source.message)
        try:
            for name, value in zip(self.fields, values):
                assign_field(message, name, value)
            base = self.source.spec(plugin_override=self.cells[0][0], message=message)
        except ScenarioError as e:  # the scenario's own rules, for a value the sweep put in
            raise ScenarioError(f"--vary {_assignment_text(tuple(zip(self.fields, values)))}: {e}") from None
        if self.deployment is not None:  # the deployment's propeller settings (the cells still set the flag)
            base = base.with_deployment(self.deployment)
        plays = []
        for index, (plugin, aggregation) in enumerate(self.cells):
            executions = each_map_order(base.with_plugin(plugin).with_aggregation(aggregation))
            outcomes = [outcome_of(execution) for _, execution in executions]
            worst = min(range(len(outcomes)), key=lambda i: _WORST_FIRST.index(self.meaning[outcomes[i]]))
            pins, execution = executions[worst]
            refused = isinstance(execution, ModelRefusal)
            decided_by_order = len(set(outcomes) - {REFUSED}) > 1  # a refused order's outcome is not known
            first = not refused and (index, outcomes[worst]) not in sent
            if first:
                sent.add((index, outcomes[worst]))
            plays.append(
                _Play(
                    outcomes[worst],
                    pins,
                    any(e.masked_genuine_error for _, e in executions if not isinstance(e, ModelRefusal)),
                    str(execution) if refused else None,
                    tuple((p, o) for (p, _), o in zip(executions, outcomes)) if decided_by_order else None,
                    execution if first else None,
                    tuple((CaseRow.of(e, o), p) for (p, e), o in zip(executions, outcomes)) if self.log_cases else (),
                )
            )
        return tuple(plays)


def _played(player: _PointPlayer, plan: Iterator[tuple], planned: int, processes: int) -> Iterator[tuple]:
    """(assignment, plays) for each planned point, in plan order: here, or in worker processes when worth it."""
    simulations = planned * len(player.cells)
    per_chunk = max(1, CHUNK_SIMULATIONS // len(player.cells))
    processes = min(processes, math.ceil(planned / per_chunk))
    if processes > 1 and simulations >= PARALLEL_FROM_SIMULATIONS:
        chunks = _chunked(plan, per_chunk)
        results: Iterator = ordered_map(player, chunks, processes)
    else:
        results = ((chunk, player(chunk)) for chunk in _chunked(plan, 1))
    with contextlib.closing(results):  # stopped part way: the workers are stopped and reaped before we go on
        for chunk, plays in results:
            for values, play in zip(chunk, plays):
                yield tuple(zip(player.fields, values)), play


def _chunked(items: Iterator[tuple], size: int) -> Iterator[list[tuple]]:
    while chunk := list(itertools.islice(items, size)):
        yield chunk
