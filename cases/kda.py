"""KDA cases: a frozen spec with a stable id, the tensors it builds, the tiers' lists.

Id: `kda-b{B}-t{T}` (or `kda-L{l0_l1_..}` for varlen, B == 1), then
`-h{H}-k{K}`, `-f16` for float16 inputs (bf16, the default, is not written),
`-{gate}`, `-sig` (beta through a sigmoid in kernel), `-l2` (q/k L2 norm in
kernel), the state (`none`, `dense`, `vfirst`, `paged`), an optional tag naming
the failure the case provokes, and last the schedule (`auto`, `unsegmented`,
`segmented{n}` chunks per segment). The seed comes from the id.

Tags:
- `strongdecay`: g = -1000 bursts on the log gate; a saturated lower-bound gate.
- `rho09` / `rho1`: correlated keys, beta = sigmoid(4).
- `nanws`: the workspace NaN-filled before a second call.
- `bands`: q, k, v as views of one fused projection, read in place.
- `nodecay`: a log-decay of exactly 0 on every token, so nothing fades and every
  error persists: g = 0 on the log gate; raw g = NO_DECAY_RAW_G on the in-kernel
  gates, where softplus(x) and sigmoid(rate * x) underflow to exactly 0 in fp32
  and in float64.
- `zerokey`: all-zero k rows (ZERO_KEY_FRACTION of them at random, the first and
  last token, one whole chunk); under the in-kernel L2 norm only its epsilon
  keeps 0 / sqrt(0) from being NaN.
- `beta01`: beta exactly 0 and exactly 1 on a third of the tokens each. With
  `-sig` the raw beta is -BETA_SATURATED or +BETA_SATURATED (see there).
- `bigvalues`: |v| around 1e4 (BIG_V), past float16's 65504 at the tails, and
  initial states to match; with `-l2` raw q and k too (BIG_QK), which the
  kernel normalizes (the delta rule needs beta |k|^2 <= 2 only after it).
- `slowdecay`: per-token decays in (0.99, 1) on most channels, as lower-bound
  gates give, with every FAST_CHANNEL_EVERY-th channel fast, so a state handed
  from one chunk or segment to the next still matters many chunks later.
"""

import itertools
import math
import re
from dataclasses import dataclass

import torch

GATES = ("log", "softplus", "lower_bound")
STATES = ("none", "dense", "vfirst", "paged")
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
TAGS = ("", "strongdecay", "rho09", "rho1", "nanws", "bands", "nodecay", "zerokey", "beta01", "bigvalues",
        "slowdecay")
LOWER_BOUND = -5.0
CHUNK = 64  # tokens per chunk of the kernels judged (kernels.kda.api.CHUNK), for whole-chunk patterns
# x = raw g + dt_bias <= -990: exp(-990) is 0 in fp32 and float64, so softplus(x) and
# sigmoid(rate * x) are exactly 0, and so is the log-decay. -1000 is exact in bf16 and fp16.
NO_DECAY_RAW_G = -1000.0
ZERO_KEY_FRACTION = 0.15
# sigmoid(-128) and sigmoid(128) are exactly 0 and 1 in fp32, whichever way it is written:
# exp(128) overflows to inf and exp(-128) = 2.6e-56 underflows to 0 (fp32 stops at 1.4e-45),
# the first power of two past fp32's exp range (e^88.7). float64 gives 2.6e-56 and exactly 1.
# 128 is exact in bf16 and fp16.
BETA_SATURATED = 128.0
BIG_V = 2.0e4  # N(0, 1) * 2e4: mean |v| 1.6e4, max past 65504 over a few thousand elements
BIG_QK = 1.0e4  # raw q and k of `-l2` bigvalues cases: legal, the kernel normalizes them
SLOW_DECAY = (1e-4, 1e-2)  # per-token log-decay magnitudes of slow channels, log-uniform
FAST_DECAY = (5e-2, 5e-1)  # those of the fast channels
FAST_CHANNEL_EVERY = 8
_ID = re.compile(
    r"kda-(?:b(?P<b>\d+)-t(?P<t>\d+)|L(?P<lens>\d+(?:_\d+)*))-h(?P<h>\d+)-k(?P<dim>\d+)(?:-(?P<dtype>f16))?"
    r"-(?P<gate>log|softplus|lower_bound)(?P<sig>-sig)?(?P<l2>-l2)?-(?P<state>none|dense|vfirst|paged)"
    r"(?:-(?P<tag>strongdecay|rho09|rho1|nanws|bands|nodecay|zerokey|beta01|bigvalues|slowdecay))?"
    r"-(?P<schedule>auto|unsegmented|segmented\d+)"
)


