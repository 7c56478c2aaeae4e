"""`aggsim calibrate`: a preempted pod's report measured with real pods (localjob/calibrate.py).

The plugin's decision line (plugin/task.py `Look.log_decision`) is what the measurement reads; the real run
mirrors flytekit 1.16.31 `entrypoint.py` `_dispatch_execute` (the error file is written after `_execute`
raises) and torch 2.13.0 `SimpleElasticAgent.run` (the agent exits after the entrypoint's upload).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from conftest import AGGSIM, leftover_processes
from hypothesis import example, given
from hypothesis import strategies as st

pytestmark = pytest.mark.plugin

_MIDNIGHT = 1_796_083_200.0 - time.localtime(1_796_083_200).tm_gmtoff  # a local midnight (2026-12-01)


@given(st.text(min_size=1), st.floats(min_value=0, max_value=4e9, allow_nan=False), st.booleans())
def test_the_decision_time_is_read_back_from_the_pod_s_json_log_whatever_the_prefix(prefix, at, found):
    """flytekit's pod log is JSON (loggers.initialize_global_loggers): the stamp survives any prefix's escaping."""
    from localjob.calibrate import _decision_time
    from plugin.task import DECISION_FORMAT

    decision = "leaves error.pb standing" if found else "reports its preemption: no sibling's report"
    line = json.dumps({"name": "flytekit", "message": DECISION_FORMAT.format(decision=decision, prefix=prefix, at=at)})
    assert _decision_time("earlier output\n" + line + "\n") == float(f"{at:.6f}")


@given(st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), min_size=1), st.floats(0, 1))
def test_a_quantile_is_a_measured_value_between_min_and_max(values, q):
    from localjob.calibrate import Phase

    phase = Phase("p", "upload", 0.05, tuple(values))
    assert phase.quantile(q) in values
    assert phase.quantile(0) == min(values) and phase.quantile(1) == max(values)
    assert phase.quantile(0) <= phase.quantile(q) <= phase.quantile(1)


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_calibrate_measures_each_real_run_in_causal_order_and_leaves_nothing(tmp_path):
    """Report runs: signal sent <= plugin looked <= error.pb landed <= agent exited. Worker-group runs: the
    workers' end <= the agent's look that found it <= flytekit's catch. Every phase lands in the profile as the
    PodTimings field the model plays it with; no process or temp file outlives the command."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    profile = tmp_path / "profile.textproto"
    env = {**os.environ, "TMPDIR": str(temp)}
    done = subprocess.run(
        [AGGSIM, "calibrate", "--runs", "1", "--phases", "all", "--json", "--profile", str(profile)],
        capture_output=True,
        text=True,
        timeout=380,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert len(report["runs"]) == 1
    for run in report["runs"]:
        assert run["signal_sent"] <= run["looked"] <= run["landed"] <= run["exited"], run
    # one failing and one finishing 2-pod job, a sample per pod
    assert sorted((g["failing"], g["pod"]) for g in report["group_runs"]) == [
        (False, "train-worker-0"),
        (False, "train-worker-1"),
        (True, "train-worker-0"),
        (True, "train-worker-1"),
    ]
    for group in report["group_runs"]:
        assert group["ended"] <= group["seen"], group
        assert (group["caught"] is not None) == group["failing"]
        if group["failing"]:
            assert group["seen"] <= group["caught"], group
    timings = {p["phase"]: p["model_timing"] for p in report["phases"]}
    assert timings == {
        "signal -> look": "agent_shutdown_seconds",
        "look -> landed": "upload_seconds",
        "landed -> exit": "exit_seconds",
        "worker raised -> gone": "failed_worker_exit_seconds",
        "look -> caught": "failure_detection_seconds",
        "returned -> gone": "finished_worker_exit_seconds",
    }
    for phase in report["phases"]:
        assert phase["min"] <= phase["median"] <= phase["p90"] <= phase["max"]
    assert list(temp.iterdir()) == []
    assert leftover_processes(temp) == []
    # the profile holds the same phases, as the PodTimings fields the model plays them with
    from aggregation.profile import read_profile

    written = {p.field: p for p in read_profile(str(profile)).phases}
    assert set(written) == set(timings.values())
    for phase in report["phases"]:
        entry = written[phase["model_timing"]]
        assert (entry.min_seconds, entry.median_seconds, entry.max_seconds) == pytest.approx(
            (phase["min"], phase["median"], phase["max"]), abs=1e-6
        )
        assert entry.runs == 1  # runs, not samples: a worker-group run gives one sample per pod


def test_the_worker_group_s_end_is_read_from_torch_s_and_flytekit_s_own_log_lines():
    """torch 2.13 `elastic/multiprocessing/api.py` `MultiprocessContext._poll` logs a failed worker ("failed
    (exitcode: ...)") and `elastic/agent/server/api.py` `SimpleElasticAgent._invoke_run` a finished group, each with a
    glog stamp (LOGLEVEL=INFO); flytekit's JSON logger stamps the exception its entrypoint caught."""
    from localjob.calibrate import CAUGHT, FAILED_SEEN, FINISHED_SEEN, agent_line_time

    log = "\n".join(
        [
            "I1201 18:43:00.337000 5452 torch/distributed/launcher/api.py:254]   monitor_interval         : 0.1",
            "a worker's own line that says failed (exitcode: 9) without a glog header",
            "E1201 18:43:20.857000 5452 torch/distributed/elastic/multiprocessing/api.py:836] failed (exitcode: 1) "
            "local_rank: 0 (pid: 5467) of fn: spawn_helper (start_method: spawn)",
            "E1201 18:43:20.957000 5452 torch/distributed/elastic/multiprocessing/api.py:836] failed (exitcode: 1) "
            "local_rank: 1 (pid: 5468) of fn: spawn_helper (start_method: spawn)",
            '{"asctime": "2026-12-01 18:43:22,881", "name": "flytekit", "levelname": "ERROR", "message": "Exception',
        ]
    )
    finished = (
        "I1201 23:59:59.999000 77 torch/distributed/elastic/agent/server/api.py:933] [default_role] worker group "
        "successfully finished. Waiting 300 seconds for other agents to finish."
    )
    assert agent_line_time(log, FAILED_SEEN) == "18:43:20.857000"  # the first look that found a failed worker
    assert agent_line_time(finished, FINISHED_SEEN) == "23:59:59.999000"
    assert agent_line_time(log, FINISHED_SEEN) is None and agent_line_time(finished, FAILED_SEEN) is None
    assert CAUGHT.search(log).group("clock") == "18:43:22,881"


@given(st.floats(min_value=1e9, max_value=4e9), st.floats(min_value=-3, max_value=3))
@example(near=_MIDNIGHT - 0.25, offset=0.5)  # the run before midnight, the stamp after
@example(near=_MIDNIGHT + 0.25, offset=-0.5)  # the run after midnight, the stamp before
def test_a_log_s_time_of_day_reads_as_the_instant_nearest_the_run_even_across_midnight(near, offset):
    """A glog or flytekit stamp has no date: the instant meant is the one with that local time nearest the run."""
    import time

    from localjob.calibrate import wall_time

    instant = near + offset
    local = time.localtime(instant)
    clock = f"{local.tm_hour:02d}:{local.tm_min:02d}:{local.tm_sec + instant % 1:09.6f}"
    assert wall_time(clock, near) == pytest.approx(instant, abs=1e-5)
