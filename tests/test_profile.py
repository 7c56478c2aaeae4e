"""Timings profiles (`aggregation/profile.py`): measured pod phases as the model's defaults and the sweep's ranges.

What a profile stands for is this project's pod model (`aggregation/pods.py`, mirroring torch 2.13
`SimpleElasticAgent._invoke_run` and flytekit 1.16.31 `entrypoint.py` `_dispatch_execute`); a profile only moves
the model's timing defaults, so these tests check where its numbers go and that a bad one is refused.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import AGGSIM, SCENARIOS
from google.protobuf import text_format
from hypothesis import given
from hypothesis import strategies as st

from aggregation.explore import default_variations
from aggregation.profile import ProfileError, apply_profile, parse_profile, with_phases
from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from aggregation.scenario import parse_scenario_source, read_scenario

PROFILE = """
measured_on: "test machine"
phases { field: "exit_seconds" min_seconds: 0.5 median_seconds: 0.6 max_seconds: 0.8 runs: 30 }
phases { field: "failed_worker_exit_seconds" start_method: SPAWN
         min_seconds: 0.6 median_seconds: 1.2 max_seconds: 2.0 runs: 7 }
phases { field: "failed_worker_exit_seconds" start_method: FORK
         min_seconds: 0.01 median_seconds: 0.1 max_seconds: 0.4 runs: 7 }