@dataclass(frozen=True)
class KdaCase:
    """B sequences of T tokens (or varlen `lens` with B == 1), H heads, K = V = dim, inputs in `dtype`."""

    h: int
    dim: int
    gate: str = "log"
    beta_sigmoid: bool = False
    l2norm: bool = False
    state: str = "none"
    schedule: str = "auto"
    b: int = 1
    t: int = 0
    lens: tuple = ()
    tag: str = ""
    dtype: str = "bf16"

    def __post_init__(self):
        if self.gate not in GATES or self.state not in STATES or self.tag not in TAGS or self.dtype not in DTYPES:
            raise ValueError(f"KdaCase: unknown gate/state/tag/dtype in {self}")
        if not re.fullmatch(r"auto|unsegmented|segmented\d+", self.schedule):
            raise ValueError(f"KdaCase: schedule must be auto, unsegmented or segmented<n>, got {self.schedule!r}")
        if self.lens and self.b != 1:
            raise ValueError(f"KdaCase: varlen cases have b == 1, got {self}")
        if self.tag == "bigvalues" and self.dtype == "f16":
            raise ValueError(f"KdaCase: bigvalues needs bf16 inputs (|v| passes float16's 65504), got {self}")

    @property
    def id(self) -> str:
        shape = "L" + "_".join(map(str, self.lens)) if self.lens else f"b{self.b}-t{self.t}"
        parts = [f"kda-{shape}-h{self.h}-k{self.dim}"]
        if self.dtype != "bf16":
            parts.append(self.dtype)
        parts.append(self.gate)
        if self.beta_sigmoid:
            parts.append("sig")
        if self.l2norm:
            parts.append("l2")
        parts.append(self.state)
        if self.tag:
            parts.append(self.tag)
        parts.append(self.schedule)
        return "-".join(parts)

    @classmethod
    def from_id(cls, case_id: str) -> "KdaCase":
        m = _ID.fullmatch(case_id)
        if m is None:
            raise ValueError(f"case id: expected a KDA id like kda-b1-t65-h1-k64-log-none-auto, got {case_id!r}")
        g = m.groupdict()
        lens = tuple(int(x) for x in g["lens"].split("_")) if g["lens"] else ()
        return cls(h=int(g["h"]), dim=int(g["dim"]), gate=g["gate"], beta_sigmoid=bool(g["sig"]),
                   l2norm=bool(g["l2"]), state=g["state"], schedule=g["schedule"], b=int(g["b"] or 1),
                   t=int(g["t"] or 0), lens=lens, tag=g["tag"] or "", dtype=g["dtype"] or "bf16")

    @property
    def chunks_per_segment(self):
        """The kernel argument: None (auto), 0 (unsegmented) or n (segmented)."""
        if self.schedule == "auto":
            return None
        return 0 if self.schedule == "unsegmented" else int(self.schedule[len("segmented"):])

    @property
    def num_seqs(self) -> int:
        return len(self.lens) if self.lens else self.b


@dataclass
class KdaInputs:
    """The kernel's arguments for one case (activations and out in the case's dtype, fp32 gate
    parameters and states)."""

    case: KdaCase
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    kwargs: dict  # every keyword argument but chunks_per_segment, workspace and out
    out: torch.Tensor


def _inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    return x + torch.log(-torch.expm1(-x))


