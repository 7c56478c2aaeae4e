"""Error files decoded and ordered exactly as propeller does.

Decoding mirrors google.golang.org/protobuf v1.36 (flyteplugins v1.16.8's): `internal/impl/decode.go`
`unmarshalPointer` and `encoding/protowire/wire.go` `ConsumeVarint` / `ConsumeTag` / `consumeFieldValueD`.
Ordering mirrors `remote_file_output_reader.go` `earliestFileErrorReader.ReadError` (`AsTime().After`) and Go's
`time.Unix` / `Time.After`. Messages mirror `errorDoc2ExecutionError` and flytestdlib `StowStore.List`.
"""

from __future__ import annotations

import pytest
from conftest import T0
from flyteidl.core import errors_pb2
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregation import gotime
from aggregation.documents import error_document_bytes
from aggregation.explain import explain_prefix
from aggregation.readers import EarliestErrorReader, listed_reference
from aggregation.storage import MemoryPrefix
from aggregation.wire import WireError, decode_error_document

# --- an encoder written from the wire-format spec, with the freedoms the spec allows -------------------


def varint(value: int, extra: int = 0) -> bytes:
    """Base-128 varint of a uint64, padded with `extra` over-long continuation bytes (still <= 10 bytes)."""
    out = bytearray()
    while True:
        out.append(value & 0x7F)
        value >>= 7
        if not value:
            break
    for _ in range(extra):
        out.append(0)
    for i in range(len(out) - 1):
        out[i] |= 0x80
    assert len(out) <= 10
    return bytes(out)


def tag(number: int, wire_type: int, extra: int = 0) -> bytes:
    return varint(number << 3 | wire_type, extra)


def length_delimited(number: int, body: bytes, extra: int = 0) -> bytes:
    return tag(number, 2, extra) + varint(len(body), extra) + body


def upb(data: bytes) -> errors_pb2.ErrorDocument:
    document = errors_pb2.ErrorDocument()
    document.ParseFromString(data)
    return document


# --- one test per class of difference from upb, with the exact bytes ---------------------------------


def test_over_long_tags_and_lengths_are_accepted_as_go_does():
    body = length_delimited(1, b"USER:Boom", extra=4)  # code, tag and length each 5-6 bytes long
    data = tag(1, 2, extra=5) + varint(len(body), extra=5) + body
    with pytest.raises(DecodeError):
        upb(data)  # upb's limit for a tag or a length is 5 bytes
    assert decode_error_document(data).error.code == "USER:Boom"


def test_a_varint_past_64_bits_fails_as_go_does():
    overflow = bytes([0xFF] * 9 + [0x02])  # 10th byte > 1: ConsumeVarint's errCodeOverflow
    data = length_delimited(1, tag(3, 0) + overflow)
    upb(data)  # upb drops the extra bit and reads on
    with pytest.raises(WireError):
        decode_error_document(data)
    largest = length_delimited(1, tag(3, 0) + bytes([0xFF] * 9 + [0x01]))  # 2^64-1: fits, int32 of it is -1
    assert decode_error_document(largest).error.kind == -1


def test_the_fast_path_never_lets_through_what_go_refuses():
    """A canonical document plus an unknown field upb keeps raw (an overflowing varint): Go fails the round."""
    canonical = error_document_bytes(code="USER:X", timestamp_ns=T0, worker="w")
    assert decode_error_document(canonical) == upb(canonical)
    data = canonical + tag(7, 0) + bytes([0xFF] * 9 + [0x02])
    upb(data)
    with pytest.raises(WireError):
        decode_error_document(data)


def nested_groups(depth: int, number: int = 7) -> bytes:
    return tag(number, 3) * depth + tag(number, 4) * depth


