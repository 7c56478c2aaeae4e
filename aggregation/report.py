"""How simulations and sweeps look to people (rich) and programs (JSON)."""

from __future__ import annotations

import re
from typing import Any, Optional, Sequence, Union

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from aggregation.cells import pad_cells, wrap_cells
from aggregation.explore import (
    BAD,
    GOOD,
    MAP_ORDER_LABEL,
    NEUTRAL,
    OUTCOMES,
    REFUSAL,
    SweepResult,
    map_order_decides,
    outcome_label,
    shown_outcomes,
)
from aggregation.kinds import JobCondition
from aggregation.printable import printable
from aggregation.results import AttemptResult, Execution
from aggregation.timeline import What


def literal(value: str, style: str = "") -> Text:
    """Text from a document, a path or a scenario, shown as written: no markup, control characters escaped."""
    return Text(printable(value), style=style)


def print_paragraph(console: Console, text: str, indent: str) -> None:
    """Prose (a refusal's line) wrapped at whole words under one indent, shown as written (`literal`). A number
    keeps its unit on its line ("30.6 s", "1.5 / s"): lines break only at spaces, so the space
    between them is a private-use character while wrapping."""
    width = max(console.width, 40) - cell_len(indent)
    text = printable(text)  # measured as shown
    glue = _GLUE not in text  # a text that holds the glue itself is wrapped as it is
    glued = _NUMBER_AND_UNIT.sub(lambda m: m.group(0).replace(" ", _GLUE), text) if glue else text
    for line in wrap_cells(glued, width):
        console.print(literal(indent + (line.replace(_GLUE, " ") if glue else line)), highlight=False, soft_wrap=True)


_GLUE = "\ue000"  # a private-use character: no space to break at, and never in the model's own words
_NUMBER_AND_UNIT = re.compile(r"\d (?:/ )?(?:s|ms|ns)(?![\w])")


def rule(console: Console, title="") -> None:
    """A horizontal rule; ASCII dashes on a terminal that cannot show box-drawing characters."""
    ascii_only = not console.encoding.startswith("utf")
    shown = literal(title) if isinstance(title, str) and title else title  # a path in a title is not markup
    console.rule(shown, characters="-" if ascii_only else "\u2500")


def fits(console: Console, columns: Sequence[Sequence[Union[str, Text]]]) -> bool:
    """Whether a boxed table with these columns (header first) fits the console without breaking any line."""
    widths = [max(cell_len(printable(line)) for cell in column for line in str(cell).split("\n")) for column in columns]
    return sum(widths) + 3 * len(widths) + 1 <= console.width


def table(title, headers: Sequence[str], rows, justify: Sequence[str] = (), show_lines: bool = False) -> Table:
    """A boxed table whose cells never wrap (callers check `fits` first and print a list otherwise)."""
    built = Table(title=title, show_lines=show_lines)
    for index, header in enumerate(headers):
        built.add_column(header, no_wrap=True, justify=justify[index] if index < len(justify) else "left")
    for row in rows:
        built.add_row(*row)
    return built


PHASE_STYLE = {
    "SUCCEEDED": "green",
    "RETRIED_THEN_SUCCEEDED": "green",
    "SUCCEEDED_SILENTLY": "bold red",
    "FAILED_PERMANENTLY": "red",
    "STILL_RUNNING": "yellow",
}


def timeline_line(at: float, pod: str, what: str) -> str:
    """One timeline row; the pod name is escaped before it is padded (in cells), so columns line up."""
    return f"{at:9.3f}  {pad_cells(printable(pod), 16)} {printable(what)}"


def timeline_lines(attempt: AttemptResult) -> list[str]:
    return [timeline_line(e.at, e.pod, e.describe()) for e in attempt.timeline]


#: the time column's width (seconds with milliseconds) up to 99,999.999 s; a later time widens the column
TIME_WIDTH = 9
#: the narrowest description column worth keeping beside the pods' names
NARROWEST_COLUMN = 24


