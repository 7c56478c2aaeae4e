"""A real attempt's clock (`localjob/timebase.py`): scenario seconds on the wall, and what `run-local` refuses
because the wall cannot give it.

The real runner drives the simulator's own operator and propeller on a wall clock: their delays (a pod's status
reaching the operator, propeller's next look) are scenario seconds that the timebase turns into wall seconds. From
the attempt's first action on they must be kept as they are, or a real run reports a race the scenario did not ask
for. No process is started here.
"""

from __future__ import annotations

import re

import pytest
from conftest import SCENARIOS
from hypothesis import given
from hypothesis import strategies as st

from aggregation.scenario import load_scenario, parse_scenario_source
from aggregation.strategies import scenarios, spec_of
from localjob.timebase import MOST_LEAD, QUIET_TRAINING, ScenarioTimebase, first_action

READY = 1_796_000_000.25  # the wall clock when the workers first trained together


def spec(text: str):
    return parse_scenario_source(text, "timebase.textproto").spec("recoverable")


@given(scenarios(playable=True), st.data())
def test_from_the_first_action_on_every_spacing_is_kept_and_read_back(message, data):
    """After the first action (an event, else the training's completion) scenario time runs at the wall's pace,
    both ways: what the operator and propeller wait for is waited for, and what the pods do is stamped back."""
    generated = spec_of(message)
    attempt = data.draw(st.integers(0, len(generated.attempts)), label="attempt")  # the last runs clean
    timebase = ScenarioTimebase(generated, attempt, READY)
    first = first_action(generated, attempt).at
    t, delay = (data.draw(st.floats(0.0, 120.0), label=label) for label in ("t", "delay"))
    t += first
    assert timebase.wall(t + delay) - timebase.wall(t) == pytest.approx(delay, abs=1e-6)
    assert timebase.scenario(timebase.wall(t)) == pytest.approx(t, abs=1e-6)


@given(scenarios(playable=True), st.data())
def test_the_quiet_stretch_keeps_its_order_and_the_first_action_keeps_its_fraction_of_a_second(message, data):
    generated = spec_of(message)
    attempt = data.draw(st.integers(0, len(generated.attempts)), label="attempt")
    timebase = ScenarioTimebase(generated, attempt, READY)
    first = first_action(generated, attempt).at
    anchor = timebase.wall(first)
    assert QUIET_TRAINING <= anchor - READY < MOST_LEAD  # a few seconds of real training before anything happens
    assert (anchor - first) % 1.0 == pytest.approx(0.0, abs=1e-6) or (anchor - first) % 1.0 == pytest.approx(1.0)
    moments = sorted(data.draw(st.lists(st.floats(0.0, first), min_size=2, max_size=5), label="before"))
    walls = [timebase.wall(t) for t in moments]
    assert walls == sorted(walls) and all(READY <= wall <= anchor for wall in walls)


def test_an_attempt_with_no_event_keeps_the_operator_s_seconds_after_its_completion():
    """A clean attempt (here the retry after a preemption) used to map every moment to one wall instant, so the
    operator heard of an exit at once whatever `job.pod_status_seconds` said."""
    clean = spec("""
        job { pods: "train-worker-0" pods: "train-worker-1" pod_status_seconds: 1.5 }
        task { retries: 1 training_seconds: 40.7 }
        attempts { events { at_seconds: 30 pod: "train-worker-1" preemption {} } }""")
    timebase = ScenarioTimebase(clean, 1, READY)
    assert first_action(clean, 1).at == 40.7
    exit_heard = timebase.wall(42.2 + 1.5) - timebase.wall(42.2)
    assert exit_heard == pytest.approx(1.5)
    assert timebase.wall(40.7) % 1.0 == pytest.approx(0.7)  # the completion keeps its fraction of a second


def test_a_checkpoint_write_is_no_first_action():
    """A checkpoint only marks the quiet stretch: the preemption after it is where wall-paced time starts."""
    shipped = load_scenario(str(SCENARIOS / "preemption_during_training.textproto"), "recoverable")
    assert any(e.kind == "checkpoint" and e.at < 30.6 for e in shipped.events_for(0))
    assert first_action(shipped, 0).at == 30.6


def test_a_signal_in_the_first_rendezvous_lands_when_the_store_is_up_and_then_time_runs_at_the_wall_s_pace():
    early = spec("""
        job { pods: "train-worker-0" pods: "train-worker-1" }
        timings { rendezvous_seconds: 5 }
        task { retries: 1 training_seconds: 120 }
        propeller { observation_delay_seconds: 1 }
        attempts { events { at_seconds: 1 pod: "train-worker-1" preemption {} } }""")
    timebase = ScenarioTimebase(early, 0, READY)
    assert timebase.wall(1.0) == READY
    assert timebase.wall(1.75 + 1.0) - timebase.wall(1.75) == pytest.approx(1.0)  # propeller's look, a second on
    assert timebase.scenario(READY - 0.25) == pytest.approx(0.75)  # a pod's clock a quarter second behind


