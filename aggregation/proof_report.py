"""How `aggsim prove` shows its answer: on a terminal (rich) and as one JSON object."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from rich.cells import cell_len

from aggregation.cells import wrap_cells
from aggregation.printable import printable
from aggregation.prove import (
    COUNTEREXAMPLE,
    PROVED,
    PathResult,
    Proof,
    inside_first,
    number_text,
    parse_claim,
    parse_range,
    played_behaviours,
    point_text,
    prove,
    replayable,
    value_text,
)
from aggregation.scenario import read_scenario

if TYPE_CHECKING:
    from rich.console import Console


def counted(count: int, thing: str) -> str:
    """`1 path`, `2 paths`: a count with its noun."""
    return f"{count:,} {thing}" + ("" if count == 1 else "s")


def _every_path(count: int) -> str:
    return f"all {count:,} paths" if count > 1 else "its only path"


#: counterexample paths whose conditions are listed (the JSON carries them all)
SHOWN_CONDITIONS = 3


def _box_lines(proof: Proof) -> list[str]:
    lines = [f"{i.field} in [{number_text(i.low)}, {number_text(i.high)}]" for i in proof.intervals]
    lines += [f"{c.field} in {{{', '.join(value_text(v) for v in c.values)}}}" for c in proof.choices]
    return lines or ["nothing varied: the scenario as written"]


def _header_lines(proof: Proof, width: int) -> list[str]:
    """The verdict and the claim's meaning, wrapped at whole words under a two-space indent (rich would cut the
    line anywhere and leave a trailing space)."""
    header = printable(f"{proof.verdict}  {proof.claim.text}: {proof.claim.meaning}")  # the claim is the user's text
    return wrap_cells(header, max(width, 40), subsequent_indent="    ")


#: `> 33.5`, `+ n`, `-> FAIL`: an operator and its operand, kept on one line
_OPERATOR_AND_OPERAND = re.compile(r" (<=|>=|!=|->|<|>|=|\+|-) (?=\S)(\S+)")


def print_wrapped(console: "Console", text: str, indent: str = "", joint: str = " ", style: str = "") -> None:
    """One line of the answer, broken where it joins its parts (a condition's ` and `, a witness's `, `) and only
    then at words, each continuation under a deeper indent: rich would cut it anywhere."""
    text = printable(text)  # measured as shown: a pod's name or a path may hold anything
    width, deeper = max(console.width, 40), indent + "    "
    carried, kept = ("", joint.strip()) if joint == ", " else (joint.strip() + " ", "")
    parts = text.split(joint) if joint != " " else [text]
    lines = [indent + parts[0]]
    for part in parts[1:]:
        if cell_len(lines[-1]) + len(joint) + cell_len(part) <= width:
            lines[-1] += joint + part
        else:
            lines[-1] += kept
            lines.append(deeper + carried + part)
    for line in lines:  # a part longer than the line: at words, never between an operator and what it applies to
        bound = _OPERATOR_AND_OPERAND.sub(lambda m: f" {m[1]}\xa0{m[2]}", line)
        pieces = wrap_cells(bound, width, subsequent_indent=deeper)
        for piece in pieces or [line]:
            console.print(piece.replace("\xa0", " "), highlight=False, soft_wrap=True, markup=False, style=style)


def render_proof(proof: Proof, console: "Console") -> None:
    from rich.text import Text

    from aggregation.report import render_execution

    style = {PROVED: "bold green", COUNTEREXAMPLE: "bold red"}.get(proof.verdict, "bold yellow")
    for line in _header_lines(proof, console.width):
        if line.startswith(proof.verdict):
            console.print(Text.assemble((proof.verdict, style), line[len(proof.verdict) :]), soft_wrap=True)
        else:
            console.print(Text(line), highlight=False, soft_wrap=True)
    for line in _box_lines(proof):
        print_wrapped(console, line, "  ")
    counts = path_count_line(len(proof.paths), len(proof.refusals), proof.behaviours, proof.seconds)
    print_wrapped(console, counts, joint=", ")
    if proof.reason:
        print_wrapped(console, f"not every path was explored: {proof.reason}")
    if proof.codes_never_reached:
        reached = ", ".join(map(printable, sorted(proof.codes_reached - {""}))) or "no code"
        never = printable("|".join(proof.codes_never_reached))
        print_wrapped(
            console, f"note: no path ends with a code {never} names (they end with {reached}): check its spelling"
        )
    if proof.verdict == PROVED:
        return
    if proof.verdict != COUNTEREXAMPLE:
        if proof.refusals:
            _print_refusals(proof, console)
        if proof.refusals and not proof.reason:
            left = len(proof.paths) - len(proof.refusals)
            if left:
                console.print(f"\nThe claim holds on the other {counted(left, 'path')}.", highlight=False)
            open_where = "UNKNOWN is no proof: the claim may or may not hold where the model refuses."
            console.print(open_where, highlight=False)
        else:
            console.print("UNKNOWN is no proof: the claim may or may not hold for the paths left", highlight=False)
        return
    broken = len(proof.counterexamples)
    if proof.fails_everywhere:
        console.print(f"\nThe claim fails on {_every_path(broken)}: everywhere in the box.", highlight=False)
    else:
        _print_conditions(proof, console)
    if proof.refusals:
        _print_refusals(proof, console)
    first = next((p for p in proof.counterexamples if replayable(p)), proof.counterexamples[0])
    console.print()
    print_wrapped(console, f"A witness: {point_text({**dict(first.choices), **first.witness})}", joint=", ")
    print_wrapped(console, first.behaviour.describe(), "  ")
    if not replayable(first):
        print_wrapped(
            console,
            "(an exact point between two nanoseconds, the model's clock tick: `aggsim simulate` cannot be given it)",
        )
        return
    console.print("Its timeline (the plain simulator at that point):", highlight=False)
    render_execution(proof.replay(first), console)


def _print_conditions(proof: Proof, console: "Console") -> None:
    broken = len(proof.counterexamples)
    share = f"{broken:,} of the {len(proof.paths):,} paths"
    console.print(f"\nThe claim fails on {share}. It fails where:", highlight=False)
    for index, condition in enumerate(proof.conditions[:SHOWN_CONDITIONS]):
        console.print(f"  path {index + 1}:", highlight=False)
        for line in condition:
            print_wrapped(console, line, "    ", joint=" and ")
    if broken > SHOWN_CONDITIONS:
        more = counted(broken - SHOWN_CONDITIONS, "more path")
        console.print(f"  (and {more}; --json lists them)", highlight=False)


def _print_refusals(proof: Proof, console: "Console") -> None:
    """Where the model refuses to play: each refused path's condition, its witness and the refusal's line there."""
    from aggregation.report import print_paragraph

    refused = len(proof.refusals)
    everywhere = refused == len(proof.paths) and not proof.reason  # the paths tile the box: no condition narrows it
    if everywhere:
        console.print("\nThe model refuses everywhere in the box:", highlight=False)
        indent, shown = "  ", proof.refusals[:1]
    else:
        console.print(f"\nThe model refuses on {refused:,} of the {len(proof.paths):,} paths, where:", highlight=False)
        indent, shown = "    ", proof.refusals[:SHOWN_CONDITIONS]
    for index, (path, condition) in enumerate(zip(shown, proof.refusal_conditions)):
        if not everywhere:
            console.print(f"  path {index + 1}:", highlight=False)
            for line in condition:
                print_wrapped(console, line, indent, joint=" and ")
        print_wrapped(console, f"e.g. at {point_text({**dict(path.choices), **path.witness})}:", indent, joint=", ")
        print_paragraph(console, path.refused, indent + "  ")
    if not everywhere and refused > SHOWN_CONDITIONS:
        console.print(f"  (and {counted(refused - SHOWN_CONDITIONS, 'more path')}; --json lists them)", highlight=False)


def _path_to_json(path: PathResult) -> dict:
    return {
        "witness": {name: float(v) for name, v in path.witness.items()},
        "witness_exact": {name: str(v) for name, v in path.witness.items()},
        # whether `witness` is the point itself (whole nanoseconds): else only `witness_exact` takes the path
        "replayable": replayable(path),
        "choices": dict(path.choices),
        "behaviour": path.behaviour.describe(),
        "final_phase": path.behaviour.final_phase,
    }


def path_count_line(paths: int, refused: int, behaviours: int, seconds: float, explored: str = " explored") -> str:
    """`42 paths explored (2 refused by the model), 2 distinct behaviours, 0.2 s`: refused paths counted apart."""
    aside = f" ({refused} refused by the model)" if refused else ""
    return f"{counted(paths, 'path')}{explored}{aside}, {counted(behaviours, 'distinct behaviour')}, {seconds:.1f} s"


def proof_to_json(proof: Proof) -> dict:
    return {
        "verdict": proof.verdict,
        "claim": proof.claim.text,
        "meaning": proof.claim.meaning,
        "intervals": [{"field": i.field, "low": float(i.low), "high": float(i.high)} for i in proof.intervals],
        "choices": [{"field": c.field, "values": list(c.values)} for c in proof.choices],
        "paths": len(proof.paths),
        "behaviours": proof.behaviours,
        "refused_paths": len(proof.refusals),
        "seconds": round(proof.seconds, 3),
        "reason": proof.reason or None,
        "fails_everywhere": proof.fails_everywhere,
        "codes_never_reached": list(proof.codes_never_reached),
        "counterexamples": [
            {
                **_path_to_json(p),
                # readable (ranges of the fields) for the first few paths; exact (as recorded) for every one
                "condition": list(proof.conditions[index]) if index < len(proof.conditions) else None,
                "exact_condition": list(proof.exact_conditions[index]),
            }
            for index, p in enumerate(proof.counterexamples)
        ],
        # the paths the model refuses to play: the claim is open there (a refused path is no counterexample)
        "refusals": [
            {
                **_path_to_json(p),
                "reason": p.refused,
                "condition": list(proof.refusal_conditions[index]) if index < len(proof.refusal_conditions) else None,
                "exact_condition": list(proof.refusal_exact_conditions[index]),
            }
            for index, p in enumerate(proof.refusals)
        ],
        "behaviour_list": sorted({b.describe() for b in played_behaviours(p.behaviour for p in proof.paths)}),
    }


# --- the README's table: each plugin x aggregation flag on the shipped incidents --------------------------------
#: (scenario, claim, varied fields): the demo's sweep ranges, the signal's (or error's) arrival widened to a
#: whole second, the second pod's clock offset by up to +-0.25 s; the worker group's shutdown up to 5 s (the
#: demo's 30 s, past the grace period, turns the question into the SIGKILL's and takes thousands of paths more)
TABLE_CASES = (
    (
        "preemption_during_training",
        "retries",
        (
            "attempts[0].events[1].at_seconds=30..31",
            "attempts[0].events[1].pod=train-worker-0,train-worker-1",
            "timings.agent_shutdown_seconds=0.03..5",
            "timings.upload_seconds=0.05..3",
            "timings.failure_detection_seconds=1.2..2.1",
            "propeller.observation_delay_seconds=0..10",
            "pod_timings[0].timings.clock_offset_seconds=-0.25..0.25",
        ),
    ),
    (
        "sibling_user_error_cleanup",
        "genuine-error-wins",
        (
            "attempts[0].events[0].at_seconds=20..21",
            "timings.agent_shutdown_seconds=0.03..5",
            "timings.upload_seconds=0.05..3",
            "timings.failure_detection_seconds=1.2..2.1",
            "propeller.observation_delay_seconds=0..10",
            "pod_timings[0].timings.clock_offset_seconds=-0.25..0.25",
        ),
    ),
)
TABLE_PLUGINS = ("upstream", "seed-pr", "recoverable")
#: a condition longer than this (the agent's monitor-poll arithmetic makes long ones) is left to `--json`
TABLE_CONDITION_CHARS = 400


@dataclass(frozen=True)
class TableRow:
    """One line of the README's table: a table case proved for one plugin and aggregation flag."""

    scenario: str
    claim: str
    plugin: str
    aggregation: bool
    verdict: str
    answer: str  # the table's answer cell (`_table_answer`)


