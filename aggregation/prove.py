"""Prove a claim about a scenario for every assignment in a box of varied fields, by enumerating every path.

The simulator is run concolically (`symbolic.py`): each varied field reads as a symbolic number, and a run
returns, besides its execution, the exact condition (linear constraints over the varied fields and floors of
them) under which the same code path, hence the same execution, is taken. An SMT solver (z3) then finds an
assignment in the box that no explored path covers, and the next run explores it; when no such assignment
exists, every path has been seen and the claim is decided for the whole box, not for a grid of it.

Answers: PROVED (every path keeps the claim), COUNTEREXAMPLE (a path breaks it: its witness, and the condition
under which the claim fails), UNKNOWN (the budget ran out, the solver gave up, the simulator did something
the recording cannot follow, or the model refuses to play part of the box; never reported as proved). A point the
model refuses (`scenario.ModelRefusal`, e.g. a deleted pod the operator would re-create) is refused on the whole
path its run took, as exactly as any other path: such a path is kept, with its condition, as a refused region.
Discrete fields (which pod) are enumerated value by value. Where a run meets a moment the operator's random map
order decides (`operator.UndecidedVerdict`) and the scenario leaves it to Go, the region that run reached is explored
once per order, each path naming the order it took as one of its choices: a claim is proved only if it holds
whichever order Go picks.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Callable, Iterable, Iterator, Optional, Sequence

from google.protobuf.descriptor import FieldDescriptor

from aggregation import defaults, explore
from aggregation.interrupts import cancellable, safe_point
from aggregation.nanoseconds import decimal_places, decimal_text, nearest_tick, on_the_grid
from aggregation.operator import UndecidedVerdict
from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from aggregation.results import Execution
from aggregation.scenario import ModelRefusal, ScenarioError, ScenarioSource
from aggregation.symbolic import Constraint, Path, Sym, TermKey, atoms_in, holds, recording

PROVED, COUNTEREXAMPLE, UNKNOWN = "PROVED", "COUNTEREXAMPLE", "UNKNOWN"
#: counterexample paths whose minimal condition is worked out (each costs a solver call per constraint)
CONDITIONS = 8


# --- what varies --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """A continuous field over [low, high] (the bounds as the decimals the user wrote, exactly)."""

    field: str
    low: Fraction
    high: Fraction


@dataclass(frozen=True)
class Choice:
    """A discrete field over a finite set of values (e.g. which pod is preempted)."""

    field: str
    values: tuple


#: the most values an integer field's LO..HI may hold: each is explored as a box of its own
MAX_WHOLE_NUMBERS = 100


def _as_written(number: float) -> Fraction:
    """A bound as the decimal it was typed as (30.4 is 152/5, not the float nearest it): the model's numbers are the
    scenario's decimals (`aggregation.nanoseconds`)."""
    return Fraction(repr(number))


def parse_range(text: str, message: pb.Scenario, taker: str = "prove") -> "Interval | Choice":
    """`FIELD=LO..HI` (a number field, every value in between) or `FIELD=a,b,c` (finite); ScenarioError if not,
    naming `taker`, what takes the range."""
    if "=" not in text:
        raise ScenarioError(f"--vary {text!r}: expected FIELD=LO..HI or FIELD=a,b,c")
    name, spec = (part.strip() for part in text.split("=", 1))
    descriptor = explore.field_descriptor(message, name)
    name = explore.canonical_path(name)
    numeric = descriptor.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)
    if ".." in spec:
        whole = descriptor.type in explore.INTEGER_RANGES
        if not numeric and not whole:
            raise ScenarioError(f"--vary {text!r}: {name} takes no range of values; list them: {name}=a,b")
        low_text, high_text = (part.strip() for part in spec.split("..", 1))
        if low_text.endswith(".") or high_text.startswith("."):  # 0...10 is no 0..0.1
            raise ScenarioError(f"--vary {text!r}: a range is LO..HI, with two dots")
        low = explore.typed_value(name, descriptor, low_text)
        high = explore.typed_value(name, descriptor, high_text)
        if high < low:
            raise ScenarioError(f"--vary {text!r}: the range is empty: its low end {low_text} is above {high_text}")
        if whole:  # an integer field (retries, restarts): a finite set, each value a sub-box of its own
            if high - low >= MAX_WHOLE_NUMBERS:
                raise ScenarioError(
                    f"--vary {text!r}: {high - low + 1:,} values are more than a proof takes (at most "
                    f"{MAX_WHOLE_NUMBERS:,}, each a box of its own)"
                )
            return Choice(name, tuple(range(low, high + 1)))
        return Interval(name, _as_written(low), _as_written(high))
    if ":" in spec:
        raise ScenarioError(f"--vary {text!r}: {taker} takes a whole interval LO..HI, not a grid start:stop:step")
    values = explore.listed_values(text, name, descriptor, spec)
    if numeric and len(values) == 1:
        return Interval(name, _as_written(values[0]), _as_written(values[0]))
    return Choice(name, values)


