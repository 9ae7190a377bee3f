"""The KDA forward on a GPU against fla-core's chunk_kda, on identical inputs.

    python -m bench.kda [--json PATH] [--rounds N] [-k WORDS] [--baseline DIR] [--kernels]
    python -m bench.kda --segments [LIST] [--json PATH] [--rounds N] [-k WORDS]

One process measures the device-to-device copy bandwidth first, then for each
shape of SHAPES (bf16, K = V = 128, gate `lower_bound` -5 with A_log and
dt_bias, beta through a sigmoid, q and k L2-normalised in the kernel, final
state out; the varlen rows pack sequences of mixed lengths on T) it gives:

- both forwards CUDA-graph replayed in ABBA rounds (medians), with the ratio
  ours / FLA and its spread, and ours against itself (the noise line: it must
  read 1.00 within its spread);
- the bytes a forward must move at least (q, k, v, g, beta and o in bf16, the
  final state in fp32), as TB/s and as a percentage of the copy;
- the plain-call time of each (calls back to back, synchronised once) and its
  host time (calls enqueued behind a busy device, no sync inside, over their count;
  the median of a few such batches);
- how far the two agree: RMS of the difference over the RMS of FLA's output,
  and the same for the final states.

Our varlen calls pass `cu_seqlens_cpu`, so they copy nothing from the host and
are captured like the others. A forward that cannot be captured is timed by
plain calls instead, and the row says so. fla-core is the optional `fla`
extra (`pip install -e .[fla]`); without it the bench stops and says so.

--baseline DIR times our forward against another checkout's (bench.baseline; e.g.
`git worktree add /tmp/base main`) instead of against FLA, so fla-core is not
needed: the same rounds and columns, the base in FLA's place. --kernels adds where
each forward's device time goes, ours and the peer's: each kernel's time per call
(torch.profiler over KERNEL_CALLS calls, on the row's own inputs).

--segments times, instead, our forward as the planner schedules it (`auto`) against
the same forward with each chunks_per_segment of LIST forced (default SEGMENTS; 0 is
the unsegmented walk), in one set of interleaved rounds per row: how the planner's
choice (kernels.kda.plan) stands against the schedules it passed over. Each row says
what auto chose, each schedule's time and its ratio to auto's, and how far its
output lies from auto's (RMS of the difference over auto's RMS: another schedule
rounds differently, no more).
"""

import argparse
import math
import sys
import time
from dataclasses import dataclass

import torch

from bench import baseline
from bench.results import versions, write_json
from bench.timing import copy_tbps, host_us, interleaved, paired
from kernels import launch
from kernels.kda import chunk as kda_chunk
from kernels.kda import flash_kda_fwd

HOST_CALLS = 50
PLAIN_CALLS = 20
KERNEL_CALLS = 10
LOWER_BOUND = -5.0
DIM = 128
SEGMENTS = (0, 4, 8, 16, 32, 64)  # chunks_per_segment --segments forces by default (0: unsegmented)


@dataclass(frozen=True)
class Shape:
    batch: int
    tokens: int  # T, per batch row (packed total with varlen)
    heads: int
    seqs: int = 0  # > 0: varlen, this many sequences of mixed lengths packed on T (batch 1)

    @property
    def name(self) -> str:
        return f"{self.batch}x{self.tokens}x{self.heads}" + (f" varlen{self.seqs}" if self.seqs else "")

    @property
    def sequences(self) -> int:
        return self.seqs or self.batch

    @property
    def bytes(self) -> int:
        tokens = self.batch * self.tokens * self.heads
        return tokens * (5 * DIM + 1) * 2 + self.sequences * self.heads * DIM * DIM * 4


SHAPES = [Shape(1, 1024, 12), Shape(1, 4096, 12), Shape(1, 16384, 12), Shape(8, 4096, 24),
          Shape(1, 8192, 96), Shape(1, 16384, 96), Shape(1, 16384, 32, seqs=8), Shape(1, 16384, 32, seqs=64)]


def _fla_chunk_kda():
    try:
        from fla.ops.kda import chunk_kda
    except Exception as exc:  # not installed, or it failed to import
        raise SystemExit(f"bench.kda: needs fla-core (pip install -e '.[fla]'), got {type(exc).__name__}: {exc}")
    return chunk_kda


