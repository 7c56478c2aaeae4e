"""How simulations and sweeps look to people (rich) and programs (JSON)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from aggregation.explore import OUTCOMES, SweepResult, shown_outcomes
from aggregation.results import AttemptResult, Execution
from aggregation.timeline import What

_CONTROL = {code: f"\\x{code:02x}" for code in list(range(0x20)) + [0x7F]}


def literal(value: str, style: str = "") -> Text:
    """Text from a document, a path or a scenario, shown as written: no markup, control characters escaped."""
    return Text(str(value).translate(_CONTROL), style=style)


PHASE_STYLE = {
    "SUCCEEDED": "green",
    "RETRIED_THEN_SUCCEEDED": "green",
    "SUCCEEDED_SILENTLY": "bold red",
    "FAILED_PERMANENTLY": "red",
    "STILL_RUNNING": "yellow",
}


def timeline_line(at: float, pod: str, what: str) -> str:
    return f"{at:9.3f}  {pod:<16} {what}"


def timeline_lines(attempt: AttemptResult) -> list[str]:
    return [timeline_line(e.at, e.pod, e.describe()) for e in attempt.timeline]


def render_execution(execution: Execution, console: Console) -> None:
    spec = execution.scenario
    console.print(
        f"[bold]{spec.name}[/bold]  plugin [bold]{spec.plugin}[/bold], "
        f"error aggregation {'on (earliest)' if spec.error_aggregation else 'off (error.pb, last writer wins)'}, "
        f"retries {spec.retries}"
    )
    for attempt in execution.attempts:
        resumed = (
            f"resumes from attempt {attempt.resumed_from}'s checkpoint"
            if attempt.resumed_from is not None
            else "starts from scratch"
        )
        console.rule(f"attempt {attempt.attempt} ({resumed})")
        for line in timeline_lines(attempt):
            console.print(line, highlight=False, markup=False)
        read = attempt.read
        if read is not None and read.selected is not None:
            error = read.selected.error
            console.print(
                f"propeller: [bold]{read.selected.path}[/bold] wins ({read.rule}): {error.code}, "
                f"{'recoverable' if error.recoverable else 'not recoverable'}, worker {error.worker or '-'}"
            )
        elif read is not None:
            console.print(f"propeller: {read.rule}")
        else:
            console.print("propeller: job Failed, no error file is read (DownstreamSystemError, USER, retryable)")
        decision = attempt.decision
        console.print(
            f"task {attempt.outcome.phase.value} -> node [bold]{decision.decision.value}[/bold]"
            f"{' ' + decision.code if decision.code else ''}"
        )
    style = PHASE_STYLE[execution.final_phase.value]
    console.rule()
    console.print(
        f"final: [{style}]{execution.final_phase.value}[/{style}] after {len(execution.attempts)} attempt(s)"
        f"{' (' + execution.final_code + ')' if execution.final_code else ''}"
    )


KEY_EVENTS = (What.SIGTERM, What.UPLOAD, What.JOB_TERMINAL, What.OBSERVES, What.SIGKILL, What.WORKER_FAILED)


def _counterexample(assignment, execution: Execution) -> str:
    settings = ", ".join(f"{name}={value}" for name, value in assignment)
    first = execution.attempts[0]
    key_lines = [timeline_line(e.at, e.pod, e.describe()) for e in first.timeline if e.what in KEY_EVENTS]
    return settings + "\n" + "\n".join(key_lines)


def render_sweep(
    result: SweepResult,
    console: Console,
    counterexamples: bool = True,
    title: str = "Outcomes per plugin and error aggregation",
) -> None:
    how = "every combination" if result.exhaustive else "a seeded sample"
    console.print(f"{result.assignments} assignments ({how}) of: " + ", ".join(v.field for v in result.variations))
    table = Table(title=title, show_lines=True)
    table.add_column("plugin", no_wrap=True)
    table.add_column("aggre-\ngation", no_wrap=True)
    outcomes = shown_outcomes(result)
    for outcome in outcomes:
        table.add_column(outcome.replace("_", " ").lower(), justify="right")
    table.add_column("genuine error masked", justify="right")
    for cell in result.cells:
        table.add_row(
            cell.plugin,
            "on" if cell.aggregation else "off",
            *(f"{cell.counts[o]} ({cell.share(o):.0%})" for o in outcomes),
            f"{cell.masked} ({cell.masked / cell.total:.0%})" if cell.total else "0",
        )
    console.print(table)
    if not counterexamples:
        return
    for cell in result.cells:
        for outcome in OUTCOMES:
            if outcome in cell.counterexamples and outcome in ("FAILED_PERMANENTLY", "SUCCEEDED_SILENTLY"):
                assignment, execution = cell.counterexamples[outcome]
                console.print(
                    f"\n[bold]{cell.plugin}, aggregation {'on' if cell.aggregation else 'off'}: "
                    f"first case of {outcome}[/bold]"
                )
                console.print(_counterexample(assignment, execution), highlight=False, markup=False)


def sweep_to_json(result: SweepResult) -> dict[str, Any]:
    return {
        "assignments": result.assignments,
        "exhaustive": result.exhaustive,
        "variations": [{"field": v.field, "values": list(v.values)} for v in result.variations],
        "cells": [
            {
                "plugin": cell.plugin,
                "aggregation": cell.aggregation,
                "total": cell.total,
                "counts": {o: cell.counts[o] for o in OUTCOMES},
                "genuine_error_masked": cell.masked,
                "counterexamples": {
                    outcome: {
                        "assignment": {name: value for name, value in assignment},
                        "timeline": timeline_lines(execution.attempts[0]),
                        "final_phase": execution.final_phase.value,
                    }
                    for outcome, (assignment, execution) in cell.counterexamples.items()
                },
            }
            for cell in result.cells
        ],
    }


def render_record_timeline(record, console: Console, label: str) -> None:
    """Timelines of an `aggsim.v1.Execution` record (a real run's, or a simulated one's)."""
    for attempt in record.attempts:
        console.rule(
            f"{label}: attempt {attempt.attempt}"
            f"{' (resumes from ' + attempt.resumed_from_checkpoint + ')' if attempt.resumed_from_checkpoint else ''}"
        )
        for entry in attempt.timeline:
            console.print(timeline_line(entry.at_seconds, entry.pod, entry.what), highlight=False, markup=False)
        won = f", {attempt.winning_file} wins ({attempt.rule})" if attempt.winning_file else ""
        console.print(
            f"propeller: job {attempt.job_condition}{won} -> task {attempt.task_phase} -> node {attempt.decision}"
            f"{' ' + attempt.node_code if attempt.node_code else ''}"
        )
