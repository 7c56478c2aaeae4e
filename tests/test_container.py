"""A real pod's container (`localjob/container.py`): PID 1 of its own namespace, its own hostname and /etc/hosts, and
the exit status a container runtime reports. Real processes, each reaped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from localjob.container import ContainerError, hostnames, hosts_file

PYTHON = sys.executable


def launch(tmp_path, *command: str):
    """Start `command` in a container; returns (launcher, the container's PID 1 as this machine sees it)."""
    from localjob.container import read_init_pid

    hosts = tmp_path / "hosts"
    hosts.write_text(hosts_file(["pod-a"]))
    reading, report = os.pipe()
    launcher = subprocess.Popen(
        [PYTHON, "-m", "localjob.container", str(report), "pod-a", str(hosts), "--", *command],
        pass_fds=(report,),
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    os.close(report)
    return launcher, read_init_pid(reading, "pod-a")


@pytest.fixture
def containers():
    started = []
    yield started
    for launcher in started:  # reaped even when the test failed
        try:
            os.killpg(launcher.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        launcher.wait(timeout=10)


def test_pid_1_without_a_handler_outlives_sigterm_and_the_status_is_128_plus_the_killing_signal(tmp_path, containers):
    """Linux `kernel/signal.c` `sig_task_ignored`: a signal a PID namespace's init has no handler for is dropped (what
    `Entrypoint.EXECUTE` means for the agent's first rendezvous); SIGKILL is not, and the container's status is 137."""
    launcher, init = launch(tmp_path, PYTHON, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(30)")
    containers.append(launcher)
    assert launcher.stdout.readline().strip() == "1"
    os.kill(init, signal.SIGTERM)
    time.sleep(0.5)
    assert launcher.poll() is None
    os.kill(init, signal.SIGKILL)
    assert launcher.wait(timeout=10) == 137


def test_a_container_exits_with_its_pid_1_s_status_and_has_the_pod_s_hostname_and_hosts(tmp_path, containers):
    script = "import socket, sys; print(socket.gethostname(), socket.getfqdn(), flush=True); sys.exit(7)"
    launcher, _ = launch(tmp_path, PYTHON, "-c", script)
    containers.append(launcher)
    assert launcher.stdout.readline().split() == ["pod-a", "pod-a"]
    assert launcher.wait(timeout=10) == 7


def test_pods_get_distinct_loopback_addresses_so_each_one_s_fqdn_is_its_own():
    """torch `_NodeDescGenerator.generate` names a rendezvous node by `socket.getfqdn()` and pid; pods share pids
    (each agent is PID 1, or 2 under pyflyte-fast-execute), so their reverse lookups must differ."""
    assert hosts_file(["a", "b"]).splitlines() == ["127.0.0.1\tlocalhost", "127.0.0.2\ta", "127.0.0.3\tb"]
    assert hosts_file([f"p{i}" for i in range(300)]).splitlines()[-1] == "127.0.1.45\tp299"


@pytest.mark.parametrize("name", ["A", "a b", "", "pod\n", "ポッド", "-a"])
def test_a_name_no_pod_could_have_names_no_container(name):
    with pytest.raises(ContainerError, match="cannot be a real pod's name"):
        hostnames(["b", name])


def test_pods_whose_names_share_their_first_63_characters_would_be_one_node():
    """The kubelet's hostname is the pod name cut to 63 characters (`GeneratePodHostNameAndDomain`)."""
    assert hostnames(["a" * 70]) == {"a" * 70: "a" * 63}
    with pytest.raises(ContainerError, match="would share the hostname"):
        hostnames(["a" * 63 + "x", "a" * 63 + "y"])


def test_run_local_refuses_a_job_whose_pods_cannot_be_containers_before_any_pod_starts(monkeypatch):
    """`localjob/runner.py` `check_playable` asks `check_runnable`: a name no pod could have, or an init that is not
    installed, is refused before the run makes anything."""
    from aggregation.scenario import parse_scenario
    from localjob.runner import Unplayable, check_playable

    text = 'plugin: UPSTREAM job { pods: "%s" pods: "b" } task { training_seconds: 30 %s }'
    with pytest.raises(Unplayable, match="'Train-0' cannot be a real pod's name"):
        check_playable(parse_scenario(text % ("Train-0", ""), "t.textproto"))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(Unplayable, match="tini, which is not installed here"):
        check_playable(parse_scenario(text % ("a", "entrypoint: INIT_THEN_EXECUTE"), "t.textproto"))
    check_playable(parse_scenario(text % ("a", "entrypoint: EXECUTE"), "t.textproto"))


def test_signalling_a_pod_whose_container_has_exited_but_whose_launcher_has_not_reported_does_nothing(tmp_path):
    """The kubelet's SIGTERM to a container that has stopped is a no-op. Here the container's PID 1 has exited and
    been reaped while its launcher is still running (the window in which the operator's cleanup, deciding from what
    it last saw, signals the pod): the signal goes nowhere and the pod's exit arrives with the launcher's status. It
    raised ProcessLookupError out of the whole run (a CI run of the non-elastic master test)."""
    from localjob.pod import LocalPod, PodSpec

    pod = LocalPod(PodSpec(name="pod-a", task_args=(), output_prefix=tmp_path / "out"), tmp_path)
    gone = subprocess.Popen([PYTHON, "-c", "pass"])
    gone.wait(timeout=10)
    pod.process = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        pod.init_pid = gone.pid
        before = time.time()
        assert pod.send_signal(signal.SIGTERM) >= before
        assert pod.returncode is None  # the launcher was not signalled in its container's place
        pod.init_pid = None
        pod.send_signal(signal.SIGTERM)
        assert pod.wait(timeout=10) == -signal.SIGTERM
    finally:
        pod.reap()
