"""`aggsim explain` and `aggsim validate`: the contract people and programs rely on, and bad input.

The verdicts come from the model (flyteplugins `remote_file_output_reader.go`, propeller `handler.go`
ValidateOutput and `executor.go` isEligibleForRetry); these tests pin what the CLI prints and returns.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import AGGSIM, ROOT, SCENARIOS, T0  # noqa: E402
from flyteidl.core import errors_pb2, literals_pb2

from aggregation.cli import main
from aggregation.documents import error_document_bytes


def run(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def explain_json(*args):
    result = run("explain", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # a note goes to stderr


@pytest.fixture
def prefix(tmp_path):
    def write(name, data):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    write.path = tmp_path
    return write


def test_json_has_exactly_the_documented_keys(prefix):
    prefix(
        "error-a.pb",
        error_document_bytes(code="USER:Recoverable", recoverable=True, worker="pod-a", timestamp_ns=T0 + 5),
    )
    prefix("error-b.pb", error_document_bytes(code="USER:RuntimeError", worker="pod-b", timestamp_ns=T0 + 123_456_789))
    out = explain_json(str(prefix.path), "--retries", "2")
    assert {"strategy", "files", "error", "round_error", "task_phase", "node"} <= set(out)
    assert out["strategy"] == "earliest"
    assert [f["path"] for f in out["files"]] == ["error-a.pb", "error-b.pb"]
    for f in out["files"]:
        assert {"path", "timestamp", "code", "kind", "recoverable", "worker", "selected"} <= set(f)
    assert out["files"][0]["timestamp"] == "2026-11-30T00:53:20.000000005Z"
    assert out["files"][0]["selected"] is True
    assert out["error"] == {
        "code": "USER:Recoverable",
        "message": "",
        "kind": "USER",
        "recoverable": True,
        "timestamp": "2026-11-30T00:53:20.000000005Z",
        "worker": "pod-a",
        "path": "error-a.pb",
        "source": "error file",
    }
    assert out["winning_file"] == out["error"]
    assert out["round_error"] is None
    assert out["task_phase"] == "RETRYABLE_FAILURE"
    assert out["node"] == {"decision": "RETRY", "code": None, "kind": None}


def test_explain_names_the_error_files_its_reader_never_reads(prefix):
    """flyteplugins `remote_file_output_reader.go`: the default reader HEADs and GETs `error.pb` alone, the
    earliest one lists `error*` and keeps `.pb` keys; `kfoperators/pytorch/pytorch.go` `BuildResource` makes pods
    write `error-<uuid>.pb` only with aggregation on. The verdict is the reader's; the note says what it left out."""
    prefix("error.pb", error_document_bytes(code="USER:RuntimeError", timestamp_ns=T0 + 9))
    for index in range(7):
        prefix(f"error-{index}.pb", error_document_bytes(code="USER:Recoverable", recoverable=True, timestamp_ns=T0))
    prefix("error-partial.pb.tmp", b"")
    out = explain_json(str(prefix.path), "--strategy", "default")
    assert out["error"]["code"] == "USER:RuntimeError" and out["task_phase"] == "PERMANENT_FAILURE"
    assert out["not_read"] == [f"error-{index}.pb" for index in range(7)]
    assert "only when propeller runs with aggregation on" in out["not_read_reason"]  # programs get the note too
    assert out["object_store_requests"] == 3  # HEAD futures.pb, HEAD and GET error.pb: the note's listing is not its
    text = run("explain", str(prefix.path), "--strategy", "default")
    assert text.exit_code == 0
    assert (
        "not read (the default reader reads only error.pb; pods name their files error-<uuid>.pb only when"
        in " ".join(text.output.split())
    )
    assert "error-0.pb, error-1.pb, error-2.pb, error-3.pb, error-4.pb and 2 more" in " ".join(text.output.split())
    assert "and 2 more (try --strategy earliest)" in " ".join(text.output.split())  # the hint is the CLI's own
    assert "--strategy" not in out["not_read_reason"]
    # other keys are left out too; only error-<uuid>.pb names say what the deployment runs
    other = prefix.path / "other"
    other.mkdir()
    (other / "error_old.pb").write_bytes(b"")
    text = run("explain", str(other), "--strategy", "default")
    assert "not read (the default reader reads only error.pb): error_old.pb" in " ".join(text.output.split())
    # the earliest reader reads them all, and leaves out the key that does not end in .pb
    out = explain_json(str(prefix.path), "--strategy", "earliest")
    assert out["error"]["code"] == "USER:Recoverable" and out["not_read"] == ["error-partial.pb.tmp"]
    text = run("explain", str(prefix.path), "--strategy", "earliest")
    assert "not read (the earliest reader keeps only keys ending in .pb): error-partial.pb.tmp" in " ".join(
        text.output.split()
    )
    # with nothing to leave out, no note, and the empty default read says what it did not find
    (prefix.path / "error-partial.pb.tmp").unlink()
    for index in range(7):
        (prefix.path / f"error-{index}.pb").unlink()
    out = explain_json(str(prefix.path), "--strategy", "earliest")
    assert out["not_read"] == [] and out["not_read_reason"] is None
    (prefix.path / "error.pb").unlink()
    text = run("explain", str(prefix.path), "--strategy", "default")
    assert "no error.pb (default strategy)" in " ".join(text.output.split()) and "not read" not in text.output


