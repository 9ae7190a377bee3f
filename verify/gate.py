"""The gate: from measured errors to a Verdict. Constants live in verify.tolerances.

PASS needs, for every judged tensor: every element written and finite (outputs
are NaN-poisoned before the call); rows that see no key exactly zero; and
max|out - ref8| <= multiple * floor + eps, where eps is half an ulp of the
output dtype at the largest reference magnitude. KDA also caps the RMS ratio.
"""

import math
import os
import time

import torch

from verify import tolerances
from verify.metrics import compare
from verify.verdict import Verdict


def bound(floor: float, multiple: float, out_dtype: torch.dtype, ref_max: float) -> float:
    """multiple * floor + half an output ulp at the largest reference value (a whole one when
    the Triton interpreter, which truncates, made the output)."""
    eps = tolerances.OUT_EPS[str(out_dtype).replace("torch.", "")]
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        eps *= tolerances.INTERPRETER_STORE_ULPS
    return multiple * floor + eps * ref_max


def judge(suite: str, case_id: str, outputs: dict, floor, multiple: float, *,
          zero_rows: torch.Tensor | None = None, rms_max: float | None = None,
          started: float | None = None, detail: dict | None = None) -> Verdict:
    """Judge named outputs {name: (out, ref8)} against the floor (one float, or {name: float}).

    zero_rows: bool mask over the leading dims of the first output; those rows
    must be exactly zero. rms_max: cap on each output's RMS ratio (one float, or
    {name: float}). The verdict reports the output with the largest error/floor.
    """
    floors = floor if isinstance(floor, dict) else {name: floor for name in outputs}
    rms_caps = rms_max if isinstance(rms_max, dict) else {name: rms_max for name in outputs}
    reasons = []
    detail = dict(detail or {})
    worst = (-1.0, 0.0, 0.0, 0.0)  # (err/floor, max abs, floor, bound) of the worst output
    nonfinite, rms_ratio = False, 0.0
    for name, (out, ref8) in outputs.items():
        err = compare(out, ref8)
        fl = floors[name]
        limit = bound(fl, multiple, out.dtype, err.ref_max)
        if err.nonfinite:
            nonfinite = True
            reasons.append(f"{name}: {err.nonfinite} elements not written or not finite (first at {err.worst})")
        if err.max_abs > limit:
            reasons.append(f"{name}: max abs err {err.max_abs:.3g} > bound {limit:.3g} "
                           f"({multiple:g} x floor {fl:.3g} + eps) at {err.worst}")
        cap = rms_caps[name]
        if cap is not None and err.rms_ratio > cap:
            reasons.append(f"{name}: rms ratio {err.rms_ratio:.3g} > {cap:.3g}")
        ratio = err.max_abs / fl if fl > 0 else (0.0 if err.max_abs == 0 else math.inf)
        if err.nonfinite or ratio > worst[0]:
            worst = (math.inf if err.nonfinite else ratio, err.max_abs, fl, limit)
            detail["worst"] = f"{name}{list(err.worst)}"
        rms_ratio = max(rms_ratio, err.rms_ratio)
    if zero_rows is not None and bool(zero_rows.any()):
        first = next(iter(outputs.values()))[0]
        rows = first.reshape(*zero_rows.shape, -1)[zero_rows]
        if not bool((rows == 0).all()):
            reasons.append(f"{int((rows != 0).any(-1).sum())} rows that see no key are not zero")
    err_floor, max_abs, fl, limit = worst
    detail["bound"] = limit
    if nonfinite:
        err_floor = max_abs = math.nan
    return Verdict(suite=suite, case_id=case_id, passed=not reasons, max_abs=max_abs, rms_ratio=rms_ratio,
                   floor=fl, err_floor=err_floor, reasons=tuple(reasons),
                   seconds=time.perf_counter() - started if started is not None else 0.0, detail=detail)


def failed(suite: str, case_id: str, reason: str, started: float | None = None, **detail) -> Verdict:
    """A verdict for a case that could not be judged numerically (an exception, a failed probe)."""
    return Verdict(suite=suite, case_id=case_id, passed=False, max_abs=math.nan, rms_ratio=math.nan,
                   floor=math.nan, err_floor=math.nan, reasons=(reason,),
                   seconds=time.perf_counter() - started if started is not None else 0.0, detail=detail)


def skipped(suite: str, case_id: str, reason: str) -> Verdict:
    """A verdict for a case the implementation under test declares it does not support."""
    return Verdict(suite=suite, case_id=case_id, passed=False, max_abs=math.nan, rms_ratio=math.nan,
                   floor=math.nan, err_floor=math.nan, reasons=(f"skipped: {reason}",), skipped=True)
