"""The training operator's view of a PyTorchJob: pod exits -> job condition, and the cleanup after.

Mirrors kubeflow/training-operator v1.8.0 `pkg/controller.v1/pytorch/pytorchjob_controller.go`
`UpdateJobStatus`: an elastic job (ElasticPolicy set, Worker replicas only) is Succeeded as soon as one
worker pod succeeds; a non-elastic one when the master (pod 0) succeeds. With RestartPolicy Never (what
Flyte sets, flyteplugins `k8s/kfoperators/common/common_operator.go`), a failed pod fails the job, and a
running pod that is being deleted counts as failed (`pkg/core/status.go` `UpdateJobReplicaStatuses`). Once
the job is terminal, CleanPodPolicy decides which pods are deleted (`pkg/controller.v1/common/job.go`
`deletePodsAndServices`: Running deletes the running ones, All every one; each deletion is a SIGTERM,
and SIGKILL after the grace period).

The same operator runs simulated and real jobs: it only hears of pod exits and deletions, and asks for deletions.
"""

from __future__ import annotations

from typing import Callable, Optional

from aggregation.kinds import CleanPodPolicy, JobCondition


class TrainingOperator:
    def __init__(
        self,
        elastic: bool,
        master: str,
        clean_pod_policy: CleanPodPolicy,
        running_pods: Callable[[], list[str]],
        delete_pod: Callable[[str, CleanPodPolicy], None],
        on_terminal: Callable[[JobCondition, str], None],
    ) -> None:
        self.elastic = elastic
        self.master = master
        self.clean_pod_policy = clean_pod_policy
        self.running_pods = running_pods  # asked only when the job turns terminal (N exits cost O(N))
        self.delete_pod = delete_pod
        self.on_terminal = on_terminal
        self.condition: Optional[JobCondition] = None

    def pod_exited(self, pod: str, exit_code: int) -> None:
        if self.condition is not None:
            return
        if exit_code != 0:
            self._terminal(JobCondition.FAILED, f"pod {pod} failed (exit {exit_code}, RestartPolicy Never)")
        elif self.elastic or pod == self.master:
            why = "an elastic job succeeds when one worker pod succeeds" if self.elastic else "the master succeeded"
            self._terminal(JobCondition.SUCCEEDED, f"pod {pod} succeeded: {why}")

    def pod_deleted(self, pod: str) -> None:
        """The pod object got a deletion timestamp while the pod runs: `UpdateJobReplicaStatuses` counts it failed
        from now on, and with RestartPolicy Never a failed replica fails the job (`UpdateJobStatus`)."""
        if self.condition is not None:
            return
        why = "a running pod with a deletion timestamp counts as failed (RestartPolicy Never)"
        self._terminal(JobCondition.FAILED, f"pod {pod} is being deleted: {why}")

    def _terminal(self, condition: JobCondition, why: str) -> None:
        self.condition = condition
        self.on_terminal(condition, why)
        if self.clean_pod_policy is not CleanPodPolicy.NONE:
            for pod in self.running_pods():
                self.delete_pod(pod, self.clean_pod_policy)
