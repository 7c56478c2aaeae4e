"""Text from documents, paths, scenarios and the command line, made safe to show: control characters (C0, DEL,
C1) become `\\xNN` escapes, so nothing a user or a document wrote can move the cursor, clear the screen or split
one line of output into several. A byte of a file name that is not UTF-8 (Python keeps it as a lone surrogate,
U+DC80..U+DCFF) becomes `\\xNN` of that byte, and any other lone surrogate `\\uNNNN`: escaped here, where a table
measures it, not by the output stream after the table has been laid out."""

from __future__ import annotations

#: str.translate table: each control character and lone surrogate to its escape
CONTROL_ESCAPES = {
    **{code: f"\\u{code:04x}" for code in range(0xD800, 0xE000)},
    **{0xDC00 + byte: f"\\x{byte:02x}" for byte in range(0x80, 0x100)},  # surrogateescape's undecodable bytes
    **{code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)]},
}


def printable(text: object) -> str:
    return str(text).translate(CONTROL_ESCAPES)
