"""The training operator's view of a PyTorchJob: pod exits -> job condition, and the cleanup after.

Mirrors kubeflow/training-operator v1.8.0 `pkg/controller.v1/pytorch/pytorchjob_controller.go`
`UpdateJobStatus`: an elastic job (ElasticPolicy set, Worker replicas only) is Succeeded as soon as one
worker pod succeeds; a non-elastic one when the master (pod 0) succeeds. With RestartPolicy Never (what
Flyte sets, flyteplugins `k8s/kfoperators/common/common_operator.go`), a failed pod fails the job, and a
running pod that is being deleted counts as failed (`pkg/core/status.go` `UpdateJobReplicaStatuses`). Once
the job is terminal, CleanPodPolicy decides which pods are deleted (`pkg/controller.v1/common/job.go`
`DeletePodsAndServices`: Running deletes the running ones, All every one; each deletion of a running pod is a
SIGTERM, and SIGKILL after the grace period; the model deletes, under either, the pods it counts as running, as
the others have no container left to stop). One reconcile reads every pod (`ReconcileJobs`), so the changes heard
before it runs are decided together: those of one instant, after the instant's other events, and with a busy work
queue (`job.reconcile_seconds`) those of the wait between the first change and the read. Where Go's map order
would decide them (a non-elastic Master's success beside a failed Worker), the attempt's `replica_map_order` decides,
and where the scenario leaves it to Go the simulator refuses the point (`UndecidedVerdict`; a sweep and `prove` run
both orders). A pod with a deletion mark that has exited is removed by the kubelet, and a running job's reconcile
then creates a new pod in its slot (`ReconcilePods` -> `createNewPod`); the model plays no re-created pod, and
refuses the point where that can happen (`PodRecreation`).

Before the replica statuses, `ReconcileJobs` checks the RunPolicy's limits: past one, it deletes every pod
(`DeletePodsAndServices` while the job is not yet finished, so whatever CleanPodPolicy says) and fails the job. Only
the deadline (`job.active_deadline_seconds`) is ever passed here. The backoff limit is not: with RestartPolicy Never
`PastBackoffLimit` (`pkg/core/job.go`) counts no restart and the `FakeWorkQueue` no requeue, so a positive limit is
never reached, and a negative one (`0 >= limit`) fails the job at its first reconcile, before any pod exists, which
the scenario refuses. The deadline counts from the job's start, the attempt's time 0, and is looked at only when
something wakes a reconcile: in v1.8.0 the PyTorchJob reconciler's work queue is a `FakeWorkQueue`, so the
`AddAfter` that `UpdateJobStatus` asks for at the deadline never fires.

Once the job is finished, the RunPolicy's TTLSecondsAfterFinished (`job.ttl_seconds_after_finished`) has the operator
delete the job itself (`CleanupJob`): at the first reconcile at or past its CompletionTime, read back in whole seconds,
plus the TTL. The reconcile that finishes the job cannot (`Reconcile` looks at the status it fetched, still running);
the one its status update wakes (`job.cleanup_seconds` plus the queue's `job.reconcile_seconds` later) deletes it or
asks for a requeue at the expiry (`DurationUntilExpireTime` -> `RequeueAfter`, a real requeue, unlike `AddAfter`,
which waits in the queue as any other). Where the job's creation (the model's 0) falls within its second is unknown,
so the deletion can fall anywhere within a second (`DeletionWindow`): the model plays the job as created at a whole
second, and tells propeller the window, whose rounds refuse to look inside it. Past a RunPolicy limit, the reconcile
that fails the job runs `CleanupJob` with the CompletionTime it has just set (not yet truncated), so a negative TTL
deletes the job there, before its Failed condition is written.

The cluster's latencies are the scenario's (`job.pod_status_seconds`, `job.reconcile_seconds`, `job.cleanup_seconds`;
0 by default: the operator hears, decides and cleans up at once). The same operator runs simulated and real jobs: it
only hears of pod exits and deletions, and asks for deletions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from aggregation.engine import Clock
from aggregation.kinds import CleanPodPolicy, JobCondition, ReplicaMapOrder, RunPolicyLimit
from aggregation.nanoseconds import on_the_clock
from aggregation.scenario import ModelRefusal

#: the job kind in the operator's condition reasons (`util.NewReason(kind, reason)`)
JOB_KIND = "PyTorchJob"
FAILED_REASON = JOB_KIND + "Failed"


class UndecidedVerdict(ModelRefusal):
    """The operator's verdict at some moment of attempt `attempt` is Go's random map order, and the scenario does not
    pin it: the simulator refuses to pick one. `pins` are the ways to pin it, one (field, order name) per order, for a
    caller that plays each (a sweep, the prover); none when the scenario does not list the attempt, so has no field
    to pin."""

    def __init__(self, message: str, attempt: int, pinnable: bool) -> None:
        super().__init__(message)
        self.attempt = attempt
        unlisted = "" if pinnable else ", which the scenario does not list"
        self.kind = f"Go's map order decides attempt {attempt}{unlisted}"
        field = map_order_field(attempt)
        self.pins: tuple[tuple[str, str], ...] = (
            tuple((field, order.value) for order in ReplicaMapOrder) if pinnable else ()
        )


class PodRecreation(ModelRefusal):
    """A reconcile of a running job reads a pod that has a deletion mark and has exited. The kubelet removes such a
    pod's object once it has written its final status, and `ReconcilePods` then finds the pod's slot empty and
    creates a new pod in it (`createNewPod`), which runs the task again. The model plays no re-created pod, and does
    not know whether the object was still there: it refuses the point. Says which attempt and pod, when the pod was
    marked, its exit code, when the operator heard of it, and the reconcile's instant."""

    def __init__(
        self, message: str, attempt: int, pod: str, marked_at, exit_code: int, heard_at, at, counted: bool
    ) -> None:
        super().__init__(message)
        self.at = at  # the reconcile's instant
        self.counted = counted  # heard at that instant, counted by its phase, and the job runs on
        self.attempt = attempt
        self.pod = pod
        self.marked_at = marked_at
        self.exit_code = exit_code
        self.heard_at = heard_at
        self.kind = f"the operator would re-create deleted pod {pod} (attempt {attempt})"


