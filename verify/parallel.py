"""Judging jobs in isolated worker processes (`quantfloor run`, the kill matrix).

Kernels under test are untrusted: one may crash the process (a segmentation
fault under the interpreter), break the CUDA context (an illegal address:
every later CUDA call in that process fails) or never return. So a
supervisor hands each worker process one job at a time, and

- a job runs under its own time limit (`runner.time_limit`, scaled to the
  case's size); a worker past it is killed and the job fails
  "timed out after N s";
- a worker that dies fails exactly the job it held: "crashed: <signal or
  exit code>"; a job after which the CUDA context is broken fails
  "crashed: <the CUDA error>", and its worker exits;
- either way a fresh worker takes over and the run goes on;
- a job that runs out of device memory while other workers hold theirs
  (16 workers on one 80 GB GPU can) is judged again at the end of the run,
  one job at a time in a single worker, every other worker gone: only what
  it fails there stands, with a reason that says it ran alone.

Each worker talks to the supervisor over its own pipe, written directly (no
feeder thread, no lock shared with other workers): a worker that dies in the
middle of a message, even while writing it, tears only its own pipe, which
the supervisor reads as that worker's death and drops with it. A lock or a
pipe shared by all workers would, held by a dead one, stop every other
worker's verdicts. The supervisor waits on no worker without a bound: one
that does not exit when told to is killed.

Worker w of N starts on the w-th slice of the jobs and walks it in order
(neighbouring cases share kernel specializations); one whose slice is done
takes the back half of the largest slice left. A worker settles on GPU
w mod device count with its share of the CPU cores and rebuilds each job
from its case id: only ids, mutant names and verdicts cross between
processes. A task may name a mutant (verify.mutants): the worker puts it in
place for that task (and keeps it in place while the next tasks name it
too). Verdicts come back in the order of the tasks.
"""

import contextlib
import dataclasses
import multiprocessing
import os
import pickle
import signal
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import wait

from verify import device as _device
from verify import gate, impls, mutants, progress, runner

POLL_SECONDS = 0.2
START_SECONDS = 600.0  # a worker that has not begun its first task by then is stuck starting
MAX_FAILED_STARTS = 3  # workers of one slot in a row that died before beginning a task
EXIT_SECONDS = 30.0  # a worker told to stop that has not exited by then is killed


@dataclass(frozen=True)
class Task:
    """One job for a worker: the case (or probe) id, and the mutant to judge it with, if any."""

    case_id: str
    mutant: str | None = None


def broken_context(device) -> str | None:
    """The CUDA error that a finished job left behind (it poisons every later call), or None."""
    if device.type != "cuda":
        return None
    import torch
    try:
        torch.cuda.synchronize(device)
    except Exception as exc:  # the CUDA error of an earlier launch surfaces here
        return str(exc).strip().splitlines()[0]
    return None


def _work(slot: int, workers: int, conn, impl_specs: tuple) -> None:
    device = _device.setup()
    _device.pin_worker(slot, workers)
    runner.use(impls.select(impl_specs))
    with contextlib.ExitStack() as planted, open(os.devnull, "w") as quiet:
        in_place = None
        while True:
            item = conn.recv()
            if item is None:
                break
            index, task = item
            if task.mutant != in_place:
                planted.close()
                if task.mutant is not None:
                    planted.enter_context(mutants.applied(mutants.by_name(task.mutant)))
                in_place = task.mutant
            conn.send(("start", index, None))
            try:
                job = runner.job_for_id(task.case_id)
            except Exception as exc:  # an id that does not parse fails alone
                conn.send(("done", index, gate.failed(_suite(task.case_id), task.case_id,
                                                      f"raised {type(exc).__name__}: {exc}")))
                continue
            (verdict,) = runner.run([job], device, stream=quiet)
            broken = broken_context(device)
            if broken is not None:  # no CUDA call of this process can succeed any more
                conn.send(("last", index, gate.failed(job.suite, job.case_id, f"crashed: {broken}")))
                conn.close()
                os._exit(3)
            conn.send(("done", index, verdict))


def receive(conn):
    """The next message on a worker's pipe, or None when the pipe is torn: the worker closed it or
    died, perhaps in the middle of a message (a partial message reads as end of file, or as bytes
    that do not unpickle)."""
    try:
        return conn.recv()
    except (EOFError, OSError, pickle.UnpicklingError, AttributeError, ValueError, TypeError, IndexError,
            ImportError, MemoryError):
        return None


