"""Launch configurations of the KDA forward, per arch: data, chosen by `kernels.arch`.

For each head size K a row gives the warps, the software-pipelining stages
(None: Triton's default) and, on NVIDIA, any register cap of K1's three
kernels (stage, intra, solve), of the chunk walk (which pass A, the transition
kernel, shares) and of pass B (the scan). For the arch: the input precision of
pass B's fp32 product M S_in, which must stay about fp32 (NVIDIA: 'tf32x3';
AMD's backend has no tf32x3, and 'ieee' is exact fp32), that of the merges
that invert the diagonal blocks of T (in intra; NVIDIA 'tf32': T goes to bf16
operands next, and tf32x3 there took the solve, which held them, from 1069 to 1367 us at
1x8192x96 on the H200, the forward 1.07x to 1.09x on every bench.kda row; AMD
'ieee'), and, for a kernel whose every config tried on that arch spills, why
(a compile report counts those spills as known). `config(arch, K)` picks the
row; an arch without a table gets DEFAULT.
"""

from dataclasses import dataclass, field

SUB_BLOCK = 16  # rows of K1's [BC, BC] sub-blocks (the chunk of 64 rows is 4 of them)


@dataclass(frozen=True)
class KernelConfig:
    """Triton launch options of one kernel: warps, stages (None: Triton's default), on AMD the
    waves per SIMD the compiler must leave room for, on NVIDIA a cap on the registers a thread
    (maxnreg: more programs an SM, at the price of spills); None leaves either to the compiler."""

    num_warps: int
    num_stages: int | None = None
    waves_per_eu: int | None = None
    maxnreg: int | None = None

    @property
    def options(self) -> dict:
        chosen = {"num_warps": self.num_warps, "num_stages": self.num_stages, "waves_per_eu": self.waves_per_eu,
                  "maxnreg": self.maxnreg}
        return {name: value for name, value in chosen.items() if value is not None}


@dataclass(frozen=True)
class KdaConfig:
    """stage, intra, solve: K1's kernels; walk: the chunk walk; transition: pass A (each segment
    walked from zero, carrying the segment's transition M); scan: pass B (it holds M [K, K]);
    columns: the width of the solve kernel's column blocks (capped at K and V); stage_columns: the
    stage kernel's own (capped at K); scan_columns: the state columns one pass B program carries
    (at most 64, so it divides every V; its programs are sequences x heads x V / scan_columns, and
    each step's product M S_in is [K, K] x [K, scan_columns]);
    exact_rows: the rows of the intra kernel's diagonal sub-blocks, inside which pairs take exact
    exponents one row a step (a divisor of the 16-row block; the sub-blocks meet by products)."""

    stage: KernelConfig
    intra: KernelConfig
    solve: KernelConfig
    walk: KernelConfig
    transition: KernelConfig
    scan: KernelConfig
    columns: int = 64
    stage_columns: int = 64
    scan_columns: int = 64
    exact_rows: int = 8

    def __post_init__(self):
        # 32 columns gave wrong w and u from the solve kernel on the H200 (triton 3.6; right under the
        # interpreter, and with 64 or 128): bench/NOTES.md.
        if self.columns not in (64, 128):
            raise ValueError(f"columns: expected 64 or 128, got {self.columns}")
        if self.stage_columns not in (64, 128):
            raise ValueError(f"stage_columns: expected 64 or 128, got {self.stage_columns}")
        if self.scan_columns not in (16, 32, 64):
            raise ValueError(f"scan_columns: expected 16, 32 or 64, got {self.scan_columns}")
        if not 1 <= self.exact_rows <= SUB_BLOCK or SUB_BLOCK % self.exact_rows:
            raise ValueError(f"exact_rows: expected a divisor of {SUB_BLOCK}, got {self.exact_rows}")


@dataclass(frozen=True)
class ArchTuning:
    """rows: {K: KdaConfig}; scan_precision: tl.dot input precision of pass B; solve_precision:
    that of the products that invert the diagonal [16, 16] blocks of T (intra's);
    spills: {kernel name: why it spills on this arch}."""

    rows: dict
    scan_precision: str = "tf32x3"
    solve_precision: str = "tf32"
    spills: dict = field(default_factory=dict)


