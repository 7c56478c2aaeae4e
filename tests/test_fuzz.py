"""Fuzz: arbitrary argv for every command, arbitrary scenario field values within the schema's types, arbitrary
prefixes. Each run ends with exit 0, 1 or 2; a failure says so in at most one line on stderr; `--json` output
is valid JSON; never a traceback or an internal error; and it ends (pytest-timeout bounds each test).

Commands that start real pods (`run-local`, `calibrate`, `demo --real`) are fuzzed through their option
parsing only: every generated argv for them carries an option no command has, so no pod starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SCENARIOS
from google.protobuf import text_format
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aggregation.cli import main
from aggregation.proto.aggsim.v1 import scenario_pb2 as pb

pytestmark = pytest.mark.timeout(600)

FUZZ = settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "prefixes"

WORDS = [
    "--json", "--retries", "--attempts", "--strategy", "earliest", "default", "--plugin", "upstream", "seed-pr",
    "recoverable", "--aggregation", "--no-aggregation", "--vary", "--samples", "--seed", "--expect", "--out",
    "--plot", "--allow-empty", "--timeout", "--max-download-mb", "--outputs-declared", "--system-failures",
    "--max-system-failures", "--ignore-retry-cause", "--propeller-config", "-h", "=", ":", ",", "0", "1", "-1",
    "2.5", "nan", "inf", "1e309", "4294967296", "", " ", "timings.upload_seconds=0:1:0.5", "job.elastic=true",
    "attempts[0].events[0].pod=a", "task=1", "plugin=UPSTREAM", "preemption_during_training",
    "sibling_user_error_cleanup", str(SCENARIOS / "preemption_during_training.textproto"), "/nonexistent",
    str(EXAMPLES / "preempted_pair"), "/dev/null", "SUCCEEDED", "x.csv", "x.jsonl", "x.png", "x.xyz",
]
TOKENS = st.one_of(st.sampled_from(WORDS), st.text(max_size=12))


def invoke(args: list[str], cwd: Path):
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)  # --out, --plot and relative paths land in the test's own directory
        result = CliRunner().invoke(main, args)
    return result


def assert_contract(result, args) -> None:
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
    assert "Traceback" not in result.output and "internal error" not in result.output, (args, result.output)
    if result.exit_code != 0:
        assert len(result.stderr.strip().splitlines()) <= 1, (args, result.stderr)
    if result.exit_code == 0 and "--json" in args and "-h" not in args:
        json.loads(result.stdout)


@FUZZ
@given(st.sampled_from(["explain", "validate", "simulate", "sweep"]), st.lists(TOKENS, max_size=6))
@example(command="explain", tokens=["--propeller-config", "\x00"])  # os.stat raised ValueError: an internal error
@example(command="sweep", tokens=["--timings-profile", "a\x00b"])
def test_any_argv_for_the_model_commands(tmp_path, command, tokens):
    args = [command, *tokens]
    if command == "sweep":
        args += ["--samples", "3"]  # a valid sweep of the whole default space takes seconds; the contract is the same
    assert_contract(invoke(args, tmp_path), args)


@FUZZ
@given(st.sampled_from(["run-local", "calibrate", "demo"]), st.lists(TOKENS, max_size=5))
@example(command="run-local", tokens=["-h", "--plugin"])  # help, with --plugin taking the unknown option as a value
def test_any_argv_for_the_commands_that_start_pods_is_parsed_safely(tmp_path, command, tokens):
    args = [command, *tokens, "--no-such-option-anywhere"]
    result = invoke(args, tmp_path)
    assert_contract(result, args)
    if result.exit_code == 0:
        # click's help is eager: `-h` ends the parse with the usage, before the unknown option's error (an option
        # before it may take the unknown option as its value); either way nothing started
        assert {"-h", "--help"} & set(tokens) and result.stdout.startswith("Usage:"), result.stdout
    else:
        assert result.exit_code == 2


# --- scenarios: any value of every field's type --------------------------------------------------------------------

POD_NAMES = st.sampled_from(["a", "b", "c", "", "0", "[red]x", "p\x1b[2J"])


def _scalar(field):
    kind = field.type
    if kind == field.TYPE_STRING:
        return POD_NAMES if field.name in ("pod", "pods") else st.text(max_size=20)
    if kind == field.TYPE_BOOL:
        return st.booleans()
    if kind in (field.TYPE_DOUBLE, field.TYPE_FLOAT):
        return st.one_of(st.floats(), st.floats(min_value=0, max_value=120), st.sampled_from([0.0, 0.05, 1.0, 30.0]))
    if kind == field.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), st.integers(-5, 99))
    if kind == field.TYPE_UINT32:
        return st.one_of(st.integers(0, 5), st.integers(0, 2**32 - 1))
    if kind == field.TYPE_UINT64:
        return st.integers(0, 2**64 - 1)
    if kind == field.TYPE_INT32:
        return st.integers(-(2**31), 2**31 - 1)
    if kind == field.TYPE_INT64:
        return st.one_of(st.integers(-3, 5), st.integers(-(2**63), 2**63 - 1))
    raise AssertionError(f"no strategy for {field.full_name}")


@st.composite
def messages(draw, descriptor, depth=0):
    """A message of `descriptor` with a random subset of its fields set to any value of their type."""
    message = pb.Scenario() if descriptor is pb.Scenario.DESCRIPTOR else None
    if message is None:
        from google.protobuf import message_factory

        message = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if not draw(st.booleans()):
            continue
        if field.type == field.TYPE_MESSAGE:
            if depth >= 4:
                continue
            if field.is_repeated:
                for _ in range(draw(st.integers(0, 2))):
                    getattr(message, field.name).add().CopyFrom(draw(messages(field.message_type, depth + 1)))
            else:
                getattr(message, field.name).CopyFrom(draw(messages(field.message_type, depth + 1)))
        elif field.is_repeated:
            getattr(message, field.name).extend(draw(st.lists(_scalar(field), max_size=3)))
        else:
            setattr(message, field.name, draw(_scalar(field)))
    return message


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages(pb.Scenario.DESCRIPTOR), st.booleans())
def test_any_scenario_is_simulated_or_refused_in_one_line(tmp_path, scenario, as_json):
    path = tmp_path / "fuzzed.textproto"
    path.write_text(text_format.MessageToString(scenario), encoding="utf-8")
    args = ["simulate", str(path)] + (["--json"] if as_json else [])
    result = invoke(args, tmp_path)
    assert_contract(result, args)
    assert result.exit_code in (0, 2)


@FUZZ
@given(st.lists(st.tuples(st.text(min_size=1, max_size=12), st.binary(max_size=64)), max_size=5), st.booleans())
def test_any_prefix_is_explained_or_refused(tmp_path, files, as_json):
    prefix = tmp_path / "prefix"
    prefix.mkdir(exist_ok=True)
    for name, data in files:
        safe = name.replace("/", "_").replace("\x00", "_")
        if safe in (".", ".."):
            continue
        try:
            (prefix / ("error" + safe)).write_bytes(data)
        except OSError:
            continue
    for command in (["explain", str(prefix)], ["validate", str(prefix)]):
        args = command + (["--json"] if as_json else [])
        assert_contract(invoke(args, tmp_path), args)
