"""pytest plugin: assert what propeller concludes from error documents, in a few lines.

Registered through the `pytest11` entry point as `aggsim`, so installing flyte-aggsim makes these
available in any test suite:

    def test_preemption_beats_the_consequence(error_prefix):
        error_prefix.add("train-worker-1", recoverable=True, code="USER:Recoverable", offset=0.0)
        error_prefix.add("train-worker-0", code="USER:RuntimeError", offset=0.05)
        assert_verdict(error_prefix.explain(retries=2), worker="train-worker-1", decision="RETRY")

`assert_verdict`'s failure message shows every candidate in listing order, which one won and the rule
that decided. Where the winner's stamp ties another file's and both carry the names flytekit draws at random
(`error-<uuid4 hex>.pb`, as `add` names them), the expectations must hold whichever the store lists first.
`assert_valid_error_files` runs the checks of `aggsim validate` on files your own task code wrote.
`assert_scenario` simulates a scenario and checks its final phase.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path, PurePosixPath
from typing import Optional, Sequence, Union

import pytest

from aggregation.documents import error_document_bytes
from aggregation.explain import Explanation, explain_prefix, rfc3339_nanos
from aggregation.gotime import NANOS
from aggregation.kinds import FinalPhase, PluginVariant
from aggregation.printable import printable
from aggregation.propeller import Decision, NodeState, PropellerConfig, TaskPhase
from aggregation.readers import CANONICAL_ERROR_FILE, DEFAULT
from aggregation.replica_env import is_per_worker_file, per_worker_file_name
from aggregation.validate import EARLIEST_PLAUSIBLE_SECONDS, TIMESTAMP_SECONDS, check_document, validate_target

ORIGINS = ("USER", "SYSTEM")  # what flytekit's entrypoint writes as `origin`

#: The instant offsets are measured from (any fixed time works; this one reads well).
BASE_TIME_NS = 1_796_000_000 * 10**9

__all__ = ["ErrorPrefix", "assert_verdict", "assert_valid_error_files", "assert_scenario", "explain_candidates"]


def _offset_stamp(offset) -> int:
    """The stamp `offset` seconds after `BASE_TIME_NS`, from 2000 (`validate.EARLIEST_PLAUSIBLE_SECONDS`) to the end
    of year 9999 (the last a Timestamp holds): the stamps a failing flytekit task writes, to the nanosecond as
    given (flytekit's own step by about 238 ns, `aggregation.stamps`: a test may set two closer than it could)."""
    if isinstance(offset, bool) or not isinstance(offset, (int, float)):
        raise TypeError(f"ErrorPrefix.add: offset must be a finite number of seconds or None, got {offset!r}")
    low, high = EARLIEST_PLAUSIBLE_SECONDS * NANOS, (TIMESTAMP_SECONDS[1] + 1) * NANOS - 1
    earliest, latest = (low - BASE_TIME_NS) / NANOS, (high - BASE_TIME_NS) / NANOS
    stamp = None
    if (isinstance(offset, int) or math.isfinite(offset)) and earliest <= offset <= latest:  # no float past it
        stamp = BASE_TIME_NS + round(offset * NANOS)
    if stamp is None or not low <= stamp <= high:
        raise ValueError(
            f"ErrorPrefix.add: offset must be finite seconds keeping the stamp within years 2000-9999 "
            f"({earliest:.6g}..{latest:.6g} s), or None; got {offset!r}"
        )
    return stamp


class ErrorPrefix:
    """A task attempt's output prefix in a temporary directory, filled with ContainerError documents."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._added = 0  # names per-worker files without listing the prefix at every add

    def add(
        self,
        worker: str = "",
        *,
        recoverable: bool = False,
        origin: str = "USER",
        code: Optional[str] = None,
        message: str = "",
        offset: Optional[float] = 0.0,
        name: Optional[str] = None,
    ) -> Path:
        """Write one error document as flytekit's entrypoint would; `offset` seconds after a fixed base (None: no
        timestamp).

        With a `worker`, the file is `error-<hex>.pb`, as flytekit names it when `_F_DES` is set (which is also when
        it fills in the worker); without one, `error.pb`, as without `_F_DES` (a second such add replaces the first:
        the last writer wins). `name`, a key relative to the prefix that must stay inside it, says otherwise. The
        default code is flytekit's: `USER:Recoverable` or `USER:RuntimeError` for a user error, `SYSTEM` for a
        system one (`_dispatch_execute`)."""
        for label, value in (("worker", worker), ("message", message), ("code", code)):
            if value is None and label == "code":
                continue
            if not isinstance(value, str):
                allowed = "a str or None" if label == "code" else "a str"
                raise TypeError(f"ErrorPrefix.add: {label} must be {allowed}, got {type(value).__name__} {value!r}")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"ErrorPrefix.add: {label} is not valid text (a lone surrogate): {value!r}") from None
        if not isinstance(recoverable, bool):
            raise TypeError(f"ErrorPrefix.add: recoverable must be True or False, got {recoverable!r}")
        if origin not in ORIGINS:
            raise ValueError(f"ErrorPrefix.add: origin must be one of {', '.join(ORIGINS)}, got {origin!r}")
        timestamp_ns = None if offset is None else _offset_stamp(offset)
        if code is None:
            code = "SYSTEM" if origin == "SYSTEM" else "USER:Recoverable" if recoverable else "USER:RuntimeError"
        if name is None and not worker:
            name = CANONICAL_ERROR_FILE
        elif worker and name is not None and PurePosixPath(name).name == CANONICAL_ERROR_FILE:
            raise ValueError(
                f"ErrorPrefix.add: name {name!r} with worker {worker!r}: flytekit fills in the worker only in the "
                "per-worker files it names error-<uuid>.pb (leave name out), never in error.pb"
            )
        elif name is None:
            while name is None or (self.path / name).exists():  # another ErrorPrefix may fill the same directory
                self._added += 1
                digest = hashlib.blake2b(f"{worker}/{self._added}".encode(), digest_size=16)
                name = per_worker_file_name(digest.hexdigest())
        target = self._inside(name)
        data = error_document_bytes(
            code=code,
            message=message or f"{code} on {worker or 'a pod'}",
            recoverable=recoverable,
            origin=origin,
            timestamp_ns=timestamp_ns,
            worker=worker,
        )
        self._refuse_what_flytekit_would_not_write(name, data, offset)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        except OSError as e:
            raise ValueError(f"ErrorPrefix.add: name {name!r} cannot be written: {e.strerror or e}") from None
        return target

    @staticmethod
    def _refuse_what_flytekit_would_not_write(name: str, data: bytes, offset) -> None:
        """`aggsim validate`'s checks of the document, the one rule for what flytekit writes (a stamp before 2000, a
        code for the other origin, an empty code). Not its checks of the key or the size, which a test may well want
        to break, nor of a timestamp left unset on purpose (`offset=None`)."""
        for finding in check_document(name, data):
            if finding.check in ("name", "size") or (finding.check == "timestamp" and offset is None):
                continue
            argument = {"timestamp": "offset", "origin": "code/origin", "kind": "recoverable"}.get(
                finding.check, finding.check
            )
            raise ValueError(f"ErrorPrefix.add: {argument}: flytekit writes no such file: {finding.message}")

    def _inside(self, name: str) -> Path:
        """`name` as a key under the prefix; a name that would leave it (absolute, `..`, a symbolic link out) or that
        names no file (the prefix itself, a trailing '/') is refused."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"ErrorPrefix.add: name must be a non-empty key, got {name!r}")
        parts = PurePosixPath(name).parts
        if PurePosixPath(name).is_absolute() or ".." in parts or "\\" in name or "\0" in name:
            raise ValueError(f"ErrorPrefix.add: name {name!r} must be a key inside the prefix (relative, no '..')")
        if name.endswith("/") or not parts or parts == (".",):
            raise ValueError(f"ErrorPrefix.add: name {name!r} names a directory, not an object key")
        target = self.path.joinpath(*parts)
        if not target.parent.resolve().is_relative_to(self.path.resolve()):
            raise ValueError(f"ErrorPrefix.add: name {name!r} leads out of the prefix through a symbolic link")
        return target

    def add_outputs(self) -> Path:
        """An (empty) outputs.pb, as rank 0 uploads on success."""
        from flyteidl.core import literals_pb2

        target = self.path / "outputs.pb"
        target.write_bytes(literals_pb2.LiteralMap().SerializeToString())
        return target

    def explain(
        self,
        strategy: str = "earliest",
        outputs_declared: bool = False,
        retries: int = 0,
        attempts: int = 0,
        system_failures: int = 0,
        config: PropellerConfig = PropellerConfig(),
    ) -> Explanation:
        """What propeller concludes if it observes the job Succeeded now."""
        return explain_prefix(
            str(self.path), strategy, outputs_declared, retries, NodeState(attempts, system_failures), config
        )


