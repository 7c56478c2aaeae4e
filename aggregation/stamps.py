"""What a clock reading becomes on its way into an error document: a Python float, then flytekit's whole nanoseconds.

A pod stamps an error with `time.time()` (or an mtime in nanoseconds divided by 1e9, the same arithmetic), or with
torch's `int(time.time())`. Both go through a CPython float of epoch seconds (`Python/pytime.c`
`_PyTime_AsSecondsDouble`): the clock's int64 nanoseconds made a double, then divided by 1e9. flytekit's
`bin/entrypoint.py` `get_container_error_timestamp` then writes `int(t)` seconds and `int((t - int(t)) * 1e9)`
nanoseconds. From 2006-07-14 (2**60 ns) to 2038-01-19 (2**31 s) a double holds epoch nanoseconds in steps of 256 and
epoch seconds in steps of 2**-22, so for a reading `y` in nanoseconds:

- the double of the nanoseconds is `256 * m`, `m = y / 256` rounded half to even (`reading_key`);
- the document's stamp is `written_ns(256 * m)`: the quotient by 1e9 rounded to a multiple of 2**-22 s (it is
  never halfway), then truncated to the nanosecond; it lies within 248 ns of `y`;
- torch's `int(time.time())` is `(y + 128) // 1e9` (`whole_second_ns`): a reading up to 128 ns before a whole
  second rounds up to it.

`written_ns` is strictly increasing in the key and keeps whole seconds, so two stamps compare as their keys do
(equal keys, equal stamps: a tie) and a stamp compares with a whole second `s` as its key does with `s * 1e9`.
That is how `aggsim prove` compares stamps exactly without writing the stamp itself as a formula
(`symbolic.StampSym`).

The model counts readings from the scenario's start, which it takes to be a whole second in that range (where these
steps hold and are the same in every second): a simulated stamp is what a real one `n` seconds after such a start
would be, minus the start.
"""

from __future__ import annotations

#: nanoseconds per second
PER_SECOND = 10**9
#: the step of a double holding epoch nanoseconds from 2**60 ns (2006-07-14) to 2**61 ns (2043)
NS_STEP = 256
#: a double holding epoch seconds in [2**30, 2**31) (2004-01-10 to 2038-01-19) has steps of 1 / 2**22 s
SECOND_STEPS = 2**22


def reading_key(reading_ns: int) -> int:
    """The double a clock reading of `reading_ns` nanoseconds becomes (`(double)t`: round half to even), in ns."""
    steps, rest = divmod(reading_ns, NS_STEP)
    if rest > NS_STEP // 2 or (rest == NS_STEP // 2 and steps % 2):
        steps += 1
    return steps * NS_STEP


def written_ns(key: int) -> int:
    """The nanoseconds flytekit writes for the double `key` (a multiple of `NS_STEP`): `key / 1e9` to the nearest
    2**-22 s (never halfway: `key * 2**22 / 1e9` is `m * 2**21 / 5**9` for `key = 256 * m`, a fraction whose
    reduced denominator is odd), truncated to whole nanoseconds (the
    fraction's product with 1e9 is exact in a double, so `int()` truncates the true value)."""
    steps = (2 * key * SECOND_STEPS + PER_SECOND) // (2 * PER_SECOND)
    return steps * PER_SECOND // SECOND_STEPS


def document_stamp_ns(reading_ns: int) -> int:
    """The stamp, in nanoseconds, of an error a pod stamped at `reading_ns` (its clock) or with a whole second."""
    return written_ns(reading_key(reading_ns))


def whole_second_ns(reading_ns: int) -> int:
    """torch's `int(time.time())` at a reading of `reading_ns` nanoseconds: the whole second of its double."""
    return (reading_ns + NS_STEP // 2) // PER_SECOND


def least_key_reaching(stamp_ns: int) -> int:
    """The least key (a multiple of `NS_STEP`) whose stamp is at least `stamp_ns`: `written_ns(k) < stamp_ns`
    exactly when `k < least_key_reaching(stamp_ns)`."""
    key = (stamp_ns // NS_STEP - 2) * NS_STEP  # a stamp is within 120 ns of its key: this key's is below
    while written_ns(key) < stamp_ns:
        key += NS_STEP
    return key