# --- claims ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Claim:
    text: str
    meaning: str
    holds: Callable[[Execution], bool]
    #: the alternatives a `code=`/`code!=` claim was given, as typed (free text: a typo is no error, so the report
    #: says when no path ends with any code the claim matches)
    codes: tuple[str, ...] = ()
    matched_codes: tuple[str, ...] = ()  # every code the claim matches: the alternatives and their adjacent runs


PHASES = ("SUCCEEDED", "RETRIED_THEN_SUCCEEDED", "SUCCEEDED_SILENTLY", "FAILED_PERMANENTLY", "STILL_RUNNING")


def parse_claim(text: str, message: pb.Scenario) -> Claim:
    """`retries`, `genuine-error-wins`, or `phase=P[|P...]`, `phase!=P`, `outcome=O`, `outcome!=O`, `code=C`,
    `code!=C` on the final phase, headline outcome (`explore.OUTCOMES`) or final error code. A phase or outcome is
    read in any case, with spaces or hyphens for underscores (`sweep` prints "failed permanently"), and so is a
    claim's name (`RETRIES`, `genuine_error_wins`); a code as written."""
    kinds = [(e.WhichOneof("kind"), e) for a in message.attempts for e in a.events]
    named = re.sub(r"[\s_]+", "-", text.strip()).lower()  # a claim's name in any case, `_` or spaces for `-`
    if named == "retries":
        if not any(kind == "preemption" for kind, _ in kinds):
            raise ScenarioError("--claim retries: the scenario has no preemption to retry from")
        return Claim(
            text,
            "a preempted attempt is retried: never SUCCEEDED_SILENTLY, FAILED_PERMANENTLY or STILL_RUNNING",
            # STILL_RUNNING: the node waits for ever (rounds that fail for ever, a job that never ends), no retry
            lambda e: explore.outcome_of(e) not in ("SUCCEEDED_SILENTLY", "FAILED_PERMANENTLY", "STILL_RUNNING"),
        )
    if named == "genuine-error-wins":
        if not any(kind == "worker_error" for kind, _ in kinds):
            raise ScenarioError("--claim genuine-error-wins: the scenario injects no worker_error")
        return Claim(
            text,
            "every attempt that uploaded a scenario-injected error reports that error",
            lambda e: not e.masked_genuine_error,
        )
    for subject, read, allowed in (
        ("phase", lambda e: e.final_phase.value, PHASES),
        ("outcome", explore.outcome_of, tuple(o for o in explore.OUTCOMES if o != explore.REFUSED)),
        ("code", lambda e: e.final_code or "", None),
    ):
        for operator in ("!=", "="):
            prefix = subject + operator
            if text.startswith(prefix):
                written = tuple(v.strip() for v in text[len(prefix) :].split("|"))
                values = written
                if allowed is not None:  # a phase or outcome as sweep prints it ("failed permanently") is that one
                    values = tuple(re.sub(r"[\s-]+", "_", v).upper() for v in written)
                if values == ("",):
                    raise ScenarioError(f"--claim {text!r}: no value after {prefix}")
                if "" in values:
                    raise ScenarioError(f"--claim {text!r}: an empty alternative (nothing before or after a |)")
                unknown = [w for w, v in zip(written, values) if allowed is not None and v not in allowed]
                if unknown:
                    raise ScenarioError(
                        f"--claim {text!r}: {unknown[0]!r} is not {'an' if subject == 'outcome' else 'a'} {subject} "
                        f"(expected one of {', '.join(allowed)})"
                    )
                wanted = operator == "="
                listed = (" or " if wanted else " nor ").join(values)
                meaning = f"the final {subject} is {'' if wanted else 'never '}{listed}"
                codes = values if subject == "code" else ()
                if subject == "code" and len(values) > 1:
                    # a code may hold "|" itself (propeller's "RetriesExhausted|USER:Recoverable"): every run of
                    # adjacent alternatives, joined again, is a code the claim names too
                    count = len(values)
                    values = tuple("|".join(values[i:j]) for i in range(count) for j in range(i + 1, count + 1))
                    meaning = f"{meaning} ({'or' if wanted else 'nor'} adjacent ones joined by |)"
                matched = values if subject == "code" else ()
                return Claim(text, meaning, lambda e, r=read, v=values, w=wanted: (r(e) in v) == w, codes, matched)
    raise ScenarioError(
        f"--claim {text!r}: expected retries, genuine-error-wins, or phase=, outcome=, code= (or !=) a value"
    )


# --- one concolic run -------------------------------------------------------------------------------------
class _Overlay:
    """A read-only view of a scenario message whose varied scalar fields read as symbolic numbers; everything
    else (validation's `ListFields`, `HasField`, nested messages) is the message's own."""

    __slots__ = ("_message", "_path", "_values")

    def __init__(self, message, path: str, values: dict) -> None:
        self._message, self._path, self._values = message, path, values

    def __getattr__(self, name: str):
        value = getattr(self._message, name)
        descriptor = self._message.DESCRIPTOR.fields_by_name.get(name)
        if descriptor is None:
            return value
        path = self._path + name
        if descriptor.type == FieldDescriptor.TYPE_MESSAGE:
            if descriptor.is_repeated:
                return [_Overlay(item, f"{path}[{i}].", self._values) for i, item in enumerate(value)]
            return _Overlay(value, path + ".", self._values)
        return self._values.get(path, value)


