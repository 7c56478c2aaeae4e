"""Decode an `ErrorDocument` exactly as propeller does: protobuf-go's `proto.Unmarshal` wire rules.

Propeller reads error files with flytestdlib's `ReadProtobuf`, i.e. google.golang.org/protobuf's
`proto.Unmarshal`. Python's upb backend differs from it at the edges of the wire format, and each
difference changes a verdict (a file that fails the round in one reads fine in the other). This module
decodes the one message propeller decodes, rule for rule from protobuf-go's `internal/impl/decode.go`
(`unmarshalPointer`) and `encoding/protowire/wire.go` (`ConsumeVarint`, `ConsumeTag`, `ConsumeFieldValue`):

- A varint may take up to 10 bytes, over-long forms included (`0x81 0x80 0x80 0x80 0x80 0x00` is 1);
  a 10th byte above 1 overflows 64 bits and is an error, as is an 11th byte.
- A tag's field number must be 1..2^29-1 in the message itself; inside an unknown group, 1..2^31-1
  (`DecodeTag`). Wire types 6 and 7 are errors; an end-group tag outside its group is an error.
- Unknown groups nest up to 10,000 levels deep (`DefaultRecursionLimit`); upb stops at 100.
- A known field with another wire type is an unknown field: skipped, never an error by itself.
- Scalars: the last occurrence wins; int32 and enum values are the varint's low 32 bits, two's complement;
  int64 its 64 bits. Proto3 strings must be valid UTF-8. A message field seen twice is merged.

The result is flyteidl's own generated `ErrorDocument`, holding what Go would hold (unknown fields are not
kept: propeller never looks at them).
"""

from __future__ import annotations

from flyteidl.core import errors_pb2
from google.protobuf.message import DecodeError

from aggregation.gonumbers import wrap

VARINT, FIXED64, BYTES, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5
MAX_VALID_NUMBER = (1 << 29) - 1
MAX_INT32 = (1 << 31) - 1
RECURSION_LIMIT = 10_000  # protowire.DefaultRecursionLimit

# protobuf-go's error texts (`internal/impl/decode.go` errDecode, `internal/impl/codec_field.go` errInvalidUTF8)
INVALID_WIRE_FORMAT = "proto: cannot parse invalid wire-format data"
INVALID_UTF8 = "proto: string field contains invalid UTF-8"


