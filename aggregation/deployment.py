"""A deployment's real settings, read from the propeller configuration it runs with (YAML, as deployed).

Flyte reads its configuration with flytestdlib's `config` package (viper): sections are matched without
regard to case and fields by their `json` tags. The settings the model needs, and the Go structs they
fill (flyteorg/flyte v1.16.8):

| key | Go field |
|---|---|
| `propeller.max-workflow-retries` | `flytepropeller/pkg/controller/config/config.go` `Config.MaxWorkflowRetries` |
| `propeller.node-config.max-node-retries-system-failures` | same file, `NodeConfig.MaxNodeRetriesOnSystemFailures` |
| `propeller.node-config.default-max-attempts` | `NodeConfig.DefaultMaxAttempts` |
| `propeller.node-config.interruptible-failure-threshold` | `NodeConfig.InterruptibleFailureThreshold` |
| `propeller.node-config.ignore-retry-cause` | `NodeConfig.IgnoreRetryCause` |
| `plugins.k8s.enable-distributed-error-aggregation` | `flyteplugins/go/tasks/pluginmachinery/flytek8s/config/` |
| | `config.go` `K8sPluginConfig.EnableDistributedErrorAggregation` |
| `storage.limits.maxDownloadMBs` | `flytestdlib/storage/config.go` `LimitsConfig.GetLimitMegabytes` |
| `storage.type`, `.container`, `.enable-multicontainer` | same file, `Config` (the store: `propeller_store.py`) |
| `storage.connection.endpoint`, `.region`; `storage.stow.kind`, `.config` | `ConnectionConfig`, `StowConfig` |

Several files merge in order (flyte-core mounts one per concern), later ones winning. Keys the model
does not use are ignored, as propeller ignores keys of sections it does not own; a value of the wrong
type is a one-line error naming the file and the key, and so is what would keep propeller from starting: a key
given twice in one mapping (Go's YAML parser refuses it) or a section the model reads that is not a mapping. Keys
match without case (viper lower-cases them); a key the model reads spelt in two mixed cases in one mapping is an
error too, since Go's random map order picks its value.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from aggregation import defaults, goyaml
from aggregation.gonumbers import fits, float_to_int64, integer_value, parse_bool, wrap
from aggregation.propeller import PropellerConfig, payload_limit, payload_limit_note, uint32_note
from aggregation.propeller_store import PropellerStore, StoreKind

FLYTE_DEFAULT_ERROR_AGGREGATION = False  # flytek8s/config/config.go: a bool field defaultK8sConfig does not set

# key path (lower case, as viper keeps it) -> (the model's name for it, type, the Go field's width in bits)
SETTINGS: dict[tuple[str, ...], tuple[str, type, int]] = {
    ("propeller", "max-workflow-retries"): ("max_workflow_retries", int, 64),  # Go's int, on a 64-bit machine
    ("propeller", "node-config", "max-node-retries-system-failures"): ("max_node_retries_system_failures", int, 64),
    ("propeller", "node-config", "default-max-attempts"): ("default_max_attempts", int, 32),
    ("propeller", "node-config", "interruptible-failure-threshold"): ("interruptible_failure_threshold", int, 32),
    ("propeller", "node-config", "ignore-retry-cause"): ("ignore_retry_cause", bool, 1),
    ("plugins", "k8s", "enable-distributed-error-aggregation"): ("error_aggregation", bool, 1),
    ("storage", "limits", "maxdownloadmbs"): ("max_download_mbs", int, 64),
    # how propeller's store names listed files (`propeller_store`, `Deployment.store`)
    ("storage", "type"): ("storage.type", str, 0),
    ("storage", "container"): ("storage.container", str, 0),
    ("storage", "enable-multicontainer"): ("storage.enable-multicontainer", bool, 1),
    ("storage", "connection", "endpoint"): ("storage.connection.endpoint", str, 0),
    ("storage", "connection", "region"): ("storage.connection.region", str, 0),
    ("storage", "stow", "kind"): ("storage.stow.kind", str, 0),
}
#: `storage.stow.config`, a map[string]string: each key is its own setting, as viper merges maps key by key
STOW_CONFIG = ("storage", "stow", "config")
#: flytestdlib `storage/config.go` `defaultConfig`: type s3, region us-east-1, no endpoint (AWS S3)
STORAGE_DEFAULTS = {"storage.type": "s3", "storage.connection.region": "us-east-1"}
#: flytestdlib `storage/rawstores.go` `stores`: the types propeller's `NewDataStore` accepts
STORAGE_TYPES = ("mem", "s3", "local", "minio", "stow")
#: the stow kinds flytestdlib registers (`stow_store.go` imports and `fQNFn`)
STOW_KINDS = ("s3", "google", "azure", "local", "oracle", "swift")


class DeploymentConfigError(ValueError):
    """A configuration file that cannot be read, or a value of the wrong type."""


@dataclass(frozen=True)
class Deployment:
    """What the files say; a setting no file makes is not in `values` (Flyte's default applies). `notes` say where
    propeller holds a value other than the number written (an int32 field keeps the low 32 bits)."""

    values: dict
    sources: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def error_aggregation(self) -> bool:
        """The flag this deployment runs with: what its files say, else Go's zero value (`defaultK8sConfig` leaves
        `EnableDistributedErrorAggregation` unset, so Flyte runs the single error.pb reader). A scenario's own flag
        describes the deployment it ran on; played on this one, it gives way, as every other setting does."""
        return self.values.get("error_aggregation", FLYTE_DEFAULT_ERROR_AGGREGATION)

    def sets(self, name: str) -> bool:
        """Whether playing a scenario on this deployment fixes its `propeller.<name>`: the flag always (above), the
        other settings where a file makes them."""
        return name == "error_aggregation" or name in self.values

    def propeller_config(self, base: PropellerConfig = PropellerConfig()) -> PropellerConfig:
        """`base` with every setting the files make; `maxDownloadMBs` becomes the payload limit in bytes
        (`getMaxPayloadSize`: the reader is built with 0, so the limit is exactly maxDownloadMBs MiB), and the
        storage settings the store's naming of listed files."""
        changes = {
            k: v
            for k, v in self.values.items()
            if k not in ("error_aggregation", "max_download_mbs") and not k.startswith("storage.")
        }
        if "max_download_mbs" in self.values:
            changes["max_payload_bytes"] = payload_limit(self.values["max_download_mbs"])
        if self.store is not None:
            changes["store"] = self.store
        return replace(base, **changes)

    @property
    def store(self) -> Optional[PropellerStore]:
        """Propeller's store as the files make it (flytestdlib `storage/rawstores.go` `RefreshConfig`: the `stores`
        entry for its type, `NewInMemoryRawStore` or `newStowRawStore`), or None where no file says anything about
        it (the model then names listed files as the prefix is named). Raises DeploymentConfigError for a store
        propeller would not start with; a store whose naming of listings the model does not know is refused only by
        the earliest reader, which alone meets it."""
        given = {k: v for k, v in self.values.items() if k.startswith("storage.")}
        if not given:
            return None
        settings = {**STORAGE_DEFAULTS, **given}
        kind_of_store = settings["storage.type"]
        if kind_of_store not in STORAGE_TYPES:  # NewDataStore: "type is of an invalid value"
            raise DeploymentConfigError(
                f"storage.type: {kind_of_store!r} is not a store type propeller knows ({', '.join(STORAGE_TYPES)}): "
                "it would not start"
            )
        if kind_of_store == "mem":  # `stores`: NewInMemoryRawStore, which reads no other setting
            return _unmodelled(
                "",  # an in-memory store (not stow) opens no container, and refuses none
                "storage.type: mem: the model does not know how propeller's in-memory store "
                "names the error files it lists",
            )
        container = settings.get("storage.container", "")
        if not container:
            raise DeploymentConfigError(
                "storage.container: not set: propeller does not start without it (flytestdlib newStowRawStore: "
                "initContainer is required)"
            )
        in_stow = "storage.stow.config."
        stow = {k[len(in_stow) :]: v for k, v in settings.items() if k.startswith(in_stow)}
        stow_kind = settings.get("storage.stow.kind", "")
        if stow_kind and stow:  # newStowRawStore: the stow section, when it has both kind and config
            kind, endpoint, region = stow_kind, stow.get("endpoint", ""), stow.get("region", "")
        else:  # else the legacy connection section, as S3 (legacyS3ConfigMap), whatever storage.type says
            kind = "s3"
            endpoint = settings.get("storage.connection.endpoint", "")
            region = settings["storage.connection.region"]
        dynamic = bool(settings.get("storage.enable-multicontainer"))
        if kind not in STOW_KINDS:
            raise DeploymentConfigError(
                f"storage.stow.kind: {kind!r} is not a stow kind flytestdlib registers ({', '.join(STOW_KINDS)}): "
                "propeller would not start"
            )
        if kind == "google" or (kind == "s3" and endpoint):  # listed as s3:// or gs:// names HEAD reaches
            return PropellerStore(StoreKind.AS_NAMED, container, dynamic_containers=dynamic)
        if kind != "s3":
            return _unmodelled(
                container,
                f"storage.stow.kind: {kind}: the model knows how s3 and google stores name the error "
                f"files they list, not {kind}",
                dynamic,
            )
        if dynamic:
            return _unmodelled(
                container,
                "storage.enable-multicontainer: on AWS S3 (no endpoint) the earliest reader's HEAD of a "
                "listed error file asks S3 for a bucket named like its host, s3-<region>.amazonaws.com: S3's answer "
                "is not modelled",
                dynamic,
            )
        return PropellerStore(StoreKind.AWS_S3, container, region or "us-east-1")


