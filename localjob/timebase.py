"""Scenario seconds <-> wall-clock seconds for one real attempt.

Scenario time maps onto wall time after the workers' first barrier. From the first moment the world acts on
the pods (a scenario event other than a checkpoint, else the training's completion) time runs at the wall's
pace, so every spacing after it is kept: the events', and the operator's and propeller's delays after them, to
the last. That first moment keeps its fraction of a second (so "30.6 s" fires at a wall-clock .6, where torch's
whole-second truncation bites). Only the quiet training before it, where nothing acts on the pods, is mapped
onto 3-4 seconds of real training. A signal inside the first rendezvous has no training before it: it lands as
soon as the rendezvous store is up.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from aggregation.scenario import ScenarioSpec

QUIET_TRAINING = 3.0  # real seconds of training before the first action (a first checkpoint write takes ~1 s)
#: the most real seconds from the workers' first barrier to the first action: the quiet training, then up to a
#: second more to reach the first action's fraction of a second
MOST_LEAD = QUIET_TRAINING + 1.0


def barrier(spec: ScenarioSpec) -> float:
    """When the workers first train together: the last pod's rendezvous."""
    return max(t.rendezvous for t in spec.timings.values())


class FirstAction(NamedTuple):
    at: float  # scenario seconds
    what: str  # "the preemption", "its training's completion"


def first_action(spec: ScenarioSpec, attempt: int) -> FirstAction:
    """Where attempt N starts to run at the wall's pace: its first event (a checkpoint write only marks the quiet
    stretch), else the training's completion."""
    events = [FirstAction(e.at, f"the {e.kind}") for e in spec.events_for(attempt) if e.kind != "checkpoint"]
    return min([*events, FirstAction(spec.completion_for(attempt), "its training's completion")], key=lambda a: a.at)


def lands_in_first_rendezvous(spec: ScenarioSpec, attempt: int) -> bool:
    """Whether attempt N's first action comes before the workers' first barrier: a signal to a pod still in its
    rendezvous, which the runner sends as soon as the store is up (`localjob.runner.check_playable` refuses any
    other action before the barrier, which the model and real workers would play differently)."""
    return first_action(spec, attempt).at < barrier(spec)


class ScenarioTimebase:
    def __init__(self, spec: ScenarioSpec, attempt: int, ready_wall: float) -> None:
        self.barrier = barrier(spec)
        self.first = first_action(spec, attempt).at
        self.ready_wall = ready_wall
        if lands_in_first_rendezvous(spec, attempt):
            # `ready_wall` is when the store came up: no training to compress, and no time to wait for the wall's
            # fraction of a second (so a later event's whole-second stamp may truncate elsewhere than simulated)
            self.anchor = ready_wall
            return
        earliest = ready_wall + QUIET_TRAINING
        anchor = math.floor(earliest) + (self.first - math.floor(self.first))
        self.anchor = anchor if anchor >= earliest else anchor + 1.0

    def wall(self, t: float) -> float:
        if t >= self.first:
            return self.anchor + (t - self.first)
        if t <= self.barrier:
            return self.ready_wall  # before the barrier: already past when the attempt's clock starts
        squeeze = (self.anchor - self.ready_wall) / (self.first - self.barrier)  # the quiet stretch before it
        return self.ready_wall + (t - self.barrier) * squeeze

    def scenario(self, wall: float) -> float:
        if wall >= self.anchor:
            return self.first + (wall - self.anchor)
        if wall <= self.ready_wall:  # a stamp from before the barrier (a pod's skewed clock): at the wall's pace
            return min(self.first, self.barrier) + (wall - self.ready_wall)
        stretch = (self.first - self.barrier) / (self.anchor - self.ready_wall)
        return self.barrier + (wall - self.ready_wall) * stretch
