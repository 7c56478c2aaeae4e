"""Every default the model uses, in one place, each with the upstream source that sets it.

Propeller's budgets and the payload limit are what a deployment gets when it sets nothing; a scenario,
a CLI flag or `PropellerConfig` overrides them. Pod timings are this project's measurements (see the
README's "Timings"), not upstream settings.
"""

from __future__ import annotations

#: the upstream releases whose behaviour the model mirrors (`aggsim --version` prints them)
MIRRORED_VERSIONS = {
    "flyte (propeller, flyteplugins)": "v1.16.8",
    "flytekit": "1.16.31",
    "torch": "2.13",
    "kubeflow training-operator": "v1.8.0",
}

# --- propeller (flyteorg/flyte v1.16.8 flytepropeller/pkg/controller/config/config.go defaultConfig) -------------
MAX_NODE_RETRIES_SYSTEM_FAILURES = 3  # NodeConfig.MaxNodeRetriesOnSystemFailures
DEFAULT_MAX_ATTEMPTS = 1  # NodeConfig.DefaultMaxAttempts
INTERRUPTIBLE_FAILURE_THRESHOLD = -1  # NodeConfig.InterruptibleFailureThreshold
IGNORE_RETRY_CAUSE = False  # NodeConfig.IgnoreRetryCause
MAX_WORKFLOW_RETRIES = 10  # Config.MaxWorkflowRetries
# A failed round writes the workflow (handler.go `streak`: RecordSystemError, then wfStore.Update) and returns its
# error; the worker does not requeue it (workers.go `processNextWorkItem`). The write comes back through the
# informer (controller.go `getWorkflowUpdatesHandler`: UpdateFunc -> enqueueFlyteWorkflow -> AddRateLimited on the
# main queue, whose limiter is max(bucket 1000/s, exponential from BaseDelay 0): no delay). The batching interval
# (1 s) is the sub-queue's, for pod and node updates only. So the next round follows at the API server's watch
# latency: an estimate, not a measurement (no cluster here); set `propeller.round_retry_seconds` to yours.
ROUND_RETRY_SECONDS = 0.05

# --- storage (flytestdlib storage/config.go: LimitsConfig.GetLimitMegabytes default 2) ----------------------------
MAX_DOWNLOAD_MBS = 2
MAX_PAYLOAD_BYTES = MAX_DOWNLOAD_MBS * 1024 * 1024

# --- Kubernetes and torch elastic ----------------------------------------------------------------------------------
TERMINATION_GRACE_SECONDS = 30.0  # Kubernetes terminationGracePeriodSeconds
# rdzv_configs["join_timeout"] as flytekit's Elastic sets it (flytekitplugins-kfpytorch 1.16 `Elastic.rdzv_configs`
# default {"timeout": 900, "join_timeout": 900}); torch's own default (600) never applies to a Flyte task
JOIN_TIMEOUT_SECONDS = 900.0
# flytekitplugins-kfpytorch `Elastic.monitor_interval` (5): torch `SimpleElasticAgent._invoke_run` sleeps this long
# between looks at its workers, so a failed or finished worker group is noticed at the next look
MONITOR_INTERVAL_SECONDS = 5.0
# torch `SimpleElasticAgent.__init__(exit_barrier_timeout=300)`, which torch's `LaunchConfig` keeps and flytekit
# never sets: an agent whose workers finished waits this long at `_exit_barrier` for the other agents
EXIT_BARRIER_TIMEOUT_SECONDS = 300.0
# torch `dynamic_rendezvous.py` `_DistributedRendezvousOpExecutor.run`: a node waiting for its round reads the
# rendezvous state from the store, then sleeps 1 s (`_delay(seconds=1)`) and reads again, from the moment it joined;
# it finds the store gone (its host's agent exited) only at such a read
RENDEZVOUS_POLL_SECONDS = 1.0
# How long the cluster takes to tell the training operator (Kubernetes, not this tool's ground truth, so no measured
# figure: 0, the operator hears at once, is the model's idealization; `--vary job.pod_status_seconds=...` in `prove`
# decides what a real latency changes). A pod's exit reaches the operator through the kubelet's status report...
POD_STATUS_SECONDS = 0.0
# ...and the job's terminal condition reaches its CleanPodPolicy deletions one reconcile later (training-operator
# v1.8.0 `common/job.go` `ReconcileJobs` deletes pods only when the status it is given is already finished).
CLEANUP_SECONDS = 0.0
# ...and every reconcile (woken by a pod update, a status write or a requeue) reads the pods after the work queue's
# wait (one worker thread for every PyTorchJob by default, `--controller-threads 1`): every change heard by then is
# decided together.
RECONCILE_SECONDS = 0.0
# The namespace propeller names when it finds no job: Flyte's default namespace template `{{ project }}-{{ domain }}`
# (flytepropeller `namespace_mapping`), with the sandbox's project and domain.
NAMESPACE = "flytesnacks-development"