def _suite(case_id: str) -> str:
    try:
        return runner.job_for_id(case_id).suite
    except Exception:  # an id that does not parse: the worker reports why
        return "unknown"


def _exit_reason(code) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class _Slot:
    """One worker position: its process and the supervisor's end of its pipe, its slice [lo, hi)
    of the positions of the tasks it walks, the task it holds (index, time limit), when that was
    sent and when the worker began it."""

    def __init__(self, context, index: int, workers: int, tasks: list, lo: int, hi: int, impl_specs: tuple):
        self.context, self.index, self.workers, self.tasks = context, index, workers, tasks
        self.impl_specs = impl_specs
        self.lo, self.hi = lo, hi
        self.done = False
        self.failed_starts = 0
        self.conn = self.proc = None
        self.spawn()

    def spawn(self):
        self.drop()
        self.exiting = False
        self.conn, theirs = self.context.Pipe()
        self.proc = self.context.Process(target=_work, daemon=True,
                                         args=(self.index, self.workers, theirs, self.impl_specs))
        self.proc.start()
        theirs.close()  # only the worker holds that end now: its death reads as end of file here
        self.job = self.sent = self.started = None

    def send(self, index: int, limit: float):
        self.job, self.sent, self.started = (index, limit), time.perf_counter(), None
        self._put((index, self.tasks[index]))

    def _put(self, item):
        try:
            self.conn.send(item)
        except OSError:  # the worker is gone: the supervisor's check of the process says why
            pass

    def finish(self):
        """No task is left for this slot: its worker is told to exit."""
        self.done = True
        if self.proc is not None:
            self._put(None)

    def stop(self, deadline: float):
        """Wait for the worker to exit until `deadline` (time.perf_counter()); then it is killed."""
        if self.proc is not None:
            self.proc.join(max(0.0, deadline - time.perf_counter()))
        self.drop()

    def drop(self):
        """The worker killed if still alive, and its pipe closed."""
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join()
        if self.conn is not None:
            self.conn.close()
        self.conn = self.proc = None


ALONE = "out of device memory with no other case beside it"


def out_of_memory(verdict) -> bool:
    """Whether `verdict` is a job that ran out of device memory (verify.runner marks it)."""
    return bool(verdict.detail.get("out_of_memory"))


def judge(tasks: list[Task], workers: int, *, stream=None, on_verdict=None,
          timeout_base: float | None = None, impl_specs: tuple = ()) -> list:
    """Verdicts of `tasks`, judged in `workers` isolated processes, in the order of the tasks.
    Progress goes to `stream` (sys.stderr as it is at the call by default; verify.progress: a live bar
    on a terminal, plain lines otherwise);
    `on_verdict` sees each verdict as it comes. `timeout_base`: seconds added to every job's time limit
    (runner.TIMEOUT_BASE_S by default). `impl_specs`: the --impl specs the workers judge
    (verify.impls; ours by default). A job that ran out of device memory beside other workers is
    judged again after the others, alone (module docstring); its first verdict is not reported."""
    if workers < 1:
        raise ValueError(f"workers: expected an integer >= 1, got {workers}")
    if timeout_base is not None and not timeout_base > 0:
        raise ValueError(f"timeout_base: expected seconds > 0, got {timeout_base!r}")
    for name in {t.mutant for t in tasks} - {None}:
        mutants.by_name(name)  # an unknown name is refused here, before any worker starts
    workers = max(1, min(workers, len(tasks)))
    context = multiprocessing.get_context("spawn")
    impls.select(impl_specs)  # a bad spec is refused here, before any worker starts
    judged = {}
    shown = progress.Progress(len(tasks), sys.stderr if stream is None else stream)

    # the jobs that ran out of device memory beside other workers (none where one worker runs them all)
    held = [] if workers > 1 else None

    def record(index, verdict, held=None):
        """`verdict` for task `index`, reported; or, when `held` is a list and the job ran out of
        device memory, kept back in it to be judged again alone."""
        if index in judged:
            return
        if out_of_memory(verdict):
            if held is not None:
                held.append(index)
                return
            verdict = dataclasses.replace(verdict, reasons=(*verdict.reasons, ALONE))
        judged[index] = verdict
        shown.add(verdict)
        if on_verdict is not None:
            on_verdict(verdict)

    _walk(context, tasks, list(range(len(tasks))), workers, timeout_base, tuple(impl_specs), shown,
          lambda index, verdict: record(index, verdict, held))
    if held:
        _walk(context, tasks, sorted(held), 1, timeout_base, tuple(impl_specs), shown, record)
    shown.close()
    return [judged.get(i) or gate.failed(_suite(t.case_id), t.case_id, "no worker judged it")
            for i, t in enumerate(tasks)]


