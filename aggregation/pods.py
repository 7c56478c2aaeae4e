"""Simulated pods: what each pod's flytekit entrypoint, elastic agent and workers do, and what they upload.

One `Pod` per worker replica. It reacts to SIGTERM (from the kubelet, for a preemption or the operator's
cleanup), its own workers' failures, peers' deaths, completion and SIGKILL, and decides what its
entrypoint uploads and when it exits. What differs between plugin variants is asked of the pod's
`PodPlugin` (`plugin_variants.py`); the kubelet's SIGTERM-then-SIGKILL rule is the world's (`world.py`).

Sources: flytekit `entrypoint.py` `_dispatch_execute` (file names, kinds, exit 0), torch elastic
`PContext.start` (handlers only after the first rendezvous), `SimpleElasticAgent.run` (shutdown
before re-raise), `SimpleElasticAgent._invoke_run` (a look at the workers every monitor interval, the exit
barrier after success), `MultiprocessContext._poll` (a failed worker counts once its process is gone; finished
workers are joined), `errors/error_handler.py` (`int(time.time())` stamps).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Callable, Optional

from flyteidl.core import errors_pb2
from google.protobuf.message import DecodeError

from aggregation import defaults
from aggregation.documents import error_document
from aggregation.engine import Clock, Scheduled, cancel
from aggregation.kinds import Entrypoint
from aggregation.nanoseconds import (
    PER_SECOND,
    ROUNDING_NS,
    exact,
    instant_text,
    on_the_clock,
    whole_nanoseconds,
)
from aggregation.plugin_variants import PodPlugin, plugin_for
from aggregation.readers import parse_document
from aggregation.replica_env import error_file_name, job_environments, reported_worker
from aggregation.scenario import ElasticLaunch, ModelRefusal, PodTiming, ScenarioSpec
from aggregation.storage import MemoryPrefix
from aggregation.symbolic import stamp_ns
from aggregation.timeline import Event, What

if TYPE_CHECKING:
    from aggregation.world import Attempt

SIGKILL_EXIT = 137
#: the pod's exit code when its agent dies of a SIGTERM it has no handler for, per container PID 1. An init (tini,
#: dumb-init) exits 128 + the signal its child died of; flytekit's `fast_execute_task_cmd` exits with its child's
#: `Popen.wait()`, -15, which the kernel keeps as 241. Absent: pyflyte-execute is PID 1, and the kernel drops a
#: signal that a PID namespace's init has no handler for (`sig_task_ignored`), so the agent runs on.
SIGTERM_DEATH_EXIT = {Entrypoint.INIT_THEN_EXECUTE: 143, Entrypoint.FAST_EXECUTE: 241}

CODE_RECOVERABLE = "USER:Recoverable"  # FlyteRecoverableException.error_code
CODE_USER_RUNTIME = "USER:RuntimeError"  # FlyteUserRuntimeException wrapping a ChildFailedError
CODE_RENDEZVOUS_TIMEOUT = "USER:RuntimeError"  # RendezvousTimeoutError, a user-scope exception
SIGNAL_MESSAGE = "The elastic agent received SIGTERM; the worker group was terminated before it finished"
WORKERS_RESTARTED = "workers restarted"  # the reason of a rendezvous round that restarted worker groups
COLLATERAL_MESSAGE = "A worker failed because a peer pod's workers are gone (most likely preempted or failed)"


class PodState(enum.Enum):
    STARTING = "starting"  # in the first rendezvous: torch has no signal handlers yet
    TRAINING = "training"
    FAILING = "failing"  # a worker failed; the agent has not noticed yet
    FINISHED = "finished"  # the workers returned; the agent has not noticed yet (a signal still stops it)
    AT_EXIT_BARRIER = "at_exit_barrier"  # the agent saw its workers finish and waits for the other agents
    WAITING = "waiting"  # back in rendezvous, waiting for a peer
    REPORTING = "reporting"  # a consequence to report: the plugin first waits for a sibling's report
    STOPPING = "stopping"  # the entrypoint has the agent's result (or its signal) and is on its way out
    EXITED = "exited"

    # members are singletons compared by identity: hash them by identity too (C speed; Enum's own hashes the name
    # in Python, and the pods' count per state is updated on every change of state)
    __hash__ = object.__hash__


_NO_POD = dict.fromkeys(PodState, 0)

#: why a scenario's worker error at this moment finds no training worker to fail, by the pod's state
_NO_WORKER_TO_FAIL = {
    PodState.STARTING: "its workers have not started (the first rendezvous)",
    PodState.WAITING: "its workers are stopped (it waits in the rendezvous)",
    PodState.FAILING: "a worker of it has already failed",
    PodState.FINISHED: "its workers have returned (training is complete)",
    PodState.AT_EXIT_BARRIER: "its workers have returned (training is complete)",
    PodState.REPORTING: "its agent has already raised",
    PodState.STOPPING: "its agent is on its way out",
    PodState.EXITED: "the pod has exited",
}


@dataclass(frozen=True)
class ErrorRecord:
    """The ContainerError a pod writes (origin is always USER for these paths)."""

    code: str
    recoverable: bool
    # the stamp the error carries, in seconds: a clock's reading or torch's whole second (the document holds what
    # flytekit makes of it: `written_stamp`); scenario seconds when simulated, epoch seconds when real
    timestamp: float
    worker: str
    message: str
    genuine: bool = False  # a scenario-injected worker error, not a consequence of another pod's death

    def document(self) -> errors_pb2.ErrorDocument:
        """The ErrorDocument flytekit's entrypoint writes for this error."""
        return error_document(
            code=self.code,
            message=self.message,
            recoverable=self.recoverable,
            origin="USER",
            timestamp_ns=self._stamp_ns(),
            worker=self.worker,
        )

    def _stamp_ns(self) -> int:
        """The nanoseconds flytekit writes for `timestamp` (`aggregation.stamps`); a symbolic stamp (aggsim prove)
        stays traceable through the bytes."""
        return stamp_ns(self.timestamp, (self.worker, self.code, self.message))

    def written_stamp(self) -> float:
        """The document's stamp in seconds, as the timeline shows it (a real run's is read from its file)."""
        return self._stamp_ns() / 1e9

    @classmethod
    def from_container_error(cls, error: errors_pb2.ContainerError) -> "ErrorRecord":
        """What a real pod wrote, read back (its stamp in epoch seconds)."""
        return cls(
            error.code,
            error.kind == errors_pb2.ContainerError.RECOVERABLE,
            error.timestamp.seconds + error.timestamp.nanos / 1e9,
            error.worker,
            error.message,
        )


