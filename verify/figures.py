"""What the pictures of a run show, as numbers: err/bound histograms and heat maps per suite.

Both are drawn from a case's err/bound (verify.report.err_bound: its error
over the bound it had to meet; above 1 it failed), which puts every path of
a suite on one scale.

Histogram: counts of a suite's judged cases in bins of err/bound a quarter
of a decade wide from 1e-4 to 1e2 (BIN_EDGES), plus the cases below 1e-4
(an exact zero included), the cases above 1e2, and the failed cases without
a number (an output not written, a raise, a crash). Failed cases are also
counted per bin apart.

Heat map: over two matrix factors of the suite's cases (the fields of the
case type its ids parse to, verify.operators: cases.decode.DecodeCase, cases.kda.KdaCase, plus
`len`, the longest sequence rounded up to a power of two), one cell per pair
of values that occurs, holding the worst err/bound among its cases (a failed
case without a number counts as worst), how many cases and how many failed.
HEAT names the two pairs drawn by default for each operator; ids that parse
to no case type (probes) have no factors and their suite no heat map.
"""

import bisect
import dataclasses
import math
from dataclasses import dataclass

from verify import operators, report
from verify.verdict import Verdict

# The case type of each operator, by the id's first word, and the factor pairs of a suite's
# default heat maps, (rows, columns): each operator's record (verify.operators).
CASE_TYPES = {name: op.case_type for name, op in operators.OPERATORS.items()}
HEAT = {name: op.heat for name, op in operators.OPERATORS.items()}
DECADE_STEPS = 4
LOW, HIGH = -4, 2  # decades of the histogram's range
BIN_EDGES = tuple(10.0 ** (LOW + k / DECADE_STEPS) for k in range((HIGH - LOW) * DECADE_STEPS + 1))


def case_of(case_id: str):
    """The case an id parses to, or None (a probe, an id of no known operator)."""
    case_type = CASE_TYPES.get(case_id.split("-", 1)[0])
    if case_type is None:
        return None
    try:
        return case_type.from_id(case_id)
    except ValueError:
        return None


def factors(case_id: str) -> dict | None:
    """{factor: value} of the case an id names: its case type's fields and `len` (the longest
    sequence rounded up to a power of two); None when the id parses to no case."""
    case = case_of(case_id)
    if case is None:
        return None
    values = {f.name: getattr(case, f.name) for f in dataclasses.fields(case)}
    longest = max(case.lens) if case.lens else getattr(case, "t", 0)
    values["len"] = 1 << max(0, int(longest) - 1).bit_length()
    return values


def factor_names(operator: str) -> tuple[str, ...]:
    """The factors a heat map of `operator`'s cases can take."""
    case_type = CASE_TYPES[operator]
    return tuple(f.name for f in dataclasses.fields(case_type)) + ("len",)


def parse_heat(text: str) -> tuple[str, str]:
    """`--heat A,B` as (A, B); ValueError naming --heat unless both are factors of some operator."""
    names = [part.strip() for part in text.split(",")]
    known = sorted({name for op in CASE_TYPES for name in factor_names(op)})
    if len(names) != 2 or not all(names) or names[0] == names[1] or any(n not in known for n in names):
        raise ValueError(f"--heat: expected two different factors A,B of {', '.join(known)}, got {text!r}")
    return names[0], names[1]


@dataclass(frozen=True)
class Histogram:
    """counts[k] and failed[k]: cases with BIN_EDGES[k] <= err/bound < BIN_EDGES[k + 1]; below, above:
    the cases under the first edge and at or over the last; unmeasured: failed cases without a number."""

    counts: tuple[int, ...]
    failed: tuple[int, ...]
    below: int
    above: int
    unmeasured: int

    @property
    def total(self) -> int:
        return sum(self.counts) + self.below + self.above + self.unmeasured