def _unmodelled(container: str, refusal: str, dynamic: bool = False) -> PropellerStore:
    """A store the default reader reads as any other, and the earliest one refuses (`StoreNamingUnknown`) once it
    lists an error file: only that reader meets its naming."""
    return PropellerStore(StoreKind.UNMODELLED, container, refusal=refusal, dynamic_containers=dynamic)


@dataclass(frozen=True)
class _SpelledTwice:
    """Two or more spellings of one key, none of them all lower case, in one mapping: which value viper keeps is Go's
    random map order (below)."""

    spellings: tuple[str, ...]

    def error(self, source: str, section: Sequence[str]) -> DeploymentConfigError:
        """The one-line error for these spellings, found in `section` (a key path; empty at the top)."""
        where = ".".join(section)
        return DeploymentConfigError(
            f"{source}: {where + ': ' if where else ''}{' and '.join(self.spellings)} are one key to propeller "
            "(viper ignores case) and which value it keeps is Go's random map order: write it once"
        )


def _go_lower(text: str) -> str:
    """Go's `strings.ToLower`: each rune's own lower case (`unicode.ToLower`), where Python's `str.lower` uses
    Unicode's full mapping: "İ" is "i" in Go, "i̇" (two runes) in Python, and a final "Σ" is "σ", not "ς"."""
    return text.lower() if text.isascii() else "".join("i" if c == "\u0130" else c.lower() for c in text)


