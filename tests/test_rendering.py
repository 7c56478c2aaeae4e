"""Output for people: in an 80-column terminal and in a pipe (CI logs), nothing that says which file won,
which pod did what or which code propeller reports is ever cut; text from scenarios is shown as written."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import pytest
from conftest import AGGSIM, SCENARIOS, T0, interrupt_when
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from aggregation.documents import error_document_bytes
from aggregation.explain import explain_prefix

#: as long as Flyte's pod names (an execution id, the node, the attempt, the replica): 42 characters
LONG_PODS = ("train-worker-with-a-rather-long-pod-name-0", "train-worker-with-a-rather-long-pod-name-1")


def long_names_scenario(tmp_path):
    text = (SCENARIOS / "sibling_user_error_cleanup.textproto").read_text()
    for short, long in zip(("train-worker-0", "train-worker-1"), LONG_PODS):
        text = text.replace(f'"{short}"', f'"{long}"')
    text = text.replace('name: "sibling_user_error_cleanup"', 'name: "cleanup [red]with[/red] long names"')
    path = tmp_path / "long_names.textproto"
    path.write_text(text)
    return path


def columns_env(columns: int) -> dict:
    return {**os.environ, "COLUMNS": str(columns)}


def aggsim(*args, columns: int):
    result = subprocess.run([AGGSIM, *args], capture_output=True, text=True, env=columns_env(columns), timeout=120)
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


def names_in_record(record: dict) -> set[str]:
    names = set()
    for attempt in record["attempts"]:
        files = attempt.get("files", [])
        names |= {f["name"] for f in files} | {f["error"]["code"] for f in files if f.get("error")}
        names |= {e["pod"] for e in attempt["timeline"]}
        names |= {attempt[k] for k in ("winning_file", "node_code") if attempt.get(k)}
    return names


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize(
    "scenario",
    [
        "preemption_during_training",
        "sibling_user_error_cleanup_no_aggregation",
        "rounds_keep_failing",  # a round error quotes a file's whole path: wider than the description column
        "truncated_error_pb_replaced",
    ],
)
def test_simulate_shows_every_file_pod_and_code_in_full(scenario, columns):
    record = json.loads(aggsim("simulate", scenario, "--json", columns=columns))
    text = aggsim("simulate", scenario, columns=columns)
    expected = names_in_record(record)
    assert any(name.endswith(".pb") for name in expected) and "train-worker-0" in expected
    for name in expected:
        assert name in text, (columns, name)
    assert "…" not in text and all(len(line) <= columns for line in text.splitlines() if " " in line.strip())
    # rich wraps at a space and leaves it at the line's end: `aggsim` writes each line without it
    assert [line for line in text.splitlines() if line != line.rstrip()] == []


@pytest.mark.parametrize("columns", [80, 200])
def test_long_pod_names_and_a_scenario_name_with_markup_are_shown_as_written(tmp_path, columns):
    path = long_names_scenario(tmp_path)
    text = aggsim("simulate", str(path), columns=columns)
    assert "cleanup [red]with[/red] long names" in text
    for pod in LONG_PODS:
        assert pod in text
    assert "USER:RuntimeError" in text and "…" not in text
    # a description column too narrow for a row puts its description under the pod's name: nothing overflows
    assert max(len(line) for line in text.splitlines()) <= columns


@pytest.mark.parametrize("columns", [80, 200])
def test_times_past_a_million_seconds_widen_the_time_column_instead_of_overflowing(tmp_path, columns):
    """`report.print_timeline`: the time column was 9 characters wide, so a time of 1,500,000.600 s pushed its row
    two characters past the terminal's edge and out of line with the others."""
    text = (SCENARIOS / "preemption_during_training.textproto").read_text()
    text = text.replace("training_seconds: 120", "training_seconds: 2000000").replace(
        "at_seconds: 30.6", "at_seconds: 1500000.6"
    )
    path = tmp_path / "long.textproto"
    path.write_text(text)
    shown = aggsim("simulate", str(path), columns=columns)
    rows = [line for line in shown.splitlines() if re.match(r" *\d+\.\d{3}  \S", line)]
    assert any(row.startswith("1500000.600  train-worker-1") for row in rows)
    assert max(len(line) for line in shown.splitlines()) <= columns
    # the actors' column starts at one place (each attempt sets its time column's width; both pass 1e6 s here)
    assert len({len(re.match(r" *\d+\.\d{3}  ", row).group()) for row in rows}) == 1


