"""Careless and hostile input: every case ends in a verdict or one line naming what is wrong, never a traceback,
a hang or a wrong answer. Scenario values are checked against the `aggsim.v1.Scenario` schema's types in one
place (`aggregation/scenario.py` `_check_values`), `--vary` values by the field's type (`aggregation/explore.py`).
"""

from __future__ import annotations

import codecs
import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import AGGSIM, SCENARIOS
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.cli import main
from aggregation.documents import error_document_bytes

PREEMPTION = str(SCENARIOS / "preemption_during_training.textproto")
TWO_PODS = 'name: "x" plugin: RECOVERABLE job { pods: "a" pods: "b" } '


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def one_line_error(result, *needles):
    """Exit 2, and stderr is one line that names what is wrong."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.textproto"
    path.write_text(text)
    return path


# --- the scenario file itself -------------------------------------------------------------------------------------


def test_a_fifo_is_refused_at_once_instead_of_blocking(tmp_path):
    fifo = tmp_path / "pipe.textproto"
    os.mkfifo(fifo)
    done = subprocess.run([AGGSIM, "simulate", str(fifo)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "not a regular file" in done.stderr


def test_a_device_is_refused(tmp_path):
    one_line_error(run("simulate", "/dev/zero"), "/dev/zero", "not a regular file")


def test_a_scenario_over_the_size_limit_is_refused_unread(tmp_path):
    from aggregation import defaults

    big = tmp_path / "big.textproto"
    big.write_text("# " + "x" * defaults.MAX_SCENARIO_BYTES)
    one_line_error(run("simulate", big), "big.textproto", "limit")


def test_a_scenario_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "latin1.textproto"
    path.write_bytes(b'name: "caf\xe9"')
    one_line_error(run("simulate", path), "not UTF-8")
    path.write_bytes(codecs.BOM_UTF8 + b'name: "caf\xe9"')
    one_line_error(run("simulate", path), "not UTF-8 text (byte 13)")  # the file's byte, mark counted


@pytest.mark.parametrize(
    "argument, needle",
    [
        (".", ".: a directory, not a scenario"),
        ("", "no scenario named (an empty argument)"),
        ("-", "-: a scenario is not read from standard input"),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "sweep", "prove"])
def test_a_directory_an_empty_name_or_a_dash_is_named_for_what_it_is(command, argument, needle):
    """They were all "no such file, and no shipped scenario of that name", which is untrue of a directory."""
    claim = ["--claim", "retries"] if command == "prove" else []
    one_line_error(run(command, argument, *claim), needle)


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", PREEMPTION, "--out", ""],
        ["sweep", PREEMPTION, "--plot", ""],
        ["simulate", PREEMPTION, "--timings-profile", ""],
        ["explain", ".", "--propeller-config", ""],
        ["run-local", PREEMPTION, "--work-dir", ""],
        ["simulate", PREEMPTION, "--timings-profile", "a\x00b"],
    ],
)
def test_a_file_name_that_names_no_file_is_a_usage_error(args):
    """`--out ""` was taken for no --out at all: the sweep ran and wrote nothing, silently. An empty name (or one
    holding a NUL) names no file: refused before anything runs (`cli.LocalPath`)."""
    result = run(*args)
    assert result.exit_code == 2 and "Invalid value for" in result.stderr, result.output
    assert "an empty file name names no file" in result.stderr or "cannot hold a NUL byte" in result.stderr
    assert result.stdout == ""


def test_a_byte_order_mark_before_a_scenario_is_no_part_of_it(tmp_path):
    """Some editors (Windows Notepad among them) write a UTF-8 byte order mark first; it was a parse error that
    printed the mark itself. The scenario is the text after it."""
    text = (SCENARIOS / "preemption_during_training.textproto").read_bytes()
    marked = tmp_path / "marked.textproto"
    marked.write_bytes(codecs.BOM_UTF8 + text)
    assert run("simulate", marked, "--json").stdout == run("simulate", PREEMPTION, "--json").stdout
    marked.write_bytes(codecs.BOM_UTF8 + b"name: 1 +")
    assert "\ufeff" not in one_line_error(run("simulate", marked), "marked.textproto:1")


def test_format_characters_in_a_document_are_shown_escaped(tmp_path):
    """A right-to-left override (U+202E) makes a terminal show the text after it backwards, a zero-width space
    (U+200B) or a byte order mark shows nothing, a line separator (U+2028) may break the line: what a document
    carries is shown as escapes (Unicode's Cf, Zl and Zp; `aggregation/printable.py`), in a pipe as in a terminal."""
    from flyteidl.core import errors_pb2
    from google.protobuf.timestamp_pb2 import Timestamp

    error = errors_pb2.ContainerError(
        code="USER:Bad\u200b",
        kind=errors_pb2.ContainerError.RECOVERABLE,
        worker="w\u202e0-rekrow\u2028\ufeff\U000e0041",
        timestamp=Timestamp(seconds=5),
    )
    (tmp_path / "error-x.pb").write_bytes(errors_pb2.ErrorDocument(error=error).SerializeToString())
    result = subprocess.run([AGGSIM, "explain", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "worker: w\\u202e0-rekrow\\u2028\\ufeff\\U000e0041" in result.stdout
    assert "code: USER:Bad\\u200b" in result.stdout
    assert not any(ord(c) > 0x7F for c in result.stdout), result.stdout


# --- field values against the schema's types --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, field",
    [
        ('name: "x" job { pods: "a" } plugin: 99', "plugin"),
        (TWO_PODS.replace("RECOVERABLE", "UPSTREAM") + "job { clean_pod_policy: 7 }", None),  # two job fields: parse
        ('name: "x" plugin: RECOVERABLE job { pods: "a" clean_pod_policy: 7 }', "job.clean_pod_policy"),
        ('name: "x" plugin: RECOVERABLE job { pods: "a" start_method: 5 }', "job.start_method"),
        (TWO_PODS + "task { training_seconds: inf }", "task.training_seconds"),
        (TWO_PODS + "task { training_seconds: 1e299 }", "task.training_seconds"),
        (TWO_PODS + "timings { upload_seconds: nan }", "timings.upload_seconds"),
        (TWO_PODS + "timings { rendezvous_seconds: -1 }", "timings.rendezvous_seconds"),
        (TWO_PODS + "propeller { observation_delay_seconds: -inf }", "propeller.observation_delay_seconds"),
        (TWO_PODS + "propeller { max_download_mbs: -5 }", "propeller.max_download_mbs"),
        (TWO_PODS + 'attempts { events { at_seconds: 1e299 pod: "a" preemption {} } }', "at_seconds"),
        (TWO_PODS + "attempts { events { at_seconds: 5 storage_outage { duration_seconds: inf } } }", "duration"),
        (TWO_PODS + "timings { on_peer_death { fail { after_seconds: -0.5 } } }", "after_seconds"),
        (TWO_PODS + "job { nproc_per_node: 4000000000 }", None),
        # shorter than the clock's nanosecond tick, which the agent's looks are counted in (found by test_fuzz)
        ('name: "x" plugin: RECOVERABLE job { pods: "a" monitor_interval_seconds: 7e-31 }', "monitor_interval"),
    ],
)
def test_values_outside_the_schema_s_types_are_refused_naming_the_field(tmp_path, text, field):
    line = one_line_error(run("simulate", scenario(tmp_path, text)), "s.textproto:")
    if field is not None:
        assert field in line


def test_more_attempts_than_the_simulator_plays_are_refused(tmp_path):
    attempts = " ".join('attempts { events { at_seconds: 5 pod: "a" preemption {} } }' for _ in range(101))
    one_line_error(run("simulate", scenario(tmp_path, TWO_PODS + attempts)), "attempts", "at most 100")


def test_an_execution_that_would_retry_past_100_attempts_is_refused_not_crashed(tmp_path):
    """task.retries is a uint32: a node whose attempts all fail would go on; the simulator says where it stops."""
    failing = 'attempts { events { at_seconds: 5 pod: "a" worker_error { recoverable: true } } }'
    attempts = " ".join(failing for _ in range(100))
    path = scenario(tmp_path, TWO_PODS + "task { retries: 4000000000 } " + attempts)
    one_line_error(run("simulate", path), "still retrying after 100 attempts")


@settings(max_examples=60)
@given(
    st.sampled_from(["rendezvous_seconds", "agent_shutdown_seconds", "upload_seconds", "failure_detection_seconds"]),
    st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(min_value=0, max_value=1e6)),
)
def test_any_timing_value_is_simulated_or_refused_in_one_line(field, value):
    """Generated timings (any double): a finite non-negative one within the bound is simulated, any other refused."""
    from aggregation import defaults
    from aggregation.scenario import ScenarioError, parse_scenario
    from aggregation.simulate import simulate

    preemption = 'attempts { events { at_seconds: 5 pod: "a" preemption {} } }'
    text = TWO_PODS + f"timings {{ {field}: {value!r} }} " + preemption
    in_range = value == value and 0 <= value <= defaults.MAX_SCENARIO_SECONDS
    if field == "agent_shutdown_seconds":  # torch's agent SIGKILLs its workers after 30 s
        in_range = in_range and value <= defaults.TORCH_SHUTDOWN_TIMEOUT_SECONDS
    try:
        spec = parse_scenario(text)
    except ScenarioError as e:
        assert not in_range, e
        assert f"timings.{field}" in str(e) and "\n" not in str(e)
        return
    assert in_range
    assert simulate(spec).final_phase is not None


# --- --vary, --samples, --plot, --retries -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "vary, needle",
    [
        ("job.elastic=yes", "not a boolean"),
        ("attempts=0:1:1", "is a list"),
        ("task=1", "is a message"),
        ("job.pods[0]=a,b", "list of scalars"),
        # its hint said to vary one entry, pods[0]..., which is refused as a list of scalars (black-box round 5)
        ("job.pods=a", "job.pods: pods is a list of scalars"),
        ("task.retries=0:3:0.5", "not an integer"),
        ("task.retries=-1,2", "outside the field's range"),
        ("task.retries=5000000000", "outside the field's range"),
        ("plugin=UPSTREAM,NOPE", "not a PluginVariant"),
        ("propeller.observation_delay_seconds=0:1e9:1", "widen the step"),
        ("timings.upload_seconds=0:1:1e-320", "widen the step"),  # a count that overflows a float
        ("propeller.observation_delay_seconds=nan", "not a finite number"),
        ("timings.upload_seconds=-1,2", "must be >= 0"),
        ("attempts[7].events[0].at_seconds=1", "has only"),
        ("timings.nope=1", "has no field"),
        ("timings.upload_seconds", "expected FIELD=RANGE"),
        # a oneof holds one kind: setting another member's field used to turn the preemption into a worker error
        ("attempts[0].events[1].worker_error.recoverable=true,false", "attempts[0].events[1] is a preemption, not a"),
        ("attempts[0].events[0].storage_outage.duration_seconds=1,2", "is a checkpoint, not a storage_outage"),
        # the sweep's cells set these in every case: they used to be listed as varied and change nothing
        ("plugin=UPSTREAM,SEED_PR", "each of a sweep's cells plays one plugin (--plugin picks them)"),
        ("propeller.error_aggregation=false", "a sweep plays aggregation on and off, each in cells of its own"),
        # a grid point listed twice used to be counted twice; an empty value was skipped; 1_0 read as 10
        ("timings.upload_seconds=1,1", "is listed twice"),
        ("timings.upload_seconds=1,,2", "an empty value between commas"),
        ("timings.upload_seconds=1_0", "'1_0' is not a number"),
    ],
)
def test_bad_variations_are_refused_in_one_line(vary, needle):
    one_line_error(run("sweep", PREEMPTION, "--vary", vary, "--plugin", "recoverable"), needle)