def test_unknown_groups_nest_to_go_s_limit_not_upb_s():
    deep = length_delimited(1, nested_groups(150) + length_delimited(1, b"USER:Deep"))
    with pytest.raises(DecodeError):
        upb(deep)  # upb's recursion limit is 100
    assert decode_error_document(deep).error.code == "USER:Deep"
    assert decode_error_document(nested_groups(10_001)) == errors_pb2.ErrorDocument()  # DefaultRecursionLimit
    with pytest.raises(WireError):
        decode_error_document(nested_groups(10_002))


@pytest.mark.parametrize(
    "data, why",
    [
        (tag(0, 0) + b"\x00", "field number 0"),
        (tag((1 << 29), 0) + b"\x00", "field number past 2^29-1 in a message"),
        (tag(9, 6), "wire type 6"),
        (tag(9, 7), "wire type 7"),
        (tag(9, 4), "an end-group tag with no group open"),
        (tag(9, 3) + tag(8, 4), "a group closed with another number"),
        (tag(9, 3), "a group never closed"),
        (length_delimited(1, length_delimited(1, b"\xff\xfe")), "a string that is not UTF-8"),
        (tag(1, 2) + varint(5) + b"abc", "a length past the end"),
        (tag(9, 5) + b"abc", "a truncated fixed32"),
        (b"\x80", "a truncated varint"),
    ],
)
def test_what_go_refuses_fails_the_round(data, why):
    with pytest.raises(WireError):
        decode_error_document(data)
    result = EarliestErrorReader().read(MemoryPrefix([("error-a.pb", data)], location="s3://bucket/run/0"))
    assert result.round_error and "cannot parse" in result.round_error or "UTF-8" in result.round_error, why


def test_field_numbers_inside_unknown_groups_go_to_2_to_the_31():
    inner = tag((1 << 31) - 1, 0) + b"\x01"  # DecodeTag allows MaxInt32 inside a group
    assert decode_error_document(tag(9, 3) + inner + tag(9, 4)) == errors_pb2.ErrorDocument()
    with pytest.raises(WireError):
        decode_error_document(tag(9, 3) + tag(1 << 31, 0) + b"\x01" + tag(9, 4))


def test_known_fields_with_another_wire_type_are_skipped_and_scalars_truncate_like_go():
    data = tag(1, 0) + varint(5)  # `error` as a varint: unknown, so the document has no error
    assert not decode_error_document(data).HasField("error")
    container = (
        tag(4, 0)
        + varint((1 << 32) + 2)  # origin: int32(v) = 2 (SYSTEM)
        + length_delimited(5, tag(2, 0) + varint((1 << 64) - 1))  # nanos: int32 of 2^64-1 = -1
        + length_delimited(5, tag(1, 0) + varint((1 << 64) - 5))  # a second timestamp merges: seconds -5
    )
    document = decode_error_document(length_delimited(1, container))
    assert document.error.origin == 2
    assert (document.error.timestamp.seconds, document.error.timestamp.nanos) == (-5, -1)


# --- generated documents, encoded with every freedom the spec allows ---------------------------------

FIELDS = st.sampled_from(["code", "message", "worker", "kind", "origin", "seconds", "nanos", "unknown", "empty"])
TEXT = st.text(max_size=12)


