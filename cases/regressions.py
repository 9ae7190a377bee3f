"""Regression cases: one per bug that reviews of such kernels found.

Each is named after the failure it provokes. A regression is either a plain
numeric case (judged by the gate like any other) or a probe: a named
procedure in `verify.probes` (several calls, two streams, a CUDA graph, an
allocation count) that ends in a verdict. `verify.mutants` pairs each with a
mutant, the kernel or host code with that one fix taken back, which must FAIL.
"""

from dataclasses import dataclass

from cases.decode import DecodeCase
from cases.kda import KdaCase


@dataclass(frozen=True)
class Regression:
    """name: the failure; finding: what went wrong; case: the numeric case (None for a probe);
    probe: the probe's name in verify.probes (None for a numeric case); gpu: needs a GPU."""

    name: str
    finding: str
    case: object = None
    probe: str | None = None
    gpu: bool = False

    @property
    def id(self) -> str:
        return self.case.id if self.case is not None else f"probe-{self.name}"


def _decode(**kw) -> DecodeCase:
    base = dict(cache="e4m3fn", scales="token", block=16, hq=8, hkv=2, d=64, window=0, lens=(40, 9),
                q=1, layout="shuffled", path="onepass")
    base.update(kw)
    return DecodeCase(**base)


DECODE_REGRESSIONS = (
    Regression("capped-partitions",
               "the partition count was capped for a small grid but each partition still read "
               "partition_size keys, so only n_part * partition_size of the window was attended",
               # 4 CUs cap the partitions whatever a launch row aims for per CU (up to 16): with 32,
               # sm90's one-warp row (12 a CU) needed all 17 and the bug had nothing to cut
               case=_decode(hq=32, hkv=8, d=128, window=4096, lens=(4200, 4500), path="split", cu=4,
                            tag="capped")),
    Regression("two-streams",
               "two split calls in flight on two streams shared one scratch buffer",
               probe="two_streams", gpu=True),
    Regression("head-churn",
               "a head-128 call after a head-64 call with the same partition shape reused the "
               "smaller accumulator and wrote past it",
               probe="head_churn"),
    Regression("shape-churn",
               "partition counts alternating 12/16/20 reallocated the scratch on every call",
               probe="shape_churn"),
    Regression("wild-output-store",
               "a kernel that wrote far outside its output took the whole run down with it; now its case "
               "fails as crashed and a fresh worker goes on",
               case=_decode(lens=(40, 9), path="onepass", tag="wildstore")),
    Regression("endless-loop",
               "a kernel that never returned hung the whole run; now its case fails when its time "
               "limit passes and a fresh worker goes on",
               case=_decode(lens=(40, 9), path="onepass", tag="endless")),
    Regression("nan-unused-v-slots",
               "NaN bytes in the unused slots of a sequence's last page reached the output via 0 * NaN",
               case=_decode(lens=(17, 1), path="onepass", tag="nanslots")),
    Regression("nan-unused-v-scales",
               "inf and NaN per-token V scales of the unused slots past a sequence's end reached the "
               "output via 0 * inf once only the tile at the end masked them",
               case=_decode(lens=(33, 2), path="onepass", tag="nanscales")),
    Regression("empty-partitions",
               "partitions that saw no key left NaN scratch that the reduce folded in; "
               "seq_len 0 rows came back as 0 / 0",
               case=_decode(lens=(0, 1, 700), partition=64, path="split", cu=1024, tag="emptyparts")),
    Regression("cu-num-ignored",
               "the CU count came from the device properties and ignored CU_NUM",
               probe="cu_num"),
    Regression("v-scale-strides",
               "per-token V scales were read with the K scales' strides",
               case=_decode(lens=(70, 33), path="onepass", tag="vstrides")),
    Regression("arrivals-not-reset",
               "a split's last program to arrive folded the partitions but left the row tile's counter "
               "where it stood, so the next call on that scratch counted past the last arrival and "
               "nothing folded: its output kept what it held",
               probe="arrivals_reset"),
    Regression("fold-before-last-arrival",
               "the program before the last to arrive folded, without the last partition's keys when "
               "it came late, and left the counter at 1; each later call on that scratch folded one "
               "arrival earlier, until none folded",
               probe="arrivals_reset"),
    Regression("reduce-batch-stride",
               "the reduce read partials with a wrong batch stride, folding every sequence onto "
               "sequence 0 (batch-1 tests still passed)",
               case=_decode(lens=(300, 700, 50), partition=64, path="split", cu=64, tag="batchfold")),
    Regression("window-off-by-one",
               "the window kept W - 1 keys instead of W",
               case=_decode(window=2, lens=(9, 4), q=2, path="onepass", tag="window2")),
    Regression("graph-growth",
               "the scratch grown after a CUDA graph was captured freed the buffer the graph "
               "still wrote to",
               probe="graph_growth", gpu=True),
    Regression("fp8-subnormals-flushed",
               "the fp8 bit decoder flushed exponent-0 codes to zero, harmless while subnormal codes "
               "are rare (gauss values) and fatal when the scale makes most codes subnormal",
               case=_decode(cache="e4m3fnuz", scales="tensor", dist="subnormal", tag="subflush")),
    Regression("running-max-from-zero",
               "the running max started at 0 instead of -inf, so a row whose scores are all about "
               "-1e4 summed exp(s - 0) = 0 and came back zero",
               case=_decode(dist="hugelogit", tag="maxzero")),
    Regression("running-max-frozen",
               "the running max was set by the first key tile and never raised, exact by shift "
               "invariance until a later key led it by more than 88 and exp overflowed (on a GPU, whose "
               "tiles at D 256 hold 32 keys, 5 of 216 long gauss cases sampled also reach that lead)",
               case=_decode(lens=(700, 300), q=2, dist="peaked", tag="frozenmax")),
    Regression("accumulator-fp16",
               "the P.V accumulator was kept in fp16 between key tiles; with a flat softmax over "
               "hundreds of keys it sums their fp8 codes past 65504 and overflows",
               case=_decode(scales="tensor", lens=(600, 200), dist="flat", tag="acc16")),
    Regression("cache-through-fp16",
               "a 16-bit cache tile was upcast through fp16, exact for every fp8 code and ordinary "
               "bf16 value, inf for bf16 values past fp16's 65504",
               case=_decode(cache="bf16", scales="tensor", dist="saturate", tag="fp16cache")),
    Regression("k-scale-folded-fp16",
               "per-token K scales were folded into the key tile in fp16 before the dot, which "
               "overflows once a token's scale passes 65504 / 448 (about 146)",
               case=_decode(dist="scalespread", tag="kscale16")),
    Regression("fp16-query-unscaled",
               "a bf16 query handed to fp16 dot operands unscaled: rows beyond 65504 become inf "
               "(queries of fp8 caches whose scale makes the codes subnormal reach 1e5 and more)",
               case=_decode(dist="subnormal", tag="q16")),
    Regression("row-tiles-ignored",
               "more query rows for a kv head (GQA 16 x MTP 8: 128) than one program holds; a "
               "program that takes only the first tile leaves the other rows unwritten",
               case=_decode(hq=32, hkv=2, q=8, lens=(90, 40), path="split", cu=64, tag="rowtiles")),
    Regression("reduce-over-kv-heads-only",
               "with the query split (few sequences, MTP) a kv head's rows run as several tiles; a fold "
               "run once per kv head (its last program to arrive) merges only part of them",
               case=_decode(hq=32, hkv=4, q=4, lens=(300, 120), path="split", cu=256, tag="qsplit")),
    Regression("head-padding-unmasked",
               "a head size of 192 runs in 256-wide tiles; unmasked, the padding dims read the next "
               "head's query and write over the next head's output",
               case=_decode(d=192, hq=8, hkv=2, q=2, lens=(70, 20), layout="plain", tag="d192pad")),
    Regression("dim-slices-overlap",
               "a head of 1024 dims runs as dim slices (two on the CPU, four on sm90 and eight on AMD); "
               "slices that all weigh and write the first slice's dims leave the rest of the output and of "
               "the split's accumulator unwritten",
               case=_decode(d=1024, hq=8, hkv=2, lens=(70, 33), path="split", tag="dimslices")),
)