def test_out_of_budget_is_retries_exhausted_of_kind_user(prefix):
    """executor.go: `RetriesExhausted|<code>`, kind USER."""
    prefix("error-a.pb", error_document_bytes(code="USER:Recoverable", recoverable=True, timestamp_ns=T0))
    out = explain_json(str(prefix.path))
    assert out["node"] == {"decision": "FAIL", "code": "RetriesExhausted|USER:Recoverable", "kind": "USER"}
    out = explain_json(str(prefix.path), "--retries", "2", "--attempts", "2")
    assert out["node"]["decision"] == "FAIL"
    out = explain_json(str(prefix.path), "--retries", "2", "--attempts", "2", "--system-failures", "1")
    assert out["node"]["decision"] == "RETRY"


def test_system_budget_flags(prefix):
    prefix("error-a.pb", error_document_bytes(code="SYSTEM", recoverable=True, origin="SYSTEM", timestamp_ns=T0))
    assert explain_json(str(prefix.path), "--attempts", "2", "--system-failures", "2")["node"]["decision"] == "RETRY"
    out = explain_json(str(prefix.path), "--attempts", "2", "--system-failures", "2", "--max-system-failures", "2")
    assert out["node"] == {"decision": "FAIL", "code": "RetriesExhausted|SYSTEM", "kind": "USER"}
    assert explain_json(str(prefix.path), "--ignore-retry-cause")["node"]["decision"] == "FAIL"


def test_default_strategy_sees_only_error_pb(prefix):
    prefix("error-a.pb", error_document_bytes(timestamp_ns=T0))
    out = explain_json(str(prefix.path), "--strategy", "default")
    assert out["files"] == [] and out["error"] is None and out["task_phase"] == "SUCCEEDED"
    assert out["node"] == {"decision": "SUCCEED", "code": None, "kind": None}


def test_outputs_declared_without_outputs_pb(prefix):
    prefix("other.txt", b"")
    out = explain_json(str(prefix.path), "--outputs-declared", "--retries", "1")
    assert out["task_phase"] == "RETRYABLE_FAILURE" and out["node"]["decision"] == "RETRY"
    # handler.go ValidateOutput: no error file, outputs declared, outputs.pb missing -> OutputsNotFound
    assert out["error"]["code"] == "OutputsNotFound" and out["error"]["kind"] == "UNKNOWN"
    assert out["error"]["recoverable"] is True and out["error"]["source"] == "propeller rule"
    assert out["winning_file"] is None
    prefix("outputs.pb", literals_pb2.LiteralMap().SerializeToString())
    assert explain_json(str(prefix.path), "--outputs-declared")["task_phase"] == "SUCCEEDED"


def test_human_view_names_the_winner_and_the_rule(prefix):
    prefix("error-a.pb", error_document_bytes(code="USER:A", worker="a", timestamp_ns=T0))
    prefix("error-b.pb", error_document_bytes(code="USER:B", worker="b", timestamp_ns=T0))
    prefix("error.pb.tmp", b"")
    result = CliRunner().invoke(main, ["explain", str(prefix.path)], terminal_width=200)
    assert result.exit_code == 0
    assert "tie on timestamp, broken by listing order" in result.output
    assert "won" in result.output and "error.pb.tmp" in result.output
    assert "PERMANENT_FAILURE" in result.output


def test_explain_says_what_other_runs_may_conclude_when_drawn_names_break_a_tie(prefix):
    """flyteplugins `remote_file_output_reader.go` `earliestErrorReader`: of tied stamps the first listed wins, and a
    store lists keys in order; flytekit `entrypoint.py` `_build_error_file_name` names each per-worker file after a
    fresh uuid4, so which tied file wins is chance, run to run. The tool says what the other orders give."""
    drawn = {f"error-{digit * 32}.pb": digit for digit in "1234"}
    for name, digit in drawn.items():
        recoverable = digit in "13"  # error-111...pb lists first: a recoverable error wins here
        code = "USER:Recoverable" if recoverable else "USER:RuntimeError"
        prefix(name, error_document_bytes(code=code, recoverable=recoverable, worker=digit, timestamp_ns=T0))
    out = explain_json(str(prefix.path), "--retries", "2")
    assert out["node"]["decision"] == "RETRY"
    assert out["by_listing_order"] == [
        {
            "files": [f"error-{'2' * 32}.pb", f"error-{'4' * 32}.pb"],
            "task_phase": "PERMANENT_FAILURE",
            "node": {"decision": "FAIL", "code": "USER:RuntimeError", "kind": "USER"},
        },
        {"files": [f"error-{'3' * 32}.pb"], "task_phase": "RETRYABLE_FAILURE", "node": out["node"]},
    ]
    text = " ".join(run("explain", str(prefix.path), "--retries", "2").output.split())
    assert "the tie is chance" in text
    assert f"node FAIL USER:RuntimeError (USER), task phase PERMANENT_FAILURE, with error-{'2' * 32}.pb or" in text
    assert f"error-{'3' * 32}.pb first" not in text  # it gives the verdict shown: nothing to add


