"""One task attempt's output prefix, as propeller sees it: a flat, lexicographically listed key space.

Propeller talks to the blob store through flytestdlib's storage layer: `List` (pages of keys under a
raw key prefix, in the store's order), `Head` (exists + size) and `ReadRaw`. This module offers the
same three operations over:

- `FsspecPrefix`: any fsspec URL (`memory://`, `s3://`, `gs://`...). Keys are listed recursively and
  sorted by their UTF-8 bytes, which is the order S3 and GCS return.
- `LocalPrefix`: a local directory (a path or `file://`), with the same semantics through plain `os`
  calls: fsspec's local layer costs more per file than the read and parse themselves, and a prefix of
  10,000 error files is a case people really explain.
- `MemoryPrefix`: an in-memory list of `(key, bytes)` for unit tests.

Failures of the store itself raise `StorageError`; callers decide what a failure means (for the error
readers it is a Go *error*, not a task failure). A remote store that this machine cannot use (no or wrong
credentials, no such bucket, an endpoint that refuses or never answers) raises `StoreUnreachable` instead:
that is the user's connection, not something propeller would hit, so it is never turned into a verdict.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import signal
import stat
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional, Protocol, Sequence

#: S3's ListObjectsV2 and flytestdlib's `List(..., maxItems=1000, ...)` page size.
LIST_PAGE_SIZE = 1000


class StorageError(Exception):
    """The store could not list or read something (propeller gets a Go error here)."""


class ObjectNotFound(StorageError):
    """A key that was listed or HEADed is gone when read (deleted in between)."""


class PrefixNotFound(StorageError):
    """The output prefix itself does not exist (a local directory that is not there)."""


class StoreUnreachable(Exception):
    """This machine cannot use the remote store (credentials, endpoint, network, permission, missing bucket), or its
    local copy of a prefix (permissions, a symbolic link that leads nowhere).

    Not a `StorageError`: the error readers turn those into propeller's Go errors (a failed round), and a
    failure of the user's own access is no verdict. The message is one line naming the location."""


#: protocols whose first path component is a bucket or container that must exist
BUCKET_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "oci", "oss", "r2"})
#: protocols held in this process: nothing to reach
IN_PROCESS_PROTOCOLS = frozenset({"memory", "file", "local"})
#: how long one request to a remote store may go unanswered, unless the caller says otherwise
DEFAULT_TIMEOUT_SECONDS = 30.0


def _why(e: BaseException) -> str:
    """A remote store's failure in a few words (botocore, aiohttp and gcsfs errors are long)."""
    name = type(e).__name__
    text = " ".join(str(e).split())
    if name in ("NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError", "RefreshError") or (
        isinstance(e, ValueError) and "credentials" in text  # adlfs: "Must provide ... account_name with credentials"
    ):
        return f"no credentials for it ({text[:160]})"
    if isinstance(e, (ConnectionError, TimeoutError)) or "Connect" in name or "Endpoint" in name:
        return f"cannot connect ({text[:160]})"
    denied = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden", "Unauthorized")
    if isinstance(e, PermissionError) or any(word in text for word in denied) or re.search(r"\b40[13]\b", text):
        return f"access denied ({text[:160]})"
    if "NoSuchBucket" in text:
        return "no such bucket"
    return f"{name}: {text[:160]}"


@dataclass(frozen=True)
class ObjectEntry:
    """One key in the output prefix, relative to it, with its size in bytes if the listing gives it."""

    key: str
    size: Optional[int] = None


@dataclass
class RequestCounter:
    """How many object-store requests the operations made (what propeller would send)."""

    list_pages: int = 0
    heads: int = 0
    gets: int = 0

    @property
    def total(self) -> int:
        return self.list_pages + self.heads + self.gets


class OutputPrefix(Protocol):
    """The three operations the error readers need."""

    location: str
    requests: RequestCounter

    def list_pages(self, key_prefix: str) -> Iterator[Sequence[ObjectEntry]]:
        """Keys starting with `key_prefix` (a raw prefix, not a directory), sorted, in pages."""

    def head(self, key: str) -> Optional[int]:
        """The object's size, or None if there is no such object."""

    def read(self, key: str) -> bytes:
        """The object's bytes; raises ObjectNotFound if it is gone, StorageError if unreadable."""


def _utf8_order(key: str) -> bytes:
    return key.encode("utf-8", "surrogateescape")


def _entry_key(entry: ObjectEntry) -> str:
    return entry.key


#: how much of a local object one read asks for; error documents are smaller, larger ones take more reads
READ_CHUNK = 1 << 16


