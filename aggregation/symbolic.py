"""Symbolic numbers: the simulator's own code, run on numbers that remember which varied fields they came from.

`aggsim prove` runs the ordinary simulator concolically. A varied field reads as a `Sym`: an exact concrete
value (a `Fraction`, so the run follows real-number semantics, not float rounding; every constant it meets is read
as the nanoseconds it stands for, `nanoseconds.exact`, as the simulator's clock reads it) together with a linear term
over the varied fields. Arithmetic keeps the term; every comparison that a varied field decides (the event
queue's ordering, a pod's state checks, the reader's timestamp comparison) is answered from the concrete value
and recorded on the active `Path` as a linear constraint. `math.floor`, `math.ceil`, `round` and `//` become
floor atoms (integer-valued terms), so torch's whole-second stamps stay exact. The recorded constraints describe
exactly the set of assignments that take the same path through the code.

What the recording cannot follow is never guessed at: `float()`, `int()` or an index taken from a symbolic
number, a product or quotient of two symbolic numbers, a timestamp read back that no upload registered: each
is noted on the path (`Path.untraceable`), and the prover then answers UNKNOWN instead of PROVED.

Outside a recording nothing here is used: the simulator's plain floats never meet a `Sym`.
"""

from __future__ import annotations

import math
import operator
import sys
from fractions import Fraction
from typing import Optional

from aggregation import stamps
from aggregation.nanoseconds import exact

#: An atom of a linear term: ("var", name) for a varied field, ("floor", key) for floor(term with that key).
Atom = tuple
#: A term's identity: its sorted (atom, coefficient) items and its constant.
TermKey = tuple
#: A recorded constraint: (term key, relation), meaning `term RELATION 0`, relation one of <, <=, ==, !=.
Constraint = tuple

_ACTIVE: Optional["Path"] = None
#: a relation's name to its test
_RELATIONS = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


def _fraction(value) -> Fraction:
    if isinstance(value, Fraction):
        return value
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return exact(value)  # the nanoseconds it stands for, as the simulator's clock reads it: not its binary value
    raise TypeError(type(value).__name__)


class Path:
    """One concolic run's record: the constraints its branches took, the floor atoms it met, what it lost."""

    def __init__(self, bounds: dict[str, tuple[Fraction, Fraction]]) -> None:
        self.bounds: dict[Atom, tuple[Fraction, Fraction]] = {("var", name): b for name, b in bounds.items()}
        self.constraints: list[Constraint] = []
        self._seen: set[Constraint] = set()
        self._upper: dict[tuple, tuple[Fraction, str]] = {}  # a sum's tightest recorded upper bound
        self.untraceable: list[str] = []
        self._stamps: dict[tuple, "Sym"] = {}

    # --- recording -------------------------------------------------------------------------------
    def record(self, key: TermKey, relation: str) -> None:
        constraint = (key, relation)
        if constraint in self._seen or self._implied(key, relation):
            return
        items, const = key
        if relation in ("<", "<="):
            # `sum < -const`: an earlier bound on the same sum at least as tight makes this one say nothing new
            tightest = self._upper.get(items)
            if tightest is not None and (tightest[0] > const or (tightest[0] == const and tightest[1] <= relation)):
                return
            self._upper[items] = (const, relation)
        self._seen.add(constraint)
        self.constraints.append(constraint)

    def _implied(self, key: TermKey, relation: str) -> bool:
        """True when the box alone (each atom within its bounds) makes `term RELATION 0` hold."""
        low, high = self.interval(key)
        if relation == "<":
            return high < 0
        if relation == "<=":
            return high <= 0
        if relation == "==":
            return low == high == 0
        return high < 0 or low > 0

    def interval(self, key: TermKey) -> tuple[Fraction, Fraction]:
        items, const = key
        low = high = const
        for atom, coefficient in items:
            a, b = self.bounds[atom]
            if coefficient > 0:
                low, high = low + coefficient * a, high + coefficient * b
            else:
                low, high = low + coefficient * b, high + coefficient * a
        return low, high

    def integer_atom(self, kind: str, key: TermKey) -> Atom:
        """("floor", key) or ("round", key): an integer-valued atom of a term (both are monotone, so its bounds
        are those of the term's bounds)."""
        atom = (kind, key)
        if atom not in self.bounds:
            low, high = self.interval(key)
            whole = _INTEGER_PARTS[kind]
            self.bounds[atom] = (Fraction(whole(low)), Fraction(whole(high)))
        return atom

    def lost(self, what: str) -> None:
        frame = sys._getframe(2)
        where = f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"
        self.untraceable.append(f"{what} at {where}")

    # --- timestamps through the error documents ----------------------------------------------------
    def register_stamp(self, identity: tuple, stamp) -> int:
        """An error document is about to carry `stamp` (ns, symbolic or not): remember it under the document's
        identity, so the reader that parses the document back compares the term."""
        concrete = stamp.value if isinstance(stamp, StampSym) else stamp
        key = identity + (concrete,)
        known = self._stamps.get(key)
        if known is not None and _term_of(known) != _term_of(stamp):
            self.lost("two error documents alike but for their symbolic stamps")
        self._stamps[key] = stamp
        return concrete

    def traced_stamp(self, identity: tuple, concrete: int):
        """The stamp a reader parsed, as it was written; one no upload registered (bytes cut short, say) may hide
        a dependence on the varied fields, so the run cannot be followed exactly."""
        traced = self._stamps.get(identity + (concrete,))
        if traced is None:
            self.lost("a timestamp read back that no error document was written with")
            return concrete
        return traced


