"""Build ErrorDocuments the way flytekit's entrypoint writes them (for tests, scenarios and fixtures).

flytekit 1.16 `flytekit/bin/entrypoint.py` `_dispatch_execute` writes one `ErrorDocument` whose
`ContainerError` carries code, message, kind (RECOVERABLE / NON_RECOVERABLE), origin (USER / SYSTEM),
timestamp and worker. These builders use flyteidl's generated classes, never a copy.
"""

from __future__ import annotations

from typing import Optional

from flyteidl.core import errors_pb2, execution_pb2


def error_document(
    code: str = "USER:RuntimeError",
    message: str = "",
    recoverable: bool = False,
    origin: str = "USER",
    timestamp_ns: Optional[int] = None,
    worker: str = "",
) -> errors_pb2.ErrorDocument:
    """An `ErrorDocument`; `timestamp_ns=None` leaves the timestamp unset (it then reads as the epoch). The stamp's
    fields are set as given, unchecked, so a test can write one flytekit never writes (e.g. milliseconds written as
    seconds, past year 9999), as a hand-written uploader might."""
    container = errors_pb2.ContainerError(
        code=code,
        message=message,
        kind=errors_pb2.ContainerError.RECOVERABLE if recoverable else errors_pb2.ContainerError.NON_RECOVERABLE,
        origin=execution_pb2.ExecutionError.ErrorKind.Value(origin),
        worker=worker,
    )
    if timestamp_ns is not None:  # Timestamp.FromNanoseconds, without its range check
        container.timestamp.seconds, container.timestamp.nanos = divmod(timestamp_ns, 10**9)
    return errors_pb2.ErrorDocument(error=container)


def error_document_bytes(**fields) -> bytes:
    """`error_document(**fields)` serialized, as uploaded to the output prefix."""
    return error_document(**fields).SerializeToString()
