"""Races: what a real run of a scenario may end in (`aggregation.neighbourhood`).

A real pod names its error file `error-<uuid4 hex>.pb` (flytekit `entrypoint.py` `_build_error_file_name`, with
`_F_DES` set), and propeller's earliest-error reader keeps the first file the store lists when stamps tie
(flyteidl/flyte v1.16.8 `flytepropeller/pkg/controller/nodes/task/k8s/.../remote_file_output_reader.go`,
`earliestFileErrorReader.ReadError`: only a strictly earlier stamp replaces the current pick). So a tie is a race
in a real run even though the simulator's names are fixed by the scenario's seed.
"""

from __future__ import annotations

import random

import pytest

from aggregation.neighbourhood import QUICKER_MACHINE, jittered, neighbourhood
from aggregation.readers import RULE_TIE
from aggregation.scenario import parse_scenario
from aggregation.simulate import simulate

# Two pods of one fork worker; pod 0's worker raises and pod 1's breaks on the lost peer within the same second,
# so upstream's whole-second stamps tie (measured with real pods: the survivor's file won 5 runs of 6).
TIED = """
name: "tied"
plugin: UPSTREAM
job { pods: "train-worker-0" pods: "train-worker-1" nproc_per_node: 1 start_method: FORK }
task { retries: 0 outputs_declared: true training_seconds: 30 }
propeller { observation_delay_seconds: 1 error_aggregation: true }
attempts { events { at_seconds: 12.4 pod: "train-worker-0" worker_error { message: "ValueError: bad batch" } } }
"""


def test_a_tie_on_stamps_is_a_race_between_the_tied_files():
    spec = parse_scenario(TIED)
    assert simulate(spec).attempts[0].read.rule == RULE_TIE
    rng = random.Random(7)
    tied_winners = set()
    for _ in range(64):
        attempt = simulate(jittered(spec, rng)).attempts[0]
        if attempt.read.rule == RULE_TIE:
            tied_winners.add(attempt.outcome.error.worker)
    assert tied_winners == {"train-worker-0", "train-worker-1"}
    assert {dict(key)["attempt 0 error"][2] for key in neighbourhood(spec)} == tied_winners


def test_without_aggregation_the_file_name_is_fixed_and_the_verdict_is_exact():
    """With aggregation off every pod writes `error.pb` and the last writer wins: names cannot decide anything."""
    spec = parse_scenario(TIED.replace("error_aggregation: true", "error_aggregation: false"))
    assert len(neighbourhood(spec)) == 1


# One pod of two spawn workers: the workers return at 20.8 and the kubelet's SIGTERM comes 1.55 s later. Whether the
# agent is still joining its finished workers (the signal is a preemption: upstream writes nothing, the job
# Succeeded) or has returned (the pod is killed, the job Failed) depends on how fast the workers' processes go,
# which varies with the machine (measured: 1.0-2.6 s). CI saw the second where this machine sees the first.
LATE_SIGNAL = """
name: "late-signal"
plugin: UPSTREAM
job { pods: "train-worker-0" nproc_per_node: 2 monitor_interval_seconds: 0.5 }
task { retries: 0 outputs_declared: true interruptible: true training_seconds: 30 }
propeller { observation_delay_seconds: 1.7 }
attempts {
  events { at_seconds: 20.785 completion {} }
  events { at_seconds: 22.334 pod: "train-worker-0" preemption {} }
}
"""


def test_a_signal_near_the_agent_s_return_is_a_race_between_preemption_and_a_killed_pod():
    """torch `MultiprocessContext._poll` joins finished workers until their processes are gone, and the pods' phases
    move by up to half their value in the neighbourhood (`PHASE_SPREAD`): the default join (2.4 s) puts the
    signal inside it, a quicker one after the agent's return (`aggregation/pods.py` `Pod.sigterm`), and between the two
    the copies whose signal meets torch's handler still installed after the return (upstream) are refused."""
    from aggregation.neighbourhood import SIGNAL_UNDER_TORCH_HANDLER

    spec = parse_scenario(LATE_SIGNAL)
    outcomes = neighbourhood(spec)
    jobs = {dict(key)["attempt 0 job"] for key in outcomes if key != SIGNAL_UNDER_TORCH_HANDLER}
    assert jobs == {"Succeeded", "Failed"} and SIGNAL_UNDER_TORCH_HANDLER in outcomes


def test_on_a_busy_machine_a_preemption_seconds_after_the_modelled_exit_is_a_race():
    """The pods' phases slow down together under load (`jittered(load=)`): training completes at 11.937 s and the
    pod exits at 15.15 s, 3.6 s before a preemption. Quiet, no jitter reaches it; three times slower, the SIGTERM
    finds the pod still running (seen in CI: the upload came 5.8 s after training, not 3.2 s)."""
    spec = parse_scenario(
        """
        job { pods: "train-worker-0" nproc_per_node: 2 monitor_interval_seconds: 1.0 }
        task { retries: 1 training_seconds: 28.308 }
        propeller { observation_delay_seconds: 3.219 }
        plugin: UPSTREAM
        timings { agent_shutdown_seconds: 0.053 }
        attempts {
          events { at_seconds: 11.937 completion {} }
          events { at_seconds: 18.752 pod: "train-worker-0" preemption {} }
        }
        """
    )
    assert len(neighbourhood(spec)) == 1
    assert len(neighbourhood(spec, load=3.0)) > 1


def test_a_real_run_outside_the_neighbourhood_is_reported_with_what_differs_and_its_timeline():
    """A real run's files stay on the CI machine: its report in the log is all the evidence there is."""
    from conftest import SCENARIOS, unpredicted_run_evidence

    from aggregation.record import execution_to_proto
    from aggregation.scenario import load_scenario

    path = str(SCENARIOS / "preemption_during_training.textproto")
    silent = execution_to_proto(simulate(load_scenario(path, "upstream")))
    retried = execution_to_proto(simulate(load_scenario(path, "recoverable")))
    evidence = unpredicted_run_evidence(retried, silent, "aggsim: the run's files are kept in /tmp/x\n")
    assert "final_phase: simulated 'RETRIED_THEN_SUCCEEDED', real 'SUCCEEDED_SILENTLY'" in evidence
    assert "attempts: simulated 2, real 1" in evidence
    assert "the run's files are kept in /tmp/x" in evidence
    assert "real run: attempt 0" in evidence and "SIGTERM" in evidence
    assert "attempt 1" not in evidence.split("real run: attempt 0")[1]  # the real run's own timeline, not the model's
    assert max(map(len, evidence.splitlines())) <= 100


def test_a_shared_real_run_s_evidence_ends_with_its_pods_last_log_lines_in_the_attempt_that_differs(tmp_path):
    """`conftest.RealRun.evidence`: the run's kept directory (under its own TMPDIR) stays on the CI machine, so the
    log shows the last lines of each pod's log where the run differs; an attempt that agrees adds none."""
    import json

    from conftest import SCENARIOS, RealRun
    from google.protobuf import json_format

    from aggregation.record import execution_to_proto
    from aggregation.scenario import load_scenario

    path = str(SCENARIOS / "preemption_during_training.textproto")
    simulated = json_format.MessageToDict(
        execution_to_proto(simulate(load_scenario(path, "recoverable"))), preserving_proto_field_name=True
    )
    real = json.loads(json.dumps(simulated))
    real["attempts"][0]["job_condition"] = "Failed"
    kept = tmp_path / "aggsim-run-local-x"
    for attempt in (0, 1):
        (kept / f"attempt-{attempt}" / "work").mkdir(parents=True)
        lines = [f"attempt {attempt} line {n}" for n in range(30)]
        (kept / f"attempt-{attempt}" / "work" / "train-worker-1.log").write_text("\n".join(lines))
    stdout = json.dumps({"real": real, "simulated": simulated})
    evidence = RealRun(("aggsim",), 1, stdout, "aggsim: first worker failure: X\n", tmp_path).evidence
    assert "attempt 0 job: simulated 'Succeeded', real 'Failed'" in evidence
    assert "--- attempt 0, train-worker-1's log, last lines:" in evidence
    assert evidence.rstrip().endswith("attempt 0 line 29") and "attempt 0 line 17" not in evidence
    assert "attempt 1 line" not in evidence


def test_a_real_run_that_disagrees_with_the_simulator_fails_with_the_evidence_and_one_that_agrees_passes():
    """The check every conformance test makes of its real run (`conftest.assert_agrees_with_the_simulator`)."""
    from conftest import SCENARIOS, assert_agrees_with_the_simulator

    from aggregation.record import execution_to_proto
    from aggregation.scenario import load_scenario

    path = str(SCENARIOS / "preemption_during_training.textproto")
    recoverable = load_scenario(path, "recoverable")
    assert_agrees_with_the_simulator(recoverable, execution_to_proto(simulate(recoverable)))
    silent = execution_to_proto(simulate(load_scenario(path, "upstream")))
    with pytest.raises(AssertionError) as failure:
        assert_agrees_with_the_simulator(recoverable, silent, "aggsim: the run's files are kept in /tmp/x\n")
    assert "final_phase: simulated 'RETRIED_THEN_SUCCEEDED', real 'SUCCEEDED_SILENTLY'" in str(failure.value)
    assert "the run's files are kept in /tmp/x" in str(failure.value)


