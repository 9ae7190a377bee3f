"""Shrinking a failing case: the smallest nearby case that fails for the same reason.

A failing verdict's *reason class* is the kind of its most severe reason, in
this order: `raised:<Exception>[:<argument>]`, `nonfinite` (elements not
written or not finite), `zero-rows` (rows that see no key not zero), `bound`
(max abs err over the bound), `rms` (RMS ratio over its cap), `state-slots`
(a paged KDA state slot no sequence names was written). A candidate "fails
for the same reason" when it fails with the same class; one that passes, or
fails otherwise (an invalid shape the entry refuses is `raised:ValueError:...`),
does not.

The search is greedy and deterministic. Each round lists the moves from the
current case (drop a sequence, shorten a length, fewer heads, fewer queries,
a smaller head size, a shorter window, a smaller block; for KDA fewer
sequences, shorter ones, fewer heads, a smaller dim), keeps those that make
the case strictly smaller by `size`, judges them smallest first, and takes
the first that fails for the same reason. It ends when no move does, or after
`max_evals` judged cases. Every case is rebuilt from its own id, so a shrunk
case is as reproducible as the original. Probes (several calls, one verdict)
have no shape to shrink.
"""

import dataclasses
import re
from dataclasses import dataclass
from typing import Callable

from verify import gate, operators, runner
from verify.verdict import Verdict

MAX_EVALS = 200

_KINDS = (  # (class, pattern over one reason), most severe first
    ("nonfinite", re.compile(r"\w+: \d+ elements not written or not finite")),
    ("zero-rows", re.compile(r"\d+ rows that see no key are not zero")),
    ("bound", re.compile(r"\w+: max abs err .* > bound")),
    ("rms", re.compile(r"\w+: rms ratio .* > ")),
    ("state-slots", re.compile(r"state_cache slots no sequence names were written")),
)
_RAISED = re.compile(r"raised (?P<type>\w+): (?:(?P<arg>[A-Za-z_][\w/]*): )?")


def reason_class(verdict: Verdict) -> str:
    """The class of a failing verdict's most severe reason ("" for a pass, "other" when unknown)."""
    if verdict.passed:
        return ""
    for reason in verdict.reasons:
        m = _RAISED.match(reason)
        if m:
            return ":".join(p for p in ("raised", m["type"], m["arg"]) if p)
    for kind, pattern in _KINDS:
        if any(pattern.match(r) for r in verdict.reasons):
            return kind
    return "other"


def size(case) -> tuple:
    """How big a case is, compared as a tuple (its operator's measure, verify.operators)."""
    return operators.of_case(case).size(case)


def candidates(case) -> list:
    """The cases one move away that the case model accepts and that are strictly smaller,
    smallest first (ties by id); the kernel entry may still refuse some (they fail otherwise)."""
    moves = operators.of_case(case).moves(case)
    out = {}
    for change in moves:
        try:
            smaller = dataclasses.replace(case, **change)
        except (ValueError, TypeError):  # the case model refuses it (e.g. Hq % Hkv != 0)
            continue
        if size(smaller) < size(case):
            out.setdefault(smaller.id, smaller)
    return sorted(out.values(), key=lambda c: (size(c), c.id))


@dataclass(frozen=True)
class Step:
    """One judged case on the way down: its id, verdict and reason class."""

    case_id: str
    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class Shrunk:
    """original: the case asked for; steps: each accepted smaller case, in order;
    evaluations: cases judged (the original included); capped: stopped by max_evals."""

    original: Step
    steps: tuple
    evaluations: int
    capped: bool

    @property
    def smallest(self) -> Step:
        return self.steps[-1] if self.steps else self.original


def parse(case_id: str):
    """The decode or KDA case of an id; a probe id is refused (it has no shape to shrink)."""
    if case_id.startswith("probe-"):
        raise ValueError(f"case id: a probe ({case_id!r}) runs several calls and has no shape to shrink; "
                         "expected a decode- or kda- id")
    return operators.parse_id(case_id)


def _judge(case, device) -> Step:
    """Judge one case; an exception while building it is a failure that names it, as in a run."""
    try:
        verdict = runner.case_verdict(case, device)
    except Exception as exc:
        verdict = gate.failed(runner.suite_of(case), case.id, f"raised {type(exc).__name__}: {exc}")
    return Step(case.id, verdict, reason_class(verdict))


def shrink(case_id: str, device, *, max_evals: int = MAX_EVALS,
           on_step: Callable[[Step], None] | None = None) -> Shrunk:
    """Greedily shrink a failing case (see the module docstring); a passing original comes
    back with no steps. `on_step` sees the original and then each accepted step."""
    if max_evals < 1:
        raise ValueError(f"max_evals: expected an integer >= 1, got {max_evals}")
    current = parse(case_id)
    original = _judge(current, device)
    if on_step:
        on_step(original)
    steps, judged, evaluations = [], {current.id}, 1
    if original.verdict.passed:
        return Shrunk(original, (), evaluations, False)
    while True:
        for candidate in candidates(current):
            if candidate.id in judged:
                continue
            if evaluations >= max_evals:
                return Shrunk(original, tuple(steps), evaluations, True)
            step = _judge(candidate, device)
            judged.add(candidate.id)
            evaluations += 1
            if step.reason == original.reason:
                steps.append(step)
                current = candidate
                if on_step:
                    on_step(step)
                break
        else:
            return Shrunk(original, tuple(steps), evaluations, False)
