"""YAML as propeller's configuration parser reads it: go.yaml.in/yaml/v3 v3.0.4, which viper v1.21.0 (flytestdlib's
`config/viper`, flyteorg/flyte v1.16.8) uses, read through PyYAML's safe parser.

PyYAML types plain scalars by YAML 1.1 rules; Go's parser does not (`resolve.go` `resolve`). So every plain scalar is
typed here as Go's parser types it: `1:30` is a string, not 90 (YAML 1.1's base 60); `yes` is a string; `1e3`, `08`
and `+_1` are numbers (a float, the float 8, and 1: underscores go before Go parses the rest). An integer outside
int64 but within uint64 stays a uint64, and larger ones become floats, as in Go. Plain timestamps are left as strings:
no setting the model reads takes one, and neither form decodes into a number or a bool. The non-specific tag `!`
changes nothing. Quoted and block scalars are strings; an explicit `!!int`/`!!float`/`!!bool`/`!!null`/`!!timestamp`
tag is resolved the same way and must agree, `!!binary` is decoded, any other tag leaves a string, and a tag on a
mapping or a sequence is ignored, as in Go. Keys keep their text. A key given twice in one mapping (`<<` too; a merge
source's keys too) is an error, and so is a document that aliasing makes too large; an anchor defined again is not.
"""

from __future__ import annotations

import collections.abc
import math
import re
from dataclasses import dataclass
from typing import Any

from aggregation.gonumbers import fits, parse_int, parse_uint

#: resolve.go `resolveMap`, looked up only for a scalar whose first byte has a hint (`resolveTable`)
_KNOWN = {
    **dict.fromkeys(("true", "True", "TRUE"), True),
    **dict.fromkeys(("false", "False", "FALSE"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
_NUMERIC_HINT = frozenset("+-0123456789")
_HINTED = _NUMERIC_HINT | frozenset("yYnNtTfFoO~.")
#: resolve.go `yamlStyleFloat`, the floats tried once ParseInt and ParseUint have failed
_YAML_STYLE_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
#: what `strconv.ParseFloat` takes of a scalar starting with "." (underscores only between digits)
_GO_DOT_FLOAT = re.compile(r"\.[0-9](?:_?[0-9])*(?:[eE][-+]?[0-9](?:_?[0-9])*)?")

PLAIN_TAG = "tag:aggsim,2026:go-plain"
_STANDARD = "tag:yaml.org,2002:"


def _finite_float(text: str) -> Any:
    """`strconv.ParseFloat(text, 64)` of a decimal Go accepts: an overflow is an error in Go (None here)."""
    value = float(text.replace("_", ""))
    return None if math.isinf(value) else value


def resolve_plain(text: str) -> Any:
    """resolve.go `resolve("", text)`: the value Go's parser gives a plain scalar."""
    if text[:1] not in _HINTED and text != "":
        return text
    if text in _KNOWN:
        return _KNOWN[text]
    if text[0] == ".":
        value = _finite_float(text) if _GO_DOT_FLOAT.fullmatch(text) else None
        return text if value is None else value
    if text[0] not in _NUMERIC_HINT:
        return text
    plain = text.replace("_", "")
    for value in (parse_int(plain), parse_uint(plain)):
        if value is not None:
            return value
    if _YAML_STYLE_FLOAT.fullmatch(plain) and (value := _finite_float(plain)) is not None:
        return value
    for sign, prefix, base in (("", "0b", 2), ("-", "-0b", 2), ("", "0o", 8), ("-", "-0o", 8)):
        if plain.startswith(prefix):  # the digits after a lower-case prefix, parsed again with its base alone
            digits = sign + plain[len(prefix) :]
            value = parse_int(digits, base)
            if value is None and not sign:
                value = parse_uint(digits, base)
            if value is not None:
                return value
    return text


@dataclass(frozen=True)
class GoTime:
    """A scalar Go's parser reads as a `time.Time` (an explicit `!!timestamp`): no number and no bool decodes from
    it, so the model keeps only its text."""

    text: str


#: resolve.go `allowedTimestampFormats`, as the shapes `time.Parse` takes of them (the values are checked apart)
_GO_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[Tt](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})|[ ](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d+)?)?"
)


def _go_timestamp(text: str) -> bool:
    """resolve.go `parseTimestamp`: a date, or a date and time in one of Go's layouts, with values in range."""
    import datetime

    match = _GO_TIMESTAMP.fullmatch(text)
    if match is None:
        return False
    year, month, day = (int(g) for g in match.groups()[:3])
    clock = [int(g) for g in match.groups()[3:] if g is not None]
    try:
        datetime.datetime(year, month, day, *clock)
    except ValueError:
        return False
    return True


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", GoTime: "timestamp"}.get(type(value), "str")


def _explicit(tag: str):
    """A scalar with an explicit standard tag: resolved as a plain one (a `!!timestamp` tried as one first), and
    refused unless it resolves to that tag (an int, not a uint64, under `!!float` becomes a float), as resolve.go's
    deferred check does."""

    def construct(loader, node):
        import yaml

        if tag == "timestamp" and _go_timestamp(node.value):
            return GoTime(node.value)
        value = resolve_plain(node.value)
        kind = _kind_of(value)
        if tag == "float" and kind == "int" and fits(value, 64):  # a uint64 is not Go's int
            return float(value)
        if kind != tag:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot decode !!{kind} `{node.value}` as a !!{tag}", node.start_mark
            )
        return value

    return construct


