"""The exact outcome map of two varied fields: every path the prover explores, as the polygons it covers.

A path's condition is a conjunction of linear constraints over the two fields and integer atoms (floors and
round-half-even of linear terms, e.g. torch's whole-second stamps). Fixing each atom to one of the integers it
can take on the path makes every constraint, and the atom's own definition (k <= t < k+1 for floor(t) = k),
a half-plane; the path covers the union, over those integers, of the box clipped by its half-planes. The
clipping is done in rationals, so the polygons' corners and areas are exact: the picture's boundaries are the
model's own, not a grid's guess, and an outcome's share of the box is a ratio of areas, not of samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Optional, Sequence

from aggregation import defaults
from aggregation.prove import (
    COUNTEREXAMPLE,
    UNKNOWN,
    Behaviour,
    Claim,
    Interval,
    PathResult,
    ProveError,
    Solver,
    prove,
)
from aggregation.scenario import ScenarioSource
from aggregation.symbolic import Constraint, Path, TermKey, atoms_in

Point = tuple[Fraction, Fraction]
Polygon = tuple[Point, ...]
#: integer assignments to one path's atoms (each a convex piece of its region) before the map gives up
MAX_PIECES = 10_000
#: an integer part taking fewer values than this across the box is enumerated exactly; more, relaxed
COARSE = 1_000

_EVERYTHING = Claim("map", "every path is drawn", lambda execution: True)


@dataclass(frozen=True)
class Region:
    """One path: what it does and the convex polygons (counter-clockwise corners) where it is taken."""

    behaviour: Behaviour
    polygons: tuple[Polygon, ...]
    area: Fraction
    witness: dict
    relaxed: bool = False  # a boundary runs through nanosecond stamps: exact to a nanosecond


@dataclass(frozen=True)
class RegionMap:
    """Every path of a two-field box; the regions partition the box (boundary paths have no area)."""

    x: Interval
    y: Interval
    regions: tuple[Region, ...]
    seconds: float

    @property
    def box_area(self) -> Fraction:
        return (self.x.high - self.x.low) * (self.y.high - self.y.low)

    def outcomes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.behaviour.outcome for r in self.regions))

    def share(self, outcome: str) -> Fraction:
        """The exact fraction of the box's area where the final outcome is `outcome`."""
        return sum((r.area for r in self.regions if r.behaviour.outcome == outcome), Fraction(0)) / self.box_area

    def bounds(self, outcome: str) -> Optional[tuple[Point, Point]]:
        """The smallest (x, y) rectangle holding every piece of `outcome` with an area."""
        corners = [
            p for r in self.regions if r.behaviour.outcome == outcome and r.area for poly in r.polygons for p in poly
        ]
        if not corners:
            return None
        xs, ys = [p[0] for p in corners], [p[1] for p in corners]
        return (min(xs), min(ys)), (max(xs), max(ys))

    def regions_at(self, point: Point) -> tuple[Region, ...]:
        """The regions whose interior holds `point`: one, except on a boundary or outside the box (none), or
        within a nanosecond of a relaxed boundary, where two relaxed regions may overlap."""
        return tuple(r for r in self.regions if any(_strictly_inside(poly, point) for poly in r.polygons))

    def outcome_at(self, point: Point) -> Optional[str]:
        """The outcome of the region whose interior holds `point` (None on a boundary or outside the box)."""
        found = self.regions_at(point)
        return found[0].behaviour.outcome if found else None


# --- geometry, exact ---------------------------------------------------------------------------------------
def _clip(polygon: list[Point], a: Fraction, b: Fraction, c: Fraction) -> list[Point]:
    """The part of a convex polygon where a*x + b*y + c <= 0 (the boundary kept: it has no area)."""
    kept: list[Point] = []
    for index, p in enumerate(polygon):
        q = polygon[(index + 1) % len(polygon)]
        fp, fq = a * p[0] + b * p[1] + c, a * q[0] + b * q[1] + c
        if fp <= 0:
            kept.append(p)
        if (fp < 0 < fq) or (fq < 0 < fp):
            t = fp / (fp - fq)
            kept.append((p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])))
    deduplicated = [p for i, p in enumerate(kept) if p != kept[i - 1]] if len(kept) > 1 else kept
    return deduplicated


