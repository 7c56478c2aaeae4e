"""The model checked against the real thing: the shipped incidents run as real local PyTorchJobs.

Each real run starts `pyflyte-execute` pods (torch elastic, c10d, gloo) with the environment Flyte's
backend plugin gives them, drives them with the simulator's own kubelet, training operator and propeller
(`aggregation/world.py`, through `localjob/`) and must reach the same verdict as the simulator: which
error wins (code, kind, worker), the node decision per attempt, the number of attempts, checkpoint
resumption and the final phase. `make test` runs one
representative case; `make test-real` runs them all.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.plugin, pytest.mark.real, pytest.mark.timeout(600)]

from conftest import SCENARIOS, assert_agrees_with_the_simulator, conforming_local_run  # noqa: E402


def conform(scenario: str, plugin: str, real_runs):
    """The scenario's first real run this session (shared with the distribution test) must match the simulator."""
    from aggregation.scenario import load_scenario

    run = real_runs.run(scenario, plugin)
    real = run.execution
    try:
        assert_agrees_with_the_simulator(load_scenario(str(SCENARIOS / f"{scenario}.textproto"), plugin), real)
    except AssertionError:  # the same comparison (run-local printed `simulate(spec)` too), with the pods' log lines
        raise AssertionError(f"real run disagrees with the simulator: {run.evidence}") from None
    return real


REAL_OUTCOME = {
    "SUCCEEDED_SILENTLY": "SUCCEEDED_SILENTLY",
    "FAILED_PERMANENTLY": "FAILED_PERMANENTLY",
    "RETRIED_THEN_SUCCEEDED": "RETRIED",
    "SUCCEEDED": "SUCCEEDED",
}


@pytest.mark.race
def test_upstream_plugin_preemption_race_is_predicted_by_the_sweep(real_runs):
    """The incident, for real: the upstream pod exits 0 with nothing and the job is Succeeded; whether propeller
    also sees the survivor's consequential error depends on who is faster. Every real outcome must be one the
    simulator's sweep predicts over the measured ranges of the survivor's phases (upload, its failed worker's exit,
    the catch after the look) and wherever its agent's looks fall. With the measured phases the survivor's error
    lands 2 s or more after the signal, after propeller's look (1 s after the preempted pod's exit), so the sweep
    predicts a silent success only; a longer observation delay makes it a race (`aggsim sweep`).
    Runs: AGGSIM_CONFORMANCE_RUNS (default 1; the first is shared with the distribution test)."""
    import os
    from collections import Counter

    from aggregation.explore import Variation, sweep
    from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
    from aggregation.scenario import read_scenario

    path = str(SCENARIOS / "preemption_during_training.textproto")
    variations = [
        Variation("timings.upload_seconds", (0.05, 0.5, 1.0, 2.0)),
        Variation("timings.failed_worker_exit_seconds", (1.1, 1.5, 2.0)),
        Variation("timings.failure_detection_seconds", (1.25, 1.5, 2.1)),
        # where the survivor's agent's looks fall: the real runner does not place them
        Variation("timings.first_monitor_poll_seconds", (0.5, 1.5, 2.5, 3.5, 4.5)),
    ]
    predicted = sweep(read_scenario(path), variations, plugins=("upstream",), flags=(True,)).cells[0].counts
    assert "SUCCEEDED_SILENTLY" in predicted  # the incident: a preempted training run ends green
    observed = Counter()
    for run in range(int(os.environ.get("AGGSIM_CONFORMANCE_RUNS", "1"))):
        real = real_runs.get("preemption_during_training", "upstream", run)
        attempt = real.attempts[0]
        assert attempt.job_condition == "Succeeded" and attempt.pods  # the preempted pod exited 0
        assert dict((p.pod, p.exit_code) for p in attempt.pods)["train-worker-1"] == 0
        observed[pb.FinalPhase.Name(real.final_phase)] += 1
    print(f"real outcomes over {sum(observed.values())} run(s): {dict(observed)}; predicted: {dict(predicted)}")
    assert {REAL_OUTCOME[phase] for phase in observed} <= set(predicted)