def _zero_key_rows(B: int, T: int, H: int, gen) -> torch.Tensor:
    """[B, T, H] bool: ZERO_KEY_FRACTION of the rows at random, every head's first and last
    token, and the middle chunk whole."""
    rows = torch.rand(B, T, H, generator=gen) < ZERO_KEY_FRACTION
    middle = (T // CHUNK) // 2 * CHUNK
    rows[:, middle:middle + CHUNK] = True
    rows[:, [0, T - 1] if T else []] = True
    return rows


def _channel_decay(H: int, D: int, gen) -> torch.Tensor:
    """[H * D] per-channel log-decay magnitudes of a slow gate: log-uniform in SLOW_DECAY, every
    FAST_CHANNEL_EVERY-th channel in FAST_DECAY."""
    def log_uniform(lo, hi):
        return torch.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * torch.rand(H * D, generator=gen))

    fast = torch.arange(H * D) % FAST_CHANNEL_EVERY == FAST_CHANNEL_EVERY - 1
    return torch.where(fast, log_uniform(*FAST_DECAY), log_uniform(*SLOW_DECAY))


def build(case: KdaCase, device, seed: int) -> KdaInputs:
    """The tensors of `case`, drawn on the CPU from `seed`, then moved to `device`."""
    gen = torch.Generator().manual_seed(seed)
    H, D = case.h, case.dim
    if case.lens:
        B, T = 1, sum(case.lens)
    else:
        B, T = case.b, case.t

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    q = randn(B, T, H, D)
    if case.tag in ("rho09", "rho1"):
        rho = 0.9 if case.tag == "rho09" else 1.0
        common = randn(1, 1, H, D)
        k = rho * common + math.sqrt(1 - rho * rho) * randn(B, T, H, D)
    else:
        k = randn(B, T, H, D)
    if not case.l2norm:
        k = k / k.norm(dim=-1, keepdim=True)  # the delta rule needs beta * |k|^2 <= 2
    v = randn(B, T, H, D)
    state_scale = 0.5
    if case.tag == "bigvalues":
        v, state_scale = BIG_V * v, 0.5 * BIG_V
        if case.l2norm:
            q, k = BIG_QK * q, BIG_QK * k
    if case.tag == "zerokey":
        k = torch.where(_zero_key_rows(B, T, H, gen)[..., None], 0.0, k)

    kwargs = dict(gate=case.gate, beta_sigmoid=case.beta_sigmoid, qk_l2norm=case.l2norm, scale=D ** -0.5)
    if case.gate == "log":
        if case.tag == "nodecay":
            g = torch.zeros(B, T, H, D)
        elif case.tag == "slowdecay":
            g = -_channel_decay(H, D, gen).view(H, D) * torch.exp(0.3 * randn(B, T, H, D))
        else:
            g = -torch.exp(0.5 * randn(B, T, H, D) - 3.0)
        if case.tag == "strongdecay":
            g = torch.where(torch.rand(B, T, H, D, generator=gen) < 0.1, torch.full_like(g, -1000.0), g)
    else:
        a_log = torch.log(1.0 + 15.0 * torch.rand(H, generator=gen))
        if case.gate == "softplus":
            dt_bias = _inverse_softplus(0.001 + 0.099 * torch.rand(H * D, generator=gen))
            g = 0.5 * randn(B, T, H, D)
        else:
            dt_bias = 0.1 * randn(H * D)
            g = randn(B, T, H, D) + (30.0 if case.tag == "strongdecay" else 0.0)
            kwargs["lower_bound"] = LOWER_BOUND
        if case.tag == "nodecay":
            g = torch.full_like(g, NO_DECAY_RAW_G)
        if case.tag == "slowdecay":
            # rate 1 and a per-channel bias that puts the log-decay at -_channel_decay, jittered
            # by exp(0.3 z) per token as on the log gate (softplus(x) ~ e^x, sigmoid(x) ~ e^x there)
            a_log = torch.zeros(H)
            decay = _channel_decay(H, D, gen)
            if case.gate == "softplus":
                dt_bias = _inverse_softplus(decay)
            else:
                p = decay / -LOWER_BOUND
                dt_bias = torch.log(p) - torch.log1p(-p)
            g = 0.3 * randn(B, T, H, D)
        kwargs["A_log"] = a_log.float().to(device)
        kwargs["dt_bias"] = dt_bias.float().to(device)

    correlated = case.tag in ("rho09", "rho1")
    if case.beta_sigmoid:
        beta = torch.full((B, T, H), 4.0) if correlated else randn(B, T, H)
    else:
        beta = torch.full((B, T, H), 1 / (1 + math.exp(-4.0))) if correlated else torch.sigmoid(randn(B, T, H))
    if case.tag == "beta01":
        pick = torch.randint(0, 3, (B, T, H), generator=gen)  # 0: beta 0, 1: beta 1, 2: as drawn
        zero, one = (-BETA_SATURATED, BETA_SATURATED) if case.beta_sigmoid else (0.0, 1.0)
        beta = torch.where(pick == 0, zero, torch.where(pick == 1, one, beta))

    n = case.num_seqs
    if case.lens:
        kwargs["cu_seqlens"] = torch.tensor([0] + list(_cumsum(case.lens)), dtype=torch.int32, device=device)
    if case.state in ("dense", "vfirst"):
        kwargs["initial_state"] = (state_scale * randn(n, H, D, D)).to(device)
        kwargs["state_v_first"] = case.state == "vfirst"
    if case.state == "paged":
        slots = n + 2
        padded = torch.full((slots, H * D * D + 64), float("nan"))
        cache = padded[:, : H * D * D].view(slots, H, D, D)
        order = torch.randperm(slots, generator=gen)
        indices = order[:n]
        cache[order[: n + 1]] = state_scale * randn(n + 1, H, D, D)  # slot order[n + 1] stays NaN: nobody's
        has_initial = torch.arange(n) % 2 == 0
        kwargs["state_cache"] = padded.to(device)[:, : H * D * D].view(slots, H, D, D)
        kwargs["state_indices"] = indices.to(torch.int32).to(device)
        kwargs["has_initial_state"] = has_initial.to(device)
    else:
        kwargs["output_final_state"] = True

    to = dict(device=device, dtype=DTYPES[case.dtype])
    if case.tag == "bands":
        fused = torch.cat([q.reshape(B, T, H * D), k.reshape(B, T, H * D), v.reshape(B, T, H * D)], dim=-1)
        fused = fused.to(**to)
        q, k, v = (fused[..., i * H * D:(i + 1) * H * D].view(B, T, H, D) for i in range(3))
    else:
        q, k, v = q.to(**to), k.to(**to), v.to(**to)
    return KdaInputs(case=case, q=q, k=k, v=v, g=g.to(**to), beta=beta.to(**to), kwargs=kwargs,
                     out=torch.full((B, T, H, D), float("nan"), **to))


