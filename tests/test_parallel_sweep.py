"""A sweep's points played in worker processes (`parallel.ordered_map`, `explore.sweep(processes=N)`, `aggsim sweep
--jobs`): the same answer as one process, to the counterexample and the row, and no worker outlives the command.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import AGGSIM, alive, children

from aggregation import explore
from aggregation.caselog import CaseLog
from aggregation.cores import usable_cores
from aggregation.explore import Variation, default_variations, sweep
from aggregation.report import sweep_to_json
from aggregation.scenario import read_scenario

LONG_SWEEP = ["sweep", "preemption_during_training", "--samples", "20000"]


def _swept(source, variations, processes: int, rows: Path, **options):
    fields = [v.field for v in variations]
    with CaseLog(str(rows), fields) as log:
        result = sweep(
            source,
            variations,
            processes=processes,
            on_case=lambda a, cell, *case: log.write(a, cell.plugin, cell.aggregation, *case),
            **options,
        )
    return json.dumps(sweep_to_json(result), sort_keys=True), rows.read_bytes()


@pytest.mark.parametrize(
    "scenario, variations, options",
    [
        ("preemption_during_training", None, {"samples": 150, "seed": 3}),
        ("sibling_user_error_cleanup_no_aggregation", None, {"samples": 120, "seed": 0}),
        # points the model refuses (the busy operator reads the deleted pod after its exit) between played ones
        (
            "preemption_by_pod_deletion",
            [Variation("job.reconcile_seconds", (0.5, 0.73, 1.0, 2.0, 0.1, 1.5, 0.0, 3.0))],
            {"plugins": ("upstream", "recoverable")},
        ),
    ],
    ids=["preemption, sampled", "sibling error, sampled", "refused points"],
)
def test_a_sweep_in_worker_processes_is_the_sweep_of_one_process(tmp_path, monkeypatch, scenario, variations, options):
    """`explore.sweep` with workers hands each chunk's results back in plan order, and the first point of each
    outcome (the counterexample, with its timeline), the first refusal and every `--out` row are the ones one
    process gives. Chunks are made tiny here, so firsts fall in every chunk but the first."""
    monkeypatch.setattr(explore, "PARALLEL_FROM_SIMULATIONS", 0)
    monkeypatch.setattr(explore, "CHUNK_SIMULATIONS", 5)
    source = read_scenario(scenario)
    variations = variations or default_variations(source)
    alone = _swept(source, variations, 1, tmp_path / "alone.jsonl", **options)
    shared = _swept(source, variations, 2, tmp_path / "shared.jsonl", **options)
    assert shared == alone
    assert len(json.loads(alone[0])["cells"][0]["counterexamples"]) >= 1


def test_where_no_worker_process_can_be_made_the_sweep_plays_in_its_own_process(tmp_path, monkeypatch):
    """Without POSIX semaphores (a sandbox with no /dev/shm) multiprocessing cannot make its queues: the sweep does
    the work itself, with the same answer, instead of failing."""
    from aggregation import parallel

    tried = []

    def no_semaphores(*args, **kwargs):
        tried.append(args)
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(explore, "PARALLEL_FROM_SIMULATIONS", 0)
    monkeypatch.setattr(explore, "CHUNK_SIMULATIONS", 30)
    source = read_scenario("preemption_during_training")
    variations = default_variations(source)
    alone = _swept(source, variations, 1, tmp_path / "alone.csv", samples=40)
    monkeypatch.setattr(parallel, "ProcessPoolExecutor", no_semaphores)
    assert _swept(source, variations, 2, tmp_path / "here.csv", samples=40) == alone
    assert len(tried) == 1


def test_a_value_a_worker_cannot_set_stops_the_sweep_as_one_process_would(monkeypatch):
    """A varied value the scenario's rules refuse, found in a worker, is raised in the sweep's process with the
    message one process gives (the CLI's one line)."""
    monkeypatch.setattr(explore, "PARALLEL_FROM_SIMULATIONS", 0)
    monkeypatch.setattr(explore, "CHUNK_SIMULATIONS", 6)
    source = read_scenario("preemption_during_training")
    variations = [Variation("timings.upload_seconds", (0.05, 0.5, 1.0, 2.0, -1.0, 3.0))]
    messages = []
    for processes in (1, 2):
        with pytest.raises(explore.ScenarioError) as raised:
            sweep(source, variations, processes=processes)
        messages.append(str(raised.value))
    assert messages[0] == messages[1] and messages[0].startswith("--vary timings.upload_seconds=-1.0: ")


def test_aggsim_sweep_with_jobs_prints_and_writes_what_one_process_does(tmp_path):
    outputs = []
    for jobs in ("1", "2"):
        rows = tmp_path / f"rows-{jobs}.csv"
        args = ["sweep", "preemption_during_training", "--samples", "1000", "--out", str(rows), "--jobs", jobs]
        run = subprocess.run([AGGSIM, *args], capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"})
        assert run.returncode == 0, run.stderr
        outputs.append((run.stdout, rows.read_bytes()))
    assert outputs[0] == outputs[1]


def _cgroups(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A /proc/self/cgroup and a /sys/fs/cgroup tree of our own."""
    (tmp_path / "self-cgroup").write_text(membership)
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    (tmp_path / "fs").mkdir(exist_ok=True)
    return tmp_path / "self-cgroup", tmp_path / "fs"


@pytest.mark.parametrize(
    "membership, files, quota",
    [
        ("0::/\n", {"cpu.max": "max 100000\n"}, None),
        ("0::/kubepods/pod1/c1\n", {"kubepods/pod1/c1/cpu.max": "150000 100000\n"}, 1.5),
        # a parent's limit is tighter than the container's own
        ("0::/a/b\n", {"a/cpu.max": "100000 100000\n", "a/b/cpu.max": "400000 100000\n"}, 1.0),
        # the host's path in a container that mounts its own cgroup at the root
        ("0::/kubepods/pod1/c1\n", {"cpu.max": "250000 100000\n"}, 2.5),
        ("4:cpu,cpuacct:/docker/x\n", {"cpu,cpuacct/docker/x/cpu.cfs_quota_us": "-1\n"}, None),
        (
            "4:cpu,cpuacct:/docker/x\n1:memory:/docker/x\n",
            {"cpu,cpuacct/docker/x/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000\n"},
            0.5,
        ),
        ("1:memory:/x\n0::/\n", {}, None),  # no cpu controller's files: no quota known
    ],
    ids=["v2 none", "v2 quota", "v2 parent tighter", "v2 container root", "v1 none", "v1 quota", "no files"],
)
def test_the_default_jobs_respects_the_cgroup_s_cpu_quota(tmp_path, membership, files, quota):
    """`--jobs`'s default: no more workers than the container's CPU quota allows (rounded up), never fewer than one:
    on a 64-core node a pod limited to 2 CPUs must not start 64 processes that each import the model."""
    from aggregation.cores import cpu_quota, usable_cores

    cgroups, mounts = _cgroups(tmp_path, membership, files)
    assert cpu_quota(cgroups, mounts) == quota
    affinity = len(os.sched_getaffinity(0))
    expected = affinity if quota is None else max(1, min(affinity, math.ceil(quota)))
    assert usable_cores(cgroups, mounts) == expected


REGION_MAP = ["sweep", "preemption_during_training", "--vary", "timings.agent_shutdown_seconds=0.03..30"]
REGION_MAP += ["--vary", "propeller.observation_delay_seconds=0..10"]


def _without_seconds(value):
    """A region map's JSON without its measured times (they differ from run to run)."""
    if isinstance(value, dict):
        return {k: _without_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_without_seconds(v) for v in value]
    return value


def test_an_exact_region_map_drawn_by_workers_is_the_map_one_process_draws():
    """`sweep` with two ranges draws its plugin x aggregation cells in worker processes (`regions.region_sweep`):
    every region, polygon and witness is the one process's, in the same order."""
    drawn = {
        jobs: subprocess.run([AGGSIM, *REGION_MAP, "--json", "--jobs", jobs], capture_output=True, text=True)
        for jobs in ("1", "2")
    }
    assert [run.returncode for run in drawn.values()] == [0, 0], [run.stderr for run in drawn.values()]
    alone, shared = (_without_seconds(json.loads(run.stdout)) for run in drawn.values())
    assert shared == alone
    assert len(alone["cells"]) == 6 and all(cell["regions"] for cell in alone["cells"])


def _children(pid: int, kind: str = "") -> set[int]:
    """The live processes whose parent is `pid`, with `kind` in their command line ("spawn_main": a worker)."""
    found = set()
    for child in children(pid):
        try:
            if kind.encode() in Path(f"/proc/{child}/cmdline").read_bytes():
                found.add(child)
        except OSError:
            continue
    return found


def _start_with_workers(args: list[str]) -> tuple[subprocess.Popen, list[int], list[int]]:
    """`aggsim ARGS` in a session of its own, once its two worker processes are at work: (it, its workers, the
    other processes it started)."""
    running = subprocess.Popen(
        [AGGSIM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while len(workers := _children(running.pid, "spawn_main")) < 2:
        assert running.poll() is None, running.communicate()
        assert time.monotonic() < deadline, "no worker processes within 60 s"
        time.sleep(0.05)
    time.sleep(1.0)  # the workers have imported the model and play their first chunks
    return running, sorted(workers), sorted(_children(running.pid) - workers)


def _gone(pids) -> list[int]:
    """Those of `pids` still alive 5 s on (a worker is reaped before the command exits; the resource tracker leaves
    when the command's end closes its pipe)."""
    deadline = time.monotonic() + 5
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _reap(running: subprocess.Popen, workers) -> None:
    for pid in [running.pid, *workers]:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    running.communicate()


@pytest.mark.parametrize(
    "signum, group",
    [(signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGHUP, True), (signal.SIGTERM, True)],
    ids=["ctrl-c in a terminal", "kill", "terminal closed", "the process group terminated"],
)
def test_a_sweep_stopped_by_a_signal_stops_and_reaps_its_workers_and_says_so_in_one_line(signum, group):
    """A terminal's Ctrl-C or hangup reaches the whole process group, `kill` the command alone: either way the
    workers leave the signal to the command (none prints a traceback of its own), which stops them, reaps them and
    ends with the one line every interrupted command ends with."""
    running, workers, others = _start_with_workers(LONG_SWEEP)
    try:
        (os.killpg if group else os.kill)(running.pid, signum)
        _, err = running.communicate(timeout=60)
        assert running.returncode == 128 + signum, err
        assert err == f"aggsim: interrupted ({signal.Signals(signum).name}); every process it started is stopped\n"
        assert [pid for pid in workers if alive(pid)] == []  # reaped before the command's last line
        assert _gone(others) == []
    finally:
        _reap(running, workers + others)


def test_an_exact_region_map_stopped_by_ctrl_c_stops_its_workers_and_says_so_in_one_line():
    """The prover keeps a signal for a safe point (`interrupts.holding`); with the cells in workers, the command's
    wait for them is one (`parallel._result`): Ctrl-C ends it with the one line, its workers reaped."""
    running, workers, others = _start_with_workers([*REGION_MAP, "--jobs", "2"])
    try:
        os.killpg(running.pid, signal.SIGINT)
        _, err = running.communicate(timeout=30)
        assert running.returncode == 128 + signal.SIGINT, err
        assert err == "aggsim: interrupted (SIGINT); every process it started is stopped\n"
        assert [pid for pid in workers if alive(pid)] == []
        assert _gone(others) == []
    finally:
        _reap(running, workers + others)


def test_the_workers_of_a_sweep_killed_outright_do_not_run_on():
    """SIGKILL gives the command no chance to stop its workers: the kernel ends them with it (Linux's parent-death
    signal), so no orphan plays on."""
    running, workers, others = _start_with_workers(LONG_SWEEP)
    try:
        running.kill()
        running.wait()
        assert _gone(workers + others) == []
    finally:
        _reap(running, workers + others)


def test_a_worker_killed_from_outside_ends_the_sweep_with_one_line_not_a_verdict():
    """A worker that dies (the OOM killer, a stray kill) leaves points unplayed: the sweep must not report counts
    without them. It ends with one line, exit 2, and its other worker is reaped."""
    running, workers, others = _start_with_workers([*LONG_SWEEP, "--json"])
    try:
        os.kill(workers[0], signal.SIGKILL)
        out, err = running.communicate(timeout=60)
        assert running.returncode == 2 and out == ""
        assert err == "aggsim: a worker process of the sweep died before finishing its work\n"
        assert [pid for pid in workers if alive(pid)] == []
        assert _gone(others) == []
    finally:
        _reap(running, workers + others)


@pytest.mark.skipif(usable_cores() < 2, reason="the demo plays its sweeps in one process on a single core")
def test_a_demo_worker_killed_from_outside_ends_the_demo_with_one_line_not_a_table():
    """`aggsim demo` plays its sweeps on every core too: a worker that dies ends it the way it ends a sweep, one
    line and exit 2, never a traceback or a table counting without the lost points."""
    running, workers, others = _start_with_workers(["demo"])
    try:
        os.kill(workers[0], signal.SIGKILL)
        out, err = running.communicate(timeout=60)
        assert running.returncode == 2
        assert err == "aggsim: a worker process of the sweep died before finishing its work\n"
        assert "retried" not in out  # the first table never printed
        assert [pid for pid in workers if alive(pid)] == []
        assert _gone(others) == []
    finally:
        _reap(running, workers + others)