def _area(polygon: Sequence[Point]) -> Fraction:
    twice = sum(
        (p[0] * q[1] - q[0] * p[1] for p, q in zip(polygon, tuple(polygon[1:]) + tuple(polygon[:1]))), Fraction(0)
    )
    return abs(twice) / 2


def _strictly_inside(polygon: Polygon, point: Point) -> bool:
    if len(polygon) < 3:
        return False
    signs = set()
    for p, q in zip(polygon, polygon[1:] + polygon[:1]):
        cross = (q[0] - p[0]) * (point[1] - p[1]) - (q[1] - p[1]) * (point[0] - p[0])
        if cross == 0:
            return False
        signs.add(cross > 0)
    return len(signs) == 1


# --- a path's pieces ------------------------------------------------------------------------------------
Row = tuple  # (((variable, coefficient), ...) as a dict, constant): sum + constant <= 0


def _row(key: TermKey, fixed: dict) -> tuple[dict, Fraction]:
    """key with the enumerated atoms substituted; the fields and the relaxed atoms stay variables."""
    coefficients: dict = {}
    constant = key[1]
    for atom, coefficient in key[0]:
        if atom in fixed:
            constant += coefficient * fixed[atom]
        else:
            variable = atom[1] if atom[0] == "var" else atom
            coefficients[variable] = coefficients.get(variable, Fraction(0)) + coefficient
    return coefficients, constant


def _negated(row: tuple[dict, Fraction]) -> tuple[dict, Fraction]:
    return {v: -c for v, c in row[0].items()}, -row[1]


def _rows(constraint: Constraint, fixed: dict) -> list:
    key, relation = constraint
    row = _row(key, fixed)
    if relation in ("<", "<="):
        return [row]
    if relation == "==":
        return [row, _negated(row)]
    return []  # "!=": removes a line, no area


def _definition(atom, fixed: dict) -> list:
    """Where the atom is k (enumerated, or a relaxed variable): k <= t <= k + 1 for a floor, k - 1/2 <= t <=
    k + 1/2 for a rounding (closed: the excluded edge has no area)."""
    coefficients, constant = _row(atom[1], fixed)
    if atom in fixed:
        k_coefficients, k_constant = {}, fixed[atom]
    else:
        k_coefficients, k_constant = {atom: Fraction(1)}, Fraction(0)
    low, high = (Fraction(0), Fraction(1)) if atom[0] == "floor" else (Fraction(-1, 2), Fraction(1, 2))
    # t - k - high <= 0 and k + low - t <= 0
    above = dict(coefficients)
    for v, c in k_coefficients.items():
        above[v] = above.get(v, Fraction(0)) - c
    below = {v: -c for v, c in coefficients.items()}
    for v, c in k_coefficients.items():
        below[v] = below.get(v, Fraction(0)) + c
    return [(above, constant - k_constant - high), (below, k_constant + low - constant)]


def _eliminate(rows: list, variable) -> list:
    """Fourier-Motzkin: the rows' projection along one variable (exact for the real relaxation)."""
    upper, lower, rest = [], [], []
    for row in rows:
        coefficient = row[0].get(variable, Fraction(0))
        (upper if coefficient > 0 else lower if coefficient < 0 else rest).append(row)
    for up in upper:
        for down in lower:
            a, b = up[0][variable], -down[0][variable]
            combined: dict = {}
            for v in set(up[0]) | set(down[0]):
                if v != variable:
                    value = b * up[0].get(v, Fraction(0)) + a * down[0].get(v, Fraction(0))
                    if value:
                        combined[v] = value
            rest.append((combined, b * up[1] + a * down[1]))
    return rest


def _atom_values(solver: Solver, path: PathResult, atoms: Sequence) -> list[dict]:
    """Every integer assignment of the path's atoms that some point of its region takes."""
    if not atoms:
        return [{}]
    z3 = solver.z3
    expressions = [solver.atom(atom) for atom in atoms]
    found: list[dict] = []
    solver.solver.push()
    try:
        solver.solver.add(solver.conjunction(path.constraints))
        while True:
            result = solver.solver.check()
            if result == z3.unsat:
                return found
            if result != z3.sat:
                reason = solver.solver.reason_unknown()
                raise ProveError(f"the region map cannot be drawn: the solver gave up ({reason})")
            model = solver.solver.model()
            values = []
            for expression in expressions:
                value = model.eval(expression, model_completion=True)
                values.append(Fraction(value.numerator_as_long(), value.denominator_as_long()))
            found.append(dict(zip(atoms, values)))
            if len(found) > MAX_PIECES:
                raise ProveError(f"the region map cannot be drawn: one path has more than {MAX_PIECES:,} pieces")
            solver.solver.add(z3.Or([e != solver.number(v) for e, v in zip(expressions, values)]))
    finally:
        solver.solver.pop()


