"""Launch configurations of the paged decode, per arch and kernel: data, chosen by `kernels.arch`.

TABLES serve the Triton partition kernel (every arch; DEFAULT where an arch
has no table), GLUON_TABLES the Gluon one (only the archs listed; their rows
say where the auto path takes it: `picked`, and why, beside each row).

A row gives, for head sizes up to `max_head_dim`, up to `max_rows` query
rows a program holds (G * Q), caches of at most `max_elem` bytes an element
and at least `min_work` keys for each CU to walk (sequences x kv heads x the
keys each attends, over the CUs), the keys per loop step (`block_n`), the
warps per program, the software-pipelining depth, a register cap (NVIDIA) or
waves per SIMD (AMD), the tile's orientation (`keys_m`: keys as the MMA's M
and query rows as its N, so a few rows pad to 8 instead of 16) and the
partition programs a split aims for per CU where the row differs from its
arch; and for the arch, whether the auto path may split, how many partition
programs per CU it aims for, and the dot operand dtype of fp8 caches ("fp16":
two fp8 codes become two fp16 values in one instruction on Hopper, and the
kernel scales rows into fp16's range; None: the query's dtype, as for other
caches). The CPU runs the fp16 operands too, so the interpreter checks that
code. `config(arch, head_dim, rows, elem, work)` picks the first row that
fits; an arch without a table gets DEFAULT. The interpreter ("cpu") takes
large steps: its cost is per step, not per key; it runs both orientations
(keys_m for up to 8 rows), so the CPU tier checks both.

The sm90 rows come from `python -m bench.decode --sweep` on an H200
(bench/NOTES.md has the tables they were read from). A program of one warp
that walks 32 keys a step with keys as the MMA's M is 1.7x faster than four
warps on 128 keys where the device is full (no barrier, no exchange between
warps; 8 rows of N instead of 16 of M); with few keys per CU, or more than 8
rows, the four-warp rows stay ahead. Keys as M with four warps or more
compiles to warpgroup MMAs, which triton 3.6 got wrong on this kernel
(illegal addresses on the H200): no sm90 row asks for that.

The AMD rows come from `quantfloor compile` (no AMD GPU is lent here, so
nothing was timed): the largest steps with which every specialization of the
CPU tier up to D 256 compiles without a VGPR spill or scratch and keeps at
least 2 waves per SIMD (at most 256 VGPRs on gfx942 and gfx950, 512 on
gfx1250; verify/targets.py). A step of 64 keys holds [64, D] K and V tiles in
fp32 and their dot operands, which passes 256 VGPRs from D 128 on (259 to 267
for a bf16 cache with per-token scales on gfx942), and with 32 rows from D 64
on; the fp8 bit decoding (the format a target does not convert: e4m3fn on
gfx942, e4m3fnuz elsewhere) and gfx1250's wave32 (twice the registers a lane
for a tile) need smaller steps still (gfx942 at D 64: a 64-key step took
257 VGPRs, one wave, on a forced split of 128 rows, MTP 8 and GQA 16, with
e4m3fn decoded from its bits and per-token scales; at 32 keys, the step of
its first row, which serves D 64 and 128, the GPU tier's 145 D 64
specializations take 86 to 236, two waves or more). At D 256 (and D
192, padded to it) a 32-key step took 257 to 279 VGPRs on gfx942 (bf16 caches,
per-token fp8, up to 16 rows): 16 keys there take 132 to 238 but for one
split of D 192 with per-token e4m3fnuz (259, one wave) while the step is
pipelined; gfx942's row for up to 16 rows is not (one stage: the GPU tier's
237 specializations of that row take 139 to 256 VGPRs, two waves or more;
eight warps instead took 210 and spilled 12 SGPRs). Four warps took
266 to 290 VGPRs on gfx950 (8 rows of D 192 fp8; 64 rows of D 256) and 599 to
632 on gfx1250 (64 rows): eight warps take 188 to 216 and 440 to 442.
waves_per_eu=2 is not set on the rows: it made the compiler spill
specializations that fit 256 VGPRs without it. Only gfx1250's split launches
ask for it, on its rows up to D 512 (`split_waves_per_eu`: the fold behind the
arrival counter's ticket took one wave there). Heads of 512 and 1024 dims run
as dim slices on every arch (the note above `_SLICED`).
"""

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class LaunchConfig:
    """max_head_dim: the largest head size the row serves; maxnreg (NVIDIA): a register cap per
    thread (more programs per SM, at the price of spills); waves_per_eu (AMD): the waves per SIMD
    the compiler must leave room for, which caps its registers at what that many waves allow.
    None leaves either to the compiler. spills: why the row spills on its arch, where it does
    (a compile report counts those spills as known); empty: it must not. max_rows: the most
    query rows (G * Q) a program of the row holds; max_elem: the largest cache element (bytes;
    None: any); min_work: the fewest keys each CU must walk for the row to apply; keys_m: keys as
    the MMA's M (module docstring); programs_per_cu: what a split aims for (None: the arch's);
    min_programs: the fewest programs per CU a one-pass launch of the row needs (the auto path
    splits below it); partition_size: the keys a split partition takes where the caller leaves
    it to the table (None: PARTITION_SIZE); slice_dims: the dims of V and of the output a program
    weighs where the head is wider (a power of two; the head runs as that many slices, each
    scoring the whole head; None: the whole head); long_walk: the partitions of `partition_size`
    from which the auto path splits a walk that long although the grid fills the device (None:
    kernels.paged_decode.plan.LONG_WALK_PARTS); max_heads: the most (sequence, kv head) pairs per CU
    for which the row applies (fewer than one: the sequences leave CUs idle, and a split makes the
    programs); picked (a Gluon table's row): the auto path runs the Gluon kernel where the row serves,
    the Triton kernel elsewhere; staged_fold (a Gluon table's row): a split's fold brings its partials
    into shared memory by cp.async, several groups of partitions in flight (gluon_partition.fold_staged),
    where loading `merge_block` elements a warp a step into registers would take at least this many
    steps (None: never); split_waves_per_eu (AMD): the waves per SIMD a split launch of the row asks
    the compiler to leave room for, whatever `waves_per_eu` says (None: the row's)."""

    max_head_dim: int
    block_n: int
    num_warps: int
    num_stages: int
    maxnreg: int | None = None
    waves_per_eu: int | None = None
    spills: str = ""
    max_rows: int = 64  # every tile of rows a program holds (kernels.paged_decode.plan.TILE_ROWS)
    max_elem: int | None = None
    min_work: int = 0
    keys_m: bool = False
    programs_per_cu: int | None = None
    min_programs: float = 0.0
    partition_size: int | None = None
    slice_dims: int | None = None
    long_walk: int | None = None
    max_heads: float = float("inf")
    picked: bool = False
    staged_fold: int | None = None
    split_waves_per_eu: int | None = None

    def fits(self, head_dim: int, rows: int, elem: int, work: int, programs: float = float("inf"),
             heads: float = 0.0) -> bool:
        """Whether the row serves head size `head_dim`, `rows` rows a program, `elem`-byte cache
        elements, `work` keys a CU, `programs` programs a CU and `heads` (sequence, kv head) pairs a CU."""
        return (head_dim <= self.max_head_dim and rows <= self.max_rows and work >= self.min_work
                and programs >= self.min_programs and heads <= self.max_heads
                and (self.max_elem is None or elem <= self.max_elem))

    @property
    def options(self) -> dict:
        """The Triton launch options besides warps and stages that the row sets."""
        chosen = {"maxnreg": self.maxnreg, "waves_per_eu": self.waves_per_eu}
        return {name: value for name, value in chosen.items() if value is not None}


