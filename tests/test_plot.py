"""Plots: the same functions serve notebooks, scripts, tests and `aggsim simulate --plot`."""

import os
import subprocess

import pytest

pytest.importorskip("matplotlib")

from conftest import AGGSIM, SCENARIOS  # noqa: E402

from aggregation.explore import Variation, sweep  # noqa: E402
from aggregation.scenario import load_scenario, read_scenario  # noqa: E402
from aggregation.simulate import simulate  # noqa: E402


def test_timeline_has_a_panel_per_attempt_and_a_lane_per_pod():
    import matplotlib.pyplot as plt

    from aggregation.plot import timeline_figure

    execution = simulate(load_scenario(str(SCENARIOS / "auto_resume_two_attempts.textproto")))
    figure = timeline_figure(execution)
    try:
        assert len(figure.axes) == 2
        assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == ["train-worker-0", "train-worker-1"]
        assert "resumes from attempt 0" in figure.axes[1].get_title(loc="left")
    finally:
        plt.close(figure)


def test_heatmap_and_candidates():
    import matplotlib.pyplot as plt

    from aggregation.documents import error_document_bytes
    from aggregation.explain import explain_prefix
    from aggregation.plot import candidates_figure, outcome_heatmap
    from aggregation.storage import MemoryPrefix

    result = sweep(
        read_scenario(str(SCENARIOS / "preemption_during_training.textproto")),
        [Variation("propeller.observation_delay_seconds", (0.0, 5.0))],
    )
    heatmap = outcome_heatmap(result)
    prefix = MemoryPrefix(
        [
            ("error-a.pb", error_document_bytes(worker="a", timestamp_ns=2)),
            ("error-b.pb", error_document_bytes(worker="b", timestamp_ns=1)),
        ]
    )
    ranking = candidates_figure(explain_prefix(prefix))
    try:
        assert len(heatmap.axes[0].texts) == 6 * 5  # every cell labelled
        assert "earliest timestamp" in ranking.axes[0].get_title()
    finally:
        plt.close(heatmap)
        plt.close(ranking)


def test_simulate_plot_writes_a_png(tmp_path):
    out = tmp_path / "timeline.png"
    result = subprocess.run(
        [
            AGGSIM,
            "simulate",
            str(SCENARIOS / "survivor_fails_from_peer_death.textproto"),
            "--plugin",
            "seed-pr",
            "--plot",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_a_one_line_error(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'matplotlib':\n"
        "            raise ImportError('No module named matplotlib')\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    result = subprocess.run(
        [
            AGGSIM,
            "simulate",
            str(SCENARIOS / "preemption_during_training.textproto"),
            "--plot",
            str(tmp_path / "x.png"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 2 and "--plot needs matplotlib" in result.stderr and "Traceback" not in result.stderr