def explain_candidates(explanation: Explanation) -> str:
    """The ranked candidates and the deciding rule, as a failure message shows them (control characters a document
    or a name holds escaped, so none can forge a line)."""
    lines = [f"{explanation.read.strategy} strategy, rule: {explanation.read.rule}"]
    for candidate in explanation.read.candidates:
        mark = "-> " if candidate.selected else "   "
        error = candidate.error
        if error is None:
            lines.append(f"{mark}{printable(candidate.path)}: {printable(candidate.problem)}")
        else:
            lines.append(
                f"{mark}{printable(candidate.path)}: {rfc3339_nanos(error.timestamp_ns) or 'no timestamp (epoch)'} "
                f"{printable(error.code)} {error.kind} {'recoverable' if error.recoverable else 'non-recoverable'} "
                f"worker={printable(error.worker) or '-'}"
            )
    if explanation.not_read:
        hint = " (strategy='earliest' reads them)" if explanation.per_worker_files_not_read else ""
        lines.append(printable(explanation.not_read_note) + hint)
    if explanation.read.round_error:
        lines.append(f"round error: {printable(explanation.read.round_error)}")
    decision = explanation.decision
    lines.append(
        f"task {explanation.outcome.phase.value}, node {decision.decision.value}"
        f"{' ' + printable(decision.code) if decision.code else ''}"
    )
    return "\n".join(lines)


