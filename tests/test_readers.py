"""Propeller's error readers, rule by rule.

Every rule mirrors flyteplugins v1.16.8 `go/tasks/pluginmachinery/ioutils/remote_file_output_reader.go`;
each test names the Go function it pins.
"""

from __future__ import annotations

import pytest
from conftest import T0  # noqa: E402
from flyteidl.core import errors_pb2, literals_pb2

from aggregation.documents import error_document_bytes
from aggregation.readers import (
    RULE_BAD_FORMAT,
    RULE_BAD_FORMAT_ALONE,
    RULE_EARLIEST,
    RULE_EPOCH,
    RULE_NO_ERROR_FILE,
    RULE_ONLY_CANDIDATE,
    RULE_ROUND_ERROR,
    RULE_SINGLE_FILE,
    RULE_TIE,
    DefaultErrorReader,
    EarliestErrorReader,
    reader_for,
)
from aggregation.storage import MemoryPrefix


def doc(**fields) -> bytes:
    fields.setdefault("timestamp_ns", T0)
    return error_document_bytes(**fields)


def earliest(*objects):
    return EarliestErrorReader().read(MemoryPrefix(list(objects)))


def default(*objects):
    return DefaultErrorReader().read(MemoryPrefix(list(objects)))


# --- earliestFileErrorReader ---------------------------------------------------------------------


def test_earliest_timestamp_wins():
    """`earliestFileErrorReader.ReadError`: the strictly earliest `timestamp` wins."""
    result = earliest(
        ("error-a.pb", doc(worker="a", timestamp_ns=T0 + 5)),
        ("error-b.pb", doc(worker="b", timestamp_ns=T0 + 1)),
        ("error-c.pb", doc(worker="c", timestamp_ns=T0 + 3)),
    )
    assert result.error.worker == "b"
    assert result.rule == RULE_EARLIEST
    assert [c.selected for c in result.candidates] == [False, True, False]


def test_tie_goes_to_the_first_key_in_listing_order():
    """`ReadError` keeps a candidate only when `earliestTimestamp.After(timestamp)`: ties keep the first listed."""
    result = earliest(
        ("error-z.pb", doc(worker="z")),
        ("error-a.pb", doc(worker="a")),
    )
    assert [c.path for c in result.candidates] == ["error-a.pb", "error-z.pb"]  # listing is lexicographic
    assert result.error.worker == "a"
    assert result.rule == RULE_TIE


def test_missing_timestamp_reads_as_epoch_and_beats_everything():
    """`errorDoc.GetError().GetTimestamp().AsTime()` of a nil timestamp is the Unix epoch."""
    result = earliest(
        ("error-a.pb", doc(worker="a", timestamp_ns=T0)),
        ("error-b.pb", doc(worker="b", timestamp_ns=None)),
    )
    assert result.error.worker == "b"
    assert result.error.timestamp_ns is None
    assert result.rule == RULE_EPOCH


def test_two_missing_timestamps_tie_at_the_epoch_and_the_first_listed_wins():
    """`EarliestFileErrorReader.ReadError` keeps a later file only when its `AsTime()` is strictly before: two epochs
    tie, so listing order decides, and the rule says both (it used to say the epoch alone)."""
    result = earliest(
        ("error-b.pb", doc(worker="b", timestamp_ns=None)),
        ("error-a.pb", doc(worker="a", timestamp_ns=None)),
        ("error-c.pb", doc(worker="c", timestamp_ns=T0)),
    )
    assert result.error.worker == "a"
    assert result.rule == f"{RULE_EPOCH}; {RULE_TIE}"
    # a document without `error` counts as the epoch too, and ties the same way
    bad = earliest(
        ("error-b.pb", errors_pb2.ErrorDocument().SerializeToString()), ("error-c.pb", doc(timestamp_ns=None))
    )
    assert bad.error.code == "ErrorFileBadFormat" and bad.rule == f"{RULE_BAD_FORMAT}; {RULE_TIE}"


