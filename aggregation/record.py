"""An execution as an `aggsim.v1.Execution` proto, so simulated and real runs can be diffed field by field."""

from __future__ import annotations

from typing import Any, Iterable, Optional

from google.protobuf import json_format

from aggregation.documents import error_document
from aggregation.propeller import NodeDecision, TaskOutcome
from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from aggregation.readers import ReadResult
from aggregation.scenario import PLUGIN_VARIANTS, ScenarioSpec
from aggregation.simulate import Execution


def new_record(spec: ScenarioSpec, final_phase: str, final_code: Optional[str], final_kind: Optional[str],
               source: str) -> pb.Execution:
    """An empty `aggsim.v1.Execution` for a run of `spec` that ended in `final_phase`."""
    return pb.Execution(
        scenario=spec.name,
        plugin=PLUGIN_VARIANTS[spec.plugin],
        error_aggregation=spec.error_aggregation,
        final_phase=pb.FinalPhase.Value(final_phase),
        final_code=final_code or "",
        final_kind=final_kind or "",
        source=source,
    )


def add_attempt(record: pb.Execution, *, attempt: int, job_condition: str, job_terminal_at: float, observed_at: float,
                outcome: TaskOutcome, decision: NodeDecision, read: Optional[ReadResult], resumed_from: str,
                wrote_checkpoint: bool, preempted: bool, timeline: Iterable, exits: dict,
                runs_on_interruptible: bool = False) -> pb.AttemptRecord:
    """One attempt's record: what happened, what propeller read, what it decided (files are the caller's)."""
    item = record.attempts.add(
        attempt=attempt,
        job_condition=job_condition,
        job_terminal_at=job_terminal_at,
        observed_at=observed_at,
        task_phase=outcome.phase.value,
        decision=decision.decision.value,
        node_code=decision.code or "",
        resumed_from_checkpoint=resumed_from,
        wrote_checkpoint=wrote_checkpoint,
        preempted=preempted,
        runs_on_interruptible=runs_on_interruptible,
    )
    for entry in timeline:
        item.timeline.add(at_seconds=entry.at, pod=entry.pod, what=entry.what)
    for pod, (code, exited_at) in exits.items():
        item.pods.add(pod=pod, exit_code=code if code is not None else -1, exited_at=exited_at or 0.0)
    if read is not None:
        item.rule = read.rule
        if read.selected is not None:
            item.winning_file = read.selected.path
    if outcome.error is not None:
        item.error.CopyFrom(outcome.error.to_proto())
    return item


def execution_to_proto(execution: Execution, source: str = "simulated") -> pb.Execution:
    record = new_record(execution.scenario, execution.final_phase.value, execution.final_code, execution.final_kind, source)
    for attempt in execution.attempts:
        item = add_attempt(
            record, attempt=attempt.attempt, job_condition=attempt.job_condition,
            job_terminal_at=attempt.job_terminal_at, observed_at=attempt.observed_at, outcome=attempt.outcome,
            decision=attempt.decision, read=attempt.read,
            resumed_from=f"attempt {attempt.resumed_from}" if attempt.resumed_from is not None else "",
            wrote_checkpoint=attempt.wrote_checkpoint, preempted=attempt.preempted, timeline=attempt.log,
            exits=attempt.exits, runs_on_interruptible=attempt.on_interruptible,
        )
        seen = {id(u) for u in attempt.seen}
        for upload in attempt.uploads:
            file = item.files.add(name=upload.name, pod=upload.pod, uploaded_at=upload.at, seen_by_propeller=id(upload) in seen)
            if upload.error is not None:
                e = upload.error
                file.error.CopyFrom(error_document(code=e.code, message=e.message, recoverable=e.recoverable,
                                                   origin="USER", timestamp_ns=round(e.timestamp * 1e9), worker=e.worker).error)
    return record


def verdict_fields(record: pb.Execution) -> dict:
    """What a real run and a simulated run must agree on (timings and file names aside)."""
    fields = {"final_phase": pb.FinalPhase.Name(record.final_phase), "attempts": len(record.attempts),
              "final_code": record.final_code}
    for item in record.attempts:
        prefix = f"attempt {item.attempt}"
        fields[f"{prefix} job"] = item.job_condition
        fields[f"{prefix} decision"] = item.decision
        fields[f"{prefix} error"] = (item.error.code, item.error.kind, item.error.worker) if item.HasField("error") else None
        fields[f"{prefix} resumes from a checkpoint"] = bool(item.resumed_from_checkpoint)
    return fields


def compare(simulated: pb.Execution, real: pb.Execution) -> list[tuple[str, object, object]]:
    """(field, simulated value, real value) for every verdict field; equal values mean conformance."""
    sim, got = verdict_fields(simulated), verdict_fields(real)
    return [(key, sim.get(key), got.get(key)) for key in dict.fromkeys(list(sim) + list(got))]


def execution_to_json(execution: Execution, source: str = "simulated") -> dict[str, Any]:
    return json_format.MessageToDict(execution_to_proto(execution, source), preserving_proto_field_name=True)
