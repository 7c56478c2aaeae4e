"""A faithful model of Flyte propeller's error aggregation and retry decision (flyte v1.16).

Imports with flyteidl, protobuf, fsspec, click and rich only: no torch, no flytekit.

    from aggregation import explain_prefix
    explanation = explain_prefix("s3://bucket/metadata/.../0", strategy="earliest", retries=2)
    explanation.error, explanation.outcome.phase, explanation.decision.decision
"""

from aggregation.explain import Explanation, explain_prefix
from aggregation.propeller import (
    Decision,
    JobCondition,
    NodeDecision,
    NodeState,
    PropellerConfig,
    TaskOutcome,
    TaskPhase,
    node_decision,
    task_outcome,
)
from aggregation.readers import (
    DEFAULT,
    EARLIEST,
    Candidate,
    DefaultErrorReader,
    EarliestErrorReader,
    ObservedError,
    ReadResult,
    reader_for,
)
from aggregation.storage import FsspecPrefix, MemoryPrefix, ObjectEntry, StorageError, open_prefix

__all__ = [
    "Candidate",
    "DEFAULT",
    "Decision",
    "DefaultErrorReader",
    "EARLIEST",
    "EarliestErrorReader",
    "Explanation",
    "FsspecPrefix",
    "JobCondition",
    "MemoryPrefix",
    "NodeDecision",
    "NodeState",
    "ObjectEntry",
    "ObservedError",
    "PropellerConfig",
    "ReadResult",
    "StorageError",
    "TaskOutcome",
    "TaskPhase",
    "explain_prefix",
    "node_decision",
    "open_prefix",
    "reader_for",
    "task_outcome",
]
