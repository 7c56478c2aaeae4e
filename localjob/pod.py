"""One "pod" on this machine: the real `pyflyte-execute` entrypoint running an elastic task.

A pod gets what Flyte's backend plugin gives its PyTorchJob replica (`aggregation.replica_env`): a worker
`_F_WN` (the pod name, always) and `_F_DES=Earliest` only when `enable-distributed-error-aggregation` is on, a
non-elastic job's master neither; and, for jobs with more than one node, `PET_NNODES` and `PET_RDZV_ENDPOINT`.
Its output prefix is a local directory standing for the blob store, given as an `aggsim-blob://` URL so that
uploads appear whole (`blobstore`). Its `TMPDIR` is a directory of its own beside its log, as a container has its own
/tmp (`LocalPod.tmp_dir`; it wins over one in `extra_env`).

Every pod runs in its own session (process group), so the agent *and* its workers can be reaped
together: `LocalPod` is a context manager whose exit SIGKILLs whatever is left, even when the
caller failed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from flyteidl.core import literals_pb2

from aggregation.kinds import Entrypoint
from aggregation.replica_env import backend_environment
from localjob import blobstore, container


def pyflyte_execute_path() -> str:
    """The `pyflyte-execute` installed next to this interpreter (the real flytekit entrypoint)."""
    candidate = Path(sys.executable).parent / "pyflyte-execute"
    if candidate.exists():
        return str(candidate)
    raise FileNotFoundError(
        f"pyflyte-execute not found next to {sys.executable}; "
        "install the plugin extra: pip install 'flyte-aggsim[plugin]'"
    )


def libfaketime_path() -> Optional[str]:
    """Debian's libfaketime (package `faketime`, installed by `.ci/system-packages`), if present."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    return str(found[0]) if found else None


#: a directory holding only the `sitecustomize` that moves a skewed pod's file times onto its clock
NODE_CLOCK_DIRECTORY = Path(__file__).resolve().parent / "node_clock"


def clock_offset_environment(offset: float) -> dict[str, str]:
    """The environment that gives a pod (its agent and every worker it spawns) its own wall clock.

    libfaketime shifts every clock by the same constant, the monotonic one included: durations, and so
    torch's timeouts and the rendezvous, are unchanged, as on a node whose NTP-disciplined clock is off by
    `offset`. (Leaving the monotonic clock alone, FAKETIME_DONT_FAKE_MONOTONIC, breaks Python's
    `time.sleep` under libfaketime 0.9.10: EINVAL from clock_nanosleep.)

    Files the pod writes get their times from the same clock, as the kernel of such a node would give them: libfaketime
    does not shift them for Python, so `node_clock/sitecustomize.py` does, in every Python process of the pod.
    """
    library = libfaketime_path()
    if library is None:
        raise FileNotFoundError("libfaketime not found: run .ci/system-packages (Debian package faketime)")
    preload = os.environ.get("LD_PRELOAD", "")
    python_path = os.pathsep.join(p for p in (str(NODE_CLOCK_DIRECTORY), os.environ.get("PYTHONPATH", "")) if p)
    micros = round(offset * 1e6)  # libfaketime reads FAKETIME to the microsecond: both from one count
    return {
        "LD_PRELOAD": f"{library} {preload}".strip(),
        "FAKETIME": f"{micros / 1e6:+.6f}",
        "AGGSIM_NODE_CLOCK_OFFSET_NS": str(micros * 1000),
        "PYTHONPATH": python_path,
    }


