"""pytest plugin: assert what propeller concludes from error documents, in a few lines.

Registered through the `pytest11` entry point as `aggsim`, so installing flyte-aggsim makes these
available in any test suite:

    def test_preemption_beats_the_consequence(error_prefix):
        error_prefix.add("train-worker-1", recoverable=True, code="USER:Recoverable", offset=0.0)
        error_prefix.add("train-worker-0", code="USER:RuntimeError", offset=0.05)
        assert_verdict(error_prefix.explain(retries=2), worker="train-worker-1", decision="RETRY")

`assert_verdict`'s failure message shows every candidate in listing order, which one won and the rule
that decided. `assert_valid_error_files` runs the checks of `aggsim validate` on files your own task
code wrote. `assert_scenario` simulates a scenario and checks its final phase.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path, PurePosixPath
from typing import Optional, Union

import pytest

from aggregation.documents import error_document_bytes
from aggregation.explain import Explanation, explain_prefix, rfc3339_nanos
from aggregation.propeller import NodeState, PropellerConfig
from aggregation.replica_env import per_worker_file_name
from aggregation.storage import open_prefix
from aggregation.validate import validate_prefix

UINT32_MAX = 2**32 - 1  # Flyte's type for retries and attempt counters

#: The instant offsets are measured from (any fixed time works; this one reads well).
BASE_TIME_NS = 1_796_000_000 * 10**9

__all__ = ["ErrorPrefix", "assert_verdict", "assert_valid_error_files", "assert_scenario", "explain_candidates"]


class ErrorPrefix:
    """A task attempt's output prefix in a temporary directory, filled with ContainerError documents."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

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
        """Write one error document as flytekit would; `offset` seconds after a fixed base (None: no timestamp).

        The file is named `error-<hex>.pb` (as with `_F_DES` set) unless `name` says otherwise; `name` is a key
        relative to the prefix and must stay inside it.
        """
        for label, value in (("worker", worker), ("origin", origin), ("message", message)):
            if not isinstance(value, str):
                raise TypeError(f"ErrorPrefix.add: {label} must be a str, got {type(value).__name__} {value!r}")
        if code is not None and not isinstance(code, str):
            raise TypeError(f"ErrorPrefix.add: code must be a str or None, got {type(code).__name__} {code!r}")
        if offset is not None and (
            isinstance(offset, bool) or not isinstance(offset, (int, float)) or not math.isfinite(offset)
        ):
            raise TypeError(f"ErrorPrefix.add: offset must be a finite number of seconds or None, got {offset!r}")
        if code is None:
            code = "USER:Recoverable" if recoverable else ("USER:RuntimeError" if origin == "USER" else "SYSTEM")
        timestamp_ns = None if offset is None else BASE_TIME_NS + round(offset * 1e9)
        if name is None:
            digest = hashlib.blake2b(f"{worker}/{len(list(self.path.iterdir()))}".encode(), digest_size=16)
            name = per_worker_file_name(digest.hexdigest())
        target = self._inside(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(
            error_document_bytes(
                code=code,
                message=message or f"{code} on {worker or 'a pod'}",
                recoverable=recoverable,
                origin=origin,
                timestamp_ns=timestamp_ns,
                worker=worker,
            )
        )
        return target

    def _inside(self, name: str) -> Path:
        """`name` as a key under the prefix; a name that would leave it (absolute, `..`) is refused."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"ErrorPrefix.add: name must be a non-empty key, got {name!r}")
        parts = PurePosixPath(name).parts
        if PurePosixPath(name).is_absolute() or ".." in parts or "\\" in name:
            raise ValueError(f"ErrorPrefix.add: name {name!r} must be a key inside the prefix (relative, no '..')")
        return self.path.joinpath(*parts)

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
        for label, value in (("retries", retries), ("attempts", attempts), ("system_failures", system_failures)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= UINT32_MAX:
                raise ValueError(f"ErrorPrefix.explain: {label} must be an integer in [0, {UINT32_MAX}], got {value!r}")
        return explain_prefix(
            str(self.path), strategy, outputs_declared, retries, NodeState(attempts, system_failures), config
        )


def explain_candidates(explanation: Explanation) -> str:
    """The ranked candidates and the deciding rule, as a failure message shows them."""
    lines = [f"{explanation.read.strategy} strategy, rule: {explanation.read.rule}"]
    for candidate in explanation.read.candidates:
        mark = "-> " if candidate.selected else "   "
        error = candidate.error
        if error is None:
            lines.append(f"{mark}{candidate.path}: {candidate.problem}")
        else:
            lines.append(
                f"{mark}{candidate.path}: {rfc3339_nanos(error.timestamp_ns) or 'no timestamp (epoch)'} "
                f"{error.code} {error.kind} {'recoverable' if error.recoverable else 'non-recoverable'} "
                f"worker={error.worker or '-'}"
            )
    if explanation.read.round_error:
        lines.append(f"round error: {explanation.read.round_error}")
    decision = explanation.decision
    lines.append(
        f"task {explanation.outcome.phase.value}, node {decision.decision.value}"
        f"{' ' + decision.code if decision.code else ''}"
    )
    return "\n".join(lines)


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
) -> None:
    """Assert which error propeller reports and what the node does; on failure, show the ranking.

    At least one expectation is required: an assertion that checks nothing would pass on anything."""
    if all(v is None for v in (worker, code, kind, recoverable, decision, task_phase)) and not no_error:
        raise TypeError("assert_verdict: give at least one expectation (worker, code, kind, recoverable, ...)")
    if isinstance(explanation, ErrorPrefix):
        explanation = explanation.explain()
    error = explanation.error
    problems = []
    if no_error and error is not None:
        problems.append(f"expected no error, got {error.code} from {error.path}")
    expected = {"worker": worker, "code": code, "kind": kind, "recoverable": recoverable}
    for field, want in expected.items():
        if want is None:
            continue
        got = getattr(error, field) if error is not None else None
        if got != want:
            problems.append(f"error {field}: expected {want!r}, got {got!r}")
    if decision is not None and explanation.decision.decision.value != decision:
        problems.append(f"decision: expected {decision}, got {explanation.decision.decision.value}")
    if task_phase is not None and explanation.outcome.phase.value != task_phase:
        problems.append(f"task phase: expected {task_phase}, got {explanation.outcome.phase.value}")
    if problems:
        pytest.fail("; ".join(problems) + "\n" + explain_candidates(explanation), pytrace=False)


def assert_valid_error_files(location: Union[str, Path], *, allow_empty: bool = False) -> None:
    """The checks of `aggsim validate`, for every error* file your task code left under `location`.

    No error file at all fails too (as `aggsim validate` does), unless `allow_empty`: a task that was meant
    to fail and wrote nothing is what upstream's plugin does after a preemption."""
    reports = validate_prefix(open_prefix(str(location)))
    if not reports and not allow_empty:
        pytest.fail(f"no error files under {location} (pass allow_empty=True if that is expected)", pytrace=False)
    failures = [
        f"{report.path}: {finding.check}: {finding.message}" for report in reports for finding in report.findings
    ]
    if failures:
        pytest.fail("error files would mislead propeller:\n" + "\n".join(failures), pytrace=False)


def assert_scenario(
    scenario: Union[str, Path],
    *,
    plugin: Optional[str] = None,
    final_phase: Optional[str] = None,
    attempts: Optional[int] = None,
) -> None:
    """Simulate a scenario file and check its final phase and attempt count (at least one of them)."""
    if final_phase is None and attempts is None:
        raise TypeError("assert_scenario: give final_phase or attempts (an assertion that checks nothing passes)")
    from aggregation.report import timeline_lines
    from aggregation.scenario import load_scenario
    from aggregation.simulate import simulate

    execution = simulate(load_scenario(str(scenario), plugin))
    problems = []
    if final_phase is not None and execution.final_phase.value != final_phase:
        problems.append(f"final phase: expected {final_phase}, got {execution.final_phase.value}")
    if attempts is not None and len(execution.attempts) != attempts:
        problems.append(f"attempts: expected {attempts}, got {len(execution.attempts)}")
    if problems:
        timeline = "\n".join(line for a in execution.attempts for line in [f"attempt {a.attempt}:"] + timeline_lines(a))
        pytest.fail("; ".join(problems) + "\n" + timeline, pytrace=False)


@pytest.fixture
def error_prefix(tmp_path) -> ErrorPrefix:
    """An empty output prefix to fill with `error_prefix.add(...)` and judge with `.explain(...)`."""
    return ErrorPrefix(tmp_path / "aggsim-prefix")
