"""The training operator's view of a PyTorchJob: pod phases -> job condition, and the cleanup after.

Mirrors kubeflow/training-operator v1.8.0 `pkg/controller.v1/pytorch/pytorchjob_controller.go`
`UpdateJobStatus`: an elastic job (ElasticPolicy set, Worker replicas only) is Succeeded as soon as one
worker pod succeeds; a non-elastic one when the master (pod 0) succeeds. With RestartPolicy Never (what
Flyte sets, `common_operator.go`), a failed pod fails the job. Once the job is terminal, CleanPodPolicy
decides which pods are deleted (each deletion SIGTERMs the pod; SIGKILL follows after the grace period).
"""

from __future__ import annotations

from typing import Callable, Optional

from aggregation.engine import Clock


class TrainingOperator:
    def __init__(self, elastic: bool, master: str, clean_pod_policy: str, clock: Clock,
                 delete_pod: Callable[[str], None]) -> None:
        self.elastic = elastic
        self.master = master
        self.clean_pod_policy = clean_pod_policy
        self.clock = clock
        self.delete_pod = delete_pod
        self.condition: Optional[str] = None  # "Succeeded" | "Failed" once terminal
        self.terminal_at: Optional[float] = None

    def pod_exited(self, pod: str, exit_code: int, running_pods: Callable[[], list[str]]) -> None:
        """`running_pods` is asked only when the job turns terminal (so N exits cost O(N), not O(N^2))."""
        if self.condition is not None:
            return
        if exit_code != 0:
            self._terminal("Failed", f"pod {pod} failed (exit {exit_code}, RestartPolicy Never)", running_pods)
        elif self.elastic or pod == self.master:
            why = "an elastic job succeeds when one worker pod succeeds" if self.elastic else "the master succeeded"
            self._terminal("Succeeded", f"pod {pod} succeeded: {why}", running_pods)

    def _terminal(self, condition: str, why: str, running_pods: Callable[[], list[str]]) -> None:
        self.condition, self.terminal_at = condition, self.clock.now
        self.clock.note("operator", f"job {condition}: {why}")
        if self.clean_pod_policy in ("Running", "All"):
            for pod in running_pods():
                self.clock.note("operator", f"CleanPodPolicy {self.clean_pod_policy}: deletes {pod}")
                self.delete_pod(pod)