@dataclass(frozen=True)
class ArchTuning:
    """rows: launch configs by head size; split: the auto path may split on this arch;
    programs_per_cu: partition programs the split aims for per CU; fp8_dot: the dot operand
    dtype of fp8 caches ("fp16", or None for the query's dtype); the split's fold (run by
    the last partition program of a row tile, kernels.paged_decode.reduce): merge_dims, the
    dims a pass takes (a power of two; the head's width where it is narrower), and
    merge_block, the most elements a warp loads a step (partitions x rows x dims: the
    partitions a step loads together)."""

    rows: tuple
    split: bool
    programs_per_cu: int
    fp8_dot: str | None = None
    # The whole head a pass and 64 elements a lane a step (2 partitions of 8 rows on one warp, 4 of 16
    # rows on four): the loads of a step are in flight together, and a one-warp row's register cap
    # (168) holds them with the running accumulator.
    merge_dims: int = 128
    merge_block: int = 2048


_SM90_SPILLS = ("chosen by time on the H200 (bench/NOTES.md) with the spills they have: 255 registers a thread and "
                "a stack of up to a few hundred bytes in many specializations; the same rows at half their keys a "
                "step spill in far fewer (73 -> 28 on the CPU tier) but were 1.14x to 1.21x slower where they serve")