def _lower_keys(node: Any) -> Any:
    """Keys as viper keeps them (spf13/viper v1.21.0 `util.go` `insensitiviseMap`, at every read): it ranges over the
    map, deleting each key that is not all lower case and storing its value under the lower-cased key. So of a key
    written in several cases in one mapping, a mixed-case spelling's value replaces the lower-case one's whatever the
    order; between two mixed-case spellings, the one Go's random map order visits last wins."""
    if not isinstance(node, dict):
        return node
    spellings: dict[str, list] = {}
    for key, value in node.items():
        spellings.setdefault(_go_lower(str(key)), []).append((str(key), value))
    lowered = {}
    for lower, written in spellings.items():
        mixed = [(key, value) for key, value in written if key != lower]
        if len(mixed) > 1:
            lowered[lower] = _SpelledTwice(tuple(key for key, _ in mixed))
        else:
            lowered[lower] = _lower_keys((mixed or written)[0][1])
    return lowered


def _coerce(path: str, value: Any, kind: type, bits: int, source: str) -> tuple[Any, Optional[str]]:
    """The value propeller's field holds, as flytestdlib's decoder fills it (`config/viper` with `WeaklyTypedInput`:
    go-viper/mapstructure v2.4.0 `decodeBool`, `decodeInt`), from what Go's YAML parser made of the scalar
    (`goyaml.py`), and a note where that differs from the number written. A bool: from a number (not 0) or from what
    `strconv.ParseBool` takes, "" being false. An integer: from an integer or uint64, converted to the field's width;
    from a float, truncated (`int64(f)`) and converted; from a bool, 1 or 0; from a (quoted) string, what
    `strconv.ParseInt(s, 0, width)` takes, "" being 0. A string: as written; from a bool, "1" or "0"; from a number,
    its decimal digits (`strconv.FormatFloat(f, 'f', -1, 64)`: no exponent). Anything else fails the decode, and
    propeller does not start."""
    if kind is str:
        if isinstance(value, str):
            return value, None
        if isinstance(value, bool):
            return ("1" if value else "0"), None
        if isinstance(value, int):
            return str(value), None
        if isinstance(value, float) and value == value and abs(value) != float("inf"):
            from decimal import Decimal

            return format(Decimal(repr(value)), "f"), None
        raise DeploymentConfigError(f"{source}: {path}: expected a string, got {value!r}")
    if kind is bool:
        if isinstance(value, bool):
            return value, None
        if isinstance(value, (int, float)):
            return value != 0, None  # NaN too: Go's NaN != 0
        if isinstance(value, str) and (value == "" or parse_bool(value) is not None):
            return bool(parse_bool(value)), None
        raise DeploymentConfigError(
            f"{source}: {path}: expected true or false (as Go's strconv.ParseBool reads it), got {value!r}"
        )
    if isinstance(value, bool):
        return int(value), None
    if isinstance(value, float):
        truncated = float_to_int64(value)
        if truncated is None:
            raise DeploymentConfigError(
                f"{source}: {path}: {value!r} has no int64 value (Go leaves converting it to the machine)"
            )
        held = wrap(truncated, bits)
        return held, None if held == truncated else _wrapped(path, value, bits, held)
    if isinstance(value, int):
        held = wrap(value, bits)  # a uint64 past int64 wraps into int64 first: the same low bits
        return held, None if held == value else _wrapped(path, value, bits, held)
    if isinstance(value, str) and (written := integer_value(value or "0")) is not None:
        if not fits(written, bits):
            raise DeploymentConfigError(
                f"{source}: {path}: {value!r} does not fit the Go int{bits} field (strconv.ParseInt refuses it)"
            )
        return written, None
    raise DeploymentConfigError(f"{source}: {path}: expected an integer, got {value!r}")


