"""The plugin's translation rules, in-process and deterministic (torch's launcher replaced, nothing else).

Mirrors flytekitplugins-kfpytorch 1.16.31 `task.py`, `PytorchElasticFunctionTask._execute`, and torch
2.13.0 `torch/distributed/elastic/agent/server/api.py`, `SimpleElasticAgent.run` (catch the signal, shut
the workers down, re-raise).
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

pytestmark = pytest.mark.plugin

torch_launcher = pytest.importorskip("torch.distributed.launcher.api")

from conftest import CLOCKS_READ_TOGETHER  # noqa: E402


@pytest.fixture
def sigusr1_handled():
    """SIGUSR1 with a Python handler that does nothing (the signal clock sees only handled signals), restored after."""
    previous = signal.signal(signal.SIGUSR1, lambda *a: None)
    yield
    signal.signal(signal.SIGUSR1, previous)


@pytest.fixture
def launcher(monkeypatch, tmp_path):
    """Replace torch's `elastic_launch` with a scripted one; upstream imports it at call time."""
    # the launch's configuration makes torch's log directory (`torchelastic_*`) in the temp directory, a pod's own
    # /tmp in a real pod: here the test's, not the machine's
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def install(run):
        def fake_elastic_launch(config, entrypoint):
            return run

        monkeypatch.setattr(torch_launcher, "elastic_launch", fake_elastic_launch)

    return install


def _agent_that_is_signalled(sig, shutdown_seconds):
    """Like `SimpleElasticAgent.run`: the signal arrives, workers take `shutdown_seconds` to stop, re-raise."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    sent = {}

    def run(*args):
        try:
            sent["at"] = time.time()
            os.kill(os.getpid(), sig)
            time.sleep(10)  # the handler interrupts this
        except SignalException:
            time.sleep(shutdown_seconds)
            raise
        raise AssertionError("the signal did not interrupt the agent")

    return run, sent


def test_signal_exception_becomes_recoverable_with_cause_message_and_arrival_stamp(launcher):
    """`_execute`: SignalException -> FlyteRecoverableException (upstream: IgnoreOutputs), stamped at arrival."""
    from flytekit.exceptions.user import FlyteRecoverableException
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from localjob import workloads

    run, sent = _agent_that_is_signalled(signal.SIGTERM, shutdown_seconds=1.0)
    launcher(run)
    with pytest.raises(FlyteRecoverableException) as raised:
        workloads.Workload("recoverable", "spawn", "1", 2).task().execute()
    caught_at = time.time()
    error = raised.value
    assert isinstance(error.__cause__, SignalException)
    assert error.__cause__.sigval == signal.SIGTERM
    assert "SIGTERM" in str(error)
    assert "worker group was terminated before it finished" in str(error)
    # stamped when the signal arrived, not a second later when the exception reached _execute
    assert sent["at"] <= error.timestamp < sent["at"] + 0.3
    assert caught_at - error.timestamp > 0.9


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_every_signal_torch_handles_is_named(launcher, sig):
    """torch's default TORCHELASTIC_SIGNALS_TO_HANDLE (`multiprocessing/api.py`, `PContext.start`)."""
    from flytekit.exceptions.user import FlyteRecoverableException

    from localjob import workloads

    run, _ = _agent_that_is_signalled(sig, shutdown_seconds=0.0)
    launcher(run)
    with pytest.raises(FlyteRecoverableException, match=sig.name):
        workloads.Workload("recoverable", "fork", "1", 2).task().execute()


def test_upstream_task_still_ignores_outputs(launcher):
    """The baseline this project changes: upstream `_execute` raises IgnoreOutputs on SignalException."""
    from flytekit.core.base_task import IgnoreOutputs
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from localjob import workloads

    def run(*args):
        # no real signal: the upstream task installs no handler, so SIGTERM would kill the test run
        raise SignalException("got signal: 15", sigval=signal.SIGTERM)

    launcher(run)
    with pytest.raises(IgnoreOutputs):
        workloads.Workload("upstream", "spawn", "1", 2).task().execute()


def test_success_elsewhere_still_ignores_outputs(launcher):
    """Unchanged: a worker group without global rank 0 raises IgnoreOutputs on success (`_execute`)."""
    from flytekit.core.base_task import IgnoreOutputs

    from localjob import workloads

    launcher(lambda *args: {1: None})  # only rank 1 lives in this pod's worker group
    with pytest.raises(IgnoreOutputs) as raised:
        workloads.Workload("recoverable", "spawn", "1", 2).task().execute()
    assert raised.value.__cause__ is None


def test_signal_handlers_are_restored_after_execute(launcher):
    """The rendezvous-window handlers are ours only while `_execute` runs."""
    from localjob import workloads

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)}
    launcher(lambda *args: {0: None})
    try:
        workloads.Workload("recoverable", "spawn", "1", 2).task().execute()
    except Exception:
        pass
    assert {s: signal.getsignal(s) for s in before} == before
    assert signal.set_wakeup_fd(-1) == -1  # and no wakeup fd was left behind


def test_the_one_import_switch_and_the_opt_in():
    """flytekit `TaskPlugins.find_pythontask_plugin`: which task class a config type resolves to."""
    from flytekit import task
    from flytekitplugins.kfpytorch import Elastic as UpstreamElastic
    from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask

    import plugin

    @task(task_config=plugin.Elastic(nnodes=1))
    def changed_import() -> None: ...

    @task(task_config=UpstreamElastic(nnodes=1))
    def untouched() -> None: ...

    plugin.use_recoverable_for_upstream_elastic()
    try:

        @task(task_config=UpstreamElastic(nnodes=1))
        def opted_in() -> None: ...

    finally:
        plugin.restore_upstream_elastic()

    assert type(changed_import) is plugin.RecoverableElasticTask
    assert type(untouched) is PytorchElasticFunctionTask
    assert type(opted_in) is plugin.RecoverableElasticTask


def _torch_recorded_failure(tmp_path, monkeypatch, message="boom", rank=0, exc_type=ValueError):
    """A real torch ProcessFailure, read back from the error file torch's `@record` handler writes."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure
    from torch.distributed.elastic.multiprocessing.errors.error_handler import ErrorHandler

    rank_dir = tmp_path / str(rank)  # torch gives every local rank its own error-file directory
    rank_dir.mkdir()
    error_file = rank_dir / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    try:
        raise exc_type(message)
    except exc_type as e:
        ErrorHandler().record_exception(e)
    return error_file, ProcessFailure(local_rank=rank, pid=1234 + rank, exitcode=1, error_file=str(error_file))


def _set_mtime(path, seconds):
    os.utime(path, ns=(int(seconds * 1e9), int(seconds * 1e9)))


def _same_second_failures(tmp_path, monkeypatch, true_first_recoverable):
    """Rank 1 fails first (x.30); rank 0 fails from it (x.60); torch stamps both x and picks rank 0."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    collateral_file, collateral = _torch_recorded_failure(
        tmp_path, monkeypatch, "Connection reset by peer", 0, RuntimeError
    )
    first_file, first = _torch_recorded_failure(tmp_path, monkeypatch, "the real problem", 1)
    whole = min(collateral.timestamp, first.timestamp)
    collateral.timestamp = first.timestamp = whole
    _set_mtime(first_file, whole + 0.30)
    _set_mtime(collateral_file, whole + 0.60)
    if true_first_recoverable:  # what flytekit's worker wrapper leaves for a FlyteRecoverableException
        (first_file.parent / "recoverable_error").write_text("")
    error = ChildFailedError("train", {0: collateral, 1: first})
    assert error.get_first_failure()[0] == 0, "torch breaks the whole-second tie by rank"
    return error, whole


def test_true_first_failure_is_picked_with_sub_second_stamps(tmp_path, monkeypatch):
    """torch `errors/__init__.py` `ChildFailedError.get_first_failure` ties on whole seconds; we do not."""
    from plugin.task import first_failure_by_refined_stamps

    error, whole = _same_second_failures(tmp_path, monkeypatch, true_first_recoverable=False)
    failure, stamp = first_failure_by_refined_stamps(error)
    assert failure.local_rank == 1
    assert stamp == pytest.approx(whole + 0.30, abs=1e-6)


def test_recoverable_true_first_failure_makes_the_pod_error_recoverable(tmp_path, monkeypatch, launcher):
    """Upstream's rule, "recoverable iff the first failure is" (`_execute`), applied to the true first failure."""
    from flytekit.exceptions.user import FlyteRecoverableException

    from localjob import workloads

    error, whole = _same_second_failures(tmp_path, monkeypatch, true_first_recoverable=True)

    def run(*args):
        raise error

    launcher(run)
    with pytest.raises(FlyteRecoverableException) as raised:
        workloads.Workload("recoverable", "spawn", "1", 2).task().execute()
    assert raised.value.timestamp == pytest.approx(whole + 0.30, abs=1e-6)
    assert raised.value.__cause__ is error


