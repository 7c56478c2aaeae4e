"""Text from documents, paths, scenarios and the command line, made safe to show: control characters (C0, DEL,
C1) become `\\xNN` escapes, so nothing a user or a document wrote can move the cursor, clear the screen or split
one line of output into several."""

from __future__ import annotations

#: str.translate table: each control character to its \xNN escape
CONTROL_ESCAPES = {code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)]}


def printable(text: object) -> str:
    return str(text).translate(CONTROL_ESCAPES)