_SM90_CAP = ("a cap of 168 registers (12 one-warp programs an SM) leaves a stack of tens of bytes outside the "
             "loop; 1.0 to 1.1x faster than no cap on the H200 (bench/NOTES.md)")
_SM90_KEYS_M = ("keys as M on one or two warps, chosen by time on the H200 with the stack they take: 255 "
                "registers and 64 to 250 bytes (bf16 caches, D 192 and 256 with bit-decoded e4m3fnuz or per-tensor "
                "scales); each row was faster than the rows-as-M one it replaced where timed")
# Keys each CU walks from which a one-warp row with 256-key partitions pays on sm90: 8 x 8192 / window 4096
# (1986) gains; 32 x 590 (1144) gains less than with 128-key ones (_HALF). bench/NOTES.md. The two-warp D 256 row gained at 993 (8 x 8192, 4 kv heads); half of
# _FULL is where it starts, fewer keys are not measured.
_FULL = 1536
# Pipelining stages (num_stages) of the sm90 rows. The partition kernel reads a tile's block ids a step
# before its K and V (kernels/paged_decode/partition.py), so Triton issues K and V num_stages - 1 steps
# ahead, each step a buffer of shared memory. With the ids read in the step it issued them half as far
# ahead ((num_stages - 1) // 2, the chain of two loads); `python reports/dev/decode_variants.py` on the
# H200 against the kernels before (bench/NOTES.md):
# - the one-warp fp8 rows, 2 stages (one step ahead): 8 x 8192 / 4096 33.2 against 33.6 us, 32 x 590 21.7
#   against 22.7, 64 x 8192 196.7 against 198.3; 3 stages (two buffers, 10 programs an SM by shared
#   memory) lost (34.5; 237.1 at 64 x 8192, two waves), and 4 (three buffers) lost more;
_FP8_ONE_WARP_STAGES = 2
# - the one-warp row of two-byte caches (bf16, fp16), 7 stages (six steps ahead):
#   8 x 8192 / 4096 bf16 66.0 against 70.0 before (4 stages: 66.9);
_TWO_BYTE_STAGES = 7
# - the two-warp D 256 fp8 row, 3 stages (two steps ahead): 37.9 against 41.9 us (2 stages: 41.1).
_D256_STAGES = 3
# Programs per SM a one-pass launch of a one-warp row needs on sm90: 512 programs on 132 SMs (3.9) beat
# four warps (262.6 against 307.4 us at 64 x 8192 / 4096); 256 (1.9) lost (42.8 against 33.5 at 32 x 590),
# 64 (0.5) too (233.5 against 114.6 at 8 x 8192). Below it the auto path splits.
_ONE_PASS = 3.0
# From 1024 keys a CU (32 x 590 / 4096: 1144) one-warp programs pay when split into partitions of 128 keys:
# 27.1 us against 30.7 with 256 and 33.5 for four warps one-pass; at 8 x 8192 (1986) 256 stays ahead (39.8
# against 42.2 with 128). bench/NOTES.md.
_HALF = 1024
# Heads of 512 and 1024 dims run as dim slices (LaunchConfig.slice_dims): each program scores the whole
# head a slice at a time and weighs one slice of V. sm90, `python -m bench.decode --sweep -k 16x8192` on the
# H200 (bench/NOTES.md): 32 keys, two warps, keys as M, 256-dim slices took 1541.5 us at D 512 (bf16 cache,
# MTP 4, GQA 16) and 1321.8 us at D 1024 (fp8), against 1815.6 and 1887.1 for the whole-head rows before
# (two warps keys as M; eight warps); eight warps with slices lost (3584.1 and 5158.5). AMD (compile only,
# `quantfloor compile`): the whole head spilled 36 to 287 VGPRs at eight warps (a [16, 1024] product is held
# whole by every warp); four warps of 16 keys and 128-dim slices compile without a spill on all three
# targets, at 1 to 2 waves per SIMD (gfx942 268 to 275 VGPRs at D 1024: one wave).
_SLICED = LaunchConfig(1024, 16, 4, 1, slice_dims=128)
# With an fp8 cache the sliced sm90 row fills the device with its slices (16 x 8192 full at D 1024: 256
# programs on 132 SMs) and a walk of 32 partitions ran faster in one pass: 1227.4 us against 1307.7 split in
# two (auto, with the default of 8 partitions, took the split: bench/NOTES.md); with a bf16 cache (D 512,
# MTP 4, GQA 16: 256 programs too) the split was faster, 1538.8 against 2096.1. Walks past 64 partitions,
# and D 512 with an fp8 cache, are not measured.
_SLICED_LONG_WALK = 64
_SM90_SLICED = ("chosen by time on the H200 with the stack it takes: 253 to 255 registers and up to 216 bytes at "
                "D 1024, 2.2 KB at D 512 with a bf16 cache; 1.18x and 1.43x faster there than the whole-head rows "
                "it replaced, which spilled as well (a 320 to 424 byte stack at D 1024)")