def test_first_failure_stamp_is_refined_by_error_file_mtime_when_it_agrees(tmp_path, monkeypatch):
    """torch `errors/error_handler.py` `ErrorHandler.record_exception` stamps `int(time.time())`: refine it."""
    from plugin.task import refine_first_failure_timestamp

    error_file, failure = _torch_recorded_failure(tmp_path, monkeypatch)
    whole_second = failure.timestamp
    assert whole_second == int(whole_second)
    exact = whole_second + 0.73
    _set_mtime(error_file, exact)
    assert refine_first_failure_timestamp(failure) == pytest.approx(exact, abs=1e-6)


def test_an_mtime_a_file_time_tick_before_torch_s_whole_second_still_refines_it(tmp_path, monkeypatch):
    """Linux stamps a file from its coarse clock, which trails `time.time()` by up to a tick or two: a failure just
    after a whole second (torch's `int(time.time())`) can have an mtime just before it. Within
    `FILE_TIME_GRAIN_SECONDS` it is the failure's moment; further back it is another write, and torch's stamp stays."""
    from plugin.task import FILE_TIME_GRAIN_SECONDS, refine_first_failure_timestamp

    error_file, failure = _torch_recorded_failure(tmp_path, monkeypatch)
    just_before = failure.timestamp - 0.004
    _set_mtime(error_file, just_before)
    assert refine_first_failure_timestamp(failure) == pytest.approx(just_before, abs=1e-6)
    _set_mtime(error_file, failure.timestamp - FILE_TIME_GRAIN_SECONDS - 0.01)
    assert refine_first_failure_timestamp(failure) == failure.timestamp


def test_first_failure_stamp_is_kept_when_the_mtime_disagrees(tmp_path, monkeypatch):
    """A file touched in another second (rewritten, copied) says nothing about the failure: keep torch's."""
    from plugin.task import refine_first_failure_timestamp

    error_file, failure = _torch_recorded_failure(tmp_path, monkeypatch)
    _set_mtime(error_file, failure.timestamp + 1.5)
    assert refine_first_failure_timestamp(failure) == failure.timestamp
    error_file.unlink()
    assert refine_first_failure_timestamp(failure) == failure.timestamp


def test_signal_clock_sees_arrival_while_main_thread_is_busy(sigusr1_handled):
    """`signal.set_wakeup_fd` is written by CPython's C trampoline, before any Python handler runs."""
    from plugin.signal_clock import SignalClock

    with SignalClock() as clock:
        assert clock.active, "the kernel stamps Unix datagrams on Linux: the clock must be live"
        sent = time.time()
        os.kill(os.getpid(), signal.SIGUSR1)
        busy_until = time.time() + 0.3
        while time.time() < busy_until:  # the Python handler cannot run mid-bytecode; the clock does not care
            pass
        arrival = clock.first_arrival(signal.SIGUSR1)
        assert clock.first_arrival(signal.SIGUSR2) is None
    assert arrival is not None and sent - CLOCKS_READ_TOGETHER <= arrival < sent + 0.05


def _seconds_of_sum(n: int) -> float:
    """How long `sum(range(n))` holds the GIL here: the least of three tries (a try can be descheduled)."""
    took = []
    for _ in range(3):
        started = time.perf_counter()
        sum(range(n))
        took.append(time.perf_counter() - started)
    return min(took)


#: a process that signals the test's process when told: it answers "ready" first (its start is not timed), then
#: on "go" waits 0.1 s and prints its clock before and after the kill
_SIGNAL_SENDER = """
import os, signal, sys, time
print("ready", flush=True)
sys.stdin.read(1)
time.sleep(0.1)
before = time.time()
os.kill(int(sys.argv[1]), signal.SIGUSR1)
print(repr(before), repr(time.time()), flush=True)
"""