DEMO_COLUMNS = (80, 200)


@pytest.mark.parametrize("columns", DEMO_COLUMNS)
def test_sweep_and_demo_tables_keep_every_header_and_count_whole(columns):
    # one demo per width (about 15 s of two cores' simulations), the sweep run while it works
    demo_process = subprocess.Popen(
        [AGGSIM, "demo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=columns_env(columns)
    )
    try:
        sweep = aggsim(
            "sweep", "preemption_during_training", "--vary", "timings.upload_seconds=0.05,3", columns=columns
        )
        demo, stderr = demo_process.communicate(timeout=240)
    finally:
        if demo_process.poll() is None:
            demo_process.kill()
            demo_process.communicate()
    assert demo_process.returncode == 0, stderr
    for text in (demo, sweep):
        assert "…" not in text
        for words in ("retried", "failed permanently", "succeeded silently", "genuine error masked", "recoverable"):
            assert words in text.replace("\n", " ").replace("│", " ") or words in text, (columns, words)
        assert "(100%)" in text and not any(line.rstrip().endswith("(") for line in text.splitlines())
        assert all(line == line.rstrip() for line in text.splitlines())
    assert "10368" in demo
    # `make demo` runs `aggsim demo`: the seed incident through the sweep
    for text in ("The seed incident", "genuine error", "upstream", "seed-pr", "recoverable", "silently", "masked"):
        assert text in demo.replace("\n", " "), (columns, text)


def test_sweep_counterexamples_end_with_the_file_that_won_and_the_decision():
    """Each counterexample is a case in full: the assignment, key events, the winner, the node's decision."""
    text = aggsim(
        "sweep", "sibling_user_error_cleanup_no_aggregation", "--vary", "timings.upload_seconds=0.05,3", columns=80
    )
    blocks = [block for block in text.split("\n\n") if ": first case of " in block.splitlines()[0]]
    assert blocks
    for block in blocks:
        lines = [line for line in block.strip().splitlines() if line.strip()]
        assert lines[-1].startswith("final: ")
        assert any(line.startswith("task ") and " -> node " in line for line in lines[-3:])
        assert any(line.startswith("propeller: ") for line in lines)
    record = json.loads(
        aggsim(
            "sweep",
            "sibling_user_error_cleanup_no_aggregation",
            "--vary",
            "timings.upload_seconds=0.05,3",
            "--json",
            columns=80,
        )
    )
    case = record["cells"][0]["counterexamples"]["FAILED_PERMANENTLY"]
    assert case["attempts"][-1]["winning_file"].endswith(".pb") and case["attempts"][-1]["decision"] == "FAIL"
    assert case["final_code"] == "USER:RuntimeError"


@pytest.mark.parametrize("width", [80, 200])
def test_real_demo_table_shows_every_file_and_code_in_full(tmp_path, width):
    """The demo's real-pod table at 80 columns: file names, codes and workers, never cut (explained prefixes)."""
    pytest.importorskip("flytekit")
    from localjob.demo import PreemptedRun, render

    empty = tmp_path / "upstream"
    empty.mkdir()
    ours = tmp_path / "ours"
    ours.mkdir()
    name = "error-3f1c2a9e5b7d4c6a8e0f1b2c3d4e5f60.pb"
    worker = "train-worker-with-a-rather-long-pod-name-0"
    (ours / name).write_bytes(
        error_document_bytes(code="USER:Recoverable", recoverable=True, timestamp_ns=T0, worker=worker)
    )
    runs = [
        PreemptedRun("upstream", 0, T0 / 1e9, 1.5, (), explain_prefix(str(empty), retries=2)),
        PreemptedRun("recoverable", 0, T0 / 1e9, 1.6, (name,), explain_prefix(str(ours), retries=2)),
    ]
    console = Console(record=True, width=width, file=open(os.devnull, "w"))
    render(runs, console)
    text = console.export_text()
    for expected in (name, worker, "USER:Recoverable", "node SUCCEEDS", "node RETRIES", "(empty)"):
        assert expected in text, (width, expected)
    assert "…" not in text


def _run_with_a_terminal(args, stream: str, env=None, cwd=None) -> tuple[str, str]:
    """Run aggsim with `stream` ("stdout" or "stderr") on a pseudo-terminal and the other piped: (what the terminal
    showed, with its line ends as written, and what the pipe got)."""
    import pty

    controller, terminal = pty.openpty()
    try:
        other = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, stream: terminal}
        process = subprocess.Popen([AGGSIM, *args], **other, text=True, env=env, cwd=cwd)
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed: the process is gone
                break
            if not chunk:
                break
            shown += chunk
        out, err = process.communicate(timeout=120)
    finally:
        os.close(controller)
    return shown.decode(errors="replace").replace("\r\n", "\n"), out if stream == "stderr" else err