@dataclass(frozen=True)
class Behaviour:
    """What one path does, as a reviewer compares paths: each attempt's verdict and the file that decided it."""

    attempts: tuple[str, ...]
    final_phase: str
    final_code: str
    outcome: str

    @property
    def refusal(self) -> str:
        """Why the model refuses the path (the refusal's `kind`); "" on a played one."""
        return self.attempts[0] if self.outcome == explore.REFUSED else ""

    def describe(self) -> str:
        code = f" ({self.final_code})" if self.final_code else ""
        return f"{self.final_phase}{code}: " + "; ".join(self.attempts)


def behaviour_of(execution: "Execution | ModelRefusal") -> Behaviour:
    """An execution's behaviour; a refusal's is REFUSED and its `kind` (the same across the region it holds on)."""
    if isinstance(execution, ModelRefusal):
        return Behaviour((execution.kind,), explore.REFUSED, "", explore.REFUSED)
    steps = []
    for result in execution.attempts:
        winner = result.winner
        read = f", read {winner.pod}'s {winner.error.code if winner.error else winner.name}" if winner else ""
        steps.append(f"#{result.attempt} {result.job_condition} -> {result.decision.decision.name}{read}")
    return Behaviour(
        tuple(steps), execution.final_phase.value, execution.final_code or "", explore.outcome_of(execution)
    )


@dataclass(frozen=True)
class Run:
    """One concolic run: the path condition it recorded and what it did: its execution, or the model's refusal to play
    the point; `invalid` is the one line of a scenario that is no valid input at all."""

    constraints: tuple[Constraint, ...]
    execution: "Execution | ModelRefusal | None"
    invalid: Optional[str]
    untraceable: tuple[str, ...]
    #: where the run stopped at a moment Go's map order decides: one (field, order) per order, to run each with
    pins: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Problem:
    """The scenario, the varied fields and the plugin and flag it is proved for."""

    source: ScenarioSource
    message: pb.Scenario  # the scenario with the discrete choices of this sub-box applied
    intervals: tuple[Interval, ...]
    plugin: Optional[str] = None
    aggregation: Optional[bool] = None
    deployment: object = None

    def spec_from(self, message) -> "object":
        spec = self.source.spec(self.plugin, message=message)
        if self.deployment is not None:
            spec = spec.with_deployment(self.deployment)
        if self.aggregation is not None:
            spec = spec.with_aggregation(self.aggregation)
        return spec

    def with_values(self, values: dict) -> pb.Scenario:
        """A copy of the scenario with these fields set (the continuous ones as the floats they are)."""
        message = pb.Scenario()
        message.CopyFrom(self.message)
        for name, value in values.items():
            explore.assign_field(message, name, float(value) if isinstance(value, Fraction) else value)
        return message

    def with_choices(self, choices: tuple) -> "Problem":
        """The sub-box where the discrete fields take these values."""
        return replace(self, message=self.with_values(dict(choices)))


def run_symbolic(problem: Problem, assignment: dict[str, Fraction]) -> Run:
    """Simulate at `assignment` (exactly, in rationals) and record the path condition."""
    from aggregation.simulate import simulate

    path = Path({i.field: (i.low, i.high) for i in problem.intervals})
    values = {name: Sym.variable(name, value) for name, value in assignment.items()}
    message = _Overlay(problem.with_values(assignment), "", values)
    execution, invalid, pins = None, None, ()
    with recording(path):
        try:
            execution = simulate(problem.spec_from(message))
        except UndecidedVerdict as e:
            execution = None if e.pins else e
            pins = e.pins
        except ModelRefusal as e:
            execution = e
        except ScenarioError as e:
            invalid = str(e)
    return Run(tuple(path.constraints), execution, invalid, tuple(path.untraceable), pins)


def replay(problem: Problem, assignment: dict[str, Fraction]) -> "Execution | ModelRefusal":
    """The plain simulator, on plain floats, at `assignment`: what `aggsim simulate` says of that point (the
    execution, or the model's refusal to play it)."""
    from aggregation.simulate import simulate

    try:
        return simulate(problem.spec_from(problem.with_values(assignment)))
    except ModelRefusal as refusal:
        return refusal


def replay_each_map_order(problem: Problem, assignment: dict[str, Fraction]) -> dict[tuple, "Execution | ModelRefusal"]:
    """The plain simulator at `assignment` under each map order Go may take where the scenario leaves it to Go (as a
    sweep runs the point): the orders each execution took (none where no order decides) -> the execution, or the
    model's refusal there."""
    from aggregation.simulate import each_map_order

    return dict(each_map_order(problem.spec_from(problem.with_values(assignment))))


