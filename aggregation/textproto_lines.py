"""Where each field of a protobuf text-format document is written, by the field path its errors name.

An error names a field as `pod_timings[1].timings.upload_seconds`; finding its line by counting the matches of a
name in the text goes wrong as soon as a field is written where it is not set (a plain `at_seconds: 0`), or in
another order than the schema's. This reads the text once, as the text format nests it, and records the line of
every field it meets under that path (a repeated field's entries numbered in the order written, which is their
order in the message). The document has already been parsed by protobuf's own `text_format`, so only the layout
is read here; anything it does not know (an extension, an `Any`) is skipped, not guessed at.
"""

from __future__ import annotations

import re
from typing import Optional

from google.protobuf.descriptor import Descriptor, FieldDescriptor

# a comment, a quoted string (an unterminated one to the line's end), one punctuation character, or a bare word
# (a field name, a number, an enum value)
_TOKEN = re.compile(r"""\#[^\n]*|"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?|[{}<>\[\]:;,]|[^\s{}<>\[\]:;,"'\#]+""")
_CLOSING = {"{": "}", "<": ">"}


def field_lines(text: str, descriptor: Descriptor) -> dict[str, int]:
    """The line (from 1) of each field written in `text`, a text-format `descriptor` message, by its field path."""
    tokens = []
    line = 1
    position = 0
    for match in _TOKEN.finditer(text):
        line += text.count("\n", position, match.start())
        position = match.start()
        if match.group()[0] != "#":
            tokens.append((match.group(), line))
    lines: dict[str, int] = {}
    _Reader(tokens, lines).message(descriptor, "", end=None)
    return lines


def parent_path(path: str) -> str:
    """The path of the field that holds `path`'s (`a.b[2]` -> `a.b`, `a.b` -> `a`, `a` -> "")."""
    cut = max(path.rfind("."), path.rfind("["))
    return path[: max(cut, 0)]


class _Reader:
    def __init__(self, tokens: list[tuple[str, int]], lines: dict[str, int]) -> None:
        self.tokens = tokens
        self.lines = lines
        self.at = 0

    def _peek(self) -> Optional[str]:
        return self.tokens[self.at][0] if self.at < len(self.tokens) else None

    def message(self, descriptor: Optional[Descriptor], prefix: str, end: Optional[str]) -> None:
        written: dict[str, int] = {}  # a repeated field's entries so far
        while self.at < len(self.tokens):
            name, line = self.tokens[self.at]
            self.at += 1
            if name == end:
                return
            if name in (";", ","):
                continue
            field = descriptor.fields_by_name.get(name) if descriptor is not None else None
            if self._peek() == ":":
                self.at += 1

            if self._peek() == "[":  # a list of values, each an entry of the repeated field
                self.at += 1
                while self.at < len(self.tokens) and self._peek() != "]":
                    if self._peek() == ",":
                        self.at += 1
                        continue
                    entry = _entry_path(prefix, name, field, written)
                    self.lines.setdefault(entry, self.tokens[self.at][1])
                    self._value(field, entry)
                self.at += 1
            else:
                entry = _entry_path(prefix, name, field, written)
                self.lines.setdefault(entry, line)
                self._value(field, entry)

    def _value(self, field: Optional[FieldDescriptor], path: str) -> None:
        token = self._peek()
        if token is None:
            return
        self.at += 1
        if token in _CLOSING:
            nested = field.message_type if field is not None else None
            self.message(nested, path + ".", end=_CLOSING[token])
        elif token[0] in "\"'":  # adjacent strings are one value
            while (self._peek() or " ")[0] in "\"'":
                self.at += 1


def _entry_path(prefix: str, name: str, field: Optional[FieldDescriptor], written: dict[str, int]) -> str:
    """The path of the field `name` met now: a repeated field's next entry is numbered."""
    if field is None or not field.is_repeated:
        return prefix + name
    index = written.get(name, 0)
    written[name] = index + 1
    return f"{prefix}{name}[{index}]"
