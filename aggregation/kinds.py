"""The enums the model and the runner share: plugin variants, job conditions, clean-pod policies, RunPolicy limits,
final phases.

Each is a `str` enum whose value is the name people see (and JSON carries), so a record prints as
`upstream` or `Succeeded`, never as `PluginVariant.UPSTREAM`.
"""

from __future__ import annotations

import enum


class NamedEnum(str, enum.Enum):
    """A str enum that prints and formats as its value."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class PluginVariant(NamedEnum):
    """Which kfpytorch elastic plugin the pods run."""

    UPSTREAM = "upstream"  # flytekitplugins-kfpytorch 1.16 as released
    SEED_PR = "seed-pr"  # the first proposed fix: recoverable, stamped where the exception is caught
    RECOVERABLE = "recoverable"  # this project's plugin


class JobCondition(NamedEnum):
    """The training operator's condition for the job (the ones propeller distinguishes)."""

    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    # not a condition: propeller's Get finds no job (deleted by its TTLSecondsAfterFinished before the round looked)
    DELETED = "Deleted"


class CleanPodPolicy(NamedEnum):
    """kubeflow common `CleanPodPolicy`: which pods the operator deletes once the job is terminal."""

    NONE = "None"
    RUNNING = "Running"
    ALL = "All"


class Entrypoint(NamedEnum):
    """What the pod's container runs as its PID 1, the process the kubelet's SIGTERM reaches (flytekit's container
    arguments, and the image's ENTRYPOINT)."""

    FAST_EXECUTE = "pyflyte-fast-execute"  # fast-registered (the default): it forwards SIGTERM to pyflyte-execute
    EXECUTE = "pyflyte-execute"  # registered with --copy none: pyflyte-execute is PID 1
    INIT_THEN_EXECUTE = "init"  # --copy none under an init (tini, dumb-init) that forwards SIGTERM


class ReplicaMapOrder(NamedEnum):
    """Which replica type `UpdateJobStatus` looks at first when it ranges over a non-elastic job's replica specs, a Go
    map: Go's iteration order is random, and it decides the job when the Master's success and a Worker's failure
    reach the operator in the same reconcile."""

    MASTER_FIRST = "MASTER_FIRST"  # the Master's success returns first: Succeeded
    WORKER_FIRST = "WORKER_FIRST"  # the Worker's failure first: Failed (and the Master's Succeeded is then a no-op)


class RunPolicyLimit(NamedEnum):
    """A kubeflow common `RunPolicy` limit past which the operator deletes every pod and fails the job."""

    ACTIVE_DEADLINE = "ActiveDeadlineSeconds"


class FinalPhase(NamedEnum):
    SUCCEEDED = "SUCCEEDED"
    SUCCEEDED_SILENTLY = "SUCCEEDED_SILENTLY"  # green, though training never finished
    RETRIED_THEN_SUCCEEDED = "RETRIED_THEN_SUCCEEDED"
    FAILED_PERMANENTLY = "FAILED_PERMANENTLY"
    STILL_RUNNING = "STILL_RUNNING"  # the job never reached a terminal condition: propeller keeps waiting
