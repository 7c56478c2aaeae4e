"""Plots: the same functions serve notebooks, scripts, tests and `aggsim simulate --plot`."""

import os
import re
import subprocess

import pytest

pytest.importorskip("matplotlib")

from conftest import AGGSIM, SCENARIOS  # noqa: E402

from aggregation.explore import Variation, sweep  # noqa: E402
from aggregation.scenario import load_scenario, parse_scenario, read_scenario  # noqa: E402
from aggregation.simulate import simulate  # noqa: E402


def test_timeline_has_a_panel_per_attempt_and_a_lane_per_pod_and_explains_its_lines():
    import matplotlib.pyplot as plt

    from aggregation.plot import timeline_figure

    before = plt.get_fignums()
    execution = simulate(load_scenario(str(SCENARIOS / "auto_resume_two_attempts.textproto")))
    figure = timeline_figure(execution)
    assert plt.get_fignums() == before  # never registered with pyplot: a notebook shows it once
    assert len(figure.axes) == 2
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == ["train-worker-0", "train-worker-1"]
    assert "resumes from attempt 0" in figure.axes[1].get_title(loc="left")
    legend = {t.get_text() for t in figure.legends[0].get_texts()}
    assert {"back to the time the file claims", "the job turns terminal", "propeller's observing round"} <= legend
    assert "the error propeller reports" in legend
    seed_pr = timeline_figure(simulate(load_scenario(str(SCENARIOS / "auto_resume_two_attempts.textproto"), "seed-pr")))
    assert ": plugin seed-pr, aggregation on" in seed_pr._suptitle.get_text()  # the name the CLI takes, not seed_pr


def _column_colours(heatmap, column):
    import numpy as np

    image = heatmap.axes[0].images[0].get_array()
    return [tuple(np.round(image[row][column][:3], 3)) for row in range(image.shape[0])]


def _hue(rgb):
    red, green, _ = rgb
    return "green" if green > red else "red" if red > green else "grey"


@pytest.mark.parametrize(
    "scenario, good, bad",
    [
        ("preemption_during_training", "retried", "failed permanently"),
        ("sibling_user_error_cleanup", "failed permanently", "retried"),
    ],
)
def test_heatmap_colours_mean_good_or_bad_for_the_scenario(scenario, good, bad):
    """After a preemption a retry is the good outcome; after a sibling's genuine error, failing for good is."""
    from aggregation.plot import outcome_heatmap

    result = sweep(read_scenario(scenario), [Variation("propeller.observation_delay_seconds", (0.0, 5.0))])
    heatmap = outcome_heatmap(result)
    labels = [t.get_text() for t in heatmap.axes[0].get_xticklabels()]
    assert len(heatmap.axes[0].texts) == len(result.cells) * len(labels)  # every cell labelled
    assert {_hue(c) for c in _column_colours(heatmap, labels.index(good))} == {"green"}
    assert {_hue(c) for c in _column_colours(heatmap, labels.index(bad))} == {"red"}
    assert {_hue(c) for c in _column_colours(heatmap, labels.index("genuine error masked"))} == {"red"}


def test_replay_chart_shows_the_winner_even_at_zero():
    """The earliest stamp wins (remote_file_output_reader.go earliestFileErrorReader); it sits at x = 0."""
    from aggregation.documents import error_document_bytes
    from aggregation.explain import explain_prefix
    from aggregation.plot import candidates_figure
    from aggregation.storage import MemoryPrefix

    prefix = MemoryPrefix(
        [
            ("error-a.pb", error_document_bytes(worker="a", timestamp_ns=2_000_000_000)),
            ("error-b.pb", error_document_bytes(worker="b", timestamp_ns=1_000_000_000)),
        ]
    )
    ranking = candidates_figure(explain_prefix(prefix))
    ax = ranking.axes[0]
    assert "earliest timestamp" in ax.get_title()
    from matplotlib.collections import PathCollection

    markers = [c for c in ax.collections if isinstance(c, PathCollection)]
    points = [tuple(c.get_offsets()[0]) for c in markers]
    sizes = [c.get_sizes()[0] for c in markers]
    winner = points[sizes.index(max(sizes))]
    assert winner == (0.0, 1.0)  # error-b.pb, second in listing order, drawn as the big marker at zero
    assert any("propeller reports this" == t.get_text() for t in ax.texts)
    assert ax.get_xlim()[0] < 0 < ax.get_xlim()[1]


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


def _labels(figure):
    texts = [t.get_text().strip() for ax in figure.axes for t in ax.texts]
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    return [t for t in texts if t.startswith(("propeller", "job "))], legend


NO_FILE = "not read: propeller read no file"


