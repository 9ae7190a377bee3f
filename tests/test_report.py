"""The verifier's report: summary, console table, final line, JSON, merge, markdown."""

import json
import math

import pytest

from verify import gate, report
from verify.verdict import Verdict


def verdict(suite, case_id, err_floor, passed=True, reasons=(), seconds=0.5, detail=None):
    floor = 0.25
    return Verdict(
        suite=suite,
        case_id=case_id,
        passed=passed,
        max_abs=err_floor * floor if math.isfinite(err_floor) else err_floor,
        rms_ratio=0.01,
        floor=floor,
        err_floor=err_floor,
        reasons=tuple(reasons),
        seconds=seconds,
        detail=detail or {},
    )


def mixed():
    """Two suites, interleaved; the split suite has one failure, kda has one unwritten output."""
    return [
        verdict("decode-split", "decode-fn-tok-b16-h8-g4-w0-L17-split", 0.031, seconds=0.25),
        verdict("kda", "kda-t64-h2-k32-chunk", 0.002, seconds=1.0),
        verdict(
            "decode-split",
            "decode-fnuz-tok-b16-h8-g4-w128-L8193-split",
            12.0,
            passed=False,
            reasons=("max abs 3.0 exceeds 0.1 of floor 0.25", "rms ratio 0.4"),
            seconds=0.5,
        ),
        verdict("decode-split", "decode-fn-ten-b16-h8-g1-w0-L1-split", 0.5, seconds=0.25),
        verdict(
            "kda",
            "kda-t63-h2-k32-varlen",
            math.nan,
            passed=False,
            reasons=("12 output elements not written",),
            detail={"not_written": 12, "worst": [0, 3]},
        ),
    ]


def same(a: Verdict, b: Verdict) -> bool:
    """Equality that counts NaN equal to NaN."""
    return json.dumps(report.to_json([a], {})["verdicts"]) == json.dumps(report.to_json([b], {})["verdicts"])


def test_summary_counts_and_worst_case_per_suite_in_first_seen_order():
    split, kda = report.summarize(mixed())
    assert (split.suite, split.cases, split.passed, split.failed) == ("decode-split", 3, 2, 1)
    assert split.worst_err_floor == 12.0
    assert split.worst_case_id == "decode-fnuz-tok-b16-h8-g4-w128-L8193-split"
    assert split.seconds == pytest.approx(1.0)
    assert (kda.suite, kda.cases, kda.passed, kda.failed) == ("kda", 2, 1, 1)
    assert math.isnan(kda.worst_err_floor) and kda.worst_case_id == "kda-t63-h2-k32-varlen"
    assert kda.seconds == pytest.approx(1.5)
    assert report.summarize([]) == []


def test_worst_case_prefers_a_failure_among_equal_err_floor():
    cases = [
        verdict("s", "s-pass-inf", math.inf),
        verdict("s", "s-fail-inf", math.inf, passed=False, reasons=("floor is zero",)),
        verdict("s", "s-fail-small", 0.1, passed=False, reasons=("not written",)),
    ]
    (summary,) = report.summarize(cases)
    assert summary.worst_err_floor == math.inf and summary.worst_case_id == "s-fail-inf"
    (summary,) = report.summarize([verdict("s", "s-a", 0.2), verdict("s", "s-b", 0.2)])
    assert summary.worst_case_id == "s-a"


def test_final_line_forms():
    passing = [v for v in mixed() if v.passed]
    assert report.final_line(passing) == "ALL_PASS (3 cases)"
    assert report.final_line(mixed()) == "FAIL (2 of 5)"
    assert report.final_line([]) == "FAIL (0 of 0)"
    assert report.final_line(iter(passing)) == "ALL_PASS (3 cases)"


def test_console_table_rows_numbers_and_failures():
    text = report.console_table(mixed())
    lines = text.splitlines()
    header, split, kda = lines[:3]
    assert header.split() == ["suite", "cases", "pass", "fail", "skip", "worst", "err/floor", "seconds", "worst", "case"]
    assert split.split() == ["decode-split", "3", "2", "1", "0", "1.2e+01", "1.00",
                             "decode-fnuz-tok-b16-h8-g4-w128-L8193-split"]
    assert kda.split() == ["kda", "2", "1", "1", "0", "nan", "1.50", "kda-t63-h2-k32-varlen"]
    # Fixed width: the last column starts at the same place on every row.
    assert len({line.index(line.split()[-1]) for line in (split, kda)} | {header.index("worst case")}) == 1
    assert "  decode-fnuz-tok-b16-h8-g4-w128-L8193-split: max abs 3.0 exceeds 0.1 of floor 0.25" in lines
    assert "  kda-t63-h2-k32-varlen: 12 output elements not written" in lines
    assert "rms ratio 0.4" not in text