def test_one_field_under_two_spellings_is_one_field_given_twice():
    """`attempts[00]` is `attempts[0]`: the grid kept one spelling's values and the case label the other's."""
    result = run(
        "sweep", PREEMPTION, "--plugin", "upstream", "--vary", "attempts[0].events[1].at_seconds=30.6",
        "--vary", "attempts[00].events[1].at_seconds=30.0,30.2",
    )  # fmt: skip
    one_line_error(result, "--vary attempts[0].events[1].at_seconds: given twice")


def test_a_plugin_given_twice_is_refused_not_swept_twice():
    """`--plugin upstream --plugin upstream` played every cell twice and wrote each row twice to --out."""
    delay = "propeller.observation_delay_seconds"
    for varies in ([f"{delay}=0,1"], [f"{delay}=0..1", "attempts[0].events[1].at_seconds=30..31"]):
        args = [arg for vary in varies for arg in ("--vary", vary)]
        args += ["--plugin", "upstream", "--plugin", "recoverable", "--plugin", "upstream"]
        result = run("sweep", PREEMPTION, *args)
        one_line_error(result, "--plugin upstream: given twice")


def test_a_grid_beside_a_range_is_refused_by_what_sweep_makes_of_it_not_by_prove():
    """A range makes `sweep` an exact region map, which takes no grid: the refusal named `prove`, which nobody ran."""
    result = run(
        "sweep", PREEMPTION, "--vary", "attempts[0].events[1].at_seconds=30..31",
        "--vary", "propeller.observation_delay_seconds=0:10:2",
    )  # fmt: skip
    one_line_error(result, "an exact region map (a FIELD=LO..HI given) takes a whole interval LO..HI, not a grid")
    assert "prove" not in result.output


