"""How `aggsim sweep` shows exact region maps: each cell's outcome shares (ratios of exact areas) and where each
outcome lies, on a terminal (rich) and as one JSON object."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Sequence

from aggregation.explore import OUTCOMES, outcome_label
from aggregation.pieces import within_text
from aggregation.proof_report import path_count_line, print_wrapped
from aggregation.prove import played_behaviours
from aggregation.regions import RegionCell
from aggregation.report import MEANING_STYLE

if TYPE_CHECKING:
    from rich.console import Console


def _number(value) -> str:
    return f"{float(value):.6g}"


def _counts(region_map) -> tuple[int, int, int]:
    """(paths, refused paths, distinct behaviours), counted as `prove` counts them (`prove.played_behaviours`)."""
    refused = sum(1 for r in region_map.regions if r.behaviour.refusal)
    return len(region_map.regions), refused, len(played_behaviours(r.behaviour for r in region_map.regions))


def render_regions(cells: Sequence[RegionCell], meaning: dict, console: "Console", plotted: bool = False) -> None:
    from rich.text import Text

    first = cells[0].map
    console.print("Exact outcome regions (every path, each share a ratio of exact areas) of:", highlight=False)
    for interval in (first.x, first.y):
        console.print(f"  {interval.field} in [{_number(interval.low)}, {_number(interval.high)}]", highlight=False)
    for cell in cells:
        region_map = cell.map
        paths, refused, behaviours = _counts(region_map)
        console.print()
        count = path_count_line(paths, refused, behaviours, region_map.seconds, explored="")
        print_wrapped(console, f"{cell.label}: {count}", joint=", ", style="bold")
        for outcome in OUTCOMES:
            if outcome in region_map.outcomes():
                share = region_map.share(outcome)
                style = MEANING_STYLE.get(meaning.get(outcome), "") if share else ""
                label = outcome_label(outcome)
                console.print(Text.assemble(f"  {label:<21} ", (f"{float(share):>8.3%}", style)), highlight=False)
        refusals = dict.fromkeys(r.behaviour.refusal for r in region_map.regions if r.behaviour.refusal)
        for kind in refusals:  # why the model refuses (`--json` has each region's witness to replay it)
            console.print(Text(f"  refused: {kind}"), highlight=False)
    relaxed = [r.relaxed_within for c in cells for r in c.map.regions if r.relaxed]
    if relaxed:
        within = within_text(max(relaxed))
        note = f"\nBoundaries through sub-second stamps are exact to {within}"
        sums = [_shares_sum(c.map) for c in cells]
        off = [(c, total) for c, total in zip(cells, sums) if total != 1]
        if off:
            # the regions either side of such a boundary may both hold a sliver that thin (or neither): by how much
            said = "; ".join(f"{c.label}'s shares sum to {_percent_off_100(total)}" for c, total in off)
            note += f": the regions either side of one may both hold a sliver that wide (or neither), so {said}"
        console.print(note + ".", highlight=False)
    if not plotted:
        console.print("--plot FILE draws the regions; --json lists every region's polygons.", highlight=False)


def _shares_sum(region_map) -> Fraction:
    return sum((region_map.share(o) for o in region_map.outcomes()), Fraction(0))


def _percent_off_100(total: Fraction) -> str:
    """`total` as a percentage with the digits that show how far it is from 100% (100.00000008%)."""
    for digits in range(3, 16):
        shown = f"{float(total):.{digits}%}"
        if float(shown[:-1]) != 100:
            return shown
    return f"{float(total):.15%}"


def regions_to_json(cells: Sequence[RegionCell]) -> dict:
    first = cells[0].map
    return {
        "fields": [{"field": i.field, "low": float(i.low), "high": float(i.high)} for i in (first.x, first.y)],
        "cells": [
            {
                "plugin": cell.plugin,
                "aggregation": cell.aggregation,
                **dict(zip(("paths", "refused_paths", "behaviours"), _counts(cell.map))),
                "seconds": round(cell.map.seconds, 3),
                "bounds": {
                    o: {"low": [float(v) for v in b[0]], "high": [float(v) for v in b[1]]}
                    for o in cell.map.outcomes()
                    if (b := cell.map.bounds(o)) is not None
                },
                "shares": {
                    o: {"share": float(cell.map.share(o)), "exact": str(cell.map.share(o))} for o in cell.map.outcomes()
                },
                # 1 unless a relaxed boundary (a sub-second stamp's) lets two regions share a sliver along it
                "shares_sum": {"share": float(_shares_sum(cell.map)), "exact": str(_shares_sum(cell.map))},
                "regions": [
                    {
                        "outcome": r.behaviour.outcome,
                        "behaviour": r.behaviour.describe(),
                        "area": float(r.area),
                        "relaxed": r.relaxed,
                        "witness": {name: float(v) for name, v in r.witness.items()},
                        "polygons": [[[float(px), float(py)] for px, py in polygon] for polygon in r.polygons],
                    }
                    for r in cell.map.regions
                ],
            }
            for cell in cells
        ],
    }
