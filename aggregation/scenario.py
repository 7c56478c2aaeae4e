"""Load a scenario (`aggsim.v1.Scenario` in protobuf text format), check it, and apply the defaults.

The result is a `ScenarioSpec` of frozen records with every default filled in, which the pod,
operator and engine models read. A malformed or inconsistent scenario raises `ScenarioError`, whose
message names the file, the line and the field.
"""

from __future__ import annotations

import codecs
import math
import os
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from google.protobuf import text_format

from aggregation import defaults
from aggregation.kinds import CleanPodPolicy, Entrypoint, PluginVariant, ReplicaMapOrder
from aggregation.nanoseconds import PER_SECOND
from aggregation.propeller import PropellerConfig, payload_limit
from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from aggregation.textproto_lines import field_lines, parent_path

#: the scenario schema's enum value for each plugin variant
PLUGIN_VARIANTS = {
    PluginVariant.UPSTREAM: pb.UPSTREAM,
    PluginVariant.SEED_PR: pb.SEED_PR,
    PluginVariant.RECOVERABLE: pb.RECOVERABLE,
}
VARIANT_NAMES = {value: variant for variant, value in PLUGIN_VARIANTS.items()}
CLEAN_POD_POLICIES = {
    pb.CLEAN_POD_POLICY_NONE: CleanPodPolicy.NONE,
    pb.CLEAN_POD_POLICY_RUNNING: CleanPodPolicy.RUNNING,
    pb.CLEAN_POD_POLICY_ALL: CleanPodPolicy.ALL,
}
ENTRYPOINTS = {
    pb.FAST_EXECUTE: Entrypoint.FAST_EXECUTE,
    pb.EXECUTE: Entrypoint.EXECUTE,
    pb.INIT_THEN_EXECUTE: Entrypoint.INIT_THEN_EXECUTE,
}


class ScenarioError(ValueError):
    """A scenario that cannot be simulated; the message is one line: FILE:LINE: FIELD: problem."""


class ModelRefusal(ScenarioError):
    """A valid scenario that the model cannot play faithfully at this point; the message says what and why in one
    line. `simulate` exits with it. A sweep counts the point as REFUSED and goes on. `prove` maps the region where
    it happens. `kind` names the refusal without this point's instants, so it reads the same across a region."""

    kind = "the model refuses the point"
    #: what a real run meets where the model refuses a copy of a scenario it plays, in the operator and propeller it
    #: drives or in its pods (`aggregation.neighbourhood` counts such a copy as a verdict of its own); None for a
    #: refusal of the scenario itself, which `run-local` meets before any pod starts
    real_runs_meet: Optional[str] = None


@dataclass(frozen=True)
class ElasticLaunch:
    """The task's torch elastic settings, one for every pod: flytekitplugins-kfpytorch
    `PytorchElasticFunctionTask._execute` builds one `LaunchConfig` from the task's `Elastic`."""

    max_restarts: int = 0  # worker-group restarts, spent by each agent on its own (torch's `remaining_restarts`)
    join_timeout: float = defaults.JOIN_TIMEOUT_SECONDS  # rdzv_configs' join_timeout: a round's wait for its nodes
    monitor_interval: float = defaults.MONITOR_INTERVAL_SECONDS  # the agent looks at its workers this often


@dataclass(frozen=True)
class PodTiming:
    rendezvous: float = defaults.RENDEZVOUS_SECONDS
    shutdown: float = defaults.SHUTDOWN_SECONDS
    upload: float = defaults.UPLOAD_SECONDS
    detection: float = defaults.DETECTION_SECONDS
    peer_failure_after: float = defaults.PEER_FAILURE_SECONDS  # a peer's death -> this pod's worker fails
    peer_failure_recoverable: bool = False
    clock_offset: float = 0.0  # this node's clock minus true time: shifts the stamps it writes, not its actions
    exit: float = defaults.EXIT_SECONDS  # the entrypoint is done -> the pod's process has exited
    failed_worker_exit: float = defaults.FAILED_WORKER_EXIT_SECONDS["spawn"]  # a worker raised -> its process is gone
    finished_worker_exit: float = defaults.FINISHED_WORKER_EXIT_SECONDS["spawn"]  # all returned -> processes gone
    first_poll: Optional[float] = None  # workers started -> the agent's first look (None: one monitor interval)
    file_time_lag: float = 0.0  # a failed worker's error file's mtime trails the failure (the kernel's coarse clock)


