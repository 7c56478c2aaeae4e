"""Small, real elastic training tasks used by the demo, the tests and the local job runner.

Each task runs real torch elastic workers joined by a gloo process group. What the workers do is
steered by environment variables (a pod's environment reaches every worker), so one task module
serves every scenario:

- ``AGGSIM_EVENTS_DIR``: directory where workers record what they did and when (``<event>.<rank>``
  files holding ``time.time()``), so tests can compare error stamps with the real moments.
- ``AGGSIM_SIGNAL_AGENT``: a signal name (e.g. ``SIGTERM``); after the first barrier, global rank 0
  sends it to its own elastic agent (its parent process), like a kubelet preempting the pod.
- ``AGGSIM_RAISE_ON_RANK``: after the first barrier, this global rank raises ``ValueError``.
- ``AGGSIM_WORKER_SHUTDOWN_SECONDS``: workers take this long to exit when terminated (a slow
  checkpoint flush), which is what makes a stamp taken after shutdown late.
- ``AGGSIM_TRAIN_SECONDS``: how long to keep training (an ``all_reduce`` per step) before returning;
  default 60 s, i.e. "until something stops us".
- ``AGGSIM_CONTROL``: a JSON file the local job runner rewrites (atomically) at the moment a scenario
  event happens, holding every command so far, in the order they happened (``{"commands": [...]}``):
  ``{"do": "raise", "rank", "message", "recoverable"}`` (that rank raises now, ``FlyteRecoverableException``
  if recoverable), ``{"do": "checkpoint"}`` (rank 0 writes a checkpoint through flytekit's checkpoint API)
  and ``{"do": "finish"}`` (training is complete). Workers read it every step and act on the new commands
  in order (`due`), so a worker that reads two at once (a slow step under load) still does what the
  first one says. At start rank 0 reads the previous attempt's checkpoint (``--prev-checkpoint``) and
  records ``resumed-<step>``.

There is no list of declared tasks: a `Workload` (plugin variant, start method, nodes, processes per node,
restarts, join timeout) is the loader arguments of the pod's command line, and `resolver` builds the task in
the pod, as a Flyte task resolver does.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import dataclass

import flytekit
from flytekit import task
from flytekit.core.base_task import TaskResolverMixin
from flytekit.core.python_function_task import PythonFunctionTask
from flytekit.exceptions.user import FlyteRecoverableException
from flytekitplugins.kfpytorch import Elastic as UpstreamElastic

from localjob import blobstore
from plugin import Elastic as RecoverableElastic

VARIANTS = ("upstream", "recoverable")


def record_event(name: str, rank: int) -> None:
    events_dir = os.environ.get("AGGSIM_EVENTS_DIR")
    if events_dir:
        path = os.path.join(events_dir, f"{name}.{rank}")
        with open(path + ".tmp", "w") as f:
            f.write(repr(time.time()))
        os.replace(path + ".tmp", path)


def _recorded(name: str, rank: int) -> bool:
    events_dir = os.environ.get("AGGSIM_EVENTS_DIR")
    return bool(events_dir) and os.path.exists(os.path.join(events_dir, f"{name}.{rank}"))


def _slow_exit_on_terminate(seconds: float) -> None:
    def handler(signum, frame):
        time.sleep(seconds)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def _control() -> dict:
    """The runner's instructions for this attempt (absolute times), once it has written them."""
    path = os.environ.get("AGGSIM_CONTROL")
    if not path:
        return {}
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _resume_step() -> int:
    """The step the previous attempt checkpointed (flytekit's checkpoint API), or 0."""
    try:
        data = flytekit.current_context().checkpoint.read()
    except (NotImplementedError, ValueError, OSError):
        return 0
    return int(data.decode()) if data else 0


def _save_step(step: int) -> None:
    try:
        flytekit.current_context().checkpoint.write(str(step).encode())
    except NotImplementedError:  # no checkpoint path given to this execution
        pass


