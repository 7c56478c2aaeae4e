"""Hypothesis strategies for `aggsim.v1.Scenario`: valid scenarios nobody chose, for property tests.

    from hypothesis import given
    from aggregation.strategies import scenarios, spec_of
    from aggregation.simulate import simulate

    @given(scenarios(plugins=("recoverable",), aggregation=False))
    def test_my_claim(message):
        execution = simulate(spec_of(message))
        ...

Every scenario drawn loads without a `ScenarioError`: job shapes (1-8 pods x 1-4 workers, elastic or with a
master, spawn or fork, restarts, cleanup policy, grace period, the operator's latencies, the RunPolicy's deadline,
backoff limit and TTL), the plugin, the aggregation flag, propeller's settings, pod timings (per-pod overrides, clock
offsets, the reaction to a peer's death) and up to `max_attempts` attempts of timed events of every kind.
`playable=True` draws only what `aggsim run-local` plays for real (no storage faults, no signal aimed inside
os.fork(), no seed-pr variant, a shape this machine runs in reasonable time, events after the first rendezvous),
and leaves out the RunPolicy's limits and TTL, whose real runs are slow (each has a real test of its own). Needs
hypothesis (the `test` extra).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

from google.protobuf import text_format
from hypothesis import strategies as st

from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from aggregation.scenario import ScenarioSource, ScenarioSpec, monitor_interval_of

PLUGINS = {"upstream": pb.UPSTREAM, "seed-pr": pb.SEED_PR, "recoverable": pb.RECOVERABLE}
#: what a worker raises; none reads like a peer's loss (the real plugin would call that a consequence)
MESSAGES = ("ValueError: bad batch", "CUDA out of memory", "KeyError: 'labels'", "")
PLAYABLE_KINDS = ("preemption", "worker_error", "checkpoint", "completion")
ALL_KINDS = (*PLAYABLE_KINDS, "storage_outage", "truncated_upload")


def _seconds(low: float, high: float) -> st.SearchStrategy[float]:
    """Times on a millisecond grid: readable in a failing example, and what a textproto round-trips exactly."""
    return st.integers(round(low * 1000), round(high * 1000)).map(lambda ms: ms / 1000)


@st.composite
def _timings(draw, playable: bool, monitor_interval: float) -> pb.PodTimings:
    timings = pb.PodTimings()
    if draw(st.booleans()):
        timings.agent_shutdown_seconds = draw(_seconds(0.01, 0.4 if playable else 8.0))
    if not playable:  # real pods take their own time for these; a scenario cannot make them slower
        if draw(st.booleans()):
            timings.upload_seconds = draw(_seconds(0.001, 3.0))
        if draw(st.booleans()):
            timings.failure_detection_seconds = draw(_seconds(0.0, 3.0))
        if draw(st.booleans()):
            timings.failed_worker_exit_seconds = draw(_seconds(0.0, 3.0))
        if draw(st.booleans()):
            timings.finished_worker_exit_seconds = draw(_seconds(0.0, 3.0))
        if draw(st.booleans()):
            timings.first_monitor_poll_seconds = draw(_seconds(0.001, monitor_interval))
        if draw(st.booleans()):
            timings.rendezvous_seconds = draw(_seconds(0.5, 5.0))
        if draw(st.booleans()):  # else the default reaction (the task's restarts are job.max_restarts)
            timings.on_peer_death.fail.after_seconds = draw(_seconds(0.01, 1.0))
            timings.on_peer_death.fail.recoverable = draw(st.booleans())
    return timings


@st.composite
def _event(draw, pods: Sequence[str], playable: bool, fork: bool, start: float, end: float) -> pb.Event:
    kinds = PLAYABLE_KINDS if playable else ALL_KINDS
    kind = draw(st.sampled_from(kinds))
    event = pb.Event(at_seconds=draw(_seconds(start, end)))
    if kind == "preemption":
        event.pod = draw(st.sampled_from(list(pods)))
        event.preemption.lands_during_fork = fork and not playable and draw(st.booleans())
        event.preemption.pod_deleted = draw(st.booleans())
    elif kind == "worker_error":
        event.pod = draw(st.sampled_from(list(pods)))
        event.worker_error.recoverable = draw(st.booleans())
        event.worker_error.message = draw(st.sampled_from(MESSAGES))
    elif kind == "checkpoint":
        event.checkpoint.SetInParent()
    elif kind == "completion":
        event.completion.SetInParent()
    elif kind == "storage_outage":
        event.storage_outage.duration_seconds = draw(_seconds(0.1, 5.0))
    else:
        event.pod = draw(st.sampled_from(list(pods)))
        event.truncated_upload.keep_bytes = draw(st.integers(0, 64))
    return event


@st.composite
def scenarios(
    draw,
    *,
    plugins: Sequence[str] = tuple(PLUGINS),
    aggregation: Optional[bool] = None,
    max_pods: int = 8,
    max_nproc: int = 4,
    max_attempts: int = 3,
    max_events: int = 4,
    playable: bool = False,
) -> pb.Scenario:
    """A valid `aggsim.v1.Scenario` message. `aggregation` None draws the flag; `playable` keeps to what real pods
    play (and caps the job at `max_pods` x `max_nproc`, whose defaults are then 3 x 2)."""
    if playable:
        plugins = [p for p in plugins if p != "seed-pr"]
        max_pods, max_nproc = min(max_pods, 3), min(max_nproc, 2)
    message = pb.Scenario(name="generated", seed=draw(st.integers(0, 2**32)))
    message.plugin = PLUGINS[draw(st.sampled_from(list(plugins)))]

    job = message.job
    pods = [f"train-worker-{i}" for i in range(draw(st.integers(1, max_pods)))]
    job.pods.extend(pods)
    job.nproc_per_node = draw(st.integers(1, max_nproc))
    fork = draw(st.booleans())
    job.start_method = pb.FORK if fork else pb.SPAWN
    job.elastic = draw(st.booleans())  # without an ElasticPolicy pods[0] is the master (`replica_env`)
    job.clean_pod_policy = draw(st.sampled_from([pb.CLEAN_POD_POLICY_NONE, pb.CLEAN_POD_POLICY_RUNNING,
                                                 pb.CLEAN_POD_POLICY_ALL]))  # fmt: skip
    # real pods do not yet play a restart that completes a new rendezvous round (localjob.runner.check_playable)
    job.max_restarts = draw(st.integers(0, 0 if playable else 2))
    if job.max_restarts:
        job.join_timeout_seconds = draw(_seconds(5.0, 60.0))
    # real runs notice finished and failed workers one monitor interval late at most: keep a playable sample quick
    if playable:
        job.monitor_interval_seconds = draw(st.sampled_from([0.5, 1.0]))
    elif draw(st.booleans()):
        job.monitor_interval_seconds = draw(_seconds(0.1, 10.0))
    interval = monitor_interval_of(job)
    if not playable and draw(st.booleans()):
        job.termination_grace_period_seconds = draw(_seconds(1.0, 30.0))
    # the cluster's latencies to the operator (the kubelet's status report; the work queue's wait before a
    # reconcile reads the pods; the reconcile that cleans up)
    if draw(st.booleans()):
        job.pod_status_seconds = draw(_seconds(0.0, 1.5))
    if draw(st.booleans()):
        job.reconcile_seconds = draw(_seconds(0.0, 0.5))
    if draw(st.booleans()):
        job.cleanup_seconds = draw(_seconds(0.0, 0.5))

    task = message.task
    task.retries = draw(st.integers(0, 3))
    task.outputs_declared = draw(st.booleans())
    task.interruptible = draw(st.booleans())
    # real attempts without a completion train that long on the wall clock: keep a playable sample quick
    task.training_seconds = draw(_seconds(20.0, 40.0 if playable else 120.0))
    # the container's PID 1: real pods play each (`localjob.container.entrypoint_command`)
    task.entrypoint = draw(st.sampled_from([pb.FAST_EXECUTE, pb.EXECUTE, pb.INIT_THEN_EXECUTE]))

    # the RunPolicy's limits, now and then: a deadline within the attempt's span, a backoff limit (which never acts
    # with RestartPolicy Never: a negative one, which fails the job as it is created, the model refuses)
    if not playable and draw(st.integers(0, 3)) == 0:
        job.active_deadline_seconds = draw(st.integers(1, math.ceil(task.training_seconds) + 15))
    if not playable and draw(st.integers(0, 3)) == 0:
        job.backoff_limit = draw(st.integers(1, 6))
    # ...and its TTL after the finish, either side of propeller's look (negative: gone at the next reconcile)
    if not playable and draw(st.integers(0, 3)) == 0:
        job.ttl_seconds_after_finished = draw(st.integers(-2, 12))

    propeller = message.propeller
    propeller.error_aggregation = draw(st.booleans()) if aggregation is None else aggregation
    propeller.observation_delay_seconds = draw(_seconds(0.0, 10.0))
    if draw(st.booleans()):
        propeller.max_node_retries_system_failures = draw(st.integers(0, 3))

    message.timings.CopyFrom(draw(_timings(playable, interval)))
    for pod in draw(st.lists(st.sampled_from(pods), unique=True, max_size=len(pods))):
        override = message.pod_timings.add(pod=pod)
        override.timings.CopyFrom(draw(_timings(playable, interval)))
        if draw(st.booleans()):
            override.timings.clock_offset_seconds = draw(_seconds(-0.25, 0.25))
        if not playable and draw(st.booleans()):  # a real run cannot set it: the kernel's clock does
            override.timings.file_time_lag_seconds = draw(_seconds(0.0, 0.004))

    # real pods take events once training runs (the timebase squeezes the quiet stretch before the first one)
    start = 8.0 if playable else 0.0
    for index in range(draw(st.integers(min(1, max_attempts), max_attempts))):
        event = _event(pods, playable, fork, start, task.training_seconds)
        events = draw(st.lists(event, min_size=1 if index == 0 else 0, max_size=max_events))  # the first is eventful
        attempt = message.attempts.add()
        attempt.events.extend(events)
        # now and then Go's map order, which a non-elastic job's reconcile may need (`operator.UndecidedVerdict`);
        # always for real pods: the runner's operator follows the scenario's order, and has none to pick by chance
        if not job.elastic and (playable or draw(st.integers(0, 3)) == 0):
            attempt.replica_map_order = draw(st.sampled_from([pb.MASTER_FIRST, pb.WORKER_FIRST]))
    return message


#: the timing fields a box may vary, and the widest range each takes (a duration is never negative)
_TIMING_RANGES = {
    "agent_shutdown_seconds": (0.0, 30.0),
    "upload_seconds": (0.0, 10.0),
    "failure_detection_seconds": (0.0, 10.0),
    "failed_worker_exit_seconds": (0.0, 10.0),
    "finished_worker_exit_seconds": (0.0, 10.0),
    "rendezvous_seconds": (0.0, 10.0),
    "clock_offset_seconds": (-1.0, 1.0),
    # across the plugin's 20 ms window for an error file's mtime (`plugin/task.py` `FILE_TIME_GRAIN_SECONDS`)
    "file_time_lag_seconds": (-0.05, 0.05),
}


def _box_fields(message: pb.Scenario) -> list[tuple[str, float, float, float]]:
    """(field, its value, lowest, highest) for every number in `message` a box may vary."""
    fields = [("propeller.observation_delay_seconds", message.propeller.observation_delay_seconds, 0.0, 30.0)]
    fields += [
        (f"job.{name}", getattr(message.job, name), 0.0, 2.0)
        for name in ("pod_status_seconds", "reconcile_seconds", "cleanup_seconds")
    ]
    timed = [("timings", message.timings)]
    timed += [(f"pod_timings[{k}].timings", o.timings) for k, o in enumerate(message.pod_timings)]
    for prefix, timings in timed:
        for name, (low, high) in _TIMING_RANGES.items():
            if timings.HasField(name):
                fields.append((f"{prefix}.{name}", getattr(timings, name), low, high))
    for i, attempt in enumerate(message.attempts):
        for j, event in enumerate(attempt.events):
            fields.append(
                (f"attempts[{i}].events[{j}].at_seconds", event.at_seconds, 0.0, message.task.training_seconds)
            )
    return fields


@st.composite
def boxes(draw, message: pb.Scenario, max_fields: int = 3) -> tuple[str, ...]:
    """`--vary` texts for `aggsim prove` / `prove.parse_range` on `message`: 1 to `max_fields` of its numbers, each
    over a range around its value (on the millisecond grid), and sometimes which pod an event is aimed at."""
    numbers = _box_fields(message)
    chosen = draw(st.lists(st.sampled_from(numbers), min_size=1, max_size=max_fields, unique_by=lambda f: f[0]))
    varies = []
    for name, value, lowest, highest in chosen:
        below, above = draw(_seconds(0.0, 3.0)), draw(_seconds(0.0, 3.0))
        low = max(lowest, round(value - below, 3))
        high = max(low, min(highest, round(value + above, 3)))
        varies.append(f"{name}={low}..{high}")
    aimed = [
        f"attempts[{i}].events[{j}].pod"
        for i, attempt in enumerate(message.attempts)
        for j, event in enumerate(attempt.events)
        if event.pod
    ]
    if aimed and len(message.job.pods) > 1 and draw(st.booleans()):
        varies.append(f"{draw(st.sampled_from(aimed))}={','.join(message.job.pods)}")
    return tuple(varies)


def spec_of(message: pb.Scenario, plugin: Optional[str] = None) -> ScenarioSpec:
    """The checked `ScenarioSpec` of a scenario message (as `aggsim simulate` would load its text)."""
    text = text_format.MessageToString(message)
    return ScenarioSource(message, text, f"<{message.name or 'scenario'}>").spec(plugin)
