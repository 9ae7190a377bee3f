"""The verifier's report: per-suite summary, console table, JSON, markdown and the final line.

Input everywhere is a list of `Verdict`s in any order, from any number of
suites. Suites are reported in the order their first verdict appears.

The worst case of a suite is the one with the largest err/floor; a NaN
err/floor (an output that could not be compared) ranks above inf, and among
equal values a failed case ranks above a passed one, then the earlier one.

The JSON report is strict JSON: every non-finite float in it (inf err/floor,
NaN max abs, ...) is written as the string "inf", "-inf" or "nan". Reading
turns those strings back into floats in a verdict's numbers, its detail and
the meta; case ids, suites and reasons are read as written.

    {"meta": {...device, versions, tier, command, shard...},
     "summary": [SuiteSummary as a dict, ...],
     "verdicts": [Verdict.to_json(), ...]}

A case's err/bound (`err_bound`) is its error over the bound it had to meet
(multiple x floor + the output's eps, verify.gate): above 1 it failed the
bound, and it compares cases of every path on one scale, where err/floor
does not (the multiple is a quarter on fp8 paths, 2 or 4 on unquantized
ones). The cases closest to their bound are the passed ones with the largest
err/bound. Every case listed comes with its `quantfloor repro` line
(`repro_line`), the run's mutant and --impl specs included.

The last line a run prints is `final_line`: `ALL_PASS (N cases)` only when
N > 0 cases were judged and all passed, else `FAIL (k of N)`; skipped cases
(outside what the implementation under test supports) are never judged nor
passed, and are counted apart (`ALL_PASS (N cases, S skipped)`).
"""

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from verify.verdict import Verdict

# Failed cases listed in the console and in markdown before "... and N more".
MAX_LISTED = 30
# Cases per suite in the markdown list of worst cases.
WORST_PER_SUITE = 5
# Passed cases listed as closest to their bound, over the whole run.
CLOSEST = 10

_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
# The float fields of a Verdict, which JSON may hold as "inf", "-inf" or "nan".
_VERDICT_NUMBERS = ("max_abs", "rms_ratio", "floor", "err_floor", "seconds")


@dataclass(frozen=True)
class SuiteSummary:
    """One suite's line of the report.

    cases: judged cases (skipped ones apart); worst_err_floor / worst_case_id: the suite's worst
    judged case (see the module docstring). seconds: the sum of its cases' wall seconds.
    """

    suite: str
    cases: int
    passed: int
    failed: int
    worst_err_floor: float
    worst_case_id: str
    seconds: float
    skipped: int = 0


def summarize(verdicts: list[Verdict]) -> list[SuiteSummary]:
    """One summary per suite, in first-seen order."""
    summaries = []
    for suite, members in by_suite(verdicts).items():
        judged = [v for v in members if not v.skipped]
        worst = max(judged, key=_badness) if judged else None
        passed = sum(v.passed for v in judged)
        summaries.append(
            SuiteSummary(
                suite=suite,
                cases=len(judged),
                passed=passed,
                failed=len(judged) - passed,
                worst_err_floor=worst.err_floor if worst else math.nan,
                worst_case_id=worst.case_id if worst else "",
                seconds=sum(v.seconds for v in members),
                skipped=len(members) - len(judged),
            )
        )
    return summaries


def final_line(verdicts: list[Verdict]) -> str:
    """`ALL_PASS (N cases)` when N > 0 were judged and all passed, else `FAIL (k of N)`; skipped
    cases are named apart (`, S skipped`)."""
    verdicts = _checked(verdicts)
    judged = [v for v in verdicts if not v.skipped]
    failed = sum(not v.passed for v in judged)
    skipped = len(verdicts) - len(judged)
    tail = f", {skipped} skipped" if skipped else ""
    if judged and not failed:
        return f"ALL_PASS ({len(judged)} cases{tail})"
    return f"FAIL ({failed} of {len(judged)}{tail})"


def console_table(verdicts: list[Verdict]) -> str:
    """A fixed-width table, one row per suite, then the failed cases with their first reason."""
    verdicts = _checked(verdicts)
    summaries = summarize(verdicts)
    titles = ("suite", "cases", "pass", "fail", "skip", "worst err/floor", "seconds", "worst case")
    rows = [
        (s.suite, str(s.cases), str(s.passed), str(s.failed), str(s.skipped), _ratio(s.worst_err_floor),
         f"{s.seconds:.2f}", s.worst_case_id)
        for s in summaries
    ]
    widths = [max(len(row[k]) for row in [titles, *rows]) for k in range(len(titles) - 1)]
    lines = []
    for row in [titles, *rows]:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:-1], widths[1:])]
        lines.append("  ".join([*cells, row[-1]]))
    failed = failures(verdicts)
    if failed:
        lines.append("")
        lines.append(f"failed ({len(failed)}):")
        lines.extend(f"  {v.case_id}: {_first_reason(v)}" for v in failed[:MAX_LISTED])
        if len(failed) > MAX_LISTED:
            lines.append(f"  ... and {len(failed) - MAX_LISTED} more")
    return "\n".join(lines)