def test_document_without_error_is_system_recoverable_bad_format_and_wins():
    """`errorDoc2ExecutionError`: nil `error` -> SYSTEM, recoverable, `ErrorFileBadFormat` (epoch stamp)."""
    result = earliest(
        ("error-a.pb", doc(worker="a")),
        ("error-b.pb", errors_pb2.ErrorDocument().SerializeToString()),
    )
    assert result.error.code == "ErrorFileBadFormat"
    assert result.error.kind == "SYSTEM"
    assert result.error.recoverable is True
    assert result.error.message.startswith("error not formatted correctly, nil error @path [")
    assert result.rule == RULE_BAD_FORMAT


def test_zero_byte_file_is_an_empty_document():
    """A zero-byte object unmarshals to an empty ErrorDocument (`proto.Unmarshal`), hence ErrorFileBadFormat."""
    result = earliest(("error-a.pb", b""))
    assert result.round_error is None
    assert result.error.code == "ErrorFileBadFormat"


def test_container_error_maps_to_execution_error():
    """`errorDoc2ExecutionError`: origin -> kind; code, message, timestamp, worker copied;
    recoverable iff RECOVERABLE."""
    result = earliest(
        ("error-a.pb", doc(code="USER:Recoverable", message="m", recoverable=True, origin="USER", worker="w"))
    )
    error = result.error
    assert (error.code, error.message, error.kind, error.recoverable, error.worker, error.timestamp_ns) == (
        "USER:Recoverable",
        "m",
        "USER",
        True,
        "w",
        T0,
    )
    assert result.rule == RULE_ONLY_CANDIDATE
    proto = error.to_proto()
    assert proto.kind == 1 and proto.timestamp.ToNanoseconds() == T0 and proto.error_uri == ""


def test_unset_kind_is_non_recoverable_and_unset_origin_is_unknown():
    """`ContainerError.kind` defaults to NON_RECOVERABLE (0); `origin` to UNKNOWN (0)."""
    container = errors_pb2.ContainerError(code="X", message="m")
    container.timestamp.FromNanoseconds(T0)
    result = earliest(("error-a.pb", errors_pb2.ErrorDocument(error=container).SerializeToString()))
    assert result.error.recoverable is False
    assert result.error.kind == "UNKNOWN"


def test_raw_prefix_matches_errors_and_nested_keys_but_only_pb():
    """`newEarliestFileErrorReader`: raw key prefix `<dir>/error` and extension `.pb`, not a directory listing."""
    result = earliest(
        ("error.pb.tmp", doc(worker="tmp")),
        ("error-x.json", doc(worker="json")),
        ("errors-x.pb", doc(worker="errors", timestamp_ns=T0 + 2)),
        ("error/nested.pb", doc(worker="nested", timestamp_ns=T0 + 1)),
        ("outputs.pb", literals_pb2.LiteralMap().SerializeToString()),
        ("my-error.pb", doc(worker="not-prefixed", timestamp_ns=0)),
    )
    assert [c.path for c in result.candidates] == ["error/nested.pb", "errors-x.pb"]
    assert result.error.worker == "nested"
    assert set(result.ignored) == {"error.pb.tmp", "error-x.json"}


def test_no_files_means_no_error():
    """`ReadError` with nothing listed: no ExecutionError and no Go error."""
    result = earliest(("outputs.pb", b""))
    assert result.error is None and result.round_error is None and result.rule == RULE_NO_ERROR_FILE


def test_corrupt_file_is_a_round_error_even_when_another_file_would_win():
    """`ReadError`: any `ReadProtobuf` failure returns a Go error ("failed to read error file @[...]")."""
    result = earliest(
        ("error-a.pb", doc(timestamp_ns=0 + 1)),
        ("error-b.pb", b"\xff\xff\xff\xff"),
    )
    assert result.error is None
    assert result.round_error.startswith("failed to read error file @[memory-prefix/error-b.pb]")
    assert result.rule == RULE_ROUND_ERROR
    assert [c.problem is not None for c in result.candidates] == [False, True]