EVENT_KINDS = ("preemption", "worker_error", "completion", "checkpoint", "storage_outage", "truncated_upload")
#: events that may come after the task's training time (the store's and the upload's); the others are refused there
AFTER_THE_END_KINDS = ("completion", "storage_outage", "truncated_upload")


@dataclass(frozen=True)
class SimEvent:
    at: float
    kind: str  # "preemption" | "worker_error" | "completion" | "checkpoint" | "storage_outage" | "truncated_upload"
    pod: str = ""
    recoverable: bool = False
    lands_during_fork: bool = False
    pod_deleted: bool = False  # preemption: the pod object is deleted first, and the operator sees it
    message: str = ""
    duration: float = 0.0  # storage_outage
    keep_bytes: int = 0  # truncated_upload


#: a pod named by the training operator: `<job>-worker-<index>` or `<job>-master-<index>`
_GENERATED_POD_NAME = re.compile(r"(.+)-(?:worker|master)-\d+")
#: a Kubernetes namespace name: an RFC 1123 DNS label
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class ScenarioSpec:
    name: str
    pods: tuple[str, ...]
    nproc_per_node: int
    elastic: bool
    clean_pod_policy: CleanPodPolicy
    grace: float
    fork: bool
    retries: int
    outputs_declared: bool
    interruptible: bool
    training_seconds: float
    error_aggregation: bool
    observation_delay: float
    plugin: PluginVariant
    propeller: PropellerConfig = PropellerConfig()  # budgets and limits: the scenario's, or the deployment's
    round_retry: float = defaults.ROUND_RETRY_SECONDS
    pod_status_delay: float = defaults.POD_STATUS_SECONDS  # a pod's exit -> the operator hears of it
    cleanup_delay: float = defaults.CLEANUP_SECONDS  # the job turns terminal -> the operator's CleanPodPolicy deletions
    reconcile_delay: float = defaults.RECONCILE_SECONDS  # a pod update wakes a reconcile -> it reads the pods
    active_deadline: Optional[int] = None  # RunPolicy.ActiveDeadlineSeconds, None when Flyte leaves it unset
    ttl_after_finished: Optional[int] = None  # RunPolicy.TTLSecondsAfterFinished, None when Flyte leaves it unset
    namespace: str = defaults.NAMESPACE
    entrypoint: Entrypoint = Entrypoint.FAST_EXECUTE  # the container's PID 1
    launch: ElasticLaunch = ElasticLaunch()
    timings: dict[str, PodTiming] = field(default_factory=dict)
    attempts: tuple[tuple[SimEvent, ...], ...] = ()
    #: per listed attempt, Go's map order in the operator's `UpdateJobStatus` (None: unset, the moment it decides is
    #: refused)
    map_orders: tuple[Optional[ReplicaMapOrder], ...] = ()
    seed: int = 0
    description: str = ""

    @property
    def job_name(self) -> str:
        """The PyTorchJob's name, as the operator's messages say it: the name its pods were given by (training-operator
        `GenGeneralName`: `<job>-<replica type>-<index>`), or the scenario's name when the pods are named otherwise."""
        named = _GENERATED_POD_NAME.fullmatch(self.pods[0])
        return named.group(1) if named else self.name

    def events_for(self, attempt: int) -> tuple[SimEvent, ...]:
        """Attempt N's events; attempts beyond the scenario's list run clean to completion."""
        return self.attempts[attempt] if attempt < len(self.attempts) else ()

    def completion_for(self, attempt: int) -> float:
        """When attempt N's training completes: its earliest completion event's moment (events are timed: their order
        in the file is no part of the scenario), else the task's training time."""
        return min((e.at for e in self.events_for(attempt) if e.kind == "completion"), default=self.training_seconds)

    def map_order_for(self, attempt: int) -> Optional[ReplicaMapOrder]:
        """Attempt N's replica map order, None when the scenario leaves it to Go's random order."""
        return self.map_orders[attempt] if attempt < len(self.map_orders) else None

    def with_map_order(self, attempt: int, order: ReplicaMapOrder) -> "ScenarioSpec":
        """The scenario with attempt N's map order pinned (a listed attempt: only those can reach the moment it
        decides, as the others train to their end)."""
        orders = list(self.map_orders)
        orders[attempt] = order
        return replace(self, map_orders=tuple(orders))

    def propeller_config(self) -> PropellerConfig:
        """The scenario's propeller settings (budgets and limits) as the model's `PropellerConfig`."""
        return self.propeller

    def with_deployment(self, deployment) -> "ScenarioSpec":
        """The scenario played on a deployment: its flag and its propeller settings (see `deployment.py`)."""
        return replace(
            self, error_aggregation=deployment.error_aggregation, propeller=deployment.propeller_config(self.propeller)
        )

    def with_plugin(self, plugin: str) -> "ScenarioSpec":
        return replace(self, plugin=PluginVariant(plugin))

    def with_aggregation(self, on: bool) -> "ScenarioSpec":
        return replace(self, error_aggregation=on)


