"""A faithful model of Flyte propeller's error aggregation and retry decision (flyte v1.16).

Imports with flyteidl, protobuf, fsspec, click and rich only: no torch, no flytekit.

    from aggregation import explain_prefix
    explanation = explain_prefix("s3://bucket/metadata/.../0", strategy="earliest", retries=2)
    explanation.error, explanation.outcome.phase, explanation.decision.decision
"""

# The public names, each with the module that defines it. They are imported on first use (PEP 562), so a
# command that needs only the readers, e.g. `aggsim explain --json`, does not pay for the simulator's imports.
_EXPORTS = {
    "Explanation": "aggregation.explain",
    "explain_prefix": "aggregation.explain",
    "Decision": "aggregation.propeller",
    "JobCondition": "aggregation.propeller",
    "NodeDecision": "aggregation.propeller",
    "NodeState": "aggregation.propeller",
    "PropellerConfig": "aggregation.propeller",
    "TaskOutcome": "aggregation.propeller",
    "TaskPhase": "aggregation.propeller",
    "node_decision": "aggregation.propeller",
    "task_outcome": "aggregation.propeller",
    "DEFAULT": "aggregation.readers",
    "EARLIEST": "aggregation.readers",
    "Candidate": "aggregation.readers",
    "DefaultErrorReader": "aggregation.readers",
    "EarliestErrorReader": "aggregation.readers",
    "ObservedError": "aggregation.readers",
    "ReadResult": "aggregation.readers",
    "reader_for": "aggregation.readers",
    "FsspecPrefix": "aggregation.storage",
    "MemoryPrefix": "aggregation.storage",
    "ObjectEntry": "aggregation.storage",
    "StorageError": "aggregation.storage",
    "open_prefix": "aggregation.storage",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'aggregation' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS)
