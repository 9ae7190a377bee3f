"""Paged decode on a GPU against the copy bandwidth and the SDPA peer.

    python -m bench.decode [--json PATH] [--png DIR] [--rounds N] [-k WORDS] [--sweep | --floor]
                           [--baseline DIR [--baseline-triton]]

One process measures the device-to-device copy bandwidth first, then for each
shape of SHAPES times, CUDA-graph replayed in mirrored rounds (medians):
one-pass and split (the Triton kernel), the Gluon kernel (its own split choice;
where the device runs it: kernels.paged_decode.gluon_unavailable), auto (what
the auto path chose is printed), auto a second
time (the noise line: its ratio to auto must read 1.00 within its spread),
and the SDPA peer: `scaled_dot_product_attention(..., enable_gqa=True)` on
already gathered, contiguous windows in the query's dtype. For each path it
gives the bytes the window needs (K, V and their per-token scales), TB/s and
the percentage of the copy; for auto, the host time of a plain call
(HOST_CALLS calls enqueued behind a busy device, no sync inside, over their
count; the median of a few such batches: bench.timing.host_us). Inputs rotate over
enough copies to be several times the L2, so no path is timed out of cache.

--baseline DIR adds the auto path of another checkout's kernels (bench.baseline),
timed in the same interleaved rounds, with the ratio auto / baseline and the largest
difference between the two outputs on the first input set. --baseline-triton also
times that checkout's one-pass and split paths of the Triton kernel, with the ratios
of ours to them: how a change to the Triton kernel or its launch table moves the
paths the auto path leaves (on an arch where it runs the Gluon kernel) as well.

--sweep times every launch config of SWEEP on the SWEEP_SHAPES, of
WIDE_SWEEP on the WIDE_SHAPES and of SMALL_SWEEP on the SMALL_SHAPES (auto
path; -k keeps the shapes whose name holds every word), and marks the fastest
per shape: how the rows of `kernels.paged_decode.tuning` were chosen. --png
writes the roofline picture (needs matplotlib, the `plot` extra).

--floor times, for each shape of SHAPES, what of auto's time its bytes do not
explain: auto; auto with every length 0 (its fixed part: the launch, the
lengths, the split's partials, arrival counters and fold, the output); an empty
kernel launched on auto's grids with its warps (the launches alone); a copy
of the shape's bytes (half read, half written); and the window read through the
block table and nothing else, the fastest of bench.paged_read's launch configs
(what any one-launch kernel of these inputs must spend). The ceiling is the
percentage of the copy auto would reach if walking its keys cost nothing past
that fixed part; the read's is what that read alone reaches.
"""

import argparse
import dataclasses
import functools
import math
import sys
from dataclasses import dataclass

import torch
import triton

from bench import baseline, paged_read
from bench.results import versions, write_json
from bench.timing import copy_tbps, host_us, interleaved
from cases.decode import DecodeCase, build
import triton.language as tl

from kernels import arch, launch
from kernels.paged_decode import gluon_unavailable, paged_attention_decode
from kernels.paged_decode import api as decode_api
from kernels.paged_decode import plan as decode_plan
from kernels.paged_decode import tuning

HOST_CALLS = 200
L2_MULTIPLE = 4  # rotate over input copies totalling at least this many L2 sizes