def _call(name: str, arguments: dict) -> str:
    """How the failing call read, so that one of several in a test can be told apart."""
    given = ", ".join(f"{key}={value!r}" for key, value in arguments.items() if value is not None)
    return f"{name}({given})"


def _verdict_problems(explanation: Explanation, expected: dict, no_error: bool) -> list[str]:
    """What in `explanation` differs from the expectations (none: they hold)."""
    error = explanation.error
    problems = []
    if no_error and error is not None:
        problems.append(f"expected no error, got {printable(error.code)} from {printable(error.path)}")
    elif no_error and explanation.read.round_error:  # no error is reported, and none is the verdict: the round fails
        problems.append("expected no error, but propeller's read fails the round")
    elif no_error and explanation.outcome.phase.value != "SUCCEEDED":
        problems.append(f"expected no error, but the task phase is {explanation.outcome.phase.value}")
    for field in ("worker", "code", "kind", "recoverable"):
        want = expected[field]
        got = getattr(error, field) if error is not None else None
        if want is not None and got != want:
            problems.append(f"error {field}: expected {want!r}, got {got!r}")
    if expected["decision"] is not None and explanation.decision.decision.value != expected["decision"]:
        problems.append(f"decision: expected {expected['decision']}, got {explanation.decision.decision.value}")
    if expected["task_phase"] is not None and explanation.outcome.phase.value != expected["task_phase"]:
        problems.append(f"task phase: expected {expected['task_phase']}, got {explanation.outcome.phase.value}")
    return problems


