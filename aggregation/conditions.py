"""A counterexample's condition as people read it: linear bounds on the varied fields, no floors, no roundings.

The prover records a path's condition over the fields and integer parts (torch's whole-second stamps, the
agent's monitor polls, sub-second stamps): exact, and unreadable. Here each integer part is fixed to each value
it takes on the path (`aggregation.pieces`), so the condition becomes a union of pieces, each a conjunction of
linear bounds on the fields; a bound the box and the others imply is dropped (z3 over the reals), bounds on one
expression become one range (`30.95 <= signal + shutdown < 31`), and pieces that differ only in one range that
they continue are joined (a floor's consecutive values are one interval), and pieces that are one piece moved by
a constant in some ranges (the agent's next monitor poll, 5 s later; torch's next whole second) read as one
family, `for n = 0 or 5: ... > 32 + n`, checked with z3 to be the same set as its pieces; families that are each
other moved by a second constant in other ranges join, `for (n, m) = (0, 0), (1, 0) or (0, 5): ... + n + m`.
Where a sub-second stamp was relaxed, the text says how exact the bounds are (`pieces.relaxation`: 256 ns per
stamp compared). A path split into too many pieces keeps the prover's exact form (`prove.minimal_condition`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Optional, Sequence

from aggregation.pieces import Row, TooManyPieces, path_pieces, within_text
from aggregation.prove import (
    SIMPLIFYING_CHECK_MS,
    Interval,
    PathResult,
    Solver,
    minimal_condition,
    render_constraint,
    value_text,
)

#: pieces shown for one path before the rest are counted (the JSON's exact form has everything)
SHOWN_PIECES = 4

Direction = tuple  # ((field, Fraction coefficient), ...), the first coefficient 1
Bounds = tuple  # (low or None, low strict, high or None, high strict)


def _normalised(row: Row, order: dict) -> Optional[tuple[Direction, Bounds]]:
    """`sum + constant < 0` (or <=) as a bound on an expression whose first field has coefficient 1; None when the
    row has no field (a constant, which z3 already found true on the path)."""
    coefficients, constant, strict = row
    fields = sorted(coefficients, key=order.__getitem__)
    if not fields:
        return None
    lead = coefficients[fields[0]]
    direction = tuple((f, coefficients[f] / lead) for f in fields)
    bound = -constant / lead
    if lead > 0:
        return direction, (None, False, bound, strict)
    return direction, (bound, strict, None, False)


def _tighter(a: Bounds, b: Bounds) -> Bounds:
    low, low_strict = a[0], a[1]
    if b[0] is not None and (low is None or b[0] > low or (b[0] == low and b[1])):
        low, low_strict = b[0], b[1]
    high, high_strict = a[2], a[3]
    if b[2] is not None and (high is None or b[2] < high or (b[2] == high and b[3])):
        high, high_strict = b[2], b[3]
    return low, low_strict, high, high_strict


def _ranges(rows: Sequence[Row], order: dict) -> dict[Direction, Bounds]:
    ranges: dict[Direction, Bounds] = {}
    for row in rows:
        normalised = _normalised(row, order)
        if normalised is not None:
            direction, bounds = normalised
            ranges[direction] = _tighter(ranges.get(direction, (None, False, None, False)), bounds)
    return ranges


def _formulas(solver: Solver, direction: Direction, bounds: Bounds) -> list:
    expression = solver.z3.Sum([solver.number(c) * solver.vars[f] for f, c in direction])
    low, low_strict, high, high_strict = bounds
    out = []
    if low is not None:
        out.append(expression > solver.number(low) if low_strict else expression >= solver.number(low))
    if high is not None:
        out.append(expression < solver.number(high) if high_strict else expression <= solver.number(high))
    return out


def _piece_formulas(solver: Solver, ranges: dict) -> list:
    return [f for d, b in ranges.items() for f in _formulas(solver, d, b)]


def _implies(solver: Solver, premises: list, conclusions: list) -> bool:
    """Whether the box and `premises` imply every one of `conclusions` (z3 over the reals)."""
    z3 = solver.z3
    solver.solver.push()
    solver.solver.add(*premises, z3.Not(z3.And(conclusions)))
    implied = solver.check() == z3.unsat
    solver.solver.pop()
    return implied


def _without_implied(solver: Solver, ranges: dict[Direction, Bounds]) -> dict[Direction, Bounds]:
    """Drop each bound the box and the remaining bounds imply."""
    kept = dict(ranges)
    for direction in list(kept):
        for side in (0, 2):
            bounds = kept[direction]
            if bounds[side] is None:
                continue
            low_only, high_only = (bounds[0], bounds[1], None, False), (None, False, bounds[2], bounds[3])
            candidate, without = (low_only, high_only) if side == 0 else (high_only, low_only)
            rest = _piece_formulas(solver, {**kept, direction: without})
            if _implies(solver, rest, _formulas(solver, direction, candidate)):
                kept[direction] = without
        if kept[direction][0] is None and kept[direction][2] is None:
            del kept[direction]
    return kept


def piece_holds(ranges: dict, point: dict) -> bool:
    """Whether every range of a piece holds at `point` (field -> value)."""
    for direction, (low, low_strict, high, high_strict) in ranges.items():
        value = sum((c * point[f] for f, c in direction), Fraction(0))
        if low is not None and (value < low or (low_strict and value == low)):
            return False
        if high is not None and (value > high or (high_strict and value == high)):
            return False
    return True


def _joined(a: dict, b: dict) -> Optional[dict]:
    """a or b as one piece, when they differ only in one range and the two ranges continue each other."""
    if a.keys() != b.keys():
        return None
    different = [d for d in a if a[d] != b[d]]
    if len(different) != 1:
        return None
    (d,) = different
    (low, ls, high, hs), (low2, ls2, high2, hs2) = sorted((a[d], b[d]), key=lambda x: (x[0] is not None, x[0] or 0))
    if high is None or low2 is None or high < low2 or (high == low2 and hs and ls2):
        return None  # a gap (or a single point both leave out) between them
    if high2 is None:
        top = (None, False)
    elif high >= high2:
        top = (high, hs) if high > high2 else (high, hs and hs2)
    else:
        top = (high2, hs2)
    return {**a, d: (low, ls, *top)}


def _moved(bounds: Bounds, shift: Fraction) -> Bounds:
    low, low_strict, high, high_strict = bounds
    return (None if low is None else low + shift, low_strict, None if high is None else high + shift, high_strict)


def _shift_between(seed: dict, piece: dict) -> Optional[tuple[Fraction, frozenset, dict]]:
    """`piece` as `seed` moved by one positive constant in some ranges: (the constant, the moved directions, the
    family's ranges at n = 0). A range only one of them states is taken as moved (the other's piece and the box
    imply it there: `same_region` checks); None when the ranges they share move by different constants."""
    shifts, moved = set(), set()
    for direction in seed.keys() & piece.keys():
        a, b = seed[direction], piece[direction]
        if a == b:
            continue
        if (a[0] is None) != (b[0] is None) or (a[2] is None) != (b[2] is None) or (a[1], a[3]) != (b[1], b[3]):
            return None
        shifts |= {b[i] - a[i] for i in (0, 2) if a[i] is not None}
        moved.add(direction)
    if len(shifts) != 1:
        return None
    (shift,) = shifts
    if shift <= 0:
        return None
    base = dict(seed)
    for direction in piece.keys() - seed.keys():
        base[direction] = _moved(piece[direction], -shift)
    moved |= seed.keys() ^ piece.keys()
    return shift, frozenset(moved), base


def same_region(solver: Solver, member: dict, piece: dict) -> bool:
    """Whether `member` and `piece` are the same set within the box (each implies the other)."""
    member_formulas, piece_formulas = _piece_formulas(solver, member), _piece_formulas(solver, piece)
    return _implies(solver, member_formulas, piece_formulas) and _implies(solver, piece_formulas, member_formulas)


@dataclass(frozen=True)
class Family:
    """Pieces that are one piece, `base`, moved by constants: parameter k (n, m, ...) moves the ranges in
    `parameters[k]` by its value, and `values` lists the values the parameters take together, one tuple per piece
    (each parameter's lowest value 0). A piece alone has no parameters and one value, ()."""

    base: dict
    parameters: tuple  # (frozenset of directions, ...)
    values: tuple  # ((Fraction, ...), ...)

    def member(self, values: tuple) -> dict:
        """The piece at one tuple of parameter values."""
        shift = {d: sum((v for v, moved in zip(values, self.parameters) if d in moved), Fraction(0)) for d in self.base}
        return {d: _moved(b, shift[d]) if shift[d] else b for d, b in self.base.items()}

    def pieces(self) -> list[dict]:
        return [self.member(values) for values in self.values]


def _member(base: dict, moved: frozenset, n: Fraction) -> dict:
    """`base` moved by `n` in the ranges `moved`: the member of a family of one parameter (`Family.member`)."""
    return Family(base, (moved,), ()).member((n,))


def _relative(seed: dict, piece: dict) -> Optional[tuple[Fraction, frozenset, dict]]:
    """`_shift_between` either way round: the constant may be negative, the ranges are the seed's frame."""
    forward = _shift_between(seed, piece)
    if forward is not None:
        return forward
    backward = _shift_between(piece, seed)
    if backward is None:
        return None
    shift, moved, base = backward  # base is the piece's frame: the seed is it moved by `shift`
    return -shift, moved, _member(base, moved, shift)


def _one_constant(solver: Solver, pieces: Sequence[dict]) -> list[Family]:
    """The pieces, in their order, as families of one parameter: each the first piece left and every later one
    that is it moved by a constant in the same ranges (each member checked to be its piece, `same_region`)."""
    left, found = list(pieces), []
    while left:
        seed = left.pop(0)
        base, moved, shifts = seed, frozenset(), [Fraction(0)]
        for piece in list(left):
            relative = _relative(seed, piece)
            if relative is None:
                continue
            shift, piece_moved, piece_base = relative
            if len(shifts) > 1 and (piece_moved, piece_base) != (moved, base):
                continue
            if len(shifts) == 1 and not same_region(solver, piece_base, seed):
                continue
            if same_region(solver, _member(piece_base, piece_moved, shift), piece):
                base, moved, shifts = piece_base, piece_moved, [*shifts, shift]
                left.remove(piece)
        if len(shifts) == 1:
            found.append(Family(seed, (), ((),)))
        else:
            found.append(_lowest_at_zero(Family(base, (moved,), tuple((n,) for n in shifts))))
    return found


def _lowest_at_zero(family: Family) -> Family:
    """The same pieces, the base moved so that each parameter's lowest value is 0, the parameters in the order of
    their smallest step (n the whole second, m the monitor poll), the values in reading order."""
    count = len(family.parameters)
    lowest = tuple(min(values[k] for values in family.values) for k in range(count))
    base = family.member(lowest)
    values = [tuple(v - low for v, low in zip(values, lowest)) for values in family.values]
    step = [min((v[k] for v in values if v[k] > 0), default=Fraction(0)) for k in range(count)]
    order = sorted(range(count), key=lambda k: step[k])
    parameters = tuple(family.parameters[k] for k in order)
    return Family(base, parameters, tuple(sorted(tuple(v[k] for k in order) for v in values)))


def _merged(solver: Solver, family: Family, other: Family) -> Optional[Family]:
    """`family` and `other` as one family, when `other`'s base is `family`'s moved by a constant in some ranges:
    its parameters and that move become the joined family's (those `family` lacks added); every piece of both
    checked with z3 to be its member."""
    relative = _relative(family.base, other.base)
    if relative is None:
        return None
    shift, moved, base = relative
    if base != family.base:
        return None
    parameters = family.parameters
    for parameter in (*other.parameters, moved):
        if parameter not in parameters:
            parameters = (*parameters, parameter)
    if len(parameters) > len(PARAMETER_NAMES):
        return None
    width = len(parameters)

    def widened(values: tuple, source: tuple) -> list:
        out = [Fraction(0)] * width
        for value, parameter in zip(values, source):
            out[parameters.index(parameter)] += value
        return out

    values = [tuple(widened(v, family.parameters)) for v in family.values]
    for v in other.values:
        moved_values = widened(v, other.parameters)
        moved_values[parameters.index(moved)] += shift
        values.append(tuple(moved_values))
    if len(set(values)) != len(values):
        return None
    candidate = Family(family.base, parameters, tuple(values))
    originals = family.pieces() + other.pieces()
    if not all(same_region(solver, candidate.member(v), piece) for v, piece in zip(values, originals)):
        return None
    return _lowest_at_zero(candidate)


def families(solver: Solver, pieces: Sequence[dict]) -> list[Family]:
    """The pieces, in their order, as families: pieces moved by one constant in the same ranges first
    (`for n = 0 or 5`), then families that are each other moved by another constant in other ranges, joined
    (`for n = 0, 1 or 2 and m = 0 or 5`). Every member is checked with z3 to be the piece it stands for."""
    found = _one_constant(solver, pieces)
    joined = True
    while joined:
        joined = False
        for i in range(len(found)):
            for j in range(i + 1, len(found)):
                merged = _merged(solver, found[i], found[j]) or _merged(solver, found[j], found[i])
                if merged is not None:
                    found[i] = merged
                    del found[j]
                    joined = True
                    break
            if joined:
                break
    return found


def family_pieces(family: Family) -> list[dict]:
    """A family's pieces, one per tuple of parameter values."""
    return family.pieces()


def _number(value: Fraction) -> str:
    """A short decimal where one is within float noise (the scenario's 0.05 is a binary float; sums of them
    carry its error), else a small fraction, else about 9 digits marked ~."""
    nearest = Fraction(round(value * 10**9), 10**9)
    if abs(value - nearest) <= abs(value) * Fraction(1, 10**12):
        value = nearest
    for digits in range(10):
        scaled = value * 10**digits
        if scaled.denominator == 1:
            whole, part = divmod(abs(scaled.numerator), 10**digits)
            sign = "-" if value < 0 else ""
            return f"{sign}{whole}.{part:0{digits}d}" if digits else f"{sign}{whole}"
    if value.denominator < 1000:
        return f"{value.numerator}/{value.denominator}"
    return f"~{float(value):.9g}"


def short_names(fields: Sequence[str]) -> dict[str, str]:
    """Each field by the shortest dotted tail no other field shares (`timings.upload_seconds` -> `upload_seconds`,
    two events' `at_seconds` -> `events[0].at_seconds` and `events[1].at_seconds`)."""
    names = {}
    for field in fields:
        parts = field.split(".")
        for size in range(1, len(parts) + 1):
            tail = ".".join(parts[-size:])
            if not any(other != field and (other == tail or other.endswith("." + tail)) for other in fields):
                break
        names[field] = tail
    return names


def _expression(direction: Direction, names: dict) -> str:
    text = ""
    for field, coefficient in direction:
        field = names.get(field, field)
        size = abs(coefficient)
        body = field if size == 1 else f"{_number(size)}*{field}"
        if not text:
            text = body if coefficient > 0 else f"-{body}"
        else:
            text += f" {'+' if coefficient > 0 else '-'} {body}"
    return text


#: the names of a family's parameters, in order
PARAMETER_NAMES = ("n", "m", "k", "j")


def _range_text(direction: Direction, bounds: Bounds, names: dict, parameters: Sequence[str] = ()) -> str:
    expression = _expression(direction, names)
    low, low_strict, high, high_strict = bounds

    def number(value: Fraction) -> str:
        return " + ".join((_number(value), *parameters))

    if low is not None and high is not None:
        if low == high:
            return f"{expression} = {number(low)}"
        return f"{number(low)} {'<' if low_strict else '<='} {expression} {'<' if high_strict else '<='} {number(high)}"
    if low is not None:
        return f"{expression} {'>' if low_strict else '>='} {number(low)}"
    return f"{expression} {'<' if high_strict else '<='} {number(high)}"


def _values_text(values: Sequence[str]) -> str:
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def _family_text(family: Family) -> str:
    """`for n = 0 or 5: ` (one parameter), `for n = 0 or 1 and m = 0 or 5: ` (every pair), or `for (n, m) =
    (0, 0), (1, 0) or (0, 5): ` (some pairs); empty for a piece alone."""
    if len(family.values) == 1:
        return ""
    names = PARAMETER_NAMES[: len(family.parameters)]
    each = [sorted({values[k] for values in family.values}) for k in range(len(names))]
    every = 1
    for taken in each:
        every *= len(taken)
    if every == len(family.values):
        return (
            "for "
            + " and ".join(f"{name} = {_values_text([_number(v) for v in taken])}" for name, taken in zip(names, each))
            + ": "
        )
    pairs = [f"({', '.join(_number(v) for v in values)})" for values in family.values]
    return f"for ({', '.join(names)}) = {_values_text(pairs)}: "


def condition_pieces(
    path: PathResult, intervals: Sequence[Interval], deadline: Optional[float] = None
) -> "tuple[list[dict], Optional[Fraction]] | None":
    """The path's condition as pieces (alternatives), each a dict expression -> (low, low strict, high, high
    strict) of ranges that must all hold, the witness's piece first; and how far a bound may be off where a
    sub-second stamp was relaxed (`pieces.relaxation`; None: exact).
    None when the path has too many pieces to list (`TooManyPieces`)."""
    order = {interval.field: index for index, interval in enumerate(intervals)}
    solver = Solver(intervals, SIMPLIFYING_CHECK_MS, deadline)
    bounds = {i.field: (i.low, i.high) for i in intervals}
    try:
        pieces, relaxed = path_pieces(path.constraints, bounds, solver)
    except TooManyPieces:
        return None
    simplified: list[dict] = []
    for rows in pieces:
        ranges = _without_implied(solver, _ranges(rows, order))
        if ranges not in simplified:
            simplified.append(ranges)
    merged = True
    while merged:  # join pieces that continue each other (a floor's consecutive values), then simplify again
        merged = False
        for i in range(len(simplified)):
            for j in range(i + 1, len(simplified)):
                joined = _joined(simplified[i], simplified[j])
                if joined is not None:
                    simplified[i] = _without_implied(solver, joined)
                    del simplified[j]
                    merged = True
                    break
            if merged:
                break

    def reading_order(ranges: dict) -> list:
        return [(b[0] is not None, b[0] or 0, b[2] or 0) for _, b in sorted(ranges.items(), key=by_field(order))]

    simplified.sort(key=reading_order)
    at_witness = [r for r in simplified if piece_holds(r, path.witness)]
    simplified = at_witness[:1] + [r for r in simplified if r not in at_witness[:1]]  # the witness's piece first
    for ranges in simplified:  # a field held at its box's edge reads as an equality
        for direction, (low, low_strict, high, high_strict) in list(ranges.items()):
            if len(direction) == 1:
                edge_low, edge_high = bounds[direction[0][0]]
                if high == edge_low and not high_strict or low == edge_high and not low_strict:
                    ranges[direction] = (high if high is not None else low, False) * 2
    return simplified, relaxed


def by_field(order: dict):
    """Sort ranges by the fields they bound, in the box's order."""
    return lambda item: [order[f] for f, _ in item[0]]


def readable_condition(
    path: PathResult, intervals: Sequence[Interval], deadline: Optional[float] = None
) -> tuple[str, ...]:
    """The path's condition, one line per family of pieces (the lines are alternatives: `or`), each a conjunction
    (`and`) of ranges of the fields (by their `short_names`), led by the choices (which pod) and, for a family of
    more than one piece, the values its parameters (n, m) take. The line holding the path's witness comes first;
    lines in parentheses are notes, not pieces."""
    names = short_names([i.field for i in intervals])
    order = {interval.field: index for index, interval in enumerate(intervals)}
    choices = " and ".join(f"{name} = {value_text(value)}" for name, value in path.choices)
    found = condition_pieces(path, intervals, deadline)
    if found is None:
        exact = tuple(render_constraint(c) for c in minimal_condition(path, intervals, deadline))
        return tuple(filter(None, (choices, *exact))) or ("anywhere in the box",)
    simplified, relaxed = found
    grouped = families(Solver(intervals, SIMPLIFYING_CHECK_MS, deadline), simplified)
    lines = []
    for family in grouped[:SHOWN_PIECES]:
        names_of = {
            d: [name for name, moved in zip(PARAMETER_NAMES, family.parameters) if d in moved] for d in family.base
        }
        ordered = sorted(family.base.items(), key=by_field(order))
        texts = [_range_text(d, b, names, names_of[d]) for d, b in ordered]
        line = " and ".join(filter(None, (choices, *texts))) or "anywhere in the box"
        lines.append(_family_text(family) + line)
    if len(grouped) > SHOWN_PIECES:
        lines.append(f"({len(grouped) - SHOWN_PIECES:,} more lines: --json has the exact condition)")
    if relaxed is not None:
        lines.append(f"(bounds through sub-second stamps exact to {within_text(relaxed)})")
    return tuple(lines[:1] + [f"or {line}" if not line.startswith("(") else line for line in lines[1:]])


__all__ = [
    "condition_pieces",
    "families",
    "family_pieces",
    "piece_holds",
    "readable_condition",
    "same_region",
    "short_names",
]
