"""Judging jobs in worker processes (`quantfloor run --workers N`).

Worker w of N is a spawned Python process. It takes the w-th contiguous slice
of the jobs (neighbouring cases share kernel specializations, so each worker
compiles its own few kernels), settles on GPU w mod device count with its
share of the CPU cores, rebuilds each job from its case id and sends its
verdicts back a batch at a time: only ids and verdicts cross between
processes. A worker that dies leaves a FAIL verdict, naming its exit code,
for every job it did not report. Verdicts come back in the order of the jobs.
"""

import multiprocessing
import os
import queue
import sys
import time

from verify import device as _device
from verify import gate, runner

BATCH = 16  # verdicts a worker sends at a time


def _work(index: int, workers: int, ids: list, results) -> None:
    device = _device.setup()
    _device.pin_worker(index, workers)
    with open(os.devnull, "w") as quiet:
        for start in range(0, len(ids), BATCH):
            jobs = [runner.job_for_id(case_id) for case_id in ids[start:start + BATCH]]
            results.put((index, runner.run(jobs, device, stream=quiet)))
    results.put((index, None))


def run(selected: list, workers: int, *, stream=sys.stderr) -> list:
    """Judge the `selected` jobs in `workers` processes; one progress line every
    runner.PROGRESS_SECONDS and one at the end."""
    if workers < 1:
        raise ValueError(f"workers: expected an integer >= 1, got {workers}")
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    slices = [_device.shard(selected, f"{w}/{workers}") for w in range(workers)]
    procs = [context.Process(target=_work, args=(w, workers, [j.case_id for j in part], results), daemon=True)
             for w, part in enumerate(slices)]
    for proc in procs:
        proc.start()
    judged = {}
    started = shown = time.perf_counter()

    def take(verdicts):
        for v in verdicts:
            judged[(v.suite, v.case_id)] = v

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
    out = []
    for w, part in enumerate(slices):
        for job in part:
            verdict = judged.get((job.suite, job.case_id))
            if verdict is None:
                verdict = gate.failed(job.suite, job.case_id,
                                      f"worker {w} exited with code {procs[w].exitcode} before judging it")
            out.append(verdict)
    return out