def test_console_table_number_formats():
    cases = [verdict("a", "a-1", 0.0314), verdict("b", "b-1", 12.3), verdict("c", "c-1", math.inf)]
    cells = [line.split()[5] for line in report.console_table(cases).splitlines()[1:]]
    assert cells == ["0.031", "1.2e+01", "inf"]


def test_console_table_lists_at_most_thirty_failures():
    cases = [verdict("s", f"s-{k:02d}", 2.0 + k, passed=False, reasons=(f"reason {k}",)) for k in range(35)]
    lines = report.console_table(cases).splitlines()
    listed = [line for line in lines if line.startswith("  s-")]
    assert len(listed) == 30
    assert listed[0] == "  s-34: reason 34"  # worst first
    assert lines[-1] == "  ... and 5 more"


def test_console_table_without_failures_has_no_failure_list():
    text = report.console_table([v for v in mixed() if v.passed])
    assert len(text.splitlines()) == 3
    assert "failed" not in text


def test_json_round_trip_is_strict_json(tmp_path):
    meta = {"device": "cpu", "versions": {"torch": "2.13.0", "triton": "3.9.0"}, "tier": "cpu", "shard": "1/2"}
    path = tmp_path / "out" / "report.json"
    report.write_json(path, mixed(), meta)

    def reject(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    data = json.loads(path.read_text(), parse_constant=reject)
    assert data["meta"] == meta
    assert [s["suite"] for s in data["summary"]] == ["decode-split", "kda"]
    assert data["summary"][1]["worst_err_floor"] == "nan"
    assert len(data["verdicts"]) == 5

    got_meta, got = report.read_json(path)
    assert got_meta == meta
    assert len(got) == 5 and all(same(a, b) for a, b in zip(got, mixed()))
    assert math.isnan(got[4].err_floor) and got[4].reasons == ("12 output elements not written",)
    assert got[4].detail == {"not_written": 12, "worst": [0, 3]}
    assert report.to_json(mixed(), meta) == data


def test_read_json_rejects_what_is_not_a_report(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"results": []}))
    with pytest.raises(ValueError, match="expected a report with a 'meta' dict and a 'verdicts' list"):
        report.read_json(path)
    path.write_text(json.dumps({"meta": {}, "verdicts": [{"suite": "s"}]}))
    with pytest.raises(ValueError, match=r"verdicts\[0\]: expected a verdict"):
        report.read_json(path)


def test_merge_joins_shards_and_records_them(tmp_path):
    cases = mixed()
    first, second = tmp_path / "shard0.json", tmp_path / "shard1.json"
    report.write_json(first, cases[:2], {"device": "H200", "tier": "gpu", "shard": "0/2"})
    report.write_json(second, cases[2:], {"device": "H200", "tier": "gpu", "shard": "1/2"})
    meta, merged = report.merge([first, second])
    assert len(merged) == 5 and all(same(a, b) for a, b in zip(merged, cases))
    assert meta["device"] == "H200" and meta["tier"] == "gpu" and "shard" not in meta
    assert meta["shards"] == [
        {"path": str(first), "cases": 2, "meta": {"shard": "0/2"}},
        {"path": str(second), "cases": 3, "meta": {"shard": "1/2"}},
    ]
    assert report.final_line(merged) == "FAIL (2 of 5)"


def test_merge_rejects_a_case_seen_twice(tmp_path):
    cases = mixed()
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    report.write_json(first, cases[:3], {"shard": "0/2"})
    report.write_json(second, cases[2:], {"shard": "1/2"})
    with pytest.raises(ValueError, match="decode-fnuz-tok-b16-h8-g4-w128-L8193-split") as caught:
        report.merge([first, second])
    assert str(first) in str(caught.value) and str(second) in str(caught.value)
    # The same id in another suite is a different case.
    report.write_json(second, [verdict("decode-onepass", cases[0].case_id, 0.1)], {"shard": "1/2"})
    assert len(report.merge([first, second])[1]) == 4