def test_signal_clock_stamps_arrival_while_the_main_thread_holds_the_gil(sigusr1_handled):
    """A signal from another process lands while the main thread is inside one long C call (`sum` over a range
    holds the GIL throughout). The kernel stamps the arrival: a thread stamping it with `time.time()` had to wait
    for the GIL, and was measured 1.4 s late here (and ~175 ms late in a real agent under libfaketime)."""
    from plugin.signal_clock import SignalClock

    n = max(10**6, int(10**6 * 1.0 / max(_seconds_of_sum(10**6), 1e-6)))  # about a second of holding the GIL
    sender = subprocess.Popen(
        [sys.executable, "-c", _SIGNAL_SENDER, str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sender.stdout.readline().strip() == "ready"
        with SignalClock() as clock:
            sender.stdin.write("go")
            sender.stdin.close()
            sum(range(n))
            held_until = time.time()
            before, after = map(float, sender.stdout.read().split())
            arrival = clock.first_arrival(signal.SIGUSR1)
    finally:
        sender.kill()
        sender.wait()
    assert after < held_until - 0.3, "the signal must land while the GIL is held, or this checks nothing"
    # the kernel stamps it when this process next runs (at once, unless a loaded machine keeps it waiting)
    assert arrival is not None and before - CLOCKS_READ_TOGETHER <= arrival < after + 0.1


def test_signal_clock_answers_on_the_process_s_own_clock(monkeypatch, sigusr1_handled):
    """The kernel's stamp says how long ago the signal arrived; the answer is on `time.time()`'s clock, which
    flytekit stamps its errors with (a pod on a skewed node, as libfaketime plays one, reads a shifted clock)."""
    from plugin.signal_clock import SignalClock

    true_ns = time.time_ns
    with SignalClock() as clock:
        sent = time.time()
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.2)
        monkeypatch.setattr(time, "time_ns", lambda: true_ns() + 100 * 10**9)
        arrival = clock.first_arrival(signal.SIGUSR1)
    assert sent + 100 - CLOCKS_READ_TOGETHER <= arrival < sent + 100.05


def test_a_flood_of_signals_keeps_the_first_arrival_and_never_raises(sigusr1_handled):
    """The socket holds a few hundred signals until the plugin asks; later ones are dropped by CPython's trampoline
    (no warning, no error), and the first arrival, the one the plugin reports, is kept."""
    from plugin.signal_clock import SignalClock

    with SignalClock() as clock:
        sent = time.time()
        for _ in range(1000):
            os.kill(os.getpid(), signal.SIGUSR1)
        first = clock.first_arrival(signal.SIGUSR1)
        assert clock.first_arrival(signal.SIGUSR2) is None
    assert first is not None and sent - CLOCKS_READ_TOGETHER <= first < sent + 0.05


def test_signal_clock_is_inert_where_the_kernel_does_not_stamp(monkeypatch, sigusr1_handled):
    """Where datagrams come without a receive stamp (the probe on entry finds none), the clock does not take
    the wakeup descriptor and says nothing, so the plugin falls back to the time it catches the signal."""
    from plugin import signal_clock

    monkeypatch.setattr(signal_clock, "_SO_TIMESTAMPNS", socket.SO_PASSCRED)  # accepted, but stamps nothing
    with signal_clock.SignalClock() as clock:
        assert not clock.active
        assert signal.set_wakeup_fd(-1) == -1  # the wakeup descriptor was left alone
        os.kill(os.getpid(), signal.SIGUSR1)
        assert clock.first_arrival(signal.SIGUSR1) is None


def test_a_worker_torch_did_not_report_is_still_the_pod_s_first_failure(tmp_path, monkeypatch, launcher):
    """torch `api.py` `PContext.wait` reports the workers that had exited when the agent looked: a rank that raised
    first but was still exiting is missing, and only its peer's gloo failure is reported (seen under load). The
    pod's own error files say what happened first: a genuine, non-recoverable error, reported as such."""
    from flytekit.exceptions.user import FlyteUserRuntimeException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from localjob import workloads
    from plugin.task import first_failure_by_refined_stamps, with_unreported_local_failures

    collateral_file, collateral = _torch_recorded_failure(
        tmp_path,
        monkeypatch,
        "Connection closed by peer. This is typically caused by a remote worker crashing",
        0,
        RuntimeError,
    )
    genuine_file, genuine = _torch_recorded_failure(tmp_path, monkeypatch, "the real problem", 1)
    whole = min(collateral.timestamp, genuine.timestamp)
    _set_mtime(genuine_file, whole + 0.30)
    _set_mtime(collateral_file, whole + 0.60)
    reported = ChildFailedError("train", {0: collateral})  # rank 1 had not exited when the agent looked

    merged = with_unreported_local_failures(reported)
    assert sorted(merged.failures) == [0, 1]
    first, stamp = first_failure_by_refined_stamps(merged)
    assert first.local_rank == 1 and stamp == pytest.approx(whole + 0.30, abs=1e-6)

    def run(*args):
        raise reported

    launcher(run)
    with pytest.raises(FlyteUserRuntimeException) as raised:
        workloads.Workload("recoverable", "spawn", "1", 2).task().execute()
    assert raised.value.timestamp == pytest.approx(whole + 0.30, abs=1e-6)
    assert "the real problem" in str(raised.value)