KDA_REGRESSIONS = (
    Regression("kda-zero-seeded-pass-c",
               "pass C recomputed each segment from a zero state instead of its true incoming state",
               case=KdaCase(h=1, dim=64, lens=(200, 1, 0, 129), state="dense", schedule="segmented1")),
    Regression("kda-gate-cumsum-crosses-sequences",
               "chunks ran past their sequence's end, so the gate cumsum crossed into the next sequence",
               case=KdaCase(h=1, dim=64, lens=(0, 1, 15, 70, 0), state="dense", schedule="unsegmented")),
    Regression("kda-paged-state-transposed",
               "the paged state [V, K] was read as [K, V]",
               case=KdaCase(h=1, dim=64, lens=(15, 0, 130, 1), state="paged", schedule="unsegmented")),
    Regression("kda-scan-order",
               "the segment scan added a segment's offset before applying its transition",
               case=KdaCase(h=1, dim=64, lens=(200, 1, 0, 129), gate="softplus", state="dense",
                            schedule="segmented2")),
    Regression("kda-walk-column-blocks-collapsed",
               "the chunk walk took every column block of a unit for its first, so the state's columns "
               "from BLOCK_V on were never walked and o's columns there never written",
               case=KdaCase(h=1, dim=128, b=1, t=130, state="dense", schedule="unsegmented")),
    Regression("kda-transition-column-blocks-collapsed",
               "pass A took every column block of a segment for its first, so each segment's map kept "
               "the identity's first columns everywhere and its offset b was never built",
               case=KdaCase(h=1, dim=64, b=1, t=260, state="dense", schedule="segmented2")),
    Regression("kda-neighbour-chunk-tile",
               "the chunk walk read a workspace tile of the neighbouring chunk",
               case=KdaCase(h=2, dim=64, b=1, t=130, state="dense", schedule="unsegmented")),
    Regression("kda-diagonal-reference-first-row",
               "the diagonal block's sub-blocks met through the gate of the earlier one's first row, "
               "past which 2^(r - gc_j) > 1: a strong decay inside a sub-block overflows it to inf, "
               "and inf times the underflowed other factor is NaN",
               case=KdaCase(h=1, dim=64, b=1, t=200, tag="strongdecay", state="dense", schedule="unsegmented")),
    Regression("kda-diagonal-product-unbounded-gate",
               "the diagonal block taken as one product through its middle row's gate under a gate with "
               "no lower bound: a burst of decay inside the block overflows one factor to inf while "
               "the other underflows to 0, and their product is NaN",
               case=KdaCase(h=1, dim=64, b=1, t=200, tag="strongdecay", schedule="segmented1")),
    Regression("kda-log-gate-clamped-below-zero",
               "the log gate was clamped to at most -1e-3 (a guard against positive log-decays set "
               "too far), so a log-decay of exactly 0 decayed; every other case's lies below -5e-3",
               case=KdaCase(h=1, dim=64, b=1, t=200, state="dense", tag="nodecay", schedule="segmented2")),
    Regression("kda-l2norm-without-epsilon",
               "the in-kernel L2 norm masked padding rows instead of adding its epsilon, so an "
               "all-zero key row became 0 / 0 = NaN",
               case=KdaCase(h=1, dim=64, b=1, t=130, l2norm=True, state="dense", tag="zerokey",
                            schedule="unsegmented")),
    Regression("kda-beta-sigmoid-overflow",
               "the in-kernel sigmoid of beta was written e^x / (1 + e^x): inf / inf = NaN once e^x "
               "overflows fp32 (x > 88.7), where beta is exactly 1",
               case=KdaCase(h=1, dim=64, b=1, t=130, beta_sigmoid=True, tag="beta01", schedule="segmented1")),
    Regression("kda-v-staged-in-fp16",
               "K1 upcast v through fp16, exact for ordinary bf16 values and inf for those past 65504",
               case=KdaCase(h=1, dim=64, b=1, t=130, state="dense", tag="bigvalues", schedule="unsegmented")),
    Regression("kda-slow-decay-flushed",
               "log-decays within 2^-10 of 0 (a decay that rounds to 1 in bf16) were skipped, which "
               "only a slow gate's state notices, many chunks and segments later",
               case=KdaCase(h=1, dim=64, b=1, t=260, state="dense", tag="slowdecay", schedule="segmented2")),
    Regression("kda-fp16-read-as-bf16",
               "K1 read the 16-bit words of q as bf16: exact for bf16 inputs, garbage for float16 ones",
               case=KdaCase(h=1, dim=64, b=1, t=130, dtype="f16", state="dense", schedule="segmented1")),
)