# --- pod timings (measured on this machine with real pods; scenarios override them) -------------------------------
RENDEZVOUS_SECONDS = 2.0
SHUTDOWN_SECONDS = 0.03  # SIGTERM -> SignalException caught, workers obeying SIGTERM
# torch 2.13 `launcher/api.py` `LaunchConfig.shutdown_timeout` (TORCH_ELASTIC_SHUTDOWN_TIMEOUT, which flytekit's
# Elastic task leaves unset): the agent's `_close` waits this long for its signalled workers, then SIGKILLs them
TORCH_SHUTDOWN_TIMEOUT_SECONDS = 30.0
UPLOAD_SECONDS = 0.05
# Worker-group phases, measured in real pods (2 pods x 2 gloo workers, real pyflyte-execute, LOGLEVEL=INFO for the
# agent's own timestamps, monitor interval 0.5 s; README "Timings"):
# the agent's poll finds a failed worker -> flytekit's entrypoint catches ChildFailedError: 1.25-2.09 s spawn,
# 1.30-1.87 s fork (the agent collects the failure and stops the other workers; its first failure is slow)
DETECTION_SECONDS = 1.5
# a worker raised -> its process is gone (the poll sees a failure only then): 1.1-2.0 s spawn, under 0.25 s fork
FAILED_WORKER_EXIT_SECONDS = {"spawn": 1.5, "fork": 0.05}
# the poll finds every worker returned -> their processes are gone (joined before the exit barrier): 2.17-2.59 s
# spawn (the interpreters unload flytekit and torch), 0.04-0.10 s fork
FINISHED_WORKER_EXIT_SECONDS = {"spawn": 2.4, "fork": 0.07}
# The entrypoint is done -> the pod's process has exited (torch tears down the rendezvous, the interpreter unloads
# torch). Measured 0.62-0.80 s, median 0.70 (12 runs, `aggsim calibrate`, README "Timings"). It decides races: an
# upstream pod that writes nothing makes an elastic job Succeeded only when it exits.
EXIT_SECONDS = 0.7
# flytekitplugins-kfpytorch (upstream, and the seed PR) leaves torch's SIGTERM handler (`PContext.start`) installed once
# its agent has returned; CPython puts the default disposition back only as the interpreter finalizes. Measured
# (upstream, 1 pod x 1 spawn worker, torch 2.13, flytekit 1.16.31): a SIGTERM while flytekit turned the returned value
# into outputs wrote a NON_RECOVERABLE SYSTEM error document instead (exit 0); during the upload, exit 1 (outputs.pb
# landed all the same); 0-5 ms after outputs.pb landed it was raised into an atexit callback and ignored (exit 0);
# 10 ms and later it killed the process. Finalization began 7-10 ms after the upload. The model does not time those
# statements: it refuses a SIGTERM from the agent's return until this long after the entrypoint's upload, three times
# the longest measured, or after its return with nothing to write (IgnoreOutputs: not measured apart; the same bound).
TORCH_HANDLER_AFTER_ENTRYPOINT_SECONDS = 0.03
PEER_FAILURE_SECONDS = 0.05  # a peer's signal -> the survivor's "Connection reset by peer"
TRAINING_SECONDS = 60.0
# Node clocks disagree: chrony/NTP keep them within milliseconds normally, and within hundreds of milliseconds
# on a badly synchronised cluster. The demo's sweep varies each pod's clock within this bound.
CLOCK_OFFSET_BOUND_SECONDS = 0.25
MAX_CLOCK_OFFSET_SECONDS = 3600.0  # a scenario's offset beyond an hour is a typo, not a clock

# --- this project's plugin (plugin/task.py; the simulator's `recoverable` variant follows the same rules) ---------
# A collateral failure waits this long for a sibling's report before writing its own: a sibling's agent notices
# its own first failure within flytekit's Elastic monitor_interval (5 s), then uploads (seconds, on a slow store):
# 10 s covers both.
SIBLING_WAIT_SECONDS = 10.0
SIBLING_POLL_SECONDS = 0.5  # how often it looks at the output prefix meanwhile
#: plugin/task.py FILE_TIME_GRAIN_SECONDS: how far before torch's whole second a worker error file's mtime may lie
#: and still refine it (the kernel's coarse clock trails `time.time()` by up to a tick)
FILE_TIME_GRAIN_SECONDS = 0.02
#: a scenario's file time lag beyond a second either way is a typo, not a clock tick
MAX_FILE_TIME_LAG_SECONDS = 1.0

# --- this tool's own limits -----------------------------------------------------------------------------------------
MAX_SCENARIO_BYTES = 1024 * 1024  # a scenario file larger than this is refused, not parsed
MAX_SCENARIO_SECONDS = 10 * 365 * 24 * 3600.0  # a time beyond ten years is a typo, not a training run
MAX_ATTEMPTS = 100  # the simulator plays at most this many attempts of one node (and refuses beyond)
MAX_NPROC_PER_NODE = 1024
MAX_MONITOR_INTERVAL_SECONDS = 3600.0  # an agent that looks at its workers less than hourly is a typo
MAX_SWEEP_SAMPLES = 1_000_000  # `sweep --samples` at most: each assignment runs under up to six plugin x flag cells
PROVE_MAX_PATHS = 2000  # `aggsim prove` answers UNKNOWN past this many paths...
PROVE_MAX_SECONDS = 600.0  # ...or this long
MAX_VALUES_PER_VARIATION = 1_000_000  # one `--vary` range; a sweep samples `--samples` of all the combinations
MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a propeller configuration file larger than this is refused, not parsed
