"""The simulator's invariants over thousands of scenarios nobody chose (`aggregation.strategies.scenarios`).

Each property names the rule it holds the model to; a failure prints the generated scenario as a textproto
(`note`), so it can be saved and replayed with `aggsim simulate`.
"""

from __future__ import annotations

import math
import random

import pytest
from google.protobuf import text_format
from hypothesis import HealthCheck, assume, example, given, note, settings
from hypothesis import strategies as st

from aggregation.operator import PodRecreation, TtlState, UndecidedVerdict
from aggregation.pods import SignalUnderTorchHandler
from aggregation.propeller_actor import CreatedInTheSameSecond, DeletedWithinItsSecond
from aggregation.proto.aggsim.v1 import scenario_pb2
from aggregation.record import execution_to_proto
from aggregation.scenario import ModelRefusal
from aggregation.simulate import each_map_order, simulate
from aggregation.strategies import scenarios, spec_of

pytestmark = pytest.mark.timeout(600)

MANY = settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])


def simulated(message):
    """The execution. A point the model refuses is left out, once its refusal is checked: the operator would re-create
    a deleted pod (`PodRecreation`, `refused_for_a_re_created_pod`), or Go's map order decides a non-elastic job whose
    attempt leaves it unset (`UndecidedVerdict`), or the job turned terminal in its first second, where its Created
    condition may share the whole second (`CreatedInTheSameSecond`), or propeller looks while the TTL may or may not
    have deleted the job (`DeletedWithinItsSecond`)."""
    note(text_format.MessageToString(message))
    try:
        return simulate(spec_of(message))
    except PodRecreation as refusal:
        refused_for_a_re_created_pod(message, refusal)
    except CreatedInTheSameSecond as refusal:
        assert 0 <= refusal.at < 1 and refusal.attempt < max(1, len(message.attempts)), refusal
    except DeletedWithinItsSecond as refusal:
        # the TTL's expiry falls within a second (by where the job's creation falls in its own), and the round comes
        # after its start, while the deletion has happened for some of its moments and not for others
        ttl = refusal.ttl
        assert ttl.ttl == message.job.ttl_seconds_after_finished, refusal
        assert ttl.last_expiry - ttl.first_expiry == pytest.approx(1) and ttl.first_expiry < refusal.at, refusal
        assert ttl.state_at(refusal.at) is TtlState.UNSETTLED, refusal
    except SignalUnderTorchHandler as refusal:
        refused_under_torch_s_handler(message, refusal)
    except UndecidedVerdict:
        # Go's coin: each order the scenario could pin plays on (the order itself is tested on its own); a pinned
        # order may itself meet a moment the model refuses (its job terminal within its first second)
        orders = each_map_order(spec_of(message))
        assert len(orders) >= 2 and all(pins for pins, _ in orders), orders
        refusals = [played for _, played in orders if isinstance(played, ModelRefusal)]
        refused = (CreatedInTheSameSecond, DeletedWithinItsSecond, SignalUnderTorchHandler)
        assert all(isinstance(refusal, refused) for refusal in refusals)
    assume(False)


def refused_under_torch_s_handler(message, refusal: SignalUnderTorchHandler) -> None:
    """Upstream and seed-pr leave torch's SIGTERM handler installed after the agent returns: the refusal names a pod
    of such a plugin, hit by a SIGTERM inside the stretch from its agent's result to `TORCH_HANDLER_AFTER_ENTRYPOINT_
    SECONDS` after its upload (or its result, with nothing to write)."""
    from aggregation import defaults

    assert message.plugin != scenario_pb2.RECOVERABLE, refusal
    assert refusal.since <= refusal.arrived < refusal.until, refusal
    longest_upload = max([message.timings.upload_seconds] + [p.timings.upload_seconds for p in message.pod_timings])
    upload = max(longest_upload, defaults.UPLOAD_SECONDS)
    assert refusal.until - refusal.since <= upload + defaults.TORCH_HANDLER_AFTER_ENTRYPOINT_SECONDS + 1e-9, refusal


def refused_for_a_re_created_pod(message, refusal: PodRecreation) -> None:
    """training-operator v1.8.0 `ReconcilePods` re-creates a removed pod, and the kubelet removes a deleted pod once
    it has exited: the refusal must name a pod a deletion marked in that attempt, a reconcile that read it heard exited
    before its instant (or at it, counted, with the job running on), and the exit the pod really made. The same
    scenario with that pod's deletions turned into plain SIGTERMs (no mark: the operator hears of the pod only when
    it exits, so nothing before that exit changes) shows it: the same exit code, heard `pod_status_seconds` after the
    exit."""
    assert refusal.heard_at < refusal.at or (refusal.counted and refusal.heard_at == refusal.at), refusal
    marks = [
        event.at_seconds
        for event in message.attempts[refusal.attempt].events
        if event.pod == refusal.pod and event.HasField("preemption") and event.preemption.pod_deleted
    ]
    assert any(math.isclose(at, refusal.marked_at, abs_tol=1e-9) for at in marks), refusal
    unmarked = type(message)()
    unmarked.CopyFrom(message)
    for event in unmarked.attempts[refusal.attempt].events:
        if event.pod == refusal.pod and event.HasField("preemption"):
            event.preemption.pod_deleted = False
    try:
        execution = simulate(spec_of(unmarked))
    except (PodRecreation, UndecidedVerdict, CreatedInTheSameSecond, DeletedWithinItsSecond, SignalUnderTorchHandler):
        return  # another pod's deletion, Go's map order, or a second no scenario places: nothing to compare with
    code, exited_at = execution.attempts[refusal.attempt].exits[refusal.pod]
    heard = exited_at + message.job.pod_status_seconds
    assert (code, heard) == (refusal.exit_code, pytest.approx(refusal.heard_at, abs=1e-6)), refusal


