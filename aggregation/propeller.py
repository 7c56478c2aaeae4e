"""What propeller concludes at the round that observes a PyTorchJob's terminal condition.

Two steps, each mirroring one place in flyte v1.16.8:

1. `task_outcome`: the task phase. `kfoperators/common/common_operator.go` `GetPhaseInfo` maps the job
   condition; only on Succeeded does `flytepropeller/pkg/controller/nodes/task/handler.go`
   `ValidateOutput` run the error reader, then check `outputs.pb`.
2. `node_decision`: retry or not. `flytepropeller/pkg/controller/nodes/executor.go`
   `isEligibleForRetry` and the `RetriesExhausted|<code>` failure, with the defaults of
   `flytepropeller/pkg/controller/config/config.go`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Optional

from aggregation import defaults
from aggregation.gonumbers import wrap
from aggregation.kinds import JobCondition
from aggregation.propeller_store import PropellerStore
from aggregation.readers import RULE_FUTURES_HEAD_FAILED, ObservedError, ReadResult


class TaskPhase(str, enum.Enum):
    QUEUED = "QUEUED"  # the job's current condition is Created (GetPhaseInfo: PhaseInfoQueued "JobCreated")
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    RETRYABLE_FAILURE = "RETRYABLE_FAILURE"
    PERMANENT_FAILURE = "PERMANENT_FAILURE"
    ROUND_FAILED = "ROUND_FAILED"  # the reader returned a Go error: the round fails, nothing is decided


class Decision(str, enum.Enum):
    SUCCEED = "SUCCEED"
    RETRY = "RETRY"
    FAIL = "FAIL"
    WAIT = "WAIT"  # the job is still running


@dataclass(frozen=True)
class TaskOutcome:
    phase: TaskPhase
    error: Optional[ObservedError] = None
    reason: str = ""
    round_error: Optional[str] = None


#: the largest uint32: FailedAttempts (a uint32) can never exceed it, so at this limit rounds never abort
UINT32_MAX = (1 << 32) - 1
MIB = 1024 * 1024


def uint32(value: int) -> int:
    """Go's uint32 arithmetic (NodeStatus' Attempts and SystemFailures): the result modulo 2**32."""
    return value & UINT32_MAX


def payload_limit(max_download_mbs: int) -> int:
    """The error reader's size limit for `storage.limits.maxDownloadMBs`: flyteplugins `ioutils/
    remote_file_output_reader.go` `getMaxPayloadSize` (the reader is built with 0) takes `GetLimitMegabytes * 1024 *
    1024`, an int64 product that wraps as Go's does: past 8,796,093,022,207 MB the limit is negative or 0, and every
    non-empty error file is too large (0 MB is a limit of 0 bytes too, not "no limit")."""
    return wrap(max_download_mbs * MIB, 64)


def payload_limit_note(max_download_mbs: int) -> Optional[str]:
    """What to tell a user whose maxDownloadMBs wraps in `payload_limit` (faithful, but never what was meant)."""
    limit = payload_limit(max_download_mbs)
    if limit == max_download_mbs * MIB:
        return None
    consequence = ", so every non-empty error file is too large" if limit <= 0 else ""
    return (
        f"maxDownloadMBs {max_download_mbs} is past 8,796,093,022,207: propeller's int64 product with 1 MiB wraps "
        f"(getMaxPayloadSize) to a limit of {limit:,} bytes{consequence}"
    )


#: the settings propeller converts to a uint32 where it compares them, and where (flytepropeller v1.16.8)
UINT32_SETTINGS = {
    "max_workflow_retries": ("max-workflow-retries", "controller/handler.go TryMutateWorkflow"),
    "max_node_retries_system_failures": ("max-node-retries-system-failures", "nodes/executor.go NewExecutor"),
    "default_max_attempts": ("default-max-attempts", "nodes/executor.go isEligibleForRetry"),
}


def uint32_note(name: str, value: int) -> Optional[str]:
    """What to tell a user whose setting `name` propeller holds as another number (faithful, but rarely meant): a
    negative one or one past 4,294,967,295 keeps its low 32 bits."""
    if name not in UINT32_SETTINGS or uint32(value) == value:
        return None
    setting, where = UINT32_SETTINGS[name]
    return f"{setting} {value} is no uint32: propeller compares uint32({value}) = {uint32(value):,} ({where})"


#: the IDs an abort's message names, which a scenario does not say: the workflow's (the compiled template's
#: "project:domain:name") and the task's node (flytekit numbers a workflow's nodes "n0", "n1", ...)
WORKFLOW_ID = "<workflow>"
NODE_ID = "<node>"


def abort_message(failed_attempts: int, limit: int, round_error: Optional[str]) -> str:
    """The message of a workflow aborted after failed rounds, as propeller writes it: flytepropeller v1.16.8
    `workflow/executor.go` `HandleAbortedWorkflow` makes a `WorkflowError` (`workflow/errors/errors.go`: "Workflow[id]
    failed. Code: message") quoting the last round's error, which `controller/handler.go` `RecordSystemError` kept as
    the workflow's status message: the reader's error as `nodes/task/handler.go` `Handle` wrapped it ("failed during
    plugin execution", a `NodeErrorWithCause`, `nodes/errors/errors.go`), which nothing above it wraps again."""
    last = f"failed at Node[{NODE_ID}]. RuntimeExecutionError: failed during plugin execution, caused by: {round_error}"
    return (
        f"Workflow[{WORKFLOW_ID}] failed. RuntimeExecutionError: max number of system retry attempts "
        f"[{failed_attempts}/{limit}] exhausted. Last known status message: {last}"
    )


#: why failing rounds never abort at that limit: said in the timeline and in the reason the node keeps running
NEVER_ABORTS = "max-workflow-retries is uint32's largest (-1), which the workflow's FailedAttempts never exceeds"


@dataclass(frozen=True)
class PropellerConfig:
    """The propeller settings that decide retries and bound reads (defaults in `defaults.py`)."""

    max_node_retries_system_failures: int = defaults.MAX_NODE_RETRIES_SYSTEM_FAILURES
    default_max_attempts: int = defaults.DEFAULT_MAX_ATTEMPTS
    ignore_retry_cause: bool = defaults.IGNORE_RETRY_CAUSE
    interruptible_failure_threshold: int = defaults.INTERRUPTIBLE_FAILURE_THRESHOLD
    max_workflow_retries: int = defaults.MAX_WORKFLOW_RETRIES
    max_payload_bytes: int = defaults.MAX_PAYLOAD_BYTES  # storage.limits.maxDownloadMBs
    store: PropellerStore = PropellerStore()  # how its store names listed files (`propeller_store`)

    @property
    def workflow_retry_limit(self) -> int:
        """What `TryMutateWorkflow` (flytepropeller `controller/handler.go`) compares the workflow's FailedAttempts
        with: `uint32(cfg.MaxWorkflowRetries)`, so -1 is 4,294,967,295 and a larger int keeps its low 32 bits."""
        return uint32(self.max_workflow_retries)

    @property
    def rounds_never_abort(self) -> bool:
        """Failing rounds never abort the workflow: FailedAttempts (a uint32) never exceeds a limit of uint32's
        largest (`NEVER_ABORTS`)."""
        return self.workflow_retry_limit == UINT32_MAX

    @property
    def system_failure_limit(self) -> int:
        """`maxNodeRetriesForSystemFailures: uint32(nodeConfig.MaxNodeRetriesOnSystemFailures)` (`nodes/executor.go`
        `NewExecutor`): a negative setting wraps to billions."""
        return uint32(self.max_node_retries_system_failures)


@dataclass(frozen=True)
class NodeState:
    """A node's retry counters as propeller keeps them (`NodeStatus.Attempts`, `SystemFailures`)."""

    attempts: int = 0
    system_failures: int = 0


@dataclass(frozen=True)
class NodeDecision:
    decision: Decision
    code: Optional[str] = None  # the node's final error code when it fails
    kind: Optional[str] = None
    message: str = ""
    next_state: NodeState = NodeState()
    current_attempt: int = 0
    max_attempts: int = 0


def task_outcome(
    condition: JobCondition,
    read: Optional[ReadResult] = None,
    outputs_declared: bool = False,
    outputs_exist: bool = False,
    condition_message: str = "",
    outputs_too_large: Optional[str] = None,
) -> TaskOutcome:
    """The task phase at the round that observes `condition`.

    `read` is the error reader's result for the attempt's output prefix; it is consulted only when the
    job Succeeded (`plugin_manager.go` builds the reader only on success). `outputs_too_large` is the Go error
    `RemoteFileOutputReader.Exists` returned for an `outputs.pb` larger than the payload limit, if it did.
    """
    if condition is JobCondition.CREATED:
        return TaskOutcome(TaskPhase.QUEUED, reason="job Created")
    if condition in (JobCondition.RUNNING, JobCondition.RESTARTING):
        return TaskOutcome(TaskPhase.RUNNING, reason=f"job {condition.value}")
    if condition is JobCondition.FAILED:
        # GetPhaseInfo: PhaseInfoRetryableFailure(DownstreamSystemError, ...) -> kind USER; no file is read
        error = ObservedError(
            code="DownstreamSystemError",
            message=f"Job failed:\n\t{condition_message}",
            kind="USER",
            recoverable=True,
        )
        return TaskOutcome(TaskPhase.RETRYABLE_FAILURE, error, "job Failed: propeller reads no error file")
    if read is None:
        raise ValueError("a Succeeded job needs the error reader's result")
    if read.round_error is not None:
        why = "the HEAD of futures.pb returned an error" if read.rule == RULE_FUTURES_HEAD_FAILED else None
        return TaskOutcome(
            TaskPhase.ROUND_FAILED, reason=why or "the error reader returned an error", round_error=read.round_error
        )
    if read.error is not None:
        phase = TaskPhase.RETRYABLE_FAILURE if read.error.recoverable else TaskPhase.PERMANENT_FAILURE
        return TaskOutcome(phase, read.error, f"error file {read.error.path}: {read.rule}")
    if outputs_declared and outputs_too_large is not None:
        # handler.go ValidateOutput: ErrRemoteFileExceedsMaxSize from Exists -> a non-recoverable ExecutionError
        # whose Kind is left unset (UNKNOWN)
        error = ObservedError(
            code="OutputSizeExceeded",
            message=f"Remote output size exceeds max, err: [{outputs_too_large}]",
            kind="UNKNOWN",
            recoverable=False,
        )
        return TaskOutcome(TaskPhase.PERMANENT_FAILURE, error, "no error file and outputs.pb is over the payload limit")
    if outputs_declared and not outputs_exist:
        error = ObservedError(
            code="OutputsNotFound",
            message="Outputs not generated by task execution",
            kind="UNKNOWN",
            recoverable=True,
        )
        return TaskOutcome(TaskPhase.RETRYABLE_FAILURE, error, "no error file and outputs.pb missing")
    if outputs_declared:
        return TaskOutcome(TaskPhase.SUCCEEDED, reason="outputs.pb present")
    return TaskOutcome(TaskPhase.SUCCEEDED, reason="no error file and no outputs declared: succeeds silently")


def job_not_found(namespace: str, name: str) -> TaskOutcome:
    """The round's Get finds no PyTorchJob (`plugin_manager.go` `checkResourcePhase`: `isK8sObjectNotExists` ->
    `PhaseInfoSystemRetryableFailure("ResourceDeletedExternally", ...)`): a SYSTEM error, whatever condition the job
    had, and no file is read. The reason quotes the API server's NotFound (propeller's client falls back to it when
    its informer cache has no such object)."""
    error = ObservedError(
        code="ResourceDeletedExternally",
        message=f'resource not found, name [{namespace}/{name}]. reason: pytorchjobs.kubeflow.org "{name}" not found',
        kind="SYSTEM",
        recoverable=True,
    )
    return TaskOutcome(TaskPhase.RETRYABLE_FAILURE, error, "the job is gone (NotFound): propeller reads no error file")


def max_attempts_for(retries: int, config: PropellerConfig) -> int:
    """`retries: N` compiles to MinAttempts = N + 1 (`compiler/transformers/k8s/utils.go`); 1 keeps the default."""
    min_attempts = retries + 1
    # isEligibleForRetry: `uint32(DefaultMaxAttempts)` or `uint32(*MinAttempts)`: a negative default wraps
    return uint32(min_attempts if min_attempts != 1 else config.default_max_attempts)


def is_eligible_for_retry(
    error: ObservedError, state: NodeState, retries: int, config: PropellerConfig
) -> tuple[bool, int, int]:
    """`isEligibleForRetry`: (eligible, current attempt, max attempts) as propeller computes them."""
    if not config.ignore_retry_cause and error.kind == "SYSTEM":
        current = state.system_failures
        maximum = config.system_failure_limit
        return current < maximum, current, maximum
    # NodeStatus' counters are uint32: `GetAttempts() + 1` and the subtraction wrap as Go's do
    if config.ignore_retry_cause:
        current = uint32(state.attempts + 1)
    else:
        current = uint32(uint32(state.attempts + 1) - state.system_failures)
    maximum = max_attempts_for(retries, config)
    return current < maximum, current, maximum


def node_decision(
    outcome: TaskOutcome,
    retries: int = 0,
    state: NodeState = NodeState(),
    config: PropellerConfig = PropellerConfig(),
) -> NodeDecision:
    """Whether the node succeeds, retries or fails, and its counters for the next attempt."""
    if outcome.phase in (TaskPhase.QUEUED, TaskPhase.RUNNING):
        return NodeDecision(Decision.WAIT, next_state=state)
    if outcome.phase is TaskPhase.SUCCEEDED:
        return NodeDecision(Decision.SUCCEED, next_state=state)
    if outcome.phase is TaskPhase.ROUND_FAILED:
        # The same files fail every round: after max-workflow-retries failed rounds, HandleAbortedWorkflow.
        limit = config.workflow_retry_limit
        if config.rounds_never_abort:  # flytepropeller v1.16.8 `controller/handler.go`: never FailedAttempts > it
            return NodeDecision(
                Decision.WAIT, message=f"every round fails alike, for ever: {NEVER_ABORTS}", next_state=state
            )
        return NodeDecision(
            Decision.FAIL,
            code="Workflow abort failed",
            kind="SYSTEM",
            message=abort_message(uint32(limit + 1), limit, outcome.round_error),
            next_state=state,
        )
    error = outcome.error
    assert error is not None
    if outcome.phase is TaskPhase.PERMANENT_FAILURE:
        # `handleQueuedOrRunningNode` counts a SYSTEM error once, and once more as the node turns Failing
        system = 2 if error.kind == "SYSTEM" else 0
        return NodeDecision(
            Decision.FAIL,
            code=error.code,
            kind=error.kind,
            message=error.message,
            next_state=replace(state, system_failures=uint32(state.system_failures + system)),
        )
    eligible, current, maximum = is_eligible_for_retry(error, state, retries, config)
    if not eligible:
        return NodeDecision(
            Decision.FAIL,
            code=f"RetriesExhausted|{error.code}",
            kind="USER",
            message=f"[{current}/{maximum}] currentAttempt done. Last Error: {error.kind}::{error.message}",
            next_state=state,
            current_attempt=current,
            max_attempts=maximum,
        )
    system = 1 if error.kind == "SYSTEM" else 0
    return NodeDecision(
        Decision.RETRY,
        # `IncrementAttempts`, `IncrementSystemFailures`: uint32 counters
        next_state=NodeState(
            attempts=uint32(state.attempts + 1), system_failures=uint32(state.system_failures + system)
        ),
        current_attempt=current,
        max_attempts=maximum,
    )


def runs_on_interruptible(state: NodeState, interruptible: bool, retries: int, config: PropellerConfig) -> bool:
    """Whether the next attempt still runs on spot capacity (`node_exec_context.go`).

    `isAboveInterruptibleFailureThreshold`: a positive threshold is an absolute count, a negative one
    counts back from the maximum. Without ignore-retry-cause only SYSTEM failures count, so a preempted
    job that ends as a USER error never leaves spot.
    """
    if not interruptible:
        return False
    threshold = config.interruptible_failure_threshold
    if config.ignore_retry_cause:
        failures, maximum = state.attempts, max_attempts_for(retries, config)
        if failures == 0:
            return True
    else:
        failures, maximum = state.system_failures, uint32(config.system_failure_limit + 1)
    # isAboveInterruptibleFailureThreshold works in uint32: `maxAttempts - uint32(-threshold)` wraps below zero
    if threshold > 0:
        above = failures >= threshold
    else:
        above = failures >= uint32(maximum - uint32(-threshold))
    return not above


def resume_checkpoint(attempt: int, checkpoints_written: dict[int, str]) -> Optional[str]:
    """`ComputePreviousCheckpointPath`: attempt N resumes from attempt N-1's checkpoint, if it wrote one."""
    if attempt == 0:
        return None
    return checkpoints_written.get(attempt - 1)
