"""What each pod does and writes: the flytekit entrypoint, the elastic agent and its workers.

One `Pod` per worker replica. It reacts to signals (kubelet preemption, operator cleanup), its own
workers' failures, peers' deaths, completion and SIGKILL, and decides what its entrypoint uploads
and when it exits. The three plugin variants differ only in `_on_signal_caught` and the stamps:

- `upstream` (flytekitplugins-kfpytorch 1.16 `_execute`): SignalException -> IgnoreOutputs: no file,
  exit 0. torch's whole-second stamp for worker failures.
- `seed-pr`: SignalException -> recoverable error stamped where it is caught, after worker shutdown.
- `recoverable` (this project's plugin): stamped at signal arrival; worker failures keep their
  sub-second stamp; the first-rendezvous window is handled.

Sources: flytekit `entrypoint.py` `_dispatch_execute` (file names, kinds, exit 0), torch elastic
`PContext.start` (handlers only after the first rendezvous), `SimpleElasticAgent.run` (shutdown
before re-raise), `errors/error_handler.py` (`int(time.time())` stamps).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable, Optional

from aggregation.engine import Clock
from aggregation.scenario import PodTiming

SIGTERM_EXIT = 143  # the agent killed by an unhandled SIGTERM
SIGKILL_EXIT = 137

CODE_RECOVERABLE = "USER:Recoverable"  # FlyteRecoverableException.error_code
CODE_USER_RUNTIME = "USER:RuntimeError"  # FlyteUserRuntimeException wrapping a ChildFailedError
CODE_RENDEZVOUS_TIMEOUT = "USER:RuntimeError"  # RendezvousTimeoutError, a user-scope exception

STARTING, TRAINING, FAILING, WAITING, STOPPING, EXITED = "starting", "training", "failing", "waiting", "stopping", "exited"


@dataclass(frozen=True)
class ErrorRecord:
    """The ContainerError a pod writes (origin is always USER for these paths)."""

    code: str
    recoverable: bool
    timestamp: float
    worker: str
    message: str
    genuine: bool = False  # a scenario-injected worker error, not a consequence of another pod's death


@dataclass(frozen=True)
class Upload:
    name: str  # "error-<hex>.pb", "error.pb" or "outputs.pb"
    pod: str
    at: float
    error: Optional[ErrorRecord] = None


class Pod:
    """One worker replica. `hooks` connect it to the job: peers, the operator and the blob store."""

    def __init__(self, name: str, rank0: bool, timing: PodTiming, plugin: str, fork: bool, grace: float,
                 error_file_name: str, worker_name: str, clock: Clock, hooks: "PodHooks") -> None:
        self.name = name
        self.rank0 = rank0
        self.timing = timing
        self.plugin = plugin
        self.fork = fork
        self.grace = grace
        self.error_file_name = error_file_name
        self.worker_name = worker_name
        self.clock = clock
        self.hooks = hooks
        self.state = STARTING
        self.exit_code: Optional[int] = None
        self.exited_at: Optional[float] = None
        self._generation = 0  # invalidates scheduled reactions when the pod's course changes
        self._kill_at: Optional[float] = None
        clock.at(timing.rendezvous, self._rendezvous_done)

    # --- helpers -------------------------------------------------------------------------------
    def _later(self, delay: float, action: Callable[[], None]) -> None:
        generation = self._generation

        def run() -> None:
            if self._generation == generation and self.state != EXITED:
                action()

        self.clock.at(self.clock.now + delay, run)

    def _change_course(self, state: str) -> None:
        self._generation += 1
        self.state = state

    def _exit(self, code: int, why: str) -> None:
        if self.state == EXITED:
            return
        self._change_course(EXITED)
        self.exit_code, self.exited_at = code, self.clock.now
        self.clock.note(self.name, f"exits {code} ({why})")
        self.hooks.pod_exited(self, code)

    def _finish(self, error: Optional[ErrorRecord], outputs: bool = False) -> None:
        """The entrypoint writes and uploads (if anything), then exits 0."""
        if error is None and not outputs:
            self._later(self.timing.upload, lambda: self._exit(0, "nothing uploaded"))
            return

        def uploaded() -> None:
            if error is not None:
                self.hooks.upload(Upload(self.error_file_name, self.name, self.clock.now, error))
                self.clock.note(self.name, f"uploads {self.error_file_name} ({error.code}, "
                                f"{'recoverable' if error.recoverable else 'non-recoverable'}, stamped {error.timestamp:.3f})")
            else:
                self.hooks.upload(Upload("outputs.pb", self.name, self.clock.now))
                self.clock.note(self.name, "uploads outputs.pb")
            self._exit(0, "entrypoint done")

        self._later(self.timing.upload, uploaded)

    def _stamp_worker_failure(self, failed_at: float) -> float:
        # torch stamps int(time.time()); only this project's plugin refines it with the error file's mtime
        return failed_at if self.plugin == "recoverable" else float(math.floor(failed_at))

    # --- reactions -----------------------------------------------------------------------------
    def _rendezvous_done(self) -> None:
        if self.state == STARTING:
            self.state = TRAINING
            self.clock.note(self.name, "rendezvous done, workers started (signal handlers installed)")

    def signal(self, why: str, lands_during_fork: bool = False) -> None:
        """SIGTERM to the agent (kubelet preemption or operator deletion); SIGKILL follows after the grace period."""
        if self.state == EXITED:
            return
        arrived = self.clock.now
        self.clock.note(self.name, f"SIGTERM ({why})")
        if self._kill_at is None:  # the first signal's deadline stands
            self._kill_at = arrived + self.grace
            self.clock.at(self._kill_at, self.sigkill)
        if self.state == STOPPING:
            return  # already shutting down; the first signal decides
        if lands_during_fork and self.fork:
            self.clock.note(self.name, "signal lost inside os.fork(): the agent runs on until SIGKILL")
            return
        if self.state == STARTING and self.plugin != "recoverable":
            # no handler before the first PContext.start(): default disposition kills the agent
            self._exit(SIGTERM_EXIT, "killed by SIGTERM during the first rendezvous, no error file")
            self.hooks.peer_died(self, arrived)
            return
        had_workers = self.state in (TRAINING, FAILING)
        left_rendezvous = self.state == STARTING
        self._change_course(STOPPING)
        shutdown = self.timing.shutdown if had_workers else 0.0
        if shutdown >= self.grace:
            return  # workers outlive the grace period: SIGKILL comes first
        self._later(shutdown, lambda: self._on_signal_caught(arrived))
        if had_workers or left_rendezvous:  # a node leaving the first rendezvous strands its peers there
            self.clock.at(arrived + shutdown, lambda: self.hooks.peer_died(self, arrived + shutdown))

    def _on_signal_caught(self, arrived: float) -> None:
        if self.plugin == "upstream":
            self.clock.note(self.name, "SignalException -> IgnoreOutputs")
            self._finish(None)
            return
        stamp = arrived if self.plugin == "recoverable" else self.clock.now
        self.clock.note(self.name, f"SignalException -> FlyteRecoverableException stamped {stamp:.3f}")
        message = "The elastic agent received SIGTERM; the worker group was terminated before it finished"
        self._finish(ErrorRecord(CODE_RECOVERABLE, True, stamp, self.worker_name, message))

    def worker_error(self, recoverable: bool, message: str, genuine: bool) -> None:
        """A worker of this pod raises now."""
        if self.state != TRAINING:
            return
        failed_at = self.clock.now
        self._change_course(FAILING)
        self.clock.note(self.name, f"worker fails ({'recoverable' if recoverable else 'non-recoverable'}"
                        f"{'' if genuine else ', from a peer' + chr(39) + 's death'})")
        self.hooks.peer_died(self, failed_at)  # the failed worker's process exits: peers' collectives break
        code = CODE_RECOVERABLE if recoverable else CODE_USER_RUNTIME
        record = ErrorRecord(code, recoverable, self._stamp_worker_failure(failed_at), self.worker_name,
                             message or "worker failed", genuine)
        self._later(self.timing.detection, lambda: self._on_child_failed(record))

    def _on_child_failed(self, record: ErrorRecord) -> None:
        self.clock.note(self.name, "agent raises ChildFailedError")
        self._change_course(STOPPING)
        self._finish(record)

    def peer_death(self) -> None:
        """A peer pod's workers are gone: this pod's collectives break."""
        if self.state == STARTING:
            self._wait_in_rendezvous()
            return
        if self.state != TRAINING:
            return
        if self.timing.peer_failure_after is None:
            self._change_course(WAITING)
            self.clock.note(self.name, "workers fail from the peer's death; agent restarts them and waits in rendezvous")
            self._later(self.timing.join_timeout, self._rendezvous_timeout)
            return
        after = self.timing.peer_failure_after
        recoverable = self.timing.peer_failure_recoverable
        self._later(after, lambda: self.worker_error(recoverable, "Connection reset by peer", genuine=False))

    def _wait_in_rendezvous(self) -> None:
        self._change_course(WAITING)
        self.clock.note(self.name, "waits in rendezvous for a peer that is gone")
        self._later(self.timing.join_timeout, self._rendezvous_timeout)

    def _rendezvous_timeout(self) -> None:
        self.clock.note(self.name, "RendezvousTimeoutError")
        self._change_course(STOPPING)
        self._finish(ErrorRecord(CODE_RENDEZVOUS_TIMEOUT, False, self.clock.now, self.worker_name, "RendezvousTimeoutError"))

    def complete(self) -> None:
        """Training finished: rank 0 returns the outputs, the others raise IgnoreOutputs."""
        if self.state != TRAINING:
            return
        self._change_course(STOPPING)
        self.clock.note(self.name, "training complete")
        self._finish(None, outputs=self.rank0 and self.hooks.outputs_declared)

    def checkpoint(self) -> bool:
        if self.state == TRAINING and self.rank0:
            self.clock.note(self.name, "writes a checkpoint")
            return True
        return False

    def sigkill(self) -> None:
        if self.state != EXITED:
            self.clock.note(self.name, "SIGKILL after the grace period")
            self._exit(SIGKILL_EXIT, "killed, anything not yet uploaded is lost")
            self.hooks.peer_died(self, self.clock.now)  # whatever workers were left die with it


class PodHooks:
    """What a pod can do to the world around it (implemented by the attempt runner)."""

    outputs_declared: bool = False

    def upload(self, upload: Upload) -> None: ...

    def pod_exited(self, pod: Pod, code: int) -> None: ...

    def peer_died(self, pod: Pod, at: float) -> None: ...


def error_file_name(aggregation: bool, seed: int, attempt: int, pod: str) -> str:
    """flytekit `_build_error_file_name`: `error-<uuid4 hex>.pb` with `_F_DES`, else `error.pb` (deterministic here)."""
    if not aggregation:
        return "error.pb"
    return f"error-{hashlib.blake2b(f'{seed}/{attempt}/{pod}'.encode(), digest_size=16).hexdigest()}.pb"
