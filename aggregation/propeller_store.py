"""How propeller's store names what it lists, and whether its own HEAD can then reach that name.

The earliest reader HEADs and reads each error file by the name `List` gave it, not by a name it builds. flytestdlib
v1.16.8 `storage/stow_store.go` `StowStore.List` names each listed item from stow's `item.URL()` (flyteorg/stow):

- S3 with a custom endpoint (MinIO, or `endpoint` set): `s3://<bucket>/<key>`, the key escaped by Go's `net/url`.
- AWS S3 (no endpoint; flytestdlib's defaults): stow's item URL has the path
  `https://s3-<region>.amazonaws.com/<bucket>/<key>`, and `List` returns that path as the name (its
  `strings.HasPrefix(urlPath, "http")` branch). `DataReference.Split` takes the URL's host as the container, so HEAD
  (`StowStore.Head` -> `getContainer`) asks for container `s3-<region>.amazonaws.com`: not the configured bucket,
  and with `enable-multicontainer` off (the default) that is the error "Conf container:<bucket> != Passed
  Container:<host>. Dynamic loading is disabled", wrapping stow's `ErrNotFound`. Every round that lists an error
  file fails (`IsError`: "failed to read error file @[...]"), whichever file it is.
- Google Cloud Storage: `gs://<bucket>/<key>`, escaped (stow's google item URL since flyteorg/stow #17).

`<region>` is the bucket's own region, which stow asks S3 for (`location.Container` -> `GetBucketRegion`); the
model writes the configured region, which is the bucket's in any deployment that works.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from aggregation.storage import RequestCounter, StorageError

if TYPE_CHECKING:
    from aggregation.storage import ObjectEntry, OutputPrefix


class StoreKind(enum.Enum):
    """Which naming propeller's store uses for listed items."""

    AS_NAMED = "as the prefix names it"  # no storage configuration given: s3://, gs:// and file:// names escaped
    AWS_S3 = "AWS S3 (no endpoint)"
    UNMODELLED = "a naming the model does not know"  # `refusal` says which store


class StoreNamingUnknown(ValueError):
    """The earliest reader listed an error file on a store whose naming of listings the model does not know: no
    verdict. Only that reader meets it; the default one HEADs the name it builds."""


@dataclass(frozen=True)
class PropellerStore:
    """Propeller's store as its configuration makes it; the default is a store whose listed names its HEAD reaches
    (S3 with an endpoint, MinIO, GCS), named as the prefix is."""

    kind: StoreKind = StoreKind.AS_NAMED
    container: str = ""  # storage.container: the bucket propeller's store opens (`InitContainer`)
    region: str = ""  # AWS_S3: storage.connection.region or stow's `region`
    refusal: str = ""  # UNMODELLED: why the model cannot name what this store lists
    dynamic_containers: bool = False  # storage.enable-multicontainer: another bucket is opened, not refused

    def container_error(self, location: str) -> Optional[str]:
        """The Go error every request under the prefix URL `location` gets when its bucket is not the configured
        container, or None. flytestdlib `StowStore.getContainer`: with dynamic loading off (the default), any
        container but `storage.container` is refused before the store is asked, so `List` and `Head` both fail
        (`DataReference.Split`: the URL's host is the container). A local copy (a path or a `file:` URL) is named in
        the configured container."""
        local = "://" not in location or location[:5].lower() == "file:"  # as `storage.local_path_of` reads it
        if not self.container or self.dynamic_containers or local:
            return None
        try:
            bucket = go_url_host(location)  # DataReference.Split: the URL's Host is the container
        except GoURLParseError as unparsable:
            return str(unparsable)
        if bucket == self.container.encode("utf-8", "surrogateescape"):
            return None
        passed = bucket.decode("utf-8", "backslashreplace")  # Go prints the bytes; a byte that is no UTF-8 as \xNN
        return f"Conf container:{self.container} != Passed Container:{passed}. Dynamic loading is disabled: not found"

    def reaching(self, prefix: "OutputPrefix") -> "OutputPrefix":
        """`prefix` as this store reaches it: `getContainer` comes before every request, so in a container the store
        refuses (`container_error`) each request fails with that error, and none is sent."""
        refused = self.container_error(prefix.location)
        return prefix if refused is None else RefusedContainer(prefix.location, refused)

    def check_modelled(self) -> None:
        """Raise StoreNamingUnknown where the model does not know how this store names what it lists."""
        if self.kind is StoreKind.UNMODELLED:
            raise StoreNamingUnknown(self.refusal)

    @property
    def lists_unreachable_names(self) -> bool:
        """Whether HEAD fails for every name `List` gives (`head_error`)."""
        return self.kind is StoreKind.AWS_S3

    @property
    def host(self) -> str:
        """AWS_S3: the host of every listed name, which HEAD takes for the container."""
        return f"s3-{self.region}.amazonaws.com"

    def listed_reference(self, location: str, key: str) -> str:
        """The name `List` gives the object `key` under `location` (a prefix URL, or a local copy's path)."""
        location = location.rstrip("/")
        if self.kind is StoreKind.AWS_S3:
            # stow: fmt.Sprintf("https://s3-%s.amazonaws.com/%s/%s", region, bucket, key), the key unescaped
            if location.startswith("s3://"):
                return f"https://{self.host}/{location[len('s3://') :]}/{key}"
            return f"https://{self.host}/{self.container}/{location.lstrip('/')}/{key}"  # a copy: its path as key
        if location.startswith(("s3://", "gs://")):
            scheme = location[: len("s3://")]
            return scheme + go_escape_path(f"{location[len(scheme) :]}/{key}")
        if location[:6].lower() == "file:/":  # escaped from the path it names (`storage.file_url_path`), not again
            from urllib.parse import unquote, urlsplit

            return "file://" + go_escape_path(f"{unquote(urlsplit(location).path)}/{key}")
        return f"{location}/{key}"

    def head_error(self, reference: str) -> Optional[str]:
        """The Go error `StowStore.Head` returns for a listed name before it asks the store anything, or None."""
        if not self.lists_unreachable_names:
            return None
        try:
            go_url_host(reference)  # DataReference.Split: url.Parse fails first
        except GoURLParseError as unparsable:
            return str(unparsable)
        # getContainer: errs.Wrapf(stow.ErrNotFound, ...), whose text is the message, ": ", then "not found"
        refused = f"Conf container:{self.container} != Passed Container:{self.host}. Dynamic loading is disabled"
        return f"{refused}: not found"


