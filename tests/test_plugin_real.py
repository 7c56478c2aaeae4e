"""The plugin end to end: real `pyflyte-execute` pods, real torch elastic agents and gloo workers.

Mirrors flytekit 1.16.31 `flytekit/bin/entrypoint.py` (`_dispatch_execute`, `_build_error_file_name`,
`_get_worker_name`), flytekitplugins-kfpytorch 1.16.31 `task.py` (`PytorchElasticFunctionTask._execute`)
and torch 2.13.0 `torch/distributed/elastic` (`PContext.start`, `SimpleElasticAgent.run`).
Every pod runs in its own process group and is SIGKILLed on the way out, pass or fail.
"""

from __future__ import annotations

import re
import signal
import socket
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from localjob.realpods import free_port
from plugin.task import FILE_TIME_GRAIN_SECONDS

pytestmark = [pytest.mark.plugin, pytest.mark.real, pytest.mark.timeout(180)]

POD_TIMEOUT = 90  # seconds: a pod that has not exited by then is a failure, and is killed


def error_documents(prefix: Path):
    from flyteidl.core import errors_pb2

    found = []
    for path in sorted(prefix.glob("error*.pb")):
        doc = errors_pb2.ErrorDocument()
        doc.ParseFromString(path.read_bytes())
        found.append((path.name, doc))
    return found


def uploaded_files(prefix: Path) -> list[str]:
    return sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*") if p.is_file())


def stamp(doc) -> float:
    return doc.error.timestamp.seconds + doc.error.timestamp.nanos / 1e9


def event_time(events: Path, name: str) -> float:
    return float((events / name).read_text())


def assert_reaped(pod) -> None:
    """No process of the pod's group is left (the agent's workers included)."""
    assert not pod.group_alive()


def workload(variant: str, start_method: str = "spawn", nnodes: str = "1", nproc_per_node: int = 2):
    """The elastic task a pod runs (`localjob.workloads.Workload`, built in the pod by its task resolver)."""
    from localjob.workloads import Workload

    # a tenth of flytekit's 5 s monitor interval: these tests are about what the plugin writes, not when the
    # agent notices its workers, and a quick look keeps the real set within CI's time
    return Workload(variant, start_method, nnodes, nproc_per_node, monitor_interval=0.5)


def run_pod(tmp_path: Path, workload, error_aggregation: bool = True, **env) -> tuple[int, Path, Path, str]:
    """One pod whose rank 0 signals its own agent after a gloo barrier; returns (exit code, prefix, events, log)."""
    from localjob.pod import LocalPod, PodSpec

    events = tmp_path / "events"
    events.mkdir()
    prefix = tmp_path / "outputs"
    spec = PodSpec(
        name="train-worker-0",
        task_args=tuple(workload.loader_args()),
        output_prefix=prefix,
        error_aggregation=error_aggregation,
        extra_env={"AGGSIM_EVENTS_DIR": str(events), **env},
    )
    with LocalPod(spec, tmp_path / "work") as pod:
        code = pod.wait(timeout=POD_TIMEOUT)
    assert_reaped(pod)
    return code, prefix, events, pod.log()


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
@pytest.mark.parametrize("error_aggregation", [True, False], ids=["_F_DES=Earliest", "no-_F_DES"])
def test_sigterm_to_agent_leaves_one_recoverable_error_document(tmp_path, start_method, error_aggregation):
    """SIGTERM to the agent -> exit 0 and exactly one USER/RECOVERABLE ErrorDocument naming SIGTERM."""
    from flyteidl.core import errors_pb2, execution_pb2

    code, prefix, events, log = run_pod(
        tmp_path, workload("recoverable", start_method), error_aggregation, AGGSIM_SIGNAL_AGENT="SIGTERM"
    )
    assert code == 0, log[-3000:]
    docs = error_documents(prefix)
    assert len(docs) == 1, uploaded_files(prefix)
    name, doc = docs[0]
    if error_aggregation:
        assert re.fullmatch(r"error-[0-9a-f]{32}\.pb", name)
        assert doc.error.worker == "train-worker-0"  # _F_WN
    else:
        assert name == "error.pb"
        assert doc.error.worker == ""  # flytekit sets worker only with _F_DES
    assert doc.error.kind == errors_pb2.ContainerError.RECOVERABLE
    assert doc.error.origin == execution_pb2.ExecutionError.USER
    assert "SIGTERM" in doc.error.message
    sent = event_time(events, "signal.0")
    assert sent <= stamp(doc) < sent + 0.5
    assert "outputs.pb" not in uploaded_files(prefix)
    # the simulator's pod model writes the same ContainerError for the same event
    model_name, model = model_container_error("preemption {}", error_aggregation)
    assert_same_container_error(name, doc.error, model_name, model)