@MANY
@given(scenarios())
def test_every_generated_scenario_simulates_and_the_same_scenario_gives_the_same_execution(message):
    """No crash on any valid scenario; the simulator is a function of the scenario (seed included)."""
    first = execution_to_proto(simulated(message))
    assert first.final_phase != 0
    assert execution_to_proto(simulate(spec_of(message))) == first


@MANY
@given(scenarios())
def test_attempts_stay_within_propeller_s_budgets(message):
    """flytepropeller `nodes/executor.go` `isEligibleForRetry` and `handleRetryableFailure`: a node attempts at most
    retries + 1 times for user failures, plus max-node-retries-on-system-failures for system ones; every attempt
    but the last decided RETRY, and the last never did."""
    spec = spec_of(message)
    execution = simulated(message)
    budget = spec.retries + 1 + spec.propeller.max_node_retries_system_failures
    assert 1 <= len(execution.attempts) <= budget
    decisions = [attempt.decision.decision.value for attempt in execution.attempts]
    assert all(decision == "RETRY" for decision in decisions[:-1])
    assert decisions[-1] != "RETRY"


@MANY
@given(scenarios())
def test_an_attempt_resumes_only_from_a_checkpoint_an_earlier_attempt_wrote(message):
    """flytekit's checkpoint API (`--prev-checkpoint`): propeller hands the next attempt the previous attempt's
    checkpoint prefix; rank 0 reads something only if a checkpoint was written there."""
    attempts = simulated(message).attempts
    for attempt in attempts:
        if attempt.resumed_from is not None:
            assert attempt.resumed_from < attempt.attempt
            assert attempts[attempt.resumed_from].wrote_checkpoint


def verdict(execution, names=None):
    names = names or {}
    per_attempt = []
    for attempt in execution.attempts:
        error = attempt.outcome.error
        worker = "" if error is None else names.get(error.worker, error.worker)
        per_attempt.append(
            (attempt.decision.decision.value, None if error is None else (error.code, error.kind, worker))
        )
    return execution.final_phase.value, execution.final_code, per_attempt


def tied_stamps(execution) -> bool:
    """Two error files with the same timestamp: propeller's earliest reader then keeps the first in the store's
    listing order, i.e. the (random) file names decide, in propeller as here."""
    for attempt in execution.attempts:
        stamps = [round(u.error.timestamp, 9) for u in attempt.seen if u.error is not None]
        if len(stamps) != len(set(stamps)):
            return True
    return False


@MANY
@given(scenarios())
def test_renaming_pods_changes_no_verdict(message):
    """Nothing in propeller, the operator or torch depends on a pod's name, except the name itself and the order of
    the store's listing when stamps tie (then the random error-<uuid>.pb names decide, as in propeller) and the
    bytes of a document cut short (the worker's name is in them, so where a cut falls depends on it)."""
    assume(not any(e.HasField("truncated_upload") for attempt in message.attempts for e in attempt.events))
    original = simulated(message)
    assume(not tied_stamps(original))
    renamed = type(message)()
    renamed.CopyFrom(message)
    names = {old: f"node-{chr(ord('a') + i)}" for i, old in enumerate(message.job.pods)}
    text = text_format.MessageToString(renamed)
    for old in sorted(names, key=len, reverse=True):
        text = text.replace(f'"{old}"', f'"{names[old]}"')
    renamed = text_format.Parse(text, type(message)())
    again = simulate(spec_of(renamed))
    assume(not tied_stamps(again))
    back = {new: old for old, new in names.items()}
    assert verdict(again, back) == verdict(original)


# found by CI: Go's map order decides the point, and each order ends the job within its first second
UNDECIDED_THEN_REFUSED = text_format.Parse(
    """
    plugin: RECOVERABLE
    job { pods: "worker-0" pods: "worker-1" elastic: false start_method: FORK reconcile_seconds: 0.434 }
    task { training_seconds: 20 }
    attempts {
      events { at_seconds: 0 pod: "worker-0" preemption {} }
      events { at_seconds: 0.316 pod: "worker-1" preemption { pod_deleted: true } }
    }
    """,
    scenario_pb2.Scenario(),
)


@MANY
@given(message=scenarios(), random_seed=st.integers(0, 2**32))
@example(message=UNDECIDED_THEN_REFUSED, random_seed=0)
def test_listing_events_in_another_order_changes_nothing(message, random_seed):
    """Events are timed: their order in the file is no part of the scenario, except between events at the same
    instant (kept, as the file states them)."""
    original = execution_to_proto(simulated(message))
    shuffled = type(message)()
    shuffled.CopyFrom(message)
    rng = random.Random(random_seed)
    for attempt in shuffled.attempts:
        events = list(attempt.events)
        order = sorted(range(len(events)), key=lambda i: (rng.random(), i))
        # keep the relative order of events at the same instant
        same_time = {}
        for i in order:
            same_time.setdefault(events[i].at_seconds, []).append(i)
        for indices in same_time.values():
            indices.sort()
        reordered, taken = [], {t: iter(v) for t, v in same_time.items()}
        for i in order:
            reordered.append(events[next(taken[events[i].at_seconds])])
        del attempt.events[:]
        attempt.events.extend(reordered)
    assert execution_to_proto(simulate(spec_of(shuffled))) == original
