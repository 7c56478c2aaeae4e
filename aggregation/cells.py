"""Text measured as a terminal shows it: in cells, not characters. A CJK character takes two cells, a combining mark
none; `len` counts one for each, so a pod name in kana padded with `:<16` or wrapped by `textwrap` pushed the
columns after it out of line and the line past the terminal's width. Measure text only once it is escaped
(`printable`): an escape such as `\\x1b` is four cells where the character it stands for was one."""

from __future__ import annotations

import re

from rich.cells import cell_len

_SPACES = re.compile(r"( +)")


def pad_cells(text: str, width: int) -> str:
    """`text` followed by spaces up to `width` cells (as `f"{text:<{width}}"` does for one-cell characters)."""
    return text + " " * (width - cell_len(text))


def wrap_cells(text: str, width: int, subsequent_indent: str = "") -> list[str]:
    """`textwrap.wrap(text, width, subsequent_indent=..., break_long_words=False, break_on_hyphens=False)` with each
    line's width counted in cells, by textwrap's own steps: lines break at spaces only, a word wider than a line
    stands alone on its line, the spaces at a break are dropped (those that begin the text are kept). For text whose
    characters are one cell each and whose only whitespace is the space, the lines are textwrap's (tested)."""
    chunks = [chunk for chunk in _SPACES.split(text) if chunk]
    chunks.reverse()
    lines: list[str] = []
    while chunks:
        indent = subsequent_indent if lines else ""
        room = width - cell_len(indent)
        if lines and chunks[-1][0] == " ":
            chunks.pop()
        line: list[str] = []
        used = 0
        while chunks and used + cell_len(chunks[-1]) <= room:
            used += cell_len(chunks[-1])
            line.append(chunks.pop())
        if chunks and not line and cell_len(chunks[-1]) > room:
            line.append(chunks.pop())  # never cut: the terminal wraps it
        if line and line[-1][0] == " ":
            line.pop()
        if line:
            lines.append(indent + "".join(line))
    return lines