@dataclass(frozen=True)
class Upload:
    """A file a pod's entrypoint put under the attempt's output prefix."""

    name: str  # "error-<hex>.pb", "error.pb" or "outputs.pb"
    pod: str
    at: float
    error: Optional[ErrorRecord] = None
    content: Optional[bytes] = None  # the bytes as written (real runs); simulated uploads are built from `error`

    def data(self) -> bytes:
        """The object's bytes, as propeller reads them."""
        if self.content is not None:
            return self.content
        return b"" if self.error is None else self.error.document().SerializeToString()

    def container_error(self) -> Optional[errors_pb2.ContainerError]:
        """The ContainerError the file holds (None for outputs.pb, or bytes that are no ErrorDocument with one)."""
        if self.content is None:
            return None if self.error is None else self.error.document().error
        return read_container_error(self.content)


def read_container_error(content: bytes) -> Optional[errors_pb2.ContainerError]:
    """The ContainerError in a file's bytes, or None when they hold no ErrorDocument with an `error`."""
    try:
        document = parse_document(content)
    except DecodeError:
        return None
    return document.error if document.HasField("error") else None


class SignalUnderTorchHandler(ModelRefusal):
    """A SIGTERM reaches a pod whose agent has returned while torch's SIGTERM handler is still installed: upstream's
    plugin and the seed PR leave it in place until the interpreter finalizes, and the flytekit statement it raises in
    decides the outcome, which the model does not time (measured: `defaults.TORCH_HANDLER_AFTER_ENTRYPOINT_SECONDS`)."""

    real_runs_meet = "a SIGTERM meets torch's handler after its agent returned"

    def __init__(self, message: str, attempt: int, pod: str, arrived, window: tuple) -> None:
        super().__init__(message)
        self.attempt, self.pod, self.arrived = attempt, pod, arrived
        self.since, self.until = window  # from the agent's result to the end of the refused stretch
        self.kind = f"a SIGTERM reaches {pod} while torch's handler outlives its agent (attempt {attempt})"


