"""Shared test helpers, and a clean skip for plugin tests when the plugin extra is not installed.

Test modules import the constants and helpers below with `from conftest import ...` (pytest puts this
directory on `sys.path`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import settings

# Tests never assert timings (the benchmarks measure speed): no deadline, which would fail a first example that
# imports torch, or any example on a loaded machine (e.g. beside another pytest-xdist worker).
settings.register_profile("aggsim", deadline=None)
settings.load_profile("aggsim")

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
#: a non-elastic job whose Master's success and a Worker's deletion mark can reach the operator in one reconcile, with
#: the map order left to Go (`operator.py`, `UpdateJobStatus`)
MAP_ORDER_TIE = str(ROOT / "tests" / "data" / "master_finishes_as_a_worker_is_deleted.textproto")
#: the same tie on a busy cluster: the Worker's exit is heard late, so a reconcile that waits past its mark reads it
#: running (`job.reconcile_seconds`, `job.pod_status_seconds`)
BUSY_MAP_ORDER_TIE = str(
    ROOT / "tests" / "data" / "busy_operator_reads_a_master_s_success_and_a_worker_s_deletion.textproto"
)
#: a sibling's preemption and a genuine worker error whose error file's mtime, the recoverable plugin's stamp for it,
#: trails the failure (`pod_timings[0].timings.file_time_lag_seconds`)
LAGGING_MTIME = str(ROOT / "tests" / "data" / "genuine_error_with_a_lagging_mtime.textproto")
AGGSIM = str(Path(sys.executable).parent / "aggsim")
#: how closely `plugin/signal_clock.py` reads the kernel's clock and the process's together: half the narrowest of up
#: to five probes' sends (microseconds; a few milliseconds only if the process is descheduled around all five)
CLOCKS_READ_TOGETHER = 0.005
T0 = 1_796_000_000 * 10**9  # an arbitrary instant, in ns

PLUGIN_MODULES = ("torch", "flytekit", "flytekitplugins.kfpytorch")


def missing_modules(names) -> list[str]:
    """The modules of `names` that cannot be imported here (a missing parent package counts as missing)."""
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(name)
    return missing


NUL = b"\0"


def _other_processes():
    """Each process's /proc directory, this process's apart (a process may end while it is being read: callers
    skip what they cannot read)."""
    me = str(os.getpid())
    return (proc for proc in Path("/proc").iterdir() if proc.name.isdigit() and proc.name != me)


def leftover_processes(directory: Path) -> list[str]:
    """Live processes (this one apart) whose command line or environment mentions `directory`: pods, agents,
    workers of a real run in it, or with it as their TMPDIR."""
    needle = str(directory).encode()
    found = []
    for proc in _other_processes():
        try:
            if "State:\tZ" in (proc / "status").read_text():
                continue
            cmdline = (proc / "cmdline").read_bytes()
            if needle in cmdline or needle in (proc / "environ").read_bytes():
                found.append(f"{proc.name}: {cmdline.replace(NUL, b' ').decode(errors='replace')[:120]}")
        except OSError:
            continue
    return found


#: the signals that stop a test session as Ctrl-C does: a CI job cancelled or timed out and `kill` send SIGTERM, a
#: closed terminal SIGHUP
STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def pytest_configure(config):
    """SIGTERM or SIGHUP stops the session the way Ctrl-C does (a KeyboardInterrupt where the test is), so every `with`
    block and fixture of a real test runs on the way out and kills its pods: Python's default action for either ends
    the process at once and leaves each real run's pods running (they sit in sessions of their own, as a kubelet's
    containers do, so no signal to the test's process group reaches them)."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (pytest run in-process by a caller's thread)
    for signum in STOPPING_SIGNALS:
        signal.signal(signum, lambda signum, frame: _stop_the_session(config, signum))