@pytest.mark.slow
def test_recoverable_plugin_preemption_retries_and_resumes_from_checkpoint(real_runs):
    real = conform("preemption_during_training", "recoverable", real_runs)
    first, second = real.attempts
    assert (
        first.decision == "RETRY" and first.error.code == "USER:Recoverable" and first.error.worker == "train-worker-1"
    )
    assert first.wrote_checkpoint and second.resumed_from_checkpoint.startswith("attempt 0")


@pytest.mark.slow
def test_a_preemption_by_pod_deletion_fails_the_job_at_once_and_retries_even_upstream(real_runs):
    """training-operator v1.8.0 `UpdateJobReplicaStatuses`: the deleted, still running pod counts as failed, so the
    job is Failed at the deletion, before the upstream plugin's exit 0 could make it Succeeded; propeller reads no
    file and retries (DownstreamSystemError), and the retry resumes from the checkpoint. Real pods, the same world."""
    real = conform("preemption_by_pod_deletion", "upstream", real_runs)
    first, second = real.attempts
    assert (first.job_condition, first.decision, first.error.code) == ("Failed", "RETRY", "DownstreamSystemError")
    assert second.resumed_from_checkpoint.startswith("attempt 0")


@pytest.mark.slow
def test_sibling_user_error_wins_over_cleanup_and_the_node_fails(real_runs):
    real = conform("sibling_user_error_cleanup", "recoverable", real_runs)
    [attempt] = real.attempts
    assert attempt.decision == "FAIL" and attempt.error.worker == "train-worker-0"


@pytest.mark.slow
def test_a_non_elastic_job_s_master_reports_its_error_in_error_pb_with_no_worker_name(tmp_path):
    """flyteplugins `pytorch.go` `BuildResource` gives `_F_WN`/`_F_DES` to the Worker replicas only: the real master
    pod (`pyflyte-execute` with neither) writes `error.pb` with no worker name although aggregation is on, and
    propeller's earliest reader reports that. The job is Succeeded when the master exits 0 (`UpdateJobStatus`)."""
    from aggregation.scenario import parse_scenario_source

    text = (SCENARIOS / "sibling_user_error_cleanup.textproto").read_text()
    text = text.replace("nproc_per_node: 2", "nproc_per_node: 2 elastic: false")
    real = conforming_local_run(
        parse_scenario_source(text, "non_elastic.textproto").spec("recoverable"), tmp_path / "run"
    )
    [attempt] = real.attempts
    assert attempt.job_condition == "Succeeded" and attempt.decision == "FAIL"
    assert (attempt.winning_file, attempt.error.worker) == ("error.pb", "")
    assert "bad batch" in attempt.error.message
    # the runner knows the master by its file's name, the only error.pb among per-worker files
    assert [file.pod for file in attempt.files if file.name == "error.pb"] == ["train-worker-0"]


def test_a_real_job_past_its_deadline_fails_at_a_pod_s_exit_deleting_the_pod_still_training(tmp_path):
    """training-operator v1.8.0 `common/job.go` `ReconcileJobs`: past `ActiveDeadlineSeconds`, the reconcile that pod
    b's exit wakes (nothing reconciles at the deadline itself: the reconciler's `FakeWorkQueue`) deletes every pod,
    CleanPodPolicy None notwithstanding, and fails the job. The real pod a gets the operator's SIGTERM while its
    agent handles its peer's death, and propeller reads no file: the Failed condition's message is the error."""
    from aggregation.scenario import parse_scenario_source

    text = """
    plugin: RECOVERABLE
    job { pods: "train-worker-0" pods: "train-worker-1" nproc_per_node: 1 monitor_interval_seconds: 1
          active_deadline_seconds: 10 }
    task { retries: 0 training_seconds: 30 }
    propeller { error_aggregation: true observation_delay_seconds: 1 }
    attempts { events { at_seconds: 12 pod: "train-worker-1" preemption {} } }
    """
    real = conforming_local_run(parse_scenario_source(text, "deadline.textproto").spec(), tmp_path / "run")
    [attempt] = real.attempts
    assert (attempt.job_condition, attempt.error.code) == ("Failed", "DownstreamSystemError")
    assert attempt.error.message.endswith("Job train has failed because it was active longer than specified deadline")
    exited = next(e.at_seconds for e in attempt.timeline if e.kind == "exit" and e.pod == "train-worker-1")
    [deletion] = [e for e in attempt.timeline if e.kind == "deletes_pod"]
    assert (deletion.pod, deletion.reason) == ("train-worker-0", "ActiveDeadlineSeconds")
    assert deletion.at_seconds == pytest.approx(exited, abs=0.1)  # the reconcile the exit woke, on a wall clock
    assert any(e.kind == "sigterm" and e.pod == "train-worker-0" for e in attempt.timeline)


def test_a_real_job_deleted_by_its_ttl_before_propeller_looks_fails_on_the_system_budget(tmp_path):
    """training-operator v1.8.0 `common/job.go` `CleanupJob`: with a 1 s TTL the job is deleted within the second after
    it finished, by propeller's round 1 s later (the model plays the latest moment, the job as finished on a whole
    second, and its requeue's reconcile comes before the round of the same instant); flyte v1.16.8 `plugin_manager.go`
    `checkResourcePhase` finds no job: SYSTEM `ResourceDeletedExternally`, no file read, and with no system retry
    left (max-node-retries-system-failures 0) the node fails. Real pods, on the wall clock."""
    from flyteidl.core import execution_pb2

    from aggregation.scenario import parse_scenario_source

    text = """
    plugin: RECOVERABLE
    job { pods: "train-worker-0" pods: "train-worker-1" nproc_per_node: 1 monitor_interval_seconds: 1
          ttl_seconds_after_finished: 1 }
    task { retries: 2 training_seconds: 30 }
    propeller { error_aggregation: true observation_delay_seconds: 1 max_node_retries_system_failures: 0 }
    attempts { events { at_seconds: 12 pod: "train-worker-1" preemption {} } }
    """
    real = conforming_local_run(parse_scenario_source(text, "ttl.textproto").spec(), tmp_path / "run")
    [attempt] = real.attempts
    assert (attempt.job_condition, attempt.decision) == ("Deleted", "FAIL")
    system = execution_pb2.ExecutionError.SYSTEM
    assert (attempt.error.code, attempt.error.kind) == ("ResourceDeletedExternally", system)
    [deletion] = [e for e in attempt.timeline if e.kind == "deletes_job"]
    terminal = next(e.at_seconds for e in attempt.timeline if e.kind == "job_terminal")
    assert terminal < deletion.at_seconds == pytest.approx(terminal + 1, abs=0.1)  # a requeue, on a wall clock


@pytest.mark.slow
def test_aggregation_off_a_preemption_retries(real_runs):
    """Flyte's default reader (the single error.pb, last writer wins): the survivor's consequence yields to
    the preempted pod's report, so the node retries and resumes."""
    real = conform("preemption_during_training_no_aggregation", "recoverable", real_runs)
    first, second = real.attempts
    assert first.winning_file == "error.pb" and first.error.code == "USER:Recoverable" and first.decision == "RETRY"
    assert second.resumed_from_checkpoint.startswith("attempt 0")


@pytest.mark.slow
def test_aggregation_off_a_sibling_s_genuine_error_is_what_propeller_reads(real_runs):
    """Flyte's default reader: the cleanup's SIGTERM to the other pod is a consequence and yields, so the
    genuine error stays in error.pb and the node fails for good (no masking, upstream PR 2064's case)."""
    real = conform("sibling_user_error_cleanup_no_aggregation", "recoverable", real_runs)
    [attempt] = real.attempts
    assert attempt.decision == "FAIL" and attempt.error.code == "USER:RuntimeError"
    assert "bad batch" in attempt.error.message


