"""A run's pictures as PNG files, for a markdown comment to reference (needs matplotlib: the `plot`
extra, `pip install -e ".[plot]"`).

Per suite: `SUITE-hist.png`, its err/bound histogram (verify.figures; log
scale, the bound drawn at 1, failed cases in red), and `SUITE-heat-A-B.png`
for each heat map over factors A x B, cells coloured by the worst err/bound
of their cases and labelled with it. The HTML page draws the same pictures
itself (verify.page) and needs none of this.
"""

import math
import os
from pathlib import Path

from verify import figures, report


def available() -> bool:
    """Whether matplotlib can be imported (the pictures need it)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write(folder, verdicts, heat_pairs=None) -> dict:
    """Draw every suite's pictures into `folder` (made if missing): {suite: [(title, path), ...]}.
    ImportError when matplotlib is missing. heat_pairs as in verify.page."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    drawn = {}
    for suite, members in report.by_suite(verdicts).items():
        name = _file_name(suite)
        shown = [(f"{suite}: err/bound histogram", _histogram(plt, figures.histogram(members), suite,
                                                               folder / f"{name}-hist.png"))]
        for m in figures.heat_maps(members, heat_pairs):
            path = folder / f"{name}-heat-{_file_name(m.rows)}-{_file_name(m.columns)}.png"
            shown.append((f"{suite}: worst err/bound, {m.rows} x {m.columns}", _heat(plt, m, suite, path)))
        drawn[suite] = shown
    return drawn


def _file_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


def _histogram(plt, hist: figures.Histogram, suite: str, path: Path) -> Path:
    edges = figures.BIN_EDGES
    fig, ax = plt.subplots(figsize=(6.4, 2.6), dpi=100)
    lefts, widths = edges[:-1], [b - a for a, b in zip(edges[:-1], edges[1:])]
    ax.bar(lefts, hist.counts, width=widths, align="edge", color="#54aeff", label="passed")
    ax.bar(lefts, hist.failed, width=widths, align="edge", color="#cf222e", label="failed")
    low, high = edges[0] / 10 ** 0.5, edges[-1] * 10 ** 0.5
    ends = [(low, hist.below, "#54aeff"), (high, hist.above, "#cf222e")]
    for x, n, colour in ends:
        if n:
            ax.bar([x], [n], width=[x * 0.6], color=colour)
    ax.axvline(1.0, color="#cf222e", linestyle="--", linewidth=1)
    ax.text(1.05, 0.95, "bound", color="#cf222e", transform=ax.get_xaxis_transform(), va="top")
    ax.set_xscale("log")
    ax.set_xlim(low / 2, high * 2)
    ax.set_xlabel(f"err/bound (ends: under {edges[0]:g}, over {edges[-1]:g})")
    ax.set_ylabel("cases")
    extra = f"; {hist.unmeasured} failed without a number" if hist.unmeasured else ""
    ax.set_title(f"{suite}: {hist.total} cases{extra}", fontsize=10)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _heat(plt, m: figures.Heat, suite: str, path: Path) -> Path:
    rows, cols = len(m.row_values), len(m.column_values)
    fig, ax = plt.subplots(figsize=(max(3.2, 1.0 + 0.62 * cols), max(2.0, 1.1 + 0.36 * rows)), dpi=100)
    colours = [[(0.97, 0.97, 0.98)] * cols for _ in range(rows)]
    for (r, c), cell in m.cells.items():
        i, j = m.row_values.index(r), m.column_values.index(c)
        back, fore = _colours(cell)
        colours[i][j] = back
        text = "fail" if math.isnan(cell.worst) and cell.failed else f"{cell.worst:.2g}"
        ax.text(j, i, text, ha="center", va="center", fontsize=7, color=fore)
    ax.imshow(colours, aspect="auto")
    ax.set_xticks(range(cols), [figures.label(v) for v in m.column_values], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(rows), [figures.label(v) for v in m.row_values], fontsize=8)
    ax.set_xlabel(m.columns)
    ax.set_ylabel(m.rows)
    ax.set_title(f"{suite}: worst err/bound", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _colours(cell: figures.Cell):
    """The page's colours of a heat cell (figures.heat_colour), as matplotlib RGB tuples."""
    return tuple(tuple(int(h[k:k + 2], 16) / 255 for k in (1, 3, 5))
                 for h in figures.heat_colour(cell.worst, cell.failed))


def relative(paths: dict, start) -> dict:
    """`write`'s {suite: [(title, path)]} with each path relative to folder `start` (for markdown)."""
    return {suite: [(title, Path(os.path.relpath(path, start)).as_posix()) for title, path in shown]
            for suite, shown in paths.items()}