def test_a_negative_seed_is_refused_not_taken_as_its_absolute_value():
    """Python's `random.Random(-1)` seeds as `Random(1)`: two seeds would draw one sample."""
    one_line_error(run("sweep", PREEMPTION, "--seed", "-1", "--plugin", "recoverable"), "--seed")


def test_string_fields_are_swept_as_written_even_when_they_look_like_numbers(tmp_path):
    """Pods named "0" and "1": the preempted pod varies over the two names, not over 0.0 and 1.0."""
    path = scenario(
        tmp_path,
        'name: "x" plugin: RECOVERABLE job { pods: "0" pods: "1" } '
        'attempts { events { at_seconds: 5 pod: "0" preemption {} } }',
    )
    result = run("sweep", path, "--vary", "attempts[0].events[0].pod=0,1", "--plugin", "recoverable", "--json")
    assert result.exit_code == 0, result.output
    import json

    assert json.loads(result.stdout)["variations"] == [{"field": "attempts[0].events[0].pod", "values": ["0", "1"]}]


def test_a_huge_range_is_sampled_without_materialising_it():
    result = run(
        "sweep",
        PREEMPTION,
        "--vary",
        "propeller.observation_delay_seconds=0:999999:1",
        "--samples",
        "5",
        "--plugin",
        "recoverable",
        "--json",
    )
    assert result.exit_code == 0, result.output
    import json

    out = json.loads(result.stdout)
    assert out["assignments"] == 5 and out["exhaustive"] is False
    assert out["variations"][0]["count"] == 1_000_000