# --- the search ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PathResult:
    choices: tuple[tuple[str, object], ...]  # the discrete values of its sub-box
    witness: dict  # field -> Fraction: a point that takes this path
    constraints: tuple[Constraint, ...]
    behaviour: Behaviour
    holds: bool  # False on a refused path too: nothing there keeps the claim
    refused: str = ""  # the model's refusal at the witness (one line), where it refuses the whole path


def played_behaviours(behaviours: Iterable[Behaviour]) -> frozenset[Behaviour]:
    """The different things the played paths do: what `prove` and `sweep` count and list. A path the model refuses
    to play does nothing, so it is counted apart (as a refused path), never as a behaviour."""
    return frozenset(b for b in behaviours if not b.refusal)


def replayable(path: PathResult) -> bool:
    """Whether `aggsim simulate` can be given the path's witness exactly: every value a whole number of nanoseconds,
    the model's clock tick (`aggregation.nanoseconds`). A region too thin for such a point (a sliver narrower than a
    nanosecond, or a line two moments exactly equal that no whole nanosecond lies on) has only exact rational
    witnesses, which the plain simulator cannot be asked about."""
    return all(on_the_grid(v) for v in path.witness.values())


@dataclass(frozen=True)
class Proof:
    verdict: str
    claim: Claim
    paths: tuple[PathResult, ...]
    seconds: float
    reason: str = ""
    counterexamples: tuple[PathResult, ...] = ()
    conditions: tuple[tuple[str, ...], ...] = ()  # per counterexample path: readable (`aggregation.conditions`)
    intervals: tuple[Interval, ...] = ()
    choices: tuple[Choice, ...] = ()
    problem: Optional[Problem] = None  # the scenario as written, with the plugin, flag and deployment proved for
    #: per counterexample path, every one: the recorded condition (minimal for the first `CONDITIONS`, as recorded
    #: after them: exact either way)
    exact_conditions: tuple[tuple[str, ...], ...] = ()
    refusals: tuple[PathResult, ...] = ()  # the paths the model refuses to play, in `inside_first` order
    refusal_conditions: tuple[tuple[str, ...], ...] = ()  # per refused path (the first few): readable
    refusal_exact_conditions: tuple[tuple[str, ...], ...] = ()  # per refused path, every one, as `exact_conditions`

    @property
    def behaviours(self) -> int:
        return len(played_behaviours(p.behaviour for p in self.paths))

    @property
    def codes_reached(self) -> frozenset[str]:
        """The final codes the played paths end with ("" for none)."""
        return frozenset(p.behaviour.final_code for p in self.paths if not p.refused)

    @property
    def codes_never_reached(self) -> tuple[str, ...]:
        """A code claim's alternatives, when no played path ends with any code the claim matches (a misspelt code makes
        a `code!=` claim hold everywhere and a `code=` one fail everywhere, with nothing else to say why); else ()."""
        reached = self.codes_reached
        if not self.claim.codes or not reached or any(code in reached for code in self.claim.matched_codes):
            return ()
        return self.claim.codes

    @property
    def fails_everywhere(self) -> bool:
        """Every path was explored and every one breaks the claim: the paths tile the box, so it fails at every
        assignment in it (no condition narrows it down)."""
        return self.verdict == COUNTEREXAMPLE and not self.reason and len(self.counterexamples) == len(self.paths)

    def replay(self, path: PathResult) -> "Execution | ModelRefusal":
        """The plain simulator, on plain floats, at `path`'s witness (in its sub-box)."""
        return replay(self.problem.with_choices(path.choices), path.witness)


class ProveError(ScenarioError):
    """The box cannot be proved about as asked (one line: what and why)."""