# K1 as three kernels at four warps each: on the H200 (1x8192x96) eight warps made stage 1.11x and
# intra 1.07x slower, two warps made stage 1.09x and intra 1.15x slower, eight warps for solve 1.85x
# slower (bench/NOTES.md). sm90, triton 3.9: stage 141, intra 142, solve 254 registers (99 KB of shared
# memory: two programs an SM), no spill.
# exact_rows 8: the diagonal block's two halves meet in one product, 8 exact steps instead of 16; intra
# 1730 -> 1401 us at 1x8192x96 on the H200, the forward 0.925 to 0.952 of its time with 16 on every bench.kda
# row; 4 (three products, four steps) took the same within 0.3%, 2 no less than 16 (bench/NOTES.md). sm90,
# triton 3.9: intra 146 registers at K 128 (142 with 16), no spill.
# stage_columns 128 (the stage takes a K 128 head in one block): stage 498 -> 443 us at 1x8192x96 on the H200,
# the forward 0.982 to 1.004 of its time with 64 on every bench.kda row (bench/NOTES.md); the same width
# for intra and solve (`columns`) made intra 1.13x slower.
_K1 = dict(stage=KernelConfig(4), intra=KernelConfig(4), solve=KernelConfig(4))
# intra on one warp: its tiles are [16, K] and [16, 16] products, which four warps held in copies; with
# the earlier rows taken a 16-row block at a time, intra 1281 (four warps, one [16, 64] product over
# them) -> 858 (two warps) -> 710 us (one) at 1x8192x96 on the H200, the forward 0.950 of two warps and
# 0.84 to 0.96 of four on every bench.kda row; solve on two warps 1.37x slower. At K = V = 64 intra 616
# (main) -> 311 us (one warp; 897 with the new loop on four), the forward 0.85 to 0.93 of main's (bench/NOTES.md).
_K1_SM90 = dict(_K1, intra=KernelConfig(1))
# At K 128 sm90 caps the solve at 168 registers a thread, three programs an SM instead of two (183 to 242
# uncapped): on the H200 the solve 1071 -> 956 us at 1x8192x96, 0.96 to 0.98 of the forward's time uncapped on
# the bench.kda rows from 1x4096x12 on (1.01 at 1x1024x12), outputs bit-identical; a cap of 128 (four programs)
# made it slower (1105) (bench/NOTES.md); with the diagonal blocks' inverse moved to intra it takes 127 to 165
# registers, under the cap (K 64: 123, no cap there). The
# stage, which now stages gc alone, took the same time with a cap of 168 as without (0.999 of the forward).
# intra on two warps at K 128, since it also writes qg, kg and beta k 2^gc (one warp: 255 registers and a stack
# of 1128 bytes): intra 1333 -> 724 us at 1x8192x96 on the H200, the forward 0.78 to 0.93 of one warp's time on
# four bench.kda rows; with the diagonal blocks' inverse moved in from the solve, intra 850 and the solve 404
# (bench/NOTES.md). Timed again against it on the H200 with the inverse in intra (sm90, triton 3.9, the bench's
# specialization: 217 registers, no stack, eight warps an SM), each slower on the forward in geomean over the
# eight bench.kda rows: four warps (156, no stack, twelve) 1.039, eight (128, no stack, sixteen) 1.230, four
# capped at 128 (an 88-byte stack, sixteen) 1.012, two capped at 168 (360 bytes, twelve) 1.007 (bench/NOTES.md).
_K1_SM90_K128 = dict(_K1_SM90, intra=KernelConfig(2), solve=KernelConfig(4, maxnreg=168))
# Pass B on 16 state columns a program at K 128 (eight programs a head instead of two; each step's
# [128, 128] x [128, 16] product is a quarter of the work): on an H100 the scan 22.3 -> 12.7 us at
# 1x1024x12, 33.3 -> 18.5 at 1x4096x12, 33.9 -> 18.7 at 1x16384x12, the forward 0.877 / 0.942 / 0.982 of
# its time on 64 columns, outputs bit-identical; 32 columns 0.899 / 0.955 / 0.987; four warps slower than
# 64 columns on eight (1.007 to 1.057) (bench/NOTES.md). The other bench.kda rows walk unsegmented.
# Pass A on two pipelining stages at K 128: at Triton's three it holds 132 KB of shared memory (one program an
# SM), so the 2 x 120 programs of the one-wave plan for 24 walkers ran in two waves (bench/NOTES.md); at two,
# 91 KB and 172 registers (sm90, triton 3.9; 160 at three): two programs an SM, one wave. On an H100 pass A
# took 0.80 of its time at 1x4096x12 and 0.82 at 1x16384x12, the forward 0.97 at both, outputs bit-identical
# (bench/NOTES.md). The walk keeps three stages: one and two made it slower on the H200 even where one fitted
# it in one wave.
_NVIDIA = {64: KdaConfig(**_K1_SM90, walk=KernelConfig(4), transition=KernelConfig(4), scan=KernelConfig(4),
                         stage_columns=128),
           128: KdaConfig(**_K1_SM90_K128, walk=KernelConfig(4), transition=KernelConfig(4, 2), scan=KernelConfig(8),
                          stage_columns=128, scan_columns=16)}