def _pages(entries: Sequence[ObjectEntry], counter: RequestCounter) -> Iterator[Sequence[ObjectEntry]]:
    if not entries:
        counter.list_pages += 1  # an empty listing is still one request
        yield ()
        return
    for start in range(0, len(entries), LIST_PAGE_SIZE):
        counter.list_pages += 1
        yield entries[start : start + LIST_PAGE_SIZE]


class MemoryPrefix:
    """An output prefix held in memory: `[(key, bytes), ...]`, keys relative to the prefix."""

    def __init__(self, objects: Sequence[tuple[str, bytes]], location: str = "memory-prefix") -> None:
        self._objects = {key: bytes(data) for key, data in objects}
        self.location = location
        self.requests = RequestCounter()

    def list_pages(self, key_prefix: str) -> Iterator[Sequence[ObjectEntry]]:
        keys = sorted((k for k in self._objects if k.startswith(key_prefix)), key=_utf8_order)
        return _pages([ObjectEntry(k, len(self._objects[k])) for k in keys], self.requests)

    def head(self, key: str) -> Optional[int]:
        self.requests.heads += 1
        data = self._objects.get(key)
        return None if data is None else len(data)

    def read(self, key: str) -> bytes:
        self.requests.gets += 1
        try:
            return self._objects[key]
        except KeyError:
            raise ObjectNotFound(f"{self.location}/{key}: no such object") from None


