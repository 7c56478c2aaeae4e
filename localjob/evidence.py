"""The one log line that explains most about a real run that failed or disagreed: its first worker failure.

torch elastic's agent logs a failed worker's traceback as one record of many lines, each prefixed with the
same glog header (`E1201 02:35:42.985000 18326 torch/.../api.py:836] `). The record's last exception line
(a spawned worker's own exception comes after torch's `ProcessRaisedException` wrapper) is what the worker
raised. Of all pods' records in an attempt, the earliest is the first failure: the cause, where later
ones are usually its consequences ("Connection closed by peer").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from aggregation.printable import printable

#: one line of torch's glog-style log (LOGLEVEL=INFO adds the I lines): level, MMDD, time, pid, file:line
GLOG_LINE = re.compile(r"^[EWIF]\d{4} (?P<time>\d\d:\d\d:\d\d\.\d+) +(?P<pid>\d+) (?P<where>\S+)\] ?(?P<text>.*)$")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Failure)\w*(: .*)?$")
MAX_LINE = 300


@dataclass(frozen=True)
class WorkerFailure:
    attempt: int
    pod: str
    time: str  # the agent's log time, HH:MM:SS.ffffff
    line: str  # the exception line the worker raised

    def describe(self) -> str:
        return printable(f"attempt {self.attempt}, {self.pod} at {self.time[:12]}: {self.line}")[:MAX_LINE]


def _records(log: str) -> list[tuple[str, list[str]]]:
    """(time, lines) of each multi-line glog record, in log order."""
    records: list[tuple[str, list[str]]] = []
    header = None
    for raw in log.splitlines():
        match = GLOG_LINE.match(raw)
        if match is None:
            header = None
            continue
        key = (match["time"], match["pid"], match["where"])
        if key != header:
            records.append((match["time"], []))
            header = key
        records[-1][1].append(match["text"])
    return records


def first_worker_failure_in(log: str) -> Optional[tuple[str, str]]:
    """(time, exception line) of the log's first worker traceback, if it has one."""
    for time, lines in _records(log):
        if not any(line.startswith("Traceback (most recent call last)") for line in lines):
            continue
        raised = [line.strip() for line in lines if _EXCEPTION.match(line)]
        if raised:
            return time, raised[-1]
    return None


def first_worker_failure(run_dir: Path, attempt: Optional[int] = None) -> Optional[WorkerFailure]:
    """The earliest worker failure any pod logged (in `attempt`, or in the first attempt that has one)."""
    attempts = sorted(
        (int(path.name.split("-", 1)[1]), path) for path in Path(run_dir).glob("attempt-*") if path.name[8:].isdigit()
    )
    for number, path in attempts:
        if attempt is not None and number != attempt:
            continue
        found = []
        for log in sorted((path / "work").glob("*.log")):
            try:
                failure = first_worker_failure_in(log.read_text(errors="replace"))
            except OSError:
                continue
            if failure is not None:
                found.append(WorkerFailure(number, log.stem, *failure))
        if found:
            return min(found, key=lambda failure: failure.time)
    return None