def monitor_interval_of(job: pb.Job) -> float:
    """The job's monitor interval: what it says, or flytekit's Elastic default."""
    if job.HasField("monitor_interval_seconds"):
        return job.monitor_interval_seconds
    return defaults.MONITOR_INTERVAL_SECONDS


def _timing(base: PodTiming, message: pb.PodTimings) -> PodTiming:
    values = {}
    for proto_name, attribute in (
        ("rendezvous_seconds", "rendezvous"),
        ("agent_shutdown_seconds", "shutdown"),
        ("upload_seconds", "upload"),
        ("failure_detection_seconds", "detection"),
        ("clock_offset_seconds", "clock_offset"),
        ("exit_seconds", "exit"),
        ("failed_worker_exit_seconds", "failed_worker_exit"),
        ("finished_worker_exit_seconds", "finished_worker_exit"),
        ("first_monitor_poll_seconds", "first_poll"),
        ("file_time_lag_seconds", "file_time_lag"),
    ):
        if message.HasField(proto_name):
            values[attribute] = getattr(message, proto_name)
    reaction = message.on_peer_death
    which = reaction.WhichOneof("reaction")
    if which == "fail":
        values["peer_failure_after"] = (
            reaction.fail.after_seconds if reaction.fail.HasField("after_seconds") else defaults.PEER_FAILURE_SECONDS
        )
        values["peer_failure_recoverable"] = reaction.fail.recoverable
    return replace(base, **values)


def _propeller_config(propeller: pb.Propeller) -> PropellerConfig:
    """The budgets and limits a scenario sets; the rest keep propeller's defaults (`defaults.py`)."""
    values = {}
    for proto_name, attribute in (
        ("max_node_retries_system_failures", "max_node_retries_system_failures"),
        ("interruptible_failure_threshold", "interruptible_failure_threshold"),
        ("max_workflow_retries", "max_workflow_retries"),
    ):
        if propeller.HasField(proto_name):
            values[attribute] = getattr(propeller, proto_name)
    if propeller.HasField("max_download_mbs"):
        values["max_payload_bytes"] = payload_limit(propeller.max_download_mbs)
    return PropellerConfig(ignore_retry_cause=propeller.ignore_retry_cause, **values)


class _Locator:
    """Finds the line of a field in the scenario text, for error messages, by the field path the error names
    (`textproto_lines`). A variant of the scenario (a sweep's or a proof's point) has no text of its own: its errors
    name the file and the field, never a line of the file that holds some other field of that name."""

    def __init__(self, path: str, text: Optional[str]) -> None:
        self.path = path
        self.text = text
        self._lines: Optional[dict[str, int]] = None  # read at the first error

    def line_of(self, field_path: str) -> int:
        """The line of the field, or of the nearest field that holds it when it is not written (1 at the top); 0 for
        a variant."""
        if self.text is None:
            return 0
        if self._lines is None:
            self._lines = field_lines(self.text, pb.Scenario.DESCRIPTOR)
        path = field_path
        while path:
            line = self._lines.get(path)
            if line is not None:
                return line
            path = parent_path(path)
        return 1

    def error(self, field_path: str, problem: str, at: Optional[str] = None) -> ScenarioError:
        """The error about `field_path`, located at the field `at` (by default that one)."""
        line = self.line_of(at or field_path)
        where = f"{self.path}:{line}" if line else f"{self.path} (as varied)"
        return ScenarioError(f"{where}: {field_path}: {problem}")


