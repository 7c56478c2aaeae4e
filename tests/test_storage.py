"""Output prefixes through fsspec: local paths, `file://`, `memory://`, and a real S3 client.

The S3 case runs s3fs against moto's S3-compatible server, started on loopback by the test, with more
than 1,000 keys: listing order and pagination are those of a real S3 client (ListObjectsV2 pages of
1,000, keys in UTF-8 byte order), which is what flytestdlib's `List` sees.
"""

from __future__ import annotations

import os
import socket

import pytest
from conftest import T0  # noqa: E402

from aggregation.documents import error_document_bytes
from aggregation.explain import explain_prefix
from aggregation.readers import EarliestErrorReader
from aggregation.storage import FsspecPrefix, MemoryPrefix, PrefixNotFound, StorageError, StoreUnreachable, open_prefix


def write(directory, name, data):
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_local_path_and_file_url_list_the_same_sorted_keys(tmp_path):
    for name in ["error-b.pb", "error-a.pb", "errors/x.pb", "outputs.pb", "error-Z.pb"]:
        write(tmp_path, name, b"")
    (tmp_path / "error-dir.pb").mkdir()  # a directory named like an error file is not an object
    for location in (str(tmp_path), f"file://{tmp_path}"):
        keys = [e.key for page in open_prefix(location).list_pages("error") for e in page]
        assert keys == ["error-Z.pb", "error-a.pb", "error-b.pb", "errors/x.pb"]  # byte order: 'Z' < 'a'


def test_fifo_named_like_an_error_file_is_refused_neither_read_nor_skipped(tmp_path):
    """No object store holds a FIFO: reading one would block forever, and skipping it (as the listing did until
    2026-12-07) hides a name propeller would list, which turned a prefix holding only a FIFO into a silent success.
    This machine's copy is not the store's: `StoreUnreachable`, no verdict."""
    os.mkfifo(tmp_path / "error-fifo.pb")
    write(tmp_path, "error-a.pb", error_document_bytes(timestamp_ns=T0))
    with pytest.raises(StoreUnreachable, match="error-fifo.pb: a FIFO, socket or device, which no object store holds"):
        EarliestErrorReader().read(open_prefix(str(tmp_path)))


def test_missing_local_prefix_is_refused(tmp_path):
    with pytest.raises(PrefixNotFound, match="no such file or directory"):
        open_prefix(str(tmp_path / "nope"))


def test_unknown_filesystem_is_a_clear_error():
    with pytest.raises(StorageError, match="no filesystem for 'nosuchfs'"):
        open_prefix("nosuchfs://bucket/prefix")


@pytest.mark.parametrize("location", ["s3://", "S3:///", "gs://", "gcs:////"])
def test_an_object_store_url_without_a_bucket_names_no_prefix(location):
    """A propeller output prefix always names its bucket; s3fs would list every bucket (`Cannot traverse all of S3`,
    which explain printed as a failed round)."""
    with pytest.raises(PrefixNotFound, match="names no bucket"):
        open_prefix(location)


def test_memory_url_through_fsspec():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/aggsim-test/attempt/error-a.pb", error_document_bytes(worker="a", timestamp_ns=T0))
    fs.pipe("/aggsim-test/attempt/error-b.pb", error_document_bytes(worker="b", timestamp_ns=T0 - 1))
    try:
        assert explain_prefix("memory://aggsim-test/attempt").error.worker == "b"
    finally:
        fs.rm("/aggsim-test", recursive=True)


def test_in_memory_prefix_keeps_listing_order_by_utf8_bytes():
    prefix = MemoryPrefix([("error-é.pb", b""), ("error-z.pb", b""), ("error-A.pb", b"")])
    assert [e.key for page in prefix.list_pages("error") for e in page] == ["error-A.pb", "error-z.pb", "error-é.pb"]


# --- a real S3 client against a local S3-compatible server ------------------------------------------


