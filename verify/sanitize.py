"""NVIDIA compute-sanitizer over a sample of the adversarial cases (`quantfloor sanitize`).

The sample: every regression of the tier (its numeric case or its probe)
and the first case of every suite (each kernel path of each operator). For
each tool (memcheck, racecheck, initcheck, synccheck) one sanitizer process
judges the sample in order through a child (`python -m verify.sanitize
--child IDS_FILE`) that prints a marker line before each case, so every
report the tool prints is counted against the case that was running. A
child that dies (a tool may turn an error into a crash) is started again
after the case it died in, and that case is reported as crashed. A case
whose verdict fails under a tool is reported too (the child prints a second
marker with the reason): a kernel that is right alone and wrong under the
tool is a finding, and the tool's own exit notice is not counted.

memcheck and initcheck judge the numeric cases with PyTorch's caching
allocator off (`PYTORCH_NO_CUDA_MEMORY_CACHING=1`): with it on, a read just
past a tensor lands inside the allocator's larger segment and no tool sees
it, and a reused block looks initialised. The probes keep the allocator (CUDA
graph capture needs its private pools), in a child of their own.
"""

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

from verify import device as _device

DEVICE = _device.setup()  # before Triton is imported: the child may run under the interpreter

from verify import parallel, runner  # noqa: E402

MARK = "@@quantfloor-case "
FAIL_MARK = "@@quantfloor-fail "
UNCACHED_TOOLS = ("memcheck", "initcheck")
NO_CACHING = "PYTORCH_NO_CUDA_MEMORY_CACHING"
TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
SANITIZER = "compute-sanitizer"
TOOL_SECONDS = 3600.0  # one tool over the whole sample, kernels slowed by the tool included
_BANNER = re.compile(r"========= (COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY"
                     r"|Target application returned an error)")


@dataclass
class ToolResult:
    """What one tool found: {case id: [report headline, ...]} for every case that ran, the cases
    whose process died, and {case id: reason} for the cases whose verdict failed under the tool."""

    tool: str
    errors: dict = field(default_factory=dict)
    crashed: list = field(default_factory=list)
    failed: dict = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.errors.values()) + len(self.crashed) + len(self.failed)


def sample(tier: str, pattern: str | None = None) -> list[str]:
    """The ids sanitized: the first case of each suite, then every regression of the tier,
    kept when they contain every word of `pattern`."""
    first = {}
    for job in runner.jobs(tier):
        if job.suite != "regressions":
            first.setdefault(job.suite, job.case_id)
    ids = list(dict.fromkeys([*first.values(), *(j.case_id for j in runner.regression_jobs(tier))]))
    words = (pattern or "").split()
    return [i for i in ids if all(w in i for w in words)]


def parse(output: str) -> dict:
    """{case id: [report headline, ...]} from a sanitizer run's output: each headline (a line
    `========= X` whose X does not start with a space and is no banner or summary) counts
    against the case whose marker came last before it."""
    errors, current = {}, None
    for line in output.splitlines():
        if line.startswith(MARK):
            current = line[len(MARK):].strip()
            errors.setdefault(current, [])
        elif line.startswith(FAIL_MARK):
            continue
        elif line.startswith("========= ") and not line[10:11].isspace() and line[10:].strip() \
                and not _BANNER.match(line) and current is not None:
            errors[current].append(line[10:].strip())
    return errors


def failures(output: str) -> dict:
    """{case id: reason} for the cases whose verdict failed under the tool (the child's second
    marker: `@@quantfloor-fail ID: reason`)."""
    found = {}
    for line in output.splitlines():
        if line.startswith(FAIL_MARK):
            case_id, _, reason = line[len(FAIL_MARK):].partition(": ")
            found[case_id.strip()] = reason.strip()
    return found


def child_env(tool: str, probes: bool) -> dict:
    """The child's environment: the caching allocator off for memcheck and initcheck on the
    numeric cases (see the module docstring), as it is everywhere else."""
    env = dict(os.environ)
    if tool in UNCACHED_TOOLS and not probes:
        env[NO_CACHING] = "1"
    return env


def run_tool(tool: str, ids: list, *, sanitizer: str = SANITIZER, timeout: float = TOOL_SECONDS) -> ToolResult:
    """Judge `ids` under `tool`, the numeric cases in order in one child and the probes in
    another; a child that dies is started again after its case."""
    result = ToolResult(tool)
    for probes in (False, True):
        group = [i for i in ids if i.startswith("probe-") == probes]
        if group:
            _run_group(result, group, sanitizer, timeout, child_env(tool, probes))
    return result


def _run_group(result: ToolResult, ids: list, sanitizer: str, timeout: float, env: dict) -> None:
    remaining = list(ids)
    while remaining:
        with tempfile.NamedTemporaryFile("w", suffix=".ids", delete=False) as fh:
            fh.write("\n".join(remaining))
        try:
            proc = subprocess.run([sanitizer, "--tool", result.tool, "--print-limit", "100",
                                   "--target-processes", "all",
                                   sys.executable, "-m", "verify.sanitize", "--child", fh.name],
                                  capture_output=True, text=True, timeout=timeout, env=env)
        finally:
            os.unlink(fh.name)
        output = proc.stdout + proc.stderr
        found = parse(output)
        result.errors.update(found)
        result.failed.update(failures(output))
        ran = [i for i in remaining if i in found]
        if proc.returncode in (0, 1) and len(ran) == len(remaining):
            return
        last = ran[-1] if ran else remaining[0]
        result.crashed.append(last)
        remaining = remaining[remaining.index(last) + 1:]


def _child(path: str) -> int:
    """Judge the ids in `path` one by one in this process, a marker line before each and a
    second one for a failed verdict; exit 1 when one failed, 3 when a case leaves the CUDA
    context broken (every later case would fail with it)."""
    with open(path) as fh:
        ids = [line.strip() for line in fh if line.strip()]
    failed = 0
    with open(os.devnull, "w") as quiet:
        for case_id in ids:
            print(MARK + case_id, flush=True)
            (verdict,) = runner.run([runner.job_for_id(case_id)], DEVICE, stream=quiet)
            if not verdict.passed and not verdict.skipped:
                failed += 1
                print(f"{FAIL_MARK}{case_id}: {'; '.join(verdict.reasons)}", flush=True)
            if parallel.broken_context(DEVICE) is not None:
                return 3
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--child":
        print("usage: python -m verify.sanitize --child IDS_FILE (quantfloor sanitize runs it)", file=sys.stderr)
        sys.exit(2)
    sys.exit(_child(sys.argv[2]))