def print_timeline(console: Console, rows: Sequence[tuple[float, str, str]]) -> None:
    """(time, pod, what) rows; a long description wraps under its own column, and no word is ever cut.

    Where that column is too narrow for a row (long pod names, as Flyte's are, or a word such as a file's path wider
    than the column), the row's description starts on the next line, under the pod's name, at the terminal's width.
    A word wider than even that stays whole on its line; the terminal wraps it.
    """
    if not rows:
        return
    shown = [(at, printable(pod), printable(what)) for at, pod, what in rows]  # escaped, then measured (in cells)
    time_width = max(TIME_WIDTH, max(len(f"{at:.3f}") for at, _, _ in shown))
    pod_width = max(16, max(cell_len(pod) for _, pod, _ in shown))
    under_the_pod = " " * (time_width + 2)  # where a description goes when its own column is too narrow for it
    indent = " " * (time_width + 2 + pod_width + 1)
    room = console.width - len(indent)
    below = max(20, console.width - len(under_the_pod))
    for at, pod, text in shown:
        when = f"{at:{time_width}.3f}"
        if room >= NARROWEST_COLUMN and all(cell_len(word) <= room for word in text.split(" ")):
            lines = wrap_cells(text, room) or [""]
            console.print(Text(f"{when}  {pad_cells(pod, pod_width)} {lines[0]}"), highlight=False, soft_wrap=True)
            for line in lines[1:]:
                console.print(Text(indent + line), highlight=False, soft_wrap=True)
            continue
        console.print(Text(f"{when}  {pod}"), highlight=False, soft_wrap=True)
        for line in wrap_cells(text, below):
            console.print(Text(under_the_pod + line), highlight=False, soft_wrap=True)


def verdict_lines(attempt: AttemptResult) -> list[Text]:
    """What propeller made of an attempt: the file that won (or why none did), then the task and node decision."""
    read = attempt.read
    if read is not None and read.selected is not None:
        error = read.selected.error
        recoverable = "recoverable" if error.recoverable else "not recoverable"
        won = Text.assemble(
            "propeller: ",
            literal(read.selected.path, "bold"),
            literal(f" wins ({read.rule}): {error.code}, {recoverable}, worker {error.worker or '-'}"),
        )
    elif read is not None:
        won = literal(f"propeller: {read.rule}")
    elif attempt.outcome.phase.value == "ROUND_FAILED":
        won = literal(f"propeller: {attempt.failed_rounds} failed rounds, more than max-workflow-retries: aborted")
    elif attempt.job_condition == "Running":
        won = Text("propeller: the job never ends, nothing is read")
    elif attempt.job_condition == JobCondition.DELETED.value:
        error = attempt.outcome.error
        won = literal(f"propeller: no job found, no error file read ({error.code}, {error.kind}): {error.message}")
    elif attempt.outcome.phase.value == "RUNNING":  # the job ended, but its rounds fail for ever
        won = literal(f"propeller: {attempt.outcome.reason}")
    else:
        # GetPhaseInfo's details quote the operator's condition: "Job failed:\n\t<Reason> - <Message>"
        condition = attempt.outcome.error.message.split("\n\t", 1)[-1] if attempt.outcome.error else ""
        won = literal(
            f"propeller: job Failed, no error file is read (DownstreamSystemError, USER, retryable): {condition}"
        )
    decision = attempt.decision
    code = literal(" " + decision.code) if decision.code else ""
    return [won, Text.assemble(f"task {attempt.outcome.phase.value} -> node ", (decision.decision.value, "bold"), code)]


def final_line(execution: Execution) -> Text:
    phase = execution.final_phase.value
    code = literal(f" ({execution.final_code})") if execution.final_code else ""
    return Text.assemble("final: ", (phase, PHASE_STYLE[phase]), f" after {len(execution.attempts)} attempt(s)", code)


