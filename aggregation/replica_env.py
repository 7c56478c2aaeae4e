"""What Flyte's backend plugin tells each PyTorchJob pod, and the error file flytekit's entrypoint makes of it.

flyteplugins (flyteorg/flyte v1.16.8) `go/tasks/plugins/k8s/kfoperators/pytorch/pytorch.go` `BuildResource`, task
type version 1 (what flytekit's kfpytorch tasks serialize): `updateEnvVars` runs on the Worker replica spec's
container only. It adds `_F_WN` (the pod's own name, through the downward API's `metadata.name`) always, and
`_F_DES=Earliest` when `plugins.k8s.enable-distributed-error-aggregation` is on. The Master replica spec (a job
without an ElasticPolicy keeps one; pods[0] here) gets neither.

flytekit 1.16 `flytekit/bin/entrypoint.py` reads them: `_build_error_file_name` names the error file
`error-<uuid4 hex>.pb` only when `_F_DES` is set, else `error.pb`; `_get_worker_name` gives `_F_WN` only when
`_F_DES` is set, else "". So a non-elastic job's master writes `error.pb` with no worker name even when aggregation
is on, next to its workers' `error-<hex>.pb` files (propeller's earliest reader lists them all under `error`).

Both the simulated pods and the real ones (`localjob`) take their environment from here.
"""

from __future__ import annotations

import functools
import hashlib

WORKER_NAME = "_F_WN"  # flytek8s `FlyteInternalWorkerNameEnvVarKey`
ERROR_STRATEGY = "_F_DES"  # flytek8s `FlyteInternalDistErrorStrategyEnvVarKey`
EARLIEST = "Earliest"  # k8s `EarliestErrorAggregationStrategy.String()`
PER_WORKER_FILE_PREFIX = "error-"  # flytekit `_build_error_file_name` with `_F_DES`: error-<uuid4 hex>.pb


def per_worker_file_name(unique_hex: str) -> str:
    """The error file a pod writes when `_F_DES` is set (flytekit names it after a uuid4's hex)."""
    return f"{PER_WORKER_FILE_PREFIX}{unique_hex}.pb"


def is_drawn_file_name(key: str) -> bool:
    """Whether a key's base name is one flytekit draws at random, `error-<uuid4 hex>.pb`: where a store lists such a
    file among others is chance, run to run."""
    base = key.rsplit("/", 1)[-1]
    hexdigits = base[len(PER_WORKER_FILE_PREFIX) : -len(".pb")]
    return (
        base.startswith(PER_WORKER_FILE_PREFIX)
        and base.endswith(".pb")
        and len(hexdigits) == 32
        and all(c in "0123456789abcdef" for c in hexdigits)
    )


def is_per_worker_file(key: str) -> bool:
    """Whether a key's base name is a per-worker error file's: pods write these only under aggregation."""
    return key.rsplit("/", 1)[-1].startswith(PER_WORKER_FILE_PREFIX)


def is_master(elastic: bool, index: int) -> bool:
    """Whether the job's `index`-th pod is its Master replica: a job without an ElasticPolicy has one (pods[0])."""
    return not elastic and index == 0


def backend_environment(pod: str, master: bool, aggregation: bool) -> dict[str, str]:
    """The variables `BuildResource` adds to the pod's container (the Master's: none)."""
    if master:
        return {}
    env = {WORKER_NAME: pod}
    if aggregation:
        env[ERROR_STRATEGY] = EARLIEST
    return env


def job_environments(pods: "tuple[str, ...]", elastic: bool, aggregation: bool) -> dict[str, dict[str, str]]:
    """Each of the job's pods, in order, with the variables `BuildResource` adds to its container."""
    return {pod: backend_environment(pod, is_master(elastic, index), aggregation) for index, pod in enumerate(pods)}


def reported_worker(env: dict[str, str]) -> str:
    """flytekit `_get_worker_name`: the ContainerError's `worker`."""
    return env.get(WORKER_NAME, "") if env.get(ERROR_STRATEGY) else ""


@functools.lru_cache(maxsize=4096)  # a sweep names the same pods of the same attempts again and again
def _per_worker_name(seed: int, attempt: int, pod: str) -> str:
    return per_worker_file_name(hashlib.blake2b(f"{seed}/{attempt}/{pod}".encode(), digest_size=16).hexdigest())


def writes_error_pb(env: dict[str, str]) -> bool:
    """flytekit `_build_error_file_name` without `_F_DES`: the shared name `error.pb`."""
    return not env.get(ERROR_STRATEGY)


def error_file_name(env: dict[str, str], seed: int, attempt: int, pod: str) -> str:
    """flytekit `_build_error_file_name`: `error-<uuid4 hex>.pb` with `_F_DES`, else `error.pb`. The simulator's
    hex is drawn from the scenario's seed, the attempt and the pod instead of uuid4, so runs repeat."""
    return "error.pb" if writes_error_pb(env) else _per_worker_name(seed, attempt, pod)