@st.composite
def documents(draw):
    """(bytes, the ErrorDocument those bytes mean): fields in any order, repeated, over-long, among unknowns."""
    expected = errors_pb2.ErrorDocument()
    chunks = []
    for _ in range(draw(st.integers(0, 8))):
        field = draw(FIELDS)
        pad = draw(st.integers(0, 3))
        if field in ("code", "message", "worker"):
            value = draw(TEXT)
            number = {"code": 1, "message": 2, "worker": 6}[field]
            chunks.append(length_delimited(1, length_delimited(number, value.encode(), pad), pad))
            setattr(expected.error, field, value)
        elif field in ("kind", "origin"):
            value = draw(st.integers(0, (1 << 64) - 1))
            chunks.append(length_delimited(1, tag(3 if field == "kind" else 4, 0, pad) + varint(value), pad))
            setattr(expected.error, field, (value & 0xFFFFFFFF) - ((value & 0x80000000) << 1))
        elif field in ("seconds", "nanos"):
            value = draw(st.integers(0, (1 << 64) - 1))
            body = tag(1 if field == "seconds" else 2, 0, pad) + varint(value)
            chunks.append(length_delimited(1, length_delimited(5, body, pad), pad))
            if field == "seconds":
                expected.error.timestamp.seconds = value - (1 << 64) if value >> 63 else value
            else:
                expected.error.timestamp.nanos = (value & 0xFFFFFFFF) - ((value & 0x80000000) << 1)
        elif field == "unknown":
            number = draw(st.integers(7, 1000))
            wire = draw(st.sampled_from([0, 1, 2, 5, 3]))
            value = {
                0: varint(draw(st.integers(0, 1 << 63))),
                1: b"\x00" * 8,
                2: varint(3) + b"abc",
                5: b"\x00" * 4,
                3: tag(number + 1, 0) + b"\x01" + tag(number, 4),
            }[wire]
            inside = draw(st.booleans())
            chunk = tag(number, wire, pad) + value
            chunks.append(length_delimited(1, chunk) if inside else chunk)
            if inside:
                expected.error.SetInParent()
        else:
            chunks.append(length_delimited(1, b"", pad))
            expected.error.SetInParent()
    return b"".join(chunks), expected


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_generated_documents_decode_to_what_the_spec_says(case):
    data, expected = case
    assert decode_error_document(data) == expected


@settings(max_examples=400)
@given(st.binary(max_size=64))
def test_any_bytes_either_decode_or_fail_as_go_fails_never_crash(data):
    try:
        document = decode_error_document(data)
    except WireError:
        return
    assert decode_error_document(document.SerializeToString()) == document  # what we hold is well formed


# --- timestamps: Go's time.Time, for any int64 seconds and int32 nanos --------------------------------

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)


def go_unix_key(seconds: int, nanos: int) -> tuple[int, int]:
    """time.Unix(sec, nsec) then Time.After's (sec, nsec), step by step in int64 as Go runs it."""

    def wrap(v):
        v &= (1 << 64) - 1
        return v - (1 << 64) if v >> 63 else v

    if nanos < 0 or nanos >= 10**9:
        n = int(nanos / 10**9)  # Go's integer division truncates toward zero
        seconds = wrap(seconds + n)
        nanos -= n * 10**9
        if nanos < 0:
            nanos += 10**9
            seconds = wrap(seconds - 1)
    return wrap(seconds + 62135596800), nanos


@settings(max_examples=500)
@given(INT64, INT32)
def test_order_key_is_go_s_time_arithmetic(seconds, nanos):
    assert gotime.order_key(seconds * 10**9 + nanos) == go_unix_key(seconds, nanos)


def stamped(seconds: int, nanos: int = 0, worker: str = "w") -> bytes:
    container = length_delimited(5, tag(1, 0) + varint(seconds % (1 << 64)) + tag(2, 0) + varint(nanos % (1 << 64)))
    return length_delimited(1, length_delimited(1, b"USER:X") + container + length_delimited(6, worker.encode()))


@settings(max_examples=200)
@given(INT64, INT32, INT64, INT32)
def test_the_earliest_reader_orders_any_two_stamps_as_go_does_and_explain_prints_them(s1, n1, s2, n2):
    prefix = MemoryPrefix([("error-a.pb", stamped(s1, n1, "a")), ("error-b.pb", stamped(s2, n2, "b"))])
    explanation = explain_prefix(prefix)
    b_wins = go_unix_key(s1, n1) > go_unix_key(s2, n2)  # a.After(b): b is earlier; a tie keeps a
    assert explanation.read.selected.path == ("error-b.pb" if b_wins else "error-a.pb")
    for candidate in explanation.to_json()["files"]:
        assert candidate["timestamp"]