def _walk(context, tasks: list[Task], order: list[int], workers: int, timeout_base, impl_specs: tuple, shown,
          record) -> None:
    """Judge the tasks at indices `order` in `workers` processes, each verdict to record(index,
    verdict); every worker has exited when this returns."""
    slots = [_Slot(context, w, workers, tasks, w * len(order) // workers, (w + 1) * len(order) // workers,
                   impl_specs) for w in range(workers)]

    def next_index(slot):
        if slot.lo >= slot.hi:  # take the back half of the largest slice left
            donor = max(slots, key=lambda s: s.hi - s.lo)
            if donor.hi - donor.lo < 1:
                return None
            cut = donor.hi - max(1, (donor.hi - donor.lo) // 2)
            slot.lo, slot.hi, donor.hi = cut, donor.hi, cut
        slot.lo += 1
        return order[slot.lo - 1]

    def fail(slot, index: int, reason: str):
        """The task `slot` held fails with `reason`; a fresh worker takes the slot."""
        record(index, gate.failed(_suite(tasks[index].case_id), tasks[index].case_id, reason))
        restart(slot)

    def restart(slot):
        """A fresh worker in `slot`, unless no task is left or its workers keep dying before they begin."""
        left = any(s.hi > s.lo for s in slots)
        if not left or slot.failed_starts >= MAX_FAILED_STARTS:
            slot.done, slot.job, slot.exiting = True, None, False
        else:
            slot.spawn()

    def drain(block: bool):
        """Read every message waiting on a worker's pipe (waiting POLL_SECONDS at most for one when
        `block`); False when none came."""
        live = {slot.conn: slot for slot in slots if slot.conn is not None and not slot.conn.closed}
        ready = wait(list(live), POLL_SECONDS if block else 0) if live else []
        if not ready and block and not live:
            time.sleep(POLL_SECONDS)
        for conn in ready:
            slot = live[conn]
            message = receive(conn)
            if message is None:  # torn: the worker is dead or dying; its process check says why
                conn.close()
                continue
            kind, index, verdict = message
            if kind == "start" and slot.job and slot.job[0] == index:
                slot.started = time.perf_counter()
            elif kind in ("done", "last"):
                record(index, verdict)
                if slot.job and slot.job[0] == index:
                    slot.job = None
                slot.exiting = kind == "last"
        return bool(ready)

    while True:
        for slot in slots:
            if slot.exiting:  # its worker said it cannot go on: a fresh one takes its place
                slot.drop()
                restart(slot)
            if slot.job is None and not slot.done:
                index = next_index(slot)
                if index is None:
                    slot.finish()
                else:
                    slot.send(index, runner.time_limit(tasks[index].case_id, timeout_base))
        if all(s.done for s in slots):
            break
        drain(block=True)
        now = time.perf_counter()
        for slot in slots:
            if slot.job is None:
                continue
            index, limit = slot.job
            if not slot.proc.is_alive():
                while drain(block=False):  # what it sent just before it died
                    pass
                if slot.job is None:
                    slot.failed_starts = 0
                    restart(slot)
                    continue
                why = _exit_reason(slot.proc.exitcode)
                if slot.started is None:
                    slot.failed_starts += 1
                    why += f" before it began (worker start {slot.failed_starts} of {MAX_FAILED_STARTS})"
                fail(slot, index, f"crashed: {why}")
            elif slot.started is not None and now - slot.started > limit:
                slot.drop()
                fail(slot, index, f"timed out after {limit:.0f} s")
            elif slot.started is None and now - slot.sent > START_SECONDS:
                slot.drop()
                slot.failed_starts += 1
                fail(slot, index, f"crashed: its worker did not start within {START_SECONDS:.0f} s")
        shown.tick()
    deadline = time.perf_counter() + EXIT_SECONDS
    for slot in slots:
        slot.stop(deadline)


def run(selected: list, workers: int, *, mutant: str | None = None, stream=None, on_verdict=None,
        timeout_base: float | None = None, impl_specs: tuple = ()) -> list:
    """Judge the `selected` jobs in `workers` isolated processes, each with the mutant named
    `mutant` (verify.mutants) in place when one is, on the implementations of `impl_specs`."""
    return judge([Task(j.case_id, mutant) for j in selected], workers, stream=stream, on_verdict=on_verdict,
                 timeout_base=timeout_base, impl_specs=impl_specs)
