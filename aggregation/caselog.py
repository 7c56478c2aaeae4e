"""`sweep --out FILE`: one row per simulated case (assignment x plugin x aggregation), CSV or JSON lines.

A point whose job the operator's random map order decides has a row per order, with that order's own outcome and its
`replica_map_order` column naming the field that pinned it (`attempts[0].replica_map_order=WORKER_FIRST`). Elsewhere
that column is empty. A point the model refuses has outcome REFUSED, the refusal's line in `refusal`, and nothing in
the columns of a played execution.

Rows are written as the sweep runs, so a million-case sweep never holds them in memory, and a file
that cannot be written is refused before the first simulation. They go to `FILE.partial`, renamed to FILE
when the sweep is done: a sweep stopped part way (Ctrl-C, a signal, a bug) never leaves a file under the name
asked for that looks whole; it keeps the rows so far in `FILE.partial` and says so. A FILE that is no regular
file (`/dev/stdout`, a pipe) or is a symbolic link is written in place; an existing file keeps its mode.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import stat
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any, Optional, Sequence, Union

from aggregation.results import Execution
from aggregation.scenario import ModelRefusal

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
CASE_COLUMNS = (
    "plugin",
    "aggregation",
    "outcome",
    "final_phase",
    "final_code",
    "attempts",
    "genuine_error_masked",
    "first_winning_file",
    "first_decision",
    "replica_map_order",
    "refusal",
)


@dataclass(frozen=True)
class CaseRow:
    """What one case did, as its row says it: small, so a sweep's worker process sends it back instead of the
    execution (pickling an execution costs about half as much as simulating it)."""

    outcome: str
    final_phase: str = ""
    final_code: str = ""
    attempts: Union[int, str] = ""
    genuine_error_masked: Union[bool, str] = ""
    first_winning_file: str = ""
    first_decision: str = ""
    refusal: str = ""  # the model's line, for a point it refuses to play (the played columns then stay empty)

    @classmethod
    def of(cls, execution: "Execution | ModelRefusal", outcome: str) -> "CaseRow":
        if isinstance(execution, ModelRefusal):  # nothing was played: the row says why
            return cls(outcome, refusal=str(execution))
        first = execution.attempts[0]
        read = first.read
        return cls(
            outcome,
            final_phase=execution.final_phase.value,
            final_code=execution.final_code or "",
            attempts=len(execution.attempts),
            genuine_error_masked=execution.masked_genuine_error,
            first_winning_file=read.selected.path if read is not None and read.selected is not None else "",
            first_decision=first.decision.decision.value,
        )

    def columns(self) -> dict[str, Any]:
        return {column.name: getattr(self, column.name) for column in fields(self)}


class CaseLogError(ValueError):
    """The --out file cannot be used (its suffix, or the file system)."""


class CaseLog:
    def __init__(self, path: str, fields: Sequence[str]):
        suffix = Path(path).suffix.lower()
        if suffix not in FORMATS:
            raise CaseLogError(f"--out {path}: name it .csv or .jsonl (JSON lines) to choose the format")
        self.format = FORMATS[suffix]
        self.fields = tuple(fields)
        self.path = path
        self._written = (0, 0)  # rows counted, and the bytes they (and a CSV header) take
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = None  # a new file (or one we cannot see: opening it says why)
        if mode is not None and stat.S_ISDIR(mode):
            raise CaseLogError(f"--out {path}: is a directory")
        # a device or a pipe has nothing to rename, and a symbolic link must stay one: written through, in place
        in_place = mode is not None and (not stat.S_ISREG(mode) or os.path.islink(path))
        self.mode = stat.S_IMODE(mode) if mode is not None and not in_place else None  # an existing file's, kept
        self.writing = path if in_place else path + ".partial"
        try:
            self._file: IO[str] = open(self.writing, "w", newline="", encoding="utf-8")
        except OSError as e:
            raise CaseLogError(f"--out {self.writing}: {e.strerror}") from None
        self._line = io.StringIO()  # each row is made here, then written in one call (`_write`)
        self._csv = csv.writer(self._line) if self.format == "csv" else None
        if self._csv is not None:
            self._csv.writerow([*self.fields, *CASE_COLUMNS])
            self._write(self._line.getvalue(), row=False)

    def write(self, assignment: tuple, plugin: str, aggregation: bool, case: "CaseRow", pins: tuple = ()) -> None:
        """One case's row: the assignment's values, the cell, what the case did (`CaseRow.of`) and the map orders it
        took."""
        columns: dict[str, Any] = {"plugin": plugin, "aggregation": aggregation, **case.columns()}
        values = dict(assignment)
        columns["replica_map_order"] = " ".join(f"{name}={value}" for name, value in pins)
        row = {column: columns[column] for column in CASE_COLUMNS}  # one key order for every row
        if self._csv is not None:
            self._line.seek(0)
            self._line.truncate()
            self._csv.writerow([*(values[f] for f in self.fields), *row.values()])
            self._write(self._line.getvalue())
        else:
            row = {key: (None if value == "" else value) for key, value in row.items()}
            self._write(json.dumps({"assignment": values, **row}) + "\n")

    def _write(self, text: str, row: bool = True) -> None:
        """Write `text` and count it in one assignment: a signal's exception (raised between any two bytecodes) that
        lands after the write but before the count leaves a row the count does not hold, which `abandon` cuts off,
        so the rows it names are exactly the rows the file keeps."""
        self._file.write(text)
        rows, size = self._written
        self._written = (rows + row, size + len(text.encode("utf-8", "surrogateescape")))

    @property
    def rows(self) -> int:
        return self._written[0]

    def close(self) -> None:
        """The sweep is done: the rows take the name asked for."""
        self._file.close()
        if self.writing != self.path:
            try:
                if self.mode is not None:
                    os.chmod(self.writing, self.mode)
                os.replace(self.writing, self.path)
            except OSError as e:
                raise CaseLogError(f"--out {self.path}: {e.strerror} (the rows are in {self.writing})") from None

    def abandon(self) -> Optional[str]:
        """The sweep stopped part way: keep what was written, under its own name, and say where (None: it stopped
        before its first row, and leaves nothing behind)."""
        with contextlib.suppress(OSError):  # a device or a pipe keeps what reached it
            self._file.truncate(self._written[1])  # a row written but not yet counted goes
        self._file.close()
        rows = f"{self.rows:,} row" + ("" if self.rows == 1 else "s")
        if self.writing == self.path:
            return f"--out {self.path} has the first {rows} only"
        if not self.rows:
            with contextlib.suppress(OSError):
                os.unlink(self.writing)
            return None
        return f"--out {self.path} not written; the first {rows} are in {self.writing}"

    def __enter__(self) -> "CaseLog":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if error is None:
            self.close()
            return
        note = self.abandon()
        if note is not None:  # PEP 678's notes (set by hand: Python 3.10 has no add_note): the CLI's last line says it
            error.__notes__ = [*getattr(error, "__notes__", ()), note]
