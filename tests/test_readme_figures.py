"""The README's figures for the sibling's genuine error are what the model gives: the demo's grid
(`explore.default_variations`, enumerated as `aggsim demo` enumerates it) over `sibling_user_error_cleanup`, at each
operator latency the README's table names. They went stale once (the model came to refuse the SIGTERMs that meet
torch's handler, a third of the cases, and the README still said 15% masked, none refused)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "aggregation" / "scenarios" / "sibling_user_error_cleanup.textproto"

#: each row of the README's latency table, and the job fields it sets (docs/propeller-semantics.md section 9)
LATENCIES = {
    "hears of exits at once (the default)": {},
    "hears 0.5 s late": {"pod_status_seconds": 0.5},
    "hears 1 s late": {"pod_status_seconds": 1.0},
    "hears at once, cleans up 0.5 s later": {"cleanup_seconds": 0.5},
    "hears at once, cleans up 1 s later": {"cleanup_seconds": 1.0},
}


def _cells(job_fields: dict, flags: tuple):
    from aggregation.cli import DEMO_SAMPLES
    from aggregation.explore import default_variations, sweep
    from aggregation.scenario import read_scenario

    source = read_scenario(str(SCENARIO))
    for name, value in job_fields.items():
        setattr(source.message.job, name, value)
    result = sweep(source, default_variations(source), samples=DEMO_SAMPLES, seed=0, flags=flags)
    assert result.exhaustive and result.assignments == 2592
    return {(cell.plugin, cell.aggregation): cell for cell in result.cells}


def _share(count: int, cell) -> str:
    return f"{count / cell.total:.0%}"


def _readme_row(header: str, first_cells: str) -> str:
    """The row that starts with `first_cells` of the README's table whose header starts with `header`."""
    lines = (ROOT / "README.md").read_text().splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.startswith(f"| {header} |")]
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    (row,) = [line for line in lines[start:end] if line.startswith(f"| {first_cells} |")]
    return row


@pytest.mark.parametrize("latency", list(LATENCIES))
def test_the_readme_s_masking_table_is_what_the_model_gives_at_each_operator_latency(latency):
    """`explore.sweep` `Cell.masked`, `counts["RETRIED"]` (a retry after a genuine, non-recoverable error is one
    that masked it) and `counts["REFUSED"]`, aggregation off: each share of all 2,592 cases."""
    at_once = not LATENCIES[latency]  # the demo's own sweep: its aggregation-on cells are the headline's too
    cells = _cells(LATENCIES[latency], flags=(True, False) if at_once else (False,))
    if at_once:
        _check_the_headline_masked_column(cells)
    upstream, seed_pr, recoverable = (cells[plugin, False] for plugin in ("upstream", "seed-pr", "recoverable"))

    def masked(cell) -> str:
        return f"{_share(cell.masked, cell)} ({_share(cell.counts['REFUSED'], cell)})"

    retried = f"{_share(seed_pr.masked, seed_pr)} ({_share(seed_pr.counts['RETRIED'], seed_pr)}; "
    retried += f"{_share(seed_pr.counts['REFUSED'], seed_pr)})"
    row = f"| {latency} | {masked(upstream)} | {retried} | {masked(recoverable)} |"
    assert _readme_row("the operator", latency) == row


def _check_the_headline_masked_column(cells) -> None:
    """The headline table's last column: the demo's second sweep, aggregation on and off."""
    for (plugin, aggregation), cell in cells.items():
        label = "recoverable (this project)" if plugin == "recoverable" else plugin
        row = _readme_row("plugin | aggregation | retried", f"{label} | {'on' if aggregation else 'off'}")
        shown = row.rsplit("|", 2)[1].strip().replace("**", "")
        assert shown == f"{_share(cell.masked, cell)} ({_share(cell.counts['REFUSED'], cell)} refused)", row