def err_bound(v: Verdict) -> float:
    """max abs / the bound the case had to meet (detail["bound"]); NaN where there is no number
    (an output not written, a raise, a crash, a skip, a report without bounds)."""
    limit = v.detail.get("bound") if isinstance(v.detail, dict) else None
    if not isinstance(limit, (int, float)) or math.isnan(v.max_abs) or math.isnan(limit):
        return math.nan
    if limit <= 0:
        return 0.0 if v.max_abs == 0 else math.inf
    return v.max_abs / limit


def closest(verdicts: list[Verdict], count: int = CLOSEST) -> list[Verdict]:
    """The `count` passed cases with the largest err/bound, closest first (ties: the earlier)."""
    passed = [v for v in _checked(verdicts) if v.passed and not v.skipped and not math.isnan(err_bound(v))]
    return sorted(passed, key=err_bound, reverse=True)[:count]


def repro_line(case_id: str, meta: dict) -> str:
    """The command that judges one case again as the run did: its mutant and --impl specs too."""
    line = f"quantfloor repro {case_id}"
    if meta.get("mutant"):
        line += f" --mutant {meta['mutant']}"
    for spec in meta.get("impl_specs") or ():
        line += f" --impl {spec}"
    return line


def header(meta: dict) -> list[tuple[str, str]]:
    """(label, text) pairs that say what ran where: implementation, device, versions, tier, mutant,
    command, wall time (of the run; of its longest shard for merged shards), shards; only those the
    meta holds."""
    rows = []
    impl = meta.get("impl")
    if isinstance(impl, dict):
        rows.append(("implementation", ", ".join(f"{op} {name}" for op, name in impl.items())))
    if "device" in meta:
        rows.append(("device", str(meta["device"])))
    versions = meta.get("versions")
    if isinstance(versions, dict):
        rows.append(("versions", ", ".join(f"{name} {version}" for name, version in versions.items())))
    elif versions is not None:
        rows.append(("versions", str(versions)))
    else:
        found = [f"{name} {meta[name]}" for name in ("torch", "triton", "python") if name in meta]
        if found:
            rows.append(("versions", ", ".join(found)))
    for key in ("tier", "mutant", "command"):
        if meta.get(key):
            rows.append((key, str(meta[key])))
    shards = [s.get("meta", {}) for s in meta.get("shards", ()) if isinstance(s, dict)]
    if isinstance(meta.get("wall_seconds"), (int, float)):
        before = f" (this run; {meta['resumed']} cases judged before it)" if meta.get("resumed") else ""
        rows.append(("wall time", f"{meta['wall_seconds']:.1f} s{before}"))
    elif shards and all(isinstance(s.get("wall_seconds"), (int, float)) for s in shards):
        rows.append(("wall time", f"{max(s['wall_seconds'] for s in shards):.1f} s (the longest shard)"))
    if isinstance(meta.get("shards"), list):
        rows.append(("shards", ", ".join(str(s.get("path")) for s in meta["shards"] if isinstance(s, dict))))
    return rows


def to_json(verdicts: list[Verdict], meta: dict) -> dict:
    """The report as a strict-JSON-ready dict (see the module docstring)."""
    if not isinstance(meta, dict):
        raise TypeError(f"meta: expected a dict, got {type(meta).__name__}")
    verdicts = _checked(verdicts)
    return _encode(
        {
            "meta": meta,
            "summary": [asdict(s) for s in summarize(verdicts)],
            "verdicts": [v.to_json() for v in verdicts],
        }
    )