def model_container_error(event: str, aggregation: bool = True):
    """What the simulator's pod model (aggregation/pods.py) writes for the same event: (file name, ContainerError)."""
    from aggregation.documents import error_document
    from aggregation.scenario import parse_scenario
    from aggregation.simulate import simulate

    spec = parse_scenario(
        f'plugin: RECOVERABLE job {{ pods: "train-worker-0" nproc_per_node: 2 }} '
        f"propeller {{ error_aggregation: {str(aggregation).lower()} observation_delay_seconds: 60 }} "
        f'attempts {{ events {{ at_seconds: 10 pod: "train-worker-0" {event} }} }}'
    )
    [upload] = [u for u in simulate(spec).attempts[0].uploads if u.error is not None]
    e = upload.error
    return upload.name, error_document(
        code=e.code, message=e.message, recoverable=e.recoverable, origin="USER", timestamp_ns=1, worker=e.worker
    ).error


def assert_same_container_error(real_name, real, model_name, model):
    """Field for field, timestamps and message text aside."""
    assert (real.code, real.kind, real.origin, real.worker) == (model.code, model.kind, model.origin, model.worker)
    pattern = r"error\.pb" if model_name == "error.pb" else r"error-[0-9a-f]{32}\.pb"
    assert re.fullmatch(pattern, real_name) and re.fullmatch(pattern, model_name)


def test_upstream_task_leaves_nothing(tmp_path):
    """The incident: upstream turns SignalException into IgnoreOutputs -> exit 0, empty output prefix."""
    code, prefix, events, log = run_pod(tmp_path, workload("upstream", "spawn"), AGGSIM_SIGNAL_AGENT="SIGTERM")
    assert (events / "signal.0").exists(), "the workload never signalled its agent"
    assert code == 0, log[-3000:]
    assert uploaded_files(prefix) == []


def test_stamp_is_signal_arrival_even_when_workers_take_3s_to_exit(tmp_path):
    """`SimpleElasticAgent.run` shuts workers down before re-raising: a stamp taken there is seconds late."""
    code, prefix, events, log = run_pod(
        tmp_path, workload("recoverable", "spawn"), AGGSIM_SIGNAL_AGENT="SIGTERM", AGGSIM_WORKER_SHUTDOWN_SECONDS="3"
    )
    assert code == 0, log[-3000:]
    [(name, doc)] = error_documents(prefix)
    sent = event_time(events, "signal.0")
    written = (prefix / name).stat().st_mtime
    assert written - sent > 2.5, "the workers did not delay the shutdown: this test proves nothing"
    assert abs(stamp(doc) - sent) < 0.5


def test_worker_value_error_stays_non_recoverable_with_the_workers_stamp(tmp_path, monkeypatch):
    """Unchanged: ChildFailedError with a non-recoverable first failure -> NON_RECOVERABLE, its timestamp."""
    from flyteidl.core import errors_pb2, execution_pb2

    machine_tmp = tmp_path / "machine-tmp"  # the TMPDIR the pod would inherit from whoever started it
    machine_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(machine_tmp))
    code, prefix, events, log = run_pod(tmp_path, workload("recoverable", "spawn"), AGGSIM_RAISE_ON_RANK="1")
    assert code == 0, log[-3000:]
    [(name, doc)] = error_documents(prefix)
    assert doc.error.kind == errors_pb2.ContainerError.NON_RECOVERABLE
    assert doc.error.origin == execution_pb2.ExecutionError.USER
    assert "ValueError" in doc.error.message
    raised = event_time(events, "raise.1")
    # torch alone would say int(raised); the plugin's refinement keeps the sub-second part
    assert stamp(doc) != int(raised)
    # the refinement uses the error file's mtime, which may trail the worker's `time.time()` by a file-time tick
    assert raised - FILE_TIME_GRAIN_SECONDS <= stamp(doc) < raised + 0.5
    model_name, model = model_container_error("worker_error {}")
    assert_same_container_error(name, doc.error, model_name, model)
    # a pod has a /tmp of its own (`LocalPod.tmp_dir`): the failed worker's traceback file is kept with the pod, and
    # nothing (flytekit's sandboxes, torch's log directory) is left in the TMPDIR it was started with
    assert list((tmp_path / "work" / "train-worker-0.tmp").glob("pytorch-errorfile-*.pickle"))
    assert list(machine_tmp.iterdir()) == []


def model_after_outputs(variant: str, entrypoint: str, after: float):
    """What the simulator's pod model says of a one-pod job whose SIGTERM comes `after` s after its outputs.pb
    landed: (the pod's exit code, the job's condition, the files uploaded)."""
    from aggregation.scenario import parse_scenario
    from aggregation.simulate import simulate

    def attempt(signal: str):
        spec = parse_scenario(
            f'plugin: {variant.upper()} job {{ pods: "train-worker-0" nproc_per_node: 1 }} '
            f"task {{ retries: 0 training_seconds: 100 outputs_declared: true entrypoint: {entrypoint} }} "
            f"attempts {{ events {{ at_seconds: 30 completion {{}} }} {signal} }}"
        )
        return simulate(spec).attempts[0]

    [landed] = [u.at for u in attempt("").uploads if u.name == "outputs.pb"]
    signalled = attempt(f'events {{ at_seconds: {landed + after!r} pod: "train-worker-0" preemption {{}} }}')
    return signalled.exits["train-worker-0"][0], signalled.job_condition, [u.name for u in signalled.uploads]


@pytest.mark.slow
@pytest.mark.parametrize(
    "variant, entrypoint, exit_code",
    [
        ("upstream", "FAST_EXECUTE", 241),
        ("upstream", "INIT_THEN_EXECUTE", 143),
        ("upstream", "EXECUTE", 0),
        ("recoverable", "EXECUTE", 0),
    ],
)
def test_a_sigterm_after_the_outputs_landed_kills_the_pod_unless_its_pid_1_drops_it(
    tmp_path, variant, entrypoint, exit_code
):
    """After the upload the interpreter finalizes (CPython `_PySignal_Fini`), and a SIGTERM finds the default
    disposition: pyflyte-fast-execute forwards it and exits 241 (flytekit `entrypoint.py` `fast_execute_task_cmd`),
    tini exits 143, and pyflyte-execute as its container's PID 1 is not killed (kernel `sig_task_ignored`): it exits
    0 with its outputs, so the job Succeeds. The signal comes 0.1 s after outputs.pb lands, past the stretch where
    upstream's torch handler may still raise (the model refuses 30 ms), well before the pod exits (0.6-0.8 s)."""
    from aggregation.kinds import Entrypoint
    from localjob.pod import LocalPod, PodSpec

    after = 0.1
    prefix = tmp_path / "outputs"
    spec = PodSpec(
        name="train-worker-0",
        task_args=tuple(workload(variant, "spawn", "1", 1).loader_args()),
        output_prefix=prefix,
        extra_env={"AGGSIM_TRAIN_SECONDS": "1"},
        entrypoint=Entrypoint[entrypoint],
        job_pods=("train-worker-0",),
    )
    with LocalPod(spec, tmp_path / "work") as pod:
        deadline = time.monotonic() + POD_TIMEOUT
        while not (prefix / "outputs.pb").exists():
            assert pod.returncode is None, f"the pod exited {pod.returncode} with no outputs:\n{pod.log()[-3000:]}"
            assert time.monotonic() < deadline, "no outputs.pb"
            time.sleep(0.002)
        time.sleep(after)
        assert pod.returncode is None, "the pod exited before the signal: this run proves nothing"
        pod.send_signal(signal.SIGTERM)
        code = pod.wait(timeout=POD_TIMEOUT)
    assert_reaped(pod)
    assert (code, uploaded_files(prefix)) == (exit_code, ["outputs.pb"]), pod.log()[-3000:]
    model_exit, job, uploads = model_after_outputs(variant, entrypoint, after)
    assert (model_exit, uploads) == (exit_code, ["outputs.pb"])
    assert job == ("Succeeded" if exit_code == 0 else "Failed")


@pytest.mark.parametrize("variant", ["upstream", "recoverable"])
def test_signal_during_first_rendezvous(tmp_path, variant):
    """Before `PContext.start` torch has no handler: upstream dies by SIGTERM; ours writes a recoverable error."""
    from flyteidl.core import errors_pb2

    from localjob.pod import LocalPod, PodSpec

    port = free_port()
    prefix = tmp_path / "outputs"
    # nnodes=2 and only one pod: the agent hosts the rendezvous store and waits there for its peer
    spec = PodSpec(
        name="train-worker-0",
        task_args=tuple(workload(variant, "spawn", "2", 1).loader_args()),
        output_prefix=prefix,
        nnodes=2,
        rendezvous_endpoint=f"localhost:{port}",
    )
    with LocalPod(spec, tmp_path / "work") as pod:
        deadline = time.monotonic() + 60
        while True:  # the store is listening once the agent is in the rendezvous
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert pod.returncode is None, pod.log()[-3000:]
                assert time.monotonic() < deadline, "the agent never reached the rendezvous"
                time.sleep(0.05)
        time.sleep(0.5)
        sent = pod.send_signal(signal.SIGTERM)
        code = pod.wait(timeout=30)  # well inside Kubernetes' default 30 s grace period
        exited = time.time()
    assert_reaped(pod)
    if variant == "upstream":
        assert code == -signal.SIGTERM  # a container runtime reports 143
        assert uploaded_files(prefix) == []
        return
    assert code == 0, pod.log()[-3000:]
    assert exited - sent < 30
    [(name, doc)] = error_documents(prefix)
    assert doc.error.kind == errors_pb2.ContainerError.RECOVERABLE
    assert "SIGTERM" in doc.error.message
    assert sent <= stamp(doc) < sent + 0.5


