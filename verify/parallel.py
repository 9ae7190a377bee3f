"""Judging jobs in worker processes (`quantfloor run --workers N`).

The jobs are cut into contiguous chunks of CHUNK. Worker w of N is a spawned
Python process that starts at the first chunk of the w-th slice and walks on
through the chunks (wrapping round), judging each chunk no other worker has
claimed. Neighbouring cases share kernel specializations, so each worker
compiles its own few kernels, and a worker that finishes its slice early takes
chunks from the slices of slower ones. A worker settles on GPU w mod device
count with its share of the CPU cores, rebuilds each job from its case id and
sends its verdicts back a chunk at a time: only ids and verdicts cross between
processes (a planted mutant crosses by name, and each worker puts it in place
itself). A worker that dies leaves a FAIL verdict, naming its exit code, for
every job of the chunk it held; chunks no live worker is left to claim fail
the same way. Verdicts come back in the order of the jobs.
"""

import contextlib
import multiprocessing
import os
import queue
import sys
import time

from verify import device as _device
from verify import gate, mutants, runner

CHUNK = 16  # jobs a worker claims, judges and reports at a time
UNCLAIMED = -1


def _claim(owners, chunk: int, index: int) -> bool:
    """Mark `chunk` as worker `index`'s; False when another worker holds it."""
    with owners.get_lock():
        if owners[chunk] != UNCLAIMED:
            return False
        owners[chunk] = index
        return True


def _work(index: int, workers: int, ids: list, owners, results, mutant: str | None) -> None:
    device = _device.setup()
    _device.pin_worker(index, workers)
    chunks = len(owners)
    first = index * chunks // workers
    planted = mutants.applied(mutants.by_name(mutant)) if mutant else contextlib.nullcontext()
    with planted, open(os.devnull, "w") as quiet:
        for step in range(chunks):
            chunk = (first + step) % chunks
            if not _claim(owners, chunk, index):
                continue
            jobs = [runner.job_for_id(case_id) for case_id in ids[chunk * CHUNK:(chunk + 1) * CHUNK]]
            results.put((index, runner.run(jobs, device, stream=quiet)))
    results.put((index, None))


def run(selected: list, workers: int, *, mutant: str | None = None, stream=sys.stderr, on_verdict=None) -> list:
    """Judge the `selected` jobs in `workers` processes, each with the mutant named `mutant`
    (verify.mutants) in place when one is; one progress line every runner.PROGRESS_SECONDS
    and one at the end. `on_verdict` sees each verdict as its chunk comes back."""
    if workers < 1:
        raise ValueError(f"workers: expected an integer >= 1, got {workers}")
    if mutant is not None:
        mutants.by_name(mutant)  # an unknown name is refused here, before any worker starts
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    owners = context.Array("i", [UNCLAIMED] * -(-len(selected) // CHUNK))
    ids = [j.case_id for j in selected]
    procs = [context.Process(target=_work, args=(w, workers, ids, owners, results, mutant), daemon=True)
             for w in range(workers)]
    for proc in procs:
        proc.start()
    judged = {}
    started = shown = time.perf_counter()

    def take(verdicts):
        for v in verdicts:
            judged[(v.suite, v.case_id)] = v
            if on_verdict is not None:
                on_verdict(v)

    def line():
        fails = sum(not v.passed for v in judged.values())
        print(f"  {len(judged)}/{len(selected)} cases, {fails} failed, {time.perf_counter() - started:.1f}s",
              file=stream, flush=True)

    running = set(range(workers))
    while running:
        try:
            index, verdicts = results.get(timeout=1.0)
        except queue.Empty:
            running = {w for w in running if procs[w].is_alive()}  # one that died sends no end mark
            continue
        if verdicts is None:
            running.discard(index)
        else:
            take(verdicts)
        if time.perf_counter() - shown >= runner.PROGRESS_SECONDS:
            line()
            shown = time.perf_counter()
    for proc in procs:
        proc.join()
    while True:  # what a worker sent just before it died
        try:
            index, verdicts = results.get(timeout=0.1)
        except queue.Empty:
            break
        if verdicts is not None:
            take(verdicts)
    line()
    codes = ", ".join(f"worker {w}: {p.exitcode}" for w, p in enumerate(procs))
    out = []
    for i, job in enumerate(selected):
        verdict = judged.get((job.suite, job.case_id))
        if verdict is None:
            owner = owners[i // CHUNK]
            why = (f"worker {owner} exited with code {procs[owner].exitcode} before judging it"
                   if owner != UNCLAIMED else f"no worker was left to judge it ({codes})")
            verdict = gate.failed(job.suite, job.case_id, why)
        out.append(verdict)
    return out
