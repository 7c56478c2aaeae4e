"""`aggsim prove`: symbolic numbers, the path enumeration, and that its answers are exact.

Exactness is checked two ways, as the prover's own claim requires: every path's witness, replayed by the plain
simulator on plain floats, does what the path recorded; and points drawn at random from the box (hypothesis)
each fall in exactly one explored path's region, whose behaviour the plain simulator reproduces there.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from fractions import Fraction
from pathlib import Path as Path_

import pytest
from conftest import BUSY_MAP_ORDER_TIE, LAGGING_MTIME, MAP_ORDER_TIE, interrupt_when
from google.protobuf import text_format
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from aggregation import nanoseconds
from aggregation import prove as P
from aggregation.operator import PodRecreation
from aggregation.scenario import ScenarioError, parse_scenario_source, read_scenario
from aggregation.strategies import boxes, scenarios
from aggregation.symbolic import Path, Sym, atoms_in, holds, recording

AGGSIM = str(Path_(sys.executable).with_name("aggsim"))
PREEMPTION = "preemption_during_training"
SIGNAL_AT = "attempts[0].events[1].at_seconds"
#: the demo's sweep ranges, the signal's arrival widened to a whole second
SEED_BOX = (
    f"{SIGNAL_AT}=30..31",
    "timings.agent_shutdown_seconds=0.03..5",
    "timings.upload_seconds=0.05..3",
    "propeller.observation_delay_seconds=0..10",
)


def _proof(scenario: str, claim: str, varies, plugin: str, aggregation: bool, **budget):
    source = read_scenario(scenario)
    ranges = [P.parse_range(v, source.message) for v in varies]
    return P.prove(source, P.parse_claim(claim, source.message), ranges, plugin, aggregation, **budget)


def _can(solver, path, condition) -> bool:
    """Whether some point of `path`'s region also meets `condition` (a z3 formula over `solver.vars`)."""
    solver.solver.push()
    solver.solver.add(solver.conjunction(path.constraints), condition)
    found = solver.solver.check() == solver.z3.sat
    solver.solver.pop()
    return found


# --- the numbers ---------------------------------------------------------------------------------------
def test_a_symbolic_comparison_is_answered_concretely_and_recorded() -> None:
    path = Path({"x": (Fraction(0), Fraction(10))})
    with recording(path):
        x = Sym.variable("x", Fraction(3))
        assert (x + 0.5 < 4) is True
        assert (x * 2 >= 5) is True
        assert (x * 2 < 7) is True  # the same condition as the first: recorded once
        assert (x - x == 0) is True  # no varied field left: nothing to record
    assert [holds(c, {"x": Fraction(3)}) for c in path.constraints] == [True, True]
    assert not all(holds(c, {"x": Fraction(37, 10)}) for c in path.constraints)  # x + 0.5 >= 4 there
    assert path.untraceable == []


def test_a_witness_just_inside_a_strict_bound_reads_as_the_short_decimal_on_the_inside() -> None:
    """z3 answers `0.05 < x < 0.2` with a point on the edge; rounding it gives 0.2, outside. The witness people read
    (and replay in floats, well away from the bound) is 0.1, exactly the decimal, not 0.199999999999999."""
    edge = Fraction(2, 10) - Fraction(1, 10**15)
    path = Path({"x": (Fraction(0), Fraction(1))})
    with recording(path):
        x = Sym.variable("x", edge)
        assert (x > 0.05) is True
        assert (x < 0.2) is True
    witness = P._readable_point({"x": edge}, [P.Interval("x", Fraction(0), Fraction(1))], path.constraints, None)
    assert witness == {"x": Fraction(1, 10)}


def test_a_comparison_the_box_decides_is_not_a_branch() -> None:
    path = Path({"x": (Fraction(1), Fraction(2))})
    with recording(path):
        x = Sym.variable("x", Fraction(3, 2))
        assert x > 0 and x < 5
    assert path.constraints == []


