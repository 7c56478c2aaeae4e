"""A path's condition as linear pieces over the varied fields alone: what the map clips and what people read.

A path's condition is a conjunction of linear constraints over the fields and integer atoms (floors and
round-half-even of linear terms: torch's whole-second stamps, the agent's monitor polls, sub-second stamps).
Fixing each coarse atom to one integer it takes on the path makes every constraint, and the atom's own
definition (k <= t < k+1 for floor(t) = k), linear in the fields: one convex piece per assignment. Fine atoms
(more than `COARSE` values across the box, i.e. sub-second stamps, whose floats step by 256 ns: `stamps`) are
relaxed to the reals and projected out (Fourier-Motzkin), which moves a boundary through them by at most one of
their units each (`relaxation`: 256 ns for a stamp against a whole second, 512 ns for two stamps compared).

A row is `(coefficients, constant, strict)`: sum(coefficient * variable) + constant < 0 (strict) or <= 0.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from aggregation.symbolic import Constraint, Path, TermKey, atoms_in

if TYPE_CHECKING:
    from aggregation.prove import Solver

#: integer assignments to one path's atoms (each a convex piece of its region) before giving up
MAX_PIECES = 10_000
#: an integer part taking fewer values than this across the box is enumerated exactly; more, relaxed
COARSE = 1_000

Row = tuple  # (dict variable -> Fraction, Fraction constant, bool strict)


class TooManyPieces(Exception):
    """A path splits into more pieces than `MAX_PIECES`, or the solver gave up listing them (the message says)."""


def _row(key: TermKey, fixed: dict, strict: bool) -> Row:
    """key with the enumerated atoms substituted; the fields and the relaxed atoms stay variables."""
    coefficients: dict = {}
    constant = key[1]
    for atom, coefficient in key[0]:
        if atom in fixed:
            constant += coefficient * fixed[atom]
        else:
            variable = atom[1] if atom[0] == "var" else atom
            coefficients[variable] = coefficients.get(variable, Fraction(0)) + coefficient
    return {v: c for v, c in coefficients.items() if c}, constant, strict


def _negated(row: Row) -> Row:
    return {v: -c for v, c in row[0].items()}, -row[1], row[2]


def _rows(constraint: Constraint, fixed: dict) -> list[Row]:
    key, relation = constraint
    if relation in ("<", "<="):
        return [_row(key, fixed, relation == "<")]
    if relation == "==":
        row = _row(key, fixed, False)
        return [row, _negated(row)]
    return []  # "!=": removes a hyperplane, nothing with an inside


def _definition(atom, fixed: dict) -> list[Row]:
    """Where the atom is k (enumerated, or a relaxed variable): k <= t < k + 1 for a floor, k - 1/2 <= t <=
    k + 1/2 for a rounding (half-way points go to the even k, a hyperplane: closed on both sides here)."""
    coefficients, constant, _ = _row(atom[1], fixed, False)
    if atom in fixed:
        k_coefficients, k_constant = {}, fixed[atom]
    else:
        k_coefficients, k_constant = {atom: Fraction(1)}, Fraction(0)
    floor = atom[0] == "floor"
    low, high = (Fraction(0), Fraction(1)) if floor else (Fraction(-1, 2), Fraction(1, 2))
    # t - k - high < 0 and k + low - t <= 0
    above = dict(coefficients)
    for v, c in k_coefficients.items():
        above[v] = above.get(v, Fraction(0)) - c
    below = {v: -c for v, c in coefficients.items()}
    for v, c in k_coefficients.items():
        below[v] = below.get(v, Fraction(0)) + c
    clean = lambda d: {v: c for v, c in d.items() if c}  # noqa: E731
    return [(clean(above), constant - k_constant - high, floor), (clean(below), k_constant + low - constant, False)]


def _eliminate(rows: list[Row], variable) -> list[Row]:
    """Fourier-Motzkin: the rows' projection along one variable (exact for the real relaxation)."""
    upper, lower, rest = [], [], []
    for row in rows:
        coefficient = row[0].get(variable, Fraction(0))
        (upper if coefficient > 0 else lower if coefficient < 0 else rest).append(row)
    for up in upper:
        for down in lower:
            a, b = up[0][variable], -down[0][variable]
            combined: dict = {}
            for v in set(up[0]) | set(down[0]):
                if v != variable:
                    value = b * up[0].get(v, Fraction(0)) + a * down[0].get(v, Fraction(0))
                    if value:
                        combined[v] = value
            rest.append((combined, b * up[1] + a * down[1], up[2] or down[2]))
    return rest


