"""Propeller's two error readers, rule for rule.

Mirrors flyteplugins v1.16.8 `go/tasks/pluginmachinery/ioutils/remote_file_output_reader.go`:
`singleFileErrorReader` (the default strategy) and `earliestFileErrorReader` (the earliest strategy,
used when `enable-distributed-error-aggregation` is on), plus `errorDoc2ExecutionError`.

A reader returns a `ReadResult`: every candidate it considered, the error it picked (if any), the
rule that decided, or, where the Go code returns an *error* instead of an ExecutionError (a corrupt or
oversized file, a failed listing or read), a `round_error`: propeller then fails the
evaluation round and tries again, and after `max-workflow-retries` such rounds fails the workflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Callable, Optional

from flyteidl.core import errors_pb2, execution_pb2
from google.protobuf.message import DecodeError

from aggregation import defaults, gotime
from aggregation.propeller_store import PropellerStore
from aggregation.storage import ObjectNotFound, OutputPrefix, StorageError
from aggregation.wire import decode_error_document

#: flytestdlib storage `maxDownloadMBs` default in bytes: error files larger than this are a Go error.
DEFAULT_MAX_PAYLOAD_BYTES = defaults.MAX_PAYLOAD_BYTES

#: The canonical error file name (flytekit `ERROR_FILE_NAME`, propeller `GetErrorPath`).
CANONICAL_ERROR_FILE = "error.pb"

DEFAULT = "default"
EARLIEST = "earliest"
STRATEGIES = (EARLIEST, DEFAULT)

# The rule that decided which file won (shown to people, asserted by tests).
RULE_NO_ERROR_FILE = "no error file"
RULE_SINGLE_FILE = "the single error.pb (default strategy: last writer wins)"
RULE_ONLY_CANDIDATE = "the only candidate"
RULE_EARLIEST = "earliest timestamp"
RULE_TIE = "tie on timestamp, broken by listing order (first listed wins)"
RULE_EPOCH = "missing timestamp counts as the Unix epoch"
RULE_BAD_FORMAT_ALONE = "document without `error`: ErrorFileBadFormat"
#: the earliest reader compares it with the others: it has no timestamp to compare
RULE_BAD_FORMAT = f"{RULE_BAD_FORMAT_ALONE} (no timestamp, so it counts as the epoch)"
RULE_ROUND_ERROR = "no verdict: the reader returned an error"
RULE_FUTURES_HEAD_FAILED = "no verdict: the HEAD of futures.pb, before the reader, returned an error"
RULE_LISTING_RACE = "IsError listed error files, ReadError listed none: Unknown, not recoverable"

KIND_NAMES = {value: name for name, value in execution_pb2.ExecutionError.ErrorKind.items()}
_RECOVERABLE = errors_pb2.ContainerError.RECOVERABLE
#: the store the readers assume when none is configured: listed names are reachable, named as the prefix is
AS_NAMED = PropellerStore()


def kind_name(kind: int) -> str:
    """`ExecutionError.ErrorKind` as its name (an out-of-range value keeps its number)."""
    return KIND_NAMES.get(kind, str(kind))


@dataclass(frozen=True)
class ObservedError:
    """The ExecutionError propeller builds from an error file (or from a rule, e.g. ErrorFileBadFormat)."""

    code: str
    message: str
    kind: str  # "UNKNOWN" | "USER" | "SYSTEM"
    recoverable: bool
    timestamp_ns: Optional[int] = None  # None: the document carried no timestamp
    worker: str = ""
    path: Optional[str] = None  # the key it came from, relative to the prefix

    def to_proto(self) -> execution_pb2.ExecutionError:
        error = execution_pb2.ExecutionError(code=self.code, message=self.message, worker=self.worker)
        error.kind = execution_pb2.ExecutionError.ErrorKind.Value(self.kind)
        if self.timestamp_ns is not None:
            error.timestamp.FromNanoseconds(self.timestamp_ns)
        return error


@dataclass(frozen=True)
class Candidate:
    """One error file the reader considered, in listing order."""

    path: str
    size: int
    error: Optional[ObservedError] = None  # None when the file could not be read or parsed
    problem: Optional[str] = None  # why it could not be (the Go error text)
    selected: bool = False
    bad_format: bool = False  # parsed, but the document has no `error`

    @property
    def order_key(self) -> tuple[int, int]:
        """How the earliest reader orders this candidate: Go's `time.Time` of its stamp (see `gotime`)."""
        return gotime.order_key(self.error.timestamp_ns if self.error is not None else None)

    @property
    def sort_timestamp_ns(self) -> int:
        """What the earliest reader compares: a missing timestamp is the epoch."""
        if self.error is None or self.error.timestamp_ns is None:
            return 0
        return self.error.timestamp_ns