# gfx1250 (compile only): a split's partition program, whose fold runs behind the arrival counter's ticket,
# took 766 to 857 VGPRs (one wave a SIMD) where the same specialization without a store that depends on
# the ticket took 352; asked for 2 waves, the compiler fits it in 2 (bench/NOTES.md). Its rows up to D 512
# ask for them (LaunchConfig.split_waves_per_eu); the GPU tier's 67 D 512 splits take 2 waves and no spill
# (256 to 435 VGPRs). D 1024 does not ask: at two waves one of its splits spilled (128-dim slices, e4m3fnuz
# decoded from its bits, MTP 4 with GQA 16, the GPU tier's `...-d1024-w0-L64_22-q4-plain-flat-cu1-split`:
# 512 VGPRs, 3 spilled, 112 bytes of scratch used); without the ask the GPU tier's 63 D 1024 splits take
# 445 to 854 VGPRs, no spill, 44 of them two waves and 19 one (`quantfloor compile --tier gpu --target
# gfx1250 -k "d1024 split"`). Heads past 256 dims need no second wave (84 and 83 of gfx942's and gfx950's
# 124 and 125 D 1024 specializations take one). Also measured on the spilling split: eight warps, 40
# spilled; 64-dim fold passes (merge_dims), 7; 64-dim slices, 465 VGPRs and no spill at two waves, but
# every slice scores the whole head, so each key's 1024 bytes are read 16 times a head instead of 8.
# Compile only, not timed.
_GFX1250_SPLIT_WAVES = 2
TABLES = {
    "sm90": ArchTuning(rows=(LaunchConfig(128, 32, 1, _FP8_ONE_WARP_STAGES, maxnreg=168, max_rows=8, max_elem=1,
                                          min_work=_FULL, keys_m=True, programs_per_cu=12, min_programs=_ONE_PASS,
                                          spills=_SM90_CAP),
                             LaunchConfig(128, 32, 1, _FP8_ONE_WARP_STAGES, maxnreg=168, max_rows=8, max_elem=1,
                                          min_work=_HALF, keys_m=True, programs_per_cu=12, min_programs=_ONE_PASS,
                                          partition_size=128, spills=_SM90_CAP),
                             LaunchConfig(128, 16, 1, _TWO_BYTE_STAGES, max_rows=8, max_elem=2, min_work=_FULL,
                                          keys_m=True,
                                          programs_per_cu=8, min_programs=_ONE_PASS, spills=_SM90_KEYS_M),
                             LaunchConfig(128, 128, 4, 2, spills=_SM90_SPILLS),
                             LaunchConfig(256, 32, 2, _D256_STAGES, max_rows=8, max_elem=1, min_work=_FULL // 2,
                                          keys_m=True, programs_per_cu=4, spills=_SM90_KEYS_M),
                             LaunchConfig(256, 64, 4, 2, spills=_SM90_SPILLS),
                             LaunchConfig(1024, 32, 2, 2, max_elem=1, keys_m=True, slice_dims=256,
                                          long_walk=_SLICED_LONG_WALK, spills=_SM90_SLICED),
                             LaunchConfig(1024, 32, 2, 2, keys_m=True, slice_dims=256, spills=_SM90_SLICED)),
                       split=True, programs_per_cu=2, fp8_dot="fp16"),
    "gfx942": ArchTuning(rows=(LaunchConfig(128, 32, 4, 2, max_rows=16),
                               LaunchConfig(256, 16, 4, 1, max_rows=16),
                               LaunchConfig(128, 32, 4, 2, max_rows=32), LaunchConfig(256, 16, 4, 2, max_rows=32),
                               LaunchConfig(128, 32, 8, 2), LaunchConfig(256, 16, 8, 2),
                               _SLICED),
                         split=False, programs_per_cu=2),
    "gfx950": ArchTuning(rows=(LaunchConfig(128, 32, 4, 2, max_rows=16), LaunchConfig(256, 16, 8, 2),
                               _SLICED),
                         split=True, programs_per_cu=2),
    "gfx1250": ArchTuning(rows=(LaunchConfig(128, 32, 4, 2, max_rows=16, split_waves_per_eu=_GFX1250_SPLIT_WAVES),
                                LaunchConfig(256, 16, 4, 2, max_rows=16, split_waves_per_eu=_GFX1250_SPLIT_WAVES),
                                LaunchConfig(256, 16, 8, 2, split_waves_per_eu=_GFX1250_SPLIT_WAVES),
                                replace(_SLICED, max_head_dim=512, split_waves_per_eu=_GFX1250_SPLIT_WAVES), _SLICED),
                          split=False, programs_per_cu=2),
    # the interpreter pays per step: the fold takes whole heads there, one or two partitions a step (two
    # for heads up to 64 dims, so the CPU tier checks a step's masked partitions); D 1024 runs as two
    # slices, so the CPU tier checks the sliced code (its D 1024 cases took 103 s whole, 190 s as four)
    "cpu": ArchTuning(rows=(LaunchConfig(1024, 256, 4, 1, max_rows=8, keys_m=True, slice_dims=512),
                            LaunchConfig(1024, 256, 4, 1, slice_dims=512)),
                      split=False, programs_per_cu=2, fp8_dot="fp16", merge_dims=1024, merge_block=256),
}
DEFAULT = ArchTuning(rows=(LaunchConfig(128, 64, 4, 2), LaunchConfig(256, 32, 4, 2), _SLICED),
                     split=False, programs_per_cu=2)


