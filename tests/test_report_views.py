"""What people look at: the HTML page, the markdown comment with its pictures, the PNGs, JUnit XML."""

import math
import sys
import xml.etree.ElementTree as ET

import pytest

from verify import cli, figures, gate, junit, page, plots, report
from verify.verdict import Verdict

MUTANT_META = {"device": "cpu (Triton interpreter)", "torch": "2.13.0", "triton": "3.9.0", "tier": "cpu",
               "command": "quantfloor run --mutant window-off-by-one", "mutant": "window-off-by-one",
               "impl": {"decode": "triton 0.1.0", "kda": "triton 0.1.0"}, "wall_seconds": 12.5}
NEAR = "decode-e4m3fn-token-b16-hq8-hkv2-d64-w1024-L1500_4-q2-shuffled-onepass"
BAD = "decode-bf16-token-b16-hq8-hkv2-d64-w1024-L1500_4-q2-shuffled-onepass"
CRASHED = "decode-e4m3fn-token-b16-hq8-hkv2-d64-w0-L300-q1-plain-onepass"


def judged(suite, case_id, err_bound, passed=True, bound=0.1, floor=0.25):
    max_abs = err_bound * bound
    reasons = () if passed else (f"out: max abs err {max_abs:.3g} > bound {bound:.3g} (0.25 x floor + eps)",)
    return Verdict(suite=suite, case_id=case_id, passed=passed, max_abs=max_abs, rms_ratio=0.01, floor=floor,
                   err_floor=max_abs / floor, reasons=reasons, seconds=0.5, detail={"bound": bound})


def run():
    """Two operators; two decode failures (one over its bound, one crashed), a skip and a probe."""
    return [
        judged("decode-onepass", "decode-e4m3fn-token-b16-hq8-hkv2-d64-w0-L9_4-q2-shuffled-onepass", 0.2),
        judged("decode-onepass", NEAR, 0.9),
        judged("decode-onepass", BAD, 3.0, passed=False),
        gate.failed("decode-onepass", CRASHED, "crashed: signal 11 (SIGSEGV)"),
        gate.skipped("decode-onepass", "decode-e4m3fnuz-token-b16-hq8-hkv2-d64-w0-L9_4-q2-shuffled-onepass",
                     "torch supports cache in ('e4m3fn',)"),
        judged("kda-unsegmented", "kda-b1-t130-h1-k64-log-dense-bigvalues-unsegmented", 0.0),
        judged("kda-unsegmented", "kda-L70_0_200-h2-k64-softplus-sig-l2-none-unsegmented", 0.5),
        judged("regressions", "probe-head-churn", 0.01),
    ]


def test_err_bound_closest_and_repro_lines():
    verdicts = run()
    assert report.err_bound(verdicts[1]) == pytest.approx(0.9)
    assert math.isnan(report.err_bound(verdicts[3])) and math.isnan(report.err_bound(verdicts[4]))
    assert [v.case_id for v in report.closest(verdicts, 2)] == [NEAR, verdicts[6].case_id]
    assert len(report.closest(verdicts)) == 5  # the passed ones: failed and skipped never count
    assert report.repro_line(BAD, MUTANT_META) == f"quantfloor repro {BAD} --mutant window-off-by-one"
    assert report.repro_line(BAD, {"impl_specs": ["torch"]}) == f"quantfloor repro {BAD} --impl torch"


def test_histogram_bins_by_quarter_decades_with_ends_and_failures_apart():
    cases = [judged("s", CRASHED, x) for x in (0.0, 5e-5, 0.2, 1.0, 1e3)] + [judged("s", BAD, 3.0, passed=False)]
    cases += [gate.failed("s", CRASHED, "raised RuntimeError: boom"), gate.skipped("s", CRASHED, "no")]
    hist = figures.histogram(cases)
    assert (hist.below, hist.above, hist.unmeasured, hist.total) == (2, 1, 1, 7)
    edges = figures.BIN_EDGES
    assert len(edges) == 25 and edges[0] == pytest.approx(1e-4) and edges[16] == 1.0
    at = {k: n for k, n in enumerate(hist.counts) if n}
    assert at == {13: 1, 16: 1, 17: 1}  # 0.2 in [10^-0.75, 10^-0.5), 1.0 opens its bin, 3.0 in [10^0.25, 10^0.5)
    assert [k for k, n in enumerate(hist.failed) if n] == [17]


