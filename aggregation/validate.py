"""Lint error documents against what correct aggregation needs.

A plugin's error file can be valid protobuf and still break propeller's verdict: no timestamp (it
beats every other file under the earliest strategy), no worker (the report cannot say which pod), a
name the earliest reader never lists, a size over the payload limit (the round fails). Each check
below names the propeller rule that makes it matter.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Optional

from flyteidl.core import errors_pb2, execution_pb2
from google.protobuf.message import DecodeError

from aggregation.readers import DEFAULT_MAX_PAYLOAD_BYTES, kind_name, parse_document
from aggregation.replica_env import is_per_worker_file
from aggregation.storage import OutputPrefix, StorageError

ERROR_PREFIX, ERROR_SUFFIX = "error", ".pb"


@dataclass(frozen=True)
class Finding:
    check: str
    message: str


@dataclass(frozen=True)
class FileReport:
    path: str
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings


def check_document(name: str, data: bytes, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> list[Finding]:
    """Every finding for one error file called `name` (its key relative to the output prefix)."""
    findings: list[Finding] = []
    base = posixpath.basename(name)
    if not (name.startswith(ERROR_PREFIX) and name.endswith(ERROR_SUFFIX)):
        findings.append(
            Finding(
                "name",
                f"not listed by the earliest reader: the key must start with {ERROR_PREFIX!r} "
                f"and end with {ERROR_SUFFIX!r}",
            )
        )
    if len(data) > max_payload_bytes:
        findings.append(
            Finding(
                "size", f"{len(data)} bytes is over the {max_payload_bytes}-byte payload limit: propeller's round fails"
            )
        )
    try:
        document = parse_document(data)
    except DecodeError as e:
        findings.append(Finding("parse", f"not an ErrorDocument: {e}"))
        return findings
    if not document.HasField("error"):
        findings.append(
            Finding(
                "error", "`error` is unset: propeller reports SYSTEM ErrorFileBadFormat, and it wins (no timestamp)"
            )
        )
        return findings
    error = document.error
    if not error.code:
        findings.append(Finding("code", "`code` is empty"))
    if not error.message:
        findings.append(Finding("message", "`message` is empty"))
    if not error.HasField("timestamp"):
        findings.append(
            Finding(
                "timestamp",
                "`timestamp` is unset: it reads as the epoch and beats every other file under the earliest strategy",
            )
        )
    else:
        problem = _timestamp_problem(error.timestamp)
        if problem:
            seconds, nanos = error.timestamp.seconds, error.timestamp.nanos
            findings.append(
                Finding("timestamp", f"`timestamp` ({seconds} s, {nanos} ns) is not a valid Timestamp: {problem}")
            )
    if is_per_worker_file(base) and not error.worker:
        findings.append(Finding("worker", "`worker` is empty in a per-worker file (error-*.pb): set _F_WN"))
    if error.kind not in errors_pb2.ContainerError.Kind.values():
        findings.append(Finding("kind", f"`kind` {error.kind} is not RECOVERABLE or NON_RECOVERABLE"))
    origin = kind_name(error.origin)
    if error.origin not in execution_pb2.ExecutionError.ErrorKind.values() or origin == "UNKNOWN":
        findings.append(Finding("origin", f"`origin` is {origin}: flytekit always writes USER or SYSTEM"))
    elif error.code.startswith("USER:") and origin != "USER":
        findings.append(Finding("origin", f"code {error.code!r} is a user error but `origin` is {origin}"))
    elif error.code.startswith("SYSTEM") and origin != "SYSTEM":
        findings.append(Finding("origin", f"code {error.code!r} is a system error but `origin` is {origin}"))
    return findings


#: google.protobuf.Timestamp's valid seconds: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z (`timestamp.proto`;
#: protobuf-go `timestamppb.CheckValid`)
TIMESTAMP_SECONDS = (-62_135_596_800, 253_402_300_799)


def _timestamp_problem(timestamp) -> str:
    """Why a Timestamp flytekit would never write is one, and what it does to the earliest pick (Go's AsTime() orders
    any); "" for a valid one."""
    low, high = TIMESTAMP_SECONDS
    if timestamp.seconds > high:
        return "after year 9999 (milliseconds written as seconds?): it loses every earliest pick it should win"
    if timestamp.seconds < low:
        return "before year 1: it wins every earliest pick"
    if not 0 <= timestamp.nanos < 1_000_000_000:
        return "nanos outside [0, 1e9): it orders as its whole seconds plus those nanos, which flytekit never writes"
    return ""


def validate_prefix(prefix: OutputPrefix, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> list[FileReport]:
    """Validate every key under the prefix that starts with `error` (near-misses like `error.pb.tmp` included)."""
    reports = []
    for page in prefix.list_pages(ERROR_PREFIX):
        for entry in page:
            reports.append(validate_object(prefix, entry.key, max_payload_bytes))
    return reports


def validate_object(prefix: OutputPrefix, key: str, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> FileReport:
    location = f"{prefix.location.rstrip('/')}/{key}"
    try:
        data = prefix.read(key)
    except StorageError as e:
        return FileReport(location, (Finding("read", str(e)),))
    return FileReport(location, tuple(check_document(key, data, max_payload_bytes)))


def report_for_file(
    path: str, data: Optional[bytes], error: Optional[str] = None, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
) -> FileReport:
    if data is None:
        return FileReport(path, (Finding("read", error or "unreadable"),))
    return FileReport(path, tuple(check_document(posixpath.basename(path), data, max_payload_bytes)))