@given(st.fractions(min_value=-50, max_value=50, max_denominator=1000))
def test_floor_ceil_and_round_are_pythons_exactly(value: Fraction) -> None:
    """torch's `int(time.time())` stamps and flytekit's nanosecond rounding, as atoms that evaluate like Python."""
    path = Path({"x": (Fraction(-50), Fraction(50))})
    with recording(path):
        x = Sym.variable("x", value)
        results = (math.floor(x), math.ceil(x), round(x), round(x * 2), x // 3, x % 3)
    expected = (math.floor(value), math.ceil(value), round(value), round(value * 2), value // 3, value % 3)
    assert tuple(r.value for r in results) == expected
    assert path.untraceable == []


def test_what_the_recording_cannot_follow_is_noted() -> None:
    path = Path({"x": (Fraction(0), Fraction(10)), "y": (Fraction(0), Fraction(10))})
    with recording(path):
        x, y = Sym.variable("x", 1), Sym.variable("y", 2)
        float(x)
        x * y
    assert len(path.untraceable) == 2 and "float()" in path.untraceable[0] and "product" in path.untraceable[1]


# --- answers ---------------------------------------------------------------------------------------------
def test_upstream_silent_success_is_a_counterexample_with_its_condition() -> None:
    """flytekitplugins-kfpytorch 1.16 `task.py`: SignalException -> IgnoreOutputs, so a preempted job succeeds."""
    proof = _proof(PREEMPTION, "retries", SEED_BOX, "upstream", True)
    assert proof.verdict == P.COUNTEREXAMPLE
    # silent success, or (propeller looking late) the survivor's consequential error read as the node's failure
    outcomes = {p.behaviour.outcome for p in proof.counterexamples}
    assert outcomes == {"SUCCEEDED_SILENTLY", "FAILED_PERMANENTLY"}
    for path in proof.counterexamples:
        if P.replayable(path):  # (a region too thin for a float, e.g. two moments exactly equal, is skipped)
            assert proof.replay(path).final_phase.value == path.behaviour.final_phase
    assert proof.conditions and all(isinstance(line, str) for line in proof.conditions[0])


def test_seed_pr_loses_to_a_truncated_stamp() -> None:
    """torch `errors/error_handler.py` stamps the survivor's failure with whole seconds; the seed PR stamps its
    signal after shutdown: the survivor's non-recoverable error is earlier, and the node fails for good."""
    proof = _proof(PREEMPTION, "retries", SEED_BOX, "seed-pr", True)
    assert proof.verdict == P.COUNTEREXAMPLE
    assert {p.behaviour.final_phase for p in proof.counterexamples} == {"FAILED_PERMANENTLY"}


def test_seed_pr_s_retry_over_a_sibling_s_error_needs_a_cleanup_before_the_survivor_s_agent_looks() -> None:
    """With `error.pb` (aggregation off) the seed PR's recoverable report replaces the sibling's genuine error, and the
    node retries, only when the operator's cleanup SIGTERM (training-operator `ReconcileJobs`: the job's condition,
    then its cleanup, each after the kubelet's pod status report) reaches the survivor before its agent has found
    its dead workers (torch `_invoke_run`: one look per monitor interval) and raised (the task has no restarts
    left: `ChildFailedError`). A later cleanup finds it reporting its collateral error, or gone: the node fails for
    good."""
    from aggregation.simulate import simulate
    from aggregation.timeline import What

    varies = ("job.pod_status_seconds=0..5", "job.cleanup_seconds=0..1")
    proof = _proof("sibling_user_error_cleanup", "genuine-error-wins", varies, "seed-pr", False)
    assert proof.verdict == P.COUNTEREXAMPLE
    # when the survivor's agent raises, from the plain simulator's timeline with a cleanup that never comes
    source = read_scenario("sibling_user_error_cleanup")
    source.message.job.pod_status_seconds = 60
    timeline = simulate(source.spec("seed-pr")).attempts[0].timeline
    host_exit = next(e.at for e in timeline if e.what is What.EXIT)
    fails = next(e.at for e in timeline if e.what is What.AGENT_RAISES and e.actor == "train-worker-1")
    window = Fraction(fails - host_exit).limit_denominator(10**9)  # 3.25 s here: its look at 26 s, then 1.5 s
    assert window > 1

    solver = P.Solver(proof.intervals, 60_000)
    latency = solver.vars["job.pod_status_seconds"] + solver.vars["job.cleanup_seconds"]

    retried = [p for p in proof.paths if p.behaviour.final_phase == "RETRIED_THEN_SUCCEEDED"]
    assert retried and any(p.witness["job.pod_status_seconds"] > 1 for p in retried)  # a second's latency, too
    for path in retried:
        assert not _can(solver, path, latency > window), path.witness  # at the very instant, the SIGTERM comes first
    late = [p for p in proof.paths if not _can(solver, p, latency <= window)]
    # a SIGTERM while the survivor writes its report meets torch's handler, which the seed PR leaves installed:
    # refused (`pods.SignalUnderTorchHandler`); on every other late path the survivor's collateral report, written
    # last, is the error.pb propeller reads, and the node fails for good
    played = [p for p in late if p.behaviour.final_phase != "REFUSED"]
    assert played and {p.behaviour.final_phase for p in played} == {"FAILED_PERMANENTLY"}
    assert {p.holds for p in played} == {False}
    refused = [p for p in late if p.behaviour.final_phase == "REFUSED"]
    assert refused and all("torch's handler outlives its agent" in str(p.behaviour) for p in refused)


@pytest.mark.parametrize("aggregation", [True, False])
def test_the_recoverable_plugin_retries_for_every_timing_in_the_box(aggregation: bool) -> None:
    proof = _proof(PREEMPTION, "retries", SEED_BOX, "recoverable", aggregation)
    assert proof.verdict == P.PROVED, proof.reason
    assert len(proof.paths) > 1 and proof.reason == ""


#: a box where the claim breaks at every point: an undecodable error file fails every round, and flytepropeller
#: `pkg/controller/handler.go` `TryMutateWorkflow` aborts the workflow past `max-workflow-retries`, whatever the
#: upload's duration
EVERYWHERE = ("rounds_keep_failing", "retries", ("timings.upload_seconds=0.05..3",), "recoverable", True)


def test_a_claim_broken_on_every_path_fails_everywhere_and_says_so() -> None:
    """The explored paths tile the box, so a claim broken on all of them is broken at every point: the answer says
    so instead of listing pieces. Points drawn at random and run by the plain simulator all break it."""
    proof = _proof(*EVERYWHERE)
    assert proof.verdict == P.COUNTEREXAMPLE and proof.fails_everywhere and len(proof.paths) > 1
    (interval,) = proof.intervals

    @settings(max_examples=40)
    @given(st.floats(float(interval.low), float(interval.high)))
    def check(value) -> None:
        assert not proof.claim.holds(P.replay(proof.problem, {interval.field: Fraction(value)}))

    check()
    # a budget that stops early knows nothing of the paths left: not "everywhere"
    assert not _proof(*EVERYWHERE, max_paths=len(proof.paths) - 1).fails_everywhere
    # broken on some paths only: the pieces, not "everywhere"
    assert not _proof(PREEMPTION, "retries", SEED_BOX, "seed-pr", True).fails_everywhere
    shown = _aggsim("prove", EVERYWHERE[0], "--claim", "retries", "--vary", EVERYWHERE[2][0])
    assert shown.returncode == 1 and f"fails on all {len(proof.paths)} paths: everywhere in the box" in shown.stdout
    assert "It fails where" not in shown.stdout
    as_json = _aggsim("prove", EVERYWHERE[0], "--claim", "retries", "--vary", EVERYWHERE[2][0], "--json")
    assert json.loads(as_json.stdout)["fails_everywhere"] is True


def test_an_active_deadline_is_proved_against_where_the_job_really_ends(tmp_path) -> None:
    """training-operator v1.8.0 `common/job.go` `ReconcileJobs`: past `ActiveDeadlineSeconds` (`PastActiveDeadline`,
    >=) the reconcile that the pods' exits wake fails the job. The agents see their workers finish at a monitor
    poll (every 5 s from 2 s) and exit 0.75 s later: training that ends after the poll at 92.4 s exits at 100.15 s,
    past a 100 s deadline, and the node fails for good; up to 92 s it succeeds. Every witness replays."""
    path = tmp_path / "deadline.textproto"
    path.write_text(
        'plugin: RECOVERABLE job { pods: "a" pods: "b" active_deadline_seconds: 100 } '
        "task { retries: 1 training_seconds: 100 } propeller { observation_delay_seconds: 10 }"
    )
    proof = _proof(str(path), "phase=SUCCEEDED", ["task.training_seconds=90..100"], "recoverable", False)
    assert proof.verdict == P.COUNTEREXAMPLE
    assert [c for condition in proof.conditions for c in condition] == ["training_seconds > 92"]
    for result in proof.paths:
        assert proof.replay(result).final_phase.value == result.behaviour.final_phase
    assert {p.behaviour.final_phase for p in proof.counterexamples} == {"FAILED_PERMANENTLY"}


def test_a_ttl_is_proved_against_propeller_s_look_and_the_whole_second_completion_time(tmp_path) -> None:
    """training-operator v1.8.0 `common/job.go` `CleanupJob`: the job is deleted once now is past its CompletionTime,
    read back in whole seconds of the cluster's clock, plus the TTL. The job finishes at 104.4 s + `exit_seconds`
    (pod b, not rank 0, raises IgnoreOutputs and uploads nothing: its exit succeeds the elastic job), and where in its
    second the job was created no scenario says, so a 1 s TTL expires at some moment within the second up to
    `finish + 1`, and the requeue to it deletes the job there (`operator.TtlDeletion`). Propeller's round
    `observation_delay` after the finish (flyte `plugin_manager.go` `checkResourcePhase`) finds the job at once (delay
    0: SUCCEEDED), finds none a second or more later (RetriesExhausted|ResourceDeletedExternally), and in between may
    do either: refused, whatever the fraction of the finish. Every witness replays."""
    path = tmp_path / "ttl.textproto"
    path.write_text(
        'plugin: RECOVERABLE job { pods: "a" pods: "b" ttl_seconds_after_finished: 1 } '
        "task { retries: 1 training_seconds: 100 } propeller { observation_delay_seconds: 10 }"
    )
    varies = ["propeller.observation_delay_seconds=0..2", "timings.exit_seconds=0.5..1.5"]
    proof = _proof(str(path), "phase=SUCCEEDED", varies, "recoverable", False)
    assert proof.verdict == P.COUNTEREXAMPLE
    solver = P.Solver(proof.intervals, 60_000)
    delay = solver.vars["propeller.observation_delay_seconds"]
    for result in proof.counterexamples:
        assert not _can(solver, result, delay < 1), result.witness
    assert {p.behaviour.final_code for p in proof.counterexamples} == {"RetriesExhausted|ResourceDeletedExternally"}
    assert proof.refusals
    for result in proof.refusals:
        assert not _can(solver, result, solver.z3.Or(delay <= 0, delay >= 1)), result.witness
        assert result.behaviour.attempts == ("propeller looks while the TTL may have deleted the job (attempt 0)",)
    held = [p for p in proof.paths if p.holds and not p.refused]
    assert held
    for result in held:
        assert not _can(solver, result, delay > 0), result.witness
    for result in proof.paths:
        if not result.refused:
            assert proof.replay(result).final_phase.value == result.behaviour.final_phase


def test_a_budget_that_runs_out_is_unknown_never_proved() -> None:
    proof = _proof(PREEMPTION, "retries", SEED_BOX, "recoverable", True, max_paths=3)
    assert proof.verdict == P.UNKNOWN and "budget" in proof.reason and len(proof.paths) == 3


def test_conditions_are_read_within_the_budget_and_kept_as_recorded_when_it_has_run_out() -> None:
    """`--max-seconds` bounds the whole answer, its conditions too: a z3 check past the deadline answers unknown
    without asking (one used to run a minute after the budget was spent), and a condition not simplified in time
    keeps every recorded constraint, which is still the path's exact condition."""
    import time

    proof = _proof(PREEMPTION, "retries", SEED_BOX, "seed-pr", True)
    path = proof.counterexamples[0]
    spent = time.perf_counter()  # a deadline already past
    solver = P.Solver(proof.intervals, 60_000, deadline=spent)
    solver.solver.add(solver.z3.BoolVal(False, solver.ctx))
    assert solver.check() == solver.z3.unknown  # z3 would say unsat: it was not asked
    assert P.Solver(proof.intervals, 60_000).check() == solver.z3.sat
    simplified = P.minimal_condition(path, proof.intervals)
    assert len(simplified) < len(path.constraints)  # the box and the other constraints imply some
    assert P.minimal_condition(path, proof.intervals, deadline=spent) == path.constraints
    from aggregation.conditions import readable_condition

    assert readable_condition(path, proof.intervals, deadline=spent) == tuple(
        P.render_constraint(c) for c in path.constraints
    )


def test_a_product_of_varied_fields_is_unknown() -> None:
    """The monitor interval multiplies a symbolic poll count (`_next_poll`): not linear, so not followed."""
    proof = _proof(
        PREEMPTION,
        "retries",
        (f"{SIGNAL_AT}=30..31", "job.monitor_interval_seconds=4..6"),
        "recoverable",
        True,
    )
    assert proof.verdict == P.UNKNOWN and "product" in proof.reason or "division" in proof.reason


def test_a_box_with_scenarios_the_model_refuses_is_refused() -> None:
    with pytest.raises(P.ProveError, match="no valid input.*after the job ended"):
        _proof(PREEMPTION, "retries", (f"{SIGNAL_AT}=100..130",), "recoverable", True)


@pytest.mark.parametrize(
    "vary",
    [
        "timings.upload_seconds=0..1e30",
        "timings.upload_seconds=3e8..4e8",
        "propeller.observation_delay_seconds=0..1e12",
        "pod_timings[0].timings.clock_offset_seconds=-1e12..0",
    ],
)
def test_a_box_reaching_past_a_field_s_limit_is_refused_even_where_no_explored_point_lies(vary: str) -> None:
    """scenario.py `_value_problem`: a time beyond what a scenario may span is refused in a file; z3's points may all
    lie well inside such a box, so its corners are checked too."""
    with pytest.raises(P.ProveError, match="no valid input.*(may span|within)"):
        _proof(PREEMPTION, "retries", (vary,), "recoverable", True)


@pytest.mark.parametrize(
    "claim, problem",
    [
        ("phase=DONE", "not a phase"),
        ("sometimes", "expected retries"),
        ("genuine-error-wins", "no worker_error"),
        ("phase=SUCCEEDED|", "an empty alternative"),
        ("code=|X", "an empty alternative"),
    ],
)
def test_bad_claims_are_one_line(claim: str, problem: str) -> None:
    with pytest.raises(ScenarioError, match=problem):
        P.parse_claim(claim, read_scenario(PREEMPTION).message)


@pytest.mark.parametrize(
    "written, read",
    [
        ("outcome=retried", "outcome=RETRIED"),
        ("outcome!=failed permanently|succeeded-silently", "outcome!=FAILED_PERMANENTLY|SUCCEEDED_SILENTLY"),
        ("phase=Retried_Then_Succeeded", "phase=RETRIED_THEN_SUCCEEDED"),
        ("RETRIES", "retries"),  # a claim's name too: `phase=succeeded_silently` was read, `RETRIES` refused
        (" Retries ", "retries"),
    ],
)
def test_a_phase_or_outcome_is_read_as_sweep_prints_it(written: str, read: str) -> None:
    """`sweep` prints outcomes as "retried", "failed permanently": a claim that copies them means the same as the
    upper-case names (`prove.parse_claim`); a code stays as written (codes are case-sensitive)."""
    message = read_scenario(PREEMPTION).message
    box = ("attempts[0].events[1].at_seconds=30..31",)
    same = _proof(PREEMPTION, written, box, "upstream", True), _proof(PREEMPTION, read, box, "upstream", True)
    assert P.parse_claim(written, message).meaning == P.parse_claim(read, message).meaning
    assert [(p.verdict, len(p.counterexamples)) for p in same] == [(same[1].verdict, len(same[1].counterexamples))] * 2
    with pytest.raises(ScenarioError, match="'nope' is not an outcome"):
        P.parse_claim("outcome=nope", message)
    assert P.parse_claim("code=user:x", message).meaning == "the final code is user:x"


@pytest.mark.parametrize(
    "vary, problem",
    [
        ("timings.upload_seconds=3..1", "empty: its low end 3 is above 1"),
        ("timings.upload_seconds=0:1:0.1", "whole interval"),
        ("attempts[0].events[1].pod=0..1", "takes no range of values"),
        ("timings.nothing=0..1", "no field"),
        ("=0..1", "no field name"),
        ("timings..upload_seconds=0..1", "an empty step"),
        ("task.retries=0..1000", "1,001 values are more than a proof takes"),
        ("propeller.observation_delay_seconds=0...10", "a range is LO..HI, with two dots"),  # it read as 0..0.1
        ("attempts[0].events[1].worker_error.recoverable=true,false", "is a preemption, not a worker_error"),
    ],
)
def test_bad_ranges_are_one_line(vary: str, problem: str) -> None:
    with pytest.raises(ScenarioError, match=problem):
        P.parse_range(vary, read_scenario(PREEMPTION).message)


def test_a_field_an_option_sets_is_not_varied_under_it() -> None:
    """`--plugin recoverable` plays the recoverable plugin at every point: `--vary plugin=...` under it used to be
    reported as varied and PROVED for the one plugin; without the option the plugin is a field like any other."""
    source = read_scenario(PREEMPTION)
    ranges = [P.parse_range(v, source.message) for v in ("plugin=UPSTREAM,RECOVERABLE", f"{SIGNAL_AT}=30..31")]
    claim = P.parse_claim("retries", source.message)
    with pytest.raises(P.ProveError, match="--vary plugin: --plugin sets it in every case"):
        P.prove(source, claim, ranges, "recoverable", True)
    flags = [P.parse_range("propeller.error_aggregation=true,false", source.message)]
    with pytest.raises(P.ProveError, match="--no-aggregation sets it in every case"):  # the flag the user gave
        P.prove(source, claim, flags, None, False)
    assert P.prove(source, claim, ranges, None, True).verdict == P.COUNTEREXAMPLE  # upstream's silent success


def test_an_integer_field_s_range_is_the_finite_set_of_its_values() -> None:
    """`task.retries=0..3` is what a person types for "any retry budget up to 3": the values 0, 1, 2 and 3, each
    explored as a box of its own, and printed as typed."""
    retries = P.parse_range("task.retries=0..3", read_scenario(PREEMPTION).message)
    assert retries == P.Choice("task.retries", (0, 1, 2, 3))
    proof = _proof(PREEMPTION, "retries", ["task.retries=0..2"], "recoverable", True)
    assert {p.choices for p in proof.paths} == {(("task.retries", n),) for n in (0, 1, 2)}


def test_a_refusal_inside_a_varied_box_names_the_field_not_a_line_of_another() -> None:
    """The scenario's default `timings` has no clock offset; a pod's `pod_timings` has one. A box past the model's
    limits on the default's names that field, and no line of the file (the line found would be the other's); a
    box of choices only names its choice."""
    source = read_scenario(PREEMPTION)
    claim = P.parse_claim("retries", source.message)
    offsets = [P.parse_range("timings.clock_offset_seconds=-1e9..0", source.message)]
    with pytest.raises(P.ProveError) as refused:
        P.prove(source, claim, offsets)
    assert "(as varied): timings.clock_offset_seconds: must be within +-3600 s" in str(refused.value)
    assert ".textproto:" not in str(refused.value)
    uploads = [P.parse_range("timings.upload_seconds=-1,2", source.message)]
    with pytest.raises(P.ProveError, match=r"e.g. at timings.upload_seconds=-1: "):
        P.prove(source, claim, uploads)


def test_a_path_the_model_refuses_is_not_counted_as_a_behaviour() -> None:
    """prove.py `Proof.behaviours`: the count the issue asks for ("how many distinct behaviours were explored") is of
    what played paths do; a refused path is counted apart, in the text and the JSON alike. In this box (a busy
    operator reading a deleted pod that has exited, `operator.PodRecreation`) the played paths retry or succeed
    silently, and one path is refused."""
    varies = ("attempts[0].events[1].at_seconds=30..31", "job.reconcile_seconds=0..2", "timings.upload_seconds=0.05..3")
    command = [AGGSIM, "prove", "preemption_by_pod_deletion", "--claim", "retries", "--plugin", "upstream"]
    command += [arg for vary in varies for arg in ("--vary", vary)]
    answer = json.loads(subprocess.run([*command, "--json"], capture_output=True, text=True, check=False).stdout)
    assert answer["refused_paths"] == len(answer["refusals"]) == 1
    assert answer["behaviours"] == len(answer["behaviour_list"]) == 2
    assert not any(behaviour.startswith("REFUSED") for behaviour in answer["behaviour_list"])
    text = subprocess.run(command, capture_output=True, text=True, check=False).stdout
    paths = answer["paths"]
    assert f"{paths} paths explored (1 refused by the model), 2 distinct behaviours," in " ".join(text.split())


# --- exactness ---------------------------------------------------------------------------------------------
EXACTNESS_CASES = [
    (PREEMPTION, "retries", SEED_BOX, "seed-pr", True),
    (  # upstream's preempted pod raises IgnoreOutputs and uploads nothing: its exit moves with exit_seconds instead
        PREEMPTION,
        "retries",
        (
            *SEED_BOX[:2],
            "timings.exit_seconds=0.5..3.5",
            *SEED_BOX[3:],
            "attempts[0].events[1].pod=train-worker-0,train-worker-1",
        ),
        "upstream",
        False,
    ),
    (
        "sibling_user_error_cleanup",
        "genuine-error-wins",
        (
            "attempts[0].events[0].at_seconds=20..21",
            "pod_timings[0].timings.clock_offset_seconds=-0.25..0.25",
            "timings.upload_seconds=0.05..3",
            "propeller.observation_delay_seconds=0..10",
        ),
        "seed-pr",
        False,
    ),
    (
        PREEMPTION,
        "retries",
        (
            f"{SIGNAL_AT}=30..31",
            "timings.agent_shutdown_seconds=0.03..5",
            "propeller.observation_delay_seconds=0..10",
            "pod_timings[0].timings.clock_offset_seconds=-0.25..0.25",
        ),
        "seed-pr",
        True,
    ),
]
EXACTNESS_CASES.append(
    (
        "training_outlives_the_deadline",
        "phase=SUCCEEDED_SILENTLY",  # upstream: silent only if its preempted pod exits before the deadline
        (
            "attempts[0].events[1].at_seconds=95..105",  # the preemption either side of the 100 s deadline
            "task.training_seconds=105..115",
            "propeller.observation_delay_seconds=0..10",
        ),
        "upstream",
        True,
    )
)
EXACTNESS_CASES.append(
    (
        "ttl_deletes_the_job_before_propeller_looks",
        "phase=FAILED_PERMANENTLY",  # upstream: its silent success, found or not before the whole-second expiry
        (
            "attempts[0].events[1].at_seconds=30..31",
            "propeller.observation_delay_seconds=0..2",
            "timings.exit_seconds=0.5..1.5",
        ),
        "upstream",
        True,
    )
)
# where a busy operator reads a deleted pod that has exited, the model refuses: a region of its own, just as exact
EXACTNESS_CASES.append(
    (
        "preemption_by_pod_deletion",
        "retries",
        (
            "attempts[0].events[1].at_seconds=30..31",
            "job.reconcile_seconds=0..2",
            "timings.upload_seconds=0.05..3",
        ),
        "upstream",
        True,
    )
)
# where the Master's success and the Worker's deletion mark meet, the prover explores both orders
EXACTNESS_CASES += [
    (  # the tie is a plane of the box (the deletion at the Master's exit)
        MAP_ORDER_TIE,
        "outcome=RETRIED",
        (
            "attempts[0].events[1].at_seconds=35..35.3",
            "propeller.observation_delay_seconds=0..10",
            "timings.exit_seconds=0.5..1",
        ),
        "recoverable",
        True,
    ),
    (  # a busy operator's wait makes the tie an area: the deletion within `reconcile_seconds` of the Master's heard
        # exit, 35.65 s (and the Worker's exit heard late, so no reconcile reads it deleted and exited)
        BUSY_MAP_ORDER_TIE,
        "outcome=RETRIED",
        ("attempts[0].events[1].at_seconds=35.4..36.2", "job.reconcile_seconds=0..0.3"),
        "recoverable",
        False,
    ),
    (  # the tie everywhere: neither field moves either moment, so the whole box is explored once per order
        MAP_ORDER_TIE,
        "outcome=RETRIED",
        ("propeller.observation_delay_seconds=0..10", "propeller.round_retry_seconds=0.01..0.1"),
        "upstream",
        False,
    ),
]
#: the genuine error's mtime moved across the plugin's 20 ms window and the sibling's signal across the error's moment
LAG_BOX = (
    "pod_timings[0].timings.file_time_lag_seconds=-0.05..0.05",
    "attempts[0].events[1].at_seconds=29.95..30.05",
    "attempts[0].events[0].at_seconds=29.9..30.1",
)
# the recoverable plugin stamps a worker failure with its error file's mtime where that lies in torch's whole second or
# up to 20 ms before it (`plugin/task.py` `refine_first_failure_timestamp`): two rounded stamps compared
EXACTNESS_CASES.append((LAGGING_MTIME, "genuine-error-wins", LAG_BOX, "recoverable", True))
_PROOFS: dict = {}


def _case_id(case) -> str:
    return f"{Path_(case[0]).stem}-{case[3]}-{case[4]}"


def _cached(case):
    if case not in _PROOFS:
        _PROOFS[case] = _proof(*case)
    return _PROOFS[case]


def test_a_lagging_mtime_against_a_signal_s_stamp_is_decided_not_left_unknown() -> None:
    """`prove.Solver`: comparing the sibling's signal stamp with the genuine error's mtime stamp, each a rounding of its
    own reading, under an equality between the two events' moments, left z3's incremental core (a plain `z3.Solver`
    after a push) without an answer for 600 s; with the preprocessing a fresh check applies (solve-eqs,
    purify-arith) at every check the whole box takes a second or two. The answer turns on the lag
    (`plugin/task.py` `refine_first_failure_timestamp`): the error 10 ms after the signal, with its file's mtime 20 ms
    behind, is stamped first and wins the earliest reader (`remote_file_output_reader.go`); with no lag the signal's
    recoverable error wins, and the claim fails."""
    proof = _proof(LAGGING_MTIME, "genuine-error-wins", LAG_BOX, "recoverable", True, max_seconds=120)
    assert proof.verdict == P.COUNTEREXAMPLE and not proof.reason, proof.reason
    lag, error_at, signal_at = (v.split("=")[0] for v in LAG_BOX)
    point = {error_at: Fraction("30.01"), signal_at: Fraction(30)}
    (trailing,) = _covering(proof, (), {**point, lag: Fraction("0.02")}).values()
    (on_time,) = _covering(proof, (), {**point, lag: Fraction(0)}).values()
    assert trailing.holds and not on_time.holds


def test_a_lag_of_zero_is_no_boundary_of_its_own() -> None:
    """`plugin_variants.RecoverablePlugin.worker_failure_stamp` mirrors `plugin/task.py`
    `refine_first_failure_timestamp`, which has no case for an mtime equal to the reading: with no lag the mtime lies in
    torch's second and is the stamp, as the window's rule gives. Asking "no lag?" first split every path of a box that
    varies the lag in two (lag = 0 and the rest: 97 paths where 75 answer), and a counterexample read
    "file_time_lag_seconds = 0 and ...". No path's condition holds the lag to zero or away from it."""
    proof = _proof(LAGGING_MTIME, "genuine-error-wins", LAG_BOX, "recoverable", True, max_seconds=120)
    assert not proof.reason, proof.reason
    lag = ("var", LAG_BOX[0].split("=")[0])
    alone = {(((lag, 1),), 0), (((lag, -1),), 0)}  # the term `lag` (or `-lag`), compared with zero
    held = [c for path in proof.paths for c in path.constraints if c[0] in alone]
    assert not held, held


@pytest.mark.parametrize("case", EXACTNESS_CASES, ids=_case_id)
def test_every_witness_replayed_on_plain_floats_does_what_its_path_recorded(case) -> None:
    """A path with an inside (no equality in its condition) has a float witness, and the plain simulator on plain
    floats does there what the path recorded, as does any other path whose witness is a float (a float sum
    rounded across a boundary is the one disagreement allowed). A path on a boundary (two moments exactly equal)
    holds no float in general: its exact witness is rerun exactly, from scratch."""
    proof = _cached(case)
    assert proof.verdict != P.UNKNOWN, proof.reason
    inside = 0
    for path in proof.paths:
        if all(relation != "==" for _, relation in path.constraints):
            assert P.replayable(path), P.point_text(path.witness)
            inside += 1
        if P.replayable(path):  # also a region held by an integer part's equation, e.g. two equal floors
            behaviour = P.behaviour_of(proof.replay(path))
            if behaviour != path.behaviour:
                assert _within_rounding_of(proof, path.choices, path.witness, behaviour), P.point_text(path.witness)
        rerun = P.run_symbolic(proof.problem.with_choices(path.choices), path.witness)
        assert rerun.constraints == path.constraints
        assert P.behaviour_of(rerun.execution) == path.behaviour
    assert inside >= 3


def _in_box(interval: P.Interval, value: float) -> Fraction:
    """A float drawn between the floats of the box's ends, as a point of the box: the float nearest a decimal end can
    lie just outside it (0.009 is 0.00899999...), where no path of the box need hold."""
    return min(max(Fraction(value), interval.low), interval.high)


def _covering(proof, choices: tuple, point: dict) -> dict:
    """The paths taken at `point` under the box's discrete `choices`, by the map orders each took after them: one path
    (no order), or where Go's random map order decides the job, one per order (`prove._explore_box`)."""
    covering: dict = {}
    for path in proof.paths:
        if path.choices[: len(choices)] == choices and all(holds(c, point) for c in path.constraints):
            pins = path.choices[len(choices) :]
            assert pins not in covering, f"two paths with {pins} cover {P.point_text(point)}"
            covering[pins] = path
    return covering


def _replayed(proof, choices: tuple, point: dict) -> dict:
    """The plain simulator's behaviours at `point`, on plain floats, by the map orders each execution took."""
    executions = P.replay_each_map_order(proof.problem.with_choices(choices), point)
    return {pins: P.behaviour_of(execution) for pins, execution in executions.items()}


@pytest.mark.parametrize("case", EXACTNESS_CASES, ids=_case_id)
def test_random_points_fall_in_exactly_one_path_that_the_plain_simulator_agrees_with(case) -> None:
    proof = _cached(case)
    intervals = proof.intervals

    @settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.tuples(*(st.floats(float(i.low), float(i.high), allow_nan=False) for i in intervals)),
        st.tuples(*(st.sampled_from(c.values) for c in proof.choices)),
    )
    def check(values, chosen) -> None:
        point = {i.field: _in_box(i, v) for i, v in zip(intervals, values)}
        choices = tuple((c.field, v) for c, v in zip(proof.choices, chosen))
        _agrees_but_for_rounding(proof, choices, point)

    check()


#: how far a float sum of the box's fields can land from the exact one: a few ulps of a number below 2**10, with
#: room to spare (the real pods and the plain simulator add in floats; the prover adds exactly)
ROUNDING = Fraction(1, 10**9)


def _agrees_but_for_rounding(proof, choices: tuple, point: dict) -> None:
    """One path covers `point`, or one per map order where Go's decides the job, and the plain simulator on plain
    floats does there what each recorded: only a float sum rounded across a boundary may disagree."""
    covering = _covering(proof, choices, point)
    assert covering, f"no path covers {P.point_text(point)}"
    assert () not in covering or len(covering) == 1, f"{len(covering)} paths cover {P.point_text(point)}"
    for pins, behaviour in _replayed(proof, choices, point).items():
        path = covering.get(pins)
        if path is None or behaviour != path.behaviour:
            assert _within_rounding_of(proof, choices + pins, point, behaviour), P.point_text(point)


def _within_rounding_of(proof, choices, point: dict, behaviour) -> bool:
    """Whether a path with `behaviour` (the plain simulator's, in floats) is taken within `ROUNDING` (relative,
    at least absolute) of `point`: a point that close to a boundary may fall on either side in floats."""
    near = [
        P.Interval(i.field, max(i.low, x - ROUNDING * max(1, abs(x))), min(i.high, x + ROUNDING * max(1, abs(x))))
        for i in proof.intervals
        for x in [point[i.field]]
    ]
    solver = P.Solver(near, 60_000)
    candidates = [p for p in proof.paths if p.choices == choices and p.behaviour == behaviour]
    return any(isinstance(solver.point_in(p.constraints, None), dict) for p in candidates)


def test_an_upload_cut_short_whose_stamp_is_varied_is_proved_exactly_by_the_stamp_s_encoded_length() -> None:
    """A partial write keeps a document's first bytes. An ErrorDocument is one length-delimited field, so a cut leaves
    nothing, a truncated message (unreadable) or, from its whole length on, the whole document; and how many bytes it
    takes depends on its stamp (protobuf's varints; proto3 leaves a zero field out). The prover once took the
    witness's length for the whole path: at 8.75 s it read a whole document (USER:RuntimeError) where the plain
    simulator read a cut one (the round fails, the workflow aborts), found by a generated box in CI. Now each path
    pins the stamp's encoded length (`symbolic.cut_short`): the box is answered, both readings appear, and the plain
    simulator agrees at 8.75 s, at every witness and at points drawn across the box, those whose stamps have a
    nanosecond part of few bytes included."""
    text = (
        'name: "cut" plugin: RECOVERABLE job { pods: "train-worker-0" pods: "train-worker-1" elastic: false } '
        "task { training_seconds: 20 } propeller { error_aggregation: true } "
        "timings { rendezvous_seconds: 0.5 agent_shutdown_seconds: 7.999 failed_worker_exit_seconds: 0 } "
        "attempts { replica_map_order: MASTER_FIRST "
        'events { pod: "train-worker-0" truncated_upload { keep_bytes: 54 } } '
        'events { at_seconds: 9.094 pod: "train-worker-0" worker_error { message: "ValueError: bad batch" } } '
        'events { at_seconds: 9.094 pod: "train-worker-1" preemption {} } }'
    )
    source = parse_scenario_source(text, "cut.textproto")
    ranges = [P.parse_range("attempts[0].events[1].at_seconds=8.594..9.594", source.message)]
    proof = P.prove(source, P.parse_claim("phase=SUCCEEDED", source.message), ranges, max_paths=80, max_seconds=60)
    assert not proof.reason, proof.reason
    assert {p.behaviour.final_code for p in proof.paths} == {"USER:RuntimeError", "Workflow abort failed"}
    _witnesses_replay(proof, proof.paths)
    field = ranges[0].field
    points = [Fraction("8.75"), Fraction(9), Fraction("9.000001"), Fraction("9.0001"), Fraction("9.01")]
    points += [Fraction(8594, 1000) + Fraction(i, 97) for i in range(97)]
    for at in points:
        _agrees_but_for_rounding(proof, (), {field: at})


@settings(max_examples=200)
@given(st.integers(-(2**63), 2**63 - 1))
def test_the_length_a_cut_follows_is_protobuf_s_for_a_stamp_s_field(number) -> None:
    """`symbolic._varint_length`, which `cut_short` records a stamp's length by, is the bytes protobuf gives an int64
    field's value (the Timestamp's seconds; its nanos are one too): none for zero, ten for a negative number."""
    from google.protobuf.timestamp_pb2 import Timestamp

    from aggregation.symbolic import _varint_length

    assert _varint_length(number) == max(len(Timestamp(seconds=number).SerializeToString()) - 1, 0)


def test_on_the_nanosecond_the_plain_simulator_agrees_even_on_a_boundary() -> None:
    """`aggregation.nanoseconds`: a signal at 30.6 s and a 0.349999872 s shutdown lie on the boundary where seed-pr's
    whole-second stamp of the moment `at + shutdown + 0.05` turns from 30 to 31: torch `errors/error_handler.py`
    stamps with `int(time.time())`, whose float (CPython `_PyTime_AsSecondsDouble`) reads a moment up to 128 ns
    before a whole second as that second (`aggregation.stamps.whole_second_ns`); 0.05 s is the peer's broken
    collective. In plain floats that sum is 30.999999872000004; the simulator's nanosecond clock puts it back on
    the boundary, so the simulator and the prover take the same path there. A point between the nanoseconds (the
    float 0.349999872's binary value, below the decimal) is another real number: the prover follows it exactly, and
    the simulator, given the float, reads 0.349999872. Only there may they differ."""
    proof = _cached(EXACTNESS_CASES[0])
    on_boundary = {
        SIGNAL_AT: Fraction("30.6"),
        "timings.agent_shutdown_seconds": Fraction("0.349999872"),
        "timings.upload_seconds": Fraction(1),
        "propeller.observation_delay_seconds": Fraction(7),
    }
    assert 30.6 + 0.349999872 + 0.05 != 30.999999872
    exact = [p for p in proof.paths if all(holds(c, on_boundary) for c in p.constraints)]
    assert len(exact) == 1
    assert P.behaviour_of(P.replay(proof.problem, on_boundary)) == exact[0].behaviour
    between = {**on_boundary, "timings.agent_shutdown_seconds": Fraction(0.349999872)}
    assert between["timings.agent_shutdown_seconds"] < on_boundary["timings.agent_shutdown_seconds"]
    below = [p for p in proof.paths if all(holds(c, between) for c in p.constraints)]
    in_floats = P.behaviour_of(P.replay(proof.problem, between))
    assert below[0].behaviour != exact[0].behaviour == in_floats
    assert _within_rounding_of(proof, (), between, in_floats)


def _grid_values(interval, witnesses: list) -> st.SearchStrategy:
    """Whole nanoseconds in the interval, where boundaries are: its ends, the paths' witnesses (each on its region's
    edge, often a tie), and short decimals anywhere."""
    low, high = interval.low, interval.high
    fewest = next(d for d in range(10) if math.ceil(low * 10**d) <= math.floor(high * 10**d))  # [0.01, 0.1]: 0.1
    places = st.integers(fewest, max(fewest, 3)).flatmap(
        lambda d: st.integers(math.ceil(low * 10**d), math.floor(high * 10**d)).map(lambda n: Fraction(n, 10**d))
    )
    on_edges = st.sampled_from([low, high] + [w for w in witnesses if nanoseconds.on_the_grid(w)])
    return st.one_of(places, on_edges)


@pytest.mark.parametrize("case", EXACTNESS_CASES, ids=_case_id)
def test_at_whole_nanoseconds_the_plain_simulator_does_exactly_what_the_path_recorded(case) -> None:
    """The prover's answer is about the points `aggsim simulate` is given: at any point written to the nanosecond,
    on a boundary or not (a tie the scenario's decimals make, a box's corner), exactly one path covers it (one per map
    order, where Go's decides the job) and the plain simulator on plain floats does there exactly what that path
    recorded: no rounding is excused."""
    proof = _cached(case)
    fields = [
        _grid_values(i, [p.witness[i.field] for p in proof.paths]).map(lambda v, f=i.field: (f, v))
        for i in proof.intervals
    ]

    @settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
    @given(st.tuples(*fields), st.tuples(*(st.sampled_from(c.values) for c in proof.choices)))
    def check(values, chosen) -> None:
        point = dict(values)
        choices = tuple((c.field, v) for c, v in zip(proof.choices, chosen))
        covering = _covering(proof, choices, point)
        assert () not in covering or len(covering) == 1, f"{len(covering)} paths cover {P.point_text(point)}"
        recorded = {pins: path.behaviour for pins, path in covering.items()}
        assert _replayed(proof, choices, point) == recorded, P.point_text(point)

    check()


def _generated_proof(message, varies, max_paths: int):
    """`phase=SUCCEEDED` proved over `varies` on a generated scenario, or None where there is nothing to check: a box
    holding an invalid scenario, refused as it must be, or an answer left incomplete (the budget ran out, or a run the
    prover cannot follow), which is never an answer."""
    source = parse_scenario_source(text_format.MessageToString(message), "<generated>")
    ranges = [P.parse_range(v, source.message) for v in varies]
    try:
        proof = P.prove(
            source, P.parse_claim("phase=SUCCEEDED", source.message), ranges, max_paths=max_paths, max_seconds=20
        )
    except P.ProveError as e:
        assert "the box holds scenarios that are no valid input" in str(e), e
        event("refused")
        return None
    if proof.reason:
        event("no complete answer")
        return None
    return proof


def _witnesses_replay(proof, paths) -> None:
    """Each of `paths`' float witnesses, replayed by the plain simulator, does what its path recorded (a float sum
    rounded across a boundary excepted)."""
    for path in paths:
        if P.replayable(path):
            behaviour = P.behaviour_of(proof.replay(path))
            assert behaviour == path.behaviour or _within_rounding_of(proof, path.choices, path.witness, behaviour)


def _random_points_agree(proof, data) -> None:
    """Ten points drawn at random from the box, with its discrete choices: each lies in exactly one path (one per map
    order where Go's decides the job), whose behaviour the plain simulator reproduces there
    (`_agrees_but_for_rounding`)."""
    for _ in range(10):
        point = {i.field: _in_box(i, data.draw(st.floats(float(i.low), float(i.high)))) for i in proof.intervals}
        choices = tuple((c.field, data.draw(st.sampled_from(c.values))) for c in proof.choices)
        _agrees_but_for_rounding(proof, choices, point)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_generated_scenarios_and_boxes_are_proved_exactly(data) -> None:
    """Not only the hand-picked cases above: a scenario nobody chose (`strategies.scenarios`), one to three of its
    numbers varied around their values and sometimes which pod an event hits (`strategies.boxes`). A complete
    answer's paths tile the box: a random point lies in exactly one of them, and the plain simulator on plain
    floats does there what that path recorded (a float sum rounded across a boundary excepted); every float
    witness does what its path recorded. A box holding an invalid scenario is refused; where the model refuses to
    play a valid one (`scenario.ModelRefusal`), the refused paths tile with the rest, and the plain simulator refuses
    there too."""
    message = data.draw(scenarios(max_pods=3, max_attempts=2, max_events=3), label="scenario")
    varies = data.draw(boxes(message), label="varies")
    proof = _generated_proof(message, varies, max_paths=60)
    if proof is None:
        return
    event(f"answered: {'one path' if len(proof.paths) == 1 else 'several paths'}")
    if proof.refusals:
        event("the model refuses part of the box")
    _witnesses_replay(proof, proof.paths)
    _random_points_agree(proof, data)


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_generated_refused_regions_tile_with_the_rest_and_the_plain_simulator_refuses_there(data) -> None:
    """Generated scenarios whose preemptions delete their pods, proved over a busy operator's wait
    (`job.reconcile_seconds=0..2`) and at most one more of their numbers: where the operator would re-create a deleted
    pod (training-operator v1.8.0 `pkg/controller.v1/common/pod.go` `ReconcilePods` -> `createNewPod`;
    `operator.PodRecreation`), the model refuses the whole path. Refused paths tile the box with the others: a random
    point lies in exactly one path, and the plain simulator refuses there exactly when that path is refused (a float sum
    rounded across a boundary excepted); each refused path's float witness is refused by `simulate` with the path's own
    kind of refusal."""
    message = data.draw(scenarios(max_pods=3, max_attempts=2, max_events=3), label="scenario")
    preemptions = [e for a in message.attempts for e in a.events if e.WhichOneof("kind") == "preemption"]
    assume(preemptions)
    for event_ in preemptions:
        event_.preemption.pod_deleted = True
    more = [v for v in data.draw(boxes(message, max_fields=1), label="more") if not v.startswith("job.reconcile")]
    source = parse_scenario_source(text_format.MessageToString(message), "<generated>")
    try:
        ranges = [P.parse_range(v, source.message) for v in ("job.reconcile_seconds=0..2", *more)]
        proof = P.prove(source, P.parse_claim("phase=SUCCEEDED", source.message), ranges, max_paths=80, max_seconds=20)
    except ScenarioError as e:  # a box with no valid scenario in some corner (e.g. a deletion after the job ends)
        assert "no valid input" in str(e) or "--vary" in str(e), e
        event("refused whole")
        return
    if proof.reason:
        event("no complete answer")
        return
    event("refused regions" if proof.refusals else "nothing refused")
    _witnesses_replay(proof, proof.refusals)
    _random_points_agree(proof, data)


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_generated_boxes_over_an_error_file_s_lag_are_proved_exactly(data) -> None:
    """The recoverable plugin stamps a worker's failure with its error file's mtime where that lies in torch's whole
    second or up to 20 ms before it, else with the second (`plugin/task.py` `refine_first_failure_timestamp`;
    `plugin_variants.RecoverablePlugin.worker_failure_stamp`), and with aggregation on the earliest stamp wins
    (`remote_file_output_reader.go`). A box drawn at random varies a lag where it matters in about one draw in 500
    (a recoverable pod with a lag of its own, a worker error on it, the failure near a whole second). Here a generated
    scenario always gets a genuine error on one pod and a sibling's preemption within 100 ms of it, with that pod's lag
    varied across the window's edges (-50..50 ms) and the error's moment over a whole second: the lag splits the box
    in about half the draws (in the rest the attempt ends first or the failure is read elsewhere), and decides what
    propeller reads in a few. The paths tile the box and the plain simulator does what each recorded, as for any
    generated box."""
    message = data.draw(
        scenarios(plugins=("recoverable",), aggregation=True, max_pods=3, max_attempts=1, max_events=2),
        label="scenario",
    )
    if len(message.job.pods) == 1:
        message.job.pods.append("train-worker-1")
    pod, sibling = data.draw(st.permutations(list(message.job.pods)), label="pods")[:2]
    error_ms = data.draw(st.integers(1000, round(message.task.training_seconds * 1000) - 1000), label="error at ms")
    signal_ms = error_ms + data.draw(st.integers(-100, 100), label="signal after the error, ms")
    events = message.attempts[0].events
    error = events.add(at_seconds=error_ms / 1000, pod=pod)
    error.worker_error.message = "ValueError: bad batch"
    error.worker_error.recoverable = data.draw(st.booleans(), label="recoverable")
    events.add(at_seconds=signal_ms / 1000, pod=sibling).preemption.SetInParent()
    index = next((k for k, o in enumerate(message.pod_timings) if o.pod == pod), None)
    if index is None:
        message.pod_timings.add(pod=pod)
        index = len(message.pod_timings) - 1
    message.pod_timings[index].timings.file_time_lag_seconds = 0.0
    lag = f"pod_timings[{index}].timings.file_time_lag_seconds"
    error_at = f"attempts[0].events[{len(events) - 2}].at_seconds"
    varies = (f"{lag}=-0.05..0.05", f"{error_at}={(error_ms - 500) / 1000}..{(error_ms + 500) / 1000}")
    proof = _generated_proof(message, varies, max_paths=80)
    if proof is None:
        return
    split = [p for p in proof.paths if any(("var", lag) in atoms_in(key) for key, _ in p.constraints)]
    event("the lag splits the box" if split else "the lag decides nothing")
    if len({p.behaviour for p in split}) > 1:
        event("...and decides what propeller reads")
    _witnesses_replay(proof, proof.paths)
    _random_points_agree(proof, data)


@pytest.mark.parametrize("case", EXACTNESS_CASES, ids=_case_id)
def test_a_readable_condition_holds_exactly_where_its_path_is_taken(case) -> None:
    """`aggregation.conditions`: each counterexample's readable pieces (ranges of the fields, no floors, no
    nanosecond roundings) hold at a point of the box exactly when the path's recorded condition does (a piece
    with a sub-second stamp relaxed is allowed to differ only within 256 ns of its bounds, which random
    floats do not hit); the text names no integer part, and the witness's piece comes first."""
    import random

    from aggregation.conditions import condition_pieces, families, family_pieces, piece_holds

    proof = _cached(case)
    rng = random.Random(20261202)
    checked = 0
    for path, lines in zip(proof.counterexamples, proof.conditions):
        assert not any(word in line for line in lines for word in ("floor(", "round(")), lines
        found = condition_pieces(path, proof.intervals)
        assert found is not None
        pieces, _ = found
        assert piece_holds(pieces[0], path.witness)
        # the lines people read: families of pieces (`for n = 0 or 5: ... + n`), each value of n one piece
        read = [p for f in families(P.Solver(proof.intervals, 60_000), pieces) for p in family_pieces(f)]
        for _ in range(300):
            # each field anywhere in its range, or (half the time) the witness's value: a path held on a line of the
            # box (`upload_seconds = 0.05`, a tie) is met only there
            anywhere = {i.field: Fraction(rng.uniform(float(i.low), float(i.high))) for i in proof.intervals}
            point = {name: path.witness[name] if rng.random() < 0.5 else v for name, v in anywhere.items()}
            recorded = all(holds(c, point) for c in path.constraints)
            assert any(piece_holds(piece, point) for piece in pieces) == recorded, P.point_text(point)
            assert any(piece_holds(piece, point) for piece in read) == recorded, P.point_text(point)
            checked += recorded
    assert checked, "no random point fell where a counterexample is taken: the check above compared nothing"


def test_a_readable_condition_reads_as_ranges_of_short_field_names() -> None:
    """The sibling-error case of the README table: seed-pr with aggregation off loses the genuine error, each path
    held to where the agents' looks at their workers and the survivor's once-a-second reads of the rendezvous state
    fall. With aggregation off the reader takes `error.pb` as last written and compares no stamps, so the clock
    offset (varied in the box) is in no condition. It used to be in every one: a check of the offset's bound took
    `abs()` of the symbolic value, splitting every path at offset 0 (twice the paths, half of them artefacts)."""
    proof = _cached(EXACTNESS_CASES[2])
    assert proof.verdict == P.COUNTEREXAMPLE
    texts = set(proof.conditions)
    # at_seconds <= 20.5: the genuine pod's agent finds its failed worker at its look at 22 s (not 27 s), so the
    # cleanup comes while the survivor's agent, looking at 26 s, has not yet found its own
    assert any(text[0].startswith("at_seconds <= 20.5 and ") for text in texts)
    assert all("clock_offset" not in line for text in texts for line in text)
    assert all("attempts[" not in line and "timings." not in line for text in texts for line in text)
    assert proof.exact_conditions[0]  # the recorded form, for --json


def test_pieces_one_monitor_interval_apart_read_as_one_family() -> None:
    """torch 2.13 `SimpleElasticAgent._invoke_run` looks at its workers every `monitor_interval` (5 s here): the
    same race recurs one look later, so a condition repeats with every bound 5 s on. Those pieces read as one
    line, `for n = 0 or 5: ... + n`, and the family is the same set as its pieces (z3, `conditions.same_region`),
    not a summary of them."""
    from aggregation.conditions import condition_pieces, families, family_pieces, same_region

    proof = _cached(EXACTNESS_CASES[1])  # upstream, aggregation off: the silent success recurs a look later
    lines = [line for condition in proof.conditions for line in condition]
    family_lines = [line for line in lines if line.startswith(("for n = 0 or 5: ", "or for n = 0 or 5: "))]
    assert family_lines and all("+ n" in line for line in family_lines)
    path = proof.counterexamples[0]
    pieces, _ = condition_pieces(path, proof.intervals)
    solver = P.Solver(proof.intervals, 60_000)
    grouped = families(solver, pieces)
    assert len(grouped) < len(pieces) == sum(len(f.values) for f in grouped)
    family = next(f for f in grouped if len(f.values) > 1)
    assert family.values == ((0,), (5,)) and family.parameters[0]
    for member in family_pieces(family):  # n = 0 and n = 5 are each one of the pieces, within the box
        assert sum(same_region(solver, member, piece) for piece in pieces) == 1


def test_pieces_moved_by_two_constants_read_as_one_family() -> None:
    """seed-pr with aggregation on, the preempted pod's clock offset: the truncated stamp's race recurs in each
    whole second the signal and shutdown reach (torch's `int(time.time())`, n) and again one monitor poll later
    (m = 5, where propeller's look moves too). Pieces moved by both read as one line, `for (n, m) = ...`, with
    each bound moved by the parameters that move it, and every member is exactly its piece (z3)."""
    from aggregation.conditions import condition_pieces, families, same_region

    proof = _cached(EXACTNESS_CASES[3])
    assert proof.verdict == P.COUNTEREXAMPLE
    first = proof.conditions[0][0]
    assert first.startswith("for (n, m) = (0, 0), (0, 5), (1, 0)") and "+ n + m" in first and " + m and" in first
    solver = P.Solver(proof.intervals, 60_000)
    two = 0
    for path in proof.counterexamples:
        pieces, _ = condition_pieces(path, proof.intervals)
        grouped = families(solver, pieces)
        assert sum(len(f.values) for f in grouped) == len(pieces)
        for family in grouped:
            two += len(family.parameters) == 2
            for member in family.pieces():
                assert sum(same_region(solver, member, piece) for piece in pieces) == 1
    assert two


# --- the command -------------------------------------------------------------------------------------------
def _aggsim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([AGGSIM, *args], capture_output=True, text=True, timeout=300)


def test_cli_exit_status_says_the_verdict() -> None:
    box = [a for v in SEED_BOX[:2] for a in ("--vary", v)]
    proved = _aggsim("prove", PREEMPTION, "--claim", "retries", "--plugin", "recoverable", *box)
    assert proved.returncode == 0 and proved.stdout.startswith("PROVED"), proved.stderr
    broken = _aggsim("prove", PREEMPTION, "--claim", "retries", "--plugin", "upstream", "--json", *box)
    assert broken.returncode == 1
    answer = json.loads(broken.stdout)
    assert answer["verdict"] == "COUNTEREXAMPLE" and answer["counterexamples"][0]["final_phase"] == "SUCCEEDED_SILENTLY"
    # a budget too small for the box: UNKNOWN (exit 3), never PROVED
    whole = [a for v in SEED_BOX for a in ("--vary", v)]
    short = _aggsim("prove", PREEMPTION, "--claim", "retries", "--plugin", "recoverable", "--max-paths", "2", *whole)
    assert short.returncode == 3 and short.stdout.startswith("UNKNOWN") and "at most 2 paths" in short.stdout


def test_a_tie_the_box_s_decimals_make_is_a_counterexample_simulate_reproduces() -> None:
    """Found by an adversarial review: a signal at 30.4 s and a look 2.37 s after the last event put propeller's
    look and the survivor's upload both at 33.55 s, a tie; read as the floats' binary values the tie lay 1e-15 s
    outside the box and the prover answered PROVED, while `aggsim simulate` at that corner fails the job for good.
    Read as the decimals written (`aggregation.nanoseconds`), the tie is in the box: a counterexample at its corner,
    which the plain simulator reproduces, and which the JSON marks as replayable."""
    box = (f"{SIGNAL_AT}=30..30.4", "propeller.observation_delay_seconds=0..2.37")
    result = _aggsim(
        "prove",
        PREEMPTION,
        "--claim",
        "retries",
        "--plugin",
        "seed-pr",
        "--json",
        *[a for v in box for a in ("--vary", v)],
    )
    answer = json.loads(result.stdout)
    assert result.returncode == 1 and answer["verdict"] == "COUNTEREXAMPLE", result.stdout
    [broken] = answer["counterexamples"]
    assert broken["witness"] == {SIGNAL_AT: 30.4, "propeller.observation_delay_seconds": 2.37}
    assert broken["replayable"] and broken["final_phase"] == "FAILED_PERMANENTLY"
    assert broken["condition"] == ["at_seconds + observation_delay_seconds >= 32.77"]
    simulated = P.replay(
        _proof(PREEMPTION, "retries", box, "seed-pr", True).problem,
        {
            SIGNAL_AT: Fraction("30.4"),
            "propeller.observation_delay_seconds": Fraction("2.37"),
        },
    )
    assert simulated.final_phase.value == "FAILED_PERMANENTLY"


def test_a_witness_between_two_nanoseconds_is_marked_as_one_simulate_cannot_be_given() -> None:
    """A box narrower than the model's clock tick holds no point `aggsim simulate` can be given: the answer still
    stands (it is exact), and both outputs say its witness is exact only."""
    box = ["--vary", f"{SIGNAL_AT}=30.3999999991..30.3999999999"]
    args = ("prove", PREEMPTION, "--claim", "phase=SUCCEEDED", "--plugin", "upstream", *box)
    answer = json.loads(_aggsim(*args, "--json").stdout)
    assert answer["verdict"] == "COUNTEREXAMPLE" and not answer["counterexamples"][0]["replayable"]
    text = _aggsim(*args)
    words = " ".join(text.stdout.split())  # the note wraps at the terminal's width
    assert "`aggsim simulate` cannot be given it" in words and "Its timeline" not in words, text.stdout


@pytest.mark.parametrize("width", [60, 80])
def test_the_answer_fits_the_terminal_and_cuts_no_word(width: int) -> None:
    """The header (verdict, claim and its meaning) wraps at whole words under an indent, with no trailing space;
    a claim's text is printed as typed, never read as rich markup."""
    import io

    from rich.console import Console

    from aggregation.proof_report import render_proof

    claim = "code=[bold]X|RetriesExhausted|Unknown|Y"
    proof = _proof(PREEMPTION, claim, [f"{SIGNAL_AT}=30..31"], "upstream", False)
    out = io.StringIO()
    render_proof(proof, Console(file=out, width=width, color_system=None))
    lines = out.getvalue().splitlines()
    header = [lines[0]] + [line for line in lines[1:4] if line.startswith("    ")]
    assert all(len(line) <= width and line == line.rstrip() for line in header), header
    words = " ".join(line.strip() for line in header).split()
    assert words[0] == "COUNTEREXAMPLE" and f"{claim}:" in words
    assert words[-8:] == ["or", "Y", "(or", "adjacent", "ones", "joined", "by", "|)"], words  # the meaning ends whole


@pytest.mark.parametrize("width", [60, 80])
def test_conditions_and_witness_wrap_where_their_parts_join(width: int) -> None:
    """A counterexample's conditions break at their ` and `s, the witness at its fields, and only then at words
    (an operator stays with its operand): every line fits, none ends in a space, and nothing is lost."""
    import io

    from rich.console import Console

    from aggregation.proof_report import render_proof

    proof = _cached(EXACTNESS_CASES[0])
    out = io.StringIO()
    render_proof(proof, Console(file=out, width=width, color_system=None))
    text = out.getvalue().split("Its timeline")[0]
    lines = text.splitlines()
    assert all(len(line) <= width and line == line.rstrip() for line in lines), [x for x in lines if len(x) > width]
    assert not any(line.rstrip().endswith(("<", ">", "=", "+", "-")) for line in lines), text
    flowing = " ".join(line.strip() for line in lines)
    for condition in proof.conditions[:3]:
        for part in condition:
            assert part in flowing, part
    assert f"A witness: {P.point_text(proof.counterexamples[0].witness)}" in flowing


def test_cli_bad_input_is_one_line_and_exit_2() -> None:
    result = _aggsim("prove", PREEMPTION, "--claim", "retries", "--vary", "timings.upload_seconds=x..1")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_cli_a_deployments_aggregation_setting_decides_unless_the_flag_overrides(tmp_path) -> None:
    """flyteplugins `k8s` config `enable-distributed-error-aggregation` picks propeller's reader
    (`remote_file_output_reader.go` `NewRemoteFileOutputReader`: earliest with it, the single error.pb without).
    The sibling-error incident turns on aggregation itself; with seed-pr, turning it off lets the preempted pod's
    error.pb overwrite the genuine one, so the deployment's setting must reach every path the prover explores."""
    from aggregation.proof_report import TABLE_CASES

    (scenario, claim, varies) = next(case for case in TABLE_CASES if case[1] == "genuine-error-wins")
    box = [a for v in varies for a in ("--vary", v)]
    off = tmp_path / "off.yaml"
    off.write_text("plugins:\n  k8s:\n    enable-distributed-error-aggregation: false\n")

    def verdict(*extra: str) -> tuple[int, str]:
        result = _aggsim("prove", scenario, "--claim", claim, "--plugin", "seed-pr", "--json", *box, *extra)
        return result.returncode, json.loads(result.stdout)["verdict"] if result.stdout else result.stderr

    # aggregation on: no counterexample, but a cleanup's SIGTERM meeting torch's handler (which the seed PR leaves
    # installed) while a pod writes its report is refused (`pods.SignalUnderTorchHandler`), so not proved either
    assert verdict() == (3, "UNKNOWN")  # the scenario's own setting: aggregation on
    assert verdict("--propeller-config", str(off)) == (1, "COUNTEREXAMPLE")
    assert verdict("--propeller-config", str(off), "--aggregation") == (3, "UNKNOWN")  # the flag wins


def test_the_readme_table_is_what_prove_answers_today() -> None:
    """README "Proving, not sampling": each plugin x aggregation flag on the shipped incidents (`make proofs`)."""
    from aggregation.proof_report import readme_with_table, table_markdown, table_rows

    readme = (Path_(__file__).resolve().parent.parent / "README.md").read_text()
    rows = table_rows(processes=2)  # as `make proofs` proves them: a cell per worker process
    assert readme_with_table(readme, table_markdown(rows)) == readme, "run `make proofs`"
    answers = {(r.scenario, r.plugin, r.aggregation): r.verdict for r in rows}
    # upstream's silent success and seed-pr's truncated-stamp loss are counterexamples; this plugin's rows hold
    assert answers["preemption_during_training", "upstream", True] == P.COUNTEREXAMPLE
    assert answers["preemption_during_training", "seed-pr", True] == P.COUNTEREXAMPLE
    assert all(v == P.PROVED for (_, plugin, _), v in answers.items() if plugin == "recoverable")


def test_go_s_map_order_decides_exactly_where_the_operator_s_wait_covers_the_gap_between_two_changes():
    """training-operator v1.8.0: a reconcile reads every pod when the work queue's one worker takes the job's key
    (`--controller-threads` 1), so a change heard before then is decided with the one that woke it. The Master's exit
    0, heard at 35.65 s, and the Worker's deletion mark 0.25 s later (its exit heard 0.5 s after the mark, past
    every wait in the box) meet in one reconcile, where `UpdateJobStatus`' map
    order decides, exactly where `job.reconcile_seconds` >= 0.25; below, the Master's success alone is the verdict."""
    proof = _proof(BUSY_MAP_ORDER_TIE, "outcome=RETRIED", ("job.reconcile_seconds=0..0.7",), "recoverable", True)
    assert proof.verdict == P.COUNTEREXAMPLE
    solver = P.Solver(proof.intervals, 60_000)
    wait = solver.vars["job.reconcile_seconds"]

    gap = Fraction(1, 4)
    by_order = {}
    for path in proof.paths:
        order = dict(path.choices).get("attempts[0].replica_map_order")
        if order is None:  # the Master's success decided alone
            assert not _can(solver, path, wait >= gap) and path.behaviour.final_phase == "SUCCEEDED", path.witness
        else:
            assert not _can(solver, path, wait < gap), path.witness
            by_order.setdefault(order, set()).add(path.behaviour.final_phase)
    # the Master first: Succeeded, and nothing to read; the Worker first: Failed, and the node retries
    assert by_order == {"MASTER_FIRST": {"SUCCEEDED"}, "WORKER_FIRST": {"RETRIED_THEN_SUCCEEDED"}}


def test_where_the_operator_would_re_create_a_deleted_pod_the_box_holds_a_refused_region_and_elsewhere_is_decided():
    """training-operator v1.8.0 `pkg/controller.v1/common/pod.go` `ReconcilePods` creates a new pod in an empty slot
    (`createNewPod`), and the kubelet removes a deleted pod once its final status is written. In the shipped
    pod-deletion preemption the upstream plugin's worker-1 exits 0 0.73 s after its mark (IgnoreOutputs: no upload).
    With the work queue's wait below that, the mark is read while the pod runs: Failed and retried, proved over the
    whole range. At 0.73 s the
    read and the heard exit share an instant: the object is still there and counts by its phase, exit 0, so the elastic
    job is Succeeded and the preemption silent, at that point alone. Past it a real operator may find the pod gone and
    re-create it, which the model does not play: that region is refused, exactly (`reconcile_seconds > 0.73`), and is
    neither a counterexample nor part of a proof. The counterexample at 0.73 s stands; for the recoverable plugin,
    which keeps the claim everywhere else (its pod uploads its report first, and exits 0.78 s after the mark), the
    answer is UNKNOWN, naming the refused region."""
    deletion = "preemption_by_pod_deletion"
    below = _proof(deletion, "retries", ("job.reconcile_seconds=0..0.72",), "upstream", True)
    assert below.verdict == P.PROVED and {p.behaviour.final_phase for p in below.paths} == {"RETRIED_THEN_SUCCEEDED"}
    assert not below.refusals
    whole = _proof(deletion, "retries", ("job.reconcile_seconds=0..2",), "upstream", True)
    assert whole.verdict == P.COUNTEREXAMPLE
    [silent] = whole.counterexamples
    assert silent.witness == {"job.reconcile_seconds": Fraction("0.73")}
    assert silent.behaviour.final_phase == "SUCCEEDED_SILENTLY"
    [refused] = whole.refusals
    assert whole.refusal_conditions == (("reconcile_seconds > 0.73",),)
    assert refused.behaviour.outcome == "REFUSED" and "ReconcilePods -> createNewPod" in refused.refused
    replayed = whole.replay(refused)
    assert isinstance(replayed, PodRecreation) and str(replayed) == refused.refused
    recoverable = _proof(deletion, "retries", ("job.reconcile_seconds=0..2",), "recoverable", True)
    assert recoverable.verdict == P.UNKNOWN and not recoverable.reason and not recoverable.counterexamples
    assert recoverable.refusal_conditions == (("reconcile_seconds > 0.78",),)
    # a table row says so too, not only "UNKNOWN" as if the budget had run out
    from aggregation.proof_report import _table_answer

    assert _table_answer(recoverable) == "**UNKNOWN** (10 paths; the model refuses on 1 of them)"


def test_prove_names_the_refused_region_and_exits_unknown(tmp_path) -> None:
    """What a reader sees: the refused region's condition, a point in it and the model's line there, the count of paths
    the claim holds on, and exit 3 (UNKNOWN); the JSON lists the region with its reason."""
    args = ("prove", "preemption_by_pod_deletion", "--claim", "retries", "--plugin", "recoverable")
    args += ("--vary", "job.reconcile_seconds=0..2", "--vary", "timings.upload_seconds=0.05..3")
    shown = _aggsim(*args)
    assert shown.returncode == 3, shown.stderr
    assert "The model refuses on 2 of the 110 paths, where:" in shown.stdout
    assert "reconcile_seconds - upload_seconds > 0.73" in shown.stdout
    assert "The claim holds on the other 108 paths." in shown.stdout
    assert "e.g. at job.reconcile_seconds=" in shown.stdout and "(ReconcilePods -> createNewPod)" in shown.stdout
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80
    document = json.loads(_aggsim(*args, "--json").stdout)
    assert document["verdict"] == "UNKNOWN" and document["reason"] is None and not document["counterexamples"]
    assert [r["final_phase"] for r in document["refusals"]] == ["REFUSED", "REFUSED"]
    assert all("createNewPod" in r["reason"] and r["condition"] for r in document["refusals"])


def test_a_witness_names_its_discrete_choices_and_its_map_order_so_simulate_replays_it(tmp_path) -> None:
    """A counterexample's witness is what a reader types into the scenario to see it: its discrete values (an enum by
    its name, as in a scenario file) and, where Go's map order decided the job, the order the path took (`prove`
    explores both: `operator.py`, `UpdateJobStatus`). Setting them and simulating gives the behaviour reported."""
    result = _aggsim(
        "prove", MAP_ORDER_TIE, "--claim", "outcome=RETRIED", "--plugin", "upstream", "--no-aggregation",
        "--vary", "propeller.observation_delay_seconds=0..10",
        "--vary", "job.clean_pod_policy=CLEAN_POD_POLICY_NONE,CLEAN_POD_POLICY_ALL",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "job.clean_pod_policy in {CLEAN_POD_POLICY_NONE, CLEAN_POD_POLICY_ALL}" in result.stdout
    witness = " ".join(result.stdout.split("A witness: ", 1)[1].split("\n  SUCCEEDED")[0].split())  # wrapped at 80
    assert witness.startswith("job.clean_pod_policy=CLEAN_POD_POLICY_NONE, attempts[0].replica_map_order=MASTER_FIRST")
    assert "SUCCEEDED: #0 Succeeded -> SUCCEED" in result.stdout
    text = Path_(MAP_ORDER_TIE).read_text().replace("attempts {", "attempts { replica_map_order: MASTER_FIRST")
    pinned = tmp_path / "pinned.textproto"
    pinned.write_text(text)
    simulated = _aggsim("simulate", str(pinned), "--plugin", "upstream", "--no-aggregation", "--json")
    assert json.loads(simulated.stdout)["final_phase"] == "SUCCEEDED"
    assert _aggsim("simulate", MAP_ORDER_TIE, "--plugin", "upstream").returncode == 2


SILENT_AFTER_A_RETRY = """
name: "silent_after_a_retry"
plugin: UPSTREAM
job { pods: "w0" pods: "w1" nproc_per_node: 1 }
task { retries: 2 training_seconds: 120 interruptible: true }
propeller { error_aggregation: true observation_delay_seconds: 1 }
attempts { events { at_seconds: 20 pod: "w1" preemption { pod_deleted: true } } }
attempts { events { at_seconds: 30.6 pod: "w1" preemption {} } }
"""


def test_a_silent_success_after_a_retry_breaks_the_retries_claim_and_counts_as_silent(tmp_path) -> None:
    """The first attempt's deleted pod fails the job and is retried; the second's preemption is upstream's
    IgnoreOutputs, and the node ends SUCCEEDED_SILENTLY: that preempted attempt was never retried. The headline
    (`explore.headline`) follows how the node ended, so `retries` fails everywhere and a sweep counts it silent."""
    path = tmp_path / "silent_after_a_retry.textproto"
    path.write_text(SILENT_AFTER_A_RETRY)
    box = ("attempts[1].events[0].at_seconds=30..31",)
    proof = _proof(str(path), "retries", box, "upstream", True)
    assert proof.verdict == P.COUNTEREXAMPLE and len(proof.counterexamples) == len(proof.paths)  # everywhere
    assert {p.behaviour.final_phase for p in proof.paths} == {"SUCCEEDED_SILENTLY"}
    assert {p.behaviour.outcome for p in proof.paths} == {"SUCCEEDED_SILENTLY"}


def test_a_node_that_waits_for_ever_breaks_the_retries_claim() -> None:
    """max-workflow-retries -1 (uint32's largest): the failing rounds never abort and the node is STILL_RUNNING, so
    the preempted attempt is never retried."""
    text = read_scenario("rounds_keep_failing").message
    text.propeller.max_workflow_retries = 2**32 - 1
    source = parse_scenario_source(text_format.MessageToString(text), "rounds_for_ever.textproto")
    interval = P.parse_range("attempts[0].events[1].at_seconds=30..31", source.message)
    proof = P.prove(source, P.parse_claim("retries", source.message), [interval], "recoverable", True)
    assert proof.verdict == P.COUNTEREXAMPLE
    assert "STILL_RUNNING" in {p.behaviour.final_phase for p in proof.counterexamples}


OUTAGE_AND_TRUNCATION = """
name: "outage_and_truncation"
plugin: RECOVERABLE
job { pods: "a" pods: "b" }
task { retries: 1 training_seconds: 60 }
propeller { error_aggregation: true observation_delay_seconds: 0.5 round_retry_seconds: 0.3 max_workflow_retries: 4 }
attempts {
  events { at_seconds: 20 pod: "a" truncated_upload { keep_bytes: 3 } }
  events { at_seconds: 21 pod: "a" preemption {} }
  events { at_seconds: 21.5 storage_outage { duration_seconds: 1 } }
}
"""


@pytest.mark.parametrize(
    "command, signum, after",
    [("prove", 2, 0.9), ("prove", 2, 1.7), ("prove", 15, 1.3), ("sweep", 2, 1.1)],
)
def test_a_signal_while_z3_works_ends_in_one_line_never_a_verdict_or_a_hang(tmp_path, command, signum, after):
    """A signal's exception raised inside z3's ctypes calls became an internal error (ArgumentError) or an ignored
    traceback, and z3's own Ctrl-C handling took SIGINT for a cancelled check (UNKNOWN, exit 3) or spun for ever.
    Now z3 leaves SIGINT alone and a signal waits for the next safe point (`aggregation.interrupts`): one line,
    128 + the signal, nothing on stdout. (This box takes about 35 s to explore.)"""
    import signal as signals
    import time

    path = tmp_path / "outage_and_truncation.textproto"
    path.write_text(OUTAGE_AND_TRUNCATION)
    box = ["--vary", "attempts[0].events[2].at_seconds=21..30", "--vary", "propeller.observation_delay_seconds=0..3"]
    claim = ["--claim", "phase!=SUCCEEDED"] if command == "prove" else ["--plugin", "recoverable"]
    started = time.monotonic()
    code, out, err = interrupt_when(
        [command, str(path), *claim, *box], signum, lambda: time.monotonic() >= started + after
    )
    name = signals.Signals(signum).name
    assert (code, out) == (128 + signum, "")
    assert err == f"aggsim: interrupted ({name}); every process it started is stopped\n"


#: One z3 check that takes minutes (the pigeonhole principle for `pigeons` pigeons, which z3 shows unsat only by
#: exhausting the cases), run the way `aggsim prove` runs its checks: the CLI's signal handlers, `holding`, the
#: prover's `Solver`. A signal ends the process with exit 5 and its number; the check's own answer is printed.
LONG_CHECK = """
import signal, sys
import z3
from aggregation import cli, interrupts, prove

for signum in cli.INTERRUPTING_SIGNALS:
    signal.signal(signum, cli._raise_interrupted)
signal.signal(signal.SIGUSR1, lambda signum, frame: None)  # a handler of someone else's: not an interruption
pigeons = int(sys.argv[1])
solver = prove.Solver([], 600_000)
held = [[z3.Bool(f"p{i}_{j}", solver.ctx) for j in range(pigeons - 1)] for i in range(pigeons)]
for row in held:
    solver.solver.add(z3.Or(row))
for j in range(pigeons - 1):
    for a in range(pigeons):
        for b in range(a + 1, pigeons):
            solver.solver.add(z3.Or(z3.Not(held[a][j]), z3.Not(held[b][j])))
with interrupts.holding(cli.INTERRUPTING_SIGNALS):
    print("checking", flush=True)
    try:
        print(solver.check(), flush=True)
    except cli.Interrupted as e:
        print("interrupted", e.signum, flush=True)
        sys.exit(5)
"""


def _signal_during_a_check(pigeons: int, signum: int) -> tuple[int, str]:
    """Start LONG_CHECK, send `signum` once its check has begun; its exit code and output (reaped in any case)."""
    import time

    check = subprocess.Popen([sys.executable, "-c", LONG_CHECK, str(pigeons)], stdout=subprocess.PIPE, text=True)
    try:
        assert check.stdout.readline() == "checking\n"
        time.sleep(0.3)  # into z3's C code, where no Python-level handler runs
        check.send_signal(signum)
        out, _ = check.communicate(timeout=30)  # the check alone takes minutes
    finally:
        check.kill()
        check.wait()
    return check.returncode, out


@pytest.mark.parametrize("signum", [2, 15])
def test_a_signal_cancels_a_long_z3_check_at_once(signum):
    """A signal's Python-level handler runs only when z3's C call returns: Ctrl-C waited for the check, up to its
    timeout (a minute). `interrupts` hears the signal on a wakeup pipe and cancels the check, and the safe point
    after it raises the signal before anything reads the cancelled check's unknown."""
    assert _signal_during_a_check(12, signum) == (5, f"interrupted {signum}\n")


def test_a_signal_that_is_no_interruption_leaves_the_check_alone():
    """Only the CLI's interrupting signals cancel: a cancelled check answers unknown, which would be a wrong
    UNKNOWN for a signal some other handler takes and the run goes on from."""
    assert _signal_during_a_check(10, signal.SIGUSR1) == (0, "unsat\n")  # the check takes a few seconds


def test_a_value_listed_twice_is_refused_by_prove_as_by_sweep() -> None:
    """`explore.listed_values` is the one rule: a repeated value is a mistake for both (prove de-duplicated it)."""
    source = read_scenario(PREEMPTION)
    with pytest.raises(ScenarioError, match=r"2 is listed twice"):
        P.parse_range("task.retries=1,2,2", source.message)
    with pytest.raises(ScenarioError, match=r"train-worker-0 is listed twice"):
        P.parse_range("attempts[0].events[1].pod=train-worker-0,train-worker-0", source.message)


def test_json_gives_every_counterexample_path_its_exact_condition() -> None:
    """README: `--json` carries each path's `exact_condition`; only the first `CONDITIONS` were given (88 of 96 null).
    Past them the condition is as the run recorded it: it holds at the path's own witness."""
    command = [
        "prove", "sibling_user_error_cleanup", "--claim", "genuine-error-wins", "--plugin", "seed-pr",
        "--no-aggregation", "--vary", "job.pod_status_seconds=0..5", "--vary", "job.cleanup_seconds=0..1", "--json",
    ]  # fmt: skip
    answer = json.loads(_aggsim(*command).stdout)
    paths = answer["counterexamples"]
    assert len(paths) > P.CONDITIONS and all(p["exact_condition"] for p in paths)
    assert [p["condition"] is None for p in paths] == [i >= P.CONDITIONS for i in range(len(paths))]


def test_a_path_budget_equal_to_the_paths_proves() -> None:
    """The budget is spent on a path run, not on ruling out the empty regions left: `--max-paths` equal to the box's
    path count used to answer UNKNOWN, "before every path was explored"."""
    box = ["--vary", SEED_BOX[0], "--vary", "timings.upload_seconds=0.05..3"]  # 18 paths
    command = ["prove", PREEMPTION, "--claim", "retries", "--plugin", "recoverable", *box, "--json"]
    paths = json.loads(_aggsim(*command).stdout)["paths"]
    exact = json.loads(_aggsim(*command, "--max-paths", str(paths)).stdout)
    short = json.loads(_aggsim(*command, "--max-paths", str(paths - 1)).stdout)
    assert (exact["verdict"], exact["reason"]) == ("PROVED", None)
    assert short["verdict"] == "UNKNOWN" and "before every path was explored" in short["reason"]


def test_a_code_claim_matches_codes_that_hold_a_pipe_and_names_a_code_no_path_reaches() -> None:
    """`code!=<typo>` holds everywhere, truly: the answer stays, and says no path ends with that code. Propeller's
    `RetriesExhausted|USER:Recoverable` holds the `|` that separates alternatives: `code!=` it used to be PROVED."""
    box = ["--vary", SEED_BOX[0]]
    command = ["prove", PREEMPTION, "--claim", "code!=USER:Recoverabl", "--plugin", "upstream", *box]
    text = _aggsim(*command).stdout
    assert "note: no path ends with a code USER:Recoverabl names (they end with" in " ".join(text.split())
    assert json.loads(_aggsim(*command, "--json").stdout)["codes_never_reached"] == ["USER:Recoverabl"]
    whole = "RetriesExhausted|USER:Recoverable"  # propeller's code when the retries are spent: "|" is in it
    reached = json.loads(
        _aggsim("prove", PREEMPTION, "--claim", f"code!={whole}", "--vary", "task.retries=0,1", "--json").stdout
    )
    assert reached["codes_never_reached"] == [] and reached["verdict"] == "COUNTEREXAMPLE"  # it said PROVED
    for part in ("USER:Recoverable", "RetriesExhausted"):  # only a part of the code: the claim matches whole codes
        claim = f"code!={part}"
        partial = json.loads(
            _aggsim("prove", PREEMPTION, "--claim", claim, "--vary", "task.retries=0,1", "--json").stdout
        )
        assert partial["verdict"] == "PROVED" and partial["codes_never_reached"] == [part]


def test_a_region_map_names_a_whole_number_field_as_the_reason() -> None:
    """An integer field's LO..HI is the set of its whole values, which a region map of two continuous fields cannot
    draw: the message says so (it used to say two ranges were needed, when two were given)."""
    result = _aggsim("sweep", PREEMPTION, "--vary", "task.retries=0..3", "--vary", SEED_BOX[0])
    assert result.returncode == 2 and "task.retries=0..3: an exact region map draws two continuous fields" in (
        result.stderr
    )