def write_json(path: str | os.PathLike, verdicts: list[Verdict], meta: dict) -> None:
    """Write the JSON report to `path` (parent folders made, the file replaced whole)."""
    path = Path(path)
    text = json.dumps(to_json(verdicts, meta), indent=1, allow_nan=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


LIVE_SECONDS = 10.0  # a run's JSON report is rewritten at most this often while it runs


class LiveReport:
    """A run's JSON report kept current while it runs: `add` each verdict as it comes, and the
    file is replaced whole (write_json) at most every `seconds`, so a killed run loses at most
    that much of its judging and `quantfloor run --resume` can take it from there. `kept`: the
    verdicts of an earlier report that this run goes on from."""

    def __init__(self, path, meta: dict, kept=(), seconds: float | None = None):
        self.path, self.meta = path, meta
        self.seconds = LIVE_SECONDS if seconds is None else seconds
        self.verdicts = list(kept)
        self.written = time.monotonic()

    def add(self, verdict: Verdict) -> None:
        self.verdicts.append(verdict)
        if time.monotonic() - self.written >= self.seconds:
            write_json(self.path, self.verdicts, self.meta)
            self.written = time.monotonic()


def read_json(path: str | os.PathLike) -> tuple[dict, list[Verdict]]:
    """Read a report written by `write_json`: (meta, verdicts)."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("meta"), dict) or not isinstance(data.get("verdicts"), list):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path}: expected a report with a 'meta' dict and a 'verdicts' list, got {got}")
    verdicts = []
    for k, item in enumerate(data["verdicts"]):
        try:
            numbers = {name: _decode(item[name]) for name in _VERDICT_NUMBERS if name in item}
            verdicts.append(Verdict.from_json({**item, **numbers, "detail": _decode(item.get("detail", {}))}))
        except (TypeError, KeyError) as error:
            raise ValueError(f"{path}: verdicts[{k}]: expected a verdict, got {item!r} ({error!r})") from None
    return _decode(data["meta"]), verdicts


def merge(paths: list[str | os.PathLike]) -> tuple[dict, list[Verdict]]:
    """Join shard reports: (meta, verdicts), verdicts concatenated in the order of `paths`.

    The merged meta keeps the keys every shard agrees on and records the shards
    under "shards": each one's path, case count and the meta keys that set it
    apart. A (suite, case id) found twice is a ValueError naming the case.
    """
    if isinstance(paths, (str, os.PathLike)):
        raise TypeError(f"paths: expected a list of report paths, got the single path {str(paths)!r}")
    paths = list(paths)
    if not paths:
        raise ValueError("paths: expected at least one report path, got none")
    shards, verdicts, seen = [], [], {}
    for path in paths:
        meta, found = read_json(path)
        for v in found:
            key = (v.suite, v.case_id)
            if key in seen:
                raise ValueError(
                    f"paths: case {v.case_id!r} of suite {v.suite!r} appears twice, in {seen[key]} and {path}"
                )
            seen[key] = path
        shards.append((str(path), meta, len(found)))
        verdicts.extend(found)
    first = shards[0][1]
    common = {k: v for k, v in first.items() if all(k in meta and meta[k] == v for _, meta, _ in shards[1:])}
    common["shards"] = [
        {"path": path, "cases": cases, "meta": {k: v for k, v in meta.items() if k not in common}}
        for path, meta, cases in shards
    ]
    return common, verdicts


def markdown(verdicts: list[Verdict], meta: dict, pictures: dict | None = None) -> str:
    """A pull-request comment: final line, meta line and command, suite table, pictures, failures and
    the cases closest to their bound (each with its repro line), worst cases per suite.

    pictures: {suite: [(title, path), ...]}, paths as the comment should reference them (relative
    to where it is written); none when the pictures were not drawn."""
    if not isinstance(meta, dict):
        raise TypeError(f"meta: expected a dict, got {type(meta).__name__}")
    verdicts = _checked(verdicts)
    lines = [f"### quantfloor: {final_line(verdicts)}", ""]
    about = _meta_line(meta)
    if about:
        lines += [about, ""]
    if meta.get("command"):
        lines += [f"command: `{_cell(meta['command'])}`", ""]
    if not verdicts:
        lines.append("No cases ran.")
        return "\n".join(lines) + "\n"
    lines += [
        "| suite | cases | pass | fail | skip | worst err/floor | seconds | worst case |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines += [
        f"| {_cell(s.suite)} | {s.cases} | {s.passed} | {s.failed} | {s.skipped} | {_ratio(s.worst_err_floor)} "
        f"| {s.seconds:.2f} | `{_cell(s.worst_case_id)}` |"
        for s in summarize(verdicts)
    ]
    if pictures:
        lines += ["", "<details open><summary>err/bound per suite (1 is the bound)</summary>"]
        for suite, shown in pictures.items():
            lines += ["", f"**{_cell(suite)}**", ""]
            lines.append(" ".join(f"![{_cell(title)}]({path})" for title, path in shown))
        lines += ["", "</details>"]
    failed = failures(verdicts)
    if failed:
        lines += ["", f"<details><summary>failed cases ({len(failed)})</summary>", ""]
        lines += ["| case | err/floor | max abs | floor | first reason |", "|---|---:|---:|---:|---|"]
        lines += [
            f"| `{_cell(v.case_id)}` | {_ratio(v.err_floor)} | {_number(v.max_abs)} | {_number(v.floor)} "
            f"| {_cell(_first_reason(v))} |"
            for v in failed[:MAX_LISTED]
        ]
        if len(failed) > MAX_LISTED:
            lines += ["", f"... and {len(failed) - MAX_LISTED} more"]
        lines += ["", "```sh", *(repro_line(v.case_id, meta) for v in failed[:MAX_LISTED]), "```"]
        lines += ["", "</details>"]
    near = closest(verdicts)
    if near:
        lines += ["", f"<details><summary>the {len(near)} passed cases closest to their bound</summary>", ""]
        lines += ["| case | suite | err/bound | err/floor | max abs | bound |", "|---|---|---:|---:|---:|---:|"]
        lines += [
            f"| `{_cell(v.case_id)}` | {_cell(v.suite)} | {_ratio(err_bound(v))} | {_ratio(v.err_floor)} "
            f"| {_number(v.max_abs)} | {_number(v.detail['bound'])} |"
            for v in near
        ]
        lines += ["", "```sh", *(repro_line(v.case_id, meta) for v in near), "```", "", "</details>"]
    lines += ["", f"<details><summary>worst {WORST_PER_SUITE} cases per suite by err/floor</summary>"]
    for suite, members in by_suite(verdicts).items():
        lines += ["", f"**{_cell(suite)}**", ""]
        lines += ["| case | err/floor | max abs | floor | verdict |", "|---|---:|---:|---:|---|"]
        lines += [
            f"| `{_cell(v.case_id)}` | {_ratio(v.err_floor)} | {_number(v.max_abs)} | {_number(v.floor)} "
            f"| {'PASS' if v.passed else 'FAIL'} |"
            for v in sorted((m for m in members if not m.skipped), key=_badness, reverse=True)[:WORST_PER_SUITE]
        ]
    lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def _checked(verdicts: list[Verdict]) -> list[Verdict]:
    verdicts = list(verdicts)
    for k, v in enumerate(verdicts):
        if not isinstance(v, Verdict):
            raise TypeError(f"verdicts[{k}]: expected Verdict, got {type(v).__name__}")
    return verdicts


def by_suite(verdicts: list[Verdict]) -> dict[str, list[Verdict]]:
    """{suite: its verdicts}, suites in first-seen order."""
    suites: dict[str, list[Verdict]] = {}
    for v in _checked(verdicts):
        suites.setdefault(v.suite, []).append(v)
    return suites


def _badness(v: Verdict) -> tuple[bool, float, bool]:
    """Orders cases from best to worst: NaN err/floor, then larger err/floor, then failed."""
    nan = math.isnan(v.err_floor)
    return nan, math.inf if nan else v.err_floor, not v.passed


def failures(verdicts: list[Verdict]) -> list[Verdict]:
    """Failed cases, suite by suite (first-seen order), worst first within a suite."""
    return [
        v
        for members in by_suite(verdicts).values()
        for v in sorted(members, key=_badness, reverse=True)
        if not v.passed and not v.skipped
    ]


def _first_reason(v: Verdict) -> str:
    return " ".join(v.reasons[0].split()) if v.reasons else "(no reason given)"


def _ratio(x: float) -> str:
    """err/floor as 0.031, 1.2e+01 or inf."""
    if not math.isfinite(x):
        return str(x)
    if x != 0 and not 1e-3 <= abs(x) < 10:
        return f"{x:.1e}"
    return f"{x:.3f}"


def _number(x: float) -> str:
    return f"{x:.3g}"


def _cell(text: str) -> str:
    """Text made safe for one markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _meta_line(meta: dict) -> str:
    """The header on one line, less the command and the shards (too long for it)."""
    parts = [text if label == "versions" else f"{label}: {text}"
             for label, text in header(meta) if label not in ("command", "shards")]
    return _cell(" · ".join(parts))


def _encode(obj):
    """Non-finite floats as their strings, recursively; lists for tuples."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v) for v in obj]
    return obj


def _decode(obj):
    """The inverse of `_encode` (tuples stay lists)."""
    if isinstance(obj, str):
        return _NON_FINITE.get(obj, obj)
    if isinstance(obj, dict):
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj
