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

Several files merge in order (flyte-core mounts one per concern), later ones winning. Keys the model
does not use are ignored, as propeller ignores keys of sections it does not own; a value of the wrong
type is a one-line error naming the file and the key, and so is what would keep propeller from starting: a key
given twice in one mapping (Go's YAML parser refuses it) or a section the model reads that is not a mapping. Keys
match without case (viper lower-cases them); a key the model reads spelt in two mixed cases in one mapping is an
error too, since Go's random map order picks its value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from aggregation import defaults
from aggregation.propeller import PropellerConfig, payload_limit

FLYTE_DEFAULT_ERROR_AGGREGATION = False  # flytek8s/config/config.go: a bool field defaultK8sConfig does not set

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)

# key path (lower case, as viper keeps it) -> (the model's name for it, type, range)
SETTINGS: dict[tuple[str, ...], tuple[str, type, tuple[int, int]]] = {
    ("propeller", "max-workflow-retries"): ("max_workflow_retries", int, INT64),
    ("propeller", "node-config", "max-node-retries-system-failures"): ("max_node_retries_system_failures", int, INT64),
    ("propeller", "node-config", "default-max-attempts"): ("default_max_attempts", int, INT32),
    ("propeller", "node-config", "interruptible-failure-threshold"): ("interruptible_failure_threshold", int, INT32),
    ("propeller", "node-config", "ignore-retry-cause"): ("ignore_retry_cause", bool, (0, 1)),
    ("plugins", "k8s", "enable-distributed-error-aggregation"): ("error_aggregation", bool, (0, 1)),
    ("storage", "limits", "maxdownloadmbs"): ("max_download_mbs", int, INT64),
}


class DeploymentConfigError(ValueError):
    """A configuration file that cannot be read, or a value of the wrong type."""


@dataclass(frozen=True)
class Deployment:
    """What the files say; a setting no file makes is not in `values` (Flyte's default applies)."""

    values: dict
    sources: tuple[str, ...] = ()

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
        (`getMaxPayloadSize`: the reader is built with 0, so the limit is exactly maxDownloadMBs MiB)."""
        changes = {k: v for k, v in self.values.items() if k not in ("error_aggregation", "max_download_mbs")}
        if "max_download_mbs" in self.values:
            changes["max_payload_bytes"] = payload_limit(self.values["max_download_mbs"])
        return replace(base, **changes)


@dataclass(frozen=True)
class _SpelledTwice:
    """Two or more spellings of one key, none of them all lower case, in one mapping: which value viper keeps is Go's
    random map order (below)."""

    spellings: tuple[str, ...]


def _lower_keys(node: Any) -> Any:
    """Keys as viper keeps them (spf13/viper v1.21.0 `util.go` `insensitiviseMap`, at every read): it ranges over the
    map, deleting each key that is not all lower case and storing its value under the lower-cased key. So of a key
    written in several cases in one mapping, a mixed-case spelling's value replaces the lower-case one's whatever the
    order; between two mixed-case spellings, the one Go's random map order visits last wins."""
    if not isinstance(node, dict):
        return node
    spellings: dict[str, list] = {}
    for key, value in node.items():
        spellings.setdefault(str(key).lower(), []).append((str(key), value))
    lowered = {}
    for lower, written in spellings.items():
        mixed = [(key, value) for key, value in written if key != lower]
        if len(mixed) > 1:
            lowered[lower] = _SpelledTwice(tuple(key for key, _ in mixed))
        else:
            lowered[lower] = _lower_keys((mixed or written)[0][1])
    return lowered


#: Go's `strconv.ParseBool`
_GO_TRUE, _GO_FALSE = ("1", "t", "T", "TRUE", "true", "True"), ("0", "f", "F", "FALSE", "false", "False")
#: Go's `strconv.ParseInt(s, 0, 64)` spellings: an optional sign, then 0x / 0o / 0b / a leading 0 (octal) or decimal,
#: with underscores only between digits
_GO_INT = re.compile(
    r"[+-]?(?:0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+|0(?:_?[0-7])*|[1-9](?:_?[0-9])*)"
)


def _go_parse_int(text: str) -> Optional[int]:
    if not _GO_INT.fullmatch(text):
        return None
    digits = text.lstrip("+-")
    if len(digits) > 1 and digits[0] == "0" and digits[1] not in "xXoObB":  # Go: a leading 0 is octal
        text = text.replace("0", "0o", 1)
    return int(text, 0)


