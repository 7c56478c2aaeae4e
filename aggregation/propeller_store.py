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
        unparsable = go_url_parse_error(location)
        if unparsable is not None:  # DataReference.Split: url.Parse fails first
            return unparsable
        # net/url's Host: after "//", up to the path, query or fragment, without the userinfo; a port kept
        rest = location.split("://", 1)[1] if "://" in location else ""
        bucket = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[2]
        port = re.search(r":[^:\]]*$", bucket)
        if port and not re.fullmatch(r":[0-9]*", port.group()):  # parseHost: validOptionalPort
            return f"parse {go_quote(location)}: invalid port {go_quote(port.group())} after host"
        if bucket == self.container:
            return None
        return f"Conf container:{self.container} != Passed Container:{bucket}. Dynamic loading is disabled: not found"

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
        unparsable = go_url_parse_error(reference)
        if unparsable is not None:  # DataReference.Split: url.Parse fails first
            return unparsable
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
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def go_url_parse_error(raw: str) -> Optional[str]:
    """The error text of Go's `url.Parse(raw)` for an absolute URL whose host is valid, or None when it parses.

    net/url: the fragment is cut off first; the rest may hold no control byte ("net/url: invalid control character
    in URL") and its path (before any "?") no "%" that starts no escape; then the fragment's escapes are checked.
    `*url.Error` reads `parse "<url>": <problem>`, the URL quoted as Go's %q does, without the fragment unless the
    fragment is what failed."""
    before, hash_sign, fragment = raw.partition("#")
    if _CONTROL.search(before):
        return f"parse {go_quote(before)}: net/url: invalid control character in URL"
    path = before.split("?", 1)[0]
    for text, quoted in ((path, before), (fragment if hash_sign else "", raw)):
        bad = _BAD_ESCAPE.search(text)
        if bad is not None:  # unescape's EscapeError: the next three bytes, not characters, from the "%"
            escape = text[bad.start() :].encode("utf-8", "surrogateescape")[:3]
            return f"parse {go_quote(quoted)}: invalid URL escape {go_quote(escape.decode('utf-8', 'surrogateescape'))}"
    return None


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