def build_meta(case: KdaCase) -> KdaInputs:
    """The inputs of `case` as `build` makes them, on torch's meta device: every shape, stride,
    dtype and storage offset, no values (what a launch is decided from; kernels.arch.planned).
    cu_seqlens alone holds values, on the CPU: the host reads it to cut chunks, no kernel does."""
    meta = dict(device="meta")
    H, D = case.h, case.dim
    B, T = (1, sum(case.lens)) if case.lens else (case.b, case.t)
    n = case.num_seqs
    to = dict(meta, dtype=DTYPES[case.dtype])
    kwargs = dict(gate=case.gate, beta_sigmoid=case.beta_sigmoid, qk_l2norm=case.l2norm, scale=D ** -0.5)
    if case.gate != "log":
        kwargs["A_log"] = torch.empty(H, **meta)
        kwargs["dt_bias"] = torch.empty(H * D, **meta)
        if case.gate == "lower_bound":
            kwargs["lower_bound"] = LOWER_BOUND
    if case.lens:
        kwargs["cu_seqlens"] = torch.tensor([0] + list(_cumsum(case.lens)), dtype=torch.int32)
    if case.state in ("dense", "vfirst"):
        kwargs["initial_state"] = torch.empty(n, H, D, D, **meta)
        kwargs["state_v_first"] = case.state == "vfirst"
    if case.state == "paged":
        slots = n + 2
        kwargs["state_cache"] = torch.empty(slots, H * D * D + 64, **meta)[:, : H * D * D].view(slots, H, D, D)
        kwargs["state_indices"] = torch.empty(n, dtype=torch.int32, **meta)
        kwargs["has_initial_state"] = torch.empty(n, dtype=torch.bool, **meta)
    else:
        kwargs["output_final_state"] = True
    if case.tag == "bands":
        fused = torch.empty(B, T, 3 * H * D, **to)
        q, k, v = (fused[..., i * H * D:(i + 1) * H * D].view(B, T, H, D) for i in range(3))
    else:
        q, k, v = (torch.empty(B, T, H, D, **to) for _ in range(3))
    return KdaInputs(case=case, q=q, k=k, v=v, g=torch.empty(B, T, H, D, **to), beta=torch.empty(B, T, H, **to),
                     kwargs=kwargs, out=torch.empty(B, T, H, D, **to))


