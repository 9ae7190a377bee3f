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

from verify import operators


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
        op = operators.OPERATORS.get(operator) if isinstance(operator, str) else None
        if op is None:
            raise ValueError(f"{where}: operator: expected {' or '.join(map(repr, operators.OPERATORS))}, "
                             f"got {operator!r}")
        try:
            out.append(op.workload_case(fields))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
    return out


def recorder(fn, path, operator: str = "decode"):
    """`fn` (the public entry of `operator`, or a function with its signature: paged_attention_decode,
    flash_kda_fwd), appending each call's workload line to `path` before calling it."""
    op = operators.OPERATORS.get(operator) if isinstance(operator, str) else None
    if op is None:
        raise ValueError(f"operator: expected {' or '.join(map(repr, operators.OPERATORS))}, got {operator!r}")

    def recorded(*args, **kwargs):
        with open(path, "a") as fh:
            fh.write(json.dumps(op.shapes(*args, **kwargs)) + "\n")
        return fn(*args, **kwargs)
    return recorded