@dataclass
class RefusedContainer:
    """A prefix in a container propeller's store refuses: every request fails with the refusal before it is sent."""

    location: str
    refusal: str
    requests: RequestCounter = field(default_factory=RequestCounter)

    def list_pages(self, key_prefix: str) -> Iterator[Sequence["ObjectEntry"]]:
        raise StorageError(self.refusal)

    def head(self, key: str) -> Optional[int]:
        raise StorageError(self.refusal)

    def read(self, key: str) -> bytes:
        raise StorageError(self.refusal)


_PATH_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~$&+,/:;=@")
_ALL_PATH_SAFE = re.compile(r"[A-Za-z0-9\-_.~$&+,/:;=@]*")


def go_escape_path(path: str) -> str:
    """Go's `url.PathEscape`-like `escape(path, encodePath)` (net/url `shouldEscape`): each other byte as %XX."""
    if _ALL_PATH_SAFE.fullmatch(path):  # the usual key: nothing to escape
        return path
    return "".join(chr(b) if b in _PATH_SAFE else f"%{b:02X}" for b in path.encode("utf-8", "surrogateescape"))


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HEX = frozenset(b"0123456789abcdefABCDEF")
# the ASCII bytes a host may hold as they are (net/url `shouldEscape(c, encodeHost)` is false); any other fails it
_HOST_ASCII = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~!$&'()*+,;=:[]<>\"")
_USERINFO = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._:~!$&'()*+,;=%@")


class GoURLParseError(ValueError):
    """Go's `url.Parse` failed; the text is Go's (`*url.Error`: `parse "<url>": <problem>`)."""


class _Problem(Exception):
    """net/url's error inside `parse`, before `url.Error` wraps it with the URL."""


def go_url_host(raw: str) -> bytes:
    """The Host of Go's `url.Parse(raw)`: unescaped, a port kept, empty when the URL has none (flytestdlib
    `DataReference.Split` takes it for the container). Raises GoURLParseError with Go's text where Parse fails.

    net/url `Parse`: the fragment is cut off first and its escapes checked last. In the rest, in this order: no
    control byte; the scheme; the query cut off; after "//", the authority up to the path: its host after the last
    "@" (`parseHost`: a port of digits after its last ":", then unescaped in host mode), then its userinfo; then
    the path's escapes. The error quotes the URL without the fragment, unless the fragment is what failed."""
    before, hash_sign, fragment = raw.partition("#")
    try:
        host = _go_parse(before)
    except _Problem as problem:
        raise GoURLParseError(f"parse {go_quote(before)}: {problem}") from None
    try:
        _go_unescape(fragment if hash_sign else "")
    except _Problem as problem:
        raise GoURLParseError(f"parse {go_quote(raw)}: {problem}") from None
    return host