def test_milliseconds_written_as_seconds_neither_crash_nor_win_and_a_wrapped_stamp_does():
    ms_as_seconds = stamped(1_764_480_000_000)  # year ~57,900: beyond datetime, still a valid Go time
    normal = error_document_bytes(code="USER:Normal", timestamp_ns=T0, worker="n")
    explanation = explain_prefix(MemoryPrefix([("error-ms.pb", ms_as_seconds), ("error-n.pb", normal)]))
    assert explanation.read.selected.path == "error-n.pb"
    assert "outside RFC 3339" in explanation.to_json()["files"][0]["timestamp"]
    wrapped = stamped((1 << 63) - 1)  # + 62,135,596,800 wraps negative in Go: the earliest of all
    explanation = explain_prefix(MemoryPrefix([("error-n.pb", normal), ("error-w.pb", wrapped)]))
    assert explanation.read.selected.path == "error-w.pb"


# --- messages as Go builds them -----------------------------------------------------------------------


def test_bad_format_message_names_the_key_as_the_listing_returns_it():
    """errorDoc2ExecutionError formats the listed DataReference: stow's item.URL().String() escapes it."""
    assert listed_reference("s3://bucket/run/0", "error #1.pb") == "s3://bucket/run/0/error%20%231.pb"
    assert listed_reference("file:///tmp/run", "error-ü.pb") == "file:///tmp/run/error-%C3%BC.pb"
    empty = errors_pb2.ErrorDocument().SerializeToString()
    prefix = MemoryPrefix([("error #1.pb", empty)], location="s3://bucket/run/0")
    error = EarliestErrorReader().read(prefix).error
    assert error.code == "ErrorFileBadFormat"
    assert error.message == "error not formatted correctly, nil error @path [s3://bucket/run/0/error%20%231.pb]"


def test_a_file_that_grows_after_its_head_fails_the_round_on_read():
    """flytestdlib StowStore.ReadRaw checks the limit again on the object it opens."""

    class Growing(MemoryPrefix):
        def read(self, key):
            return super().read(key) + b"\x00" * 64  # written to since the HEAD

    small = error_document_bytes(code="USER:X", timestamp_ns=T0)
    reader = EarliestErrorReader(max_payload_bytes=len(small) + 10)
    result = reader.read(Growing([("error-a.pb", small)]))
    assert result.round_error and "LIMIT_EXCEEDED" in result.round_error and "maxDownloadMBs" in result.round_error


@st.composite
def prefixes(draw):
    """1-4 error files: canonical documents with any stamp, or arbitrary bytes."""
    files = []
    for index in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            data = stamped(draw(INT64), draw(INT32), f"w{index}")
        else:
            data = draw(st.binary(max_size=40))
        files.append((f"error-{index}.pb", data))
    return files


@settings(max_examples=300)
@given(prefixes())
def test_explain_never_crashes_and_follows_the_go_rules_on_any_prefix(files):
    """ReadError: any file Go cannot decode fails the round; otherwise the earliest AsTime() wins, first listed
    on a tie; a document without `error` is ErrorFileBadFormat at the epoch (errorDoc2ExecutionError)."""
    explanation = explain_prefix(MemoryPrefix(files))
    explanation.to_json()
    decoded = []
    for name, data in files:
        try:
            decoded.append((name, decode_error_document(data)))
        except WireError:
            assert explanation.outcome.phase.value == "ROUND_FAILED" and name in explanation.read.round_error
            return

    def key(document):
        stamp = document.error.timestamp
        return go_unix_key(stamp.seconds, stamp.nanos)

    earliest = min(range(len(decoded)), key=lambda i: (key(decoded[i][1]), i))
    name, document = decoded[earliest]
    assert explanation.read.selected.path == name
    assert explanation.error.code == (document.error.code if document.HasField("error") else "ErrorFileBadFormat")