def _coerce(path: str, value: Any, kind: type, bounds: tuple[int, int], source: str) -> Any:
    """As flytestdlib's decoder reads it (`config/viper` with `WeaklyTypedInput`: go-viper/mapstructure v2.4.0
    `decodeBool`, `decodeInt`): a bool from a number (not 0) or from what `strconv.ParseBool` takes, "" being false;
    an integer from a float (truncated), a bool (1 or 0) or what `strconv.ParseInt(s, 0, 64)` takes, "" being 0.
    Anything else fails the decode, and propeller does not start."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return value != 0  # NaN too: Go's NaN != 0
        if isinstance(value, str) and value in _GO_TRUE + _GO_FALSE + ("",):
            return value in _GO_TRUE
        raise DeploymentConfigError(
            f"{source}: {path}: expected true or false (as Go's strconv.ParseBool reads it), got {value!r}"
        )
    if isinstance(value, bool):
        value = int(value)
    elif isinstance(value, float) and math.isfinite(value):
        value = int(value)  # Go's int64(f) truncates toward zero, as Python's int does
    elif isinstance(value, str):
        parsed = _go_parse_int(value) if value else 0
        value = value if parsed is None else parsed
    if not isinstance(value, int):
        raise DeploymentConfigError(f"{source}: {path}: expected an integer, got {value!r}")
    if not bounds[0] <= value <= bounds[1]:
        raise DeploymentConfigError(f"{source}: {path}: {value} does not fit the Go field ({bounds[0]}..{bounds[1]})")
    return value


def _go_yaml_loader():
    """PyYAML's safe loader, refusing a key given twice in one mapping as Go's YAML parser does (go.yaml.in/yaml/v3,
    which viper and flytestdlib's `config/viper` use: "mapping key already defined"), where PyYAML keeps the last."""
    import yaml

    class GoYamlLoader(yaml.SafeLoader):
        # YAML 1.2 as Go's parser resolves it: yes/no/on/off/y/n are strings, not PyYAML's (YAML 1.1) booleans
        yaml_implicit_resolvers = {
            first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }

        def construct_mapping(self, node, deep=False):
            seen: dict[str, int] = {}
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    line = key_node.start_mark.line + 1
                    if key_node.value in seen:
                        raise yaml.MarkedYAMLError(
                            problem=f"mapping key {key_node.value!r} already defined at line {seen[key_node.value]}",
                            problem_mark=key_node.start_mark,
                        )
                    seen[key_node.value] = line
            return super().construct_mapping(node, deep)

    GoYamlLoader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    return GoYamlLoader


#: go.yaml.in/yaml/v3 `decode.go`: the decode counts between which the share allowed to come from aliases falls
ALIAS_RATIO_RANGE = (400_000, 4_000_000)


def _allowed_alias_ratio(decodes: int) -> float:
    low, high = ALIAS_RATIO_RANGE
    if decodes <= low:
        return 0.99
    if decodes >= high:
        return 0.10
    return 0.99 - 0.89 * (decodes - low) / (high - low)


def _excessive_aliasing(root) -> bool:
    """Whether Go's YAML decoder refuses the composed document with "document contains excessive aliasing"
    (go.yaml.in/yaml/v3 `decoder.unmarshal`: every node decoded counts, those reached through an alias count as
    aliased too, and past 1,000 decodes and 100 aliased ones their share may not exceed `_allowed_alias_ratio`).
    PyYAML hands an alias back as its anchor's node, so a node met again is met through an alias. Counting stops
    as soon as Go's would fail: an alias bomb is refused in a few thousand steps, never expanded."""
    import yaml

    decodes, aliased = (0 if root is None else 1), 0  # Go decodes the document node first
    seen: set[int] = set()
    stack = [] if root is None else [(root, False)]
    while stack:
        node, through_alias = stack.pop()
        if id(node) in seen:  # an alias: its own decode, then its anchor's node again, aliased
            decodes += 1
            aliased += through_alias
            through_alias = True
        seen.add(id(node))
        decodes += 1
        aliased += through_alias
        if aliased > 100 and decodes > 1000 and aliased / decodes > _allowed_alias_ratio(decodes):
            return True
        # children pushed last first, so that they pop in document order: Go counts, and fails, in that order
        if isinstance(node, yaml.MappingNode):
            stack.extend((child, through_alias) for pair in reversed(node.value) for child in reversed(pair))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, through_alias) for child in reversed(node.value))
    return False


def parse_deployment(text: str, source: str) -> dict:
    """One YAML document's settings, by the model's names."""
    import yaml

    try:
        if _excessive_aliasing(yaml.compose(text, Loader=_go_yaml_loader())):  # noqa: S506 (a SafeLoader)
            raise DeploymentConfigError(
                f"{source}: document contains excessive aliasing (Go's YAML parser refuses it: propeller would not "
                "start)"
            )
        document = _lower_keys(yaml.load(text, Loader=_go_yaml_loader()))  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise DeploymentConfigError(f"{source}:{where} not valid YAML ({getattr(e, 'problem', e)})") from None
    except RecursionError:
        raise DeploymentConfigError(f"{source}: nested too deeply to be a configuration file") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise DeploymentConfigError(f"{source}: expected a mapping of configuration sections at the top")
    values = {}
    for path, (name, kind, bounds) in SETTINGS.items():
        node: Any = document
        for depth, step in enumerate(path):
            if node is None or step not in node:
                node = None
                break
            node = node[step]
            if isinstance(node, _SpelledTwice):
                where = ".".join(path[:depth])
                raise DeploymentConfigError(
                    f"{source}: {where + ': ' if where else ''}{' and '.join(node.spellings)} are one key to "
                    "propeller (viper ignores case) and which value it keeps is Go's random map order: write it once"
                )
            if depth < len(path) - 1 and node is not None and not isinstance(node, dict):
                # propeller's decoder (mapstructure) cannot fill a section from a scalar: it does not start
                section = ".".join(path[: depth + 1])
                raise DeploymentConfigError(f"{source}: {section}: expected a section (a mapping), got {node!r}")
        if node is not None:
            values[name] = _coerce(".".join(path), node, kind, bounds, source)
    return values


def load_deployment(paths: Sequence[str]) -> Deployment:
    """Merge the files in order (later files win), as propeller merges its `--config` files."""
    values: dict = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read(defaults.MAX_CONFIG_BYTES + 1)
        except (OSError, ValueError) as e:  # ValueError: not UTF-8, or a NUL in the path
            raise DeploymentConfigError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
        if len(text) > defaults.MAX_CONFIG_BYTES:
            raise DeploymentConfigError(f"{path}: larger than {defaults.MAX_CONFIG_BYTES} bytes: not a config file")
        values.update(parse_deployment(text, path))
    return Deployment(values, tuple(paths))