def histogram(verdicts: list[Verdict]) -> Histogram:
    """The err/bound histogram of the judged cases among `verdicts` (see the module docstring)."""
    bins = len(BIN_EDGES) - 1
    counts, failed = [0] * bins, [0] * bins
    below = above = unmeasured = 0
    for v in verdicts:
        if v.skipped:
            continue
        x = report.err_bound(v)
        if math.isnan(x):
            unmeasured += not v.passed
        elif x < BIN_EDGES[0]:
            below += 1
        elif x >= BIN_EDGES[-1]:
            above += 1
        else:
            k = bisect.bisect_right(BIN_EDGES, x) - 1
            counts[k] += 1
            failed[k] += not v.passed
    return Histogram(tuple(counts), tuple(failed), below, above, unmeasured)


@dataclass(frozen=True)
class Cell:
    """worst: the largest err/bound of the cell's cases (NaN: a failed case without a number);
    cases, failed: how many."""

    worst: float
    cases: int
    failed: int


@dataclass(frozen=True)
class Heat:
    """A heat map over factors `rows` x `columns`: their values in order and {(row, column): Cell}."""

    rows: str
    columns: str
    row_values: tuple
    column_values: tuple
    cells: dict


def heat(verdicts: list[Verdict], rows: str, columns: str) -> Heat | None:
    """The heat map of the judged cases among `verdicts` over two factors; None when no case has
    both (probes, another operator's factors)."""
    cells: dict = {}
    for v in verdicts:
        found = None if v.skipped else factors(v.case_id)
        if found is None or rows not in found or columns not in found:
            continue
        key = (found[rows], found[columns])
        x = report.err_bound(v)
        worst, cases, failed = cells.get(key, (-math.inf, 0, 0))
        if math.isnan(x) and not v.passed:
            worst = math.nan
        elif not math.isnan(x) and not math.isnan(worst):
            worst = max(worst, x)
        cells[key] = (worst, cases + 1, failed + (not v.passed))
    if not cells:
        return None
    return Heat(rows, columns, _ordered(k[0] for k in cells), _ordered(k[1] for k in cells),
                {key: Cell(w if w != -math.inf else math.nan, n, f) for key, (w, n, f) in cells.items()})


def heat_maps(verdicts: list[Verdict], pairs=None) -> list[Heat]:
    """The heat maps of one suite's verdicts: over `pairs` ((rows, columns), ...) when given, else
    over HEAT's pairs for the operator of its first case that parses."""
    if pairs is None:
        operator = next((v.case_id.split("-", 1)[0] for v in verdicts if case_of(v.case_id) is not None), None)
        pairs = HEAT.get(operator, ())
    maps = [heat(verdicts, a, b) for a, b in pairs]
    return [m for m in maps if m is not None]


def label(value) -> str:
    """A factor value as a heat map shows it: lengths joined by `_`, booleans as yes/no."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple):
        return "_".join(map(str, value)) or "-"
    return str(value) if value != "" else "-"


def heat_colour(worst: float, failed: int) -> tuple[str, str]:
    """(background, text colour) of a heat map cell: from pale (0) through yellow (half the bound)
    to dark orange (the bound), linear in err/bound; red past the bound or for any failure, purple
    for a failure without a number, grey for no number at all."""
    if math.isnan(worst):
        return ("#6639ba", "#ffffff") if failed else ("#eaeef2", "#57606a")
    if worst > 1 or failed:
        return "#cf222e", "#ffffff"
    t = max(0.0, worst)
    low, high = (_STOPS[0], _STOPS[1]) if t <= 0.5 else (_STOPS[1], _STOPS[2])
    u = t / 0.5 if t <= 0.5 else (t - 0.5) / 0.5
    rgb = tuple(round(a + (b - a) * u) for a, b in zip(low, high))
    return "#%02x%02x%02x" % rgb, "#ffffff" if t > 0.8 else "#1f2328"


_STOPS = ((255, 250, 235), (254, 196, 79), (217, 95, 14))  # heat colours at err/bound 0, 0.5 and 1


def _ordered(values) -> tuple:
    """Distinct values, numbers by size, everything else by its label."""
    distinct = set(values)
    return tuple(sorted(distinct, key=lambda x: (0, x, "") if isinstance(x, (int, float)) and not
                        isinstance(x, bool) else (1, 0, label(x))))