def run_with_stderr_on_a_terminal(*args) -> tuple[str, str]:
    """Run aggsim with stdout piped and stderr on a pseudo-terminal, as in an interactive shell with `| less`."""
    err, out = _run_with_a_terminal(args, "stderr")
    return out, err


def run_with_stdout_on_a_terminal(*args, columns: int, cwd=None) -> str:
    """Run aggsim with stdout on a pseudo-terminal `columns` wide (COLUMNS, which the terminal-size lookup honours)."""
    return _run_with_a_terminal(args, "stdout", env=columns_env(columns), cwd=cwd)[0]


def test_validate_findings_fit_an_80_column_terminal_and_stay_one_line_each_in_a_pipe(tmp_path):
    """At a terminal each finding wraps to its width under an indent; in a pipe it is one `path: check: message`
    line, for grep and CI logs. Both say the same."""
    prefix = tmp_path / "a-prefix-with-a-longish-name"
    prefix.mkdir()
    (prefix / "error-0d9e.pb").write_bytes(error_document_bytes(code="USER:Recoverable", recoverable=True))
    (prefix / "error-77aa.pb").write_bytes(error_document_bytes(code="USER:X", recoverable=False, timestamp_ns=T0))
    shown = run_with_stdout_on_a_terminal("validate", prefix.name, columns=80, cwd=tmp_path)
    piped = subprocess.run([AGGSIM, "validate", prefix.name], capture_output=True, text=True, cwd=tmp_path)
    findings = piped.stdout.splitlines()
    assert piped.returncode == 1 and len(findings) >= 2 and all(line.startswith(prefix.name) for line in findings)
    lines = shown.splitlines()
    assert max(len(line) for line in lines) <= 80 and len(lines) > len(findings)
    assert " ".join(shown.split()) == " ".join(piped.stdout.split())


def test_a_long_sweep_shows_progress_on_a_terminal_but_never_in_json_or_a_pipe(tmp_path):
    out, err = run_with_stderr_on_a_terminal("sweep", "preemption_during_training")  # ~2,000 x 6 cases: > 1 s
    assignments = int(re.search(r"([\d,]+) assignments", out).group(1).replace(",", ""))
    assert "sweeping" in err and f"/{assignments}" in err and assignments > 1000
    out, err = run_with_stderr_on_a_terminal("sweep", "preemption_during_training", "--json")
    assert "sweeping" not in err and json.loads(out)["assignments"] == assignments
    piped = subprocess.run([AGGSIM, "sweep", "preemption_during_training"], capture_output=True, text=True)
    assert piped.returncode == 0 and piped.stderr == ""