def test_heat_maps_hold_the_worst_case_count_and_failures_of_each_cell():
    decode = [v for v in run() if v.suite == "decode-onepass"]
    by_window, by_cache = figures.heat_maps(decode)
    assert (by_window.rows, by_window.columns) == ("window", "len")
    assert by_window.row_values == (0, 1024) and by_window.column_values == (16, 512, 2048)
    assert by_window.cells[(1024, 2048)] == figures.Cell(pytest.approx(3.0), 2, 1)
    crashed = by_window.cells[(0, 512)]
    assert math.isnan(crashed.worst) and (crashed.cases, crashed.failed) == (1, 1)
    assert by_window.cells[(0, 16)].worst == pytest.approx(0.2)
    assert set(by_cache.cells) == {("e4m3fn", "gauss"), ("bf16", "gauss")}  # the skipped e4m3fnuz case is not judged
    (kda,) = figures.heat_maps([v for v in run() if v.suite == "kda-unsegmented"], [("gate", "len")])
    assert kda.row_values == ("log", "softplus") and kda.column_values == (256,)
    assert figures.heat_maps([v for v in run() if v.suite == "regressions"]) == []  # probes have no factors
    assert figures.factors("kda-b2-t65-h1-k64-log-none-auto")["len"] == 128
    assert figures.parse_heat(" hq , d ") == ("hq", "d")
    for bad in ("hq", "hq,hq", "hq,colour", "hq,d,q"):
        with pytest.raises(ValueError, match="--heat: expected two different factors A,B of .*cache"):
            figures.parse_heat(bad)


def test_heat_colours_run_from_pale_to_the_bound_then_red():
    pale, half, bound = (figures.heat_colour(x, 0)[0] for x in (0.0, 0.5, 1.0))
    assert (pale, half, bound) == ("#fffaeb", "#fec44f", "#d95f0e")
    assert figures.heat_colour(1.01, 0)[0] == figures.heat_colour(0.1, 1)[0] == "#cf222e"
    assert figures.heat_colour(math.nan, 1)[0] == "#6639ba" and figures.heat_colour(math.nan, 0)[0] == "#eaeef2"


def test_the_page_is_self_contained_and_shows_counts_failures_repro_lines_and_pictures():
    text = page.page(run(), MUTANT_META)
    assert text.startswith("<!doctype html>") and text.rstrip().endswith("</html>")
    for loaded in ("<script", "src=", "http:", "https:", "<link", "url(", "@import"):
        assert loaded not in text
    assert '<h1 class="fail">quantfloor: FAIL (2 of 7, 1 skipped)</h1>' in text
    for label, value in (("implementation", "decode triton 0.1.0, kda triton 0.1.0"), ("device", "cpu (Triton"),
                         ("versions", "torch 2.13.0, triton 3.9.0"), ("tier", "cpu"), ("wall time", "12.5 s"),
                         ("command", "quantfloor run --mutant window-off-by-one")):
        assert f"<tr><th>{label}</th><td>" in text and value in text
    row = ('<td class="n">4</td><td class="n">2</td><td class="n bad">2</td><td class="n">1</td>'
           '<td class="n">nan</td><td class="n">3</td>')
    assert row in text  # decode-onepass: judged, passed, failed, skipped, worst err/floor, worst err/bound
    assert "<h2>Failed cases (2)</h2>" in text
    for case_id in (BAD, CRASHED, NEAR):
        assert f"<code>quantfloor repro {case_id} --mutant window-off-by-one</code>" in text
    assert "crashed: signal 11 (SIGSEGV)" in text and "The 5 passed cases closest to their bound" in text
    assert text.count("<svg") == 3 and text.count('<table class="heat">') == 4  # two per operator's suite
    assert 'id="suite-decode-onepass"' in text and 'href="#suite-decode-onepass"' in text
    assert text.index("<h2>Failed cases") < text.index("closest to their bound") < text.index("<svg")
    old = page.page(run(), {"device": "H200"})  # a report from before the header fields were kept
    assert "<tr><th>wall time</th><td>not recorded in this report</td></tr>" in old
    assert "hq (rows) &times; d (columns)" in page.page(run(), {}, [("hq", "d")])
    merged = {"shards": [{"path": "a.json", "meta": {"wall_seconds": 7.0}},
                         {"path": "b.json", "meta": {"wall_seconds": 9.5}}]}
    assert dict(report.header(merged))["wall time"] == "9.5 s (the longest shard)"
    resumed = dict(report.header({**MUTANT_META, "resumed": 40}))
    assert resumed["wall time"] == "12.5 s (this run; 40 cases judged before it)"


def test_the_page_of_a_large_run_stays_small():
    many = [judged("decode-split", f"decode-e4m3fn-token-b16-hq8-hkv2-d64-w0-L{k}-q1-plain-split", 2.0,
                   passed=False) for k in range(1, 2001)]
    text = page.page(many, {})
    assert text.count("<code>quantfloor repro") == page.MAX_FAILED + 0  # the closest list is empty
    assert "... and 1800 more (every one is in the JSON report)." in text
    assert len(text) < 200_000