def test_merge_needs_a_list_of_paths(tmp_path):
    with pytest.raises(ValueError, match="paths: expected at least one report path"):
        report.merge([])
    with pytest.raises(TypeError, match="paths: expected a list of report paths"):
        report.merge(str(tmp_path / "a.json"))


def test_markdown_has_title_meta_table_failures_and_worst_cases():
    cases = mixed() + [verdict("decode-split", f"decode-extra-{k}-split", 0.01 * k) for k in range(6)]
    meta = {"device": "NVIDIA H200", "versions": {"torch": "2.13.0", "triton": "3.6.0"}, "tier": "gpu"}
    text = report.markdown(cases, meta)
    lines = text.splitlines()
    assert lines[0] == "### quantfloor: FAIL (2 of 11)"
    assert "device: NVIDIA H200 · torch 2.13.0, triton 3.6.0 · tier: gpu" in lines
    assert "| suite | cases | pass | fail | skip | worst err/floor | seconds | worst case |" in lines
    assert "| decode-split | 9 | 8 | 1 | 0 | 1.2e+01 | 4.00 | `decode-fnuz-tok-b16-h8-g4-w128-L8193-split` |" in lines
    assert "| kda | 2 | 1 | 1 | 0 | nan | 1.50 | `kda-t63-h2-k32-varlen` |" in lines
    assert "<details><summary>failed cases (2)</summary>" in lines
    assert "| `decode-fnuz-tok-b16-h8-g4-w128-L8193-split` | 1.2e+01 | 3 | 0.25 | max abs 3.0 exceeds 0.1 of floor 0.25 |" in lines
    assert "| `kda-t63-h2-k32-varlen` | nan | nan | 0.25 | 12 output elements not written |" in lines
    assert text.count("<details>") == text.count("</details>") == 2
    # The worst five of the split suite, worst first; the sixth-worst is left out.
    worst = text[text.index("**decode-split**"):text.index("**kda**")]
    ids = [line.split("`")[1] for line in worst.splitlines() if line.startswith("| `")]
    assert ids == [
        "decode-fnuz-tok-b16-h8-g4-w128-L8193-split",
        "decode-fn-ten-b16-h8-g1-w0-L1-split",
        "decode-extra-5-split",
        "decode-extra-4-split",
        "decode-fn-tok-b16-h8-g4-w0-L17-split",
    ]


def test_markdown_without_failures_or_cases():
    text = report.markdown([v for v in mixed() if v.passed], {"tier": "cpu"})
    assert text.splitlines()[0] == "### quantfloor: ALL_PASS (3 cases)"
    assert "failed cases" not in text and "tier: cpu" in text
    empty = report.markdown([], {})
    assert empty.splitlines()[0] == "### quantfloor: FAIL (0 of 0)" and "No cases ran." in empty


def test_markdown_cells_cannot_break_the_table():
    case = verdict("s", "s-1", 2.0, passed=False, reasons=("a | b\nc",))
    assert "| a \\| b c |" in report.markdown([case], {})


def test_non_verdicts_are_named():
    with pytest.raises(TypeError, match=r"verdicts\[1\]: expected Verdict, got dict"):
        report.final_line([mixed()[0], {"suite": "s"}])
    with pytest.raises(TypeError, match="meta: expected a dict, got list"):
        report.to_json(mixed(), [])


def test_skipped_cases_are_counted_apart_and_never_pass():
    judged = mixed()
    skipped = [gate.skipped("decode-split", f"decode-skipped-{i}", "torch supports path in ('auto',)")
               for i in range(2)]
    (split,) = [s for s in report.summarize(judged + skipped) if s.suite == "decode-split"]
    assert (split.cases, split.skipped) == (3, 2)
    assert report.final_line(judged + skipped) == f"FAIL (2 of {len(judged)}, 2 skipped)"
    passing = [v for v in judged if v.passed]
    assert report.final_line(passing + skipped) == f"ALL_PASS ({len(passing)} cases, 2 skipped)"
    assert report.final_line(skipped) == "FAIL (0 of 0, 2 skipped)"
    assert not any(v.case_id.startswith("decode-skipped") for v in report.failures(judged + skipped))