def test_a_quicker_machine_s_neighbourhood_finishes_a_worker_group_before_a_late_preemption():
    """torch `_invoke_run` returns once the agent's look finds every worker gone; with spawn workers that teardown
    (`FINISHED_WORKER_EXIT_SECONDS`, 2.4 s, measured on a slower machine) took 0.6-0.9 s for a 1-pod job here on
    2026-12-03, so a preemption 1.55 s after completion came after the outputs: the pod succeeded for real."""
    spec = parse_scenario(
        """
        job { pods: "train-worker-0" nproc_per_node: 2 monitor_interval_seconds: 0.5 }
        task { retries: 1 outputs_declared: true training_seconds: 30.166 }
        plugin: UPSTREAM
        attempts {
          events { at_seconds: 20.785 completion {} }
          events { at_seconds: 22.334 pod: "train-worker-0" preemption {} }
        }
        """
    )
    from aggregation.neighbourhood import SIGNAL_UNDER_TORCH_HANDLER

    decisions = {  # refused copies aside: the signal meets torch's handler, which upstream leaves installed
        fastest: {
            dict(key)["attempt 0 decision"]
            for key in neighbourhood(spec, fastest=fastest)
            if key != SIGNAL_UNDER_TORCH_HANDLER
        }
        for fastest in (1.0, QUICKER_MACHINE)
    }
    assert decisions[1.0] == {"RETRY"}  # IgnoreOutputs before the exit barrier: OutputsNotFound, retryable
    assert decisions[QUICKER_MACHINE] == {"RETRY", "SUCCEED"}


def test_a_copy_where_the_operator_would_re_create_a_deleted_pod_counts_as_a_refusal_of_its_own():
    """training-operator v1.8.0 `ReconcilePods` creates a new pod in the slot of a deleted pod the kubelet has removed,
    which the model does not play (`operator.PodRecreation`). The shipped pod-deletion preemption with the work
    queue's wait (0.73 s) right at the upstream pod's exit after its mark: moved a little, the mark is read while the
    pod runs (Failed, retried), at its heard exit (counted by its phase: exit 0, Succeeded) or after it (refused). A
    real run may meet the refusal in the operator it drives, so the neighbourhood counts it as a verdict, a race."""
    from conftest import SCENARIOS

    from aggregation.neighbourhood import RE_CREATED_POD

    text = (SCENARIOS / "preemption_by_pod_deletion.textproto").read_text()
    spec = parse_scenario(text.replace("job {", "job { reconcile_seconds: 0.73", 1), "busy.textproto", "upstream")
    outcomes = neighbourhood(spec)
    assert RE_CREATED_POD in outcomes
    assert {dict(key).get("final_phase") for key in outcomes} == {None, "RETRIED_THEN_SUCCEEDED", "SUCCEEDED_SILENTLY"}


def test_a_copy_that_ends_in_its_first_second_is_a_verdict_of_the_neighbourhood_not_a_crash():
    """flyteplugins `common_operator.go` `ExtractCurrentCondition` may read a job's Created condition when its terminal
    one shares the whole second (`propeller_actor.CreatedInTheSameSecond`). A pod deleted at 1.2 s plays (Failed,
    retried); copies moved by up to 0.3 s can end before 1 s, where the model refuses: the neighbourhood counts them
    as a verdict of their own (it used to raise the refusal)."""
    from conftest import SCENARIOS

    from aggregation.neighbourhood import TERMINAL_IN_ITS_FIRST_SECOND

    text = (SCENARIOS / "preemption_by_pod_deletion.textproto").read_text()
    spec = parse_scenario(
        text.replace("at_seconds: 30.6", "at_seconds: 1.2").replace("at_seconds: 10 ", "at_seconds: 0.5 "), "early"
    )
    outcomes = neighbourhood(spec, samples=32)
    assert TERMINAL_IN_ITS_FIRST_SECOND in outcomes
    assert {dict(key).get("final_phase") for key in outcomes} == {None, "RETRIED_THEN_SUCCEEDED"}