@dataclass(frozen=True)
class Shape:
    seqs: int
    ctx: int
    window: int
    q: int = 1
    d: int = 128
    cache: str = "e4m3fn"
    scales: str = "token"
    hq: int = 32
    hkv: int = 8
    block: int = 16
    layout: str = "shuffled"

    @property
    def name(self) -> str:
        extra = [f"{k}={getattr(self, k)}" for k in ("q", "d", "cache", "scales", "hq", "hkv", "block", "layout")
                 if getattr(self, k) != getattr(BASE, k)]
        win = f"w{self.window}" if self.window > 0 else "full"
        return " ".join([f"{self.seqs}x{self.ctx}/{win}"] + extra)

    def case(self, path: str) -> DecodeCase:
        return DecodeCase(self.cache, self.scales, self.block, self.hq, self.hkv, self.d, self.window,
                          (self.ctx,) * self.seqs, self.q, self.layout, path)

    @property
    def keys(self) -> int:
        """Keys each sequence's rows read (the union of their windows)."""
        return min(self.ctx, self.window + self.q - 1) if self.window > 0 else self.ctx

    @property
    def elem(self) -> int:
        """Bytes of a cache element: 1 for fp8, 2 for bf16."""
        return 1 if self.cache.startswith("e4m3") else 2

    @property
    def bytes(self) -> int:
        """K, V and per-token scales of every window: what any kernel must read."""
        per_key = self.hkv * self.d * self.elem * 2 + (self.hkv * 4 * 2 if self.scales == "token" else 0)
        return self.seqs * self.keys * per_key


BASE = Shape(1, 1, 0)
SHAPES = [
    Shape(1, 8192, 4096),
    Shape(8, 8192, 4096),
    Shape(64, 8192, 4096),
    Shape(8, 32768, 0),
    Shape(32, 590, 4096),
    Shape(128, 2048, 1024),
    Shape(8, 8192, 4096, q=4),
    Shape(8, 8192, 4096, d=256, hq=16, hkv=4),
    Shape(8, 8192, 4096, cache="e4m3fnuz"),
    Shape(8, 8192, 4096, cache="bf16"),
    Shape(8, 8192, 4096, scales="tensor"),
    # the geometry of seed 001's matrix: wide heads, GQA 16, MTP, 128-token pages
    Shape(16, 8192, 0, q=4, d=512, cache="bf16", scales="tensor", hq=32, hkv=2),
    Shape(16, 8192, 0, d=1024, hq=16, hkv=4),
    Shape(8, 8192, 4096, q=4, hq=32, hkv=2, block=128),
    Shape(1, 8192, 257, q=4),
    # GQA 16 at D 128: 16 query rows a kv head, one MTP 4 row of them (four 16-row tiles)
    Shape(8, 8192, 4096, hkv=2),
    Shape(64, 8192, 4096, hkv=2),
    Shape(32, 590, 4096, q=4, hkv=2),
]
SWEEP_SHAPES = [Shape(64, 8192, 4096), Shape(8, 32768, 0), Shape(8, 8192, 4096, d=256, hq=16, hkv=4)]
# Rows as M on four warps (the old sm90 rows), and keys as M on one or two warps with the programs a
# split aims for per CU (bench/NOTES.md).
SWEEP = ([tuning.LaunchConfig(256, 128, 4, 2), tuning.LaunchConfig(256, 64, 4, 2)]
         + [tuning.LaunchConfig(256, bn, warps, st, reg, keys_m=True, programs_per_cu=ppc)
            for bn, warps, st, reg, ppc in ((32, 1, 4, 168, 12), (32, 1, 3, None, 8), (16, 1, 4, None, 8),
                                            (64, 2, 2, 168, 6), (32, 2, 3, None, 4), (16, 2, 1, None, 4))])
# Shapes where each CU walks few keys (1 x 8192 / 4096: 248 keys, 32 x 590: 1144, 8 x 8192 / 4096: 1986),
# and their candidates: four warps (the row 1 x 8192 takes) with shorter partitions, and one-warp rows with
# keys as M, partitions of 32 to 256 keys and 12 or 24 programs a CU (the one-pass bar of the table's rows).
SMALL_SHAPES = [Shape(1, 8192, 4096), Shape(32, 590, 4096), Shape(8, 8192, 4096)]
SMALL_SWEEP = ([tuning.LaunchConfig(128, 128, 4, 2, partition_size=ps) for ps in (256, 128)]
               + [tuning.LaunchConfig(128, 64, 4, 2, partition_size=64, programs_per_cu=ppc) for ppc in (2, 8)]
               + [tuning.LaunchConfig(128, 32, 1, 4, maxnreg=168, keys_m=True, programs_per_cu=ppc,
                                      min_programs=3.0, partition_size=ps)
                  for ps, ppc in ((256, 12), (128, 12), (64, 12), (64, 24), (32, 24))])
