"""Cases from a user's own shapes (`quantfloor run --workload shapes.jsonl`), and a recorder that writes them.

A workload file holds one JSON object a line (blank lines and lines starting
with # are skipped). Its keys are the fields of the case of its operator:

    {"operator": "decode", "cache": "e4m3fn", "hq": 32, "hkv": 8, "d": 128, "block": 16,
     "window": 4096, "lens": [4149, 1384], "q": 1}
    {"operator": "kda", "h": 4, "dim": 128, "lens": [700, 1300], "gate": "softplus"}

decode: cache, hq, hkv, d, block, lens are required; scales (token), window
(0), q (1), layout (shuffled), path (auto), dist (gauss) default. kda: h, dim
and t or lens are required; the other fields of `cases.kda.KdaCase` keep its
defaults. Each line becomes a case with its stable id, built with the same
adversarial builders as the tiers' cases (poisoned pools, NaN scratch, ...).

`recorder(fn, path)` wraps a decode function with the signature of
`paged_attention_decode` (`recorder(fn, path, "kda")`: a KDA forward with
that of `flash_kda_fwd`): each call appends the line of its shapes to
`path`, then calls `fn`. Wrap the function a real program calls, run it, and
the file is a workload.
"""

import json
from pathlib import Path

import torch

from cases import decode as decode_cases
from cases import kda as kda_cases

_DECODE_REQUIRED = ("cache", "hq", "hkv", "d", "block", "lens")
_DECODE_DEFAULTS = dict(scales="token", window=0, q=1, layout="shuffled", path="auto", dist="gauss")
_CACHE_NAMES = {torch.float8_e4m3fn: "e4m3fn", torch.float8_e4m3fnuz: "e4m3fnuz", torch.bfloat16: "bf16"}


def _decode_case(fields: dict):
    missing = [k for k in _DECODE_REQUIRED if k not in fields]
    if missing:
        raise ValueError(f"expected the decode fields {', '.join(_DECODE_REQUIRED)}, missing {', '.join(missing)}")
    known = set(_DECODE_REQUIRED) | set(_DECODE_DEFAULTS)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"unknown decode field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    args = {**_DECODE_DEFAULTS, **fields}
    args["lens"] = tuple(args["lens"])
    return decode_cases.DecodeCase(**args)


def _kda_case(fields: dict):
    fields = dict(fields)
    if "lens" in fields:
        fields["lens"] = tuple(fields["lens"])
    known = {f.name for f in kda_cases.KdaCase.__dataclass_fields__.values()}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"unknown kda field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return kda_cases.KdaCase(**fields)


def load(path) -> list:
    """The cases of a workload file, in its order; ValueError naming the file, line and field."""
    out = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{number}"
        try:
            fields = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: expected one JSON object a line: {exc}") from None
        if not isinstance(fields, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(fields).__name__}")
        operator = fields.pop("operator", None)
        build = {"decode": _decode_case, "kda": _kda_case}.get(operator)
        if build is None:
            raise ValueError(f"{where}: operator: expected 'decode' or 'kda', got {operator!r}")
        try:
            out.append(build(fields))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
    return out


def shapes(query, key_cache, k_scale, seq_lens, sliding_window, layout) -> dict:
    """The workload line of one decode call (a device sync: the lengths come to the host)."""
    num_kv_heads = key_cache.shape[1] if layout == "shuffled" else key_cache.shape[2]
    block = key_cache.shape[3] if layout == "shuffled" else key_cache.shape[1]
    per_token = isinstance(k_scale, torch.Tensor) and k_scale.numel() > 1
    q4 = query if query.dim() == 4 else query.unsqueeze(1)
    return {"operator": "decode", "cache": _CACHE_NAMES.get(key_cache.dtype, str(key_cache.dtype)),
            "scales": "token" if per_token else "tensor", "hq": q4.shape[2], "hkv": num_kv_heads,
            "d": q4.shape[3], "block": block, "window": sliding_window, "lens": seq_lens.tolist(),
            "q": q4.shape[1], "layout": layout}


_KDA_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}


def kda_shapes(q, v, *, cu_seqlens=None, gate="log", beta_sigmoid=False, qk_l2norm=False, initial_state=None,
               state_v_first=False, state_cache=None, **_) -> dict:
    """The workload line of one KDA forward call (with cu_seqlens a device sync: the offsets come to
    the host)."""
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
            "l2norm": bool(qk_l2norm), "state": state, "dtype": _KDA_DTYPES.get(q.dtype, str(q.dtype))}
    if cu_seqlens is not None:
        offsets = cu_seqlens.tolist()
        line["lens"] = [b - a for a, b in zip(offsets, offsets[1:])]
    else:
        line.update(b=batch, t=seq_len)
    return line


def recorder(fn, path, operator: str = "decode"):
    """`fn` (a decode with the signature of paged_attention_decode, or with operator "kda" a KDA
    forward with that of flash_kda_fwd), appending each call's shapes to `path`."""
    if operator == "decode":
        def recorded(out, query, key_cache, value_cache, block_tables, seq_lens, scale, k_scale, v_scale,
                     sliding_window, *, layout="shuffled", **kwargs):
            _append(path, shapes(query, key_cache, k_scale, seq_lens, sliding_window, layout))
            return fn(out, query, key_cache, value_cache, block_tables, seq_lens, scale, k_scale, v_scale,
                      sliding_window, layout=layout, **kwargs)
    elif operator == "kda":
        def recorded(q, k, v, g, beta, **kwargs):
            _append(path, kda_shapes(q, v, **kwargs))
            return fn(q, k, v, g, beta, **kwargs)
    else:
        raise ValueError(f"operator: expected 'decode' or 'kda', got {operator!r}")
    return recorded


def _append(path, line: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(line) + "\n")