def render_execution(execution: Execution, console: Console) -> None:
    spec = execution.scenario
    aggregation = "on (earliest)" if spec.error_aggregation else "off (error.pb, last writer wins)"
    console.print(
        Text.assemble(
            literal(spec.name, "bold"),
            "  plugin ",
            (str(spec.plugin), "bold"),
            f", error aggregation {aggregation}, retries {spec.retries}",
        )
    )
    for attempt in execution.attempts:
        resumed = (
            f"resumes from attempt {attempt.resumed_from}'s checkpoint"
            if attempt.resumed_from is not None
            else "starts from scratch"
        )
        rule(console, f"attempt {attempt.attempt} ({resumed})")
        print_timeline(console, [(e.at, e.pod, e.describe()) for e in attempt.timeline])
        for line in verdict_lines(attempt):
            console.print(line, highlight=False)
    rule(console)
    console.print(final_line(execution), highlight=False)


KEY_EVENTS = (What.SIGTERM, What.UPLOAD, What.JOB_TERMINAL, What.OBSERVES, What.SIGKILL, What.WORKER_FAILED)


def print_counterexample(console: Console, assignment, execution: Execution) -> None:
    """The assignment, each attempt's key events, and what propeller read and decided: the case in full."""
    console.print(literal(", ".join(f"{name}={value}" for name, value in assignment)), highlight=False)
    for attempt in execution.attempts:
        if len(execution.attempts) > 1:
            console.print(f"attempt {attempt.attempt}:")
        print_timeline(console, [(e.at, e.pod, e.describe()) for e in attempt.timeline if e.what in KEY_EVENTS])
        for line in verdict_lines(attempt):
            console.print(line, highlight=False)
    console.print(final_line(execution), highlight=False)


#: how the terminal shows a count or share by what its outcome means for the scenario (`explore.outcome_meanings`)
MEANING_STYLE = {GOOD: "green", BAD: "bold red", NEUTRAL: "", REFUSAL: "yellow", None: ""}


def _counts(cell, outcomes, map_order: bool) -> list[tuple[str, int]]:
    """(outcome, count) per shown outcome, then ("MASKED", genuine errors masked), then, when Go's map order decided
    a point of the sweep, ("MAP_ORDER", how many)."""
    extra = [("MAP_ORDER", cell.map_order_decided)] if map_order else []
    return [(o, cell.counts[o]) for o in outcomes] + [("MASKED", cell.masked)] + extra


def _share(count: int, total: int, meaning) -> Text:
    """ "12 (34%)", green when a good outcome happened, red when a bad one did."""
    return Text(f"{count} ({count / total if total else 0.0:.0%})", style=MEANING_STYLE[meaning] if count else "")