def _go_parse(url: str) -> bytes:
    if _CONTROL.search(url):
        raise _Problem("net/url: invalid control character in URL")
    scheme, rest = _go_scheme(url)
    if rest.endswith("?") and rest.count("?") == 1:
        rest = rest[:-1]
    else:
        rest = rest.partition("?")[0]
    if not rest.startswith("/"):
        if scheme:
            return b""  # an opaque URL: no host
        if ":" in rest.partition("/")[0]:
            raise _Problem("first path segment in URL cannot contain colon")
    host = b""
    if (scheme or not rest.startswith("///")) and rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        rest = slash + path
        userinfo, at, host_and_port = authority.rpartition("@")
        host = _go_host(host_and_port)
        if at:
            if not set(userinfo) <= _USERINFO:
                raise _Problem("net/url: invalid userinfo")
            for part in userinfo.split(":", 1):
                _go_unescape(part)
    _go_unescape(rest)
    return host


def _go_scheme(url: str) -> tuple[str, str]:
    """net/url `getScheme`: letters, then letters, digits, "+", "-" or ".", up to a ":"; else no scheme."""
    for index, char in enumerate(url):
        if "a" <= char <= "z" or "A" <= char <= "Z":  # ASCII only: Go reads bytes
            continue
        if char in "0123456789+-.":
            if index == 0:
                return "", url
            continue
        if char == ":":
            if index == 0:
                raise _Problem("missing protocol scheme")
            return url[:index].lower(), url[index + 1 :]
        return "", url
    return "", url


def _go_host(host: str) -> bytes:
    """net/url `parseHost`: the port after the last ":" (or after the "]" of a bracketed host) is digits; then the
    host is unescaped in host mode, a bracketed host's zone (from "%25" to the "]", RFC 6874) in zone mode."""
    if host.startswith("["):
        close = host.rfind("]")
        if close < 0:
            raise _Problem("missing ']' in host")
        port = host[close + 1 :]
    else:
        port = host[host.rfind(":") :] if ":" in host else ""
    if port and not re.fullmatch(r":[0-9]*", port):  # validOptionalPort
        raise _Problem(f"invalid port {go_quote(port)} after host")
    zone = host.find("%25", 0, close) if host.startswith("[") else -1
    if zone < 0:
        return _go_unescape(host, in_host=True)
    return (
        _go_unescape(host[:zone], in_host=True)
        + _go_unescape(host[zone:close], in_host=True, zone=True)
        + _go_unescape(host[close:], in_host=True)
    )


def _go_unescape(text: str, in_host: bool = False, zone: bool = False) -> bytes:
    """net/url `unescape`: each "%" starts two hex digits, else `invalid URL escape` of the next three bytes. In a
    host (`in_host`) an escape may only stand for a byte >= 0x80 (or be "%25"), in a zone only for a byte a host may
    hold as it is, a space or "%"; and an ASCII byte a host does not allow is an `invalid character ... in host
    name`."""
    data = text.encode("utf-8", "surrogateescape")
    if b"%" not in data and (not in_host or all(b >= 0x80 or b in _HOST_ASCII for b in data)):
        return data  # the usual host or path: nothing to unescape
    out = bytearray()
    index = 0
    while index < len(data):
        byte = data[index]
        if byte == 0x25:
            escape = data[index : index + 3]
            wrong = len(escape) < 3 or escape[1] not in _HEX or escape[2] not in _HEX
            if not wrong and in_host and escape != b"%25":
                value = int(escape[1:], 16)
                wrong = value not in _HOST_ASCII and value != 0x20 if zone else value < 0x80
            if wrong:
                raise _Problem(f"invalid URL escape {go_quote(escape.decode('utf-8', 'surrogateescape'))}")
            out.append(int(escape[1:], 16))
            index += 3
            continue
        if in_host and byte < 0x80 and byte not in _HOST_ASCII:
            raise _Problem(f"invalid character {go_quote(chr(byte))} in host name")
        out.append(byte)
        index += 1
    return bytes(out)


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Go's `strconv.Quote`: printable runes as they are, `"` and `\\` escaped, the rest as \\a.., \\xNN, \\uNNNN or
    \\UNNNNNNNN; a byte that is no UTF-8 (kept as a surrogate escape) as \\xNN."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif 0xDC80 <= code <= 0xDCFF:  # surrogateescape: an undecodable byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char == " " or char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)