def test_sweep_out_writes_one_row_per_case_in_csv_or_json_lines(tmp_path):
    import csv

    args = ["sweep", "sibling_user_error_cleanup_no_aggregation", "--vary", "timings.upload_seconds=0.05,3"]
    summary = json.loads(aggsim(*args, "--json", columns=80))
    aggsim(*args, "--out", str(tmp_path / "cases.csv"), columns=80)
    aggsim(*args, "--out", str(tmp_path / "cases.jsonl"), columns=80)
    rows = list(csv.DictReader((tmp_path / "cases.csv").open()))
    lines = [json.loads(line) for line in (tmp_path / "cases.jsonl").read_text().splitlines()]
    assert len(rows) == len(lines) == 2 * 6
    for cell in summary["cells"]:
        for outcome, count in cell["counts"].items():
            mine = [r for r in rows if r["plugin"] == cell["plugin"] and r["aggregation"] == str(cell["aggregation"])]
            assert sum(r["outcome"] == outcome for r in mine) == count
    masked = [line for line in lines if line["genuine_error_masked"]]
    assert masked and all(line["first_winning_file"] == "error.pb" for line in masked)
    assert {line["assignment"]["timings.upload_seconds"] for line in lines} == {0.05, 3.0}
    bad = subprocess.run([AGGSIM, *args, "--out", str(tmp_path / "cases.txt")], capture_output=True, text=True)
    assert bad.returncode == 2 and "--out" in bad.stderr and len(bad.stderr.splitlines()) == 1


@pytest.mark.parametrize("width", [80, 200])
def test_run_local_comparison_shows_both_verdicts_in_full(width):
    """`run-local`'s real-vs-simulated table, fed by record.compare: winning files and codes never cut."""
    from aggregation.record import compare, execution_to_proto
    from aggregation.report import render_comparison
    from aggregation.scenario import load_scenario
    from aggregation.simulate import simulate

    ours = execution_to_proto(simulate(load_scenario("survivor_fails_from_peer_death", "recoverable")))
    theirs = execution_to_proto(simulate(load_scenario("survivor_fails_from_peer_death", "seed-pr")))
    diff = compare(ours, theirs)
    console = Console(record=True, width=width, file=open(os.devnull, "w"))
    render_comparison(diff, console)
    text = console.export_text()
    assert "differs" in text and "…" not in text
    for field, simulated, real in diff:
        assert field in text and str(simulated) in text and str(real) in text


REFUSAL = (
    "the operator's reconcile at 30.6 s reads pod train-worker-1 deleted (at 30.6 s) and exited (exit 143, heard at "
    "31.35 s): the kubelet removes such a pod, and it polls 12 / s with a 1.5e-09 s tick, 5 ms apart"
)


@given(
    width=st.integers(40, 120),
    words=st.lists(st.sampled_from(["the", "reconcile", "at", "30.6", "s", "12", "/", "ms", "1.5e-09"]), min_size=20),
)
def test_a_refusal_s_line_keeps_each_number_with_its_unit_at_any_width(width, words):
    """`report.print_paragraph` (the model's refusals in `sweep` and `prove`): "30.6 s" and "12 / s" never end one
    line and start the next, and the words are all there, in order."""
    import io

    from aggregation.report import print_paragraph

    def wrapped(text):
        out = io.StringIO()
        print_paragraph(Console(file=out, width=width, color_system=None), text, "  ")
        lines = out.getvalue().splitlines()
        assert " ".join(line.strip(" ") for line in lines) == text.strip()  # every word, as written
        return lines

    wrapped(REFUSAL.replace("train-worker-1", "train\ue000worker\u00a0x"))  # the wrapper's own glue, shown as is
    for text in (REFUSAL, " ".join(words), REFUSAL.replace("train-worker-1", "train\u00a0worker")):
        lines = wrapped(text)
        for line, after in zip(lines, lines[1:]):  # no "number unit" runs across a break
            joined = line.rstrip() + " " + after.lstrip()
            broken = [
                m for m in re.finditer(r"\d (?:/ )?(?:s|ms)\b", joined) if m.start() < len(line.rstrip()) < m.end()
            ]
            assert not broken, (line, after)