def test_a_tie_s_other_verdicts_keep_the_error_s_kind_apart(prefix):
    """`propeller.node_decision` counts a SYSTEM failure against the system budget: the same code with another kind
    is another verdict."""
    for digit, origin in zip("123", ("USER", "SYSTEM", "USER")):
        document = error_document_bytes(code="X", origin=origin, worker=digit, timestamp_ns=T0)
        prefix(f"error-{digit * 32}.pb", document)
    out = explain_json(str(prefix.path), "--retries", "2")
    assert out["node"] == {"decision": "FAIL", "code": "X", "kind": "USER"}
    assert [(group["files"], group["node"]["kind"]) for group in out["by_listing_order"]] == [
        ([f"error-{'2' * 32}.pb"], "SYSTEM"),
        ([f"error-{'3' * 32}.pb"], "USER"),
    ]
    assert "node FAIL X (SYSTEM)" in " ".join(run("explain", str(prefix.path), "--retries", "2").output.split())


@pytest.mark.parametrize(
    "names",
    [
        ("error-a.pb", "error-b.pb"),  # names a person chose keep their order
        (f"error-{'0' * 32}.pb", "error.pb"),  # the master's error.pb: `error-` lists before `error.`, always
    ],
)
def test_explain_calls_a_tie_chance_only_where_flytekit_drew_the_names(prefix, names):
    for name, recoverable in zip(names, (True, False)):
        code = "USER:Recoverable" if recoverable else "USER:RuntimeError"
        prefix(name, error_document_bytes(code=code, recoverable=recoverable, timestamp_ns=T0))
    out = explain_json(str(prefix.path), "--retries", "2")
    assert "tie on timestamp" in out["rule"] and out["by_listing_order"] == []
    assert "chance" not in run("explain", str(prefix.path), "--retries", "2").output


# --- bad input: a verdict or one clear line, never a traceback ------------------------------------


@pytest.mark.parametrize(
    "name, data, phase",
    [
        ("error-a.pb", b"\x0a\x05\x0a\x03ab", "ROUND_FAILED"),  # truncated
        ("error-a.pb", b"\xff\xfe\xfd", "ROUND_FAILED"),  # corrupt
        ("error-a.pb", b"", "RETRYABLE_FAILURE"),  # zero bytes: empty document -> ErrorFileBadFormat
        (
            "error-a.pb",
            literals_pb2.LiteralMap(literals={"k": literals_pb2.Literal()}).SerializeToString(),
            "PERMANENT_FAILURE",
        ),
        ("error-a.pb", b"\x0a\x06\x12\x04\xff\xfe\xfd\xfc", "ROUND_FAILED"),  # non-UTF-8 message
        ("error.pb.tmp", b"\xff", "SUCCEEDED"),
        ("errors-x.pb", error_document_bytes(code="USER:E", timestamp_ns=T0), "PERMANENT_FAILURE"),
        ("error-x.json", b"{}", "SUCCEEDED"),
    ],
    ids=["truncated", "corrupt", "zero-byte", "wrong-type", "non-utf8", "tmp-name", "errors-prefix", "json-name"],
)
def test_bad_files_get_the_propeller_verdict(prefix, name, data, phase):
    prefix(name, data)
    out = explain_json(str(prefix.path))
    assert out["task_phase"] == phase
    if phase == "ROUND_FAILED":
        assert out["round_error"].startswith("failed to read error file @[")
        assert out["node"] == {"decision": "FAIL", "code": "Workflow abort failed", "kind": "SYSTEM"}


def test_a_round_that_fails_with_max_workflow_retries_minus_one_waits_for_ever(prefix, tmp_path):
    """flytepropeller v1.16.8 `controller/handler.go`: the workflow aborts once FailedAttempts > uint32(limit); -1 is
    uint32's largest, which a uint32 count never exceeds, so the failing round is retried for ever (docs section 6)."""
    prefix("error.pb", b"\x0a\x05\x0a\x03")  # a truncated ErrorDocument: every round fails to read it
    config = tmp_path / "config.yaml"
    config.write_text("propeller:\n  max-workflow-retries: -1\n")
    out = explain_json(str(prefix.path), "--propeller-config", str(config))
    assert out["task_phase"] == "ROUND_FAILED" and out["node"] == {"decision": "WAIT", "code": None, "kind": None}
    shown = subprocess.run(
        [AGGSIM, "explain", str(prefix.path), "--propeller-config", str(config)], capture_output=True, text=True
    )
    assert "node: WAIT (every round fails alike, for ever: max-workflow-retries is uint32's largest" in " ".join(
        shown.stdout.split()
    )
    assert "abort" not in shown.stdout
    # the wrap is faithful, and said: a setting past a uint32 (or below 0) is held as another number
    assert shown.stderr == (
        f"aggsim: note: {config}: max-workflow-retries -1 is no uint32: propeller compares uint32(-1) = 4,294,967,295 "
        "(controller/handler.go TryMutateWorkflow)\n"
    )
    config.write_text("propeller:\n  max-workflow-retries: 4294967296\n")  # fits Go's int; its low 32 bits are 0
    out = explain_json(str(prefix.path), "--propeller-config", str(config))
    assert out["node"] == {"decision": "FAIL", "code": "Workflow abort failed", "kind": "SYSTEM"}
    shown = subprocess.run(
        [AGGSIM, "explain", str(prefix.path), "--propeller-config", str(config)], capture_output=True, text=True
    )
    assert "max-workflow-retries 4294967296 is no uint32: propeller compares uint32(4294967296) = 0" in shown.stderr