def assert_verdict(
    explanation: Union[Explanation, ErrorPrefix],
    *,
    worker: Optional[str] = None,
    code: Optional[str] = None,
    kind: Optional[str] = None,
    recoverable: Optional[bool] = None,
    decision: Optional[str] = None,
    task_phase: Optional[str] = None,
    no_error: bool = False,
    accept_listing_order: bool = False,
    allow_unread: bool = False,
) -> None:
    """Assert which error propeller reports and what the node does; on failure, show the ranking.

    At least one expectation is required: an assertion that checks nothing would pass on anything. Where the winner's
    stamp ties another file's and both names are ones flytekit draws at random (`error-<uuid4 hex>.pb`), which one a
    real store lists first is chance, so the expectations must hold whichever is listed first (`accept_listing_order`:
    only as listed here). With the default reader, per-worker files it never reads fail the assertion: pods write them
    only when propeller runs with aggregation on, and so reads with the earliest strategy (`allow_unread`: a
    deployment that changed its flag under running pods)."""
    expected = {
        "worker": worker,
        "code": code,
        "kind": kind,
        "recoverable": recoverable,
        "decision": decision,
        "task_phase": task_phase,
    }
    if all(v is None for v in expected.values()) and not no_error:
        raise TypeError("assert_verdict: give at least one expectation (worker, code, kind, recoverable, ...)")
    for name, value, values in (("decision", decision, Decision), ("task_phase", task_phase, TaskPhase)):
        if value is not None and value not in {v.value for v in values}:  # "retry" would only ever fail, unexplained
            allowed = ", ".join(v.value for v in values)
            raise ValueError(f"assert_verdict: {name} must be one of {allowed}, got {value!r}")
    if isinstance(explanation, ErrorPrefix):
        explanation = explanation.explain()
    if not isinstance(explanation, Explanation):
        raise TypeError(
            f"assert_verdict: expected an Explanation (error_prefix.explain(...)) or an ErrorPrefix, got "
            f"{type(explanation).__name__} {explanation!r}"
        )
    call = _call("assert_verdict", {**expected, "no_error": no_error or None})
    problems = _verdict_problems(explanation, expected, no_error)
    if problems:
        pytest.fail(f"{call}: " + "; ".join(problems) + "\n" + explain_candidates(explanation), pytrace=False)
    unread = [key for key in explanation.not_read if is_per_worker_file(key)]
    if explanation.read.strategy == DEFAULT and unread and not allow_unread:
        pytest.fail(
            f"{call}: holds only because the default reader never reads {printable(', '.join(unread))}: pods name "
            "their files error-<uuid>.pb only when propeller runs with aggregation on, which reads them with the "
            "earliest strategy (explain(strategy='earliest'), or add the errors without a worker; allow_unread=True "
            "for a deployment that turned aggregation off under running pods)\n" + explain_candidates(explanation),
            pytrace=False,
        )
    winner = explanation.read.selected
    # a name the test chose keeps its place in the listing: only drawn names' order is chance
    for key, listed_first in () if accept_listing_order else explanation.if_listed_first_by_chance():
        theirs = _verdict_problems(listed_first, expected, no_error)
        if theirs:
            pytest.fail(
                f"{call}: holds only because the store lists {printable(winner.path)} before {printable(key)}: their "
                "stamps tie, and flytekit names these files error-<uuid4 hex>.pb, so which one a real store lists "
                f"first is chance. With {printable(key)} first: " + "; ".join(theirs) + " (accept_listing_order=True "
                "checks only the order listed here)\n" + explain_candidates(listed_first),
                pytrace=False,
            )


def assert_valid_error_files(location: Union[str, Path], *, allow_empty: bool = False) -> None:
    """The checks of `aggsim validate`, for every error* file your task code left under `location` (or for the one
    file `location` names).

    No error file at all fails too (as `aggsim validate` does), unless `allow_empty`: a task that was meant
    to fail and wrote nothing is what upstream's plugin does after a preemption. A location that does not exist or
    cannot be read fails, allowed empty or not."""
    from aggregation.storage import StorageError, StoreUnreachable

    if not isinstance(location, (str, os.PathLike)):
        raise TypeError(f"assert_valid_error_files: location must be a path or URL, got {location!r}")
    try:
        reports = validate_target(os.fspath(location))
    except (StorageError, StoreUnreachable) as e:  # not there, or this machine may not read it
        unreadable = f"assert_valid_error_files: {printable(e)}"
    else:
        unreadable = None
    if unreadable:  # failed outside the `except`: the report is that one line, not a chain of two exceptions
        pytest.fail(unreadable, pytrace=False)
    if not reports and not allow_empty:
        pytest.fail(
            f"no error files under {printable(location)} (pass allow_empty=True if that is expected)", pytrace=False
        )
    failures = [
        f"{printable(report.path)}: {finding.check}: {printable(finding.message)}"
        for report in reports
        for finding in report.findings
    ]
    if failures:
        pytest.fail("error files would mislead propeller:\n" + "\n".join(failures), pytrace=False)


