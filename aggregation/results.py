"""What a run of a scenario produced, simulated or real: one record type for both."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from aggregation.kinds import FinalPhase, NamedEnum
from aggregation.pods import Upload
from aggregation.propeller import NodeDecision, TaskOutcome
from aggregation.readers import ReadResult
from aggregation.scenario import ScenarioSpec
from aggregation.timeline import Event


class Source(NamedEnum):
    SIMULATED = "simulated"
    REAL = "real"


@dataclass(frozen=True)
class AttemptResult:
    attempt: int
    timeline: tuple[Event, ...]
    uploads: tuple[Upload, ...]
    exits: dict[str, tuple[int, float]]  # pod -> (exit code, when)
    job_condition: str  # what propeller found: "Succeeded" | "Failed" | "Deleted" (no job) | "Running" (never terminal)
    job_terminal_at: Optional[float]
    observed_at: Optional[float]
    seen: tuple[Upload, ...]  # what propeller's observing round found in the prefix
    read: Optional[ReadResult]
    outcome: TaskOutcome
    decision: NodeDecision
    resumed_from: Optional[int]  # the attempt whose checkpoint this one resumed from
    resumed_step: Optional[int]  # the step read back from it (real runs report it)
    wrote_checkpoint: bool
    preempted: bool
    completed: bool
    genuine_error_masked: bool
    on_interruptible: bool
    failed_rounds: int = 0  # the workflow's failed propeller rounds so far (FailedAttempts), this attempt's included

    @property
    def winner(self) -> Optional[Upload]:
        return winning_upload(self.read, self.seen)


@dataclass(frozen=True)
class Execution:
    scenario: ScenarioSpec
    attempts: tuple[AttemptResult, ...]
    final_phase: FinalPhase
    final_code: Optional[str] = None
    final_kind: Optional[str] = None
    source: Source = Source.SIMULATED

    @property
    def masked_genuine_error(self) -> bool:
        return any(a.genuine_error_masked for a in self.attempts)


def winning_upload(read: Optional[ReadResult], seen: tuple[Upload, ...]) -> Optional[Upload]:
    """The upload whose bytes propeller read (for a key written twice, the last one it saw)."""
    chosen = read.selected.path if read is not None and read.selected is not None else None
    return next((u for u in reversed(seen) if u.name == chosen), None)


def success_phase(attempt: int, preempted: bool, completed: bool) -> FinalPhase:
    """How a node that succeeded at `attempt` is reported."""
    if preempted and not completed:
        return FinalPhase.SUCCEEDED_SILENTLY
    return FinalPhase.RETRIED_THEN_SUCCEEDED if attempt > 0 else FinalPhase.SUCCEEDED