def _binary(loader, node) -> str:
    """decode.go `scalar`: a `!!binary` scalar is its base64, decoded (Go's StdEncoding skips line breaks)."""
    import base64
    import binascii

    import yaml

    try:
        data = base64.b64decode(re.sub(r"[\r\n]", "", node.value), validate=True)
    except (binascii.Error, ValueError):
        raise yaml.constructor.ConstructorError(
            None, None, "!!binary value contains invalid base64 data", node.start_mark
        ) from None
    return data.decode("utf-8", "surrogateescape")


#: the scalar tags Go's parser resolves (resolve.go `resolvableTag`) or decodes (`!!binary`); any other tag on a
#: scalar leaves its text a string, and one on a mapping or a sequence is ignored (decode.go `unmarshal`)
_KEPT_TAGS = frozenset(_STANDARD + t for t in ("str", "int", "float", "bool", "null", "timestamp", "binary"))


def _go_scalar_tag(tag, style, value: str) -> str:
    """The tag a scalar event gets, as decode.go's `parser.node` and `parser.scalar` give it: none or `!` on a plain
    scalar is Go's plain resolution (`<<` a merge), on a quoted or block one a string."""
    if tag is None or tag == "!":
        if style is not None:
            return _STANDARD + "str"
        return _STANDARD + "merge" if value == "<<" else PLAIN_TAG
    if tag == _STANDARD + "merge":
        return tag if value == "<<" else _STANDARD + "str"
    return tag if tag in _KEPT_TAGS else _STANDARD + "str"


def loader_class():
    """PyYAML's safe loader, reading as go.yaml.in/yaml/v3 does (above)."""
    import yaml

    class GoYamlLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            event = self.peek_event()
            if not isinstance(event, yaml.AliasEvent) and event.anchor in self.anchors:
                del self.anchors[event.anchor]  # an anchor defined again: later aliases mean the new one, as in Go
            return super().compose_node(parent, index)

        def compose_scalar_node(self, anchor):
            event = self.peek_event()
            node = super().compose_scalar_node(anchor)
            node.tag = _go_scalar_tag(event.tag, event.style, event.value)
            return node

        def compose_sequence_node(self, anchor):
            node = super().compose_sequence_node(anchor)
            node.tag = _STANDARD + "seq"
            return node

        def compose_mapping_node(self, anchor):
            start = self.get_event()
            node = yaml.MappingNode(_STANDARD + "map", [], start.start_mark, None, flow_style=start.flow_style)
            if anchor is not None:
                self.anchors[anchor] = node
            seen: dict[tuple, int] = {}
            while not self.check_event(yaml.MappingEndEvent):
                event = self.peek_event()
                key_node = self.compose_node(node, None)
                # decode.go `mapping`: two keys of one kind and one value are refused, `<<` included; an alias is
                # its own kind, its value the anchor's name; a mapping's or a sequence's value is ""
                if isinstance(event, yaml.AliasEvent):
                    key = ("alias", event.anchor)
                else:
                    key = (key_node.id, key_node.value if isinstance(key_node, yaml.ScalarNode) else "")
                if key in seen:
                    raise yaml.MarkedYAMLError(
                        problem=f"mapping key {key[1]!r} already defined at line {seen[key]}",
                        problem_mark=event.start_mark,
                    )
                seen[key] = event.start_mark.line + 1
                node.value.append((key_node, self.compose_node(node, key_node)))
            node.end_mark = self.get_event().end_mark
            return node

        def construct_mapping(self, node, deep=False):
            self.flatten_mapping(node)
            mapping = {}
            for key_node, value_node in node.value:
                # a key keeps its text: viper decodes the document into a map of strings
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else self.construct_object(key_node, deep)
                if not isinstance(key, collections.abc.Hashable):
                    raise yaml.constructor.ConstructorError(None, None, "found an unhashable key", key_node.start_mark)
                mapping[key] = self.construct_object(value_node, deep)
            return mapping

    GoYamlLoader.add_constructor(PLAIN_TAG, lambda loader, node: resolve_plain(node.value))
    for tag in ("int", "float", "bool", "null", "timestamp"):
        GoYamlLoader.add_constructor(_STANDARD + tag, _explicit(tag))
    GoYamlLoader.add_constructor(_STANDARD + "binary", _binary)
    return GoYamlLoader


#: decode.go: the decode counts between which the share allowed to come from aliases falls
ALIAS_RATIO_RANGE = (400_000, 4_000_000)


def _allowed_alias_ratio(decodes: int) -> float:
    low, high = ALIAS_RATIO_RANGE
    if decodes <= low:
        return 0.99
    if decodes >= high:
        return 0.10
    return 0.99 - 0.89 * (decodes - low) / (high - low)


def first_document(text: str):
    """(the composed node, its value) of the stream's first document, None for both in a stream with none: viper's
    YAML codec decodes a file with `yaml.Unmarshal`, which reads the first document only (yaml.go `unmarshal`: one
    `parser.parse()`), so a `---` and whatever follows it, valid YAML or not, is never read. PyYAML's parser is as
    lazy: composing the first document reads no further than the next document's start."""
    loader = loader_class()(text)
    try:
        node = loader.get_node() if loader.check_node() else None
        return node, (None if node is None else loader.construct_document(node))
    finally:
        loader.dispose()


def excessive_aliasing(root) -> bool:
    """Whether Go's YAML decoder refuses the composed document with "document contains excessive aliasing"
    (decode.go `decoder.unmarshal`: every node decoded counts, those reached through an alias count as
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
