"""Interrupting a command that starts real pods: SIGTERM (`timeout`, CI runners), SIGINT (Ctrl-C) and SIGHUP (a
closed terminal) end every process it started and remove its temp files, then exit 128 + the signal with one
line. Each test runs `aggsim` with its own TMPDIR and asserts that nothing of the run is left: no process whose
command line or environment names that TMPDIR, and no entry in it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SCENARIOS, leftover_processes, start_aggsim

pytestmark = [pytest.mark.plugin, pytest.mark.real, pytest.mark.timeout(240)]

PREEMPTION = str(SCENARIOS / "preemption_during_training.textproto")
START_TIMEOUT = 120


def start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    tmpdir = tmp_path / "T"
    tmpdir.mkdir()
    return start_aggsim(tmpdir, *args), tmpdir


def _found(tmpdir: Path, pattern: str) -> set[str]:
    """The names of the files matching `pattern` under `tmpdir`."""
    try:
        return {path.name for path in tmpdir.rglob(pattern)}
    except FileNotFoundError:  # the run removed a directory while the walk was inside it: look again
        return set()


def _present(tmpdir: Path, pattern: str) -> bool:
    return bool(_found(tmpdir, pattern))


def wait_for(tmpdir: Path, pattern: str, process: subprocess.Popen) -> None:
    """Until a file matching `pattern` appears under `tmpdir`; on failure the command's processes are killed."""
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while not _present(tmpdir, pattern):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, f"no {pattern} under {tmpdir} within {START_TIMEOUT} s"
            time.sleep(0.02)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the command and every pod it started
        process.communicate()
        raise


def interrupt_and_check(process: subprocess.Popen, tmpdir: Path, sig: signal.Signals) -> None:
    try:
        process.send_signal(sig)
        out, err = process.communicate(timeout=90)
        assert process.returncode == 128 + sig, (process.returncode, err[-2000:])
        lines = err.strip().splitlines()
        assert lines and lines[-1] == f"aggsim: interrupted ({sig.name}); every process it started is stopped", err
        assert "Traceback" not in err
        assert leftover_processes(tmpdir) == []
        assert list(tmpdir.iterdir()) == []
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_sigterm_mid_training_stops_every_pod_and_leaves_no_temp_file(tmp_path):
    """`timeout 30 aggsim run-local SCENARIO`: SIGTERM once the workers train."""
    process, tmpdir = start(tmp_path, "run-local", PREEMPTION)
    wait_for(tmpdir, "barrier.*", process)
    time.sleep(0.5)
    interrupt_and_check(process, tmpdir, signal.SIGTERM)


@pytest.mark.slow
def test_sigint_at_start_up(tmp_path):
    process, tmpdir = start(tmp_path, "run-local", PREEMPTION)
    wait_for(tmpdir, "*.log", process)  # the first pod has been started
    interrupt_and_check(process, tmpdir, signal.SIGINT)


@pytest.mark.slow
def test_sighup_during_the_upload(tmp_path):
    process, tmpdir = start(tmp_path, "run-local", PREEMPTION)
    wait_for(tmpdir, "error*.pb", process)
    interrupt_and_check(process, tmpdir, signal.SIGHUP)


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["start-up", "mid-training"])
def test_demo_real_interrupted(tmp_path, moment):
    process, tmpdir = start(tmp_path, "demo", "--real")
    wait_for(tmpdir, "*.log" if moment == "start-up" else "barrier.*", process)
    interrupt_and_check(process, tmpdir, signal.SIGTERM)


@pytest.mark.slow
def test_a_clean_run_leaves_no_process_and_nothing_in_tmpdir(real_runs):
    """A run that agrees removes its dir; the pods' torch elastic and flytekit temp files lived inside it (the
    session's shared run of the scenario, `conftest.RealRuns`, made with a TMPDIR of its own)."""
    run = real_runs.run("sibling_user_error_cleanup", "recoverable")
    assert run.returncode == 0, run.stderr[-2000:]
    assert leftover_processes(run.tmpdir) == []
    assert list(run.tmpdir.iterdir()) == []


#: real tests as the project's own make them: a run in the test session's process (`localjob.runner.run_local`), or
#: a shared run of `aggsim run-local` in a process of its own (`conftest.RealRuns`)
IN_THE_SESSION = f"""
from aggregation.scenario import load_scenario
from localjob.runner import run_local


def test_a_real_run(tmp_path):
    run_local(load_scenario({PREEMPTION!r}, "recoverable"), tmp_path / "run")
"""
SHARED = """
def test_a_shared_real_run(real_runs):
    real_runs.run("preemption_during_training", "recoverable")
"""


@pytest.mark.parametrize(
    "test, workers",
    [(IN_THE_SESSION, 0), (IN_THE_SESSION, 1), (SHARED, 0)],
    ids=["run in the session", "run in an xdist worker, the controller alone signalled", "shared aggsim run"],
)
def test_a_test_session_stopped_by_sigterm_mid_run_kills_the_run_s_pods(tmp_path, test, workers):
    """A CI job cancelled or timed out SIGTERMs pytest during a real run (here as the run's pods start): the session
    stops as Ctrl-C stops it, so the run's `with` blocks kill its pods (`conftest.pytest_configure`; a shared run's
    `aggsim` is SIGTERMed and reaps its own, `conftest.stop_aggsim`); with pytest-xdist the controller passes the
    signal to its workers. Python's default action ended the session at once and left the pods running (each sits
    in a session of its own). The session under test loads the project's conftest (`-p conftest`)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # this directory is the session's root: not the project's
    (tmp_path / "test_real.py").write_text(test)
    xdist = ["-n", str(workers)] if workers else []
    command = [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", *xdist, "test_real.py"]
    session = subprocess.Popen(
        [*command, f"--basetemp={tmp_path / 'base'}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while len(_found(tmp_path / "base", "train-worker-*.log")) < 2:  # both pods are up
            assert session.poll() is None, session.communicate()[0][-3000:]
            assert time.monotonic() < deadline, f"no two pods started within {START_TIMEOUT} s"
            time.sleep(0.02)
        os.kill(session.pid, signal.SIGTERM)
        out, _ = session.communicate(timeout=90)
        assert leftover_processes(tmp_path) == []
        assert session.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
        assert "KeyboardInterrupt: stopped by SIGTERM" in out, out[-3000:]
    finally:
        if session.poll() is None:
            os.killpg(session.pid, signal.SIGKILL)
            session.communicate()
        for process in leftover_processes(tmp_path):  # what the session left: killed here, after the check above
            with contextlib.suppress(OSError):
                os.kill(int(process.split(":")[0]), signal.SIGKILL)