def _term_of(value):
    return value.key() if isinstance(value, (Sym, StampSym)) else value


class recording:
    """`with recording(path):` makes `path` the active record of symbolic comparisons."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> Path:
        global _ACTIVE
        from aggregation import readers

        self._previous, _ACTIVE = _ACTIVE, self.path
        self._previous_tracer, readers.STAMP_TRACER = readers.STAMP_TRACER, self.path.traced_stamp
        return self.path

    def __exit__(self, *exc) -> None:
        global _ACTIVE
        from aggregation import readers

        _ACTIVE = self._previous
        readers.STAMP_TRACER = self._previous_tracer


def _path() -> Path:
    if _ACTIVE is None:
        raise RuntimeError("a symbolic number was used outside `recording`")
    return _ACTIVE


class _Compared:
    """Python's comparisons, and truth, for a number that answers them with `_compare(other, relation)`."""

    __slots__ = ()

    def __lt__(self, other):
        return self._compare(other, "<")

    def __le__(self, other):
        return self._compare(other, "<=")

    def __gt__(self, other):
        return self._compare(other, ">")

    def __ge__(self, other):
        return self._compare(other, ">=")

    def __eq__(self, other):
        return self._compare(other, "==")

    def __ne__(self, other):
        return self._compare(other, "!=")

    def __bool__(self):
        return self._compare(0, "!=")

    def __hash__(self):
        return hash(self.value)