@pytest.mark.parametrize(
    "scenario, said, unread",
    [
        # `propeller_actor.round`: a deleted job's Get finds nothing (checkResourcePhase), no file is read
        ("ttl_deletes_the_job_before_propeller_looks", "propeller finds no job -> RETRY", NO_FILE),
        # a Failed job's condition is quoted (GetPhaseInfo), no file is read
        ("training_outlives_the_deadline", "propeller sees job Failed, reads no file -> RETRY", NO_FILE),
        # every round's read fails (max-workflow-retries, HandleAbortedWorkflow): no read decides
        ("rounds_keep_failing", "propeller aborts the workflow -> FAIL", "not decided on: propeller's rounds failed"),
    ],
)  # fmt: skip
def test_the_timeline_says_what_propeller_did_not_that_it_read(scenario, said, unread):
    """The observing round is labelled by what propeller did there, and a faded file is explained truly: "uploaded
    after the read" only where a read happened."""
    from aggregation.plot import timeline_figure

    texts, legend = _labels(timeline_figure(simulate(load_scenario(str(SCENARIOS / f"{scenario}.textproto")))))
    assert said in texts
    assert unread in legend and "uploaded after the read" not in legend


def test_a_file_that_lands_after_the_read_is_said_to():
    """Upstream's silent success: the job succeeds at the preempted pod's exit, propeller reads an empty prefix, and
    the survivor's error file lands after it."""
    from aggregation.plot import timeline_figure

    spec = load_scenario(str(SCENARIOS / "preemption_during_training.textproto"), "upstream")
    texts, legend = _labels(timeline_figure(simulate(spec)))
    assert "propeller reads the files -> SUCCEED" in texts
    assert "uploaded after the read" in legend


def test_a_character_the_font_cannot_draw_is_written_as_its_escape_with_no_warning(tmp_path):
    """A pod named in CJK drew empty boxes ("träin-wörker-1-□□") and printed matplotlib's multi-line 'Glyph ...
    missing from font(s)' warning on stderr; what the font has (accents) is drawn as it is."""
    import warnings

    from aggregation.plot import timeline_figure

    text = (SCENARIOS / "sibling_user_error_cleanup.textproto").read_text().replace("train-worker-1", "träin-日本")
    figure = timeline_figure(simulate(parse_scenario(text)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figure.savefig(tmp_path / "t.png")
    lanes = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert "träin-\\u65e5\\u672c" in lanes, lanes
    # measured as drawn: an escape's six characters count against the lane's width, and a cut never splits one
    from aggregation.plot import LANE_LABEL_CHARACTERS, lane_labels

    for pods in (["job-" + "训练" * 10 + "-0", "job-" + "训练" * 10 + "-1"], ["训练" * 11 + "-0", "x-1"]):
        _, labels = lane_labels(pods)
        assert all(len(label) <= LANE_LABEL_CHARACTERS for label in labels), labels
        assert "\\u8bad" in labels[0]
        assert all("\\" not in re.sub(r"\\u[0-9a-f]{4}", "", label) for label in labels), labels  # no half escape


def test_a_job_whose_pods_share_a_long_name_gets_short_distinct_lanes_and_the_shared_part_once():
    """A Flyte execution's pods share a long generated prefix; spelled on every lane it squeezed the panels."""
    from aggregation.plot import LANE_LABEL_CHARACTERS, lane_labels, timeline_figure

    prefix = "f3a9c1e0b7d24-n0-0-master-0-ab12cd-pytorchjob-"
    text = (SCENARIOS / "sibling_user_error_cleanup.textproto").read_text().replace("train-worker-", f"{prefix}worker-")
    figure = timeline_figure(simulate(parse_scenario(text)))
    lanes = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert lanes == ["…worker-0", "…worker-1"]
    assert f"pods {prefix}…" in figure.axes[0].get_title(loc="left")
    # short names stay whole; a name still too long keeps its ends; shortening never merges two lanes
    assert lane_labels(["train-worker-0", "train-worker-1"]) == ("", ["train-worker-0", "train-worker-1"])
    _, [label] = lane_labels(["a" * 30 + "-tail"])
    assert len(label) <= LANE_LABEL_CHARACTERS and label.startswith("aaa") and label.endswith("tail")
    twins = ["x" * 12 + "1" + "y" * 20, "x" * 12 + "2" + "y" * 20]
    assert len(set(lane_labels(twins)[1])) == 2
    # the "…" that stands for a said-once prefix counts against the lane's width, whatever length is left
    for rest in range(1, 40):
        names = [f"{prefix}worker-{i}{'z' * rest}" for i in range(2)]
        said, labels = lane_labels(names)
        assert said == prefix and all(len(label) <= LANE_LABEL_CHARACTERS for label in labels), (rest, labels)


@pytest.mark.parametrize("scenario", ["sibling_user_error_cleanup", "auto_resume_two_attempts", "three_failures_4x2"])
def test_the_labels_of_lines_and_marks_stay_inside_their_panel(scenario):
    """Propeller's round comes last, at the panel's right edge, and a pod's exit may: their labels go to the left
    there."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from aggregation.plot import timeline_figure

    figure = timeline_figure(simulate(load_scenario(str(SCENARIOS / f"{scenario}.textproto"))))

    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)
    for ax in figure.axes:
        panel = ax.get_window_extent(renderer)
        labels = list(ax.texts)
        assert labels
        for label in labels:
            extent = label.get_window_extent(renderer)
            assert panel.x0 <= extent.x0 and extent.x1 <= panel.x1, label.get_text()