class Solver:
    """z3 over the varied fields of one box: is a region (a conjunction of recorded constraints and negations of
    them) empty, and if not, an assignment in it."""

    def __init__(self, intervals: Sequence[Interval], timeout_ms: int, deadline: Optional[float] = None) -> None:
        import z3

        self.z3 = z3
        self.timeout_ms = max(1, timeout_ms)
        self.deadline = deadline  # a `time.perf_counter()` past which `check` answers unknown without asking
        self.out_of_time = False
        # a context of its own: z3's models (our witnesses) then depend only on this proof's queries
        self.ctx = z3.Context()
        self.vars = {i.field: z3.Real(i.field, self.ctx) for i in intervals}
        # Not `z3.Solver`: after a push it answers with its incremental core, which skips the preprocessing that
        # substitutes equalities and names integer parts (solve-eqs, purify-arith). Two rounded stamps compared under
        # an equality then ran past 600 s (a genuine error's lagging mtime against a signal's stamp); a solver made
        # of those steps redoes them at every check and answered that in 0.0 s; on the six-field proofs it took
        # 5-35% longer, measured side by side. Its answers depend only on the assertions: witnesses stay reproducible.
        steps = [z3.Tactic(name, self.ctx) for name in ("simplify", "solve-eqs", "purify-arith", "smt")]
        self.solver = z3.Then(*steps, ctx=self.ctx).solver()
        self.solver.set("ctrl_c", False)  # SIGINT is ours (`interrupts`): z3's would read as a cancelled check
        self.solver.set("timeout", self.timeout_ms)
        self._atoms: dict = {}
        self._formulas: dict = {}
        for i in intervals:
            v = self.vars[i.field]
            self.solver.add(v >= self.number(i.low), v <= self.number(i.high))

    def number(self, value: Fraction):
        return self.z3.Q(value.numerator, value.denominator, self.ctx)

    def term(self, key: TermKey):
        items, const = key
        parts = [self.number(c) * self.atom(a) for a, c in items]
        if const:
            parts.append(self.number(const))
        return self.z3.Sum(parts) if len(parts) > 1 else parts[0]

    def atom(self, atom):
        cached = self._atoms.get(atom)
        if cached is None:
            z3 = self.z3
            if atom[0] == "var":
                cached = self.vars[atom[1]]
            elif atom[0] == "floor":
                cached = z3.ToReal(z3.ToInt(self.term(atom[1])))
            else:  # round half to even: floor(x + 1/2), one less where x + 1/2 is an odd integer
                shifted = self.term(atom[1]) + z3.Q(1, 2, self.ctx)
                up = z3.ToInt(shifted)
                cached = z3.ToReal(z3.If(z3.And(z3.ToReal(up) == shifted, up % 2 == 1), up - 1, up))
            self._atoms[atom] = cached
        return cached

    def formula(self, constraint: Constraint):
        cached = self._formulas.get(constraint)
        if cached is None:  # building z3 terms from Python costs more than most checks: build each once
            key, relation = constraint
            term = self.term(key)
            zero = self.z3.RealVal(0, self.ctx)
            cached = {"<": term < zero, "<=": term <= zero, "==": term == zero, "!=": term != zero}[relation]
            self._formulas[constraint] = cached
        return cached

    def check(self):
        """z3's answer for what the solver holds, within `timeout_ms` and what is left before the deadline (past it:
        unknown, as from a timeout; every caller reads unknown as "not shown")."""
        self.out_of_time = False
        safe_point()  # a signal that came while z3 worked is raised here, between its calls
        if self.deadline is None:
            with cancellable(self.ctx.interrupt):
                result = self.solver.check()
            safe_point()
            return result
        left_ms = int((self.deadline - time.perf_counter()) * 1000)
        if left_ms <= 0:
            self.out_of_time = True
            return self.z3.unknown
        self.solver.set("timeout", min(self.timeout_ms, left_ms))
        with cancellable(self.ctx.interrupt):
            result = self.solver.check()
        safe_point()
        # z3 stopped by a timeout that was the budget's end (its clock may stop a hair early), not the check's own
        budget_ended = left_ms < self.timeout_ms and time.perf_counter() >= self.deadline - 0.05
        self.out_of_time = result == self.z3.unknown and budget_ended
        return result

    def gave_up(self) -> str:
        """Why the last `check` answered unknown, for people."""
        if self.out_of_time:
            return "the time budget ran out"
        return f"the solver gave up ({self.solver.reason_unknown()})"

    def conjunction(self, constraints: Sequence[Constraint]):
        if not constraints:
            return self.z3.BoolVal(True, self.ctx)
        return self.z3.And([self.formula(c) for c in constraints])

    def point_in(self, prefix: Sequence[Constraint], negated: Optional[Constraint]) -> "dict | str | None":
        """An assignment where `prefix` holds and `negated` does not; None when the region is empty; a string
        when the solver gave up."""
        z3 = self.z3
        self.solver.push()
        try:
            for constraint in prefix:
                self.solver.add(self.formula(constraint))
            if negated is not None:
                self.solver.add(z3.Not(self.formula(negated)))
            result = self.check()
            if result == z3.unsat:
                return None
            if result != z3.sat:
                return self.gave_up()
            model = self.solver.model()
            point = {}
            for name, v in self.vars.items():
                value = model.eval(v, model_completion=True)
                point[name] = Fraction(value.numerator_as_long(), value.denominator_as_long())
            return point
        finally:
            self.solver.pop()


def _in_region(point: dict, prefix: Sequence[Constraint], negated: Optional[Constraint]) -> bool:
    return all(holds(c, point) for c in prefix) and (negated is None or not holds(negated, point))


def _readable_point(
    point: dict, intervals: Sequence[Interval], prefix: Sequence[Constraint], negated: Optional[Constraint]
) -> dict:
    """A nearby point with short decimals (whole nanoseconds) still in the box and the region, when there is one:
    witnesses a person can read and that plain-float replays reproduce."""
    bounds = {i.field: (i.low, i.high) for i in intervals}
    region = list(prefix) + ([] if negated is None else [negated])
    # moving one field can only change the constraints that mention it (the point starts in the region)
    mentioning: dict[str, list[int]] = {name: [] for name in point}
    for index, (key, _) in enumerate(region):
        for atom in atoms_in(key):
            if atom[0] == "var":
                mentioning[atom[1]].append(index)

    def kept(constraint_index: int, candidate: dict, memo: dict) -> bool:
        holding = holds(region[constraint_index], candidate, memo)
        return not holding if negated is not None and constraint_index == len(region) - 1 else holding

    current = dict(point)
    for name in point:  # one field at a time, each with as few decimals as the region allows
        low, high = bounds[name]
        for candidate_value in _short_decimals_near(point[name]):
            candidate = {**current, name: candidate_value}
            memo: dict = {}
            if low <= candidate_value <= high and all(kept(i, candidate, memo) for i in mentioning[name]):
                current = candidate
                break
    ticked = {name: nearest_tick(v) for name, v in current.items()}
    in_box = all(bounds[n][0] <= v <= bounds[n][1] for n, v in ticked.items())
    return ticked if in_box and _in_region(ticked, prefix, negated) else current


