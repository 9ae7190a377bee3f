"""The `quantfloor` command line.

    quantfloor run [--tier T] [-k FILTER] [--shard i/n] [--workers N] [--timeout S] [--mutant NAME]
                   [--impl SPEC] [--workload SHAPES.jsonl] [--resume REPORT.json] [OUTPUTS]
    quantfloor report RUN.json [OUTPUTS]
    quantfloor cases [--tier T] [-k FILTER]
    quantfloor repro CASE_ID [--mutant NAME] [--impl SPEC]
    quantfloor shrink CASE_ID [--mutant NAME] [--max-evals N]
    quantfloor mutants [--tier T] [-k NAME] [--workers N] [--timeout S]
    quantfloor merge REPORT.json ... [OUTPUTS]
    quantfloor sanitize [--tier T] [-k WORDS] [--tool memcheck,racecheck,initcheck,synccheck]
    quantfloor compile [--target gfx942,gfx950,gfx1250,sm90] [--tier T] [-k WORDS] [--json PATH] [--workers N]
                       [--reuse EARLIER.json]
    quantfloor bindiff BEFORE.json AFTER.json

OUTPUTS: [--json PATH] [--md PATH] [--html PATH] [--png DIR] [--junit PATH] [--heat A,B]: the JSON
report, a markdown comment (referencing the pictures when --png is given too), one self-contained
HTML page, the pictures as PNG files (needs matplotlib, the `plot` extra; without it they are
skipped and the command says so), JUnit XML, and the two case factors of every heat map instead
of each operator's default pair (verify.figures). `report` writes them from a saved JSON report.

`run` and `mutants` judge every case in an isolated worker process under a
time limit scaled to its size (verify.parallel): a case whose kernel crashes
its process or never returns fails with that reason, and a fresh worker
goes on. `run --json` rewrites its report as verdicts come (at most every
report.LIVE_SECONDS), so a run that is killed keeps what it judged, and
`run --resume REPORT.json` judges only the cases that report lacks.
`run`, `mutants` and `merge` exit 0 only when everything passed (for
`mutants`: every real path passes its case and every mutant fails it).
`--mutant NAME` judges with that mutant of `verify.mutants` in place (one fix
taken back), to see which cases catch it. `shrink` exits 0 when the case
fails and it printed the smallest case that fails for the same reason.
`report` exits 0 once it wrote what it was asked, whatever the run's verdict.
`run` shows its progress on stderr (verify.progress): a live bar with an ETA
on a terminal, plain lines in a log.
`compile` compiles, without running anything, every kernel specialization
the tier's cases launch on each target (verify.binaries) and exits 0 only
when all compiled and none has a spill its launch table does not expect;
`bindiff` says which binaries of two of its JSON reports differ.
"""

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from verify import device as _device

DEVICE = _device.setup()

import torch  # noqa: E402
import triton  # noqa: E402

from cases import decode as decode_cases  # noqa: E402
from verify import binaries, figures, impls, junit, mutants, page, parallel, plots, report  # noqa: E402
from verify import runner, sanitize, shrink, targets, workload  # noqa: E402


def _device_name() -> str:
    return torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "cpu (Triton interpreter)"