def due(commands: list[dict], handled: int) -> tuple[list[dict], int, bool]:
    """The commands after the first `handled` a worker acts on, how many it has handled then, and whether
    training is complete. Nothing after a finish is acted on: training completed before it happened, so a
    worker error the runner wrote after the finish must not fire in a worker that reads both at once."""
    new = []
    for command in commands[handled:]:
        handled += 1
        if command["do"] == "finish":
            return new, handled, True
        new.append(command)
    return new, handled, False


def train() -> None:
    """SGD on a tiny model, gradients averaged with a gloo `all_reduce`: a peer's death breaks the survivors."""
    import torch
    import torch.distributed as dist

    shutdown_seconds = float(os.environ.get("AGGSIM_WORKER_SHUTDOWN_SECONDS", "0") or 0)
    if shutdown_seconds > 0:
        _slow_exit_on_terminate(shutdown_seconds)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # everything slow (the checkpoint API's first use, model set-up) happens before the barrier, so the
    # barrier means "training starts now" to whoever schedules events after it
    start_step = _resume_step() if rank == 0 else 0
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(8, 4), torch.randn(8, 1)
    dist.barrier()
    record_event("barrier", rank)
    if rank == 0 and start_step:
        record_event(f"resumed-{start_step}", rank)

    raise_on = os.environ.get("AGGSIM_RAISE_ON_RANK")
    if raise_on is not None and int(raise_on) == rank:
        record_event("raise", rank)
        # no process-group teardown on the way out: the peers must see this worker die, as in real life
        raise ValueError(f"worker with global rank {rank} failed on purpose")

    signal_name = os.environ.get("AGGSIM_SIGNAL_AGENT")
    if signal_name and rank == 0:
        record_event("signal", rank)
        os.kill(os.getppid(), getattr(signal, signal_name))

    deadline = time.time() + float(os.environ.get("AGGSIM_TRAIN_SECONDS", "60"))
    step = start_step
    handled = checkpoints_written = 0
    finished = False
    while not finished:
        new, handled, finished = due(_control().get("commands", []), handled)
        for command in new:
            # once per attempt: a worker group torch restarts (max_restarts) reads the same commands again
            if command["do"] == "raise" and command["rank"] == rank and not _recorded("raise", rank):
                record_event("raise", rank)
                message = command.get("message") or f"worker with global rank {rank} failed"
                if command.get("recoverable"):
                    raise FlyteRecoverableException(message)
                raise ValueError(message)
            if command["do"] == "checkpoint" and rank == 0:
                checkpoints_written += 1
                _save_step(step)
                record_event(f"checkpoint-{checkpoints_written}", rank)
        # Leave together: a rank that stopped on its own would break its peers' next all_reduce, and they
        # would fail with "Connection closed by peer" although training completed (seen under CPU load).
        finish = torch.tensor([1 if finished or time.time() >= deadline else 0])
        dist.all_reduce(finish, op=dist.ReduceOp.MAX)
        if finish.item():
            break
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
            parameter.grad /= world
        optimizer.step()
        step += 1
        time.sleep(0.01)
    record_event("done", rank)
    dist.destroy_process_group()


@dataclass(frozen=True)
class Workload:
    """The elastic task a pod runs, built in the pod from its loader arguments (any job shape, no declared list).

    A PyTorchJob's pods all run one task; what differs between scenarios is the task's `Elastic`
    configuration. Flyte names a task in the pod's command line through a task resolver
    (`pyflyte-execute --resolver R -- ARGS`), so `resolver` below rebuilds the task from ARGS.
    """

    variant: str  # "upstream" (flytekitplugins-kfpytorch as released) or "recoverable" (this project's plugin)
    start_method: str = "spawn"
    nnodes: str = "1"  # torch elastic's nnodes: "N" or "MIN:MAX" (the PyTorchJob's elastic policy)
    nproc_per_node: int = 2
    max_restarts: int = 0
    # rdzv_configs["join_timeout"]: flytekit's Elastic default, as aggregation.defaults.JOIN_TIMEOUT_SECONDS (not
    # imported: every pod and worker imports this module, and the aggregation package would slow their start)
    join_timeout: float = 900.0
    # flytekit's Elastic(monitor_interval=) default (aggregation.defaults.MONITOR_INTERVAL_SECONDS): the agent looks at
    # its workers this often, so a finished or failed worker group is noticed up to this late
    monitor_interval: float = 5.0

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"no workload variant {self.variant!r} (one of {', '.join(VARIANTS)})")
        if self.start_method not in ("spawn", "fork"):
            raise ValueError(f"start method {self.start_method!r} is neither spawn nor fork")
        if not re.fullmatch(r"[1-9][0-9]*(:[1-9][0-9]*)?", self.nnodes):
            raise ValueError(f"nnodes {self.nnodes!r} is neither N nor MIN:MAX")
        positive = self.join_timeout > 0 and self.monitor_interval > 0
        if self.nproc_per_node < 1 or self.max_restarts < 0 or not positive:
            raise ValueError(f"impossible workload {self}")

    def loader_args(self) -> list[str]:
        return [
            "variant", self.variant, "start-method", self.start_method, "nnodes", self.nnodes,
            "nproc-per-node", str(self.nproc_per_node), "max-restarts", str(self.max_restarts),
            "join-timeout", repr(self.join_timeout), "monitor-interval", repr(self.monitor_interval),
        ]  # fmt: skip

    @classmethod
    def from_loader_args(cls, args: list[str]) -> "Workload":
        values = dict(zip(args[::2], args[1::2]))
        return cls(
            variant=values["variant"],
            start_method=values["start-method"],
            nnodes=values["nnodes"],
            nproc_per_node=int(values["nproc-per-node"]),
            max_restarts=int(values["max-restarts"]),
            join_timeout=float(values["join-timeout"]),
            monitor_interval=float(values["monitor-interval"]),
        )

    def task(self) -> PythonFunctionTask:
        """The flytekit task: `train` under this plugin's `Elastic` configuration."""
        elastic_class = UpstreamElastic if self.variant == "upstream" else RecoverableElastic
        rendezvous = {"timeout": 900, "join_timeout": self.join_timeout}
        # In a PyTorchJob the rendezvous store lives in the agent of the pod the endpoint names (worker 0);
        # here every pod shares one host name, so which agent hosts it is said, not left to a race for the port.
        is_host = os.environ.get("AGGSIM_RDZV_IS_HOST")
        if is_host is not None:
            rendezvous["is_host"] = is_host == "1"
        nnodes: object = int(self.nnodes) if ":" not in self.nnodes else self.nnodes
        config = elastic_class(
            nnodes=nnodes,
            nproc_per_node=self.nproc_per_node,
            start_method=self.start_method,
            monitor_interval=self.monitor_interval,
            max_restarts=self.max_restarts,
            rdzv_configs=rendezvous,
        )
        return task(task_config=config, task_resolver=resolver)(train_task)


def train_task() -> None:
    """The task function every workload runs (module level: spawn pickles it by reference)."""
    train()


class WorkloadResolver(TaskResolverMixin):
    """Flyte's task resolver for `Workload`s: the loader arguments are the workload's fields."""

    @property
    def location(self) -> str:
        return f"{__name__}.resolver"

    def name(self) -> str:
        return "aggsim workload resolver"

    def load_task(self, loader_args: list[str]) -> PythonFunctionTask:
        return Workload.from_loader_args(list(loader_args)).task()

    def loader_args(self, settings, t) -> list[str]:
        raise NotImplementedError("workloads are run locally, never registered")

    def get_all_tasks(self) -> list:
        return []


resolver = WorkloadResolver()

# the pods' output prefix is an `aggsim-blob://` URL: pyflyte-execute imports this module (the resolver) before the
# task runs, so the store is known before the plugin looks under the prefix or the entrypoint uploads to it
blobstore.register()
