"""Stamps as a real pod writes them (`aggregation/stamps.py`): a clock reading through CPython's float of epoch
seconds (`Python/pytime.c` `_PyTime_AsSecondsDouble`) and flytekit's `bin/entrypoint.py`
`get_container_error_timestamp`; torch's `errors/error_handler.py` `int(time.time())`; and what propeller's earliest
reader (`remote_file_output_reader.go` `earliestFileErrorReader.ReadError`: `earliest.After(ts)`, the first listed
kept on a tie) then decides between them."""

from __future__ import annotations

from fractions import Fraction

from flytekit.bin.entrypoint import get_container_error_timestamp
from flytekit.exceptions.user import FlyteRecoverableException
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation import stamps
from aggregation.explore import assign_field
from aggregation.scenario import read_scenario
from aggregation.simulate import simulate
from aggregation.symbolic import Path, StampSym, Sym, recording

NANOS = 10**9
#: the whole epoch seconds the model's steps hold from (2**60 ns, 2006-07-14) and up to (2**31 s, 2038-01-19),
#: leaving room for a scenario's readings, from 5 s before its start (a clock behind) to 1,000 s after it
FIRST_START, LAST_START = 2**60 // NANOS + 6, 2**31 - 1_001

starts = st.integers(FIRST_START, LAST_START)
#: readings in a scenario's first 1,000 s (before its start too: a clock behind), and readings a few ns either
#: side of a whole second and of the halfway points the float rounds at, where a stamp is decided
readings = st.one_of(
    st.integers(-NANOS, 1_000 * NANOS),
    st.builds(lambda s, d: s * NANOS + d, st.integers(-5, 1_000), st.integers(-400, 400)),
)


def _time_time(start: int, reading: int) -> float:
    """`time.time()` at epoch `start` seconds plus `reading` ns, as `_PyTime_AsSecondsDouble` makes it: the int64
    nanoseconds as a double (round half to even), divided by 1e9 (Python's `int / float` does just that)."""
    return (start * NANOS + reading) / 1e9


@settings(max_examples=3000, deadline=None)
@given(starts, readings)
def test_a_stamp_is_what_flytekit_writes_for_time_time_at_that_reading(start: int, reading: int) -> None:
    """flytekit `get_container_error_timestamp` of a `FlyteException` carrying `time.time()`, and torch's
    `int(time.time())`, at every reading: the model's stamp, counted from a start on a whole second."""
    moment = _time_time(start, reading)
    written = get_container_error_timestamp(FlyteRecoverableException("preempted", timestamp=moment))
    assert written.seconds * NANOS + written.nanos == start * NANOS + stamps.document_stamp_ns(reading)
    assert int(moment) == start + stamps.whole_second_ns(reading)
    whole = float(int(moment))  # torch's stamp carried by the exception: the document holds that second
    written = get_container_error_timestamp(FlyteRecoverableException("failed", timestamp=whole))
    assert (written.seconds, written.nanos) == (int(moment), 0)
    assert stamps.document_stamp_ns(stamps.whole_second_ns(reading) * NANOS) == stamps.whole_second_ns(reading) * NANOS


def test_two_readings_a_float_step_apart_carry_one_stamp_and_a_moment_just_before_a_second_is_that_second() -> None:
    """What the model gained over writing the clock's nanoseconds: stamps within 248 ns of their readings, ties of
    readings up to 256 ns apart, and the whole second a reading up to 128 ns before it rounds to."""
    assert stamps.document_stamp_ns(30_630_000_000) == 30_630_000_114
    assert stamps.document_stamp_ns(30_630_000_050) == stamps.document_stamp_ns(30_630_000_100)
    assert stamps.document_stamp_ns(31 * NANOS - 128) == 31 * NANOS == stamps.whole_second_ns(31 * NANOS - 128) * NANOS
    assert stamps.document_stamp_ns(31 * NANOS - 129) < 31 * NANOS and stamps.whole_second_ns(31 * NANOS - 129) == 30
    assert max(abs(stamps.document_stamp_ns(y) - y) for y in range(0, 3 * NANOS, 997_331)) <= 248


@given(st.integers(-2 * NANOS, 200 * NANOS))
def test_a_stamp_compares_with_a_number_as_its_key_does_with_the_least_key_reaching_it(bound: int) -> None:
    """`least_key_reaching`, on which `aggsim prove` compares a stamp with a number: a stamp is below `bound`
    exactly when its key is below the least key whose stamp reaches `bound`."""
    least = stamps.least_key_reaching(bound)
    assert least % stamps.NS_STEP == 0
    assert stamps.written_ns(least) >= bound > stamps.written_ns(least - stamps.NS_STEP)


@given(st.integers(0, 100 * NANOS), st.integers(-600, 600), st.integers(0, NANOS))
def test_the_prover_compares_stamps_as_the_simulator_writes_them(reading: int, apart: int, bound: int) -> None:
    """`symbolic.StampSym`: two symbolic stamps, and a stamp and a number, compare as the stamps the simulator
    writes do, and the constraint each comparison records holds at the point (so the prover's regions are the
    simulator's)."""
    from aggregation.symbolic import holds, stamp_ns

    x, y = Fraction(reading, NANOS), Fraction(reading + apart, NANOS)
    path = Path({"x": (Fraction(0), Fraction(101)), "y": (Fraction(-1), Fraction(101))})
    with recording(path):
        first = StampSym.of_reading(Sym.variable("x", x))
        second = StampSym.of_reading(Sym.variable("y", y))
        concrete = stamp_ns(float(x), ("a",)), stamp_ns(float(y), ("b",))
        assert (first.value, second.value) == concrete
        assert (first < second) == (concrete[0] < concrete[1])
        assert (first == second) == (concrete[0] == concrete[1])
        assert (first <= bound) == (concrete[0] <= bound) and (second > bound) == (concrete[1] > bound)
        seconds, nanos = divmod(first, NANOS)
        assert (seconds.value, nanos.value) == divmod(concrete[0], NANOS)
    point = {"x": x, "y": y}
    assert path.constraints and all(holds(c, point) for c in path.constraints)
    assert not path.untraceable


def _seed_pr_signalled_at(at_seconds: str):
    """The seed scenario with seed-pr, the signal at `at_seconds`, and propeller looking 9 s after the job ends
    (when both pods' files are in)."""
    source = read_scenario("preemption_during_training")
    message = type(source.message)()
    message.CopyFrom(source.message)
    assign_field(message, "attempts[0].events[1].at_seconds", float(at_seconds))
    assign_field(message, "propeller.observation_delay_seconds", 9.0)
    return simulate(source.spec("seed-pr", message=message))


def test_a_signal_caught_100_ns_before_a_whole_second_ties_with_torch_s_stamp_of_that_second() -> None:
    """seed-pr, aggregation on: the preempted pod catches the signal 0.03 s after it and stamps that moment; its
    peer's worker fails at once and torch stamps it with the whole second 31. Caught 200 ns before 31 s, the
    recoverable stamp is earlier and the node retries; caught 100 ns before, CPython's float reads 31 s too, the
    stamps tie, and propeller keeps the first file listed (here the peer's): the node fails for good."""
    assert _seed_pr_signalled_at("30.9699998").final_phase.value == "RETRIED_THEN_SUCCEEDED"
    tied = _seed_pr_signalled_at("30.9699999")
    assert tied.final_phase.value == "FAILED_PERMANENTLY"
    candidates = tied.attempts[0].read.candidates
    assert [c.error.timestamp_ns for c in candidates] == [31 * NANOS, 31 * NANOS]
    assert candidates[0].selected and candidates[0].error.code == "USER:RuntimeError"
