"""Go's number parsing and conversions as propeller's configuration goes through them (Go's `strconv` package,
`atoi.go` `ParseUint`/`ParseInt`/`underscoreOK`, `atob.go` `ParseBool`; the conversion rules of the Go spec).

Both readers of a configuration value use these: Go's YAML parser types a plain scalar with `ParseInt`/`ParseUint`
(`goyaml.py`), and flytestdlib's weak decoder parses a quoted one with `ParseInt`/`ParseBool` (`deployment.py`).
Each function returns None where Go's returns an error.
"""

from __future__ import annotations

import math
from typing import Optional

#: `strconv.ParseBool`
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")

_PREFIX_BASES = {"b": 2, "o": 8, "x": 16}


def parse_bool(text: str) -> Optional[bool]:
    return True if text in GO_TRUE else False if text in GO_FALSE else None


def underscores_ok(text: str) -> bool:
    """`underscoreOK`: an underscore only between digits, or between a base prefix and a digit."""
    if text[:1] in ("+", "-"):
        text = text[1:]
    saw, start, hexadecimal = "^", 0, False
    if len(text) >= 2 and text[0] == "0" and text[1].lower() in _PREFIX_BASES:
        saw, start, hexadecimal = "0", 2, text[1].lower() == "x"
    for char in text[start:]:
        if char.isdigit() or hexadecimal and "a" <= char.lower() <= "f":
            saw = "0"
        elif char == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def parse_uint(text: str, base: int = 0, bits: int = 64) -> Optional[int]:
    """`strconv.ParseUint(text, base, bits)`. Base 0 reads a 0b/0o/0x prefix (a bare leading 0 is octal) and allows
    underscores as Go literals do; an explicit base takes neither. No sign."""
    value = _unsigned(text, base)
    return value if value is not None and value < 1 << bits else None


def _unsigned(text: str, base: int) -> Optional[int]:
    """What `ParseUint` reads, whatever its size."""
    if not text or not text.isascii():  # Go's digits are bytes; no other byte is one
        return None
    original, underscores_allowed = text, base == 0
    if base == 0:
        base = 10
        if text[0] == "0":
            if len(text) >= 3 and text[1].lower() in _PREFIX_BASES:
                base, text = _PREFIX_BASES[text[1].lower()], text[2:]
            else:
                base, text = 8, text[1:]
    value, underscores = 0, False
    for char in text:
        if char == "_" and underscores_allowed:
            underscores = True
            continue
        digit = ord(char) - ord("0") if char.isdigit() else ord(char.lower()) - ord("a") + 10 if char.isalpha() else 99
        if digit >= base:
            return None
        value = value * base + digit
    if underscores and not underscores_ok(original):
        return None
    return value


def integer_value(text: str, base: int = 0) -> Optional[int]:
    """The integer `strconv.ParseInt` reads, whatever its size: None only where its syntax fails."""
    if not text:
        return None
    magnitude = _unsigned(text[1:] if text[0] in "+-" else text, base)
    return None if magnitude is None else -magnitude if text[0] == "-" else magnitude


def parse_int(text: str, base: int = 0, bits: int = 64) -> Optional[int]:
    """`strconv.ParseInt(text, base, bits)`: an optional sign, then `ParseUint`, within the signed range."""
    value = integer_value(text, base)
    return value if value is not None and fits(value, bits) else None


_SIGNED_RANGES = {bits: (-(1 << (bits - 1)), 1 << (bits - 1)) for bits in (32, 64)}


def fits(value, bits: int) -> bool:
    """Whether `value` is a signed `bits`-bit integer's (int32, int64)."""
    low, high = _SIGNED_RANGES.get(bits) or (-(1 << (bits - 1)), 1 << (bits - 1))
    return low <= value < high


def wrap(value: int, bits: int) -> int:
    """Go's conversion of an integer to a signed `bits`-bit one (`int32(x)`, `int64(u)`, int64 arithmetic that
    overflows): the low bits, read as signed. reflect's `Value.SetInt` stores this way, so mapstructure fills an int32
    field with an int64 silently. A value that fits is returned as it is: the common case, and the only one a
    symbolic number (`aggsim prove`) can reach."""
    if fits(value, bits):
        return value
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def float_to_int64(value: float) -> Optional[int]:
    """Go's `int64(f)`: truncation toward zero. For NaN, an infinity or a value outside int64 the Go spec leaves the
    result to the implementation (amd64 and arm64 differ), so there is none to give."""
    if not math.isfinite(value) or not -(2.0**63) <= value < 2.0**63:
        return None
    return int(value)