def render_sweep(
    result: SweepResult,
    console: Console,
    counterexamples: bool = True,
    title: str = "Outcomes per plugin and error aggregation",
) -> None:
    """A table when it fits the console unbroken; else one block per plugin x aggregation cell."""
    how = "every combination" if result.exhaustive else "a seeded sample"
    console.print(literal(f"{result.assignments_text} ({how}) of: " + ", ".join(v.field for v in result.variations)))
    outcomes = shown_outcomes(result)
    map_order = map_order_decides(result)
    headers = ["plugin", "aggre-\ngation", *(outcome_label(o) for o in outcomes), "genuine error masked"]
    headers += [MAP_ORDER_LABEL] if map_order else []
    meaning = {**result.meaning, "MASKED": BAD, "MAP_ORDER": BAD}
    rows = [
        [
            cell.plugin,
            "on" if cell.aggregation else "off",
            *(_share(count, cell.total, meaning.get(o)) for o, count in _counts(cell, outcomes, map_order)),
        ]
        for cell in result.cells
    ]
    columns = [[h, *(row[i] for row in rows)] for i, h in enumerate(headers)]
    if fits(console, columns):
        justify = ["left", "left"] + ["right"] * (len(headers) - 2)
        console.print(table(literal(title), headers, rows, justify, show_lines=True))
    else:  # narrow terminal or a pipe: one block per cell, nothing cut
        console.print(literal(title, "bold"))
        label_width = max(len(h) for h in headers[2:])
        count_width = len(str(result.assignments))
        for cell in result.cells:
            console.print(f"{cell.plugin}, aggregation {'on' if cell.aggregation else 'off'}:")
            for header, (outcome, count) in zip(headers[2:], _counts(cell, outcomes, map_order)):
                share = count / cell.total if cell.total else 0.0
                console.print(
                    Text.assemble(
                        f"  {header:<{label_width}}  ",
                        (
                            f"{count:>{count_width}} ({share:>4.0%})",
                            MEANING_STYLE[meaning.get(outcome)] if count else "",
                        ),
                    ),
                    highlight=False,
                )
    if not counterexamples:
        return
    for cell in result.cells:
        label = f"{cell.plugin}, aggregation {'on' if cell.aggregation else 'off'}"
        for outcome in OUTCOMES:
            if outcome in cell.counterexamples and outcome in ("FAILED_PERMANENTLY", "SUCCEEDED_SILENTLY"):
                assignment, execution = cell.counterexamples[outcome]
                console.print(f"\n[bold]{label}: first case of {outcome_label(outcome)}[/bold]")
                print_counterexample(console, assignment, execution)
        if cell.refusal_example is not None:
            assignment, why = cell.refusal_example
            console.print(f"\n[bold]{label}: first point the model refuses[/bold]")
            console.print(literal(", ".join(f"{name}={value}" for name, value in assignment)), highlight=False)
            print_paragraph(console, why, "  ")
        if cell.map_order_example is not None:
            assignment, orders = cell.map_order_example
            console.print(f"\n[bold]{label}: first point Go's map order decides[/bold]")
            console.print(literal(", ".join(f"{name}={value}" for name, value in assignment)), highlight=False)
            for pins, outcome in orders:
                console.print(literal(f"  {' '.join(f'{n}={v}' for n, v in pins)}: {outcome_label(outcome)}"))
            console.print(
                literal("  (counted under the worst; pin the field in the scenario to replay one)"),
                highlight=False,
            )


def _attempt_verdict(attempt: AttemptResult) -> dict[str, Any]:
    read = attempt.read
    return {
        "attempt": attempt.attempt,
        "job_condition": attempt.job_condition,
        "winning_file": read.selected.path if read is not None and read.selected is not None else None,
        "rule": read.rule if read is not None else None,
        "task_phase": attempt.outcome.phase.value,
        "decision": attempt.decision.decision.value,
        "node_code": attempt.decision.code,
    }


def _variation_to_json(variation) -> dict[str, Any]:
    """A list of values, or a range as start, step and count (a range may hold a million values)."""
    values = variation.values
    if hasattr(values, "step"):
        return {"field": variation.field, "start": values.start, "step": values.step, "count": len(values)}
    return {"field": variation.field, "values": list(values)}


def _map_order_example_to_json(example) -> Optional[dict[str, Any]]:
    """The first point Go's map order decides: its assignment and each order's outcome (None when there is none)."""
    if example is None:
        return None
    assignment, orders = example
    return {
        "assignment": dict(assignment),
        "orders": [{"pins": dict(pins), "outcome": outcome} for pins, outcome in orders],
    }


def _refusal_example_to_json(example) -> Optional[dict[str, Any]]:
    """The first point the model refuses: its assignment and the refusal's line (None when there is none)."""
    if example is None:
        return None
    assignment, why = example
    return {"assignment": dict(assignment), "reason": why}


def sweep_to_json(result: SweepResult) -> dict[str, Any]:
    return {
        "assignments": result.assignments,
        "exhaustive": result.exhaustive,
        "outcome_meaning": dict(result.meaning),
        "variations": [_variation_to_json(v) for v in result.variations],
        "cells": [
            {
                "plugin": cell.plugin,
                "aggregation": cell.aggregation,
                "total": cell.total,
                "counts": {o: cell.counts[o] for o in OUTCOMES},
                "decided_by_map_order": cell.map_order_decided,
                "genuine_error_masked": cell.masked,
                "counterexamples": {
                    outcome: {
                        "assignment": {name: value for name, value in assignment},
                        "timeline": timeline_lines(execution.attempts[0]),
                        "attempts": [_attempt_verdict(a) for a in execution.attempts],
                        "final_phase": execution.final_phase.value,
                        "final_code": execution.final_code,
                    }
                    for outcome, (assignment, execution) in cell.counterexamples.items()
                },
                "map_order_example": _map_order_example_to_json(cell.map_order_example),
                "refusal_example": _refusal_example_to_json(cell.refusal_example),
            }
            for cell in result.cells
        ],
    }