# AMD (from `quantfloor compile`, nothing timed): one pipelining stage for the walk, pass A and pass B, whose
# prefetched [64, K] tiles otherwise pass gfx942's 64 KiB of LDS at K = 128 (72 KiB for the walk, 96 KiB for
# pass B with 8 warps); exact fp32 for pass B.
_AMD = {64: KdaConfig(**_K1, walk=KernelConfig(4, 1), transition=KernelConfig(4, 1), scan=KernelConfig(4, 1)),
        128: KdaConfig(**_K1, walk=KernelConfig(4, 1), transition=KernelConfig(4, 1), scan=KernelConfig(8, 1))}

_SM90_INTRA = ("intra's [16, K] q, k and gc tiles, their products, the diagonal block's inverse and the rows' qg, "
               "kg and beta k 2^gc: at K 128 on two warps, 255 registers and a stack of 320 to 360 bytes with one "
               "product (a gate bounded below; none with the exact halves; triton 3.9); on one warp 1128 bytes "
               "(before the inverse), and intra 1333 against 724 us at 1x8192x96 on the H200 (bench/NOTES.md)")

_SM90_SCAN = ("pass B at K 128 holds M [K, K] and the state's [K, 64] block with M S_in at tf32x3: with triton 3.6 "
              "(the H200's) 255 registers and a stack of 184 to 200 bytes on eight warps, 1024 on four, 472 on sixteen "
              "(128 registers); with triton 3.9 none on eight warps (bench/NOTES.md)")

TABLES = {
    "gfx942": ArchTuning(rows=_AMD, scan_precision="ieee", solve_precision="ieee"),
    "gfx950": ArchTuning(rows=_AMD, scan_precision="ieee", solve_precision="ieee"),
    "gfx1250": ArchTuning(rows=_AMD, scan_precision="ieee", solve_precision="ieee"),
    "sm90": ArchTuning(rows=_NVIDIA, spills={"kda_intra_kernel": _SM90_INTRA, "kda_scan_kernel": _SM90_SCAN}),
}
DEFAULT = ArchTuning(rows=_NVIDIA)


def tuning(arch: str) -> ArchTuning:
    """The table of `arch` ('sm90', 'gfx942', 'cpu', ...), DEFAULT where it has none."""
    return TABLES.get(arch, DEFAULT)


def config(arch: str, dim_k: int) -> KdaConfig:
    """The launch configs for head size `dim_k` on `arch`."""
    rows = tuning(arch).rows
    if dim_k not in rows:
        raise ValueError(f"dim_k: no KDA launch config for K={dim_k} on {arch}")
    return rows[dim_k]