def assert_scenario(
    scenario: Union[str, Path],
    *,
    plugin: Optional[str] = None,
    aggregation: Optional[bool] = None,
    propeller_config: Sequence[Union[str, Path]] = (),
    final_phase: Optional[str] = None,
    attempts: Optional[int] = None,
) -> None:
    """Simulate a scenario and check its final phase and attempt count (at least one of them), as `aggsim simulate
    SCENARIO [--plugin] [--aggregation/--no-aggregation] [--propeller-config ...]` would play it.

    `scenario` is a shipped scenario's name, or a path to a .textproto file (relative to the current directory, as
    `open` reads it; a path never falls back to a shipped scenario of the same name). A point the model refuses to
    play fails the assertion with the model's line."""
    if final_phase is None and attempts is None:
        raise TypeError("assert_scenario: give final_phase or attempts (an assertion that checks nothing passes)")
    phases = [phase.value for phase in FinalPhase]
    if final_phase is not None and final_phase not in phases:
        raise ValueError(f"assert_scenario: final_phase must be one of {', '.join(phases)}, got {final_phase!r}")
    if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int)):
        raise TypeError(f"assert_scenario: attempts must be an int, got {type(attempts).__name__} {attempts!r}")
    plugins = [variant.value for variant in PluginVariant]
    if plugin is not None and plugin not in plugins:
        raise ValueError(f"assert_scenario: plugin must be one of {', '.join(plugins)}, got {plugin!r}")
    if aggregation is not None and not isinstance(aggregation, bool):
        raise TypeError(f"assert_scenario: aggregation must be True, False or None, got {aggregation!r}")
    if isinstance(propeller_config, (str, os.PathLike)):
        raise TypeError("assert_scenario: propeller_config is a list of files (later ones win), not one path")
    from aggregation.deployment import DeploymentConfigError, load_deployment
    from aggregation.report import timeline_lines
    from aggregation.scenario import ModelRefusal, ScenarioError, load_scenario, resolve_scenario_path
    from aggregation.simulate import simulate

    try:
        path = resolve_scenario_path(os.fspath(scenario))
        spec = load_scenario(path, plugin)
    except ScenarioError as e:  # no such scenario, or one that does not parse: its one line, as `aggsim` prints it
        unplayable = f"assert_scenario: {printable(e)}"
    else:
        unplayable = None
    if unplayable:
        pytest.fail(unplayable, pytrace=False)
    if propeller_config:
        try:
            spec = spec.with_deployment(load_deployment([os.fspath(f) for f in propeller_config]))
        except DeploymentConfigError as e:
            raise ValueError(f"assert_scenario: propeller_config: {e}") from None
    if aggregation is not None:
        spec = spec.with_aggregation(aggregation)
    played = f"{printable(path)} (plugin {spec.plugin.value}, aggregation {'on' if spec.error_aggregation else 'off'})"
    call = _call("assert_scenario", {"final_phase": final_phase, "attempts": attempts})
    try:
        execution = simulate(spec)
    except ModelRefusal as refusal:
        pytest.fail(f"{call}: {played}: the model refuses to play it: {printable(refusal)}", pytrace=False)
    problems = []
    if final_phase is not None and execution.final_phase.value != final_phase:
        problems.append(f"final phase: expected {final_phase}, got {execution.final_phase.value}")
    if attempts is not None and len(execution.attempts) != attempts:
        problems.append(f"attempts: expected {attempts}, got {len(execution.attempts)}")
    if problems:
        timeline = "\n".join(line for a in execution.attempts for line in [f"attempt {a.attempt}:"] + timeline_lines(a))
        pytest.fail(f"{call}: {played}: " + "; ".join(problems) + "\n" + timeline, pytrace=False)


@pytest.fixture
def error_prefix(tmp_path) -> ErrorPrefix:
    """An empty output prefix to fill with `error_prefix.add(...)` and judge with `.explain(...)`."""
    return ErrorPrefix(tmp_path / "aggsim-prefix")
