"""Host time of a plain call: what one launch costs on this host, and the decode and KDA entries on their bench rows.

    python -m bench.host [--baseline DIR] [--parts] [-k WORDS] [--rounds N] [--json PATH]

First the cost of one launch of a kernel that does nothing (ten pointers, ten ints):
through `kernels.launch.Bound`, through Triton's launcher given their addresses as a
Bound calls it (the difference is the Bound's own Python), through Triton's runner
given the same tensors, and of `torch.empty(1)` for scale. Then, for each row of
bench.decode's and bench.kda's SHAPES (-k keeps those whose name holds every word),
the host time of a plain call of ours (bench.timing.host_us: calls enqueued behind a
busy device, no sync inside, over their count), and with --baseline that of another
checkout's entries (bench.baseline) in the same rounds, in the order forward then
backward, medians over --rounds: a host's time drifts from batch to batch by more
than the few microseconds a change to the host path moves, so only interleaved
rounds compare two. --parts adds, in the same rounds, our call with every launch
skipped (each `kernels.launch.Bound` a no-op while the call runs): what the entry
costs past its launches (its signature's key, the checks a call repeats, the
allocations), so the rest of the plain call is its launches. Neither operator's
device time is measured here (bench.decode, bench.kda).
"""

import argparse
import statistics
import sys

import torch
import triton
import triton.language as tl

from bench import baseline
from bench import decode as bench_decode
from bench import kda as bench_kda
from bench.results import versions, write_json
from bench.timing import host_us
from kernels import arch, launch
from kernels.kda import flash_kda_fwd
from kernels.paged_decode import paged_attention_decode

DECODE_CALLS = 200  # two launches a call at most: 400 launches fit the queue in front of host_us's sleep
KDA_CALLS = 100  # up to six launches a call
LAUNCH_CALLS = 300
BATCHES = 3  # host_us's batches a round and variant


@triton.jit
def _noop(p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, n0, n1, n2, n3, n4, n5, n6, n7, n8, n9, B: tl.constexpr):
    """Does nothing (no program has a negative id): its launch is all it costs."""
    if tl.program_id(0) < 0:
        tl.store(p0 + tl.arange(0, B), tl.load(p1 + tl.arange(0, B)) + n0 + n9)


def rounds(fns: dict, calls: int, count: int) -> dict:
    """{name: median host us of a call} of the variants in `fns` ({name: fn}), each timed in every
    round (forward then backward order)."""
    names = list(fns)
    times = {name: [] for name in names}
    for _ in range(count):
        for name in names + names[::-1]:
            times[name].append(host_us(fns[name], calls, BATCHES))
    return {name: statistics.median(values) for name, values in times.items()}


def launch_costs(device, count: int) -> dict:
    """Host us of one launch of `_noop`: through a Bound, through Triton's launcher given addresses
    (the Bound's last step), through Triton's runner given tensors, and of torch.empty(1)."""
    tensors = [torch.empty(64, device=device) for _ in range(10)]
    bound = launch.Bound(_noop, (1,), (*launch.slots(10), *range(17, 27)), dict(B=16), dict(num_warps=1))
    stream = arch.raw_stream(device)
    for _ in range(2):  # the first launch compiles, the second keeps the launcher's arguments
        bound(*tensors, stream=stream)
    compiled = next(c for key, c in launch._COMPILED.items() if key[0][0] is _noop)
    runner = compiled[(1, 1, 1)]
    rest = bound._fixed  # the ints and the constexpr after the slots, as the launcher takes them
    run, grid, middle, _ = bound._runners[True]  # Triton's launcher, as a Bound calls it
    addresses = [t.data_ptr() for t in tensors] + list(rest)
    return rounds({"Bound": lambda: bound(*tensors, stream=stream),
                   "Triton's launcher, addresses": lambda: run(*grid, stream, *middle, *addresses),
                   "Triton's runner, tensors": lambda: runner(*tensors, *rest, stream=stream),
                   "torch.empty(1)": lambda: torch.empty(1, device=device)}, LAUNCH_CALLS, count)


def _no_launch(self, *values, stream=None) -> None:
    """A Bound that launches nothing."""


def without_launches(fn):
    """`fn` with every Bound launch (kernels.launch) skipped while it runs, and restored after. Not
    kernels.launch.recorded: a recorded launch builds its Launch record, host time a plain call never
    spends."""
    def run():
        real = launch.Bound.__call__
        launch.Bound.__call__ = _no_launch
        try:
            return fn()
        finally:
            launch.Bound.__call__ = real
    return run


def _variants(fns: dict, parts: bool) -> dict:
    """`fns`, and with `parts` our call with its launches skipped (the base's Bound is its own class)."""
    return {**fns, "ours, no launches": without_launches(fns["ours"])} if parts else fns


def decode_row(shape, device, entries: dict, count: int, parts: bool = False) -> dict:
    inputs = [bench_decode.build(shape.case("auto"), device, 1234)]
    fns = {name: bench_decode._decode(inputs, None, entry) for name, entry in entries.items()}
    return rounds(_variants(fns, parts), DECODE_CALLS, count)


def kda_row(shape, device, entries: dict, count: int, parts: bool = False) -> dict:
    x = bench_kda.inputs(shape, device)
    return rounds(_variants({name: bench_kda.ours(x, entry) for name, entry in entries.items()}, parts),
                  KDA_CALLS, count)


def line(op: str, shape: str, host: dict) -> str:
    parts = [f"{name} {us:.1f}" for name, us in host.items()]
    if "base" in host:
        parts.append(f"ours / base {host['ours'] / host['base']:.3f}")
    return f"{op:<7}{shape:<48}" + " | ".join(parts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("-k", default=None, help="keep shapes whose name contains every word")
    p.add_argument("--baseline", default=None, metavar="DIR", help="the entries of the checkout at DIR too")
    p.add_argument("--parts", action="store_true", help="also our call with its launches skipped")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds: expected at least 1, got {args.rounds}")
    if not torch.cuda.is_available():
        print("bench.host: needs a GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    decode, kda = {"ours": paged_attention_decode}, {"ours": flash_kda_fwd}
    if args.baseline:
        decode["base"] = baseline.load(args.baseline).paged_attention_decode
        kda["base"] = baseline.load(args.baseline, "kernels.kda").flash_kda_fwd
    head = (f"{versions(device)}{f', base {args.baseline}' if args.baseline else ''}\n"
            f"command: {' '.join(sys.argv)}\nhost us of a plain call, medians of {args.rounds} interleaved rounds")
    print(head)
    rows = [dict(op="launch", shape="no-op kernel, 10 pointers and 10 ints", host_us=launch_costs(device, args.rounds))]
    print(line("launch", rows[0]["shape"], rows[0]["host_us"]), flush=True)
    words = (args.k or "").split()
    for op, shapes, measure, entries in (("decode", bench_decode.SHAPES, decode_row, decode),
                                         ("kda", bench_kda.SHAPES, kda_row, kda)):
        for shape in shapes:
            if all(w in shape.name for w in words):
                rows.append(dict(op=op, shape=shape.name,
                                 host_us=measure(shape, device, entries, args.rounds, args.parts)))
                print(line(op, shape.name, rows[-1]["host_us"]), flush=True)
                torch.cuda.empty_cache()
                write_json(args.json, head, None, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