@dataclass(frozen=True)
class ScenarioSource:
    """A parsed scenario file: the message as written, and its text (for error locations)."""

    message: pb.Scenario
    text: str
    path: str

    def __reduce__(self):
        """Pickled as its bytes (a sweep's worker processes get it so): the generated class is registered under the
        proto's own package (`aggsim.v1`), not this module's path, so pickle cannot find it by name."""
        return _source_from_bytes, (self.message.SerializeToString(), self.text, self.path)

    def with_profile(self, profile: Optional[pb.TimingsProfile]) -> ScenarioSource:
        """This scenario with a timings profile's medians as its pods' default timings (`aggregation.profile`)."""
        from aggregation.profile import apply_profile

        return self if profile is None else replace(self, message=apply_profile(self.message, profile))

    def spec(self, plugin_override: Optional[str] = None, message: Optional[pb.Scenario] = None) -> ScenarioSpec:
        """Check the scenario (or a variant of it, e.g. from a sweep) and apply the defaults."""
        as_written = message is None or message == self.message
        where = _Locator(self.path, self.text if as_written else None)
        return _check(self.message if message is None else message, where, plugin_override)


def _source_from_bytes(data: bytes, text: str, path: str) -> ScenarioSource:
    return ScenarioSource(pb.Scenario.FromString(data), text, path)


def parse_text_proto(text: str, message, path: str, error: type[ValueError] = ScenarioError):
    """`message` parsed from protobuf text format; `error` (one line, FILE:LINE: problem) if it is not."""
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as e:
        problem = str(e).split(" : ", 1)[-1] if " : " in str(e) else str(e)
        raise error(f"{path}:{e.GetLine() or 1}: {problem}") from None
    return message


def parse_scenario_source(text: str, path: str = "<scenario>") -> ScenarioSource:
    return ScenarioSource(parse_text_proto(text, pb.Scenario(), path), text, path)


#: the scenarios shipped with the package (`aggsim simulate preemption_during_training`)
SHIPPED_SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def shipped_scenario_names() -> list[str]:
    return sorted(p.stem for p in SHIPPED_SCENARIOS.glob("*.textproto"))


def resolve_scenario_path(path: "str | os.PathLike[str]") -> str:
    """A scenario file's path. One written as a file's (a '/' in it, or the `.textproto` suffix) is that file, and
    never a shipped scenario of the same name: run from another directory, `x.textproto` must not quietly play a
    shipped file. A bare name is the file of that name where there is one (not a directory), else the shipped
    scenario."""
    path = os.fspath(path)
    if path == "":
        raise ScenarioError("no scenario named (an empty argument): name a .textproto file or a shipped scenario")
    if path == "-":
        raise ScenarioError(
            "-: a scenario is not read from standard input (a pipe or a terminal may never end): name a .textproto "
            "file or a shipped scenario"
        )
    here = Path(path)
    if "/" in path or path.endswith(".textproto") or (here.exists() and not here.is_dir()):
        return path
    shipped = SHIPPED_SCENARIOS / f"{path}.textproto"
    if shipped.is_file():
        return str(shipped)
    if here.is_dir():
        raise ScenarioError(f"{path}: a directory, not a scenario (a .textproto file or a shipped scenario's name)")
    raise ScenarioError(
        f"{path}: no such file, and no shipped scenario of that name (shipped: {', '.join(shipped_scenario_names())})"
    )


def read_text_file(path: str, error: type[ValueError] = ScenarioError, what: str = "a scenario") -> str:
    """A text-format input file's text: a regular file (never a FIFO or a device: they can block or never end),
    at most `defaults.MAX_SCENARIO_BYTES`, in UTF-8; `error` (one line naming the file) otherwise."""
    limit = defaults.MAX_SCENARIO_BYTES
    try:
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as f:
            status = os.fstat(f.fileno())
            if not stat.S_ISREG(status.st_mode):
                raise error(f"{path}: not a regular file ({what} is a .textproto file)")
            if status.st_size > limit:
                raise error(f"{path}: {status.st_size:,} bytes, over the {limit:,}-byte limit for {what}")
            data = f.read(limit + 1)
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror}") from None
    if len(data) > limit:  # it grew while we read it
        raise error(f"{path}: over the {limit:,}-byte limit for {what}")
    # a byte order mark, which some editors write first, is no part of the text
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text (byte {start + e.start})") from None