@pytest.fixture(scope="module")
def s3_endpoint():
    moto_server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_s3_prefix_with_more_than_a_thousand_keys(s3_endpoint):
    """flytestdlib `List` pages of 1000 over a real S3 listing; the earliest reader's verdict is page-independent."""
    import s3fs

    options = {"endpoint_url": s3_endpoint}
    fs = s3fs.S3FileSystem(client_kwargs=options, skip_instance_cache=True)
    fs.mkdir("aggsim-bucket")
    objects = {
        f"aggsim-bucket/run/0/error-{i:05d}.pb": error_document_bytes(
            worker=f"pod-{i}", timestamp_ns=T0 + (i * 7919) % 1201
        )
        for i in range(1201)
    }
    objects["aggsim-bucket/run/0/outputs.pb"] = b""
    objects["aggsim-bucket/run/0/error.pb.tmp"] = b"junk"
    fs.pipe(objects)

    def prefix():
        return FsspecPrefix("s3://aggsim-bucket/run/0", {"client_kwargs": options, "skip_instance_cache": True})

    keys = [e.key for page in prefix().list_pages("error") for e in page]
    assert keys == sorted(keys) and len(keys) == 1202
    prefix = prefix()
    explanation = explain_prefix(prefix, retries=1)
    expected = min(range(1201), key=lambda i: ((i * 7919) % 1201, i))
    assert explanation.error.worker == f"pod-{expected}"
    assert prefix.requests.list_pages == 4  # what propeller sends: ceil(1202 / 1000) pages, listed twice
    assert "error.pb.tmp" in explanation.read.ignored


def test_local_fast_path_agrees_with_fsspec_local_filesystem(tmp_path):
    """`LocalPrefix` is an optimisation of fsspec's local filesystem, not a different semantics."""
    from aggregation.storage import LocalPrefix

    for name in ["error-b.pb", "error-a.pb", "errors/x.pb", "error/deep/y.pb", "outputs.pb", "err.pb", "e/rror.pb"]:
        write(tmp_path, name, name.encode())
    (tmp_path / "error-dir.pb").mkdir()
    os.mkfifo(tmp_path / "fifo.pb")
    fast, slow = LocalPrefix(str(tmp_path)), FsspecPrefix(f"file://{tmp_path}")
    for key_prefix in ("error", "errors/", "error/deep/y"):
        fast_keys = [[e.key for e in page] for page in fast.list_pages(key_prefix)]
        assert fast_keys == [[e.key for e in page] for page in slow.list_pages(key_prefix)]
    for key in ("error-a.pb", "error-dir.pb", "missing.pb"):
        assert fast.head(key) == slow.head(key)
    with pytest.raises(StoreUnreachable, match="fifo.pb: a FIFO, socket or device"):
        fast.head("fifo.pb")  # looked up by name (error.pb, futures.pb), as listed: refused, not "no such object"
    assert fast.read("errors/x.pb") == slow.read("errors/x.pb") == b"errors/x.pb"
    for prefix in (fast, slow):  # a listing that reaches the FIFO refuses it alike
        with pytest.raises(StoreUnreachable, match="fifo.pb: a FIFO, socket or device"):
            list(prefix.list_pages(""))
    # fsspec's local listing types a symbolic link "other", as it does a FIFO: a link is no FIFO, and is not refused
    (tmp_path / "error-link.pb").symlink_to(tmp_path / "error-a.pb")
    assert "error-link.pb" in [e.key for page in fast.list_pages("error") for e in page]
    assert "error-link.pb" not in [e.key for page in slow.list_pages("error") for e in page]  # skipped, as before


def test_local_prefix_reads_large_objects_whole_and_orders_any_name_by_bytes(tmp_path):
    """The local fast path reads in chunks and sorts plain str keys when it can; neither may change what is read
    or the order propeller lists: an object larger than one chunk comes back whole, and names that are not ASCII
    (a 4-byte character, an undecodable byte) keep UTF-8 byte order, as S3 lists them (storage.py `LocalPrefix`)."""
    from aggregation.storage import READ_CHUNK, LocalPrefix

    big = bytes(range(256)) * (3 * READ_CHUNK // 256 + 7)
    write(tmp_path, "error-big.pb", big)
    write(tmp_path, "error-exact.pb", b"x" * READ_CHUNK)
    for raw in (b"error-\xff.pb", "error-\U00010000.pb".encode(), "error-é.pb".encode(), b"error-z.pb"):
        (tmp_path / os.fsdecode(raw)).write_bytes(raw)
    fast, slow = LocalPrefix(str(tmp_path)), FsspecPrefix(f"file://{tmp_path}")
    assert fast.read("error-big.pb") == big and fast.read("error-exact.pb") == b"x" * READ_CHUNK
    keys = [e.key for page in fast.list_pages("error") for e in page]
    assert [k.encode("utf-8", "surrogateescape") for k in keys] == sorted(
        k.encode("utf-8", "surrogateescape") for k in keys
    )
    assert keys[-1] == os.fsdecode(b"error-\xff.pb")  # byte 0xff sorts after the 4-byte character's 0xf0
    assert keys == [e.key for page in slow.list_pages("error") for e in page]
    (tmp_path / "error-dir.pb").mkdir()
    with pytest.raises(StorageError, match=r"error-dir\.pb: \[Errno 21\] Is a directory"):
        fast.read("error-dir.pb")