def _cumsum(lens):
    total = 0
    for n in lens:
        total += n
        yield total


def _profiles(*profiles, **common) -> tuple:
    """Each profile's case fields over the fields all of them share."""
    return tuple({**common, **p} for p in profiles)


# The adversarial matrix: every row x SCHEDULES x MATRIX_STATES. A row is a tag (or the
# float16 dtype) and the profiles it is tried with: the case fields besides shape, state and
# schedule. The CPU tier deals a row's profiles over its schedule x state cells in turn; the
# GPU tiers run every profile in every cell, larger.
SCHEDULES = ("unsegmented", "segmented1", "segmented2", "segmented8")
MATRIX_STATES = ("none", "dense")
MATRIX_ROWS = {
    "nodecay": _profiles({}, {"gate": "softplus", "beta_sigmoid": True}, {"gate": "lower_bound", "l2norm": True},
                         tag="nodecay"),
    "zerokey": _profiles({}, {"gate": "softplus", "beta_sigmoid": True}, tag="zerokey", l2norm=True),
    "beta01": _profiles({"beta_sigmoid": True}, {"l2norm": True}, tag="beta01"),
    "bigvalues": _profiles({"l2norm": True}, {"gate": "softplus", "beta_sigmoid": True}, tag="bigvalues"),
    "slowdecay": _profiles({"gate": "lower_bound", "beta_sigmoid": True, "l2norm": True}, {},
                           {"gate": "softplus", "l2norm": True}, tag="slowdecay"),
    "fp16": _profiles({}, {"gate": "lower_bound", "beta_sigmoid": True, "l2norm": True}, dtype="f16"),
    "strongdecay": _profiles({}, {"gate": "lower_bound"}, tag="strongdecay"),
    "rho09": _profiles({}, tag="rho09", beta_sigmoid=True, l2norm=True),
    "rho1": _profiles({}, tag="rho1", beta_sigmoid=True, l2norm=True),
    "nanws": _profiles({}, tag="nanws"),
    "bands": _profiles({}, tag="bands", gate="softplus"),
}
CPU_ROWS = ("nodecay", "zerokey", "beta01", "bigvalues", "slowdecay", "fp16")
# T = 520: nine chunks, so segmented8 has two segments (8 + 1) and segmented1 nine.
MATRIX_SHAPES = {"cpu": dict(h=1, dim=64, t=520), "gpu": dict(dim=128, t=4096)}
GPU_HEADS = (4, 8, 16)  # the GPU matrix's head counts, taken in turn over schedules and profiles


