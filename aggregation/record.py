"""An execution as an `aggsim.v1.Execution` proto, so simulated and real runs can be diffed field by field.

Simulated and real executions are the same `results.Execution` type, so one function writes both.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from aggregation.results import AttemptResult, Execution
from aggregation.scenario import PLUGIN_VARIANTS
from aggregation.timeline import Event


def _ns(seconds: float) -> float:
    """Seconds rounded to the nanosecond: 30.63, not 30.630000000000003."""
    return round(seconds, 9)


def _timeline_entry(item: pb.AttemptRecord, event: Event) -> None:
    entry = item.timeline.add(
        at_seconds=_ns(event.at),
        pod=event.pod,
        what=event.describe(),
        kind=event.what.value,
        actor=event.actor,
        reason=event.reason,
        file=event.file,
        code=event.code,
        condition=event.condition,
    )
    if event.recoverable is not None:
        entry.recoverable = event.recoverable
    if event.stamp is not None:
        entry.stamp_seconds = _ns(event.stamp)
    if event.exit_code is not None:
        entry.exit_code = event.exit_code


def _attempt(record: pb.Execution, attempt: AttemptResult) -> None:
    resumed = ""
    if attempt.resumed_from is not None:
        step = f" (step {attempt.resumed_step})" if attempt.resumed_step is not None else ""
        resumed = f"attempt {attempt.resumed_from}{step}"
    item = record.attempts.add(
        attempt=attempt.attempt,
        job_condition=attempt.job_condition,
        job_terminal_at=_ns(attempt.job_terminal_at or 0.0),
        observed_at=_ns(attempt.observed_at or 0.0),
        task_phase=attempt.outcome.phase.value,
        decision=attempt.decision.decision.value,
        node_code=attempt.decision.code or "",
        resumed_from_checkpoint=resumed,
        wrote_checkpoint=attempt.wrote_checkpoint,
        preempted=attempt.preempted,
        runs_on_interruptible=attempt.on_interruptible,
        failed_rounds=attempt.failed_rounds,
    )
    for event in attempt.timeline:
        _timeline_entry(item, event)
    for pod, (code, exited_at) in attempt.exits.items():
        item.pods.add(pod=pod, exit_code=code, exited_at=_ns(exited_at))
    read = attempt.read
    if read is not None:
        item.rule = read.rule
        if read.selected is not None:
            item.winning_file = read.selected.path
    if attempt.outcome.error is not None:
        item.error.CopyFrom(attempt.outcome.error.to_proto())
    seen = {id(u) for u in attempt.seen}
    for upload in attempt.uploads:
        file = item.files.add(
            name=upload.name, pod=upload.pod, uploaded_at=_ns(upload.at), seen_by_propeller=id(upload) in seen
        )
        error = upload.container_error()
        if error is not None:
            file.error.CopyFrom(error)


def execution_to_proto(execution: Execution) -> pb.Execution:
    record = pb.Execution(
        scenario=execution.scenario.name,
        plugin=PLUGIN_VARIANTS[execution.scenario.plugin],
        error_aggregation=execution.scenario.error_aggregation,
        final_phase=pb.FinalPhase.Value(execution.final_phase.value),
        final_code=execution.final_code or "",
        final_kind=execution.final_kind or "",
        source=execution.source.value,
    )
    for attempt in execution.attempts:
        _attempt(record, attempt)
    return record


def verdict_fields(record: pb.Execution) -> dict:
    """What a real run and a simulated run must agree on (timings and file names aside)."""
    fields = {
        "final_phase": pb.FinalPhase.Name(record.final_phase),
        "attempts": len(record.attempts),
        "final_code": record.final_code,
    }
    for item in record.attempts:
        prefix = f"attempt {item.attempt}"
        fields[f"{prefix} job"] = item.job_condition
        fields[f"{prefix} decision"] = item.decision
        fields[f"{prefix} error"] = (
            (item.error.code, item.error.kind, item.error.worker) if item.HasField("error") else None
        )
        fields[f"{prefix} resumes from a checkpoint"] = bool(item.resumed_from_checkpoint)
    return fields


def compare(simulated: pb.Execution, real: pb.Execution) -> list[tuple[str, object, object]]:
    """(field, simulated value, real value) for every verdict field; equal values mean conformance."""
    sim, got = verdict_fields(simulated), verdict_fields(real)
    return [(key, sim.get(key), got.get(key)) for key in dict.fromkeys(list(sim) + list(got))]


def execution_to_json(execution: Execution) -> dict[str, Any]:
    return record_to_json(execution_to_proto(execution))


def record_to_json(message: Message) -> dict[str, Any]:
    """A record as JSON with the same keys every time (as `explain --json` has them): proto3's JSON mapping leaves
    out a field at its default (`exit_code` 0, `preempted` false, an empty `final_code`), so a program reading
    `pod["exit_code"]` failed on the pods that exited 0. Every field is written; one that is unset where proto3
    tells unset from default (a message such as `error`, an `optional` field) is null, which `json_format.Parse`
    reads back as unset. Keys come in the .proto's order."""
    written = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _null_where_unset(message, written)
    return written


def _null_where_unset(message: Message, written: dict[str, Any]) -> None:
    for field in message.DESCRIPTOR.fields:
        nested = field.message_type is not None and not field.message_type.full_name.startswith("google.protobuf.")
        if field.is_repeated:
            if nested and not field.message_type.GetOptions().map_entry:
                for item, item_written in zip(getattr(message, field.name), written[field.name]):
                    _null_where_unset(item, item_written)
        elif field.has_presence and not message.HasField(field.name):
            written[field.name] = None
        elif nested:
            _null_where_unset(getattr(message, field.name), written[field.name])
    ordered = {field.name: written[field.name] for field in message.DESCRIPTOR.fields}  # the .proto's order
    written.clear()
    written.update(ordered)