class WireError(DecodeError):
    """Where protobuf-go's `proto.Unmarshal` returns an error (propeller then fails the round)."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """`protowire.ConsumeVarint`: (value, next offset)."""
    value = 0
    for index in range(10):
        if at + index >= len(data):
            raise WireError(INVALID_WIRE_FORMAT)  # truncated
        byte = data[at + index]
        if index == 9 and byte > 1:
            raise WireError(INVALID_WIRE_FORMAT)  # overflows 64 bits
        value |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            return value, at + index + 1
    raise WireError(INVALID_WIRE_FORMAT)  # pragma: no cover - the 10th byte always ends or fails above


def _bytes(data: bytes, at: int) -> tuple[bytes, int]:
    """`protowire.ConsumeBytes`: a length varint, then that many bytes."""
    length, at = _varint(data, at)
    if length > len(data) - at:
        raise WireError(INVALID_WIRE_FORMAT)
    return data[at : at + length], at + length


def _skip(number: int, wire_type: int, data: bytes, at: int) -> int:
    """`protowire.ConsumeFieldValue` for an unknown field: the offset after its value.

    Groups are walked with an explicit stack, so 10,000 levels need no Python recursion.
    """
    groups: list[int] = []  # the field numbers of the open groups, innermost last
    while True:
        if wire_type == VARINT:
            _, at = _varint(data, at)
        elif wire_type == FIXED32 or wire_type == FIXED64:
            at += 4 if wire_type == FIXED32 else 8
            if at > len(data):
                raise WireError(INVALID_WIRE_FORMAT)
        elif wire_type == BYTES:
            _, at = _bytes(data, at)
        elif wire_type == START_GROUP:
            if RECURSION_LIMIT - len(groups) < 0:  # consumeFieldValueD: depth < 0
                raise WireError(INVALID_WIRE_FORMAT)
            groups.append(number)
        else:  # an end group with no group open here, or the reserved wire types 6 and 7
            raise WireError(INVALID_WIRE_FORMAT)
        while groups:  # inside a group: read the next tag (ConsumeTag: 1..2^31-1)
            tag, at = _varint(data, at)
            number, wire_type = tag >> 3, tag & 7
            if number > MAX_INT32 or number < 1:
                raise WireError(INVALID_WIRE_FORMAT)
            if wire_type != END_GROUP:
                break
            if number != groups.pop():
                raise WireError(INVALID_WIRE_FORMAT)
        else:
            return at


def _fields(data: bytes):
    """`unmarshalPointer`'s loop: (field number, wire type, offset of the value) per field, in order.

    The caller decodes a known field and returns the offset after it, or None to skip it as unknown.
    """
    at = 0
    while at < len(data):
        tag, at = _varint(data, at)
        number, wire_type = tag >> 3, tag & 7
        if number < 1 or number > MAX_VALID_NUMBER:
            raise WireError(INVALID_WIRE_FORMAT)
        if wire_type == END_GROUP:  # no group is open at a message's top level
            raise WireError(INVALID_WIRE_FORMAT)
        after = yield number, wire_type, at
        at = after if after is not None else _skip(number, wire_type, data, at)


def _string(data: bytes, at: int) -> tuple[str, int]:
    raw, at = _bytes(data, at)
    try:
        return raw.decode("utf-8"), at  # strict: the same bytes Go's utf8.Valid rejects
    except UnicodeDecodeError:
        raise WireError(INVALID_UTF8) from None


def _decode(data: bytes, message, decoders) -> None:
    fields = _fields(data)
    try:
        number, wire_type, at = next(fields)
        while True:
            decoder = decoders.get((number, wire_type))
            after = decoder(data, at, message) if decoder is not None else None
            number, wire_type, at = fields.send(after)
    except StopIteration:
        return


def _string_field(name):
    def decode(data, at, message):
        value, at = _string(data, at)
        setattr(message, name, value)
        return at

    return decode


def _enum_field(name):
    def decode(data, at, message):
        value, at = _varint(data, at)
        setattr(message, name, wrap(value, 32))  # proto3 enums are open: any number is kept
        return at

    return decode


def _message_field(name, decoders):
    def decode(data, at, message):
        body, at = _bytes(data, at)
        child = getattr(message, name)
        child.SetInParent()  # present even when empty; a second occurrence merges into it
        _decode(body, child, decoders)
        return at

    return decode


def _seconds(data, at, message):
    value, at = _varint(data, at)
    message.seconds = wrap(value, 64)
    return at


def _nanos(data, at, message):
    value, at = _varint(data, at)
    message.nanos = wrap(value, 32)
    return at


TIMESTAMP = {(1, VARINT): _seconds, (2, VARINT): _nanos}
CONTAINER_ERROR = {
    (1, BYTES): _string_field("code"),
    (2, BYTES): _string_field("message"),
    (3, VARINT): _enum_field("kind"),
    (4, VARINT): _enum_field("origin"),
    (5, BYTES): _message_field("timestamp", TIMESTAMP),
    (6, BYTES): _string_field("worker"),
}
ERROR_DOCUMENT = {(1, BYTES): _message_field("error", CONTAINER_ERROR)}


def decode_error_document(data: bytes) -> errors_pb2.ErrorDocument:
    """`proto.Unmarshal(data, &core.ErrorDocument{})`; raises `WireError` where Go returns an error.

    Fast path: bytes that upb parses and that are exactly the canonical encoding of what it parsed (what
    every protobuf writer, flytekit's included, produces) hold only known fields, minimal varints and valid
    UTF-8 (unknown fields are dropped before comparing, so any make it differ), and Go reads the same message
    from them. Anything else goes through the decoder above.
    """
    data = bytes(data)
    document = errors_pb2.ErrorDocument()
    try:
        document.ParseFromString(data)
        document.DiscardUnknownFields()  # unknown bytes are kept raw by upb: they must take the slow path
        if document.SerializeToString(deterministic=True) == data:
            return document
    except DecodeError:
        pass
    document = errors_pb2.ErrorDocument()
    _decode(data, document, ERROR_DOCUMENT)
    return document
