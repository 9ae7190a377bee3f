"""The quantfloor command: ALL_PASS and exit 0 on a correct kernel, FAIL and non-zero on a broken one."""

import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy
import pytest
import torch
import triton

from cases import decode as decode_cases
from verify import cli, gate, junit, mutants, parallel, plots, report, runner
from verify import device as _device

CASE = "window2"  # decode-e4m3fn-token-b16-hq8-hkv2-d64-w2-L9_4-q2-shuffled-window2-onepass


def _last_line(capsys) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


def test_run_passes_and_writes_reports(tmp_path, capsys):
    rc = cli.main(["run", "--tier", "cpu", "-k", CASE, "--json", str(tmp_path / "r.json"),
                   "--md", str(tmp_path / "r.md")])
    assert rc == 0
    assert _last_line(capsys) == "ALL_PASS (1 cases)"
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["verdicts"][0]["passed"] is True and data["meta"]["tier"] == "cpu"
    assert "ALL_PASS" in (tmp_path / "r.md").read_text()


def test_run_fails_on_a_broken_kernel(capsys):
    for name in ("window-off-by-one", "v-scale-strides"):
        mutant = mutants.by_name(name)
        case = mutants.regression_of(mutant).case
        assert cli.main(["run", "--tier", "cpu", "-k", case.id, "--mutant", mutant.name]) == 1
        assert _last_line(capsys) == "FAIL (1 of 1)"


def test_run_with_no_case_is_not_a_pass(capsys):
    assert cli.main(["run", "--tier", "cpu", "-k", "no-such-case"]) == 1
    assert _last_line(capsys) == "FAIL (0 of 0)"


def test_cases_and_repro(capsys):
    assert cli.main(["cases", "--tier", "cpu", "-k", CASE]) == 0
    listed = capsys.readouterr().out.split()
    case_id = listed[-1]
    assert CASE in case_id
    assert cli.main(["repro", case_id]) == 0
    assert "verdict PASS" in capsys.readouterr().out


def test_repro_rebuilds_a_case_from_its_id_alone(capsys):
    case_id = "decode-e4m3fnuz-tensor-b32-hq8-hkv1-d64-w5-L7_3-q2-plain-split"
    assert cli.main(["repro", case_id]) == 0
    assert case_id in capsys.readouterr().out


def test_shards_are_contiguous_and_cover_every_case_once():
    items = list(range(23))
    parts = [_device.shard(items, f"{i}/4") for i in range(4)]
    assert sum(parts, []) == items and {len(p) for p in parts} == {5, 6}
    assert _device.shard(items, None) == items
    with pytest.raises(ValueError, match="shard: expected 0 <= i < n"):
        _device.shard(items, "4/4")


def test_merge_joins_shards(tmp_path, capsys):
    for i in range(2):
        assert cli.main(["run", "--tier", "cpu", "-k", "L0_1 q4 onepass", "--shard", f"{i}/2",
                         "--json", str(tmp_path / f"s{i}.json")]) == 0
    capsys.readouterr()
    assert cli.main(["merge", str(tmp_path / "s0.json"), str(tmp_path / "s1.json")]) == 0
    assert _last_line(capsys).startswith("ALL_PASS")


