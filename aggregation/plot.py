"""Pictures for design reviews: per-pod timelines of an execution, and a sweep's outcome heat map.

Both take what the rest of the package produces (an `aggsim.v1.Execution` record, simulated or real,
or a simulated `Execution`; a `SweepResult`) and return a matplotlib `Figure`, so notebooks, scripts,
tests and `aggsim simulate --plot` share one drawing code. matplotlib is imported here only.

Figures are built without pyplot: nothing is registered with a global figure manager, so a notebook
shows each figure exactly once (when it is displayed) and a long session never accumulates them.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Union

import matplotlib  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from aggregation.explore import (  # noqa: E402
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
from aggregation.printable import code_point_escape, printable  # noqa: E402
from aggregation.proto.aggsim.v1 import scenario_pb2 as pb  # noqa: E402
from aggregation.scenario import VARIANT_NAMES  # noqa: E402


def plain(text) -> str:
    """Text from a document, a path or a scenario as drawn literally: control characters escaped, a character the
    figure's font has no glyph for written as its escape (matplotlib would draw an empty box and warn on stderr),
    and `$` escaped so matplotlib never reads it as mathtext (an odd `$` would fail to render)."""
    return "".join(_drawn(text)).replace("$", r"\$")


def _drawn(text) -> list[str]:
    """What each character of `text` is drawn as (itself, or its escape), so a label is measured and cut as drawn
    and a cut never splits an escape."""
    shown = [printable(c) for c in str(text)]
    if all(c.isascii() for c in shown):
        return shown
    drawable = _drawable()
    return [c if len(c) > 1 or ord(c) in drawable else code_point_escape(ord(c)) for c in shown]


@lru_cache(maxsize=1)
def _drawable() -> frozenset:
    """The code points the font text is drawn in has glyphs for (matplotlib's default, DejaVu Sans, has no CJK)."""
    from matplotlib import font_manager

    font = font_manager.get_font(font_manager.findfont(font_manager.FontProperties()))
    return frozenset(font.get_charmap())


MARKERS = {
    "signal": dict(marker="v", color="crimson", s=90, label="SIGTERM"),
    "kill": dict(marker="X", color="black", s=90, label="SIGKILL"),
    "failure": dict(marker="x", color="darkorange", s=80, label="worker fails"),
    "upload": dict(marker="s", color="royalblue", s=60, label="error file uploaded"),
    "outputs": dict(marker="D", color="seagreen", s=60, label="outputs.pb uploaded"),
    "exit": dict(marker="|", color="dimgray", s=300, label="pod exits"),
}


def _record(execution) -> pb.Execution:
    if isinstance(execution, pb.Execution):
        return execution
    from aggregation.record import execution_to_proto

    return execution_to_proto(execution)


_MARKER_OF_KIND = {"sigterm": "signal", "sigkill": "kill", "worker_failed": "failure"}


def _kind(entry: pb.TimelineEntry) -> Union[str, None]:
    return _MARKER_OF_KIND.get(entry.kind)


def _reads_files(attempt: pb.AttemptRecord) -> bool:
    """Whether propeller's deciding round read the prefix: only a Succeeded job's is read (`propeller_actor.round`)."""
    return any(e.kind == "observes" and e.condition == "Succeeded" for e in attempt.timeline)


def _propeller_says(attempt: pb.AttemptRecord) -> Union[str, None]:
    """What propeller did at the moment it decided the attempt, as its timeline says; None if it never decided."""
    decided = [e for e in attempt.timeline if e.kind in ("observes", "workflow_aborted")]
    if not decided:
        return None
    last = decided[-1]
    if last.kind == "workflow_aborted":
        did = "aborts the workflow"
    elif last.condition == "Deleted":
        did = "finds no job"
    elif last.condition == "Succeeded":
        did = "reads the files"
    else:
        did = f"sees job {plain(last.condition)}, reads no file"
    return f" propeller {did} -> {attempt.decision}"


def _unread_label(attempts) -> Union[str, None]:
    """The legend's words for a faded file, true of every faded file in the figure (None when there is none)."""
    why = {_why_unread(a) for a in attempts for f in a.files if not f.seen_by_propeller}
    return None if not why else why.pop() if len(why) == 1 else "not read by propeller"


def _why_unread(attempt: pb.AttemptRecord) -> str:
    if _reads_files(attempt):
        return "uploaded after the read"
    if any(e.kind == "workflow_aborted" for e in attempt.timeline):
        return "not decided on: propeller's rounds failed"
    return "not read: propeller read no file"


#: a lane's label longer than this squeezes the panels (constrained layout gives the labels the width they ask)
LANE_LABEL_CHARACTERS = 24


def lane_labels(pods: list[str]) -> tuple[str, list[str]]:
    """(what the pods' names share, each lane's label): a job's pods are named alike (a Flyte execution's pods share
    a long generated prefix), so a shared prefix up to a `-` or `.` is said once, in the first panel's title, and a
    name still too long keeps its start and end. Labels stay distinct: where shortening would merge two, names stay
    whole."""
    names = [str(p) for p in pods]
    prefix = ""
    if len(names) > 1 and max(map(len, names)) > LANE_LABEL_CHARACTERS:
        shared = names[0][: min(map(len, names))]
        for name in names[1:]:
            while not name.startswith(shared):
                shared = shared[:-1]
        # the shared part's last word stays on each lane ("…worker-0", not "…0")
        words = [i for i, c in enumerate(shared) if c in "-."]
        prefix = shared[: words[-2] + 1] if len(words) > 1 else ""
    drawn = [_drawn(n[len(prefix) :]) for n in names]  # measured as drawn: an escape is six characters wide
    room = LANE_LABEL_CHARACTERS - (1 if prefix else 0)  # the leading "…" that stands for the prefix counts
    labels = ["".join(d) for d in drawn]
    short = [_cut(d, room) for d in drawn]
    if len(set(short)) == len(short):
        labels = short
    labels = [label.replace("$", r"\$") for label in labels]
    return plain(prefix), [("…" + label if prefix else label) for label in labels]


def _cut(drawn: list[str], room: int) -> str:
    """A label of at most `room` characters: its start and end around a "…", cut between drawn characters."""
    if sum(map(len, drawn)) <= room:
        return "".join(drawn)
    head, tail = room // 2 - 1, room - room // 2
    start, end = [], []
    for piece in drawn:
        if sum(map(len, start)) + len(piece) > head:
            break
        start.append(piece)
    for piece in reversed(drawn):
        if sum(map(len, end)) + len(piece) > tail:
            break
        end.insert(0, piece)
    return "".join(start) + "…" + "".join(end)


def _side_label(ax, x: float, y: float, text: str, color: str, rise: float = 0, fontsize: float = 8) -> None:
    """`text` beside the mark at (`x`, `y`), `rise` points above it: on its right, or on its left where the mark is
    in the panel's right third, so a label never runs out of its panel. Call it once the panel's data are drawn."""
    low, high = ax.get_xlim()
    right_side = x > low + (high - low) * 2 / 3
    ax.annotate(
        text,
        (x, y),
        textcoords="offset points",
        xytext=(-4 if right_side else 4, rise),
        ha="right" if right_side else "left",
        color=color,
        fontsize=fontsize,
    )


def timeline_figure(execution, title: str = "") -> Figure:
    """One panel per attempt, one lane per pod: signals, failures, uploads (the winner ringed in gold),
    exits, the job turning terminal and propeller's observing round."""
    record = _record(execution)
    attempts = list(record.attempts)
    pods = sorted(
        {p.pod for a in attempts for p in a.pods}
        | {e.pod for a in attempts for e in a.timeline if e.pod not in ("operator", "propeller", "job", "blob store")}
    )
    lane = {pod: i for i, pod in enumerate(pods)}
    prefix, lanes = lane_labels(pods)
    fig = Figure(figsize=(10, 1.1 + 1.0 * len(pods) * len(attempts) + 0.9), layout="constrained")
    axes = fig.subplots(len(attempts), 1, squeeze=False)
    for ax, attempt in zip(axes[:, 0], attempts):
        marks = []  # (x, y, text, colour, rise, font size)
        for entry in attempt.timeline:
            kind = _kind(entry)
            if kind and entry.pod in lane:
                ax.scatter(
                    entry.at_seconds,
                    lane[entry.pod],
                    zorder=3,
                    **{k: v for k, v in MARKERS[kind].items() if k != "label"},
                )
        for file in attempt.files:
            y = lane.get(file.pod, len(pods) - 1 if not file.pod else 0)
            style = MARKERS["outputs" if file.name == "outputs.pb" else "upload"]
            winner = file.name == attempt.winning_file and file.seen_by_propeller
            ax.scatter(
                file.uploaded_at,
                y,
                zorder=4,
                alpha=1.0 if file.seen_by_propeller else 0.35,
                edgecolors="gold" if winner else "none",
                linewidths=3 if winner else 0,
                **{k: v for k, v in style.items() if k != "label"},
            )
            if file.HasField("error") and file.error.HasField("timestamp") and record.source == "simulated":
                # simulated stamps are in scenario seconds: show where the file says it happened
                stamped = file.error.timestamp.seconds + file.error.timestamp.nanos / 1e9
                ax.plot(
                    [stamped, file.uploaded_at], [y - 0.18, y - 0.18], color="royalblue", linestyle=":", linewidth=1
                )
                marks.append((stamped, y - 0.18, f"stamped {stamped:.2f}", "royalblue", -11, 7))
        for pod in attempt.pods:
            if pod.pod in lane:
                ax.scatter(
                    pod.exited_at, lane[pod.pod], zorder=2, **{k: v for k, v in MARKERS["exit"].items() if k != "label"}
                )
                marks.append((pod.exited_at, lane[pod.pod], f"exit {pod.exit_code}", "dimgray", 8, 8))
        # the condition the operator set then (the attempt's own records what propeller found: "Deleted", say); a job
        # that never turned terminal has no such moment to draw
        terminal = next((e.condition for e in attempt.timeline if e.kind == "job_terminal"), None)
        if terminal is not None:
            ax.axvline(attempt.job_terminal_at, color="purple", linestyle="--", linewidth=1)
        says = _propeller_says(attempt)
        if says is not None:  # an attempt propeller never decided has no observing round to draw
            ax.axvline(attempt.observed_at, color="green", linewidth=1.5)
        if terminal is not None:
            marks.append((attempt.job_terminal_at, len(pods) - 0.35, f"job {plain(terminal)}", "purple", 0, 8))
        if says is not None:
            marks.append((attempt.observed_at, -0.65, says, "green", 0, 8))
        for mark in marks:  # once the panel's span is known: each goes to the side of its mark with room
            _side_label(ax, *mark)
        ax.set_yticks(range(len(pods)), lanes)
        ax.set_ylim(-0.9, len(pods) - 0.1)
        ax.set_title(
            f"attempt {attempt.attempt}"
            + (f" (resumes from {attempt.resumed_from_checkpoint})" if attempt.resumed_from_checkpoint else "")
            + (f"; pods {prefix}…" if prefix and ax is axes[0, 0] else ""),
            fontsize=10,
            loc="left",
        )
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since the attempt started")
    handles = [
        Line2D(
            [],
            [],
            linestyle="",
            **{
                ("markersize" if k == "s" else k): (v**0.5 if k == "s" else v) for k, v in style.items() if k != "label"
            },
            label=style["label"],
        )
        for style in MARKERS.values()
    ]
    handles.append(
        Line2D(
            [],
            [],
            linestyle="",
            marker="s",
            color="royalblue",
            markeredgecolor="gold",
            markeredgewidth=3,
            markersize=8,
            label="the error propeller reports",
        )
    )
    unread = _unread_label(attempts)
    if unread is not None:
        handles.append(Line2D([], [], linestyle="", marker="s", color="royalblue", alpha=0.35, label=unread))
    handles += [
        Line2D([], [], color="royalblue", linestyle=":", linewidth=1, label="back to the time the file claims"),
        Line2D([], [], color="purple", linestyle="--", linewidth=1, label="the job turns terminal"),
        Line2D([], [], color="green", linewidth=1.5, label="propeller's observing round"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    phase = pb.FinalPhase.Name(record.final_phase)
    fig.suptitle(
        plain(title)
        or f"{plain(record.scenario)}: plugin {VARIANT_NAMES[record.plugin]}, "
        f"aggregation {'on' if record.error_aggregation else 'off'} -> {phase}",
        fontsize=11,
    )
    return fig


COLOUR_MAPS = {GOOD: "Greens", BAD: "Reds", NEUTRAL: "Greys", REFUSAL: "YlOrBr"}


def outcome_heatmap(result: SweepResult, title: str = "Outcome share per plugin and error aggregation") -> Figure:
    """The sweep's table as a heat map: rows plugin x aggregation, columns outcomes (+ masked errors, + the points Go's
    map order decided, when there were any).

    Each column is coloured by what its outcome means for this scenario (`SweepResult.meaning`): green for
    the outcome a correct plugin produces, red for a bad one, grey for neither; the darker, the larger the share.
    """
    rows = [f"{c.plugin} / aggregation {'on' if c.aggregation else 'off'}" for c in result.cells]
    outcomes = shown_outcomes(result)
    columns = [outcome_label(o) for o in outcomes] + ["genuine error masked"]
    meanings = [result.meaning.get(o, NEUTRAL) for o in outcomes] + [BAD]
    values = [[c.share(o) for o in outcomes] + [c.masked / c.total if c.total else 0.0] for c in result.cells]
    if map_order_decides(result):
        columns.append(MAP_ORDER_LABEL)
        meanings.append(BAD)
        for row, cell in zip(values, result.cells):
            row.append(cell.map_order_decided / cell.total if cell.total else 0.0)
    colours = [
        [matplotlib.colormaps[COLOUR_MAPS[meaning]](0.08 + 0.8 * value) for value, meaning in zip(row, meanings)]
        for row in values
    ]
    fig = Figure(figsize=(9, 0.5 * len(rows) + 2.2), layout="constrained")
    ax = fig.subplots()
    ax.imshow(colours, aspect="auto")
    ax.set_xticks(range(len(columns)), columns, rotation=20, ha="right")
    for label, meaning in zip(ax.get_xticklabels(), meanings):
        label.set_color({GOOD: "darkgreen", BAD: "darkred", NEUTRAL: "dimgray", REFUSAL: "darkgoldenrod"}[meaning])
    ax.set_yticks(range(len(rows)), rows)
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            ax.text(
                j, i, f"{value:.0%}", ha="center", va="center", fontsize=9, color="white" if value > 0.6 else "black"
            )
    handles = [
        Patch(color=matplotlib.colormaps["Greens"](0.7), label="what a correct plugin produces here"),
        Patch(color=matplotlib.colormaps["Reds"](0.7), label="a bad outcome for this scenario"),
        Patch(color=matplotlib.colormaps["Greys"](0.5), label="neither"),
    ]
    if REFUSAL in meanings:
        handles.append(Patch(color=matplotlib.colormaps["YlOrBr"](0.5), label="a point the model refuses"))
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncol=len(handles),
        fontsize=8,
        frameon=False,
    )
    ax.set_title(f"{plain(title)}\n({result.assignments_text}; darker = larger share)", fontsize=10)
    return fig


def candidates_figure(explanation) -> Figure:
    """An explained prefix: every candidate's timestamp in listing order, the winner marked with a star.

    Stamps are drawn as points on a line from the earliest one, so the winner (often the earliest, at 0)
    is as visible as the rest.
    """
    candidates = [c for c in explanation.read.candidates if c.error is not None]
    fig = Figure(figsize=(9, 0.45 * max(len(candidates), 1) + 2.2), layout="constrained")
    ax = fig.subplots()
    if candidates:
        stamps = [c.sort_timestamp_ns / 1e9 for c in candidates]
        base = min(stamps)
        offsets = [s - base for s in stamps]
        labels = [plain(f"{c.path}  ({c.error.worker or '-'})") for c in candidates]
        for y, (candidate, offset) in enumerate(zip(candidates, offsets)):
            colour = "seagreen" if candidate.error.recoverable else "indianred"
            ax.hlines(y, 0, offset, color=colour, linewidth=2, alpha=0.6)
            ax.scatter(
                offset,
                y,
                marker="*" if candidate.selected else "o",
                s=260 if candidate.selected else 60,
                color=colour,
                edgecolors="goldenrod" if candidate.selected else "none",
                linewidths=2,
                zorder=3,
            )
            if candidate.selected:
                ax.annotate("propeller reports this", (offset, y), textcoords="offset points", xytext=(12, -3))
        ax.set_yticks(range(len(candidates)), labels, fontsize=8)
        ax.set_ylim(len(candidates) - 0.5, -0.5)  # listing order, top to bottom
        ax.set_xlim(-0.05 * (max(offsets) or 1), 1.3 * (max(offsets) or 1))
        ax.set_xlabel(
            "seconds after the earliest stamp "
            f"({'missing stamps count as the epoch' if base == 0 else 'first listed wins a tie'})"
        )
        fig.legend(
            handles=[
                Line2D([], [], marker="o", linestyle="", color="seagreen", label="recoverable"),
                Line2D([], [], marker="o", linestyle="", color="indianred", label="not recoverable"),
                Line2D(
                    [],
                    [],
                    marker="*",
                    linestyle="",
                    color="gray",
                    markeredgecolor="goldenrod",
                    markersize=14,
                    label="the error propeller reports",
                ),
            ],
            loc="outside lower center",
            ncol=3,
            fontsize=8,
            frameon=False,
        )
    ax.set_title(
        f"{explanation.read.strategy} strategy: {plain(explanation.read.rule)}\n"
        f"task {explanation.outcome.phase.value}, node {explanation.decision.decision.value}"
        f"{' ' + plain(explanation.decision.code) if explanation.decision.code else ''}",
        fontsize=10,
    )
    return fig


SHADES = {
    GOOD: ("#3a9d5d", "#8fd19e"),
    BAD: ("#c8433a", "#ec9a3c", "#8e44ad"),
    NEUTRAL: ("#9a9a9a", "#cfcfcf"),
    REFUSAL: ("#e6c229",),
}


def outcome_colours(meaning: dict) -> dict[str, str]:
    """One colour per outcome: greens for what a correct plugin produces here, reds for bad ones, yellow where the
    model refuses, greys else."""
    colours, used = {}, {GOOD: 0, BAD: 0, NEUTRAL: 0, REFUSAL: 0}
    for outcome in OUTCOMES:
        kind = meaning.get(outcome, NEUTRAL)
        shades = SHADES[kind]
        colours[outcome] = shades[min(used[kind], len(shades) - 1)]
        used[kind] += 1
    return colours


def _outcome_edges(region_map) -> list:
    """The polygon edges where the outcome changes: each probed just outside its midpoint."""
    x_span = float(region_map.x.high - region_map.x.low)
    y_span = float(region_map.y.high - region_map.y.low)
    edges = []
    for region in region_map.regions:
        for polygon in region.polygons:
            if len(polygon) < 3:
                continue
            for p, q in zip(polygon, polygon[1:] + polygon[:1]):
                mx, my = (p[0] + q[0]) / 2, (p[1] + q[1]) / 2
                dx, dy = q[0] - p[0], q[1] - p[1]
                # outward normal of a counter-clockwise edge, scaled to a millionth of the box
                nx, ny = float(dy) / x_span, -float(dx) / y_span
                size = (nx * nx + ny * ny) ** 0.5 or 1.0
                probe = (mx + Fraction(1e-6 * nx / size * x_span), my + Fraction(1e-6 * ny / size * y_span))
                other = region_map.outcome_at(probe)
                if other is not None and other != region.behaviour.outcome:
                    edges.append(((float(p[0]), float(p[1])), (float(q[0]), float(q[1]))))
    return edges


def region_figure(maps, meaning: dict, title: str = "") -> Figure:
    """Exact outcome regions of two varied fields, one panel per (label, RegionMap): each path's polygons
    filled with its outcome's colour, black where the outcome changes, white hairlines between paths."""
    from matplotlib.collections import LineCollection, PolyCollection

    from aggregation.proof_report import counted  # the regions come from the prover: it is loaded already

    colours = outcome_colours(meaning)
    columns = min(2, len(maps))
    rows = -(-len(maps) // columns)
    fig = Figure(figsize=(5.2 * columns, 3.6 * rows + 1.0), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    shown: dict = {}
    for ax, (label, region_map) in zip(axes.flat, maps):
        polygons, faces = [], []
        for region in region_map.regions:
            for polygon in region.polygons:
                if len(polygon) >= 3:
                    polygons.append([(float(px), float(py)) for px, py in polygon])
                    faces.append(colours[region.behaviour.outcome])
                    shown[region.behaviour.outcome] = True
        ax.add_collection(PolyCollection(polygons, facecolors=faces, edgecolors="white", linewidths=0.3))
        ax.add_collection(LineCollection(_outcome_edges(region_map), colors="black", linewidths=1.2))
        ax.set_xlim(float(region_map.x.low), float(region_map.x.high))
        ax.set_ylim(float(region_map.y.low), float(region_map.y.high))
        ax.set_xlabel(region_map.x.field, fontsize=8)
        ax.set_ylabel(region_map.y.field, fontsize=8)
        shares = ", ".join(
            f"{outcome_label(o)} {float(region_map.share(o)):.1%}" for o in region_map.outcomes() if region_map.share(o)
        )
        ax.set_title(f"{plain(label)}\n{counted(len(region_map.regions), 'path')}: {shares}", fontsize=9)
    for ax in list(axes.flat)[len(maps) :]:
        ax.set_visible(False)
    fig.legend(
        handles=[Patch(color=colours[o], label=outcome_label(o)) for o in OUTCOMES if o in shown],
        loc="outside lower center",
        ncol=len(shown),
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(
        plain(title or "Exact outcome regions (every path the prover found; black: the outcome changes)"), fontsize=10
    )
    return fig
