"""Real pods for the shared world: `pyflyte-execute` processes on this machine, on the wall clock.

Each pod is the real `pyflyte-execute` running a real elastic task (`localjob.workloads`) with the
environment Flyte's backend plugin gives it (`_F_WN`, `_F_DES` when aggregation is on, `PET_NNODES`,
`PET_RDZV_ENDPOINT`; the rendezvous id is the attempt). All pods of an attempt upload into one local
directory standing for the blob store; a watcher notes when each file appears. The world's kubelet,
operator and propeller (`aggregation.world`) are the very ones the simulator runs; this class only
turns their requests into signals and commands to real processes, and reports real exits and uploads.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from aggregation.engine import WallClock
from aggregation.pods import ErrorRecord, Upload, read_container_error
from aggregation.replica_env import is_master, job_environments, writes_error_pb
from aggregation.scenario import ScenarioSpec
from aggregation.storage import open_prefix
from aggregation.timeline import Event, What
from localjob.blobstore import is_partial
from localjob.container import ContainerError
from localjob.pod import LocalPod, PodSpec
from localjob.timebase import ScenarioTimebase, lands_in_first_rendezvous

if TYPE_CHECKING:
    from aggregation.world import Attempt
    from localjob.workloads import Workload

START_TIMEOUT = 120.0  # pods must reach their first barrier within this
ATTEMPT_TIMEOUT = 240.0  # an attempt longer than this is a failure (and is killed)
SHUTDOWN_WORTH_MODELLING = 0.5  # shorter scenario shutdowns are what real workers do anyway
LINGER_AFTER_VERDICT = 20.0  # real seconds pods may keep running after propeller's verdict (for the record)


class LocalJobError(RuntimeError):
    """The real job could not be run as the scenario asks (with a one-line reason)."""


#: the kernel's range of ephemeral ports when it cannot be read (Linux's default)
_EPHEMERAL_DEFAULT = (32768, 60999)


def _ephemeral_ports() -> tuple[int, int]:
    try:
        low, high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT
    return low, high


def rendezvous_ports() -> range:
    """Where `free_port` draws from: above 10000 (clear of well-known services) and the ephemeral range, and clear
    of Kubernetes' NodePort range (30000-32767, where a local cluster's mappings may listen)."""
    low, high = _ephemeral_ports()
    below, above = range(10000, min(low, 30000)), range(max(high + 1, 32768), 65536)
    return below if len(below) >= len(above) else above


def _free_everywhere(port: int) -> bool:
    """Whether `port` can be bound on every address, as the store's server binds it (IPv6 and IPv4 where both)."""
    try:
        if socket.has_dualstack_ipv6():
            socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True).close()
        else:
            socket.create_server(("", port)).close()
    except OSError:
        return False
    return True


def free_port(attempts: int = 200) -> int:
    """A port to listen on later (the rendezvous store), free now and unlikely to be taken before then.

    A port the kernel hands out for `bind(0)` comes from its ephemeral range, which every outgoing connection on
    the machine draws its local port from too: a pod's own connections, or a parallel test's, took one such port
    between this pick and the agent's bind once (EADDRINUSE, the pod failed before training). So the port is
    drawn at random from outside that range, where no connection takes one, and checked free."""
    candidates = rendezvous_ports()
    draw = random.SystemRandom()
    for _ in range(attempts if candidates else 0):
        port = draw.choice(candidates)
        if _free_everywhere(port):
            return port
    with socket.socket() as s:  # the whole range is ephemeral: the kernel's pick, as before
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _partial_uploads(directory: str, names: list[str]) -> list[str]:
    """An upload still being written: no object store lists it, so propeller's copy of the prefix leaves it out."""
    return [name for name in names if is_partial(name)]


class UploadWatcher(threading.Thread):
    """Polls the blob-store directory; notes each (name, mtime) when it first appears, with its bytes."""

    def __init__(self, prefix: Path) -> None:
        super().__init__(daemon=True)
        self.prefix = prefix
        self.found: list[tuple[str, int, float, bytes]] = []  # (name, mtime_ns, wall time seen, content)
        self._keys: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.poll()
            time.sleep(0.005)

    def poll(self) -> None:
        try:
            entries = list(self.prefix.glob("*.pb"))
        except OSError:
            return
        for path in entries:
            if is_partial(path.name):
                continue
            try:
                mtime = path.stat().st_mtime_ns
                key = (path.name, mtime)
                if key in self._keys:
                    continue
                content = path.read_bytes()
            except OSError:
                continue
            with self._lock:
                if key not in self._keys:
                    self._keys.add(key)
                    self.found.append((path.name, mtime, time.time(), content))

    def take(self, start: int) -> list[tuple[str, int, float, bytes]]:
        with self._lock:
            return self.found[start:]

    def stop(self) -> None:
        self._stop_event.set()
        if self.ident is not None:  # an interrupt can land between registering this and starting the thread
            self.join(timeout=2)
        self.poll()


