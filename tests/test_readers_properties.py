"""Property tests: the readers against a deliberately naive reference written here from the Go rules.

Reference rules (flyteplugins v1.16.8 `remote_file_output_reader.go`):
- earliest: keys starting with "error" and ending with ".pb", in sorted order; any unparsable one ->
  round error; otherwise the first key whose timestamp (missing -> 0) is strictly smaller than every
  earlier key's; a document without `error` -> ErrorFileBadFormat at time 0.
- default: only "error.pb".
"""

from __future__ import annotations

from flyteidl.core import errors_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.documents import error_document_bytes
from aggregation.readers import DefaultErrorReader, EarliestErrorReader
from aggregation.storage import MemoryPrefix

names = st.one_of(
    st.sampled_from(
        ["error.pb", "error-a.pb", "errors-x.pb", "error.pb.tmp", "error-x.json", "outputs.pb", "err.pb", "error/n.pb"]
    ),
    st.builds(lambda s: f"error-{s}.pb", st.text(alphabet="0123456789abcdefZé", min_size=1, max_size=6)),
)

documents = st.one_of(
    st.builds(
        lambda code, recoverable, origin, ts, worker: error_document_bytes(
            code=code, recoverable=recoverable, origin=origin, timestamp_ns=ts, worker=worker
        ),
        st.sampled_from(["USER:Recoverable", "USER:RuntimeError", "SYSTEM"]),
        st.booleans(),
        st.sampled_from(["UNKNOWN", "USER", "SYSTEM"]),
        st.one_of(st.none(), st.integers(min_value=0, max_value=5).map(lambda s: 1_796_000_000 * 10**9 + s)),
        st.text(alphabet="abc", max_size=3),
    ),
    st.just(b""),  # an empty document: no `error`
    st.just(b"\xff\xff\xff"),  # corrupt
)

prefixes = st.dictionaries(names, documents, max_size=8)


def naive_earliest(objects: dict[str, bytes]):
    """Returns ("round_error", None) | ("none", None) | ("error", (key, code))."""
    keys = sorted((k for k in objects if k.startswith("error") and k.endswith(".pb")), key=lambda k: k.encode())
    parsed = []
    for key in keys:
        doc = errors_pb2.ErrorDocument()
        try:
            doc.ParseFromString(objects[key])
        except Exception:
            return ("round_error", None)
        if not doc.HasField("error"):
            parsed.append((key, 0, "ErrorFileBadFormat"))
        else:
            ts = doc.error.timestamp.ToNanoseconds() if doc.error.HasField("timestamp") else 0
            parsed.append((key, ts, doc.error.code))
    if not parsed:
        return ("none", None)
    best = parsed[0]
    for item in parsed[1:]:
        if item[1] < best[1]:
            best = item
    return ("error", (best[0], best[2]))


def naive_default(objects: dict[str, bytes]):
    if "error.pb" not in objects:
        return ("none", None)
    doc = errors_pb2.ErrorDocument()
    try:
        doc.ParseFromString(objects["error.pb"])
    except Exception:
        return ("round_error", None)
    return ("error", ("error.pb", doc.error.code if doc.HasField("error") else "ErrorFileBadFormat"))


def observed(result):
    if result.round_error is not None:
        return ("round_error", None)
    if result.error is None:
        return ("none", None)
    return ("error", (result.error.path, result.error.code))


@settings(max_examples=300)
@given(prefixes)
def test_earliest_reader_agrees_with_the_naive_reference(objects):
    result = EarliestErrorReader().read(MemoryPrefix(list(objects.items())))
    assert observed(result) == naive_earliest(objects)
    assert sum(c.selected for c in result.candidates) == (1 if result.error else 0)


@settings(max_examples=200)
@given(prefixes)
def test_default_reader_agrees_with_the_naive_reference(objects):
    result = DefaultErrorReader().read(MemoryPrefix(list(objects.items())))
    assert observed(result) == naive_default(objects)


@settings(max_examples=100)
@given(prefixes, st.randoms(use_true_random=False))
def test_insertion_order_never_matters_only_key_order_does(objects, rnd):
    items = list(objects.items())
    shuffled = items[:]
    rnd.shuffle(shuffled)
    a = EarliestErrorReader().read(MemoryPrefix(items))
    b = EarliestErrorReader().read(MemoryPrefix(shuffled))
    assert observed(a) == observed(b)