@dataclass(frozen=True)
class DeletionWindow:
    """When the TTL deletes a finished job, as far as the model can know it. `CleanupJob` reads the CompletionTime
    back in whole seconds of the cluster's clock, and the model's 0 (the job's creation) may fall anywhere in its
    second: read on the model's clock, the CompletionTime is any moment in (completed - 1, completed], so the expiry
    any one in (completed + ttl - 1, completed + ttl]. The reconcile that first runs `CleanupJob` (at `reconciled`)
    deletes a job whose expiry has passed and requeues the rest to their expiry (`reconcile_delay` later). So the
    deletion falls in [earliest, latest], `earliest` excluded unless some expiry had passed at that reconcile."""

    earliest: float
    earliest_included: bool
    latest: float
    ttl: int
    completed_at: float

    @staticmethod
    def after(completed_at, ttl: int, reconciled, reconcile_delay) -> "DeletionWindow | None":
        """The window of a job that finished at `completed_at`; None where the deletion's moment is known (every
        expiry passed by that reconcile: a TTL of 0 or less, or a late reconcile)."""
        # on the nanosecond, as every moment on the clock is, so that a float run decides as an exact one does
        first_expiry, last_expiry = on_the_clock(completed_at + (ttl - 1)), on_the_clock(completed_at + ttl)
        if reconciled >= last_expiry:
            return None
        latest = on_the_clock(last_expiry + reconcile_delay)  # requeued to the expiry at its latest
        if reconciled > first_expiry:  # passed for some creation moments: deleted at this reconcile
            return DeletionWindow(reconciled, True, latest, ttl, completed_at)
        return DeletionWindow(on_the_clock(first_expiry + reconcile_delay), False, latest, ttl, completed_at)

    def unsettled_at(self, at) -> bool:
        """Whether the job may or may not be gone by a look at `at` (made after that instant's other events)."""
        return (at > self.earliest or (self.earliest_included and at == self.earliest)) and at < self.latest