def test_the_gpu_tier_is_listed_anywhere_and_judged_only_with_a_gpu(capsys, device):
    assert cli.main(["cases", "--tier", "gpu", "-k", "hugelogit d256"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed and all("hugelogit" in line and "-d256-" in line for line in listed)
    if device.type == "cpu":
        assert cli.main(["run", "--tier", "gpu", "-k", "hugelogit d256"]) == 2
        assert "tier: 'gpu' needs a GPU" in capsys.readouterr().err


def test_an_interpreter_that_cannot_run_the_kernels_is_refused_by_name(capsys, device, monkeypatch):
    # triton 3.6's interpreter with numpy 2.4: every case failed with "only 0-dimensional arrays can
    # be converted to Python scalars"; the run now stops first and says which versions would do
    assert _device.interpreter_problem("3.6.0", "2.4.6").endswith("expected triton>=3.7 or numpy<2.4")
    assert _device.interpreter_problem("3.7.0", "2.4.6") == ""
    assert _device.interpreter_problem("3.6.0", "2.3.5") == ""
    assert _device.interpreter_problem("3.10.0+git5f2e", "10.0") == ""
    if device.type != "cpu":
        return
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(numpy, "__version__", "2.4.6")
    refused = "quantfloor: Triton's interpreter in triton 3.6.0 cannot run the kernels with numpy 2.4.6"
    assert cli.main(["cases", "--tier", "cpu", "-k", CASE]) == 0  # a listing runs no kernel
    case_id = capsys.readouterr().out.split()[-1]
    for command in (["run", "--tier", "cpu", "-k", CASE], ["repro", case_id], ["shrink", case_id]):
        assert cli.main(command) == 2
        assert capsys.readouterr().err.startswith(refused)


def test_mutants_prints_the_kill_matrix(capsys):
    assert cli.main(["mutants", "--tier", "cpu", "-k", "window-off-by-one"]) == 0
    out = capsys.readouterr().out
    assert "window-off-by-one" in out and "killed" in out
    assert out.strip().splitlines()[-1] == "ALL_KILLED (1 of 1 mutants)"


def test_mutants_are_kept_by_words_of_their_name_or_case_id(capsys):
    # "kda strongdecay": no mutant's name holds both words, two mutants' case ids do
    assert cli.main(["mutants", "--tier", "cpu", "-k", "kda strongdecay"]) == 0
    out = capsys.readouterr().out
    assert "kda-diagonal-reference-first-row" in out and "kda-diagonal-product-unbounded-gate" in out
    assert out.strip().splitlines()[-1] == "ALL_KILLED (2 of 2 mutants)"
    assert cli.main(["mutants", "--tier", "cpu", "-k", "no-such-mutant"]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1] == "NOT_ALL_KILLED (0 of 0 mutants)"


def test_workers_judge_the_same_cases_as_one_process(tmp_path, capsys):
    words = ["-k", "L0_1 q4 onepass"]
    assert cli.main(["run", "--tier", "cpu", *words, "--json", str(tmp_path / "one.json")]) == 0
    assert cli.main(["run", "--tier", "cpu", *words, "--workers", "2", "--json", str(tmp_path / "two.json")]) == 0
    capsys.readouterr()
    one, two = (json.loads((tmp_path / f"{n}.json").read_text())["verdicts"] for n in ("one", "two"))
    assert len(one) >= 2
    assert [(v["case_id"], v["passed"], v["max_abs"]) for v in one] == \
        [(v["case_id"], v["passed"], v["max_abs"]) for v in two]


def test_an_id_that_does_not_parse_fails_alone(capsys):
    jobs = [runner.Job("decode-onepass", "decode-not-a-case", None), runner.Job("decode-onepass", quick_fail(3), None)]
    bad, good = parallel.run(jobs, 1)
    assert not bad.passed and bad.reasons[0].startswith("raised ValueError") and bad.suite == "unknown"
    assert "raised ValueError" in good.reasons[0] and good.case_id == quick_fail(3)
    with pytest.raises(ValueError, match="workers: expected an integer >= 1"):
        parallel.run(jobs, 0)


def quick_fail(length: int) -> str:
    """A case id that parses, then fails fast in the judge (a shuffled fp8 K needs D % 16 == 0):
    a FAIL verdict, not a crash."""
    return f"decode-e4m3fn-tensor-b16-hq8-hkv1-d8-w0-L{length}_0-q1-shuffled-onepass"


def _crashing_task() -> parallel.Task:
    mutant = mutants.by_name("wild-output-store")
    return parallel.Task(mutants.regression_of(mutant).id, mutant.name)


def test_a_crash_fails_exactly_its_case_and_a_fresh_worker_goes_on(capsys):
    """The case whose kernel writes far outside its output kills its worker (a segmentation fault
    under the interpreter); every other case, before it, after it and on the other worker, keeps
    the verdict it gets without the crash."""
    ids = [quick_fail(i) for i in range(1, 7)]
    alone = parallel.judge([parallel.Task(i) for i in ids], 2)
    tasks = [parallel.Task(i) for i in ids[:2]] + [_crashing_task()] + [parallel.Task(i) for i in ids[2:]]
    verdicts = parallel.judge(tasks, 2)
    crashed = verdicts.pop(2)
    assert not crashed.passed and crashed.reasons == ("crashed: signal 11 (SIGSEGV)",), crashed.reasons
    assert [(v.case_id, v.reasons) for v in verdicts] == [(v.case_id, v.reasons) for v in alone]


def test_a_job_out_of_device_memory_is_marked_and_no_other_exception_is():
    def raising(exc):
        def judge(device):
            raise exc
        return runner.Job("decode-onepass", "x", judge)

    (short,) = runner.run([raising(torch.OutOfMemoryError("CUDA out of memory"))], torch.device("cpu"),
                          stream=io.StringIO())
    (other,) = runner.run([raising(RuntimeError("out of memory"))], torch.device("cpu"), stream=io.StringIO())
    assert not short.passed and short.reasons[0].startswith("raised OutOfMemoryError")
    assert parallel.out_of_memory(short) and not parallel.out_of_memory(other)


def test_jobs_out_of_device_memory_beside_others_are_judged_again_alone(monkeypatch):
    """What two of five jobs fail for device memory while four workers run beside them is not
    their verdict: after the others, one worker judges those two again in order; what fails there
    for memory stands, saying it ran alone. Each case is reported once."""
    ids = [quick_fail(i) for i in range(1, 6)]
    walks = []

    def walk(context, tasks, order, workers, timeout_base, impl_specs, shown, record):
        walks.append((list(order), workers))
        for i in order:
            case_id = tasks[i].case_id
            short = case_id in (ids[1], ids[3]) if len(walks) == 1 else case_id == ids[3]
            record(i, gate.failed("decode-onepass", case_id, "raised OutOfMemoryError: CUDA out of memory",
                                  out_of_memory=True) if short else
                   gate.failed("decode-onepass", case_id, "first pass" if len(walks) == 1 else "alone"))

    monkeypatch.setattr(parallel, "_walk", walk)
    seen = []
    verdicts = parallel.judge([parallel.Task(i) for i in ids], 4, stream=io.StringIO(), on_verdict=seen.append)
    assert walks == [([0, 1, 2, 3, 4], 4), ([1, 3], 1)]
    assert [v.reasons[-1] for v in verdicts] == ["first pass", "alone", "first pass",
                                                  parallel.ALONE, "first pass"]
    assert sorted(v.case_id for v in seen) == sorted(ids)
    walks.clear()
    one = parallel.judge([parallel.Task(ids[1])], 4, stream=io.StringIO())  # one worker: already alone
    assert walks == [([0], 1)] and one[0].reasons[-1] == parallel.ALONE


def test_a_message_torn_by_a_dying_worker_reads_as_its_death():
    """A worker killed while it writes leaves a partial message on its own pipe: the supervisor
    reads that as the worker's end (None), not as an exception that stops the run, and a whole
    message on the same kind of pipe still arrives."""
    import multiprocessing
    import struct
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    theirs.send(("done", 3, None))
    assert parallel.receive(ours) == ("done", 3, None)
    theirs.send_bytes(b"\x80\x05not a pickle")
    assert parallel.receive(ours) is None
    os.write(theirs.fileno(), struct.pack("!i", 1000) + b"only ten b")  # a length the bytes never reach
    theirs.close()
    assert parallel.receive(ours) is None
    assert parallel.receive(ours) is None  # and the end of file after it


def test_a_case_past_its_time_limit_fails_and_the_run_goes_on(capsys):
    mutant = mutants.by_name("endless-loop")
    hang = parallel.Task(mutants.regression_of(mutant).id, mutant.name)
    limit = runner.time_limit(hang.case_id, 5.0)
    assert 5.0 < limit < 10.0
    verdicts = parallel.judge([hang, parallel.Task(quick_fail(2))], 1, timeout_base=5.0)
    assert verdicts[0].reasons == (f"timed out after {limit:.0f} s",)
    assert "raised ValueError" in verdicts[1].reasons[0]


def test_time_limits_grow_with_the_case():
    small, large = "decode-e4m3fn-token-b16-hq8-hkv2-d64-w0-L40_9-q1-shuffled-onepass", \
        "decode-e4m3fn-token-b16-hq32-hkv8-d128-w4096-L4200_4500-q1-shuffled-cu4-capped-split"
    assert runner.time_limit("probe-two-streams", 7.0) == 7.0
    assert 7.0 < runner.time_limit(small, 7.0) < runner.time_limit(large, 7.0)
    assert runner.time_limit(large) > runner.TIMEOUT_BASE_S


def test_every_job_rebuilds_from_its_id_in_its_suite():
    for job in runner.jobs("cpu"):
        assert runner.job_for_id(job.case_id).suite == job.suite


def test_run_and_repro_with_a_planted_mutant(capsys):
    case_id = mutants.regression_of(mutants.by_name("window-off-by-one")).case.id
    for workers in ("1", "2"):  # two: each worker process plants it itself
        assert cli.main(["run", "--tier", "cpu", "-k", CASE, "--mutant", "window-off-by-one",
                         "--workers", workers]) == 1
        assert _last_line(capsys) == "FAIL (1 of 1)"
    assert cli.main(["repro", case_id, "--mutant", "window-off-by-one"]) == 1
    assert "mutant  window-off-by-one" in capsys.readouterr().out
    assert cli.main(["run", "--tier", "cpu", "-k", CASE, "--mutant", "no-such-mutant", "--workers", "2"]) == 2
    assert "mutant: expected one of" in capsys.readouterr().err


def test_shrink_prints_each_step_and_the_smallest_case_repro_line(capsys):
    case_id = mutants.regression_of(mutants.by_name("window-off-by-one")).case.id
    assert cli.main(["shrink", case_id, "--mutant", "window-off-by-one", "--max-evals", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1].split()[:2] == ["original", "bound"] and lines[1].endswith(case_id)
    assert lines[2].split()[:2] == ["smaller", "bound"]
    assert "3 cases judged" in lines[-3] and "stopped at --max-evals 3" in lines[-3]
    smallest = lines[-2].split()[1]
    assert smallest != case_id and lines[-1] == f"repro    quantfloor repro {smallest} --mutant window-off-by-one"
    assert cli.main(["repro", smallest, "--mutant", "window-off-by-one"]) == 1
    assert cli.main(["repro", smallest]) == 0
    capsys.readouterr()
    assert cli.main(["shrink", case_id]) == 1
    assert "passes: nothing to shrink" in _last_line(capsys)


def test_a_killed_run_keeps_its_report_and_resume_judges_only_what_it_lacks(tmp_path, capsys, monkeypatch):
    words = "L0_1 q4"
    path = tmp_path / "r.json"
    assert cli.main(["run", "--tier", "cpu", "-k", words, "--json", str(tmp_path / "whole.json")]) == 0
    whole = [v["case_id"] for v in json.loads((tmp_path / "whole.json").read_text())["verdicts"]]
    assert len(whole) >= 3
    monkeypatch.setattr(report, "LIVE_SECONDS", 0.0)  # rewrite the report after every verdict
    judged = []

    def in_process(jobs, workers, *, on_verdict=None, stop_at=None, **kw):
        """parallel.run in this process, stopped from outside (as a time limit would) at verdict `stop_at`."""
        out = []
        for job in jobs:
            if len(judged) + 1 == stop_at:
                raise KeyboardInterrupt
            judged.append(job.case_id)
            out.append(runner.case_verdict(decode_cases.DecodeCase.from_id(job.case_id), cli.DEVICE))
            on_verdict(out[-1])
        return out

    monkeypatch.setattr(parallel, "run", lambda *a, **kw: in_process(*a, stop_at=3, **kw))
    with pytest.raises(KeyboardInterrupt):
        cli.main(["run", "--tier", "cpu", "-k", words, "--json", str(path)])
    assert [v["case_id"] for v in json.loads(path.read_text())["verdicts"]] == whole[:2]
    judged.clear()
    monkeypatch.setattr(parallel, "run", in_process)
    assert cli.main(["run", "--tier", "cpu", "-k", words, "--resume", str(path)]) == 0
    assert judged == whole[2:]
    assert [v["case_id"] for v in json.loads(path.read_text())["verdicts"]] == whole
    assert "2 already judged" in capsys.readouterr().err
    path.write_text("not a report")
    assert cli.main(["run", "--tier", "cpu", "-k", words, "--resume", str(path)]) == 2
    assert capsys.readouterr().err.startswith("quantfloor: --resume: expected a report")


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_timeout_must_be_positive_seconds(value, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", "--tier", "cpu", "-k", CASE, "--timeout", value])
    assert stop.value.code == 2
    assert f"--timeout: expected seconds > 0, got '{value}'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="timeout_base: expected seconds > 0"):
        parallel.judge([parallel.Task(CASE)], 1, timeout_base=0.0)


# Two cases: with window-off-by-one planted the w1 one fails, the w4096 one (lengths 0 and 1) passes.
PLANTED = "L0_1 q2 onepass"
PLANTED_FAIL = "decode-e4m3fnuz-token-b16-hq16-hkv16-d512-w1-L0_1-q2-shuffled-cu1-onepass"
PLANTED_PASS = "decode-e4m3fnuz-token-b64-hq16-hkv16-d128-w4096-L0_1-q2-shuffled-scalespread-cu256-onepass"


def test_a_run_with_a_planted_failure_writes_page_markdown_pictures_and_junit(tmp_path, capsys):
    out = tmp_path / "out"
    rc = cli.main(["run", "--tier", "cpu", "-k", PLANTED, "--mutant", "window-off-by-one",
                   "--json", str(out / "r.json"), "--html", str(out / "page.html"), "--md", str(out / "comment.md"),
                   "--png", str(out / "png"), "--junit", str(out / "results.xml")])
    assert rc == 1
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines()[-1] == "FAIL (1 of 2)"
    assert "  2/2 cases (100%), 1 failed, " in captured.err  # plain progress lines: stderr is no terminal
    repro = f"quantfloor repro {PLANTED_FAIL} --mutant window-off-by-one"
    html = (out / "page.html").read_text()
    assert "quantfloor: FAIL (1 of 2)</h1>" in html and "<h2>Failed cases (1)</h2>" in html
    assert ('<td class="n">2</td><td class="n">1</td><td class="n bad">1</td><td class="n">0</td>' in html)
    assert f"<code>{repro}</code>" in html and PLANTED_PASS in html
    assert "<tr><th>mutant</th><td>window-off-by-one</td></tr>" in html and "<tr><th>wall time</th>" in html
    md = (out / "comment.md").read_text()
    assert md.startswith("### quantfloor: FAIL (1 of 2)") and "| decode-onepass | 2 | 1 | 1 | 0 |" in md
    assert f"{repro}\n" in md
    cases = ET.parse(out / "results.xml").getroot().findall("./testsuite/testcase")
    assert sorted(c.get("name") for c in cases) == sorted([PLANTED_FAIL, PLANTED_PASS])
    (failure,) = [c.find("failure") for c in cases if c.find("failure") is not None]
    assert failure.get("message").startswith("out: max abs err") and failure.text.endswith(repro)
    if plots.available():
        assert "![decode-onepass: err/bound histogram](png/decode-onepass-hist.png)" in md
        assert (out / "png" / "decode-onepass-heat-window-len.png").read_bytes()[:4] == b"\x89PNG"
    else:
        assert "skipped: matplotlib is not installed" in captured.err and "![" not in md
    # The same page again from the JSON report alone.
    assert cli.main(["report", str(out / "r.json"), "--html", str(tmp_path / "again.html")]) == 0
    assert (tmp_path / "again.html").read_text() == html


def test_pytest_junit_names_the_same_case_ids(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_suites.py",
                           "-k", PLANTED_PASS, "--junitxml", str(tmp_path / "pytest.xml")],
                          cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    (theirs,) = ET.parse(tmp_path / "pytest.xml").getroot().iter("testcase")
    verdict = runner.job_for_id(PLANTED_PASS).judge(cli.DEVICE)
    (ours,) = junit.tree([verdict], {}).getroot().iter("testcase")
    assert theirs.get("name") == f"test_case_passes_the_gate[{ours.get('name')}]"
    assert ours.get("classname") == "quantfloor.decode-onepass" and ours.get("name") == PLANTED_PASS


def test_repro_judges_on_the_implementation_a_run_named(capsys):
    assert cli.main(["repro", PLANTED_PASS, "--impl", "torch"]) == 1
    out = capsys.readouterr().out
    assert "verdict SKIPPED" in out and "torch supports path in ('auto',)" in out
    auto = PLANTED_PASS.replace("-onepass", "-auto")
    assert cli.main(["repro", auto, "--impl", "torch"]) == 0
    assert "verdict PASS" in capsys.readouterr().out
    assert runner.implementations()["decode"].name == "triton"  # the next case is ours again