def table_rows(processes: int = 1) -> tuple[TableRow, ...]:
    """Each case x plugin x aggregation flag, proved (in `processes` worker processes when more than one)."""
    cells = [
        (scenario, claim, varies, plugin, aggregation)
        for scenario, claim, varies in TABLE_CASES
        for plugin in TABLE_PLUGINS
        for aggregation in (True, False)
    ]
    if processes > 1:
        from aggregation.parallel import ordered_map

        return tuple(row for _, row in ordered_map(_table_row, cells, processes))
    return tuple(_table_row(cell) for cell in cells)


def _table_row(cell) -> TableRow:
    scenario, claim, varies, plugin, aggregation = cell
    source = read_scenario(scenario)
    ranges = [parse_range(v, source.message) for v in varies]
    proof = prove(source, parse_claim(claim, source.message), ranges, plugin, aggregation)
    return TableRow(scenario, claim, plugin, aggregation, proof.verdict, _table_answer(proof))


def _table_answer(proof: Proof) -> str:
    refused = f"; the model refuses on {len(proof.refusals):,} of them" if proof.refusals else ""
    if proof.verdict != COUNTEREXAMPLE:
        return f"**{proof.verdict}** ({counted(len(proof.paths), 'path')}{refused})"
    outcomes = sorted({p.behaviour.final_phase for p in proof.counterexamples})
    pairs = list(zip(proof.conditions, proof.counterexamples))
    # prove's order (regions with an inside first), the shortest condition among equals
    pairs.sort(key=lambda pair: (inside_first(pair[1], proof.intervals), len(str(pair[0]))))
    condition, path = pairs[0]
    where = condition[0]  # the piece that holds the witness: one convex region where the claim fails
    where = f" where {where}," if len(where) <= TABLE_CONDITION_CHARS else ""
    share = f"on {len(proof.counterexamples):,} of {len(proof.paths):,} paths{refused}"
    if proof.fails_everywhere:
        share, where = f"everywhere in the box ({_every_path(len(proof.paths))})", ""
    at = ", ".join(filter(None, [*(f"{n}={v}" for n, v in path.choices), point_text(path.witness)]))
    return f"**COUNTEREXAMPLE**: {' or '.join(outcomes)} {share}, e.g.{where} at {at}"


def table_markdown(rows: Sequence[TableRow]) -> str:
    lines = ["| scenario | claim | plugin | aggregation | answer |", "|---|---|---|---|---|"]
    for row in rows:
        flag = "on" if row.aggregation else "off"
        lines.append(f"| {row.scenario} | {row.claim} | {row.plugin} | {flag} | {row.answer} |")
    return "\n".join(lines) + "\n"


TABLE_BEGIN, TABLE_END = "<!-- prove:begin -->\n", "<!-- prove:end -->"


def readme_with_table(readme: str, table: str) -> str:
    """`readme` with the text between its prove markers replaced by `table`."""
    start = readme.index(TABLE_BEGIN) + len(TABLE_BEGIN)
    return readme[:start] + table + readme[readme.index(TABLE_END, start) :]


if __name__ == "__main__":  # `make proofs`: prove every table case again and write the table into the README
    import sys

    from aggregation.cores import usable_cores

    path = sys.argv[1]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(readme_with_table(text, table_markdown(table_rows(usable_cores()))))