def _offsets(total: int, count: int, seed: int) -> list:
    """count lengths >= 1 summing to total, mixed (cut points drawn at random), as offsets [count + 1]."""
    gen = torch.Generator().manual_seed(seed)
    cuts = sorted(torch.randperm(total - 1, generator=gen)[:count - 1].add(1).tolist())
    return [0, *cuts, total]


def inputs(shape: Shape, device) -> dict:
    """The forward's inputs, the same tensors for both implementations."""
    gen = torch.Generator(device=device).manual_seed(1234)

    def rand(*size, dtype=torch.bfloat16):
        return torch.randn(*size, generator=gen, device=device, dtype=torch.float32).to(dtype)

    b, t, h = shape.batch, shape.tokens, shape.heads
    x = dict(q=rand(b, t, h, DIM), k=rand(b, t, h, DIM), v=rand(b, t, h, DIM), g=rand(b, t, h, DIM),
             beta=rand(b, t, h), A_log=torch.rand(h, generator=gen, device=device).mul(15).add(1).log(),
             dt_bias=rand(h * DIM, dtype=torch.float32), cu=None, cu_t=None)
    if shape.seqs:
        x["cu"] = _offsets(t, shape.seqs, 99)
        x["cu_t"] = torch.tensor(x["cu"], dtype=torch.int64, device=device)  # int64, as FLA wants
    return x


def ours(x: dict, forward=flash_kda_fwd, chunks_per_segment=None):
    workspace = {}

    def run():
        return forward(
            x["q"], x["k"], x["v"], x["g"], x["beta"], output_final_state=True, gate="lower_bound",
            A_log=x["A_log"], dt_bias=x["dt_bias"], lower_bound=LOWER_BOUND, beta_sigmoid=True, qk_l2norm=True,
            cu_seqlens=x["cu_t"], cu_seqlens_cpu=x["cu"], workspace=workspace, chunks_per_segment=chunks_per_segment)
    return run