class FsspecPrefix:
    """An output prefix behind an fsspec URL: local paths, `file://`, `memory://`, `s3://`, `gs://`..."""

    def __init__(
        self, url: str, storage_options: Optional[dict] = None, timeout: float = DEFAULT_TIMEOUT_SECONDS
    ) -> None:
        from fsspec.core import url_to_fs  # imported here: a local prefix never pays for it

        self.location = url
        self.timeout = timeout
        protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
        self.remote = protocol not in IN_PROCESS_PROTOCOLS
        options = dict(storage_options or {})
        if protocol in ("s3", "s3a") and "config_kwargs" not in options:
            # one bounded attempt per request: our own deadline, not botocore's retries, decides how long
            options["config_kwargs"] = {
                "connect_timeout": timeout,
                "read_timeout": timeout,
                "retries": {"max_attempts": 1},
            }
        try:
            with self._deadline("connecting"):
                self.fs, root = url_to_fs(url, **options)
        except (ImportError, ValueError) as e:
            protocol = url.split("://", 1)[0] if "://" in url else "file"
            if isinstance(e, ValueError) and not str(e).startswith("Protocol not known") and self.remote:
                # the package is there and refused what it was given (adlfs with no account or credentials)
                raise StoreUnreachable(f"{url}: {_why(e)}") from None
            raise StorageError(
                f"{url}: no filesystem for {protocol!r} ({e}); install its fsspec package, e.g. s3fs or gcsfs"
            ) from None
        except StoreUnreachable:
            raise
        except Exception as e:  # credentials looked up at construction (gcsfs, adlfs)
            if not self.remote:
                raise
            raise StoreUnreachable(f"{url}: {_why(e)}") from None
        self.root = root.rstrip("/")
        self.requests = RequestCounter()
        if self._is_local() and not self.fs.isdir(self.root):
            raise PrefixNotFound(not_a_directory(url, self.fs.exists(self.root)))
        if self.remote:
            self._probe(protocol)

    def _probe(self, protocol: str) -> None:
        """The bucket (or, for other stores, the prefix) must be there: a listing's "not found" would
        otherwise read as an empty prefix, and an empty prefix is a verdict (succeeds silently)."""
        if protocol in BUCKET_PROTOCOLS:
            bucket = self.root.split("/", 1)[0]
            try:
                self._remote_call("looking up the bucket", self.fs.info, bucket)
            except FileNotFoundError:
                raise StoreUnreachable(f"{self.location}: no such bucket {bucket!r}") from None
            return
        try:
            self._remote_call("looking up the prefix", self.fs.info, self.root)
        except FileNotFoundError:
            # fsspec's HTTP layer reports a refused connection as "not found": tell the two apart
            raise StoreUnreachable(f"{self.location}: {self._unreachable_host() or 'not found'}") from None

    def _unreachable_host(self) -> Optional[str]:
        """For an http(s) location: why its host cannot be reached, or None if a TCP connection opens."""
        import socket
        from urllib.parse import urlsplit

        parts = urlsplit(self.location)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            socket.create_connection((parts.hostname, port), timeout=min(self.timeout, 10)).close()
        except OSError as e:
            return f"cannot connect to {parts.hostname}:{port} ({e.strerror or e})"
        return None

    @contextmanager
    def _deadline(self, what: str):
        """Raise StoreUnreachable when the store does not answer within `timeout` (main thread only: fsspec
        waits for its IO thread in Python, so the alarm's exception lands there)."""
        if not self.remote or self.timeout <= 0 or threading.current_thread() is not threading.main_thread():
            yield
            return

        def expired(signum, frame):
            raise StoreUnreachable(f"{self.location}: no answer from the store within {self.timeout:g} s ({what})")

        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def _remote_call(self, what: str, call, *args, **kwargs):
        """One request to a remote store: FileNotFoundError passes through (the caller knows what it means),
        every other failure is this machine's access to the store, not a verdict."""
        try:
            with self._deadline(what):
                return call(*args, **kwargs)
        except (FileNotFoundError, StoreUnreachable):
            raise
        except Exception as e:
            if not self.remote:
                raise
            raise StoreUnreachable(f"{self.location}: {what}: {_why(e)}") from None

    def whole_object_size(self) -> Optional[int]:
        """The location's own size when it names one object rather than a prefix (`validate FILE`), else None."""
        try:
            info = self._remote_call("looking it up", self.fs.info, self.root)
        except FileNotFoundError:
            return None
        return int(info.get("size") or 0) if info.get("type") == "file" else None

    def whole_object(self) -> Optional[bytes]:
        """The location's own bytes when it names one object rather than a prefix (`validate FILE`), else None."""
        try:
            if not self._remote_call("looking it up", self.fs.isfile, self.root):
                return None
            return self._remote_call("GET", self.fs.cat_file, self.root)
        except FileNotFoundError:
            return None

    def _is_local(self) -> bool:
        protocol = self.fs.protocol
        protocols = protocol if isinstance(protocol, (tuple, list)) else (protocol,)
        return "file" in protocols or "local" in protocols

    def _full(self, key: str) -> str:
        return f"{self.root}/{key}" if self.root else key

    def list_pages(self, key_prefix: str) -> Iterator[Sequence[ObjectEntry]]:
        # A raw key prefix may match across "directories" (`error` matches `errors/x.pb`), so list
        # everything below the deepest directory the prefix names, then filter by the raw prefix.
        directory = posixpath.dirname(key_prefix)
        base = self._full(directory) if directory else self.root
        try:
            found = self._remote_call("listing", self.fs.find, base, withdirs=False, detail=True)
        except FileNotFoundError:  # the bucket is there (probed): no key under the prefix yet
            found = {}
        except (OSError, ValueError) as e:
            raise StorageError(f"failed to list {self.location}: {e}") from None
        entries = []
        for path, info in found.items():
            relative = path[len(self.root) + 1 :] if self.root else path
            if info.get("type") != "file":
                # a local FIFO, socket or device is "other"; so is a symbolic link in fsspec's local listing, which
                # it skipped before (LocalPrefix follows links), and an sftp link is "link": those stay skipped
                odd = info.get("type") == "other" and not info.get("islink")
                if odd and relative.startswith(key_prefix):
                    raise StoreUnreachable(f"{self.location}/{relative}: {NO_OBJECT}")
                continue
            if relative.startswith(key_prefix):
                entries.append(ObjectEntry(relative, int(info.get("size") or 0)))
        if all(e.key.isascii() for e in entries):  # the usual keys: code point order is byte order
            entries.sort(key=_entry_key)
        else:
            entries.sort(key=lambda e: _utf8_order(e.key))
        return _pages(entries, self.requests)

    def head(self, key: str) -> Optional[int]:
        self.requests.heads += 1
        try:
            info = self._remote_call(f"HEAD {key}", self.fs.info, self._full(key))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise StorageError(f"failed to stat {self.location}/{key}: {e}") from None
        if info.get("type") != "file":
            return None
        return int(info.get("size") or 0)

    def read(self, key: str) -> bytes:
        self.requests.gets += 1
        try:
            return self._remote_call(f"GET {key}", self.fs.cat_file, self._full(key))
        except FileNotFoundError:
            raise ObjectNotFound(f"{self.location}/{key}: no such object") from None
        except (OSError, ValueError) as e:
            raise StorageError(f"failed to read {self.location}/{key}: {e}") from None


#: why a listed name that is neither a regular file nor a directory is refused: listed as an object it would be read
#: (a FIFO blocks), skipped it would hide a file propeller lists; either way no verdict
NO_OBJECT = "a FIFO, socket or device, which no object store holds: no copy of a prefix propeller lists"


def not_a_directory(location: str, exists: bool) -> str:
    if exists:
        return f"{location}: a file, not an output prefix (the directory an attempt's pods upload into)"
    if location[:5].lower() == "file:" and not is_file_url(location):  # a local name with a colon, or a URL?
        return f"{location}: no such file or directory (a file URL's path is absolute: file:///path)"
    return f"{location}: no such file or directory"