@dataclass(frozen=True)
class ReadResult:
    """What a reader concluded for one output prefix."""

    strategy: str
    candidates: tuple[Candidate, ...] = ()
    error: Optional[ObservedError] = None
    rule: str = RULE_NO_ERROR_FILE
    round_error: Optional[str] = None
    ignored: tuple[str, ...] = field(default=())  # listed keys that are not candidates (not `.pb`)

    @property
    def selected(self) -> Optional[Candidate]:
        return next((c for c in self.candidates if c.selected), None)


@dataclass(frozen=True)
class ListedErrors:
    """What `IsError` listed and HEADed: the `.pb` keys in listing order, their sizes, and the other keys."""

    keys: tuple[str, ...]
    sizes: tuple[int, ...]
    ignored: tuple[str, ...]


#: Set by `aggregation.symbolic.recording` while `aggsim prove` records a run (None otherwise): maps a parsed
#: stamp back to the symbolic term it was written from. A hook, so that the readers never import the prover.
STAMP_TRACER: Optional[Callable[[tuple, int], object]] = None


def document_to_error(
    document: errors_pb2.ErrorDocument, path: str, reference: "str | Callable[[], str]"
) -> ObservedError:
    """`errorDoc2ExecutionError`: origin becomes kind; recoverable only when kind == RECOVERABLE.

    `reference` is the file's name as the reader holds it (it appears in ErrorFileBadFormat's message), or
    a function that makes it: the name is built only when a message needs it.
    """
    if not document.HasField("error"):
        name = reference if isinstance(reference, str) else reference()
        return ObservedError(
            code="ErrorFileBadFormat",
            message=f"error not formatted correctly, nil error @path [{name}]",
            kind="SYSTEM",
            recoverable=True,
            path=path,
        )
    container = document.error
    code, message, worker, origin = container.code, container.message, container.worker, container.origin
    timestamp_ns = None
    if container.HasField("timestamp"):
        stamp = container.timestamp
        timestamp_ns = stamp.seconds * 1_000_000_000 + stamp.nanos
        if STAMP_TRACER is not None:  # `aggsim prove`: the symbolic stamp the document was written with
            timestamp_ns = STAMP_TRACER((worker, code, message), timestamp_ns)
    kind = KIND_NAMES.get(origin) or str(origin)
    return ObservedError(code, message, kind, container.kind == _RECOVERABLE, timestamp_ns, worker, path)


def parse_document(data: bytes) -> errors_pb2.ErrorDocument:
    """Unmarshal exactly like Go's `proto.Unmarshal` (see `aggregation.wire`); raises `WireError`."""
    return decode_error_document(data)


def listed_reference(location: str, key: str, store: PropellerStore = AS_NAMED) -> str:
    """The key as flytestdlib's `List` names it, which is how the earliest reader's messages name files, and what
    it HEADs and reads (`propeller_store`)."""
    return store.listed_reference(location, key)