def _wrapped(path: str, value: Any, bits: int, held: int) -> str:
    return f"{path}: {value!r} does not fit the Go int{bits} field: propeller runs with its low {bits} bits, {held}"


def parse_deployment(text: str, source: str) -> tuple[dict, dict]:
    """One YAML document's settings, by the model's names, and a note for each one propeller holds as another number
    than the one written."""
    import yaml

    try:
        root, value = goyaml.first_document(text)
        if goyaml.excessive_aliasing(root):
            raise DeploymentConfigError(
                f"{source}: document contains excessive aliasing (Go's YAML parser refuses it: propeller would not "
                "start)"
            )
        document = _lower_keys(value)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise DeploymentConfigError(f"{source}:{where} not valid YAML ({getattr(e, 'problem', e)})") from None
    except RecursionError:
        raise DeploymentConfigError(f"{source}: nested too deeply to be a configuration file") from None
    if document is None:
        return {}, {}
    if not isinstance(document, dict):
        raise DeploymentConfigError(f"{source}: expected a mapping of configuration sections at the top")
    values, notes = {}, {}
    for path, (name, kind, bits) in SETTINGS.items():
        node: Any = document
        for depth, step in enumerate(path):
            if node is None or step not in node:
                node = None
                break
            node = node[step]
            if isinstance(node, _SpelledTwice):
                raise node.error(source, path[:depth])
            if depth < len(path) - 1 and node is not None and not isinstance(node, dict):
                # propeller's decoder (mapstructure) cannot fill a section from a scalar: it does not start
                section = ".".join(path[: depth + 1])
                raise DeploymentConfigError(f"{source}: {section}: expected a section (a mapping), got {node!r}")
        if node is not None:
            values[name], note = _coerce(".".join(path), node, kind, bits, source)
            if name == "max_download_mbs" and note is None:
                note = payload_limit_note(values[name])
            compared = uint32_note(name, values[name])  # of the number held, after any int64 wrap above
            if compared is not None:
                note = compared if note is None else f"{note}; {compared}"
            if note is not None:
                notes[name] = f"{source}: {note}"
    values.update(_stow_config(document, source))
    return values, notes