def atom_values(solver: "Solver", constraints: Sequence[Constraint], atoms: Sequence) -> list[dict]:
    """Every integer assignment of `atoms` that some point where `constraints` hold takes."""
    if not atoms:
        return [{}]
    z3 = solver.z3
    expressions = [solver.atom(atom) for atom in atoms]
    found: list[dict] = []
    solver.solver.push()
    try:
        solver.solver.add(solver.conjunction(constraints))
        while True:
            result = solver.check()
            if result == z3.unsat:
                return found
            if result != z3.sat:
                raise TooManyPieces(solver.gave_up())
            model = solver.solver.model()
            values = []
            for expression in expressions:
                value = model.eval(expression, model_completion=True)
                values.append(Fraction(value.numerator_as_long(), value.denominator_as_long()))
            found.append(dict(zip(atoms, values)))
            if len(found) > MAX_PIECES:
                raise TooManyPieces(f"one path has more than {MAX_PIECES:,} pieces")
            solver.solver.add(z3.Or([e != solver.number(v) for e, v in zip(expressions, values)]))
    finally:
        solver.solver.pop()


def relaxation(constraints: Sequence[Constraint], fine: Sequence) -> Optional[Fraction]:
    """How far (in the fields' units, seconds) a boundary through the relaxed integer parts `fine` may lie from the
    true one; None when no constraint has one. Each relaxed part may be off by up to one of its units, so a
    constraint's boundary may move by the sum of its relaxed parts' coefficients (two stamps compared: two steps of
    256 ns), divided by how steeply the constraint moves with the field it moves least with. A relaxed part's own
    term is taken to be linear in the fields (a stamp's reading)."""
    relaxed = set(fine)
    units = []
    for (items, _), _relation in constraints:
        band = sum((abs(c) for atom, c in items if atom in relaxed), Fraction(0))
        if not band:
            continue
        slope: dict = {}
        for atom, c in items:
            if atom[0] == "var":
                slope[atom[1]] = slope.get(atom[1], Fraction(0)) + c
            elif atom in relaxed:
                for inner, d in atom[1][0]:
                    if inner[0] == "var":
                        slope[inner[1]] = slope.get(inner[1], Fraction(0)) + c * d
        steepness = [abs(s) for s in slope.values() if s]
        if steepness:  # else the constraint does not move with the fields: no boundary runs through the box
            units.append(band / min(steepness))
    return max(units, default=None)


def within_text(unit: Fraction) -> str:
    """A relaxation for people: 256 ns, 1 s."""
    if unit < Fraction(1, 10**6):
        return f"{float(unit * 10**9):g} ns"
    return f"{float(unit):g} s"


def path_pieces(
    constraints: Sequence[Constraint], bounds: Mapping[str, tuple[Fraction, Fraction]], solver: "Solver"
) -> tuple[list[list[Row]], Optional[Fraction]]:
    """The path's convex pieces, each a list of rows over the fields (`bounds`: each field's range), and how far
    a boundary may be off where a fine atom was relaxed (`relaxation`; None: the pieces are exact)."""
    found: dict = {}
    for key, _ in constraints:
        atoms_in(key, found)
    found = {atom: None for atom in found if atom[0] != "var"}  # the integer parts, inner ones first
    box = Path(dict(bounds))
    for atom in found:  # each one's bounds over the box, from its inner ones'
        box.integer_atom(*atom)
    coarse = tuple(a for a in found if box.bounds[a][1] - box.bounds[a][0] < COARSE)
    fine = tuple(a for a in found if a not in coarse)
    pieces = []
    for fixed in atom_values(solver, constraints, coarse):
        rows = [r for c in constraints for r in _rows(c, fixed)]
        rows += [r for atom in found for r in _definition(atom, fixed)]
        for atom in reversed(fine):  # outer atoms first: each elimination keeps the rest linear
            rows = _eliminate(rows, atom)
        pieces.append(rows)
    return pieces, relaxation(constraints, fine) if fine else None


__all__ = ["COARSE", "MAX_PIECES", "Row", "TooManyPieces", "atom_values", "path_pieces", "relaxation", "within_text"]
