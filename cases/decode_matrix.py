"""The declared decode matrix, and its cut per tier.

Factors: cache dtype x scales x block x heads (Hq, Hkv) x D x window x layout
x length x Q. The CPU tier runs an all-pairs covering array of it, the GPU
tiers the whole product; each row runs through every kernel path (one-pass;
split forced, planned for a 256-CU part; auto, with the device's own CU
count). Lengths are named relative to the block and the window (`w-1`,
`bs+1`, ...) and resolved per row; each case holds a second, shorter sequence
so that per-sequence indexing is always exercised.
"""

from cases import matrix
from cases.decode import PATHS, DecodeCase

FACTORS = {
    "cache": ("e4m3fn", "e4m3fnuz", "bf16"),
    "scales": ("tensor", "token"),
    "block": (16, 32),
    "heads": ((32, 8), (8, 1), (16, 16)),
    "d": (64, 128, 256),
    "window": (0, 1, 1024, 4096),
    "layout": ("shuffled", "plain"),
    "length": ("0", "1", "bs-1", "bs", "bs+1", "w-1", "w", "w+1", "long"),
    "q": (1, 2, 4),
}

# Forced-split cases plan for this many CUs (a 256-CU part), so long contexts
# run 4 to 32 partitions on every device, the interpreter's single "CU" included.
SPLIT_CU = 256
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


def _case(row: dict, tier: str, path: str) -> DecodeCase:
    length = resolve_length(row["length"], row["block"], row["window"], tier)
    hq, hkv = row["heads"]
    return DecodeCase(cache=row["cache"], scales=row["scales"], block=row["block"], hq=hq, hkv=hkv,
                      d=row["d"], window=row["window"], lens=(length, length // 3 + 1), q=row["q"],
                      layout=row["layout"], path=path, cu=SPLIT_CU if path == "split" else 0)


def decode_matrix(tier: str) -> list[DecodeCase]:
    """The matrix cases of a tier: all pairs on cpu, the whole product on gpu/long, x every path.

    Named lengths can resolve alike (with W = 1, `w-1` and `w` are lengths 0 and
    1), so a case is kept once, at its first row.
    """
    rows = matrix.all_pairs(FACTORS) if tier == "cpu" else matrix.product(FACTORS)
    cases = {}
    for row in rows:
        for path in PATHS:
            case = _case(row, tier, path)
            cases.setdefault(case.id, case)
    return list(cases.values())