# The Gluon partition kernel's tables (kernels/paged_decode/gluon_partition.py), per arch that has the kernel:
# NVIDIA from sm80 (cp.async and mma.sync). Its keys are always the MMA's M, stacked over the warps (block_n
# at least 16 a warp), and num_stages is its ring of shared-memory buffers (a power of two, at least 2, each
# holding a tile's K, V and scales). The rows follow the Triton table's rules (rows a program, element size,
# keys a CU, slices) with the Gluon kernel's own steps; `picked` marks where the auto path runs it.
#
# sm90, `python -m bench.gluon_sweep` on the H200 (one process, graph replay, the Triton kernel's auto
# path timed beside; bench/NOTES.md has the tables):
# - fp8, up to 8 rows, from _DEEP keys a CU (64 x 8192 / 4096 and 8 x 32768: 15887): one warp, 32 keys, a
#   ring of 4: 164.0 and 167.4 us against 195.6 and 200.1 for Triton (2 stages: 196.0 and 189.6); at 1986
#   keys a CU (8 x 8192 / 4096) the ring of 4 lost (35.0 against 27.3 at 2 stages);
_DEEP = 8192
# - ... where there are fewer (sequence, kv head) pairs than CUs (8 x 32768: 64 pairs on 132 CUs, so the split
#   makes every program): four warps, 128 keys, three programs a CU (6 partitions, 384 programs: one wave at
#   three a CU): 155.1 against 163.9 for the ring of 4 and 190.1 for Triton; at 64 x 8192 / 4096 (3.9 pairs a
#   CU: 1024 programs, 2.6 waves) the same row lost (180.6 against 163.9);
_FEW_HEADS = 1.0
# - fp8, up to 8 rows, from _HALF keys a CU: one warp, 32 keys, 2 stages: 8 x 8192 / 4096 27.3 against 32.8,
#   32 x 590 18.6 against 21.5, 128 x 2048 / 1024 (one pass) 78.9 against 101.5;
# - fp8, up to 8 rows, fewer keys a CU: four warps, 128 keys: 1 x 8192 / 4096 10.6 against 13.8, 1 x 8192 /
#   257 (MTP 4) 7.6 against 9.2;
# - two-byte caches, up to 8 rows (bf16 versions of the fp8 shapes, `python -m bench.gluon_sweep --cache
#   bf16`; us): from _TWO_BYTE_DEEP keys a CU, two warps of 64 keys, six programs a CU: 64 x 8192 / 4096 279.7,
#   8 x 32768 259.2, 128 x 2048 / 1024 (one pass) 142.6 (two warps of 32 keys: 329.0, 254.6, 167.8);
#   from _HALF, two warps of 32 keys, four programs a CU: 8 x 8192 / 4096 40.0 and 32 x 590 26.7
#   against 47.7 and 32.1 on the row above (255 registers, three 70 KB programs an SM: 5.7 warps);
#   fewer keys a CU, four warps of 64 keys, three programs a CU: 1 x 8192 / 4096 13.2 and 1 x 8192 /
#   257 (MTP 4) 9.9 against 14.7 and 11.2 (two warps of 32 keys: 16.1 and 12.6; at 32 x 590 this row
#   took 37.2);
_TWO_BYTE_DEEP = 4096
# - 9 to 16 rows at D 128 (GQA 16, or MTP with GQA 4 to 8), from _ROWS_WORK keys a CU: two warps of 64 keys,
#   three programs a CU. `python -m bench.decode --rounds 3 -k "w4096 hkv=2" --baseline DIR` (auto against
#   the auto path of the table without the row, which ran Triton's split there; us): 8 x 8192 / 4096 21.5
#   against 23.6, 64 x 8192 / 4096 60.9 against 81.3, 32 x 590 MTP 4 21.8 against 27.1, 8 x 8192 MTP 4 with
#   128-key blocks 38.5 against 40.9; in a sweep before, MTP 4 at D 64 29.2 against 30.4 and with a bf16 cache
#   45.7 against 94.2, and 1 x 8192 / 4096 MTP 4 (62 keys a CU) lost (18.9 against 15.0): below _ROWS_WORK
#   keys a CU the Triton kernel runs;
_ROWS_WORK = 128
# - the rest at D 128 (more than 16 rows, or more than 8 where each CU walks fewer than _ROWS_WORK keys): four
#   warps, 64 keys; not picked (on 16-row tiles with 128-key blocks it lost: 43.7 against 40.3 for Triton's split);
# - D 256, up to 8 rows: four warps, 64 keys: 27.5 against 38.4;
# - D 512 and 1024, 256-dim slices on two warps: 869.7 and 642.2 us against 1545.0 and 1249.4.
# - a split's fold through shared memory (LaunchConfig.staged_fold; `python -m bench.decode --rounds 3 --baseline
#   DIR`, every Gluon row staged against the register fold, outputs bit-identical; us): where the register fold
#   takes 2 steps or more on the fp8 rows up to 8 rows, 8 x 8192 / 4096 26.4 against 27.5 (17 partitions, 5 steps),
#   32 x 590 18.0 against 18.8 (5 partitions, 2 steps), MTP 4 38.1 against 40.1, e4m3fnuz 28.1 against 29.9,
#   per-tensor scales 24.7 against 25.7, 1 x 8192 / 4096 10.5 against 10.8 (17 partitions, 2 steps of 16); in one
#   step it lost (1 x 8192 / 257 MTP 4, 2 partitions: 8.0 against 7.7). The 16-row row gained from 3 steps
#   (8 x 8192 / 4096 GQA 16: 19.7 against 20.9, 17 partitions, 9 steps) and lost at 2 (64 x 8192 / 4096 GQA 16:
#   64.3 against 60.6, 3 partitions). Rows not listed were not measured with a fold of 2 steps or more.
_STAGED = 2
_STAGED_ROWS = 3
# (both four-warp 128-key rows carry it: `spills` names a launch by its shape, so the first such row answers)
_GLUON_STAGED_SPILLS = ("four warps of 128 keys with the fold staged, found by the GPU tier's compile: at D 64 with "
                        "e4m3fnuz decoded from its bits (8 rows, 17 partitions) 128 registers and an 8-byte stack, "
                        "none with the register fold; staged where timed at D 128 (1 x 8192 / 4096: 10.4 against "
                        "10.7 us), not timed at D 64")