class RealPods:
    """The pods of one real attempt: processes, their blob store, and commands for their workers."""

    def __init__(
        self,
        spec: ScenarioSpec,
        attempt: int,
        work_dir: Path,
        workload: "Workload",
        previous_checkpoint: Optional[Path],
    ) -> None:
        self.spec = spec
        self.attempt = attempt
        # the pod that writes `error.pb`, when it is the only one (a non-elastic job's master, aggregation on)
        environments = job_environments(spec.pods, spec.elastic, spec.error_aggregation)
        writers = [pod for pod, env in environments.items() if writes_error_pb(env)]
        self.error_pb_writer = writers[0] if len(writers) == 1 else ""
        self.workload = workload
        self.base = Path(work_dir) / f"attempt-{attempt}"
        self.events_dir, self.prefix, self.work = self.base / "events", self.base / "outputs", self.base / "work"
        self.control = self.base / "control.json"
        self.checkpoint_path = self.base / "checkpoint"
        self.previous_checkpoint = previous_checkpoint
        self.commands: list[dict] = []  # in the order the scenario's events happened (workloads.due)
        self.processes: dict[str, LocalPod] = {}
        self.reported_exits: set[str] = set()
        self.watcher = UploadWatcher(self.prefix)
        self.taken = 0
        self.upload_keys: dict[int, tuple[str, int]] = {}  # id(upload) -> (name, mtime_ns)
        self.stack = ExitStack()
        self.world: Optional["Attempt"] = None
        self.timebase: Optional[ScenarioTimebase] = None

    # --- start ---------------------------------------------------------------------------------
    def start(self, world: "Attempt") -> WallClock:
        self.world = world
        spec = self.spec
        for directory in (self.events_dir, self.prefix, self.work):
            directory.mkdir(parents=True, exist_ok=True)
        self._write_commands()
        port = free_port()
        for pod in spec.pods:
            timing = spec.timings[pod]
            shutdown = timing.shutdown
            pod_spec = PodSpec(
                name=pod,
                task_args=tuple(self.workload.loader_args()),
                output_prefix=self.prefix,
                error_aggregation=spec.error_aggregation,
                master=is_master(spec.elastic, spec.pods.index(pod)),
                nnodes=len(spec.pods),
                rendezvous_endpoint=f"localhost:{port}",
                execution_id=f"{spec.name}-{self.attempt}",
                checkpoint_path=self.checkpoint_path,
                prev_checkpoint=self.previous_checkpoint,
                clock_offset=spec.timings[pod].clock_offset,
                entrypoint=spec.entrypoint,
                job_pods=spec.pods,
                extra_env={
                    "AGGSIM_EVENTS_DIR": str(self.events_dir),
                    "AGGSIM_CONTROL": str(self.control),
                    "AGGSIM_TRAIN_SECONDS": "600",
                    # worker 0's agent hosts the rendezvous store, as the pod PET_RDZV_ENDPOINT names does
                    "AGGSIM_RDZV_IS_HOST": "1" if pod == spec.pods[0] else "0",
                    # the scenario's shutdown time is how long this pod's workers take to exit on SIGTERM
                    "AGGSIM_WORKER_SHUTDOWN_SECONDS": str(shutdown) if shutdown > SHUTDOWN_WORTH_MODELLING else "0",
                },
            )
            try:
                self.processes[pod] = self.stack.enter_context(LocalPod(pod_spec, self.work))
            except ContainerError as e:
                raise LocalJobError(str(e)) from None
        self.stack.callback(self.watcher.stop)
        self.watcher.start()
        started = time.time()
        if lands_in_first_rendezvous(spec, self.attempt):  # once the store is up, before the barrier
            self._wait_for_port(port, started)
            time.sleep(0.5)
            ready = time.time()
        else:
            ready = self._wait_for_barrier(len(spec.pods) * spec.nproc_per_node, started)
        self.timebase = ScenarioTimebase(spec, self.attempt, ready)
        return WallClock(
            self.timebase, [self.poll], deadline=started + ATTEMPT_TIMEOUT, linger_after_verdict=LINGER_AFTER_VERDICT
        )

    def _wait_for_port(self, port: int, started: float) -> None:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                self._check_alive(started, "the rendezvous store never came up")
                time.sleep(0.05)

    def _wait_for_barrier(self, world_size: int, started: float) -> float:
        while True:
            stamps = [self.events_dir / f"barrier.{rank}" for rank in range(world_size)]
            if all(path.exists() for path in stamps):
                return max(float(path.read_text()) for path in stamps)
            self._check_alive(started, "the workers never trained together")
            time.sleep(0.02)

    def _check_alive(self, started: float, what: str) -> None:
        dead = [name for name, pod in self.processes.items() if pod.returncode is not None]
        if dead:
            log = self.processes[dead[0]].log().strip().splitlines()[-1:] or ["(no output)"]
            raise LocalJobError(
                f"pod {dead[0]} exited {self.processes[dead[0]].returncode} before training: {log[0][:200]}"
            )
        if time.time() - started > START_TIMEOUT:
            raise LocalJobError(f"{what} within {START_TIMEOUT:.0f} s")

    # --- what the world asks --------------------------------------------------------------------
    def sigterm(self, pod: str, lands_during_fork: bool) -> None:
        process = self.processes[pod]
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)

    def sigkill(self, pod: str) -> None:
        process = self.processes[pod]
        if process.returncode is None:
            process.send_signal(signal.SIGKILL)

    def worker_error(self, pod: str, recoverable: bool, message: str) -> None:
        rank = self.spec.pods.index(pod) * self.spec.nproc_per_node  # the pod's first worker
        self._command({"do": "raise", "rank": rank, "message": message, "recoverable": recoverable})

    def checkpoint(self) -> None:
        self._command({"do": "checkpoint"})

    def complete(self) -> None:
        self._command({"do": "finish"})

    def _command(self, command: dict) -> None:
        self.commands.append(command)
        self._write_commands()

    def _write_commands(self) -> None:
        temporary = self.control.with_suffix(".tmp")
        temporary.write_text(json.dumps({"commands": self.commands}))
        os.replace(temporary, self.control)

    def wrote_checkpoint(self) -> bool:
        return any(self.events_dir.glob("checkpoint-*.0"))

    def completed(self) -> bool:
        return any(self.events_dir.glob("done.*"))

    def resumed(self) -> bool:
        return self.resumed_step() is not None

    def resumed_step(self) -> Optional[int]:
        found = sorted(self.events_dir.glob("resumed-*.0"))
        return int(found[0].name.split("-")[1].split(".")[0]) if found else None

    def snapshot(self, uploads: tuple[Upload, ...]):
        """Propeller's round: copy the blob store as it is now and read the copy."""
        observed = self.base / f"observed-{len(list(self.base.glob('observed-*')))}"
        shutil.copytree(self.prefix, observed, dirs_exist_ok=True, ignore=_partial_uploads)
        self.poll()
        present = {(p.name, p.stat().st_mtime_ns) for p in observed.glob("*.pb")}
        seen = tuple(u for u in self.world.uploads if self.upload_keys.get(id(u)) in present)
        return open_prefix(str(observed)), seen

    # --- what the wall clock's poller reports -----------------------------------------------------
    def poll(self) -> None:
        self._poll_exits()
        self._poll_uploads()

    def _poll_exits(self) -> None:
        world = self.world
        for name, process in self.processes.items():
            code = process.returncode
            if code is not None and name not in self.reported_exits:
                self.reported_exits.add(name)
                exit_code = 128 - code if code < 0 else code  # what a container runtime reports
                world.log(Event(world.clock.now, name, What.EXIT, exit_code=exit_code))
                world.pod_exited(name, exit_code)

    def _poll_uploads(self) -> None:
        world, to_scenario = self.world, self.timebase.scenario
        found = self.watcher.take(self.taken)
        self.taken += len(found)
        for file_name, mtime, seen_at, content in found:
            container = read_container_error(content)
            error = ErrorRecord.from_container_error(container) if container is not None else None
            pod = error.worker if error is not None else ""
            if not pod and file_name == "error.pb":
                pod = self.error_pb_writer  # a master next to workers with _F_DES: its file names no worker
            upload = Upload(file_name, pod, to_scenario(seen_at), error, content)
            self.upload_keys[id(upload)] = (file_name, mtime)
            world.upload(upload)
            if error is not None:
                world.log(
                    Event(
                        upload.at,
                        pod or "blob store",
                        What.UPLOAD,
                        file=file_name,
                        code=error.code,
                        recoverable=error.recoverable,
                        stamp=to_scenario(error.timestamp),  # the writer's clock, in scenario seconds
                    )
                )
            else:
                world.log(Event(upload.at, pod or "blob store", What.UPLOAD, file=file_name))

    # --- the end ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Reap every process (pods, agents, workers), then add the workers' own evidence to the timeline."""
        self.stack.close()
        if self.world is None or self.timebase is None:
            return
        self._poll_uploads()  # files that landed after the clock stopped still belong to the record
        to_scenario, world = self.timebase.scenario, self.world
        if any(self.events_dir.glob("barrier.*")):
            world.log(Event(self.timebase.barrier, "job", What.RENDEZVOUS_DONE))
        step = self.resumed_step()
        if step is not None:
            world.log(Event(self.timebase.barrier, self.spec.pods[0], What.RESUMED, count=step))
        for raised in sorted(self.events_dir.glob("raise.*")):
            rank = int(raised.name.split(".")[1])
            pod = self.spec.pods[rank // self.spec.nproc_per_node]
            world.log(Event(to_scenario(float(raised.read_text())), pod, What.WORKER_FAILED, count=rank, genuine=True))