def start_two_pods(tmp_path: Path, stack: ExitStack, error_aggregation: bool = True):
    """Two real pods (c10d rendezvous, one gloo worker each) training together; returns them."""
    from localjob.pod import LocalPod, PodSpec

    port = free_port()
    events = tmp_path / "events"
    events.mkdir()
    prefix = tmp_path / "outputs"
    specs = [
        PodSpec(
            name=name,
            task_args=tuple(workload("recoverable", "spawn", "2", 1).loader_args()),
            output_prefix=prefix,
            nnodes=2,
            rendezvous_endpoint=f"localhost:{port}",
            error_aggregation=error_aggregation,
            extra_env={"AGGSIM_EVENTS_DIR": str(events)},
        )
        for name in ("train-worker-0", "train-worker-1")
    ]
    pods = [stack.enter_context(LocalPod(spec, tmp_path / "work")) for spec in specs]
    deadline = time.monotonic() + 90
    while not all((events / f"barrier.{rank}").exists() for rank in (0, 1)):
        assert all(p.returncode is None for p in pods), [p.log()[-2000:] for p in pods]
        assert time.monotonic() < deadline, "the two pods never trained together"
        time.sleep(0.05)
    time.sleep(0.3)
    return pods, prefix


@pytest.mark.parametrize("error_aggregation", [True, False], ids=["_F_DES=Earliest", "no-_F_DES"])
def test_the_survivor_leaves_the_preempted_pod_s_report_standing(tmp_path, error_aggregation):
    """Two pods (c10d + gloo); SIGTERM pod b. Pod a's worker fails from b's death, a consequence: the plugin
    finds b's report under the output prefix and writes nothing (IgnoreOutputs), so with either reader
    (flyteplugins `remote_file_output_reader.go`) propeller reads b's recoverable error, whatever the clocks."""
    from flyteidl.core import errors_pb2

    with ExitStack() as stack:
        pods, prefix = start_two_pods(tmp_path, stack, error_aggregation)
        sent = pods[1].send_signal(signal.SIGTERM)
        codes = [pod.wait(timeout=POD_TIMEOUT) for pod in pods]
    for pod in pods:
        assert_reaped(pod)
    assert codes == [0, 0], [p.log()[-2000:] for p in pods]
    [(name, report)] = error_documents(prefix)
    assert (name == "error.pb") is (not error_aggregation)
    assert report.error.kind == errors_pb2.ContainerError.RECOVERABLE and "SIGTERM" in report.error.message
    assert sent <= stamp(report) < sent + 0.5
    assert "already reports this attempt's failure" in pods[0].log()


def test_a_collateral_gloo_failure_is_written_recoverable_when_no_sibling_reports(tmp_path):
    """Pod b vanishes without a word (SIGKILL to its whole group). Pod a's gloo worker fails ("Connection
    closed by peer"): a collateral failure. After waiting for a sibling's report that never comes, the
    plugin writes it RECOVERABLE, stamped when written, naming the likely cause."""
    from flyteidl.core import errors_pb2

    with ExitStack() as stack:
        pods, prefix = start_two_pods(tmp_path, stack, error_aggregation=False)
        killed = time.time()
        pods[1].reap()  # SIGKILL: no handler, no report
        code = pods[0].wait(timeout=POD_TIMEOUT)
    assert_reaped(pods[0])
    assert code == 0, pods[0].log()[-3000:]
    [(name, report)] = error_documents(prefix)
    assert name == "error.pb" and report.error.kind == errors_pb2.ContainerError.RECOVERABLE
    assert report.error.code == "USER:Recoverable" and "peer pod" in report.error.message
    from plugin.task import DEFAULT_SIBLING_WAIT_SECONDS

    assert killed + DEFAULT_SIBLING_WAIT_SECONDS <= stamp(report) < killed + DEFAULT_SIBLING_WAIT_SECONDS + 30