def too_large(reference: str, size: int, limit: int) -> str:
    """The HEAD check's Go error for a file over the payload limit: `validatePayloadSize` (error files) and
    `RemoteFileOutputReader.IsError`/`Exists` (outputs.pb) word it alike, as pkg/errors `Wrapf` of
    `ErrRemoteFileExceedsMaxSize`, whose text follows the message after ": "."""
    return f"output file @[{reference}] is too large [{size}] bytes, max allowed [{limit}] bytes: {EXCEEDS_MAX_SIZE}"


#: flyteplugins v1.16.8 `ioutils/remote_file_output_reader.go` `ErrRemoteFileExceedsMaxSize`
EXCEEDS_MAX_SIZE = "remote file exceeds max size"


def _read_document(
    prefix: OutputPrefix, key: str, reference: Callable[[], str], limit: int
) -> errors_pb2.ErrorDocument:
    """flytestdlib `ReadProtobuf`: `ReadRaw` (which enforces the size limit again, on the object as it is
    now) then `proto.Unmarshal`; errors carry the texts Go's wrapping gives them (`reference()` names the file)."""
    data = prefix.read(key)
    if limit != 0 and len(data) > limit:  # ReadRaw skips its check when maxDownloadMBs is 0 (HEAD's still fails)
        raise StorageError(
            f"path:{reference()}: [LIMIT_EXCEEDED] limit exceeded. {len(data) / 2**20:.6f}mb > {limit / 2**20:g}mb. "
            "You can increase the limit by setting maxDownloadMBs."
        )
    try:
        return parse_document(data)
    except DecodeError as e:
        raise DecodeError(f"unmarshall: {reference()}: {e}") from None


class DefaultErrorReader:
    """`singleFileErrorReader`: HEAD `<prefix>/error.pb`; missing means no error."""

    strategy = DEFAULT

    def __init__(self, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES, store: PropellerStore = AS_NAMED) -> None:
        self.max_payload_bytes = max_payload_bytes
        self.store = store

    def read(self, prefix: OutputPrefix) -> ReadResult:
        key = CANONICAL_ERROR_FILE
        reference = f"{prefix.location.rstrip('/')}/{key}"  # GetErrorPath: built, not listed, so never escaped
        prefix = self.store.reaching(prefix)
        try:
            size = prefix.head(key)
        except StorageError as e:
            return ReadResult(
                DEFAULT, rule=RULE_ROUND_ERROR, round_error=f"failed to read error file @[{reference}]: {e}"
            )
        if size is None:
            return ReadResult(DEFAULT)
        if size > self.max_payload_bytes:
            problem = too_large(reference, size, self.max_payload_bytes)
            return ReadResult(
                DEFAULT, (Candidate(key, size, problem=problem),), rule=RULE_ROUND_ERROR, round_error=problem
            )
        try:
            document = _read_document(prefix, key, lambda: reference, self.max_payload_bytes)
        except ObjectNotFound as e:
            # deleted between HEAD and GET: only this reader maps not-found to an ExecutionError
            error = ObservedError("ErrorFileNotFound", str(e), "SYSTEM", True, path=key)
            return ReadResult(DEFAULT, (Candidate(key, size, error=error, selected=True),), error, RULE_SINGLE_FILE)
        except (StorageError, DecodeError) as e:
            problem = f"failed to read error data from task @[{reference}]: {e}"
            return ReadResult(
                DEFAULT, (Candidate(key, size, problem=problem),), rule=RULE_ROUND_ERROR, round_error=problem
            )
        error = document_to_error(document, key, reference)
        bad_format = not document.HasField("error")
        rule = RULE_BAD_FORMAT_ALONE if bad_format else RULE_SINGLE_FILE  # one file: no timestamp is compared
        return ReadResult(
            DEFAULT, (Candidate(key, size, error=error, selected=True, bad_format=bad_format),), error, rule
        )


