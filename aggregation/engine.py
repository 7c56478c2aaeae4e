"""A tiny discrete-event core (in the spirit of SimPy): a clock, a queue of timed callbacks, and a log.

Behaviour lives elsewhere (`pods`, `operator`); this module only orders it. Ties in time run in the
order they were scheduled, so a simulation is deterministic for a given scenario and seed.
"""

from __future__ import annotations

import heapq
from typing import Callable, NamedTuple


class LogEntry(NamedTuple):
    """One line of an attempt's timeline (a tuple: cheap to make, immutable)."""

    at: float
    pod: str
    what: str


class Clock:
    """Schedules callbacks at simulated times and runs them in order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._sequence = 0
        self.log: list[LogEntry] = []

    def at(self, when: float, callback: Callable[[], None]) -> None:
        """Run `callback` at simulated time `when` (never before now)."""
        self._sequence += 1
        heapq.heappush(self._queue, (when if when > self.now else self.now, self._sequence, callback))

    def note(self, pod: str, what: str) -> None:
        self.log.append(LogEntry(self.now, pod, what))

    def run(self, until: float = float("inf")) -> None:
        queue = self._queue
        while queue and queue[0][0] <= until:
            self.now, _, callback = heapq.heappop(queue)
            callback()
