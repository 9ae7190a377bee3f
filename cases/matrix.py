"""Declared case matrices: the full cartesian product and t-wise covering arrays.

A matrix is declared as ``factors``: a dict from factor name to the tuple of
that factor's values, both in the order they should vary. A row is a dict
holding one value of every factor, keys in declared order.

``product`` lists every row; the `long` tier runs it whole. ``covering``
lists a covering array of strength t: for any t distinct factors and any value
of each, some row holds those t values together, unless no row that
``constraint`` accepts can hold them. ``all_pairs`` is strength 2 (the CPU
tier); the GPU tier takes strength 3. Every row returned is accepted by
``constraint``.

Construction (AETG-style greedy, no randomness): while a required t-tuple is
uncovered, seed a row with the uncovered t-tuple whose values take part in the
most uncovered t-tuples, then fix the remaining factors one at a time, largest
first, each to the value that completes the most uncovered t-tuples with the
values already fixed. With a constraint the row is completed by a depth-first
search in that same order of preference, and the first complete row the
constraint accepts is taken. Every tie breaks by declared order, so the rows
depend on the declaration alone, never on hashing or the Python version.

The constraint sees complete rows only, so deciding which t-tuples can appear
at all walks the full product once (stopping as soon as every t-tuple is
found). A constraint that reads only some factors may name them (`reads`):
then only the product of those is walked, which keeps a large matrix with a
few impossible combinations cheap.
"""

import functools
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import combinations
from itertools import product as _cartesian

Constraint = Callable[[dict], bool]

# An interaction is what a row must cover: ((i, a), (j, b)) with i < j says
# factor i holds its value number a and factor j its value number b (strength
# 2; strength t has t such items, factors ascending). With fewer factors than
# the strength it holds every factor, and with no factors it is the empty tuple.
Interaction = tuple[tuple[int, int], ...]


def product(factors: dict[str, tuple]) -> list[dict]:
    """Every row of the matrix: the first factor varies slowest, the last fastest."""
    names, values = _declared(factors)
    return [_row(names, values, idx) for idx in _cartesian(*(range(len(v)) for v in values))]


def covering(factors: dict[str, tuple], *, strength: int = 2, constraint: Constraint | None = None,
             reads: tuple[str, ...] | None = None) -> list[dict]:
    """A small covering array of the given strength, deterministic (see the module docstring).

    With no more factors than the strength it is the product (less what the
    constraint rejects); no factors at all give the single empty row (or none,
    if the constraint rejects it).
    """
    _check_strength(strength)
    names, values = _declared(factors)
    accept = _acceptor(names, values, constraint)
    sizes = [len(v) for v in values]
    uncovered = _required(sizes, accept, strength, _read_indices(names, reads))
    rows = []
    while uncovered:
        idx = _next_row(sizes, uncovered, accept, strength)
        uncovered.difference_update(_interactions(idx, strength))
        rows.append(_row(names, values, idx))
    return rows


def all_pairs(factors: dict[str, tuple], *, constraint: Constraint | None = None,
              reads: tuple[str, ...] | None = None) -> list[dict]:
    """The strength-2 covering array: every pair of values of two factors in some row."""
    return covering(factors, strength=2, constraint=constraint, reads=reads)


def covers(rows: list[dict], factors: dict[str, tuple], *, strength: int = 2,
           constraint: Constraint | None = None, reads: tuple[str, ...] | None = None) -> bool:
    """True when ``rows`` cover every t-tuple that some row accepted by ``constraint`` can hold.

    A row the constraint rejects covers nothing. A row whose keys are not the
    declared factors, or that holds an undeclared value, is a ValueError.
    """
    _check_strength(strength)
    names, values = _declared(factors)
    accept = _acceptor(names, values, constraint)
    required = _required([len(v) for v in values], accept, strength, _read_indices(names, reads))
    for k, row in enumerate(rows):
        idx = _indices(row, names, values, f"rows[{k}]")
        if accept is None or accept(idx):
            required.difference_update(_interactions(idx, strength))
    return not required


def covers_all_pairs(rows: list[dict], factors: dict[str, tuple], constraint: Constraint | None = None,
                     reads: tuple[str, ...] | None = None) -> bool:
    """``covers`` at strength 2."""
    return covers(rows, factors, strength=2, constraint=constraint, reads=reads)


def _read_indices(names: list[str], reads) -> list[int] | None:
    """The factor numbers of `reads` (None: the constraint may read any factor)."""
    if reads is None:
        return None
    unknown = [name for name in reads if name not in names]
    if unknown or isinstance(reads, str):
        raise ValueError(f"reads: expected a tuple of factor names from {names}, got {reads!r}")
    return [names.index(name) for name in reads]


def _check_strength(strength) -> None:
    if isinstance(strength, bool) or not isinstance(strength, int) or strength < 1:
        raise ValueError(f"strength: expected an int >= 1, got {strength!r}")


