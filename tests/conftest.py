"""Shared test helpers, and a clean skip for plugin tests when the plugin extra is not installed.

Test modules import the constants and helpers below with `from conftest import ...` (pytest puts this
directory on `sys.path`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
AGGSIM = str(Path(sys.executable).parent / "aggsim")
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


def leftover_processes(work_dir: Path) -> list[str]:
    """Live processes whose command line mentions `work_dir` (pods, agents, workers of a real run)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            status = (proc / "status").read_text()
        except OSError:
            continue
        if str(work_dir) in cmdline and "State:\tZ" not in status:
            found.append(f"{proc.name}: {cmdline[:120]}")
    return found


def pytest_collection_modifyitems(config, items):
    """Tests of the plugin need flytekit and torch (the `plugin` extra); say so instead of failing to import."""
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
    """Live processes this session started (pods, agents, workers, CLI runs): (pid, command line)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if POD_MARK not in (proc / "environ").read_bytes() or "State:\tZ" in (proc / "status").read_text():
                continue
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(proc.name) != os.getpid():
            found.append((int(proc.name), cmdline[:160]))
    return found


@pytest.fixture(autouse=True)
def no_pod_outlives_a_real_test(request):
    """Every real test, passing or failing, leaves no pod, agent or worker behind (they are killed and the test
    errors if one is found; orphans get a few seconds to be collected by init first)."""
    yield
    if "real" not in request.keywords:
        return
    import signal
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


class RealRuns:
    """Real runs of shipped scenarios, each made once per session and shared: the conformance tests read a
    scenario's first run, the distribution test its first few (`tests/test_distribution_real.py`)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.runs: dict[tuple[str, str, int], object] = {}

    def get(self, scenario: str, plugin: str, index: int = 0):
        """The `index`-th real run of `scenario` with `plugin`, as an `aggsim.v1.Execution`."""
        import tempfile

        from aggregation.record import execution_to_proto
        from aggregation.scenario import load_scenario
        from localjob.runner import run_local

        key = (scenario, plugin, index)
        if key not in self.runs:
            # a directory of its own for every try: a run that raised leaves its files as evidence, not as input
            work_dir = Path(tempfile.mkdtemp(prefix=f"{scenario}-{plugin}-{index}-", dir=self.base))
            spec = load_scenario(str(SCENARIOS / f"{scenario}.textproto"), plugin)
            real = execution_to_proto(run_local(spec, work_dir))
            assert leftover_processes(work_dir) == [], f"a pod, agent or worker outlived the run in {work_dir}"
            self.runs[key] = real
        return self.runs[key]


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory) -> RealRuns:
    return RealRuns(tmp_path_factory.mktemp("real-runs"))
