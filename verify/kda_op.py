"""The KDA operator: Kimi Delta Attention forward, chunked (its record in verify.operators).

Cases are cases.kda.KdaCase (ids `kda-...`); our schedules are unsegmented,
segmented and auto, a suite each; another implementation runs the auto
cases without our paged or V-first states. Built-ins: fla-core's chunk and
recurrent kernels (verify/fla_kda.py).
"""

import dataclasses
import time

import torch

from cases import kda as kda_cases
from verify import adapters, fla_kda, floors, gate, smaller, tolerances
from verify.device import seed_of
from verify.operators import Builtin, Operator

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}


def suite_of(case) -> str:
    return "kda-" + ("segmented" if case.schedule.startswith("segmented") else case.schedule)


def verdict(case, device, impl):
    """Build, run and judge one KDA case on `impl`: output and final state against the float64
    recurrence."""
    started = time.perf_counter()
    suite = suite_of(case)
    why = impl.skip_reason(case)
    if why is not None:
        return gate.skipped(suite, case.id, why)
    inputs = kda_cases.build(case, device, seed_of(case.id))
    try:
        outputs, untouched = adapters.kda(inputs) if impl.fn is None else adapters.kda_with(impl.fn, inputs)
    except Exception as exc:
        return gate.failed(suite, case.id, f"raised {type(exc).__name__}: {exc}", started)
    judged, floor, floor_rms = floors.kda(inputs, outputs)
    rms_caps = {name: tolerances.kda_rms_cap(r) for name, r in floor_rms.items()}
    result = gate.judge(suite, case.id, judged, floor, tolerances.KDA_FLOOR_MULTIPLE, rms_max=rms_caps,
                        started=started)
    if not untouched:
        result = dataclasses.replace(result, passed=False,
                                     reasons=result.reasons + ("state_cache slots no sequence names were written",))
    return result


def _tokens(case) -> int:
    return sum(case.lens) if case.lens else case.b * case.t


def work_units(case) -> int:
    """Tokens x heads x head size."""
    return _tokens(case) * case.h * case.dim


def size(case) -> tuple:
    """Tokens x H x dim^2, then the sequences."""
    return _tokens(case) * case.h * case.dim ** 2, case.num_seqs


def moves(case) -> list[dict]:
    """The field changes tried from a KDA case; head sizes shrink to those the declared cases use."""
    marks = {2 ** k for k in range(4, max(case.lens or (case.t,)).bit_length())}
    if case.lens:
        out = [dict(lens=lens) for lens in smaller.lens_moves(case.lens, marks)]
    else:
        out = [dict(b=b) for b in smaller.fewer(case.b)]
        out += [dict(t=t) for t in smaller.shorter(case.t, marks, lowest=1)]
    out += [dict(h=h) for h in smaller.fewer(case.h)]
    dims = sorted({c.dim for c in kda_cases.kda_cases("gpu")})
    out += [dict(dim=d) for d in dims if d < case.dim]
    return out


def workload_case(fields: dict):
    """The case of a workload line: h, dim and t or lens required; the rest as KdaCase defaults."""
    fields = dict(fields)
    if "lens" in fields:
        fields["lens"] = tuple(fields["lens"])
    known = {f.name for f in dataclasses.fields(kda_cases.KdaCase)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"unknown kda field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return kda_cases.KdaCase(**fields)


def shapes(q, k, v, g, beta, *, cu_seqlens=None, gate="log", beta_sigmoid=False, qk_l2norm=False,
           initial_state=None, state_v_first=False, state_cache=None, **_) -> dict:
    """The workload line of one flash_kda_fwd-style call (with cu_seqlens a device sync: the offsets
    come to the host)."""
    batch, seq_len, heads, dim_k = q.shape
    if v.shape[-1] != dim_k:
        raise ValueError(f"v: the KDA cases have V == K, got K = {dim_k}, V = {v.shape[-1]}")
    if state_cache is not None:
        state = "paged"
    elif initial_state is not None:
        state = "vfirst" if state_v_first else "dense"
    else:
        state = "none"
    line = {"operator": "kda", "h": heads, "dim": dim_k, "gate": gate, "beta_sigmoid": bool(beta_sigmoid),
            "l2norm": bool(qk_l2norm), "state": state, "dtype": _DTYPES.get(q.dtype, str(q.dtype))}
    if cu_seqlens is not None:
        offsets = cu_seqlens.tolist()
        line["lens"] = [b - a for a, b in zip(offsets, offsets[1:])]
    else:
        line.update(b=batch, t=seq_len)
    return line


OPERATOR = Operator(
    name="kda", case_type=kda_cases.KdaCase, suites=("kda-unsegmented", "kda-segmented", "kda-auto"),
    cases=kda_cases.kda_cases, suite_of=suite_of, verdict=verdict, work_units=work_units, size=size, moves=moves,
    heat=(("tag", "gate"), ("state", "len")), ours_alone={"schedule": ("auto",), "state": ("none", "dense")},
    builtins={"fla-chunk": Builtin(fla_kda.chunk, fla_kda.PACKAGE, fla_kda.check),
              "fla-recurrent": Builtin(fla_kda.recurrent, fla_kda.PACKAGE, fla_kda.check)},
    workload_case=workload_case, shapes=shapes)
