"""Real runs play any job shape: the pods' task is built at run time from the scenario (a Flyte task resolver),
not picked from a list of declared tasks; and a failed run names its first worker failure."""

from __future__ import annotations

import shutil

import pytest
from conftest import SCENARIOS, conforming_local_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregation.strategies import scenarios

pytestmark = [pytest.mark.plugin]

TWO_PODS = 'plugin: RECOVERABLE job { pods: "a" pods: "b" nproc_per_node: 1 }'


def spec_of(tmp_path, text: str):
    from aggregation.scenario import load_scenario

    path = tmp_path / "s.textproto"
    path.write_text(text)
    return load_scenario(str(path))


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pods=st.integers(1, 8),
    nproc=st.integers(1, 4),
    fork=st.booleans(),
    variant=st.sampled_from(["UPSTREAM", "RECOVERABLE"]),
)
def test_every_job_shape_up_to_8_pods_of_4_workers_is_built_in_the_pod(tmp_path, pods, nproc, fork, variant):
    """flytekit `TaskResolverMixin.load_task` (what `pyflyte-execute --resolver R -- ARGS` calls): the pod rebuilds
    from its loader arguments a task whose Elastic configuration is the scenario's job."""
    from flytekitplugins.kfpytorch import Elastic as UpstreamElastic

    from localjob.runner import check_playable
    from localjob.workloads import resolver
    from plugin import Elastic as RecoverableElastic

    names = " ".join(f'pods: "p{i}"' for i in range(pods))
    method = "FORK" if fork else "SPAWN"
    spec = spec_of(tmp_path, f"plugin: {variant} job {{ {names} nproc_per_node: {nproc} start_method: {method} }}")
    workload = check_playable(spec)
    task = resolver.load_task(workload.loader_args())  # what the pod does with its command line
    config = task.task_config
    assert type(config) is (RecoverableElastic if variant == "RECOVERABLE" else UpstreamElastic)
    assert (config.nnodes, config.nproc_per_node) == (pods, nproc)
    assert config.start_method == ("fork" if fork else "spawn")
    assert config.max_restarts == 0


def test_the_task_s_elastic_settings_reach_the_pod_s_task(tmp_path):
    """flytekitplugins-kfpytorch `PytorchElasticFunctionTask._execute` builds one `LaunchConfig` for every pod from
    the task's `Elastic`: the job's max_restarts, join timeout and monitor interval are in the task each real pod
    rebuilds from its command line."""
    from localjob.runner import check_playable
    from localjob.workloads import resolver

    job = 'pods: "a" pods: "b" max_restarts: 2 join_timeout_seconds: 30 monitor_interval_seconds: 0.5'
    workload = check_playable(spec_of(tmp_path, f"plugin: RECOVERABLE job {{ {job} }}"))
    config = resolver.load_task(workload.loader_args()).task_config
    assert (config.max_restarts, config.rdzv_configs["join_timeout"], config.monitor_interval) == (2, 30, 0.5)


@pytest.mark.parametrize(
    "job, field",
    [
        (" ".join(f'pods: "p{i}"' for i in range(9)) + " nproc_per_node: 1", "job.pods"),
        ('pods: "a" nproc_per_node: 5', "job.nproc_per_node"),
    ],
)
def test_a_shape_beyond_a_local_job_is_refused_naming_the_field(tmp_path, job, field):
    from localjob.realpods import LocalJobError
    from localjob.runner import check_playable

    with pytest.raises(LocalJobError, match=field) as refused:
        check_playable(spec_of(tmp_path, f"plugin: RECOVERABLE job {{ {job} }}"))
    assert "\n" not in str(refused.value)