def matrix_cases(tier: str) -> list[KdaCase]:
    """The adversarial matrix of a tier: rows x SCHEDULES x MATRIX_STATES (see MATRIX_ROWS)."""
    cpu = tier == "cpu"
    shape = MATRIX_SHAPES["cpu" if cpu else "gpu"]
    out = []
    for name in CPU_ROWS if cpu else MATRIX_ROWS:
        profiles = MATRIX_ROWS[name]
        for (i, schedule), (j, state) in itertools.product(enumerate(SCHEDULES), enumerate(MATRIX_STATES)):
            chosen = (profiles[(i + j) % len(profiles)],) if cpu else profiles
            for p, fields in enumerate(chosen):
                heads = {} if cpu else {"h": GPU_HEADS[(i + p) % len(GPU_HEADS)]}
                out.append(KdaCase(**shape, **heads, **fields, state=state, schedule=schedule))
    return out


def kda_cases(tier: str) -> list[KdaCase]:
    """The KDA cases of a tier: small shapes under the interpreter, up to T = 16384, H = 96 on a GPU,
    and the adversarial matrix."""
    small = [
        KdaCase(h=1, dim=64, b=1, t=1),
        KdaCase(h=2, dim=64, b=2, t=63, gate="softplus", beta_sigmoid=True, l2norm=True),
        KdaCase(h=1, dim=64, b=1, t=65, state="dense"),
        KdaCase(h=1, dim=128, b=1, t=65, gate="lower_bound", beta_sigmoid=True, state="vfirst"),
        KdaCase(h=2, dim=64, b=1, t=192, gate="softplus", l2norm=True, state="dense"),
        KdaCase(h=1, dim=64, b=1, t=200, gate="lower_bound"),
        KdaCase(h=1, dim=64, b=1, t=320, beta_sigmoid=True, l2norm=True, state="dense"),
        KdaCase(h=2, dim=64, lens=(0, 1, 15, 64, 65, 128), gate="softplus", beta_sigmoid=True, state="dense"),
        KdaCase(h=1, dim=64, lens=(15, 0, 130, 1), state="paged"),
        KdaCase(h=1, dim=64, b=1, t=200, tag="strongdecay"),
        KdaCase(h=1, dim=64, b=1, t=200, gate="lower_bound", tag="strongdecay", state="dense"),
        KdaCase(h=1, dim=64, b=1, t=130, l2norm=True, beta_sigmoid=True, tag="rho09"),
        KdaCase(h=1, dim=64, b=1, t=130, l2norm=True, beta_sigmoid=True, tag="rho1"),
        KdaCase(h=2, dim=64, b=1, t=100, state="dense", tag="nanws"),
        KdaCase(h=2, dim=64, b=1, t=70, gate="softplus", tag="bands"),
    ]
    segmented = []
    for n in (1, 2, 3, 8):
        segmented.append(KdaCase(h=1, dim=64, b=1, t=520, state="dense", schedule=f"segmented{n}"))
    segmented.append(KdaCase(h=1, dim=64, b=1, t=520, state="dense", schedule="unsegmented"))
    segmented.append(KdaCase(h=1, dim=64, lens=(200, 0, 300), state="paged", schedule="segmented2"))
    if tier == "cpu":
        return small + segmented + matrix_cases(tier)
    large = [
        KdaCase(h=96, dim=128, b=1, t=16384, gate="softplus", beta_sigmoid=True, l2norm=True, state="dense"),
        KdaCase(h=12, dim=128, b=1, t=16384, gate="softplus", beta_sigmoid=True, l2norm=True, state="dense"),
        KdaCase(h=4, dim=128, b=1, t=16384, gate="lower_bound", beta_sigmoid=True, l2norm=True),
        KdaCase(h=64, dim=128, b=1, t=8192, gate="softplus", beta_sigmoid=True, l2norm=True),
        KdaCase(h=16, dim=128, b=4, t=4096, state="vfirst"),
        KdaCase(h=12, dim=128, lens=(2000, 0, 1, 6000, 333), gate="softplus", beta_sigmoid=True, l2norm=True,
                state="paged"),
        KdaCase(h=24, dim=128, b=1, t=4096, gate="softplus", tag="bands"),
        KdaCase(h=12, dim=64, b=1, t=8192, state="dense", schedule="segmented8"),
        KdaCase(h=12, dim=64, b=1, t=8192, state="dense", schedule="unsegmented"),
    ]
    return small + segmented + large + matrix_cases(tier)