_GLUON_D256_SPILLS = ("four warps at D 256 (192 padded to it) hold a [256, rows] fp32 accumulator with a 64-key tile's "
                      "operands: 255 registers and a stack of 8 to 672 bytes in some specializations (bf16 caches, "
                      "16 to 64 rows); up to 8 rows it was the fastest timed at D 256 (bench/NOTES.md)")
_GLUON_ROWS_SPILLS = ("four warps of 64 keys with more than 8 rows, found by the GPU tier's compile: 64-row tiles (MTP 4 "
                      "and 8, GQA 16) of e4m3fnuz decoded from its bits take 255 registers and 96 to 184 bytes of "
                      "stack, bf16 caches at D 64 in 16-row tiles (where each CU walks fewer than _ROWS_WORK keys) 128 "
                      "registers and a 16-byte stack frame; not picked (the auto path runs the Triton kernel there), "
                      "so only kernel='gluon' launches them")
_GLUON_SLICED_SPILLS = ("256-dim slices on two warps with 32 rows: 255 registers and a stack of up to a few hundred "
                        "bytes; 1.8x and 1.9x faster than Triton's sliced row where timed (bench/NOTES.md)")
GLUON_TABLES = {
    "sm90": ArchTuning(rows=(LaunchConfig(128, 128, 4, 2, max_rows=8, max_elem=1, min_work=_DEEP, keys_m=True,
                                          programs_per_cu=3, max_heads=_FEW_HEADS, picked=True, staged_fold=_STAGED,
                                          spills=_GLUON_STAGED_SPILLS),
                             LaunchConfig(128, 32, 1, 4, max_rows=8, max_elem=1, min_work=_DEEP, keys_m=True,
                                          programs_per_cu=12, min_programs=_ONE_PASS, picked=True,
                                          staged_fold=_STAGED),
                             LaunchConfig(128, 32, 1, 2, max_rows=8, max_elem=1, min_work=_FULL, keys_m=True,
                                          programs_per_cu=12, min_programs=_ONE_PASS, picked=True,
                                          staged_fold=_STAGED),
                             LaunchConfig(128, 32, 1, 2, max_rows=8, max_elem=1, min_work=_HALF, keys_m=True,
                                          programs_per_cu=12, min_programs=_ONE_PASS, partition_size=128,
                                          picked=True, staged_fold=_STAGED),
                             LaunchConfig(128, 128, 4, 2, max_rows=8, max_elem=1, keys_m=True, programs_per_cu=3,
                                          picked=True, staged_fold=_STAGED, spills=_GLUON_STAGED_SPILLS),
                             LaunchConfig(128, 64, 2, 2, max_rows=8, min_work=_TWO_BYTE_DEEP, keys_m=True,
                                          programs_per_cu=6, min_programs=_ONE_PASS, picked=True),
                             LaunchConfig(128, 32, 2, 2, max_rows=8, min_work=_HALF, keys_m=True, programs_per_cu=4,
                                          min_programs=_ONE_PASS, picked=True),
                             LaunchConfig(128, 64, 4, 2, max_rows=8, keys_m=True, programs_per_cu=3,
                                          min_programs=_ONE_PASS, picked=True),
                             LaunchConfig(128, 64, 2, 2, max_rows=16, min_work=_ROWS_WORK, keys_m=True,
                                          programs_per_cu=3, min_programs=_ONE_PASS, picked=True,
                                          staged_fold=_STAGED_ROWS),
                             LaunchConfig(128, 64, 4, 2, keys_m=True, spills=_GLUON_ROWS_SPILLS),
                             LaunchConfig(256, 64, 4, 2, max_rows=8, keys_m=True, picked=True,
                                          spills=_GLUON_D256_SPILLS),
                             LaunchConfig(256, 64, 4, 2, keys_m=True, spills=_GLUON_D256_SPILLS),
                             LaunchConfig(1024, 32, 2, 2, keys_m=True, slice_dims=256, long_walk=_SLICED_LONG_WALK,
                                          picked=True, spills=_GLUON_SLICED_SPILLS)),
                       split=True, programs_per_cu=2, fp8_dot="fp16"),
}
KERNELS = ("triton", "gluon")