def read_scenario(path: str) -> ScenarioSource:
    """Read a scenario file (`read_text_file`), or a shipped scenario by name."""
    path = resolve_scenario_path(path)
    return parse_scenario_source(read_text_file(path), path)


def parse_scenario(text: str, path: str = "<scenario>", plugin_override: Optional[str] = None) -> ScenarioSpec:
    """Parse and check scenario text; raises ScenarioError naming file, line and field."""
    return parse_scenario_source(text, path).spec(plugin_override)


def load_scenario(path: str, plugin_override: Optional[str] = None) -> ScenarioSpec:
    """Read, parse and check a scenario file; raises ScenarioError naming file, line and field."""
    return read_scenario(path).spec(plugin_override)


#: seconds fields that may be negative (a clock behind true time, a file time after its failure's reading), each
#: within its own bound either side of 0
SIGNED_SECONDS = {
    "clock_offset_seconds": defaults.MAX_CLOCK_OFFSET_SECONDS,
    "file_time_lag_seconds": defaults.MAX_FILE_TIME_LAG_SECONDS,
}


def seconds_problem(value: float, signed_bound: Optional[float] = None) -> Optional[str]:
    """What is wrong with a duration or instant in seconds, if anything (scenario fields and timings profiles); a
    signed one lies within `signed_bound` either side of 0."""
    if not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if signed_bound is not None and abs(value) > signed_bound:
        return f"must be within +-{signed_bound:g} s, got {value}"
    if value < 0 and signed_bound is None:
        return f"must be >= 0, got {value}"
    if abs(value) > defaults.MAX_SCENARIO_SECONDS:
        return f"{value:g} s is beyond the {defaults.MAX_SCENARIO_SECONDS:g} s a scenario may span"
    return None


def timing_bound_problem(field: str, value) -> Optional[str]:
    """What is wrong with a value of a `PodTimings` field beyond its type (`seconds_problem`), if anything: the
    field's own bound. One rule for a scenario's timings blocks and a timings profile's phases. `value` may be
    symbolic (`aggsim prove`): it is only compared."""
    if field == "agent_shutdown_seconds" and value > defaults.TORCH_SHUTDOWN_TIMEOUT_SECONDS:
        return (
            f"must be at most {defaults.TORCH_SHUTDOWN_TIMEOUT_SECONDS:g}, got {value}: torch's agent SIGKILLs its "
            "workers that long after it signals them (LaunchConfig.shutdown_timeout)"
        )
    return None


def timing_problem(field: str, value: float) -> Optional[str]:
    """What is wrong with a measured value of a `PodTimings` field, if anything: its type's bounds, then its own."""
    return seconds_problem(value, SIGNED_SECONDS.get(field)) or timing_bound_problem(field, value)


def _value_problem(descriptor, value) -> Optional[str]:
    """What is wrong with one scalar field's value, if anything."""
    name = descriptor.name
    if descriptor.type == descriptor.TYPE_ENUM:
        if descriptor.enum_type.values_by_number.get(value) is None:
            names = ", ".join(v.name for v in descriptor.enum_type.values)
            return f"{value} is not a {descriptor.enum_type.name} (expected one of {names})"
    elif descriptor.type in (descriptor.TYPE_DOUBLE, descriptor.TYPE_FLOAT):
        if name.endswith("_seconds"):
            return seconds_problem(value, SIGNED_SECONDS.get(name))
        if not math.isfinite(value):
            return f"must be a finite number, got {value}"
    elif name == "max_download_mbs" and value < 0:
        return f"must be >= 0, got {value}"
    elif name == "nproc_per_node" and value > defaults.MAX_NPROC_PER_NODE:
        return f"{value} workers per pod is more than the model plays (at most {defaults.MAX_NPROC_PER_NODE})"
    return None


