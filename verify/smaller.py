"""Smaller values to try when shrinking a case (`quantfloor shrink`): lengths, counts, sequence lists."""


def shorter(n: int, marks, lowest: int = 0) -> set:
    """Lengths below n to try: the ends, halves, and each mark and its neighbours."""
    out = {lowest, 1, n // 2, n - n // 4, n - 1}
    out |= {m + k for m in marks for k in (-1, 0, 1)}
    return {x for x in out if lowest <= x < n}


def fewer(n: int) -> set:
    """Counts below n to try: 1, half, one less."""
    return {x for x in (1, n // 2, n - 1) if 1 <= x < n}


def lens_moves(lens: tuple, marks, lowest: int = 0) -> list[tuple]:
    """Drop one sequence, shorten one, or halve all."""
    out = [tuple(n // 2 for n in lens)]
    for i, n in enumerate(lens):
        if len(lens) > 1:
            out.append(lens[:i] + lens[i + 1:])
        out += [lens[:i] + (m,) + lens[i + 1:] for m in sorted(shorter(n, marks, lowest))]
    return out
