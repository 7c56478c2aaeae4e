"""Timings profiles: what real pods measured, as the pod model's defaults and the sweep's ranges.

A profile (`aggsim.v1.TimingsProfile`, protobuf text format, written by `aggsim calibrate --profile FILE`) lists
measured pod phases: a `PodTimings` field, the start method it was measured with (or none, when it does not
depend on it) and the min, median and max real pods showed. `--timings-profile FILE`:

- makes each phase's median the default of its field for every pod (a scenario's own `timings` and
  `pod_timings` values still win: the profile replaces the model's defaults, not what a scenario says);
- gives `sweep` the measured (min, median, max) as the values of the phases it varies by default.

The model's own defaults (`defaults.py`) are this project's measurements on its machine (README "Timings");
a profile measured on yours says how your nodes behave.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from google.protobuf import text_format

from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from aggregation.scenario import parse_text_proto, read_text_file, timing_problem

#: PodTimings fields that are not a phase a pod goes through, so no measurement can stand for them
UNPROFILABLE = frozenset(
    {"clock_offset_seconds", "first_monitor_poll_seconds", "on_peer_death", "file_time_lag_seconds"}
)


class ProfileError(ValueError):
    """A timings profile that cannot be used; the message is one line naming the file and the field."""


def _phase_fields() -> frozenset[str]:
    return frozenset(f.name for f in pb.PodTimings.DESCRIPTOR.fields if f.name not in UNPROFILABLE)


def parse_profile(text: str, path: str = "<profile>") -> pb.TimingsProfile:
    """Parse and check a profile; raises ProfileError naming file, line or field."""
    profile = parse_text_proto(text, pb.TimingsProfile(), path, ProfileError)
    seen = set()
    fields = _phase_fields()
    for index, phase in enumerate(profile.phases):
        where = f"{path}: phases[{index}]"
        if phase.field not in fields:
            raise ProfileError(
                f"{where}.field: {phase.field!r} is not a measurable PodTimings field "
                f"(one of {', '.join(sorted(fields))})"
            )
        key = (phase.field, phase.start_method if phase.HasField("start_method") else None)
        if key in seen:
            raise ProfileError(f"{where}: a second {phase.field} for the same start method")
        seen.add(key)
        values = (phase.min_seconds, phase.median_seconds, phase.max_seconds)
        for name, value in zip(("min_seconds", "median_seconds", "max_seconds"), values):
            problem = timing_problem(phase.field, value)  # the bounds a scenario's timings block meets
            if problem:
                raise ProfileError(f"{where}.{name} ({phase.field}): {problem}")
        if not phase.min_seconds <= phase.median_seconds <= phase.max_seconds:
            raise ProfileError(f"{where}: {phase.field}: min <= median <= max does not hold: {values}")
    return profile


def read_profile(path: str) -> pb.TimingsProfile:
    """Read and check a profile file (read as a scenario file is: `scenario.read_text_file`)."""
    return parse_profile(read_text_file(path, ProfileError, "a timings profile"), path)


def phases_for(profile: pb.TimingsProfile, fork: bool) -> dict[str, pb.MeasuredPhase]:
    """field -> the phase a job of this start method uses: one measured with it, else one that does not depend
    on the start method."""
    method = pb.FORK if fork else pb.SPAWN
    chosen: dict[str, pb.MeasuredPhase] = {}
    for phase in profile.phases:
        if not phase.HasField("start_method"):
            chosen.setdefault(phase.field, phase)
    for phase in profile.phases:
        if phase.HasField("start_method") and phase.start_method == method:
            chosen[phase.field] = phase
    return chosen


def check_applies(profile: pb.TimingsProfile, message: pb.Scenario, path: str) -> None:
    """A profile that measures nothing for this scenario's start method would change nothing, silently: an empty
    file, or one calibrated with `--start-method fork` given to a spawn scenario. Raises ProfileError (one line)."""
    fork = message.job.start_method == pb.FORK
    if phases_for(profile, fork):
        return
    if not profile.phases:
        raise ProfileError(f"{path}: no measured phase in it (`aggsim calibrate --profile FILE` writes them)")
    method = "fork" if fork else "spawn"
    raise ProfileError(
        f"{path}: every phase in it was measured with another start method than the scenario's "
        f"job.start_method ({method}): calibrate with --start-method {method}"
    )


def apply_profile(message: pb.Scenario, profile: Optional[pb.TimingsProfile]) -> pb.Scenario:
    """A copy of `message` whose unset `timings` fields are the profile's medians."""
    if profile is None:
        return message
    applied = pb.Scenario()
    applied.CopyFrom(message)
    for field, phase in phases_for(profile, message.job.start_method == pb.FORK).items():
        if not applied.timings.HasField(field):
            setattr(applied.timings, field, phase.median_seconds)
    return applied


def measured_values(message: pb.Scenario, profile: pb.TimingsProfile, field: str) -> Optional[tuple[float, ...]]:
    """The distinct (min, median, max) a sweep varies `timings.<field>` over, or None when the profile did not
    measure it or the scenario sets it itself."""
    if message.timings.HasField(field):
        return None
    phase = phases_for(profile, message.job.start_method == pb.FORK).get(field)
    if phase is None:
        return None
    return tuple(sorted({phase.min_seconds, phase.median_seconds, phase.max_seconds}))


def with_phases(
    profile: Optional[pb.TimingsProfile], phases: list[pb.MeasuredPhase], measured_on: str
) -> pb.TimingsProfile:
    """`profile` (or a new one) with `phases` replacing its entries for the same field and start method, so runs
    with each start method can be written into one profile."""

    def key(phase: pb.MeasuredPhase):
        return phase.field, phase.start_method if phase.HasField("start_method") else None

    merged = pb.TimingsProfile()
    replaced = {key(p) for p in phases}
    notes = [] if profile is None else [n for n in profile.measured_on.split("; ") if n and n != measured_on]
    merged.measured_on = "; ".join(notes + [measured_on])
    if profile is not None:
        merged.phases.extend(p for p in profile.phases if key(p) not in replaced)
    merged.phases.extend(phases)
    return merged


def write_profile(path: str, profile: pb.TimingsProfile) -> None:
    try:
        Path(path).write_text(text_format.MessageToString(profile), encoding="utf-8")
    except OSError as e:
        raise ProfileError(f"{path}: cannot write: {e.strerror or e}") from None
