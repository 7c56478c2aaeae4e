"""The model's clock ticks in nanoseconds, as Go's `time.Time` and protobuf's `Timestamp` do.

A scenario's moments are written as decimals (`at_seconds: 30.4`), and the model means those decimals: a signal at
30.4 s and a 2.37 s delay look at 32.77 s, exactly. Floats cannot add decimals exactly (`30.4 + 2.37` is a float a
few 1e-15 away from 32.77), so two moments the scenario makes equal could come out unequal, in either order,
depending on how the sums were rounded. Both sides of the model therefore read numbers on one grid:

- the simulator (plain floats) puts every moment it computes back on the nanosecond: `on_the_clock`;
- the prover (exact rationals) reads every constant as the whole nanoseconds it stands for: `exact`.

So at any point written to the nanosecond, `aggsim simulate` and `aggsim prove` follow the same path: a tie the
scenario's decimals make is a tie in both.
"""

from __future__ import annotations

from fractions import Fraction

#: nanoseconds per second
PER_SECOND = 10**9
#: past this many seconds (about 48 days) a float no longer holds every nanosecond: moments are left as they are
FLOAT_HOLDS_NANOSECONDS = 2.0**22


def _float_with_nanoseconds(moment) -> bool:
    """Whether `moment` is a float that holds every nanosecond (a symbolic number or an int is not a float)."""
    return moment.__class__ is float and -FLOAT_HOLDS_NANOSECONDS < moment < FLOAT_HOLDS_NANOSECONDS


def on_the_clock(moment):
    """`moment` (seconds, a float) rounded to the nanosecond. Exact: `moment * 1e9` is within a small fraction of a
    nanosecond of the true product below `FLOAT_HOLDS_NANOSECONDS`, and dividing the rounded whole number by 1e9 is
    correctly rounded. A symbolic number (`aggsim prove`) is exact already and passes through, as do ints."""
    if _float_with_nanoseconds(moment):
        return round(moment * 1e9) / 1e9
    return moment


#: how far from a whole number of nanoseconds a float may land and still stand for it, at the least
#: (`whole_nanoseconds` allows a relative 1e-12 of larger numbers); a tick this close to a moment is at it
ROUNDING_NS = 1e-6


def whole_nanoseconds(value: float) -> "int | None":
    """The whole number of nanoseconds a float (seconds) stands for, when it is within rounding of one (a
    scenario's decimal, or a float sum of such); None for a fractional number of them, or past a float's reach."""
    if -FLOAT_HOLDS_NANOSECONDS < value < FLOAT_HOLDS_NANOSECONDS:
        scaled = value * 1e9
        whole = round(scaled)
        if abs(scaled - whole) <= max(ROUNDING_NS, abs(scaled) * 1e-12):
            return whole
    return None


def exact(value: float) -> Fraction:
    """The number a float stands for: its whole nanoseconds (`whole_nanoseconds`), else the shortest decimal that
    reads back as it (`repr`)."""
    whole = whole_nanoseconds(value)
    return Fraction(repr(value)) if whole is None else Fraction(whole, PER_SECOND)


def nearest_tick(value: Fraction) -> Fraction:
    """An exact number moved to the nearest whole nanosecond (`on_the_clock` for exact numbers)."""
    return Fraction(round(value * PER_SECOND), PER_SECOND)


def on_the_grid(value: Fraction) -> bool:
    """Whether an exact number is a whole number of nanoseconds that a float holds: a point `aggsim simulate` can
    be given exactly."""
    return (value * PER_SECOND).denominator == 1 and abs(value) < FLOAT_HOLDS_NANOSECONDS


def decimal_places(value: Fraction, most: int = 15) -> "int | None":
    """How many decimal places write `value` exactly (at most `most`), or None when it takes more or never ends."""
    for places in range(most + 1):
        if (value * 10**places).denominator == 1:
            return places
    return None


def decimal_text(value: Fraction) -> str:
    """A decimal written out in full and no longer: 30.4, 0.000000001, -2 (`decimal_places` must say it ends)."""
    places = decimal_places(value)
    assert places is not None, value
    whole, fraction = divmod(abs(value.numerator) * 10**places // value.denominator, 10**places)
    sign = "-" if value < 0 else ""
    return f"{sign}{whole}" + (f".{fraction:0{places}d}" if places else "")


def instant_text(moment) -> str:
    """A moment (seconds) as the model's clock holds it, to the nanosecond and no further: 31.3300001, 29.3, 5. For
    messages (a prover's number formats as its value, deciding nothing); `:g` would print 31.3300001 as 31.33."""
    if moment.__class__ is float and not _float_with_nanoseconds(moment):
        return repr(moment)  # a float this large holds no nanoseconds: its own shortest digits
    text = format(moment, ".9f").rstrip("0").rstrip(".")
    return "0" if text == "-0" else text