phases { field: "failure_detection_seconds" min_seconds: 1.2 median_seconds: 1.5 max_seconds: 2.1 runs: 13 }
"""

SCENARIO = """
name: "p"
plugin: UPSTREAM
job { pods: "a" pods: "b" nproc_per_node: 1 %s }
task { retries: 1 outputs_declared: true training_seconds: 30 }
timings { exit_seconds: 0.9 }
attempts { events { at_seconds: 12 pod: "a" worker_error { message: "x" } } }
"""


def spec_with(profile_text: str, job: str = ""):
    source = parse_scenario_source(SCENARIO % job).with_profile(parse_profile(profile_text))
    return source.spec()


def test_the_medians_become_the_defaults_and_the_scenario_s_own_values_win():
    spec = spec_with(PROFILE)
    for timing in spec.timings.values():
        assert timing.exit == 0.9  # the scenario says so
        assert timing.failed_worker_exit == 1.2  # spawn is the default start method
        assert timing.detection == 1.5


def test_a_phase_measured_with_the_job_s_start_method_is_the_one_used():
    spec = spec_with(PROFILE, "start_method: FORK")
    assert {t.failed_worker_exit for t in spec.timings.values()} == {0.1}


def test_a_profile_moves_the_simulated_catch():
    """The catch of a failed worker lands `failure_detection_seconds` after the agent's look (pods.py
    `worker_error`): a profile's median moves it, and so the pod's upload."""
    from aggregation.simulate import simulate

    def upload_of_a(detection: float) -> float:
        profile = PROFILE.replace("median_seconds: 1.5", f"median_seconds: {detection}").replace(
            "max_seconds: 2.1", "max_seconds: 9"
        )
        attempt = simulate(spec_with(profile)).attempts[0]
        return min(u.at for u in attempt.uploads if u.pod == "a")

    assert upload_of_a(4.0) - upload_of_a(1.5) == pytest.approx(2.5)


def test_the_sweep_varies_every_measured_phase_over_min_median_and_max():
    """Every phase the profile measured and the scenario leaves unset, including those the built-in sweep does not
    vary (the exits: exit_seconds and failed_worker_exit_seconds used to take the median only); the start method's
    own measurement where there is one."""
    source = read_scenario(str(SCENARIOS / "preemption_during_training.textproto"))
    varied = {v.field: v.values for v in default_variations(source, parse_profile(PROFILE))}
    assert varied["timings.failure_detection_seconds"] == (1.2, 1.5, 2.1)
    assert varied["timings.exit_seconds"] == (0.5, 0.6, 0.8)
    assert varied["timings.failed_worker_exit_seconds"] == (0.6, 1.2, 2.0)  # spawn's
    unprofiled = {v.field: v.values for v in default_variations(source)}
    assert varied["timings.upload_seconds"] == unprofiled["timings.upload_seconds"]  # not measured: as before
    assert set(varied) - set(unprofiled) == {"timings.exit_seconds", "timings.failed_worker_exit_seconds"}
    sets_its_exit = parse_scenario_source(SCENARIO % "")  # timings { exit_seconds: 0.9 }: the scenario's value
    assert "timings.exit_seconds" not in {v.field for v in default_variations(sets_its_exit, parse_profile(PROFILE))}


def test_phases_written_per_start_method_accumulate_in_one_profile():
    spawn = [pb.MeasuredPhase(field="exit_seconds", start_method=pb.SPAWN, median_seconds=0.7, max_seconds=1)]
    fork = [pb.MeasuredPhase(field="exit_seconds", start_method=pb.FORK, median_seconds=0.2, max_seconds=1)]
    profile = with_phases(with_phases(None, spawn, "run 1"), fork, "run 2")
    assert sorted(p.start_method for p in profile.phases) == [pb.SPAWN, pb.FORK]
    again = with_phases(
        profile,
        [pb.MeasuredPhase(field="exit_seconds", start_method=pb.FORK, median_seconds=0.3, max_seconds=1)],
        "run 3",
    )
    assert sorted(p.median_seconds for p in again.phases) == [0.3, 0.7]
    assert again.measured_on == "run 1; run 2; run 3"
    parse_profile(text_format.MessageToString(again))  # what calibrate writes reads back


@pytest.mark.parametrize(
    ("phase", "named"),
    [
        ('field: "clock_offset_seconds" max_seconds: 1', "phases[1].field"),
        ('field: "no_such_seconds"', "phases[1].field"),
        ('field: "exit_seconds" min_seconds: 2 median_seconds: 1 max_seconds: 3', "min <= median <= max"),
        (
            'field: "exit_seconds" min_seconds: -1 median_seconds: 1 max_seconds: 3',
            "min_seconds (exit_seconds): must be >= 0",
        ),
        ('field: "upload_seconds" median_seconds: nan', "median_seconds (upload_seconds): must be a finite number"),
        # a finite value past what a scenario may span is named as such (it used to be "must be finite")
        ('field: "upload_seconds" max_seconds: 1e300', "max_seconds (upload_seconds): 1e+300 s is beyond"),
        ('field: "failure_detection_seconds" max_seconds: 1', "a second failure_detection_seconds"),
        # a field's own bound (torch's shutdown_timeout) is the profile's to meet: it used to be blamed on the
        # scenario's timings block, or on a sweep's --vary, when the median became the scenario's value
        (
            'field: "agent_shutdown_seconds" min_seconds: 1 median_seconds: 40 max_seconds: 50',
            "median_seconds (agent_shutdown_seconds): must be at most 30",
        ),
    ],
)
def test_a_bad_profile_is_refused_in_one_line_naming_file_and_field(tmp_path, phase, named):
    text = 'phases { field: "failure_detection_seconds" max_seconds: 1 }\nphases { %s }\n' % phase
    with pytest.raises(ProfileError, match="prof.textproto") as caught:
        parse_profile(text, "prof.textproto")
    assert named in str(caught.value) and "\n" not in str(caught.value)
    path = tmp_path / "prof.textproto"
    path.write_text(text)
    done = subprocess.run(
        [AGGSIM, "simulate", "preemption_during_training", "--timings-profile", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and named in done.stderr, done.stderr


def test_the_cli_takes_a_profile_for_simulate_and_sweep(tmp_path):
    path = tmp_path / "profile.textproto"
    path.write_text(PROFILE)
    swept = subprocess.run(
        [
            AGGSIM,
            "sweep",
            "preemption_during_training",
            "--timings-profile",
            str(path),
            "--json",
            "--samples",
            "50",
            "--plugin",
            "recoverable",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert swept.returncode == 0, swept.stderr
    variations = {v["field"]: v["values"] for v in json.loads(swept.stdout)["variations"]}
    assert variations["timings.failure_detection_seconds"] == [1.2, 1.5, 2.1]
    simulated = subprocess.run(
        [AGGSIM, "simulate", "preemption_during_training", "--timings-profile", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert simulated.returncode == 0, simulated.stderr


@given(st.floats(0, 100), st.floats(0, 100), st.floats(0, 100), st.sampled_from(["", "start_method: FORK"]))
def test_applying_a_profile_never_touches_what_the_scenario_sets(a, b, c, job):
    low, median, high = sorted((a, b, c))
    profile = parse_profile(
        f'phases {{ field: "exit_seconds" min_seconds: {low!r} median_seconds: {median!r} max_seconds: {high!r} }}'
    )
    message = parse_scenario_source(SCENARIO % job).message
    applied = apply_profile(message, profile)
    assert applied.timings.exit_seconds == 0.9 and message.timings.exit_seconds == 0.9
    message.timings.ClearField("exit_seconds")
    assert apply_profile(message, profile).timings.exit_seconds == median
    assert not message.timings.HasField("exit_seconds")  # the scenario itself is left as it was


def test_a_profile_is_read_as_a_scenario_is_never_blocking_on_a_fifo(tmp_path):
    """`read_profile` shares the scenario reader (`scenario.read_text_file`): a FIFO is refused, not waited on."""
    import os

    from aggregation.profile import read_profile

    fifo = tmp_path / "profile.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ProfileError, match="not a regular file"):
        read_profile(str(fifo))


def test_a_profile_that_measures_nothing_for_the_scenario_s_start_method_is_refused(tmp_path):
    """An empty profile, or one calibrated with `--start-method fork` only given to a spawn scenario, changed
    nothing and said nothing (`profile.check_applies`): every command that takes a profile now refuses it in one line
    naming the file. A profile with a phase for the job's start method, or one that does not depend on it, is used."""
    empty = tmp_path / "empty.textproto"
    empty.write_text("")
    fork_only = tmp_path / "fork.textproto"
    fork_only.write_text(
        'phases { field: "failed_worker_exit_seconds" start_method: FORK min_seconds: 0.01 median_seconds: 0.1 '
        "max_seconds: 0.4 runs: 7 }"
    )
    scenario = str(SCENARIOS / "preemption_during_training.textproto")
    for profile, why in ((empty, "no measured phase in it"), (fork_only, "calibrate with --start-method spawn")):
        for command in (["simulate"], ["sweep"], ["prove", "--claim", "retries"]):
            done = subprocess.run(
                [AGGSIM, *command, scenario, "--timings-profile", str(profile)], capture_output=True, text=True
            )
            assert (done.returncode, done.stdout) == (2, ""), (command, done.stderr)
            assert (
                done.stderr.startswith(f"aggsim: {profile}: ") and why in done.stderr and done.stderr.count("\n") == 1
            )
    forked = tmp_path / "forked.textproto"
    forked.write_text(scenario_text := open(scenario).read().replace("job {", "job { start_method: FORK", 1))
    assert "start_method: FORK" in scenario_text
    done = subprocess.run(
        [AGGSIM, "simulate", str(forked), "--timings-profile", str(fork_only)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
