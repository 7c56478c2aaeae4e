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


def _present(tmpdir: Path, pattern: str) -> bool:
    try:
        return any(tmpdir.rglob(pattern))
    except FileNotFoundError:  # the run removed a directory while the walk was inside it: look again
        return False


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