def _short(point: dict) -> bool:
    """Whether every field's value has at most 6 decimals (what a person reads, and types into a scenario)."""
    return all(round(v, 6) == v for v in point.values())


def _short_decimals_near(value: Fraction) -> Iterator[Fraction]:
    """Decimals with 0, 1, ... 9 places within one last digit of `value`: the rounding, then the decimal a last digit
    past it on `value`'s side. z3 puts a point on its region's edge: where a strict bound is a short decimal the
    rounding lands just outside, and the decimal on the inside is as short (0.1, not 0.0999999999). Where `value` is
    itself a short decimal on the edge, the decimals a last digit either side of it."""
    for digits in range(0, 10):
        rounded, step = round(value, digits), Fraction(1, 10**digits)
        yield rounded
        if rounded != value:
            yield rounded + (step if value > rounded else -step)
        else:
            yield from (value - step, value + step)


def _combinations(choices: Sequence[Choice]) -> list[tuple]:
    """Every combination of the discrete choices, as ((field, value), ...)."""
    combos: list[tuple] = [()]
    for choice in choices:
        combos = [c + ((choice.field, v),) for c in combos for v in choice.values]
    return combos


class _Budget:
    def __init__(self, max_paths: int, max_seconds: float) -> None:
        self.started = time.perf_counter()
        self.max_paths, self.max_seconds = max_paths, max_seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def out_of_time(self) -> bool:
        return self.elapsed() > self.max_seconds

    def ran_out(self, paths: int) -> str:
        return (
            f"the budget ran out ({paths:,} paths, {self.elapsed():.1f} s; at most {self.max_paths:,} paths and "
            f"{self.max_seconds:g} s) before every path was explored"
        )


def _refuse_a_box_past_the_model_s_limits(problem: Problem, combo: tuple) -> None:
    """The runs meet only the points z3 picks, so a field's own limits (finite, >= 0 unless signed, within the span a
    scenario may have) are checked where they are decided: each holds on an interval exactly when it holds at both
    ends, so the box's all-low and all-high corners are validated on plain floats first."""
    for corner in ({i.field: i.low for i in problem.intervals}, {i.field: i.high for i in problem.intervals}):
        try:
            problem.spec_from(problem.with_values(corner))
        except ScenarioError as e:
            at = point_text({**dict(combo), **corner})
            raise ProveError(f"the box holds scenarios that are no valid input, e.g. at {at}: {e}") from None


def _explore_box(problem: Problem, combo: tuple, claim: Claim, budget: _Budget, paths: list) -> str:
    """Every path of one box, by a generational search: a run's path condition c1..cn has as siblings the regions
    c1..c(i-1), not ci; each non-empty sibling is run, and its own siblings below that depth explored in turn.
    The regions partition the box, so when none is left every assignment has been covered exactly once; a region
    whose run reached a moment Go's map order decides is explored again from there once per order, so it is covered
    once per order, each path naming the order it took. Returns "" when complete, else why not."""
    _refuse_a_box_past_the_model_s_limits(problem, combo)
    # each check gets what is left of the budget when it runs (a box explored late gets less, never more)
    solver = Solver(problem.intervals, int(budget.max_seconds * 1000), budget.started + budget.max_seconds)
    # a region to explore: its recorded decisions, the one it does not take, and the map orders pinned in it
    pending: list[tuple[tuple[Constraint, ...], Optional[Constraint], tuple]] = [((), None, ())]
    pinned_problems = {(): problem}
    while pending:
        if budget.out_of_time():
            return budget.ran_out(len(paths))
        prefix, negated, pins = pending.pop()
        point = solver.point_in(prefix, negated)
        if point is None:
            continue
        if isinstance(point, str):  # the solver gave up, or the check met the budget's end
            return budget.ran_out(len(paths)) if solver.out_of_time or budget.out_of_time() else point
        if len(paths) >= budget.max_paths:  # a region is left, and no more paths may be run: only empty ones end it
            return budget.ran_out(len(paths))
        point = _readable_point(point, problem.intervals, prefix, negated)
        if pins not in pinned_problems:
            pinned_problems[pins] = problem.with_choices(pins)
        run = run_symbolic(pinned_problems[pins], point)
        if run.invalid is not None:
            at = point_text({**dict(combo + pins), **point})
            raise ProveError(f"the box holds scenarios that are no valid input, e.g. at {at}: {run.invalid}")
        if run.untraceable:
            return f"the simulator did what the prover cannot follow exactly: {run.untraceable[0]}"
        depth = len(prefix) + (negated is not None)
        # the run must have taken the region's decisions, in order, and its record must hold at its own point
        if run.constraints[: len(prefix)] != prefix or not all(holds(c, point) for c in run.constraints):
            return "a run did not retrace its region's recorded decisions (a bug in the prover: please report it)"
        for index in range(len(run.constraints) - 1, depth - 1, -1):
            pending.append((run.constraints[:index], run.constraints[index], pins))
        if run.pins:  # the whole region this run reached, once per order Go may take
            pending.extend((run.constraints, None, pins + (pin,)) for pin in run.pins)
            continue
        behaviour = behaviour_of(run.execution)
        if isinstance(run.execution, ModelRefusal):  # every point of the path meets the same refusal
            paths.append(PathResult(combo + pins, point, run.constraints, behaviour, False, str(run.execution)))
            continue
        paths.append(PathResult(combo + pins, point, run.constraints, behaviour, claim.holds(run.execution)))
    return ""