@pytest.mark.parametrize("suffix, signum, code", [(".csv", signal.SIGINT, 130), (".jsonl", signal.SIGTERM, 143)])
def test_an_interrupted_sweep_never_leaves_a_file_that_looks_whole(tmp_path, suffix, signum, code):
    """`--out FILE` is written as FILE.partial and renamed when the sweep is done: stopped part way, FILE keeps what
    it had, the rows so far stay in FILE.partial (each row whole), and the one last line says where they are."""
    out = tmp_path / f"cases{suffix}"
    out.write_text("an earlier sweep's rows\n")
    partial = tmp_path / f"cases{suffix}.partial"
    args = ["sweep", "preemption_during_training", "--samples", "20000", "--out", str(out)]
    exit_code, _, err = interrupt_when(args, signum, lambda: partial.exists() and partial.stat().st_size >= 10_000)
    assert exit_code == code
    assert out.read_text() == "an earlier sweep's rows\n"
    text = partial.read_text()
    assert text.endswith("\n")
    rows = text.splitlines()[1:] if suffix == ".csv" else [json.loads(line) for line in text.splitlines()]
    assert len(err.splitlines()) == 1 and err.startswith("aggsim: interrupted")
    assert f"--out {out} not written; the first {len(rows):,} rows are in {partial}" in err


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_row_written_but_not_yet_counted_when_a_signal_lands_is_cut_off(tmp_path, suffix):
    """A signal's exception lands between any two bytecodes: between a row's write and its count it left a row the
    note did not count ("the first 95 rows" over a file of 96, seen in `make test`). The file keeps exactly the
    rows the note names."""
    from aggregation.caselog import CaseLog, CaseRow
    from aggregation.scenario import read_scenario
    from aggregation.simulate import simulate as run

    execution = run(read_scenario("preemption_during_training").spec("recoverable"))
    out = tmp_path / f"cases{suffix}"
    field = "timings.upload_seconds"

    class SignalAfterTheThirdRow:
        def __init__(self, file):
            self.file, self.writes = file, 0

        def write(self, text):
            self.file.write(text)
            self.writes += 1
            if self.writes == 3:  # the third row: written, and the signal lands before it is counted
                raise KeyboardInterrupt

        def __getattr__(self, name):
            return getattr(self.file, name)

    with pytest.raises(KeyboardInterrupt) as raised:
        with CaseLog(str(out), [field]) as log:
            log._file = SignalAfterTheThirdRow(log._file)
            for upload in (0.05, 1.0, 2.0, 3.0):
                log.write(((field, upload),), "recoverable", True, CaseRow.of(execution, "RETRIED"))
    assert raised.value.__notes__ == [f"--out {out} not written; the first 2 rows are in {out}.partial"]
    lines = (tmp_path / f"cases{suffix}.partial").read_text().splitlines()
    assert len(lines) == 2 + (suffix == ".csv")


def test_a_finished_sweep_renames_its_rows_and_writes_a_device_in_place(tmp_path):
    args = ["sweep", "sibling_user_error_cleanup_no_aggregation", "--vary", "timings.upload_seconds=0.05,3"]
    aggsim(*args, "--out", str(tmp_path / "cases.csv"), columns=80)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cases.csv"]
    device = tmp_path / "rows.jsonl"
    device.symlink_to("/dev/null")
    aggsim(*args, "--out", str(device), columns=80)
    assert device.is_symlink() and not (tmp_path / "rows.jsonl.partial").exists()
    # a link to a file is written through and stays a link; an existing file keeps its mode
    target, link = tmp_path / "target.csv", tmp_path / "link.csv"
    target.write_text("")
    link.symlink_to(target)
    aggsim(*args, "--out", str(link), columns=80)
    assert link.is_symlink() and target.read_text().count("\n") == 1 + 12
    os.chmod(target, 0o640)
    aggsim(*args, "--out", str(target), columns=80)
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)
    (tmp_path / "dir.csv").mkdir()
    refused = subprocess.run([AGGSIM, *args, "--out", str(tmp_path / "dir.csv")], capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "is a directory" in refused.stderr


def test_a_zero_column_terminal_still_gets_the_verdict():
    """rich takes COLUMNS=0 as a width of 0 and printed nothing at all (exit 0, no verdict in a CI log); it is read as
    unset, as COLUMNS=abc is."""
    result = subprocess.run(
        [AGGSIM, "simulate", "preemption_during_training"], capture_output=True, text=True, env=columns_env(0)
    )
    assert result.returncode == 0 and "final: RETRIED_THEN_SUCCEEDED after 2 attempt(s)" in result.stdout


def test_the_progress_bar_is_drawn_on_the_cli_s_console_which_reads_a_zero_column_terminal_as_unset(monkeypatch):
    """The sweep's and the real runs' progress bar used a console of rich's own, which draws nothing at COLUMNS=0;
    it is drawn on the CLI's console, whose width is the terminal's (or 80) there."""
    import io

    from aggregation.cli import _console
    from aggregation.report import ProgressBar

    monkeypatch.setenv("COLUMNS", "0")
    console = _console(stderr=True)
    assert console.width > 0
    console.file, console._force_terminal, console.is_interactive = io.StringIO(), True, True  # as at a terminal
    import time

    with ProgressBar("sweeping", enabled=True, delay=0, console=console) as bar:
        bar(1, 3)
        deadline = time.monotonic() + 30
        while "1/3" not in console.file.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)  # rich draws from its refresh thread, 10 times a second
    assert "sweeping" in console.file.getvalue() and "1/3" in console.file.getvalue()


