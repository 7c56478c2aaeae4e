"""One event loop, two clocks (SimPy's shape): the same actors run on simulated time or on the wall clock.

`Clock` is simulated time: it jumps from one scheduled callback to the next. `WallClock` runs the same
queue in real time: a callback scheduled at scenario time `t` runs when the wall clock reaches
`timebase.wall(t)`, and between callbacks its pollers look at the real world (processes that exited,
files that appeared) and report what they find to the actors. Ties in time run in the order they were
scheduled; a `LATE` callback runs after the other callbacks of the same instant (a reconcile reads what the
instant's events did), and a `LAST` one after those too (propeller's round sees everything that happened at the
moment it looks).
"""

from __future__ import annotations

import math
import time
from heapq import heappop, heappush
from typing import Callable, Protocol, Sequence

from aggregation.nanoseconds import on_the_clock

#: A poller looks at the real world and reports to the actors; it returns nothing.
Poller = Callable[[], None]


class DeadlineExceeded(RuntimeError):
    """A wall-clock run went past its deadline (the message says what was still running)."""


#: when in its instant a callback runs (`Clock.at`'s `late`): at its place, after those, after everything
LATE, LAST = 1, 2

#: A callback waiting in the queue, as the queue holds it: [when, late, sequence, callback]. A list, not an object
#: of a class of its own: a simulation queues tens per attempt, and a list is made at C speed. `cancel` it when the
#: course of things changes.
Scheduled = list
_CALLBACK = 3


def cancel(scheduled: Scheduled) -> None:
    """The callback will not run (it stays in the queue, empty, until its moment comes)."""
    scheduled[_CALLBACK] = None


class Clock:
    """Simulated time: callbacks run in time order, and time jumps to each one."""

    #: how long pods may keep running after propeller's verdict before the run stops watching them
    linger_after_verdict = math.inf

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[Scheduled] = []
        self._sequence = 0

    def at(self, when: float, callback: Callable[[], None], late: int = 0) -> Scheduled:
        """Run `callback` at scenario time `when` (on simulated time never before now: `_not_before`); `late` (`LATE`,
        `LAST`): after the instant's callbacks of a lower `late`.
        The moment is put on the nanosecond (`on_the_clock`), so moments the scenario's decimals make equal are equal
        here, whatever float sums led to them."""
        when = on_the_clock(when)
        now = self._not_before()
        self._sequence = sequence = self._sequence + 1
        scheduled = [when if when > now else now, late, sequence, callback]
        heappush(self._queue, scheduled)
        return scheduled

    def _not_before(self) -> float:
        """The earliest moment a callback can be queued for: now, as simulated time never runs back."""
        return self.now

    def next_callback(self) -> float:
        """When the next callback waiting in the queue runs (inf when none waits): nothing happens before it."""
        return min((when for when, _, _, callback in self._queue if callback is not None), default=math.inf)

    def run(self, stop: Callable[[], bool]) -> None:
        """Run callbacks until `stop()` says so or nothing is left to run."""
        queue = self._queue
        while queue and not stop():
            self.now, _, _, callback = heappop(queue)
            if callback is not None:
                callback()


class Timebase(Protocol):
    """Maps scenario seconds to wall-clock seconds (`time.time()`) and back, for one attempt."""

    def wall(self, t: float) -> float: ...

    def scenario(self, wall: float) -> float: ...


class WallClock(Clock):
    """Real time: the same queue, each callback run when the wall clock reaches it; pollers in between."""

    def __init__(
        self,
        timebase: Timebase,
        pollers: Sequence[Poller],
        deadline: float,
        linger_after_verdict: float,
        poll_interval: float = 0.005,
    ) -> None:
        super().__init__()
        self.timebase = timebase
        self.pollers = tuple(pollers)
        self.deadline = deadline
        self.linger_after_verdict = linger_after_verdict
        self.poll_interval = poll_interval
        self.now = timebase.scenario(time.time())

    def _not_before(self) -> float:
        """Any moment: a callback for a moment the wall clock has passed (one a late callback asks for, counted from its
        own moment) runs at once, and keeps its place before the due callbacks of later moments."""
        return -math.inf

    def next_callback(self) -> float:
        """Now: the real world (a process, a file) may change at any moment, whatever the queue holds."""
        return self.now

    def _tick(self) -> None:
        self.now = self.timebase.scenario(time.time())

    def run(self, stop: Callable[[], bool]) -> None:
        queue = self._queue
        while True:
            self._tick()
            for poll in self.pollers:
                poll()
            if stop():
                return
            wall = time.time()
            if wall > self.deadline:
                raise DeadlineExceeded("the attempt did not finish in time")
            if queue and self.timebase.wall(queue[0][0]) <= wall:
                _, _, _, callback = heappop(queue)
                if callback is not None:
                    self._tick()
                    callback()
                continue
            wait = self.poll_interval
            if queue:
                wait = min(wait, max(0.0, self.timebase.wall(queue[0][0]) - wall))
            time.sleep(wait)