# Heads of 512 and 1024 dims: the untimed rows they had (keys as M on two warps; eight warps with the whole
# head), and the head cut into dim slices (tuning.LaunchConfig.slice_dims) of 128 or 256 dims.
WIDE_SHAPES = [s for s in SHAPES if s.d > 256]
WIDE_SWEEP = ([tuning.LaunchConfig(1024, 16, 2, 1, keys_m=True, programs_per_cu=4), tuning.LaunchConfig(1024, 16, 8, 1)]
              + [tuning.LaunchConfig(1024, bn, warps, st, keys_m=km, slice_dims=dv)
                 for bn, warps, st, km, dv in ((16, 8, 1, False, 256), (16, 4, 1, False, 128), (16, 4, 2, False, 128),
                                               (32, 4, 2, False, 128), (16, 2, 2, True, 128), (16, 1, 2, True, 128),
                                               (32, 2, 2, True, 256))])


def _input_sets(shape: Shape, device) -> list:
    """Enough independent input copies that cycling through them defeats the L2."""
    first = build(shape.case("auto"), device, 1234)
    per_set = first.key_cache.nbytes + first.value_cache.nbytes
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20)
    count = max(1, min(64, math.ceil(L2_MULTIPLE * l2 / per_set)))
    return [first] + [build(shape.case("auto"), device, 1234 + i) for i in range(1, count)]


def _decode(sets, force_split, entry=paged_attention_decode, kernel=None):
    outs = [torch.empty_like(s.out) for s in sets]
    state = {"i": 0}
    chosen = {} if kernel is None else {"kernel": kernel}  # a baseline's entry may predate the argument

    def fn():
        i = state["i"] = (state["i"] + 1) % len(sets)
        s = sets[i]
        case = s.case
        entry(outs[i], s.query, s.key_cache, s.value_cache, s.block_tables, s.seq_lens,
              s.scale, s.k_scale, s.v_scale, case.window, layout=case.layout,
              max_seq_len=s.max_seq_len, force_split=force_split, **chosen)
    return fn


def _sdpa(shape: Shape, device, count: int):
    """SDPA on gathered windows: q [seqs, Hq, Q, D], k/v [seqs, Hkv, keys, D]; drafts causal (bottom right)."""
    dtype = torch.bfloat16
    qs = [torch.randn(shape.seqs, shape.hq, shape.q, shape.d, dtype=dtype, device=device) for _ in range(count)]
    ks = [torch.randn(shape.seqs, shape.hkv, shape.keys, shape.d, dtype=dtype, device=device) for _ in range(count)]
    vs = [torch.randn_like(k) for k in ks]
    mask = None
    if shape.q > 1:
        row = torch.arange(shape.q, device=device)[:, None]
        col = torch.arange(shape.keys, device=device)[None, :]
        mask = col <= row + shape.keys - shape.q
        if shape.window > 0:
            mask &= col > row + shape.keys - shape.q - shape.window
    state = {"i": 0}

    def fn():
        i = state["i"] = (state["i"] + 1) % count
        torch.nn.functional.scaled_dot_product_attention(qs[i], ks[i], vs[i], attn_mask=mask, enable_gqa=True)
    return fn


