"""The runner: every suite's cases as jobs, each ending in a Verdict.

A job is (suite, case id, how to judge it). `jobs(tier)` lists all of a tier;
`run(jobs)` judges them one by one, turning an exception into a FAIL verdict
that names it, and reports progress a line per suite.
"""

import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable

import torch

from cases import regressions
from verify import gate, impls, operators, probes
from verify.device import release_cached
from verify.verdict import Verdict


@dataclass(frozen=True)
class Job:
    suite: str
    case_id: str
    judge: Callable[[torch.device], Verdict]


def suite_of(case) -> str:
    """The suite a case is reported in: its operator and kernel path (verify.operators)."""
    return operators.of_case(case).suite_of(case)


# The implementation judged per operator (verify.impls); ours unless `use` says otherwise.
_IMPLS = dict(impls.OURS)


def use(chosen: dict) -> None:
    """Judge every later case on the implementations of `chosen` ({operator: Impl})."""
    _IMPLS.clear()
    _IMPLS.update(chosen)


def implementations() -> dict:
    """{operator: Impl} judged now."""
    return dict(_IMPLS)


def case_verdict(case, device) -> Verdict:
    """Judge a case on its operator's implementation in use, then release what it left cached on a GPU."""
    op = operators.of_case(case)
    try:
        return op.verdict(case, device, _IMPLS[op.name])
    finally:
        release_cached(device)


def regression_verdict(reg, device) -> Verdict:
    """Judge one regression: its numeric case or its probe."""
    if reg.case is not None:
        return case_verdict(reg.case, device)
    started = time.perf_counter()
    try:
        return getattr(probes, reg.probe)(reg, device)
    except Exception as exc:
        return gate.failed("regressions", reg.id, f"raised {type(exc).__name__}: {exc}", started)


def case_job(case) -> Job:
    """The job that judges `case`."""
    return Job(suite_of(case), case.id, lambda device, c=case: case_verdict(c, device))


def job_for_id(case_id: str) -> Job:
    """The job of any case id: a probe by its regression's name, any other case rebuilt from its id."""
    if case_id.startswith("probe-"):
        reg = regressions.by_name(case_id[len("probe-"):])
        return Job("regressions", reg.id, lambda device: regression_verdict(reg, device))
    return case_job(operators.parse_id(case_id))


def regression_jobs(tier: str) -> list[Job]:
    out = []
    for reg in regressions.ALL:
        if reg.gpu and tier == "cpu":
            continue
        suite = "regressions" if reg.case is None else suite_of(reg.case)
        out.append(Job(suite, reg.id, lambda device, r=reg: regression_verdict(r, device)))
    return out


def jobs(tier: str) -> list[Job]:
    """Every job of a tier, suites in a fixed order."""
    out = [case_job(c) for op in operators.OPERATORS.values() for c in op.cases(tier)]
    out += regression_jobs(tier)
    suites = [s for op in operators.OPERATORS.values() for s in op.suites] + ["regressions"]
    order = {suite: i for i, suite in enumerate(suites)}
    return sorted(out, key=lambda j: order.get(j.suite, len(order)))


def select(all_jobs: list[Job], pattern: str | None) -> list[Job]:
    """Jobs whose case id or suite contains every space-separated word of `pattern`."""
    if not pattern:
        return all_jobs
    words = pattern.split()
    return [j for j in all_jobs if all(w in j.case_id or w in j.suite for w in words)]


PROGRESS_SECONDS = 30.0

# A job's time limit (verify.parallel): TIMEOUT_BASE_S, which covers compiling a kernel
# specialization and building the case, plus SLACK times the time its size predicts. The
# seconds per unit (sequence tokens x kv heads x head size x query tokens for decode, tokens x
# heads x head size for KDA) are the slowest seen: 1.5e-5 s on the CPU tier under the
# interpreter (29.9 s for decode-...-L4200_4500-...-capped-split, 8.9e6 units, two workers on
# two cores), and far less compiled.
TIMEOUT_BASE_S = 120.0
SLACK = 10.0
UNIT_SECONDS = {"interpreter": 2e-5, "compiled": 1e-7}


def work_units(case_id: str) -> int:
    """The size of a case, in the units of UNIT_SECONDS; 0 for a probe or an id that does not parse."""
    op = operators.of_id(case_id)
    try:
        return op.work_units(op.case_type.from_id(case_id)) if op is not None else 0
    except ValueError:  # an id that does not parse: the base limit alone
        return 0


def time_limit(case_id: str, base: float | None = None) -> float:
    """Seconds a job may take before its worker is killed: base (TIMEOUT_BASE_S by default)
    plus SLACK times what its size predicts on this machine."""
    from kernels import arch

    rate = UNIT_SECONDS["interpreter" if arch.interpreting() else "compiled"]
    return (TIMEOUT_BASE_S if base is None else base) + SLACK * rate * work_units(case_id)


def run(selected: list[Job], device, *, stream=sys.stderr, on_verdict=None) -> list[Verdict]:
    """Judge each job; a line per suite as it completes, and one every PROGRESS_SECONDS
    within a long suite (done/total, failures so far). `on_verdict` sees each verdict as it comes."""
    verdicts = []
    totals = {}
    for job in selected:
        totals[job.suite] = totals.get(job.suite, 0) + 1
    current, started, count, fails, shown = None, time.perf_counter(), 0, 0, time.perf_counter()

    def line(done: bool):
        state = f"{count} cases" if done else f"{count}/{totals[current]} cases"
        print(f"  {current}: {state}, {fails} failed, {time.perf_counter() - started:.1f}s",
              file=stream, flush=True)

    for job in selected:
        if job.suite != current:
            if current is not None:
                line(done=True)
            current, started, count, fails = job.suite, time.perf_counter(), 0, 0
            shown = started
        t0 = time.perf_counter()
        try:
            verdict = job.judge(device)
        except Exception as exc:
            detail = traceback.format_exc(limit=3)
            # a device memory shortfall is marked: verify.parallel judges such a job again alone
            memory = {"out_of_memory": True} if isinstance(exc, torch.OutOfMemoryError) else {}
            verdict = gate.failed(job.suite, job.case_id, f"raised {type(exc).__name__}: {exc}", t0,
                                  traceback=detail, **memory)
        verdicts.append(verdict)
        if on_verdict is not None:
            on_verdict(verdict)
        count += 1
        fails += not verdict.passed and not verdict.skipped
        if time.perf_counter() - shown >= PROGRESS_SECONDS and count < totals[current]:
            line(done=False)
            shown = time.perf_counter()
    if current is not None:
        line(done=True)
    return verdicts