@given(st.text(alphabet="ab -", max_size=40), st.integers(1, 30), st.sampled_from(["", "  ", "    "]))
def test_lines_wrapped_in_cells_are_textwrap_s_for_one_cell_text(text, width, indent):
    """`aggregation/cells.py` `wrap_cells` takes textwrap's steps with widths in cells: where each character is one
    cell, its lines are textwrap's, so nothing the tool printed before moves."""
    import textwrap

    from aggregation.cells import wrap_cells

    expected = textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
    assert wrap_cells(text, width, indent) == expected


@pytest.mark.parametrize("pod", ["worker-\x1b[1m", "ワーカーワーカー", "w\tb\nc", "ｗｉｄｅ-pod-name-of-twenty"])
def test_a_pod_name_that_is_escaped_or_wide_keeps_the_timeline_in_its_columns(tmp_path, pod):
    """The timeline measured a pod's name before escaping it (`\\x1b` is four cells where ESC was one) and by
    characters (a kana is two cells): the descriptions beside it slid right and lines ran past 80 columns. A tab or
    newline in a name showed as a space in the descriptions and escaped beside them."""
    from rich.cells import cell_len

    quoted = pod.encode("unicode_escape").decode().replace('"', '\\"')
    path = tmp_path / "named.textproto"
    path.write_text(
        f'name: "named" plugin: UPSTREAM job {{ pods: "a" pods: "{quoted}" }} '
        "task { retries: 1 training_seconds: 60 } "
        f'attempts {{ events {{ at_seconds: 30 pod: "{quoted}" preemption {{}} }} }}'
    )
    shown = aggsim("simulate", str(path), columns=80)
    escaped = pod.replace("\x1b", "\\x1b").replace("\t", "\\x09").replace("\n", "\\x0a")
    assert not any(c in shown for c in "\x1b\t")
    assert max(cell_len(line) for line in shown.splitlines()) <= 80
    rows = [line for line in shown.splitlines() if re.match(r" *\d+\.\d{3}  \S", line)]
    assert any(escaped in row for row in rows)
    # every row's description starts at one cell: after the widest name, padded in cells
    assert len({cell_len(re.match(r" *\d+\.\d{3}  \S+ +", row).group()) for row in rows}) == 1, rows
    assert f"job Succeeded: pod {escaped} succeeded" in " ".join(line.strip() for line in shown.splitlines())


def test_explain_prints_wide_names_as_a_list_where_their_cells_would_not_fit(tmp_path):
    """`report.fits` counted characters: a file name and worker in kana (two cells each) passed as fitting, and the
    table rich drew cut them and dropped whole columns. Counted in cells, it is a list, every name whole."""
    from rich.cells import cell_len

    name = "error-" + "日本" * 30 + ".pb"
    worker = "ワーカー" * 10
    (tmp_path / name).write_bytes(error_document_bytes(code="USER:RuntimeError", timestamp_ns=T0, worker=worker))
    for columns in (80, 200):
        shown = aggsim("explain", str(tmp_path), columns=columns)
        joined = shown.replace("\n", "")  # a name wider than the terminal is wrapped, whole
        assert name in joined and worker in joined and "…" not in shown, shown
        assert "timestamp: 2026-11-30T00:53:20" in shown and "code: USER:RuntimeError" in shown
        assert max(cell_len(line) for line in shown.splitlines()) <= columns
