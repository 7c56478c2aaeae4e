"""The training operator's view of a PyTorchJob: pod exits -> job condition, and the cleanup after.

Mirrors kubeflow/training-operator v1.8.0 `pkg/controller.v1/pytorch/pytorchjob_controller.go`
`UpdateJobStatus`: an elastic job (ElasticPolicy set, Worker replicas only) is Succeeded as soon as one
worker pod succeeds; a non-elastic one when the master (pod 0) succeeds. With RestartPolicy Never (what
Flyte sets, flyteplugins `k8s/kfoperators/common/common_operator.go`), a failed pod fails the job, and a
running pod that is being deleted counts as failed (`pkg/core/status.go` `UpdateJobReplicaStatuses`). Once
the job is terminal, CleanPodPolicy decides which pods are deleted (`pkg/controller.v1/common/job.go`
`deletePodsAndServices`: Running deletes the running ones, All every one; each deletion of a running pod is a
SIGTERM, and SIGKILL after the grace period; the model deletes, under either, the pods it counts as running, as
the others have no container left to stop).

The cluster's latencies are the scenario's (`job.pod_status_seconds`, `job.cleanup_seconds`; 0 by default: the
operator hears and cleans up at once). The same operator runs simulated and real jobs: it only hears of pod exits
and deletions, and asks for deletions.
"""

from __future__ import annotations

from typing import Callable, Optional

from aggregation.kinds import CleanPodPolicy, JobCondition


class TrainingOperator:
    def __init__(
        self,
        elastic: bool,
        pods: tuple[str, ...],
        clean_pod_policy: CleanPodPolicy,
        delete_pod: Callable[[str, CleanPodPolicy], None],
        on_terminal: Callable[[JobCondition, str], None],
        later: Callable[[float, Callable[[], None]], None],
        pod_status_delay: float = 0.0,
        cleanup_delay: float = 0.0,
    ) -> None:
        self.elastic = elastic
        self.pods = pods
        self.master = pods[0]
        self.clean_pod_policy = clean_pod_policy
        self.delete_pod = delete_pod
        self.on_terminal = on_terminal
        self.later = later  # run a callback this many seconds from now, on the attempt's clock
        self.pod_status_delay = pod_status_delay
        self.cleanup_delay = cleanup_delay
        self.exited: set[str] = set()  # the pods whose exit the operator has heard of: the rest count as running
        self.condition: Optional[JobCondition] = None

    def pod_exited(self, pod: str, exit_code: int) -> None:
        """The pod's container exited: the operator hears of it `pod_status_delay` later (the kubelet's status
        report through the API server)."""
        self._after(self.pod_status_delay, lambda: self._heard_exit(pod, exit_code))

    def _heard_exit(self, pod: str, exit_code: int) -> None:
        self.exited.add(pod)
        if self.condition is not None:
            return
        if exit_code != 0:
            self._terminal(JobCondition.FAILED, f"pod {pod} failed (exit {exit_code}, RestartPolicy Never)")
        elif self.elastic or pod == self.master:
            why = "an elastic job succeeds when one worker pod succeeds" if self.elastic else "the master succeeded"
            self._terminal(JobCondition.SUCCEEDED, f"pod {pod} succeeded: {why}")

    def pod_deleted(self, pod: str) -> None:
        """The pod object got a deletion timestamp while the pod runs: `UpdateJobReplicaStatuses` counts it failed
        from now on, and with RestartPolicy Never a failed replica fails the job (`UpdateJobStatus`). The mark is the
        API server's own, so the operator's watch hears of it with no kubelet in between."""
        if self.condition is not None:
            return
        why = "a running pod with a deletion timestamp counts as failed (RestartPolicy Never)"
        self._terminal(JobCondition.FAILED, f"pod {pod} is being deleted: {why}")

    def _terminal(self, condition: JobCondition, why: str) -> None:
        self.condition = condition
        self.on_terminal(condition, why)
        if self.clean_pod_policy is not CleanPodPolicy.NONE:
            self._after(self.cleanup_delay, self._clean_up)

    def _after(self, delay: float, action: Callable[[], None]) -> None:
        """`action` after `delay`; with none, now, within the step that caused it (as the model always did)."""
        if delay:
            self.later(delay, action)
        else:
            action()

    def _clean_up(self) -> None:
        """CleanPodPolicy's deletions, of the pods the operator believes running (a pod that exited unheard is
        deleted too: the kubelet has nothing left to stop)."""
        for pod in self.pods:
            if pod not in self.exited:
                self.delete_pod(pod, self.clean_pod_policy)