class Sym(_Compared):
    """An exact number with a linear term over the varied fields (and floor atoms of such terms)."""

    __slots__ = ("value", "coeffs", "const")

    def __init__(self, value: Fraction, coeffs: dict, const: Fraction) -> None:
        self.value = value
        self.coeffs = coeffs
        self.const = const

    @classmethod
    def variable(cls, name: str, value) -> "Sym":
        return cls(_fraction(value), {("var", name): Fraction(1)}, Fraction(0))

    def key(self) -> TermKey:
        return tuple(sorted(self.coeffs.items())), self.const

    # --- arithmetic ------------------------------------------------------------------------------
    @staticmethod
    def _lift(other) -> Optional["Sym"]:
        if isinstance(other, Sym):
            return other
        if isinstance(other, (int, float, Fraction)) and not isinstance(other, bool):
            value = _fraction(other)
            return Sym(value, {}, value)
        if isinstance(other, bool):
            return Sym(Fraction(int(other)), {}, Fraction(int(other)))
        return None

    def _combine(self, other: "Sym", sign: int) -> "Sym":
        coeffs = dict(self.coeffs)
        for atom, c in other.coeffs.items():
            total = coeffs.get(atom, 0) + sign * c
            if total:
                coeffs[atom] = total
            else:
                coeffs.pop(atom, None)
        return _make(self.value + sign * other.value, coeffs, self.const + sign * other.const)

    def __add__(self, other):
        if _infinite(other):
            return other  # a bound that is never reached (e.g. no linger after the verdict)
        other = Sym._lift(other)
        return NotImplemented if other is None else self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        if _infinite(other):
            return -other
        other = Sym._lift(other)
        return NotImplemented if other is None else self._combine(other, -1)

    def __rsub__(self, other):
        if _infinite(other):
            return other
        other = Sym._lift(other)
        return NotImplemented if other is None else other._combine(self, -1)

    def __neg__(self):
        return self._scale(Fraction(-1))

    def __pos__(self):
        return self

    def _scale(self, factor: Fraction) -> "Sym":
        if not factor:
            return Sym(Fraction(0), {}, Fraction(0))
        return _make(self.value * factor, {a: c * factor for a, c in self.coeffs.items()}, self.const * factor)

    def __mul__(self, other):
        other = Sym._lift(other)
        if other is None:
            return NotImplemented
        if not other.coeffs:
            return self._scale(other.value)
        if not self.coeffs:
            return other._scale(self.value)
        _path().lost("a product of two varied quantities (not linear)")
        return _make(self.value * other.value, {}, self.value * other.value)

    __rmul__ = __mul__

    def __truediv__(self, other):
        other = Sym._lift(other)
        if other is None:
            return NotImplemented
        if not other.coeffs:
            return self._scale(1 / other.value)
        _path().lost("a division by a varied quantity (not linear)")
        return _make(self.value / other.value, {}, self.value / other.value)

    def __rtruediv__(self, other):
        other = Sym._lift(other)
        return NotImplemented if other is None else other.__truediv__(self)

    def __floordiv__(self, other):
        quotient = self.__truediv__(other)
        return NotImplemented if quotient is NotImplemented else math.floor(quotient)

    def __rfloordiv__(self, other):
        other = Sym._lift(other)
        return NotImplemented if other is None else other.__floordiv__(self)

    def __mod__(self, other):
        quotient = self.__floordiv__(other)
        return NotImplemented if quotient is NotImplemented else self - quotient * other

    def __divmod__(self, other):
        quotient = self.__floordiv__(other)
        return NotImplemented if quotient is NotImplemented else (quotient, self - quotient * other)

    # --- integer parts: floor atoms ------------------------------------------------------------
    def _whole_but_constant(self) -> bool:
        """Whether the term is an integer but for its constant: integer parts with integer coefficients only."""
        return all(atom[0] != "var" and c.denominator == 1 for atom, c in self.coeffs.items())

    def __floor__(self):
        if not self.coeffs:
            return math.floor(self.value)
        if self._whole_but_constant():  # floor(n + c) = n + floor(c): no integer part of an integer part
            const = Fraction(math.floor(self.const))
            return Sym(self.value - self.const + const, dict(self.coeffs), const)
        atom = _path().integer_atom("floor", self.key())
        return Sym(Fraction(math.floor(self.value)), {atom: Fraction(1)}, Fraction(0))

    def __ceil__(self):
        return -math.floor(-self)

    def __trunc__(self):
        return math.floor(self) if self >= 0 else math.ceil(self)

    def __round__(self, ndigits=None):
        """Python's round-half-to-even: one atom, not a branch (a stamp rounded to the nanosecond decides nothing
        by itself; comparing it does)."""
        if not self.coeffs:
            return round(self.value, ndigits)
        if ndigits is not None:
            scale = Fraction(10) ** ndigits
            return round(self * scale) / scale
        if self.const.denominator == 1 and self._whole_but_constant():  # an integer already
            return self
        atom = _path().integer_atom("round", self.key())
        return Sym(Fraction(round(self.value)), {atom: Fraction(1)}, Fraction(0))

    def __abs__(self):
        return -self if self < 0 else self

    # --- comparisons: answered concretely, recorded symbolically -----------------------------------
    def _compare(self, other, relation: str):
        if _infinite(other):
            return {"<": 0 < other, "<=": 0 < other, ">": 0 > other, ">=": 0 > other, "==": False, "!=": True}[relation]
        other = Sym._lift(other)
        if other is None:
            return NotImplemented
        difference = self._combine(other, -1)
        value = difference.value
        truth = _RELATIONS[relation](value, 0)
        if difference.coeffs:
            _record(difference, relation, truth)
        return truth

    # --- ways out of the recording ------------------------------------------------------------
    def __float__(self):
        if self.coeffs:
            _path().lost("float() of a varied quantity")
        return float(self.value)

    def __int__(self):
        if self.coeffs:
            _path().lost("int() of a varied quantity")
        return int(self.value)

    def __index__(self):
        if self.coeffs:
            _path().lost("a varied quantity used as an integer")
        if self.value.denominator != 1:
            raise TypeError("a non-integral number used as an integer")
        return int(self.value)

    def __format__(self, spec: str) -> str:
        return format(float(self.value), spec)  # display only: a log line's text decides nothing

    def __repr__(self) -> str:
        return f"Sym({float(self.value)!r})"


