"""Scenario seconds <-> wall-clock seconds for one real attempt.

Scenario time maps onto wall time after the workers' first barrier: events keep their spacing and the
first one keeps its fraction of a second (so "30.6 s" fires at a wall-clock .6, where torch's
whole-second truncation bites); the long quiet stretch before it is compressed into a few seconds of
real training.
"""

from __future__ import annotations

import math

from aggregation.scenario import ScenarioSpec, SimEvent

QUIET_TRAINING = 3.0  # real seconds of training before the first event (a first checkpoint write takes ~1 s)


class ScenarioTimebase:
    def __init__(self, spec: ScenarioSpec, events: tuple[SimEvent, ...], ready_wall: float) -> None:
        rendezvous = max(t.rendezvous for t in spec.timings.values())
        later = [e.at for e in events if e.at >= rendezvous and e.kind != "checkpoint"]
        self.first = min(later) if later else None
        self.rendezvous = rendezvous
        self.ready_wall = ready_wall
        earliest = ready_wall + QUIET_TRAINING
        if self.first is None:
            self.anchor = earliest
        else:
            anchor = math.floor(earliest) + (self.first - math.floor(self.first))
            self.anchor = anchor if anchor >= earliest else anchor + 1.0

    def wall(self, t: float) -> float:
        if self.first is None:
            return self.anchor  # nothing to keep apart: everything happens once training is under way
        if t >= self.first:
            return self.anchor + (t - self.first)
        span = max(self.first - self.rendezvous, 1e-9)  # squeeze the quiet stretch before the first event
        return self.ready_wall + (self.anchor - self.ready_wall) * max(0.0, t - self.rendezvous) / span

    def scenario(self, wall: float) -> float:
        if self.first is None:
            return self.rendezvous + (wall - self.ready_wall)
        if wall >= self.anchor:
            return self.first + (wall - self.anchor)
        squeezed = max(self.anchor - self.ready_wall, 1e-9)
        return self.rendezvous + (wall - self.ready_wall) * (self.first - self.rendezvous) / squeezed