def test_markdown_references_the_pictures_and_lists_repro_lines():
    pictures = {"decode-onepass": [("decode-onepass: err/bound histogram", "png/decode-onepass-hist.png")]}
    text = report.markdown(run(), MUTANT_META, pictures)
    assert "![decode-onepass: err/bound histogram](png/decode-onepass-hist.png)" in text
    assert "command: `quantfloor run --mutant window-off-by-one`" in text
    assert "implementation: decode triton 0.1.0, kda triton 0.1.0" in text and "wall time: 12.5 s" in text
    block = text[text.index("failed cases (2)"):]
    assert f"quantfloor repro {BAD} --mutant window-off-by-one\n" in block
    assert f"quantfloor repro {CRASHED} --mutant window-off-by-one\n" in block
    assert "the 5 passed cases closest to their bound" in text
    assert f"| `{NEAR}` | decode-onepass | 0.900 | 0.360 | 0.09 | 0.1 |" in text
    assert "![" not in report.markdown(run(), MUTANT_META)


def test_junit_has_one_testcase_per_case_with_failures_and_skips(tmp_path):
    path = tmp_path / "results.xml"
    junit.write(path, run(), MUTANT_META)
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("8", "2", "1")
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == [v.case_id for v in run()]
    assert {c.get("classname") for c in cases} == {"quantfloor.decode-onepass", "quantfloor.kda-unsegmented",
                                                   "quantfloor.regressions"}
    decode = root.find("./testsuite[@name='quantfloor.decode-onepass']")
    assert (decode.get("tests"), decode.get("failures"), decode.get("skipped")) == ("5", "2", "1")
    (bad,) = [c for c in cases if c.get("name") == BAD]
    failure = bad.find("failure")
    assert failure.get("message").startswith("out: max abs err 0.3 > bound 0.1")
    assert failure.text.splitlines()[-1] == f"quantfloor repro {BAD} --mutant window-off-by-one"
    assert cases[4].find("skipped").get("message") == "skipped: torch supports cache in ('e4m3fn',)"
    assert cases[0].find("failure") is None and cases[0].find("skipped") is None
    props = {p.get("name"): p.get("value") for p in root.findall("./properties/property")}
    assert props["mutant"] == "window-off-by-one" and props["tier"] == "cpu"
    odd = gate.failed("s", "s-1", "raised ValueError: bad byte \x00\x1b here")
    ET.fromstring(ET.tostring(junit.tree([odd], {}).getroot()))  # still well-formed XML


def test_pngs_per_suite_for_the_markdown(tmp_path):
    if not plots.available():
        pytest.skip("matplotlib is not installed (the plot extra)")
    drawn = plots.write(tmp_path / "png", run())
    assert list(drawn) == ["decode-onepass", "kda-unsegmented", "regressions"]
    names = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert names == ["decode-onepass-heat-cache-dist.png", "decode-onepass-heat-window-len.png",
                     "decode-onepass-hist.png", "kda-unsegmented-heat-state-len.png",
                     "kda-unsegmented-heat-tag-gate.png", "kda-unsegmented-hist.png", "regressions-hist.png"]
    assert all((tmp_path / "png" / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)
    shown = plots.relative(drawn, tmp_path)
    assert shown["regressions"] == [("regressions: err/bound histogram", "png/regressions-hist.png")]


def test_report_without_matplotlib_writes_the_rest_and_says_what_it_skipped(tmp_path, capsys, monkeypatch):
    source = tmp_path / "run.json"
    report.write_json(source, run(), MUTANT_META)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    out = tmp_path / "out"
    rc = cli.main(["report", str(source), "--png", str(out / "png"), "--md", str(out / "comment.md"),
                   "--html", str(out / "page.html"), "--junit", str(out / "results.xml")])
    assert rc == 0
    captured = capsys.readouterr()
    assert f"--png {out / 'png'} skipped: matplotlib is not installed" in captured.err
    assert captured.out.strip().splitlines()[-1] == "FAIL (2 of 7, 1 skipped)"
    assert not (out / "png").exists()
    assert "![" not in (out / "comment.md").read_text() and BAD in (out / "comment.md").read_text()
    assert (out / "page.html").read_text() == page.page(*report.read_json(source)[::-1])
    assert len(ET.parse(out / "results.xml").getroot().findall("./testsuite/testcase")) == 8
    (tmp_path / "other.json").write_text('{"results": []}')
    assert cli.main(["report", str(tmp_path / "other.json"), "--html", str(out / "x.html")]) == 2
    assert "expected a report with a 'meta' dict" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path / "missing.json")]) == 2
    assert "RUN.json: expected a report written by quantfloor run --json" in capsys.readouterr().err