def test_samples_beyond_the_cap_are_refused():
    one_line_error(run("sweep", PREEMPTION, "--samples", "100000000"), "--samples")


@pytest.mark.parametrize("name", ["out.xyz", "out"])
def test_a_plot_format_matplotlib_cannot_write_is_refused(tmp_path, name):
    one_line_error(run("simulate", PREEMPTION, "--plot", tmp_path / name), "--plot", ".png")
    assert not (tmp_path / name).exists()


def test_a_pgf_plot_without_its_tex_program_is_refused_before_the_run(tmp_path, monkeypatch):
    """matplotlib's PGF writer runs `pgf.texsystem` (xelatex) at save time: without it the sweep ran, then died with
    an internal error and printed nothing of what it had found. Refused up front, in one line, nothing written."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no TeX program on it
    for command in (("simulate", PREEMPTION), ("sweep", PREEMPTION, "--samples", "2")):
        one_line_error(run(*command, "--plot", tmp_path / "out.pgf"), "--plot", "xelatex", "not installed")
    assert not (tmp_path / "out.pgf").exists()


def test_a_plot_whose_names_hold_dollars_and_control_characters_is_drawn(tmp_path):
    path = scenario(
        tmp_path,
        'name: "$\\\\frac{$ \\x1b[31m" plugin: RECOVERABLE job { pods: "a$" pods: "b\\x07" } '
        'attempts { events { at_seconds: 5 pod: "a$" preemption {} } }',
    )
    result = run("simulate", path, "--plot", tmp_path / "t.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "t.png").stat().st_size > 0


def test_retries_beyond_flyte_s_uint32_are_refused(tmp_path):
    one_line_error(run("explain", tmp_path, "--retries", str(2**32)), "--retries")


# --- text from documents and scenarios is shown literally ---------------------------------------------------------


def test_scenario_text_is_printed_literally_with_control_characters_escaped(tmp_path):
    path = scenario(
        tmp_path,
        'name: "[red]x[/red] \\x1b[2J" plugin: RECOVERABLE job { pods: "a" pods: "b\\nc" } '
        'attempts { events { at_seconds: 5 pod: "a" worker_error { message: "@[/abs] [bold]m" } } }',
    )
    result = run("simulate", path)
    assert result.exit_code == 0, result.output
    assert "[red]x[/red] \\x1b[2J" in result.stdout
    assert "b\\x0ac" in result.stdout
    assert "\x1b" not in result.stdout


# --- output that cannot be written --------------------------------------------------------------------------------


def test_a_full_disk_on_stdout_is_one_line_and_exit_2():
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [AGGSIM, "simulate", PREEMPTION], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60
        )
    assert done.returncode == 2
    assert done.stderr.strip() == "aggsim: cannot write the output: No space left on device"


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", PREEMPTION],
        ["prove", PREEMPTION, "--claim", "retries", "--plugin", "upstream", "--vary", "timings.upload_seconds=0..1"],
    ],
)
def test_a_reader_that_goes_away_ends_it_as_sigpipe_would_never_as_a_verdict(command):
    """`aggsim ... | head -1`: exit 128 + SIGPIPE and nothing on stderr. rich and click would exit 1, which is
    `prove`'s COUNTEREXAMPLE, whatever the answer was."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before the first write: every write meets a broken pipe
    try:
        done = subprocess.run([AGGSIM, *command], stdout=write_end, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == 141 and done.stderr == b""


def _many_pods(tmp_path: Path, pods: int = 100) -> str:
    """A preemption on `pods` pods: its timeline, as JSON or as rich's text, is larger than a pipe holds (64 KiB)."""
    names = " ".join(f'pods: "train-worker-{i}"' for i in range(pods))
    path = tmp_path / "many_pods.textproto"
    path.write_text(
        f'name: "many_pods" plugin: RECOVERABLE job {{ {names} nproc_per_node: 2 }} task {{ retries: 1 }} '
        'attempts { events { at_seconds: 30.6 pod: "train-worker-1" preemption {} } }'
    )
    return str(path)


@pytest.mark.parametrize("as_json", [True, False])
def test_a_reader_that_goes_away_mid_output_ends_it_as_sigpipe_would_never_as_exit_0(tmp_path, as_json):
    """`aggsim simulate --json | head -c1` on a large answer: the reader leaves during one large write, which the
    kernel cuts at what the pipe held, and CPython's buffered stream used to drop the rest and exit 0, as if the
    whole answer had been delivered (a `set -o pipefail` script went on with a truncated document)."""
    command = [AGGSIM, "simulate", _many_pods(tmp_path), *(["--json"] if as_json else [])]
    read_end, write_end = os.pipe()
    with subprocess.Popen(command, stdout=write_end, stderr=subprocess.PIPE) as process:
        os.close(write_end)
        try:
            assert os.read(read_end, 1)  # the answer has started; then the reader goes away
        finally:
            os.close(read_end)
        stderr = process.stderr.read()
        assert process.wait(timeout=120) == 141 and stderr == b""


def test_a_non_blocking_standard_output_gets_the_whole_answer(tmp_path):
    """Some CI runners hand their children a pipe left non-blocking: a full pipe then refused a write (EAGAIN), and
    the answer was cut at 64 KiB with exit 0. The write now waits for the reader."""
    import fcntl
    import time

    command = [AGGSIM, "simulate", _many_pods(tmp_path), "--json"]
    whole = subprocess.run(command, capture_output=True, check=True, timeout=120).stdout
    assert len(whole) > 1 << 16
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETFL, fcntl.fcntl(write_end, fcntl.F_GETFL) | os.O_NONBLOCK)
    with subprocess.Popen(command, stdout=write_end, stderr=subprocess.PIPE) as process:
        os.close(write_end)
        received = b""
        try:
            time.sleep(0.5)  # a slow reader: the pipe fills before it reads
            while chunk := os.read(read_end, 1 << 16):
                received += chunk
        finally:
            os.close(read_end)
        assert process.wait(timeout=120) == 0, process.stderr.read()
    assert json.loads(received) == json.loads(whole)


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "0"])
def test_a_budget_that_is_no_number_or_no_budget_is_refused(value):
    for command in ("prove", "sweep"):
        extra = ["--claim", "retries"] if command == "prove" else ["--vary", "propeller.observation_delay_seconds=0..1"]
        result = run(command, PREEMPTION, *extra, "--vary", "timings.upload_seconds=0..1", "--max-seconds", value)
        one_line_error(result, "--max-seconds")