class Pod:
    """One simulated worker replica, reporting to its attempt's world."""

    def __init__(
        self,
        name: str,
        rank0: bool,
        timing: PodTiming,
        launch: ElasticLaunch,
        plugin: PodPlugin,
        fork: bool,
        grace: float,
        entrypoint: Entrypoint,
        error_file_name: str,
        worker_name: str,
        world: "Attempt",
        group: "SimulatedPods",
    ) -> None:
        self.name = name
        self.rank0 = rank0
        self.timing = timing
        self.launch = launch
        self.plugin = plugin
        self.fork = fork
        self.grace = grace
        self.entrypoint = entrypoint
        self.error_file_name = error_file_name
        self.worker_name = worker_name
        self.world = world
        self.clock: Clock = world.clock
        self.group = group
        self.offset = timing.clock_offset  # this node's clock minus true time: every stamp it writes
        self.state = PodState.STARTING  # changed only by `_enter`, which keeps the group's count per state
        group.in_state[PodState.STARTING] += 1
        self.restarts_left = launch.max_restarts  # torch elastic's remaining_restarts: the task's, spent per agent
        self.workers_started = 0.0  # when the current worker group started: the agent's monitor polls count from it
        self.worker_groups = 0  # how many worker groups it has started (a look belongs to one)
        self.waiting_since = 0.0  # when it joined the current rendezvous round: its reads of the store count from it
        # a look at its workers before this moment finds them HEALTHY (a failed worker counts once its process is
        # gone; workers being stopped are no longer looked at)
        self.healthy_until = math.inf
        # the read at which a waiting node finds its join deadline passed: the first at or after it (a real loop's
        # reads drift later than whole seconds, so a deadline on the read grid is past by that read)
        self.deadline_read = math.inf
        # when a SIGTERM reached the agent blocked at the exit barrier: torch's handler runs once the wait returns
        self.held_signal: Optional[float] = None
        # on its way out with torch's SIGTERM handler still installed (upstream, seed-pr): from when, and until when
        # (`_finish`); None when it is not, or never was
        self.torch_handler_window: Optional[tuple[float, float]] = None
        self._course: list[Scheduled] = []  # reactions that a change of course cancels
        self.clock.at(timing.rendezvous, self._joined_first_round)

    # --- helpers -------------------------------------------------------------------------------
    def _log(self, what: What, **fields) -> None:
        self.world.log(Event(self.clock.now, self.name, what, **fields))

    def _own_clock(self, moment: float) -> float:
        """What this node's clock reads at scenario time `moment` (every stamp it writes), on the nanosecond."""
        return on_the_clock(moment + self.offset)

    def _later(self, delay: float, action: Callable[[], None]) -> None:
        self._at(self.clock.now + delay, action)

    def _at(self, moment: float, action: Callable[[], None]) -> None:
        self._course.append(self.clock.at(moment, action))

    def _enter(self, state: PodState) -> None:
        in_state = self.group.in_state
        in_state[self.state] -= 1
        in_state[state] += 1
        self.state = state

    def _change_course(self, state: PodState) -> None:
        for scheduled in self._course:
            cancel(scheduled)
        self._course.clear()
        self._enter(state)

    def _exit(self, code: int, why: str) -> None:
        if self.state is PodState.EXITED:
            return
        self._change_course(PodState.EXITED)
        self._log(What.EXIT, exit_code=code, reason=why)
        # The process is gone first: its sockets (the rendezvous store it may host) close with it, before the
        # kubelet can see the exit and report it to the operator.
        self.group.exited(self)
        self.world.pod_exited(self.name, code)

    def _refuse_under_torch_handler(self, arrived: float) -> None:
        window = self.torch_handler_window
        if window is None or arrived >= window[1]:
            return
        since, until = window
        raise SignalUnderTorchHandler(
            f"attempt {self.world.attempt}: {self.name}: a SIGTERM at {instant_text(arrived)} s, "
            f"{instant_text(arrived - since)} s after its entrypoint had its agent's result, meets torch's SIGTERM "
            f"handler, which {self.plugin.variant.value} leaves installed until the interpreter finalizes (here until "
            f"{instant_text(until)} s): it raises in whichever flytekit statement runs then (measured: a "
            "NON_RECOVERABLE SYSTEM error document, exit 1, or nothing), "
            "which the model does not time",
            self.world.attempt,
            self.name,
            arrived,
            window,
        )

    def _finish(self, error: Optional[ErrorRecord], outputs: bool = False) -> None:
        """The entrypoint writes and uploads (if anything), then the process exits 0, `exit` later (flytekit's and
        torch's teardown)."""
        writes = error is not None or outputs
        # when the upload lands, or the entrypoint returns having written nothing
        done = self.clock.now + (self.timing.upload if writes else 0.0)
        if self.worker_groups and not self.plugin.restores_signal_dispositions:
            # on the nanosecond, as every moment the clock holds: simulate and prove must split here alike
            until = on_the_clock(done + defaults.TORCH_HANDLER_AFTER_ENTRYPOINT_SECONDS)
            self.torch_handler_window = (self.clock.now, until)
        if not writes:
            # IgnoreOutputs: flytekit 1.16 `_dispatch_execute` returns from its except clause, before the
            # `put_data` that takes `upload`, so nothing is written and no upload time is spent.
            self._later(self.timing.exit, lambda: self._exit(0, "nothing uploaded"))
            return

        def uploaded() -> None:
            name = self.error_file_name if error is not None else "outputs.pb"
            self.world.upload(Upload(name, self.name, self.clock.now, error))
            if error is not None:
                stamp = error.written_stamp()
                self._log(What.UPLOAD, file=name, code=error.code, recoverable=error.recoverable, stamp=stamp)
            else:
                self._log(What.UPLOAD, file=name)
            if self.timing.exit:
                self._later(self.timing.exit, lambda: self._exit(0, "entrypoint done"))
            else:
                self._exit(0, "entrypoint done")

        self._at(done, uploaded)

    # --- reactions -----------------------------------------------------------------------------
    def _next_poll(self, visible: float) -> float:
        """The agent's first look at its workers at or after `visible`: torch `_invoke_run` sleeps one monitor
        interval, looks, and repeats, from the moment it started the worker group."""
        interval = self.launch.monitor_interval
        first_poll = interval if self.timing.first_poll is None else self.timing.first_poll
        first = on_the_clock(self.workers_started + first_poll)
        return _tick_at_or_after(first, interval, visible)

    def _joined_first_round(self) -> None:
        """Its agent is up and has joined the first round (`rendezvous_seconds`); the round completes when the last
        pod joins."""
        if self.state is PodState.STARTING:
            self.group.joined_first_round()

    def first_round_complete(self) -> None:
        """The first round completed with every pod: its workers start (torch installs its signal handlers now)."""
        if self.state is PodState.STARTING:
            self._enter(PodState.TRAINING)
            self._new_worker_group()
            self._log(What.RENDEZVOUS_DONE)

    def _new_worker_group(self) -> None:
        self.workers_started = self.clock.now
        self.worker_groups += 1
        self.healthy_until = math.inf

    def _sibling_report(self) -> Optional[str]:
        """A sibling's report already under the output prefix (an error file holding an error), if any.

        A file that does not decode is no report: the plugin writes its own over it (aggregation off) or
        next to it."""
        for upload in self.world.uploads:
            if upload.pod != self.name and upload.name != "outputs.pb" and upload.container_error() is not None:
                return upload.name
        return None

    @staticmethod
    def _pid_one_ignores(where: str) -> str:
        return f"pyflyte-execute is PID 1 with no handler for it ({where}): the agent runs on"

    def sigterm(self, lands_during_fork: bool = False) -> None:
        """SIGTERM to the agent (the kubelet logs it and owns the SIGKILL that follows)."""
        arrived = self.clock.now
        if self.state is PodState.REPORTING:
            # the plugin's wait for a sibling is cut short: one last look, then write or yield
            self._change_course(PodState.REPORTING)
            self._await_sibling(self.clock.now)
            return
        if self.state is PodState.EXITED:
            return
        death = SIGTERM_DEATH_EXIT.get(self.entrypoint)
        if self.state is PodState.STOPPING:
            # The kubelet signals a pod once (`world.Kubelet.terminate`), so this pod is on its way out because its
            # agent returned. While torch's handler is still installed (upstream and seed-pr leave it until the
            # interpreter finalizes) the model refuses. After that the signal finds the default disposition: the
            # process dies of it (measured: every signal 10 ms to 0.92 s after outputs.pb landed, spawn and fork),
            # whatever it uploaded stays, what it had not is never written. The recoverable plugin puts the default
            # back as its `_execute` returns. A PID 1 is never killed so: it goes on its way out.
            self._refuse_under_torch_handler(arrived)
            if death is None:
                self._log(What.SIGNAL_IGNORED, reason=self._pid_one_ignores("on its way out"))
            elif self.worker_groups:
                self._exit(death, "killed by SIGTERM after its agent returned: the default disposition is back")
            else:
                self._exit(death, "killed by SIGTERM on its way out: no torch handler (no workers ever started)")
            return
        if self.state is PodState.AT_EXIT_BARRIER:  # no fork there: its workers have returned
            self._hold_at_exit_barrier(arrived)
            return
        if self.worker_groups == 0 and not self.plugin.handles_first_rendezvous_signal:
            # no handler before the first PContext.start(): default disposition kills the agent, in its first round
            # or waiting in the next for a peer that left it (no fork either: it has started no workers)
            if death is None:
                self._log(What.SIGNAL_IGNORED, reason=self._pid_one_ignores("in its first rendezvous"))
                return
            self._exit(death, "killed by SIGTERM during the first rendezvous, no error file")
            self.group.peer_died(self, arrived)
            return
        if lands_during_fork and self.fork and self.worker_groups:  # only an agent that starts workers forks
            self._log(What.SIGNAL_LOST)
            return
        had_workers = self.state in (PodState.TRAINING, PodState.FAILING, PodState.FINISHED)
        left_rendezvous = self.state is PodState.STARTING
        self._change_course(PodState.STOPPING)
        shutdown = self.timing.shutdown if had_workers else 0.0
        if shutdown >= self.grace:
            return  # workers outlive the grace period: SIGKILL comes first
        self._later(shutdown, lambda: self._on_signal_caught(arrived))
        if had_workers or left_rendezvous:  # a node leaving the first rendezvous strands its peers there
            self.clock.at(arrived + shutdown, lambda: self.group.peer_died(self, arrived + shutdown))

    def _hold_at_exit_barrier(self, arrived: float) -> None:
        """A SIGTERM at the exit barrier. The agent is blocked in the store's C++ `wait` (torch `utils/store.py`
        `barrier`), and CPython runs torch's handler only once that call returns: the SignalException is raised when
        the barrier passes (every agent arrived, the store gone, or its timeout), and `_exit_barrier` re-raises it.
        Interrupted, the wait polls its socket again for its whole timeout (c10d `socket.cpp` `waitForInput`), so
        the timeout counts from the signal. Measured (torch 2.13, a barrier of two, `_terminate_process_handler`):
        a SIGTERM 1 s or 3 s into the wait was raised when the other member arrived at 6 s; with a 10 s timeout and
        no other member, at 11 s and 13 s (10 s without a signal)."""
        self.held_signal = arrived
        self._change_course(PodState.AT_EXIT_BARRIER)  # the timeout, restarted
        self._log(What.SIGNAL_HELD)
        self._later(defaults.EXIT_BARRIER_TIMEOUT_SECONDS, lambda: self.exit_barrier_passed("timed out"))

    def _on_signal_caught(self, arrived: float) -> None:
        stamp = self.plugin.signal_report(self._own_clock(arrived), self._own_clock(self.clock.now))
        sibling = self._sibling_report() if self.plugin.yields_to_siblings else None
        if stamp is not None and sibling is not None:
            self._log(What.YIELDS, file=sibling)
            self._finish(None)
            return
        if stamp is None:
            self._log(What.SIGNAL_CAUGHT, reason="IgnoreOutputs")
            self._finish(None)
            return
        error = ErrorRecord(CODE_RECOVERABLE, True, stamp, self.worker_name, SIGNAL_MESSAGE)
        self._log(What.SIGNAL_CAUGHT, reason="FlyteRecoverableException", stamp=error.written_stamp())
        self._finish(error)

    def worker_error(self, recoverable: bool, message: str, genuine: bool) -> None:
        """A worker of this pod raises now, if one is training; otherwise the timeline says why none does."""
        if self.state is not PodState.TRAINING:
            # only a scenario's error gets here: a peer's death's is cancelled with the course it was scheduled on
            self._log(What.WORKER_ERROR_NOT_RAISED, reason=_NO_WORKER_TO_FAIL[self.state])
            return
        failed_at = self.clock.now
        self._change_course(PodState.FAILING)
        self._log(
            What.WORKER_FAILED,
            recoverable=recoverable,
            genuine=genuine,
            reason="" if genuine else "from a peer's death",
        )
        self.group.peer_died(self, failed_at)  # the failed worker's process exits: peers' collectives break
        code = CODE_RECOVERABLE if recoverable else CODE_USER_RUNTIME
        record = ErrorRecord(
            code,
            recoverable,
            self.plugin.worker_failure_stamp(self._own_clock(failed_at), self.timing.file_time_lag),
            self.worker_name,
            message or "worker failed",
            genuine,
        )
        # the failed worker counts once its process is gone, at the agent's next look; collecting it takes `detection`
        self.healthy_until = on_the_clock(failed_at + self.timing.failed_worker_exit)
        noticed = self._next_poll(self.healthy_until) + self.timing.detection
        self._later(noticed - failed_at, lambda: self._on_child_failed(record))

    def _on_child_failed(self, record: ErrorRecord) -> None:
        if self.restarts_left > 0:
            # torch `SimpleElasticAgent._invoke_run`: a FAILED worker group with restarts left is restarted, through
            # a new rendezvous round, instead of failing the agent (and the pod)
            self.restarts_left -= 1
            self._log(What.RESTARTS_WORKERS, count=self.restarts_left)
            self._wait_in_rendezvous("for the next round")
            return
        self._log(What.AGENT_RAISES)
        self.group.close_rendezvous(self)
        if not record.genuine and self.plugin.collateral_recoverable:
            self._collateral()
            return
        self._change_course(PodState.STOPPING)
        self._finish(record)

    def _collateral(self) -> None:
        """A consequence of a peer's death: wait for a sibling's report, looking every `sibling_poll` s."""
        self._change_course(PodState.REPORTING)
        self._log(What.AWAITS_SIBLING, reason=f"{self.plugin.sibling_wait:g}")
        self._await_sibling(on_the_clock(self.clock.now + self.plugin.sibling_wait))

    def _await_sibling(self, deadline: float) -> None:
        sibling = self._sibling_report()
        if sibling is not None:
            self._log(What.YIELDS, file=sibling)
            self._change_course(PodState.STOPPING)
            self._finish(None)
            return
        now = self.clock.now
        if now >= deadline:
            record = ErrorRecord(CODE_RECOVERABLE, True, self._own_clock(now), self.worker_name, COLLATERAL_MESSAGE)
            self._change_course(PodState.STOPPING)
            self._finish(record)
            return
        self._later(min(self.plugin.sibling_poll, deadline - now), lambda: self._await_sibling(deadline))

    def peer_death(self) -> None:
        """A peer pod's workers are gone: this pod's collectives break."""
        if self.state is PodState.STARTING:
            # still in its first round's join loop, reading once a second since its start (torch's 0-0.3 s
            # delay while the round it read is 0 is random: taken as 0), against the deadline it set then
            self._wait_in_rendezvous("for a peer that is gone", joined_at=self.waiting_since)
            return
        if self.state is not PodState.TRAINING:
            return
        recoverable = self.timing.peer_failure_recoverable
        self._later(
            self.timing.peer_failure_after,
            lambda: self.worker_error(recoverable, "Connection reset by peer", genuine=False),
        )

    def _wait_in_rendezvous(self, why: str, joined_at: Optional[float] = None) -> None:
        """torch `DynamicRendezvousHandler.next_rendezvous`: join a round and wait for it, reading the rendezvous
        state once a second (`_DistributedRendezvousOpExecutor.run`); the join deadline is noticed at a read, the
        first after it (`_RendezvousJoinOp`: `time.monotonic() > deadline`, checked after the read)."""
        self._change_course(PodState.WAITING)
        self.waiting_since = self.clock.now if joined_at is None else joined_at
        self._log(What.WAITS_IN_RENDEZVOUS, reason=why)
        deadline = on_the_clock(self.waiting_since + self.launch.join_timeout)
        self.deadline_read = _tick_at_or_after(self.waiting_since, defaults.RENDEZVOUS_POLL_SECONDS, deadline)
        self._later(max(self.deadline_read - self.clock.now, 0.0), self.read_rendezvous_state)
        self.group.joined(self)

    def store_gone(self) -> None:
        """The agent that hosts the c10d store has exited. Blocked at the exit barrier (torch `store_util.barrier`:
        `store.wait`), this pod's connection fails at once; waiting in rendezvous, it finds out at its next read."""
        if self.state is PodState.AT_EXIT_BARRIER:
            self.exit_barrier_passed("the rendezvous store is gone")
        elif self.state is PodState.WAITING:
            self.rendezvous_changed()
        else:
            self.look_at_the_rendezvous()

    def rendezvous_changed(self) -> None:
        """The store went, or an agent closed the rendezvous. Waiting for its round, this pod reads the rendezvous
        state, then sleeps a second and reads again (torch `dynamic_rendezvous.py`
        `_DistributedRendezvousOpExecutor.run`, `_delay(seconds=1)`), counting from its join: the change fails
        its rendezvous at the next such read."""
        if self.state is not PodState.WAITING:
            return
        if self.next_read() <= self.clock.now:
            self.read_rendezvous_state()  # a read due now sees it at once (the host's exit closes its socket first)
        else:
            self.read_at_next_tick()

    def next_read(self) -> float:
        """The waiting node's first read of the rendezvous state at or after now."""
        return _tick_at_or_after(self.waiting_since, defaults.RENDEZVOUS_POLL_SECONDS, self.clock.now)

    def read_at_next_tick(self) -> None:
        """The next read, scheduled (a new join's first read is now, after the instant's other events)."""
        self._later(self.next_read() - self.clock.now, self.read_rendezvous_state)

    def read_rendezvous_state(self) -> None:
        """A read of the rendezvous state while waiting, in torch's order: the read itself fails without the store
        (RendezvousConnectionError, `c10d_rendezvous_backend` `_call_store`); then `_RendezvousJoinOp` finds the
        rendezvous closed (RendezvousClosedError), or else past its deadline (RendezvousTimeoutError)."""
        if self.state is not PodState.WAITING:
            return
        host = self.group.store_host
        if host.state is PodState.EXITED:
            self._log(What.RENDEZVOUS_LOST, reason=host.name)
            self._rendezvous_failed("RendezvousConnectionError")
        elif self.group.rendezvous_closed_by is not None:
            self._log(What.RENDEZVOUS_CLOSED, reason=self.group.rendezvous_closed_by)
            self._rendezvous_failed("RendezvousClosedError")
        elif self.clock.now >= self.deadline_read:
            self._log(What.RENDEZVOUS_TIMEOUT)
            self._rendezvous_failed("RendezvousTimeoutError")

    def look_at_the_rendezvous(self) -> None:
        """What a healthy agent reads at its looks has changed (a node joined the wait list, the store went).
        torch `_invoke_run`: at each look that finds its workers HEALTHY the agent asks the rendezvous
        `num_nodes_waiting()`, a read of its state from the store; the first such look at or after the change acts
        on it (`_healthy_look`)."""
        if not self._healthy_at(self.clock.now):
            return
        look = self._next_poll(self.clock.now)
        if look < self.healthy_until:
            group = self.worker_groups
            self.clock.at(look, lambda: self._healthy_look(group))

    def _healthy_at(self, moment: float) -> bool:
        return (self.state is PodState.TRAINING or self.state is PodState.FAILING) and moment < self.healthy_until

    def _healthy_look(self, group: int) -> None:
        """A look that finds the workers HEALTHY reads the rendezvous (`num_nodes_waiting`): without the store the
        read raises RendezvousConnectionError out of the agent, which stops its workers on the way out
        (`SimpleElasticAgent.run` -> `_shutdown`); with nodes waiting for the next round, the agent stops its
        workers and joins that round (`_restart_workers`: a membership change, not counted against max_restarts)."""
        if group != self.worker_groups or not self._healthy_at(self.clock.now):
            return  # a later group of workers, or no longer healthy at this look
        host = self.group.store_host
        if host.state is PodState.EXITED:
            self._log(What.RENDEZVOUS_LOST, reason=host.name)
            self._stop_healthy_workers(lambda: self._rendezvous_failed("RendezvousConnectionError"))
        elif self.group.in_state[PodState.WAITING]:
            self._log(What.MEMBERSHIP_CHANGE, count=self.group.in_state[PodState.WAITING])
            self._stop_healthy_workers(lambda: self._wait_in_rendezvous("for the next round"))

    def _stop_healthy_workers(self, then: Callable[[], None]) -> None:
        """The agent stops its running workers (SIGTERM, then their exit: `shutdown` s, as on a signal), then goes
        on; their processes gone, peers' collectives break."""
        self._change_course(PodState.FAILING)
        self.healthy_until = self.clock.now
        stopped = on_the_clock(self.clock.now + self.timing.shutdown)
        self._later(self.timing.shutdown, then)
        self.clock.at(stopped, lambda: self.group.peer_died(self, stopped))

    def _rendezvous_failed(self, error: str) -> None:
        self.group.close_rendezvous(self)  # the error leaves `launch_agent` like any but a signal
        if self.plugin.collateral_recoverable:  # the peer it waited for is gone: a consequence, too
            self._collateral()
            return
        self._change_course(PodState.STOPPING)
        stamp = self._own_clock(self.clock.now)
        self._finish(ErrorRecord(CODE_RENDEZVOUS_TIMEOUT, False, stamp, self.worker_name, error))

    def restarted(self) -> None:
        """The rendezvous round completed with every pod: a new worker group trains."""
        if self.state is PodState.WAITING:
            self._change_course(PodState.TRAINING)
            self._new_worker_group()
            self._log(What.RENDEZVOUS_DONE, reason=WORKERS_RESTARTED)
            self.group.training_may_end()

    def complete(self, why: str = "") -> None:
        """The workers return. The agent sees it at its next look, joins the worker processes, and waits at the exit
        barrier for the other agents; until it passes the barrier a signal still stops it (torch `run`)."""
        if self.state is not PodState.TRAINING:
            return
        self._change_course(PodState.FINISHED)
        self._log(What.TRAINING_COMPLETE, reason=why)
        joined = self._next_poll(self.clock.now) + self.timing.finished_worker_exit
        self._later(joined - self.clock.now, self._at_exit_barrier)

    def _at_exit_barrier(self) -> None:
        self._change_course(PodState.AT_EXIT_BARRIER)
        self._log(What.EXIT_BARRIER)
        self._later(defaults.EXIT_BARRIER_TIMEOUT_SECONDS, lambda: self.exit_barrier_passed("timed out"))
        self.group.arrived_at_exit_barrier(self)

    def exit_barrier_passed(self, why: str) -> None:
        """The agent returns success: rank 0's entrypoint writes the outputs, the others raise IgnoreOutputs. A
        barrier that fails (timed out, the store gone) is only logged by torch: the agent succeeds all the same.

        Rank 0 uploads `outputs.pb` whether or not the task declares outputs: flytekit 1.16 `PythonTask.
        dispatch_execute` gives an empty LiteralMap for a task that returns nothing, `_dispatch_execute` writes it,
        and real runs leave it (0 bytes)."""
        if self.state is not PodState.AT_EXIT_BARRIER:
            return
        self._change_course(PodState.STOPPING)
        if self.held_signal is not None:
            # `run` catches the re-raised SignalException, shuts down (its workers are gone) and raises it on: as
            # any signal, it leaves the rendezvous open
            self._log(What.HELD_SIGNAL_RAISED, reason=why)
            self._on_signal_caught(self.held_signal)
            return
        self._log(What.EXIT_BARRIER_PASSED, reason=why)
        self.group.close_rendezvous(self)
        self._finish(None, outputs=self.rank0)

    def checkpoint(self) -> bool:
        if self.state is PodState.TRAINING and self.rank0:
            self._log(What.CHECKPOINT)
            return True
        return False

    def sigkill(self) -> None:
        if self.state is not PodState.EXITED:
            self._exit(SIGKILL_EXIT, "killed, anything not yet uploaded is lost")
            self.group.peer_died(self, self.clock.now)  # whatever workers were left die with it


