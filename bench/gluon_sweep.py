"""Launch configs of the Gluon decode kernel against the Triton kernel, on a GPU, in one process.

    python -m bench.gluon_sweep [--rounds N] [-k WORDS] [--exact NAME ...] [--cands NAME ...] [--cache CACHE]

For each shape of bench.decode.SHAPES (with --cache, each with that cache
instead; those whose name holds every word of -k, or is one of --exact), times
in mirrored rounds of CUDA-graph replay (medians):
the Triton kernel's auto path (`triton`, the base of the ratios), the Gluon
kernel with the arch's own table (`gluon-table`), and the Gluon kernel with each
candidate of CANDIDATES (or --cands) as the only row of its table. Prints us,
the ratio to `triton` and the percentage of the copy bandwidth measured first:
how the rows of kernels.paged_decode.tuning.GLUON_TABLES were chosen.
"""

import argparse
import dataclasses
import math

import torch

from bench import decode as bench_decode
from bench.timing import copy_tbps, interleaved
from cases.decode import CACHES
from kernels import arch
from kernels.paged_decode import api, tuning

# gNwWsS: N keys a step, W warps, a ring of S buffers; sD...: dim slices of wide heads
CANDIDATES = {
    "g32w1s2": tuning.LaunchConfig(128, 32, 1, 2, keys_m=True, programs_per_cu=12, min_programs=3.0),
    "g32w1s4": tuning.LaunchConfig(128, 32, 1, 4, keys_m=True, programs_per_cu=12, min_programs=3.0),
    "g64w1s2": tuning.LaunchConfig(128, 64, 1, 2, keys_m=True, programs_per_cu=8, min_programs=3.0),
    "g64w2s2": tuning.LaunchConfig(128, 64, 2, 2, keys_m=True, programs_per_cu=6, min_programs=3.0),
    "g32w2s4": tuning.LaunchConfig(128, 32, 2, 4, keys_m=True, programs_per_cu=6, min_programs=3.0),
    "g128w4s2": tuning.LaunchConfig(128, 128, 4, 2, keys_m=True, programs_per_cu=3, min_programs=3.0),
    "g64w2s4": tuning.LaunchConfig(128, 64, 2, 4, keys_m=True, programs_per_cu=6, min_programs=3.0),
    "g32w2s2": tuning.LaunchConfig(128, 32, 2, 2, keys_m=True, programs_per_cu=4, min_programs=3.0),
    "g128w4s2p3": tuning.LaunchConfig(128, 128, 4, 2, keys_m=True, programs_per_cu=3),
    "g64w4s2": tuning.LaunchConfig(128, 64, 4, 2, keys_m=True),
    # two-byte caches: fewer partitions a CU than the table's six, so the split fits fewer waves
    "g64w2s2p3": tuning.LaunchConfig(128, 64, 2, 2, keys_m=True, programs_per_cu=3, min_programs=3.0),
    "g64w2s2p4": tuning.LaunchConfig(128, 64, 2, 2, keys_m=True, programs_per_cu=4, min_programs=3.0),
    "g64w4s2p3": tuning.LaunchConfig(128, 64, 4, 2, keys_m=True, programs_per_cu=3, min_programs=3.0),
    "g32w1s2p6": tuning.LaunchConfig(128, 32, 1, 2, keys_m=True, programs_per_cu=6, min_programs=3.0),
    "g32w2s2p3": tuning.LaunchConfig(128, 32, 2, 2, keys_m=True, programs_per_cu=3, min_programs=3.0),
    "g32w2s2p6": tuning.LaunchConfig(128, 32, 2, 2, keys_m=True, programs_per_cu=6, min_programs=3.0),
    "g32w2s4p4": tuning.LaunchConfig(128, 32, 2, 4, keys_m=True, programs_per_cu=4, min_programs=3.0),
    "s256w2": tuning.LaunchConfig(1024, 32, 2, 2, keys_m=True, slice_dims=256, long_walk=64),
    "s128w1": tuning.LaunchConfig(1024, 32, 1, 2, keys_m=True, slice_dims=128, long_walk=64, programs_per_cu=8),
    "s256w2s4": tuning.LaunchConfig(1024, 32, 2, 4, keys_m=True, slice_dims=256, long_walk=64),
    "s128w2": tuning.LaunchConfig(1024, 32, 2, 2, keys_m=True, slice_dims=128, long_walk=64),
}


def with_row(arch_name: str, row: tuning.LaunchConfig, fn):
    """fn, run with `row` as the only row of the arch's Gluon table (set, and the plans forgotten, on
    every call, so a graph captures the launches of that row)."""
    table = dataclasses.replace(tuning.GLUON_TABLES[arch_name],
                                rows=(dataclasses.replace(row, max_head_dim=1 << 20),))

    def run():
        saved = tuning.GLUON_TABLES[arch_name]
        tuning.GLUON_TABLES[arch_name] = table
        api.clear_plans()
        try:
            fn()
        finally:
            tuning.GLUON_TABLES[arch_name] = saved
            api.clear_plans()
    return run


def selected(words: str, exact: list | None, cache: str | None) -> list:
    """bench.decode.SHAPES, each with `cache` where given, whose name holds every word of `words` and,
    where `exact` is given, is one of its names."""
    shapes = bench_decode.SHAPES
    if cache is not None:
        shapes = [dataclasses.replace(shape, cache=cache) for shape in shapes]
    return [shape for shape in shapes if all(w in shape.name for w in words.split())
            and (exact is None or shape.name in exact)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("-k", default="", help="keep shapes whose name contains every word")
    p.add_argument("--exact", nargs="*", default=None, help="keep the shapes of exactly these names")
    p.add_argument("--cands", nargs="*", default=None, choices=sorted(CANDIDATES), help="candidates to time")
    p.add_argument("--cache", default=None, choices=CACHES,
                   help="the shapes with this cache instead of their own (bf16 takes heads of up to 512 dims)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("gluon_sweep: needs a GPU")
        return 2
    device = torch.device("cuda")
    if api.gluon_unavailable(device) is not None:
        print(f"gluon_sweep: {api.gluon_unavailable(device)}")
        return 2
    name = arch.arch_name(device)
    copy = copy_tbps()
    print(f"copy {copy:.2f} TB/s")
    for shape in selected(args.k, args.exact, args.cache):
        sets = bench_decode._input_sets(shape, device)
        calls = len(sets) * math.ceil(10 / len(sets))
        fns = {"triton": bench_decode._decode(sets, None, kernel="triton"),
               "gluon-table": bench_decode._decode(sets, None, kernel="gluon")}
        for cand in args.cands or CANDIDATES:
            fn = with_row(name, CANDIDATES[cand], bench_decode._decode(sets, None, kernel="gluon"))
            try:
                fn()
                torch.cuda.synchronize()
            except Exception as exc:  # a row the compiler refuses (a copy narrower than 4 bytes, shared memory)
                print(f"  {cand}: {type(exc).__name__}: {str(exc)[:150]}")
                continue
            fns[cand] = fn
        timed = interleaved(fns, calls=calls, rounds=args.rounds)
        print(f"{shape.name:<34} " + " ".join(
            f"{n} {t.us:.1f} ({t.ratio:.3f}, {100 * shape.bytes / (t.us * 1e-6) / 1e12 / copy:.0f}%)"
            for n, t in timed.items()), flush=True)
        del sets
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