class LocalPrefix:
    """An output prefix in a local directory; keys are `/`-separated paths relative to it."""

    def __init__(self, directory: str, location: Optional[str] = None) -> None:
        self.root = os.path.abspath(directory)
        self.location = location or directory
        self.requests = RequestCounter()
        if not os.path.isdir(self.root):
            try:
                os.stat(self.root)
            except PermissionError as e:  # a directory on the way this user may not search: its access, no verdict
                raise no_access(self.location, "looking it up", e) from None
            except ValueError:  # a NUL byte: no file has that name
                pass
            except OSError as e:
                if os.path.islink(self.root):  # ELOOP for a loop, ENOENT for a dangling link: say which
                    raise PrefixNotFound(f"{self.location}: a symbolic link that leads nowhere: {e.strerror}") from None
                if e.errno != errno.ENOENT:  # a loop or a file on the way, a name too long: not "no such file"
                    raise PrefixNotFound(f"{self.location}: {e.strerror}") from None
            raise PrefixNotFound(not_a_directory(self.location, os.path.exists(self.root)))

    def _full(self, key: str) -> str:
        return self.root + "/" + key  # keys are "/"-separated, as on POSIX

    def list_pages(self, key_prefix: str) -> Iterator[Sequence[ObjectEntry]]:
        directory = posixpath.dirname(key_prefix)
        entries: list[ObjectEntry] = []
        try:
            self._walk(self._full(directory) if directory else self.root, directory, key_prefix, entries)
        except PermissionError as e:
            raise no_access(self.location, "listing it", e) from None
        except OSError as e:
            raise StorageError(f"failed to list {self.location}: {e}") from None
        if all(e.key.isascii() for e in entries):  # the usual keys: code point order is byte order
            entries.sort(key=_entry_key)
        else:
            entries.sort(key=lambda e: _utf8_order(e.key))
        return _pages(entries, self.requests)

    def _walk(self, path: str, relative: str, key_prefix: str, out: list[ObjectEntry]) -> None:
        # a stack, not recursion: a tree deeper than Python's recursion limit is still a prefix an object store can hold
        stack = [(path, relative)]
        while stack:
            path, relative = stack.pop()
            try:
                scanner = os.scandir(path)
            except FileNotFoundError:
                continue
            with scanner:
                for entry in scanner:
                    key = f"{relative}/{entry.name}" if relative else entry.name
                    if key.startswith(key_prefix):
                        if entry.is_symlink():
                            self._follow(entry.path, key)
                        if entry.is_file():  # regular files (or links to them)
                            # no size: a local listing would need a stat per file, and the readers HEAD anyway
                            out.append(ObjectEntry(key))
                        elif entry.is_dir(follow_symlinks=False):
                            stack.append((entry.path, key))
                        elif not entry.is_dir():
                            self._refuse_if_no_object(entry.path, key)
                    elif key_prefix.startswith(key + "/") and entry.is_dir(follow_symlinks=False):
                        stack.append((entry.path, key))

    def _refuse_if_no_object(self, path: str, key: str) -> None:
        """A listed name that is neither a file nor a directory: a FIFO, socket or device is refused (no object store
        holds one); a name gone since the directory was read (or a link whose target went) is simply not listed."""
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise StoreUnreachable(f"{self.location}/{key}: {NO_OBJECT}")

    def _follow(self, path: str, key: str) -> None:
        """A symbolic link among the listed names must lead to something: an object store has no links, so a link
        that leads nowhere (dangling, a loop) is this machine's copy gone wrong, not an object propeller would miss."""
        try:
            os.stat(path)
        except OSError as e:
            raise StoreUnreachable(f"{self.location}/{key}: a symbolic link that leads nowhere: {e.strerror}") from None

    def head(self, key: str) -> Optional[int]:
        self.requests.heads += 1
        path = self._full(key)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            if os.path.islink(path):  # looked up by name (error.pb, futures.pb) as a listed one is
                self._follow(path, key)
            return None
        except PermissionError as e:
            raise no_access(self.location, f"looking up {key}", e) from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                self._follow(path, key)
            raise StorageError(f"failed to stat {self.location}/{key}: {e}") from None
        if stat.S_ISREG(info.st_mode):
            return info.st_size
        if stat.S_ISDIR(info.st_mode):  # a "directory" is no object: nothing by that name
            return None
        raise StoreUnreachable(f"{self.location}/{key}: {NO_OBJECT}")

    def read(self, key: str) -> bytes:
        self.requests.gets += 1
        path = self._full(key)
        try:
            fd = os.open(path, os.O_RDONLY)  # plain descriptors: a file object costs more than the read itself
        except FileNotFoundError:
            raise ObjectNotFound(f"{self.location}/{key}: no such object") from None
        except PermissionError as e:
            raise no_access(self.location, f"reading {key}", e) from None
        except OSError as e:
            raise StorageError(f"failed to read {self.location}/{key}: {e}") from None
        try:
            data = os.read(fd, READ_CHUNK)
            if len(data) < READ_CHUNK:  # a regular file reads short only at its end
                return data
            chunks = [data]
            while chunk := os.read(fd, READ_CHUNK):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as e:  # a directory, or an I/O error: named as `open` would name it
            why = f"[Errno {e.errno}] {e.strerror}: {path!r}"
            raise StorageError(f"failed to read {self.location}/{key}: {why}") from None
        finally:
            os.close(fd)