_PLAIN = (float, int)  # the simulator's numbers; anything else is the prover's exact kind


def _tick_at_or_after(first: float, period: float, at: float) -> float:
    """The first moment of `first`, `first + period`, `first + 2 * period`, ... at or after `at`: where a loop
    that acts, then sleeps `period`, acts next (the agent's looks at its workers, a waiting node's reads).

    Counted in whole nanoseconds, the clock's grid: a moment 1 ns past a tick is past it (on both the simulator's
    floats and the prover's exact numbers), which a float ceiling with a tolerance would take for the tick. A period
    is the number its float stands for (`nanoseconds.exact`, as the prover reads it); one of a fractional number of
    nanoseconds (1.5e-09) is counted exactly too, so no tick is taken before `at`."""
    if at <= first:
        return first
    if first.__class__ in _PLAIN and at.__class__ in _PLAIN and period.__class__ in _PLAIN:
        # in whole nanoseconds throughout: a float sum or difference of moments near 2**22 s is off by up to one
        start, step = round(first * PER_SECOND), whole_nanoseconds(period)
        gap = round(at * PER_SECOND) - start
        if step is not None:
            return (start + -(-gap // step) * step) / PER_SECOND
        return _fractional_tick_at_or_after(start, period, gap)
    return first + math.ceil((at - first) / period) * period


def _fractional_tick_at_or_after(start: int, period: float, gap: int) -> float:
    """`_tick_at_or_after` for a period of a fractional number of nanoseconds, from `start` ns to `gap` ns after
    it: in exact numbers (nobody sets such a period, so its cost does not matter), rounded to the clock's
    nanosecond, a tick within rounding of `at` being at it."""
    step = exact(period) * PER_SECOND  # the number the float stands for, as the prover reads it
    ticks = math.ceil((gap - Fraction(ROUNDING_NS)) / step)
    return round(start + ticks * step) / PER_SECOND


class SimulatedPods:
    """The pods of one simulated attempt, on the simulated clock; what the world asks of any pods."""

    def __init__(self, spec: ScenarioSpec, attempt: int, resumed_from: Optional[int]) -> None:
        self.spec = spec
        self.attempt = attempt
        self.resumed_from = resumed_from
        self.pods: dict[str, Pod] = {}
        # how many pods are in each state: "is every pod waiting / training?" is asked once per pod's arrival, so
        # counting them each time would make an attempt quadratic in its pods
        self.in_state: dict[PodState, int] = _NO_POD.copy()
        self.collective_broken = False
        self.rendezvous_closed_by: Optional[str] = None  # the agent that closed the rendezvous (torch `shutdown`)
        self.clock: Optional[Clock] = None  # the attempt's, from `start`
        self.checkpoint_written = False
        self.completion_due: Optional[float] = None  # when the training ended, while some pod was not training
        self.training_completed = False
        self.joined_first = 0  # pods that have joined the first rendezvous round
        self.arrived_at_barrier = 0  # agents counted at the exit barrier, killed ones too: the count is the store's

    # --- the interface the world uses (shared with the real pods) ---------------------------------
    def start(self, world: "Attempt") -> Clock:
        world.clock = Clock()
        self.clock = world.clock
        spec, plugin = self.spec, plugin_for(self.spec.plugin)
        environments = job_environments(spec.pods, spec.elastic, spec.error_aggregation)
        for index, (name, env) in enumerate(environments.items()):
            self.pods[name] = Pod(
                name,
                rank0=index == 0,
                timing=spec.timings[name],
                launch=spec.launch,
                plugin=plugin,
                fork=spec.fork,
                grace=spec.grace,
                entrypoint=spec.entrypoint,
                error_file_name=error_file_name(env, spec.seed, self.attempt, name),
                worker_name=reported_worker(env),
                world=world,
                group=self,
            )
        return world.clock

    def sigterm(self, pod: str, lands_during_fork: bool) -> None:
        self.pods[pod].sigterm(lands_during_fork)

    def sigkill(self, pod: str) -> None:
        self.pods[pod].sigkill()

    def worker_error(self, pod: str, recoverable: bool, message: str) -> None:
        self.pods[pod].worker_error(recoverable, message, genuine=True)

    def checkpoint(self) -> None:
        if self.pods[self.spec.pods[0]].checkpoint():
            self.checkpoint_written = True

    def complete(self) -> None:
        """The training's end (a completion event, or `task.training_seconds`). Real workers read it at every step
        and those started later at their first (`localjob/workloads.py` `due`), so it stands: with a pod not
        training now (in its first rendezvous, or restarting its workers), the workers return once every pod
        trains again. A pod that never does (it has failed or left) ends the job another way."""
        if self._every_pod(PodState.TRAINING):
            self._end_training("")
        elif self.completion_due is None:
            self.completion_due = self.clock.now

    def training_may_end(self) -> None:
        """Asked whenever a pod's workers (re)start: a training that ended while some pod was not training ends for
        its workers once every pod trains (after a restart's round; or a completion during the first round)."""
        if self.completion_due is not None and self._every_pod(PodState.TRAINING):
            ended, self.completion_due = self.completion_due, None
            self._end_training(f"the training ended at {ended:.3f}, before every pod trained")

    def _end_training(self, why: str) -> None:
        self.training_completed = True
        for pod in list(self.pods.values()):
            pod.complete(why)

    def wrote_checkpoint(self) -> bool:
        return self.checkpoint_written

    def completed(self) -> bool:
        return self.training_completed

    def resumed(self) -> bool:
        return self.resumed_from is not None

    def resumed_step(self) -> Optional[int]:
        return None

    def snapshot(self, uploads: tuple[Upload, ...]) -> tuple[MemoryPrefix, tuple[Upload, ...]]:
        """Everything uploaded so far (propeller's round runs after the instant's other events)."""
        objects = {upload.name: upload for upload in uploads}  # a later upload of the same key overwrites
        return MemoryPrefix([(name, upload.data()) for name, upload in objects.items()], "attempt-prefix"), uploads

    def close(self) -> None:
        """Nothing to reap: simulated pods end with the clock."""

    # --- between simulated pods ---------------------------------------------------------------------
    @property
    def store_host(self) -> Pod:
        """The pod whose agent hosts the c10d rendezvous store: worker 0, which PET_RDZV_ENDPOINT names."""
        return self.pods[self.spec.pods[0]]

    def joined_first_round(self) -> None:
        """torch `dynamic_rendezvous.py` `_add_to_participants`: the round completes as the participants reach
        max_nodes (the job's size: min = max = its pods), so every pod's workers start as the last pod joins. The
        other pods learn it at their next read of the rendezvous state, up to a second later: not modelled, as for a
        restart's round (`joined`). A pod that left the round leaves it incomplete here; torch keeps a dead
        participant until its heartbeats are 15 s old (`_sanitize`: 3 x the 5 s keep-alive), so a last join within
        that window completes the round with it: not modelled."""
        self.joined_first += 1
        if self.joined_first == len(self.pods) and self._every_pod(PodState.STARTING):
            for pod in self.pods.values():
                pod.first_round_complete()
            self.training_may_end()

    def joined(self, pod: Pod) -> None:
        """A pod entered a rendezvous round. Without the store it fails; with every pod of the job waiting (the
        job's size is fixed: min = max = its pods) the round completes after a rendezvous's time; a healthy agent
        finds it in the wait list at its next look. Without the store, or closed, it fails at its next read."""
        if self.store_host.state is PodState.EXITED or self.rendezvous_closed_by is not None:
            pod.read_at_next_tick()
            return
        for other in self.pods.values():
            if other is not pod:
                other.look_at_the_rendezvous()  # a healthy agent finds it in the wait list at its next look
        if self._every_pod(PodState.WAITING):
            pods = list(self.pods.values())
            done = pod.clock.now + max(p.timing.rendezvous for p in pods)

            def round_complete() -> None:
                if self._every_pod(PodState.WAITING):
                    self.collective_broken = False  # a new process group
                    for p in pods:
                        p.restarted()

            pod.clock.at(done, round_complete)

    def arrived_at_exit_barrier(self, pod: Pod) -> None:
        """torch `utils/store.py` `barrier`: each agent adds one to a counter in the store and waits until the count
        reaches the job's agents, so one that arrived and was killed there still counts; without the store the wait
        fails at once."""
        if self.store_host.state is PodState.EXITED:
            pod.exit_barrier_passed("the rendezvous store is gone")
            return
        self.arrived_at_barrier += 1
        if self.arrived_at_barrier == len(self.pods):
            for p in list(self.pods.values()):
                p.exit_barrier_passed("every agent arrived")

    def _every_pod(self, state: PodState) -> bool:
        return self.in_state[state] == len(self.pods)

    def exited(self, pod: Pod) -> None:
        if pod is self.store_host:
            for other in self.pods.values():
                other.store_gone()

    def close_rendezvous(self, pod: Pod) -> None:
        """torch `launcher/api.py` `launch_agent`: an agent that returns, or raises anything but a signal, shuts its
        rendezvous handler down on the way out (`DynamicRendezvousHandler.shutdown` -> `_close`), writing `closed`
        into the store while the store is still up; a signal leaves it open. Every node waiting for a round
        fails at its next read, and every later join at once."""
        if self.rendezvous_closed_by is not None or self.store_host.state is PodState.EXITED:
            return
        self.rendezvous_closed_by = pod.name
        for other in self.pods.values():
            if other is not pod:
                other.rendezvous_changed()

    def peer_died(self, pod: Pod, at: float) -> None:
        # One process group spans every pod: the first death breaks it for everyone; later deaths change nothing.
        if self.collective_broken:
            return
        self.collective_broken = True
        for other in self.pods.values():
            if other is not pod:
                other.clock.at(at, other.peer_death)
