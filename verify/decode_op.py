"""The decode operator: paged attention over an fp8 or bf16 KV cache (its record in verify.operators).

Cases are cases.decode.DecodeCase (ids `decode-...`); our kernel paths are
onepass, split, auto and gluon, one suite each (gluon is skipped, with the
reason, on a device the Gluon kernel does not run on); another implementation
runs the auto cases. The built-in `torch` is a plain decode baseline.
"""

import time

import torch

from cases import decode as decode_cases
from cases.decode_matrix import FACTORS, decode_matrix
from reference import layouts
from verify import adapters, floors, gate, smaller
from verify.device import seed_of
from verify.operators import Builtin, Operator

_REQUIRED = ("cache", "hq", "hkv", "d", "block", "lens")
_DEFAULTS = dict(scales="token", window=0, q=1, layout="shuffled", path="auto", dist="gauss")
_CACHE_NAMES = {torch.float8_e4m3fn: "e4m3fn", torch.float8_e4m3fnuz: "e4m3fnuz", torch.bfloat16: "bf16"}


def suite_of(case) -> str:
    return f"decode-{case.path}"


def verdict(case, device, impl):
    """Build, run and judge one decode case on `impl`."""
    started = time.perf_counter()
    suite = suite_of(case)
    why = impl.skip_reason(case) or adapters.decode_unavailable(case, device)
    if why is not None:
        return gate.skipped(suite, case.id, why)
    inputs = decode_cases.build(case, device, seed_of(case.id))
    judged = floors.decode(inputs)
    try:
        out = adapters.decode(inputs) if impl.fn is None else adapters.decode_with(impl.fn, inputs)
    except Exception as exc:  # a crash is a failure of the case, not of the run
        return gate.failed(suite, case.id, f"raised {type(exc).__name__}: {exc}", started)
    return gate.judge(suite, case.id, {"out": (out, judged.ref8)}, judged.floor, judged.multiple,
                      zero_rows=inputs.empty_rows, started=started)


def work_units(case) -> int:
    """Sequence tokens x kv heads x head size x query tokens."""
    return sum(case.lens) * case.hkv * case.d * case.q


def size(case) -> tuple:
    """Keys x (Hq*Q + Hkv) x D, then the sequences, then the keys a window lets a row see (full
    attention: the longest sequence), then the block."""
    longest = max(case.lens)
    span = min(case.window, longest) if case.window > 0 else longest
    return sum(case.lens) * (case.hq * case.q + case.hkv) * case.d, len(case.lens), span, case.block


def moves(case) -> list[dict]:
    """The field changes tried from a decode case (some may be invalid; they are skipped); head
    sizes and blocks shrink to the declared matrix's values."""
    w, q = case.window, case.q
    marks = {q, case.block, case.partition} | ({w, w + q - 1} if w > 0 else set())
    out = [dict(lens=lens) for lens in smaller.lens_moves(case.lens, marks)]
    group = case.hq // case.hkv
    for hkv in smaller.fewer(case.hkv) | {case.hkv}:
        for g in smaller.fewer(group) | {group}:
            out.append(dict(hq=hkv * g, hkv=hkv))
    out += [dict(hkv=h) for h in smaller.fewer(case.hkv) if case.hq % h == 0]
    out += [dict(q=n) for n in smaller.fewer(q)]
    out += [dict(d=d) for d in FACTORS["d"] if d < case.d]
    out += [dict(window=n) for n in (smaller.fewer(w) if w > 0 else {1, 2, case.block})]
    out += [dict(block=b) for b in FACTORS["block"] if b < case.block and case.partition % b == 0]
    return out


def workload_case(fields: dict):
    """The case of a workload line: cache, hq, hkv, d, block, lens required; the rest defaulted."""
    missing = [k for k in _REQUIRED if k not in fields]
    if missing:
        raise ValueError(f"expected the decode fields {', '.join(_REQUIRED)}, missing {', '.join(missing)}")
    known = set(_REQUIRED) | set(_DEFAULTS)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"unknown decode field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    args = {**_DEFAULTS, **fields}
    args["lens"] = tuple(args["lens"])
    return decode_cases.DecodeCase(**args)