def _check_values(message, where: _Locator, path: str = "") -> None:
    """Every set field of the scenario against its type, in one place: enum numbers the schema defines, finite
    times within `defaults.MAX_SCENARIO_SECONDS` (non-negative unless the field is a clock offset), integers
    within what the model plays. Raises ScenarioError naming the field."""
    for descriptor, value in message.ListFields():
        items = list(value) if descriptor.is_repeated else [value]
        for index, item in enumerate(items):
            field_path = f"{path}{descriptor.name}" + (f"[{index}]" if descriptor.is_repeated else "")
            if descriptor.type == descriptor.TYPE_MESSAGE:
                _check_values(item, where, field_path + ".")
                continue
            problem = _value_problem(descriptor, item)
            if problem is not None:
                raise where.error(field_path, problem)
    if path == "" and len(message.attempts) > defaults.MAX_ATTEMPTS:
        raise where.error(
            "attempts",
            f"{len(message.attempts)} attempts is more than the simulator plays (at most {defaults.MAX_ATTEMPTS})",
            at=f"attempts[{defaults.MAX_ATTEMPTS}]",
        )


def _check(message: pb.Scenario, where: _Locator, plugin_override: Optional[str]) -> ScenarioSpec:
    _check_values(message, where)
    job = message.job
    pods = tuple(job.pods)
    if not pods:
        raise where.error("job.pods", "at least one pod is required")
    if "" in pods:  # no event could name it, and every line of its timeline would show no actor
        raise where.error("job.pods", "a pod's name is empty", at=f"job.pods[{pods.index('')}]")
    if len(set(pods)) != len(pods):
        second = next(i for i, p in enumerate(pods) if p in pods[:i])
        raise where.error("job.pods", f"duplicate pod {pods[second]!r}", at=f"job.pods[{second}]")

    for replicas in ("min_replicas", "max_replicas"):
        value = getattr(job, replicas)
        if value and value != len(pods):
            raise where.error(
                f"job.{replicas}",
                f"{value} differs from the {len(pods)} pods listed: the model plays a job of fixed size "
                "(torch elastic's min = max nodes = the pods), not one that shrinks or grows",
            )

    if plugin_override is not None:
        if plugin_override not in set(PluginVariant):
            names = ", ".join(v.value for v in PluginVariant)
            raise ScenarioError(f"--plugin: unknown plugin variant {plugin_override!r} (expected {names})")
        plugin = PluginVariant(plugin_override)
    elif message.plugin == pb.PLUGIN_VARIANT_UNSPECIFIED:
        raise where.error("plugin", "missing: set UPSTREAM, SEED_PR or RECOVERABLE (or pass --plugin)")
    else:
        plugin = VARIANT_NAMES[message.plugin]

    grace = (
        job.termination_grace_period_seconds
        if job.HasField("termination_grace_period_seconds")
        else defaults.TERMINATION_GRACE_SECONDS
    )
    training = message.task.training_seconds if message.task.HasField("training_seconds") else defaults.TRAINING_SECONDS
    # at least the model's clock tick: a shorter wait is no wait on a nanosecond clock (a Go Duration's unit), and
    # the rounds it would batch cannot be counted
    if message.propeller.HasField("round_retry_seconds") and not (
        1 / PER_SECOND <= message.propeller.round_retry_seconds < float("inf")
    ):
        raise where.error(
            "propeller.round_retry_seconds",
            f"must be at least 1 ns (1e-9) and finite, got {message.propeller.round_retry_seconds}",
        )

    # every timings block, by the path its errors name (each set field is finite, non-negative: `_check_values`)
    timings_blocks = [("timings", message.timings)] + [
        (f"pod_timings[{index}].timings", override.timings) for index, override in enumerate(message.pod_timings)
    ]
    for block, written in timings_blocks:
        if written.on_peer_death.HasField("wait_in_rendezvous"):
            # flytekitplugins-kfpytorch `PytorchElasticFunctionTask._execute` builds one LaunchConfig (max_restarts,
            # rdzv_configs' join_timeout) for every pod of the task: the job's two fields say it, once
            raise where.error(
                f"{block}.on_peer_death.wait_in_rendezvous",
                "retired: restarts and the join timeout are the task's (kfpytorch gives every pod one LaunchConfig): "
                "set job.max_restarts (at least 1: a failed worker group restarts through a new rendezvous round, "
                "where its agent waits for the lost peer) and job.join_timeout_seconds",
            )
        problem = timing_bound_problem("agent_shutdown_seconds", written.agent_shutdown_seconds)
        if problem:
            raise where.error(f"{block}.agent_shutdown_seconds", problem)
    join_timeout = job.join_timeout_seconds if job.HasField("join_timeout_seconds") else defaults.JOIN_TIMEOUT_SECONDS
    interval = monitor_interval_of(job)
    # the model's clock ticks in nanoseconds (`nanoseconds.on_the_clock`): an agent that looked more often than
    # each tick would look many times at one moment
    if not 1 / PER_SECOND <= interval <= defaults.MAX_MONITOR_INTERVAL_SECONDS:
        raise where.error(
            "job.monitor_interval_seconds",
            f"must be > 0 and at most {defaults.MAX_MONITOR_INTERVAL_SECONDS:g}, and at least 1e-09 (a nanosecond, "
            f"the model's clock tick), got {interval}",
        )
    # the cluster's latencies to the operator (finite and within a scenario's span: `_check_values`)
    pod_status = job.pod_status_seconds if job.HasField("pod_status_seconds") else defaults.POD_STATUS_SECONDS
    cleanup = job.cleanup_seconds if job.HasField("cleanup_seconds") else defaults.CLEANUP_SECONDS
    reconcile = job.reconcile_seconds if job.HasField("reconcile_seconds") else defaults.RECONCILE_SECONDS
    # RunPolicy: flyteplugins `ParseRunPolicy` sets a field only when it is not 0
    # a negative limit is passed at the job's first reconcile, before any pod exists: nothing the model plays
    for name, value, why in (
        ("active_deadline_seconds", job.active_deadline_seconds, "a negative deadline fails the job as it is created"),
        ("backoff_limit", job.backoff_limit, "a negative limit fails the job at its first reconcile (PastBackoffLimit: "
         "0 restarts >= the limit)"),
    ):  # fmt: skip
        if value < 0:
            raise where.error(
                f"job.{name}",
                f"must be > 0 (0 leaves it unset), got {value}: {why}, before any pod exists, which the model does "
                "not play",
            )
    deadline = job.active_deadline_seconds or None
    # a positive backoff limit never acts: with RestartPolicy Never no restart is counted, and no requeue either
    ttl_after_finished = job.ttl_seconds_after_finished or None
    namespace = job.namespace or defaults.NAMESPACE
    if not _NAMESPACE.fullmatch(namespace):
        raise where.error(
            "job.namespace",
            f"{namespace!r} is not a Kubernetes namespace (a DNS label: at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit)",
        )
    for block, written in timings_blocks:
        first = written.first_monitor_poll_seconds
        if written.HasField("first_monitor_poll_seconds") and not 0 < first <= interval:
            raise where.error(
                f"{block}.first_monitor_poll_seconds",
                f"must be > 0 and at most the monitor interval ({interval:g} s), got {first}",
            )
    start_method = "fork" if job.start_method == pb.FORK else "spawn"
    base = _timing(
        PodTiming(
            failed_worker_exit=defaults.FAILED_WORKER_EXIT_SECONDS[start_method],
            finished_worker_exit=defaults.FINISHED_WORKER_EXIT_SECONDS[start_method],
        ),
        message.timings,
    )
    timings = {pod: base for pod in pods}
    overridden: dict[str, int] = {}
    for index, override in enumerate(message.pod_timings):
        if override.pod not in timings:
            raise where.error(
                f"pod_timings[{index}].pod",
                f"unknown pod {override.pod!r} (pods: {', '.join(pods)})",
            )
        if override.pod in overridden:  # one entry would silently replace the other's timings
            raise where.error(
                f"pod_timings[{index}].pod",
                f"duplicate pod {override.pod!r} (pod_timings[{overridden[override.pod]}] sets its timings too: "
                "put them in one entry)",
            )
        overridden[override.pod] = index
        timings[override.pod] = _timing(base, override.timings)

    attempts, map_orders = [], []
    elastic = job.elastic if job.HasField("elastic") else True
    for a, attempt in enumerate(message.attempts):
        order = attempt.replica_map_order
        if order != pb.REPLICA_MAP_ORDER_UNSET:
            if elastic:
                raise where.error(
                    f"attempts[{a}].replica_map_order",
                    "an elastic job has Worker replicas only: no map order decides it",
                )
        map_orders.append(ReplicaMapOrder(pb.ReplicaMapOrder.Name(order)) if order else None)
        events = []
        for e, event in enumerate(attempt.events):
            field_path = f"attempts[{a}].events[{e}]"
            kind = event.WhichOneof("kind")
            if kind is None:
                raise where.error(field_path, f"missing: one of {', '.join(EVENT_KINDS)}")
            if kind in ("preemption", "worker_error", "truncated_upload") and not event.pod:
                raise where.error(f"{field_path}.pod", f"missing: a {kind} needs the pod it happens to")
            if kind == "storage_outage" and event.pod:
                raise where.error(f"{field_path}.pod", "a storage outage is the store's, not a pod's")
            if kind == "completion" and event.pod:
                raise where.error(f"{field_path}.pod", "a completion is the whole job's (training ends on every pod)")
            outage = event.storage_outage.duration_seconds
            if kind == "storage_outage" and not (0 < outage < float("inf")):
                raise where.error(
                    f"{field_path}.storage_outage.duration_seconds", f"must be > 0 and finite, got {outage}"
                )
            if event.pod and event.pod not in timings:
                raise where.error(f"{field_path}.pod", f"unknown pod {event.pod!r} (pods: {', '.join(pods)})")
            if event.at_seconds > training and kind not in AFTER_THE_END_KINDS:
                raise where.error(
                    f"{field_path}.at_seconds",
                    f"{event.at_seconds} is after the job ended (training ends at {training} s)",
                )
            if kind == "preemption" and event.preemption.lands_during_fork and job.start_method != pb.FORK:
                raise where.error(f"{field_path}.preemption.lands_during_fork", "only a fork start method forks")
            events.append(
                SimEvent(
                    at=event.at_seconds,
                    kind=kind,
                    pod=event.pod,
                    recoverable=event.worker_error.recoverable if kind == "worker_error" else False,
                    lands_during_fork=event.preemption.lands_during_fork if kind == "preemption" else False,
                    pod_deleted=event.preemption.pod_deleted if kind == "preemption" else False,
                    message=event.worker_error.message if kind == "worker_error" else "",
                    duration=outage if kind == "storage_outage" else 0.0,
                    keep_bytes=event.truncated_upload.keep_bytes if kind == "truncated_upload" else 0,
                )
            )
        attempts.append(tuple(sorted(events, key=lambda ev: ev.at)))

    propeller = message.propeller
    return ScenarioSpec(
        name=message.name or Path(where.path).stem,
        description=message.description,
        pods=pods,
        nproc_per_node=job.nproc_per_node or 1,
        elastic=elastic,
        clean_pod_policy=CLEAN_POD_POLICIES[job.clean_pod_policy],
        grace=grace,
        pod_status_delay=pod_status,
        cleanup_delay=cleanup,
        reconcile_delay=reconcile,
        active_deadline=deadline,
        ttl_after_finished=ttl_after_finished,
        namespace=namespace,
        fork=job.start_method == pb.FORK,
        retries=message.task.retries,
        outputs_declared=message.task.outputs_declared,
        interruptible=message.task.interruptible,
        entrypoint=ENTRYPOINTS[message.task.entrypoint],
        training_seconds=training,
        error_aggregation=propeller.error_aggregation,
        observation_delay=propeller.observation_delay_seconds,
        plugin=plugin,
        propeller=_propeller_config(propeller),
        round_retry=propeller.round_retry_seconds
        if propeller.HasField("round_retry_seconds")
        else defaults.ROUND_RETRY_SECONDS,
        launch=ElasticLaunch(max_restarts=job.max_restarts, join_timeout=join_timeout, monitor_interval=interval),
        timings=timings,
        attempts=tuple(attempts),
        map_orders=tuple(map_orders),
        seed=message.seed,
    )