def segment_list(text: str) -> tuple:
    """--segments' LIST: comma-separated chunks_per_segment values, each an int >= 0."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated ints >= 0 (0: unsegmented), got {text!r}")
    return values


def schedule(fn) -> str:
    """What a call of our forward `fn` launches its walk as: 'unsegmented', or 'N segments' (the rows
    of pass A's unit table, its first argument), read from its launches (kernels.launch.recorded)
    without running them."""
    with launch.recorded() as calls:
        fn()
    units = [c.args[0].shape[0] for c in calls if c.fn is kda_chunk.kda_transition_kernel]
    return f"{units[0]} segments" if units else "unsegmented"


def segments(shape: Shape, device, rounds: int, values: tuple) -> dict:
    """Our forward as planned against each forced chunks_per_segment of `values`, interleaved."""
    x = inputs(shape, device)
    fns = {"auto": ours(x)}
    fns.update({f"cps {v}": ours(x, chunks_per_segment=v) for v in values})
    launches = {name: schedule(fn) for name, fn in fns.items()}
    outputs = {name: fn()[0] for name, fn in fns.items()}
    timed = interleaved(fns, calls=3, rounds=rounds)
    best = min(timed, key=lambda name: timed[name].us)
    return dict(shape=shape.name, auto_chose=launches["auto"], best=best,
                schedules={name: dict(us=t.us, ratio_to_auto=t.ratio, spread=list(t.spread),
                                      rms_o=_rms_ratio(outputs[name], outputs["auto"]), launches=launches[name])
                           for name, t in timed.items()})


def _print_segments(row: dict) -> None:
    parts = (f"{name} {s['us']:.1f} us {s['ratio_to_auto']:.3f} ({s['spread'][0]:.3f}-{s['spread'][1]:.3f})"
             f"{' [' + s['launches'] + ']' if name != 'auto' else ''}{' <- best' if name == row['best'] else ''}"
             for name, s in row["schedules"].items())
    print(f"{row['shape']:<22} auto: {row['auto_chose']}; " + "; ".join(parts), flush=True)


def fla_forward(x: dict, chunk_kda):
    def run():
        return chunk_kda(
            x["q"], x["k"], x["v"], x["g"], x["beta"], output_final_state=True, use_gate_in_kernel=True,
            A_log=x["A_log"], dt_bias=x["dt_bias"], lower_bound=LOWER_BOUND, safe_gate=True,
            use_beta_sigmoid_in_kernel=True, use_qk_l2norm_in_kernel=True, cu_seqlens=x["cu_t"])
    return run


def _rms_ratio(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def _plain_us(fn, calls: int) -> float:
    """Per-call time of `calls` plain calls back to back, synchronised once at the end."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def _timed(fn_a, fn_b, rounds: int) -> dict:
    """Graph-replayed ABBA timing of a against b; plain calls when either cannot be captured."""
    try:
        p = paired(fn_a, fn_b, calls=3, rounds=rounds)
        return dict(a_us=p.a_us, b_us=p.b_us, ratio=p.ratio, spread=list(p.spread), how="graph")
    except RuntimeError as exc:
        torch.cuda.synchronize()
        a, b = _plain_us(fn_a, PLAIN_CALLS), _plain_us(fn_b, PLAIN_CALLS)
        return dict(a_us=a, b_us=b, ratio=b / a, spread=[b / a, b / a],
                    how=f"plain calls (capture failed: {str(exc).splitlines()[0][:120]})")


def kernel_us(fn, calls: int = KERNEL_CALLS) -> dict:
    """{kernel name: device us per call} of `calls` calls of fn, largest first (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times[e.name] = times.get(e.name, 0.0) + e.device_time_total / calls
    return dict(sorted(times.items(), key=lambda kv: -kv[1]))


def measure(shape: Shape, device, copy: float, rounds: int, peer, name: str, kernels: bool = False) -> dict:
    """Ours against `peer` (x -> a forward on inputs x: FLA's, or a base checkout's) on the same
    inputs; the peer's figures under keys with its `name` ('fla', 'base'). kernels: also our
    kernels' device time per call."""
    x = inputs(shape, device)
    mine, theirs = ours(x), peer(x)
    o_a, s_a = mine()
    o_b, s_b = theirs()
    row = dict(shape=shape.name, batch=shape.batch, tokens=shape.tokens, heads=shape.heads, seqs=shape.seqs,
               bytes=shape.bytes, rms_o=_rms_ratio(o_a, o_b), rms_state=_rms_ratio(s_a, s_b))
    vs = _timed(theirs, mine, rounds)
    noise = _timed(mine, ours(x), rounds)
    row.update({f"{name}_us": vs["a_us"], "ours_us": vs["b_us"], f"ours_over_{name}": vs["ratio"],
                "spread": vs["spread"], "timing": vs["how"], "noise": noise["ratio"], "noise_spread": noise["spread"]})
    for who in ("ours", name):
        tbps = shape.bytes / (row[f"{who}_us"] * 1e-6) / 1e12
        row[f"{who}_pct_copy"] = 100 * tbps / copy
    for who, fn in (("ours", mine), (name, theirs)):
        row[f"{who}_plain_us"] = _plain_us(fn, PLAIN_CALLS)
        row[f"{who}_host_us"] = host_us(fn, HOST_CALLS)
    if kernels:
        row["kernel_us"] = kernel_us(mine)
        row[f"{name}_kernel_us"] = kernel_us(theirs)
    return row


def summary(rows: list, name: str) -> str:
    """Issue 11's yardstick over the rows timed: the geometric mean of the peer's time over ours,
    and the rows where ours is the slower."""
    ratios = {row["shape"]: 1.0 / row[f"ours_over_{name}"] for row in rows}
    geomean = math.exp(sum(map(math.log, ratios.values())) / len(ratios))
    slower = [shape for shape, ratio in ratios.items() if ratio < 1.0]
    return (f"{name} / ours: geomean {geomean:.3f} over {len(ratios)} rows; ours slower at "
            f"{', '.join(slower) if slower else 'no row'}")


def _print_kernels(who: str, times: dict) -> None:
    total = sum(times.values())
    parts = (f"{name.split('(')[0].split('<')[0]} {us:.1f} us ({100 * us / total:.0f}%)" for name, us in times.items())
    print(f"    {who}, {total:.1f} us of kernels: " + "; ".join(parts), flush=True)


def _print_head(name: str) -> None:
    print(f"{'B x T x H':<22} {'ours us':>9} {name + ' us':>9} {'o/' + name:>6} {'(spread)':>13} {'%copy':>6} "
          f"{name + ' %':>6} {'plain us':>9} {name + ' plain':>10} {'host us':>7} {name + ' host':>9} "
          f"{'rms o':>8} {'rms S':>8} noise")


def _print_row(row: dict, name: str) -> None:
    print(f"{row['shape']:<22} {row['ours_us']:>9.1f} {row[name + '_us']:>9.1f} {row['ours_over_' + name]:>6.3f} "
          f"({row['spread'][0]:.3f}-{row['spread'][1]:.3f}) {row['ours_pct_copy']:>5.1f}% "
          f"{row[name + '_pct_copy']:>5.1f}% {row['ours_plain_us']:>9.1f} {row[name + '_plain_us']:>10.1f} "
          f"{row['ours_host_us']:>7.1f} {row[name + '_host_us']:>9.1f} {row['rms_o']:>8.1e} {row['rms_state']:>8.1e} "
          f"{row['noise']:.3f} ({row['noise_spread'][0]:.3f}-{row['noise_spread'][1]:.3f})"
          + ("" if row["timing"] == "graph" else f"  [{row['timing']}]"), flush=True)
    if "kernel_us" in row:
        _print_kernels("ours", row["kernel_us"])
        _print_kernels(name, row[f"{name}_kernel_us"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("-k", default=None, help="keep shapes whose name contains every word")
    p.add_argument("--baseline", default=None, metavar="DIR",
                   help="time ours against the kernels of the checkout at DIR instead of against FLA")
    p.add_argument("--kernels", action="store_true",
                   help="also print each kernel's device time per call, ours and the peer's")
    p.add_argument("--segments", nargs="?", const=SEGMENTS, type=segment_list, default=None, metavar="LIST",
                   help="time our planned forward against forced chunks_per_segment values instead "
                        f"(comma-separated; default {','.join(map(str, SEGMENTS))}; 0: unsegmented)")
    args = p.parse_args(argv)
    if args.segments is not None and (args.baseline or args.kernels):
        p.error("--segments times our forward alone: it takes neither --baseline nor --kernels")
    if not torch.cuda.is_available():
        print("bench.kda: needs a GPU", file=sys.stderr)
        return 2
    if args.segments is not None:
        return _segments_main(args)
    if args.baseline:
        base_fwd = baseline.load(args.baseline, "kernels.kda").flash_kda_fwd
        name, peer, which = "base", (lambda x: ours(x, base_fwd)), f"base {args.baseline}"
    else:
        chunk_kda = _fla_chunk_kda()
        import fla
        name, peer = "fla", (lambda x: fla_forward(x, chunk_kda))
        which = f"fla-core {getattr(fla, '__version__', '?')}"
    device = torch.device("cuda")
    copy = copy_tbps()
    head = (f"{versions(device)}, {which}\n"
            f"command: {' '.join(sys.argv)}\ncopy {copy:.2f} TB/s; bf16, K = V = {DIM}, gate lower_bound "
            f"{LOWER_BOUND}, beta sigmoid, q/k L2 norm in kernel, final state out")
    print(head)
    _print_head(name)
    rows = _rows(args, head, copy, lambda shape: measure(shape, device, copy, args.rounds, peer, name, args.kernels),
                 lambda row: _print_row(row, name))
    if rows:
        print(summary(rows, name))
    return 0


def _segments_main(args) -> int:
    device = torch.device("cuda")
    copy = copy_tbps()
    head = (f"{versions(device)}\ncommand: {' '.join(sys.argv)}\ncopy {copy:.2f} TB/s; our forward as planned "
            f"(auto) against forced chunks_per_segment {','.join(map(str, args.segments))}; ratio to auto")
    print(head)
    _rows(args, head, copy, lambda shape: segments(shape, device, args.rounds, args.segments), _print_segments)
    return 0


def _rows(args, head: str, copy: float, row_of, printed) -> list:
    """row_of(shape) for each shape of SHAPES whose name holds every word of -k, each printed as it
    comes and the JSON (--json) written again after it, so a run cut short keeps its rows."""
    words = (args.k or "").split()
    rows = []
    for shape in SHAPES:
        if all(w in shape.name for w in words):
            rows.append(row_of(shape))
            printed(rows[-1])
            torch.cuda.empty_cache()
            write_json(args.json, head, copy, rows)
    return rows


if __name__ == "__main__":
    sys.exit(main())
