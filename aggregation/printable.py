"""Text from documents, paths, scenarios and the command line, made safe to show: control characters (C0, DEL,
C1) become `\\xNN` escapes, so nothing a user or a document wrote can move the cursor, clear the screen or split
one line of output into several; format characters (Unicode's Cf: bidirectional overrides that make text read
backwards, zero-width spaces and joiners, a byte order mark) and the line and paragraph separators become
`\\uNNNN` (`\\UNNNNNNNN`), so what is shown is what is there. A byte of a file name that is not UTF-8 (Python keeps
it as a lone surrogate, U+DC80..U+DCFF) becomes `\\xNN` of that byte, and any other lone surrogate `\\uNNNN`:
escaped here, where a table measures it, not by the output stream after the table has been laid out."""

from __future__ import annotations

import unicodedata

#: Unicode categories whose characters are shown escaped although they are no control characters: format
#: characters, and the line and paragraph separators (which a terminal or an editor may take for a line break)
INVISIBLE_CATEGORIES = frozenset({"Cf", "Zl", "Zp"})


_KEPT_AT_MOST = 1 << 16


def code_point_escape(code: int) -> str:
    """A character shown by its code point, as Python writes it: `\\uNNNN`, or `\\UNNNNNNNN` past the BMP."""
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


class _Escapes(dict):
    """str.translate's table: each control character and lone surrogate to its escape, from the start; any other
    character is looked up by its Unicode category the first time it is met (a table of every code point would
    cost each command's start-up), then kept."""

    def __missing__(self, code: int):
        if unicodedata.category(chr(code)) in INVISIBLE_CATEGORIES:
            escape = code_point_escape(code)
        else:
            escape = code  # shown as it is
        if len(self) < _KEPT_AT_MOST:  # a document of every code point cannot make the table grow without bound
            self[code] = escape
        return escape


CONTROL_ESCAPES = _Escapes(
    {
        **{code: f"\\u{code:04x}" for code in range(0xD800, 0xE000)},
        **{0xDC00 + byte: f"\\x{byte:02x}" for byte in range(0x80, 0x100)},  # surrogateescape's undecodable bytes
        **{code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)]},
    }
)


def printable(text: object) -> str:
    return str(text).translate(CONTROL_ESCAPES)