def prove(
    source: ScenarioSource,
    claim: Claim,
    ranges: Sequence["Interval | Choice"],
    plugin: Optional[str] = None,
    aggregation: Optional[bool] = None,
    deployment=None,
    max_paths: int = defaults.PROVE_MAX_PATHS,
    max_seconds: float = defaults.PROVE_MAX_SECONDS,
) -> Proof:
    """Decide `claim` for every assignment of `ranges` (PROVED / COUNTEREXAMPLE / UNKNOWN)."""
    budget = _Budget(max_paths, max_seconds)
    intervals = tuple(r for r in ranges if isinstance(r, Interval))
    choices = tuple(r for r in ranges if isinstance(r, Choice))
    flag = "--aggregation" if aggregation else "--no-aggregation"
    options = (("plugin", plugin, "--plugin"), ("propeller.error_aggregation", aggregation, flag))
    fixed = {field: f"{option} sets it in every case" for field, given, option in options if given is not None}
    try:
        explore.check_varied_fields([r.field for r in ranges], fixed, deployment, source.message)
    except ScenarioError as e:
        raise ProveError(str(e)) from None
    paths: list[PathResult] = []
    unknown = ""
    whole = Problem(source, source.message, intervals, plugin, aggregation, deployment)
    for combo in _combinations(choices):
        unknown = _explore_box(whole.with_choices(combo), combo, claim, budget, paths)
        if unknown:
            break

    def ordered(kept) -> tuple[PathResult, ...]:
        return tuple(sorted(kept, key=lambda p: inside_first(p, intervals)))

    broken = ordered(p for p in paths if not p.holds and not p.refused)
    refusals = ordered(p for p in paths if p.refused)
    from aggregation.conditions import readable_condition  # it builds on this module's solver

    # the conditions are simplified within what is left of the budget, or SIMPLIFYING_SECONDS when less is left (a
    # box explored until the budget ran out still reads as ranges); a check that runs out keeps its constraint as
    # recorded, so a condition may read longer, never wrong
    deadline = max(budget.started + budget.max_seconds, time.perf_counter() + SIMPLIFYING_SECONDS)
    conditions = tuple(readable_condition(p, intervals, deadline) for p in broken[:CONDITIONS])
    exact = tuple(exact_condition(p, intervals, deadline) for p in broken[:CONDITIONS])
    exact += tuple(recorded_condition(p) for p in broken[CONDITIONS:])
    refused = tuple(readable_condition(p, intervals, deadline) for p in refusals[:CONDITIONS])
    refused_exact = tuple(exact_condition(p, intervals, deadline) for p in refusals[:CONDITIONS])
    refused_exact += tuple(recorded_condition(p) for p in refusals[CONDITIONS:])
    seconds = budget.elapsed()
    # a counterexample is one wherever else the model refuses; without one, a refused region leaves the claim open
    verdict = COUNTEREXAMPLE if broken else UNKNOWN if unknown or refusals else PROVED
    return Proof(
        verdict, claim, tuple(paths), seconds, unknown, broken, conditions, intervals, choices, whole, exact,
        refusals, refused, refused_exact,
    )  # fmt: skip


def inside_first(path: PathResult, intervals: Sequence[Interval]) -> tuple[bool, bool, bool]:
    """Sort key: paths with an inside (a float witness, not on a boundary) first, the regions a reader can try with
    `simulate`; their conditions are the ones worth reading. Among those, witnesses in short decimals first: a
    region too thin for one (a sliver a nanosecond wide) is a poor example."""
    return not replayable(path), _thin(path, intervals), not _short(path.witness)