def _declared(factors: dict[str, tuple]) -> tuple[list[str], list[tuple]]:
    """Check a declaration; return its factor names and value tuples in declared order."""
    if not isinstance(factors, dict):
        raise TypeError(f"factors: expected a dict of factor name -> tuple of values, got {type(factors).__name__}")
    for name, values in factors.items():
        if not isinstance(name, str):
            raise TypeError(f"factors: expected str factor names, got {name!r} ({type(name).__name__})")
        if not isinstance(values, tuple):
            raise TypeError(f"factors[{name!r}]: expected a tuple of values, got {type(values).__name__}")
        if not values:
            raise ValueError(f"factors[{name!r}]: expected at least one value, got an empty tuple")
        for k, value in enumerate(values):
            if value in values[:k]:
                raise ValueError(f"factors[{name!r}]: expected distinct values, got {value!r} twice")
    return list(factors), list(factors.values())


def _acceptor(names: list[str], values: list[tuple], constraint: Constraint | None):
    """The constraint as a test on value indices, or None when every row is allowed."""
    if constraint is None:
        return None
    if not callable(constraint):
        raise TypeError(f"constraint: expected a callable row -> bool or None, got {type(constraint).__name__}")
    return lambda idx: bool(constraint(_row(names, values, idx)))


def _row(names: list[str], values: list[tuple], idx: tuple[int, ...]) -> dict:
    return {name: vals[i] for name, vals, i in zip(names, values, idx)}


def _indices(row: dict, names: list[str], values: list[tuple], where: str) -> tuple[int, ...]:
    """The value numbers of a row, checked against the declaration."""
    if not isinstance(row, dict) or list(row) != names:
        got = list(row) if isinstance(row, dict) else type(row).__name__
        raise ValueError(f"{where}: expected a dict with keys {names}, got {got}")
    idx = []
    for name, vals in zip(names, values):
        try:
            idx.append(vals.index(row[name]))
        except ValueError:
            raise ValueError(f"{where}[{name!r}]: expected one of {vals!r}, got {row[name]!r}") from None
    return tuple(idx)


def _interactions(idx: tuple[int, ...], strength: int) -> Iterator[Interaction]:
    """What one row covers: its t-tuples of values (all its values with fewer factors)."""
    return combinations(tuple(enumerate(idx)), min(strength, len(idx)))


def _required(sizes: list[int], accept, strength: int, reads: list[int] | None) -> set[Interaction]:
    """Every interaction some accepted row holds. With `reads` (the factors the constraint reads)
    only their product is walked: an interaction is possible when some accepted combination of
    those factors agrees with it on them, whatever it holds elsewhere."""
    strength = min(strength, len(sizes))
    every = {
        tuple(zip(fs, vs))
        for fs in combinations(range(len(sizes)), strength)
        for vs in _cartesian(*(range(sizes[f]) for f in fs))
    }
    if accept is None:
        return every
    if reads is not None:
        allowed = set()
        for sub in _cartesian(*(range(sizes[f]) for f in reads)):
            idx = [0] * len(sizes)
            for f, v in zip(reads, sub):
                idx[f] = v
            if accept(tuple(idx)):
                allowed.add(tuple(zip(reads, sub)))

        @functools.cache
        def possible(part: Interaction) -> bool:
            return any(all(dict(a)[f] == v for f, v in part) for a in allowed)
        return {i for i in every if possible(tuple(item for item in i if item[0] in reads))}
    missing = set(every)
    for idx in _cartesian(*(range(n) for n in sizes)):
        if not missing:
            break
        if accept(idx):
            missing.difference_update(_interactions(idx, strength))
    return every - missing


def _next_row(sizes: list[int], uncovered: set[Interaction], accept, strength: int) -> tuple[int, ...]:
    """The greedy next row: seeded by the busiest uncovered t-tuple, filled largest factor first."""
    strength = min(strength, len(sizes))
    busy = Counter(item for interaction in uncovered for item in interaction)
    seed = max(sorted(uncovered), key=lambda interaction: sum(busy[item] for item in interaction))
    fixed = dict(seed)
    order = sorted((f for f in range(len(sizes)) if f not in fixed), key=lambda f: (-sizes[f], f))

    def gain(f: int, v: int) -> int:
        """Uncovered t-tuples that (f, v) completes with t - 1 of the values already fixed."""
        return sum(tuple(sorted([(f, v), *((g, fixed[g]) for g in others)])) in uncovered
                   for others in combinations(sorted(fixed), strength - 1))

    def complete(depth: int) -> tuple[int, ...] | None:
        if depth == len(order):
            idx = tuple(fixed[f] for f in range(len(sizes)))
            return idx if accept is None or accept(idx) else None
        f = order[depth]
        for v in sorted(range(sizes[f]), key=lambda v: (-gain(f, v), -busy[(f, v)], v)):
            fixed[f] = v
            found = complete(depth + 1)
            if found is not None:
                return found
            del fixed[f]
        return None

    return complete(0)
