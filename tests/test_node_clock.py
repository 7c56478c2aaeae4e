"""A pod on a node whose clock is off (`localjob.pod.clock_offset_environment`): every time it reads is on that clock,
its own files' times included, as on a real node, whose kernel stamps files from the clock its processes read.

libfaketime shifts the clocks, but not the file times CPython reads (`stat64` and its kin, which libfaketime 0.9.10
does not wrap): `localjob/node_clock/sitecustomize.py` shifts those. The recoverable plugin stamps a worker failure with
its error file's mtime (`plugin/task.py` `refine_first_failure_timestamp`), so a skewed pod's refined stamp must be on
the pod's clock, as the model puts it (`aggregation/pods.py` `Pod.worker_error`: the pod's own clock). The kernel
stamps a signal's arrival on the true clock; the plugin gives it on the pod's. Real processes, a fraction of a second
each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import CLOCKS_READ_TOGETHER, ROOT

from localjob.pod import clock_offset_environment, libfaketime_path

# libfaketime is a Debian package: `make test-real` installs it (`.ci/system-packages`), `make test` needs nothing
pytestmark = pytest.mark.slow

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
read = {
    "before": before, "after": after, "stat": stat.st_mtime_ns, "lstat": os.lstat(path).st_mtime_ns, "fstat": held,
    "pathlib": pathlib.Path(path).stat().st_mtime_ns, "getmtime": int(os.path.getmtime(path) * 1e9),
    "float": stat.st_mtime, "second": stat[8],
}
before = time.time_ns()
pathlib.Path(path).touch()  # libfaketime writes its own "now": on the node's clock already
after = time.time_ns()
read.update(touch_before=before, touch_after=after, touched=os.stat(path).st_mtime_ns)
os.utime(path, ns=(before - 7 * 10**9,) * 2)  # a time on the node's clock, read back as written
read.update(set=before - 7 * 10**9, read_back=os.stat(path).st_mtime_ns)
print(json.dumps(read))
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
    tick) through `os.stat`, `os.lstat`, `os.fstat`, `os.path.getmtime` and `pathlib`; without the shift it lay
    `offset` away (100 s under FAKETIME=+100). A touch, and a time set with `os.utime`, read back on the same clock."""
    times = json.loads(_skewed_run(_READ_TIMES, offset, str(tmp_path / "error.json")))
    for way in ("stat", "lstat", "fstat", "pathlib", "getmtime"):
        assert times["before"] - COARSE_CLOCK * 1e9 <= times[way] <= times["after"], (way, times)
    assert times["second"] == times["stat"] // 10**9
    assert abs(times["float"] - times["stat"] / 1e9) < 1e-6
    assert times["touch_before"] - COARSE_CLOCK * 1e9 <= times["touched"] <= times["touch_after"], times
    assert times["read_back"] == times["set"]


def test_a_skewed_pod_s_os_functions_keep_their_place_in_the_supports_sets() -> None:
    """shutil asks `os.supports_*` whether a function takes a descriptor or leaves symlinks alone: the wrapped
    functions answer as the originals do (`copystat(..., follow_symlinks=False)` failed, and `rmtree` fell back to
    its symlink-unsafe walk)."""
    code = (
        "import os, shutil; print(all(f in os.supports_fd and f in os.supports_dir_fd for f in (os.stat, os.utime)),"
        " os.stat in os.supports_follow_symlinks, shutil.rmtree.avoids_symlink_attacks, os.stat.__name__)"
    )
    assert _skewed_run(code, 0.5).split() == ["True", "True", "True", "stat"]


_REFINE = r"""
import os, sys, time, types
from plugin.task import refine_first_failure_timestamp
path = sys.argv[1]
while not 0.1 < time.time() % 1 < 0.9:  # the write well inside one whole second
    time.sleep(0.01)
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


_SIGNAL_ARRIVAL = r"""
import os, signal, sys, time
sys.path.insert(0, sys.argv[1])
from plugin.signal_clock import SignalClock
signal.signal(signal.SIGUSR1, lambda *a: None)
with SignalClock() as clock:
    sent = time.time()
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.1)
    print(repr(clock.first_arrival(signal.SIGUSR1) - sent))
"""


@pytest.mark.parametrize("offset", [-0.25, 100.0])
def test_a_skewed_pod_s_signal_arrival_is_on_its_own_clock(offset) -> None:
    """The kernel stamps a signal's arrival on the true clock (libfaketime shifts only what the pod's processes
    read); the recoverable plugin's stamp (`plugin/signal_clock.py` `SignalClock.first_arrival`) is on the pod's
    clock, as a real node's would be, so it lies just after the pod's own reading before the signal."""
    after_sent = float(_skewed_run(_SIGNAL_ARRIVAL, offset, str(ROOT)))
    assert -CLOCKS_READ_TOGETHER <= after_sent < 0.05


def test_a_skewed_pod_still_runs_its_image_s_own_sitecustomize(tmp_path, monkeypatch) -> None:
    """Python imports one `sitecustomize`: the node-clock one, first on a skewed pod's path, shadowed the image's own
    (Ubuntu's apport hook, or a site's). It runs that one after its own, which becomes the `sitecustomize` module, and
    the pod's file times stay on its clock."""
    image_site = tmp_path / "image-site"
    image_site.mkdir()
    (image_site / "sitecustomize.py").write_text("import os\nIMAGE_HOOK = os.environ['AGGSIM_NODE_CLOCK_OFFSET_NS']\n")
    monkeypatch.setenv("PYTHONPATH", str(image_site))
    code = _READ_TIMES.replace(
        "print(json.dumps(read))",
        "import sitecustomize\nread['hook'] = sitecustomize.IMAGE_HOOK\nprint(json.dumps(read))",
    )
    times = json.loads(_skewed_run(code, 100.0, str(tmp_path / "error.json")))
    assert times["hook"] == str(100 * 10**9)
    assert times["before"] - COARSE_CLOCK * 1e9 <= times["stat"] <= times["after"], times
