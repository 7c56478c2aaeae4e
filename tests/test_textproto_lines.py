"""A scenario error names the line its field is written on (`aggregation/textproto_lines.py`), however the file is
laid out: fields written where they are not set, blocks in another order than the schema's, lists, comments and
strings that hold field names."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregation.proto.aggsim.v1 import scenario_pb2 as pb
from aggregation.scenario import ScenarioError, parse_scenario
from aggregation.strategies import scenarios
from aggregation.textproto_lines import field_lines, parent_path


def _set_paths(message, prefix: str = "") -> list[str]:
    """Every set field's path, as the scenario's errors name them."""
    paths = []
    for descriptor, value in message.ListFields():
        items = list(value) if descriptor.is_repeated else [value]
        for index, item in enumerate(items):
            path = f"{prefix}{descriptor.name}" + (f"[{index}]" if descriptor.is_repeated else "")
            paths.append(path)
            if descriptor.type == descriptor.TYPE_MESSAGE:
                paths.extend(_set_paths(item, path + "."))
    return paths


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.booleans())
def test_every_written_field_is_found_on_its_own_line(message: pb.Scenario, shuffled: bool) -> None:
    text = text_format.MessageToString(message)
    if shuffled:  # the top-level blocks in reverse order: the text format lets them come in any
        blocks = [text_format.MessageToString(pb.Scenario(**{f.name: v})) for f, v in message.ListFields()]
        text = "".join(reversed(blocks))
    assert text_format.Parse(text, pb.Scenario()) == message
    lines = field_lines(text, pb.Scenario.DESCRIPTOR)
    written = text.splitlines()
    assert set(lines) == set(_set_paths(message))
    for path, line in lines.items():
        name = path.rsplit(".", 1)[-1].split("[", 1)[0]
        assert name in written[line - 1], (path, line, written[line - 1])
    # each field on a line of its own, in the order written: entries of a repeated field are not swapped
    assert len(set(lines.values())) == len(lines)
    if not shuffled:
        assert sorted(lines, key=lines.__getitem__) == _set_paths(message)


SCENARIO = """\
# pod_timings { pod: "b" }  and attempts { events {} } in a comment count for nothing
plugin: UPSTREAM
name: "a { name # with \\" braces"
pod_timings <
  pod: "b";
  timings { upload_seconds: 0.1, exit_seconds: 0 }
>
job {
  pods: ["a",
         "b"]
}
timings { exit_seconds: 0.5 }
attempts {
  events { at_seconds: 0 storage_outage { duration_seconds: 1 } }
  events {
    at_seconds: 3
    pod: "a" preemption {}
  }
}
attempts { events { at_seconds: 0 completion {} } }
"""


def test_fields_are_found_by_what_they_are_not_by_counting_names() -> None:
    lines = field_lines(SCENARIO, pb.Scenario.DESCRIPTOR)
    assert lines["name"] == 3 and lines["plugin"] == 2
    assert (lines["pod_timings[0]"], lines["pod_timings[0].pod"], lines["pod_timings[0].timings.exit_seconds"]) == (
        4,
        5,
        6,
    )
    assert (lines["job.pods[0]"], lines["job.pods[1]"], lines["timings.exit_seconds"]) == (9, 10, 12)
    assert (lines["attempts[0].events[1].at_seconds"], lines["attempts[0].events[1].pod"]) == (16, 17)
    assert lines["attempts[1].events[0].at_seconds"] == 20
    assert parent_path("attempts[1].events[0].at_seconds") == "attempts[1].events[0]"
    assert parent_path("attempts[1]") == "attempts" and parent_path("plugin") == ""


@pytest.mark.parametrize(
    "change, expected",
    [
        # a later event's time, after one written as 0 (which the message does not hold as set)
        (("at_seconds: 3", "at_seconds: nan"), "t.textproto:16: attempts[0].events[1].at_seconds: must be a finite"),
        # a pod's timings written before every pod's
        (("upload_seconds: 0.1", "upload_seconds: -1"), "t.textproto:6: pod_timings[0].timings.upload_seconds: must"),
        # the second of two entries in a list
        (('"b"]', '"a"]'), "t.textproto:10: job.pods: duplicate pod 'a'"),
        # an unset field's error is located at the field that holds it
        (('pod: "a" preemption', "preemption"), "t.textproto:15: attempts[0].events[1].pod: missing: a preemption"),
    ],
)
def test_a_scenario_error_names_the_line_its_field_is_written_on(change, expected) -> None:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(SCENARIO.replace(*change), "t.textproto")
    assert str(raised.value).startswith(expected)