@dataclass(frozen=True)
class PodSpec:
    """What a pod runs and the environment the Flyte backend plugin would give it."""

    name: str
    task_args: tuple[str, ...]  # the task resolver's loader arguments (`Workload.loader_args()`)
    output_prefix: Path
    task_resolver: str = "localjob.workloads.resolver"
    error_aggregation: bool = True
    master: bool = False  # the Master replica of a job without an ElasticPolicy: no _F_WN, no _F_DES
    nnodes: int = 1
    rendezvous_endpoint: Optional[str] = None
    execution_id: str = "aggsim-local"
    checkpoint_path: Optional[Path] = None
    prev_checkpoint: Optional[Path] = None
    clock_offset: float = 0.0  # this node's clock minus true time (libfaketime): shifts every stamp it writes
    extra_env: Mapping[str, str] = field(default_factory=dict)
    #: the container's PID 1 (`localjob.container`): what a SIGTERM the agent has no handler for does. None: a plain
    #: process here, as the demo's and calibrate's pods are (their signals land once torch's handler is there)
    entrypoint: Optional[Entrypoint] = None
    job_pods: tuple[str, ...] = ()  # every pod of the job, which a container's /etc/hosts names

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for inherited in ("_F_DES", "FLYTE_INTERNAL_DIST_ERROR_STRATEGY", "_F_WN", "FLYTE_INTERNAL_WORKER_NAME"):
            env.pop(inherited, None)
        env.update(backend_environment(self.name, self.master, self.error_aggregation))
        env.update(
            {
                "FLYTE_INTERNAL_EXECUTION_ID": self.execution_id,
                "FLYTE_INTERNAL_EXECUTION_PROJECT": "aggsim",
                "FLYTE_INTERNAL_EXECUTION_DOMAIN": "local",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.nnodes > 1:
            env["PET_NNODES"] = str(self.nnodes)
            if self.rendezvous_endpoint:
                env["PET_RDZV_ENDPOINT"] = self.rendezvous_endpoint
        if self.clock_offset:
            env.update(clock_offset_environment(self.clock_offset))
        env.update(self.extra_env)
        return env

    def command(self, inputs_path: Path) -> list[str]:
        cmd = [
            pyflyte_execute_path(),
            "--inputs",
            str(inputs_path),
            "--output-prefix",
            blobstore.url(self.output_prefix),  # uploads appear whole, as in an object store
            "--raw-output-data-prefix",
            str(self.output_prefix / "raw"),
        ]
        if self.checkpoint_path is not None:
            cmd += ["--checkpoint-path", str(self.checkpoint_path)]
        if self.prev_checkpoint is not None:
            cmd += ["--prev-checkpoint", str(self.prev_checkpoint)]
        cmd += ["--resolver", self.task_resolver, "--", *self.task_args]
        return cmd


INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _interrupts_held():
    """Hold SIGINT/SIGTERM/SIGHUP while a pod is being started, and deliver them once its process is known.

    An interrupt raised inside `subprocess.Popen`, after the fork, leaves a child nobody holds (Popen does not
    kill it), which no reaping can find: seen as a pod outliving `aggsim run-local` interrupted at start-up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in INTERRUPTS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in held[:1]:  # the first one decides, as the handlers it stood in for do
            signal.raise_signal(signum)


class LocalPod:
    """A running pod. Use as a context manager: leaving it kills the pod's whole process group."""

    def __init__(self, spec: PodSpec, work_dir: Path) -> None:
        self.spec = spec
        self.work_dir = Path(work_dir)
        self.log_path = self.work_dir / f"{spec.name}.log"
        # the pod's own /tmp, as a container has: what flytekit and torch leave there (sandbox directories on every
        # import, a worker's traceback pickle) stays with the run, kept or removed with it, and no pod sees another's
        self.tmp_dir = self.work_dir / f"{spec.name}.tmp"
        self.process: Optional[subprocess.Popen] = None
        self.init_pid: Optional[int] = None  # the container's PID 1, which the kubelet signals (None: no container)
        self.started_at: Optional[float] = None
        self.exited_at: Optional[float] = None

    def __enter__(self) -> "LocalPod":
        try:
            self.start()
        except BaseException:  # e.g. an interrupt right after Popen: no __exit__ will run, so reap here
            self.reap()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.reap()

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.spec.output_prefix.mkdir(parents=True, exist_ok=True)
        inputs = self.work_dir / f"{self.spec.name}.inputs.pb"
        inputs.write_bytes(literals_pb2.LiteralMap().SerializeToString())
        self.tmp_dir.mkdir(exist_ok=True)
        command, reading, report = self.spec.command(inputs), None, None
        try:
            if self.spec.entrypoint is not None:  # the launcher reports its container's PID 1 on a pipe
                reading, report = os.pipe()
                name, pod_dir = self.spec.name, self.work_dir / f"{self.spec.name}.container"
                pods = list(self.spec.job_pods or (name,))
                command = container.entrypoint_command(self.spec.entrypoint, command, name, pod_dir, pods, report)
            with open(self.log_path, "wb") as log, _interrupts_held():
                self.process = subprocess.Popen(
                    command,
                    env={**self.spec.environment(), "TMPDIR": str(self.tmp_dir)},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=() if report is None else (report,),
                )
        except BaseException:
            if reading is not None:
                os.close(reading)
            raise
        finally:
            if report is not None:
                os.close(report)
        self.started_at = time.time()
        if reading is not None:
            self.init_pid = container.read_init_pid(reading, self.spec.name)

    @property
    def pid(self) -> int:
        assert self.process is not None, "pod not started"
        return self.process.pid

    def send_signal(self, sig: int) -> float:
        """Signal the container's PID 1 (the agent itself when there is no container), as the kubelet does; returns
        when it was sent. A container whose PID 1 has already exited is left as it is."""
        sent_at = time.time()
        try:
            os.kill(self.pid if self.init_pid is None else self.init_pid, sig)
        except ProcessLookupError:
            # the container's PID 1 has exited and been reaped while its launcher, on its way out, has not yet
            # reported: a runtime asked to stop a container that has stopped does nothing, and the pod's exit reaches
            # the world with the launcher's status (the agent itself, not yet waited for, cannot be gone)
            if self.init_pid is None:
                raise
        return sent_at

    def wait(self, timeout: float) -> int:
        """Wait for the agent to exit; raises `subprocess.TimeoutExpired` (the pod is left running)."""
        assert self.process is not None, "pod not started"
        code = self.process.wait(timeout=timeout)
        if self.exited_at is None:
            self.exited_at = time.time()
        return code

    @property
    def returncode(self) -> Optional[int]:
        return None if self.process is None else self.process.poll()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def reap(self) -> None:
        """SIGKILL the pod's process group (agent and workers) and wait for the agent."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        # Orphaned workers are reparented to init; give it a moment to collect them.
        deadline = time.monotonic() + 10
        while self.group_alive() and time.monotonic() < deadline:
            time.sleep(0.02)

    def group_alive(self) -> bool:
        """Whether any process of the pod's group (agent or workers) still exists."""
        if self.process is None:
            return False
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