def test_non_utf8_message_is_a_round_error():
    """proto3 `string` fields must be UTF-8: Go's `proto.Unmarshal` rejects them, so does this reader."""
    bad = errors_pb2.ErrorDocument(error=errors_pb2.ContainerError(code="X", message="PLACEHOLDER"))
    data = bad.SerializeToString().replace(b"PLACEHOLDER", b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5")
    result = earliest(("error-a.pb", data))
    assert result.round_error is not None and "UTF-8" in result.round_error


def test_truncated_file_is_a_round_error():
    data = doc(message="x" * 100)
    result = earliest(("error-a.pb", data[: len(data) // 2]))
    assert result.round_error is not None


def test_wrong_message_type_is_read_as_whatever_it_decodes_to():
    """Protobuf has no type tag: a LiteralMap's bytes decode as an ErrorDocument (Go does the same)."""
    literal_map = literals_pb2.LiteralMap()
    literal_map.literals["x"].scalar.primitive.integer = 3
    result = earliest(("error-a.pb", literal_map.SerializeToString()))
    assert result.round_error is None
    assert result.error.code == "x"


def test_oversized_file_is_a_round_error_at_head_time():
    """`IsError` HEADs every `.pb` key: `Size() > maxPayloadSize` -> "output file @[..] is too large", wrapping
    `ErrRemoteFileExceedsMaxSize` (pkg/errors `Wrapf`: the wrapped error's text follows after ": ")."""
    limit = 1000
    reader = EarliestErrorReader(max_payload_bytes=limit)
    big = doc(message="x" * 2000)
    result = reader.read(MemoryPrefix([("error-a.pb", doc()), ("error-b.pb", big)]))
    assert result.round_error == (
        f"output file @[memory-prefix/error-b.pb] is too large [{len(big)}] bytes, max allowed [{limit}] bytes: "
        "remote file exceeds max size"
    )
    exactly = doc(message="y" * 10)
    assert (
        EarliestErrorReader(max_payload_bytes=len(exactly)).read(MemoryPrefix([("error-a.pb", exactly)])).round_error
        is None
    )


def test_default_payload_limit_is_two_mebibytes():
    """flytestdlib storage `GetLimitMegabytes` default 2, times 1024*1024 (`getMaxPayloadSize`): a document of
    exactly 2 MiB is read, one byte more fails the round, for both readers built with their defaults."""
    limit = 2 * 1024 * 1024
    size = next(n for n in range(limit - 64, limit) if len(doc(message="x" * n)) == limit)
    at_limit, over = doc(message="x" * size), doc(message="x" * (size + 1))
    assert (len(at_limit), len(over)) == (limit, limit + 1)
    for reader, key in ((EarliestErrorReader(), "error-a.pb"), (DefaultErrorReader(), "error.pb")):
        assert reader.read(MemoryPrefix([(key, at_limit)])).round_error is None
        assert "too large" in reader.read(MemoryPrefix([(key, over)])).round_error


def test_canonical_name_must_have_a_single_dot():
    """`newEarliestFileErrorReader`: "expected canonical error filename to have a single dot (.)"."""
    with pytest.raises(ValueError, match="single dot"):
        EarliestErrorReader(canonical_name="error.pb.gz")


def test_unknown_strategy_is_refused():
    """`newErrorReader`: "unknown error aggregation strategy"."""
    with pytest.raises(ValueError, match="unknown error aggregation strategy"):
        reader_for("latest")


def test_listing_more_than_one_page_changes_nothing():
    """`IsError`/`ReadError` page `List` by 1000: the winner is the same across page boundaries."""
    objects = [(f"error-{i:05d}.pb", doc(worker=str(i), timestamp_ns=T0 + 10_000 - i)) for i in range(2500)]
    prefix = MemoryPrefix(objects)
    result = EarliestErrorReader().read(prefix)
    assert result.error.worker == "2499"
    assert prefix.requests.list_pages == 6  # 3 pages, listed by IsError and again by ReadError
    assert prefix.requests.heads == 2500 and prefix.requests.gets == 2500


# --- singleFileErrorReader (default strategy) ---------------------------------------------------


def test_default_reads_only_error_pb():
    """`singleFileErrorReader`: HEAD `<dir>/error.pb`; other names are invisible."""
    result = default(
        ("error-a.pb", doc(worker="a", timestamp_ns=0)),
        ("error.pb", doc(worker="", code="USER:ValueError")),
    )
    assert result.error.code == "USER:ValueError"
    assert [c.path for c in result.candidates] == ["error.pb"]
    assert result.rule == RULE_SINGLE_FILE


def test_default_missing_file_means_no_error():
    """`singleFileErrorReader.IsError`: exists == false -> no error."""
    result = default(("error-a.pb", doc()))
    assert result.error is None and result.round_error is None


def test_default_corrupt_or_oversized_file_is_a_round_error():
    """`ReadError`: any other failure -> "failed to read error data from task @[...]"; `IsError`: size limit."""
    assert default(("error.pb", b"\xff\xff")).round_error.startswith("failed to read error data from task @[")
    big = doc(message="x" * 100)
    result = DefaultErrorReader(max_payload_bytes=50).read(MemoryPrefix([("error.pb", big)]))
    assert "is too large" in result.round_error


def test_default_bad_format():
    """`singleFileErrorReader.ReadError` -> `errorDoc2ExecutionError`: no timestamp is compared, so the rule does
    not speak of the epoch (only the earliest reader's does)."""
    result = default(("error.pb", b""))
    assert result.error.code == "ErrorFileBadFormat" and result.rule == RULE_BAD_FORMAT_ALONE
    assert "epoch" not in result.rule


def test_default_file_deleted_between_head_and_read_is_error_file_not_found():
    """`singleFileErrorReader.ReadError`: not found -> SYSTEM, recoverable, `ErrorFileNotFound`."""

    class Vanishing(MemoryPrefix):
        def read(self, key):
            self._objects.pop(key, None)
            return super().read(key)

    result = DefaultErrorReader().read(Vanishing([("error.pb", doc())]))
    assert (result.error.code, result.error.kind, result.error.recoverable) == ("ErrorFileNotFound", "SYSTEM", True)


def test_read_error_lists_again_and_a_vanished_listing_is_unknown():
    """`ReadError` re-lists (`store.List` in both IsError and ReadError); nothing left -> handler.go
    ValidateOutput builds `{Kind: UNKNOWN, Code: "Unknown"}`, not recoverable."""
    from aggregation.readers import RULE_LISTING_RACE

    class EmptiedAfterFirstListing(MemoryPrefix):
        listings = 0

        def list_pages(self, key_prefix):
            self.listings += 1
            if self.listings > 1:
                self._objects.clear()
            return super().list_pages(key_prefix)

    result = EarliestErrorReader().read(EmptiedAfterFirstListing([("error-a.pb", doc())]))
    assert (result.error.code, result.error.kind, result.error.recoverable) == ("Unknown", "UNKNOWN", False)
    assert result.rule == RULE_LISTING_RACE


def test_file_appearing_between_is_error_and_read_error_is_read():
    """A key listed only by ReadError is read (no HEAD): an upload landing mid-round can still win."""

    class UploadDuringRound(MemoryPrefix):
        listings = 0

        def list_pages(self, key_prefix):
            self.listings += 1
            if self.listings == 2:
                self._objects["error-early.pb"] = doc(worker="late-upload", timestamp_ns=T0 - 10)
            return super().list_pages(key_prefix)

    prefix = UploadDuringRound([("error-a.pb", doc(worker="a"))])
    result = EarliestErrorReader().read(prefix)
    assert result.error.worker == "late-upload"
    assert prefix.requests.heads == 1 and prefix.requests.gets == 2 and prefix.requests.list_pages == 2