def _thin(path: PathResult, intervals: Sequence[Interval]) -> bool:
    """Whether the path lies on a boundary: an equality, or a field held at its box's edge (x <= low)."""
    edges = {i.field: (i.low, i.high) for i in intervals}
    for (items, const), relation in path.constraints:
        if relation == "==":
            return True
        if relation == "<=" and len(items) == 1 and items[0][0][0] == "var" and items[0][0][1] in edges:
            coefficient = items[0][1]
            low, high = edges[items[0][0][1]]
            if -const / coefficient == (low if coefficient > 0 else high):
                return True
    return False


# --- conditions people can read ---------------------------------------------------------------------------
#: one z3 check while a condition is simplified for people: past it the constraint stays as recorded (exact, only
#: longer). A check that takes longer is rare and, measured, gives unknown at 60 s too.
SIMPLIFYING_CHECK_MS = 5_000
#: the least time the conditions get to be simplified, however much of the budget the exploration used
SIMPLIFYING_SECONDS = 5.0


def minimal_condition(
    path: PathResult, intervals: Sequence[Interval], deadline: Optional[float] = None
) -> tuple[Constraint, ...]:
    """The path's constraints without those the others (and the box) already imply (where z3 shows it in
    `SIMPLIFYING_CHECK_MS`, before `deadline`)."""
    import z3

    solver = Solver(intervals, SIMPLIFYING_CHECK_MS, deadline)
    kept = list(path.constraints)
    for constraint in list(kept):
        rest = [c for c in kept if c != constraint]
        solver.solver.push()
        solver.solver.add(solver.conjunction(rest), z3.Not(solver.formula(constraint)))
        if solver.check() == z3.unsat:
            kept = rest
        solver.solver.pop()
    return tuple(kept)


def exact_condition(
    path: PathResult, intervals: Sequence[Interval], deadline: Optional[float] = None
) -> tuple[str, ...]:
    """The path's recorded condition, minimal, with its integer parts (floors, roundings) as they are: exact."""
    return _condition_lines(path, minimal_condition(path, intervals, deadline))


def recorded_condition(path: PathResult) -> tuple[str, ...]:
    """The path's condition as the run recorded it, every decision (no solver needed, so every path gets one)."""
    return _condition_lines(path, path.constraints)


def _condition_lines(path: PathResult, constraints: Sequence[Constraint]) -> tuple[str, ...]:
    """The path's discrete choices, then its constraints rendered (none: the whole box)."""
    choices = tuple(f"{name} = {value_text(value)}" for name, value in path.choices)
    return choices + (tuple(render_constraint(c) for c in constraints) or ("anywhere in the box",))


def number_text(value: Fraction) -> str:
    if value.denominator == 1 and abs(value.numerator) < 10**16:
        return str(value.numerator)
    if abs(value) < 10**6 and decimal_places(value) is not None:
        return decimal_text(value)  # a bound as typed, a witness in whole nanoseconds: exactly, never ~30.4
    as_float = float(value)  # a huge whole float reads as 1e+30, not as its 31 digits
    if Fraction(as_float) == value:
        return repr(as_float)  # the shortest decimal that reads back as this float
    return f"{value} (~{as_float:.9g})"


def _atom_text(atom) -> str:
    if atom[0] == "var":
        return atom[1]
    return f"{atom[0]}({_term_text(atom[1])})"


def _term_text(key: TermKey) -> str:
    items, const = key
    text = ""
    for atom, coefficient in items:
        sign = "-" if coefficient < 0 else "+"
        size = abs(coefficient)
        body = _atom_text(atom) if size == 1 else f"{number_text(size)}*{_atom_text(atom)}"
        text = (f"-{body}" if sign == "-" else body) if not text else f"{text} {sign} {body}"
    if const:
        text += f" {'-' if const < 0 else '+'} {number_text(abs(const))}"
    return text


def render_constraint(constraint: Constraint) -> str:
    """`term REL 0` as `left REL right`: the constant moved to the right, a single field's coefficient divided out."""
    (items, const), relation = constraint
    relation_text = {"<": "<", "<=": "<=", "==": "=", "!=": "!="}[relation]
    if len(items) == 1:
        atom, coefficient = items[0]
        bound = -const / coefficient
        if coefficient < 0:
            relation_text = {"<": ">", "<=": ">="}.get(relation_text, relation_text)
        return f"{_atom_text(atom)} {relation_text} {number_text(bound)}"
    return f"{_term_text((items, Fraction(0)))} {relation_text} {number_text(-const)}"


def value_text(value) -> str:
    """A varied field's value as it is typed: a number exactly, a boolean as `true`, a string as it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return number_text(_as_written(value))
    if isinstance(value, Fraction):
        return number_text(value)
    return str(value)


def point_text(point: dict) -> str:
    return ", ".join(f"{name}={value_text(value)}" for name, value in point.items())


__all__ = [
    "COUNTEREXAMPLE",
    "PROVED",
    "UNKNOWN",
    "Choice",
    "Claim",
    "Interval",
    "Proof",
    "ProveError",
    "parse_claim",
    "parse_range",
    "prove",
    "replay",
    "replay_each_map_order",
    "run_symbolic",
    "behaviour_of",
    "replayable",
    "number_text",
    "point_text",
]