PARTITION_SIZE = 256  # keys a split partition takes where neither the caller nor the row says


def partition_sizes() -> tuple:
    """Every partition size a row of any table (or the default) may choose, smallest first."""
    sizes = {row.partition_size for table in (*TABLES.values(), DEFAULT, *GLUON_TABLES.values()) for row in table.rows}
    return tuple(sorted((sizes - {None}) | {PARTITION_SIZE}))


def has_table(arch: str, kernel: str) -> bool:
    """Whether `kernel` ('triton' or 'gluon') has a launch table for `arch` (the Triton kernel runs
    everywhere, on DEFAULT where its arch has none)."""
    return kernel == "triton" or arch in GLUON_TABLES


def tuning(arch: str, kernel: str = "triton") -> ArchTuning:
    """The table of `kernel` on `arch` ('sm90', 'gfx942', 'cpu', ...); the Triton kernel's DEFAULT where
    it has none (the Gluon kernel has no default: has_table)."""
    if kernel == "gluon":
        return GLUON_TABLES[arch]
    return TABLES.get(arch, DEFAULT)


def config(arch: str, head_dim: int, rows: int, elem: int = 1, work: int = 0,
           programs: float = float("inf"), kernel: str = "triton", heads: float = 0.0) -> LaunchConfig:
    """The launch config for head size `head_dim`, `rows` query rows a program (G * Q), a cache of
    `elem` bytes an element, `work` keys each CU walks, `programs` programs a CU (a one-pass
    launch's grid; a split makes as many as its row asks) and `heads` (sequence, kv head) pairs a
    CU, on `arch`, for `kernel`: its first row that fits."""
    for row in tuning(arch, kernel).rows:
        if row.fits(head_dim, rows, elem, work, programs, heads):
            return row
    raise ValueError(f"head_dim: no launch config for {head_dim} (with {rows} rows a program) on {arch}")


def programs_per_cu(arch: str, row: LaunchConfig, kernel: str = "triton") -> int:
    """The partition programs per CU a split with launch config `row` of `kernel` aims for on `arch`."""
    return row.programs_per_cu or tuning(arch, kernel).programs_per_cu


def spills(arch: str, head_dim: int, rows: int, block_n: int, keys_m: bool, num_warps: int,
           maxnreg: int | None = None, kernel: str = "triton") -> str:
    """Why the row of `arch` that launched a program of tile width `head_dim`, `rows` rows, `block_n`
    keys a step, that orientation, warps and register cap spills ('' where it must not): the first
    such row."""
    for row in tuning(arch, kernel).rows:
        if (head_dim <= row.max_head_dim and rows <= row.max_rows
                and (row.block_n, row.keys_m, row.num_warps, row.maxnreg) == (block_n, keys_m, num_warps, maxnreg)):
            return row.spills
    raise ValueError(f"head_dim: no launch config of {arch} launches {head_dim} dims, {rows} rows, "
                     f"{block_n} keys a step, keys_m={keys_m}, {num_warps} warps, maxnreg={maxnreg}")
