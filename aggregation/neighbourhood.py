"""Races: the verdicts a scenario can have when its timings move a little.

Real pods never run on the scenario's exact timings: a signal lands a few milliseconds late, an agent notices
a failure on its next monitor tick. A scenario whose verdict changes when its times move by up to
`JITTER_SECONDS` (or whose agents look at their workers at another phase of the monitor interval) is a race,
and a real run of it may end in any verdict of that neighbourhood; a scenario whose
neighbourhood has one verdict must be matched field for field.

The pods' own phases move further: each by up to `JITTER_SECONDS` or `PHASE_SPREAD` of its value, whichever is
more. Processes tearing down spread that much on one machine (README "Timings": a failed spawn worker is gone in
0.6-2.0 s, a pod exits 0.5-1.06 s after its upload), and a finished spawn worker group is joined in about 1 s
with one worker per pod but 2.2-2.6 s with four workers on two cores: a fixed +-0.3 s around one default would
call such a scenario exact when a real run can end either way. A machine may also be busier or quicker than the
one the defaults were measured on: `load` and `fastest` scale every phase of a copy by one drawn factor.

The neighbourhood also draws new error-file names (the scenario's `seed`): a real pod names its file
`error-<uuid4>.pb`, so when two stamps tie, propeller's earliest reader keeps whichever the store lists first,
and that is chance in a real run (measured: 2 pods x 1 fork worker, a worker error, aggregation on; both pods
stamped the same second, and the survivor's file won in 5 runs of 6).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

from aggregation.operator import PodRecreation
from aggregation.pods import SignalUnderTorchHandler
from aggregation.propeller_actor import CreatedInTheSameSecond, DeletedWithinItsSecond
from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from aggregation.record import execution_to_proto, verdict_fields
from aggregation.scenario import AFTER_THE_END_KINDS, ModelRefusal, ScenarioSpec
from aggregation.simulate import each_map_order

JITTER_SECONDS = 0.3
PHASE_SPREAD = 0.5  # a pod phase moves by up to this fraction of itself, when that is more than JITTER_SECONDS
SAMPLES = 64
#: the quickest a machine's phases run against the defaults' (a `fastest` for `neighbourhood`): on 2026-12-03 a 1-pod
#: job of two spawn workers uploaded its outputs 0.85-1.11 s after they returned (3 runs; 2 pods: 1.5-1.9 s), where
#: the model says 2.45-2.95 s (`FINISHED_WORKER_EXIT_SECONDS`, measured at 2.2-2.6 s on an earlier, slower machine)
QUICKER_MACHINE = 0.4


def verdict_key(record: pb.Execution) -> tuple:
    """The verdict fields (`record.verdict_fields`) as one hashable value."""
    return tuple(sorted(verdict_fields(record).items()))


def _moved(value: float, rng: random.Random, spread: float = JITTER_SECONDS) -> float:
    return max(0.0, value + rng.uniform(-spread, spread))


def jittered(spec: ScenarioSpec, rng: random.Random, load: float = 1.0, fastest: float = 1.0) -> ScenarioSpec:
    """`spec` with every event's time moved by up to the jitter and every pod's phase durations by up to their
    spread, independently (events keep the order the file gives those at the same instant; none moves past the end
    of training), and new error-file names. `load` > 1: the machine is busy; `fastest` < 1: it may be quicker than
    the one the phases were measured on. Every phase of this copy is then also scaled by one factor drawn between
    `fastest` and `load` (processes slow down and speed up together)."""
    pace = rng.uniform(fastest, load) if load > 1.0 or fastest < 1.0 else 1.0

    def phase(value: float) -> float:
        return _moved(value * pace, rng, max(JITTER_SECONDS, PHASE_SPREAD * value))

    timings = {}
    interval = spec.launch.monitor_interval
    for pod, timing in spec.timings.items():
        timings[pod] = replace(
            timing,
            shutdown=phase(timing.shutdown),
            upload=phase(timing.upload),
            detection=phase(timing.detection),
            exit=phase(timing.exit),
            failed_worker_exit=phase(timing.failed_worker_exit),
            finished_worker_exit=phase(timing.finished_worker_exit),
            peer_failure_after=phase(timing.peer_failure_after),
            # the real runner does not place the agents' monitor polls: their phase is anywhere in an interval
            first_poll=rng.uniform(0.0, interval) or interval,
        )
    attempts = []
    for events in spec.attempts:
        moved = []
        for event in events:
            at = _moved(event.at, rng)
            if event.kind not in AFTER_THE_END_KINDS:
                at = min(at, spec.training_seconds)
            moved.append(replace(event, at=at))
        attempts.append(tuple(sorted(moved, key=lambda e: e.at)))
    return replace(spec, timings=timings, attempts=tuple(attempts), seed=rng.getrandbits(64))


def refusal_key(refusal: "ModelRefusal | type[ModelRefusal]") -> "tuple | None":
    """The verdict key of a refusal a real run can meet (its class says what: `ModelRefusal.real_runs_meet`), named
    with its class so a report points at the rule; None for one that refuses the scenario itself."""
    kind = refusal if isinstance(refusal, type) else type(refusal)
    if kind.real_runs_meet is None:
        return None
    return (("refused", f"{kind.real_runs_meet} ({kind.__module__.rsplit('.', 1)[-1]}.{kind.__name__})"),)


#: a copy the model refuses because the operator would re-create a deleted pod that has exited: a real run of such a
#: copy meets the same refusal, in the operator it drives
RE_CREATED_POD = refusal_key(PodRecreation)
#: a copy whose job turns terminal in its first second, where propeller may read its Created condition instead:
#: moved a little, a scenario can end up there
TERMINAL_IN_ITS_FIRST_SECOND = refusal_key(CreatedInTheSameSecond)
#: a copy whose propeller round looks while the TTL may or may not have deleted the job
LOOKS_WHILE_THE_TTL_MAY_HAVE_DELETED = refusal_key(DeletedWithinItsSecond)
#: a copy in which a SIGTERM meets torch's handler after the agent returned, which upstream and seed-pr leave
#: installed: a real run there may end any of three ways
SIGNAL_UNDER_TORCH_HANDLER = refusal_key(SignalUnderTorchHandler)


def neighbourhood(
    spec: ScenarioSpec, samples: int = SAMPLES, seed: int = 0, load: float = 1.0, fastest: float = 1.0
) -> Counter:
    """verdict key -> how many of the scenario and its `samples` jittered copies (`jittered`, with `load` and
    `fastest`) end with it. A copy whose job Go's map order decides (a moment the scenario leaves it to:
    `operator.UndecidedVerdict`) counts once per order: a real operator may take either. A copy the model refuses
    because the operator would re-create a deleted pod (under one order, or any) counts as `RE_CREATED_POD` there, and
    one whose job turns terminal in its first second as `TERMINAL_IN_ITS_FIRST_SECOND`, one whose SIGTERM meets torch's
    handler after the agent returned as `SIGNAL_UNDER_TORCH_HANDLER`."""
    rng = random.Random(seed)
    outcomes = Counter(_verdicts(spec))
    for _ in range(samples):
        outcomes.update(_verdicts(jittered(spec, rng, load, fastest)))
    return outcomes


def _verdicts(spec: ScenarioSpec) -> list:
    verdicts = []
    for _, execution in each_map_order(spec):
        if not isinstance(execution, ModelRefusal):
            verdicts.append(verdict_key(execution_to_proto(execution)))
        elif refusal_key(execution) is not None:
            verdicts.append(refusal_key(execution))
        else:
            # a map-order moment in an unlisted attempt, or past the attempt limit: no real run's verdict is to be
            # predicted for a scenario that is refused itself (`run_local` simulates it first); refused, as `simulate`
            raise execution
    return verdicts