def test_the_rendezvous_store_lives_in_worker_0_s_agent(tmp_path, monkeypatch):
    """training-operator v1.8 `pytorch/envvar.go`: PET_RDZV_ENDPOINT names worker 0, so its agent hosts the c10d
    store (torch `c10d_rendezvous_backend._create_tcp_store`); on one host every pod would match, so it is said."""
    from localjob.workloads import Workload

    workload = Workload("recoverable", "spawn", "2", 1)
    monkeypatch.setenv("AGGSIM_RDZV_IS_HOST", "1")
    assert workload.task().task_config.rdzv_configs["is_host"] is True
    monkeypatch.setenv("AGGSIM_RDZV_IS_HOST", "0")
    assert workload.task().task_config.rdzv_configs["is_host"] is False


GLOG = "E1201 02:35:{s} 18283 torch/distributed/elastic/multiprocessing/api.py:836] "


def torch_log(seconds: str, lines: list[str]) -> str:
    return "\n".join(GLOG.format(s=seconds) + line for line in lines) + "\n"


def test_the_first_worker_failure_is_the_earliest_traceback_s_own_exception(tmp_path):
    """torch `multiprocessing/api.py` logs a spawned worker's traceback after its ProcessRaisedException wrapper:
    the last exception line of the record is what the worker raised; of all pods, the earliest record wins."""
    from localjob.evidence import first_worker_failure

    work = tmp_path / "attempt-0" / "work"
    work.mkdir(parents=True)
    wrapper = ["Traceback (most recent call last):", '  File "spawn.py", line 211, in join', "    raise X"]
    (work / "train-worker-0.log").write_text(
        torch_log(
            "23.500000",
            [*wrapper, "torch.multiprocessing.spawn.ProcessRaisedException: ", "", "-- Process 0 terminated with:"]
            + ["Traceback (most recent call last):", "RuntimeError: Connection closed by peer"],
        )
    )
    (work / "train-worker-1.log").write_text(
        '{"message": "not torch"}\n'
        + torch_log(
            "22.107000",
            [*wrapper, "torch.multiprocessing.spawn.ProcessRaisedException: ", "-- Process 0 terminated with:"]
            + ["Traceback (most recent call last):", "ValueError: bad batch 17", "  "],
        )
    )
    failure = first_worker_failure(tmp_path)
    assert (failure.attempt, failure.pod, failure.line) == (0, "train-worker-1", "ValueError: bad batch 17")
    assert failure.describe() == "attempt 0, train-worker-1 at 02:35:22.107: ValueError: bad batch 17"
    assert first_worker_failure(tmp_path, attempt=1) is None


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("scenario", ["three_failures_3x1", "three_failures_4x2"])
def test_a_recoverable_worker_error_a_preemption_and_checkpoints_on_3x1_and_4x2(tmp_path, scenario):
    """The issue's shapes: three pods of one worker and four pods of two, each meeting a recoverable worker error,
    then a preemption, then completion; the real pods agree with the simulator field for field."""
    from aggregation.scenario import load_scenario

    real = conforming_local_run(load_scenario(str(SCENARIOS / f"{scenario}.textproto")), tmp_path / "run")
    first, second, third = real.attempts
    assert first.error.code == "USER:Recoverable" and first.error.worker in ("train-worker-1", "")
    assert first.decision == second.decision == "RETRY" and third.decision == "SUCCEED"
    assert second.resumed_from_checkpoint and third.resumed_from_checkpoint


def test_restarts_of_a_one_pod_job_are_refused_for_real_with_the_reason(tmp_path):
    """A standalone elastic task (one pod) whose worker group restarts never reached a new round in a real run
    here, so run-local refuses it up front instead of timing out (as any restart that completes a round)."""
    from localjob.realpods import LocalJobError
    from localjob.runner import check_playable

    one_pod = 'plugin: RECOVERABLE job { pods: "a" nproc_per_node: 2 max_restarts: 1 }'
    with pytest.raises(LocalJobError, match="job.max_restarts"):
        check_playable(spec_of(tmp_path, one_pod + ' attempts { events { at_seconds: 10 pod: "a" worker_error {} } }'))