def test_an_ascii_only_terminal_gets_ascii_rules_and_escapes_not_a_crash():
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    done = subprocess.run([AGGSIM, "simulate", PREEMPTION], capture_output=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert b"-" * 20 in done.stdout
    done.stdout.decode("ascii")  # nothing but ASCII reached the terminal


def test_usage_errors_are_one_line():
    one_line_error(run("explain"), "explain: Missing argument", "PREFIX")
    one_line_error(run("nosuch"), "No such command")
    one_line_error(run("sweep", PREEMPTION, "--seed", "x"), "--seed")


# --- the run's directory ------------------------------------------------------------------------------------------


def test_a_reused_work_dir_is_refused_unless_forced(tmp_path):
    """A stale error.pb from an earlier run would change this run's verdict: refused before any pod starts."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "error.pb").write_bytes(b"stale")
    one_line_error(run("run-local", PREEMPTION, "--work-dir", work), "not empty", "--force")
    assert (work / "error.pb").read_bytes() == b"stale"


@pytest.mark.parametrize("where", ["file", "under-a-file", "unwritable"])
def test_a_work_dir_that_cannot_be_made_is_one_line(tmp_path, where):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    target = {"file": blocker, "under-a-file": blocker / "sub", "unwritable": locked / "sub"}[where]
    if where == "unwritable" and os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    one_line_error(run("run-local", PREEMPTION, "--work-dir", target), "--work-dir")


def test_a_job_that_would_shrink_or_grow_is_refused_naming_the_field(tmp_path):
    """Elastic membership (min < max nodes) is not modelled: a scenario asking for it is refused, not simulated as
    a fixed-size job."""
    path = tmp_path / "elastic.textproto"
    path.write_text('plugin: RECOVERABLE job { pods: "a" pods: "b" pods: "c" min_replicas: 2 max_replicas: 3 }')
    result = subprocess.run([AGGSIM, "simulate", str(path)], capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().endswith("not one that shrinks or grows")
    assert "job.min_replicas" in result.stderr and result.stderr.count("\n") == 1


def test_a_wrong_range_is_named_before_an_option_the_region_map_does_not_take():
    """`sweep --vary F=1..0 --samples 50` blamed --samples; the empty range is what to fix first."""
    scenario = "preemption_during_training"
    one_line_error(
        run("sweep", scenario, "--vary", "propeller.observation_delay_seconds=1..0", "--samples", "50"),
        "the range is empty",
    )
    one_line_error(
        run("sweep", scenario, "--vary", "propeller.observation_delay_seconds=0..1", "--samples", "50"),
        "an exact region map takes exactly two ranges",
    )
    two = ("--vary", "propeller.observation_delay_seconds=0..1", "--vary", "attempts[0].events[1].at_seconds=30..31")
    one_line_error(run("sweep", scenario, *two, "--samples", "50"), "--samples: an exact region map")


def test_a_claim_s_control_characters_are_printed_escaped():
    """The claim is the user's text, echoed in the answer's first line: an ESC must not reach the terminal."""
    result = run(
        "prove", "preemption_during_training", "--claim", "code=\x1b[31mX", "--vary", "job.cleanup_seconds=0..1"
    )
    assert "\x1b" not in result.output and "code=\\x1b[31mX" in result.output.splitlines()[0]


def test_validate_names_a_fifo_or_a_device_as_neither_file_nor_prefix(tmp_path):
    """A FIFO used to be called "a file, not an output prefix", though validate takes files."""
    fifo = tmp_path / "error-a.pb"
    os.mkfifo(fifo)
    one_line_error(run("validate", fifo), "neither a regular file nor a directory")
    one_line_error(run("validate", "/dev/zero"), "neither a regular file nor a directory")


def test_a_pod_s_clock_offset_out_of_bounds_is_named_at_its_own_line(tmp_path):
    """The bound (+-1 h) used to be checked apart from every other value, naming `timings.clock_offset_seconds`
    and line 1 for a pod's override."""
    text = TWO_PODS + '\npod_timings {\n  pod: "b"\n  timings { clock_offset_seconds: 99999 }\n}\n'
    path = scenario(tmp_path, text)
    line = one_line_error(run("simulate", path), "pod_timings[0].timings.clock_offset_seconds: must be within +-3600 s")
    assert f"s.textproto:{text.splitlines().index('  timings { clock_offset_seconds: 99999 }') + 1}:" in line


def test_the_earliest_completion_event_ends_the_training_whatever_its_place_in_the_file(tmp_path):
    """Events are timed: the first completion in the file used to end the training even when another came sooner."""
    from aggregation.scenario import read_scenario

    text = (
        TWO_PODS
        + "attempts {\n  events { at_seconds: 30 completion {} }\n  events { at_seconds: 25 completion {} }\n}\n"
    )
    assert read_scenario(scenario(tmp_path, text)).spec().completion_for(0) == 25.0


def test_a_member_of_an_unset_oneof_is_varied_as_the_choice_it_makes():
    """`timings.on_peer_death` is unset in the seed scenario (its default: fail 0.05 s later); varying its `fail`
    member chooses it, as writing it would. Only a member other than the one set is refused."""
    result = run(
        "sweep", PREEMPTION, "--plugin", "recoverable", "--vary", "timings.on_peer_death.fail.after_seconds=0.05,1",
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["assignments"] == 2


def test_two_members_of_one_oneof_are_refused_since_setting_one_clears_the_other():
    """Varying `fail.after_seconds` and `wait_in_rendezvous.timeout_seconds` of one unset `on_peer_death` used to
    play `wait_in_rendezvous` at every point (the last one set) while the report listed both as varied."""
    result = run(
        "sweep", PREEMPTION, "--plugin", "recoverable",
        "--vary", "timings.on_peer_death.fail.after_seconds=0.05,1",
        "--vary", "timings.on_peer_death.wait_in_rendezvous.timeout_seconds=5,10",
    )  # fmt: skip
    one_line_error(result, "timings.on_peer_death has one reaction at a time", "setting one clears the other")


def test_a_prefix_deeper_than_python_s_recursion_limit_is_listed(tmp_path):
    """An object store holds keys of any depth; the local listing walks with a stack, not recursion."""
    from aggregation.documents import error_document_bytes

    levels = [tmp_path / "errors"]
    for _ in range(1200):  # one level at a time: Path.mkdir(parents=True) recurses, and so does shutil.rmtree
        levels.append(levels[-1] / "a")
    try:
        for level in levels:
            level.mkdir()
        (levels[-1] / "e.pb").write_bytes(error_document_bytes(code="USER:Deep", timestamp_ns=10**18))
        done = subprocess.run([AGGSIM, "explain", str(tmp_path), "--json"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["error"]["code"] == "USER:Deep"
    finally:  # bottom up, so that pytest's own clean-up of old temp dirs (recursive) never meets the tree
        (levels[-1] / "e.pb").unlink(missing_ok=True)
        for level in reversed(levels):
            if level.exists():
                level.rmdir()


def test_a_closed_standard_output_is_one_line_and_exit_2(tmp_path):
    for args in (("explain", str(tmp_path)), ("explain", str(tmp_path), "--json")):
        done = subprocess.run([AGGSIM, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        closed = subprocess.run(["bash", "-c", '"$0" "$@" >&-', AGGSIM, *args], capture_output=True, text=True)
        assert done.returncode == 0
        assert (closed.returncode, closed.stderr) == (2, "aggsim: cannot write the output: standard output is closed\n")


def test_a_symbolic_link_loop_is_named_as_one(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for command in ("explain", "validate"):
        done = subprocess.run([AGGSIM, command, str(loop)], capture_output=True, text=True)
        assert done.returncode == 2 and done.stderr.count("\n") == 1
        assert "a symbolic link that leads nowhere: Too many levels of symbolic links" in done.stderr
    # on the way to the prefix: a loop, or a file where a directory should be, is named, never "no such file"
    (tmp_path / "file.pb").write_bytes(b"")
    for below, why in ((loop / "prefix", "Too many levels of symbolic links"), (tmp_path / "file.pb" / "x", "Not a")):
        for command in ("explain", "validate"):
            done = subprocess.run([AGGSIM, command, str(below)], capture_output=True, text=True)
            assert done.returncode == 2 and done.stderr.startswith(f"aggsim: {below}: {why}"), done.stderr


def test_a_listed_fifo_or_device_is_this_machine_s_problem_not_a_verdict(tmp_path):
    """An object store holds no FIFO, socket or device: an `error-*.pb` in a local prefix that is one (or a link to
    one) was skipped, and explain said SUCCEEDED ("succeeds silently"), validate "no error files", though the same
    FIFO named alone was refused. Each is one line and exit 2; such a name outside the listed prefix is not read."""
    for name in ("fifo", "device"):
        prefix = tmp_path / name
        prefix.mkdir()
        odd = prefix / "error-x.pb"
        os.mkfifo(odd) if name == "fifo" else odd.symlink_to("/dev/zero")
        for command in ("explain", "validate"):
            done = subprocess.run([AGGSIM, command, str(prefix)], capture_output=True, text=True, timeout=60)
            assert (done.returncode, done.stdout) == (2, ""), (name, command, done)
            assert done.stderr.startswith(f"aggsim: {prefix}/error-x.pb: a FIFO, socket or device, which no object")
            assert done.stderr.count("\n") == 1
        odd.rename(prefix / "notes")  # not under the `error` key prefix: never listed
        done = subprocess.run([AGGSIM, "explain", str(prefix), "--json"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and json.loads(done.stdout)["task_phase"] == "SUCCEEDED", done.stderr
        # names looked up, not listed: the default reader's error.pb, and the futures.pb every round asks about first
        for name, strategy in (("error.pb", "default"), ("futures.pb", "earliest"), ("futures.pb", "default")):
            (prefix / "notes").rename(prefix / name)
            command = [AGGSIM, "explain", str(prefix), "--strategy", strategy]
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
            assert (done.returncode, done.stdout) == (2, ""), (name, strategy, done)
            assert done.stderr.startswith(f"aggsim: {prefix}/{name}: a FIFO, socket or device"), done.stderr
            (prefix / name).rename(prefix / "notes")


def test_a_listed_link_that_leads_nowhere_is_this_machine_s_problem_not_a_verdict(tmp_path):
    """An object store has no symbolic links: an `error-*.pb` in a local prefix that is a loop or a dangling link is
    a broken copy. explain reported the loop as propeller's failed listing (ROUND_FAILED, "Workflow abort failed") and
    skipped the dangling one (a silent SUCCEEDED); validate said "no error files". Each is one line and exit 2."""
    for name, target, why in (
        ("loop", "error-x.pb", "Too many levels of symbolic links"),
        ("dangling", str(tmp_path / "nowhere"), "No such file or directory"),
    ):
        prefix = tmp_path / name
        prefix.mkdir()
        (prefix / "error-x.pb").symlink_to(target)
        for command in ("explain", "validate"):
            done = subprocess.run([AGGSIM, command, str(prefix)], capture_output=True, text=True)
            assert (done.returncode, done.stdout) == (2, ""), (name, command, done)
            assert done.stderr == f"aggsim: {prefix}/error-x.pb: a symbolic link that leads nowhere: {why}\n"
        # looked up by name, not listed: the default reader's error.pb
        (prefix / "error-x.pb").unlink()
        (prefix / "error.pb").symlink_to("error.pb" if name == "loop" else target)
        done = subprocess.run([AGGSIM, "explain", str(prefix), "--strategy", "default"], capture_output=True, text=True)
        assert (done.returncode, done.stdout) == (2, ""), (name, done)
        assert done.stderr == f"aggsim: {prefix}/error.pb: a symbolic link that leads nowhere: {why}\n"
        (prefix / "error.pb").rename(prefix / "error-x.pb")
        # a link to a file is read as the file (a copy made with links); links outside the listed names are not read
        (prefix / "error-x.pb").unlink()
        (prefix / "elsewhere").symlink_to(target)
        (prefix / "error-y.pb").write_bytes(error_document_bytes(code="USER:E", timestamp_ns=1_800_000_000 * 10**9))
        (prefix / "error-z.pb").symlink_to("error-y.pb")
        done = subprocess.run([AGGSIM, "explain", str(prefix), "--json"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert [Path(f["path"]).name for f in json.loads(done.stdout)["files"]] == ["error-y.pb", "error-z.pb"]


def test_a_file_name_that_is_not_utf8_is_shown_by_its_bytes_and_the_table_still_lines_up(tmp_path):
    """A key's bytes that are not UTF-8 (a local file name; Python keeps each as a lone surrogate) are escaped as
    `\\xNN` before the table measures its cells: the output stream used to escape them after the layout, which pushed
    that row's borders out of line."""
    from aggregation.documents import error_document_bytes

    prefix = os.fsencode(tmp_path)
    with open(prefix + b"/error-\xff\xfe.pb", "wb") as odd:
        odd.write(error_document_bytes(code="USER:Odd", timestamp_ns=10**18))
    (tmp_path / "error-abcd.pb").write_bytes(error_document_bytes(code="USER:Plain", timestamp_ns=10**18 + 1))
    env = {**os.environ, "COLUMNS": "120"}
    done = subprocess.run(
        [AGGSIM, "explain", str(tmp_path), "--strategy", "earliest"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0 and "error-\\xff\\xfe.pb" in done.stdout, done.stderr
    rows = [line for line in done.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert len(rows) == 6 and len({len(row) for row in rows}) == 1, rows
    assert [line for line in done.stdout.splitlines() if line.startswith("task phase")] == [
        "task phase: PERMANENT_FAILURE (error file error-\\xff\\xfe.pb: earliest timestamp)"
    ]
