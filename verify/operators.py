"""One place per operator: what the suite knows of each operator, behind one record.

An Operator holds its case type and the first word of its ids, the tier's
cases and the order of its suites, the suite a case is reported in, how a
case is judged on an implementation, a case's size (for time limits and for
shrinking) and the moves that shrink it, the heat maps of its report, the
factors only our kernels have, its built-in implementations, and how a
workload line or a recorded call becomes a case. The runner, impls, shrink,
figures and workload reach operators only through this module: adding an
operator is one module like verify/decode_op.py and one entry in OPERATORS.
"""

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Builtin:
    """A built-in implementation: fn, the distribution it comes from (its version is reported),
    and `check()`, which raises ValueError naming --impl when it cannot run here (None: it can)."""

    fn: Callable
    package: str
    check: Callable | None = None


@dataclass(frozen=True)
class Operator:
    """name: the operator and the first word of its case ids; case_type: its case class (with
    from_id and id); suites: its suites in report order; cases(tier): the tier's cases;
    suite_of(case); verdict(case, device, impl): build, run and judge a case on impl (an
    verify.impls.Impl); work_units(case): its size in the units of runner.UNIT_SECONDS;
    size(case): a tuple compared when shrinking; moves(case): field changes that may shrink it;
    heat: the factor pairs of its default heat maps; ours_alone: factors only our kernels take,
    as {factor: values another implementation runs}; builtins: {spec: Builtin};
    workload_case(fields): the case of a workload line; shapes(*call): the workload line of a
    call of its public entry's signature."""

    name: str
    case_type: type
    suites: tuple
    cases: Callable
    suite_of: Callable
    verdict: Callable
    work_units: Callable
    size: Callable
    moves: Callable
    heat: tuple
    ours_alone: dict
    builtins: dict = field(default_factory=dict)
    workload_case: Callable | None = None
    shapes: Callable | None = None


def _registry() -> dict:
    from verify import decode_op, kda_op
    return {op.name: op for op in (decode_op.OPERATOR, kda_op.OPERATOR)}


OPERATORS = _registry()


def of_id(case_id: str) -> Operator | None:
    """The operator whose ids start like `case_id` (None for a probe or an unknown word)."""
    return OPERATORS.get(case_id.split("-", 1)[0])


def of_case(case) -> Operator:
    """The operator of a case object."""
    for op in OPERATORS.values():
        if isinstance(case, op.case_type):
            return op
    raise TypeError(f"case: expected a case of {', '.join(OPERATORS)}, got {type(case).__name__}")


def parse_id(case_id: str):
    """The case an id names; ValueError when no operator's ids start like it or it does not parse."""
    op = of_id(case_id)
    if op is None:
        raise ValueError(f"case id: expected one starting with {' or '.join(f'{n}-' for n in OPERATORS)}, "
                         f"got {case_id!r}")
    return op.case_type.from_id(case_id)
