"""The declared decode matrix, and its cut per tier.

Factors: cache dtype x scales x block x heads (Hq, Hkv) x D x window x layout
x length x Q x value distribution (cases.decode_values) x the CU count the
one-pass and forced-split paths plan for. Each row runs through every kernel
path (one-pass; split forced; auto, with the device's own CU count). Every
case holds two sequences, so on 256 CUs the planner spreads their query rows
over many programs (the query split, 16-row tiles) and a split over many
partitions; on 1 CU it keeps whole row tiles (up to 64 rows, as a device full
of sequences runs) and two partitions. Without the 1-CU rows no GPU would run
the wide row tiles at all. Lengths are named relative to the block and
the window (`w-1`, `bs+1`, ...) and resolved per row; each case holds a
second, shorter sequence so that per-sequence indexing is always exercised.

The CPU tier runs an all-pairs covering array of all the factors, so every
distribution meets every value of every other factor. The GPU tier runs a
3-wise covering array of all the factors (every value triple of any three
factors in some row, about 270 rows): a kernel bug that needs three factors
at once to show is caught there. The long tier runs the whole product of the
other factors with `gauss` values, and for each other distribution the
all-pairs cut of the other factors with that distribution fixed, at long
contexts.

The CPU tier also leaves out what the interpreter cannot afford (`affordable`):
a head of 192 dims or more walking a whole 4096-key window (lengths `w-1`, `w`,
`w+1`, `long` there). Those rows took 60% of the CPU tier's time (up to 70 s a
case on two cores); every pair of factor values they held is still covered by
cheaper rows, and the GPU tier runs them all.

Three combinations are undefined and left out (`defined`): D 1024 in a bf16
cache (the kernel takes D 1024 with fp8 caches only), `peaked` values with
more query rows a kv head ((Hq/Hkv) * Q) than channels D (each row owns one),
and subnormal values in a bf16 cache. bf16 has no codes that are subnormal under a scale, and its own
subnormals (below 2^-126) load as zero under the Triton interpreter (triton
3.x), so no CPU run could judge them.
"""

import functools

from cases import matrix
from cases.decode import GPU_PATHS, PATHS, DecodeCase
from cases.decode_values import DISTS

FACTORS = {
    "cache": ("e4m3fn", "e4m3fnuz", "bf16"),
    "scales": ("tensor", "token"),
    "block": (16, 32, 64, 128),
    "heads": ((32, 8), (8, 1), (16, 16), (32, 2)),
    "d": (64, 128, 192, 256, 512, 1024),
    "window": (0, 1, 1024, 4096),
    "layout": ("shuffled", "plain"),
    "length": ("0", "1", "bs-1", "bs", "bs+1", "w-1", "w", "w+1", "long"),
    "q": (1, 2, 4, 8),
    "dist": DISTS,
    # CU_NUM of the one-pass and forced-split paths: 256 splits long contexts 4 to 32 ways on
    # every device, the interpreter's single "CU" included; 1 keeps whole row tiles (docstring).
    "cus": (256, 1),
}
# The factors the long tier takes whole, every row with gauss values and 256 CUs.
SHAPE_FACTORS = {name: values for name, values in FACTORS.items() if name not in ("dist", "cus")}
# Without a window, "w" stands for this many keys (a tile boundary).
NOMINAL_WINDOW = 64
LONG = {"cpu": None, "gpu": 8193, "long": 65537}


def resolve_length(name: str, block: int, window: int, tier: str) -> int:
    """A named length as a token count for this block, window and tier."""
    w = window if window > 0 else NOMINAL_WINDOW
    if name == "long":
        if LONG[tier] is not None:
            return LONG[tier]
        return window + 3 * block + 5 if window > 0 else 600
    base = {"bs": block, "w": w}
    for key, value in base.items():
        if name.startswith(key):
            return max(0, value + int(name[len(key):] or 0))
    return int(name)


READS = ("cache", "d", "dist", "heads", "q")  # the factors `defined` reads
CPU_READS = READS + ("window", "length")  # and those `affordable` reads


def defined(row: dict) -> bool:
    """False for the undefined combinations: subnormal values in a bf16 cache, D 1024 in a bf16
    cache (the kernel takes D 1024 with fp8 caches only), and `peaked` values with more query rows
    a kv head than channels (each row owns a channel) (module docstring)."""
    if row["cache"] == "bf16" and row.get("d") == 1024:
        return False
    if row.get("dist") == "peaked" and all(name in row for name in ("heads", "q", "d")):
        hq, hkv = row["heads"]
        if hq // hkv * row["q"] > row["d"]:
            return False
    return not (row.get("dist") == "subnormal" and row["cache"] == "bf16")


def affordable(row: dict) -> bool:
    """False for the rows the CPU tier leaves out: D >= 192 over a whole 4096-key window (module docstring)."""
    return not (row["d"] >= 192 and row["window"] == 4096 and row["length"] in ("w-1", "w", "w+1", "long"))


def _cpu_row(row: dict) -> bool:
    return defined(row) and affordable(row)


def _case(row: dict, tier: str, path: str) -> DecodeCase:
    length = resolve_length(row["length"], row["block"], row["window"], tier)
    hq, hkv = row["heads"]
    return DecodeCase(cache=row["cache"], scales=row["scales"], block=row["block"], hq=hq, hkv=hkv,
                      d=row["d"], window=row["window"], lens=(length, length // 3 + 1), q=row["q"],
                      layout=row["layout"], path=path, cu=0 if path == "auto" else row["cus"],
                      dist=row["dist"])


def matrix_rows(tier: str) -> list[dict]:
    """The rows of a tier (module docstring), each with every factor of FACTORS."""
    if tier == "cpu":
        return [dict(row) for row in _covering(2, _cpu_row, CPU_READS)]
    if tier == "gpu":
        return [dict(row) for row in _covering(3, defined, READS)]
    rows = [dict(row, dist="gauss", cus=FACTORS["cus"][0])
            for row in matrix.product(SHAPE_FACTORS) if defined(dict(row, dist="gauss"))]
    for dist in DISTS[1:]:
        caches = tuple(c for c in FACTORS["cache"] if defined({"cache": c, "d": 64, "dist": dist}))
        rows += [dict(row, dist=dist) for row in matrix.all_pairs(
            dict(SHAPE_FACTORS, cache=caches, cus=FACTORS["cus"]),
            constraint=lambda row, dist=dist: defined(dict(row, dist=dist)),
            reads=tuple(name for name in READS if name != "dist"))]
    return rows


@functools.cache
def _covering(strength: int, constraint, reads: tuple) -> tuple:
    """The covering array of all the factors, made once per process (the constraint walks the product)."""
    return tuple(matrix.covering(FACTORS, strength=strength, constraint=constraint, reads=reads))


def decode_matrix(tier: str) -> list[DecodeCase]:
    """The matrix cases of a tier (the rows of `matrix_rows`) x every path (the CPU tier leaves out
    GPU_PATHS: the interpreter cannot run Gluon).

    Named lengths can resolve alike (with W = 1, `w-1` and `w` are lengths 0 and
    1), so a case is kept once, at its first row.
    """
    rows = matrix_rows(tier)
    paths = [path for path in PATHS if tier != "cpu" or path not in GPU_PATHS]
    cases = {}
    for row in rows:
        for path in paths:
            case = _case(row, tier, path)
            cases.setdefault(case.id, case)
    return list(cases.values())