def test_oversized_file_fails_the_round(prefix):
    prefix("error-a.pb", error_document_bytes(message="x" * (2 * 1024 * 1024), timestamp_ns=T0))
    out = explain_json(str(prefix.path))
    assert out["task_phase"] == "ROUND_FAILED" and "is too large" in out["round_error"]


def test_directory_named_like_an_error_file(prefix):
    (prefix.path / "error-x.pb").mkdir()
    (prefix.path / "error-x.pb" / "inner").write_bytes(b"junk")
    out = explain_json(str(prefix.path))
    assert out["files"] == [] and out["task_phase"] == "SUCCEEDED"


def test_ten_thousand_files(prefix):
    for i in range(10_000):
        prefix(f"error-{i:05d}.pb", error_document_bytes(worker=str(i), timestamp_ns=T0 + (i * 37) % 10_000))
    out = explain_json(str(prefix.path))
    assert len(out["files"]) == 10_000
    assert out["error"]["worker"] == "0"


@pytest.mark.parametrize(
    "args, message",
    [
        (["explain", "/nonexistent/prefix"], "no such file or directory"),
        (["explain", str(Path(__file__))], "a file, not an output prefix"),
        (["explain", "nosuchfs://b/p"], "no filesystem"),
        (["explain", ".", "--strategy", "latest"], "Invalid value for '--strategy'"),
        (["explain", ".", "--retries", "-1"], "Invalid value for '--retries'"),
        (["explain", ".", "--attempts", "1", "--system-failures", "2"], "cannot exceed"),
        (["validate", "/nonexistent/file.pb"], "no such file or directory"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args, message):
    result = subprocess.run([AGGSIM, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    if not message.startswith("Invalid value"):
        assert len(result.stderr.strip().splitlines()) == 1


def test_missing_s3_filesystem_is_a_one_line_error(tmp_path):
    """A filesystem package that is not installed: exit 2, one line (s3fs hidden from this interpreter)."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 's3fs':\n"
        "            raise ImportError('s3fs is not installed')\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [AGGSIM, "explain", "s3://bucket/prefix"], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 2, result.stderr
    assert "no filesystem for 's3'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None, reason="root needs setpriv to obey modes")
def test_a_copy_this_machine_may_not_read_is_no_verdict(tmp_path):
    """This machine's permissions on its copy of the prefix say nothing of propeller's credentials: one line, exit 2,
    as a remote store's access denied (it used to be a ROUND_FAILED verdict, "Workflow abort failed"); `validate` of
    such a FILE exits 2 too, as its help says of a path it cannot open."""
    (tmp_path / "error-a.pb").write_bytes(error_document_bytes(timestamp_ns=T0))
    (tmp_path / "error-a.pb").chmod(0)
    drop = "-dac_override,-dac_read_search"  # root without these capabilities obeys file modes
    as_user = ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", AGGSIM] if os.geteuid() == 0 else [AGGSIM]
    for args in (["explain", str(tmp_path), "--json"], ["validate", str(tmp_path / "error-a.pb")]):
        result = subprocess.run([*as_user, *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and result.stdout == "", result
        [line] = result.stderr.splitlines()
        assert "access denied (Permission denied)" in line
    (tmp_path / "error-a.pb").chmod(0o644)
    tmp_path.chmod(0)
    listing = subprocess.run([*as_user, "explain", str(tmp_path)], capture_output=True, text=True, timeout=60)
    tmp_path.chmod(0o755)
    # propeller's first request is the HEAD of futures.pb (`invokePlugin`): this machine may not even look it up
    assert listing.returncode == 2 and "looking up futures.pb: access denied" in listing.stderr


# --- validate ---------------------------------------------------------------------------------------


def test_validate_passes_what_the_plugin_writes_and_flags_each_problem(prefix):
    good = prefix(
        "error-a.pb",
        error_document_bytes(code="USER:Recoverable", message="m", recoverable=True, timestamp_ns=T0, worker="w"),
    )
    prefix("error-b.pb", error_document_bytes(code="USER:X", message="m", origin="SYSTEM"))
    prefix("error-c.pb", errors_pb2.ErrorDocument().SerializeToString())
    prefix("error.pb.tmp", error_document_bytes(code="USER:X", message="m", timestamp_ns=T0))
    prefix(
        "error-big.pb",
        error_document_bytes(code="USER:X", message="x" * (2 * 1024 * 1024), timestamp_ns=T0, worker="w"),
    )

    assert run("validate", str(good)).exit_code == 0
    result = run("validate", str(prefix.path), "--json")
    assert result.exit_code == 1
    report = {Path(f["path"]).name: {x["check"] for x in f["findings"]} for f in json.loads(result.output)["files"]}
    assert report == {
        "error-a.pb": set(),
        "error-b.pb": {"timestamp", "worker", "origin"},
        "error-c.pb": {"error"},
        "error.pb.tmp": {"name"},
        "error-big.pb": {"size"},
    }
    text = run("validate", str(prefix.path)).output.splitlines()
    assert any(line.endswith("error-a.pb: ok") for line in text)
    assert all(": " in line for line in text)


@pytest.mark.parametrize(
    "seconds, nanos, finding",
    [
        (1_764_477_731, 0, None),
        (253_402_300_799, 999_999_999, None),  # 9999-12-31T23:59:59.999999999Z: valid, and later than any real one
        (1_764_477_731_000, 0, "after year 9999 (milliseconds written as seconds?): it orders after every real stamp"),
        (
            -62_135_596_801,
            0,
            "before year 1: it orders before every real stamp, so it wins the earliest pick over any of them",
        ),
        # past int64 once Go adds the seconds from year 1 to 1970 (`Time.After` on `AsTime()`): it wraps and wins
        (2**63 - 1, 0, "it orders before every real stamp (Go's int64 time arithmetic wraps it round"),
        (1_764_477_731, -1, "nanos outside [0, 1e9)"),
        (1_764_477_731, 1_000_000_000, "nanos outside [0, 1e9)"),
        # valid Timestamps no failing task has: Go's zero time, Python's empty Timestamp(), a duration
        (-62_135_596_800, 0, "`timestamp` 0001-01-01T00:00:00.000000000Z is before 2000"),
        (0, 0, "`timestamp` 1970-01-01T00:00:00.000000000Z is before 2000"),
        (5, 0, "before 2000 (an unset clock, Go's zero time or a duration written as a time?): it beats every real"),
    ],
)
def test_validate_flags_a_timestamp_that_wins_or_loses_the_earliest_pick_wrongly(prefix, seconds, nanos, finding):
    """protobuf `timestamp.proto` (protobuf-go `timestamppb.CheckValid`): years 1-9999, nanos in [0, 1e9). flytekit
    never writes another, while propeller's earliest reader orders any (`AsTime`, `Time.After`; `gotime.order_key`):
    such a file wins or loses the earliest pick wrongly, and the finding says which, as `explain` picks it. A valid
    stamp before 2000 wins every pick too."""
    document = errors_pb2.ErrorDocument.FromString(
        error_document_bytes(code="USER:X", message="m", timestamp_ns=T0, worker="w")
    )
    document.error.timestamp.seconds, document.error.timestamp.nanos = seconds, nanos
    path = prefix("error-a.pb", document.SerializeToString())
    result = run("validate", str(path), "--json")
    findings = json.loads(result.output)["files"][0]["findings"]
    assert (result.exit_code, [f["check"] for f in findings]) == ((0, []) if finding is None else (1, ["timestamp"]))
    if finding is not None:
        assert finding in findings[0]["message"]
        # what it says about the earliest pick is what the reader does next to a real file
        prefix("error-b.pb", error_document_bytes(code="USER:Y", message="m", timestamp_ns=T0, worker="v"))
        winner = explain_json(str(prefix.path))["error"]["worker"]
        if "wins every" in finding or "beats every" in finding:
            assert winner == "w"
        elif "loses every" in finding:
            assert winner == "v"


def test_validate_takes_the_size_limit_from_the_flag_or_the_deployment(prefix):
    """The payload limit is `storage.limits.maxDownloadMBs` (flyteplugins `getMaxPayloadSize`), as for `explain`:
    a 3 MiB file fails the default 2 MiB and passes the example deployment's 10; the flag wins over the file."""
    path = prefix(
        "error-a.pb", error_document_bytes(code="USER:X", message="m" * (3 * 2**20), timestamp_ns=T0, worker="w")
    )
    config = str(Path(__file__).parents[1] / "examples" / "propeller-config.yaml")
    failed = run("validate", str(path))
    assert failed.exit_code == 1 and "over the 2097152-byte payload limit" in failed.output
    assert run("validate", str(prefix.path), "--propeller-config", config).exit_code == 0
    assert run("validate", str(path), "--max-download-mb", "4").exit_code == 0
    overridden = run("validate", str(prefix.path), "--propeller-config", config, "--max-download-mb", "3")
    assert overridden.exit_code == 1 and "over the 3145728-byte payload limit" in overridden.output
    # the explain of the same files agrees
    assert explain_json(str(prefix.path), "--propeller-config", config)["task_phase"] == "PERMANENT_FAILURE"
    assert explain_json(str(prefix.path), "--max-download-mb", "3")["task_phase"] == "ROUND_FAILED"


def test_version_names_ours_and_the_upstream_releases_it_models():
    result = subprocess.run([AGGSIM, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for text in ("aggsim 0.", "v1.16.8", "flytekit 1.16.31", "torch 2.13", "training-operator v1.8.0"):
        assert text in result.stdout


def test_validate_fails_on_a_prefix_without_error_files_unless_allowed(tmp_path):
    """An empty prefix is exactly what upstream's plugin leaves after a preemption: in CI that must not pass."""
    (tmp_path / "outputs.pb").write_bytes(b"")
    empty = run("validate", str(tmp_path))
    assert empty.exit_code == 1 and "no error files found" in empty.output
    assert run("validate", str(tmp_path), "--allow-empty").exit_code == 0
    # the JSON says what the exit code says
    as_json = run("validate", str(tmp_path), "--json")
    assert as_json.exit_code == 1
    assert json.loads(as_json.output) == {"files": [], "not_opened": [], "no_error_files": [str(tmp_path)], "ok": False}
    allowed = run("validate", str(tmp_path), "--json", "--allow-empty")
    assert allowed.exit_code == 0 and json.loads(allowed.output)["ok"] is True


def test_validate_fails_when_one_of_several_prefixes_has_no_error_files(tmp_path):
    """One pod's prefix empty beside its sibling's files is what upstream leaves after a preemption too: it used to
    pass (exit 0, `"ok": true`) as long as some other path held a file. The empty one is named."""
    empty, full = tmp_path / "empty", ROOT / "examples" / "prefixes" / "preempted_pair"
    empty.mkdir()
    (empty / "outputs.pb").write_bytes(b"")
    both = run("validate", str(empty), str(full))
    assert both.exit_code == 1
    assert f"{empty}: no error files found (pass --allow-empty if that is expected)" in both.output.splitlines()
    answer = json.loads(run("validate", str(full), str(empty), "--json").output)
    assert (answer["ok"], answer["no_error_files"], bool(answer["files"])) == (False, [str(empty)], True)
    assert run("validate", str(empty), str(full), "--allow-empty").exit_code == 0


def test_validate_of_a_path_that_cannot_be_opened_still_prints_the_other_paths_findings(prefix, tmp_path):
    """Linters report every path they can read: a missing second path used to print its one line and drop the
    first path's findings. Exit 2 (a path could not be opened) all the same, and --json lists it."""
    missing = str(tmp_path / "nowhere")
    prefix("run/error-a.pb", error_document_bytes(code="USER:X", worker="w", timestamp_ns=5))  # 1970: a finding
    prefix = str(prefix.path / "run")
    alone = subprocess.run([AGGSIM, "validate", prefix], capture_output=True, text=True)
    both = subprocess.run([AGGSIM, "validate", prefix, missing], capture_output=True, text=True)
    assert alone.returncode == 1 and alone.stdout  # the fixture's prefix has findings
    assert (both.returncode, both.stdout) == (2, alone.stdout)
    assert both.stderr == f"aggsim: {missing}: no such file or directory\n"
    as_json = subprocess.run([AGGSIM, "validate", missing, prefix, "--json"], capture_output=True, text=True)
    answer = json.loads(as_json.stdout)
    assert as_json.returncode == 2 and answer["ok"] is False and answer["files"]
    assert answer["not_opened"] == [f"{missing}: no such file or directory"]


def test_validate_does_not_read_a_file_over_the_limit(prefix):
    """Propeller's round fails at the HEAD (`validatePayloadSize`) before it reads: an oversized file's findings
    are its size (and name), never its content, and it is not read (a sparse 3 GiB file answers at once)."""
    path = prefix("error-big.pb", b"")
    os.truncate(path, 3 * 2**30)
    for target in (path, prefix.path):
        result = run("validate", str(target))
        assert result.exit_code == 1
        assert result.output.splitlines() == [
            f"{path}: size: {3 * 2**30} bytes is over the 2097152-byte payload limit: propeller's round fails"
        ]


def test_validate_prints_a_name_with_control_characters_escaped_on_one_line(tmp_path):
    (tmp_path / "error-\x1b[31mRED\n.pb").write_bytes(b"")
    result = subprocess.run([AGGSIM, "validate", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 1 and "\x1b" not in result.stdout
    lines = result.stdout.splitlines()
    assert lines and all("error-\\x1b[31mRED\\x0a.pb: " in line for line in lines)


@pytest.mark.parametrize("command", ["explain", "validate"])
def test_a_memory_store_from_the_command_line_is_refused_not_read_as_empty(command):
    """`memory://` lives in one process: a new aggsim process would find any path empty and give it a verdict."""
    result = subprocess.run([AGGSIM, command, "memory://bucket/run/0"], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1 and "a memory:// store lives in one process" in result.stderr


def test_simulate_expect_exits_1_when_the_verdict_differs():
    path = str(SCENARIOS / "preemption_during_training.textproto")
    assert run("simulate", path, "--plugin", "upstream", "--expect", "SUCCEEDED_SILENTLY").exit_code == 0
    wrong = run("simulate", path, "--plugin", "upstream", "--expect", "RETRIED_THEN_SUCCEEDED")
    assert (
        wrong.exit_code == 1 and "expected final phase RETRIED_THEN_SUCCEEDED, got SUCCEEDED_SILENTLY" in wrong.output
    )
    # in any case, as prove's claims read a phase: `--expect succeeded_silently` was refused as not a choice
    assert run("simulate", path, "--plugin", "upstream", "--expect", "succeeded_silently").exit_code == 0
    lower = run("simulate", path, "--plugin", "upstream", "--expect", "retried_then_succeeded")
    assert lower.exit_code == 1 and "expected final phase RETRIED_THEN_SUCCEEDED, got" in lower.output


def test_shipped_scenarios_are_addressed_by_name_from_anywhere(tmp_path):
    by_name = subprocess.run(
        [AGGSIM, "simulate", "preemption_during_training", "--json"], capture_output=True, text=True, cwd=tmp_path
    )
    assert by_name.returncode == 0, by_name.stderr
    assert json.loads(by_name.stdout)["scenario"] == "preemption_during_training"
    unknown = subprocess.run([AGGSIM, "simulate", "no_such_scenario"], capture_output=True, text=True, cwd=tmp_path)
    assert unknown.returncode == 2
    assert "no shipped scenario of that name" in unknown.stderr and "preemption_during_training" in unknown.stderr


def test_json_times_are_rounded_to_the_nanosecond():
    out = run("simulate", str(SCENARIOS / "preemption_during_training.textproto"), "--json").output
    times = [float(t) for t in re.findall(r'"(?:at_seconds|uploaded_at|exited_at|observed_at)": ([0-9.e+-]+)', out)]
    assert times and all(t == round(t, 9) and len(repr(t).split(".")[-1]) <= 9 for t in times)


def test_simulate_json_has_every_key_in_every_record_and_reads_back_as_the_record():
    """proto3's JSON mapping leaves a field at its default out: `exit_code` of a pod that exited 0,
    `error_aggregation` off, `preempted` false came and went between runs, and `pod["exit_code"]` raised KeyError.
    Every field is written now (null where a message or an `optional` field is unset), in the .proto's order, and
    `json_format.Parse` reads the JSON back as the very record."""
    from google.protobuf import json_format

    from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
    from aggregation.record import execution_to_proto
    from aggregation.scenario import load_scenario
    from aggregation.simulate import simulate

    def keys(descriptor):
        return [field.name for field in descriptor.fields]

    exit_codes, preempted = set(), set()
    for path in sorted(SCENARIOS.glob("*.textproto")):
        for plugin, flag in (("upstream", "--no-aggregation"), ("recoverable", "--aggregation")):
            out = json.loads(run("simulate", str(path), "--plugin", plugin, flag, "--json").output)
            assert list(out) == keys(pb.Execution.DESCRIPTOR)
            for attempt in out["attempts"]:
                assert list(attempt) == keys(pb.AttemptRecord.DESCRIPTOR)
                for record, message in (
                    ("pods", pb.PodOutcome),
                    ("timeline", pb.TimelineEntry),
                    ("files", pb.UploadedFile),
                ):
                    assert all(list(item) == keys(message.DESCRIPTOR) for item in attempt[record]), (path, record)
                exit_codes |= {pod["exit_code"] for pod in attempt["pods"]}
                preempted.add(attempt["preempted"])
            spec = load_scenario(str(path), plugin).with_aggregation(flag == "--aggregation")
            record = execution_to_proto(simulate(spec))
            assert json_format.Parse(json.dumps(out), pb.Execution()) == record
    assert 0 in exit_codes and preempted == {False, True}  # the defaults that used to be left out are there


@pytest.mark.parametrize("columns", ["80", "200"])
def test_explain_shows_every_file_code_and_worker_in_full_at_any_width(tmp_path, columns):
    """In an 80-column terminal or a CI log the columns that say which file won must not be cut."""
    long_worker = "train-worker-with-a-rather-long-name-0"
    (tmp_path / "error-3f1c2a9e5b7d4c6a8e0f1b2c3d4e5f60.pb").write_bytes(
        error_document_bytes(code="USER:Recoverable", recoverable=True, timestamp_ns=T0, worker=long_worker)
    )
    (tmp_path / "error-a07e9d1c3b5f4e2a8c6d0b1a2f3e4d5c.pb").write_bytes(
        error_document_bytes(code="USER:[red]Boom\x1b[2J", timestamp_ns=T0 + 5, worker="w1")
    )
    env = {**os.environ, "COLUMNS": columns}
    result = subprocess.run([AGGSIM, "explain", str(tmp_path)], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    for text in (
        "error-3f1c2a9e5b7d4c6a8e0f1b2c3d4e5f60.pb",
        "error-a07e9d1c3b5f4e2a8c6d0b1a2f3e4d5c.pb",
        long_worker,
        "USER:Recoverable",
        "USER:[red]Boom\\x1b[2J",
        "2026-11-30T",
    ):
        assert text in result.stdout, (columns, text)
    assert "…" not in result.stdout and "\x1b" not in result.stdout


def test_explain_json_in_a_pipe_is_one_line_and_loads_neither_rich_nor_the_simulator(tmp_path):
    """`aggsim explain --json` in a shell pipeline or CI: one JSON line on stdout, and the command pays only for
    the readers it runs (rich and the simulator are imported by the commands that render or simulate)."""
    document = error_document_bytes(code="USER:RuntimeError", worker="pod-a", timestamp_ns=T0)
    (tmp_path / "error-a.pb").write_bytes(document)
    probe = (
        "import sys\n"
        "from aggregation.cli import main\n"
        "try:\n"
        "    main(['explain', sys.argv[1], '--json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('rich', 'aggregation.pods', 'aggregation.simulate', 'localjob') if m in sys.modules]\n"
        "print('loaded:', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and json.loads(done.stdout)["error"]["worker"] == "pod-a"
    assert "loaded: []" in done.stderr


def test_the_file_urls_explain_prints_can_be_given_back(tmp_path):
    """docs/propeller-semantics.md section 4: the earliest reader names a listed file as Go's `net/url` escapes it
    (`file:///.../error%20%231.pb`); such a URL, and RFC 8089's other forms (`file://localhost/`, `file:/`, a scheme in
    upper case), name the same local path: they used to be "no such file or directory"."""
    prefix = tmp_path / "p x"
    prefix.mkdir()
    (prefix / "error #1.pb").write_bytes(b"")  # no `error`: ErrorFileBadFormat names the file by its listed URL
    printed = json.loads(run("explain", f"file://{prefix}", "--json").output)["error"]["message"]
    url = printed[printed.index("[") + 1 : -1]
    assert url == f"file://{tmp_path}/p%20x/error%20%231.pb".replace(" ", "%20")
    given_back = url.rsplit("/", 1)[0]
    for form in (given_back, given_back.replace("file://", "file://localhost"), given_back.replace("file://", "file:"),
                 given_back.replace("file://", "FILE://")):  # fmt: skip
        result = run("explain", form, "--json")
        assert result.exit_code == 0 and json.loads(result.output)["error"]["message"] == printed, (form, result.output)
    assert run("validate", url).exit_code == 1  # the file itself, found and linted
    other_host = run("explain", "file://elsewhere/tmp")
    assert (
        other_host.exit_code == 2 and "a file URL on another host (elsewhere) names no local path" in other_host.output
    )
    # a URL with no path (an empty variable in `file://$PREFIX`) read the current directory and gave its verdict
    cwd = os.getcwd()
    os.chdir(prefix)
    try:
        for command in ("explain", "validate"):
            empty = run(command, "file://")
            assert empty.exit_code == 2 and "file://: a file URL with no path names no location" in empty.output
        relative = run("explain", "file:p x")  # a local name with a colon, and none here: said how a URL is written
        assert relative.exit_code == 2 and "a file URL's path is absolute: file:///path" in relative.output
        for url in ("file:///nowhere/at/all", "file:/nowhere", "FILE:///nowhere"):  # absolute already: no hint
            missing = run("explain", url)
            assert missing.exit_code == 2 and missing.stderr == f"aggsim: {url}: no such file or directory\n"
    finally:
        os.chdir(cwd)


def test_a_file_url_is_read_whole_or_refused_never_cut_short(tmp_path):
    """A '#' or '?' ends a URL's path (RFC 3986): `file:///d/run#2` used to read `/d/run` and give its verdict. And
    `file:x` is no URL of a path but a local name with a colon: `validate` and `explain` read it as a path alike."""
    (tmp_path / "run#2").mkdir()
    cut = run("explain", f"file://{tmp_path}/run#2")
    assert cut.exit_code == 2 and "a '#' or '?' ends a file URL's path: write them as %23 and %3F" in cut.output
    escaped = run("explain", f"file://{tmp_path}/run%232", "--json")
    assert escaped.exit_code == 0 and json.loads(escaped.output)["task_phase"] == "SUCCEEDED"
    named = tmp_path / "file:y"
    named.write_bytes(error_document_bytes(code="USER:X", message="m", timestamp_ns=T0))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        linted = run("validate", "file:y")  # linted (its name is no error file's), not refused as "a file URL"
        assert linted.exit_code == 1 and "file:y: name:" in linted.output, linted.output
    finally:
        os.chdir(cwd)


def test_a_file_the_round_cannot_read_shows_no_worker(tmp_path):
    """The Go error of a file that does not decode is the round error, printed once under its name, never in the
    `worker` column (where it read as a pod's name)."""
    (tmp_path / "error-a.pb").write_bytes(b"\x0a\x09\x0a\x03ab")  # truncated
    for width in ("200", "60"):
        out = subprocess.run([AGGSIM, "explain", str(tmp_path)], capture_output=True, text=True,
                             env={**os.environ, "COLUMNS": width}).stdout  # fmt: skip
        said = " ".join(out.split())  # a narrow terminal wraps the round error's line
        assert "worker: failed" not in out and said.count("cannot parse invalid wire-format data") == 1, out


def test_explain_refuses_a_dynamic_task_s_prefix_in_one_line(prefix):
    """flytepropeller v1.16.8 `nodes/task/handler.go` `invokePlugin`: on the plugin's success the task handler HEADs
    `futures.pb` before `ValidateOutput` (`future_file_reader.go` `FutureFileReader.Exists`); one there makes the
    node a dynamic task's parent, which runs its sub-workflow instead of reading the task's errors."""
    prefix("error.pb", error_document_bytes(code="USER:RuntimeError", timestamp_ns=T0))
    prefix("futures.pb", b"")
    for args in ((), ("--json",), ("--strategy", "earliest")):
        result = run("explain", str(prefix.path), *args)
        assert result.exit_code == 2, result.output
        [line] = result.output.strip().splitlines()
        assert "futures.pb: a dynamic task's sub-workflow" in line and "does not play" in line


def test_propeller_s_requests_start_with_the_futures_head_and_a_success_makes_a_second(prefix):
    """`invokePlugin` HEADs `futures.pb` before the reader; when the task succeeds, `dynamic/handler.go`
    `handleParentNode` HEADs it again. A genuine error: the futures HEAD, then the default reader's HEAD and GET of
    error.pb. No error file: the futures HEAD, the reader's HEAD of error.pb, the futures HEAD again."""
    clean = explain_json(str(prefix.path), "--strategy", "default")
    assert clean["task_phase"] == "SUCCEEDED" and clean["object_store_requests"] == 3
    prefix("error.pb", error_document_bytes(code="USER:RuntimeError", timestamp_ns=T0))
    failed = explain_json(str(prefix.path), "--strategy", "default")
    assert failed["task_phase"] == "PERMANENT_FAILURE" and failed["object_store_requests"] == 3