def shapes(out, query, key_cache, value_cache, block_tables, seq_lens, scale, k_scale, v_scale, sliding_window,
           *, layout="shuffled", **_) -> dict:
    """The workload line of one paged_attention_decode call (a device sync: the lengths come to the host)."""
    num_kv_heads = key_cache.shape[1] if layout == "shuffled" else key_cache.shape[2]
    block = key_cache.shape[3] if layout == "shuffled" else key_cache.shape[1]
    per_token = isinstance(k_scale, torch.Tensor) and k_scale.numel() > 1
    q4 = query if query.dim() == 4 else query.unsqueeze(1)
    return {"operator": "decode", "cache": _CACHE_NAMES.get(key_cache.dtype, str(key_cache.dtype)),
            "scales": "token" if per_token else "tensor", "hq": q4.shape[2], "hkv": num_kv_heads,
            "d": q4.shape[3], "block": block, "window": sliding_window, "lens": seq_lens.tolist(),
            "q": q4.shape[1], "layout": layout}


def torch_decode(out, query, key_cache, value_cache, block_tables, seq_lens, scale, k_scale, v_scale,
                 sliding_window, *, layout="shuffled", max_seq_len=None):
    """A plain decode: each sequence's keys and values gathered from the paged cache, dequantized to
    float32, and `scaled_dot_product_attention` over them (drafts causal, the window applied); writes
    `out`. Rows that see no key get zeros."""
    k_all = layouts.unpack_k(key_cache, layout)
    v_all = layouts.unpack_v(value_cache, layout)
    q4 = query if query.dim() == 4 else query.unsqueeze(1)
    o4 = out if out.dim() == 4 else out.unsqueeze(1)
    num_q, hq = q4.shape[1], q4.shape[2]
    hkv = k_all.shape[2]

    def dequantized(cache, scale_arg, table, length):
        tokens = layouts.gather_tokens(cache, table, length).to(torch.float32)  # [L, Hkv, D]
        if isinstance(scale_arg, torch.Tensor) and scale_arg.numel() > 1:
            return tokens * layouts.gather_tokens(scale_arg.permute(0, 2, 1).unsqueeze(-1), table, length)
        return tokens * (1.0 if scale_arg is None else float(scale_arg))

    lengths = seq_lens.tolist()
    for i, length in enumerate(lengths):
        o4[i].zero_()
        if length == 0:
            continue
        keys = dequantized(k_all, k_scale, block_tables[i], length).permute(1, 0, 2)  # [Hkv, L, D]
        values = dequantized(v_all, v_scale, block_tables[i], length).permute(1, 0, 2)
        pos = torch.arange(length, device=query.device)
        row = length - num_q + torch.arange(num_q, device=query.device)  # absolute position of each draft
        seen = pos[None, :] <= row[:, None]
        if sliding_window > 0:
            seen &= pos[None, :] > row[:, None] - sliding_window
        q = q4[i].permute(1, 0, 2).to(torch.float32)  # [Hq, Q, D]
        k = keys.repeat_interleave(hq // hkv, dim=0)
        v = values.repeat_interleave(hq // hkv, dim=0)
        att = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=seen, scale=scale)
        o4[i] = torch.where(seen.any(-1)[None, :, None], att, 0.0).permute(1, 0, 2).to(out.dtype)
    return out


OPERATOR = Operator(
    name="decode", case_type=decode_cases.DecodeCase,
    suites=("decode-onepass", "decode-split", "decode-auto", "decode-gluon"),
    cases=decode_matrix, suite_of=suite_of, verdict=verdict, work_units=work_units, size=size, moves=moves,
    heat=(("window", "len"), ("cache", "dist")), ours_alone={"path": ("auto",)},
    builtins={"torch": Builtin(torch_decode, "torch")}, workload_case=workload_case, shapes=shapes)