def _seconds(text: str) -> float:
    """argparse type of --timeout: seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def _meta(args, tier: str) -> dict:
    meta = {"device": _device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "tier": tier, "command": " ".join(sys.argv),
            "shard": getattr(args, "shard", None) or "0/1"}
    if getattr(args, "mutant", None):
        meta["mutant"] = args.mutant
    chosen = impls.select(getattr(args, "impl", None))
    meta["impl"] = {op: f"{impl.name} {impl.version}" for op, impl in chosen.items()}
    if getattr(args, "impl", None):
        meta["impl_specs"] = list(args.impl)
    return meta


def _tier(args, judged: bool = True) -> str:
    return _device.check_tier(args.tier or _device.default_tier(), judged=judged)


def _planted(name: str | None):
    """The named mutant in place for the block (nothing when None)."""
    return mutants.applied(mutants.by_name(name)) if name else contextlib.nullcontext()


def _selected(args, tier):
    if getattr(args, "workload", None):
        every = [runner.case_job(case) for case in workload.load(args.workload)]
    else:
        every = runner.jobs(tier)
    return _device.shard(runner.select(every, args.k), getattr(args, "shard", None))


def _emit(verdicts, meta, args) -> int:
    print(report.console_table(verdicts))
    _outputs(verdicts, meta, args)
    line = report.final_line(verdicts)
    print(line)
    return 0 if line.startswith("ALL_PASS") else 1


def _outputs(verdicts, meta, args) -> None:
    """Write what OUTPUTS asked for; PNGs first, so the markdown can reference them."""
    heat = [figures.parse_heat(args.heat)] if args.heat else None
    if args.json:
        report.write_json(args.json, verdicts, meta)
    pictures = None
    if args.png:
        if plots.available():
            pictures = plots.write(args.png, verdicts, heat)
        else:
            print(f"quantfloor: --png {args.png} skipped: matplotlib is not installed "
                  "(pip install -e \".[plot]\"); the other outputs are written", file=sys.stderr)
    if args.md:
        Path(args.md).parent.mkdir(parents=True, exist_ok=True)
        shown = plots.relative(pictures, Path(args.md).parent) if pictures else None
        Path(args.md).write_text(report.markdown(verdicts, meta, shown))
    if args.html:
        Path(args.html).parent.mkdir(parents=True, exist_ok=True)
        page.write(args.html, verdicts, meta, heat)
    if args.junit:
        Path(args.junit).parent.mkdir(parents=True, exist_ok=True)
        junit.write(args.junit, verdicts, meta)


def _resumed(path, jobs) -> dict:
    """{(suite, case id): verdict} of an earlier report at `path` for the selected jobs
    (none when there is no such file yet)."""
    if path is None or not Path(path).exists():
        return {}
    wanted = {(j.suite, j.case_id) for j in jobs}
    try:
        earlier = report.read_json(path)[1]
    except ValueError as exc:  # not JSON, or not a report
        raise ValueError(f"--resume: expected a report written by quantfloor run --json, got {exc}") from None
    return {(v.suite, v.case_id): v for v in earlier if (v.suite, v.case_id) in wanted}


def cmd_run(args) -> int:
    tier = _tier(args)
    jobs = _selected(args, tier)
    mutant = mutants.by_name(args.mutant) if args.mutant else None  # an unknown name stops here
    args.json = args.json or args.resume
    kept = _resumed(args.resume, jobs)
    todo = [j for j in jobs if (j.suite, j.case_id) not in kept]
    meta = _meta(args, tier)
    planted = f", mutant {mutant.name} planted" if mutant else ""
    resumed = f", {len(kept)} already judged in {args.resume}" if args.resume else ""
    judged_on = ", ".join(f"{op} {name}" for op, name in meta["impl"].items())
    if args.heat:
        figures.parse_heat(args.heat)  # a bad --heat stops here, before any case is judged
    print(f"quantfloor run: {len(jobs)} cases{resumed}, tier {tier}, device {meta['device']}{planted}, "
          f"implementations: {judged_on}", file=sys.stderr, flush=True)
    if args.workers > 1:
        meta["workers"] = _device.worker_map(max(1, min(args.workers, len(todo))), "w")
        print(f"workers: {meta['workers']}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    live = report.LiveReport(args.json, meta, kept.values()) if args.json else None
    on_verdict = live.add if live else None
    new = parallel.run(todo, args.workers, mutant=args.mutant, on_verdict=on_verdict, timeout_base=args.timeout,
                       impl_specs=tuple(args.impl or ()))
    meta["wall_seconds"] = round(time.perf_counter() - started, 1)
    if kept:
        meta["resumed"] = len(kept)
    judged = {**kept, **{(v.suite, v.case_id): v for v in new}}
    return _emit([judged[(j.suite, j.case_id)] for j in jobs], meta, args)


def cmd_report(args) -> int:
    if args.heat:
        figures.parse_heat(args.heat)
    try:
        meta, verdicts = report.read_json(args.run)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"RUN.json: expected a report written by quantfloor run --json, got {exc}") from None
    print(report.console_table(verdicts))
    _outputs(verdicts, meta, args)
    print(report.final_line(verdicts))
    return 0


def cmd_cases(args) -> int:
    for job in _selected(args, _tier(args, judged=False)):  # listing needs no GPU: plan shards anywhere
        print(f"{job.suite:<16} {job.case_id}")
    return 0


def cmd_repro(args) -> int:
    _device.check_interpreter()
    chosen, before = impls.select(args.impl), runner.implementations()
    job = runner.job_for_id(args.case_id)
    started = time.perf_counter()
    runner.use(chosen)
    try:
        with _planted(args.mutant):
            verdict = job.judge(DEVICE)
    finally:
        runner.use(before)
    word = "SKIPPED" if verdict.skipped else "PASS" if verdict.passed else "FAIL"
    print(f"case    {verdict.case_id}\nsuite   {verdict.suite}\nverdict {word}")
    if args.mutant:
        print(f"mutant  {args.mutant}")
    print(f"max abs {verdict.max_abs:.4g}   floor {verdict.floor:.4g}   err/floor {verdict.err_floor:.4g}   "
          f"rms ratio {verdict.rms_ratio:.3g}   {time.perf_counter() - started:.2f}s")
    for key, value in verdict.detail.items():
        print(f"  {key}: {value}")
    for reason in verdict.reasons:
        print(f"  - {reason}")
    return 0 if verdict.passed else 1


def _ratio(verdict) -> str:
    return "nan" if verdict.err_floor != verdict.err_floor else f"{verdict.err_floor:.4g}"


def cmd_shrink(args) -> int:
    _device.check_interpreter()
    started = time.perf_counter()
    shown = []

    def show(step):
        if not shown:
            print(f"{'':<9} {'reason':<14} {'err/floor':>10}  case")
        label = "smaller" if shown else "original"
        shown.append(step)
        print(f"{label:<9} {step.reason or 'PASS':<14} {_ratio(step.verdict):>10}  {step.case_id}", flush=True)

    with _planted(args.mutant):
        result = shrink.shrink(args.case_id, DEVICE, max_evals=args.max_evals, on_step=show)
    seconds = time.perf_counter() - started
    if result.original.verdict.passed:
        planted = f" with mutant {args.mutant}" if args.mutant else ""
        print(f"{args.case_id} passes{planted}: nothing to shrink ({seconds:.1f}s)")
        return 1
    best = result.smallest
    stop = f"stopped at --max-evals {args.max_evals}; it may shrink further" if result.capped \
        else "no smaller move fails for the same reason"
    print(f"{len(result.steps)} steps, {result.evaluations} cases judged, {seconds:.1f}s ({stop})")
    print(f"smallest {best.case_id}  ({best.reason}, err/floor {_ratio(best.verdict)})")
    print(f"repro    quantfloor repro {best.case_id}" + (f" --mutant {args.mutant}" if args.mutant else ""))
    return 0


def cmd_mutants(args) -> int:
    tier = _tier(args)
    names = None
    if args.k:
        words = args.k.split()
        names = [m.name for m in mutants.MUTANTS
                 if all(w in m.name or w in mutants.regression_of(m).id for w in words)]
    rows = mutants.kill_matrix(tier, names=names, workers=args.workers, timeout_base=args.timeout)
    print(mutants.format_kill_matrix(rows))
    ok = bool(rows) and all(r.killed for r in rows)
    print(f"{'ALL_KILLED' if ok else 'NOT_ALL_KILLED'} ({sum(r.killed for r in rows)} of {len(rows)} mutants)")
    return 0 if ok else 1


def cmd_sanitize(args) -> int:
    tools = [t.strip() for t in args.tool.split(",") if t.strip()]
    unknown = [t for t in tools if t not in sanitize.TOOLS]
    if unknown or not tools:
        print(f"quantfloor: --tool: expected a comma list of {', '.join(sanitize.TOOLS)}, got {args.tool!r}",
              file=sys.stderr)
        return 2
    if DEVICE.type != "cuda":
        print("quantfloor sanitize: needs an NVIDIA GPU; this machine has none", file=sys.stderr)
        return 2
    if shutil.which(sanitize.SANITIZER) is None:
        print(f"quantfloor sanitize: {sanitize.SANITIZER} is not on PATH (it comes with the CUDA toolkit)",
              file=sys.stderr)
        return 2
    ids = sanitize.sample(_tier(args), args.k)
    print(f"quantfloor sanitize: {len(ids)} cases, tools {', '.join(tools)}, device {_device_name()}",
          flush=True)
    results = []
    for tool in tools:
        result = sanitize.run_tool(tool, ids)
        for case_id, found in result.errors.items():
            for headline in found:
                print(f"{tool:<10} {case_id}: {headline}")
        for case_id in result.crashed:
            print(f"{tool:<10} {case_id}: its process died under the tool")
        for case_id, reason in result.failed.items():
            print(f"{tool:<10} {case_id}: its verdict failed under the tool: {reason}")
        print(f"{tool}: {len(ids)} cases, {result.count} errors", flush=True)
        results.append(result)
    total = sum(r.count for r in results)
    print(f"{'SANITIZE_CLEAN' if total == 0 else 'SANITIZE_ERRORS'} ({total} errors, {len(tools)} tools, "
          f"{len(ids)} cases)")
    return 0 if total == 0 else 1


def _compiled_cases(tier: str, pattern: str | None) -> list:
    """The cases of a tier's jobs selected by -k (probes, which judge call sequences, left out). The
    CPU tier lists no GPU-only path (the interpreter cannot run Gluon), but compiling needs no GPU: its
    decode rows are compiled through those paths too (each one-pass case taken by them)."""
    jobs = runner.jobs(tier)
    if tier == "cpu":
        extra = [replace(c, path=p) for j in jobs if j.case_id.endswith("-onepass")
                 for c in [binaries.case_of(j.case_id)] for p in decode_cases.GPU_PATHS]
        jobs = jobs + [runner.case_job(c) for c in extra]
    return [binaries.case_of(j.case_id) for j in runner.select(jobs, pattern) if not j.case_id.startswith("probe-")]


def _write_binaries(path, built, tier, chosen, n_cases, started) -> None:
    meta = {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "tier": tier, "command": " ".join(sys.argv), "targets": [t.name for t in chosen], "cases": n_cases,
            "seconds": round(time.perf_counter() - started, 1)}
    with open(path, "w") as fh:
        json.dump({"meta": meta, "binaries": [binaries.to_json(b) for b in built]}, fh)


def cmd_compile(argv: list, args) -> int:
    from kernels import arch

    chosen = targets.parse(args.target)
    if arch.interpreting():  # kernels here are interpreted: compile in a process where they are not
        env = dict(os.environ, TRITON_INTERPRET="0")
        return subprocess.call([sys.executable, "-m", "verify", *argv], env=env)
    tier = _tier(args, judged=False)
    try:
        earlier_meta, earlier = binaries.read_report(args.reuse) if args.reuse else ({}, ())
    except (OSError, ValueError) as exc:  # no such file, not JSON, or not a compile report
        raise ValueError(f"--reuse: expected a report written by quantfloor compile --json, got {exc}") from None
    started = time.perf_counter()
    cases = _compiled_cases(tier, args.k)
    specs = binaries.plan(cases, chosen)
    planned = time.perf_counter() - started
    print(f"quantfloor compile: {len(cases)} cases of tier {tier} launch {len(specs)} specializations on "
          f"{', '.join(t.name for t in chosen)} (planned in {planned:.1f}s); compiling with {args.workers} "
          f"workers", file=sys.stderr, flush=True)
    if args.reuse:
        lent = binaries.lendable(specs, earlier)
        print(f"  {lent} of them have the compiler inputs of a binary in {args.reuse}: its facts are taken, "
              f"{len(specs) - lent} are compiled", file=sys.stderr, flush=True)
        written_by = earlier_meta.get("triton")
        if lent < len(specs) and written_by and written_by != triton.__version__:
            print(f"  {args.reuse} was written with triton {written_by}, this is triton {triton.__version__}: "
                  f"equal compiler inputs need the same compiler", file=sys.stderr, flush=True)
    if args.no_compile:
        built = binaries.uncompiled(specs)
        if args.json:
            _write_binaries(args.json, built, tier, chosen, len(cases), started)
        print(f"planned {len(built)} specializations for {len(chosen)} targets (nothing compiled)")
        return 0
    shown = [time.perf_counter()]

    def progress(done, total):
        if time.perf_counter() - shown[0] >= runner.PROGRESS_SECONDS and done < total:
            print(f"  compiled {done}/{total}, {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
            shown[0] = time.perf_counter()

    built = binaries.compile_all(specs, workers=args.workers, on_done=progress, earlier=earlier)
    print(binaries.table(built))
    for b in built:
        if b.error:
            print(f"FAILED {b.target} {b.kernel} ({b.example}): {b.error}")
            print(f"  {binaries.config(b)}")
    print(binaries.overview(built))
    print(binaries.known_spills(built))
    if args.json:
        _write_binaries(args.json, built, tier, chosen, len(cases), started)
    print(binaries.summary(built, len(chosen)))
    return 0 if built and not any(b.error or b.new_spill for b in built) else 1


def cmd_bindiff(args) -> int:
    before, after = (binaries.read_report(path)[1] for path in (args.before, args.after))
    print(binaries.diff(before, after))
    return 0


def cmd_merge(args) -> int:
    meta, verdicts = report.merge(args.reports)
    return _emit(verdicts, meta, args)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="quantfloor", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def tiered(name, helptext, kept="cases whose id or suite"):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--tier", choices=_device.TIERS, default=None, help="default: gpu with a GPU, else cpu")
        s.add_argument("-k", default=None, help=f"keep {kept} contains every word")
        return s

    run = tiered("run", "judge every case of a tier; ALL_PASS or FAIL")
    run.add_argument("--shard", default=None, help="i/n: run the i-th of n slices")
    kill = tiered("mutants", "the kill matrix: every mutant must fail its case", "mutants whose name or case id")
    for s in (run, kill):
        s.add_argument("--workers", type=int, default=1,
                       help="judge in this many isolated processes, worker w on GPU w mod count (default 1)")
        s.add_argument("--timeout", type=_seconds, default=runner.TIMEOUT_BASE_S, metavar="SECONDS",
                       help="seconds each case may take on top of what its size predicts; a case past "
                            f"its limit fails, timed out (default {runner.TIMEOUT_BASE_S:.0f})")
    mutant_help = "judge with this mutant of verify.mutants in place (one fix taken back)"
    run.add_argument("--mutant", default=None, help=mutant_help)
    run.add_argument("--workload", default=None, metavar="SHAPES.jsonl",
                     help="judge the cases of this file of a user's own shapes instead of the tier's "
                          "(one JSON object a line; verify/workload.py)")
    run.add_argument("--impl", action="append", metavar="SPEC",
                     help="judge this implementation instead of ours for its operator: torch (a decode "
                          "baseline), fla-chunk or fla-recurrent (fla-core's KDA kernels; the fla extra), "
                          "decode=MODULE:FUNCTION or kda=MODULE:FUNCTION (MODULE importable or a .py path); "
                          "repeatable, one per operator (verify/impls.py)")
    run.add_argument("--resume", default=None, metavar="REPORT.json",
                     help="judge only the cases this report lacks, and write the whole report there "
                          "(or to --json); the report is kept current while a run goes")
    shown = sub.add_parser("report", help="write the markdown, HTML page, pictures and JUnit XML of a JSON report")
    shown.add_argument("run", metavar="RUN.json", help="a report written by quantfloor run --json (or merge)")
    for s in (run, sub.add_parser("merge", help="join JSON reports of shards"), shown):
        s.add_argument("--json", default=None, help="write the JSON report here")
        s.add_argument("--md", default=None, help="write a markdown summary here (a pull-request comment)")
        s.add_argument("--html", default=None, metavar="PAGE.html",
                       help="write one self-contained HTML page here: suites, failures with repro lines, "
                            "the cases closest to their bound, err/bound histograms and heat maps")
        s.add_argument("--png", default=None, metavar="DIR",
                       help="draw each suite's pictures into this folder as PNG files (needs matplotlib); "
                            "--md then references them")
        s.add_argument("--junit", default=None, metavar="RESULTS.xml",
                       help="write JUnit XML here: one testcase per case id, failures with their reasons")
        s.add_argument("--heat", default=None, metavar="A,B",
                       help="the two case factors of every heat map (fields of the case types, or len), "
                            "instead of each operator's default pairs")
    sub.choices["merge"].add_argument("reports", nargs="+")
    tiered("cases", "list the case ids of a tier")
    clean = tiered("sanitize", "a sample of the cases under NVIDIA compute-sanitizer, errors per tool and case")
    clean.add_argument("--tool", default=",".join(sanitize.TOOLS),
                       help=f"comma list of compute-sanitizer tools (default {','.join(sanitize.TOOLS)})")
    comp = tiered("compile", "compile every kernel specialization of a tier for GPU targets, without a GPU: "
                             "registers, spills, LDS, occupancy, binary hashes")
    comp.add_argument("--target", default=",".join(targets.TARGETS),
                      help=f"comma list of {', '.join(targets.TARGETS)} (default: all)")
    comp.add_argument("--json", default=None, help="write every binary's facts and hash here")
    comp.add_argument("--reuse", default=None, metavar="EARLIER.json",
                      help="take the facts of each specialization whose compiler inputs equal a binary's in this "
                           "earlier --json report (same sources, Triton and target), and compile only the others")
    comp.add_argument("--workers", type=int, default=1, help="compile in this many processes (default 1)")
    comp.add_argument("--no-compile", action="store_true",
                      help="only list the specializations and the hash of their compiler inputs (equal inputs "
                           "compile to equal binaries): compares commits over a tier too large to compile")
    diff = sub.add_parser("bindiff", help="which binaries of two `compile --json` reports differ")
    diff.add_argument("before")
    diff.add_argument("after")
    repro = sub.add_parser("repro", help="run one case by id and show its errors")
    small = sub.add_parser("shrink", help="from a failing case, the smallest case that fails for the same reason")
    for s in (repro, small):
        s.add_argument("case_id")
        s.add_argument("--mutant", default=None, help=mutant_help)
    repro.add_argument("--impl", action="append", metavar="SPEC",
                       help="judge it on this implementation instead of ours, as run --impl")
    small.add_argument("--max-evals", type=int, default=shrink.MAX_EVALS,
                       help=f"judge at most this many cases (default {shrink.MAX_EVALS})")
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    handler = {"run": cmd_run, "cases": cmd_cases, "repro": cmd_repro, "mutants": cmd_mutants,
               "sanitize": cmd_sanitize, "report": cmd_report, "compile": lambda a: cmd_compile(argv, a),
               "bindiff": cmd_bindiff,
               "merge": cmd_merge, "shrink": cmd_shrink}[args.command]
    try:
        return handler(args)
    except ValueError as exc:
        print(f"quantfloor: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