# The decode regressions whose bug the Gluon kernel could repeat in its own code (kernels/paged_decode/
# gluon_partition.py), each run through the Gluon path: `gluon-<name>`, GPU only (the interpreter cannot run
# Gluon). Its mutant takes the fix back in the Gluon source (verify.mutants).
GLUON_TWINS = ("wild-output-store", "endless-loop", "nan-unused-v-slots", "nan-unused-v-scales", "empty-partitions",
               "v-scale-strides", "reduce-batch-stride", "window-off-by-one", "fp8-subnormals-flushed",
               "running-max-from-zero", "running-max-frozen", "accumulator-fp16", "cache-through-fp16",
               "fp16-query-unscaled", "row-tiles-ignored", "reduce-over-kv-heads-only", "head-padding-unmasked",
               "dim-slices-overlap")
_BY_NAME = {reg.name: reg for reg in DECODE_REGRESSIONS}
GLUON_REGRESSIONS = tuple(Regression(f"gluon-{name}", f"(the Gluon kernel) {_BY_NAME[name].finding}",
                                     case=_BY_NAME[name].case.with_path("gluon"), gpu=True) for name in GLUON_TWINS)
# The Gluon kernel's fold through shared memory (kernels.paged_decode.tuning, LaunchConfig.staged_fold) has its
# own mask for partitions that hold no key: sm90's one-warp row folds these 32 partitions of 64 keys that way.
GLUON_REGRESSIONS += (Regression("gluon-staged-empty-partitions",
                                 "(the Gluon kernel's fold through shared memory) partitions that saw no key left NaN "
                                 "scratch that the fold took in",
                                 case=_decode(hq=32, hkv=8, d=128, lens=(0, 1, 4096), partition=64, path="gluon",
                                              cu=64, tag="stagedempty"), gpu=True),)

ALL = DECODE_REGRESSIONS + GLUON_REGRESSIONS + KDA_REGRESSIONS


def by_name(name: str) -> Regression:
    for reg in ALL:
        if reg.name == name:
            return reg
    raise ValueError(f"regression: expected one of {[r.name for r in ALL]}, got {name!r}")