def test_a_restart_that_completes_a_new_round_is_refused_for_real_with_the_reason(tmp_path):
    """The simulator restarts worker_error_restarted's group through a new round; real runs of that hung (no new
    round in 240 s, 2 of 4 runs), so run-local refuses it up front instead of timing out."""
    from aggregation.scenario import load_scenario
    from localjob.realpods import LocalJobError
    from localjob.runner import check_playable

    with pytest.raises(LocalJobError, match="not played for real") as refused:
        check_playable(load_scenario(str(SCENARIOS / "worker_error_restarted.textproto")))
    assert "\n" not in str(refused.value)
    check_playable(load_scenario(str(SCENARIOS / "survivor_waits_for_a_lost_peer.textproto")))  # no new round


def test_an_upload_watcher_interrupted_before_it_started_stops_cleanly(tmp_path):
    """An interrupt between registering the watcher's stop and starting it (seen in CI: SIGINT at start-up turned
    into 'internal error: cannot join thread before it is started' instead of exit 130)."""
    from localjob.realpods import UploadWatcher

    (tmp_path / "error.pb").write_bytes(b"")
    watcher = UploadWatcher(tmp_path)
    watcher.stop()
    assert [name for name, *_ in watcher.take(0)] == ["error.pb"]


def test_a_worker_acts_on_the_commands_it_reads_together_in_the_order_they_happened():
    """A worker that reads the runner's commands late (one slow step under load) may find a finish and a later
    worker error at once: training completed first, so the error must not fire. It used to: the error was
    checked before the finish, and a generated scenario retried for real where the simulator succeeded."""
    from localjob.workloads import due

    error = {"do": "raise", "rank": 0, "message": "", "recoverable": True}
    checkpoint = {"do": "checkpoint"}
    finish = {"do": "finish"}
    assert due([finish, error], 0) == ([], 1, True)
    assert due([checkpoint, error, finish], 0) == ([checkpoint, error], 3, True)  # the error came first: it fires
    assert due([checkpoint, error], 1) == ([error], 2, False)
    assert due([checkpoint, finish, error], 1) == ([], 2, True)
    assert due([checkpoint], 1) == ([], 1, False)


@settings(max_examples=60, deadline=None)
@given(scenarios(playable=True))
def test_every_generated_playable_scenario_is_one_run_local_plays(message):
    """`aggregation.strategies.scenarios(playable=True)` (the seeded real sample's source) keeps to what
    `localjob.runner.check_playable` accepts, whichever of the container's PID 1s it draws; a machine without a
    system package a PID 1 needs is told which. Two answers come only from playing the model: an attempt that
    outlasts a real one (the seeded sample draws past those), and a refusal of the point itself that a real run can
    meet (run-local says so, and the sample reports it as refused)."""
    from aggregation.neighbourhood import refusal_key
    from aggregation.scenario import ModelRefusal
    from aggregation.strategies import spec_of
    from localjob.runner import OutlastsARealAttempt, Unplayable, check_playable

    spec = spec_of(message)
    try:
        check_playable(spec)
    except OutlastsARealAttempt:
        pass
    except Unplayable as e:
        assert "tini" in str(e) and shutil.which("tini") is None, str(e)
    except ModelRefusal as refusal:
        assert refusal_key(refusal) is not None, str(refusal)


@pytest.mark.parametrize("entrypoint", ["FAST_EXECUTE", "EXECUTE", "INIT_THEN_EXECUTE"])
def test_the_generated_real_sample_may_run_each_pid_1(entrypoint):
    """Real pods play each entrypoint (`localjob.container.entrypoint_command`), and what a late SIGTERM does
    depends on it (`pods.Pod.sigterm`): the playable generator draws all three."""
    from hypothesis import find

    from aggregation.proto.aggsim.v1 import scenario_pb2 as pb

    wanted = pb.Entrypoint.Value(entrypoint)
    assert find(scenarios(playable=True), lambda message: message.task.entrypoint == wanted).task.entrypoint == wanted
