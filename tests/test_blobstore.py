"""The real runner's blob store: an uploaded object is seen whole or not at all, as in S3 or GCS.

Mirrors the object-store guarantee propeller's readers rely on (flytestdlib `storage` `ReadRaw` reads a whole
object) against the upload path a pod really takes: flytekit 1.16.31 `core/data_persistence.py`
`FileAccessProvider.put_data` -> `_put` -> the filesystem `get_filesystem` picks for the prefix's protocol.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import fsspec
import pytest

from localjob import blobstore

ROOT = Path(__file__).resolve().parents[1]

#: a pod's entrypoint: write the error file into a local engine directory, then `put_data` it to the prefix
WRITER = textwrap.dedent(
    """
    import os, sys, tempfile
    from flytekit.core.data_persistence import FileAccessProvider
    from localjob import blobstore

    blobstore.register()
    prefix, size, times, directory = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    provider = FileAccessProvider(local_sandbox_dir=tempfile.mkdtemp(), raw_output_prefix=tempfile.mkdtemp())
    for version in range(times):
        engine_dir = tempfile.mkdtemp()
        with open(os.path.join(engine_dir, "error.pb"), "wb") as f:
            f.write(bytes([version + 1]) * size)
        provider.put_data(engine_dir, prefix, is_multipart=True)
        print(os.stat(os.path.join(directory, "error.pb")).st_ino, flush=True)  # which file each version is
    """
)

SIZE = 4_000_000  # large enough that a copy in place takes many looks
VERSIONS = 20


def _sightings(directory: Path, prefix: str) -> tuple[int, list[str], list[int]]:
    """Upload VERSIONS objects through flytekit into `prefix` (a real process) while this one reads the file
    over and over, as the runner's watcher and propeller's copy do; returns the looks, the bad ones, and the
    inode `error.pb` had after each upload."""
    directory.mkdir()
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, prefix, str(SIZE), str(VERSIONS), str(directory)],
        cwd=ROOT,
        # its engine directories (SIZE bytes each, VERSIONS of them) go with the test, not into the machine's /tmp
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(directory.parent)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    looks, bad = 0, []
    try:
        while writer.poll() is None:
            try:
                data = (directory / "error.pb").read_bytes()
            except FileNotFoundError:
                continue
            looks += 1
            if len(data) != SIZE or len(set(data)) != 1:
                bad.append(f"{len(data)} bytes, {len(set(data))} distinct")
        stdout, stderr = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == 0, stderr.decode()[-2000:]
    return looks, bad, [int(line) for line in stdout.split()]


def test_a_pods_upload_is_never_seen_half_written(tmp_path: Path) -> None:
    looks, bad, inodes = _sightings(tmp_path / "outputs", blobstore.url(tmp_path / "outputs"))
    assert looks > 0
    assert bad == []
    # each upload a new file beside the one it replaces (a freed inode may come back later), renamed into place
    assert len(inodes) == VERSIONS and all(before != after for before, after in zip(inodes, inodes[1:]))
    assert [p.name for p in (tmp_path / "outputs").iterdir()] == ["error.pb"]  # no partial name left behind


def test_a_plain_local_prefix_rewrites_the_file_in_place(tmp_path: Path) -> None:
    """Why the store exists: flytekit's own local filesystem copies in place (`shutil.copyfile` onto the object:
    truncated, then written), so between the two a reader sees part of it. Whether this machine's timing lets the
    reader above land inside that window varies (it usually does); that the file is rewritten in place does not."""
    _, _, inodes = _sightings(tmp_path / "outputs", str(tmp_path / "outputs"))
    assert len(inodes) == VERSIONS and len(set(inodes)) == 1


@pytest.fixture
def store() -> blobstore.BlobStoreDirectory:
    blobstore.register()
    return fsspec.filesystem(blobstore.PROTOCOL)


def test_flytekit_opens_the_prefix_with_the_store(tmp_path: Path) -> None:
    """flytekit `FileAccessProvider.get_filesystem`: a protocol it does not know goes to `fsspec.filesystem`."""
    from flytekit.core.data_persistence import FileAccessProvider

    blobstore.register()
    provider = FileAccessProvider(local_sandbox_dir=str(tmp_path / "sandbox"), raw_output_prefix=str(tmp_path / "raw"))
    assert isinstance(provider.get_filesystem_for_path(blobstore.url(tmp_path)), blobstore.BlobStoreDirectory)


def test_listings_never_show_an_upload_in_progress(tmp_path: Path, store) -> None:
    (tmp_path / "error-a.pb").write_bytes(b"whole")
    (tmp_path / ".error-b.pb.0123abcd.partial").write_bytes(b"hal")
    prefix = blobstore.url(tmp_path)
    assert [os.path.basename(n) for n in store.ls(prefix)] == ["error-a.pb"]
    assert [os.path.basename(e["name"]) for e in store.ls(prefix, detail=True)] == ["error-a.pb"]
    assert [os.path.basename(n) for n in store.find(prefix)] == ["error-a.pb"]


def test_an_object_written_through_open_appears_on_close(tmp_path: Path, store) -> None:
    target = f"{blobstore.url(tmp_path)}/error.pb"
    with store.open(target, "wb") as f:
        f.write(b"first half ")
        assert not (tmp_path / "error.pb").exists()
        f.write(b"second half")
    assert (tmp_path / "error.pb").read_bytes() == b"first half second half"
    with pytest.raises(RuntimeError), store.open(target, "wb") as f:
        f.write(b"never")
        raise RuntimeError("the writer fails")
    assert (tmp_path / "error.pb").read_bytes() == b"first half second half"  # the old object stays whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["error.pb"]


def test_writing_in_place_is_refused(tmp_path: Path, store) -> None:
    with pytest.raises(NotImplementedError, match="objects are written whole; mode 'ab'"):
        store.open(f"{blobstore.url(tmp_path)}/error.pb", "ab")
    (tmp_path / "error.pb").write_bytes(b"x")
    with pytest.raises(FileExistsError):
        store.open(f"{blobstore.url(tmp_path)}/error.pb", "xb")


def test_partial_names_are_recognised() -> None:
    assert blobstore.is_partial(".error.pb.0123abcd.partial")
    assert not blobstore.is_partial("error.pb")
    assert not blobstore.is_partial("error-0123.pb")