def is_file_url(location: str) -> bool:
    """Whether a location is a `file:` URL with a path (`file:/...`, the scheme in any case); `file:x` is no URL of a
    path but a local name with a colon in it."""
    return location[:6].lower() == "file:/"


def local_path_of(location: str) -> Optional[str]:
    """The local path a location names: a plain path as it is, a `file:` URL's path (`file_url_path`); None for any
    other URL (a remote store's). The one rule `open_prefix` and `validate` read locations by."""
    if is_file_url(location):
        return file_url_path(location)
    return None if "://" in location else location


def file_url_path(url: str) -> str:
    """The local path a `file:` URL names (RFC 8089: `file:///p`, `file://localhost/p`, `file:/p`), %-escapes decoded,
    so the URLs the readers print (Go's `net/url` escaping, `error%20%231.pb`) can be given back. A `#` or `?` would
    end the path there, so it is refused, not cut off: written `%23` and `%3F` they are part of it."""
    from urllib.parse import unquote, urlsplit

    if "#" in url or "?" in url:
        raise PrefixNotFound(f"{url}: a '#' or '?' ends a file URL's path: write them as %23 and %3F, or give the path")
    parts = urlsplit("file" + url[4:])
    if parts.netloc not in ("", "localhost"):
        raise PrefixNotFound(
            f"{url}: a file URL on another host ({parts.netloc}) names no local path (file:///absolute/path, or the "
            "path itself)"
        )
    if not parts.path:
        raise PrefixNotFound(f"{url}: a file URL with no path names no location (file:///absolute/path, or . for here)")
    return unquote(parts.path)


#: URL schemes of object stores, whose first path part is the bucket
BUCKET_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "az"})


def open_prefix(
    location: str, storage_options: Optional[dict] = None, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> OutputPrefix:
    """An `OutputPrefix` for a local path, a `file://` URL, or any other fsspec URL (each remote request
    answered within `timeout` s, else StoreUnreachable)."""
    if not location:
        raise PrefixNotFound("an empty prefix names no location (use . for the current directory)")
    path = local_path_of(location)
    if path is not None and (not is_file_url(location) or not storage_options):
        return LocalPrefix(path, location)
    scheme, _, rest = location.partition(":")
    location = f"{scheme.lower()}:{rest}"  # a URL's scheme is read without case (RFC 3986): S3:// is s3://
    if scheme.lower() in BUCKET_SCHEMES and not rest.lstrip("/").split("/", 1)[0]:
        # propeller's output prefix always names its bucket; s3fs would try to list every bucket there is
        raise PrefixNotFound(f"{location}: names no bucket ({scheme.lower()}://BUCKET/KEY...)")
    return FsspecPrefix(location, storage_options, timeout)


def no_access(location: str, what: str, e: OSError) -> StoreUnreachable:
    """This machine may not read its own copy of the prefix: its access, as a remote store's access denied is, and
    no verdict (propeller reads the store with its own credentials)."""
    return StoreUnreachable(f"{location}: {what}: access denied ({e.strerror})")


class UnavailablePrefix:
    """A prefix whose store fails every request (a scenario's storage outage): each one is a Go error."""

    def __init__(self, location: str, why: str) -> None:
        self.location = location
        self.why = why
        self.requests = RequestCounter()

    def list_pages(self, key_prefix: str) -> Iterator[Sequence[ObjectEntry]]:
        raise StorageError(f"failed to list {self.location}: {self.why}")

    def head(self, key: str) -> Optional[int]:
        raise StorageError(f"failed to stat {self.location}/{key}: {self.why}")

    def read(self, key: str) -> bytes:
        raise StorageError(f"failed to read {self.location}/{key}: {self.why}")