class EarliestErrorReader:
    """`earliestFileErrorReader`: list raw prefix `error`, keep `*.pb`, pick the strictly earliest stamp."""

    strategy = EARLIEST

    def __init__(
        self,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        canonical_name: str = CANONICAL_ERROR_FILE,
        store: PropellerStore = AS_NAMED,
    ) -> None:
        self.store = store
        pieces = canonical_name.split(".")
        if len(pieces) != 2:
            # newEarliestFileErrorReader refuses any other canonical name
            raise ValueError(f"expected canonical error filename to have a single dot (.), got {len(pieces) - 1}")
        self.key_prefix, self.extension = pieces[0], "." + pieces[1]
        self.max_payload_bytes = max_payload_bytes

    def listing(self, prefix: OutputPrefix) -> tuple[list[str], list[str]]:
        """One listing of the raw prefix `error`, every page in the store's order: the keys ending in `.pb`, which
        this reader reads, and the others, which it leaves. Raises `StorageError`."""
        kept: list[str] = []
        ignored: list[str] = []
        for page in prefix.list_pages(self.key_prefix):
            for entry in page:
                (kept if entry.key.endswith(self.extension) else ignored).append(entry.key)
        return kept, ignored

    def read(self, prefix: OutputPrefix) -> ReadResult:
        """`ValidateOutput`: `IsError`, then, if it found error files, `ReadError`."""
        found = self.is_error(prefix)
        if isinstance(found, ReadResult):
            return found
        return self.read_error(prefix, found)

    def is_error(self, prefix: OutputPrefix) -> "ListedErrors | ReadResult":
        """`IsError`: list every page of `error*`, HEAD every `.pb` key (the size limit is enforced here).

        Returns what it listed, or the final `ReadResult` when there is nothing to read (no error files)
        or the round fails (a listing, HEAD or size error).
        """
        location = prefix.location.rstrip("/")
        try:
            heads, ignored = self.listing(self.store.reaching(prefix))
        except StorageError as e:
            return ReadResult(
                EARLIEST, rule=RULE_ROUND_ERROR, round_error=f"failed to list error files @[{location}]: {e}"
            )
        sizes: list[int] = []
        store = self.store
        if heads:
            store.check_modelled()
            if store.lists_unreachable_names:  # HEAD of the first listed name fails before it asks the store
                named = store.listed_reference(location, heads[0])
                problem = f"failed to read error file @[{named}]: {store.head_error(named)}"
                return self._round_error(heads, sizes, Candidate(heads[0], 0, problem=problem), ignored)
        for key in heads:
            try:
                size = prefix.head(key)
            except StorageError as e:
                problem = f"failed to read error file @[{store.listed_reference(location, key)}]: {e}"
                return self._round_error(heads, sizes, Candidate(key, 0, problem=problem), ignored)
            if size is not None and size > self.max_payload_bytes:
                problem = too_large(store.listed_reference(location, key), size, self.max_payload_bytes)
                return self._round_error(heads, sizes, Candidate(key, size, problem=problem), ignored)
            sizes.append(size or 0)
        if not heads:
            return ReadResult(EARLIEST, ignored=tuple(ignored))
        return ListedErrors(tuple(heads), tuple(sizes), tuple(ignored))

    def read_error(self, prefix: OutputPrefix, listed_by_is_error: "ListedErrors") -> ReadResult:
        """`ReadError`: list again and read every `.pb` key in listing order; the strictly earliest stamp wins.

        Any failure is a Go error for the round. Files that appeared since `IsError` are read unHEADed.
        """
        location = prefix.location.rstrip("/")
        ignored = listed_by_is_error.ignored
        try:
            listed, _ = self.listing(prefix)
        except StorageError as e:
            return ReadResult(
                EARLIEST, rule=RULE_ROUND_ERROR, round_error=f"failed to list error files @[{location}]: {e}"
            )
        if not listed:
            # handler.go ValidateOutput: IsError said yes, ReadError found nothing -> permanent UNKNOWN failure
            race = ObservedError(code="Unknown", message="Unknown", kind="UNKNOWN", recoverable=False)
            return ReadResult(EARLIEST, (), race, RULE_LISTING_RACE, ignored=ignored)
        size_of = dict(zip(listed_by_is_error.keys, listed_by_is_error.sizes))
        parsed: list[Candidate] = []
        stamps: list[tuple[int, int]] = []
        winner_index, winner_key = 0, None
        for index, key in enumerate(listed):
            size = size_of.get(key, 0)
            reference = partial(self.store.listed_reference, location, key)  # built only for a message naming it
            try:
                document = _read_document(prefix, key, reference, self.max_payload_bytes)
            except (StorageError, DecodeError) as e:
                problem = f"failed to read error file @[{reference()}]: {e}"
                rest = [Candidate(k, size_of.get(k, 0)) for k in listed[index + 1 :]]
                failed = Candidate(key, size, problem=problem)
                return ReadResult(
                    EARLIEST,
                    tuple(parsed + [failed] + rest),
                    rule=RULE_ROUND_ERROR,
                    round_error=problem,
                    ignored=ignored,
                )
            error = document_to_error(document, key, reference)
            parsed.append(Candidate(key, size, error=error, bad_format=not document.HasField("error")))
            stamp = gotime.order_key(error.timestamp_ns)  # AsTime(); a missing timestamp is the epoch
            stamps.append(stamp)
            if winner_key is None or winner_key > stamp:  # earliest.After(ts): ties keep the first listed
                winner_index, winner_key = index, stamp

        rule = self._rule(parsed, stamps, winner_index)
        won = parsed[winner_index]  # built, not `replace`d: dataclasses.replace is slow, and every attempt reads here
        parsed[winner_index] = Candidate(won.path, won.size, won.error, won.problem, True, won.bad_format)
        return ReadResult(EARLIEST, tuple(parsed), parsed[winner_index].error, rule, ignored=ignored)

    @staticmethod
    def _round_error(listed, sizes, failed: Candidate, ignored) -> ReadResult:
        """A Go error from IsError: every key in listing order, the failing one carrying the problem."""
        candidates = []
        for index, key in enumerate(listed):
            if key == failed.path:
                candidates.append(failed)
            else:
                candidates.append(Candidate(key, sizes[index] if index < len(sizes) else 0))
        return ReadResult(
            EARLIEST, tuple(candidates), rule=RULE_ROUND_ERROR, round_error=failed.problem, ignored=tuple(ignored)
        )

    @staticmethod
    def _rule(parsed: list[Candidate], stamps: list[tuple[int, int]], winner_index: int) -> str:
        winner = parsed[winner_index]
        tie = stamps.count(stamps[winner_index]) > 1  # another candidate's stamp orders equal to the winner's
        if winner.bad_format:
            return f"{RULE_BAD_FORMAT}; {RULE_TIE}" if tie else RULE_BAD_FORMAT
        if len(parsed) == 1:
            return RULE_ONLY_CANDIDATE
        if winner.error is not None and winner.error.timestamp_ns is None:
            return f"{RULE_EPOCH}; {RULE_TIE}" if tie else RULE_EPOCH
        return RULE_TIE if tie else RULE_EARLIEST


@lru_cache(maxsize=64)
def reader_for(strategy: str, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES, store: PropellerStore = AS_NAMED):
    """The reader propeller builds for an aggregation strategy ("earliest" or "default") on its store.

    Readers hold only their configuration, so one per configuration serves every round (a simulation runs one
    round per attempt). The default reader HEADs the name it builds, so the store's naming of listings is the
    earliest reader's alone; a bucket the store refuses fails both."""
    if strategy == EARLIEST:
        return EarliestErrorReader(max_payload_bytes, store=store)
    if strategy == DEFAULT:
        return DefaultErrorReader(max_payload_bytes, store)
    raise ValueError(f"unknown error aggregation strategy: {strategy!r} (expected one of {', '.join(STRATEGIES)})")