def _stow_config(document: dict, source: str) -> dict:
    """`storage.stow.config`'s keys as settings of their own (`storage.stow.config.<key>`), strings as mapstructure
    makes them; the sections on the way are checked as `parse_deployment` checks them."""
    node: Any = document
    for depth, step in enumerate(STOW_CONFIG):
        if not isinstance(node, dict) or step not in node or node[step] is None:
            return {}
        node = node[step]
        if isinstance(node, _SpelledTwice):
            raise node.error(source, STOW_CONFIG[:depth])
        if not isinstance(node, dict):
            where = ".".join(STOW_CONFIG[: depth + 1])
            raise DeploymentConfigError(f"{source}: {where}: expected a section (a mapping), got {node!r}")
    settings = {}
    for key, value in node.items():
        path = f"{'.'.join(STOW_CONFIG)}.{key}"
        if isinstance(value, _SpelledTwice):
            raise value.error(source, STOW_CONFIG)
        settings[path], _ = _coerce(path, "" if value is None else value, str, 0, source)
    return settings


def load_deployment(paths: Sequence[str]) -> Deployment:
    """Merge the files in order (later files win), as propeller merges its `--config` files."""
    values: dict = {}
    notes: dict = {}
    for path in paths:
        try:
            # opened without blocking and refused unless a regular file: a FIFO or a device can block or never end
            with open(path, encoding="utf-8", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as handle:
                regular = stat.S_ISREG(os.fstat(handle.fileno()).st_mode)
                text = handle.read(defaults.MAX_CONFIG_BYTES + 1) if regular else ""
        except (OSError, ValueError) as e:  # ValueError: not UTF-8, or a NUL in the path
            raise DeploymentConfigError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
        if not regular:
            raise DeploymentConfigError(f"{path}: not a regular file (a config is a YAML file)")
        if len(text) > defaults.MAX_CONFIG_BYTES:
            raise DeploymentConfigError(f"{path}: larger than {defaults.MAX_CONFIG_BYTES} bytes: not a config file")
        these, said = parse_deployment(text, path)
        values.update(these)
        notes = {name: note for name, note in {**notes, **said}.items() if name not in these or name in said}
    deployment = Deployment(values, tuple(paths), tuple(notes.values()))
    try:
        deployment.store  # noqa: B018 - checked here, where the files are named, not where a command plays it
    except DeploymentConfigError as e:
        raise DeploymentConfigError(f"{', '.join(paths)}: {e}") from None
    return deployment