def _auto_choice(shape: Shape, device) -> str:
    """What the auto path runs: the Gluon kernel where the arch's Gluon table picks it (as the entry
    decides), else the Triton one; one pass or split into how many partitions."""
    kernel, plan = decode_plan.auto_plan(
        gluon=gluon_unavailable(device) is None, num_seqs=shape.seqs, num_kv_heads=shape.hkv,
        max_seq_len=shape.ctx, num_queries=shape.q, window=shape.window, block_size=shape.block,
        partition_size=None, cu=arch.cu_count(device), arch=arch.arch_name(device), force_split=None,
        group=shape.hq // shape.hkv, head_dim=shape.d, elem=shape.elem)
    return ("gluon " if kernel == "gluon" else "") + (f"split x{plan.n_part}" if plan.split else "one-pass")


def _largest_difference(entry_a, entry_b, s) -> float:
    """max |a - b| of two decode entries' outputs on the input set `s` (auto path)."""
    outs = []
    for entry in (entry_a, entry_b):
        out = torch.empty_like(s.out)
        entry(out, s.query, s.key_cache, s.value_cache, s.block_tables, s.seq_lens, s.scale, s.k_scale,
              s.v_scale, s.case.window, layout=s.case.layout, max_seq_len=s.max_seq_len)
        outs.append(out.float())
    return (outs[0] - outs[1]).abs().max().item()


def _tbps(nbytes: int, us: float) -> float:
    return nbytes / (us * 1e-6) / 1e12


TRITON_PATHS = {"one-pass": False, "split": True}  # the Triton kernel's paths, by their force_split


def baseline_paths(sets, entry, triton: bool) -> dict:
    """{name: fn} of a base's paths (its paged_attention_decode `entry`) on the input sets: its auto
    path, and with `triton` its one-pass and split paths of the Triton kernel."""
    fns = {"baseline": _decode(sets, None, entry)}
    if triton:
        fns.update({f"baseline {path}": _decode(sets, split, entry, kernel="triton")
                    for path, split in TRITON_PATHS.items()})
    return fns


def measure(shape: Shape, device, copy: float, rounds: int, baseline=None, baseline_triton: bool = False) -> dict:
    sets = _input_sets(shape, device)
    calls = len(sets) * math.ceil(10 / len(sets))
    fns = {"auto": _decode(sets, None),
           **{path: _decode(sets, split, kernel="triton") for path, split in TRITON_PATHS.items()},
           "auto again": _decode(sets, None), "sdpa": _sdpa(shape, device, len(sets))}
    paths = ["one-pass", "split", "auto"]
    if gluon_unavailable(device) is None:
        fns["gluon"] = _decode(sets, None, kernel="gluon")
        paths.append("gluon")
    refused = None
    if baseline is not None:
        base_fns = baseline_paths(sets[:1], baseline.paged_attention_decode, baseline_triton)
        try:  # a base that predates a shape (a head size, a block size) or an argument refuses it by name
            for fn in base_fns.values():
                fn()
        except (TypeError, ValueError) as exc:
            baseline, refused = None, str(exc)
    if baseline is not None:
        fns.update(baseline_paths(sets, baseline.paged_attention_decode, baseline_triton))
    timed = interleaved(fns, calls=calls, rounds=rounds)
    host = host_us(_decode(sets[:1], None), HOST_CALLS)
    row = dict(shape=shape.name, **dataclasses.asdict(shape), bytes=shape.bytes, sets=len(sets),
               auto_chose=_auto_choice(shape, device), host_us=host)
    for name, t in timed.items():
        tbps = _tbps(shape.bytes, t.us)
        row[name] = dict(us=t.us, ratio_to_auto=t.ratio, spread=list(t.spread), tbps=tbps, pct_copy=100 * tbps / copy)
    row["best_path"] = min(paths, key=lambda n: row[n]["us"])
    if "gluon" in row:
        row["largest_difference_gluon"] = _largest_difference(
            paged_attention_decode, functools.partial(paged_attention_decode, kernel="gluon"), sets[0])
    row["sdpa_over_auto"] = row["sdpa"]["us"] / row["auto"]["us"]
    if refused is not None:
        row["baseline_refused"] = refused
    if baseline is not None:
        row["auto_over_baseline"] = row["auto"]["us"] / row["baseline"]["us"]
        for path in TRITON_PATHS:
            if f"baseline {path}" in row:
                row[f"{path}_over_baseline"] = row[path]["us"] / row[f"baseline {path}"]["us"]
        row["baseline_host_us"] = host_us(_decode(sets[:1], None, baseline.paged_attention_decode), HOST_CALLS)
        row["largest_difference"] = _largest_difference(paged_attention_decode, baseline.paged_attention_decode,
                                                        sets[0])
    return row


def _print_row(row: dict) -> None:
    a = row["auto"]
    gluon = f"{row['gluon']['us']:>9.1f}" if "gluon" in row else f"{'-':>9}"
    print(f"{row['shape']:<34} {row['one-pass']['us']:>9.1f} {row['split']['us']:>9.1f} {gluon} {a['us']:>9.1f} "
          f"{row['auto_chose']:>16} {row['bytes'] / 1e6:>8.1f} {a['tbps']:>6.2f} {a['pct_copy']:>5.0f}% "
          f"{row['host_us']:>7.1f} {row['sdpa']['us']:>8.1f} {row['sdpa_over_auto']:>6.2f} "
          f"{row['auto again']['ratio_to_auto']:>5.3f} ({row['auto again']['spread'][0]:.3f}-"
          f"{row['auto again']['spread'][1]:.3f})"
          + (f"  gluon max |diff| {row['largest_difference_gluon']:.3g}" if "gluon" in row else "")
          + (f"  baseline {row['baseline']['us']:.1f} us, auto/baseline {row['auto_over_baseline']:.3f}, "
             f"host {row['baseline_host_us']:.1f} us, max |diff| {row['largest_difference']:.3g}"
             if "baseline" in row else "")
          + "".join(f", {path}/baseline {row[f'{path}_over_baseline']:.3f}" for path in TRITON_PATHS
                    if f"{path}_over_baseline" in row)
          + (f"  baseline refused it: {row['baseline_refused']}" if "baseline_refused" in row else ""), flush=True)


def sweep(device, rounds: int, words: tuple = ()) -> list:
    """Time every config of SWEEP on SWEEP_SHAPES, of WIDE_SWEEP on WIDE_SHAPES and of SMALL_SWEEP on
    SMALL_SHAPES (those whose name holds every word) through the auto path; {shape, config, us} rows."""
    name = arch.arch_name(device)
    saved = tuning.TABLES.get(name)
    base = saved or tuning.DEFAULT
    rows = []
    try:
        for shape, configs in ([(s, SWEEP) for s in SWEEP_SHAPES] + [(s, WIDE_SWEEP) for s in WIDE_SHAPES]
                               + [(s, SMALL_SWEEP) for s in SMALL_SHAPES]):
            if not all(w in shape.name for w in words):
                continue
            sets = _input_sets(shape, device)
            calls = len(sets) * math.ceil(10 / len(sets))
            fns = {}
            for cfg in configs:
                fn = _with_config(name, base, cfg, _decode(sets, None))
                try:
                    fn()
                    torch.cuda.synchronize()
                except Exception as exc:  # a config the compiler refuses (shared memory, registers)
                    print(f"  {shape.name} {cfg}: {type(exc).__name__}: {str(exc)[:120]}")
                    continue
                fns[cfg] = fn
            timed = interleaved(fns, calls=calls, rounds=rounds)
            best = min(timed, key=lambda c: timed[c].us)
            for cfg, t in timed.items():
                rows.append(dict(shape=shape.name, block_n=cfg.block_n, num_warps=cfg.num_warps,
                                 num_stages=cfg.num_stages, maxnreg=cfg.maxnreg, keys_m=cfg.keys_m,
                                 programs_per_cu=cfg.programs_per_cu, slice_dims=cfg.slice_dims,
                                 partition_size=cfg.partition_size, us=t.us,
                                 best=cfg == best))
                print(f"{shape.name:<34} block_n {cfg.block_n:>3} warps {cfg.num_warps} stages {cfg.num_stages}"
                      f" maxnreg {cfg.maxnreg} keys_m {cfg.keys_m:d} ppc {cfg.programs_per_cu}"
                      f" slices {cfg.slice_dims} part {cfg.partition_size}"
                      f" {t.us:>9.1f} us{'  <- best' if cfg == best else ''}", flush=True)
            del sets
            torch.cuda.empty_cache()
    finally:
        if saved is None:
            tuning.TABLES.pop(name, None)
        else:
            tuning.TABLES[name] = saved
        decode_api.clear_plans()
    return rows


@triton.jit
def _nothing(p, B: tl.constexpr):
    """Does nothing (no program has a negative id): its launch is all it costs."""
    if tl.program_id(0) < 0:
        tl.store(p + tl.arange(0, B), tl.zeros([B], tl.float32))


def launches_of(fn) -> list:
    """(grid, num_warps) of each launch one call of `fn` makes, in order (recorded, not run)."""
    with launch.recorded() as calls:
        fn()
    return [(tuple(one.grid), one.options["num_warps"]) for one in calls]


def floor(shape: Shape, device, copy: float, rounds: int) -> dict:
    """Auto at `shape` against its fixed part (every length 0), its launches alone (an empty kernel on
    the same grids and warps), a copy of its bytes and each launch config of bench.paged_read (the
    fastest is the row's "read"), in one set of interleaved rounds."""
    sets = _input_sets(shape, device)
    auto = _decode(sets, None)
    grids = launches_of(auto)
    scratch = torch.empty(16, device=device)

    def launches_alone():
        for grid, warps in grids:
            _nothing[grid](scratch, B=16, num_warps=warps)
    src = torch.empty(shape.bytes // 8, device=device)  # fp32: half the shape's bytes read, half written
    dst = torch.empty_like(src)
    no_keys = [dataclasses.replace(s, seq_lens=torch.zeros_like(s.seq_lens)) for s in sets]
    fns = {"auto": auto, "fixed": _decode(no_keys, None), "launches": launches_alone,
           "copy": lambda: torch.neg(src, out=dst)}
    reads = {f"read {pages}x{warps}": _paged_read(sets, pages, warps) for pages, warps in paged_read.configs(sets[0])}
    timed = interleaved(fns | reads, calls=len(sets) * math.ceil(10 / len(sets)), rounds=rounds)
    row = dict(shape=shape.name, bytes=shape.bytes, auto_chose=_auto_choice(shape, device), grids=grids)
    for name, t in timed.items():
        row[name] = dict(us=t.us, ratio_to_auto=t.ratio, spread=list(t.spread))
    row["read"] = min(reads, key=lambda name: row[name]["us"])
    row["auto_pct_copy"] = 100 * _tbps(shape.bytes, timed["auto"].us) / copy
    row["ceiling_pct_copy"] = 100 * _tbps(shape.bytes, timed["fixed"].us) / copy
    row["read_pct_copy"] = 100 * _tbps(shape.bytes, row[row["read"]]["us"]) / copy
    return row


def _paged_read(sets, pages: int, warps: int):
    """bench.paged_read of the input sets in turn, `pages` blocks a program on `warps` warps."""
    sums = [paged_read.launch(s, pages, warps) for s in sets]
    state = {"i": 0}

    def fn():
        i = state["i"] = (state["i"] + 1) % len(sets)
        paged_read.launch(sets[i], pages, warps, sums[i])
    return fn


def _print_floor_row(row: dict) -> None:
    print(f"{row['shape']:<34} {row['auto_chose']:>16} {row['auto']['us']:>8.2f} {row['fixed']['us']:>8.2f} "
          f"({row['fixed']['ratio_to_auto']:.2f}) {row['launches']['us']:>8.2f} ({row['launches']['ratio_to_auto']:.2f}) "
          f"{row['copy']['us']:>8.2f} {row['auto_pct_copy']:>6.0f}% {row['ceiling_pct_copy']:>8.0f}% "
          f"{row[row['read']]['us']:>8.2f} ({row[row['read']]['ratio_to_auto']:.2f}) {row['read_pct_copy']:>6.0f}% "
          f"{row['read'].split()[1]:>5}", flush=True)


def _with_config(arch_name: str, base, cfg, fn):
    """fn, run with `cfg` as the only launch config of `arch_name` (set, and the plans forgotten,
    on every call, so a graph captures the launches of that config)."""
    table = dataclasses.replace(base, rows=(dataclasses.replace(cfg, max_head_dim=1 << 20, min_work=0),))

    def run():
        tuning.TABLES[arch_name] = table
        decode_api.clear_plans()
        fn()
    return run


def roofline(rows: list, copy: float, folder: str) -> str | None:
    """Achieved TB/s per shape and path against the copy line, as PNG; None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench: matplotlib is not installed (the `plot` extra): no roofline picture", file=sys.stderr)
        return None
    import os
    os.makedirs(folder, exist_ok=True)
    fig, ax = plt.subplots(figsize=(11, 5))
    xs = range(len(rows))
    paths = [p for p in ("one-pass", "split", "gluon", "auto", "sdpa") if all(p in r for r in rows)]
    width = 0.8 / len(paths)
    for i, path in enumerate(paths):
        ax.bar([x + (i - (len(paths) - 1) / 2) * width for x in xs], [r[path]["tbps"] for r in rows], width=width,
               label=path)
    ax.axhline(copy, color="k", linestyle="--", label=f"copy {copy:.2f} TB/s")
    ax.set_xticks(list(xs), [r["shape"] for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("TB/s of the bytes the window needs")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(folder, "decode_roofline.png")
    fig.savefig(path, dpi=120)
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None)
    p.add_argument("--png", default=None, help="folder for the roofline picture")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("-k", default=None, help="keep shapes whose name contains every word")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--sweep", action="store_true", help="time the launch configs of SWEEP instead")
    mode.add_argument("--floor", action="store_true",
                      help="time auto against its fixed part, its launches alone, a copy of its bytes and a read "
                           "of its window alone instead")
    p.add_argument("--baseline", default=None, metavar="DIR",
                   help="also time the auto path of the kernels of the checkout at DIR (bench.baseline)")
    p.add_argument("--baseline-triton", action="store_true",
                   help="with --baseline, also time its one-pass and split paths of the Triton kernel")
    args = p.parse_args(argv)
    if args.baseline_triton and not args.baseline:
        p.error("--baseline-triton: expected --baseline DIR with it, got none")
    if not torch.cuda.is_available():
        print("bench: needs a GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    base = baseline.load(args.baseline) if args.baseline else None
    copy = copy_tbps()
    head = (f"{versions(device, f'{arch.cu_count(device)} CUs')}\ncommand: {' '.join(sys.argv)}\n"
            f"copy {copy:.2f} TB/s (1 GiB device to device, read + write); "
            "default shape Hq 32 / Hkv 8, D 128, block 16, shuffled, fp8 e4m3fn per-token, Q 1")
    print(head)
    words = (args.k or "").split()
    if args.sweep:
        rows = sweep(device, args.rounds, tuple(words))
    else:
        if args.floor:
            print(f"{'shape':<34} {'auto chose':>16} {'auto us':>8} {'fixed us (/auto)':>16} {'launches':>15} "
                  f"{'copy us':>8} {'%copy':>7} {'ceiling':>9} {'read us (/auto)':>15} {'%copy':>7} {'pxw':>5}")
            timed, printed = (lambda shape: floor(shape, device, copy, args.rounds)), _print_floor_row
        else:
            print(f"{'shape':<34} {'1pass us':>9} {'split us':>9} {'gluon us':>9} {'auto us':>9} {'auto chose':>16} "
                  f"{'MB':>8} "
                  f"{'TB/s':>6} {'%copy':>6} {'host us':>7} {'sdpa us':>8} {'sdpa/a':>6} noise")
            timed, printed = (lambda shape: measure(shape, device, copy, args.rounds, base, args.baseline_triton)), \
                _print_row
        rows = []
        for shape in (s for s in SHAPES if all(w in s.name for w in words)):
            row = timed(shape)
            printed(row)
            rows.append(row)
            write_json(args.json, head, copy, rows)
            torch.cuda.empty_cache()
        if args.png and not args.floor:
            picture = roofline(rows, copy, args.png)
            if picture:
                print(f"roofline: {picture}")
    write_json(args.json, head, copy, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
