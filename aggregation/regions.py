"""The exact outcome map of two varied fields: every path the prover explores, as the polygons it covers.

A path's condition is a conjunction of linear constraints over the two fields and integer atoms (floors and
round-half-even of linear terms, e.g. torch's whole-second stamps). Fixing each atom to one of the integers it
can take on the path makes every constraint, and the atom's own definition (k <= t < k+1 for floor(t) = k),
a half-plane; the path covers the union, over those integers, of the box clipped by its half-planes. The
clipping is done in rationals, so the polygons' corners and areas are exact: the picture's boundaries are the
model's own, not a grid's guess, and an outcome's share of the box is a ratio of areas, not of samples.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional, Sequence

from aggregation import defaults
from aggregation.parallel import ordered_map
from aggregation.pieces import TooManyPieces, path_pieces
from aggregation.prove import (
    COUNTEREXAMPLE,
    UNKNOWN,
    Behaviour,
    Claim,
    Interval,
    PathResult,
    ProveError,
    Solver,
    point_text,
    prove,
)
from aggregation.scenario import ScenarioSource

Point = tuple[Fraction, Fraction]
Polygon = tuple[Point, ...]

_EVERYTHING = Claim("map", "every path is drawn", lambda execution: True)


@dataclass(frozen=True)
class Region:
    """One path: what it does and the convex polygons (counter-clockwise corners) where it is taken."""

    behaviour: Behaviour
    polygons: tuple[Polygon, ...]
    area: Fraction
    witness: dict
    # a boundary runs through sub-second stamps: how far it may lie from the true one (`pieces.relaxation`)
    relaxed_within: Optional[Fraction] = None

    @property
    def relaxed(self) -> bool:
        return self.relaxed_within is not None


@dataclass(frozen=True)
class RegionMap:
    """Every path of a two-field box; the regions partition the box (boundary paths have no area). Where the model
    refuses to play (`scenario.ModelRefusal`), a region's outcome is REFUSED."""

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
        within `relaxed_within` of a relaxed boundary, where two relaxed regions may overlap."""
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


def path_region(path: PathResult, x: Interval, y: Interval, solver: Solver) -> Region:
    """The path's polygons: one convex piece per assignment of its coarse integer parts (whole seconds, monitor
    polls), each the box clipped by the path's constraints; fine integer parts (sub-second stamps: more than
    `COARSE` values across the box) are relaxed to the reals and projected out, which moves a boundary through
    them by at most one of their units each (`pieces.relaxation`: 256 ns per stamp compared), never more."""
    bounds = {x.field: (x.low, x.high), y.field: (y.low, y.high)}
    try:
        pieces, relaxed = path_pieces(path.constraints, bounds, solver)
    except TooManyPieces as e:
        raise ProveError(f"the region map cannot be drawn: {e}") from None
    corners = [(x.low, y.low), (x.high, y.low), (x.high, y.high), (x.low, y.high)]
    polygons = []
    for rows in pieces:
        polygon = corners
        for coefficients, constant, _strict in rows:  # the boundary kept: it has no area
            polygon = _clip(
                polygon, coefficients.get(x.field, Fraction(0)), coefficients.get(y.field, Fraction(0)), constant
            )
            if not polygon:
                break
        if polygon:
            polygons.append(tuple(polygon))
    area = sum((_area(p) for p in polygons), Fraction(0))
    return Region(path.behaviour, tuple(polygons), area, dict(path.witness), relaxed)


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
    deadline = time.perf_counter() + max_seconds  # the cell's budget covers the paths and their drawing
    proof = prove(source, _EVERYTHING, (x, y), plugin, aggregation, deployment, max_paths, max_seconds)
    if proof.verdict == UNKNOWN and proof.reason:  # not where the model refuses: that is a region of its own
        hint = " (raise --max-paths or --max-seconds)" if proof.reason.startswith("the budget ran out") else ""
        raise ProveError(f"the region map cannot be drawn exactly: {proof.reason}{hint}")
    assert proof.verdict != COUNTEREXAMPLE  # the claim holds everywhere by construction
    solver = Solver((x, y), int(max_seconds * 1000), deadline)
    try:
        regions = tuple(path_region(p, x, y, solver) for p in proof.paths)
    except ProveError:
        if solver.out_of_time:
            raise ProveError(
                f"the region map cannot be drawn exactly: the budget ran out ({max_seconds:g} s) while drawing its "
                "boundaries (raise --max-seconds)"
            ) from None
        raise
    for path, region in zip(proof.paths, regions):
        # a path with choices took one of the operator's map orders (the box has no discrete field): its region is
        # covered once per order, and a map of outcomes has one per point; a line or a corner has no area to cover
        if path.choices and region.area:
            field = path.choices[0][0]
            raise ProveError(
                f"the region map cannot be drawn: Go's random map order decides the job across an area of the box "
                f"(e.g. at {point_text(path.witness)}); set {field} in the scenario to draw each order, or prove a "
                "claim instead"
            )
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
    processes: int = 1,
) -> tuple[RegionCell, ...]:
    """`sweep`'s cells (plugin x aggregation flag), each an exact region map instead of a grid's counts; with
    `processes` > 1, the cells are drawn in that many worker processes (each within its own budget, as here)."""
    draw = _CellDrawer(source, x, y, deployment, max_paths, max_seconds)
    cells = [(plugin, flag) for plugin in plugins for flag in flags]
    if processes > 1 and len(cells) > 1:
        drawn = ordered_map(draw, cells, min(processes, len(cells)))
    else:
        drawn = ((cell, draw(cell)) for cell in cells)
    return tuple(RegionCell(plugin, flag, drawn_map) for (plugin, flag), drawn_map in drawn)


@dataclass(frozen=True)
class _CellDrawer:
    """One cell's region map, in whichever process draws it."""

    source: ScenarioSource
    x: Interval
    y: Interval
    deployment: object
    max_paths: int
    max_seconds: float

    def __call__(self, cell: tuple[str, bool]) -> RegionMap:
        plugin, flag = cell
        return region_map(self.source, self.x, self.y, plugin, flag, self.deployment, self.max_paths, self.max_seconds)


__all__ = ["Region", "RegionCell", "RegionMap", "path_region", "region_map", "region_sweep"]