def _stop_the_session(config, signum: int) -> None:
    for other in STOPPING_SIGNALS:  # the first signal decides; a second must not cut the cleanup short
        signal.signal(other, signal.SIG_IGN)
    if config.pluginmanager.has_plugin("dsession"):
        # pytest-xdist's controller: its workers run the tests, and it would stop them with SIGKILL after a wait, so
        # they get the signal too (a CI runner may signal the controller alone)
        for pid in children():
            try:
                os.kill(pid, signum)
            except OSError:
                pass
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def _stat(proc: Path) -> tuple[str, int]:
    """A process's state (Z: a zombie) and its parent's pid, from /proc/PID/stat (OSError once it is gone). They
    follow the command name, which may hold ") "."""
    state, parent = (proc / "stat").read_text().rpartition(")")[2].split()[:2]
    return state, int(parent)


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie has)."""
    try:
        return _stat(Path("/proc") / str(pid))[0] != "Z"
    except OSError:
        return False


def children(parent: int | None = None) -> list[int]:
    """The live processes whose parent is `parent` (this process by default)."""
    parent = os.getpid() if parent is None else parent
    found = []
    for proc in _other_processes():
        try:
            state, its_parent = _stat(proc)
        except OSError:
            continue
        if its_parent == parent and state != "Z":
            found.append(int(proc.name))
    return found


def pytest_collection_modifyitems(config, items):
    """Tests that share the session's real runs (`real_runs`) run in one pytest-xdist worker, so each run is made
    once; tests of the plugin need flytekit and torch (the `plugin` extra): say so instead of failing to import."""
    for item in items:
        if "real_runs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("real-runs"))
    missing = missing_modules(PLUGIN_MODULES)
    if not missing:
        return
    skip = pytest.mark.skip(reason=f"plugin extra not installed ({', '.join(missing)})")
    for item in items:
        if "plugin" in item.keywords:
            item.add_marker(skip)


# Every process this test session starts inherits this variable (a local pod's environment is the caller's, plus
# Flyte's), so the check below finds this session's pods and never another session's.
os.environ["AGGSIM_TEST_SESSION"] = str(os.getpid())
POD_MARK = f"AGGSIM_TEST_SESSION={os.getpid()}".encode()


def pod_processes() -> list[tuple[int, str]]:
    """Live processes this session started (pods, agents, workers, CLI runs): (pid, command line). This test
    process's own multiprocessing resource tracker is none of them: started by the first in-process sweep with
    worker processes (`parallel.ordered_map`), it lives as long as this process, by multiprocessing's design."""
    found = []
    for proc in _other_processes():
        try:
            if POD_MARK not in (proc / "environ").read_bytes() or "State:\tZ" in (proc / "status").read_text():
                continue
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            _, parent = _stat(proc)
        except OSError:
            continue
        if parent == os.getpid() and "multiprocessing.resource_tracker" in cmdline:
            continue
        found.append((int(proc.name), cmdline[:160]))
    return found