class StampSym(_Compared):
    """An error document's stamp (nanoseconds) as `aggsim prove` follows it. The stamp is a step function of its
    key (`stamps.written_ns`), no linear term; but it is strictly increasing in the key and keeps whole seconds, so
    every comparison of two stamps, or of a stamp with a number, is recorded as the same comparison of keys, which
    are linear terms with one integer part. `value` is the stamp the document carries at the run's point; `key` the
    double of its reading in nanoseconds (256 * round(reading / 256)); `seconds` its whole second."""

    __slots__ = ("value", "key_ns", "seconds")

    def __init__(self, value: int, key_ns, seconds) -> None:
        self.value = value
        self.key_ns = key_ns
        self.seconds = seconds

    @classmethod
    def of_reading(cls, reading: Sym) -> "StampSym":
        """The stamp of a reading of `reading` seconds (a whole second: torch's stamp) (`stamps`). A reading
        between two nanoseconds is rounded straight to its float, as a clock's finer reading would be; the
        simulator's readings are whole nanoseconds, where the two agree."""
        ns = reading * stamps.PER_SECOND
        key = round(ns / stamps.NS_STEP) * stamps.NS_STEP
        seconds = math.floor((ns + stamps.NS_STEP // 2) / stamps.PER_SECOND)
        return cls(stamps.written_ns(int(_value_of(key))), key, seconds)

    def key(self) -> tuple:
        return ("stamp", _term_of(self.key_ns))

    def _compare(self, other, relation: str) -> bool:
        if isinstance(other, StampSym):
            return _compared(self.key_ns, other.key_ns, relation)
        if isinstance(other, (int, Fraction)) and not isinstance(other, bool):
            # stamp < c exactly when key < least_key_reaching(ceil(c)); stamp <= c when stamp < floor(c) + 1
            below = stamps.least_key_reaching(math.ceil(other))
            up_to = stamps.least_key_reaching(math.floor(other) + 1)
            if relation in ("==", "!="):
                hit = other.denominator == 1 and below < up_to  # the one key whose stamp is exactly `other`
                return _compared(self.key_ns, below, relation) if hit else relation == "!="
            bound = below if relation in ("<", ">=") else up_to
            return _compared(self.key_ns, bound, "<" if relation in ("<", "<=") else ">=")
        if isinstance(other, Sym) and not other.coeffs:
            return self._compare(other.value, relation)
        if not isinstance(other, (Sym, float)):
            return NotImplemented  # None, text: what Python does with an int (`==` is identity, `<` a TypeError)
        _path().lost("a timestamp compared with something that is no timestamp")
        return _compared(self.value, _value_of(other), relation)

    def __divmod__(self, other):
        """Seconds and nanoseconds, as `Timestamp` holds them: the nanoseconds are the stamp of the key less its
        whole seconds (a stamp moves with whole seconds)."""
        if other != stamps.PER_SECOND:
            return self._lost_arithmetic(divmod, other)
        whole = self.seconds * stamps.PER_SECOND
        return self.seconds, StampSym(self.value - int(_value_of(whole)), self.key_ns - whole, 0)

    def _lost_arithmetic(self, operation, *others):
        _path().lost("arithmetic on a timestamp other than its seconds and nanoseconds")
        return operation(self.value, *(_value_of(o) for o in others))

    def __add__(self, other):
        return self._lost_arithmetic(lambda a, b: a + b, other)

    def __radd__(self, other):
        return self._lost_arithmetic(lambda a, b: b + a, other)

    def __sub__(self, other):
        return self._lost_arithmetic(lambda a, b: a - b, other)

    def __rsub__(self, other):
        return self._lost_arithmetic(lambda a, b: b - a, other)

    def __mul__(self, other):
        return self._lost_arithmetic(lambda a, b: a * b, other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._lost_arithmetic(lambda a, b: a / b, other)

    def __rtruediv__(self, other):
        return self._lost_arithmetic(lambda a, b: b / a, other)

    def __rfloordiv__(self, other):
        return self._lost_arithmetic(lambda a, b: b // a, other)

    def __rmod__(self, other):
        return self._lost_arithmetic(lambda a, b: b % a, other)

    def __neg__(self):
        return self._lost_arithmetic(lambda a: -a)

    def __abs__(self):
        return self._lost_arithmetic(abs)

    def __floordiv__(self, other):
        return divmod(self, other)[0] if other == stamps.PER_SECOND else self._lost_arithmetic(divmod, other)[0]

    def __mod__(self, other):
        return divmod(self, other)[1] if other == stamps.PER_SECOND else self._lost_arithmetic(divmod, other)[1]

    def __float__(self):
        _path().lost("float() of a timestamp")
        return float(self.value)

    def __int__(self):
        _path().lost("int() of a timestamp")
        return int(self.value)

    __index__ = __int__

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)  # display only

    def __repr__(self) -> str:
        return f"StampSym({self.value!r})"


def _value_of(number):
    return number.value if isinstance(number, (Sym, StampSym)) else number


def _compared(left, right, relation: str) -> bool:
    """`left RELATION right` for numbers or symbolic ones (a symbolic side records the comparison)."""
    if isinstance(left, Sym):
        return left._compare(right, relation)
    if isinstance(right, Sym):
        return right._compare(left, _MIRRORED[relation])
    return _RELATIONS[relation](left, right)


_MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


#: the integer part an atom of that kind takes: floor, or Python's round (half to even; exact on a Fraction)
_INTEGER_PARTS = {"floor": math.floor, "round": round}


def _infinite(value) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _make(value: Fraction, coeffs: dict, const: Fraction) -> Sym:
    """A Sym; with no varied field left in it, an exact constant that stays exact (a float would round)."""
    return Sym(value, coeffs, const)


#: `difference RELATION 0` held (or not): the constraint in its canonical form
_CANONICAL = {
    ("<", True): (1, "<"),
    ("<", False): (-1, "<="),
    ("<=", True): (1, "<="),
    ("<=", False): (-1, "<"),
    (">", True): (-1, "<"),
    (">", False): (1, "<="),
    (">=", True): (-1, "<="),
    (">=", False): (1, "<"),
    ("==", True): (1, "=="),
    ("==", False): (1, "!="),
    ("!=", True): (1, "!="),
    ("!=", False): (1, "=="),
}


def _record(difference: Sym, relation: str, truth: bool) -> None:
    sign, canonical = _CANONICAL[relation, truth]
    term = difference if sign == 1 else difference._scale(Fraction(-1))
    key = _normalised(term.key(), canonical)
    _path().record(key, canonical)


def _normalised(key: TermKey, relation: str) -> TermKey:
    """Scale `term RELATION 0` so its first coefficient is +-1 (positive for == and !=): one key per constraint."""
    items, const = key
    lead = abs(items[0][1]) if relation in ("<", "<=") else items[0][1]
    if lead == 1:
        return key
    return tuple((a, c / lead) for a, c in items), const / lead


# --- the seams the simulator calls -----------------------------------------------------------------
def stamp_ns(seconds, identity: tuple) -> int:
    """The nanoseconds an error document carries for an error stamped `seconds` (a clock's reading, or a whole
    second: `stamps`); a symbolic stamp is registered under the document's `identity` so a reader that parses the
    document back compares it, not the number."""
    if isinstance(seconds, Sym) and seconds.coeffs:
        return _path().register_stamp(identity, StampSym.of_reading(seconds))
    stamp = stamps.document_stamp_ns(round(seconds * stamps.PER_SECOND))
    if _ACTIVE is not None:
        return _ACTIVE.register_stamp(identity, stamp)
    return stamp


def cut_short(data: bytes, keep: int, seconds) -> bytes:
    """The first `keep` bytes of an error document stamped `seconds` (a partial write). An ErrorDocument is one
    length-delimited field, so a cut leaves nothing (no error), a truncated message (a parse error) or, from its whole
    length on, the whole document; that length varies with the stamp (protobuf's varints; proto3 leaves a zero field
    out). Where the stamp is varied and the cut lies near the end, the run follows the stamp's encoded length: its
    seconds and nanoseconds are compared with each varint's thresholds and with zero, so every point of the path
    gives the witness's length, and the prover explores the other lengths as other paths."""
    if isinstance(seconds, Sym) and seconds.coeffs and 0 < keep and abs(keep - len(data)) <= STAMP_BYTES_AT_MOST:
        whole_seconds, nanos = divmod(StampSym.of_reading(seconds), stamps.PER_SECOND)
        _varint_length(whole_seconds)
        _varint_length(nanos)
    return data[:keep]


#: how much a ContainerError's stamp can change its document's length: its seconds (a tag and up to ten bytes) and
#: nanoseconds (a tag and up to five), and a byte of the document's own length prefix (a varint); a cut farther from
#: the document's end than this leaves the same at every stamp
STAMP_BYTES_AT_MOST = 11 + 6 + 1


def _varint_length(number) -> int:
    """The bytes protobuf takes for an int64 field holding `number` (none for zero, which proto3 leaves out; ten for
    a negative one), found by comparisons a symbolic number records."""
    if number == 0:
        return 0
    if number < 0:
        return 10
    length = 1
    while length < 10 and number >= 1 << (7 * length):
        length += 1
    return length


def whole_second(seconds):
    """torch's `int(time.time())` at a clock reading of `seconds` (`stamps.whole_second_ns`), as a float like
    every stamp; a symbolic reading gives one floor atom."""
    if isinstance(seconds, Sym):
        return math.floor(seconds + Fraction(stamps.NS_STEP // 2, stamps.PER_SECOND))
    return float(stamps.whole_second_ns(round(seconds * stamps.PER_SECOND)))


def atoms_in(key: TermKey, found: Optional[dict] = None) -> dict:
    """Every atom of a term, the fields and the integer parts inside integer parts included, each inner one
    before the integer part that contains it (as the keys of an insertion-ordered dict)."""
    found = {} if found is None else found
    for atom, _ in key[0]:
        if atom not in found:
            if atom[0] != "var":
                atoms_in(atom[1], found)
            found[atom] = None
    return found


def evaluate(key: TermKey, assignment: dict[str, Fraction], memo: Optional[dict] = None) -> Fraction:
    """The exact value of a term at an assignment of the varied fields (`memo`: integer atoms already evaluated
    at this assignment, shared by the terms that contain them)."""
    items, const = key
    total = const
    for atom, coefficient in items:
        if atom[0] == "var":
            value = assignment[atom[1]]
        elif memo is not None and atom in memo:
            value = memo[atom]
        else:
            value = Fraction(_INTEGER_PARTS[atom[0]](evaluate(atom[1], assignment, memo)))
            if memo is not None:
                memo[atom] = value
        total += coefficient * value
    return total


def holds(constraint: Constraint, assignment: dict[str, Fraction], memo: Optional[dict] = None) -> bool:
    key, relation = constraint
    value = evaluate(key, assignment, memo)
    if relation == "<":
        return value < 0
    if relation == "<=":
        return value <= 0
    return (value == 0) == (relation == "==")