def path_region(path: PathResult, x: Interval, y: Interval, solver: Solver) -> Region:
    """The path's polygons: one convex piece per assignment of its coarse integer parts (whole seconds, monitor
    polls), each the box clipped by the path's constraints; fine integer parts (nanosecond stamps: more than
    `COARSE` values across the box) are relaxed to the reals and projected out, which moves a boundary through
    them by at most one of their units (a nanosecond), never more."""
    found: dict = {}
    for key, _ in path.constraints:
        atoms_in(key, found)
    found = {atom: None for atom in found if atom[0] != "var"}  # the integer parts, inner ones first
    box = Path({x.field: (x.low, x.high), y.field: (y.low, y.high)})
    for atom in found:  # each one's bounds over the box, from its inner ones'
        box.integer_atom(*atom)
    coarse = tuple(a for a in found if box.bounds[a][1] - box.bounds[a][0] < COARSE)
    fine = tuple(a for a in found if a not in coarse)
    corners = [(x.low, y.low), (x.high, y.low), (x.high, y.high), (x.low, y.high)]
    polygons = []
    for fixed in _atom_values(solver, path, coarse):
        rows = [r for c in path.constraints for r in _rows(c, fixed)]
        rows += [r for atom in found for r in _definition(atom, fixed)]
        for atom in reversed(fine):  # outer atoms first: each elimination keeps the rest linear
            rows = _eliminate(rows, atom)
        polygon = corners
        for coefficients, constant in rows:
            polygon = _clip(
                polygon, coefficients.get(x.field, Fraction(0)), coefficients.get(y.field, Fraction(0)), constant
            )
            if not polygon:
                break
        if polygon:
            polygons.append(tuple(polygon))
    area = sum((_area(p) for p in polygons), Fraction(0))
    return Region(path.behaviour, tuple(polygons), area, dict(path.witness), bool(fine))


def region_map(
    source: ScenarioSource,
    x: Interval,
    y: Interval,
    plugin: Optional[str] = None,
    aggregation: Optional[bool] = None,
    deployment=None,
    max_paths: int = defaults.PROVE_MAX_PATHS,
    max_seconds: float = defaults.PROVE_MAX_SECONDS,
) -> RegionMap:
    """Explore every path of the box x by y (both proper intervals) and turn each into its exact polygons."""
    for interval in (x, y):
        if interval.high <= interval.low:
            raise ProveError(f"--vary {interval.field}: a region map needs a range LO..HI with LO < HI")
    if x.field == y.field:
        raise ProveError(f"--vary {x.field}: given twice")
    proof = prove(source, _EVERYTHING, (x, y), plugin, aggregation, deployment, max_paths, max_seconds)
    if proof.verdict == UNKNOWN:
        raise ProveError(f"the region map cannot be drawn exactly: {proof.reason}")
    assert proof.verdict != COUNTEREXAMPLE  # the claim holds everywhere by construction
    solver = Solver((x, y), 60_000)
    regions = tuple(path_region(p, x, y, solver) for p in proof.paths)
    return RegionMap(x, y, regions, proof.seconds)


@dataclass(frozen=True)
class RegionCell:
    plugin: str
    aggregation: bool
    map: RegionMap

    @property
    def label(self) -> str:
        return f"{self.plugin} / aggregation {'on' if self.aggregation else 'off'}"


def region_sweep(
    source: ScenarioSource,
    x: Interval,
    y: Interval,
    plugins: Sequence[str],
    flags: Sequence[bool] = (True, False),
    deployment=None,
    max_paths: int = defaults.PROVE_MAX_PATHS,
    max_seconds: float = defaults.PROVE_MAX_SECONDS,
) -> tuple[RegionCell, ...]:
    """`sweep`'s cells (plugin x aggregation flag), each an exact region map instead of a grid's counts."""
    return tuple(
        RegionCell(plugin, flag, region_map(source, x, y, plugin, flag, deployment, max_paths, max_seconds))
        for plugin in plugins
        for flag in flags
    )


__all__ = ["Region", "RegionCell", "RegionMap", "path_region", "region_map", "region_sweep"]
