"""Lint error documents against what correct aggregation needs.

A plugin's error file can be valid protobuf and still break propeller's verdict: no timestamp (it
beats every file stamped after 1970 under the earliest strategy), no worker (the report cannot say which pod), a
name the earliest reader never lists, a size over the payload limit (the round fails). Each check
below names the propeller rule that makes it matter.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Optional

from flyteidl.core import errors_pb2, execution_pb2
from google.protobuf.message import DecodeError

from aggregation.gotime import NANOS, UNIX_TO_INTERNAL, order_key, rfc3339_nanos
from aggregation.readers import DEFAULT_MAX_PAYLOAD_BYTES, kind_name, parse_document
from aggregation.replica_env import is_per_worker_file
from aggregation.storage import DEFAULT_TIMEOUT_SECONDS, OutputPrefix, StorageError

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


def _name_findings(name: str) -> list[Finding]:
    if name.startswith(ERROR_PREFIX) and name.endswith(ERROR_SUFFIX):
        return []
    why = f"not listed by the earliest reader: the key must start with {ERROR_PREFIX!r} and end with {ERROR_SUFFIX!r}"
    return [Finding("name", why)]


def findings_if_too_large(name: str, size: int, max_payload_bytes: int) -> Optional[list[Finding]]:
    """An error file over the payload limit fails propeller's round at its HEAD (`validatePayloadSize`), before any
    read: its findings are the name's and the size's, and nothing of its content matters (nor is it read). None when
    it is within the limit."""
    if size <= max_payload_bytes:
        return None
    over = f"{size} bytes is over the {max_payload_bytes}-byte payload limit: propeller's round fails"
    return [*_name_findings(name), Finding("size", over)]


def check_document(name: str, data: bytes, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> list[Finding]:
    """Every finding for one error file called `name` (its key relative to the output prefix)."""
    oversized = findings_if_too_large(name, len(data), max_payload_bytes)
    if oversized is not None:
        return oversized
    findings = _name_findings(name)
    base = posixpath.basename(name)
    try:
        document = parse_document(data)
    except DecodeError as e:
        findings.append(Finding("parse", f"not an ErrorDocument: {e}"))
        return findings
    if not document.HasField("error"):
        findings.append(
            Finding(
                "error",
                "`error` is unset: propeller reports SYSTEM ErrorFileBadFormat (the earliest reader counts it as the "
                "epoch: it wins over any file stamped after 1970)",
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
                "`timestamp` is unset: it reads as the epoch and beats every file stamped after 1970 under the "
                "earliest strategy",
            )
        )
    else:
        seconds, nanos = error.timestamp.seconds, error.timestamp.nanos
        problem = _timestamp_problem(error.timestamp)
        if problem:
            findings.append(
                Finding("timestamp", f"`timestamp` ({seconds} s, {nanos} ns) is not a valid Timestamp: {problem}")
            )
        elif seconds < EARLIEST_PLAUSIBLE_SECONDS:
            findings.append(
                Finding(
                    "timestamp",
                    f"`timestamp` {rfc3339_nanos(seconds * NANOS + nanos)} is before 2000 (an unset clock, Go's zero "
                    "time or a duration written as a time?): it beats every real error file under the earliest "
                    "strategy",
                )
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


#: A stamp before this (2000-01-01T00:00:00Z) is valid but no task failed then: an unset clock or a duration.
EARLIEST_PLAUSIBLE_SECONDS = 946_684_800


def _timestamp_problem(timestamp) -> str:
    """Why a Timestamp flytekit would never write is one, and what it does to the earliest pick (Go's AsTime() orders
    any, in int64 arithmetic that wraps far enough out: `gotime.order_key`); "" for a valid one."""
    low, high = TIMESTAMP_SECONDS
    seconds, nanos = timestamp.seconds, timestamp.nanos
    if low <= seconds <= high:
        if not 0 <= nanos < NANOS:
            return (
                "nanos outside [0, 1e9): it orders as its whole seconds plus those nanos, which flytekit never writes"
            )
        return ""
    where = "after year 9999 (milliseconds written as seconds?)" if seconds > high else "before year 1"
    stamp_ns = seconds * NANOS + nanos
    key = order_key(stamp_ns)
    wrapped = key[0] != stamp_ns // NANOS + UNIX_TO_INTERNAL
    wraps = " (Go's int64 time arithmetic wraps it round to the other end)" if wrapped else ""
    if key < order_key(0):  # earlier than the epoch, so earlier than every real stamp
        return f"{where}: it orders before every real stamp{wraps}, so it wins the earliest pick over any of them"
    return f"{where}: it orders after every real stamp{wraps} and loses every earliest pick it should win"


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
        size = prefix.head(key)  # as propeller does, before it reads: an oversized file is never read
        oversized = None if size is None else findings_if_too_large(key, size, max_payload_bytes)
        if oversized is not None:
            return FileReport(location, tuple(oversized))
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


def validate_target(
    target: str, timeout: float = DEFAULT_TIMEOUT_SECONDS, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
) -> list[FileReport]:
    """What `aggsim validate` checks for one argument: a file (local, or one object of a store) is checked alone,
    a prefix for every error* key under it. Raises `StorageError` / `StoreUnreachable` when it cannot be reached."""
    import os

    from aggregation.storage import FsspecPrefix, LocalPrefix, PrefixNotFound, local_path_of, no_access, open_prefix

    local = local_path_of(target)
    if local is not None and os.path.exists(local) and not (os.path.isfile(local) or os.path.isdir(local)):
        raise StorageError(
            f"{target}: neither a regular file nor a directory (no object store holds a FIFO or a device)"
        )
    name = posixpath.basename(local if local is not None else target)
    if local is not None and os.path.isfile(local):
        oversized = findings_if_too_large(name, os.path.getsize(local), max_payload_bytes)
        if oversized is not None:
            return [FileReport(target, tuple(oversized))]
        try:
            with open(local, "rb") as f:
                return [report_for_file(target, f.read(), max_payload_bytes=max_payload_bytes)]
        except PermissionError as e:  # this machine's access to its copy, as `explain` says it: no finding
            raise no_access(target, "reading it", e) from None
        except OSError as e:  # an I/O error: what the reader would meet reading it, a finding as inside a prefix
            return [report_for_file(target, None, f"cannot read: {e.strerror}")]
    prefix = open_prefix(target, timeout=timeout)
    if isinstance(prefix, FsspecPrefix) and not isinstance(prefix, LocalPrefix):
        size = prefix.whole_object_size()
        oversized = None if size is None else findings_if_too_large(name, size, max_payload_bytes)
        if oversized is not None:
            return [FileReport(target, tuple(oversized))]
        data = prefix.whole_object() if size is not None else None
        if data is not None:
            return [report_for_file(target, data, max_payload_bytes=max_payload_bytes)]
        reports = validate_prefix(prefix, max_payload_bytes)
        if not reports and name.endswith(ERROR_SUFFIX):
            # an object store has no directories: a file's name with nothing there is a missing file (a typo),
            # as a local path is, not an empty prefix that would pass `--allow-empty`
            raise PrefixNotFound(f"{target}: no such object (nor any error file under it as a prefix)")
        return reports
    return validate_prefix(prefix, max_payload_bytes)
