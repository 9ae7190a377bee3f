"""quantfloor sanitize: the sample, the attribution of a tool's reports to cases, restarts after a crash.

The tool itself needs an NVIDIA GPU; here a stand-in for compute-sanitizer runs the same child
and adds a report after one case and a crash in another."""

import stat
import sys

import pytest

from verify import cli, runner, sanitize
from verify import device as _device

LOG = """========= COMPUTE-SANITIZER
@@quantfloor-case decode-a
========= Invalid __global__ write of size 4 bytes
=========     at decode_partition_kernel+0x1a0
=========     by thread (3,0,0) in block (0,1,0)
=========
@@quantfloor-case decode-b
@@quantfloor-case probe-two-streams
========= Error: Race reported between Write access at 0x10 and Read access at 0x20
========= ERROR SUMMARY: 2 errors
"""


def test_each_report_counts_against_the_case_that_was_running():
    assert sanitize.parse(LOG) == {
        "decode-a": ["Invalid __global__ write of size 4 bytes"],
        "decode-b": [],
        "probe-two-streams": ["Error: Race reported between Write access at 0x10 and Read access at 0x20"],
    }


def test_the_sample_holds_every_regression_and_a_case_of_every_suite():
    ids = sanitize.sample("cpu")
    assert {j.case_id for j in runner.regression_jobs("cpu")} <= set(ids)
    suites = {runner.job_for_id(i).suite for i in ids}
    assert {j.suite for j in runner.jobs("cpu")} == suites
    assert all("nanslots" in i for i in sanitize.sample("cpu", "nanslots"))


STAND_IN = """#!{python}
import subprocess, sys
child = subprocess.Popen(sys.argv[7:], stdout=subprocess.PIPE, text=True)
for line in child.stdout:
    sys.stdout.write(line)
    sys.stdout.flush()
    if line.strip().endswith("{report}"):
        print("========= Invalid __global__ read of size 16 bytes")
    if line.strip().endswith("{crash}"):
        child.kill()
        sys.exit(139)
sys.exit(child.wait())
"""


def quick(length: int) -> str:
    """A case id that parses and fails fast in the judge (a shuffled fp8 K needs D % 16 == 0)."""
    return f"decode-e4m3fn-tensor-b16-hq8-hkv1-d8-w0-L{length}_0-q1-shuffled-onepass"


def test_a_tool_run_attributes_reports_and_restarts_after_a_crash(tmp_path):
    tool = tmp_path / "stand-in-sanitizer"
    tool.write_text(STAND_IN.format(python=sys.executable, report=quick(1), crash=quick(2)))
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    ids = [quick(1), quick(2), quick(3)]
    result = sanitize.run_tool("memcheck", ids, sanitizer=str(tool))
    assert result.errors == {quick(1): ["Invalid __global__ read of size 16 bytes"], quick(2): [], quick(3): []}
    assert result.crashed == [quick(2)]
    # the quick cases fail in the judge: a verdict failed under the tool is a finding of its own
    assert set(result.failed) == {quick(1), quick(3)}
    assert "shuffled K needs D % x == 0" in result.failed[quick(1)]
    assert result.count == 4


def test_the_tools_exit_notice_is_no_report():
    log = LOG.replace("========= ERROR SUMMARY", "========= Target application returned an error\n"
                      "========= ERROR SUMMARY")
    assert sanitize.parse(log) == sanitize.parse(LOG)


def test_memcheck_sees_tensors_without_the_caching_allocator_but_probes_keep_it(monkeypatch):
    groups = []
    monkeypatch.setattr(sanitize, "_run_group",
                        lambda result, ids, sanitizer, timeout, env: groups.append((ids, env.get(sanitize.NO_CACHING))))
    monkeypatch.delenv(sanitize.NO_CACHING, raising=False)
    ids = ["decode-x", "probe-two-streams", "kda-y"]
    sanitize.run_tool("memcheck", ids)
    assert groups == [(["decode-x", "kda-y"], "1"), (["probe-two-streams"], None)]
    groups.clear()
    sanitize.run_tool("racecheck", ids)
    assert groups == [(["decode-x", "kda-y"], None), (["probe-two-streams"], None)]


def test_sanitize_refuses_unknown_tools(capsys):
    assert cli.main(["sanitize", "--tool", "memcheck,leakcheck"]) == 2
    assert "--tool: expected a comma list of memcheck" in capsys.readouterr().err


@pytest.mark.skipif(_device.has_gpu(), reason="shows what a machine without a GPU says")
def test_sanitize_needs_a_gpu(capsys):
    assert cli.main(["sanitize", "--tool", "memcheck"]) == 2
    assert "needs an NVIDIA GPU" in capsys.readouterr().err
