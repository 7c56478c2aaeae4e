"""`aggsim calibrate`: a preempted pod's report measured with real pods (localjob/calibrate.py).

The plugin's decision line (plugin/task.py `Look.log_decision`) is what the measurement reads; the real run
mirrors flytekit 1.16.31 `entrypoint.py` `_dispatch_execute` (the error file is written after `_execute`
raises) and torch 2.13.0 `SimpleElasticAgent.run` (the agent exits after the entrypoint's upload).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import AGGSIM, leftover_processes
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.plugin


@settings(deadline=None)  # the first example imports flytekit and torch
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
@pytest.mark.timeout(300)
def test_calibrate_measures_each_real_run_in_causal_order_and_leaves_nothing(tmp_path):
    """Signal sent <= plugin looked <= error.pb landed <= agent exited, in every real run; no process or temp file
    outlives the command."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    profile = tmp_path / "profile.textproto"
    env = {**os.environ, "TMPDIR": str(temp)}
    done = subprocess.run(
        [AGGSIM, "calibrate", "--runs", "2", "--json", "--profile", str(profile)],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert len(report["runs"]) == 2
    for run in report["runs"]:
        assert run["signal_sent"] <= run["looked"] <= run["landed"] <= run["exited"], run
    timings = {p["phase"]: p["model_timing"] for p in report["phases"]}
    assert timings == {
        "signal -> look": "agent_shutdown_seconds",
        "look -> landed": "upload_seconds",
        "landed -> exit": "exit_seconds",
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
        assert (entry.min_seconds, entry.median_seconds, entry.max_seconds, entry.runs) == pytest.approx(
            (phase["min"], phase["median"], phase["max"], 2), abs=1e-6
        )