def test_run_local_refuses_an_attempt_longer_than_a_real_one_plays_in_one_line():
    """`localjob/runner.py` `check_playable`: an attempt that reaches its verdict minutes after its first action
    (here the kubelet's status report takes 150 s) would time out mid-run; with a 1 s report it is played."""
    from localjob.realpods import LocalJobError
    from localjob.runner import WALL_PACED_SECONDS, check_playable

    slow_status = """
        job { pods: "train-worker-0" pods: "train-worker-1" pod_status_seconds: %s }
        task { retries: 0 training_seconds: 600 }
        attempts {
          events { at_seconds: 30 pod: "train-worker-0" worker_error { recoverable: true } }
          events { at_seconds: 200 pod: "train-worker-1" preemption {} }
        }"""
    check_playable(spec(slow_status % 1))
    # the survivor waits 900 s in its rendezvous, but the run stops watching 20 s after propeller's verdict (2.75 s)
    check_playable(load_scenario(str(SCENARIOS / "signal_during_first_rendezvous.textproto"), "recoverable"))
    long = spec(slow_status % 150)
    with pytest.raises(LocalJobError) as refused:
        check_playable(long)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("attempts[0]: ")
    assert f"more than the {WALL_PACED_SECONDS:.0f} s" in message
    # it names where the time goes: the 150 s between the last pod's exit and the operator hearing of one
    assert message.endswith(
        "its longest quiet stretch is 149.55 s, from train-worker-1 exit at 34.7 s to operator job terminal at "
        "184.25 s (job.pod_status_seconds is 150 s)"
    ), message


@pytest.mark.parametrize(
    "events, refused",
    [
        ('events { at_seconds: 1 pod: "train-worker-0" worker_error {} }', "the worker_error at 1 s comes before"),
        ("events { at_seconds: 3 completion {} }", "the completion at 3 s comes before every pod trains (5 s)"),
        ("events { at_seconds: 1 checkpoint {} }", "the checkpoint at 1 s comes before every pod trains (5 s)"),
    ],
)
def test_run_local_refuses_an_action_before_the_workers_train_which_the_model_s_pods_ignore(events, refused):
    """`pods.py` `Pod.worker_error`, `Pod.checkpoint`, `SimulatedPods.complete`: a pod that does not train yet
    ignores them, while a real worker would read the command as it starts; a signal there is played (it lands while
    the agents rendezvous). The event is named by kind and moment: the file may list it anywhere."""
    from localjob.realpods import LocalJobError
    from localjob.runner import check_playable

    text = """
        job { pods: "train-worker-0" pods: "train-worker-1" }
        timings { rendezvous_seconds: 5 }
        task { retries: 0 training_seconds: 30 }
        attempts { events { at_seconds: 20 pod: "train-worker-1" preemption {} } %s }"""
    with pytest.raises(LocalJobError, match="^attempts\\[0\\]: " + re.escape(refused)):
        check_playable(spec(text % events))
    check_playable(spec(text % 'events { at_seconds: 1 pod: "train-worker-0" preemption {} }'))


def test_run_local_plays_a_signal_between_a_pod_s_own_join_and_every_pod_s_and_refuses_a_worker_error_there():
    """The first round completes as the last pod joins (`pods.py` `SimulatedPods.joined_first_round`), in the model
    as for real workers: at 3 s train-worker-0 has joined but still rendezvous in both (where upstream's agent has
    no handler yet), so a signal there is played; a worker error there is ignored by the model's pod and taken by
    real workers as they start, so it is refused."""
    from localjob.realpods import LocalJobError
    from localjob.runner import check_playable

    text = """
        job { pods: "train-worker-0" pods: "train-worker-1" }
        timings { rendezvous_seconds: 5 }
        pod_timings { pod: "train-worker-0" timings { rendezvous_seconds: 2 } }
        task { retries: 0 training_seconds: 30 }
        attempts { events { at_seconds: 3 pod: "train-worker-0" %s } }"""
    check_playable(spec(text % "preemption {}"))
    with pytest.raises(LocalJobError, match=r"the worker_error at 3 s comes before every pod trains \(5 s\)"):
        check_playable(spec(text % "worker_error {}"))


def test_run_local_refuses_a_training_that_completes_before_every_pod_trains():
    """A completion before every pod trains ends the model's training as the last pod starts to train
    (`SimulatedPods.complete`), as real workers would; the runner places no such action on the pods' real start-up."""
    from localjob.realpods import LocalJobError
    from localjob.runner import check_playable

    early = spec("""
        job { pods: "train-worker-0" pods: "train-worker-1" }
        timings { rendezvous_seconds: 5 }
        task { retries: 0 training_seconds: 3 }""")
    with pytest.raises(LocalJobError, match=r"^task.training_seconds: attempt 0 \(not listed: it trains clean\) comp"):
        check_playable(early)


def test_the_rendezvous_port_is_free_and_outside_the_range_outgoing_connections_draw_from():
    """`localjob.realpods.free_port`: a port from `bind(0)` is an ephemeral one, which any outgoing connection may take
    before the agent binds it (EADDRINUSE once in `make test`, a pod failing before training); the store's port is
    drawn from outside the kernel's `ip_local_port_range`, and is free when drawn."""
    import socket

    from localjob.realpods import _ephemeral_ports, free_port, rendezvous_ports

    if not rendezvous_ports():
        pytest.skip("this machine's ephemeral range leaves no port outside it")
    low, high = _ephemeral_ports()
    ports = {free_port() for _ in range(20)}
    assert not any(low <= port <= high or 30000 <= port <= 32767 for port in ports)
    assert len(ports) > 1  # drawn at random: parallel runs rarely meet
    for port in ports:
        socket.create_server(("", port)).close()  # free