@pytest.mark.slow
def test_aggregation_off_an_operator_seconds_late_still_reports_the_sibling_s_genuine_error(tmp_path):
    """The operator hears of the store host's exit 3 s late (`job.pod_status_seconds: 3`: the kubelet's status
    report), and the real runner's operator waits that long too. The recoverable plugin reports the sibling's
    genuine error whichever reaches the survivor first: the store's loss (it waits for a sibling's report, finds
    it, and yields) or the late cleanup's SIGTERM (it yields too). Real survivors sometimes had not noticed the
    store's loss 3 s after its host's exit, so which of the two comes first is not asserted here; and a survivor that
    notices it before the host's own exit exits first, so the 3 s are counted from the first exit the operator
    hears of (CI saw 2.88 s from the host's)."""
    from aggregation.scenario import load_scenario

    text = (SCENARIOS / "sibling_user_error_cleanup_no_aggregation.textproto").read_text()
    path = tmp_path / "slow_pod_status.textproto"
    path.write_text(text.replace("job {", "job { pod_status_seconds: 3", 1))
    real = conforming_local_run(load_scenario(str(path), "recoverable"), tmp_path / "run")
    [attempt] = real.attempts
    assert attempt.decision == "FAIL" and "bad batch" in attempt.error.message
    exited = min(e.at_seconds for e in attempt.timeline if e.kind == "exit")
    terminal = next(e.at_seconds for e in attempt.timeline if e.kind == "job_terminal")
    assert terminal - exited == pytest.approx(3, abs=0.1)


@pytest.mark.slow
def test_a_retry_with_nothing_to_play_still_waits_the_operator_s_seconds(tmp_path):
    """The retry after a preemption trains clean to its end. From its completion on its real clock runs at the
    wall's pace (`localjob/timebase.py`), so the operator hears of the first exit `job.pod_status_seconds` (2 s)
    later, as the simulator's does; the timebase used to map a clean attempt's every moment to one wall instant,
    and the job turned Succeeded at the exit."""
    from aggregation.scenario import load_scenario

    text = (SCENARIOS / "preemption_during_training.textproto").read_text()
    path = tmp_path / "slow_pod_status.textproto"
    path.write_text(text.replace("job {", "job { pod_status_seconds: 2", 1))
    real = conforming_local_run(load_scenario(str(path), "recoverable"), tmp_path / "run")
    retry = real.attempts[1]
    assert (retry.decision, retry.job_condition) == ("SUCCEED", "Succeeded")
    exited = min(e.at_seconds for e in retry.timeline if e.kind == "exit")
    terminal = next(e.at_seconds for e in retry.timeline if e.kind == "job_terminal")
    assert terminal - exited == pytest.approx(2, abs=0.1)


@pytest.mark.slow
@pytest.mark.parametrize("offset", [-0.25, 0.25])
def test_aggregation_off_a_preemption_retries_with_the_preempted_node_s_clock_skewed(tmp_path, offset):
    """Each pod on its own clock (libfaketime shifts the wall clock of the preempted pod's agent and workers by
    the documented bound): the order of real writes decides, so the node still retries."""
    from localjob.pod import libfaketime_path

    if libfaketime_path() is None:
        pytest.fail("libfaketime is missing: .ci/system-packages installs it (Debian package faketime)")
    text = (SCENARIOS / "preemption_during_training_no_aggregation.textproto").read_text()
    path = tmp_path / "skewed.textproto"
    path.write_text(text.replace("clock_offset_seconds: 0", f"clock_offset_seconds: {offset}"))
    from aggregation.scenario import load_scenario

    real = conforming_local_run(load_scenario(str(path), "recoverable"), tmp_path / "run")
    first = real.attempts[0]
    assert first.decision == "RETRY" and first.error.code == "USER:Recoverable"
    sigterm = next(e for e in first.timeline if e.kind == "sigterm" and e.pod == "train-worker-1")
    upload = next(e for e in first.timeline if e.kind == "upload" and e.recoverable)  # the preempted pod's
    skew = upload.stamp_seconds - sigterm.at_seconds  # the stamp is the preempted node's own clock's
    if offset > 0:  # the kernel stamps the arrival (`plugin/signal_clock.py`): measured within 1 ms of the kill
        assert skew == pytest.approx(offset, abs=0.1)
    else:  # before the timebase's anchor (the SIGTERM) scenario time is compressed: only the sign is exact
        assert skew < 0


