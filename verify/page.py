"""A run's report as one HTML page: self-contained (no file, font or script it loads), readable
without JavaScript, and quick to open on a run of tens of thousands of cases.

From the top: the final line; what ran where (implementation, device,
versions, tier, command, wall time); one row per suite (judged, passed,
failed, skipped, worst err/floor and err/bound); the failed cases and the
passed cases closest to their bound, each with its `quantfloor repro` line;
then per suite its err/bound histogram (inline SVG, log scale, the bound
drawn at 1) and its heat maps (tables whose cells are coloured by the worst
err/bound of the cases they hold; verify.figures). Hovering a bar or a cell
shows its numbers (the `title` attribute). The pictures need no plotting
library.
"""

import html
import math

from verify import figures, report

# Failed cases listed on the page before "... and N more" (all of them are in the JSON report).
MAX_FAILED = 200
_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1200px; padding: 0 16px;
       color: #1f2328; }
h1 { font-size: 22px; padding: 8px 12px; border-radius: 6px; }
h1.pass { background: #dafbe1; } h1.fail { background: #ffebe9; }
h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #d0d7de; }
h3 { font-size: 16px; margin: 20px 0 4px; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border: 1px solid #d0d7de; padding: 3px 7px; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f6f8fa; }
code { font: 12px ui-monospace, monospace; word-break: break-all; }
.bad { color: #cf222e; font-weight: 600; }
table.heat td { text-align: center; min-width: 54px; font-variant-numeric: tabular-nums; }
table.heat td small { display: block; font-size: 11px; opacity: .8; }
table.heat td.none { background: #f6f8fa; color: #8c959f; }
.pictures { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
.legend span { display: inline-block; padding: 1px 8px; margin-right: 4px; border-radius: 3px; }
p.note { color: #57606a; }
"""


def page(verdicts, meta: dict, heat_pairs=None) -> str:
    """The HTML page of a run (see the module docstring). heat_pairs: ((rows, columns), ...) for
    every suite's heat maps instead of verify.figures.HEAT's."""
    if not isinstance(meta, dict):
        raise TypeError(f"meta: expected a dict, got {type(meta).__name__}")
    verdicts = list(verdicts)
    line = report.final_line(verdicts)
    suites = report.by_suite(verdicts)
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>quantfloor: {_e(line)}</title><style>{_STYLE}</style></head><body>",
        f'<h1 class="{"pass" if line.startswith("ALL_PASS") else "fail"}">quantfloor: {_e(line)}</h1>',
        _header(meta), "<h2>Suites</h2>", _suite_table(verdicts),
        "<p class=note>err/floor: a case's max abs error over its floor. err/bound: that error over the "
        "bound it had to meet (multiple &times; floor + output eps); above 1 it fails. The pictures use "
        "err/bound, one scale for fp8 and unquantized paths alike.</p>",
        _failed(verdicts, meta), _closest(verdicts, meta),
    ]
    parts += ["<h2>Per suite: err/bound histogram and heat maps</h2>", _legend()]
    for suite, members in suites.items():
        parts.append(_suite_section(suite, members, heat_pairs))
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p) + "\n"


def write(path, verdicts, meta: dict, heat_pairs=None) -> None:
    """Write the page to `path` (utf-8)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page(verdicts, meta, heat_pairs))


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _num(x: float) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return f"{x:.3g}"


def _anchor(suite: str) -> str:
    return "suite-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in suite)


def _header(meta: dict) -> str:
    found = dict(report.header(meta))
    needed = ("implementation", "device", "versions", "tier", "command", "wall time")
    rows = [(label, found.get(label, "not recorded in this report")) for label in needed] + \
        [(label, text) for label, text in found.items() if label not in needed]
    cells = "".join(f"<tr><th>{_e(label)}</th><td>{_code(text) if label == 'command' else _e(text)}</td></tr>"
                    for label, text in rows)
    return f"<table>{cells}</table>"


def _code(text: str) -> str:
    return f"<code>{_e(text)}</code>"


def _suite_table(verdicts) -> str:
    rows = []
    for s in report.summarize(verdicts):
        members = [v for v in verdicts if v.suite == s.suite and not v.skipped]
        bounds = [report.err_bound(v) for v in members]
        worst_bound = max((b for b in bounds if not math.isnan(b)), default=math.nan)
        failed = ' class="n bad"' if s.failed else ' class="n"'
        rows.append(
            f'<tr><td><a href="#{_anchor(s.suite)}">{_e(s.suite)}</a></td><td class="n">{s.cases}</td>'
            f'<td class="n">{s.passed}</td><td{failed}>{s.failed}</td><td class="n">{s.skipped}</td>'
            f'<td class="n">{_num(s.worst_err_floor)}</td><td class="n">{_num(worst_bound)}</td>'
            f'<td class="n">{s.seconds:.1f}</td><td>{_code(s.worst_case_id)}</td></tr>')
    return ("<table><tr><th>suite</th><th>judged</th><th>passed</th><th>failed</th><th>skipped</th>"
            "<th>worst err/floor</th><th>worst err/bound</th><th>seconds</th><th>worst case (err/floor)</th></tr>"
            + "".join(rows) + "</table>")


def _failed(verdicts, meta: dict) -> str:
    failed = report.failures(verdicts)
    if not failed:
        return "<h2>Failed cases (0)</h2><p>None.</p>"
    rows = "".join(
        f"<tr><td>{_e(v.suite)}</td><td>{_code(v.case_id)}</td><td class=n>{_num(v.err_floor)}</td>"
        f"<td class=n>{_num(report.err_bound(v))}</td><td>{'<br>'.join(_e(r) for r in v.reasons)}</td>"
        f"<td>{_code(report.repro_line(v.case_id, meta))}</td></tr>"
        for v in failed[:MAX_FAILED])
    more = f"<p>... and {len(failed) - MAX_FAILED} more (every one is in the JSON report).</p>" \
        if len(failed) > MAX_FAILED else ""
    return (f"<h2>Failed cases ({len(failed)})</h2><table><tr><th>suite</th><th>case</th><th>err/floor</th>"
            f"<th>err/bound</th><th>reasons</th><th>repro</th></tr>{rows}</table>{more}")


def _closest(verdicts, meta: dict) -> str:
    near = report.closest(verdicts)
    if not near:
        return ""
    rows = "".join(
        f"<tr><td>{_e(v.suite)}</td><td>{_code(v.case_id)}</td><td class=n>{_num(report.err_bound(v))}</td>"
        f"<td class=n>{_num(v.err_floor)}</td><td class=n>{_num(v.max_abs)}</td>"
        f"<td class=n>{_num(v.detail['bound'])}</td><td>{_code(report.repro_line(v.case_id, meta))}</td></tr>"
        for v in near)
    return (f"<h2>The {len(near)} passed cases closest to their bound</h2><table><tr><th>suite</th><th>case</th>"
            f"<th>err/bound</th><th>err/floor</th><th>max abs</th><th>bound</th><th>repro</th></tr>{rows}</table>")


def _suite_section(suite: str, members, heat_pairs) -> str:
    judged = [v for v in members if not v.skipped]
    failed = sum(not v.passed for v in judged)
    parts = [f'<section id="{_anchor(suite)}"><h3>{_e(suite)}</h3>',
             f"<p>{len(judged)} judged, {len(judged) - failed} passed, "
             f"<span{' class=bad' if failed else ''}>{failed} failed</span>, {len(members) - len(judged)} skipped</p>",
             '<div class="pictures">', histogram_svg(figures.histogram(members))]
    maps = figures.heat_maps(members, heat_pairs)
    parts += [heat_table(m) for m in maps]
    parts.append("</div>")
    if not maps:
        parts.append("<p class=note>No heat map: its cases have no matrix factors (probes), or not the "
                     "factors asked for.</p>")
    parts.append("</section>")
    return "\n".join(parts)


def histogram_svg(hist: figures.Histogram) -> str:
    """The err/bound histogram as inline SVG: a bar per bin (failed cases stacked in red), the cases
    under 1e-4 and over 1e2 at the ends, failed cases without a number apart, the bound at 1."""
    edges = figures.BIN_EDGES
    bars = [("< 1e-4", hist.below, 0)] + [
        (f"{edges[k]:.3g} to {edges[k + 1]:.3g}", n, f) for k, (n, f) in enumerate(zip(hist.counts, hist.failed))
    ] + [(">= 1e2", hist.above, hist.above), ("no number", hist.unmeasured, hist.unmeasured)]
    width, height, left, bottom, top = 600, 190, 44, 34, 14
    step = (width - left - 10) / (len(bars) + 1)  # one blank slot before "no number"
    tallest = max((n for _, n, _ in bars), default=0) or 1
    scale = (height - bottom - top) / tallest
    base = height - bottom
    out = [f'<svg width="{width}" height="{height}" role="img" '
           f'font-size="11" font-family="system-ui, sans-serif">',
           f"<title>err/bound histogram: {hist.total} cases</title>"]
    for k, (span, n, f) in enumerate(bars):
        x = left + step * (k + (k == len(bars) - 1))
        if n:
            h, hf = max(2.0, n * scale), (max(2.0, f * scale) if f else 0.0)
            out.append(f'<g><title>{_e(span)}: {n} cases, {f} failed</title>'
                       f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{step - 1:.1f}" height="{h:.1f}" fill="#54aeff"/>'
                       + (f'<rect x="{x:.1f}" y="{base - hf:.1f}" width="{step - 1:.1f}" height="{hf:.1f}" '
                          f'fill="#cf222e"/>' if f else "") + "</g>")
    for decade in range(figures.LOW, figures.HIGH + 1):  # ticks at each decade
        x = left + step * (1 + (decade - figures.LOW) * figures.DECADE_STEPS)
        out.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" stroke="#57606a"/>'
                   f'<text x="{x:.1f}" y="{base + 15}" text-anchor="middle">1e{decade}</text>')
    bound_x = left + step * (1 - figures.LOW * figures.DECADE_STEPS)
    out.append(f'<line x1="{bound_x:.1f}" y1="{top - 4}" x2="{bound_x:.1f}" y2="{base}" stroke="#cf222e" '
               f'stroke-dasharray="4 3"/><text x="{bound_x + 3:.1f}" y="{top + 4}" fill="#cf222e">bound</text>')
    out.append(f'<line x1="{left}" y1="{base}" x2="{width - 10}" y2="{base}" stroke="#57606a"/>'
               f'<text x="{left - 4}" y="{top + 8}" text-anchor="end">{tallest}</text>'
               f'<text x="{left - 4}" y="{base}" text-anchor="end">0</text>'
               f'<text x="{left + step * (len(bars) + 0.5):.1f}" y="{base + 15}" text-anchor="middle">n/a</text>'
               f'<text x="{(left + width) / 2:.0f}" y="{height - 4}" text-anchor="middle">'
               f"err/bound (log), cases per quarter decade; first bar: under 1e-4 (0 too); red: failed</text></svg>")
    return "".join(out)


def heat_table(m: figures.Heat) -> str:
    """A heat map as a table: rows and columns the values of its two factors, each cell the worst
    err/bound of its cases with their count (and failures), coloured by figures.heat_colour."""
    head = "".join(f"<th>{_e(figures.label(c))}</th>" for c in m.column_values)
    rows = []
    for r in m.row_values:
        cells = []
        for c in m.column_values:
            cell = m.cells.get((r, c))
            if cell is None:
                cells.append('<td class="none">&middot;</td>')
                continue
            back, fore = figures.heat_colour(cell.worst, cell.failed)
            text = "fail" if math.isnan(cell.worst) and cell.failed else _num(cell.worst)
            tip = (f"{m.rows}={figures.label(r)}, {m.columns}={figures.label(c)}: {cell.cases} cases, "
                   f"{cell.failed} failed, worst err/bound {_num(cell.worst)}")
            count = f"{cell.cases} case{'s' if cell.cases != 1 else ''}" + \
                (f", {cell.failed} failed" if cell.failed else "")
            cells.append(f'<td style="background:{back};color:{fore}" title="{_e(tip)}">{text}'
                         f"<small>{count}</small></td>")
        rows.append(f"<tr><th>{_e(figures.label(r))}</th>{''.join(cells)}</tr>")
    return (f'<table class="heat"><caption>worst err/bound: {_e(m.rows)} (rows) &times; {_e(m.columns)} '
            f"(columns)</caption><tr><th>{_e(m.rows)} \\ {_e(m.columns)}</th>{head}</tr>{''.join(rows)}</table>")


def _legend() -> str:
    swatches = [(0.0, 0, "0"), (0.25, 0, "0.25"), (0.5, 0, "0.5"), (0.75, 0, "0.75"), (1.0, 0, "1 (the bound)"),
                (2.0, 1, "failed"), (math.nan, 1, "failed, no number")]
    spans = []
    for worst, failed, text in swatches:
        back, fore = figures.heat_colour(worst, failed)
        spans.append(f'<span style="background:{back};color:{fore}">{text}</span>')
    return (f'<p class="legend">heat map cells, coloured by their worst err/bound (linear): {"".join(spans)} '
            f"&middot; each cell: its worst err/bound, then its cases (and failures); a dot: no case there</p>")
