"""A pod on a node whose clock is off (`localjob.pod.clock_offset_environment`): every time it reads is on that clock,
its own files' times included, as on a real node, whose kernel stamps files from the clock its processes read.

libfaketime shifts the clocks, but not the file times CPython reads (`stat64` and its kin, which libfaketime 0.9.10
does not wrap): `localjob/node_clock/sitecustomize.py` shifts those. The recoverable plugin stamps a worker failure with
its error file's mtime (`plugin/task.py` `refine_first_failure_timestamp`), so a skewed pod's refined stamp must be on
the pod's clock, as the model puts it (`aggregation/pods.py` `Pod.worker_error`: the pod's own clock). Real processes,
a fraction of a second each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from localjob.pod import clock_offset_environment, libfaketime_path

#: how far a file's mtime may trail `time.time()`: Linux stamps files from its coarse clock, a tick (1-10 ms) behind
COARSE_CLOCK = 0.05

_READ_TIMES = r"""
import json, os, pathlib, sys, time
path = sys.argv[1]
before = time.time_ns()
with open(path, "w") as f:
    f.write("worker failed")
    f.flush()
    held = os.fstat(f.fileno()).st_mtime_ns
after = time.time_ns()
stat = os.stat(path)
print(json.dumps({
    "before": before, "after": after, "stat": stat.st_mtime_ns, "lstat": os.lstat(path).st_mtime_ns, "fstat": held,
    "pathlib": pathlib.Path(path).stat().st_mtime_ns, "float": stat.st_mtime, "second": stat[8],
}))
"""


def _skewed_run(code: str, offset: float, *args: str) -> str:
    if libfaketime_path() is None:
        pytest.fail("libfaketime is missing: .ci/system-packages installs it (Debian package faketime)")
    env = {**os.environ, **clock_offset_environment(offset)}
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("offset", [-0.25, 0.5, 100.0])
def test_a_skewed_pod_reads_its_own_file_s_times_on_its_own_clock(tmp_path, offset) -> None:
    """Written between two readings of the pod's clock, a file's mtime lies between them (less the coarse clock's
    tick) through every way Python reads it; without the shift it lay `offset` away (100 s under FAKETIME=+100)."""
    times = json.loads(_skewed_run(_READ_TIMES, offset, str(tmp_path / "error.json")))
    for way in ("stat", "lstat", "fstat", "pathlib"):
        assert times["before"] - COARSE_CLOCK * 1e9 <= times[way] <= times["after"], (way, times)
    assert times["second"] == times["stat"] // 10**9
    assert abs(times["float"] - times["stat"] / 1e9) < 1e-6


_REFINE = r"""
import os, sys, time, types
from plugin.task import refine_first_failure_timestamp
path = sys.argv[1]
failed_at = time.time()
with open(path, "w") as f:
    f.write("worker failed")
failure = types.SimpleNamespace(timestamp=int(failed_at), error_file=path)  # torch's whole second
print(failed_at, refine_first_failure_timestamp(failure))
"""


@pytest.mark.plugin
@pytest.mark.parametrize("offset", [-0.25, 0.25])
def test_the_plugin_s_refined_stamp_in_a_skewed_pod_is_on_the_pod_s_clock(tmp_path, offset) -> None:
    """`plugin/task.py` `refine_first_failure_timestamp` in a pod whose clock is `offset` off: the refined stamp is the
    failure's moment on the pod's clock, as the model stamps it, not the true clock's (0.25 s away), nor torch's whole
    second, which the plugin keeps when the mtime falls outside it."""
    failed_at, refined = map(float, _skewed_run(_REFINE, offset, str(tmp_path / "error.json")).split())
    assert failed_at - COARSE_CLOCK <= refined <= failed_at + COARSE_CLOCK
    assert refined != int(failed_at)
