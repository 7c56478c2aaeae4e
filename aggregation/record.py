"""An execution as an `aggsim.v1.Execution` proto, so simulated and real runs can be diffed field by field."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from aggregation.documents import error_document
from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from aggregation.scenario import PLUGIN_VARIANTS
from aggregation.simulate import Execution


def execution_to_proto(execution: Execution, source: str = "simulated") -> pb.Execution:
    spec = execution.scenario
    record = pb.Execution(
        scenario=spec.name,
        plugin=PLUGIN_VARIANTS[spec.plugin],
        error_aggregation=spec.error_aggregation,
        final_phase=pb.FinalPhase.Value(execution.final_phase.value),
        final_code=execution.final_code or "",
        final_kind=execution.final_kind or "",
        source=source,
    )
    for attempt in execution.attempts:
        item = record.attempts.add(
            attempt=attempt.attempt,
            job_condition=attempt.job_condition,
            job_terminal_at=attempt.job_terminal_at,
            observed_at=attempt.observed_at,
            task_phase=attempt.outcome.phase.value,
            decision=attempt.decision.decision.value,
            node_code=attempt.decision.code or "",
            resumed_from_checkpoint=f"attempt {attempt.resumed_from}" if attempt.resumed_from is not None else "",
            wrote_checkpoint=attempt.wrote_checkpoint,
            preempted=attempt.preempted,
            runs_on_interruptible=attempt.on_interruptible,
        )
        for entry in attempt.log:
            item.timeline.add(at_seconds=entry.at, pod=entry.pod, what=entry.what)
        for pod, (code, exited_at) in attempt.exits.items():
            item.pods.add(pod=pod, exit_code=code if code is not None else -1, exited_at=exited_at or 0.0)
        seen = {id(u) for u in attempt.seen}
        for upload in attempt.uploads:
            file = item.files.add(name=upload.name, pod=upload.pod, uploaded_at=upload.at, seen_by_propeller=id(upload) in seen)
            if upload.error is not None:
                e = upload.error
                file.error.CopyFrom(error_document(code=e.code, message=e.message, recoverable=e.recoverable,
                                                   origin="USER", timestamp_ns=round(e.timestamp * 1e9), worker=e.worker).error)
        if attempt.read is not None:
            item.rule = attempt.read.rule
            if attempt.read.selected is not None:
                item.winning_file = attempt.read.selected.path
        if attempt.outcome.error is not None:
            item.error.CopyFrom(attempt.outcome.error.to_proto())
    return record


def execution_to_json(execution: Execution, source: str = "simulated") -> dict[str, Any]:
    return json_format.MessageToDict(execution_to_proto(execution, source), preserving_proto_field_name=True)