def map_order_field(attempt: int) -> str:
    """The scenario field that pins attempt N's map order."""
    return f"attempts[{attempt}].replica_map_order"


class TrainingOperator:
    def __init__(
        self,
        elastic: bool,
        pods: tuple[str, ...],
        clean_pod_policy: CleanPodPolicy,
        delete_pod: Callable[[str, CleanPodPolicy | RunPolicyLimit], None],
        on_terminal: Callable[[JobCondition, str, str], None],
        clock: Clock,
        pod_status_delay: float = 0.0,
        cleanup_delay: float = 0.0,
        job_name: str = "",
        active_deadline: Optional[int] = None,
        ttl_after_finished: Optional[int] = None,
        delete_job: Optional[Callable[[str], None]] = None,
        map_order: Optional[ReplicaMapOrder] = None,
        attempt: int = 0,
        listed: bool = True,
        reconcile_delay: float = 0.0,
        deletion_window: Optional[Callable[[DeletionWindow], None]] = None,
    ) -> None:
        self.elastic = elastic
        self.pods = pods
        self.master = pods[0]
        self.clean_pod_policy = clean_pod_policy
        self.delete_pod = delete_pod
        self.on_terminal = on_terminal
        self.clock = clock  # the attempt's
        self.pod_status_delay = pod_status_delay
        self.cleanup_delay = cleanup_delay
        self.job_name = job_name
        self.active_deadline = active_deadline  # seconds from the job's start (the attempt's 0); None: unset
        self.ttl_after_finished = ttl_after_finished  # None: unset
        self.delete_job = delete_job  # deletes the PyTorchJob object, saying why
        self.map_order = map_order  # Go's order over the replica specs, where it decides; None: not pinned
        self.attempt = attempt  # which attempt this job is (0 the first), for the field that pins its map order
        self.listed = listed  # whether the scenario lists the attempt (has the field to pin it)
        self.reconcile_delay = reconcile_delay  # a pod update wakes a reconcile -> the reconcile reads the pods
        self.deletion_window = deletion_window  # told when the TTL's deletion can fall anywhere in a window
        self.job_deleted = False
        self.exited: dict[str, int] = {}  # the pods whose exit the operator has heard of, with their exit codes
        self._heard_at: dict[str, float] = {}  # when the operator heard of each exit
        self.deleting: dict[str, float] = {}  # pods with a deletion mark (a preemption's) -> when, in mark order
        self.condition: Optional[JobCondition] = None
        self._reconcile_due = False
        self._status_written = (0, 0)  # what the last reconcile wrote: how many pods it counted exited and deleted

    def pod_exited(self, pod: str, exit_code: int) -> None:
        """The pod's container exited: the operator hears of it `pod_status_delay` later (the kubelet's status
        report through the API server)."""
        self._after(self.pod_status_delay, lambda: self._heard_exit(pod, exit_code))

    def _heard_exit(self, pod: str, exit_code: int) -> None:
        self.exited[pod] = exit_code
        self._heard_at[pod] = self.clock.now
        self._wake()

    def pod_deleted(self, pod: str) -> None:
        """The pod object got a deletion timestamp: while the pod runs, `UpdateJobReplicaStatuses` counts it failed
        from now on; once it has exited, the kubelet removes it (`_refuse_a_re_created_pod`). The mark is the API
        server's own, so the operator's watch hears of it with no kubelet in between."""
        if pod not in self.deleting:
            self.deleting[pod] = self.clock.now
            self._wake()

    def _wake(self) -> None:
        """A pod update wakes a reconcile (`OnDependentUpdateFunc` adds the job's key to the work queue). It runs
        `reconcile_delay` later, after that instant's other events (the watch and the work queue take time, however
        little), and reads every pod as the API server holds it by then: every change heard until it runs joins
        it (the queue holds a key once), and is decided together."""
        if self.condition is None and not self._reconcile_due:
            self._reconcile_due = True
            self.clock.at(self.clock.now + self.reconcile_delay, self._reconcile, late=True)

    def _reconcile(self) -> None:
        """`ReconcileJobs` (the RunPolicy's limits first) -> `UpdateJobReplicaStatuses` (each pod by its phase: a heard
        exit 0 succeeded, non-zero failed, a running pod with a deletion mark failed) -> `UpdateJobStatus`, with
        RestartPolicy Never. A job still running whose replica counts changed gets its status written (only then:
        `reflect.DeepEqual` against the old status), and that write is a job update, which the PyTorchJob watch passes
        (it filters creations only) and which wakes the next reconcile: `cleanup_delay` later its event reaches the
        work queue, which holds it `reconcile_delay`. That reconcile reads the pods and the deadline again. With
        neither latency it would run at this instant and change nothing, so the model skips it."""
        self._reconcile_due = False
        if self.condition is not None:
            return
        self._update_job_status()
        counted = [pod for pod in self.deleting if pod in self.exited]  # heard at this instant: gone ones refused
        if self.condition is None and counted:
            self._refuse_a_re_created_pod(counted[0], counted=True)
        written = (len(self.exited), len(self.deleting))
        if self.condition is None and written != self._status_written:
            self._status_written = written
            if self.cleanup_delay or self.reconcile_delay:
                self._after(self.cleanup_delay, self._wake)

    def _update_job_status(self) -> None:
        succeeded = [pod for pod in self.pods if self.exited.get(pod) == 0]
        failed = [pod for pod in self.pods if self.exited.get(pod, 0) != 0]  # phase Failed
        # a deleted pod heard exited before this instant may be gone, and its slot refilled (`ReconcilePods`), unless
        # the deadline, which `ReconcileJobs` checks first and which no pod's presence changes, fails the job here
        gone = [pod for pod in self.deleting if pod in self.exited and self._heard_at[pod] < self.clock.now]
        limit = self._limit_passed()
        if gone and limit is None:
            self._refuse_a_re_created_pod(gone[0], counted=False)
        if limit is not None:
            self._fail_past_a_limit(limit)
            return
        failed += [pod for pod in self.deleting if pod not in self.exited]
        if self.elastic:
            if succeeded:
                # the Worker replica type sets Succeeded, then (failed > 0) Failed after it, in the same pass; both
                # conditions carry the same whole-second LastTransitionTime, and flyteplugins' `ExtractCurrentCondition`
                # (a stable sort for so few conditions) reads the first true one: Succeeded
                why = f"pod {succeeded[0]} succeeded: an elastic job succeeds when one worker pod succeeds"
                if failed:
                    why += f"; pod {failed[0]}'s failure in the same reconcile adds a Failed condition after it"
                self._terminal(JobCondition.SUCCEEDED, why)
            elif failed:
                self._failed(failed)
            return
        if self.master in succeeded and failed:
            # `UpdateJobStatus` ranges over the replica specs, a Go map: the Master's Succeeded (which returns) or the
            # Worker's Failed (after which `setCondition` leaves a failed job's conditions alone) comes first
            if self.map_order is None:
                listing = "" if self.listed else f"list attempt {self.attempt} in the scenario and "
                raise UndecidedVerdict(
                    f"the operator's verdict at {self.clock.now:g} s is Go's random map order: master {self.master} "
                    f"succeeded and worker {failed[0]} failed in the same reconcile; {listing}set "
                    f"{map_order_field(self.attempt)} to MASTER_FIRST or WORKER_FIRST to see either",
                    self.attempt,
                    self.listed,
                )
            if self.map_order is ReplicaMapOrder.WORKER_FIRST:
                self._failed(failed, master_succeeded=True)
                return
        if self.master in succeeded:
            why = f"pod {self.master} succeeded: the master succeeded"
            if failed:
                why += f", and Go's map order looked at the Master before worker {failed[0]}'s failure"
            self._terminal(JobCondition.SUCCEEDED, why)
        elif failed:
            self._failed(failed)

    def _refuse_a_re_created_pod(self, pod: str, counted: bool) -> None:
        """A pod with a deletion mark that has exited is removed: the kubelet deletes its object once the final status
        is written, and a reconcile of a running job then finds its slot empty and creates a new pod in it
        (`ReconcilePods`: `len(podSlice) == 0` -> `createNewPod`, before `UpdateJobStatus`), which runs the task
        again. The model plays no re-created pod, so it refuses (`PodRecreation`) a reconcile that reads such a pod
        heard exited before this instant (the object may be gone, and the model cannot tell), unless the deadline has
        passed and fails the job first (`ReconcileJobs` then never reaches `ReconcilePods`); and one that
        `counted` such a pod heard at this instant (still there: counted by its phase) and leaves the job running.
        Neither meets a pod that was running when its mark was read: that reconcile fails the job."""
        now, exit_code, heard, marked = self.clock.now, self.exited[pod], self._heard_at[pod], self.deleting[pod]
        if counted:
            why = f"counts pod {pod} deleted (at {marked:g} s) and exited (exit {exit_code}), and the job runs on"
        else:
            why = f"reads pod {pod} deleted (at {marked:g} s) and exited (exit {exit_code}, heard at {heard:g} s)"
        raise PodRecreation(
            f"the operator's reconcile at {now:g} s {why}: the kubelet removes such a pod, and training-operator "
            "v1.8.0 then creates a new one in its slot (ReconcilePods -> createNewPod), which the model does not "
            "play",
            self.attempt,
            pod,
            marked,
            exit_code,
            heard,
            now,
            counted,
        )

    def _limit_passed(self) -> Optional[RunPolicyLimit]:
        """`ReconcileJobs`' RunPolicy checks, before any replica status. Of the two only the deadline can pass (the
        module's docstring: the backoff limit's `exceedsBackoffLimit` needs `NumRequeues + 1 > BackoffLimit`, and
        `PastBackoffLimit` counts restarts, none of which a positive limit meets under RestartPolicy Never)."""
        if self.active_deadline is not None and self.clock.now >= self.active_deadline:
            return RunPolicyLimit.ACTIVE_DEADLINE
        return None

    def _fail_past_a_limit(self, limit_passed: RunPolicyLimit) -> None:
        """Past a RunPolicy limit the job fails now, and every pod is deleted first (`DeletePodsAndServices` on a job
        not yet finished)."""
        message = f"Job {self.job_name} has failed because it was active longer than specified deadline"
        why = (
            f"the job is past RunPolicy.ActiveDeadlineSeconds ({self.active_deadline} s) at this reconcile, the first "
            "a pod change woke since (v1.8.0 queues none for the deadline): every pod is deleted and the job fails"
        )
        self._delete_running(limit_passed)
        # `CleanupJob` in this reconcile, before the status is written, with the CompletionTime it has just set (now,
        # to the nanosecond): only a negative TTL has expired, and its `AddAfter` otherwise goes to the no-op queue
        self._cleanup_job(self.clock.now, requeue=False)
        if self.job_deleted:
            why += "; the condition is never written: the job is deleted first"
        self._fail(why, message, clean_up=False)

    def _failed(self, failed: list[str], master_succeeded: bool = False) -> None:
        """`UpdateJobStatus`' Failed condition (RestartPolicy Never): its message counts the failed replicas of the
        replica type whose check came first in Go's map order (with the Master and Workers failed and the order
        unset, the model counts the Master's, and says the Workers' is as likely)."""
        name = self.job_name
        workers = [pod for pod in failed if self.elastic or pod != self.master]
        master_failed = not self.elastic and self.master in failed
        if master_failed and (not workers or self.map_order is not ReplicaMapOrder.WORKER_FIRST):
            message = f"PyTorchJob {name} is failed because 1 Master replica(s) failed."
            why = self._failed_reason(self.master)
            if workers and self.map_order is None:
                why += "; a Worker failed too, and Go's map order (unset) may as well give the Worker count"
            elif workers:
                why += "; a Worker failed too, and Go's map order looked at the Master first"
        else:
            message = f"PyTorchJob {name} is failed because {len(workers)} Worker replica(s) failed."
            why = self._failed_reason(workers[0])
            if master_failed or master_succeeded:
                done = "failed" if master_failed else "succeeded"
                why += f"; the Master {done} too, and Go's map order looked at the Worker first"
        self._fail(why, message)

    def _failed_reason(self, pod: str) -> str:
        if pod in self.exited:
            return f"pod {pod} failed (exit {self.exited[pod]}, RestartPolicy Never)"
        why = "a running pod with a deletion timestamp counts as failed (RestartPolicy Never)"
        return f"pod {pod} is being deleted: {why}"

    def _fail(self, why: str, message: str, clean_up: bool = True) -> None:
        """The Failed condition with the operator's message, under its Reason (`util.NewReason`)."""
        self._terminal(JobCondition.FAILED, why, f"{FAILED_REASON} - {message}", clean_up)

    def _terminal(self, condition: JobCondition, why: str, message: str = "", clean_up: bool = True) -> None:
        """The job's terminal condition, with its `Reason - Message` as flyteplugins' `GetPhaseInfo` quotes it."""
        self.condition = condition
        self.on_terminal(condition, why, message)
        if (clean_up and self.clean_pod_policy is not CleanPodPolicy.NONE) or self.ttl_after_finished is not None:
            completed_at = self.clock.now
            # the status write's event reaches the work queue `cleanup_delay` later, and waits there `reconcile_delay`
            self._after(
                self.cleanup_delay + self.reconcile_delay, lambda: self._finished_reconcile(clean_up, completed_at)
            )

    def _finished_reconcile(self, clean_up: bool, completed_at: float) -> None:
        """The reconcile the terminal status update wakes: `ReconcileJobs` on a finished job -> `CleanUpResources`
        (CleanPodPolicy's deletions, done already on a RunPolicy limit's path) -> `CleanupJob` (the TTL)."""
        if clean_up and self.clean_pod_policy is not CleanPodPolicy.NONE:
            self._delete_running(self.clean_pod_policy)
        ttl = self.ttl_after_finished
        if ttl is not None and not self.job_deleted and self.deletion_window is not None:
            window = DeletionWindow.after(completed_at, ttl, self.clock.now, self.reconcile_delay)
            if window is not None:
                self.deletion_window(window)
        # CompletionTime as this reconcile reads it, in whole seconds: the model plays a job created at a whole
        # second, one of the window's moments; propeller refuses to look inside the window
        self._cleanup_job(math.floor(completed_at), requeue=True)

    def _cleanup_job(self, completion, requeue: bool) -> None:
        """`CleanupJob`: the job is deleted once now is past its CompletionTime plus the TTL. Before that it asks the
        no-op work queue (`AddAfter`); on a finished job `Reconcile` then requeues for real at the expiry
        (`util.DurationUntilExpireTime` -> `RequeueAfter`), whose reconcile deletes it."""
        ttl = self.ttl_after_finished
        if ttl is None or self.job_deleted:
            return
        expires = completion + ttl
        why = f"RunPolicy.TTLSecondsAfterFinished {ttl} s after its CompletionTime {completion:g} s"
        if self.clock.now >= expires:
            # `currentTime.After(expireTime)`: a reconcile's time.Now() is a little past the moment the model places it
            self._delete_job(f"{why}: expired by this reconcile")
        elif requeue:
            # `RequeueAfter` puts the key back in the work queue at the expiry, where it waits as any other
            self.clock.at(expires + self.reconcile_delay, lambda: self._delete_job(f"{why}: the requeue at its expiry"))

    def _delete_job(self, why: str) -> None:
        """`CleanupJob` -> `DeleteJob`: the PyTorchJob object is gone (no finalizer holds it: flyteplugins injects none
        by default)."""
        if not self.job_deleted:
            self.job_deleted = True
            self.delete_job(why)

    def _after(self, delay: float, action: Callable[[], None]) -> None:
        """`action` after `delay`; with none, now, within the step that caused it (as the model always did)."""
        if delay:
            self.clock.at(self.clock.now + delay, action)
        else:
            action()

    def _delete_running(self, cause: CleanPodPolicy | RunPolicyLimit) -> None:
        """Deletes the pods the operator believes running, for CleanPodPolicy's cleanup or a RunPolicy limit (a pod
        that exited unheard is deleted too: the kubelet has nothing left to stop)."""
        for pod in self.pods:
            if pod not in self.exited:
                self.delete_pod(pod, cause)