@pytest.mark.slow
def test_a_worker_error_3_ms_after_training_completed_does_not_fire(tmp_path):
    """The runner writes the finish and the error 3 ms apart, so the workers mostly read them in one step: they
    must finish, as the simulator's workers do (`localjob.workloads.due`). Before the commands were ordered the
    worker raised, and the node retried (seen as a load-dependent failure of a generated scenario in CI)."""
    from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
    from aggregation.scenario import parse_scenario_source

    text = """
        job { pods: "train-worker-0" nproc_per_node: 2 monitor_interval_seconds: 1.0 }
        task { retries: 1 }
        plugin: UPSTREAM
        attempts {
          events { at_seconds: 5 completion {} }
          events { at_seconds: 5.003 pod: "train-worker-0" worker_error { recoverable: true } }
        }"""
    real = conforming_local_run(
        parse_scenario_source(text, "error_after_completion.textproto").spec(None), tmp_path / "run"
    )
    assert pb.FinalPhase.Name(real.final_phase) == "SUCCEEDED" and len(real.attempts) == 1


@pytest.mark.slow
@pytest.mark.parametrize("plugin", ["upstream", "recoverable"])
def test_a_survivor_with_restarts_waits_for_its_lost_peer(real_runs, plugin):
    """The survivor re-enters the rendezvous and times out after join_timeout (20 s), past the verdict."""
    real = conform("survivor_waits_for_a_lost_peer", plugin, real_runs)
    assert real.attempts[0].decision == ("SUCCEED" if plugin == "upstream" else "RETRY")


@pytest.mark.slow
def test_the_store_host_s_preemption_fails_the_survivor_s_rendezvous_at_once(tmp_path):
    """Worker 0's agent hosts the c10d store: once it exits, the waiting survivor fails (RendezvousConnectionError)
    well before its join timeout, and the recoverable plugin leaves the preempted pod's report standing."""
    from aggregation.scenario import parse_scenario_source

    text = (SCENARIOS / "survivor_waits_for_a_lost_peer.textproto").read_text()
    text = text.replace('pod: "train-worker-1" preemption', 'pod: "train-worker-0" preemption')
    real = conforming_local_run(
        parse_scenario_source(text, "host_preempted.textproto").spec("recoverable"), tmp_path / "run"
    )
    first = real.attempts[0]
    survivor_exit = next(p.exited_at for p in first.pods if p.pod == "train-worker-1")
    assert first.decision == "RETRY" and survivor_exit < 10 + 20  # well inside the join timeout


@pytest.mark.slow
@pytest.mark.parametrize(
    "entrypoint, exit_code, ignored",
    [("FAST_EXECUTE", 241, False), ("INIT_THEN_EXECUTE", 143, False), ("EXECUTE", 137, True)],
)
def test_a_real_pod_s_pid_1_decides_what_a_sigterm_in_the_first_rendezvous_does(
    tmp_path, entrypoint, exit_code, ignored
):
    """Each real pod is a container's PID 1 (`localjob/container.py`). Upstream's agent has no SIGTERM handler in its
    first rendezvous (torch `PContext.start` installs it with the workers): flytekit `entrypoint.py`
    `fast_execute_task_cmd` forwards the signal to its pyflyte-execute child, which dies of it, and exits 241; tini
    exits 143; pyflyte-execute as PID 1 is not killed (the kernel drops it, `kernel/signal.c` `sig_task_ignored`):
    its agent joins the round, trains, and is killed by the SIGKILL at the end of the grace period."""
    from aggregation.scenario import parse_scenario_source

    text = f"""
    plugin: UPSTREAM
    job {{ pods: "train-worker-0" pods: "train-worker-1" nproc_per_node: 1 termination_grace_period_seconds: 6 }}
    task {{ retries: 0 training_seconds: 40 entrypoint: {entrypoint} }}
    propeller {{ error_aggregation: true observation_delay_seconds: 1 }}
    timings {{ rendezvous_seconds: 3 }}
    attempts {{ events {{ at_seconds: 1 pod: "train-worker-1" preemption {{}} }} }}
    """
    real = conforming_local_run(parse_scenario_source(text, "pid1.textproto").spec(), tmp_path / "run")
    [attempt] = real.attempts
    [preempted] = [pod for pod in attempt.pods if pod.pod == "train-worker-1"]
    assert preempted.exit_code == exit_code
    assert preempted.exited_at == pytest.approx(1 + 6 if ignored else 1, abs=1)  # at the SIGKILL, or at once
    assert attempt.job_condition == "Failed"
