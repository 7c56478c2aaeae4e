"""Exact region maps (`aggsim sweep` with two ranges, `region_figure`): the polygons every path covers.

What a user relies on: the regions tile the box (no area counted twice or missed), the outcome drawn at a point
is the one the plain simulator gives there, and a share is a ratio of areas, not of samples.
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from conftest import MAP_ORDER_TIE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregation import explore
from aggregation.nanoseconds import exact
from aggregation.pieces import _eliminate
from aggregation.prove import Problem, ProveError, parse_range, replay
from aggregation.regions import _area, _clip, region_map
from aggregation.scenario import read_scenario

AGGSIM = str(Path(sys.executable).with_name("aggsim"))
PREEMPTION = "preemption_during_training"
SIGNAL = "attempts[0].events[1].at_seconds=30..31"
LOOK = "propeller.observation_delay_seconds=0..10"
SHUTDOWN = "timings.agent_shutdown_seconds=0.03..5"

# (scenario, x, y, plugin, aggregation): seed-pr with aggregation on compares sub-second stamps (relaxed pieces)
CASES = [
    (PREEMPTION, SIGNAL, LOOK, "upstream", False),
    (PREEMPTION, SIGNAL, LOOK, "seed-pr", True),
    (PREEMPTION, SIGNAL, SHUTDOWN, "seed-pr", False),
    ("sibling_user_error_cleanup", "attempts[0].events[0].at_seconds=20..21", LOOK, "seed-pr", False),
    # a busy operator: where it reads the deleted worker after its exit, the model refuses (a region of its own)
    (
        "preemption_by_pod_deletion",
        "job.reconcile_seconds=0..2",
        "timings.agent_shutdown_seconds=0.03..3",
        "upstream",
        True,
    ),
]
_MAPS: dict = {}


def _map(case):
    if case not in _MAPS:
        scenario, x, y, plugin, aggregation = case
        source = read_scenario(scenario)
        ranges = [parse_range(v, source.message) for v in (x, y)]
        _MAPS[case] = (source, ranges, region_map(source, *ranges, plugin, aggregation))
    return _MAPS[case]


# --- the geometry -----------------------------------------------------------------------------------------
def test_clipping_a_square_by_a_half_plane_is_exact() -> None:
    square = [
        (Fraction(0), Fraction(0)),
        (Fraction(1), Fraction(0)),
        (Fraction(1), Fraction(1)),
        (Fraction(0), Fraction(1)),
    ]
    # x + y <= 1/3: the corner triangle with legs 1/3
    triangle = _clip(square, Fraction(1), Fraction(1), Fraction(-1, 3))
    assert _area(triangle) == Fraction(1, 18)
    assert _clip(square, Fraction(1), Fraction(0), Fraction(1)) == []  # x <= -1: nothing
    assert _area(_clip(square, Fraction(0), Fraction(0), Fraction(-1))) == 1  # 0 <= 1 everywhere: all of it


def test_projecting_out_a_relaxed_integer_keeps_exactly_the_shadow() -> None:
    """Fourier-Motzkin: {x : exists k, x <= k <= 1/2} is x <= 1/2."""
    rows = [({"x": Fraction(1), "k": Fraction(-1)}, Fraction(0), False), ({"k": Fraction(1)}, Fraction(-1, 2), True)]
    assert _eliminate(rows, "k") == [({"x": Fraction(1)}, Fraction(-1, 2), True)]  # x <= k < 1/2: x < 1/2


def _distance_to_edge(polygon, point) -> float:
    """The distance from `point` to the nearest edge of `polygon`, in field units."""
    px, py = float(point[0]), float(point[1])
    best = float("inf")
    for p, q in zip(polygon, polygon[1:] + polygon[:1]):
        (ax, ay), (bx, by) = (float(p[0]), float(p[1])), (float(q[0]), float(q[1]))
        dx, dy = bx - ax, by - ay
        length = dx * dx + dy * dy
        t = 0.0 if length == 0 else max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / length))
        best = min(best, ((ax + t * dx - px) ** 2 + (ay + t * dy - py) ** 2) ** 0.5)
    return best


# --- the maps tile the box ------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[3]}-{'on' if c[4] else 'off'}-{c[2].split('=')[0]}")
def test_the_regions_tile_the_box(case) -> None:
    _, _, regions = _map(case)
    total = sum((r.area for r in regions.regions), Fraction(0))
    if any(r.relaxed for r in regions.regions):
        # a boundary through sub-second stamps moves by at most 256 ns: slivers that thin, never more
        assert abs(total - regions.box_area) <= Fraction(1, 10**6) * regions.box_area
    else:
        assert total == regions.box_area
    assert sum(regions.share(o) for o in regions.outcomes()) == total / regions.box_area


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[3]}-{'on' if c[4] else 'off'}-{c[2].split('=')[0]}")
def test_the_outcome_drawn_at_a_point_is_what_the_plain_simulator_says_there(case) -> None:
    source, (x, y), regions = _map(case)
    scenario, _, _, plugin, aggregation = case
    problem_source = source

    @settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.floats(float(x.low), float(x.high), allow_nan=False),
        st.floats(float(y.low), float(y.high), allow_nan=False),
    )
    def check(px: float, py: float) -> None:
        # the point the simulator is given: a float stands for the whole nanoseconds it rounds to (1.2 is 1.2, not
        # the binary 1.19999999999999996), which may lie on a boundary that the binary value lies just beside
        point = (exact(px), exact(py))
        found = regions.regions_at(point)
        if not found:  # on a boundary or the box's edge: no area there
            return
        if len({r.behaviour.outcome for r in found}) > 1:
            # only relaxed regions may overlap, and only in a sliver a nanosecond wide along their boundary
            assert all(r.relaxed for r in found)
            assert min(_distance_to_edge(poly, point) for r in found for poly in r.polygons) < 1e-8
            return
        drawn = found[0].behaviour.outcome
        problem = Problem(problem_source, problem_source.message, (x, y), plugin, aggregation)
        assert explore.outcome_of(replay(problem, {x.field: point[0], y.field: point[1]})) == drawn

    check()


def test_seed_pr_retries_in_a_strip_a_grid_would_miss() -> None:
    """With aggregation on, seed-pr's map has a thin RETRIED strip inside its FAILED_PERMANENTLY region (the signal
    late in its second, propeller looking late): the map finds it exactly; the plain simulator confirms both sides."""
    source, (x, y), regions = _map(CASES[1])
    strip = [
        r
        for r in regions.regions
        if r.behaviour.outcome == "RETRIED" and r.area and min(p[1] for poly in r.polygons for p in poly) > 6
    ]
    assert strip, "no RETRIED region above a 6 s look"
    piece = max(strip[0].polygons, key=_area)
    centre = tuple(Fraction(float(sum(p[i] for p in piece) / len(piece))) for i in (0, 1))
    inside = {x.field: centre[0], y.field: centre[1]}
    problem = Problem(source, source.message, (x, y), "seed-pr", True)
    assert regions.outcome_at(centre) == "RETRIED"
    assert explore.outcome_of(replay(problem, inside)) == "RETRIED"
    x_low = min(p[0] for p in piece)
    outside = {x.field: x_low - Fraction(1, 100), y.field: inside[y.field]}
    assert regions.outcome_at((outside[x.field], outside[y.field])) == "FAILED_PERMANENTLY"
    assert explore.outcome_of(replay(problem, outside)) == "FAILED_PERMANENTLY"


def test_where_the_model_refuses_is_a_region_with_its_exact_share() -> None:
    """training-operator v1.8.0 `ReconcilePods` would re-create the deleted worker where the busy operator reads it
    after its exit (`operator.PodRecreation`): 0.73 s after its mark with a 0.03 s shutdown (IgnoreOutputs uploads
    nothing; 0.7 s to exit), one second per second of shutdown later. So the model refuses where
    reconcile_seconds - agent_shutdown_seconds > 0.7: a triangle with legs 2 - 0.73 = 1.27 in the 2 x 2.97 box.
    Everywhere else the upstream plugin's preemption is retried; on the line itself (no area) the exit counts and
    the preemption is silent."""
    _, _, regions = _map(CASES[-1])
    assert regions.share("REFUSED") == Fraction("1.27") ** 2 / 2 / (2 * Fraction("2.97"))
    assert regions.share("RETRIED") == 1 - regions.share("REFUSED")
    assert regions.share("SUCCEEDED_SILENTLY") == 0 and "SUCCEEDED_SILENTLY" in regions.outcomes()
    assert regions.outcome_at((Fraction("1.9"), Fraction("0.1"))) == "REFUSED"  # inside: the edge has no area
    assert regions.outcome_at((Fraction(1), Fraction("0.5"))) == "RETRIED"
    scenario, x, y, plugin, _ = CASES[-1]
    shown = subprocess.run(
        [AGGSIM, "sweep", scenario, "--vary", x, "--vary", y, "--plugin", plugin], capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert "  refused by the model   13.577%" in shown.stdout
    assert "  refused: the operator would re-create deleted pod train-worker-1 (attempt 0)" in shown.stdout
    # the same paths, counted as `prove` counts them (prove.py `Proof.behaviours`): a refused region is no behaviour
    proved = [AGGSIM, "prove", scenario, "--claim", "retries", "--vary", x, "--vary", y, "--plugin", plugin, "--json"]
    answer = json.loads(subprocess.run(proved, capture_output=True, text=True).stdout)
    assert answer["refused_paths"] == 1 and answer["behaviours"] == 2
    paths, refused, behaviours = answer["paths"], answer["refused_paths"], answer["behaviours"]
    said = f"{paths} paths ({refused} refused by the model), {behaviours} distinct behaviours,"
    assert f"{plugin} / aggregation on: {said}" in " ".join(shown.stdout.split())
    as_json = subprocess.run([*shown.args, "--json"], capture_output=True, text=True)
    cells = json.loads(as_json.stdout)["cells"]
    assert [(c["paths"], c["refused_paths"], c["behaviours"]) for c in cells] == [(paths, refused, behaviours)] * 2
    # in a pipe (80 columns) the count breaks where its parts join, never inside one
    assert all(len(line) <= 80 for line in shown.stdout.splitlines()), shown.stdout
    assert f"{plugin} / aggregation on: {paths} paths ({refused} refused by the model),\n" in shown.stdout


def test_a_product_of_varied_fields_is_refused_not_drawn() -> None:
    source = read_scenario(PREEMPTION)
    x = parse_range(SIGNAL, source.message)
    interval = parse_range("job.monitor_interval_seconds=1..5", source.message)
    with pytest.raises(ProveError, match="cannot be drawn exactly"):
        region_map(source, x, interval, "recoverable", True)


def test_a_map_order_tie_on_a_line_is_drawn_and_one_across_an_area_is_refused() -> None:
    """`prove` explores a moment Go's map order decides once per order (`operator.py`, `UpdateJobStatus`). Where that
    moment is a line of the box (the Worker's deletion at the Master's exit), the line has no area: the map is drawn,
    its shares still sum to 1, and off the line one region holds each point. Where it covers an area (neither field
    moves either moment), each point would have two outcomes: the map is refused in one line naming the field."""
    source = read_scenario(MAP_ORDER_TIE)
    deletion = parse_range("attempts[0].events[1].at_seconds=35..35.3", source.message)
    drawn = region_map(source, deletion, parse_range(LOOK, source.message), "recoverable", True)
    assert sum((drawn.share(o) for o in drawn.outcomes()), Fraction(0)) == 1
    assert {drawn.outcome_at((Fraction("35.1"), Fraction(5))), drawn.outcome_at((Fraction("35.2"), Fraction(5)))} == {
        "RETRIED",
        "SUCCEEDED",
    }
    retry = parse_range("propeller.round_retry_seconds=0.01..0.1", source.message)
    with pytest.raises(ProveError, match=r"Go's random map order decides the job across an area .* attempts\[0\]\."):
        region_map(source, parse_range(LOOK, source.message), retry, "recoverable", True)


# --- the command line -----------------------------------------------------------------------------------
def _aggsim(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([AGGSIM, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_sweep_with_two_ranges_answers_in_exact_shares_and_draws_the_regions(tmp_path) -> None:
    plot = tmp_path / "regions.svg"
    result = _aggsim(
        "sweep", PREEMPTION, "--vary", SIGNAL, "--vary", LOOK, "--plugin", "upstream", "--plot", str(plot), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "Exact outcome regions" in result.stdout and "succeeded silently" in result.stdout
    assert plot.read_text().count("<path") > 8  # every region's polygons, drawn as vectors
    data = json.loads(
        _aggsim(
            "sweep", PREEMPTION, "--vary", SIGNAL, "--vary", LOOK, "--plugin", "upstream", "--json", cwd=tmp_path
        ).stdout
    )
    for cell in data["cells"]:
        shares = {o: Fraction(s["exact"]) for o, s in cell["shares"].items()}
        assert sum(shares.values()) == 1
        areas = {}
        for region in cell["regions"]:
            areas[region["outcome"]] = areas.get(region["outcome"], 0.0) + region["area"]
        assert {o: a / 10 for o, a in areas.items()} == pytest.approx({o: float(s) for o, s in shares.items()})


@pytest.mark.parametrize(
    "extra, problem",
    [
        (("--vary", SIGNAL), "exactly two ranges"),
        (("--vary", SIGNAL, "--vary", "timings.upload_seconds=1,2"), "--vary timings.upload_seconds=1,2: an exact"),
        (("--vary", SIGNAL, "--vary", LOOK, "--samples", "5"), "--samples: an exact region map"),
        (("--vary", SIGNAL, "--vary", LOOK, "--out", "x.csv"), "--out: an exact region map"),
        (("--vary", SIGNAL, "--vary", "propeller.observation_delay_seconds=3..3"), "LO < HI"),
        (("--vary", SIGNAL, "--vary", LOOK, "--plot", "x.nope"), "--plot x.nope: the file name must end"),
        (("--vary", SIGNAL, "--vary", LOOK, "--max-paths", "2"), "before every path was explored (raise --max-paths"),
        (("--vary", "timings.upload_seconds=1,2", "--max-seconds", "9"), "--max-seconds: a grid explores no paths"),
    ],
)
def test_sweep_region_mistakes_are_one_line_and_exit_2(tmp_path, extra, problem) -> None:
    result = _aggsim("sweep", PREEMPTION, *extra, cwd=tmp_path)
    assert result.returncode == 2
    assert problem in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # refused before writing anything


def test_region_figure_fills_every_polygon_once() -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.collections import PolyCollection

    from aggregation.plot import region_figure

    source, _, regions = _map(CASES[0])
    figure = region_figure([("upstream / aggregation off", regions)], explore.outcome_meanings(source.message))
    drawn = [c for ax in figure.axes for c in ax.collections if isinstance(c, PolyCollection)]
    pieces = sum(1 for r in regions.regions for poly in r.polygons if len(poly) >= 3)
    assert sum(len(c.get_paths()) for c in drawn) == pieces


def test_relaxed_regions_overlap_only_within_a_stamp_s_step_of_their_boundary() -> None:
    """seed-pr with aggregation on compares the preempted pod's stamp (its signal 0.03 s later) with the survivor's
    whole second, 31 (`aggregation.stamps`, mirroring CPython `_PyTime_AsSecondsDouble` and flytekit
    `get_container_error_timestamp`). Up to a signal 30.97 s - 128 ns the stamp's float is below 31 s, so it is
    earlier and the node retries: a boundary through whole seconds, exact. From there the float is 31 s, a tie the
    listing order breaks, and later the stamp is after: two paths, both failing, whose boundary runs through the
    stamp's float, relaxed to the reals, so both hold a sliver of at most 256 ns along it; a microsecond away,
    exactly one does."""
    _, _, regions = _map(CASES[1])

    def at(signal: str) -> list:
        return [(r.behaviour.outcome, r.relaxed) for r in regions.regions_at((Fraction(signal), Fraction(9)))]

    assert at("30.969999871") == [("RETRIED", False)]
    assert at("30.969999872") == []  # on the exact boundary: no region's interior
    assert {o for o, _ in at("30.969999873")} == {"FAILED_PERMANENTLY"}
    assert at("30.9700001") == [("FAILED_PERMANENTLY", True)] * 2
    assert {r.relaxed_within for r in regions.regions if r.relaxed} == {Fraction(256, 10**9)}
    assert at("30.969999") == [("RETRIED", False)]
    assert at("30.970001") == [("FAILED_PERMANENTLY", True)]


def test_drawing_a_map_stays_within_the_cell_s_budget() -> None:
    """`--max-seconds` bounds a cell's paths and their drawing (`regions.region_map`): z3's checks that list a
    path's integer parts (`pieces.atom_values`) answer unknown past the deadline, and the map is refused in one line
    saying the budget ran out, not drawn from what was listed so far. They used to run 60 s checks past any budget."""
    import time

    from aggregation.prove import Solver, prove
    from aggregation.regions import _EVERYTHING, path_region

    source, (x, y), _ = _map(CASES[0])
    paths = prove(source, _EVERYTHING, (x, y), "upstream", False).paths
    # a path through whole-second stamps: its integer parts are listed by z3
    path = next(p for p in paths if any(atom[0] == "floor" for (items, _), _ in p.constraints for atom, _ in items))
    assert path_region(path, x, y, Solver((x, y), 60_000)).polygons  # in time, it is drawn
    spent = Solver((x, y), 60_000, deadline=time.perf_counter())
    with pytest.raises(ProveError, match="the region map cannot be drawn: the time budget ran out"):
        path_region(path, x, y, spent)


def test_a_map_with_nanosecond_boundaries_says_how_far_its_shares_sum_from_100_percent() -> None:
    """Relaxed boundaries (sub-second stamps, `pieces.path_pieces`) let the regions either side share a sliver, so
    the shares of an "exact" map may sum to a hair over 100%: the report says by how much, from the exact areas, and
    the JSON carries the sum; a map with no relaxed boundary sums to exactly 1 and says nothing of it."""
    scenario, x, y, plugin, _ = CASES[1]  # seed-pr: aggregation on compares sub-second stamps, off does not
    args = [AGGSIM, "sweep", scenario, "--vary", x, "--vary", y, "--plugin", plugin]
    cells = json.loads(subprocess.run([*args, "--json"], capture_output=True, text=True).stdout)["cells"]
    sums = {c["aggregation"]: Fraction(c["shares_sum"]["exact"]) for c in cells}
    for cell in cells:
        assert sums[cell["aggregation"]] == sum(Fraction(s["exact"]) for s in cell["shares"].values())
    assert sums[False] == 1 and sums[True] != 1
    shown = " ".join(subprocess.run(args, capture_output=True, text=True).stdout.split())
    # the fewest digits that show the sum is not 100%
    off = next(text for digits in range(3, 16) if float((text := f"{float(sums[True]):.{digits}%}")[:-1]) != 100)
    assert f"so {plugin} / aggregation on's shares sum to {off}." in shown
    assert "Boundaries through sub-second stamps are exact to 256 ns" in shown
    assert "aggregation off's shares" not in shown


def _in_pieces(pieces, point: dict) -> bool:
    """Whether `point` satisfies every row of some piece (`pieces.Row`: sum + constant < 0, or <= 0)."""

    def holds(coefficients, constant, strict) -> bool:
        value = sum(c * point[v] for v, c in coefficients.items()) + constant
        return value < 0 if strict else value <= 0

    return any(all(holds(*row) for row in rows) for rows in pieces)


def test_a_boundary_between_two_sub_second_stamps_is_exact_to_two_of_their_steps() -> None:
    """`pieces.relaxation`: the earliest reader comparing two pods' sub-second stamps (`remote_file_output_reader.go`
    `earliest.After(ts)`) puts two relaxed roundings in one constraint, so its drawn boundary may be off by two steps
    of a stamp's float (`aggregation.stamps`), 512 ns, and the map says so; the true boundary, where the stamps
    the simulator writes change order, lies within that of the drawn one on both sides."""
    from aggregation import stamps
    from aggregation.pieces import path_pieces
    from aggregation.symbolic import Path, StampSym, Sym, recording

    bounds = {"x": (Fraction(0), Fraction(1)), "y": (Fraction(0), Fraction(1))}
    y_ns = 500_000_100
    window = range(500_000_000 - 1_000, 500_000_000 + 1_000)
    true_boundary = next(x for x in window if stamps.document_stamp_ns(x) >= stamps.document_stamp_ns(y_ns))
    for x_ns in (window[0], window[-1]):  # one run on each side: the two paths
        path = Path(dict(bounds))
        with recording(path):
            x = StampSym.of_reading(Sym.variable("x", Fraction(x_ns, 10**9)))
            earlier = x < StampSym.of_reading(Sym.variable("y", Fraction(y_ns, 10**9)))
        pieces, within = path_pieces(path.constraints, bounds, None)
        assert within == Fraction(512, 10**9)
        for at in window:
            taken = (stamps.document_stamp_ns(at) < stamps.document_stamp_ns(y_ns)) == earlier
            drawn = _in_pieces(pieces, {"x": Fraction(at, 10**9), "y": Fraction(y_ns, 10**9)})
            assert drawn == taken or abs(at - true_boundary) <= 512, at