@pytest.fixture(autouse=True)
def no_pod_outlives_a_real_test(request):
    """Every real test, passing or failing, leaves no pod, agent or worker behind (they are killed and the test
    errors if one is found; orphans get a few seconds to be collected by init first)."""
    yield
    if "real" not in request.keywords:
        return
    import time

    deadline = time.monotonic() + 5
    while (left := pod_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert left == [], f"processes outlived {request.node.name}: {left}"


def start_aggsim(tmpdir: Path, *args: str) -> subprocess.Popen:
    """`aggsim ARGS` with `tmpdir` as its TMPDIR, in a session of its own (so its whole process group, the pods
    included, can be signalled or killed), its output captured as text."""
    return subprocess.Popen(
        [AGGSIM, *args],
        env={**os.environ, "TMPDIR": str(tmpdir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def stop_aggsim(process: subprocess.Popen) -> None:
    """End an `aggsim` of `start_aggsim` that is still running (a test timed out or the session is stopping): SIGTERM,
    which it answers by stopping and reaping every pod it started, then SIGKILL to its process group after 30 s. A
    SIGKILL alone would leave its pods running: each sits in a session of its own."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


@dataclasses.dataclass(frozen=True)
class RealRun:
    """One `aggsim run-local SCENARIO --plugin P --json` run, as a user runs it, with a TMPDIR of its own."""

    command: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    tmpdir: Path

    @property
    def execution(self):
        """The real run's `aggsim.v1.Execution`, from the command's JSON."""
        return self._record("real")

    @property
    def evidence(self) -> str:
        """`unpredicted_run_evidence` of this run (against the simulation run-local printed beside it), and the last
        lines of each pod's log in the attempts where they differ: the kept files stay on the machine that ran it."""
        import re

        from aggregation.record import compare

        simulated, real = self._record("simulated"), self.execution
        fields = [field for field, a, b in compare(simulated, real) if a != b]
        differing = sorted({int(m[1]) for field in fields if (m := re.match(r"attempt (\d+) ", field))})
        logs = []
        for attempt in differing or range(len(real.attempts)):  # only execution-level fields differ: every attempt
            for log in sorted(self.tmpdir.glob(f"aggsim-run-local-*/attempt-{attempt}/work/*.log")):
                tail = log.read_text(errors="replace").strip().splitlines()[-12:]
                logs += [f"--- attempt {attempt}, {log.stem}'s log, last lines:", *tail]
        return "\n".join([unpredicted_run_evidence(simulated, real, self.stderr), *logs])

    def _record(self, which: str):
        """One `aggsim.v1.Execution` of the command's JSON: "real" or "simulated"."""
        import json

        from google.protobuf import json_format

        from aggregation.proto.aggsim.v1 import scenario_pb2

        try:
            record = json.loads(self.stdout)[which]
        except (ValueError, KeyError):
            raise AssertionError(f"{' '.join(self.command)} printed no record:\n{self.stderr[-3000:]}") from None
        return json_format.ParseDict(record, scenario_pb2.Execution())


def interrupt_when(args: list[str], signum: int, ready, limit: float = 60) -> tuple[int, str, str]:
    """Run `aggsim ARGS`, send it `signum` once `ready()` (polled every 50 ms) says so, and return its exit code,
    stdout and stderr. It must still be running then; it is reaped whatever happens."""
    import time

    running = subprocess.Popen([AGGSIM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + limit
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running.poll() is None, "it ended before it could be interrupted"
        running.send_signal(signum)
        out, err = running.communicate(timeout=limit)
    finally:
        running.kill()
        running.wait()
    return running.returncode, out, err


def unpredicted_run_evidence(simulated, real, stderr: str = "") -> str:
    """What a CI log needs to explain a real run the model did not predict, since its files stay on that machine:
    the verdict fields where it differs from the unjittered simulation, the runner's own explanation (its
    stderr's last lines) and the real run's timeline, in 100 columns."""
    import io

    from rich.console import Console

    from aggregation.record import compare
    from aggregation.report import render_record_timeline

    lines = [f"  {field}: simulated {a!r}, real {b!r}" for field, a, b in compare(simulated, real) if a != b]
    out = io.StringIO()
    render_record_timeline(real, Console(file=out, width=100, no_color=True, highlight=False), "real run")
    tail = [line for line in stderr.strip().splitlines()[-5:] if line.strip()]
    return "\n".join(["differs from the simulation in:", *lines, *tail, out.getvalue()])


def assert_agrees_with_the_simulator(spec, real, stderr: str = "") -> None:
    """A real run (an `aggsim.v1.Execution`) must reach the simulator's verdict for `spec`, field for field; when it
    does not, the failure says where and shows the real run's timeline (`unpredicted_run_evidence`)."""
    from aggregation.record import compare, execution_to_proto
    from aggregation.simulate import simulate

    simulated = execution_to_proto(simulate(spec))
    if any(a != b for _, a, b in compare(simulated, real)):
        raise AssertionError(
            f"real run disagrees with the simulator: {unpredicted_run_evidence(simulated, real, stderr)}"
        )


def conforming_local_run(spec, directory: Path):
    """A real run of a scenario made in the test (`localjob.runner.run_local`, in this process), checked as every
    shared real run is: no process outlives it, no upload was read half-written, and it agrees with the simulator.
    Returns its `aggsim.v1.Execution`."""
    from aggregation.record import execution_to_proto
    from localjob.runner import run_local

    real = execution_to_proto(run_local(spec, directory))
    assert leftover_processes(directory) == [], f"a pod, agent or worker outlived the run in {directory}"
    assert half_written_uploads(real) == [], f"a real upload was read half-written ({directory})"
    assert_agrees_with_the_simulator(spec, real)
    return real


def half_written_uploads(record) -> list[str]:
    """The error files of a real run (an `aggsim.v1.Execution`) that were read without a field flytekit's entrypoint
    always writes (`_dispatch_execute`: code, message, origin USER, a timestamp, and in a per-worker `error-<hex>.pb`
    the worker; a non-elastic job's master writes `error.pb` with none, aggregation or not: `replica_env`),
    unless the scenario cut that upload short itself (an `upload_truncated` event). An object store shows an
    object whole; the real runner's store must too (`localjob/blobstore.py`)."""
    from flyteidl.core import execution_pb2

    found = []
    for attempt in record.attempts:
        truncated = {entry.file for entry in attempt.timeline if entry.kind == "upload_truncated"}
        for file in attempt.files:
            if file.name == "outputs.pb" or file.name in truncated:
                continue
            error = file.error
            whole = (
                file.HasField("error")
                and error.code
                and error.message
                and error.origin == execution_pb2.ExecutionError.USER
                and error.HasField("timestamp")
                and (error.worker or file.name == "error.pb")
            )
            if not whole:
                found.append(f"attempt {attempt.attempt} {file.name} from {file.pod or '?'}: {error}".strip())
    return found


class RealRuns:
    """Real runs of shipped scenarios, each made once per session with the CLI and shared: the conformance tests
    read a scenario's first run, the distribution test its first few (`tests/test_distribution_real.py`), and the
    docs test a documented `aggsim run-local SCENARIO --plugin P` line. Every run is checked to leave no process
    behind, and, when it agrees with the simulator, nothing in its TMPDIR (a run that disagrees keeps its files
    there as evidence)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.runs: dict[tuple[str, str, int], RealRun] = {}

    def run(self, scenario: str, plugin: str, index: int = 0) -> RealRun:
        """The `index`-th real run of the shipped `scenario` with `plugin`."""
        import tempfile

        key = (scenario, plugin, index)
        if key not in self.runs:
            tmpdir = Path(tempfile.mkdtemp(prefix=f"{scenario}-{plugin}-{index}-", dir=self.base))
            args = ("run-local", str(SCENARIOS / f"{scenario}.textproto"), "--plugin", plugin, "--json")
            process = start_aggsim(tmpdir, *args)
            try:
                stdout, stderr = process.communicate(timeout=540)
            finally:
                stop_aggsim(process)
            assert leftover_processes(tmpdir) == [], f"a pod, agent or worker outlived the run in {tmpdir}"
            if process.returncode == 0:
                assert list(tmpdir.iterdir()) == [], f"a run that agreed left files in {tmpdir}"
            self.runs[key] = run = RealRun((AGGSIM, *args), process.returncode, stdout, stderr, tmpdir)
            try:
                record = run.execution
            except AssertionError:
                record = None  # no record: the tests that read the run say so, with its stderr
            if record is not None:
                assert half_written_uploads(record) == [], f"a real upload was read half-written ({tmpdir})"
        return self.runs[key]

    def get(self, scenario: str, plugin: str, index: int = 0):
        """The `index`-th real run of `scenario` with `plugin`, as an `aggsim.v1.Execution`."""
        return self.run(scenario, plugin, index).execution


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory) -> RealRuns:
    return RealRuns(tmp_path_factory.mktemp("real-runs"))