def render_record_timeline(record, console: Console, label: str) -> None:
    """Timelines of an `aggsim.v1.Execution` record (a real run's, or a simulated one's)."""
    for attempt in record.attempts:
        rule(
            console,
            f"{label}: attempt {attempt.attempt}"
            f"{' (resumes from ' + attempt.resumed_from_checkpoint + ')' if attempt.resumed_from_checkpoint else ''}",
        )
        print_timeline(console, [(entry.at_seconds, entry.pod, entry.what) for entry in attempt.timeline])
        won = f", {attempt.winning_file} wins ({attempt.rule})" if attempt.winning_file else ""
        console.print(
            f"propeller: job {attempt.job_condition}{won} -> task {attempt.task_phase} -> node {attempt.decision}"
            f"{' ' + attempt.node_code if attempt.node_code else ''}"
        )


class ProgressBar:
    """A progress bar on stderr for long sweeps: only on a terminal, and only once a second has passed."""

    def __init__(self, description: str, enabled: bool, delay: float = 1.0, console: Optional[Console] = None):
        import time

        self._clock = time.monotonic
        self._started = self._clock()
        self._delay = delay
        self._description = description
        self._enabled = enabled
        self._console = console  # the CLI's (it reads COLUMNS=0 as unset); a stderr console of rich's own by default
        self._progress = None
        self._task = None

    def __call__(self, done: int, total: int) -> None:
        if not self._enabled:
            return
        if self._progress is None:
            if self._clock() - self._started < self._delay or done >= total:
                return
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=self._console or Console(stderr=True),
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task(self._description, total=total)
        self._progress.update(self._task, completed=done)

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()


def render_comparison(diff: Sequence[tuple[str, Any, Any]], console: Console) -> None:
    """Real vs simulated verdict, field by field: a table when it fits unbroken, else one line per field."""
    title = "real vs simulated verdict"
    marks = [Text("=", style="green") if a == b else Text("differs", style="bold red") for _, a, b in diff]
    rows = [(literal(field), literal(str(a)), literal(str(b)), mark) for (field, a, b), mark in zip(diff, marks)]
    headers = ("field", "simulated", "real", "")
    if fits(console, [[h, *(row[i] for row in rows)] for i, h in enumerate(headers)]):
        console.print(table(title, headers, rows))
        return
    console.print(Text(title, style="bold"))
    for field, simulated, real, mark in rows:
        console.print(Text.assemble(field, ": ", mark))
        console.print(Text.assemble("    simulated: ", simulated))
        console.print(Text.assemble("    real:      ", real))


def render_phases(phases, console: Console, title: str) -> None:
    """Measured phases (`localjob.calibrate.Phase`) next to the model's timing: a table, or a list if narrow."""
    headers = ("phase", "model", "ms", "min", "median", "p90", "max")
    rows = [
        (
            literal(p.name),
            p.model_timing,
            f"{p.model_seconds * 1000:.1f}",
            *(f"{p.quantile(q) * 1000:.1f}" for q in (0, 0.5, 0.9, 1)),
        )
        for p in phases
    ]
    if fits(console, [[h, *(row[i] for row in rows)] for i, h in enumerate(headers)]):
        console.print(table(title + " (milliseconds)", headers, rows, justify=("left", "left") + ("right",) * 5))
    else:
        console.print(Text(title + " (milliseconds)", style="bold"))
        for row in rows:
            console.print(Text.assemble(row[0], ": ", ", ".join(f"{h} {v}" for h, v in zip(headers[1:], row[1:]))))
    if any(p.model_timing == "upload_seconds" for p in phases):
        console.print(
            "look -> landed is the plugin's check-then-write window: a sibling's report landing inside it is "
            "overwritten when aggregation is off."
        )
