"""The simulator: shipped scenarios' verdicts, the pod/operator/engine rules, determinism, bad scenarios.

Pod rules mirror flytekit `entrypoint.py` `_dispatch_execute`, flytekitplugins-kfpytorch `task.py`
`PytorchElasticFunctionTask._execute`, torch elastic `PContext.start` / `SimpleElasticAgent.run` /
`errors/error_handler.py`; operator rules training-operator v1.8.0 `pytorchjob_controller.go`
`UpdateJobStatus`; propeller rules as in test_propeller.py.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import AGGSIM, LAGGING_MTIME, ROOT, SCENARIOS  # noqa: E402
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregation import defaults
from aggregation.cli import main
from aggregation.engine import Clock
from aggregation.explore import Variation, default_variations, outcome_of, shown_outcomes, sweep
from aggregation.kinds import CleanPodPolicy, Entrypoint, ReplicaMapOrder
from aggregation.operator import PodRecreation, TrainingOperator, UndecidedVerdict
from aggregation.propeller_actor import CreatedInTheSameSecond, DeletedWithinItsSecond
from aggregation.record import execution_to_json
from aggregation.report import sweep_to_json
from aggregation.scenario import ScenarioError, load_scenario, parse_scenario, read_scenario
from aggregation.simulate import simulate, simulate_each_map_order
from aggregation.timeline import What


def run(name: str, plugin: str):
    return simulate(load_scenario(str(SCENARIOS / f"{name}.textproto"), plugin))


def winning_code(execution, attempt=0):
    error = execution.attempts[attempt].outcome.error
    return error.code if error else None


# --- the shipped incident scenarios ------------------------------------------------------------

EXPECTED = {
    # scenario: {plugin: (final phase, attempts, first attempt's error code)}
    "preemption_during_training": {
        "upstream": ("SUCCEEDED_SILENTLY", 1, None),
        "seed-pr": ("RETRIED_THEN_SUCCEEDED", 2, "USER:Recoverable"),
        "recoverable": ("RETRIED_THEN_SUCCEEDED", 2, "USER:Recoverable"),
    },
    "preemption_during_training_no_aggregation": {
        "upstream": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),
        "seed-pr": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),
        "recoverable": ("RETRIED_THEN_SUCCEEDED", 2, "USER:Recoverable"),  # the survivor yields
    },
    "sibling_user_error_cleanup": {
        "upstream": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),
        "seed-pr": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),
        "recoverable": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),
    },
    "sibling_user_error_cleanup_no_aggregation": {
        "upstream": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),
        "seed-pr": ("RETRIED_THEN_SUCCEEDED", 2, "USER:Recoverable"),  # masked
        "recoverable": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),  # the cleanup's SIGTERM yields
    },
    "genuine_error_with_collateral_no_aggregation": {
        "upstream": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),  # with the consequence's message
        "seed-pr": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),
        "recoverable": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),  # the genuine one
    },
    "survivor_fails_from_peer_death": {
        "upstream": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),
        "seed-pr": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),
        "recoverable": ("RETRIED_THEN_SUCCEEDED", 2, "USER:Recoverable"),
    },
    "signal_during_first_rendezvous": {
        "upstream": ("RETRIED_THEN_SUCCEEDED", 2, "DownstreamSystemError"),
        "seed-pr": ("RETRIED_THEN_SUCCEEDED", 2, "DownstreamSystemError"),
        "recoverable": ("RETRIED_THEN_SUCCEEDED", 2, "USER:Recoverable"),
    },
    "sigkill_after_grace_period": {
        "upstream": ("RETRIED_THEN_SUCCEEDED", 2, "DownstreamSystemError"),
        "seed-pr": ("RETRIED_THEN_SUCCEEDED", 2, "DownstreamSystemError"),
        "recoverable": ("RETRIED_THEN_SUCCEEDED", 2, "DownstreamSystemError"),
    },
    "auto_resume_two_attempts": {
        "upstream": ("RETRIED_THEN_SUCCEEDED", 2, "OutputsNotFound"),
        "seed-pr": ("RETRIED_THEN_SUCCEEDED", 2, "USER:Recoverable"),
        "recoverable": ("RETRIED_THEN_SUCCEEDED", 2, "USER:Recoverable"),
    },
    # propeller's rounds on the clock: failed rounds are retried, a later round reads the prefix as it is then
    "storage_outage_during_the_read": {
        # the survivor's agent catches its failure at 38.5 s (its next look, at 37 s): the read at 35.4 s is before
        "upstream": ("SUCCEEDED_SILENTLY", 1, None),
        "seed-pr": ("RETRIED_THEN_SUCCEEDED", 2, "USER:Recoverable"),
        "recoverable": ("RETRIED_THEN_SUCCEEDED", 2, "USER:Recoverable"),
    },
    "truncated_error_pb_replaced": {
        "upstream": ("SUCCEEDED_SILENTLY", 1, None),  # upstream writes nothing: nothing to truncate
        "seed-pr": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),
        "recoverable": ("FAILED_PERMANENTLY", 1, None),  # its survivor waits 10 s: 11 rounds fail, abort
    },
    # any job shape: a recoverable worker error, a preemption, completion, each after a checkpoint
    "three_failures_3x1": {
        "upstream": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),  # peers' consequences tie on whole seconds
        "seed-pr": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),
        "recoverable": ("RETRIED_THEN_SUCCEEDED", 3, "USER:Recoverable"),
    },
    "three_failures_4x2": {
        "upstream": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),  # aggregation off: the last consequence
        "seed-pr": ("FAILED_PERMANENTLY", 1, "USER:RuntimeError"),
        "recoverable": ("RETRIED_THEN_SUCCEEDED", 3, "USER:Recoverable"),
    },
    # torch elastic max_restarts: a worker error absorbed by a restart; a survivor waiting for a lost peer
    "worker_error_restarted": {
        "upstream": ("SUCCEEDED", 1, None),
        "seed-pr": ("SUCCEEDED", 1, None),
        "recoverable": ("SUCCEEDED", 1, None),
    },
    "survivor_waits_for_a_lost_peer": {
        "upstream": ("SUCCEEDED_SILENTLY", 1, None),  # the survivor's timeout comes 20 s after the verdict
        "seed-pr": ("RETRIED_THEN_SUCCEEDED", 2, "USER:Recoverable"),
        "recoverable": ("RETRIED_THEN_SUCCEEDED", 2, "USER:Recoverable"),
    },
    # the preemption as a pod deletion: training-operator fails the job at the deletion mark, before any exit
    "preemption_by_pod_deletion": {
        "upstream": ("RETRIED_THEN_SUCCEEDED", 2, "DownstreamSystemError"),
        "seed-pr": ("RETRIED_THEN_SUCCEEDED", 2, "DownstreamSystemError"),
        "recoverable": ("RETRIED_THEN_SUCCEEDED", 2, "DownstreamSystemError"),
    },
    # RunPolicy.ActiveDeadlineSeconds: nothing happens at the deadline; the pods' successful exits fail the job
    "training_outlives_the_deadline": {
        "upstream": ("SUCCEEDED_SILENTLY", 1, None),  # the preemption's silent success comes before the deadline
        "seed-pr": ("FAILED_PERMANENTLY", 3, "USER:Recoverable"),  # each retry fails at its end, past the deadline
        "recoverable": ("FAILED_PERMANENTLY", 3, "USER:Recoverable"),
    },
    # RunPolicy.TTLSecondsAfterFinished: the job is gone before propeller looks, so every success is retried
    "ttl_deletes_the_job_before_propeller_looks": {
        "upstream": ("FAILED_PERMANENTLY", 4, "ResourceDeletedExternally"),
        "seed-pr": ("FAILED_PERMANENTLY", 4, "ResourceDeletedExternally"),
        "recoverable": ("FAILED_PERMANENTLY", 4, "ResourceDeletedExternally"),
    },
    "rounds_keep_failing": {
        "upstream": ("SUCCEEDED_SILENTLY", 1, None),
        "seed-pr": ("FAILED_PERMANENTLY", 1, None),  # the workflow is aborted: no task error at all
        "recoverable": ("FAILED_PERMANENTLY", 1, None),
    },
}


def test_every_shipped_scenario_has_an_expected_verdict():
    assert {p.stem for p in SCENARIOS.glob("*.textproto")} == set(EXPECTED)


@pytest.mark.parametrize("scenario, plugin", [(s, p) for s, plugins in EXPECTED.items() for p in plugins])
def test_shipped_scenario_verdict(scenario, plugin):
    phase, attempts, code = EXPECTED[scenario][plugin]
    execution = run(scenario, plugin)
    assert (execution.final_phase.value, len(execution.attempts), winning_code(execution)) == (phase, attempts, code)


def test_seed_incident_upstream_ends_green_with_nothing():
    """The incident: IgnoreOutputs -> no file, exit 0 -> job Succeeded -> ValidateOutput succeeds silently."""
    execution = run("preemption_during_training", "upstream")
    attempt = execution.attempts[0]
    assert attempt.job_condition == "Succeeded" and attempt.seen == ()
    assert attempt.exits["train-worker-1"][0] == 0


def test_pr_2064_case_genuine_error_wins_and_cleanup_is_visible():
    """Earliest strategy (seed-pr reports the cleanup's SIGTERM): the genuine error is older and wins."""
    execution = run("sibling_user_error_cleanup", "seed-pr")
    attempt = execution.attempts[0]
    assert attempt.read.selected.error.worker == "train-worker-0"
    assert any(u.error and u.error.code == "USER:Recoverable" for u in attempt.seen)  # the cleaned pod's
    assert not execution.masked_genuine_error


def test_aggregation_off_last_writer_masks_the_genuine_error():
    """Default reader reads error.pb only; seed-pr's cleanup report, uploaded later, overwrote the genuine one."""
    execution = run("sibling_user_error_cleanup_no_aggregation", "seed-pr")
    assert execution.masked_genuine_error
    assert [u.name for u in execution.attempts[0].seen] == ["error.pb", "error.pb"]


def test_survivor_stamp_truncation_decides_the_race():
    """torch `error_handler.py` stamps int(time.time()); only the recoverable plugin keeps the sub-second part."""
    seed = run("survivor_fails_from_peer_death", "seed-pr").attempts[0]
    ours = run("survivor_fails_from_peer_death", "recoverable").attempts[0]
    survivor = lambda attempt: next(u.error for u in attempt.uploads if u.pod == "train-worker-0")  # noqa: E731
    assert survivor(seed).timestamp == 30.0  # before the signal at 30.6 that caused it
    # ours: the survivor's failure is a consequence; it leaves the preempted pod's report standing
    assert not [u for u in ours.uploads if u.pod == "train-worker-0"]
    assert [e.file for e in ours.timeline if e.what is What.YIELDS and e.pod == "train-worker-0"]


def test_upstream_agent_dies_by_sigterm_before_its_handlers_exist():
    """PContext.start installs handlers after the first rendezvous: the agent dies of the SIGTERM that
    pyflyte-fast-execute (PID 1 by default) forwards to it, which exits 241; no file, job Failed."""
    attempt = run("signal_during_first_rendezvous", "upstream").attempts[0]
    assert attempt.exits["train-worker-1"][0] == 241
    assert attempt.uploads == () or all(u.pod != "train-worker-1" for u in attempt.uploads)
    assert attempt.job_condition == "Failed"


@pytest.mark.parametrize(
    "entrypoint, exit_code, exited_at",
    [("FAST_EXECUTE", 241, 1.0), ("INIT_THEN_EXECUTE", 143, 1.0), ("EXECUTE", 137, 31.0)],
)
def test_what_an_unhandled_sigterm_does_depends_on_the_container_s_pid_1(entrypoint, exit_code, exited_at):
    """A SIGTERM in the first rendezvous, before torch's `PContext.start` installs a handler. flytekit
    `entrypoint.py` `fast_execute_task_cmd` runs pyflyte-execute through `_run_subprocess`, which forwards SIGTERM
    and returns `Popen.wait()` (-15) to `exit`: 241. An init (tini) exits 128 + 15. pyflyte-execute as PID 1 is
    not killed at all: the kernel drops a signal a PID namespace's init has no handler for (`kernel/signal.c`
    `sig_task_ignored`, SIGNAL_UNKILLABLE), so the agent joins, trains, and dies of the SIGKILL 30 s later."""
    events = 'events { at_seconds: 1 pod: "a" preemption {} }'
    text = scenario_text(events).replace("task {", f"task {{ entrypoint: {entrypoint}")
    attempt = simulate(parse_scenario(text, "t.textproto", "upstream")).attempts[0]
    assert attempt.exits["a"] == (exit_code, exited_at)
    ignored = [e for e in attempt.timeline if e.what is What.SIGNAL_IGNORED]
    trained = any(e.what is What.RENDEZVOUS_DONE and e.actor == "a" for e in attempt.timeline)
    assert (bool(ignored), trained) == ((True, True) if entrypoint == "EXECUTE" else (False, False))
    assert attempt.job_condition == "Failed" and not [u for u in attempt.uploads if u.pod == "a"]


def test_a_pid_1_agent_on_its_way_out_is_not_killed_by_sigterm_and_its_job_succeeds():
    """After the agent returned, once CPython has finalized (0.45 s after the upload here; earlier, upstream's torch
    handler is refused: see below), a SIGTERM finds the default disposition: it kills a pod under
    pyflyte-fast-execute (241), but pyflyte-execute as PID 1 drops it (kernel `sig_task_ignored`) and exits 0 as it
    would have: the job Succeeds and the node with it (measured too: test_plugin_real)."""
    events = 'events { at_seconds: 30 completion {} } events { at_seconds: 33 pod: "a" preemption {} }'
    joined = "finished_worker_exit_seconds: 0.5"  # barrier passed at 32.5; a uploads at 32.55; both exit at 33.25
    outcomes = {}
    for entrypoint in ("FAST_EXECUTE", "EXECUTE"):
        spec = scenario(events, timings=joined, plugin="upstream")
        attempt = simulate(replace(spec, outputs_declared=True, entrypoint=Entrypoint[entrypoint])).attempts[0]
        outcomes[entrypoint] = (attempt.exits["a"], attempt.job_condition)
    assert outcomes == {
        "FAST_EXECUTE": ((241, pytest.approx(33.0)), "Failed"),
        "EXECUTE": ((0, pytest.approx(33.25)), "Succeeded"),
    }


def test_sigkill_after_grace_loses_everything():
    attempt = run("sigkill_after_grace_period", "recoverable").attempts[0]
    assert attempt.exits["train-worker-1"] == (137, 80.0)  # preempted at 60 s, 20 s of grace
    assert attempt.read is None  # job Failed: GetPhaseInfo reads no file


def test_second_attempt_resumes_from_the_first_attempts_checkpoint():
    """taskexec_context.go ComputePreviousCheckpointPath: attempt N gets attempt N-1's checkpoint."""
    execution = run("auto_resume_two_attempts", "recoverable")
    first, second = execution.attempts
    assert first.wrote_checkpoint and first.resumed_from is None
    assert second.resumed_from == 0
    assert any(u.name == "outputs.pb" for u in second.seen)


# --- pod and operator rules ----------------------------------------------------------------------

BASE = """
plugin: RECOVERABLE
job { pods: "a" pods: "b" %(job)s }
task { retries: 1 training_seconds: 100 }
propeller { error_aggregation: true observation_delay_seconds: %(delay)s }
timings { %(timings)s }
attempts { %(events)s }
%(extra)s
"""


def scenario_text(events="", job="", timings="", delay=10, extra=""):
    return BASE % {"events": events, "job": job, "timings": timings, "delay": delay, "extra": extra}


def scenario(events="", job="", timings="", delay=10, plugin=None, extra=""):
    return parse_scenario(scenario_text(events, job, timings, delay, extra), "t.textproto", plugin)


def test_seed_pr_stamps_after_worker_shutdown_recoverable_at_arrival():
    """SimpleElasticAgent.run shuts workers down before re-raising: a catch-time stamp is that much late."""
    events = 'events { at_seconds: 30.25 pod: "b" preemption {} }'
    for plugin, expected in (("seed-pr", 35.25), ("recoverable", 30.25)):
        attempt = simulate(scenario(events, timings="agent_shutdown_seconds: 5", plugin=plugin)).attempts[0]
        [mine] = [u for u in attempt.uploads if u.pod == "b"]
        assert mine.error.timestamp == pytest.approx(expected)
        assert mine.at == pytest.approx(35.30)


def test_a_worker_error_with_no_training_worker_to_fail_says_so_in_the_timeline():
    """`Pod.worker_error`: a scenario's worker error fails a worker only while the pod trains; real workers do the
    same (`localjob/workloads.py` `due`: nothing after the finish fires). Elsewhere the timeline says why it does
    not fire, and nothing else changes."""
    events = (
        'events { at_seconds: 1 pod: "a" worker_error {} } events { at_seconds: 20 completion {} } '
        'events { at_seconds: 22 pod: "b" worker_error {} } events { at_seconds: 30 pod: "a" worker_error {} }'
    )
    execution = simulate(scenario(events, delay=40))
    attempt = execution.attempts[0]
    said = [(e.at, e.actor, e.describe()) for e in attempt.timeline if e.what is What.WORKER_ERROR_NOT_RAISED]
    assert said == [
        (1, "a", "the scenario's worker error does not fire: its workers have not started (the first rendezvous)"),
        (22, "b", "the scenario's worker error does not fire: its workers have returned (training is complete)"),
        (30, "a", "the scenario's worker error does not fire: the pod has exited"),
    ]
    assert not any(e.what is What.WORKER_FAILED for e in attempt.timeline)
    assert (execution.final_phase.value, len(execution.attempts)) == ("SUCCEEDED", 1)


def test_signal_lost_in_fork_runs_until_sigkill():
    """A SIGTERM inside os.fork() is dropped by CPython's at-fork hooks: the agent runs on until SIGKILL."""
    spec = scenario(
        'events { at_seconds: 2.001 pod: "b" preemption { lands_during_fork: true } }', job="start_method: FORK"
    )
    attempt = simulate(spec).attempts[0]
    assert attempt.exits["b"] == (137, pytest.approx(32.001))


def test_non_elastic_job_succeeds_only_with_its_master():
    """UpdateJobStatus: non-elastic jobs are Succeeded when the Master succeeds."""
    events = 'events { at_seconds: 30 pod: "b" preemption {} }'
    elastic = simulate(scenario(events, plugin="upstream")).attempts[0]
    non_elastic = simulate(scenario(events, job="elastic: false", plugin="upstream")).attempts[0]
    assert elastic.job_terminal_at == pytest.approx(30.73)  # shutdown 0.03 + exit 0.7: IgnoreOutputs uploads nothing
    assert non_elastic.job_terminal_at > 31  # only when pod a (the master) exits


@pytest.mark.parametrize("aggregation", [True, False])
def test_a_non_elastic_job_s_master_writes_error_pb_with_no_worker_name(aggregation):
    """flyteplugins v1.16.8 `kfoperators/pytorch/pytorch.go` `BuildResource`: `updateEnvVars` (`_F_WN`, and `_F_DES`
    with aggregation) runs on the Worker replica spec only, so the Master has neither; flytekit `entrypoint.py`
    `_build_error_file_name` then names its file `error.pb` and `_get_worker_name` gives "". Its workers still
    write `error-<hex>.pb` with their names when aggregation is on."""
    events = 'events { at_seconds: 30 pod: "a" worker_error {} } events { at_seconds: 30 pod: "b" worker_error {} }'
    spec = replace(scenario(events, job="elastic: false", plugin="upstream"), error_aggregation=aggregation)
    attempt = simulate(spec).attempts[0]
    files = {u.pod: (u.name, u.error.worker) for u in attempt.uploads if u.error is not None}
    assert files["a"] == ("error.pb", "")
    if aggregation:
        assert files["b"][0].startswith("error-") and files["b"][1] == "b"
        elastic = simulate(scenario(events, plugin="upstream")).attempts[0]
        assert {u.pod: u.error.worker for u in elastic.uploads if u.error} == {"a": "a", "b": "b"}
    else:
        assert files["b"] == ("error.pb", "")


def test_a_master_s_error_pb_loses_a_tie_to_a_worker_s_file():
    """remote_file_output_reader.go `earliestFileErrorReader.ReadError` replaces the earliest only on a strictly
    earlier stamp, in listing order: `error-<hex>.pb` lists before the master's `error.pb` ('-' < '.'), so with
    equal stamps the worker's error is reported (worker "b"); a strictly earlier master's error (pod b's node clock
    runs 1 s ahead) is reported with no worker name."""
    tie = 'events { at_seconds: 30 pod: "a" worker_error {} } events { at_seconds: 30 pod: "b" worker_error {} }'
    attempt = simulate(scenario(tie, job="elastic: false", plugin="upstream")).attempts[0]
    stamps = {u.error.timestamp for u in attempt.seen if u.error is not None}
    assert len(stamps) == 1 and attempt.outcome.error.worker == "b"
    ahead = 'pod_timings { pod: "b" timings { clock_offset_seconds: 1 } }'
    attempt = simulate(scenario(tie, job="elastic: false", plugin="upstream", extra=ahead)).attempts[0]
    assert (attempt.outcome.error.path, attempt.outcome.error.worker) == ("error.pb", "")


@pytest.mark.parametrize("plugin", ["upstream", "seed-pr", "recoverable"])
@pytest.mark.parametrize("elastic", [True, False])
@pytest.mark.parametrize("deleted", ["a", "b"])
def test_a_deleted_running_pod_fails_the_job_at_its_deletion_mark(plugin, elastic, deleted):
    """training-operator v1.8.0 `pkg/core/status.go` `UpdateJobReplicaStatuses`: a Running pod with a deletion
    timestamp counts as failed, and `UpdateJobStatus` fails the job (RestartPolicy Never) at the reconcile the mark
    wakes, before the pod exits, whatever it then writes. Propeller (`common_operator.go` `GetPhaseInfo`) reads no file
    for a Failed job: a retryable DownstreamSystemError. Master (pod a, non-elastic) or worker alike."""
    events = f'events {{ at_seconds: 30 pod: "{deleted}" preemption {{ pod_deleted: true }} }}'
    execution = simulate(scenario(events, job="" if elastic else "elastic: false", plugin=plugin))
    attempt = execution.attempts[0]
    assert (attempt.job_condition, attempt.job_terminal_at) == ("Failed", pytest.approx(30))
    at_the_mark = [e.what for e in attempt.timeline if e.at == pytest.approx(30)]
    assert at_the_mark[0] is What.POD_DELETED and What.JOB_TERMINAL in at_the_mark
    assert (attempt.outcome.error.code, attempt.decision.decision.value) == ("DownstreamSystemError", "RETRY")
    assert execution.final_phase.value == "RETRIED_THEN_SUCCEEDED"


def _tie_with_a_exit(job: str) -> str:
    """Pod a's worker fails at 30 s (it uploads and exits 0 at 34.25 s), and pod b is deleted at that very moment."""
    events = 'events { at_seconds: 30 pod: "a" worker_error {} }'
    exit_at = simulate(scenario(events, job=job, plugin="upstream")).attempts[0].exits["a"]
    assert exit_at == (0, pytest.approx(34.25))
    return events + f' events {{ at_seconds: {exit_at[1]!r} pod: "b" preemption {{ pod_deleted: true }} }}'


def test_one_reconcile_sees_a_success_and_a_failure_and_flyte_reads_succeeded():
    """training-operator v1.8.0 `pytorchjob_controller.go` `UpdateJobStatus`, elastic (Worker replicas only): one
    pass sets Succeeded (a worker succeeded), then Failed after it (a worker failed, `failed > 0`); `pkg/util/status.go`
    `setCondition` keeps both true. flyteplugins v1.16.8 `common_operator.go` `ExtractCurrentCondition` sorts them
    by LastTransitionTime (equal: whole seconds, one pass), a stable sort for so few, and takes the first true one:
    Succeeded. A reconcile reads every change of its instant, whatever order the model's callbacks ran in."""
    attempt = simulate(scenario(_tie_with_a_exit(""), plugin="upstream")).attempts[0]
    assert attempt.exits["b"][1] == pytest.approx(34.25)  # b is deleted (and exits) as a exits 0
    assert (attempt.job_condition, attempt.job_terminal_at) == ("Succeeded", pytest.approx(34.25))
    [terminal] = [e for e in attempt.timeline if e.what is What.JOB_TERMINAL]
    assert "pod a succeeded" in terminal.reason and "pod b's failure in the same reconcile" in terminal.reason
    assert attempt.outcome.error.worker == "a"  # a Succeeded job: propeller reads a's error file


def test_a_non_elastic_master_s_success_beside_a_failed_worker_in_one_reconcile_is_refused(tmp_path):
    """`UpdateJobStatus` ranges over the replica specs, a Go map, in random order: the Master's branch sets Succeeded
    and returns, the Worker's sets Failed, after which `setCondition` ignores Succeeded. With both in one reconcile
    the verdict is Go's coin toss: the simulator refuses, in one line naming the field that pins it, rather than pick
    one."""
    tie = scenario_text(_tie_with_a_exit("elastic: false"), job="elastic: false")
    with pytest.raises(
        ScenarioError,
        match=r"Go's random map order: master a succeeded and worker b failed in the same "
        r"reconcile; set attempts\[0\]\.replica_map_order to MASTER_FIRST or WORKER_FIRST",
    ):
        simulate(parse_scenario(tie, "t.textproto", "upstream"))
    path = tmp_path / "tie.textproto"
    path.write_text(tie)
    result = subprocess.run([AGGSIM, "simulate", str(path), "--plugin", "upstream"], capture_output=True, text=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Go's random map order" in result.stderr


def test_a_non_elastic_master_deleted_as_a_worker_succeeds_fails_the_job():
    """`UpdateJobStatus` with a Master: a worker's success never ends the job, and the Master's failure (a running
    pod with a deletion mark) fails it in either map order: Failed, decided."""
    events = "events { at_seconds: 10 completion {} }"
    done = simulate(scenario(events, job="elastic: false", plugin="upstream")).attempts[0]
    b_exit = done.exits["b"][1]
    tie = events + f' events {{ at_seconds: {b_exit!r} pod: "a" preemption {{ pod_deleted: true }} }}'
    attempt = simulate(scenario(tie, job="elastic: false", plugin="upstream")).attempts[0]
    assert (attempt.job_condition, attempt.job_terminal_at) == ("Failed", pytest.approx(b_exit))
    assert attempt.exits["b"] == (0, pytest.approx(b_exit))


def test_a_deletion_mark_does_not_undo_a_terminal_job_and_fails_a_pod_still_stopping():
    """`ReconcileJobs` stops at a finished job: a mark after it changes nothing. `UpdateJobReplicaStatuses` counts a
    pod by its phase: one still stopping when its mark is read is a running pod being deleted, failed."""
    after_success = (
        'events { at_seconds: 10 completion {} } events { at_seconds: 60 pod: "b" preemption { pod_deleted: true } }'
    )
    attempt = simulate(scenario(after_success, plugin="upstream")).attempts[0]
    assert attempt.job_condition == "Succeeded"
    assert not any(e.what is What.POD_DELETED for e in attempt.timeline)  # both pods exited before 60 s
    twice = (
        'events { at_seconds: 30 pod: "b" preemption {} } '
        'events { at_seconds: 30.01 pod: "b" preemption { pod_deleted: true } }'
    )
    attempt = simulate(scenario(twice, plugin="upstream")).attempts[0]
    # the first SIGTERM left the pod object alone; the deletion 10 ms later marks a pod that still runs (it exits
    # 0 at 30.73): it counts as failed, and no second SIGTERM is sent
    assert (attempt.job_condition, attempt.job_terminal_at) == ("Failed", pytest.approx(30.01))
    assert [e.what for e in attempt.timeline].count(What.SIGTERM) == 1


# --- the RunPolicy's limits (training-operator v1.8.0 `pkg/controller.v1/common/job.go` `ReconcileJobs`) ------------

DEADLINE_PASSED = "Job t has failed because it was active longer than specified deadline"


def test_a_job_past_its_active_deadline_fails_at_its_pods_next_change_even_a_success():
    """`ReconcileJobs` checks `PastActiveDeadline` (`pkg/core/job.go`: now - StartTime >= ActiveDeadlineSeconds) before
    any replica status; past it, `DeletePodsAndServices` and a Failed condition. The requeue `UpdateJobStatus` asks for
    at the deadline (`WorkQueue.AddAfter`) goes to the reconciler's `FakeWorkQueue` (`pytorchjob_controller.go`
    `NewReconciler`), a no-op: nothing reconciles at the deadline, the job trains on, and the reconcile its pods'
    successful exits wake fails it. flyteplugins v1.16.8 `common_operator.go` `GetPhaseInfo` quotes the condition in a
    retryable DownstreamSystemError, and every attempt goes the same way until the retries run out."""
    execution = simulate(scenario(job="active_deadline_seconds: 50"))
    assert (execution.final_phase.value, len(execution.attempts)) == ("FAILED_PERMANENTLY", 2)
    for attempt in execution.attempts:
        # training ran to its end, far past the deadline; pod b, with nothing to upload, exits 0 first
        assert attempt.exits["b"] == (0, pytest.approx(105.1))
        assert (attempt.job_condition, attempt.job_terminal_at) == ("Failed", pytest.approx(105.1))
        assert attempt.exits["a"] == (241, pytest.approx(105.1))  # deleted as it tears down after its upload
        assert attempt.outcome.error.code == "DownstreamSystemError"
        assert attempt.outcome.error.message == f"Job failed:\n\tPyTorchJobFailed - {DEADLINE_PASSED}"
    assert simulate(scenario(job="active_deadline_seconds: 200")).final_phase.value == "SUCCEEDED"
    assert simulate(scenario(job="active_deadline_seconds: 0")).final_phase.value == "SUCCEEDED"  # 0: unset


@pytest.mark.parametrize(
    "deadline, message",
    [(30, DEADLINE_PASSED), (31, "PyTorchJob t is failed because 1 Worker replica(s) failed.")],
)
def test_the_deadline_holds_at_a_reconcile_at_or_after_it(deadline, message):
    """`PastActiveDeadline`: `duration >= allowedDuration`, so a reconcile at the deadline itself is past it (pod b's
    deletion mark wakes one at 30 s). Before it, `UpdateJobStatus` fails the job with its own message, which counts
    the failed replicas of the type (`pytorchjob_controller.go`)."""
    events = 'events { at_seconds: 30 pod: "b" preemption { pod_deleted: true } }'
    attempt = simulate(scenario(events, job=f"active_deadline_seconds: {deadline}")).attempts[0]
    assert (attempt.job_condition, attempt.job_terminal_at) == ("Failed", pytest.approx(30))
    assert attempt.outcome.error.message == f"Job failed:\n\tPyTorchJobFailed - {message}"


def test_past_the_deadline_every_pod_is_deleted_whatever_the_clean_pod_policy():
    """`ReconcileJobs` calls `DeletePodsAndServices` before it sets Failed, so the CleanPodPolicy (None, the default)
    spares nothing: pod a, still training when pod b's exit wakes the reconcile, is deleted (SIGTERM) at once.
    Without the deadline the elastic job succeeds at b's exit and a trains on."""
    events = 'events { at_seconds: 30 pod: "b" preemption {} }'
    attempt = simulate(scenario(events, job="active_deadline_seconds: 20")).attempts[0]
    b_exit = attempt.exits["b"][1]
    assert (attempt.job_condition, attempt.job_terminal_at) == ("Failed", pytest.approx(b_exit))
    [deletion] = [e for e in attempt.timeline if e.what is What.DELETES_POD]
    assert (deletion.target, deletion.reason, deletion.at) == ("a", "ActiveDeadlineSeconds", pytest.approx(b_exit))
    sigterms = [e for e in attempt.timeline if e.what is What.SIGTERM and e.target == "a"]
    assert [e.reason for e in sigterms] == ["operator: past RunPolicy.ActiveDeadlineSeconds"]
    assert "past RunPolicy.ActiveDeadlineSeconds: deletes a" in deletion.describe()
    plain = simulate(scenario(events)).attempts[0]
    assert plain.job_condition == "Succeeded" and not any(e.what is What.DELETES_POD for e in plain.timeline)


def _operator(elastic: bool, map_order=None, pods=("a", "b"), reconcile_delay=0.0, deadline=None):
    """The operator on its own clock, recording its deletions and its terminal condition."""
    clock, deleted, terminal = Clock(), [], []
    operator = TrainingOperator(
        elastic,
        pods,
        CleanPodPolicy.NONE,
        lambda pod, cause: deleted.append((pod, cause.value)),
        lambda condition, why, message: terminal.append((condition.value, message)),
        clock,
        job_name="j",
        map_order=map_order,
        attempt=1,
        reconcile_delay=reconcile_delay,
        active_deadline=deadline,
    )
    return clock, operator, deleted, terminal


FAILED = "PyTorchJobFailed - PyTorchJob j is failed because %s replica(s) failed."


@pytest.mark.parametrize("order", [None, *ReplicaMapOrder])
@pytest.mark.parametrize("worker_failure", ["exit", "deletion mark"])
def test_go_s_map_order_decides_a_master_s_success_beside_a_worker_s_failure(order, worker_failure):
    """training-operator `pytorchjob_controller.go` `UpdateJobStatus` ranges over the replica specs, a Go map, in a
    random order: the Master first sets Succeeded and returns; the Worker first sets Failed, and the Master's
    Succeeded is then dropped (`pkg/util/status.go` `setCondition`: nothing changes a failed job's conditions).
    The attempt's `replica_map_order` picks the order; unset, the simulator refuses the moment, naming the field."""

    def fail_b(operator):
        return operator.pod_exited("b", 1) if worker_failure == "exit" else operator.pod_deleted("b")

    # apart, the moments are decided whatever the order, unset too: the first ends the job
    for master_first, ends in ((True, ("Succeeded", "")), (False, ("Failed", FAILED % "1 Worker"))):
        clock, operator, deleted, terminal = _operator(False, map_order=order, pods=("a", "b", "c"))
        clock.at(5 if master_first else 6, lambda o=operator: o.pod_exited("a", 0))
        clock.at(6 if master_first else 5, lambda o=operator: fail_b(o))
        clock.run(lambda: False)
        assert terminal == [ends]
    clock, operator, deleted, terminal = _operator(False, map_order=order, pods=("a", "b", "c"))
    clock.at(5, lambda: (operator.pod_exited("a", 0), fail_b(operator)))
    if order is None:
        with pytest.raises(UndecidedVerdict, match=r"set attempts\[1\]\.replica_map_order to MASTER_FIRST or WORK"):
            clock.run(lambda: False)
        return
    clock.run(lambda: False)
    expected = ("Succeeded", "") if order is ReplicaMapOrder.MASTER_FIRST else ("Failed", FAILED % "1 Worker")
    assert terminal == [expected]


@pytest.mark.parametrize("elastic", [True, False])
@pytest.mark.parametrize("gap", [0.0, 0.2, 0.3, 0.31])
def test_a_busy_work_queue_decides_every_change_it_waited_for_in_one_reconcile(elastic, gap):
    """training-operator v1.8.0: a pod update adds the job's key to the work queue (`OnDependentUpdateFunc`), and
    `ReconcileJobs` reads every pod when a worker takes it; one worker serves every PyTorchJob by default
    (`cmd/training-operator.v1/main.go` `--controller-threads` 1). With the read `job.reconcile_seconds` (0.3 s)
    after the first change, a second change up to then, its instant included, is in the same reconcile: a failure
    then a success of two elastic Workers is Succeeded (`UpdateJobStatus` sets Succeeded first), and a non-elastic
    Master's success beside a Worker's failure is Go's map order. A later change comes after the verdict."""
    clock, operator, deleted, terminal = _operator(elastic, pods=("a", "b"), reconcile_delay=0.3)
    at = []
    operator.on_terminal = lambda condition, why, message: (terminal.append(condition.value), at.append(clock.now))
    first, second = (("b", 1), ("a", 0)) if elastic else (("a", 0), ("b", 1))
    clock.at(5, lambda: operator.pod_exited(*first))
    clock.at(5 + gap, lambda: operator.pod_exited(*second))
    together = gap <= 0.3
    if together and not elastic:
        with pytest.raises(UndecidedVerdict, match=r"at 5.3 s is Go's random map order"):
            clock.run(lambda: False)
        return
    clock.run(lambda: False)
    assert at == [pytest.approx(5.3)]  # the verdict waits for the read, whatever it decides
    if elastic:
        assert terminal == ["Succeeded" if together else "Failed"]
    else:  # the Master's success alone: Succeeded, and the Worker's failure comes too late to count
        assert terminal == ["Succeeded"]


@pytest.mark.parametrize("deadline", [None, 33])
def test_a_status_write_wakes_the_next_reconcile_after_the_queue_s_wait(deadline):
    """training-operator v1.8.0 `common/job.go` `ReconcileJobs` writes the job's status when the replica counts changed
    (`reflect.DeepEqual`), and the PyTorchJob watch (`pytorchjob_controller.go` `SetupWithManager`, a predicate on
    creations only) passes that update on: it wakes the next reconcile, which waits in the queue too. Non-elastic,
    a 1.5 s wait: Worker b's success at 31 s is read at 32.5 s, and the write's reconcile reads the pods at 34 s, with
    the Master's success at 33 s in it: Succeeded there, before Worker c's failure at 34.2 s (without the follow-up,
    the Master's exit would wake a reconcile at 34.5 s, and Go's map order would decide). Past a 33 s deadline, that
    reconcile fails the job and deletes the pods still running (`ReconcileJobs`' RunPolicy check)."""
    clock, operator, deleted, terminal = _operator(False, pods=("a", "b", "c"), reconcile_delay=1.5, deadline=deadline)
    at = []
    operator.on_terminal = lambda condition, why, message: (terminal.append(condition.value), at.append(clock.now))
    clock.at(31, lambda: operator.pod_exited("b", 0))
    clock.at(33, lambda: operator.pod_exited("a", 0))
    clock.at(34.2, lambda: operator.pod_exited("c", 1))
    clock.run(lambda: False)
    assert at == [pytest.approx(34.0)]
    if deadline is None:
        assert terminal == ["Succeeded"] and deleted == []
    else:
        assert terminal == ["Failed"] and deleted == [("c", "ActiveDeadlineSeconds")]


RE_CREATED = r"the kubelet removes such a pod, and training-operator v1\.8\.0 then creates a new one in its slot"


@pytest.mark.parametrize("elastic", [True, False])
@pytest.mark.parametrize("exit_after_mark", [0.2, 0.3, 0.31])
def test_a_deleted_pod_heard_exited_before_the_reconcile_that_reads_its_mark_is_refused(elastic, exit_after_mark):
    """training-operator v1.8.0 `pkg/controller.v1/common/pod.go` `ReconcilePods`: a pod's slot with no pod in it gets
    a new one (`len(podSlice) == 0` -> `createNewPod`), and the kubelet removes a deleted pod's object once it has
    written its final status. Worker b is marked at 5 s, which wakes a reconcile 0.3 s later (the work queue's wait),
    and exits 0. Its exit heard before the read: the object may be gone and b re-created, which the model does not
    play, so it refuses, saying when. Heard at the read's own instant: still there, counted by its phase
    (`UpdateJobReplicaStatuses`: Succeeded), so the elastic job is Succeeded, while the non-elastic one runs on for
    its Master and b's removal and re-creation follow: refused. Heard after the read: a running pod with a mark,
    failed, and the job is Failed."""
    clock, operator, deleted, terminal = _operator(elastic, reconcile_delay=0.3)
    clock.at(5, lambda: operator.pod_deleted("b"))
    clock.at(5 + exit_after_mark, lambda: operator.pod_exited("b", 0))
    if exit_after_mark < 0.3:
        read = r"reconcile at 5.3 s reads pod b deleted \(at 5 s\) and exited \(exit 0, heard at 5.2 s\): "
        with pytest.raises(PodRecreation, match=read + RE_CREATED):
            clock.run(lambda: False)
    elif exit_after_mark == 0.3 and not elastic:
        with pytest.raises(PodRecreation, match=r"reconcile at 5.3 s counts pod b deleted \(at 5 s\) and exited"):
            clock.run(lambda: False)
    else:
        clock.run(lambda: False)
        assert terminal == [("Succeeded", "") if exit_after_mark == 0.3 else ("Failed", FAILED % "1 Worker")]


@pytest.mark.parametrize("deadline", [None, 5])
def test_a_deadline_passed_decides_before_any_re_creation(deadline):
    """training-operator v1.8.0 `common/job.go` `ReconcileJobs` checks the RunPolicy's deadline before
    `ReconcilePods`. Pod b, deleted at 5 s, exits 143 at 5.1 s, before the reconcile at 5.3 s: it may be gone by
    then, and a running job's reconcile would create a new pod in its slot: refused. Past a 5 s deadline that
    reconcile fails the job instead, deleting the pods still running, and nothing is re-created."""
    clock, operator, deleted, terminal = _operator(False, pods=("a", "b", "c"), reconcile_delay=0.3, deadline=deadline)
    clock.at(5, lambda: operator.pod_deleted("b"))
    clock.at(5.1, lambda: operator.pod_exited("b", 143))
    if deadline is None:
        with pytest.raises(PodRecreation, match=r"reads pod b deleted \(at 5 s\) and exited \(exit 143"):
            clock.run(lambda: False)
        return
    clock.run(lambda: False)
    past = "PyTorchJobFailed - Job j has failed because it was active longer than specified deadline"
    assert terminal == [("Failed", past)] and deleted == [
        ("a", "ActiveDeadlineSeconds"),
        ("c", "ActiveDeadlineSeconds"),
    ]


@pytest.mark.parametrize("marked", ["b", "a"])
def test_a_deleted_pod_counted_exited_is_refused_where_the_job_runs_on_after_it(marked):
    """`ReconcilePods` re-creates a removed pod only while the job runs (`ReconcileJobs` stops at a finished job).
    Non-elastic, no latency: the pod exits 0 and is marked at the same instant (the kubelet has not removed it yet),
    and the reconcile counts it by its phase. Worker b's success leaves the job to the running Master: the kubelet's
    removal follows, and a reconcile then creates a new b, so the model refuses. Master a's success ends the job:
    Succeeded, and nothing is re-created. A Worker deleted after its heard exit is refused at the mark's reconcile."""
    clock, operator, deleted, terminal = _operator(False)
    clock.at(5, lambda: (operator.pod_exited(marked, 0), operator.pod_deleted(marked)))
    if marked == "b":
        counted = r"reconcile at 5 s counts pod b deleted \(at 5 s\) and exited \(exit 0\), and the job runs on: "
        with pytest.raises(PodRecreation, match=counted + RE_CREATED):
            clock.run(lambda: False)
    else:
        clock.run(lambda: False)
        assert terminal == [("Succeeded", "")]
    clock, operator, deleted, terminal = _operator(False)
    clock.at(5, lambda: operator.pod_exited("b", 0))
    clock.at(6, lambda: operator.pod_deleted("b"))
    with pytest.raises(
        PodRecreation, match=r"reconcile at 6 s reads pod b deleted \(at 6 s\) and exited \(exit 0, heard at 5 s"
    ):
        clock.run(lambda: False)


def test_an_instant_in_a_message_is_written_to_the_nanosecond_and_no_further():
    """`nanoseconds.instant_text`: what the model's clock holds (`on_the_clock`), not `:g`'s six digits; a float too
    large to hold nanoseconds is written as its own shortest digits."""
    from aggregation.nanoseconds import instant_text

    cases = {31.3300001: "31.3300001", 31.33: "31.33", 29.299999999999997: "29.3", 5.0: "5", -0.0: "0", -1.5: "-1.5"}
    assert {value: instant_text(value) for value in cases} == cases
    assert instant_text(100000000.3) == "100000000.3"  # .9f would say 100000000.299999997


def test_simulate_refuses_a_pod_deletion_read_after_the_pod_s_exit_in_one_line(tmp_path):
    """The shipped pod-deletion preemption with a 2 s work-queue wait: the upstream plugin's worker-1 exits 0 at
    31.33 s, before the reconcile its mark woke reads the pods at 32.6 s, where a real operator may find the object
    removed and create a new pod for the slot. `aggsim simulate` names that in one line and exits 2; with the wait
    below the pod's exit the mark is read while the pod runs, and the job is Failed and retried."""
    text = (SCENARIOS / "preemption_by_pod_deletion.textproto").read_text()
    busy = tmp_path / "busy.textproto"
    busy.write_text(text.replace("job {", "job { reconcile_seconds: 2", 1))
    result = subprocess.run([AGGSIM, "simulate", str(busy), "--plugin", "upstream"], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "reconcile at 32.6 s reads pod train-worker-1 deleted (at 30.6 s) and exited (exit 0, heard at 31.33 s)" in (
        result.stderr
    )
    busy.write_text(text.replace("job {", "job { reconcile_seconds: 0.7", 1))
    attempt = simulate(parse_scenario(busy.read_text(), str(busy), "upstream")).attempts[0]
    assert (attempt.job_condition, attempt.job_terminal_at) == ("Failed", pytest.approx(31.3))
    # instants are printed to the nanosecond: a reconcile 100 ns after the exit is heard does not read as at it
    busy.write_text(text.replace("job {", "job { reconcile_seconds: 0.7300001", 1))
    result = subprocess.run([AGGSIM, "simulate", str(busy), "--plugin", "upstream"], capture_output=True, text=True)
    assert (
        "reconcile at 31.3300001 s reads pod train-worker-1 deleted (at 30.6 s) and exited (exit 0, heard at "
        "31.33 s)" in result.stderr
    ), result.stderr


@pytest.mark.parametrize("order", [None, *ReplicaMapOrder])
def test_go_s_map_order_decides_which_replica_type_a_failed_message_counts(order):
    """`UpdateJobStatus`: with the Master and two Workers failed in one reconcile, the job is Failed either way, and
    its message counts the replica type Go's map order visits first (the Worker first: its 2 failed pods). Unset,
    the model says the Master's count, and its reason says the Worker's is as likely."""
    clock, operator, deleted, terminal = _operator(False, map_order=order, pods=("a", "b", "c"))
    clock.at(5, lambda: [operator.pod_exited(pod, 1) for pod in ("a", "b", "c")])
    clock.run(lambda: False)
    assert terminal == [("Failed", FAILED % ("2 Worker" if order is ReplicaMapOrder.WORKER_FIRST else "1 Master"))]


def test_a_map_order_on_an_elastic_job_is_refused():
    """An elastic job has Worker replicas only (flyteplugins `kfoperators/pytorch/pytorch.go` `BuildResource` drops
    the Master spec with an ElasticPolicy): no map order decides it, so pinning one is a mistake, named with its
    line."""
    with pytest.raises(ScenarioError, match=r"t.textproto:7: attempts\[0\].replica_map_order: an elastic job"):
        scenario("replica_map_order: WORKER_FIRST")
    assert scenario("replica_map_order: WORKER_FIRST", job="elastic: false").map_orders == (
        ReplicaMapOrder.WORKER_FIRST,
    )


def test_the_simulator_plays_each_map_order_and_the_order_decides_whether_the_node_fails_for_good():
    """The tie below, where pod a (the Master) uploads its genuine error and exits 0 as pod b is deleted:
    `simulate_each_map_order` (a sweep's `each_map_order`, raising a refusal) plays both orders. The Master first: the
    job is Succeeded, and propeller reads the error files (b's peer error, as early, wins the tie by listing order) and
    fails the node for good. The Worker first: the job is Failed, propeller reads no file (`GetPhaseInfo`), and the node
    retries and trains to its end. Go's map order decides between a USER failure and a retry."""
    tie = scenario(_tie_with_a_exit("elastic: false"), job="elastic: false", plugin="upstream")
    both = simulate_each_map_order(tie)
    assert [(pins, outcome_of(e), e.final_code, e.masked_genuine_error) for pins, e in both] == [
        ((("attempts[0].replica_map_order", "MASTER_FIRST"),), "FAILED_PERMANENTLY", "USER:RuntimeError", True),
        ((("attempts[0].replica_map_order", "WORKER_FIRST"),), "RETRIED", None, True),
    ]
    for (_, execution), order in zip(both, ReplicaMapOrder):
        pinned = simulate(tie.with_map_order(0, order))
        assert execution_to_json(pinned) == execution_to_json(execution)
        [terminal] = [e for e in pinned.attempts[0].timeline if e.what is What.JOB_TERMINAL]
        first = "Master" if order is ReplicaMapOrder.MASTER_FIRST else "Worker"
        assert f"Go's map order looked at the {first}" in terminal.describe()
    [(pins, alone)] = simulate_each_map_order(tie.with_map_order(0, ReplicaMapOrder.WORKER_FIRST))
    assert pins == () and execution_to_json(alone) == execution_to_json(both[1][1])


@pytest.mark.parametrize("name", ["sibling_user_error_cleanup", "preemption_by_pod_deletion", "three_failures_3x1"])
def test_a_positive_backoff_limit_is_accepted_and_the_scenario_plays_as_written(name):
    """training-operator v1.8.0: `ReconcileJobs` (`common/job.go`) fails a job past its backoff limit when
    `exceedsBackoffLimit` (`NumRequeues + 1 > BackoffLimit`, and the PyTorchJob reconciler's `FakeWorkQueue` counts
    no requeue) or `PastBackoffLimit` (`pkg/core/job.go`: the container restarts of OnFailure, Always and ExitCode
    replicas, none under Flyte's RestartPolicy Never, `>= BackoffLimit`). A positive limit meets neither, so the
    model keeps no backoff path: such a scenario is accepted (a negative one is refused, below) and plays as written."""
    text = SCENARIOS.joinpath(f"{name}.textproto").read_text()
    for limit in (1, 2**31 - 1):
        limited = parse_scenario(text.replace("job {", f"job {{\n  backoff_limit: {limit}", 1))
        assert limited == parse_scenario(text)


def test_the_failed_condition_s_message_counts_the_failed_replicas_of_its_type():
    """`UpdateJobStatus` (RestartPolicy Never): "PyTorchJob <name> is failed because <n> <type> replica(s) failed.",
    n counting pods in phase Failed and running pods being deleted; a non-elastic job's Master is its own type."""
    clock, operator, _, terminal = _operator(True)
    clock.at(5, lambda: (operator.pod_exited("a", 137), operator.pod_deleted("b")))
    clock.run(lambda: False)
    assert terminal == [("Failed", "PyTorchJobFailed - PyTorchJob j is failed because 2 Worker replica(s) failed.")]
    clock, operator, _, terminal = _operator(False)
    clock.at(5, lambda: operator.pod_exited("a", 137))
    clock.run(lambda: False)
    assert terminal == [("Failed", "PyTorchJobFailed - PyTorchJob j is failed because 1 Master replica(s) failed.")]


def test_the_job_is_named_as_the_operator_named_its_pods():
    """training-operator `pkg/core/utils.go` `GenGeneralName`: pods are `<job>-<replica type>-<index>`, so the job
    the messages name is what precedes `-worker-<i>` (or `-master-<i>`); pods named otherwise: the scenario's name."""
    assert scenario(job="").job_name == "t"
    named = parse_scenario(scenario_text().replace('"a"', '"run-7-worker-0"').replace('"b"', '"run-7-worker-1"'))
    assert named.job_name == "run-7"


@pytest.mark.parametrize(
    "text, field, problem",
    [
        ("active_deadline_seconds: -5", "job.active_deadline_seconds", "a negative deadline fails the job as it is"),
        ("backoff_limit: -1", "job.backoff_limit", "(PastBackoffLimit: 0 restarts >= the limit)"),
    ],
)
def test_a_negative_deadline_or_backoff_limit_is_refused_in_one_line(tmp_path, text, field, problem):
    """training-operator v1.8.0 `common/job.go` `ReconcileJobs`: at the job's first reconcile, before any pod exists,
    a negative deadline is passed (`PastActiveDeadline`) and so is a negative backoff limit (`pkg/core/job.go`
    `PastBackoffLimit` returns `0 >= limit`): the job fails with no pod run, which the model does not play."""
    path = tmp_path / "bad.textproto"
    path.write_text(scenario_text(job=text))
    result = subprocess.run([AGGSIM, "simulate", str(path)], capture_output=True, text=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert field in line and problem in line and "bad.textproto" in line and "must be > 0 (0 leaves it unset)" in line


@settings(max_examples=60, deadline=None)
@given(at=st.integers(1, 2500).map(lambda ms: ms / 1000))
def test_a_job_terminal_within_a_second_of_its_start_is_refused_as_its_conditions_may_tie(at):
    """flyteplugins v1.16.8 `common_operator.go` `ExtractCurrentCondition`: conditions sorted latest first by their
    whole-second LastTransitionTime, ties kept in list order (`sort.Slice`'s insertion sort for so few), the first
    true one read. Created (training-operator v1.8.0 `util/status.go`: never set false) comes first, so a terminal
    condition in its second reads as Created: Queued. Under a second after the job's start that depends on where in
    its second the job was created: refused; from one second on it never ties, and the attempt plays."""
    events = f'events {{ at_seconds: {at} pod: "b" preemption {{ pod_deleted: true }} }}'
    spec = scenario(events, delay=1)
    if at < 1:
        with pytest.raises(
            CreatedInTheSameSecond,
            match=f"attempt 0's job turned Failed at {at:g} s, less than a second after its start",
        ):
            simulate(spec)
        return
    first = simulate(spec).attempts[0]
    assert first.job_condition == "Failed" and first.decision.decision.value == "RETRY"


def test_a_job_deleted_before_the_round_is_not_found_whatever_its_conditions():
    """flytepropeller `plugin_manager.go` `checkResourcePhase` gets the job before anything else in the round: a job
    the operator deleted (a negative TTL: at the reconcile that fails it) is NotFound, with no condition to read."""
    events = 'events { at_seconds: 0.5 pod: "b" preemption { pod_deleted: true } }'
    first = simulate(scenario(events, job="ttl_seconds_after_finished: -1", delay=1)).attempts[0]
    assert first.outcome.error.code == "ResourceDeletedExternally"


# --- RunPolicy.TTLSecondsAfterFinished (training-operator v1.8.0 `common/job.go` `CleanupJob`) -----------------------

NOT_FOUND = 'resource not found, name [flytesnacks-development/t]. reason: pytorchjobs.kubeflow.org "t" not found'


def test_a_job_deleted_before_propeller_looks_is_retried_on_the_system_budget_though_it_succeeded():
    """flyte v1.16.8 `plugin_manager.go` `checkResourcePhase`: the round's Get comes first, and NotFound is
    `PhaseInfoSystemRetryableFailure("ResourceDeletedExternally", ...)`, whatever the job's condition was: no file is
    read. `executor.go` `isEligibleForRetry` counts a SYSTEM error on max-node-retries-system-failures (3), not on the
    task's retries (1 here): every attempt trains to its successful end, and the fourth fails the node."""
    execution = simulate(scenario(job="ttl_seconds_after_finished: 5"))  # propeller looks 10 s after the finish
    assert (execution.final_phase.value, len(execution.attempts)) == ("FAILED_PERMANENTLY", 4)
    assert execution.final_code == "RetriesExhausted|ResourceDeletedExternally"
    for attempt in execution.attempts:
        assert {code for code, _ in attempt.exits.values()} == {0}
        assert (attempt.job_condition, attempt.read) == ("Deleted", None)
        error = attempt.outcome.error
        assert (error.code, error.kind, error.message) == ("ResourceDeletedExternally", "SYSTEM", NOT_FOUND)
        [deletion] = [e for e in attempt.timeline if e.what is What.DELETES_JOB]
        # the latest moment the TTL can delete it: the model plays the job as finished on a whole second
        assert deletion.at == pytest.approx(attempt.job_terminal_at + 5, abs=1e-9)
    assert [a.decision.next_state.system_failures for a in execution.attempts] == [1, 2, 3, 3]
    assert execution.attempts[-1].decision.message == f"[3/3] currentAttempt done. Last Error: SYSTEM::{NOT_FOUND}"
    assert simulate(scenario(job="ttl_seconds_after_finished: 20")).final_phase.value == "SUCCEEDED"
    assert simulate(scenario(job="ttl_seconds_after_finished: 0")).final_phase.value == "SUCCEEDED"  # 0: unset


@pytest.mark.parametrize("delay, found", [(0, "Succeeded"), (0.5, None), (0.9, None), (0.99, None), (1, "Deleted")])
def test_the_ttl_deletes_within_a_second_that_only_the_job_s_creation_places(delay, found):
    """training-operator v1.8.0 `common/job.go` `CleanupJob` deletes once now is after CompletionTime + TTL, and the
    CompletionTime it reads back is in whole seconds of the cluster's clock (`metav1.Time`). Where in its second the
    job was created (the model's 0) no scenario says, so a job finished at 105.1 s with a 1 s TTL is gone at some
    moment in (105.1 s, 106.1 s], the requeue `Reconcile` asks for (`util.DurationUntilExpireTime` -> `RequeueAfter`)
    deleting it. Propeller's round at 105.1 s finds it; one at 106.1 s does not, and is retried on the system budget
    (flyte `plugin_manager.go` `checkResourcePhase`); one in between is refused (`DeletedWithinItsSecond`), naming
    the expiry's second. The model plays the job as finished on a whole second of the cluster's clock: it deletes at
    106.1 s, the latest moment it can, so that every look before it depends only on what the model has played."""
    spec = scenario(job="ttl_seconds_after_finished: 1", delay=delay)
    if found is None:
        with pytest.raises(
            DeletedWithinItsSecond,
            match=re.escape(
                "attempt 0's job finished at 105.1 s and its 1 s TTL expires after 105.1 s and by 106.1 s, by where "
                "in its second the job was created (training-operator CleanupJob reads the CompletionTime back in "
                "whole seconds), which the model does not fix; the first reconcile after the expiry deletes it: "
                f"propeller's round at {105.1 + delay:g} s may or may not find the job"
            ),
        ):
            simulate(spec)
        return
    attempt = simulate(spec).attempts[0]
    assert attempt.job_terminal_at == pytest.approx(105.1)
    assert attempt.job_condition == found
    if found == "Deleted":  # (the attempt's story ends at propeller's verdict, every pod having exited)
        [(at, reason)] = [(e.at, e.reason) for e in attempt.timeline if e.what is What.DELETES_JOB]
        assert at == 106.1 and "expired by this reconcile" in reason  # the requeue's reconcile


@pytest.mark.parametrize(
    "retry, budget, refused_at", [(None, 1000000, "109.15"), ("0.01", 1000000, "109.11"), ("0.01", 450, "109.11")]
)
def test_rounds_that_fail_alike_stop_at_the_ttl_s_window_and_the_one_inside_it_is_refused(retry, budget, refused_at):
    """Rounds that fail alike (a storage outage; flytepropeller `handler.go` `streak`) are counted in one step up to
    the next thing that can change: the window in which the TTL may delete the job is one. The job finishes at
    105.1 s with a 5 s TTL, so its deletion falls in (109.1 s, 110.1 s]; the rounds fail alike until then (with a
    0.01 s retry, one lands on 109.1 s itself), and the first inside it is refused rather than counted among them,
    which, with a workflow budget running out inside the window, used to abort the workflow there."""
    events = "events { at_seconds: 100 storage_outage { duration_seconds: 50 } }"
    settings = f"max_workflow_retries: {budget}" + (f" round_retry_seconds: {retry}" if retry else "")
    spec = scenario(events, job="ttl_seconds_after_finished: 5", delay=f"0 {settings}")
    with pytest.raises(DeletedWithinItsSecond, match=rf"after 109\.1 s and by 110\.1 s, .* round at {refused_at} s"):
        simulate(spec)


@pytest.mark.parametrize("delay, found", [(2.99, "Succeeded"), (3, "Deleted")])
def test_the_first_cleanup_is_the_reconcile_the_terminal_status_update_wakes(delay, found):
    """The reconcile that finishes the job runs `DurationUntilExpireTime` on the status it fetched, still running: no
    requeue. The job's own status update wakes the next one (`job.cleanup_seconds` later), the first to run
    `CleanupJob`: past the expiry, it deletes the job there."""
    attempt = simulate(scenario(job="ttl_seconds_after_finished: 1 cleanup_seconds: 3", delay=delay)).attempts[0]
    assert attempt.job_condition == found
    if found == "Deleted":
        [deletion] = [e for e in attempt.timeline if e.what is What.DELETES_JOB]
        assert deletion.at == pytest.approx(108.1) and "expired by this reconcile" in deletion.reason


def test_the_garbage_collector_stops_the_pods_a_deleted_job_leaves_running():
    """An elastic job succeeds at pod b's exit (30.78 s) while pod a still runs, and CleanPodPolicy None spares it. At
    31.78 s (the latest moment it can) the TTL deletes the job, and the garbage collector deletes the pods it owns: pod
    a's SIGTERM."""
    events = 'events { at_seconds: 30 pod: "b" preemption {} }'
    attempt = simulate(scenario(events, job="ttl_seconds_after_finished: 1")).attempts[0]
    assert attempt.job_condition == "Deleted" and attempt.exits["a"][1] > 31.78
    [gc] = [e for e in attempt.timeline if e.what is What.DELETES_POD]
    assert (gc.actor, gc.target, gc.at) == ("garbage collector", "a", 31.78)
    assert gc.describe() == "its owner, the PyTorchJob, is gone: deletes a"
    [sigterm] = [e for e in attempt.timeline if e.what is What.SIGTERM and e.target == "a"]
    assert (sigterm.at, sigterm.reason) == (31.78, "garbage collector: its PyTorchJob is gone")
    plain = simulate(scenario(events)).attempts[0]
    assert not any(e.what is What.SIGTERM and e.target == "a" for e in plain.timeline)


def test_the_garbage_collector_leaves_a_pod_already_being_deleted_alone():
    """Kubernetes' garbage collector (`attemptToDeleteItem`) skips a dependent that already has a deletion mark: with
    CleanPodPolicy Running and a negative TTL the operator's cleanup deletes pod a and then the job, at one instant,
    and pod a is deleted, and signalled, once."""
    events = 'events { at_seconds: 30 pod: "b" preemption {} }'
    job = "clean_pod_policy: CLEAN_POD_POLICY_RUNNING ttl_seconds_after_finished: -1"
    attempt = simulate(scenario(events, job=job)).attempts[0]
    assert attempt.job_condition == "Deleted" and any(e.what is What.DELETES_JOB for e in attempt.timeline)
    assert [(e.actor, e.target) for e in attempt.timeline if e.what is What.DELETES_POD] == [("operator", "a")]
    assert sum(1 for e in attempt.timeline if e.what is What.SIGTERM and e.target == "a") == 1


def test_past_a_limit_a_negative_ttl_deletes_the_job_before_its_failed_condition_is_written():
    """`ReconcileJobs`' limit path runs `CleanupJob` with the CompletionTime it has just set (now, not yet truncated),
    before `UpdateJobStatusInApiServer`: with a negative TTL (the CRD sets no minimum) the job is deleted in that
    reconcile, so propeller never sees the Failed condition, only NotFound. After any other finish, a negative TTL
    deletes at the next reconcile."""
    attempt = simulate(scenario(job="active_deadline_seconds: 50 ttl_seconds_after_finished: -1", delay=0)).attempts[0]
    assert attempt.job_condition == "Deleted"
    whats = [e.what for e in attempt.timeline if e.at == attempt.job_terminal_at and e.actor == "operator"]
    assert whats == [What.DELETES_POD, What.DELETES_JOB, What.JOB_TERMINAL]  # pod a is still tearing down
    [terminal] = [e for e in attempt.timeline if e.what is What.JOB_TERMINAL]
    assert terminal.reason.endswith("the condition is never written: the job is deleted first")
    finished = simulate(scenario(job="ttl_seconds_after_finished: -1", delay=0)).attempts[0]
    [deletion] = [e for e in finished.timeline if e.what is What.DELETES_JOB]
    assert (finished.job_condition, deletion.at) == ("Deleted", finished.job_terminal_at)


@pytest.mark.parametrize("ttl, deleted_at", [(1, 7.5), (3, 8.5)])
def test_the_operator_deletes_at_the_later_of_its_cleanup_reconcile_and_the_expiry(ttl, deleted_at):
    """The operator on its own clock: a job finished at 5.5 s (its CompletionTime, played as a whole second of the
    cluster's clock), its status update's reconcile 2 s later. `CleanupJob` there deletes a job whose expiry has passed
    (5.5 + 1 < 7.5); otherwise `Reconcile` requeues at the expiry (5.5 + 3), whose reconcile deletes it."""
    clock, operator, said = _operator_on_its_clock(ttl=ttl, cleanup=2)
    clock.at(5.5, lambda: operator.pod_exited("a", 0))
    clock.run(lambda: False)
    [(at, reason)] = [(at, reason) for at, what, reason in said if what == "deletes job"]
    assert at == deleted_at and "expired by this reconcile" in reason


def _operator_on_its_clock(
    elastic=True, ttl=None, reconcile=0.0, cleanup=0.0, policy=CleanPodPolicy.NONE, pods=("a", "b"), deadline=None
):
    """An operator (pod a the master, the others workers) on a clock of its own: what it decides and deletes, and
    when."""
    clock, said = Clock(), []
    operator = TrainingOperator(
        elastic,
        pods,
        policy,
        lambda pod, cause: said.append((clock.now, "deletes pod", pod)),
        lambda condition, why, message: said.append((clock.now, condition.value, "")),
        clock,
        cleanup_delay=cleanup,
        active_deadline=deadline,
        ttl_after_finished=ttl,
        delete_job=lambda reason: said.append((clock.now, "deletes job", reason)),
        reconcile_delay=reconcile,
        ttl_deletion=lambda record: said.append((clock.now, "ttl", record)),
    )
    return clock, operator, said


@pytest.mark.parametrize("b_heard_at, deleted_at", [(None, 15.5), (12.6, 14.6), (13, 15), (14, 15.5)])
def test_every_reconcile_of_a_finished_job_runs_the_ttl_s_cleanup(b_heard_at, deleted_at):
    """training-operator v1.8.0 `ReconcileJobs` on a finished job runs `CleanUpResources` -> `CleanupJob` at every
    reconcile, and every pod update wakes one (`OnDependentUpdateFunc`), not only the terminal status update. With a
    2 s queue wait (`job.reconcile_seconds`), a job failed at 10.5 s with a 3 s TTL expires in (12.5 s, 13.5 s]; its
    status update's reconcile (12.5 s) requeues to the expiry, which deletes at 15.5 s at the latest. Pod b's exit
    heard at 12.6 s wakes a reconcile at 14.6 s, past every expiry: the job is gone there, for every moment its
    creation may fall on. The model used to delete at 15 s whatever the pods did."""
    clock, operator, said = _operator_on_its_clock(ttl=3, reconcile=2)
    clock.at(8.5, lambda: operator.pod_exited("a", 1))
    if b_heard_at is not None:
        clock.at(b_heard_at, lambda: operator.pod_exited("b", 143))
    clock.run(lambda: False)
    assert [(at, what) for at, what, _ in said if what != "ttl"] == [(10.5, "Failed"), (deleted_at, "deletes job")]
    [ttl] = [record for _, what, record in said if what == "ttl"]
    assert (ttl.first_expiry, ttl.last_expiry) == (12.5, 13.5)
    # what propeller finds: there until the requeue to the earliest expiry (12.5 s + 2 s) or b's reconcile, gone at
    # the deletion, whichever expiry the job's creation gives
    assert [ttl.state_at(at).value for at in (14.5, 14.55, deleted_at)] == ["kept", "unsettled", "deleted"]


def test_a_succeeded_job_s_active_count_is_a_status_write_whose_reconcile_runs_the_ttl_s_cleanup():
    """`ReconcileJobs` on a Succeeded job moves the replicas it counted Active (pod b, still running) to Succeeded and
    writes the status: a job update, which wakes one more reconcile, `reconcile_seconds` later (14.5 s), past every
    expiry of the 3 s TTL (12.5 s, 13.5 s]: it deletes the job before the requeue would (15.5 s)."""
    clock, operator, said = _operator_on_its_clock(ttl=3, reconcile=2)
    clock.at(8.5, lambda: operator.pod_exited("a", 0))
    clock.run(lambda: False)
    assert [(at, what) for at, what, _ in said if what != "ttl"] == [(10.5, "Succeeded"), (14.5, "deletes job")]


@pytest.mark.parametrize("reconcile, terminal_at", [(0, 6), (0.3, 6.115)])
def test_a_reconcile_that_reads_the_job_before_its_status_write_is_back_conflicts_and_retries(reconcile, terminal_at):
    """The operator reads the job from its informer cache, which gets its own status write `job.cleanup_seconds` (1 s)
    later. A non-elastic job's worker b succeeds at 5 s: the job runs on with a new replica count, written then. The
    master's failure heard at 5.5 s wakes a reconcile that reads the old status: its write carries the old
    resourceVersion and conflicts (`UpdateJobStatusInApiServer`), so nothing is decided there; controller-runtime
    v0.17.2 adds the key back rate-limited (client-go's 5 ms, doubling). The Failed condition comes from the first
    reconcile that reads the status back: the write's own at 6 s, or, with a 0.3 s queue wait, the second retry's at
    6.115 s (the reconciles at 5.5 s and 5.805 s came before 6 s), ahead of the write's own at 6.3 s. The model used
    to fail the job at the first of them."""
    clock, operator, said = _operator_on_its_clock(elastic=False, reconcile=reconcile, cleanup=1)
    clock.at(5 - reconcile, lambda: operator.pod_exited("b", 0))
    clock.at(5.5 - reconcile, lambda: operator.pod_exited("a", 1))
    clock.run(lambda: False)
    assert said == [(pytest.approx(terminal_at), "Failed", "")]


@pytest.mark.parametrize("marked, at_13_5", [(True, "unsettled"), (False, "kept")])
def test_a_deleted_pod_s_removal_wakes_a_reconcile_the_model_does_not_place_so_the_ttl_is_unsettled_from_then(
    marked, at_13_5
):
    """The kubelet removes a deleted pod once it has exited (the delete event wakes a reconcile:
    `OnDependentDeleteFunc`) at a moment no source fixes. Pod b, marked at 9 s, exits; the reconcile at 11 s (2 s
    queue wait) fails the job on it, and the 3 s TTL expires in (13 s, 14 s]. The removal's reconcile, on the finished
    job, runs `CleanupJob` at any moment from 13 s on, which deletes the job for an expiry before it: propeller's look
    at 13.5 s may or may not find the job. Without the mark (b's failure heard at 9 s), b is not removed: the look
    finds the job, whose earliest requeue comes at 15 s."""
    clock, operator, said = _operator_on_its_clock(ttl=3, reconcile=2)
    if marked:
        clock.at(9, lambda: operator.pod_deleted("b"))
    clock.at(11 if marked else 9, lambda: operator.pod_exited("b", 143))
    clock.run(lambda: False)
    assert [(at, what) for at, what, _ in said if what != "ttl"] == [(11, "Failed"), (16, "deletes job")]
    [ttl] = [record for _, what, record in said if what == "ttl"]
    assert [ttl.state_at(at).value for at in (12.9, 13.5, 15.5, 16)] == ["kept", at_13_5, "unsettled", "deleted"]


def test_past_the_deadline_every_pod_is_deleted_and_an_exited_one_s_removal_can_run_the_ttl_s_cleanup():
    """`ReconcileJobs` past the deadline calls `DeletePodsAndServices` on a job not yet finished, so it deletes every
    pod, the exited ones too (only a finished job's CleanPodPolicy Running skips them): the running master gets its
    SIGTERM, and workers b and c, exited, are just removed, each removal waking a reconcile at a moment the model does
    not place. With a 2 s TTL (expiry in (14 s, 15 s]) a look at 14.3 s may or may not find the job; the model used to
    leave the exited pods alone and say it would."""
    clock, operator, said = _operator_on_its_clock(False, 2, 0.5, pods=("a", "b", "c"), deadline=10)
    clock.at(5, lambda: operator.pod_exited("b", 0))
    clock.at(12.5, lambda: operator.pod_exited("c", 0))  # its reconcile, at 13 s, is past the deadline
    clock.run(lambda: False)
    shown = [(at, what, pod) for at, what, pod in said if what in ("deletes pod", "Failed")]
    assert shown == [(13, "deletes pod", "a"), (13, "Failed", "")]  # only the running pod is signalled
    assert [at for at, what, _ in said if what == "deletes job"] == [15.5]
    assert set(operator.deleting) == {"a", "b", "c"}
    [ttl] = [record for _, what, record in said if what == "ttl"]
    assert [ttl.state_at(at).value for at in (14, 14.3, 15.5)] == ["kept", "unsettled", "deleted"]


def test_a_job_that_a_stale_reconcile_deletes_past_its_deadline_is_gone_whatever_its_expiry():
    """An elastic job succeeds at 4 s (back in the operator's cache at 5.5 s). Pod b's deletion mark at 5 s wakes a
    reconcile that reads the old, running status: past the 5 s deadline, `ReconcileJobs` deletes every pod and runs
    `CleanupJob` with the CompletionTime it has just set (5 s, to the nanosecond), which a 0 s TTL has passed: the job
    is gone at 5 s whatever second its creation fell in, and propeller's look after that finds no job (it used to be
    refused as unsettled)."""
    clock, operator, said = _operator_on_its_clock(ttl=0, cleanup=1.5, deadline=5)
    clock.at(4, lambda: operator.pod_exited("a", 0))
    clock.at(5, lambda: operator.pod_deleted("b"))
    clock.at(5.2, lambda: operator.pod_exited("b", 143))
    clock.run(lambda: False)
    assert [(at, what) for at, what, _ in said if what != "ttl"] == [(4, "Succeeded"), (5, "deletes job")]
    [ttl] = [record for _, what, record in said if what == "ttl"]
    assert [ttl.state_at(at).value for at in (4.9, 5, 6)] == ["kept", "deleted", "deleted"]


@pytest.mark.parametrize("cleanup, refused", [(1, True), (0.4, False)])
def test_a_removal_that_may_wake_a_reconcile_before_the_finish_is_back_is_refused(cleanup, refused):
    """Pod b's deletion mark (10 s) and its exit, heard at 10.5 s, meet in the reconcile at 10.5 s (0.5 s queue
    wait), which fails the job. The kubelet then removes b, and the reconcile its removal wakes runs from 11 s on; if
    the Failed status is not back in the operator's cache by then (`job.cleanup_seconds` 1: 11.5 s), it reads the job
    running and `ReconcilePods` creates a new pod in b's slot, which the model does not play: the point is refused
    (`PodRecreation`). Back by 10.9 s, every such reconcile reads the job finished."""
    clock, operator, _ = _operator_on_its_clock(reconcile=0.5, cleanup=cleanup)
    clock.at(10, lambda: operator.pod_deleted("b"))
    clock.at(10.5, lambda: operator.pod_exited("b", 143))
    if not refused:
        clock.run(lambda: False)
        assert operator.condition.value == "Failed"
        return
    with pytest.raises(PodRecreation, match=r"its removal wakes may read the job before its finished status is back"):
        clock.run(lambda: False)


def test_the_namespace_propeller_names_is_the_scenario_s_and_a_bad_one_is_refused_in_one_line(tmp_path):
    attempt = simulate(scenario(job='namespace: "ml-prod" ttl_seconds_after_finished: 1')).attempts[0]
    assert "name [ml-prod/t]" in attempt.outcome.error.message
    path = tmp_path / "bad.textproto"
    path.write_text(scenario_text(job='namespace: "ML_prod"'))
    result = subprocess.run([AGGSIM, "simulate", str(path)], capture_output=True, text=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "job.namespace" in line and "not a Kubernetes namespace" in line and "bad.textproto" in line
    with pytest.raises(ScenarioError, match="not a Kubernetes namespace"):  # a regex's `$` matches before a newline
        scenario(job='namespace: "ml-prod\\n"')


def test_clean_pod_policy_running_sigterms_the_rest():
    events = 'events { at_seconds: 30 pod: "a" worker_error {} }'
    spec = scenario(events, job="clean_pod_policy: CLEAN_POD_POLICY_RUNNING", extra=HUNG_PEER)
    timeline = simulate(spec).attempts[0].timeline
    assert any(e.what is What.DELETES_POD and e.target == "b" and e.reason == "Running" for e in timeline)
    assert any(e.what is What.SIGTERM and e.target == "b" and e.reason == "operator cleanup" for e in timeline)


# b's workers hang on their broken collective (as NCCL's do) when a peer's fail: its agent finds them healthy
HUNG_PEER = 'pod_timings { pod: "b" timings { on_peer_death { fail { after_seconds: 600 } } } }'
# a's worker fails; b runs on until a's agent (the store's host) is gone, and fails at its next look
_TWO_FAILURES = 'events { at_seconds: 30 pod: "a" worker_error {} }'


def test_the_operator_hears_a_pod_exit_the_pod_status_latency_after_it():
    """training-operator v1.8.0 `pkg/core/status.go` `UpdateJobReplicaStatuses` counts pods by the phase the API
    server holds, which the kubelet reports some time after the container exits (`job.pod_status_seconds`): the job
    turns terminal that long after the exit. Until the operator hears of an exit it counts the pod as running, so
    CleanPodPolicy Running (`common/job.go` `deletePodsAndServices`) deletes a pod that has already exited, and the
    kubelet has nothing left to signal."""
    policy = "clean_pod_policy: CLEAN_POD_POLICY_RUNNING"
    prompt = simulate(scenario(_TWO_FAILURES, job=policy, extra=HUNG_PEER)).attempts[0]
    assert prompt.job_terminal_at == prompt.exits["a"][1]
    late = simulate(scenario(_TWO_FAILURES, job=policy + " pod_status_seconds: 5", extra=HUNG_PEER)).attempts[0]
    a_exit, b_exit = late.exits["a"][1], late.exits["b"][1]
    assert a_exit < b_exit < a_exit + 5  # b is gone before the operator hears of a
    assert late.job_terminal_at == pytest.approx(a_exit + 5)
    [terminal] = [e for e in late.timeline if e.what is What.JOB_TERMINAL]
    assert terminal.reason.startswith("pod a succeeded")  # its entrypoint wrote the error and exited 0
    deleted = [e.target for e in late.timeline if e.what is What.DELETES_POD]
    assert deleted == ["b"]  # b exited, unheard: the operator still counts it running
    assert not any(e.what is What.SIGTERM and e.reason == "operator cleanup" for e in late.timeline)


def test_a_pod_that_exited_unreported_is_still_running_to_the_operator_when_it_is_deleted():
    """`UpdateJobReplicaStatuses` counts a pod by the phase the API server holds: one whose exit the kubelet has not
    reported yet is still Running there, so a deletion mark now counts it failed and fails the job, though the pod
    itself exited 0 (with no latency the same mark comes after the exit is known and changes nothing)."""
    finished = (
        'events { at_seconds: 10 completion {} } events { at_seconds: %s pod: "b" preemption { pod_deleted: true } }'
    )
    prompt = simulate(scenario(finished % 60, plugin="upstream")).attempts[0]
    last_exit = max(at for _, at in prompt.exits.values())
    assert last_exit < 20 and prompt.job_condition == "Succeeded"
    late = simulate(scenario(finished % (last_exit + 1), job="pod_status_seconds: 5", plugin="upstream")).attempts[0]
    assert late.exits == prompt.exits  # the pods do the same; only what the operator knows differs
    assert (late.job_condition, late.job_terminal_at) == ("Failed", pytest.approx(last_exit + 1))
    assert [e.what for e in late.timeline].count(What.SIGTERM) == 0  # the kubelet has nothing left to stop


def test_the_cleanup_comes_the_cleanup_latency_after_the_terminal_condition():
    """`common/job.go` `ReconcileJobs` deletes pods only when the status it is given is already finished: the reconcile
    that sets the terminal condition does not clean up; the one its status update wakes does (`job.cleanup_seconds`
    later), and only then does the kubelet SIGTERM the pods left."""
    job = "clean_pod_policy: CLEAN_POD_POLICY_RUNNING cleanup_seconds: 0.3"
    attempt = simulate(scenario(_TWO_FAILURES, job=job, extra=HUNG_PEER)).attempts[0]
    terminal = attempt.job_terminal_at
    assert terminal == attempt.exits["a"][1]  # pod status latency 0: the operator heard at once
    [deletion] = [e for e in attempt.timeline if e.what is What.DELETES_POD]
    [cleanup_signal] = [e for e in attempt.timeline if e.what is What.SIGTERM and e.reason == "operator cleanup"]
    assert deletion.at == cleanup_signal.at == pytest.approx(terminal + 0.3)
    assert (deletion.target, cleanup_signal.target) == ("b", "b")


def test_a_deletion_mark_reaches_the_operator_with_no_pod_status_latency():
    """The deletion timestamp is the API server's own write: the operator's pod watch hears of it with no kubelet
    report in between, so `job.pod_status_seconds` does not delay the Failed condition it causes."""
    events = 'events { at_seconds: 30 pod: "b" preemption { pod_deleted: true } }'
    attempt = simulate(scenario(events, job="pod_status_seconds: 2", plugin="upstream")).attempts[0]
    assert (attempt.job_condition, attempt.job_terminal_at) == ("Failed", pytest.approx(30))


def test_uploads_after_the_observing_round_are_never_read():
    """ValidateOutput runs once, at the round that observes success."""
    events = 'events { at_seconds: 30 pod: "b" preemption {} }'
    early = simulate(scenario(events, delay=0, plugin="upstream")).attempts[0]
    assert early.seen == () and any(u.pod == "a" for u in early.uploads)


def test_simulation_is_deterministic():
    spec = load_scenario(str(SCENARIOS / "preemption_during_training.textproto"))
    assert execution_to_json(simulate(spec)) == execution_to_json(simulate(spec))


# --- sweep -------------------------------------------------------------------------------------------


def test_sweep_reproduces_the_incident_table_deterministically():
    source = read_scenario(str(SCENARIOS / "preemption_during_training.textproto"))
    first = sweep_to_json(sweep(source, default_variations(source), samples=500, seed=1))
    second = sweep_to_json(sweep(source, default_variations(source), samples=500, seed=1))
    assert first == second
    assert first["exhaustive"] is False and first["assignments"] <= 500
    cells = {(c["plugin"], c["aggregation"]): c["counts"] for c in first["cells"]}
    assert cells[("upstream", True)]["SUCCEEDED_SILENTLY"] > 0
    assert cells[("recoverable", True)]["SUCCEEDED_SILENTLY"] == 0
    assert cells[("recoverable", True)]["FAILED_PERMANENTLY"] == 0  # causal stamps: the preemption always wins
    assert cells[("seed-pr", True)]["FAILED_PERMANENTLY"] > 0  # whole-second truncation lets the survivor win


def test_small_spaces_are_enumerated_with_a_minimal_counterexample():
    source = read_scenario(str(SCENARIOS / "survivor_fails_from_peer_death.textproto"))
    variations = [
        Variation("propeller.observation_delay_seconds", (0.0, 10.0)),
        Variation("attempts[0].events[0].pod", ("train-worker-0", "train-worker-1")),
    ]
    result = sweep(source, variations, samples=100, plugins=("seed-pr",), flags=(True,))
    assert result.exhaustive and result.assignments == 4
    assignment, execution = result.cells[0].counterexamples["FAILED_PERMANENTLY"]
    assert dict(assignment)["propeller.observation_delay_seconds"] == 10.0  # the first, in enumeration order
    assert outcome_of(execution) == "FAILED_PERMANENTLY"


# --- bad scenarios --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "events, job, timings, message",
    [
        ('events { at_seconds: 5 pod: "c" preemption {} }', "", "", "attempts[0].events[0].pod: unknown pod 'c'"),
        ('events { at_seconds: -1 pod: "a" preemption {} }', "", "", "attempts[0].events[0].at_seconds: must be >= 0"),
        ('events { at_seconds: 500 pod: "a" preemption {} }', "", "", "is after the job ended"),
        ('events { at_seconds: 5 pod: "a" }', "", "", "attempts[0].events[0]: missing: one of"),
        ("events { at_seconds: 5 preemption {} }", "", "", "attempts[0].events[0].pod: missing"),
        ('events { at_seconds: 5 pod: "a" completion {} }', "", "", "events[0].pod: a completion is the whole job's"),
        ("", 'pods: "a"', "", "job.pods: duplicate pod 'a'"),
        ("", 'pods: ""', "", "job.pods: a pod's name is empty"),  # it showed as a timeline with no actor
        # torch's agent looks at its workers every monitor interval (`SimpleElasticAgent._invoke_run`)
        ("", "monitor_interval_seconds: 0", "", "job.monitor_interval_seconds: must be > 0"),
        ("", "monitor_interval_seconds: 7200", "", "job.monitor_interval_seconds: must be > 0 and at most 3600"),
        ("", "", "first_monitor_poll_seconds: 6", "timings.first_monitor_poll_seconds: must be > 0 and at most"),
        ("", "", "failed_worker_exit_seconds: -1", "timings.failed_worker_exit_seconds: must be >= 0"),
        # torch 2.13 `launcher/api.py` `LaunchConfig.shutdown_timeout`: the agent SIGKILLs its workers after 30 s
        ("", "", "agent_shutdown_seconds: 45", "timings.agent_shutdown_seconds: must be at most 30, got 45.0"),
        ("", "", "finished_worker_exit_seconds: -2", "timings.finished_worker_exit_seconds: must be >= 0"),
        ("", "pod_status_seconds: -0.5", "", "job.pod_status_seconds: must be >= 0"),
        ("", "reconcile_seconds: -0.1", "", "job.reconcile_seconds: must be >= 0"),
        ("", "reconcile_seconds: inf", "", "job.reconcile_seconds: must be a finite number"),
        ("", "cleanup_seconds: 1e12", "", "job.cleanup_seconds: 1e+12 s is beyond the"),
        ("", "cleanup_seconds: nan", "", "job.cleanup_seconds: must be a finite number"),
    ],
)
def test_inconsistent_scenarios_name_file_line_and_field(events, job, timings, message):
    with pytest.raises(ScenarioError) as raised:
        scenario(events, job=job, timings=timings)
    text = str(raised.value)
    assert text.startswith("t.textproto:") and message in text
    line = int(text.split(":")[1])
    assert line > 1


def test_a_round_retry_shorter_than_the_clock_s_nanosecond_is_refused_in_one_line():
    """flytepropeller's durations are Go `time.Duration`s, whole nanoseconds, and so is the model's clock: a
    shorter wait between failing rounds (1e-310 s passed the old `> 0` check) made the rounds batched between two
    changes uncountable (an OverflowError). The tick itself is accepted and played."""
    text = (SCENARIOS / "truncated_error_pb_replaced.textproto").read_text()
    assert "round_retry_seconds: 1\n" in text
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(text.replace("round_retry_seconds: 1\n", "round_retry_seconds: 1e-310\n"), "t.textproto")
    assert re.fullmatch(
        r"t.textproto:\d+: propeller.round_retry_seconds: must be at least 1 ns \(1e-9\) and finite, got 1e-310",
        str(raised.value),
    )
    tick = parse_scenario(text.replace("round_retry_seconds: 1\n", "round_retry_seconds: 1e-9\n"), "t.textproto")
    assert simulate(tick).final_phase.value == "FAILED_PERMANENTLY"  # played: the rounds fail 1 ns apart


def test_a_sweep_refuses_a_scenario_it_cannot_play_before_varying_it(tmp_path):
    """The default variations are placed around the scenario's own values (a preemption's whole second): an event
    at `inf` reached them as an OverflowError ("internal error"). The scenario as written is checked first, as
    `simulate` and an exact region map check it."""
    text = (SCENARIOS / "preemption_during_training.textproto").read_text()
    assert "at_seconds: 30.6" in text
    path = tmp_path / "inf.textproto"
    path.write_text(text.replace("at_seconds: 30.6", "at_seconds: inf"))
    result = subprocess.run([AGGSIM, "sweep", str(path)], capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == ""
    assert re.fullmatch(
        rf"aggsim: {re.escape(str(path))}:\d+: attempts\[0\].events\[1\].at_seconds: "
        r"must be a finite number, got inf\n",
        result.stderr,
    )


def test_a_pod_s_timings_are_set_in_one_pod_timings_entry():
    """Two entries for one pod: the second replaced the first's timings without a word (an upload of 5 s played as
    0.05 s); it is a one-line error naming the entry and the line, as a duplicate in `job.pods` is."""
    text = (
        'plugin: RECOVERABLE job { pods: "a" pods: "b" }\n'
        'pod_timings { pod: "b" timings { upload_seconds: 5 } }\n'
        'pod_timings { pod: "b" timings { exit_seconds: 0.7 } }\n'
    )
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(text, "t.textproto")
    assert str(raised.value) == (
        "t.textproto:3: pod_timings[1].pod: duplicate pod 'b' (pod_timings[0] sets its timings too: put them in one "
        "entry)"
    )
    # the entry's own line, though an event names the pod first
    events_first = text.replace("\n", '\nattempts { events { at_seconds: 9 pod: "b" preemption {} } }\n', 1)
    with pytest.raises(ScenarioError, match=r"^t.textproto:4: pod_timings\[1\].pod: duplicate pod 'b'"):
        parse_scenario(events_first, "t.textproto")
    with pytest.raises(ScenarioError, match=r"^t.textproto:4: pod_timings\[1\].pod: unknown pod 'c'"):
        parse_scenario(
            events_first.replace('pod_timings { pod: "b" timings { exit', 'pod_timings { pod: "c" timings { exit'),
            "t.textproto",
        )
    together = 'pod_timings { pod: "b" timings { upload_seconds: 5 exit_seconds: 0.7 } }'
    spec = parse_scenario(text.split("\n")[0] + "\n" + together, "t.textproto")
    assert (spec.timings["b"].upload, spec.timings["b"].exit) == (5, 0.7)


def test_restarts_and_the_join_timeout_are_the_task_s_set_once_in_the_job():
    """flytekitplugins-kfpytorch `PytorchElasticFunctionTask._execute` builds one `LaunchConfig` (max_restarts,
    rdzv_configs' join_timeout) for every pod of the task. The retired `on_peer_death.wait_in_rendezvous` said it a
    second time (and a pod's own gave it restarts its peers lacked): a one-line error on its own line, pointing to
    the job's fields, which give every pod the same budget."""
    text = (
        'plugin: RECOVERABLE job { pods: "a" pods: "b" max_restarts: 1 join_timeout_seconds: 30 }\n'
        'pod_timings { pod: "a" timings { exit_seconds: 0.7 } }\n'
        'pod_timings { pod: "b" timings {\n  on_peer_death { wait_in_rendezvous {} } } }\n'
    )
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(text, "t.textproto")
    assert str(raised.value).startswith(
        "t.textproto:4: pod_timings[1].timings.on_peer_death.wait_in_rendezvous: retired: restarts and the join "
        "timeout are the task's"
    )
    assert "job.max_restarts" in str(raised.value) and "job.join_timeout_seconds" in str(raised.value)
    every_pod = text.split("\n")[0] + "\ntimings { on_peer_death { wait_in_rendezvous { timeout_seconds: 30 } } }"
    with pytest.raises(ScenarioError, match=r"^t.textproto:2: timings.on_peer_death.wait_in_rendezvous: retired"):
        parse_scenario(every_pod, "t.textproto")
    spec = parse_scenario(text.rsplit("pod_timings", 1)[0], "t.textproto")
    assert (spec.launch.max_restarts, spec.launch.join_timeout) == (1, 30)  # the task's, read by every pod
    assert spec.launch.monitor_interval == defaults.MONITOR_INTERVAL_SECONDS  # flytekit's Elastic default, 5 s


def test_an_error_in_the_last_of_many_events_names_its_own_line():
    """Each field's lines are found once per check (`scenario._Locator`, which used to scan the whole text for every
    event, so 20,000 events took minutes): the cached lines must still name the right occurrence."""
    events = "".join(f"  events {{ at_seconds: {3 + i % 50} checkpoint {{}} }}\n" for i in range(5000))
    text = f'plugin: RECOVERABLE job {{ pods: "a" }}\nattempts {{\n{events}  events {{ at_seconds: 4 }}\n}}\n'
    with pytest.raises(ScenarioError, match=r"^t.textproto:5003: attempts\[0\].events\[5000\]: missing: one of"):
        parse_scenario(text, "t.textproto")


def test_unknown_plugin_variant_and_missing_plugin():
    with pytest.raises(ScenarioError, match=r"t.textproto:2:.*PluginVariant.*RECOVERABEL"):
        parse_scenario('\nplugin: RECOVERABEL\njob { pods: "a" }', "t.textproto")
    with pytest.raises(ScenarioError, match="t.textproto:1: plugin: missing"):
        parse_scenario('job { pods: "a" }', "t.textproto")
    with pytest.raises(ScenarioError, match="unknown plugin variant 'nope'"):
        parse_scenario('job { pods: "a" }', "t.textproto", plugin_override="nope")


def test_cli_rejects_bad_scenarios_with_exit_2(tmp_path):
    bad = tmp_path / "bad.textproto"
    bad.write_text(
        'plugin: UPSTREAM\njob { pods: "a" }\nattempts {\n  events { at_seconds: 3 pod: "zz" preemption {} }\n}\n'
    )
    aggsim = str(Path(sys.executable).parent / "aggsim")
    for command in (["simulate", str(bad)], ["sweep", str(bad)], ["simulate", str(tmp_path / "missing.textproto")]):
        result = subprocess.run([aggsim, *command], capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = subprocess.run([aggsim, "simulate", str(bad)], capture_output=True, text=True, timeout=60)
    assert f"{bad}:4: attempts[0].events[0].pod: unknown pod 'zz'" in result.stderr
    result = subprocess.run(
        [aggsim, "simulate", str(SCENARIOS / "preemption_during_training.textproto"), "--plugin", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "Invalid value for '--plugin'" in result.stderr


def test_cli_simulate_and_sweep_outputs():
    path = str(SCENARIOS / "preemption_during_training.textproto")
    result = CliRunner().invoke(main, ["simulate", path, "--plugin", "upstream"], terminal_width=160)
    assert result.exit_code == 0 and "SUCCEEDED_SILENTLY" in result.output and "IgnoreOutputs" in result.output
    record = json.loads(CliRunner().invoke(main, ["simulate", path, "--json"]).output)
    assert (
        record["final_phase"] == "RETRIED_THEN_SUCCEEDED"
        and record["attempts"][1]["resumed_from_checkpoint"] == "attempt 0"
    )
    assert record["attempts"][0]["files"][0]["error"]["kind"] == "RECOVERABLE"
    out = CliRunner().invoke(main, ["sweep", path, "--vary", "propeller.observation_delay_seconds=0:4:2", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["assignments"] == 3
    bad_vary = CliRunner().invoke(main, ["sweep", path, "--vary", "job.nosuch=1,2"])
    assert bad_vary.exit_code == 2 and "has no field 'nosuch'" in bad_vary.output


# --- generated code -----------------------------------------------------------------------------------


def test_generated_python_matches_the_proto_sources(tmp_path):
    """aggregation/proto/ is what protos/generate.py produces from protos/ (so a clone needs no protoc)."""
    pytest.importorskip("grpc_tools")
    sys.path.insert(0, str(ROOT / "protos"))
    try:
        import generate
    finally:
        sys.path.pop(0)
    for fresh in generate.generate(tmp_path):
        committed = ROOT / "aggregation" / "proto" / fresh.relative_to(tmp_path)
        assert committed.read_text() == fresh.read_text(), f"{committed} is stale: run python protos/generate.py"


def test_a_node_leaving_the_first_rendezvous_strands_its_peers():
    """torch elastic: the rendezvous needs min_nodes; peers of a pod that left wait there (join_timeout)."""
    spec = scenario('events { at_seconds: 1 pod: "b" preemption {} }', timings="rendezvous_seconds: 5")
    timeline = simulate(spec).attempts[0].timeline
    assert [e.pod for e in timeline if e.what is What.WAITS_IN_RENDEZVOUS] == ["a"]
    assert not any(e.what is What.RENDEZVOUS_DONE for e in timeline)


def test_the_first_rendezvous_completes_for_every_pod_as_the_last_one_joins():
    """torch `dynamic_rendezvous.py` `_add_to_participants`: the round completes as the participants reach max_nodes
    (min = max = the job's pods), so no pod's workers start, and no torch handler is installed, before the last pod
    has joined. a joins at 2 s, b at 5 s: a SIGTERM to a at 3 s finds upstream's agent without a handler (exit 241,
    no file; b's read of the store a hosted fails), the recoverable plugin's first-rendezvous handler reports it."""
    uneven = 'pod_timings { pod: "b" timings { rendezvous_seconds: 5 } }'
    clean = simulate(scenario(extra=uneven)).attempts[0]
    assert [(e.pod, e.at) for e in clean.timeline if e.what is What.RENDEZVOUS_DONE] == [("a", 5.0), ("b", 5.0)]
    signal = 'events { at_seconds: 3 pod: "a" preemption {} }'
    upstream = simulate(scenario(signal, plugin="upstream", extra=uneven)).attempts[0]
    assert upstream.exits["a"] == (241, 3.0) and not [u for u in upstream.uploads if u.pod == "a"]
    assert not any(e.what is What.RENDEZVOUS_DONE for e in upstream.timeline)
    recoverable = simulate(scenario(signal, plugin="recoverable", extra=uneven)).attempts[0]
    [caught] = [e for e in recoverable.timeline if e.what is What.SIGNAL_CAUGHT]
    assert (caught.pod, caught.reason, caught.stamp) == ("a", "FlyteRecoverableException", 3.0)


def test_a_pod_whose_workers_never_started_has_no_torch_handler_even_waiting_in_a_later_round():
    """torch installs `_terminate_process_handler` at the first `PContext.start`. b leaves the first round (upstream:
    killed, 241), so a waits in the next round for it (`Pod.peer_death`) with no workers ever started: a SIGTERM
    there kills upstream's agent too (241, no file), where the model used to take it for a caught signal (exit 0).
    The recoverable plugin's own first-rendezvous handler still catches it (and yields to b's report)."""
    events = 'events { at_seconds: 1 pod: "b" preemption {} } events { at_seconds: 10 pod: "a" preemption {} }'
    upstream = simulate(scenario(events, plugin="upstream")).attempts[0]
    assert upstream.exits["a"] == (241, 10.0) and not upstream.uploads
    assert not any(e.what is What.SIGNAL_CAUGHT for e in upstream.timeline)
    recoverable = simulate(scenario(events, plugin="recoverable")).attempts[0]
    assert recoverable.exits["a"][0] == 0
    assert [(e.pod, e.at) for e in recoverable.timeline if e.what is What.YIELDS] == [("a", 10.0)]


def test_a_signal_marked_as_landing_in_a_fork_before_any_worker_started_finds_no_fork():
    """Only an agent that starts workers forks (`start_method="fork"`): in the first rendezvous there is none, so a
    preemption marked `lands_during_fork` is what any signal there is: upstream's agent has no handler yet (241), the
    recoverable plugin's first-rendezvous handler reports it. It used to be lost until the SIGKILL (137)."""
    forked = 'events { at_seconds: 1 pod: "b" preemption { lands_during_fork: true } }'
    upstream = simulate(scenario(forked, job="start_method: FORK", plugin="upstream")).attempts[0]
    assert upstream.exits["b"] == (241, 1.0)
    recoverable = simulate(scenario(forked, job="start_method: FORK", plugin="recoverable")).attempts[0]
    assert any(e.what is What.SIGNAL_CAUGHT and e.pod == "b" for e in recoverable.timeline)
    assert not any(e.what is What.SIGNAL_LOST for e in upstream.timeline + recoverable.timeline)


def test_a_training_that_ends_before_every_pod_trains_ends_as_the_last_pod_starts_to_train():
    """The real workload (`localjob/workloads.py` `due`) reads the runner's finish command at every step, and workers
    started after it at their first: training that ends while the pods are still in their first rendezvous ends
    for the workers as they start (the first round completes as the last pod joins). It
    used to be dropped, and the job ran on for ever (STILL_RUNNING)."""
    spec = parse_scenario(
        'plugin: RECOVERABLE job { pods: "a" pods: "b" } task { retries: 2 training_seconds: 60 } '
        'timings { rendezvous_seconds: 5 } pod_timings { pod: "b" timings { rendezvous_seconds: 6 } } '
        "attempts { events { at_seconds: 1 completion {} } }"
    )
    execution = simulate(spec)
    [attempt] = execution.attempts
    assert execution.final_phase.value == "SUCCEEDED" and attempt.completed
    done = [(e.at, e.pod, e.describe()) for e in attempt.timeline if e.what is What.TRAINING_COMPLETE]
    late = "training complete: the workers return (the training ended at 1.000, before every pod trained)"
    assert done == [(6.0, "a", late), (6.0, "b", late)]


def test_a_training_that_ends_while_the_workers_restart_ends_as_they_train_again():
    """torch elastic `_restart_workers` after a worker error (max_restarts 1): the new workers read the finish
    command at their first step (`localjob/workloads.py` `due`), so the training that ended during the restart's
    rendezvous ends for them as they start. It used to be dropped, and the job ran on for ever (STILL_RUNNING)."""
    text = (SCENARIOS / "worker_error_restarted.textproto").read_text()
    spec = parse_scenario(text.replace("at_seconds: 10 pod", "at_seconds: 25 pod"))
    execution = simulate(spec)
    [attempt] = execution.attempts
    restarted = [e.at for e in attempt.timeline if e.what is What.RENDEZVOUS_DONE and e.reason]
    done = [e for e in attempt.timeline if e.what is What.TRAINING_COMPLETE]
    assert restarted and min(restarted) > 30  # the completion at 30 s comes during the restart
    assert [e.at for e in done] == [max(restarted)] * 2
    assert all("the training ended at 30.000" in e.describe() for e in done)
    assert execution.final_phase.value == "SUCCEEDED" and attempt.job_condition == "Succeeded"


# --- propeller's rounds on the clock (handler.go streak / RecordSystemError / TryMutateWorkflow) ---------------


def rounds(execution, what):
    return [e for a in execution.attempts for e in a.timeline if e.what is what]


def test_failed_rounds_are_retried_and_a_later_round_reads_the_prefix_as_it_is_then():
    """handler.go `streak`: a Go error from the reader fails the round (RecordSystemError) and the workflow is
    requeued; the next round reads again. Rounds in the outage fail; the first after it decides."""
    execution = run("storage_outage_during_the_read", "recoverable")
    failed = rounds(execution, What.ROUND_FAILED)
    assert [round(e.at, 3) for e in failed] == [32.38, 33.38, 34.38]  # every round_retry_seconds
    assert [e.count for e in failed] == [1, 2, 3] and all("unavailable" in e.reason for e in failed)
    # `invokePlugin`'s HEAD of futures.pb is the first request of a Succeeded job's round: it fails first
    assert all(e.reason.startswith("failed to check existence of futures file: [User] Failed") for e in failed)
    first = execution.attempts[0]
    assert first.observed_at == pytest.approx(35.38) and first.failed_rounds == 3
    assert {u.name for u in first.seen} == {u.name for u in first.uploads}  # the late survivor file is seen


def test_a_sibling_s_later_write_replaces_the_file_that_failed_the_rounds():
    execution = run("truncated_error_pb_replaced", "seed-pr")
    failed = rounds(execution, What.ROUND_FAILED)
    # the cut file is what propeller reads from the job's Succeeded (the preempted pod's exit) until the survivor's
    # write replaces it: every round before that write fails, the first one after it reads the survivor's error
    (survivor_write,) = [
        e.at for e in execution.attempts[0].timeline if e.what is What.UPLOAD and e.actor == "train-worker-0"
    ]
    assert failed and all("cannot parse invalid wire-format data" in e.reason for e in failed)
    assert all(e.at < survivor_write for e in failed)
    assert execution.attempts[0].observed_at >= survivor_write
    assert execution.attempts[0].outcome.error.code == "USER:RuntimeError"


def test_rounds_that_keep_failing_abort_the_workflow_after_max_workflow_retries():
    """TryMutateWorkflow: a round that starts with FailedAttempts > max-workflow-retries aborts the workflow;
    executor.go HandleAbortedWorkflow fails it with SYSTEM 'Workflow abort failed'."""
    execution = run("rounds_keep_failing", "recoverable")
    assert execution.attempts[0].failed_rounds == 11
    (aborted,) = rounds(execution, What.WORKFLOW_ABORTED)
    assert "max number of system retry attempts [11/10] exhausted" in aborted.reason
    assert (execution.final_code, execution.final_kind) == ("Workflow abort failed", "SYSTEM")
    text = SCENARIOS.joinpath("rounds_keep_failing.textproto").read_text()
    fewer = parse_scenario(
        text.replace("observation_delay_seconds: 1", "observation_delay_seconds: 1\n  max_workflow_retries: 2")
    )
    execution = simulate(fewer)
    assert execution.attempts[0].failed_rounds == 3
    assert "[3/2]" in rounds(execution, What.WORKFLOW_ABORTED)[0].reason


def _with_max_workflow_retries(name: str, limit: int):
    from aggregation.deployment import Deployment

    spec = load_scenario(name)  # a deployment sets the flag too (Flyte's default where unset): keep the scenario's
    return spec.with_deployment(
        Deployment({"max_workflow_retries": limit, "error_aggregation": spec.error_aggregation}, ("test",))
    )


@pytest.mark.parametrize("limit, failed", [(-5, 2**32 - 4), (2**32 + 3, 4), (2**32 - 2, 2**32 - 1)])
def test_max_workflow_retries_is_read_as_go_s_uint32(limit, failed):
    """controller/handler.go TryMutateWorkflow: `maxRetries := uint32(p.cfg.MaxWorkflowRetries)`, so a negative or
    larger int from the config wraps; rounds that nothing can change fail alike and are counted in one step, so
    billions of them take no time (the abort comes after `failed` rounds, one `round_retry_seconds` apart)."""
    execution = simulate(_with_max_workflow_retries("rounds_keep_failing", limit))
    attempt = execution.attempts[0]
    assert attempt.failed_rounds == failed and execution.final_code == "Workflow abort failed"
    (aborted,) = rounds(execution, What.WORKFLOW_ABORTED)
    assert f"[{failed}/{failed - 1}]" in aborted.reason
    first = rounds(execution, What.ROUND_FAILED)[0].at
    assert aborted.at == pytest.approx(first + failed * defaults.ROUND_RETRY_SECONDS, rel=1e-9)


def test_at_uint32_s_largest_limit_rounds_fail_for_ever_and_the_node_never_ends():
    """-1 is uint32's largest: FailedAttempts (a uint32) never exceeds it, so TryMutateWorkflow never aborts and
    propeller retries the failing round for ever: the node is still running, and says why."""
    execution = simulate(_with_max_workflow_retries("rounds_keep_failing", -1))
    assert execution.final_phase.value == "STILL_RUNNING" and len(execution.attempts) == 1
    attempt = execution.attempts[0]
    assert "retries the round for ever" in attempt.outcome.reason and attempt.job_condition == "Succeeded"
    (endless,) = rounds(execution, What.ROUNDS_FAIL_FOR_EVER)
    assert "for ever" in endless.describe() and not rounds(execution, What.WORKFLOW_ABORTED)


def _outage(outage_at, outage, retry, limit):
    text = SCENARIOS.joinpath("storage_outage_during_the_read.textproto").read_text()
    limit %= 2**32  # the scenario's field is a uint32: -1 is its largest
    text = text.replace("round_retry_seconds: 1", f"round_retry_seconds: {retry!r}\n  max_workflow_retries: {limit}")
    return text.replace(
        "events { at_seconds: 31 storage_outage { duration_seconds: 3.5 } }",
        f"events {{ at_seconds: {outage_at!r} storage_outage {{ duration_seconds: {outage!r} }} }}",
    )


def test_rounds_that_never_abort_are_counted_up_to_the_next_change_in_one_step():
    """controller/handler.go TryMutateWorkflow: at uint32's largest limit no round aborts, and FailedAttempts (a
    uint32) wraps as Go's addition does, as often as it passes 4,294,967,295. An outage of a million seconds with a
    round every nanosecond is 10^15 failed rounds: counted in one step up to each moment that may change what the
    rounds read (a few), not 2^32 at a time (230,000 steps), and the count is exact."""
    execution = simulate(parse_scenario(_outage(31, 1e6, 1e-9, -1)))
    attempt = execution.attempts[0]
    first = rounds(execution, What.ROUND_FAILED)[0].at
    assert attempt.observed_at == 31 + 1e6  # the round at the outage's very end reads the prefix
    assert attempt.failed_rounds == round((attempt.observed_at - first) * 1e9) % 2**32
    steps = rounds(execution, What.ROUNDS_FAIL_UNTIL_A_CHANGE)
    assert 1 <= len(steps) <= 8 and not rounds(execution, What.ROUNDS_FAIL_ALIKE)
    assert "wraps past 4,294,967,295" in steps[-1].describe() and "never exceeds" in steps[-1].describe()


def test_a_round_retry_finer_than_the_clock_holds_is_refused_in_one_line(tmp_path):
    """The model's clock is a float of seconds: 300 million seconds in, a nanosecond's retry leaves the moment as it
    is, so the rounds would never move on. Refused in one line, not a hang."""
    from aggregation.propeller_actor import RetryBelowTheClock

    text = _outage(31, 3e8, 1e-9, -1)
    with pytest.raises(RetryBelowTheClock, match="round_retry_seconds"):
        simulate(parse_scenario(text))
    path = tmp_path / "late.textproto"
    path.write_text(text)
    done = subprocess.run([AGGSIM, "simulate", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "cannot hold that late" in done.stderr and "Traceback" not in done.stderr


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    outage_at=st.integers(290, 400).map(lambda t: t / 10),
    outage=st.integers(1, 400).map(lambda t: t / 4),
    retry=st.sampled_from([0.25, 0.5, 1, 1.5, 3]),
    limit=st.one_of(st.integers(0, 60), st.just(-1)),
)
def test_rounds_counted_in_one_step_end_as_rounds_run_one_by_one(outage_at, outage, retry, limit):
    """The step that counts rounds alike (propeller_actor `_after_failed_round`) changes nothing propeller decides:
    the same verdict, failed rounds, round errors and abort time as running every round (`TryMutateWorkflow` once
    per round), for outages starting before, during and after propeller's look."""
    from aggregation import engine

    spec = parse_scenario(_outage(outage_at, outage, retry, limit))

    def verdict(execution):
        aborts = [e.at for a in execution.attempts for e in a.timeline if e.what is What.WORKFLOW_ABORTED]
        return (
            execution.final_phase,
            execution.final_code,
            [(a.failed_rounds, a.observed_at, a.outcome.phase, a.outcome.round_error) for a in execution.attempts],
            [round(t, 6) for t in aborts],
        )

    counted = verdict(simulate(spec))
    with pytest.MonkeyPatch.context() as patch:  # every round run: the world may change at any moment
        patch.setattr(engine.Clock, "next_callback", lambda self: self.now)
        one_by_one = verdict(simulate(spec))
    assert counted[:2] == one_by_one[:2]
    assert [(f, o, p, e) for f, o, p, e in counted[2]] == [
        (f, o if o is None else pytest.approx(o, abs=1e-6), p, e) for f, o, p, e in one_by_one[2]
    ]
    assert counted[3] == pytest.approx(one_by_one[3], abs=1e-6)


def test_failed_rounds_count_for_the_whole_workflow_across_attempts():
    """FailedAttempts lives in the workflow's status and nothing resets it: attempts share the budget."""
    text = SCENARIOS.joinpath("storage_outage_during_the_read.textproto").read_text()
    text = text.replace("round_retry_seconds: 1", "round_retry_seconds: 1\n  max_workflow_retries: 4")
    text = text.replace(
        "attempts {",
        'attempts {\n  events { at_seconds: 30.6 pod: "train-worker-1" preemption {} }\n'
        "  events { at_seconds: 31 storage_outage { duration_seconds: 3.5 } }\n}\nattempts {",
        1,
    )
    execution = simulate(parse_scenario(text))
    assert execution.attempts[0].failed_rounds == 3
    assert len(execution.attempts) == 2 and execution.attempts[1].failed_rounds == 5  # 3 + 2 > 4: aborted
    assert execution.final_code == "Workflow abort failed"


@pytest.mark.parametrize(
    "snippet, field",
    [
        ("events { at_seconds: 31 storage_outage { duration_seconds: 0 } }", "storage_outage.duration_seconds"),
        ('events { at_seconds: 31 pod: "train-worker-0" storage_outage { duration_seconds: 1 } }', "pod"),
        ("events { at_seconds: 31 truncated_upload { keep_bytes: 1 } }", "pod"),
    ],
)
def test_bad_fault_events_name_their_field(snippet, field):
    text = SCENARIOS.joinpath("storage_outage_during_the_read.textproto").read_text()
    text = text.replace("events { at_seconds: 31 storage_outage { duration_seconds: 3.5 } }", snippet)
    with pytest.raises(ScenarioError, match=field):
        parse_scenario(text)


@pytest.mark.parametrize(
    "scenario, keep",
    [("storage_outage_during_the_read", []), ("rounds_keep_failing", []), ("rounds_keep_failing", ["--keep"])],
)
def test_run_local_refuses_store_faults_it_cannot_play_for_real(scenario, keep, tmp_path):
    """One line, exit 2, before any process starts: the local blob store is a directory. A refused run made no
    files, so it keeps no directory and names none, even when asked to keep its files."""
    pytest.importorskip("flytekit")
    result = subprocess.run(
        [AGGSIM, "run-local", scenario, *keep],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert result.returncode == 2 and "cannot be played for real" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == [] and str(tmp_path) not in result.stderr, result.stderr


# --- this project's plugin under both readers (plugin/task.py RecoverableElasticTask) ---------------------------


def events_of(execution, pod, what):
    return [e for e in execution.attempts[0].timeline if e.pod == pod and e.what is what]


def test_a_consequence_yields_to_a_sibling_s_report():
    """plugin/task.py: the cleanup's SIGTERM (a consequence) finds the genuine error.pb and writes nothing."""
    execution = run("sibling_user_error_cleanup_no_aggregation", "recoverable")
    (yielded,) = events_of(execution, "train-worker-1", What.YIELDS)
    assert yielded.file == "error.pb"
    assert [u.pod for u in execution.attempts[0].uploads] == ["train-worker-0"]
    assert not execution.masked_genuine_error


def test_a_collateral_failure_waits_for_a_sibling_then_yields():
    execution = run("genuine_error_with_collateral_no_aggregation", "recoverable")
    (waits,) = events_of(execution, "train-worker-1", What.AWAITS_SIBLING)
    (yielded,) = events_of(execution, "train-worker-1", What.YIELDS)
    assert waits.at <= yielded.at <= waits.at + 10.0  # the genuine report is there by the first look
    assert execution.attempts[0].outcome.error.message == "ValueError: bad batch"


def test_a_collateral_failure_with_no_sibling_report_is_written_recoverable_when_reported():
    """No sibling reports (the peer vanished without a word): after the wait, a RECOVERABLE report,
    stamped at the moment it is made on the pod's own clock."""
    text = SCENARIOS.joinpath("genuine_error_with_collateral_no_aggregation.textproto").read_text()
    text = text.replace('worker_error { message: "ValueError: bad batch" }', "preemption {}")
    text = text.replace("clock_offset_seconds: 0", "clock_offset_seconds: 0.25")
    spec = parse_scenario(text, plugin_override="recoverable")
    spec = replace(spec, grace=0.01, timings={**spec.timings})  # the preempted pod is SIGKILLed: no report
    execution = simulate(spec)
    survivor = [u for u in execution.attempts[0].uploads if u.pod == "train-worker-1"]
    assert survivor and survivor[0].error.recoverable and survivor[0].error.code == "USER:Recoverable"
    (waits,) = events_of(execution, "train-worker-1", What.AWAITS_SIBLING)
    assert survivor[0].error.timestamp == pytest.approx(waits.at + 10.0 + 0.25)


def test_clock_offsets_shift_the_stamps_a_pod_writes_not_when_things_happen():
    base = SCENARIOS.joinpath("preemption_during_training.textproto").read_text()
    for offset in (-0.25, 0.25):
        skewed = simulate(parse_scenario(base.replace("clock_offset_seconds: 0", f"clock_offset_seconds: {offset}")))
        plain = simulate(parse_scenario(base))
        assert [(e.at, e.what) for e in skewed.attempts[0].timeline] == [
            (e.at, e.what) for e in plain.attempts[0].timeline
        ]
        stamps = {u.pod: u.error.timestamp for u in skewed.attempts[0].uploads if u.error}
        plain_stamps = {u.pod: u.error.timestamp for u in plain.attempts[0].uploads if u.error}
        assert stamps["train-worker-1"] == pytest.approx(plain_stamps["train-worker-1"] + offset)


def test_the_demo_sweep_holds_for_the_recoverable_plugin_under_both_readers_and_skewed_clocks():
    """Issue 9's bar: after a preemption, retried 100%; after a sibling's genuine error, masked 0%."""
    for name, good in (("preemption_during_training", "RETRIED"), ("sibling_user_error_cleanup", "FAILED_PERMANENTLY")):
        source = read_scenario(str(SCENARIOS / f"{name}.textproto"))
        variations = default_variations(source)
        assert any("clock_offset_seconds" in v.field for v in variations)
        result = sweep(source, variations, samples=20_000, plugins=("recoverable",))
        assert result.exhaustive
        for cell in result.cells:
            assert cell.counts[good] == cell.total and cell.masked == 0, (name, cell.aggregation, cell.counts)


# --- torch elastic's restarts (torch 2.13 `torch/distributed/elastic/agent/server/api.py`
#     `SimpleElasticAgent._invoke_run`, `rendezvous/dynamic_rendezvous.py`, `rendezvous/c10d_rendezvous_backend.py`)

RESTARTS = """
plugin: UPSTREAM
job { pods: "a" pods: "b" nproc_per_node: 1 max_restarts: %(restarts)s join_timeout_seconds: 20 }
task { retries: 1 training_seconds: 100 outputs_declared: true }
propeller { error_aggregation: true observation_delay_seconds: 1 }
attempts { %(events)s }
"""


def restarts_scenario(events: str, restarts: int = 1):
    return parse_scenario(RESTARTS % {"events": events, "restarts": restarts}, "t.textproto")


def test_a_failed_worker_group_with_restarts_left_is_restarted_not_reported():
    """`_invoke_run`: FAILED with `_remaining_restarts > 0` -> `_restart_workers` (one restart used), a new
    rendezvous round with every node, training goes on; nothing is uploaded and the job completes."""
    events = 'events { at_seconds: 10 pod: "b" worker_error {} } events { at_seconds: 40 completion {} }'
    spec = restarts_scenario(events)
    attempt = simulate(spec).attempts[0]
    restarts = [e for e in attempt.timeline if e.what is What.RESTARTS_WORKERS]
    assert sorted(e.actor for e in restarts) == ["a", "b"] and all(e.count == 0 for e in restarts)
    assert [u.name for u in attempt.uploads] == ["outputs.pb"]
    assert attempt.decision.decision.value == "SUCCEED"


def test_a_second_failure_after_the_last_restart_fails_the_pods():
    """`_invoke_run`: no restarts left -> the agent stops its workers and the run fails (ChildFailedError)."""
    events = 'events { at_seconds: 10 pod: "b" worker_error {} } events { at_seconds: 30 pod: "b" worker_error {} }'
    attempt = simulate(restarts_scenario(events)).attempts[0]
    assert attempt.decision.decision.value == "FAIL"
    assert any(e.what is What.AGENT_RAISES and e.actor == "b" for e in attempt.timeline)
    assert simulate(restarts_scenario(events, restarts=2)).attempts[0].decision.decision.value == "SUCCEED"


def test_a_survivor_waits_for_a_lost_peer_until_the_join_timeout():
    """`DynamicRendezvousHandler.next_rendezvous`: the round needs min_nodes (= the job's pods) and the preempted
    pod never returns, so RendezvousTimeoutError after join_timeout (rdzv_configs, 20 s here)."""
    attempt = simulate(restarts_scenario('events { at_seconds: 10 pod: "b" preemption {} }')).attempts[0]
    waits = next(e for e in attempt.timeline if e.what is What.WAITS_IN_RENDEZVOUS and e.actor == "a")
    timeout = next(e for e in attempt.timeline if e.what is What.RENDEZVOUS_TIMEOUT)
    assert timeout.actor == "a" and timeout.at == pytest.approx(waits.at + 20)


def test_the_store_host_s_exit_fails_a_rendezvous_that_starts_after_it_at_once():
    """`c10d_rendezvous_backend`: the store lives in worker 0's agent (PET_RDZV_ENDPOINT names it); when that
    process is gone the survivor's rendezvous fails with RendezvousConnectionError, not after join_timeout."""
    attempt = simulate(restarts_scenario('events { at_seconds: 10 pod: "a" preemption {} }')).attempts[0]
    lost = next(e for e in attempt.timeline if e.what is What.RENDEZVOUS_LOST)
    host_exit = next(e for e in attempt.timeline if e.what is What.EXIT and e.actor == "a")
    b_waits = next(e for e in attempt.timeline if e.what is What.WAITS_IN_RENDEZVOUS and e.actor == "b")
    assert lost.actor == "b" and lost.at == pytest.approx(max(host_exit.at, b_waits.at))
    assert not any(e.what is What.RENDEZVOUS_TIMEOUT for e in attempt.timeline)


def _next_read(waits: float, change: float) -> float:
    """torch `dynamic_rendezvous.py` `_DistributedRendezvousOpExecutor.run`: a node waiting for its round reads the
    rendezvous state, then sleeps 1 s (`_delay(seconds=1)`) and reads again, from its join."""
    return waits + math.ceil(change - waits)


@pytest.mark.parametrize("exit_seconds", [8.0, 8.3, 8.7, 8.420000001])
def test_a_survivor_already_waiting_finds_the_store_gone_at_its_next_once_a_second_read(exit_seconds):
    """The store's host is preempted (a signal: torch's `launch_agent` leaves the rendezvous open) and its process
    lingers; the survivor, restarting its workers, waits in rendezvous and finds the store gone only at the first
    read after the host's exit (`c10d_rendezvous_backend` `_call_store`: RendezvousConnectionError), not at it."""
    spec = scenario(
        'events { at_seconds: 10 pod: "a" preemption {} }',
        job="max_restarts: 1",
        plugin="upstream",
        extra=f'pod_timings {{ pod: "a" timings {{ exit_seconds: {exit_seconds} }} }}',
    )
    timeline = simulate(spec).attempts[0].timeline
    waits = next(e.at for e in timeline if e.what is What.WAITS_IN_RENDEZVOUS and e.actor == "b")
    host_exit = next(e.at for e in timeline if e.what is What.EXIT and e.actor == "a")
    assert waits < host_exit
    [lost] = [e for e in timeline if e.what in (What.RENDEZVOUS_LOST, What.RENDEZVOUS_CLOSED)]
    assert (lost.what, lost.actor) == (What.RENDEZVOUS_LOST, "b")
    assert lost.at == pytest.approx(_next_read(waits, host_exit)) and host_exit < lost.at < host_exit + 1


@pytest.mark.parametrize("past_the_read_ns", [-1, 0, 1])
def test_the_prover_places_the_next_read_on_the_nanosecond_as_the_simulator_does(past_the_read_ns):
    """`_DistributedRendezvousOpExecutor.run` reads once a second from the join (13.5 s here, the survivor's
    restart): a store lost 1 ns after a read is found a whole second later, on the exact numbers `aggsim prove`
    runs on as on the simulator's floats (the grid is counted in nanoseconds, not by a float ceiling)."""
    from fractions import Fraction

    from aggregation import prove as P
    from aggregation.nanoseconds import exact
    from aggregation.scenario import parse_scenario_source
    from aggregation.symbolic import Sym

    text = scenario_text('events { at_seconds: 10 pod: "a" preemption {} }', "max_restarts: 1", "exit_seconds: 8")
    source = parse_scenario_source(text, "t.textproto")
    exit_seconds = Fraction("8.47") + Fraction(past_the_read_ns, 10**9)  # the host exits 10.03 s + this
    interval = P.parse_range(f"timings.exit_seconds={float(exit_seconds)}", source.message)
    problem = P.Problem(source, source.message, (interval,), "upstream")
    point = {"timings.exit_seconds": exit_seconds}
    expected = Fraction("18.5") if past_the_read_ns <= 0 else Fraction("19.5")
    for execution in (P.run_symbolic(problem, point).execution, P.replay(problem, point)):
        [lost] = [e for e in execution.attempts[0].timeline if e.what is What.RENDEZVOUS_LOST]
        at = lost.at.value if isinstance(lost.at, Sym) else exact(lost.at)  # the prover's number, the float's
        assert (lost.actor, at) == ("b", expected)


@pytest.mark.parametrize("detection", [3.8, 4.0, 4.3, 4.7])
def test_an_agent_that_raises_closes_the_rendezvous_and_a_waiting_survivor_fails_at_its_next_read(detection):
    """torch `launcher/api.py` `launch_agent`: an agent that raises anything but a signal (here ChildFailedError:
    its workers failed with no restart left) shuts its rendezvous handler down on the way out
    (`DynamicRendezvousHandler.shutdown` -> `_close`), with the store still up. The waiting survivor fails with
    RendezvousClosedError at its next read (`_RendezvousJoinOp`), usually before the host has even exited.
    Restarts are the task's (one each): a spends its own at 10 s, b joins that round as a membership change (its
    workers hang) and spends its own on its error at 40 s; a's workers fail from it, and a, with none left,
    raises while b waits for the next round."""
    spec = scenario(
        'events { at_seconds: 10 pod: "a" worker_error {} } events { at_seconds: 40 pod: "b" worker_error {} }',
        job="max_restarts: 1",
        plugin="upstream",
        extra=f'{HUNG_PEER} pod_timings {{ pod: "a" timings {{ failure_detection_seconds: {detection} }} }}',
    )
    timeline = simulate(spec).attempts[0].timeline
    waits = [e.at for e in timeline if e.what is What.WAITS_IN_RENDEZVOUS and e.actor == "b"][-1]
    raises = next(e.at for e in timeline if e.what is What.AGENT_RAISES and e.actor == "a")
    host_exit = next(e.at for e in timeline if e.what is What.EXIT and e.actor == "a")
    assert waits < raises
    read = _next_read(waits, raises)
    [failed] = [e for e in timeline if e.what in (What.RENDEZVOUS_LOST, What.RENDEZVOUS_CLOSED)]
    assert (failed.actor, failed.reason) == ("b", "a") and failed.at == pytest.approx(read) and raises < read
    # a read after the host's exit cannot reach the store to see it closed: the connection fails first
    assert failed.what is (What.RENDEZVOUS_CLOSED if read < host_exit else What.RENDEZVOUS_LOST)
    [b_upload] = [u for u in simulate(spec).attempts[0].uploads if u.pod == "b"]
    assert b_upload.error.message.endswith(failed.what is What.RENDEZVOUS_CLOSED and "ClosedError" or "ConnectionError")


def test_a_preempted_agent_leaves_the_rendezvous_open():
    """`launch_agent` skips the shutdown on `SignalException` ("do NOT shutdown the rdzv_handler"): a pod whose
    agent was signalled closes nothing, so a waiting survivor learns only of the store's loss."""
    spec = scenario('events { at_seconds: 10 pod: "b" preemption {} }', job="max_restarts: 1", plugin="upstream")
    timeline = simulate(spec).attempts[0].timeline
    assert not any(e.what is What.RENDEZVOUS_CLOSED for e in timeline)


# A healthy agent reads the rendezvous at its looks (torch `_invoke_run`, `WorkerState.HEALTHY` branch:
# `rdzv_handler.num_nodes_waiting()`, `DynamicRendezvousHandler.num_nodes_waiting` -> `_state_holder.sync()`).


def test_a_healthy_agent_that_finds_a_node_waiting_restarts_its_workers_without_spending_a_restart():
    """`_invoke_run`: a look that finds the workers HEALTHY and `num_nodes_waiting() > 0` calls `_restart_workers`
    ("membership changes do not count as retries"). b's workers hang on their broken collective (as NCCL's do)
    when a's fail; a restarts and joins the wait list at 13.5 s; b's next look (17 s) finds it there, stops its
    workers and joins the round, with its own restart still left for a failure of its own later."""
    events = (
        'events { at_seconds: 10 pod: "a" worker_error {} } events { at_seconds: 40 pod: "b" worker_error {} } '
        "events { at_seconds: 80 completion {} }"
    )
    spec = scenario(events, job="max_restarts: 2", plugin="upstream", extra=HUNG_PEER)
    attempt = simulate(spec).attempts[0]
    by = {(e.what, e.actor): e for e in attempt.timeline}
    a_waits = next(e.at for e in attempt.timeline if e.what is What.WAITS_IN_RENDEZVOUS and e.actor == "a")
    change = by[What.MEMBERSHIP_CHANGE, "b"]
    assert change.at == _next_look(2.0, 5.0, a_waits) and change.count == 1
    b_joins = next(e.at for e in attempt.timeline if e.what is What.WAITS_IN_RENDEZVOUS and e.actor == "b")
    assert b_joins == pytest.approx(change.at + 0.03)  # its workers stopped (agent_shutdown_seconds)
    # b spent none of its 2 restarts on it: its own failure at 40 s leaves it 1; the job completes
    assert [e.count for e in attempt.timeline if e.what is What.RESTARTS_WORKERS and e.actor == "b"] == [1]
    assert [u.name for u in attempt.uploads] == ["outputs.pb"] and attempt.decision.decision.value == "SUCCEED"


def _next_look(started: float, interval: float, at: float) -> float:
    """torch `_invoke_run`: the agent sleeps `monitor_interval`, looks, and repeats, from its workers' start."""
    return started + interval * max(1, math.ceil((at - started) / interval))


@given(
    first=st.integers(0, 10**11),
    # in ns: whole, and not (1.5; 1.00001; 0.3 s and a fraction of a nanosecond)
    interval=st.one_of(st.integers(1, 3600 * 10**9), st.floats(1.0, 1000.0), st.floats(1e8, 3.6e12)),
    gap=st.one_of(st.integers(1, 10**11), st.integers(1, 4 * 10**15)),  # up to days, where a float holds 1 ns
)
def test_the_agent_s_next_look_is_the_first_tick_at_or_after_a_moment_for_any_interval(first, interval, gap):
    """torch `SimpleElasticAgent._invoke_run` looks, sleeps `monitor_interval`, and looks again: the look that sees a
    change at `at` is the first of `first + k * interval` at or after it, on the model's nanosecond clock, the
    interval being the number its float stands for (`nanoseconds.exact`, as `aggsim prove` reads it). An interval
    of a fractional number of nanoseconds used to be counted in whole ones, which took a tick before `at` (1.5 ns
    from 0, at 4 ns: 3 ns). Checked in exact numbers."""
    from fractions import Fraction

    from aggregation.nanoseconds import exact
    from aggregation.pods import _tick_at_or_after

    period = interval / 1e9
    look = _tick_at_or_after(first / 1e9, period, (first + gap) / 1e9)
    look_ns, step = round(Fraction(look) * 10**9), exact(period) * 10**9
    ticks = round((look_ns - first) / step)
    assert abs(look_ns - (first + ticks * step)) <= Fraction(1, 2)  # one of the agent's looks, on the clock
    assert look_ns >= first + gap  # not before the moment
    assert first + (ticks - 1) * step < first + gap - Fraction(1, 10**6)  # and the first such look


@pytest.mark.parametrize("failed_worker_exit", [None, 1.5, 2.5])
def test_a_store_lost_while_a_survivor_s_workers_look_healthy_fails_its_agent_at_its_next_look(failed_worker_exit):
    """`num_nodes_waiting` reads the store: gone (its host's agent exited), the read raises
    RendezvousConnectionError out of `_invoke_run`, and `SimpleElasticAgent.run` stops the workers on the way out.
    The workers look HEALTHY while they hang on the broken collective (None: 600 s), and also while a failed worker's
    process has not yet exited (`MultiprocessContext._poll` sees a failure only once the process is gone): at the
    look at 12 s, a's agent gone at 10.78 s, b's failed worker is still there when its process needs 2.5 s, gone
    when it needs 1.5 s (then the look finds it FAILED and the agent raises ChildFailedError instead)."""
    spec = scenario(
        'events { at_seconds: 10 pod: "a" preemption {} }',
        job="max_restarts: 0",
        plugin="upstream",
        timings="" if failed_worker_exit is None else f"failed_worker_exit_seconds: {failed_worker_exit}",
        extra=HUNG_PEER if failed_worker_exit is None else "",
    )
    attempt = simulate(spec).attempts[0]
    host_exit = next(e.at for e in attempt.timeline if e.what is What.EXIT and e.actor == "a")
    look = _next_look(2.0, 5.0, host_exit)
    lost = [e for e in attempt.timeline if e.what is What.RENDEZVOUS_LOST]
    raises = [e for e in attempt.timeline if e.what is What.AGENT_RAISES]
    [b_upload] = [u for u in attempt.uploads if u.pod == "b"]
    if failed_worker_exit == 1.5:
        assert not lost and raises[0].actor == "b" and b_upload.error.message == "Connection reset by peer"
    else:
        assert [(e.actor, e.at) for e in lost] == [("b", look)] and not raises
        assert b_upload.error.message == "RendezvousConnectionError"
        assert b_upload.at == pytest.approx(look + 0.03 + 0.05)  # workers stopped, then the upload


def test_a_join_deadline_is_noticed_at_the_first_read_after_it():
    """`_RendezvousJoinOp`: `time.monotonic() > deadline` is checked after each read, and the reads come once a
    second from the join: a 20.5 s join timeout ends the wait at the 21st read."""
    events = 'events { at_seconds: 10 pod: "b" preemption {} }'
    spec = parse_scenario(
        RESTARTS.replace("join_timeout_seconds: 20", "join_timeout_seconds: 20.5") % {"events": events, "restarts": 1},
        "t.textproto",
    )
    attempt = simulate(spec).attempts[0]
    waits = next(e for e in attempt.timeline if e.what is What.WAITS_IN_RENDEZVOUS and e.actor == "a")
    timeout = next(e for e in attempt.timeline if e.what is What.RENDEZVOUS_TIMEOUT)
    assert timeout.actor == "a" and timeout.at == pytest.approx(waits.at + 21)


def test_at_the_read_that_passes_the_deadline_the_store_s_loss_is_what_fails_the_wait():
    """`_DistributedRendezvousOpExecutor.run` reads (and a lost store fails the read) before `_RendezvousJoinOp`
    looks at the deadline: a store gone by the deadline's read is a RendezvousConnectionError, not a timeout."""
    spec = scenario(
        'events { at_seconds: 10 pod: "a" preemption {} }',
        job="max_restarts: 1 join_timeout_seconds: 5",
        plugin="upstream",
        extra='pod_timings { pod: "a" timings { exit_seconds: 8.3 } }',
    )
    timeline = simulate(spec).attempts[0].timeline
    waits = next(e.at for e in timeline if e.what is What.WAITS_IN_RENDEZVOUS and e.actor == "b")
    host_exit = next(e.at for e in timeline if e.what is What.EXIT and e.actor == "a")
    assert waits + 4 < host_exit < waits + 5
    [failed] = [e for e in timeline if e.what in (What.RENDEZVOUS_LOST, What.RENDEZVOUS_TIMEOUT)]
    assert (failed.what, failed.actor, failed.at) == (What.RENDEZVOUS_LOST, "b", pytest.approx(waits + 5))


def test_a_node_still_in_its_first_round_reads_on_its_own_grid_from_its_start():
    """torch `next_rendezvous`: the first round's join loop has read once a second since the agent started (its
    0-0.3 s random delay taken as 0): the store host killed at 1.3 s (no handlers yet: exit 241) is found gone at
    the read at 2 s, not at 1.3 s; the join deadline counts from the start too."""
    spec = scenario('events { at_seconds: 1.3 pod: "a" preemption {} }', job="max_restarts: 1", plugin="upstream")
    timeline = simulate(spec).attempts[0].timeline
    assert next(e.exit_code for e in timeline if e.what is What.EXIT and e.actor == "a") == 241
    [lost] = [e for e in timeline if e.what is What.RENDEZVOUS_LOST]
    assert (lost.actor, lost.at) == ("b", 2.0)


def test_a_pod_exits_exit_seconds_after_its_upload_lands():
    """flytekit `entrypoint.py` `_dispatch_execute` uploads, then the process tears down (torch's agent, the
    interpreter): measured 0.6-0.8 s (`aggsim calibrate`, landed -> exit). The job's condition follows the exit."""
    events = 'events { at_seconds: 30 pod: "b" preemption {} }'
    attempt = simulate(scenario(events, timings="exit_seconds: 0.7")).attempts[0]
    [upload] = [u for u in attempt.uploads if u.pod == "b"]
    assert attempt.exits["b"] == (0, pytest.approx(upload.at + 0.7))
    assert attempt.job_terminal_at == pytest.approx(upload.at + 0.7)


# --- torch's agent looks at its workers once per monitor interval (torch 2.13
#     `torch/distributed/elastic/agent/server/api.py` `SimpleElasticAgent._invoke_run` and `_exit_barrier`,
#     `torch/distributed/elastic/multiprocessing/api.py` `MultiprocessContext._poll`)


def agent_raises_at(spec, pod="a"):
    (raised,) = [e.at for e in spec.attempts[0].timeline if e.what is What.AGENT_RAISES and e.actor == pod]
    return raised


def test_a_failed_worker_is_noticed_at_the_agent_s_next_look_after_its_process_is_gone():
    """`_invoke_run` sleeps `monitor_interval` from the worker group's start, then looks; `_poll` sees a failed worker
    only once its process has exited. Workers start at 2 s (rendezvous), the agent looks at 7, 12, ... 32, 37."""
    error = 'events { at_seconds: 30 pod: "a" worker_error { message: "ValueError: bad batch" } }'
    timed = "failure_detection_seconds: 1 failed_worker_exit_seconds: 0.5 "
    # gone at 30.5 -> the look at 32 -> caught 1 s later
    assert agent_raises_at(simulate(scenario(error, timings=timed))) == pytest.approx(33.0)
    # gone at 32.5: one look later
    slow = "failure_detection_seconds: 1 failed_worker_exit_seconds: 2.5"
    assert agent_raises_at(simulate(scenario(error, timings=slow))) == pytest.approx(38.0)
    # looks at 2.2 + 5k: the one at 32.2
    early = timed + "first_monitor_poll_seconds: 0.2"
    assert agent_raises_at(simulate(scenario(error, timings=early))) == pytest.approx(33.2)
    # flytekit's Elastic(monitor_interval=1): looks every second, the one at 31
    quick = scenario(error, job="monitor_interval_seconds: 1", timings=timed)
    assert agent_raises_at(simulate(quick)) == pytest.approx(32.0)
    # the measured defaults: spawn's failed worker is gone 1.5 s later (31.5: the look at 32), caught 1.5 s later;
    # fork's is gone at once, the look at 32 still decides
    assert agent_raises_at(simulate(scenario(error))) == pytest.approx(33.5)
    assert agent_raises_at(simulate(scenario(error, job="start_method: FORK"))) == pytest.approx(33.5)


def test_finished_workers_are_seen_at_the_next_look_and_until_then_a_signal_is_a_preemption():
    """`_poll` counts a finished group once every worker has returned; `run` turns a SIGTERM into `SignalException`
    until the agent has passed `_exit_barrier`. Completion at 30, the look at 32, joined at 32.5."""
    completion = "events { at_seconds: 30 completion {} }"
    joined = "finished_worker_exit_seconds: 0.5"
    clean = simulate(scenario(completion, timings=joined)).attempts[0]
    passed = [e for e in clean.timeline if e.what is What.EXIT_BARRIER_PASSED]
    assert [(e.actor, e.at) for e in passed] == [("a", pytest.approx(32.5)), ("b", pytest.approx(32.5))]
    assert all(e.reason == "every agent arrived" for e in passed)
    assert clean.decision.decision.value == "SUCCEED"

    early = simulate(scenario(completion + ' events { at_seconds: 31 pod: "b" preemption {} }', timings=joined))
    early = early.attempts[0]
    assert any(e.what is What.SIGNAL_CAUGHT and e.actor == "b" for e in early.timeline)
    assert early.decision.decision.value == "RETRY" and early.outcome.error.code == "USER:Recoverable"
    upstream = simulate(
        scenario(completion + ' events { at_seconds: 31 pod: "b" preemption {} }', timings=joined, plugin="upstream")
    )
    assert any(e.what is What.SIGNAL_CAUGHT and e.reason == "IgnoreOutputs" for e in upstream.attempts[0].timeline)

    gone = simulate(scenario(completion + ' events { at_seconds: 34 pod: "b" preemption {} }', timings=joined))
    gone = gone.attempts[0]  # b passed the barrier at 32.5 and exited at 33.25: the signal finds no process
    assert not any(e.what is What.SIGNAL_CAUGHT for e in gone.timeline) and gone.decision.decision.value == "SUCCEED"


def test_a_signal_after_the_agent_returned_kills_the_pod_and_fails_the_job():
    """torch 2.13 `torch/distributed/elastic/multiprocessing/api.py` `PContext.start` installs
    `_terminate_process_handler`; this project's plugin (the scenario's) puts the default disposition back as its
    `_execute` returns (`plugin/signal_clock.py` `rendezvous_window_handlers`), so a SIGTERM while the entrypoint
    writes and tears down kills the agent (measured, too, for every plugin from 10 ms after the upload on, when
    CPython has finalized; before that upstream's and seed-pr's are refused: the test above). Under the default
    pyflyte-fast-execute the pod exits 241, and the operator fails the job (`pod failed`, RestartPolicy Never), so
    propeller reads no file."""
    completion = "events { at_seconds: 30 completion {} }"
    joined = "finished_worker_exit_seconds: 0.5"  # barrier passed at 32.5; a uploads at 32.55; both exit at 33.25
    for at in (32.52, 33.0):  # before and after the outputs landed
        events = completion + f' events {{ at_seconds: {at} pod: "a" preemption {{}} }}'
        late = simulate(replace(scenario(events, timings=joined), outputs_declared=True))
        late = late.attempts[0]
        assert not any(e.what is What.SIGNAL_CAUGHT for e in late.timeline)
        assert late.exits["a"] == (241, pytest.approx(at))
        assert late.job_condition == "Failed" and late.outcome.error.code == "DownstreamSystemError"
        assert [u.name for u in late.uploads] == ([] if at < 32.55 else ["outputs.pb"])
    for plugin in ("upstream", "seed-pr", "recoverable"):  # no plugin catches it: the agent has returned
        late = simulate(
            scenario(completion + ' events { at_seconds: 33 pod: "b" preemption {} }', timings=joined, plugin=plugin)
        )
        assert late.attempts[0].exits["b"][0] == 241, plugin


@pytest.mark.parametrize("plugin", ["upstream", "seed-pr", "recoverable"])
def test_a_sigterm_while_torch_s_handler_outlives_the_agent_is_refused(plugin):
    """torch 2.13 `PContext.start` installs `_terminate_process_handler`; upstream's `_execute` and the seed PR's leave
    it, so after the agent returns a SIGTERM raises `SignalException` in whichever flytekit statement runs
    (`entrypoint.py` `_dispatch_execute`: measured, a NON_RECOVERABLE SYSTEM error document while the value is
    converted, exit 1 during `put_data`, ignored inside an atexit callback) until CPython finalizes, 7-10 ms after the
    upload. The model refuses from the agent's result to `TORCH_HANDLER_AFTER_ENTRYPOINT_SECONDS` after the upload (a's
    outputs.pb at 32.55), or after the result when there is nothing to write (b's IgnoreOutputs); later, the default
    disposition kills. This project's plugin puts the default back as its `_execute` returns (`plugin/signal_clock.py`
    `rendezvous_window_handlers`): killed from the start. The same holds for a worker error's report."""
    from aggregation.pods import SignalUnderTorchHandler

    bound = defaults.TORCH_HANDLER_AFTER_ENTRYPOINT_SECONDS
    joined = "finished_worker_exit_seconds: 0.5"  # both pass the exit barrier at 32.5; a uploads at 32.55
    outlives = plugin != "recoverable"

    def preempted(events: str, pod: str, at: float, extra: str = ""):
        signal = f' events {{ at_seconds: {at!r} pod: "{pod}" preemption {{}} }}'
        spec = scenario(events + signal, timings=joined, plugin=plugin, extra=extra)
        return replace(spec, outputs_declared=True)

    completion = "events { at_seconds: 30 completion {} }"
    failed = 'events { at_seconds: 30 pod: "a" worker_error {} }'
    report = next(u for u in simulate(preempted(failed, "b", 90)).attempts[0].uploads if u.pod == "a")
    slow = 'pod_timings { pod: "a" timings { upload_seconds: 0.7 } }'
    cases = [
        (completion, "", "a", 32.5, 32.55 + bound),
        (completion, "", "b", 32.5, 32.5 + bound),
        (failed, "", "a", report.at - defaults.UPLOAD_SECONDS, report.at + bound),
        # on the nanosecond, as prove reads it: as floats 32.5 + 0.7 + 0.03 is 33.230000000000004
        (completion, slow, "a", 32.5, 33.23),
    ]
    for events, extra, pod, since, until in cases:
        for at in (since + 0.001, until - 0.001, until):
            if outlives and at < until:
                with pytest.raises(SignalUnderTorchHandler) as refused:
                    simulate(preempted(events, pod, at, extra))
                got = (refused.value.pod, refused.value.arrived, refused.value.since, refused.value.until)
                assert got == (pod, at, pytest.approx(since), pytest.approx(until)), (events, at)
                kind = f"a SIGTERM reaches {pod} while torch's handler outlives its agent (attempt 0)"
                assert refused.value.kind == kind
            else:
                exits = simulate(preempted(events, pod, at, extra)).attempts[0].exits
                assert exits[pod] == (241, pytest.approx(at)), (events, extra, at)


def test_the_exit_barrier_waits_for_every_agent_unless_the_store_is_gone():
    """`_exit_barrier` waits `exit_barrier_timeout` (300 s) for every agent; its failure is only logged, so an agent
    whose store host (worker 0's agent) has exited passes at once and returns success."""
    completion = "events { at_seconds: 30 completion {} }"
    joined = "finished_worker_exit_seconds: 0.5"
    preempt_a = ' events { at_seconds: 31 pod: "a" preemption {} }'
    host_preempted = simulate(scenario(completion + preempt_a, timings=joined))
    [b_passes] = [e for e in host_preempted.attempts[0].timeline if e.what is What.EXIT_BARRIER_PASSED]
    assert b_passes.actor == "b" and b_passes.at == pytest.approx(32.5)
    assert b_passes.reason == "the rendezvous store is gone"

    preempt_b = ' events { at_seconds: 31 pod: "b" preemption {} }'
    peer_preempted = simulate(scenario(completion + preempt_b, timings=joined))
    timeline = peer_preempted.attempts[0].timeline
    assert any(e.what is What.EXIT_BARRIER and e.actor == "a" for e in timeline)
    assert all(e.at >= 332.5 for e in timeline if e.what is What.EXIT_BARRIER_PASSED)


def test_a_sigterm_at_the_exit_barrier_is_raised_only_when_the_barrier_s_wait_returns():
    """torch `utils/store.py` `barrier` blocks in the store's C++ `wait`; CPython runs torch's
    `_terminate_process_handler` only once it returns, and `SimpleElasticAgent._exit_barrier` re-raises the
    SignalException. Interrupted, the wait polls again for its whole timeout (c10d `socket.cpp` `waitForInput`).
    Measured (torch 2.13, a barrier of two): a SIGTERM 1 s or 3 s in was raised when the other member arrived at
    6 s; with a 10 s timeout and no other member, at 11 s and 13 s. b waits at the barrier from 32.5 s, a arrives
    at 35 s."""
    completion = "events { at_seconds: 30 completion {} }"
    joined = "finished_worker_exit_seconds: 0.5"
    a_slower = 'pod_timings { pod: "a" timings { finished_worker_exit_seconds: 3 } }'
    preempt_b = ' events { at_seconds: 33 pod: "b" preemption {} }'
    for plugin, stamp in (("recoverable", 33.0), ("seed-pr", 35.0), ("upstream", None)):
        attempt = simulate(scenario(completion + preempt_b, timings=joined, plugin=plugin, extra=a_slower)).attempts[0]
        b = [(e.at, e.what, e.reason) for e in attempt.timeline if e.actor == "b"]
        assert (33.0, What.SIGNAL_HELD, "") in b, plugin
        assert (35.0, What.HELD_SIGNAL_RAISED, "every agent arrived") in b, plugin
        [caught] = [e for e in attempt.timeline if e.what is What.SIGNAL_CAUGHT]
        assert (caught.actor, caught.at, caught.stamp) == ("b", 35.0, stamp), plugin
        passed = [(e.actor, e.at) for e in attempt.timeline if e.what is What.EXIT_BARRIER_PASSED]
        assert passed == [("a", 35.0)], plugin  # a's wait is not held up: b's arrival was counted at 32.5
        errors = [u.error.timestamp for u in attempt.uploads if u.error is not None]
        assert errors == ([] if stamp is None else [stamp]), plugin

    # no other agent arrives: the held signal is raised at the barrier's timeout, 300 s from the signal, not from b's
    # arrival at 32.5 (a grace period long enough to see it)
    never = 'pod_timings { pod: "a" timings { finished_worker_exit_seconds: 390 } }'
    preempt_late = ' events { at_seconds: 100 pod: "b" preemption {} }'
    long_grace = "termination_grace_period_seconds: 400"
    attempt = simulate(scenario(completion + preempt_late, job=long_grace, timings=joined, extra=never)).attempts[0]
    [raised] = [e for e in attempt.timeline if e.what is What.HELD_SIGNAL_RAISED]
    assert (raised.actor, raised.at, raised.reason) == ("b", 400.0, "timed out")

    # the store's host leaves (its own preemption, caught at once before its barrier): b's wait fails, the signal rises
    preempt_a = ' events { at_seconds: 33.5 pod: "a" preemption {} }'
    attempt = simulate(scenario(completion + preempt_b + preempt_a, timings=joined, extra=a_slower)).attempts[0]
    [raised] = [e for e in attempt.timeline if e.what is What.HELD_SIGNAL_RAISED]
    assert (
        raised.actor == "b" and raised.at == attempt.exits["a"][1] and raised.reason == "the rendezvous store is gone"
    )


def test_a_preemption_marked_as_landing_in_a_fork_is_held_at_the_exit_barrier_where_nothing_forks():
    """`lands_during_fork` loses a signal inside `os.fork()` as workers start; at the exit barrier the workers have
    returned, so the signal is held there like any other (`Pod._hold_at_exit_barrier`)."""
    completion = "events { at_seconds: 30 completion {} }"
    a_slower = 'pod_timings { pod: "a" timings { finished_worker_exit_seconds: 3 } }'
    forked = ' events { at_seconds: 33 pod: "b" preemption { lands_during_fork: true } }'
    spec = scenario(
        completion + forked, job="start_method: FORK", timings="finished_worker_exit_seconds: 0.5", extra=a_slower
    )
    timeline = simulate(spec).attempts[0].timeline
    assert any(e.what is What.SIGNAL_HELD and e.pod == "b" for e in timeline)
    assert not any(e.what is What.SIGNAL_LOST for e in timeline)


def test_an_agent_killed_at_the_exit_barrier_still_counts_as_arrived():
    """torch `utils/store.py` `_barrier_nonblocking`: each agent adds one to a counter in the store as it arrives and
    the last one's add sets the key every agent waits on. b, SIGKILLed at the barrier while its SIGTERM is held,
    has added its one: a passes the barrier as it arrives instead of waiting out the 300 s timeout."""
    completion = "events { at_seconds: 30 completion {} }"
    a_slower = 'pod_timings { pod: "a" timings { finished_worker_exit_seconds: 10 } }'
    events = completion + ' events { at_seconds: 33 pod: "b" preemption {} }'
    spec = scenario(
        events, job="termination_grace_period_seconds: 5", timings="finished_worker_exit_seconds: 0.5", extra=a_slower
    )
    attempt = simulate(spec).attempts[0]
    assert attempt.exits["b"] == (137, 38.0)
    [passed] = [e for e in attempt.timeline if e.what is What.EXIT_BARRIER_PASSED]
    assert (passed.actor, passed.at, passed.reason) == ("a", 42.0, "every agent arrived")


def test_at_one_instant_the_store_s_loss_reaches_the_survivors_before_the_operator():
    """The store lives in worker 0's agent process: its socket closes as that process exits, so an agent blocked
    at the exit barrier (torch `utils/store.py` `barrier`: `store.wait`) fails there before the kubelet can report
    the exit and the operator (training-operator `ReconcileJobs`) clean up: b passes its barrier first, whatever the
    latency. The cleanup's SIGTERM then finds b's agent returned: within 30 ms, torch's handler may still be there
    (upstream leaves it until the interpreter finalizes) and the model refuses; later, the default disposition kills
    b under pyflyte-fast-execute (241)."""
    from aggregation.pods import SignalUnderTorchHandler

    events = 'events { at_seconds: 30 completion {} } events { at_seconds: 33 pod: "a" preemption {} }'
    a_slower = 'pod_timings { pod: "a" timings { finished_worker_exit_seconds: 3 } }'
    for latency in (0.0, 0.001, 0.2):
        job = f"clean_pod_policy: CLEAN_POD_POLICY_ALL pod_status_seconds: {latency}"
        spec = scenario(events, job=job, timings="finished_worker_exit_seconds: 0.5", plugin="upstream", extra=a_slower)
        if latency < 0.03:
            with pytest.raises(SignalUnderTorchHandler, match=r"attempt 0: b: a SIGTERM at 33\.7\d* s"):
                simulate(spec)
            continue
        attempt = simulate(spec).attempts[0]
        b = [(e.what, e.reason, e.exit_code) for e in attempt.timeline if e.actor == "b" or e.target == "b"]
        assert b[-4:] == [
            (What.EXIT_BARRIER_PASSED, "the rendezvous store is gone", None),
            (What.DELETES_POD, "All", None),
            (What.SIGTERM, "operator cleanup", None),
            (What.EXIT, b[-1][1], 241),
        ], latency


def test_the_kubelet_stops_a_pod_once_a_second_preemption_sends_no_second_sigterm():
    """kubelet `pod_workers.go`: a kill request for a pod that is already terminating keeps its grace period and
    does not signal it again. Measured: a second SIGTERM during a real pod's teardown made it exit non-zero, which
    no kubelet does to a terminating pod (the generated sample's sample-8, seed 20261201)."""
    twice = 'events { at_seconds: 30 pod: "b" preemption {} } events { at_seconds: 30.9 pod: "b" preemption {} }'
    grace = "termination_grace_period_seconds: 20"
    attempt = simulate(scenario(twice, job=grace, timings="agent_shutdown_seconds: 25")).attempts[0]
    sigterms = [e for e in attempt.timeline if e.what is What.SIGTERM and e.target == "b"]
    assert [e.at for e in sigterms] == [30.0]
    assert attempt.exits["b"] == (137, pytest.approx(50.0))  # SIGKILL the first signal's grace period later


def test_a_round_at_the_very_moment_an_outage_ends_reads_the_prefix():
    """An outage is [start, end): the round at `end` reads again. Counting rounds alike stops before it."""
    text = SCENARIOS.joinpath("storage_outage_during_the_read.textproto").read_text()
    text = text.replace("round_retry_seconds: 1", "round_retry_seconds: 0.125\n  max_workflow_retries: 100")
    first = simulate(parse_scenario(text)).attempts[0]
    observed = rounds_of(first, What.ROUND_FAILED)[0] + 0.125 * 40  # exact: multiples of 1/8 added in [32, 64)
    tied = text.replace(
        "events { at_seconds: 31 storage_outage { duration_seconds: 3.5 } }",
        f"events {{ at_seconds: {observed - 8!r} storage_outage {{ duration_seconds: 8 }} }}",
    )
    attempt = simulate(parse_scenario(tied)).attempts[0]
    assert attempt.observed_at == observed and attempt.failed_rounds == 40
    assert rounds_of(attempt, What.ROUNDS_FAIL_ALIKE)  # the 39 rounds before it were counted in one step


def rounds_of(attempt, what):
    return [e.at for e in attempt.timeline if e.what is what]


def test_a_sweep_counts_a_point_the_map_order_decides_under_its_worst_outcome_and_logs_each_order(tmp_path):
    """`explore.sweep` runs such a point under each order (`simulate.each_map_order`) and counts it once, under the
    worst outcome its orders give (here the Worker first: a retry, bad where a genuine error should fail the node),
    and in `map_order_decided`. That case is shown with its order, which `simulate` replays; `--out` has a row per
    order, each with its own outcome and its order. The point after it is decided, and counted as it is."""
    from aggregation.caselog import CaseLog
    from aggregation.scenario import parse_scenario_source

    text = scenario_text(_tie_with_a_exit("elastic: false"), job="elastic: false")
    source = parse_scenario_source(text, "t.textproto")
    deletion = "attempts[0].events[1].at_seconds"
    at = source.message.attempts[0].events[1].at_seconds
    rows = tmp_path / "cases.csv"
    with CaseLog(str(rows), [deletion]) as log:
        result = sweep(
            source,
            [Variation(deletion, (at, at + 0.5))],
            plugins=("upstream",),
            flags=(True,),
            on_case=lambda a, cell, *case: log.write(a, cell.plugin, cell.aggregation, *case),
        )
    [cell] = result.cells
    assert result.meaning["RETRIED"] == "bad"  # the scenario's genuine error should fail the node for good
    # after the tie the Master's success ends the job, and propeller reads the error files: a failure for good
    assert dict(cell.counts) == {"RETRIED": 1, "FAILED_PERMANENTLY": 1} and cell.map_order_decided == 1
    assignment, execution = cell.counterexamples["RETRIED"]
    assert assignment == ((deletion, at), ("attempts[0].replica_map_order", "WORKER_FIRST"))
    assert cell.map_order_example == (
        ((deletion, at),),
        (
            ((("attempts[0].replica_map_order", "MASTER_FIRST"),), "FAILED_PERMANENTLY"),
            ((("attempts[0].replica_map_order", "WORKER_FIRST"),), "RETRIED"),
        ),
    )
    as_json = sweep_to_json(result)["cells"][0]
    assert as_json["decided_by_map_order"] == 1
    assert as_json["map_order_example"]["orders"][1] == {
        "pins": {"attempts[0].replica_map_order": "WORKER_FIRST"},
        "outcome": "RETRIED",
    }
    lines = rows.read_text().splitlines()
    assert lines[0].endswith(",replica_map_order,refusal") and len(lines) == 1 + 3
    tied = [line.split(",") for line in lines if line.startswith(repr(at) + ",")]
    assert [(row[3], row[-2]) for row in tied] == [
        ("FAILED_PERMANENTLY", "attempts[0].replica_map_order=MASTER_FIRST"),
        ("RETRIED", "attempts[0].replica_map_order=WORKER_FIRST"),
    ]
    pinned = text.replace("attempts {", "attempts { replica_map_order: WORKER_FIRST")
    replayed = simulate(parse_scenario(pinned, "t", "upstream"))
    assert execution_to_json(replayed) == execution_to_json(execution)


def test_a_sweep_counts_a_point_the_model_refuses_and_goes_on(tmp_path):
    """A point the model refuses to play (`scenario.ModelRefusal`; here `operator.PodRecreation`: the busy operator
    reads the deleted worker after its exit, and training-operator v1.8.0 `pkg/controller.v1/common/pod.go`
    `ReconcilePods` would create a new pod in its slot) is counted REFUSED, and the points around it are still
    decided: below the pod's exit 0.73 s after its mark the job fails and retries, at it the exit counts and the
    preemption is silent. The first refused point is kept with the model's line, which `simulate` gives there too;
    its `--out` row (`CaseLog`) has the line and nothing played."""
    from aggregation.caselog import CaseLog

    source = read_scenario("preemption_by_pod_deletion")
    wait = "job.reconcile_seconds"
    rows = tmp_path / "cases.jsonl"
    with CaseLog(str(rows), [wait]) as log:
        result = sweep(
            source,
            [Variation(wait, (0.5, 0.73, 1.0, 2.0))],
            plugins=("upstream",),
            flags=(True,),
            on_case=lambda a, cell, *case: log.write(a, cell.plugin, cell.aggregation, *case),
        )
    [cell] = result.cells
    assert dict(cell.counts) == {"RETRIED": 1, "SUCCEEDED_SILENTLY": 1, "REFUSED": 2} and cell.total == 4
    assert result.meaning["REFUSED"] == "refused" and "REFUSED" in shown_outcomes(result)
    assignment, why = cell.refusal_example
    assert assignment == ((wait, 1.0),) and "ReconcilePods -> createNewPod" in why
    assert "REFUSED" not in cell.counterexamples
    with pytest.raises(PodRecreation) as refused:
        simulate(source.spec("upstream", message=_with(source.message, wait, 1.0)))
    assert str(refused.value) == why
    as_json = sweep_to_json(result)["cells"][0]
    assert as_json["counts"]["REFUSED"] == 2
    assert as_json["refusal_example"] == {"assignment": {wait: 1.0}, "reason": why}
    cases = [json.loads(line) for line in rows.read_text().splitlines()]
    assert [c["outcome"] for c in cases] == ["RETRIED", "SUCCEEDED_SILENTLY", "REFUSED", "REFUSED"]
    assert cases[2]["refusal"] == why and cases[2]["final_phase"] is None and cases[2]["attempts"] is None
    assert cases[0]["refusal"] is None
    assert len({tuple(c) for c in cases}) == 1  # every row has its keys in one order


def _with(message, field: str, value):
    from aggregation.explore import assign_field

    copy = type(message)()
    copy.CopyFrom(message)
    assign_field(copy, field, value)
    return copy


def test_the_sweep_report_counts_refused_points_only_when_there_are_some():
    """In a pipe (one block per cell, 80 columns): a row counts the points the model refuses, and the first is shown
    with the model's line; a sweep with none has no such row."""
    vary = ["--plugin", "upstream"]
    busy = subprocess.run(
        [AGGSIM, "sweep", "preemption_by_pod_deletion", "--vary", "job.reconcile_seconds=0.5,1", *vary],
        capture_output=True,
        text=True,
    )
    assert busy.returncode == 0, busy.stderr
    assert "  refused by the model  1 ( 50%)" in busy.stdout
    block = busy.stdout.split("upstream, aggregation on: first point the model refuses\n", 1)[1].splitlines()
    assert block[0] == "job.reconcile_seconds=1.0" and block[1].startswith("  the operator's reconcile at 31.6 s")
    assert all(len(line) <= 80 for line in busy.stdout.splitlines())
    idle = subprocess.run(
        [AGGSIM, "sweep", "preemption_by_pod_deletion", "--vary", "job.reconcile_seconds=0,0.5", *vary],
        capture_output=True,
        text=True,
    )
    assert idle.returncode == 0 and "refuse" not in idle.stdout


def test_a_sweep_over_the_map_order_itself_keeps_each_row_s_varied_value(tmp_path):
    """Varying `replica_map_order` with unset among its values: the unset point is run under each order, its rows keep
    the varied value (unset) with the order they took in their own column, and its case names the field once."""
    from aggregation.caselog import CaseLog
    from aggregation.scenario import parse_scenario_source

    source = parse_scenario_source(scenario_text(_tie_with_a_exit("elastic: false"), job="elastic: false"), "t")
    order = "attempts[0].replica_map_order"
    rows = tmp_path / "cases.jsonl"
    with CaseLog(str(rows), [order]) as log:
        result = sweep(
            source,
            [Variation(order, ("REPLICA_MAP_ORDER_UNSET", "MASTER_FIRST"))],
            plugins=("upstream",),
            flags=(True,),
            on_case=lambda a, cell, *case: log.write(a, cell.plugin, cell.aggregation, *case),
        )
    cases = [json.loads(line) for line in rows.read_text().splitlines()]
    assert [(c["assignment"][order], c["replica_map_order"], c["outcome"]) for c in cases] == [
        ("REPLICA_MAP_ORDER_UNSET", f"{order}=MASTER_FIRST", "FAILED_PERMANENTLY"),
        ("REPLICA_MAP_ORDER_UNSET", f"{order}=WORKER_FIRST", "RETRIED"),
        ("MASTER_FIRST", None, "FAILED_PERMANENTLY"),
    ]
    [cell] = result.cells
    assert cell.counterexamples["RETRIED"][0] == ((order, "WORKER_FIRST"),)


def test_the_sweep_report_shows_how_many_points_go_s_map_order_decided_and_the_first(tmp_path):
    """In a pipe (one block per cell, nothing cut at 80 columns): a column counts the points Go's map order decided,
    only when there are some, and the first is listed with each order's outcome."""
    from conftest import MAP_ORDER_TIE

    vary = ["--vary", "attempts[0].events[1].at_seconds=35.1,35.15", "--plugin", "upstream"]
    result = subprocess.run([AGGSIM, "sweep", MAP_ORDER_TIE, *vary], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "  decided by Go's map order  1 ( 50%)" in result.stdout
    block = result.stdout.split("first point Go's map order decides\n", 1)[1].splitlines()
    assert block[:3] == [
        "attempts[0].events[1].at_seconds=35.15",
        "  attempts[0].replica_map_order=MASTER_FIRST: succeeded",
        "  attempts[0].replica_map_order=WORKER_FIRST: retried",
    ]
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    apart = subprocess.run(
        [AGGSIM, "sweep", MAP_ORDER_TIE, *vary[:1], "attempts[0].events[1].at_seconds=35.1,35.2", *vary[2:]],
        capture_output=True,
        text=True,
    )
    assert apart.returncode == 0 and "map order" not in apart.stdout


def test_the_readme_table_of_shipped_scenarios_is_what_simulate_says():
    """Each row's first words per plugin ("succeeds silently", "retried", "fails", or "likewise": the cell before)."""
    import re

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    rows = re.findall(
        r"^\| `(\w+)`[^|]*\| ([^|]+)\| ([^|]+)\| ([^|]+)\|$", readme.split("Shipped scenarios", 1)[1], re.M
    )
    words = {
        "succeeds silently": "SUCCEEDED_SILENTLY",
        "retried": "RETRIED_THEN_SUCCEEDED",
        "fails": "FAILED_PERMANENTLY",
    }
    assert len(rows) >= 15
    for name, *cells in rows:
        said = []
        for cell in cells:
            cell = cell.strip()
            said.append(
                said[-1] if cell.startswith("likewise") else next(p for w, p in words.items() if cell.startswith(w))
            )
        for plugin, phase in zip(("upstream", "seed-pr", "recoverable"), said):
            assert run(name, plugin).final_phase.value == phase, (name, plugin)


def _lagging_mtime(lag: str, error_at: str = "30.001") -> str:
    """`tests/data/genuine_error_with_a_lagging_mtime.textproto` (a sibling's preemption at 30 s, a genuine error in
    pod a) with a's file time lag and its error's moment set."""
    text = Path(LAGGING_MTIME).read_text()
    return text.replace("file_time_lag_seconds: 0.002", f"file_time_lag_seconds: {lag}").replace(
        "at_seconds: 30.001", f"at_seconds: {error_at}"
    )


@pytest.mark.parametrize(
    "lag, stamp, phase",
    [
        ("0", 30.001, "RETRIED_THEN_SUCCEEDED"),  # the signal's stamp, 30 s, is earlier: the node retries
        ("0.002", 29.999, "FAILED_PERMANENTLY"),  # the mtime trails to 29.999 s: the genuine error is earlier
        ("0.5", 30.0, "FAILED_PERMANENTLY"),  # 29.501 is too far before torch's second: 30 s, a tie, a's listed first
    ],
)
def test_a_worker_failure_is_stamped_with_its_error_file_s_mtime_which_may_trail_it(lag, stamp, phase) -> None:
    """The recoverable plugin refines torch's whole-second stamp with the worker's error file's mtime
    (`plugin/task.py` `refine_first_failure_timestamp`), which Linux takes from its coarse clock, up to a tick
    behind: a genuine error 1 ms after a sibling's preemption can then carry the earlier stamp and win propeller's
    earliest-error read (`remote_file_output_reader.go` `earliest.After(ts)`). An mtime more than 20 ms before
    torch's second (`FILE_TIME_GRAIN_SECONDS`) is not trusted, and torch's second stands (a tie with the signal's
    stamp at 30 s, which the earliest reader breaks by listing order: a's file is listed first)."""
    execution = simulate(parse_scenario(_lagging_mtime(lag)))
    (genuine,) = [u.error for u in execution.attempts[0].uploads if u.error and u.pod == "a"]
    assert genuine.timestamp == pytest.approx(stamp, abs=1e-9) and not genuine.recoverable
    assert execution.final_phase.value == phase


def test_the_model_s_file_time_grain_is_the_plugin_s() -> None:
    from plugin.task import FILE_TIME_GRAIN_SECONDS

    assert defaults.FILE_TIME_GRAIN_SECONDS == FILE_TIME_GRAIN_SECONDS


def test_run_local_refuses_a_file_time_lag_which_only_the_kernel_sets() -> None:
    """`localjob/runner.py` `check_playable`: a real pod's error file gets whatever mtime the kernel's coarse clock
    gives it, so a scenario that sets the lag cannot be played as written: refused in one line naming the field."""
    from localjob.runner import Unplayable, check_playable

    check_playable(parse_scenario(_lagging_mtime("0")))
    with pytest.raises(Unplayable, match=r"^file_time_lag_seconds of a: .*cannot set$"):
        check_playable(parse_scenario(_lagging_mtime("0.002")))


@pytest.mark.parametrize(
    "error_at, lag, stamp",
    [
        ("30.016", "0.036", 29.98),  # 29.98 is exactly FILE_TIME_GRAIN_SECONDS before torch's second: trusted
        ("30.016", "0.037", 30.0),  # 29.979 is past the grain: torch's second (in floats 30.016 - 0.036 < 29.98)
        ("29.9999", "-0.0002", 29.0),  # the write's clock read after torch's, in the next second: torch's second
    ],
)
def test_an_mtime_is_trusted_exactly_within_the_plugin_s_window(error_at, lag, stamp) -> None:
    """`plugin/task.py` `refine_first_failure_timestamp` trusts an mtime in `[second - 0.02, second + 1)`, torch's
    whole second `second`; the model decides it on the nanosecond, so `simulate` and `prove` agree at its edges."""
    execution = simulate(parse_scenario(_lagging_mtime(lag, error_at)))
    (genuine,) = [u.error for u in execution.attempts[0].uploads if u.error and u.pod == "a"]
    assert genuine.timestamp == stamp
